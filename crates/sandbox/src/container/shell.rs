//! The [`caps::Shell`] implementation: [`Container`] connects to a checked container once
//! (running, keeping the sandbox's promises, able to host the wrapper, and whether it can
//! make the read-only view); each [`ContainerShell`] runs commands in it with one
//! profile, as one supervised engine client, killing the in-container tree when a run
//! does not end cleanly. Also the request checks and run tokens it needs.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use caps::process::supervise_live;
use caps::{CapsError, ExecOptions, ExecOutput, ExitStatus, Script, Shell};

use super::check::check_container_name;
use super::command::Target;
use super::egress::ContainerEgress;
use super::engine::{ContainerConfig, engine_env, find_engine};
use super::kill::KillGuard;
use super::readonly::{ReadOnlyTools, read_only_view};
use super::view::{Inspected, check_promises};
use crate::{Profile, SandboxError, SandboxPolicy, Unavailable};

/// A running container, checked once, that [`ContainerShell`]s run commands in.
#[derive(Debug)]
pub struct Container {
    target: Arc<Target>,
    inspected: Arc<Inspected>,
    /// `sandbox.network = "proxy"`: how runs reach out (`None` until
    /// [`Container::with_egress`]: such runs are then refused).
    proxy: Option<Option<Arc<ContainerEgress>>>,
    /// The programs that make the read-only view, or why this container cannot.
    read_only: Result<ReadOnlyTools, SandboxError>,
}

impl Container {
    /// Connect to the configured container for `policy`; fails closed with a diagnosis
    /// when the engine is missing or untrusted, the container does not exist or is not
    /// running, it does not see the authorized paths at their own paths or shows
    /// commands more than the sandbox allows (see `view.rs`), or it lacks what the
    /// backend needs (`/bin/sh`, `env`, `/proc`). Whether it can run commands read-only
    /// is found out here too, by building the view once ([`Container::read_only`]).
    ///
    /// This runs the engine (`inspect`, then up to two execs) and blocks until it
    /// answers, up to 20 seconds per step; from async code, call it on a blocking thread.
    pub fn connect(config: ContainerConfig, policy: &SandboxPolicy) -> Result<Self, Unavailable> {
        check_container_name(&config.container)?;
        let engine = find_engine(&config.engine, &config.engine_dirs)?;
        let engine_env = engine_env(&config.engine_dirs);
        let mut target = Target {
            engine,
            container: config.container,
            env_program: String::new(),
            engine_env,
        };
        let inspected = target.inspect(&config.engine)?;
        check_promises(&inspected, policy, &config.engine, &target.container)?;
        let (env_program, probe) = target.probe_container(&config.engine)?;
        target.env_program = env_program;
        let read_only = read_only_view(&target, &probe, &inspected, &config.engine, policy);
        Ok(Container {
            target: Arc::new(target),
            inspected: Arc::new(inspected),
            proxy: (policy.network == crate::Network::Proxy).then_some(None),
            read_only,
        })
    }

    /// In `proxy` mode, what decides runs' connections and makes their listeners in the
    /// container (`egress.rs`); without it every run in that mode is refused.
    pub fn with_egress(mut self, egress: ContainerEgress) -> Self {
        if let Some(slot) = self.proxy.as_mut() {
            *slot = Some(Arc::new(egress));
        }
        self
    }

    /// `Ok` when commands can run read-only here (the `readonly` permission mode and
    /// approval mode's first run), else why not.
    pub fn read_only(&self) -> Result<(), &SandboxError> {
        self.read_only.as_ref().map(|_| ())
    }

