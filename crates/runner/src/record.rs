//! What the runner puts on the record (the `audit` crate): the decision before anything
//! is asked or run, the human's answer when one was asked, and how the run ended. With
//! `audit.required`, a request whose decision cannot be recorded is refused: nothing
//! runs that the record would not show.

use audit::{Entry, Kind};
use policy::{Command, Decision, DenyReason};
use sha2::{Digest as _, Sha256};

use crate::decide::Decided;
use crate::report::{Outcome, RunHost, RunReport};
use crate::runner::Runner;

/// The fields every record of one request shares.
#[derive(Clone, Debug)]
pub(crate) struct RequestFacts {
    base: Entry,
    first: Decision,
}

impl RequestFacts {
    /// The facts of `decided`, to be served on `host`.
    pub(crate) fn of(decided: &Decided, host: &RunHost) -> RequestFacts {
        let request = &decided.request;
        let mut base = Entry::new(Kind::Decision)
            .agent(&request.agent)
            .session(&request.session)
            .run_id(&decided.run_id)
            .host(host_name(host))
            .command(command_text(&request.command))
            .cwd(decided.cwd.to_string_lossy());
        if let RunHost::Node(node) = host {
            base = base.node(node);
        }
        if let Ok(plan) = &decided.explanation.plans.as_written {
            base = base.plan_digest(plan.digest());
        }
        RequestFacts {
            base,
            first: decided.explanation.decision.clone(),
        }
    }
}

impl RequestFacts {
    /// These facts with `decision` as the one made (a request refused by its route).
    pub(crate) fn refused(&self, decision: &Decision) -> RequestFacts {
        RequestFacts {
            base: self.base.clone(),
            first: decision.clone(),
        }
    }
}

impl Runner {
    /// Put on the record a request this runner did not decide — one routed to a node,
    /// which decided it against its own file (and keeps its own record) — as how it
    /// ended: `agent`'s `command` in `session`, reported by `report`.
    pub fn record_routed(&self, agent: &str, session: &str, command: &Command, report: &RunReport) {
        let mut base = Entry::new(Kind::Run)
            .agent(agent)
            .session(session)
            .run_id(&report.run_id)
            .host(host_name(&report.host))
            .command(command_text(command));
        if let RunHost::Node(node) = &report.host {
            base = base.node(node);
        }
        let facts = RequestFacts {
            base,
            first: report.decision.clone(),
        };
        self.record_end(&facts, report);
    }

    /// Record the decision: when the record is required, now (an error says why the
    /// request must be refused; the run's record makes it durable); otherwise handed to
    /// the record's writer, off the run's path, in order with the request's other records.
    pub(crate) fn record_decision_early(&self, facts: &RequestFacts) -> Result<(), String> {
        if self.host.audit.required() {
            return self.record_decision(facts);
        }
        let entry = with_decision(facts.base.clone(), &facts.first);
        self.host.audit.record_queued(entry);
        Ok(())
    }

    /// Record the decision now; an error (only when the record is required) says why the
    /// request must be refused.
    pub(crate) fn record_decision(&self, facts: &RequestFacts) -> Result<(), String> {
        let entry = with_decision(facts.base.clone(), &facts.first);
        match self.host.audit.record_unsynced(entry) {
            Ok(_) => Ok(()),
            Err(e) if self.host.audit.required() => Err(format!(
                "audit.required is set and the decision could not be recorded ({e}); nothing was asked or run"
            )),
            Err(e) => {
                tracing::error!("not on the record: {e}");
                Ok(())
            }
        }
    }

