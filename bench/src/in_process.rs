//! The runner on the gateway host in this process, `/bin/true` allowlisted for agent
//! `bench`: the Warden side of `exec-gateway` and the baseline of the MCP rows. A leaf
//! module, so the suites and the MCP rows both use it without depending on each other.

use anyhow::bail;
use caps::LocalShell;

/// The runner on the gateway host, in this process, with `/bin/true` allowlisted for
/// agent `bench` (the Warden side of `exec-gateway`, and the baseline of `mcp-exec`).
pub struct InProcess {
    home: std::path::PathBuf,
    runner: runner::Runner,
    executor: runner::Executor,
    cancel: tokio_util::sync::CancellationToken,
}

impl InProcess {
    /// With each run held by `containment` (`None`: its process group and session only).
    pub fn new(containment: Option<caps::process::Containment>) -> anyhow::Result<InProcess> {
        InProcess::recorded(containment, None)
    }

    /// [`InProcess::new`], every request put on a record in its home kept with
    /// `settings` (none: no record).
    pub fn recorded(
        containment: Option<caps::process::Containment>,
        settings: Option<audit::Settings>,
    ) -> anyhow::Result<InProcess> {
        let home = crate::fixtures::true_allowed_home("gw")?;
        let fs: std::sync::Arc<caps::LocalFs> = std::sync::Arc::new(caps::LocalFs::new("/")?);
        let store = crate::fixtures::store(fs.clone(), &home);
        let fs_for_audit: std::sync::Arc<dyn caps::Fs> = fs.clone();
        let clock: std::sync::Arc<dyn approvals::Clock> =
            std::sync::Arc::new(approvals::SystemClock);
        let runner = runner::Runner::new(
            runner::HostContext::builder(
                fs,
                store,
                policy::Config::parse(
                    "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\n",
                    std::path::Path::new("config.toml"),
                )?,
            )
            .trusted_path(policy::TrustedPath::parse("/usr/bin:/bin"))
            .default_cwd("/")
            .clock(clock)
            .audit(match settings {
                Some(settings) => std::sync::Arc::new(audit::AuditLog::new(
                    fs_for_audit,
                    home.join("audit"),
                    "bench",
                    settings,
                )),
                None => std::sync::Arc::new(audit::NoAudit),
            })
            .build(),
        );
        let shell = match containment {
            Some(c) => LocalShell::contained(c),
            None => LocalShell::new(),
        };
        let executor = runner::Executor::Plain {
            shell: std::sync::Arc::new(shell),
            host: runner::RunHost::Gateway,
        };
        Ok(InProcess {
            home,
            runner,
            executor,
            cancel: tokio_util::sync::CancellationToken::new(),
        })
    }

    /// One allowlisted `/bin/true` through the whole runner.
    pub async fn exec_true(&self) -> anyhow::Result<()> {
        let request = runner::ExecRequest::new(
            "bench",
            "bench",
            runner::Command::Argv(vec!["/bin/true".into()]),
        );
        let report = self
            .runner
            .run(request, &self.executor, &runner::NoEvents, &self.cancel)
            .await;
        if !matches!(report.outcome, runner::Outcome::Finished { .. }) {
            bail!("the runner did not run /bin/true: {:?}", report.outcome);
        }
        Ok(())
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.home);
    }
}
