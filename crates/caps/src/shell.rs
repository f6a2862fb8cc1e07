//! The `Shell` capability: running a program from an argv, or a script under an explicit
//! shell, with an explicit environment and hard limits.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::{CapsError, Result};

/// Combined stdout+stderr kept per run (product spec §9). Large enough for real tool
/// output, small enough that an agent's context and our memory stay bounded.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 200_000;

/// Bytes of trailing output kept for lifecycle events (product spec §9).
pub const DEFAULT_TAIL_BYTES: usize = 20_000;

/// How much output a run may keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputLimits {
    /// Bytes of stdout and stderr kept together (each stream's beginning and end when
    /// they do not fit; see [`crate::OutputCollector`]); the rest is drained and counted.
    pub max_output_bytes: usize,
    /// Trailing bytes of the whole stream kept for events, even past the cap.
    pub tail_bytes: usize,
}

impl Default for OutputLimits {
    fn default() -> Self {
        OutputLimits {
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            tail_bytes: DEFAULT_TAIL_BYTES,
        }
    }
}

/// How much of the machine one run may take, whatever its processes do. Enforced by the
/// host's containment (a cgroup per run); `None` means no limit of that kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceLimits {
    /// Processes and threads alive at once (a fork bomb stops here).
    pub max_processes: Option<u64>,
    /// Memory in bytes, swap included where the kernel can tell (a memory bomb is
    /// killed by the kernel here).
    pub max_memory: Option<u64>,
}

/// Which programs a run may start: every `execve` of a file that is not one of `paths`
/// or beneath one of them (a directory covers everything beneath it) is refused by the
/// kernel, in the command and in all its descendants. Only a shell whose
/// [`Shell::exec_allowlist_support`] is `Ok` may be given one, and it then enforces it or
/// refuses the run: never runs it unrestricted.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ExecAllowlist {
    /// Absolute paths of files and directories, as configured; the provider resolves
    /// symlinks in its own world.
    pub paths: Vec<PathBuf>,
}

/// What the child reads on standard input.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Stdin {
    /// `/dev/null` (the default: a command never waits on a terminal).
    #[default]
    Null,
    /// These bytes, then end-of-file.
    Bytes(Vec<u8>),
}

/// Everything about a run except what to run. There is no implicit inheritance: the
/// environment is exactly `env`, the working directory exactly `cwd`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecOptions {
    /// Working directory, in the provider's world (relative to the root for bounded).
    pub cwd: PathBuf,
    /// The complete environment of the child.
    pub env: BTreeMap<String, String>,
    /// Standard input.
    pub stdin: Stdin,
    /// Wall-clock limit; on expiry the whole process tree is killed.
    pub timeout: Duration,
    /// Output limits.
    pub limits: OutputLimits,
    /// Resource limits of the whole run (processes, memory).
    pub resources: ResourceLimits,
    /// The `argv[0]` the program sees, when it should differ from the path executed
    /// (a program resolved to its canonical file still sees the name it was called by).
    /// Only [`Shell::exec`] uses it.
    pub arg0: Option<String>,
    /// The file `argv[0]` must still be when it is started (the one a human approved):
    /// if the path now names another file, the run is refused
    /// ([`CapsError::Denied`]) and nothing starts. Only [`Shell::exec`] uses it, and only
    /// providers that run programs from this host's filesystem check it.
    pub expect_program: Option<crate::FileId>,
    /// The programs the run may start (see [`ExecAllowlist`]); `None`: any.
    pub exec_allowlist: Option<ExecAllowlist>,
    /// Where the run's output is also copied while it runs (progress reports). Providers
    /// that cannot stream leave it empty; the final output is unaffected either way.
    pub live: Option<crate::LiveOutput>,
}

impl ExecOptions {
    /// Options with the given cwd and timeout, an empty environment, stdin from
    /// `/dev/null` and the default output limits.
    pub fn new(cwd: impl Into<PathBuf>, timeout: Duration) -> Self {
        ExecOptions {
            cwd: cwd.into(),
            env: BTreeMap::new(),
            stdin: Stdin::Null,
            timeout,
            limits: OutputLimits::default(),
            resources: ResourceLimits::default(),
            arg0: None,
            expect_program: None,
            exec_allowlist: None,
            live: None,
        }
    }

