//! `warden approvals ui`: the terminal approver. It hosts the approval socket and shows
//! each prompt — argv, cwd and environment escaped so that what you see is what runs —
//! and takes allow once / allow always / deny from the terminal: one key press on a
//! terminal, a line from a pipe. Prompts that arrive together are queued; a prompt whose
//! requester gave up is withdrawn. An exec request (`tools.exec.run_in_approver`) says
//! before the human decides that this approver will run the command itself.
//!
//! `--web` serves the same decisions, and the operator console, on a local page instead
//! (`crate::web`).
//!
//! "Allow always" stores exactly the rules the prompt shows (the runner derived them
//! from the plan — never a shell, interpreter or wrapper); the runner that asked stores
//! them in its host's approvals file. When the prompt offers several scopes (exactly
//! these arguments, the program with its subcommand, the program alone), `a` takes the
//! preselected one and another is chosen by its number: the key `1`, `2`… on a
//! terminal, the line `a1`, `a2`… from a pipe.

use std::sync::Arc;

use approvals::display::{escape, render_prompt};
use approvals::ipc::Approver;
use approvals::ipc::protocol::{Answer, ExecPrompt, ExecReport, Prompt, PromptKind};
use caps::LocalShell;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot};

use crate::approver_run::{run_here, summary};
use crate::approver_socket::ApproverSocket;
use crate::exit;
use crate::host::HostFacts;
use crate::term_input::Input;

/// Arguments of `warden approvals ui`.
#[derive(Debug, clap::Args)]
pub struct UiArgs {
    /// Answer on a local web page (with the operator console) instead of this terminal.
    #[arg(long)]
    pub web: bool,
    #[command(flatten)]
    pub web_options: crate::web::WebArgs,
}

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
        let queued = self.queue.send(Pending { kind, reply }).is_ok();
        match answer.await {
            Ok(reply) if queued => reply,
            // The terminal loop is gone: nobody answered, and nobody will. This request
            // stays unanswered; the stopping server closes its connection, so the
            // requester applies askFallback (an answer would claim a human decided).
            _ => std::future::pending().await,
        }
    }
}

#[async_trait::async_trait]
impl Approver for TerminalApprover {
    async fn decide(&self, prompt: &Prompt) -> (Answer, Option<usize>) {
        let (answer, choice, _) = self.submit(Kind::Prompt(prompt.clone())).await;
        (answer, choice)
    }

    async fn exec(&self, request: &ExecPrompt) -> (Answer, Option<usize>, Option<ExecReport>) {
        self.submit(Kind::Exec(request.clone())).await
    }
}

/// Run the terminal approver until stdin closes or SIGINT/SIGTERM (or, with `--web`,
/// the web approver until SIGINT/SIGTERM).
pub fn run(args: UiArgs) -> i32 {
    if args.web {
        return crate::web::run(args.web_options);
    }
    exit::block_on(true, async { run_async().await.map(|()| 0) })
}

async fn run_async() -> anyhow::Result<()> {
    let facts = HostFacts::read()?;
    // Requests run here are held like the gateway's: nothing they start outlives them.
    let shell = LocalShell::contained(facts.containment()?);
    let socket = ApproverSocket::bind(&facts).await?;
    let listening = format!("warden approver listening on {}\n", socket.path().display());
    let (queue, pending) = mpsc::unbounded_channel();
    let serving = socket.serve(Arc::new(TerminalApprover { queue }));
    let mut out = tokio::io::stdout();
    out.write_all(listening.as_bytes()).await?;
    out.flush().await?;
    let ended = tokio::select! {
        result = terminal_loop(pending, &shell) => result,
        () = exit::shutdown_signal() => Ok(()),
    };
    serving.stop().await;
    ended
}

/// An answer typed at the prompt: `o`, `a` (the preselected scope), `aN` (scope N of
/// `options`, counted from 1), `d`; with `single_key` (a terminal), the key `N` alone
/// is `aN`.
pub(crate) fn parse_answer(
    input: &str,
    options: usize,
    single_key: bool,
) -> Option<(Answer, Option<usize>)> {
    let text = input.trim().to_ascii_lowercase();
    match text.as_str() {
        "o" | "once" | "y" | "yes" => return Some((Answer::AllowOnce, None)),
        "a" | "always" => return Some((Answer::AllowAlways, None)),
        "d" | "deny" | "n" | "no" => return Some((Answer::Deny, None)),
        _ => {}
    }
    let number = match text
        .strip_prefix("always")
        .or_else(|| text.strip_prefix('a'))
    {
        Some(rest) => rest.trim(),
        None if single_key => text.as_str(),
        None => return None,
    };
    let n: usize = number.parse().ok()?;
    // Lazily: `n - 1` only once `n` is known to be at least 1 (`a0` is no answer).
    (1..=options)
        .contains(&n)
        .then(|| (Answer::AllowAlways, Some(n - 1)))
}

/// The question asked for a prompt with `options` allow-always scopes; an exec request
/// (`runs_here`) says that it runs here.
pub(crate) fn question(options: usize, single_key: bool, runs_here: bool) -> String {
    let always = match (options, single_key) {
        (0 | 1, _) => "allow [a]lways".to_owned(),
        (n, true) => format!("allow [a]lways (1–{}: another scope)", n.min(9)),
        (n, false) => format!("allow [a]lways (a1–a{n}: another scope)"),
    };
    let here = if runs_here { "run it HERE: " } else { "" };
    format!("{here}allow [o]nce, {always}, [d]eny? ")
}

