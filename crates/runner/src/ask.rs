//! Asking a human, one way for everything: a command the policy sends to the approver,
//! a sandboxed command's writable retry, and a file tool's write. The prompt is built
//! from the plan that will run; the answer is bound to the prompt's digest; a
//! cancelled request stops waiting (and the approver withdraws the prompt).

use approvals::ApprovalsFile;
use approvals::ipc::AskOutcome;
use approvals::ipc::protocol::{Answer, ExecPrompt, ExecReport, Prompt, PromptKind, Request};
use policy::{
    ApproverAnswer, AskReason, Decision, DenyReason, ExecParams, HostCeiling, PermissionMode,
    RunPlan, SessionOverrides,
};
use tokio_util::sync::CancellationToken;

use crate::decide::Decided;
use crate::request::new_run_id;
use crate::runner::Runner;

/// What came of asking.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Asked {
    /// The human answered (with allow-always: the option chosen, `None` for the
    /// preselected one; the client already checked it is one the prompt offered).
    Answered(Answer, Option<usize>),
    /// Nobody could be asked (why).
    NoApprover(String),
    /// Nobody answered in time.
    TimedOut,
    /// An exec request reached the approver and no valid answer came back (why): it may
    /// have run the command there.
    MayHaveRun(String),
    /// The request was cancelled while the human was asked.
    Cancelled,
}

impl Asked {
    /// As the decision table reads it (`None`: cancelled).
    fn answer(&self) -> Option<ApproverAnswer> {
        Some(match self {
            Asked::Answered(Answer::AllowOnce, _) => ApproverAnswer::AllowOnce,
            Asked::Answered(Answer::AllowAlways, _) => ApproverAnswer::AllowAlways,
            Asked::Answered(Answer::Deny, _) => ApproverAnswer::Deny,
            Asked::NoApprover(_) | Asked::MayHaveRun(_) => ApproverAnswer::NoApprover,
            Asked::TimedOut => ApproverAnswer::Timeout,
            Asked::Cancelled => return None,
        })
    }

    /// For a write permission: allowed, or why not (the decision's reason and words).
    pub(crate) fn write_permission(&self) -> Result<(), (DenyReason, String)> {
        match self {
            Asked::Answered(Answer::AllowOnce | Answer::AllowAlways, _) => Ok(()),
            Asked::Answered(Answer::Deny, _) => {
                Err((DenyReason::ApprovalDenied, "denied by the approver".into()))
            }
            Asked::TimedOut => Err((
                DenyReason::ApprovalTimeout,
                "the approver did not answer in time".into(),
            )),
            // (A write permission is never an exec request; named for completeness.)
            Asked::NoApprover(why) | Asked::MayHaveRun(why) => {
                Err((DenyReason::NoApprover, format!("no approver: {why}")))
            }
            Asked::Cancelled => Err((DenyReason::Rejected, "the request was cancelled".into())),
        }
    }
}

impl Runner {
    /// Ask this host's approver about `prompt`; give up when `cancel` fires.
    /// `host_file` is the approvals file as the request read it (its socket and token).
    pub(crate) async fn ask(
        &self,
        prompt: Prompt,
        host_file: Option<&ApprovalsFile>,
        cancel: &CancellationToken,
    ) -> Asked {
        self.send(Request::Prompt(prompt), host_file, cancel)
            .await
            .0
    }

