//! The `Shell` capability: running a program from an argv, or a script under an explicit
//! shell, with an explicit environment and hard limits.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::{CapsError, Result};

pub use crate::exec_output::{
    DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_TAIL_BYTES, EgressConnection, ExecOutput, ExitStatus,
    OutputLimits, RefusedWrites, StreamSize, TIMED_OUT_EXIT_CODE,
};

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
    /// What the stream's sender writes while the command runs, until it closes it (or
    /// is gone). Providers that cannot feed a running command's input give it
    /// `/dev/null` and drop the stream, so the sender hears that it is closed.
    Stream(crate::InputStream),
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
    /// Run the command on a pseudo-terminal of this size, made for the run: its standard
    /// input, output and error and its controlling terminal. The output is then the
    /// terminal's stream (all in `stdout`, with the terminal's line endings and escape
    /// sequences) and [`Stdin::Stream`] is typed on the terminal. Providers that cannot
    /// make one refuse the run ([`CapsError::Unsupported`]); none ignores it.
    pub terminal: Option<crate::TerminalSize>,
    /// Who decides a connection the run's egress rules do not name (a sandbox whose
    /// network goes through Warden's proxy); `None`: such a connection is refused.
    /// Providers without a proxy ignore it.
    pub ask_connection: Option<crate::ConnectionAsker>,
    /// The run's own egress rules (a sandbox whose network goes through Warden's proxy):
    /// they decide each connection before anyone is asked. `None`: the provider's own
    /// (those it was built with). Providers without a proxy ignore it.
    pub connection_rules: Option<crate::ConnectionRules>,
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
            terminal: None,
            ask_connection: None,
            connection_rules: None,
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
