//! Program lookup, working-directory checks and argv[0] handling shared by the local and
//! bounded shells.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::shell::ExecOptions;
use crate::{CapsError, FileId, Result};

/// The argv handed to the OS: `argv`, with `argv[0]` replaced by `options.arg0` if set.
pub(crate) fn with_arg0(argv: &[String], options: &ExecOptions) -> Vec<OsString> {
    let mut out: Vec<OsString> = argv.iter().map(OsString::from).collect();
    if let (Some(arg0), Some(first)) = (&options.arg0, out.first_mut()) {
        *first = OsString::from(arg0);
    }
    out
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

/// Refuse to start `program` when it is no longer the file that was approved
/// (`ExecOptions::expect_program`): replaced, renamed over, or swapped for a symlink.
/// Checked right before the process starts; see the threat model for the window between
/// this check and `execve`.
pub(crate) fn check_expected_program(program: &Path, expected: Option<FileId>) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Some(expected) = expected else {
        return Ok(());
    };
    let now = std::fs::symlink_metadata(program)
        .map(|m| FileId {
            dev: m.dev(),
            ino: m.ino(),
        })
        .map_err(|e| CapsError::from_io("check the approved program", program, e))?;
    if now != expected {
        return Err(CapsError::denied(
            program,
            format!(
                "the program is no longer the file that was approved ({expected}, now {now}); nothing was run"
            ),
        ));
    }
    Ok(())
}
