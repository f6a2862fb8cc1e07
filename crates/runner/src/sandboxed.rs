//! `host = sandbox`: a decided request runs confined by the sandbox's profiles, as its
//! plan says it is confined (an OS sandbox, or the operator's direct mode); the permission
//! mode decides about writes (approval mode runs read-only first and, when the sandbox
//! reports refused writes, asks before one writable retry).

use caps::{ExecAllowlist, RefusedWrites};
use policy::{Decision, DenyReason, PermissionMode, RunPlan, Source};
use tokio_util::sync::CancellationToken;

use approvals::ipc::protocol::{Prompt, PromptKind};

use crate::conclude::{deny, emit_finished, plan_error};
use crate::decide::Decided;
use crate::events::{EventSink, ExecEvent};
use crate::executor::SandboxShells;
use crate::report::{Outcome, RunReport};
use crate::runner::Runner;

impl Runner {
    /// `host=sandbox`: run confined; the permission mode decides about writes.
    pub(crate) async fn run_sandboxed(
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
        if let Some(network) = &plan.limits.network
            && network.mode() != shells.network.mode()
        {
            // The sandbox was built for another network mode: running the plan here would
            // not be what was approved. (Egress rules come with the plan: each run decides
            // its connections by its own.)
            let rule = format!(
                "the plan says the run has {network}, but this sandbox was set up with {} \
                 (sandbox.network changed since it started?); nothing was run",
                match shells.network.mode() {
                    policy::SandboxNetwork::Off => "no network",
                    policy::SandboxNetwork::On => "the host's network",
                    policy::SandboxNetwork::Proxy => "a network only through Warden's proxy",
                }
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

    fn awaiting_approval(&self, run_id: &str) {
        self.0.awaiting_approval(run_id);
    }

    fn connection_question(&self, run_id: &str, to: Option<&str>) {
        self.0.connection_question(run_id, to);
    }
}