    /// A shell running commands with `profile`: [`Profile::Writable`] with the
    /// container's own mounts, [`Profile::ReadOnly`] in the read-only view. Where this
    /// container has no read-only view, the read-only shell refuses every command with
    /// [`Container::read_only`]'s reason: it never falls back to running writable.
    pub fn shell(&self, profile: Profile) -> ContainerShell {
        let mode = match (profile, &self.read_only) {
            (Profile::Writable, _) => Mode::Writable,
            (Profile::ReadOnly, Ok(tools)) => Mode::ReadOnly(tools.clone()),
            (Profile::ReadOnly, Err(why)) => Mode::Refused(why.to_string()),
        };
        ContainerShell {
            target: Arc::clone(&self.target),
            inspected: Arc::clone(&self.inspected),
            proxy: self.proxy.clone(),
            mode,
        }
    }

    /// The engine binary in use.
    pub fn engine_path(&self) -> &Path {
        &self.target.engine
    }

    /// The container commands run in.
    pub fn container(&self) -> &str {
        &self.target.container
    }

    /// The `env` program inside the container that sets each command's environment.
    pub fn env_program(&self) -> &str {
        &self.target.env_program
    }
}

/// How a [`ContainerShell`] runs commands.
#[derive(Clone, Debug)]
enum Mode {
    /// With the container's own mounts.
    Writable,
    /// In the read-only view these programs make.
    ReadOnly(ReadOnlyTools),
    /// Not at all: the container has no read-only view, for this reason.
    Refused(String),
}

/// A `caps::Shell` that runs commands inside the container, with one profile.
#[derive(Debug)]
pub struct ContainerShell {
    target: Arc<Target>,
    inspected: Arc<Inspected>,
    proxy: Option<Option<Arc<ContainerEgress>>>,
    mode: Mode,
}

impl ContainerShell {
    /// The profile commands run with.
    pub fn profile(&self) -> Profile {
        match self.mode {
            Mode::Writable => Profile::Writable,
            Mode::ReadOnly(_) | Mode::Refused(_) => Profile::ReadOnly,
        }
    }

    /// Run `argv` inside the container, killing the in-container tree if the run does not
    /// end cleanly (timeout, cancellation, engine client killed).
    async fn run_argv(&self, argv: &[String], options: &ExecOptions) -> caps::Result<ExecOutput> {
        let read_only = match &self.mode {
            Mode::Writable => None,
            Mode::ReadOnly(tools) => Some(tools),
            Mode::Refused(why) => {
                return Err(CapsError::Unsupported {
                    what: format!("running a command read-only in this container: {why}"),
                });
            }
        };
        validate(argv, options)?;
        self.check_cwd(&options.cwd)?;
        let mut options = std::borrow::Cow::Borrowed(options);
        let broker = match &self.proxy {
            None => None,
            Some(None) => {
                return Err(CapsError::denied(
                    &argv[0],
                    "sandbox.network = \"proxy\" but this container has no egress rules to decide connections with; nothing was run",
                ));
            }
            Some(Some(egress)) => Some(egress.start(&self.target, argv, options.to_mut()).await?),
        };
        let options = options.as_ref();
        let token = run_token();
        let mut spec = self.target.exec_spec(argv, options, &token, read_only);
        // A signal for the run goes into the container, to the command and what it
        // started: signalling the engine's client would reach none of them.
        spec.signal_route = Some(super::kill::signal_route(
            Arc::clone(&self.target),
            token.clone(),
        ));
        let mut guard = KillGuard {
            target: Arc::clone(&self.target),
            token,
            started: Instant::now(),
            armed: true,
        };
        let result =
            supervise_live(spec, options.timeout, options.limits, options.live.clone()).await;
        // A clean exit means the wrapper ran to its end and swept its own session. Anything
        // else (timeout, the client killed by a signal, a supervision error) may have left
        // the command running inside: the engine does not stop it with its client.
        let clean = match &result {
            Ok(out) => !out.timed_out && matches!(out.status, ExitStatus::Code(_)),
            // The engine client never started: nothing can be running.
            Err(
                CapsError::ProgramNotFound { .. }
                | CapsError::NotExecutable { .. }
                | CapsError::InvalidInput { .. },
            ) => true,
            Err(_) => false,
        };
        if !clean {
            guard.kill_now().await;
        }
        guard.armed = false;
        let mut out = result?;
        if let Some(broker) = broker {
            crate::egress::gather(broker, &mut out).await;
        }
        if read_only.is_some() {
            // No watch here: a failed run that printed the kernel's EROFS message was
            // refused a write (paths unknown), which approval mode may offer to retry.
            out.refused_writes = crate::classify_refused_writes(&out, None);
        }
        Ok(out)
    }

