//! Steps three to five: a decided request runs on an [`Executor`] — asking a human first
//! if the decision says so — as exactly the approved plan, and ends in one report.
//!
//! The gateway host (and a node) runs the plan directly; the sandbox host's runs are in
//! `sandboxed.rs`, starting a plan in `launch.rs`, and how a report ends in
//! `conclude.rs`.

use caps::{ExecAllowlist, Shell};
use policy::{AllowReason, Decision, DenyReason, PlanError, ResolvedPolicy, RunPlan};
use tokio_util::sync::CancellationToken;

use crate::conclude::{
    cancelled_before_start, conclude, deny, plan_error, ran_in_approver, report_for,
};
use crate::decide::Decided;
use crate::events::{EventSink, ExecEvent};
use crate::executor::Executor;
use crate::launch::{launch_restricted, os_argv};
use crate::record::RequestFacts;
use crate::report::{Executed, Outcome, RunHost, RunReport};
use crate::runner::Runner;

impl Runner {
    /// Carry out `decided` on `executor`: ask if the decision says so, run the approved
    /// plan, report. Cancelling `cancel` stops waiting for a human (nothing runs) or kills
    /// a running command's whole tree.
    pub async fn execute(
        &self,
        decided: Decided,
        executor: &Executor,
        events: &dyn EventSink,
        cancel: &CancellationToken,
    ) -> RunReport {
        // On the record before anything is asked or run; with audit.required, nothing
        // happens that the record would not show.
        let facts = RequestFacts::of(&decided, &executor.run_host());
        if let Err(rule) = self.record_decision_early(&facts) {
            let mut report = report_for(&decided, executor.run_host());
            report.decision = Decision::Deny {
                reason: DenyReason::AuditUnavailable,
                rule: rule.clone(),
            };
            return deny(report, DenyReason::AuditUnavailable, rule, events);
        }
        let report = self
            .execute_decided(decided, executor, events, cancel)
            .await;
        self.record_end(&facts, &report);
        report
    }

    /// [`Runner::execute`] once the decision is on the record.
    async fn execute_decided(
        &self,
        decided: Decided,
        executor: &Executor,
        events: &dyn EventSink,
        cancel: &CancellationToken,
    ) -> RunReport {
        let mut report = report_for(&decided, executor.run_host());
        // A request that cannot run at all says so before anything is decided about it.
        if let Err(e @ PlanError::Invalid { .. }) = &decided.explanation.plans.as_written {
            return plan_error(report, e);
        }
        let decision = decided.explanation.decision.clone();
        match (&decision, executor) {
            (
                Decision::Allow {
                    reason: AllowReason::Sandboxed | AllowReason::Unconfined,
                    ..
                },
                Executor::Sandbox(shells),
            ) => {
                self.run_sandboxed(report, &decided, shells, events, cancel)
                    .await
            }
            // A decision that needs a sandbox on a runner without one, or a policy
            // decision on a sandbox: whoever routed it here was wrong. Running it would
            // fail open.
            (
                Decision::Allow {
                    reason: AllowReason::Sandboxed | AllowReason::Unconfined,
                    ..
                },
                Executor::Plain { .. },
            )
            | (_, Executor::Sandbox(_)) => {
                let rule = format!(
                    "host={} cannot be served by this runner ({}); nothing was run",
                    decided.host(),
                    report.host
                );
                deny(report, DenyReason::HostUnavailable, rule, events)
            }
            (Decision::Deny { reason, rule }, Executor::Plain { .. }) => {
                deny(report, *reason, rule.clone(), events)
            }
            (Decision::Ask { reason, .. }, Executor::Plain { shell, .. }) => {
                let plan = match decided.explanation.plans.as_written.as_ref() {
                    Ok(plan) => plan.clone(),
                    Err(e) => return plan_error(report, e),
                };
                let policy = &decided.explanation.policy;
                let in_approver = policy.runs_in_approver().then_some(policy.timeout.value);
                if in_approver.is_some() && decided.request.terminal.is_some() {
                    // The approver runs what it approves without a terminal to hand over;
                    // a program that asked for one must not silently run without it.
                    report.outcome = crate::report::Outcome::Error {
                        message: "this run would be run by the approver (tools.exec.run_in_approver), which cannot give it a terminal: run it without `tty`, or on a host that runs it here; nothing was run".to_owned(),
                        exit_code: 2,
                    };
                    return report;
                }
                events.awaiting_approval(&decided.run_id);
                let Some((decision, ran)) = self
                    .ask_command(&decided, &plan, *reason, in_approver, cancel)
                    .await
                else {
                    // Cancelled while the human was asked: stop, never apply a fallback.
                    return cancelled_before_start(report, events);
                };
                report.decision = decision.clone();
                if in_approver.is_some()
                    && matches!(
                        decision,
                        Decision::Allow {
                            reason: AllowReason::ApprovedOnce | AllowReason::ApprovedAlways,
                            ..
                        }
                    )
                {
                    // The human allowed it and the approver ran it: its run is this run.
                    // Never run it here as well (twice, in another context).
                    return ran_in_approver(report, &plan, ran, events);
                }
                // Denied, or nobody answered and askFallback decided: as without the
                // setting (a fallback run happens here — no approver is there to run it).
                self.run_decided(report, &decided, &decision, shell.as_ref(), events, cancel)
                    .await
            }
            (Decision::Allow { .. }, Executor::Plain { shell, .. }) => {
                self.run_decided(report, &decided, &decision, shell.as_ref(), events, cancel)
                    .await
            }
        }
    }

