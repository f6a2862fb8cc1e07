//! `warden exec`: run one command through the gateway logic — routing by host, policy
//! against this host's approvals file, the approver, the limits — and pass its exit code
//! through.

use std::io::Write;
use std::path::PathBuf;

use runner::{ExecRequest, Outcome};

use crate::args::{CommandArgs, PolicyArgs};
use crate::exit;
use crate::host::HostFacts;
use crate::signals::Watched;

/// Arguments of `warden exec`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit status: the command's own; 124 timed out; 125 Warden failed; \
                  126 not executable; 127 not found; 128+N killed by signal N; \
                  77 denied by policy or by the approver; 75 no approver answered and the \
                  fallback denied; 130 interrupted (SIGINT), 143 terminated (SIGTERM), 129 hung up \
                  (SIGHUP) — each after the command's whole process tree was killed; 141 \
                  stdout's reader went away."
)]
pub struct ExecArgs {
    #[command(flatten)]
    policy: PolicyArgs,
    /// The agent on whose behalf the command runs.
    #[arg(long, default_value = "main")]
    agent: String,
    /// The session id.
    #[arg(long, default_value = "cli")]
    session: String,
    /// Working directory (default: the current directory).
    #[arg(long)]
    cwd: Option<PathBuf>,
    /// Extra environment variable for the command (only allowlisted names), repeatable.
    #[arg(long = "env", value_name = "K=V", value_parser = parse_env)]
    env: Vec<(String, String)>,
    /// Print the typed result as JSON instead of the command's output.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    command: CommandArgs,
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("expected K=V, got {s:?}"))?;
    if k.is_empty() {
        return Err(format!("empty variable name in {s:?}"));
    }
    Ok((k.to_owned(), v.to_owned()))
}

/// Run `warden exec` and return the process exit code.
pub fn run(args: ExecArgs) -> i32 {
    exit::block_on(false, run_async(args))
}

/// Resolves when standard output is a pipe or socket whose reader has gone away; never
/// otherwise (a terminal or a file has no reader to lose).
async fn stdout_reader_gone() {
    use std::os::fd::AsFd;
    use tokio::io::Interest;
    let is_pipe = nix::sys::stat::fstat(std::io::stdout().as_fd()).is_ok_and(|st| {
        let kind = st.st_mode & nix::libc::S_IFMT;
        kind == nix::libc::S_IFIFO || kind == nix::libc::S_IFSOCK
    });
    if !is_pipe {
        return std::future::pending().await;
    }
    // Watched by the runtime's own poller (a copy of the descriptor: the same pipe), not
    // by a thread of its own. The reader's end closing shows on this end as an error (a
    // pipe) or a hang-up (a socket); data a socket's peer sends is not Warden's to read,
    // and is only waited past.
    let interest = Interest::ERROR | Interest::READABLE;
    let Ok(copy) = std::io::stdout().as_fd().try_clone_to_owned() else {
        return std::future::pending().await;
    };
    // SAFETY: an `OwnedFd` is an open descriptor that stays open, and the same, for as
    // long as it is owned — here by the `AsyncFd` until it is dropped.
    let watched = unsafe { tokio::io::unix::AsyncFd::register_with_interest(copy, interest) };
    let Ok(watched) = watched else {
        return std::future::pending().await;
    };
    loop {
        let Ok(mut ready) = watched.ready(interest).await else {
            return std::future::pending().await;
        };
        if ready.ready().is_error() || ready.ready().is_read_closed() {
            return;
        }
        ready.clear_ready();
    }
}

async fn run_async(args: ExecArgs) -> anyhow::Result<i32> {
    let facts = HostFacts::read()?;
    // The run's cgroups are made (and a thread moved into them) while the rest starts.
    facts.containment()?.prepare();
    // At a terminal with no approver running, the question is asked here.
    let gateway = facts.gateway_asking_here()?;
    let cwd = args.cwd.as_ref().map(|c| facts.absolute(c));
    let mut exec_args = crate::args::exec_args(&args.command, &args.policy, cwd.as_deref())?;
    exec_args.env = args.env.into_iter().collect();
    let request = ExecRequest::from_args(&args.agent, &args.session, exec_args)?;
    let key = gateway::SessionKey {
        agent: args.agent,
        session: args.session,
    };
    let cancel = tokio_util::sync::CancellationToken::new();
    // A signal `warden exec` was started with ignored stays ignored (`crate::signals`).
    let (mut interrupt, mut terminate, mut hangup) = (
        Watched::interrupt()?,
        Watched::terminate()?,
        Watched::hangup()?,
    );
    let run = gateway.exec(&key, request, cancel.clone().cancelled_owned());
    tokio::pin!(run);
    // Every way `warden exec` is asked to stop ends the command's process tree first.
    let stopped = |why: &str| eprintln!("warden: {why}; the command was killed");
    let report = tokio::select! {
        report = &mut run => report,
        _ = interrupt.recv() => {
            // Cancelling kills the command's process tree; let the run report it.
            cancel.cancel();
            let _ = run.await;
            stopped("interrupted");
            return Ok(exit::INTERRUPTED);
        }
        _ = terminate.recv() => {
            cancel.cancel();
            let _ = run.await;
            stopped("terminated");
            return Ok(exit::TERMINATED);
        }
        _ = hangup.recv() => {
            cancel.cancel();
            let _ = run.await;
            stopped("hung up");
            return Ok(exit::HUNG_UP);
        }
        _ = stdout_reader_gone() => {
            // `warden exec -- yes | head`: nobody will read the result; stop like a
            // command killed by SIGPIPE would.
            cancel.cancel();
            let _ = run.await;
            return Ok(exit::STDOUT_CLOSED);
        }
    };
    let code = report.exit_code();
    if args.json {
        let mut value = gateway::report_json(&report);
        value["policy"] = serde_json::to_value(&report.policy)?;
        value["executed"] = serde_json::to_value(&report.executed)?;
        if let Outcome::Finished { output } = &report.outcome {
            value["combined"] = output.combined.clone().into();
            value["tail"] = output.tail.clone().into();
        }
        outln!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(code);
    }
    match &report.outcome {
        Outcome::Finished { output } => {
            // The command's bytes as it wrote them (what was kept of them).
            let _ = std::io::stdout().write_all(&output.stdout_raw());
            let _ = std::io::stderr().write_all(&output.stderr_raw());
            if output.timed_out {
                eprintln!("warden: timed out; the process tree was killed");
            }
            for connection in &output.egress {
                eprintln!("warden: network: {connection}");
            }
        }
        _ => eprintln!("warden: {}", report.summary()),
    }
    for notice in &report.notices {
        eprintln!("warden: note: {notice}");
    }
    Ok(code)
}
