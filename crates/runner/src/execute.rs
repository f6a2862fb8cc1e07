//! Steps three to five: a decided request runs on an [`Executor`] — asking a human first
//! if the decision says so — as exactly the approved plan, and ends in one report.
//!
//! The gateway host (and a node) runs the plan directly; the sandbox host confines it and
//! lets the permission mode gate writes (approval mode runs read-only first and, when the
//! sandbox reports refused writes, asks before one writable retry).

use std::sync::Arc;
use std::time::Duration;

use caps::{ExecAllowlist, ExecOptions, ExecOutput, RefusedWrites, Script, Shell};
use policy::{
    AllowReason, Confinement, Decision, DenyReason, Launch, PermissionMode, PlanError,
    ResolvedPolicy, RunPlan, Source,
};
use tokio_util::sync::CancellationToken;

use approvals::ipc::protocol::{ExecReport, Prompt, PromptKind};

use crate::decide::Decided;
use crate::events::{EventSink, ExecEvent};
use crate::report::{Executed, Outcome, RunHost, RunReport};
use crate::runner::Runner;

/// Where a decided request runs.
#[derive(Clone)]
pub enum Executor {
    /// The approved plan runs as it is, with this shell (the gateway host, a node).
    Direct {
        /// The processes of this host.
        shell: Arc<dyn Shell>,
        /// Its name in reports and events.
        host: RunHost,
    },
    /// An OS sandbox confines every command; the permission mode gates writes.
    Sandbox(SandboxShells),
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Executor::Direct { host, .. } => write!(f, "Executor::Direct({host})"),
            Executor::Sandbox(s) => write!(f, "Executor::Sandbox(unconfined: {:?})", s.unconfined),
        }
    }
}

/// The sandbox profiles a sandboxed host runs commands with.
#[derive(Clone)]
pub struct SandboxShells {
    /// Authorized paths read-only.
    pub readonly: Arc<dyn Shell>,
    /// Read-only, classifying refused writes ([`ExecOutput::refused_writes`]); approval
    /// mode's first run.
    pub watched: Arc<dyn Shell>,
    /// Authorized writable paths writable.
    pub writable: Arc<dyn Shell>,
    /// Why these shells do not confine at all (the operator's direct mode), said in every
    /// decision; `None` for a real sandbox.
    pub unconfined: Option<String>,
    /// Why this sandbox cannot run a command read-only (a container that cannot make a
    /// read-only view): `readonly` and `approval` are then refused before anything runs,
    /// never served by the writable profile. `None` when `readonly` and `watched` are
    /// read-only.
    pub read_only_unavailable: Option<String>,
    /// Whether these shells give a run the network (`sandbox.network` when they were
    /// built); a plan that says otherwise is refused.
    pub network: bool,
}

impl Executor {
    /// How this executor serves `host = sandbox`: decide with this, so the decision and
    /// the plan say what will really confine the run.
    pub fn confinement(&self) -> Confinement<'_> {
        match self {
            Executor::Sandbox(SandboxShells {
                unconfined: Some(why),
                ..
            }) => Confinement::Unconfined(why),
            _ => Confinement::Sandbox,
        }
    }

    /// The host name of runs here.
    fn run_host(&self) -> RunHost {
        match self {
            Executor::Direct { host, .. } => host.clone(),
            Executor::Sandbox(s) if s.unconfined.is_some() => RunHost::Direct,
            Executor::Sandbox(_) => RunHost::Sandbox,
        }
    }
}

/// The report's starting point: decided, nothing run yet.
fn report_for(decided: &Decided, host: RunHost) -> RunReport {
    RunReport {
        run_id: decided.run_id.clone(),
        host,
        policy: decided.explanation.policy.clone(),
        decision: decided.explanation.decision.clone(),
        executed: None,
        outcome: Outcome::Cancelled { started: false },
    }
}

/// The request was cancelled before anything started (while a human was asked).
fn cancelled_before_start(mut report: RunReport, events: &dyn EventSink) -> RunReport {
    report.outcome = Outcome::Cancelled { started: false };
    events.emit(ExecEvent::Cancelled {
        run_id: report.run_id.clone(),
        host: report.host.clone(),
    });
    report
}

