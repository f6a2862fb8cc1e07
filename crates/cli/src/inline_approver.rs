//! `warden exec` at a terminal with no approver running: the question is asked right
//! there, as `warden approvals ui` would ask it — the same prompt (argv, cwd and
//! environment escaped, what "allow always" would store) and the same keys — on stderr,
//! answered with one key press. A running approver is always asked first; a request
//! the approver would run itself (`tools.exec.run_in_approver`) is never answered here;
//! and without a terminal on both stdin and stderr nothing changes (no approver →
//! askFallback), so scripts and agents see what they always saw.

use std::io::{IsTerminal as _, Write as _};
use std::time::Duration;

use approvals::ApprovalsFile;
use approvals::display::{escape, render_prompt};
use approvals::ipc::AskOutcome;
use approvals::ipc::protocol::{Answer, Prompt, PromptKind, Request, Response};
use runner::{Approvals, SocketApprovals};

use crate::approver_ui::{confirm_always, parse_answer, question};
use crate::term_input::Input;

/// Asks the host's approver, and the human at this terminal when there is none.
pub struct InlineApprovals {
    socket: SocketApprovals,
    timeout: Duration,
}

impl InlineApprovals {
    /// Whether someone could answer here: stdin and stderr are both terminals.
    pub fn possible() -> bool {
        std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
    }

    /// `socket` first; this terminal when it reaches nobody (see [`Self::possible`]).
    pub fn new(socket: SocketApprovals, timeout: Duration) -> Self {
        InlineApprovals { socket, timeout }
    }
}

#[async_trait::async_trait]
impl Approvals for InlineApprovals {
    async fn ask(&self, request: &Request, host_file: Option<&ApprovalsFile>) -> AskOutcome {
        match (self.socket.ask(request, host_file).await, request) {
            (AskOutcome::NoApprover(why), Request::Prompt(prompt)) => {
                ask_here(prompt, &why, self.timeout).await
            }
            (outcome, _) => outcome,
        }
    }

    fn who(&self) -> &'static str {
        "the approver on this host's socket, else the person at warden exec's terminal"
    }
}

fn say(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}

/// Show `prompt` and take the human's answer (within `timeout`).
async fn ask_here(prompt: &Prompt, why: &str, timeout: Duration) -> AskOutcome {
    say(&format!(
        "warden: {} — asking here instead (`warden approvals ui` in another terminal would answer)\n",
        escape(why)
    ));
    say(&render_prompt(prompt));
    let options = match &prompt.kind {
        PromptKind::Command { allow_always, .. } => allow_always.len(),
        PromptKind::Write { .. } => 0,
        PromptKind::Connection { store, .. } => usize::from(store.is_some()),
    };
    let mut input = Input::open();
    let asked = question(options, input.single_key(), false);
    let deadline = tokio::time::Instant::now() + timeout;
    let (mut answer, choice) = loop {
        say(&asked);
        let typed = tokio::select! {
            typed = input.next() => typed,
            () = tokio::time::sleep_until(deadline) => {
                say("\nwarden: nobody answered in time\n");
                return AskOutcome::TimedOut;
            }
        };
        let typed = match typed {
            Ok(Some(typed)) => typed,
            Ok(None) | Err(_) => {
                say("\n");
                return AskOutcome::NoApprover("the terminal closed before an answer".into());
            }
        };
        if let Some(answer) = parse_answer(&typed, options, input.single_key()) {
            if input.single_key() {
                say(&format!("{}\n", typed.trim()));
            }
            break answer;
        }
        if input.single_key() {
            say("\n");
        }
    };
    if let Some(said) = confirm_always(prompt, &mut answer, choice) {
        say(&said);
    }
    AskOutcome::Answered(Response {
        id: prompt.id.clone(),
        digest: prompt.digest.clone(),
        answer,
        allow_always_option: choice.filter(|_| answer == Answer::AllowAlways),
        report: None,
    })
}
