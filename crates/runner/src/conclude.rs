//! How a run's report ends — denied, cancelled before it started, unusable as a plan,
//! finished, or run by the approver — each announced to the session as it is reported.

use std::time::Duration;

use approvals::ipc::protocol::ExecReport;
use caps::{ExecOutput, RefusedWrites};
use policy::{Decision, DenyReason, PlanError, RunPlan};

use crate::decide::Decided;
use crate::events::{EventSink, ExecEvent};
use crate::launch::os_argv;
use crate::report::{Executed, Outcome, RunHost, RunReport};

/// The report's starting point: decided, nothing run yet.
pub(crate) fn report_for(decided: &Decided, host: RunHost) -> RunReport {
    RunReport {
        run_id: decided.run_id.clone(),
        host,
        policy: decided.explanation.policy.clone(),
        decision: decided.explanation.decision.clone(),
        executed: None,
        outcome: Outcome::Cancelled { started: false },
        notices: decided.notices.clone(),
    }
}

/// The request was cancelled before anything started (while a human was asked).
pub(crate) fn cancelled_before_start(mut report: RunReport, events: &dyn EventSink) -> RunReport {
    report.outcome = Outcome::Cancelled { started: false };
    events.emit(ExecEvent::Cancelled {
        run_id: report.run_id.clone(),
        host: report.host.clone(),
    });
    report
}

pub(crate) fn plan_error(mut report: RunReport, e: &PlanError) -> RunReport {
    report.outcome = Outcome::Error {
        message: e.to_string(),
        exit_code: e.exit_code(),
    };
    report
}

/// The `exec.finished` event for `report`'s outcome.
pub(crate) fn emit_finished(report: &RunReport, events: &dyn EventSink) {
    let (code, signal, timed_out, cancelled, tail) = match &report.outcome {
        Outcome::Finished { output } => (
            output.exit_code(),
            match output.status {
                caps::ExitStatus::Signal(s) => Some(s),
                caps::ExitStatus::Code(_) => None,
            },
            output.timed_out,
            false,
            output.tail.clone(),
        ),
        Outcome::Error { message, exit_code } => (*exit_code, None, false, false, message.clone()),
        Outcome::Cancelled { .. } => (report.exit_code(), Some(9), false, true, String::new()),
        Outcome::Denied { .. } => return,
    };
    events.emit(ExecEvent::Finished {
        run_id: report.run_id.clone(),
        host: report.host.clone(),
        code,
        signal,
        timed_out,
        cancelled,
        tail,
    });
}

/// A run's end: its output, its error, or its cancellation (`None`), reported and
/// announced.
pub(crate) fn conclude(
    mut report: RunReport,
    events: &dyn EventSink,
    result: Option<caps::Result<ExecOutput>>,
) -> RunReport {
    report.outcome = match result {
        Some(Ok(output)) => Outcome::Finished { output },
        Some(Err(e)) => Outcome::Error {
            message: e.to_string(),
            exit_code: e.exit_code(),
        },
        None => Outcome::Cancelled { started: true },
    };
    emit_finished(&report, events);
    report
}

/// The report of a run the approver performed (`tools.exec.run_in_approver`), announced
/// like one of ours. An approver that allowed the command but reported no run has not
/// done what it was asked: nothing ran here either, and the report says so.
pub(crate) fn ran_in_approver(
    mut report: RunReport,
    plan: &RunPlan,
    ran: Option<ExecReport>,
    events: &dyn EventSink,
) -> RunReport {
    report.executed = Some(Executed {
        argv: os_argv(plan),
        rebuilt: false,
        writable_retry: false,
        in_approver: true,
    });
    // Whoever reads the decision (the agent's result, `--json`) learns where it ran.
    if let Decision::Allow { rule, .. } = &mut report.decision {
        rule.push_str("; run by the approver, in its own context (tools.exec.run_in_approver)");
    }
    events.emit(ExecEvent::Started {
        run_id: report.run_id.clone(),
        host: report.host.clone(),
    });
    report.outcome = match ran {
        None => Outcome::Error {
            message: "the approver allowed the command but reported no run of it; nothing ran here"
                .into(),
            exit_code: crate::report::EXIT_WARDEN_ERROR,
        },
        Some(ExecReport {
            error: Some(message),
            exit_code,
            ..
        }) => Outcome::Error {
            message: format!("the approver could not run it: {message}"),
            exit_code,
        },
        Some(ran) => Outcome::Finished {
            output: output_of(ran),
        },
    };
    emit_finished(&report, events);
    report
}

/// The approver's report as a run's output, held to the usual limits (the approver is
/// another process). It reports stdout and stderr apart, so the combined output is stdout
/// then stderr; the tail is the combined output's end.
fn output_of(r: ExecReport) -> ExecOutput {
    let mut combined = r.stdout.clone();
    combined.push_str(&r.stderr);
    let cut = combined.len().saturating_sub(caps::DEFAULT_TAIL_BYTES);
    let tail = caps::truncate_utf8_tail(&combined.as_bytes()[cut..], cut > 0);
    let status = match r.signal {
        Some(s) if r.exit_code == 128 + s => caps::ExitStatus::Signal(s),
        _ => caps::ExitStatus::Code(r.exit_code),
    };
    ExecOutput {
        status,
        stdout_size: r.stdout_size.unwrap_or_default(),
        stderr_size: r.stderr_size.unwrap_or_default(),
        stdout: r.stdout,
        stderr: r.stderr,
        // The report carries text: whatever the approver's run printed is as it said.
        stdout_bytes: None,
        stderr_bytes: None,
        combined,
        tail,
        truncated: r.truncated,
        timed_out: r.timed_out,
        duration: Duration::from_millis(r.duration_ms),
        refused_writes: RefusedWrites::NotWatched,
        egress: Vec::new(),
    }
    .within(caps::OutputLimits::default())
}

/// A denial, reported and announced.
pub(crate) fn deny(
    mut report: RunReport,
    reason: DenyReason,
    rule: String,
    events: &dyn EventSink,
) -> RunReport {
    events.emit(ExecEvent::Denied {
        run_id: report.run_id.clone(),
        host: report.host.clone(),
        reason,
    });
    report.outcome = Outcome::Denied { reason, rule };
    report
}
