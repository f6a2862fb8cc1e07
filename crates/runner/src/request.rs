//! An exec request as it reaches the runner: who asks, what to run, where, with which
//! parameters — before anything is decided.

use std::collections::BTreeMap;
use std::path::PathBuf;

use policy::{ArgsError, Command, ExecArgs, ExecParams, SessionOverrides};

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
    pub command: Command,
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
    /// What the command reads on standard input while it runs, written by whoever drives
    /// the run (a background run's `process write`); `None`: `/dev/null`. Hosts that
    /// cannot feed a running command (a node, the approver's run-here) drop it, and the
    /// writer hears that its input is closed.
    pub input: Option<caps::InputStream>,
    /// Run on a terminal of this size (`exec`'s `tty`): hosts that make one give it to
    /// the command; the others refuse the run rather than run it without.
    pub terminal: Option<caps::TerminalSize>,
}

impl ExecRequest {
    /// A request by `agent` in `session` to run `command`, with nothing else set.
    pub fn new(agent: impl Into<String>, session: impl Into<String>, command: Command) -> Self {
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
            input: None,
            terminal: None,
        }
    }
}

impl ExecRequest {
    /// The request `args` make, by `agent` in `session` — the one conversion every front
    /// end uses (MCP, the CLI, a node receiving `system.run`). A relative `cwd` stays
    /// relative: the host that runs the request starts it from its own default directory.
    pub fn from_args(
        agent: impl Into<String>,
        session: impl Into<String>,
        args: ExecArgs,
    ) -> Result<Self, ArgsError> {
        let command = args.command()?;
        let params = args.params();
        let terminal = args.terminal()?;
        let mut request = ExecRequest::new(agent, session, command);
        request.cwd = args.cwd.map(PathBuf::from);
        request.terminal = terminal;
        request.env = args.env;
        request.params = params;
        Ok(request)
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
