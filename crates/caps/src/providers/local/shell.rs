//! `LocalShell`: real processes on this machine, supervised by [`super::process`].

use super::contain::Containment;
use super::process::{ProcessSpec, WorkingDir, supervise_live};
use super::shell_support::{check_dir, check_expected_program, resolve_program, with_arg0};
use crate::shell::{ExecOptions, ExecOutput, Script, Shell};
use crate::{CapsError, Result};

/// Real processes: each run in its own session and process group — and, with
/// [`LocalShell::contained`], its own containment unit (a cgroup or a subreaper) — stdin
/// from `/dev/null` unless given, exactly the environment in [`ExecOptions::env`], output
/// capped, whole tree killed on timeout or cancellation.
#[derive(Clone, Debug, Default)]
pub struct LocalShell {
    containment: Containment,
}

impl LocalShell {
    /// The local process world, runs held by their session and process group.
    pub fn new() -> Self {
        LocalShell::default()
    }

    /// The local process world, every run held by a unit of `containment` (and limited
    /// by [`ExecOptions::resources`] where it can).
    pub fn contained(containment: Containment) -> Self {
        LocalShell { containment }
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
        let spec = ProcessSpec {
            containment: self.containment.clone(),
            ..ProcessSpec::for_request(
                program,
                with_arg0(argv, options),
                WorkingDir::Path(options.cwd.clone()),
                options,
                &argv[0],
            )
        };
        supervise_live(spec, options.timeout, options.limits, options.live.clone()).await
    }

    async fn run(&self, script: &Script, options: &ExecOptions) -> Result<ExecOutput> {
        let argv = script.argv()?;
        self.exec(&argv, options).await
    }
}
