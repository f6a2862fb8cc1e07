//! Command-line arguments shared by `warden exec` and `warden policy explain`: the policy
//! tool parameters and the command itself, so both read a request the same way.

use std::time::Duration;

use policy::{Ask, ExecParams, Host, Security};

/// The policy tool parameters (`--host --security --ask --node`).
#[derive(Debug, Clone, clap::Args)]
pub struct PolicyArgs {
    /// Where to run: sandbox, gateway or node (default from config: sandbox).
    #[arg(long, value_parser = parse::<Host>)]
    host: Option<Host>,
    /// Tool-parameter security (can only tighten the host's approvals file).
    #[arg(long, value_parser = parse::<Security>)]
    security: Option<Security>,
    /// Tool-parameter ask mode (can only ask more than the host's approvals file).
    #[arg(long, value_parser = parse::<Ask>)]
    ask: Option<Ask>,
    /// Target node for host=node.
    #[arg(long)]
    node: Option<String>,
    /// Kill the command's whole process tree after this long (e.g. 30s, 5m). Default and
    /// maximum come from config.toml (5 minutes and 1 hour unless set).
    #[arg(long, value_parser = parse_duration)]
    timeout: Option<Duration>,
}

impl PolicyArgs {
    /// As the policy engine's tool parameters.
    pub fn params(&self) -> ExecParams {
        ExecParams {
            host: self.host,
            security: self.security,
            ask: self.ask,
            node: self.node.clone(),
            timeout: self.timeout,
        }
    }
}

/// The command: `--shell 'STRING'` or an argv after `--`.
#[derive(Debug, Clone, clap::Args)]
pub struct CommandArgs {
    /// A shell string instead of an argv.
    #[arg(long, conflicts_with = "argv")]
    pub shell: Option<String>,
    /// The program and its arguments (after `--`).
    #[arg(last = true, required_unless_present = "shell")]
    pub argv: Vec<String>,
}

fn parse<T: std::str::FromStr<Err = String>>(s: &str) -> Result<T, String> {
    s.parse()
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = match s.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => {
            humantime::parse_duration(s).map_err(|e| format!("invalid duration {s:?}: {e}"))?
        }
    };
    if d.is_zero() {
        return Err("the timeout must be greater than zero".into());
    }
    Ok(d)
}

impl CommandArgs {
    /// The command as the runner takes it.
    pub fn spec(&self) -> runner::CommandSpec {
        match &self.shell {
            Some(s) => runner::CommandSpec::Shell(s.clone()),
            None => runner::CommandSpec::Argv(self.argv.clone()),
        }
    }
}
