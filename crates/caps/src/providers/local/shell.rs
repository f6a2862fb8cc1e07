//! `LocalShell`: real processes on this machine, supervised by [`super::process`].

use super::process::{ProcessSpec, WorkingDir, supervise};
use super::shell_support::{check_dir, check_expected_program, resolve_program, with_arg0};
use crate::shell::{ExecOptions, ExecOutput, Script, Shell};
use crate::{CapsError, Result};

/// Real processes: each run in its own session and process group, stdin from
/// `/dev/null` unless given, exactly the environment in [`ExecOptions::env`], output
/// capped, whole tree killed on timeout or cancellation.
#[derive(Clone, Debug, Default)]
pub struct LocalShell {
    _private: (),
}

impl LocalShell {
    /// The local process world.
    pub fn new() -> Self {
        LocalShell { _private: () }
    }
}

#[async_trait::async_trait]
impl Shell for LocalShell {
    async fn exec(&self, argv: &[String], options: &ExecOptions) -> Result<ExecOutput> {
        options.validate_request(argv)?;
        if !options.cwd.is_absolute() {
            return Err(CapsError::invalid(format!(
                "working directory must be absolute, got {}",
                options.cwd.display()
            )));
        }
        check_dir(&options.cwd)?;
        let program = resolve_program(&argv[0], &options.cwd, options.env.get("PATH"))?;
        check_expected_program(&program, options.expect_program)?;
        let spec = ProcessSpec::for_request(
            program,
            with_arg0(argv, options),
            WorkingDir::Path(options.cwd.clone()),
            options,
            &argv[0],
        );
        supervise(spec, options.timeout, options.limits).await
    }

    async fn run(&self, script: &Script, options: &ExecOptions) -> Result<ExecOutput> {
        let argv = script.argv()?;
        self.exec(&argv, options).await
    }
}
