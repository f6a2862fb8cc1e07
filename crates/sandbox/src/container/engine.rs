//! The engine on the host: which engine and container to use ([`ContainerConfig`]), the
//! engine CLI found only as a trusted system binary, the bare environment and command line
//! every engine client gets, running one to completion from synchronous code, and the
//! engine's version for `warden doctor`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use caps::process::{ProcessSpec, WorkingDir, supervise};
use caps::{CapsError, ExecOutput, OutputLimits, Stdin};

use crate::Unavailable;

/// Where the engine CLI may come from when the configuration names none: system
/// directories only, never a workspace or `PATH`.
pub const TRUSTED_ENGINE_DIRS: &[&str] = crate::trusted::TRUSTED_SYSTEM_DIRS;

/// The engines this backend speaks to. Both share the `exec`/`inspect` command line it
/// uses; restricting the name keeps a config typo from running an arbitrary system
/// program (`sh exec ...`).
pub const SUPPORTED_ENGINES: &[&str] = &["podman", "docker"];

/// How long an engine query (inspect, version, probe) may take before the container is
/// declared unavailable: generous for a busy engine, bounded so a wedged daemon cannot
/// hang Warden's startup.
pub(super) const ENGINE_QUERY_TIMEOUT: Duration = Duration::from_secs(20);

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

/// Find and check the engine, and report its version (`podman version 4.3.1`) for
/// `warden doctor`. Fails with the same diagnosis
/// [`Container::connect`](super::Container::connect) would give for the engine.
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
        // The directories are fixed (root-owned system directories, never `PATH`), so the
        // fix is always to install the engine there.
        format!(
            "the container engine {engine} was not found in [{}], the only directories \
             Warden runs it from — install it with the system's package manager (Debian: \
             apt-get install {}); a copy elsewhere, such as /usr/local/bin, is not used",
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

/// The engine client's whole environment: `PATH` set to the trusted directories only.
pub(super) fn engine_env(dirs: &[PathBuf]) -> Vec<(OsString, OsString)> {
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
pub(super) fn engine_spec(
    engine: &Path,
    engine_env: Vec<(OsString, OsString)>,
    args: Vec<OsString>,
) -> ProcessSpec {
    let mut argv: Vec<OsString> = vec![engine.into(), "--log-level=error".into()];
    argv.extend(args);
    host_program_spec(engine, argv, engine_env)
}

/// A program of the host's that runs to its end beside a run (an engine client, the
/// helper entering the container's network), from `/`, with no input, held by its
/// session.
pub(super) fn host_program_spec(
    program: &Path,
    argv: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
) -> ProcessSpec {
    ProcessSpec {
        program: program.to_path_buf(),
        argv,
        env,
        // The program's own working directory does not matter; `/` always exists.
        cwd: WorkingDir::Path(PathBuf::from("/")),
        stdin: Stdin::Null,
        keep_fds: Vec::new(),
        display_name: program.display().to_string(),
        // The command runs in the container; the engine client is held by its session.
        containment: caps::process::Containment::session_only(),
        resources: caps::ResourceLimits::default(),
        born_in: Default::default(),
        exit_report: None,
        terminal: None,
        terminal_owner: Default::default(),
        launches_command: false,
        watches_its_parent: false,
        signal_route: None,
    }
}

/// Supervise `spec` to completion from synchronous code: on a fresh thread with its own
/// small runtime, so it works whether or not the caller is inside a Tokio runtime (where
/// blocking on a nested runtime would panic).
pub(super) fn run_blocking(spec: ProcessSpec, timeout: Duration) -> caps::Result<ExecOutput> {
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

/// How a finished engine client ended, for a diagnosis.
pub(super) fn describe_status(out: &ExecOutput) -> String {
    if out.timed_out {
        "timed out".to_owned()
    } else {
        format!("exit status {}", out.status)
    }
}

/// The first non-empty line of an engine's message.
pub(super) fn first_line(text: &str) -> &str {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("no message")
}