fn plan_error(mut report: RunReport, e: &PlanError) -> RunReport {
    report.outcome = Outcome::Error {
        message: e.to_string(),
        exit_code: e.exit_code(),
    };
    report
}

/// The OS argv of `plan`, the resolved file first.
fn os_argv(plan: &RunPlan) -> Vec<String> {
    match &plan.launch {
        Launch::Exec { program, argv, .. } => {
            let mut argv = argv.clone();
            if let Some(first) = argv.first_mut() {
                first.clone_from(program);
            }
            argv
        }
        Launch::Script { .. } => plan.launch.os_argv(),
    }
}

/// Start `plan` on `shell` and wait for it: the resolved file under the name it was
/// called by (and only if it is still the file the plan names), or the script under its
/// shell — exactly what was approved, held to exactly the plan's limits (timeout,
/// processes, memory, exec allowlist). Dropping the future kills the run's whole tree.
///
/// A plan whose exec allowlist `shell` cannot enforce runs without it only when the
/// allowlist is best-effort; a required one refuses the run.
pub async fn launch(
    shell: &dyn Shell,
    plan: &RunPlan,
    live: Option<caps::LiveOutput>,
) -> caps::Result<ExecOutput> {
    let exec_allowlist = match &plan.limits.exec_allowlist {
        None => None,
        Some(list) => match shell.exec_allowlist_support() {
            Ok(()) => Some(list.to_caps()),
            Err(why) if list.required => {
                return Err(caps::CapsError::Unsupported {
                    what: format!("the plan's required exec allowlist here: {why}"),
                });
            }
            Err(_) => None,
        },
    };
    launch_restricted(shell, plan, exec_allowlist, live).await
}

