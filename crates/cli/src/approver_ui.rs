//! `warden approvals ui`: the terminal approver. It hosts the approval socket and shows
//! each prompt — argv, cwd and environment escaped so that what you see is what runs —
//! and takes allow once / allow always / deny from the terminal. Prompts that arrive
//! together are queued; a prompt whose requester gave up is withdrawn.
//!
//! "Allow always" stores the patterns the policy engine derives from the plan (never a
//! shell, interpreter or wrapper) in this host's approvals file.

use std::sync::Arc;
use std::time::Duration;

use approvals::display::render_prompt;
use approvals::ipc::protocol::{Answer, ExecPrompt, ExecReport, Prompt};
use approvals::ipc::{Approver, Limits, ServerConfig, bind_socket, serve};
use approvals::{OsRandom, Store, SystemClock};
use caps::{ExecOptions, LocalShell, Shell};
use policy::{Allowlist, CommandInput, EvalContext, derive_allow_always, evaluate};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};

use crate::exit;
use crate::host::HostFacts;

/// Arguments of `warden approvals ui`.
#[derive(Debug, clap::Args)]
pub struct UiArgs {}

enum Kind {
    Prompt(Prompt),
    Exec(ExecPrompt),
}

struct Pending {
    kind: Kind,
    reply: oneshot::Sender<(Answer, Option<ExecReport>)>,
}

/// Queues prompts for the terminal loop.
struct TerminalApprover {
    queue: mpsc::UnboundedSender<Pending>,
}

impl TerminalApprover {
    async fn submit(&self, kind: Kind) -> (Answer, Option<ExecReport>) {
        let (reply, answer) = oneshot::channel();
        if self.queue.send(Pending { kind, reply }).is_err() {
            return (Answer::Deny, None);
        }
        // If the terminal loop is gone, nobody approved: deny.
        answer.await.unwrap_or((Answer::Deny, None))
    }
}

#[async_trait::async_trait]
impl Approver for TerminalApprover {
    async fn decide(&self, prompt: &Prompt) -> Answer {
        self.submit(Kind::Prompt(prompt.clone())).await.0
    }

    async fn exec(&self, request: &ExecPrompt) -> (Answer, Option<ExecReport>) {
        self.submit(Kind::Exec(request.clone())).await
    }
}

/// Run the terminal approver until stdin closes or SIGINT/SIGTERM.
pub fn run(_args: UiArgs) -> i32 {
    exit::block_on(true, async { run_async().await.map(|()| 0) })
}

async fn run_async() -> anyhow::Result<()> {
    let facts = HostFacts::read()?;
    let store = facts.store();
    let (socket_path, token) = store.ensure_token(&OsRandom)?;
    let fs = facts.fs();
    let listener = bind_socket(fs.as_ref(), &socket_path, facts.uid).await?;
    let (queue, pending) = mpsc::unbounded_channel();
    let approver = Arc::new(TerminalApprover { queue });
    let config = ServerConfig {
        token,
        owner_uid: facts.uid,
        limits: Limits::default(),
    };
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        listener,
        config,
        approver,
        Arc::new(SystemClock),
        Arc::new(OsRandom),
        async {
            let _ = stop_rx.await;
        },
    ));
    let mut out = tokio::io::stdout();
    out.write_all(format!("warden approver listening on {}\n", socket_path.display()).as_bytes())
        .await?;
    out.flush().await?;
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        result = terminal_loop(pending, &store, &facts) => result?,
        _ = tokio::signal::ctrl_c() => {}
        _ = sigterm.recv() => {}
    }
    let _ = stop_tx.send(());
    let _ = server.await;
    let _ = caps::Fs::remove(fs.as_ref(), &socket_path);
    Ok(())
}

fn parse_answer(line: &str) -> Option<Answer> {
    match line.trim().to_ascii_lowercase().as_str() {
        "o" | "once" | "y" | "yes" => Some(Answer::AllowOnce),
        "a" | "always" => Some(Answer::AllowAlways),
        "d" | "deny" | "n" | "no" => Some(Answer::Deny),
        _ => None,
    }
}

/// The patterns "allow always" would store for this plan, derived by the policy engine.
fn patterns_for(prompt: &Prompt, facts: &HostFacts) -> Vec<String> {
    // A write permission is not a policy decision about the command: nothing to store.
    if prompt.is_write_permission() {
        return Vec::new();
    }
    let fs = facts.fs();
    let allowlist = Allowlist::default();
    let cwd = std::path::PathBuf::from(&prompt.plan.cwd);
    let ctx = EvalContext {
        fs: fs.as_ref(),
        cwd: &cwd,
        trusted_path: &facts.trusted_path,
        allowlist: &allowlist,
        cache: None,
    };
    derive_allow_always(&evaluate(CommandInput::Argv(&prompt.plan.argv), &ctx)).patterns
}

