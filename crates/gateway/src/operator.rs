//! What the operator of a running gateway sees of, and does to, the runs that outlive
//! their call (`warden runs`, over the gateway's operator socket): every agent's runs
//! with who started them, where and how far they are; a run's output from a cursor
//! (waiting a bounded time for more, to follow it); and kill — the whole tree, a pending
//! question withdrawn — after which the run's agent reads that the operator ended it.
//!
//! The answers are JSON values for the socket. Output is the run's bytes as text, exactly
//! as the agent reads it: escape sequences included. Whoever shows it on a terminal must
//! make it harmless first ([`printable`]).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::gateway::Gateway;
use crate::mcp::process_tool::{state_words, summary};
use crate::processes::Process;

/// Output in one answer, at most.
pub const READ_BYTES: usize = caps::DEFAULT_MAX_OUTPUT_BYTES;

/// The longest a read waits for new output.
pub const MAX_READ_WAIT: Duration = Duration::from_secs(30);

/// How long a kill waits for the run's end before answering.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// Why the operator cannot act on a run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OperatorError {
    /// No run has this id (now, or ended in the last 15 minutes).
    #[error("no run {0:?} is known to this gateway (`warden runs` lists them)")]
    Unknown(String),
    /// The cursor is past what the run has written.
    #[error("run {run}: {why}")]
    Cursor {
        /// The run.
        run: String,
        /// What the cursor was and how much was written.
        why: String,
    },
}

/// Every agent's runs, oldest first.
pub fn list(gateway: &Gateway) -> Value {
    let runs: Vec<Value> = gateway.processes().all().iter().map(|p| view(p)).collect();
    json!({"runs": runs})
}

/// Where a read starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum From {
    /// At this byte of the run's output (0: its oldest kept byte).
    Cursor(u64),
    /// This many bytes before what it has written so far.
    Tail(u64),
}

/// Run `id`'s output from `from`, waiting up to `wait` (at most [`MAX_READ_WAIT`]) for
/// some if there is none yet and it goes on.
pub async fn read(
    gateway: &Gateway,
    id: &str,
    from: From,
    wait: Duration,
) -> Result<Value, OperatorError> {
    let process = find(gateway, id)?;
    let cursor = match from {
        From::Cursor(cursor) => cursor,
        From::Tail(bytes) => process.output().written().saturating_sub(bytes),
    };
    if process.report().is_none() && !wait.is_zero() {
        tokio::select! {
            () = process.output().more_than(cursor) => {}
            _ = process.ended() => {}
            () = tokio::time::sleep(wait.min(MAX_READ_WAIT)) => {}
        }
    }
    // The result first: a run that ended has written all it will.
    let ended = process.report().is_some();
    let read = process
        .output()
        .since(cursor, READ_BYTES)
        .map_err(|e| OperatorError::Cursor {
            run: id.to_owned(),
            why: e.to_string(),
        })?;
    Ok(json!({
        "run": view(&process),
        "output": read.text,
        "from": read.from,
        "cursor": read.next,
        "dropped": read.dropped,
        "more": read.next < read.written,
        "ended": ended,
    }))
}

/// Kill run `id`: withdraw its question or kill its whole tree; answers once it ended
/// (at most 10 s).
pub async fn kill(gateway: &Gateway, id: &str) -> Result<Value, OperatorError> {
    let process = find(gateway, id)?;
    let was_running = process.report().is_none();
    process.kill_by_operator();
    tokio::select! {
        _ = process.ended() => {}
        () = tokio::time::sleep(KILL_WAIT) => {}
    }
    Ok(json!({"run": view(&process), "killed": was_running}))
}

fn find(gateway: &Gateway, id: &str) -> Result<Arc<Process>, OperatorError> {
    gateway
        .processes()
        .find(id)
        .ok_or_else(|| OperatorError::Unknown(id.to_owned()))
}

/// One run as the operator sees it: the agent's view, plus whose it is and where.
fn view(process: &Process) -> Value {
    let mut value = summary(process);
    value["agent"] = process.key.agent.clone().into();
    value["session"] = process.key.session.clone().into();
    value["host"] = process.host.to_string().into();
    value["status"] = state_words(process, process.report().as_deref()).into();
    value["awaitingApproval"] = process.awaiting_approval().is_some().into();
    value
}

/// `text` made safe to show on a terminal: escape sequences removed, and every other
/// control character but newline and tab, and every character that could hide or reorder
/// text (the approver's own set, `approvals::display::is_deceptive`), shown as `\u{…}` —
/// a run's output must not move the operator's cursor, retitle the window, or type into
/// the shell.
pub fn printable(text: &str) -> String {
    // The stripper drops tabs with the other controls; a tab is harmless and keeps
    // columns, so it is kept by stripping between tabs.
    text.split('\t')
        .map(strip_ansi_escapes::strip_str)
        .collect::<Vec<_>>()
        .join("\t")
        .chars()
        .map(|c| match c {
            '\n' | '\t' => c.to_string(),
            c if c.is_control() || approvals::display::is_deceptive(c) => {
                c.escape_unicode().to_string()
            }
            c => c.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_text_cannot_drive_the_operators_terminal() {
        let hostile = "ok\x1b]0;pwned\x07\x1b[2J\x1b[31mred\x1b[0m\r\x08\x1bP+q\x1b\\ \u{9b}31m \u{202E}txt.exe\nnext\tcol";
        let shown = printable(hostile);
        assert!(
            !shown
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t'),
            "{shown:?}"
        );
        assert!(!shown.contains('\u{202E}'), "{shown:?}");
        // Beyond bidi controls: soft hyphens, tag characters, line separators.
        for hidden in ['\u{AD}', '\u{E0041}', '\u{2028}'] {
            let shown = printable(&format!("a{hidden}b"));
            assert!(
                !shown.contains(hidden) && shown.starts_with('a'),
                "{shown:?}"
            );
        }
        assert!(
            shown.contains("red") && shown.contains("\nnext\tcol"),
            "{shown:?}"
        );
        assert!(
            !shown.contains("pwned"),
            "a title sequence is removed whole: {shown:?}"
        );
    }
}
