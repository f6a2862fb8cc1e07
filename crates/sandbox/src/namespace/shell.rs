//! Running commands in a [`NamespaceSandbox`]: [`SandboxShell`] (one profile, optionally
//! watched) is the `caps::Shell`; each run is supervised, its write-watch report read, and
//! git's post-run checks done — also, shortly after, when the run is cancelled.

use std::path::PathBuf;
use std::sync::Arc;

use caps::process::{ProcessSpec, TerminalOwner, WorkingDir, supervise_live};
use caps::{CapsError, ExecOptions, ExecOutput, Script, Shell};

use super::sandbox::NamespaceSandbox;
use crate::{Profile, git};

impl NamespaceSandbox {
    /// A shell running commands in this sandbox with `profile`.
    pub fn shell(self: &Arc<Self>, profile: Profile) -> SandboxShell {
        SandboxShell {
            sandbox: Arc::clone(self),
            profile,
            watch_writes: false,
        }
    }

    /// A read-only shell that also reports, in [`ExecOutput::refused_writes`], the writes
    /// the kernel refused beneath the writable paths (see [`crate::watch`]). Approval
    /// mode runs commands with it first.
    pub fn watched_shell(self: &Arc<Self>) -> SandboxShell {
        SandboxShell {
            sandbox: Arc::clone(self),
            profile: Profile::ReadOnly,
            watch_writes: true,
        }
    }

    /// Run `argv` with `profile` (watched if `watch_writes`): supervised, then git's
    /// post-run checks and, when watched, the refused writes classified.
    async fn run_argv(
        &self,
        profile: Profile,
        watch_writes: bool,
        argv: &[String],
        arg0: Option<&str>,
        options: &ExecOptions,
    ) -> caps::Result<ExecOutput> {
        options.validate_request(argv)?;
        if !options.cwd.is_absolute() {
            return Err(CapsError::invalid(format!(
                "working directory must be absolute, got {}",
                options.cwd.display()
            )));
        }
        let (report_read, report_write) = if watch_writes {
            let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
                .map_err(|e| CapsError::from_io("pipe", "write watch", e.into()))?;
            (Some(r), Some(w))
        } else {
            (None, None)
        };
        // The command's status, reported by the sandbox's pid 1 before the sandbox is torn
        // down (see `caps::process::ProcessSpec::exit_report`).
        let (status_read, status_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| CapsError::from_io("pipe", "exit status", e.into()))?;
        let (broker, egress_fd) = self.egress_broker(argv, options)?.unzip();
        let launch = self.command_line(
            profile,
            &options.cwd,
            argv,
            arg0,
            report_write,
            Some(status_write),
            egress_fd,
            options,
        )?;
        let (program, prefix) = self.launcher();
        let mut full = vec![program.to_string_lossy().into_owned()];
        full.extend(prefix);
        full.extend(launch.args);
        let spec = ProcessSpec {
            keep_fds: launch.fds,
            containment: self.containment().clone(),
            born_in: self.born_in(),
            exit_report: Some(status_read),
            // The helper takes the terminal inside, after the sandbox's own session.
            terminal_owner: TerminalOwner::Inside,
            launches_command: true,
            // bubblewrap's `--die-with-parent`, and Warden's builder's.
            watches_its_parent: true,
            ..ProcessSpec::for_request(
                program.to_path_buf(),
                full.into_iter().map(Into::into).collect(),
                WorkingDir::Path(PathBuf::from("/")),
                options,
                &argv[0],
            )
        };
        let mut post_run = PostRun {
            guards: launch.git_guards,
            done: false,
        };
        let mut output =
            supervise_live(spec, options.timeout, options.limits, options.live.clone()).await?;
        if let Some(broker) = broker {
            crate::egress::gather(broker, &mut output).await;
        }
        // Every sandboxed process is gone now (the pid namespace died with bubblewrap), so
        // what the command planted in a repository cannot change under this check.
        for note in post_run.finish() {
            tracing::warn!("{note}");
            crate::say(&mut output, &note);
        }
        if let Some(report) = report_read {
            let report = crate::watch::read_report(report);
            if let Some(why) = &report.unavailable {
                tracing::debug!("write watch unavailable: {why}");
            }
            output.refused_writes =
                crate::classify_refused_writes(&output, report.refused_writes());
        }
        Ok(output)
    }
}

impl NamespaceSandbox {
    /// In `proxy` mode, the run's egress broker and the descriptor its helper gets;
    /// refused (nothing runs) when this sandbox has no way to decide connections.
    fn egress_broker(
        &self,
        argv: &[String],
        options: &ExecOptions,
    ) -> caps::Result<Option<(crate::egress::broker::Broker, std::os::fd::OwnedFd)>> {
        if self.policy().network != crate::Network::Proxy {
            return Ok(None);
        }
        let Some(egress) = self.egress() else {
            return Err(CapsError::denied(
                argv.first().map(String::as_str).unwrap_or_default(),
                "sandbox.network = \"proxy\" but this sandbox has no egress rules to decide connections with; nothing was run",
            ));
        };
        crate::egress::broker::Broker::start(
            egress.proxy(
                options.connection_rules.clone(),
                options.ask_connection.clone(),
            ),
            tokio::runtime::Handle::current(),
        )
        .map(Some)
        .map_err(|e| CapsError::from_io("start", "the run's egress broker", e))
    }
}

/// The repository checks of one run, done when it ended — or, if the run was cancelled
/// (its future dropped, which kills the tree), shortly after, once the sandbox's pid
/// namespace has had time to die with bubblewrap.
struct PostRun {
    guards: Vec<git::Guard>,
    done: bool,
}

impl PostRun {
    fn finish(&mut self) -> Vec<String> {
        self.done = true;
        let stamp = unix_millis();
        self.guards
            .iter()
            .flat_map(|g| g.undo_planted(stamp))
            .collect()
    }
}

impl Drop for PostRun {
    fn drop(&mut self) {
        if self.done || self.guards.is_empty() {
            return;
        }
        let guards = std::mem::take(&mut self.guards);
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            for note in guards.iter().flat_map(|g| g.undo_planted(unix_millis())) {
                tracing::warn!("{note}");
            }
        });
    }
}

fn unix_millis() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// A `caps::Shell` that runs everything in a [`NamespaceSandbox`] sandbox with one profile.
#[derive(Clone, Debug)]
pub struct SandboxShell {
    sandbox: Arc<NamespaceSandbox>,
    profile: Profile,
    watch_writes: bool,
}

impl SandboxShell {
    /// The profile it runs with.
    pub fn profile(&self) -> Profile {
        self.profile
    }
}

#[async_trait::async_trait]
impl Shell for SandboxShell {
    async fn exec(&self, argv: &[String], options: &ExecOptions) -> caps::Result<ExecOutput> {
        // argv[0] may be a path resolved on the host; inside, the same path exists (the
        // root is the host's, read-only). The helper executes it under `options.arg0`.
        let arg0 = options.arg0.as_deref();
        self.sandbox
            .run_argv(self.profile, self.watch_writes, argv, arg0, options)
            .await
    }

    async fn run(&self, script: &Script, options: &ExecOptions) -> caps::Result<ExecOutput> {
        self.sandbox
            .run_argv(
                self.profile,
                self.watch_writes,
                &script.argv()?,
                None,
                options,
            )
            .await
    }

    // `caps::Shell` answers in text (its providers live in other crates): the diagnosis.
    fn exec_allowlist_support(&self) -> Result<(), String> {
        self.sandbox
            .exec_allowlist_support()
            .map_err(|e| e.to_string())
    }
}
