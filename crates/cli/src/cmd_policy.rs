//! `warden policy explain`: the whole policy pipeline for one command, without running
//! it — resolved values with their sources, the analysis, the matched patterns, the
//! rebuilt command and the decision. The exit code agrees with the decision.

use std::path::PathBuf;

use policy::Decision;
use runner::ExecRequest;

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
    /// The requesting session (its slash-command overrides live in a running gateway;
    /// here it has none).
    #[arg(long, default_value = "cli")]
    session: String,
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
    let gateway = facts.gateway(None)?;
    // The very path an exec takes: the same request, decided the same way.
    let cwd = args.cwd.as_ref().map(|c| facts.absolute(c));
    let exec_args = crate::args::exec_args(&args.command, &args.policy, cwd.as_deref())?;
    let request = ExecRequest::from_args(&args.agent, &args.session, exec_args)?;
    let key = gateway::SessionKey {
        agent: args.agent.clone(),
        session: args.session.clone(),
    };
    let decided = gateway.decide(&key, request);
    let explanation = &decided.explanation;
    let code = decision_exit_code(&explanation.decision);
    // Direct mode is part of the decision: read it there, never from the switch again.
    let direct_mode = matches!(
        explanation.decision,
        policy::Decision::Allow {
            reason: policy::AllowReason::Unconfined,
            ..
        }
    );
    let exec_status =
        crate::exec_allowlist::for_exec(&facts.config()?, &explanation.policy, direct_mode);
    // A node decides with its own file: what this machine's file says is not the answer.
    let node_note = (explanation.policy.host.value == policy::Host::Node).then_some(
        "host=node: the node decides this against its own exec-approvals.json (this explanation uses this machine's file as the ceiling; on the node, `warden policy explain --host node --security S --ask A` with the security and ask this gateway's config asks for gives its answer)",
    );
    if args.json {
        let mut value = serde_json::to_value(explanation)?;
        value["exitCode"] = code.into();
        if let Some(status) = &exec_status {
            value["execAllowlistStatus"] = serde_json::to_value(status)?;
        }
        if let Some(err) = decided.host_file_error() {
            value["hostFileError"] = err.into();
        }
        if let Some(note) = node_note {
            value["note"] = note.into();
        }
        let stored = decided.egress_allow();
        if !stored.is_empty() {
            value["egressAllow"] = stored.into();
        }
        outln!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        if let Some(err) = decided.host_file_error() {
            eprintln!("warden: {err}");
        }
        for rejected in decided.rejected_patterns() {
            eprintln!(
                "warden: ignoring invalid allowlist pattern {:?}: {}",
                rejected.pattern, rejected.reason
            );
        }
        out!("{}", explanation.to_text());
        let stored = decided.egress_allow();
        if !stored.is_empty() {
            outln!(
                "egress allow: {} (exec-approvals.json egressAllow of agent {})",
                stored.join(", "),
                args.agent
            );
        }
        if let Some(status) = &exec_status {
            outln!("exec allowlist: {}", status.detail);
            if status.state == crate::exec_allowlist::State::Active {
                for line in status.allows.lines() {
                    outln!("  {line}");
                }
            }
        }
        if let Some(note) = node_note {
            outln!("note: {note}");
        }
    }
    Ok(code)
}
