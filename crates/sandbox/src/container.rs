//! The container backend: commands run inside a long-running container through a
//! Docker-compatible CLI (`podman` or `docker`), selected by config.
//!
//! Every run is one supervised engine client,
//!
//! ```text
//! ENGINE --log-level=error exec [-i] --workdir CWD CONTAINER \
//!     /bin/sh -c WRAPPER warden-run:TOKEN: ENV -i -- K=V... ARGV...
//! ```
//!
//! going through [`caps::process::supervise`], so Warden's timeout, output cap, tail and
//! concurrent stdout/stderr reading apply exactly as for local runs. The argv is never
//! joined into a string: it travels as separate arguments down to the container's `env`,
//! which executes it.
//!
//! Why the in-container wrapper (a constant POSIX `sh` script, never built from input):
//!
//! - **Exact environment.** `ENGINE exec --env` only adds to the container's configured
//!   environment (and the engine adds `PATH`, `HOME`, `TERM`, `container`...), and a shell
//!   exports variables of its own (`PWD`, `SHLVL`). `env -i -- K=V... ARGV` gives the
//!   command exactly [`ExecOptions::env`]. The values reach `env` as arguments of the
//!   wrapper, not through the wrapper's own environment, so nothing the caller sets
//!   (`IFS`, `SHELLOPTS`, `PATH`...) can change how the wrapper itself behaves.
//! - **A tree we can find and kill.** Killing the engine client does not stop the exec'd
//!   process: the engine keeps running it. The runtime starts every exec'd process as a
//!   session leader; the wrapper stays alive as that leader, and its command line carries
//!   a random per-run token. On timeout or cancellation a second exec finds the process
//!   whose command line holds the token, then stops and kills every process in its
//!   session and every descendant (`/proc` walk, repeated until nothing new appears, so a
//!   forking tree cannot outrun it). When the command exits normally, the wrapper does the
//!   same sweep of its own session before exiting, so background leftovers die with the
//!   run, as they do locally.
//!
//! The container must therefore provide `/bin/sh`, an `env` program and `/proc`;
//! [`ContainerShell::new`] checks all three (and that the shell can read the token back
//! from `/proc`) and fails closed with a diagnosis otherwise. Like process-group killing
//! on the host, a descendant that calls `setsid()` and whose parent has exited escapes
//! the sweep.
//!
//! The engine client itself gets an environment of only `PATH` (the trusted engine
//! directories): nothing from Warden's environment, and nothing from the command's
//! environment, which could otherwise steer the engine on the host (`LD_PRELOAD`,
//! `DOCKER_HOST`, `CONTAINERS_CONF`...). That suits rootful Podman, the Docker daemon's
//! default socket, and rootless Podman with its default directories (it finds the home
//! directory and `/run/user/UID` by itself); an engine that needs `HOME`,
//! `XDG_RUNTIME_DIR` or `DOCKER_HOST` set must be configured through its system
//! configuration files. The command's environment values are arguments of the engine
//! client (as they would be with `--env K=V`), so on a shared host other local users can
//! read them in `/proc/PID/cmdline` while the run lasts.
//!
//! What a command may write is decided by the container's own mounts: this backend does
//! not distinguish a read-only from a writable profile.
//!
//! Known differences from the local shell: [`ExecOptions::arg0`] is not supported (the
//! engine cannot set `argv[0]` apart from the program), a program that cannot be found
//! or executed inside the container is reported as exit code 127/126 by `env` rather than
//! as a typed error, and the engine's own failures surface as its exit code (125 for
//! Podman and Docker) with its message on stderr.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use caps::process::{ProcessSpec, WorkingDir, supervise};
use caps::{CapsError, ExecOptions, ExecOutput, ExitStatus, OutputLimits, Script, Shell, Stdin};

use crate::Unavailable;

/// Where the engine CLI may come from when the configuration names none: system
/// directories only, never a workspace or `PATH`.
pub const TRUSTED_ENGINE_DIRS: &[&str] = crate::trusted::TRUSTED_SYSTEM_DIRS;