    /// Commands run at the host path of their working directory, which must therefore be
    /// a host directory the container sees at that same path — not the runtime's
    /// "chdir: no such file or directory", or a different directory of the same name.
    fn check_cwd(&self, cwd: &Path) -> caps::Result<()> {
        if self.inspected.same_path(cwd) {
            return Ok(());
        }
        let mapped: Vec<String> = self
            .inspected
            .mounts
            .iter()
            .filter(|m| m.host.as_ref() == Some(&m.destination))
            .map(|m| m.destination.display().to_string())
            .collect();
        Err(CapsError::invalid(format!(
            "working directory {} is not visible at the same path in container {} (it sees              the host's {} there); run from an authorized path, or mount the directory              into the container at its own path (-v {0}:{0})",
            cwd.display(),
            self.target.container,
            if mapped.is_empty() {
                "nothing".to_owned()
            } else {
                mapped.join(", ")
            }
        )))
    }
}

#[async_trait::async_trait]
impl Shell for ContainerShell {
    async fn exec(&self, argv: &[String], options: &ExecOptions) -> caps::Result<ExecOutput> {
        // `options.arg0` is not supported: the engine executes `argv[0]` as given.
        self.run_argv(argv, options).await
    }

    async fn run(&self, script: &Script, options: &ExecOptions) -> caps::Result<ExecOutput> {
        self.run_argv(&script.argv()?, options).await
    }
}

/// Checks before anything is spawned: the shared request checks, plus what the
/// container's `env` and `--workdir` need.
fn validate(argv: &[String], options: &ExecOptions) -> caps::Result<()> {
    options.validate_request(argv)?;
    let program = &argv[0];
    // `env` would take `NAME=VALUE` as one more variable, not as the program.
    if program.contains('=') {
        return Err(CapsError::invalid(format!(
            "the program name {program:?} contains '=', which the container backend cannot run"
        )));
    }
    if !options.cwd.is_absolute() {
        return Err(CapsError::invalid(format!(
            "working directory must be absolute, got {}",
            options.cwd.display()
        )));
    }
    // The contract: a bare name is looked up in `env["PATH"]`. Without one, `env` inside
    // would fall back to the C library's default path instead.
    if !program.contains('/') && !options.env.contains_key("PATH") {
        return Err(CapsError::ProgramNotFound {
            program: program.clone(),
        });
    }
    Ok(())
}

/// A fresh token naming one run. It only has to be unique among runs in the container
/// (not secret): two hashes keyed by the standard library's per-process random seed,
/// over the pid, the time and a counter.
fn run_token() -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut token = String::with_capacity(32);
    for salt in 0..2u8 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u128(now);
        h.write_u64(n);
        h.write_u8(salt);
        token.push_str(&format!("{:016x}", h.finish()));
    }
    token
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn tokens_differ() {
        let a = run_token();
        let b = run_token();
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
    }

    #[test]
    fn program_names_env_would_misread_are_refused() {
        let opts = ExecOptions::new("/", Duration::from_secs(1)).with_env("PATH", "/bin");
        assert!(validate(&["A=B".into()], &opts).is_err());
        assert!(validate(&["true".into()], &opts).is_ok());
        let no_path = ExecOptions::new("/", Duration::from_secs(1));
        assert!(matches!(
            validate(&["true".into()], &no_path),
            Err(CapsError::ProgramNotFound { .. })
        ));
        assert!(validate(&["/bin/true".into()], &no_path).is_ok());
    }
}