    /// Refuse `decided` without running it: a route that cannot serve it.
    pub fn refuse(
        &self,
        decided: Decided,
        host: RunHost,
        reason: DenyReason,
        rule: String,
        events: &dyn EventSink,
    ) -> RunReport {
        let facts = RequestFacts::of(&decided, &host);
        let mut report = report_for(&decided, host);
        report.decision = Decision::Deny {
            reason,
            rule: rule.clone(),
        };
        let report = deny(report, reason, rule, events);
        // A refusal is a decision too: on the record like any other.
        let _ = self.record_decision_early(&facts.refused(&report.decision));
        self.record_end(&facts, &report);
        report
    }

    /// Refuse a request routed before it was decided (a `host = node` request the
    /// gateway cannot send): the report carries `requested`, the policy it was routed by.
    pub fn refuse_routed(
        &self,
        run_id: String,
        requested: ResolvedPolicy,
        host: RunHost,
        reason: DenyReason,
        rule: String,
        events: &dyn EventSink,
    ) -> RunReport {
        let report = RunReport {
            run_id,
            host,
            policy: requested,
            decision: Decision::Deny {
                reason,
                rule: rule.clone(),
            },
            executed: None,
            outcome: Outcome::Cancelled { started: false },
            notices: self.notices(),
        };
        deny(report, reason, rule, events)
    }

    /// Run the plan the final `decision` allows (or report the denial).
    async fn run_decided(
        &self,
        report: RunReport,
        decided: &Decided,
        decision: &Decision,
        shell: &dyn Shell,
        events: &dyn EventSink,
        cancel: &CancellationToken,
    ) -> RunReport {
        let reason = match decision {
            Decision::Allow { reason, .. } => *reason,
            Decision::Deny { reason, rule } => return deny(report, *reason, rule.clone(), events),
            Decision::Ask { .. } => {
                // after_ask never asks again; fail closed if it somehow did.
                return deny(
                    report,
                    DenyReason::NoApprover,
                    "unresolved approval".into(),
                    events,
                );
            }
        };
        let plan = match decided.explanation.plan_for(decision) {
            Ok(plan) => plan.clone(),
            Err(e) => return plan_error(report, &e),
        };
        let via_allowlist = matches!(
            reason,
            AllowReason::AllowlistMatch | AllowReason::FallbackAllowlist
        );
        let report = self
            .start(
                report,
                decided,
                &plan,
                shell,
                via_allowlist,
                false,
                None,
                events,
                cancel,
            )
            .await;
        if via_allowlist && matches!(report.outcome, Outcome::Finished { .. }) {
            self.record_usage(decided).await;
        }
        report
    }

    /// Start `plan`, wait for it (or for cancellation), and report.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn start(
        &self,
        mut report: RunReport,
        decided: &Decided,
        plan: &RunPlan,
        shell: &dyn Shell,
        rebuilt: bool,
        writable_retry: bool,
        exec_allowlist: Option<&ExecAllowlist>,
        events: &dyn EventSink,
        cancel: &CancellationToken,
    ) -> RunReport {
        report.executed = Some(Executed {
            argv: os_argv(plan),
            rebuilt,
            writable_retry,
            in_approver: false,
        });
        if !writable_retry {
            events.emit(ExecEvent::Started {
                run_id: report.run_id.clone(),
                host: report.host.clone(),
            });
        }
        // Through Warden's proxy, a host the rules do not name is asked about; the
        // events hear while a question is out.
        let (ask_connection, mut asked) = if plan.limits.through_proxy() {
            let (questions, asked) = tokio::sync::mpsc::unbounded_channel();
            let asker = self.connection_asker(decided, &plan.host, cancel, questions);
            (Some(asker), Some(asked))
        } else {
            (None, None)
        };
        let tell_events = async {
            if let Some(asked) = asked.as_mut() {
                while let Some(to) = asked.recv().await {
                    events.connection_question(&report.run_id, to.as_deref());
                }
            }
            // Every asker is gone: nothing more to tell; the run decides when this ends.
            std::future::pending::<()>().await;
        };
        let result = tokio::select! {
            biased;
            _ = cancel.cancelled() => None,
            result = launch_restricted(
                shell,
                plan,
                exec_allowlist.cloned(),
                decided.request.live.clone(),
                decided.request.input.clone(),
                decided.request.terminal,
                ask_connection,
            ) => Some(result),
            () = tell_events => None,
        };
        // What the run's end overtook, in order (so a question told is also settled).
        while let Some(Ok(to)) = asked.as_mut().map(|a| a.try_recv()) {
            events.connection_question(&report.run_id, to.as_deref());
        }
        conclude(report, events, result)
    }
}