/// The engines this backend speaks to. Both share the `exec`/`inspect` command line it
/// uses; restricting the name keeps a config typo from running an arbitrary system
/// program (`sh exec ...`).
pub const SUPPORTED_ENGINES: &[&str] = &["podman", "docker"];

/// The shell inside the container that runs the wrapper, the probe and the killer.
const CONTAINER_SHELL: &str = "/bin/sh";

/// Prefix of the marker argument (`$0`) of the wrapper; the killer searches
/// `/proc/*/cmdline` for `warden-run:TOKEN:`.
const RUN_MARKER_PREFIX: &str = "warden-run:";

/// How long an engine query (inspect, version, probe) may take before the container is
/// declared unavailable: generous for a busy engine, bounded so a wedged daemon cannot
/// hang Warden's startup.
const ENGINE_QUERY_TIMEOUT: Duration = Duration::from_secs(20);

/// How long one in-container kill may take.
const KILL_TIMEOUT: Duration = Duration::from_secs(15);

/// A run cancelled this soon after it started may still be on its way into the container
/// (the engine starts the exec after its client is gone), so the kill is repeated once
/// after [`KILL_RETRY_DELAY`].
const STARTUP_WINDOW: Duration = Duration::from_secs(2);

/// Pause before the second kill of a young run.
const KILL_RETRY_DELAY: Duration = Duration::from_millis(500);

/// `warden_sweep ROOT SPARE`: stop, then kill, process `ROOT`, every process in the
/// session it leads, and every descendant of any of them, sparing pid `SPARE` (the
/// wrapper sweeping its own session spares itself). Stopping first means a process found
/// cannot fork behind our back; the scan repeats until it finds nothing new. Only shell
/// builtins are used (`read`, `kill`, parameter expansion), so it works in any POSIX
/// shell and costs no extra processes. `/proc/PID/stat` is parsed after the last `)`
/// (the command name may contain spaces and parentheses): state, ppid, pgrp, session.
const SWEEP_FUNCTION: &str = r#"warden_sweep() {
  ws_root=$1 ws_spare=$2 ws_tree=" $1 " ws_found=' ' ws_more=1
  if [ "$ws_root" != "$ws_spare" ]; then
    kill -STOP "$ws_root" 2>/dev/null
    ws_found=" $ws_root "
  fi
  while [ "$ws_more" = 1 ]; do
    ws_more=0
    for ws_f in /proc/[0-9]*/stat; do
      ws_p=${ws_f#/proc/}
      ws_p=${ws_p%/stat}
      case "$ws_tree" in *" $ws_p "*) continue ;; esac
      [ "$ws_p" = "$ws_spare" ] && continue
      { IFS= read -r ws_l < "$ws_f"; } 2>/dev/null || continue
      set -- ${ws_l##*\)}
      case "$ws_tree" in *" $2 "*) ws_child=1 ;; *) ws_child=0 ;; esac
      if [ "$4" = "$ws_root" ] || [ "$ws_child" = 1 ]; then
        kill -STOP "$ws_p" 2>/dev/null
        ws_tree="$ws_tree$ws_p "
        ws_found="$ws_found$ws_p "
        ws_more=1
      fi
    done
  done
  [ "$ws_found" = ' ' ] || kill -KILL $ws_found 2>/dev/null
}
"#;

/// Runs `"$@"` (`ENV -i -- K=V... ARGV...`), then sweeps its own session so nothing the
/// command left behind outlives the run, and exits with the command's status.
const WRAPPER_BODY: &str = r#""$@"
warden_status=$?
warden_sweep $$ $$
exit "$warden_status"
"#;