    /// Send `request` to this host's approver: its answer and, for an exec request it
    /// allowed, the report of its own run.
    async fn send(
        &self,
        request: Request,
        host_file: Option<&ApprovalsFile>,
        cancel: &CancellationToken,
    ) -> (Asked, Option<ExecReport>) {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => (Asked::Cancelled, None),
            outcome = self.host.approvals.ask(&request, host_file) => match outcome {
                AskOutcome::Answered(response) => (
                    Asked::Answered(response.answer, response.allow_always_option),
                    response.report.map(|r| *r),
                ),
                AskOutcome::NoApprover(why) => {
                    tracing::info!("no approver: {why}");
                    (Asked::NoApprover(why), None)
                }
                AskOutcome::TimedOut => (Asked::TimedOut, None),
                AskOutcome::MayHaveRun(why) => {
                    tracing::warn!("the approver may have run an exec request: {why}");
                    (Asked::MayHaveRun(why), None)
                }
            },
        }
    }

    /// Ask about the command of `decided`, which would run as `plan`, and work out the
    /// final decision (the approver's answer, or askFallback). `None`: cancelled while
    /// asking — nothing runs, and no fallback applies.
    ///
    /// With `in_approver` (the run's timeout), the approver is asked to run the command
    /// itself if the human allows it (`tools.exec.run_in_approver`), and the report of
    /// that run comes back with the decision.
    pub(crate) async fn ask_command(
        &self,
        decided: &Decided,
        plan: &RunPlan,
        reason: AskReason,
        in_approver: Option<std::time::Duration>,
        cancel: &CancellationToken,
    ) -> Option<(Decision, Option<ExecReport>)> {
        let e = &decided.explanation;
        let derived = e.allow_always.clone().unwrap_or_default();
        let prompt = Prompt::new(
            &decided.run_id,
            &decided.request.agent,
            &decided.request.session,
            &plan.host,
            PromptKind::Command {
                plan: plan.clone(),
                command: decided.request.command.display(),
                security: e.policy.security.value,
                ask: e.policy.ask.value,
                reason,
                allow_always: derived.options.clone(),
                allow_always_default: derived.default,
                not_stored: derived
                    .skipped
                    .iter()
                    .map(|s| format!("{}: {}", s.program, s.reason))
                    .collect(),
                why: e.evaluation.blocked().map(str::to_owned),
            },
        );
        let request = match in_approver {
            Some(timeout) => Request::Exec(ExecPrompt {
                prompt: prompt.clone(),
                timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            }),
            None => Request::Prompt(prompt.clone()),
        };
        let (asked, report) = self
            .send(request, decided.view.file.as_deref(), cancel)
            .await;
        let answer = asked.answer()?;
        if let Asked::MayHaveRun(why) = &asked {
            // No fallback: running it here could run it twice.
            return Some((
                Decision::Deny {
                    reason: policy::DenyReason::NoApprover,
                    rule: format!(
                        "askFallback not applied: the approver received this command to run \
                         itself and gave no valid answer ({why}); it may have run there, so it \
                         is not run again here"
                    ),
                },
                None,
            ));
        }
        if let Asked::Answered(Answer::AllowAlways, choice) = &asked {
            // Exactly the rules of the option the human chose among those shown (the
            // client refused an answer naming any other) — also when the approver ran
            // the command itself: this runner keeps its own copy of the rules.
            let rules = prompt.allow_always_rules(*choice).unwrap_or_default();
            self.store_allow_always(&decided.request.agent, rules).await;
        }
        let mut decision = policy::after_ask(&e.policy, answer, e.evaluation.satisfied);
        if let Asked::NoApprover(why) = &asked {
            // Say why nobody could be asked, next to the fallback that applied.
            match &mut decision {
                Decision::Allow { rule, .. }
                | Decision::Ask { rule, .. }
                | Decision::Deny { rule, .. } => rule.push_str(&format!("; no approver: {why}")),
            }
        }
        Some((decision, report))
    }

    /// Persist what "allow always" stores — exactly the rules of the option the prompt
    /// showed and the human chose. A failure is logged; the command was still allowed
    /// this once.
    async fn store_allow_always(&self, agent: &str, rules: &[policy::RuleSpec]) {
        if rules.is_empty() {
            return;
        }
        let (store, agent, rules) = (self.host.store.clone(), agent.to_owned(), rules.to_vec());
        let stored =
            tokio::task::spawn_blocking(move || store.add_rules(&agent, &rules, &[], true)).await;
        match stored {
            Ok(Ok(u)) if !u.value.is_empty() => {
                tracing::info!("allow always: stored {}", u.value.join(", "))
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!("allow always: could not store the patterns: {e}"),
            Err(e) => tracing::warn!("allow always: storing failed: {e}"),
        }
    }

    /// May a file tool of `agent` write `paths`? The permission mode decides, as it does
    /// for sandboxed commands: `readonly` refuses, `unrestricted` allows, `approval` asks
    /// the human — showing `detail`, what would be written — and refuses when nobody
    /// approves. The error is the refusal in words.
    pub async fn authorize_write(
        &self,
        agent: &str,
        session: &str,
        overrides: &SessionOverrides,
        paths: Vec<String>,
        detail: String,
        cancel: &CancellationToken,
    ) -> Result<(), String> {
        // Only the permission mode matters here; the ceiling governs security and ask.
        let policy = policy::resolve(
            &ExecParams::default(),
            overrides,
            &self.config(),
            Some(agent),
            &HostCeiling::DENY_ALL,
        );
        let mode = policy.permission_mode;
        match mode.value {
            PermissionMode::Readonly => {
                return Err(format!(
                    "agent {agent} is in readonly permission mode ({}): write tools are refused",
                    mode.source
                ));
            }
            PermissionMode::Unrestricted => return Ok(()),
            PermissionMode::Approval => {}
        }
        let what = detail.clone();
        let prompt = Prompt::new(
            new_run_id(),
            agent,
            session,
            "files",
            PromptKind::Write {
                paths,
                detail,
                retry: None,
            },
        );
        self.ask(prompt, None, cancel)
            .await
            .write_permission()
            .map_err(|(reason, why)| match reason {
                DenyReason::ApprovalDenied => format!("rejected: {what} was denied by the approver"),
                _ => format!(
                    "rejected: {what} needs approval (permission_mode = approval) and was not approved: {why}"
                ),
            })
    }
}