    /// Record the answer (if a human was asked) and how the request ended.
    pub(crate) fn record_end(&self, facts: &RequestFacts, report: &RunReport) {
        let mut entries = Vec::new();
        if matches!(facts.first, Decision::Ask { .. }) {
            let mut answer = facts.base.clone();
            answer.kind = Kind::Answer;
            let mut answer = with_decision(answer, &report.decision);
            if reason_str(&report.decision) == "approved-always" {
                answer = answer
                    .stored("an allowlist entry for the approved command (exec-approvals.json)");
            }
            answer = answer.approver(answered_by(&report.decision, self.host.approvals.who()));
            entries.push(answer);
        }
        let mut run = facts.base.clone();
        run.kind = Kind::Run;
        let mut run = with_decision(run, &report.decision).exit_code(report.exit_code());
        run = match &report.outcome {
            Outcome::Finished { output } => {
                let kept = output.combined.as_bytes();
                let mut run = run
                    .outcome(if output.timed_out {
                        "timed-out"
                    } else {
                        "finished"
                    })
                    .duration_ms(u64::try_from(output.duration.as_millis()).unwrap_or(u64::MAX))
                    .output_bytes(kept.len() as u64)
                    .output_sha256(hex(&Sha256::digest(kept)))
                    .egress(&output.egress);
                if report.executed.as_ref().is_some_and(|e| e.writable_retry) {
                    run = run.stored("a write permission for this run (writable retry)");
                }
                run
            }
            Outcome::Denied { .. } => run.outcome("denied"),
            Outcome::Error { message, .. } => run.outcome("error").rule(message),
            Outcome::Cancelled { started } => run.outcome(if *started {
                "cancelled"
            } else {
                "cancelled-before-start"
            }),
        };
        entries.push(run);
        let last = entries.len() - 1;
        for (i, entry) in entries.into_iter().enumerate() {
            let written = if !self.host.audit.required() {
                self.host.audit.record_queued(entry);
                Ok(0)
            } else if i < last {
                // The run's record, synced last, makes this one durable with it.
                self.host.audit.record_unsynced(entry)
            } else {
                self.host.audit.record(entry)
            };
            if let Err(e) = written {
                tracing::error!("not on the record: {e}");
            }
        }
    }
}

/// `entry` with `decision`'s verdict, reason and rule.
fn with_decision(entry: Entry, decision: &Decision) -> Entry {
    let (verdict, reason, rule) = match decision {
        Decision::Allow { reason, rule } => ("allow", reason.as_str(), rule),
        Decision::Ask { reason, rule } => ("ask", reason.as_str(), rule),
        Decision::Deny { reason, rule } => ("deny", reason.as_str(), rule),
    };
    entry.decision(verdict).reason(reason).rule(rule)
}

fn reason_str(decision: &Decision) -> &'static str {
    match decision {
        Decision::Allow { reason, .. } => reason.as_str(),
        Decision::Ask { reason, .. } => reason.as_str(),
        Decision::Deny { reason, .. } => reason.as_str(),
    }
}

/// Who settled a question: the approver, or the fallback when nobody answered.
fn answered_by(decision: &Decision, approver: &'static str) -> &'static str {
    match decision {
        Decision::Deny {
            reason: DenyReason::NoApprover | DenyReason::ApprovalTimeout,
            ..
        } => "nobody (askFallback)",
        Decision::Allow {
            reason: policy::AllowReason::FallbackFull | policy::AllowReason::FallbackAllowlist,
            ..
        } => "nobody (askFallback)",
        _ => approver,
    }
}

/// Where a run goes, as records name hosts (`node` for any node; the node is its own
/// field).
fn host_name(host: &RunHost) -> &str {
    match host {
        RunHost::Node(_) => "node",
        other => other.as_str(),
    }
}

/// The command as the request wrote it: the shell string, or the argv with each word
/// quoted where a shell would need it.
fn command_text(command: &Command) -> String {
    match command {
        Command::Shell(script) => script.clone(),
        Command::Argv(argv) => argv
            .iter()
            .map(|w| {
                if !w.is_empty()
                    && w.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%".contains(c))
                {
                    w.clone()
                } else {
                    format!("'{}'", w.replace('\'', r"'\''"))
                }
            })
            .collect::<Vec<_>>()
            .join(" "),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
