//! An exec request as it reaches the runner: who asks, what to run, where, with which
//! parameters — before anything is decided.

use std::collections::BTreeMap;
use std::path::PathBuf;

use policy::{CommandInput, ExecParams, SessionOverrides};
use serde::Serialize;

/// What to run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "lowercase")]
pub enum CommandSpec {
    /// An argv; no shell is involved.
    Argv(Vec<String>),
    /// A shell string.
    Shell(String),
}

impl CommandSpec {
    /// As the policy engine reads it.
    pub fn input(&self) -> CommandInput<'_> {
        match self {
            CommandSpec::Argv(argv) => CommandInput::Argv(argv),
            CommandSpec::Shell(s) => CommandInput::Shell(s),
        }
    }

    /// The command as the agent wrote it, for prompts and usage records.
    pub fn display(&self) -> String {
        match self {
            CommandSpec::Argv(argv) => argv.join(" "),
            CommandSpec::Shell(s) => s.clone(),
        }
    }
}

/// One exec request.
#[derive(Clone, Debug)]
pub struct ExecRequest {
    /// Run id; one is generated when absent.
    pub run_id: Option<String>,
    /// Requesting agent.
    pub agent: String,
    /// Requesting session.
    pub session: String,
    /// The command.
    pub command: CommandSpec,
    /// Working directory; the host's default when absent, relative ones start there.
    pub cwd: Option<PathBuf>,
    /// Variables the request wants to set (checked against the allowlist of names).
    pub env: BTreeMap<String, String>,
    /// Tool parameters (host, security, ask, node, timeout).
    pub params: ExecParams,
    /// The session's slash-command overrides.
    pub session_overrides: SessionOverrides,
    /// Where the output is also copied while the command runs, for progress reports.
    pub live: Option<caps::LiveOutput>,
}

impl ExecRequest {
    /// A request by `agent` in `session` to run `command`, with nothing else set.
    pub fn new(agent: impl Into<String>, session: impl Into<String>, command: CommandSpec) -> Self {
        ExecRequest {
            run_id: None,
            agent: agent.into(),
            session: session.into(),
            command,
            cwd: None,
            env: BTreeMap::new(),
            params: ExecParams::default(),
            session_overrides: SessionOverrides::default(),
            live: None,
        }
    }
}

/// A fresh run id.
pub fn new_run_id() -> String {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        // Ids only need to be unique, not secret: fall back to the clock.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        bytes = (nanos as u64).to_be_bytes();
    }
    format!("run-{}", policy::hex(&bytes))
}
