//! Lifecycle events of a run (`exec.started`, `exec.finished`, `exec.cancelled`,
//! `exec.denied`) and the
//! sink they go to. The gateway maps them to the session that dispatched the run.

use policy::DenyReason;
use serde::Serialize;

use crate::report::RunHost;

/// One lifecycle event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "event")]
pub enum ExecEvent {
    /// `exec.started`: the command is about to run.
    #[serde(rename = "exec.started")]
    Started {
        /// The run id.
        run_id: String,
        /// Where it runs.
        host: RunHost,
    },
    /// `exec.finished`: it ran (or was stopped).
    #[serde(rename = "exec.finished")]
    Finished {
        /// The run id.
        run_id: String,
        /// Where it ran.
        host: RunHost,
        /// Exit code, or 128+N for signal N.
        code: i32,
        /// The signal that killed it, if one did.
        signal: Option<i32>,
        /// It hit its timeout.
        timed_out: bool,
        /// It was cancelled.
        cancelled: bool,
        /// The last 20,000 bytes of output.
        tail: String,
    },
    /// `exec.cancelled`: its request was cancelled before it started (while a human was
    /// asked); nothing ran.
    #[serde(rename = "exec.cancelled")]
    Cancelled {
        /// The run id.
        run_id: String,
        /// Where it would have run.
        host: RunHost,
    },
    /// `exec.denied`: it did not run.
    #[serde(rename = "exec.denied")]
    Denied {
        /// The run id.
        run_id: String,
        /// Where it would have run.
        host: RunHost,
        /// The machine-readable reason.
        reason: DenyReason,
    },
}

impl ExecEvent {
    /// The run this event belongs to.
    pub fn run_id(&self) -> &str {
        match self {
            ExecEvent::Started { run_id, .. }
            | ExecEvent::Finished { run_id, .. }
            | ExecEvent::Cancelled { run_id, .. }
            | ExecEvent::Denied { run_id, .. } => run_id,
        }
    }

    /// The event's text without any output: for a run whose result the agent already
    /// received (product spec §8: one line, nothing repeated).
    pub fn text_without_output(&self) -> String {
        match self {
            ExecEvent::Finished { tail, .. } if !tail.is_empty() => {
                let mut quiet = self.clone();
                if let ExecEvent::Finished { tail, .. } = &mut quiet {
                    tail.clear();
                }
                quiet.text()
            }
            _ => self.text(),
        }
    }

    /// The system-event text shown to the agent (product spec §8).
    pub fn text(&self) -> String {
        match self {
            ExecEvent::Started { run_id, host } => {
                format!("Exec started (node={host}, id={run_id})")
            }
            ExecEvent::Finished {
                run_id,
                host,
                code,
                tail,
                cancelled,
                ..
            } => {
                let what = if *cancelled { ", cancelled" } else { "" };
                let mut text =
                    format!("Exec finished (node={host}, id={run_id}, code={code}{what})");
                if !tail.is_empty() {
                    text.push('\n');
                    text.push_str(tail);
                }
                text
            }
            ExecEvent::Cancelled { run_id, host } => {
                format!("Exec cancelled before it started (node={host}, id={run_id}); nothing ran")
            }
            ExecEvent::Denied {
                run_id,
                host,
                reason,
            } => format!("Exec denied (node={host}, id={run_id}, {reason})"),
        }
    }
}

/// Where a runner sends its events.
pub trait EventSink: Send + Sync {
    /// Record one event.
    fn emit(&self, event: ExecEvent);

    /// Run `run_id` now waits for a human's answer (it is not a session event: nothing
    /// is said to the agent; a caller that reports a run's state, such as an MCP task,
    /// says "awaiting operator approval" from here until the next event).
    fn awaiting_approval(&self, run_id: &str) {
        let _ = run_id;
    }

    /// Run `run_id`, already running, now waits for a human's answer about a connection
    /// to `to` (`host:port`, through Warden's egress proxy); `None`: that question is
    /// settled. Not a session event either: a caller that reports a run's state says so
    /// while it lasts.
    fn connection_question(&self, run_id: &str, to: Option<&str>) {
        let _ = (run_id, to);
    }
}

/// Discards events.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoEvents;

impl EventSink for NoEvents {
    fn emit(&self, _event: ExecEvent) {}
}

/// Collects events in memory (for tests and the CLI).
#[derive(Debug, Default)]
pub struct CollectEvents(pub std::sync::Mutex<Vec<ExecEvent>>);

impl EventSink for CollectEvents {
    fn emit(&self, event: ExecEvent) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(event);
    }
}

impl CollectEvents {
    /// Everything collected so far.
    pub fn events(&self) -> Vec<ExecEvent> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