    /// Add one environment variable.
    pub fn with_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// The checks every [`Shell`] provider applies to an `exec` request before spawning
    /// anything: a non-empty program, no NUL bytes in argv or the environment, valid
    /// variable names, a non-zero timeout.
    pub fn validate_request(&self, argv: &[String]) -> Result<()> {
        let Some(program) = argv.first() else {
            return Err(CapsError::invalid("argv must not be empty"));
        };
        if program.is_empty() {
            return Err(CapsError::invalid("the program name must not be empty"));
        }
        if let Some(i) = argv.iter().position(|a| a.contains('\0')) {
            return Err(CapsError::invalid(format!("argv[{i}] contains a NUL byte")));
        }
        for (key, value) in &self.env {
            if key.is_empty() || key.contains('=') || key.contains('\0') {
                return Err(CapsError::invalid(format!(
                    "invalid environment variable name {key:?}"
                )));
            }
            if value.contains('\0') {
                return Err(CapsError::invalid(format!(
                    "environment variable {key} contains a NUL byte"
                )));
            }
        }
        if self.timeout.is_zero() {
            return Err(CapsError::invalid("timeout must be greater than zero"));
        }
        Ok(())
    }
}

/// A script for [`Shell::run`]: source text and the shell that interprets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Script {
    /// Absolute path of the shell (`/bin/sh`, `/bin/bash`...), invoked as `SHELL -c SOURCE`.
    pub shell: PathBuf,
    /// The script text.
    pub source: String,
}

impl Script {
    /// A script for `/bin/sh`.
    pub fn sh(source: impl Into<String>) -> Self {
        Script {
            shell: PathBuf::from("/bin/sh"),
            source: source.into(),
        }
    }

    /// The argv every provider runs a script as: `[shell, "-c", source]`. The shell must
    /// be named by an absolute UTF-8 path (a script never picks its interpreter by PATH).
    pub fn argv(&self) -> Result<Vec<String>> {
        if !self.shell.is_absolute() {
            return Err(CapsError::invalid(format!(
                "the shell must be an absolute path, got {}",
                self.shell.display()
            )));
        }
        let shell = self
            .shell
            .to_str()
            .ok_or_else(|| CapsError::invalid("the shell path is not UTF-8"))?;
        Ok(vec![shell.to_owned(), "-c".to_owned(), self.source.clone()])
    }
}

/// How a process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "lowercase")]
pub enum ExitStatus {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal number.
    Signal(i32),
}

impl ExitStatus {
    /// The conventional shell exit code: the code itself, or 128 + signal number.
    pub fn shell_code(self) -> i32 {
        match self {
            ExitStatus::Code(c) => c,
            ExitStatus::Signal(s) => 128 + s,
        }
    }

    /// True for exit code 0.
    pub fn success(self) -> bool {
        self == ExitStatus::Code(0)
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitStatus::Code(c) => write!(f, "{c}"),
            ExitStatus::Signal(s) => write!(f, "signal {s}"),
        }
    }
}

/// The typed result of a run. Text fields are UTF-8 (invalid bytes replaced) and never
/// split a character. A stream that did not fit its share of the cap keeps its beginning
/// and its end, with a line starting [`crate::DROPPED_MARKER_PREFIX`] where the middle
/// was dropped (see [`crate::OutputCollector`] for the split); a text that lost only one
/// end is marked with [`crate::TRUNCATION_MARKER`] there.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ExecOutput {
    /// How the process ended.
    pub status: ExitStatus,
    /// Standard output (its share of the combined cap).
    pub stdout: String,
    /// Standard error (its share of the combined cap).
    pub stderr: String,
    /// The kept bytes behind `stdout` (its first bytes, then its last ones, as
    /// `stdout_size` says) when they are not UTF-8 (the text replaced what it could not
    /// carry); `None` when `stdout` is exact.
    #[serde(skip)]
    pub stdout_bytes: Option<Vec<u8>>,
    /// The kept bytes behind `stderr` when they are not UTF-8.
    #[serde(skip)]
    pub stderr_bytes: Option<Vec<u8>>,
    /// What was written to stdout, and what of it was kept.
    pub stdout_size: StreamSize,
    /// What was written to stderr, and what of it was kept.
    pub stderr_size: StreamSize,
    /// stdout and stderr interleaved in arrival order, within `max_output_bytes` (its
    /// beginning and its end when it did not fit).
    pub combined: String,
    /// The last `tail_bytes` of the combined stream, kept even past the cap (for events).
    pub tail: String,
    /// True if any output was discarded (a stream was cut).
    pub truncated: bool,
    /// True if the run hit its timeout and the tree was killed.
    pub timed_out: bool,
    /// Wall-clock duration of the run.
    #[serde(serialize_with = "serialize_duration_ms", rename = "duration_ms")]
    pub duration: Duration,
    /// Whether a sandbox's read-only profile refused a write that its writable profile
    /// would allow (approval mode asks a human about those). Only sandbox providers
    /// classify this; everything else reports [`RefusedWrites::NotWatched`].
    #[serde(skip_serializing_if = "RefusedWrites::is_not_watched")]
    pub refused_writes: RefusedWrites,
}

