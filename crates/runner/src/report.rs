//! The one report of a run — where it ran, the policy it was decided under, the final
//! decision, what was executed and how it ended — and the one mapping from a report to
//! an exit code, used by `warden exec`, the MCP tools and the approver alike.

use caps::ExecOutput;
use policy::{Decision, DenyReason, ResolvedPolicy};
use serde::Serialize;

/// Exit code of a command that was denied (policy or a human): sysexits' `EX_NOPERM`.
pub const EXIT_DENIED: i32 = 77;
/// Exit code when a human had to be asked, nobody answered and the fallback denied:
/// sysexits' `EX_TEMPFAIL` (start an approver and try again).
pub const EXIT_NO_APPROVER: i32 = 75;
/// Exit code of a cancelled run (128 + SIGINT), after its process tree was killed.
pub const EXIT_CANCELLED: i32 = 130;
/// Exit code when Warden itself could not carry out the request.
pub const EXIT_WARDEN_ERROR: i32 = 125;

/// Where a command ran (or would have run).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RunHost {
    /// The OS sandbox on this machine.
    Sandbox,
    /// This machine, directly.
    Gateway,
    /// `host = sandbox` served unconfined by the operator's time-limited direct mode.
    Direct,
    /// A paired node.
    Node(String),
}

impl RunHost {
    /// The host as written in events, plans and results.
    pub fn as_str(&self) -> &str {
        match self {
            RunHost::Sandbox => "sandbox",
            RunHost::Gateway => "gateway",
            RunHost::Direct => "direct",
            RunHost::Node(id) => id,
        }
    }
}

impl std::fmt::Display for RunHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for RunHost {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// How a run ended.
// One per run, moved a few times and never stored in bulk: boxing the finished output
// would buy nothing but an allocation and noise at every match.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Outcome {
    /// The command ran (whatever its exit code).
    Finished {
        /// Its typed result.
        output: ExecOutput,
    },
    /// Policy, a route or a human said no; nothing ran (or a read-only run's result was
    /// discarded).
    Denied {
        /// The machine-readable reason.
        reason: DenyReason,
        /// The rule that produced it.
        rule: String,
    },
    /// The request could not be carried out (bad input, program not found...).
    Error {
        /// What went wrong.
        message: String,
        /// The exit code reported for it (125, 126, 127).
        exit_code: i32,
    },
    /// The run was cancelled: while a human was asked (nothing ran), or while it ran
    /// (its whole process tree was killed).
    Cancelled {
        /// True if the command had started.
        started: bool,
    },
}

/// Exactly what was executed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Executed {
    /// The argv given to the OS (the resolved file first; for a script the shell, `-c`
    /// and the text).
    pub argv: Vec<String>,
    /// True if it was the rebuilt (allowlisted) form rather than the command as written.
    pub rebuilt: bool,
    /// True if it ran with the writable profile after a human allowed writes.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub writable_retry: bool,
    /// True if the approver ran it, in its own context (`tools.exec.run_in_approver`),
    /// and the output is the approver's report of that run.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub in_approver: bool,
}

/// Everything about one run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RunReport {
    /// The run id.
    pub run_id: String,
    /// Where it ran.
    pub host: RunHost,
    /// The resolved policy (each value with its source).
    pub policy: ResolvedPolicy,
    /// The final decision.
    pub decision: Decision,
    /// What was executed, if anything.
    pub executed: Option<Executed>,
    /// How it ended.
    pub outcome: Outcome,
    /// What stands on this host that whoever reads the result should know, though it did
    /// not change this run: a config edit not in force (the last good one is), the record
    /// not being written. Empty when all is well.
    pub notices: Vec<String>,
}

impl RunReport {
    /// The exit code a caller reports: the command's own (124 timed out, 128+N for a
    /// signal), [`EXIT_DENIED`], [`EXIT_NO_APPROVER`] when nobody answered a human prompt
    /// and the fallback denied, [`EXIT_CANCELLED`], or the error's own code.
    pub fn exit_code(&self) -> i32 {
        match &self.outcome {
            Outcome::Finished { output } => output.exit_code(),
            Outcome::Denied { reason, .. } => {
                let unanswered = reason.is_unanswered()
                    || matches!(&self.decision, Decision::Deny { reason, .. } if reason.is_unanswered());
                if unanswered {
                    EXIT_NO_APPROVER
                } else {
                    EXIT_DENIED
                }
            }
            Outcome::Error { exit_code, .. } => *exit_code,
            Outcome::Cancelled { .. } => EXIT_CANCELLED,
        }
    }

    /// What happened, in words, for results that are read by people and by models.
    pub fn summary(&self) -> String {
        match &self.outcome {
            Outcome::Finished { output } if output.timed_out => {
                "timed out; the whole process tree was killed".to_owned()
            }
            Outcome::Finished { output } => format!("exit {}", output.status),
            Outcome::Denied { reason, rule } => format!("denied ({reason}): {rule}"),
            Outcome::Error { message, .. } => format!("error: {message}"),
            Outcome::Cancelled { started: true } => {
                "cancelled: the run was stopped and its process tree killed".to_owned()
            }
            Outcome::Cancelled { started: false } => {
                "cancelled before the command started; nothing was run".to_owned()
            }
        }
    }
}
