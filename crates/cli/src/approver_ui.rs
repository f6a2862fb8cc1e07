//! `warden approvals ui`: the terminal approver. It hosts the approval socket and shows
//! each prompt — argv, cwd and environment escaped so that what you see is what runs —
//! and takes allow once / allow always / deny from the terminal. Prompts that arrive
//! together are queued; a prompt whose requester gave up is withdrawn.
//!
//! "Allow always" stores exactly the rules the prompt shows (the runner derived them
//! from the plan — never a shell, interpreter or wrapper); the runner that asked stores
//! them in its host's approvals file. When the prompt offers several scopes (exactly
//! these arguments, the program with its subcommand, the program alone), `a` takes the
//! preselected one and `a1`, `a2`… another, narrower or wider.

use std::sync::Arc;
use std::time::Duration;

use approvals::display::render_prompt;
use approvals::ipc::protocol::{Answer, ExecPrompt, ExecReport, Prompt, PromptKind};
use approvals::ipc::{Approver, Limits, ServerConfig, bind_socket, serve};
use approvals::{OsRandom, SystemClock};
use caps::LocalShell;
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

/// The human's answer, the allow-always option chosen (`None`: the preselected one),
/// and the report of a run done here.
type Reply = (Answer, Option<usize>, Option<ExecReport>);

struct Pending {
    kind: Kind,
    reply: oneshot::Sender<Reply>,
}

/// Queues prompts for the terminal loop.
struct TerminalApprover {
    queue: mpsc::UnboundedSender<Pending>,
}

impl TerminalApprover {
    async fn submit(&self, kind: Kind) -> Reply {
        let (reply, answer) = oneshot::channel();
        if self.queue.send(Pending { kind, reply }).is_err() {
            return (Answer::Deny, None, None);
        }
        // If the terminal loop is gone, nobody approved: deny.
        answer.await.unwrap_or((Answer::Deny, None, None))
    }
}

#[async_trait::async_trait]
impl Approver for TerminalApprover {
    async fn decide(&self, prompt: &Prompt) -> Answer {
        self.decide_with_choice(prompt).await.0
    }

    async fn decide_with_choice(&self, prompt: &Prompt) -> (Answer, Option<usize>) {
        let (answer, choice, _) = self.submit(Kind::Prompt(prompt.clone())).await;
        (answer, choice)
    }

    async fn exec(&self, request: &ExecPrompt) -> (Answer, Option<ExecReport>) {
        let (answer, _, report) = self.submit(Kind::Exec(request.clone())).await;
        (answer, report)
    }
}

/// Run the terminal approver until stdin closes or SIGINT/SIGTERM.
pub fn run(_args: UiArgs) -> i32 {
    exit::block_on(true, async { run_async().await.map(|()| 0) })
}

async fn run_async() -> anyhow::Result<()> {
    let facts = HostFacts::read()?;
    // Requests run here are held like the gateway's: nothing they start outlives them.
    let shell = LocalShell::contained(facts.containment()?);
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
        result = terminal_loop(pending, &shell) => result?,
        _ = tokio::signal::ctrl_c() => {}
        _ = sigterm.recv() => {}
    }
    let _ = stop_tx.send(());
    let _ = server.await;
    let _ = caps::Fs::remove(fs.as_ref(), &socket_path);
    Ok(())
}

/// An answer typed at the prompt: `o`, `a` (the preselected scope), `aN` (scope N of
/// `options`, counted from 1), `d`.
fn parse_answer(line: &str, options: usize) -> Option<(Answer, Option<usize>)> {
    let text = line.trim().to_ascii_lowercase();
    match text.as_str() {
        "o" | "once" | "y" | "yes" => return Some((Answer::AllowOnce, None)),
        "a" | "always" => return Some((Answer::AllowAlways, None)),
        "d" | "deny" | "n" | "no" => return Some((Answer::Deny, None)),
        _ => {}
    }
    let n: usize = text
        .strip_prefix("always")
        .or_else(|| text.strip_prefix('a'))?
        .trim()
        .parse()
        .ok()?;
    (1..=options)
        .contains(&n)
        .then_some((Answer::AllowAlways, Some(n - 1)))
}

async fn terminal_loop(
    mut pending: mpsc::UnboundedReceiver<Pending>,
    shell: &LocalShell,
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
        out.write_all(render_prompt(&prompt).as_bytes()).await?;
        let options = match &prompt.kind {
            PromptKind::Command { allow_always, .. } => allow_always.len(),
            PromptKind::Write { .. } => 0,
        };
        let question = if options > 1 {
            format!("allow [o]nce, allow [a]lways (a1–a{options}: another scope), [d]eny? ")
        } else {
            "allow [o]nce, allow [a]lways, [d]eny? ".to_owned()
        };
        let answer = loop {
            out.write_all(question.as_bytes()).await?;
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
            if let Some(a) = parse_answer(&line, options) {
                break Some(a);
            }
        };
        let Some((mut answer, choice)) = answer else {
            continue;
        };
        if answer == Answer::AllowAlways {
            match prompt.allow_always_rules(choice) {
                Ok(rules) if !rules.is_empty() => {
                    let shown: Vec<String> = rules
                        .iter()
                        .map(|r| approvals::display::escape(&r.describe()))
                        .collect();
                    out.write_all(
                        format!(
                            "{} will be stored for {}\n",
                            shown.join(", "),
                            approvals::display::escape(&prompt.agent)
                        )
                        .as_bytes(),
                    )
                    .await?
                }
                _ => {
                    out.write_all(b"nothing can be stored for this request; allowing once\n")
                        .await?;
                    answer = Answer::AllowOnce;
                }
            }
        }
        let report = match (&item.kind, answer) {
            (Kind::Exec(e), Answer::AllowOnce | Answer::AllowAlways) => {
                Some(run_here(e, shell).await)
            }
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
        let choice = choice.filter(|_| answer == Answer::AllowAlways);
        let _ = item.reply.send((answer, choice, report));
    }
}

/// Run an approved exec request in the approver's own context: exactly its plan.
async fn run_here(request: &ExecPrompt, shell: &LocalShell) -> ExecReport {
    let not_run = |message: String| ExecReport {
        exit_code: runner::EXIT_WARDEN_ERROR,
        stdout: String::new(),
        stderr: String::new(),
        truncated: false,
        timed_out: false,
        duration_ms: 0,
        error: Some(message),
    };
    let Some(plan) = request.prompt.plan() else {
        return not_run("the request carries no plan to run".into());
    };
    let timeout = Duration::from_millis(request.timeout_ms.max(1));
    let result = runner::launch(shell, plan, timeout, Default::default(), None).await;
    match result {
        Ok(out) => ExecReport {
            exit_code: out.exit_code(),
            stdout: out.stdout,
            stderr: out.stderr,
            truncated: out.truncated,
            timed_out: out.timed_out,
            duration_ms: out.duration.as_millis() as u64,
            error: None,
        },
        Err(e) => ExecReport {
            error: Some(e.to_string()),
            exit_code: e.exit_code(),
            ..not_run(String::new())
        },
    }
}
