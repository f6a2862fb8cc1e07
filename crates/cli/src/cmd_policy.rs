//! `warden policy explain`: the whole policy pipeline for one command, without running
//! it — resolved values with their sources, the analysis, the matched patterns, the
//! rebuilt command and the decision. The exit code agrees with the decision.

use std::path::PathBuf;

use policy::{CommandInput, Decision, EvalContext, Requester, SessionOverrides, explain};

use crate::args::{CommandArgs, PolicyArgs};
use crate::exit;
use crate::host::HostFacts;

/// `warden policy ...`
#[derive(Debug, clap::Subcommand)]
pub enum PolicyCommand {
    /// Show how a command would be decided, and why.
    #[command(after_help = "Exit status: 0 allow, 10 ask, 77 deny, 125 error.")]
    Explain(ExplainArgs),
}

/// Arguments of `warden policy explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The requesting agent (the same default as `warden exec`).
    #[arg(long, default_value = "main")]
    agent: String,
    /// The requesting session (for display; session overrides live in the gateway).
    #[arg(long)]
    session: Option<String>,
    #[command(flatten)]
    policy: PolicyArgs,
    /// Working directory the command would run in.
    #[arg(long)]
    cwd: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    command: CommandArgs,
}

/// The exit code `explain` uses for a decision.
pub fn decision_exit_code(decision: &Decision) -> i32 {
    match decision {
        Decision::Allow { .. } => 0,
        Decision::Ask { .. } => exit::ASK,
        Decision::Deny { .. } => exit::DENIED,
    }
}

/// Run `warden policy ...`.
pub fn run(command: PolicyCommand) -> i32 {
    match command {
        PolicyCommand::Explain(args) => exit::or_report(explain_command(&args)),
    }
}

fn explain_command(args: &ExplainArgs) -> anyhow::Result<i32> {
    let facts = HostFacts::read()?;
    let config = facts.config()?;
    let store = facts.store();
    let agent = Some(args.agent.as_str());
    let view = store.host_view(agent);
    let cwd = facts.absolute(args.cwd.as_deref().unwrap_or(&facts.cwd));
    let fs = facts.fs();
    let ctx = EvalContext {
        fs: fs.as_ref(),
        cwd: &cwd,
        trusted_path: &facts.trusted_path,
        allowlist: view.allowlist.as_ref(),
        cache: None,
    };
    let params = args.policy.params();
    let session = SessionOverrides::default();
    let requester = Requester {
        agent,
        session: &session,
        params: &params,
    };
    let input = match &args.command.shell {
        Some(s) => CommandInput::Shell(s),
        None => CommandInput::Argv(&args.command.argv),
    };
    let explanation = explain(input, &requester, &config, &view.ceiling, &ctx);
    let code = decision_exit_code(&explanation.decision);
    if args.json {
        let mut value = serde_json::to_value(&explanation)?;
        value["exitCode"] = code.into();
        if let Some(err) = &view.error {
            value["hostFileError"] = err.clone().into();
        }
        outln!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        if let Some(err) = &view.error {
            eprintln!("warden: {err}");
        }
        for rejected in view.allowlist.rejected() {
            eprintln!(
                "warden: ignoring invalid allowlist pattern {:?}: {}",
                rejected.pattern, rejected.reason
            );
        }
        out!("{}", explanation.to_text());
    }
    Ok(code)
}
