//! Command-line arguments shared by `warden exec` and `warden policy explain`: the policy
//! tool parameters and the command itself, so both read a request the same way.

use std::path::Path;
use std::time::Duration;

use policy::egress::{RequestEgress, RuleText};
use policy::{Ask, Command, ExecArgs, Host, Security};

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
    // Negative numbers reach the parser (which says what a timeout must be) instead of
    // clap's generic advice to pass them after `--`, which would make them the command.
    #[arg(long, value_parser = parse_duration, allow_negative_numbers = true)]
    timeout: Option<Duration>,
    /// Narrow this run's network through Warden's egress proxy to the hosts these rules
    /// name (repeat it; e.g. pypi.org, '*.pythonhosted.org:443'). Never widens what the
    /// host allows; refused where it cannot be enforced.
    #[arg(long = "egress-allow", value_name = "RULE", value_parser = parse_rule)]
    egress_allow: Vec<RuleText>,
    /// A host this run never reaches through Warden's egress proxy (repeat it).
    #[arg(long = "egress-deny", value_name = "RULE", value_parser = parse_rule)]
    egress_deny: Vec<RuleText>,
}

impl PolicyArgs {
    /// Set these flags' parameters on `args`.
    pub fn fill(&self, args: &mut ExecArgs) {
        args.host = self.host;
        args.security = self.security;
        args.ask = self.ask;
        args.node.clone_from(&self.node);
        args.timeout = self.timeout.map(|t| t.as_secs_f64());
        let egress = RequestEgress {
            allow: (!self.egress_allow.is_empty()).then(|| self.egress_allow.clone()),
            deny: self.egress_deny.clone(),
        };
        args.egress = (!egress.is_empty()).then_some(egress);
    }
}

/// The request a command line makes: `command`, these policy flags, and a working
/// directory (made absolute by the caller: a CLI's relative path starts where the user
/// is).
pub fn exec_args(
    command: &CommandArgs,
    policy: &PolicyArgs,
    cwd: Option<&Path>,
) -> anyhow::Result<ExecArgs> {
    let mut args = ExecArgs::new(command.command());
    policy.fill(&mut args);
    args.cwd = cwd
        .map(|c| {
            c.to_str()
                .map(str::to_owned)
                .ok_or_else(|| anyhow::anyhow!("--cwd {} is not UTF-8", c.display()))
        })
        .transpose()?;
    Ok(args)
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

fn parse<T: std::str::FromStr<Err = policy::InvalidChoice>>(
    s: &str,
) -> Result<T, policy::InvalidChoice> {
    s.parse()
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    if s.trim_start().starts_with('-') {
        return Err(format!(
            "the timeout must be greater than zero, got {s} (e.g. 30, 30s or 5m)"
        ));
    }
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
    /// The command as a request names it.
    pub fn command(&self) -> Command {
        match &self.shell {
            Some(s) => Command::Shell(s.clone()),
            None => Command::Argv(self.argv.clone()),
        }
    }
}

/// An egress rule on the command line, checked as the config's are.
fn parse_rule(text: &str) -> Result<RuleText, String> {
    RuleText::parse(text).map_err(|e| e.problem)
}