/// What a run kept of one output stream: how much the command wrote, and which bytes of
/// it the result holds — all of them, or the first `kept_first` and the last `kept_last`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StreamSize {
    /// Bytes the command wrote to the stream.
    pub written: u64,
    /// Kept bytes from the stream's beginning (all of it when nothing was dropped).
    pub kept_first: u64,
    /// Kept bytes from the stream's end (0 when nothing was dropped).
    pub kept_last: u64,
}

impl StreamSize {
    /// A stream kept whole.
    pub fn whole(len: u64) -> Self {
        StreamSize {
            written: len,
            kept_first: len,
            kept_last: 0,
        }
    }

    /// Bytes kept.
    pub fn kept(&self) -> u64 {
        self.kept_first + self.kept_last
    }

    /// True if some of the stream was dropped.
    pub fn is_cut(&self) -> bool {
        self.kept() < self.written
    }
}

/// What a sandbox provider knows about writes its read-only profile refused.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", content = "paths", rename_all = "kebab-case")]
pub enum RefusedWrites {
    /// The provider does not classify refused writes (not a sandbox, or a writable one).
    #[default]
    NotWatched,
    /// No write the writable profile would allow was refused.
    None,
    /// Such writes were refused: at these paths, as the kernel reported them (at most a
    /// few, first first), or with no paths when the backend only knows that one was (the
    /// command printed the kernel's "Read-only file system").
    Refused(Vec<std::path::PathBuf>),
}

impl RefusedWrites {
    /// True for [`RefusedWrites::NotWatched`].
    pub fn is_not_watched(&self) -> bool {
        matches!(self, RefusedWrites::NotWatched)
    }
}

impl ExecOutput {
    /// The exit code a shell would report for this run: 124 when it timed out (as
    /// `timeout(1)` does), else the code, or 128 + the signal that killed it.
    pub fn exit_code(&self) -> i32 {
        if self.timed_out {
            TIMED_OUT_EXIT_CODE
        } else {
            self.status.shell_code()
        }
    }
}

/// The exit code of a run that hit its timeout (`timeout(1)`'s convention).
pub const TIMED_OUT_EXIT_CODE: i32 = 124;

fn serialize_duration_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1000.0)
}

/// Process execution, as one provider's world sees it.
///
/// The two methods are deliberately separate: an argv is never joined into a shell
/// string (that is how injection happens), and a script always names its shell.
///
/// Dropping the returned future cancels the run: providers kill the whole process tree.
#[async_trait::async_trait]
pub trait Shell: Send + Sync + fmt::Debug {
    /// Execute `argv[0]` with arguments `argv[1..]`, no shell involved. A bare program
    /// name is looked up in `options.env["PATH"]` (absolute entries only); a name with a
    /// `/` is used as given.
    async fn exec(&self, argv: &[String], options: &ExecOptions) -> Result<ExecOutput>;

    /// Run `script.source` as `script.shell -c SOURCE`.
    async fn run(&self, script: &Script, options: &ExecOptions) -> Result<ExecOutput>;

    /// Whether this shell enforces [`ExecOptions::exec_allowlist`]; `Err` says why not.
    /// The default is `Err`: a shell that does not override this ignores the option, so
    /// whoever passes one (the runner) must ask first and never rely on it otherwise.
    fn exec_allowlist_support(&self) -> std::result::Result<(), String> {
        Err("this shell cannot restrict which programs a command executes".into())
    }
}