/// [`launch`] with the exec allowlist the caller worked out for `shell` (the runner
/// checks every profile of a sandbox at once, and direct mode runs without one).
async fn launch_restricted(
    shell: &dyn Shell,
    plan: &RunPlan,
    exec_allowlist: Option<ExecAllowlist>,
    live: Option<caps::LiveOutput>,
) -> caps::Result<ExecOutput> {
    let mut options = ExecOptions::new(&plan.cwd, plan.limits.timeout());
    options.env = plan.env.clone();
    options.resources = plan.limits.resources();
    options.exec_allowlist = exec_allowlist;
    options.live = live;
    match &plan.launch {
        Launch::Exec {
            program,
            program_id,
            argv,
        } => {
            if argv.first() != Some(program) {
                options.arg0 = argv.first().cloned();
            }
            options.expect_program = *program_id;
            shell.exec(&os_argv(plan), &options).await
        }
        Launch::Script { shell: sh, source } => {
            let script = Script {
                shell: sh.into(),
                source: source.clone(),
            };
            shell.run(&script, &options).await
        }
    }
}

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
                Executor::Direct { .. },
            )
            | (_, Executor::Sandbox(_)) => {
                let rule = format!(
                    "host={} cannot be served by this runner ({}); nothing was run",
                    decided.host(),
                    report.host
                );
                deny(report, DenyReason::HostUnavailable, rule, events)
            }
            (Decision::Deny { reason, rule }, Executor::Direct { .. }) => {
                deny(report, *reason, rule.clone(), events)
            }
            (Decision::Ask { reason, .. }, Executor::Direct { shell, .. }) => {
                let plan = match decided.explanation.plans.as_written.as_ref() {
                    Ok(plan) => plan.clone(),
                    Err(e) => return plan_error(report, e),
                };
                let policy = &decided.explanation.policy;
                let in_approver = policy.runs_in_approver().then_some(policy.timeout.value);
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
            (Decision::Allow { .. }, Executor::Direct { shell, .. }) => {
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
        let mut report = report_for(&decided, host);
        report.decision = Decision::Deny {
            reason,
            rule: rule.clone(),
        };
        deny(report, reason, rule, events)
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
    async fn start(
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
        let result = tokio::select! {
            biased;
            _ = cancel.cancelled() => None,
            result = launch_restricted(shell, plan, exec_allowlist.cloned(), decided.request.live.clone()) => Some(result),
        };
        conclude(report, events, result)
    }

    /// `host=sandbox`: run confined; the permission mode decides about writes.
    async fn run_sandboxed(
        &self,
        mut report: RunReport,
        decided: &Decided,
        shells: &SandboxShells,
        events: &dyn EventSink,
        cancel: &CancellationToken,
    ) -> RunReport {
        let mode = &decided.explanation.policy.permission_mode;
        if let Some(why) = &shells.read_only_unavailable
            && mode.value != PermissionMode::Unrestricted
        {
            let rule = format!(
                "permission_mode={} ({}) runs commands read-only first, which this sandbox \
                 cannot do: {why}; nothing was run — {}",
                mode.value,
                mode.source,
                mode_fix(mode.source, &decided.request.agent)
            );
            report.decision = Decision::Deny {
                reason: DenyReason::SandboxUnavailable,
                rule: rule.clone(),
            };
            return deny(report, DenyReason::SandboxUnavailable, rule, events);
        }
        let plan = match decided.explanation.plans.as_written.as_ref() {
            Ok(plan) => plan.clone(),
            Err(e) => return plan_error(report, e),
        };
        if let Some(rule) = confinement_mismatch(&plan, shells) {
            // Direct mode went on or off between the decision and this run: serving the
            // plan the other way would not be what was decided.
            let reason = DenyReason::SandboxUnavailable;
            report.decision = Decision::Deny {
                reason,
                rule: rule.clone(),
            };
            return deny(report, reason, rule, events);
        }
        let first = match mode.value {
            PermissionMode::Unrestricted => &shells.writable,
            PermissionMode::Approval => &shells.watched,
            PermissionMode::Readonly => &shells.readonly,
        };
        if let Some(network) = plan.limits.network
            && network != shells.network
        {
            // The sandbox was built with the other setting: running the plan here would
            // not be what was approved.
            let rule = format!(
                "the plan says the run has {} network, but this sandbox was set up {} it \
                 (sandbox.network changed since it started?); nothing was run",
                if network { "the" } else { "no" },
                if shells.network { "with" } else { "without" }
            );
            let reason = DenyReason::SandboxUnavailable;
            report.decision = Decision::Deny {
                reason,
                rule: rule.clone(),
            };
            return deny(report, reason, rule, events);
        }
        let source = decided
            .explanation
            .policy
            .exec_allowlist
            .as_ref()
            .map(|l| l.mode.source);
        let restriction = match exec_restriction(&plan, source, shells) {
            Ok(restriction) => restriction,
            Err(rule) => {
                let reason = DenyReason::SandboxUnavailable;
                report.decision = Decision::Deny {
                    reason,
                    rule: rule.clone(),
                };
                return deny(report, reason, rule, events);
            }
        };
        let exec_allowlist = match restriction {
            ExecRestriction::Unrestricted => None,
            ExecRestriction::Enforced(list) => Some(list),
            ExecRestriction::Unenforced(why) => {
                if let Decision::Allow { rule, .. } = &mut report.decision {
                    rule.push_str(&format!(
                        "; exec allowlist NOT enforced (best-effort): {why}"
                    ));
                }
                None
            }
        };
        let report = self
            .start(
                report,
                decided,
                &plan,
                first.as_ref(),
                false,
                false,
                exec_allowlist.as_ref(),
                &NoFinish(events),
                cancel,
            )
            .await;
        let refused = match &report.outcome {
            Outcome::Finished { output }
                if mode.value == PermissionMode::Approval
                    && !output.status.success()
                    && !output.timed_out =>
            {
                match &output.refused_writes {
                    RefusedWrites::Refused(paths) => Some(paths.clone()),
                    RefusedWrites::None | RefusedWrites::NotWatched => None,
                }
            }
            _ => None,
        };
        let Some(paths) = refused else {
            emit_finished(&report, events);
            return report;
        };
        // The read-only run was refused writes the writable profile would allow: ask, and
        // run the same plan once more, writable, only if a human says yes.
        let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        let detail = if shown.is_empty() {
            "the read-only run was refused a write".to_owned()
        } else {
            format!(
                "the read-only run was refused a write to {}",
                shown.join(", ")
            )
        };
        let prompt = Prompt::new(
            &decided.run_id,
            &decided.request.agent,
            &decided.request.session,
            &plan.host,
            PromptKind::Write {
                paths: shown,
                detail,
                retry: Some(plan.clone()),
            },
        );
        let asked = self.ask(prompt, decided.view.file.as_deref(), cancel).await;
        if asked == crate::ask::Asked::Cancelled {
            let mut report = report;
            report.outcome = Outcome::Cancelled { started: true };
            emit_finished(&report, events);
            return report;
        }
        let mut report = report;
        if let Err((reason, why)) = asked.write_permission() {
            report.decision = Decision::Deny {
                reason,
                rule: format!("write access was not approved ({why})"),
            };
            return deny(
                report,
                DenyReason::Rejected,
                format!("write access was not approved ({why}); the read-only run was discarded"),
                events,
            );
        }
        self.start(
            report,
            decided,
            &plan,
            shells.writable.as_ref(),
            false,
            true,
            exec_allowlist.as_ref(),
            events,
            cancel,
        )
        .await
    }
}

/// Why `shells` may not serve `plan`: it was planned for an OS sandbox and these shells
/// run unconfined, or the other way round.
fn confinement_mismatch(plan: &RunPlan, shells: &SandboxShells) -> Option<String> {
    match (plan.limits.unconfined, &shells.unconfined) {
        (false, Some(why)) => Some(format!(
            "the run was decided for an OS sandbox, but this host now serves host=sandbox \
             without one ({why}); nothing was run"
        )),
        (true, None) => Some(
            "the run was decided for the operator's direct mode, which is now off: this \
             host serves host=sandbox in an OS sandbox again; nothing was run"
                .to_owned(),
        ),
        _ => None,
    }
}

/// Which setting to change when a permission mode from `source` cannot be served.
fn mode_fix(source: Source, agent: &str) -> String {
    let unrestricted = "permission_mode = \"unrestricted\" (the sandbox's own mounts then decide what commands write)";
    match source {
        Source::Session => format!(
            "this session asked for it (/exec permission_mode=...); `/exec \
             permission_mode=unrestricted` returns to the configured mode, or set sandbox.{unrestricted}"
        ),
        Source::Agent => format!(
            "set sandbox.{unrestricted} in agent {agent:?}'s [[agents.list]] entry in config.toml"
        ),
        _ => format!("set {unrestricted} in the [sandbox] table of config.toml"),
    }
}

/// Which programs a sandboxed run may execute.
enum ExecRestriction {
    /// Any: no exec allowlist is planned (none is configured, or the operator's direct
    /// mode runs without an OS sandbox at all and its plan says so).
    Unrestricted,
    /// Only these; every profile's shell enforces it.
    Enforced(ExecAllowlist),
    /// A best-effort allowlist these shells cannot enforce, and why: the run goes
    /// without, and its decision says so.
    Unenforced(String),
}

/// The restriction a sandboxed run of `plan` goes with, or — a required allowlist these
/// shells cannot enforce — the rule that refuses it (`source`: where the setting came
/// from, for the message).
fn exec_restriction(
    plan: &RunPlan,
    source: Option<Source>,
    shells: &SandboxShells,
) -> Result<ExecRestriction, String> {
    let Some(list) = &plan.limits.exec_allowlist else {
        return Ok(ExecRestriction::Unrestricted);
    };
    // An approval-mode run may be retried writable: every profile must enforce it.
    let unsupported = [&shells.readonly, &shells.watched, &shells.writable]
        .iter()
        .find_map(|shell| shell.exec_allowlist_support().err());
    let source = source.map_or_else(|| "the plan".to_owned(), |s| s.to_string());
    match unsupported {
        None => Ok(ExecRestriction::Enforced(list.to_caps())),
        Some(why) if list.required => Err(format!(
            "sandbox.exec_allowlist is required ({source}) but cannot be enforced here: {why}; nothing was run"
        )),
        Some(why) => Ok(ExecRestriction::Unenforced(why)),
    }
}

/// Passes events through, except `exec.finished`: the sandbox's first run may be followed
/// by a writable retry, and only the run's real end is announced.
struct NoFinish<'a>(&'a dyn EventSink);

impl EventSink for NoFinish<'_> {
    fn emit(&self, event: ExecEvent) {
        if !matches!(event, ExecEvent::Finished { .. }) {
            self.0.emit(event);
        }
    }
}

/// The `exec.finished` event for `report`'s outcome.
fn emit_finished(report: &RunReport, events: &dyn EventSink) {
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
fn conclude(
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
fn ran_in_approver(
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
    }
    .within(caps::OutputLimits::default())
}

/// A denial, reported and announced.
fn deny(
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
