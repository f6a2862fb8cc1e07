//! `BoundedShell`: real processes whose working directory is confined to the root.
//!
//! **This confines the starting directory, not the process.** A program or shell script
//! can open any path the user can (`cat /etc/passwd`, `cd /`); a shell script cannot be
//! path-confined without an OS sandbox. Use the `sandbox` crate's providers for that.

use std::os::fd::OwnedFd;
use std::path::PathBuf;

use cap_std::fs::Dir;

use super::map_err;
use crate::providers::local::process::{ProcessSpec, WorkingDir, supervise_live};
use crate::providers::local::shell_support::{check_expected_program, resolve_program, with_arg0};
use crate::providers::paths::normalize_beneath;
use crate::shell::{ExecOptions, ExecOutput, Script, Shell};
use crate::{BoundedFs, Result};

/// Processes started in a directory beneath the root. `ExecOptions::cwd` is relative to
/// the root and resolved through the root handle; the child `fchdir`s to the opened
/// handle, so a directory swapped for a symlink after the check is never followed.
#[derive(Debug)]
pub struct BoundedShell {
    root: Dir,
    root_path: PathBuf,
}

impl BoundedShell {
    /// Processes confined (by working directory) to the same root as `fs`.
    pub fn for_fs(fs: &BoundedFs) -> Result<Self> {
        Ok(BoundedShell {
            root: fs.try_clone_root()?,
            root_path: fs.root_path().to_path_buf(),
        })
    }

    fn open_cwd(&self, options: &ExecOptions) -> Result<OwnedFd> {
        let rel = normalize_beneath(&options.cwd)?;
        let rel = if rel.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            rel
        };
        let dir = self
            .root
            .open_dir(&rel)
            .map_err(|e| map_err("open working directory", &options.cwd, e))?;
        Ok(dir.into_std_file().into())
    }
}

#[async_trait::async_trait]
impl Shell for BoundedShell {
    async fn exec(&self, argv: &[String], options: &ExecOptions) -> Result<ExecOutput> {
        options.validate_request(argv)?;
        let cwd = self.open_cwd(options)?;
        // A relative program path is resolved by the kernel against the confined cwd.
        let program = if argv[0].contains('/') {
            PathBuf::from(&argv[0])
        } else {
            resolve_program(&argv[0], &self.root_path, options.env.get("PATH"))?
        };
        if program.is_absolute() {
            check_expected_program(&program, options.expect_program)?;
        } else if options.expect_program.is_some() {
            return Err(crate::CapsError::invalid(
                "an approved program must be named by an absolute path",
            ));
        }
        let spec = ProcessSpec::for_request(
            program,
            with_arg0(argv, options),
            WorkingDir::Handle(cwd),
            options,
            &argv[0],
        );
        supervise_live(spec, options.timeout, options.limits, options.live.clone()).await
    }

    async fn run(&self, script: &Script, options: &ExecOptions) -> Result<ExecOutput> {
        let argv = script.argv()?;
        self.exec(&argv, options).await
    }
}
