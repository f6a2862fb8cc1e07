//! Request validation, program lookup and process-spec building shared by the local and
//! bounded shells.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::process::{ProcessSpec, WorkingDir};
use crate::shell::{ExecOptions, Script};
use crate::{CapsError, Result};

/// `[shell, "-c", source]`, after checking the shell is named absolutely.
pub(crate) fn script_argv(script: &Script) -> Result<Vec<String>> {
    if !script.shell.is_absolute() {
        return Err(CapsError::invalid(format!(
            "the shell must be an absolute path, got {}",
            script.shell.display()
        )));
    }
    let shell = script
        .shell
        .to_str()
        .ok_or_else(|| CapsError::invalid("the shell path is not UTF-8"))?;
    Ok(vec![
        shell.to_owned(),
        "-c".to_owned(),
        script.source.clone(),
    ])
}

/// Checks every provider applies before spawning anything.
pub(crate) fn validate_request(argv: &[String], options: &ExecOptions) -> Result<()> {
    let Some(program) = argv.first() else {
        return Err(CapsError::invalid("argv must not be empty"));
    };
    if program.is_empty() {
        return Err(CapsError::invalid("the program name must not be empty"));
    }
    if let Some(i) = argv.iter().position(|a| a.contains('\0')) {
        return Err(CapsError::invalid(format!("argv[{i}] contains a NUL byte")));
    }
    for (key, value) in &options.env {
        if key.is_empty() || key.contains('=') || key.contains('\0') {
            return Err(CapsError::invalid(format!(
                "invalid environment variable name {key:?}"
            )));
        }
        if value.contains('\0') {
            return Err(CapsError::invalid(format!(
                "environment variable {key} contains a NUL byte"
            )));
        }
    }
    if options.timeout.is_zero() {
        return Err(CapsError::invalid("timeout must be greater than zero"));
    }
    Ok(())
}

/// The argv handed to the OS: `argv`, with `argv[0]` replaced by `options.arg0` if set.
pub(crate) fn with_arg0(argv: &[String], options: &ExecOptions) -> Vec<OsString> {
    let mut out: Vec<OsString> = argv.iter().map(OsString::from).collect();
    if let (Some(arg0), Some(first)) = (&options.arg0, out.first_mut()) {
        *first = OsString::from(arg0);
    }
    out
}

pub(crate) fn build_spec(
    program: PathBuf,
    argv: Vec<OsString>,
    cwd: WorkingDir,
    options: &ExecOptions,
    display_name: &str,
) -> ProcessSpec {
    ProcessSpec {
        program,
        argv,
        env: options
            .env
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect(),
        cwd,
        stdin: options.stdin.clone(),
        keep_fds: Vec::new(),
        display_name: display_name.to_owned(),
    }
}

pub(crate) fn check_dir(cwd: &Path) -> Result<()> {
    match std::fs::metadata(cwd) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(CapsError::invalid(format!(
            "working directory {} is not a directory",
            cwd.display()
        ))),
        Err(e) => Err(CapsError::from_io("open working directory", cwd, e)),
    }
}

/// Find the file `program` names: a name with a `/` is taken relative to `cwd`; a bare
/// name is searched in the absolute entries of `path_var` (relative and empty entries are
/// ignored: they would make the lookup depend on the working directory).
pub fn resolve_program(program: &str, cwd: &Path, path_var: Option<&String>) -> Result<PathBuf> {
    if program.contains('/') {
        return Ok(cwd.join(program));
    }
    let mut not_executable = None;
    for dir in path_var.map(String::as_str).unwrap_or("").split(':') {
        let dir = Path::new(dir);
        if !dir.is_absolute() {
            continue;
        }
        let candidate = dir.join(program);
        match std::fs::metadata(&candidate) {
            Ok(m) if m.is_file() => {
                if rustix::fs::access(&candidate, rustix::fs::Access::EXEC_OK).is_ok() {
                    return Ok(candidate);
                }
                not_executable.get_or_insert(candidate);
            }
            _ => continue,
        }
    }
    match not_executable {
        Some(path) => Err(CapsError::NotExecutable {
            program: program.to_owned(),
            reason: format!("{} is not executable", path.display()),
        }),
        None => Err(CapsError::ProgramNotFound {
            program: program.to_owned(),
        }),
    }
}