/// `$1` is the token: find every process whose command line holds `warden-run:TOKEN:`
/// and sweep its session. Reading `/proc/PID/cmdline` with `read` works because shells
/// drop the NUL separators (the probe verifies this per container). The killer's own
/// command line holds the token but never the full marker, and it skips itself anyway.
const KILLER_BODY: &str = r#"warden_hits=
for wk_d in /proc/[0-9]*; do
  wk_p=${wk_d#/proc/}
  [ "$wk_p" = "$$" ] && continue
  { while IFS= read -r wk_l || [ -n "$wk_l" ]; do
      case "$wk_l" in *"warden-run:$1:"*) warden_hits="$warden_hits $wk_p"; break ;; esac
    done < "$wk_d/cmdline"; } 2>/dev/null
done
for wk_p in $warden_hits; do warden_sweep "$wk_p" "$$"; done
echo "warden-killed:$warden_hits"
"#;

/// Checks what the wrapper and the killer rely on, and prints the `env` program to use.
/// Exit 3: no `env`; exit 4: `/proc` cannot be read the way the killer reads it.
const PROBE_SCRIPT: &str = r#"warden_env=$(command -v env 2>/dev/null) || warden_env=
case "$warden_env" in
  /*) ;;
  *) warden_env=
     for c in /usr/bin/env /bin/env; do
       if [ -x "$c" ]; then warden_env=$c; break; fi
     done ;;
esac
if [ -z "$warden_env" ]; then
  echo "warden-probe: no env program (looked on PATH, /usr/bin/env, /bin/env)" >&2
  exit 3
fi
warden_seen=0
{ while IFS= read -r l || [ -n "$l" ]; do
    case "$l" in *warden-run:probe:*) warden_seen=1 ;; esac
  done < /proc/$$/cmdline; } 2>/dev/null
if [ "$warden_seen" != 1 ] || ! { IFS= read -r l < /proc/$$/stat; } 2>/dev/null; then
  echo "warden-probe: /proc is not mounted or this shell cannot read /proc/PID/cmdline" >&2
  exit 4
fi
printf 'warden-probe-ok %s\n' "$warden_env"
"#;

/// Which engine and container to use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerConfig {
    /// The engine CLI name (`podman` or `docker`).
    pub engine: String,
    /// The container to exec into (name or id).
    pub container: String,
    /// Trusted directories the engine binary is looked up in.
    pub engine_dirs: Vec<PathBuf>,
}

/// What every engine invocation needs; shared with the kill guards of running commands,
/// which may outlive the borrow of the shell.
#[derive(Debug)]
struct Target {
    /// The engine binary (a checked, canonical path).
    engine: PathBuf,
    /// The container name or id (checked: cannot be mistaken for an option).
    container: String,
    /// The absolute path of `env` inside the container.
    env_program: String,
    /// The engine client's complete environment.
    engine_env: Vec<(OsString, OsString)>,
}

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

/// Find and check the engine, and report its version (`podman version 4.3.1`) for
/// `warden doctor`. Fails with the same diagnosis [`ContainerShell::new`] would give for
/// the engine.
pub fn probe_engine(config: &ContainerConfig) -> Result<String, Unavailable> {
    let engine = find_engine(&config.engine, &config.engine_dirs)?;
    let spec = engine_spec(
        &engine,
        engine_env(&config.engine_dirs),
        vec!["--version".into()],
    );
    let out = run_blocking(spec, ENGINE_QUERY_TIMEOUT)
        .map_err(|e| Unavailable(format!("could not run {} --version: {e}", engine.display())))?;
    let version = out.stdout.lines().next().unwrap_or("").trim().to_owned();
    if !out.status.success() || version.is_empty() {
        return Err(Unavailable(format!(
            "{} --version failed ({}): {}",
            engine.display(),
            describe_status(&out),
            first_line(&out.stderr)
        )));
    }
    Ok(version)
}

/// Find a trustworthy engine binary: `engine` must be a supported name, and the file in
/// the first of `dirs` that has it must be a regular executable file that, after
/// resolving symlinks, is owned by root and not writable by group or others, in a
/// directory with the same properties. Returns the canonical path.
pub fn find_engine(engine: &str, dirs: &[PathBuf]) -> Result<PathBuf, Unavailable> {
    if !SUPPORTED_ENGINES.contains(&engine) {
        return Err(Unavailable(format!(
            "unsupported container engine {engine:?}: expected one of {}",
            SUPPORTED_ENGINES.join(", ")
        )));
    }
    let problems = match crate::trusted::system_binary(engine, dirs) {
        Ok(path) => return Ok(path),
        Err(problems) => problems,
    };
    let searched: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    Err(Unavailable(if problems.is_empty() {
        format!(
            "the container engine {engine} was not found in the trusted directories [{}] — \
             install it (Debian: apt-get install {}) or add its system directory to the \
             trusted engine directories",
            searched.join(", "),
            if engine == "docker" {
                "docker.io"
            } else {
                engine
            },
        )
    } else {
        format!(
            "the container engine {engine} is not trustworthy: {}",
            problems.join("; ")
        )
    }))
}

/// Container names and ids as Docker and Podman accept them. Anything else is refused
/// before it reaches a command line, where a leading `-` would be read as an option.
fn check_container_name(name: &str) -> Result<(), Unavailable> {
    if name.is_empty() {
        return Err(Unavailable(
            "no container is configured — set sandbox.container.name to a running container".into(),
        ));
    }
    let mut chars = name.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if valid {
        Ok(())
    } else {
        Err(Unavailable(format!(
            "invalid container name {name:?}: expected a name or id made of letters, digits, \
             '_', '.' and '-', starting with a letter or digit"
        )))
    }
}

/// The engine client's whole environment: `PATH` set to the trusted directories only.
fn engine_env(dirs: &[PathBuf]) -> Vec<(OsString, OsString)> {
    let mut path = OsString::new();
    for dir in dirs.iter().filter(|d| d.is_absolute()) {
        if !path.is_empty() {
            path.push(":");
        }
        path.push(dir);
    }
    vec![("PATH".into(), path)]
}

/// A spec running the engine with `args` (after the global options), stdin `/dev/null`.
fn engine_spec(
    engine: &Path,
    engine_env: Vec<(OsString, OsString)>,
    args: Vec<OsString>,
) -> ProcessSpec {
    let mut argv: Vec<OsString> = vec![engine.into(), "--log-level=error".into()];
    argv.extend(args);
    ProcessSpec {
        program: engine.to_path_buf(),
        argv,
        env: engine_env,
        // The client's own working directory does not matter; `/` always exists.
        cwd: WorkingDir::Path(PathBuf::from("/")),
        stdin: Stdin::Null,
        keep_fds: Vec::new(),
        display_name: engine.display().to_string(),
        // The command runs in the container; the engine client is held by its session.
        containment: caps::process::Containment::session_only(),
        resources: caps::ResourceLimits::default(),
    }
}

impl Target {
    fn spec(&self, args: Vec<OsString>) -> ProcessSpec {
        engine_spec(&self.engine, self.engine_env.clone(), args)
    }

    /// `ENGINE exec ... CONTAINER /bin/sh -c WRAPPER MARKER ENV -i -- K=V... ARGV...`.
    fn exec_spec(&self, argv: &[String], options: &ExecOptions, token: &str) -> ProcessSpec {
        let mut args: Vec<OsString> = vec!["exec".into()];
        if matches!(options.stdin, Stdin::Bytes(_)) {
            args.push("--interactive".into());
        }
        args.push("--workdir".into());
        args.push(options.cwd.clone().into_os_string());
        args.push(self.container.clone().into());
        args.push(CONTAINER_SHELL.into());
        args.push("-c".into());
        args.push(format!("{SWEEP_FUNCTION}{WRAPPER_BODY}").into());
        args.push(format!("{RUN_MARKER_PREFIX}{token}:").into());
        args.push(self.env_program.clone().into());
        args.push("-i".into());
        args.push("--".into());
        args.extend(
            options
                .env
                .iter()
                .map(|(k, v)| OsString::from(format!("{k}={v}"))),
        );
        args.extend(argv.iter().map(OsString::from));
        let mut spec = self.spec(args);
        spec.stdin = options.stdin.clone();
        spec.display_name = argv[0].clone();
        spec
    }

    /// `ENGINE exec CONTAINER /bin/sh -c KILLER warden-kill TOKEN`.
    fn kill_spec(&self, token: &str) -> ProcessSpec {
        self.spec(vec![
            "exec".into(),
            self.container.clone().into(),
            CONTAINER_SHELL.into(),
            "-c".into(),
            format!("{SWEEP_FUNCTION}{KILLER_BODY}").into(),
            "warden-kill".into(),
            token.into(),
        ])
    }

    /// Fail unless the container exists and is running.
    fn check_running(&self, engine: &str) -> Result<(), Unavailable> {
        let spec = self.spec(vec![
            "container".into(),
            "inspect".into(),
            "--format".into(),
            "{{.State.Running}} {{.State.Status}}".into(),
            self.container.clone().into(),
        ]);
        let out = run_blocking(spec, ENGINE_QUERY_TIMEOUT).map_err(|e| {
            Unavailable(format!(
                "could not ask {engine} about container {}: {e}",
                self.container
            ))
        })?;
        let c = &self.container;
        if out.timed_out {
            return Err(Unavailable(format!(
                "{engine} did not answer within {}s when asked about container {c} — is the \
                 engine healthy?",
                ENGINE_QUERY_TIMEOUT.as_secs()
            )));
        }
        if !out.status.success() {
            let err = first_line(&out.stderr);
            return Err(Unavailable(
                if err.to_ascii_lowercase().contains("no such") {
                    format!(
                        "container {c} does not exist ({engine}: {err}) — create and start it, e.g. \
                     `{engine} run -d --name {c} IMAGE sleep infinity`, or configure the name \
                     of a running container"
                    )
                } else {
                    format!(
                        "could not inspect container {c} with {engine} ({}): {err}",
                        describe_status(&out)
                    )
                },
            ));
        }
        let answer = out.stdout.trim();
        match answer.split_once(' ') {
            Some(("true", _)) => Ok(()),
            Some((_, status)) => Err(Unavailable(format!(
                "container {c} exists but is not running (status: {status}) — start it with \
                 `{engine} start {c}`"
            ))),
            None => Err(Unavailable(format!(
                "unexpected answer from {engine} about container {c}: {answer:?}"
            ))),
        }
    }

    /// Check the container can host the wrapper; returns the `env` program to use.
    fn probe_container(&self, engine: &str) -> Result<String, Unavailable> {
        let spec = self.spec(vec![
            "exec".into(),
            self.container.clone().into(),
            CONTAINER_SHELL.into(),
            "-c".into(),
            PROBE_SCRIPT.into(),
            format!("{RUN_MARKER_PREFIX}probe:").into(),
        ]);
        let c = &self.container;
        let out = run_blocking(spec, ENGINE_QUERY_TIMEOUT).map_err(|e| {
            Unavailable(format!(
                "could not run a probe in container {c} with {engine}: {e}"
            ))
        })?;
        if let Some(env) = out
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("warden-probe-ok "))
            .filter(|_| out.status.success())
        {
            return Ok(env.trim().to_owned());
        }
        let err = first_line(&out.stderr);
        let why = match out.status {
            _ if out.timed_out => format!(
                "the probe did not finish within {}s",
                ENGINE_QUERY_TIMEOUT.as_secs()
            ),
            ExitStatus::Code(126 | 127) => format!(
                "it has no usable {CONTAINER_SHELL} ({engine}: {err}); the container backend needs \
                 a POSIX shell at {CONTAINER_SHELL} in the image"
            ),
            ExitStatus::Code(3) => {
                format!("it has no env program ({err}); install coreutils or busybox in the image")
            }
            ExitStatus::Code(4) => format!(
                "the process tree of a run could not be tracked ({err}); the container needs \
                 /proc mounted (the engines' default)"
            ),
            _ => format!("the probe failed ({}): {err}", describe_status(&out)),
        };
        Err(Unavailable(format!(
            "container {c} cannot run commands for Warden: {why}"
        )))
    }
}

/// Kills the run's tree inside the container unless disarmed. Dropping it armed (the
/// supervising future was dropped) kills on a helper thread, since `Drop` cannot await.
struct KillGuard {
    target: Arc<Target>,
    token: String,
    started: Instant,
    armed: bool,
}

impl KillGuard {
    /// Kill now and wait for it, so the caller returns only once the tree is gone.
    async fn kill_now(&mut self) {
        self.armed = false;
        kill_in_container(&self.target, &self.token).await;
        if self.started.elapsed() < STARTUP_WINDOW {
            tokio::time::sleep(KILL_RETRY_DELAY).await;
            kill_in_container(&self.target, &self.token).await;
        }
    }
}

impl Drop for KillGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let target = Arc::clone(&self.target);
        let token = std::mem::take(&mut self.token);
        let young = self.started.elapsed() < STARTUP_WINDOW;
        let spawned = std::thread::Builder::new()
            .name("warden-container-kill".into())
            .spawn(move || {
                kill_blocking(&target, &token);
                if young {
                    std::thread::sleep(KILL_RETRY_DELAY);
                    kill_blocking(&target, &token);
                }
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "could not start the thread that kills a cancelled container run");
        }
    }
}

async fn kill_in_container(target: &Target, token: &str) {
    let result = supervise(
        target.kill_spec(token),
        KILL_TIMEOUT,
        OutputLimits::default(),
    )
    .await;
    report_kill(target, &result);
}

fn kill_blocking(target: &Target, token: &str) {
    let result = run_blocking(target.kill_spec(token), KILL_TIMEOUT);
    report_kill(target, &result);
}

fn report_kill(target: &Target, result: &caps::Result<ExecOutput>) {
    match result {
        Ok(out) if out.status.success() => {
            tracing::debug!(container = %target.container, killed = %out.stdout.trim(), "container run killed");
        }
        Ok(out) => tracing::warn!(
            container = %target.container,
            status = %describe_status(out),
            stderr = %first_line(&out.stderr),
            "could not kill a container run's processes"
        ),
        Err(e) => tracing::warn!(
            container = %target.container,
            error = %e,
            "could not kill a container run's processes"
        ),
    }
}

/// Supervise `spec` to completion from synchronous code: on a fresh thread with its own
/// small runtime, so it works whether or not the caller is inside a Tokio runtime (where
/// blocking on a nested runtime would panic).
fn run_blocking(spec: ProcessSpec, timeout: Duration) -> caps::Result<ExecOutput> {
    let worker = std::thread::Builder::new()
        .name("warden-container-engine".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| CapsError::from_io("start runtime", "container engine", e))?;
            runtime.block_on(supervise(spec, timeout, OutputLimits::default()))
        })
        .map_err(|e| CapsError::from_io("spawn thread", "container engine", e))?;
    worker.join().unwrap_or_else(|_| {
        Err(CapsError::Io {
            op: "run",
            path: PathBuf::from("container engine"),
            source: std::io::Error::other("the engine thread panicked"),
        })
    })
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

fn describe_status(out: &ExecOutput) -> String {
    if out.timed_out {
        "timed out".to_owned()
    } else {
        format!("exit status {}", out.status)
    }
}

fn first_line(text: &str) -> &str {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("no message")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_names_that_look_like_options_are_refused() {
        for bad in ["", "-it", "--privileged", "a b", "a;b", "a/b", "ä"] {
            assert!(check_container_name(bad).is_err(), "{bad:?}");
        }
        for good in ["warden", "a1", "my_box.v2-x", "0123abcd"] {
            assert!(check_container_name(good).is_ok(), "{good:?}");
        }
    }

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
