//! The [`caps::Shell`] implementation: [`ContainerShell`] connects to a checked container
//! and runs each command as one supervised engine client, killing the in-container tree
//! when the run does not end cleanly; the request checks and run tokens it needs.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use caps::process::supervise;
use caps::{CapsError, ExecOptions, ExecOutput, ExitStatus, Script, Shell};

use super::check::check_container_name;
use super::command::Target;
use super::engine::{ContainerConfig, engine_env, find_engine};
use super::kill::KillGuard;
use crate::Unavailable;

/// A `caps::Shell` that runs commands inside the container.
#[derive(Debug)]
pub struct ContainerShell {
    target: Arc<Target>,
}

impl ContainerShell {
    /// Connect to the configured container; fails closed with a diagnosis when the engine
    /// is missing or untrusted, the container does not exist or is not running, or the
    /// container lacks what the backend needs (`/bin/sh`, `env`, `/proc`).
    ///
    /// This runs the engine (`inspect`, then one probe exec) and blocks until it answers,
    /// up to 20 seconds per step; from async code, call it on a blocking thread.
    pub fn new(config: ContainerConfig) -> Result<Self, Unavailable> {
        check_container_name(&config.container)?;
        let engine = find_engine(&config.engine, &config.engine_dirs)?;
        let engine_env = engine_env(&config.engine_dirs);
        let mut target = Target {
            engine,
            container: config.container,
            env_program: String::new(),
            engine_env,
        };
        target.check_running(&config.engine)?;
        target.env_program = target.probe_container(&config.engine)?;
        Ok(ContainerShell {
            target: Arc::new(target),
        })
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

    /// Run `argv` inside the container, killing the in-container tree if the run does not
    /// end cleanly (timeout, cancellation, engine client killed).
    async fn run_argv(&self, argv: &[String], options: &ExecOptions) -> caps::Result<ExecOutput> {
        validate(argv, options)?;
        let token = run_token();
        let spec = self.target.exec_spec(argv, options, &token);
        let mut guard = KillGuard {
            target: Arc::clone(&self.target),
            token,
            started: Instant::now(),
            armed: true,
        };
        let result = supervise(spec, options.timeout, options.limits).await;
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
        result
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