async fn terminal_loop(
    mut pending: mpsc::UnboundedReceiver<Pending>,
    store: &Store,
    facts: &HostFacts,
) -> anyhow::Result<()> {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut out = tokio::io::stdout();
    loop {
        // While idle, still watch stdin: closing it ends the approver, and stray input
        // typed before a prompt appears is discarded rather than taken as an answer.
        let mut item = tokio::select! {
            item = pending.recv() => match item {
                Some(item) => item,
                None => return Ok(()),
            },
            line = lines.next_line() => match line? {
                Some(_) => {
                    out.write_all(b"(no request is pending; input ignored)\n").await?;
                    continue;
                }
                None => {
                    out.write_all(b"stdin closed: nobody can answer prompts here; the approver stops\n").await?;
                    return Ok(());
                }
            },
        };
        let prompt = match &item.kind {
            Kind::Prompt(p) => p.clone(),
            Kind::Exec(e) => e.prompt.clone(),
        };
        if item.reply.is_closed() {
            out.write_all(format!("(request {} was withdrawn)\n", prompt.id).as_bytes())
                .await?;
            continue;
        }
        let patterns = patterns_for(&prompt, facts);
        out.write_all(render_prompt(&prompt, &patterns).as_bytes())
            .await?;
        let answer = loop {
            out.write_all(b"allow [o]nce, allow [a]lways, [d]eny? ")
                .await?;
            out.flush().await?;
            let line = tokio::select! {
                line = lines.next_line() => line?,
                _ = item.reply.closed() => {
                    out.write_all(b"\n(the requester gave up; withdrawn)\n").await?;
                    break None;
                }
            };
            let Some(line) = line else {
                // stdin closed: nobody can answer any more. Dropping the reply tells the
                // requester at once, so it applies askFallback without waiting.
                out.write_all(b"\nstdin closed: this prompt goes unanswered (the requester applies askFallback); the approver stops\n").await?;
                return Ok(());
            };
            if let Some(a) = parse_answer(&line) {
                break Some(a);
            }
        };
        let Some(mut answer) = answer else { continue };
        if answer == Answer::AllowAlways {
            if patterns.is_empty() {
                out.write_all(b"nothing can be stored for this command; allowing once\n")
                    .await?;
                answer = Answer::AllowOnce;
            } else {
                match store.add_patterns(&prompt.plan.agent, &patterns, &[], true) {
                    Ok(u) => {
                        out.write_all(
                            format!("stored {} for {}\n", u.value.join(", "), prompt.plan.agent)
                                .as_bytes(),
                        )
                        .await?
                    }
                    Err(e) => {
                        out.write_all(
                            format!("could not store the patterns ({e}); allowing once\n")
                                .as_bytes(),
                        )
                        .await?;
                        answer = Answer::AllowOnce;
                    }
                }
            }
        }
        let report = match (&item.kind, answer) {
            (Kind::Exec(e), Answer::AllowOnce | Answer::AllowAlways) => Some(run_here(e).await),
            _ => None,
        };
        out.write_all(
            format!(
                "→ {}\n\n",
                serde_json::to_value(answer)?.as_str().unwrap_or("?")
            )
            .as_bytes(),
        )
        .await?;
        let _ = item.reply.send((answer, report));
    }
}

/// Run an approved exec request in the approver's own context.
async fn run_here(request: &ExecPrompt) -> ExecReport {
    let plan = &request.prompt.plan;
    let mut options = ExecOptions::new(&plan.cwd, Duration::from_millis(request.timeout_ms.max(1)));
    options.env = plan.env.clone();
    let argv = if plan.program.is_empty() {
        plan.argv.clone()
    } else {
        let mut argv = plan.argv.clone();
        argv[0] = plan.program.clone();
        argv
    };
    match LocalShell::new().exec(&argv, &options).await {
        Ok(out) => ExecReport {
            exit_code: if out.timed_out {
                124
            } else {
                out.status.shell_code()
            },
            stdout: out.stdout,
            stderr: out.stderr,
            truncated: out.truncated,
            timed_out: out.timed_out,
            duration_ms: out.duration.as_millis() as u64,
            error: None,
        },
        Err(e) => ExecReport {
            exit_code: e.exit_code(),
            stdout: String::new(),
            stderr: String::new(),
            truncated: false,
            timed_out: false,
            duration_ms: 0,
            error: Some(e.to_string()),
        },
    }
}