/// For "allow always": what will be stored, in words — or, when the prompt offers nothing
/// to store, `answer` becomes "allow once" and the words say so. `None` for other answers.
pub(crate) fn confirm_always(
    prompt: &Prompt,
    answer: &mut Answer,
    choice: Option<usize>,
) -> Option<String> {
    if *answer != Answer::AllowAlways {
        return None;
    }
    Some(match prompt.always_stores(choice) {
        Ok(rules) if !rules.is_empty() => {
            let shown: Vec<String> = rules.iter().map(|r| escape(r)).collect();
            format!(
                "{} will be stored for {}\n",
                shown.join(", "),
                escape(&prompt.agent)
            )
        }
        _ => {
            *answer = Answer::AllowOnce;
            "nothing can be stored for this request; allowing once\n".to_owned()
        }
    })
}

async fn terminal_loop(
    mut pending: mpsc::UnboundedReceiver<Pending>,
    shell: &LocalShell,
) -> anyhow::Result<()> {
    let mut input = Input::open();
    let mut out = tokio::io::stdout();
    if input.single_key() {
        out.write_all(
            b"(answers are single keys: o, a or d, and 1-9 for another allow-always scope; no Enter needed)\n",
        )
        .await?;
    }
    loop {
        // While idle, still watch stdin: closing it ends the approver, and stray input
        // typed before a prompt appears is discarded rather than taken as an answer.
        let mut item = tokio::select! {
            item = pending.recv() => match item {
                Some(item) => item,
                None => return Ok(()),
            },
            typed = input.next() => match typed? {
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
        let (prompt, runs_here) = match &item.kind {
            Kind::Prompt(p) => (p.clone(), false),
            Kind::Exec(e) => (e.prompt.clone(), true),
        };
        if item.reply.is_closed() {
            out.write_all(format!("(request {} was withdrawn)\n", prompt.id).as_bytes())
                .await?;
            continue;
        }
        if runs_here {
            out.write_all(
                format!(
                    "!! if you allow it, {} runs this command ITSELF, with its own permissions, and returns the output\n",
                    crate::approver_run::runner_identity()
                )
                .as_bytes(),
            )
            .await?;
        }
        out.write_all(render_prompt(&prompt).as_bytes()).await?;
        let options = match &prompt.kind {
            PromptKind::Command { allow_always, .. } => allow_always.len(),
            PromptKind::Write { .. } => 0,
            PromptKind::Connection { store, .. } => usize::from(store.is_some()),
        };
        let question = question(options, input.single_key(), runs_here);
        let answer = loop {
            out.write_all(question.as_bytes()).await?;
            out.flush().await?;
            let typed = tokio::select! {
                typed = input.next() => typed?,
                _ = item.reply.closed() => {
                    out.write_all(b"\n(the requester gave up; withdrawn)\n").await?;
                    break None;
                }
            };
            let Some(typed) = typed else {
                // stdin closed: nobody can answer any more. Dropping the reply tells the
                // requester at once, so it applies askFallback without waiting.
                out.write_all(b"\nstdin closed: this prompt goes unanswered (the requester applies askFallback); the approver stops\n").await?;
                return Ok(());
            };
            if let Some(a) = parse_answer(&typed, options, input.single_key()) {
                if input.single_key() {
                    // No echo in key mode: show what was taken.
                    out.write_all(format!("{}\n", typed.trim()).as_bytes())
                        .await?;
                }
                break Some(a);
            }
            if input.single_key() {
                out.write_all(b"\n").await?;
            }
        };
        let Some((mut answer, choice)) = answer else {
            continue;
        };
        if let Some(said) = confirm_always(&prompt, &mut answer, choice) {
            out.write_all(said.as_bytes()).await?;
        }
        let report = match (&item.kind, answer) {
            (Kind::Exec(e), Answer::AllowOnce | Answer::AllowAlways) => {
                out.write_all(b"running it here...\n").await?;
                out.flush().await?;
                let report = run_here(e, shell).await;
                out.write_all(format!("ran here: {}\n", summary(&report)).as_bytes())
                    .await?;
                Some(report)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_lines_choose_the_scope() {
        // A line from a pipe: aN chooses, a bare number does not.
        assert_eq!(
            parse_answer("a\n", 3, false),
            Some((Answer::AllowAlways, None))
        );
        assert_eq!(
            parse_answer("a2\n", 3, false),
            Some((Answer::AllowAlways, Some(1)))
        );
        assert_eq!(
            parse_answer("always 3", 3, false),
            Some((Answer::AllowAlways, Some(2)))
        );
        assert_eq!(parse_answer("a7\n", 3, false), None);
        assert_eq!(parse_answer("2\n", 3, false), None);
        assert_eq!(parse_answer("a0\n", 3, false), None);
        assert_eq!(parse_answer("d\n", 3, false), Some((Answer::Deny, None)));
        // One key on a terminal: the digit alone.
        assert_eq!(
            parse_answer("1", 3, true),
            Some((Answer::AllowAlways, Some(0)))
        );
        assert_eq!(parse_answer("4", 3, true), None);
        assert_eq!(parse_answer("0", 3, true), None);
        assert_eq!(parse_answer("1", 0, true), None);
        assert_eq!(parse_answer("o", 0, true), Some((Answer::AllowOnce, None)));
    }

    #[test]
    fn the_question_names_the_scope_keys() {
        assert_eq!(
            question(3, true, false),
            "allow [o]nce, allow [a]lways (1–3: another scope), [d]eny? "
        );
        assert_eq!(
            question(3, false, false),
            "allow [o]nce, allow [a]lways (a1–a3: another scope), [d]eny? "
        );
        assert_eq!(
            question(1, true, true),
            "run it HERE: allow [o]nce, allow [a]lways, [d]eny? "
        );
    }
}
