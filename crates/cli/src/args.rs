//! Command-line arguments shared by `warden exec` and `warden policy explain`: the policy
//! tool parameters and the command itself, so both read a request the same way.

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
}

impl PolicyArgs {
    /// As the policy engine's tool parameters.
    pub fn params(&self) -> ExecParams {
        ExecParams {
            host: self.host,
            security: self.security,
            ask: self.ask,
            node: self.node.clone(),
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
