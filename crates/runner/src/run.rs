//! One exec, end to end: resolve policy against this host's approvals file → decide →
//! ask the approver or apply askFallback → build the environment from the allowlist →
//! run through a `caps::Shell` with the timeout and output limits → record allowlist
//! usage → emit lifecycle events. Identical on the gateway and (later) on a node.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use approvals::ipc::AskOutcome;
use approvals::ipc::protocol::{Prompt, Request};
use approvals::{Clock, RunPlan, Store};
use caps::{ExecOptions, ExecOutput, Fs, Shell};
use policy::{
    AllowReason, ApproverAnswer, CommandInput, Config, Decision, DenyReason, EvalContext,
    ExecParams, Explanation, Rebuilt, Requester, ResolvedPolicy, SessionOverrides, TrustedPath,
    after_ask, build_child_env, explain,
};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::approver::Approvals;
use crate::events::{EventSink, ExecEvent};

/// The shell that runs shell-string commands and rebuilt lists.
pub const SHELL: &str = "/bin/sh";

/// What to run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "lowercase")]
pub enum CommandSpec {
    /// An argv; no shell is involved.
    Argv(Vec<String>),
    /// A shell string.
    Shell(String),
}

impl CommandSpec {
    fn input(&self) -> CommandInput<'_> {
        match self {
            CommandSpec::Argv(argv) => CommandInput::Argv(argv),
            CommandSpec::Shell(s) => CommandInput::Shell(s),
        }
    }

    /// The command as text, for prompts and usage records.
    pub fn display(&self) -> String {
        match self {
            CommandSpec::Argv(argv) => argv.join(" "),
            CommandSpec::Shell(s) => s.clone(),
        }
    }
}

/// One exec request, as it reaches the runner.
#[derive(Clone, Debug, Default)]
pub struct ExecRequest {
    /// Run id; one is generated when absent.
    pub run_id: Option<String>,
    /// Requesting agent.
    pub agent: Option<String>,
    /// Requesting session.
    pub session: Option<String>,
    /// The command.
    pub command: Option<CommandSpec>,
    /// Working directory (absolute); the host's default when absent.
    pub cwd: Option<PathBuf>,
    /// Variables the request wants to set (validated against the allowlist of names).
    pub env: BTreeMap<String, String>,
    /// Timeout; the configured default when absent, never above the configured maximum.
    pub timeout: Option<Duration>,
    /// Tool parameters (host, security, ask, node).
    pub params: ExecParams,
    /// The session's slash-command overrides.
    pub session_overrides: SessionOverrides,
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Outcome {
    /// The command ran (whatever its exit code).
    Finished {
        /// Its typed result.
        output: ExecOutput,
    },
    /// Policy or a human said no.
    Denied {
        /// Machine-readable reason (`security=deny`, `allowlist-miss`, `no-approver`...).
        reason: String,
        /// The rule that produced it.
        rule: String,
    },
    /// The request could not be carried out (bad input, program not found...).
    Error {
        /// What went wrong.
        message: String,
        /// The exit code the CLI reports (125, 126, 127).
        exit_code: i32,
    },
}

/// Everything about one run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RunReport {
    /// The run id.
    pub run_id: String,
    /// Where it ran.
    pub host: String,
    /// The resolved policy (each value with its source).
    pub policy: ResolvedPolicy,
    /// The final decision.
    pub decision: Decision,
    /// What was executed, if anything.
    pub executed: Option<Executed>,
    /// How it ended.
    pub outcome: Outcome,
}

/// The exact program and arguments that were executed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Executed {
    /// The argv given to the OS (the shell and script for shell strings).
    pub argv: Vec<String>,
    /// True if it was the rebuilt (allowlisted) form rather than the original.
    pub rebuilt: bool,
}

/// What decides whether a command may run on this host.
#[derive(Clone)]
pub enum Gate {
    /// security, ask and the allowlist (the gateway and node hosts).
    Policy,
    /// The OS sandbox confines every command; the permission mode gates writes.
    Sandbox(SandboxShells),
}

/// The sandbox profiles a sandboxed host runs commands with.
#[derive(Clone)]
pub struct SandboxShells {
    /// Authorized paths read-only.
    pub readonly: Arc<dyn Shell>,
    /// Read-only, reporting refused writes in `ExecOutput::refused_writes` where the
    /// backend can (approval mode's first run). Backends that cannot watch pass the
    /// plain read-only shell.
    pub watched: Arc<dyn Shell>,
    /// Authorized writable paths writable.
    pub writable: Arc<dyn Shell>,
    /// Why these shells do not confine at all (the operator's direct mode),
    /// said in every decision; `None` for a real sandbox.
    pub unconfined: Option<String>,
}

/// The fallback signal that a write was refused, for backends (or kernels) that cannot
/// report refused writes: the kernel returned `EROFS` and the command printed the
/// standard `strerror` text for it.
pub const READ_ONLY_FS: &str = "Read-only file system";

/// Did a failed read-only run fail because a write the writable profile allows was
/// refused? From the kernel's report when the shell watched; else from the `EROFS` text.
/// Returns the refused paths (empty when only the text says so), or `None`.
fn refused_write(out: &caps::ExecOutput) -> Option<Vec<std::path::PathBuf>> {
    if out.status.success() || out.timed_out {
        return None;
    }
    match &out.refused_writes {
        Some(paths) if paths.is_empty() => None,
        Some(paths) => Some(paths.clone()),
        None if out.combined.contains(READ_ONLY_FS) => Some(Vec::new()),
        None => None,
    }
}

/// This host, as the runner sees it. Everything is a value: providers, clock, approver.
#[derive(Clone)]
pub struct RunnerHost {
    /// Name used in events (`gateway`, a node id).
    pub label: String,
    /// Files of this host (executable resolution).
    pub fs: Arc<dyn Fs>,
    /// Processes of this host.
    pub shell: Arc<dyn Shell>,
    /// This host's approvals store.
    pub store: Store,
    /// The config (`config.toml`).
    pub config: Config,
    /// The host's own environment (only allowlisted names reach commands).
    pub host_env: BTreeMap<String, String>,
    /// The trusted PATH.
    pub trusted_path: TrustedPath,
    /// Working directory when a request names none.
    pub default_cwd: PathBuf,
    /// How to reach a human.
    pub approvals: Arc<dyn Approvals>,
    /// Time.
    pub clock: Arc<dyn Clock>,
    /// What decides (policy for gateway/node, the sandbox for the sandbox host).
    pub gate: Gate,
}

/// Runs commands on one host.
#[derive(Clone)]
pub struct Runner {
    host: RunnerHost,
}

/// A fresh run id.
pub fn new_run_id() -> String {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        // Ids only need to be unique, not secret: fall back to the clock.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        bytes = (nanos as u64).to_be_bytes();
    }
    format!(
        "run-{}",
        bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
    )
}

fn error(message: impl Into<String>, exit_code: i32) -> Outcome {
    Outcome::Error {
        message: message.into(),
        exit_code,
    }
}

/// A run cancelled before its command started (while a human was being asked): 130,
/// like SIGINT, and nothing ran.
fn cancelled_before_start(mut report: RunReport) -> RunReport {
    report.outcome = error("cancelled before the command started; nothing was run", 130);
    report
}

/// A run stopped by cancellation (its process tree was killed): 130, like SIGINT.
fn cancelled(mut report: RunReport, events: &dyn EventSink, host: &str) -> RunReport {
    events.emit(ExecEvent::Finished {
        run_id: report.run_id.clone(),
        host: host.to_owned(),
        code: 130,
        signal: Some(9),
        timed_out: false,
        tail: String::new(),
    });
    report.outcome = error(
        "cancelled: the run was stopped and its process tree killed",
        130,
    );
    report
}

/// A run's result as the `exec.finished` event and the report's outcome.
fn conclude(
    mut report: RunReport,
    events: &dyn EventSink,
    host: &str,
    result: caps::Result<caps::ExecOutput>,
) -> RunReport {
    let (code, signal, timed_out, tail) = match &result {
        Ok(output) => (
            if output.timed_out {
                124
            } else {
                output.status.shell_code()
            },
            match output.status {
                caps::ExitStatus::Signal(s) => Some(s),
                caps::ExitStatus::Code(_) => None,
            },
            output.timed_out,
            output.tail.clone(),
        ),
        Err(e) => (e.exit_code(), None, false, e.to_string()),
    };
    events.emit(ExecEvent::Finished {
        run_id: report.run_id.clone(),
        host: host.to_owned(),
        code,
        signal,
        timed_out,
        tail,
    });
    report.outcome = match result {
        Ok(output) => Outcome::Finished { output },
        Err(e) => error(e.to_string(), e.exit_code()),
    };
    report
}

impl Runner {
    /// A runner for `host`.
    pub fn new(host: RunnerHost) -> Self {
        Runner { host }
    }

    /// The host it runs on.
    pub fn host(&self) -> &RunnerHost {
        &self.host
    }

    /// Carry out `request`. Cancelling `cancel` stops waiting for a human and kills a
    /// running command's whole tree.
    pub async fn run(
        &self,
        request: ExecRequest,
        events: &dyn EventSink,
        cancel: &CancellationToken,
    ) -> RunReport {
        let run_id = request.run_id.clone().unwrap_or_else(new_run_id);
        let host = &self.host;
        let agent = request.agent.as_deref();
        let view = host.store.host_view(agent);
        if let Some(err) = &view.error {
            tracing::warn!("approvals file unusable, denying: {err}");
        }
        let cwd = match &request.cwd {
            Some(c) if c.is_absolute() => c.clone(),
            Some(c) => host.default_cwd.join(c),
            None => host.default_cwd.clone(),
        };
        let run_cache = policy::ExeCache::new();
        let requester = Requester {
            agent,
            session: &request.session_overrides,
            params: &request.params,
        };
        let ctx = EvalContext {
            fs: host.fs.as_ref(),
            cwd: &cwd,
            trusted_path: &host.trusted_path,
            allowlist: view.allowlist.as_ref(),
            // One resolution per program per run: evaluation and rebuilding share it.
            cache: Some(&run_cache),
        };
        let placeholder = CommandSpec::Argv(Vec::new());
        let command = request.command.as_ref().unwrap_or(&placeholder);
        let explanation = explain(
            command.input(),
            &requester,
            &host.config,
            &view.ceiling,
            &ctx,
        );
        let mut report = RunReport {
            run_id: run_id.clone(),
            host: host.label.clone(),
            policy: explanation.policy.clone(),
            decision: explanation.decision.clone(),
            executed: None,
            outcome: error("not run", 125),
        };
        if request.command.is_none() {
            report.outcome = error(
                "the request names no command (give `command` or `argv`)",
                125,
            );
            return report;
        }
        let timeout = match host.config.effective_timeout(request.timeout) {
            Ok(t) => t,
            Err(e) => {
                report.outcome = error(e, 125);
                return report;
            }
        };
        match host.fs.metadata(&cwd) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                report.outcome = error(
                    format!("working directory {} is not a directory", cwd.display()),
                    125,
                );
                return report;
            }
            Err(e) => {
                report.outcome = error(
                    format!("working directory {} is not usable: {e}", cwd.display()),
                    125,
                );
                return report;
            }
        }
        let extras = self.env_extras(agent);
        let env = match build_child_env(
            &host.host_env,
            &host.trusted_path.to_path_var(),
            &request.env,
            &extras,
        ) {
            Ok(env) => env,
            Err(e) => {
                report.outcome = error(e.to_string(), 125);
                return report;
            }
        };

        if let Gate::Sandbox(shells) = &host.gate {
            return self
                .run_sandboxed(
                    report, shells, command, &request, &cwd, env, timeout, events, cancel,
                )
                .await;
        }

        // Decide, asking a human if the table says so.
        let mut decision = explanation.decision.clone();
        if let Decision::Ask { reason, .. } = &decision {
            let plan = self.plan_for(command, &cwd, &env, &request);
            let prompt = Prompt {
                id: run_id.clone(),
                command: command.display(),
                plan_digest: plan.digest(),
                plan,
                security: explanation.policy.security.value.to_string(),
                ask: explanation.policy.ask.value.to_string(),
                reason: serde_json::to_value(reason)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
            };
            let prompt = Request::Prompt(prompt);
            // Cancelled while waiting for the human: stop here, never apply a fallback.
            let outcome = tokio::select! {
                biased;
                _ = cancel.cancelled() => return cancelled_before_start(report),
                outcome = host.approvals.ask(&prompt) => outcome,
            };
            let answer = match outcome {
                AskOutcome::Answered(r) => match r.answer {
                    approvals::ipc::protocol::Answer::AllowOnce => ApproverAnswer::AllowOnce,
                    approvals::ipc::protocol::Answer::AllowAlways => ApproverAnswer::AllowAlways,
                    approvals::ipc::protocol::Answer::Deny => ApproverAnswer::Deny,
                },
                AskOutcome::NoApprover(why) => {
                    tracing::info!("no approver: {why}");
                    ApproverAnswer::NoApprover
                }
                AskOutcome::TimedOut => ApproverAnswer::Timeout,
            };
            decision = after_ask(
                &explanation.policy,
                answer,
                explanation.evaluation.satisfied,
            );
        }
        report.decision = decision.clone();
        let reason = match &decision {
            // The decision needs a sandbox this runner does not have: whoever routed the
            // request here was wrong, and running it unconfined would fail open.
            Decision::Allow {
                reason: AllowReason::Sandboxed | AllowReason::Unconfined,
                ..
            } => {
                let rule = "host=sandbox but this runner has no sandbox; nothing was run";
                report.decision = Decision::Deny {
                    reason: DenyReason::HostUnavailable,
                    rule: rule.into(),
                };
                report.outcome = Outcome::Denied {
                    reason: DenyReason::HostUnavailable.to_string(),
                    rule: rule.into(),
                };
                events.emit(ExecEvent::Denied {
                    run_id,
                    host: host.label.clone(),
                    reason: DenyReason::HostUnavailable.to_string(),
                });
                return report;
            }
            Decision::Allow { reason, .. } => *reason,
            Decision::Deny { reason, rule } => {
                report.outcome = Outcome::Denied {
                    reason: reason.to_string(),
                    rule: rule.clone(),
                };
                events.emit(ExecEvent::Denied {
                    run_id,
                    host: host.label.clone(),
                    reason: reason.to_string(),
                });
                return report;
            }
            Decision::Ask { .. } => {
                // after_ask never asks again; fail closed if it somehow did.
                report.outcome = Outcome::Denied {
                    reason: DenyReason::NoApprover.to_string(),
                    rule: "unresolved approval".into(),
                };
                return report;
            }
        };

        // What runs: the rebuilt form when the allowlist is what allowed it.
        let via_allowlist = matches!(
            reason,
            AllowReason::AllowlistMatch | AllowReason::FallbackAllowlist
        );
        // A program resolved to its canonical file still sees the name it was called by.
        let arg0 = match command {
            CommandSpec::Argv(argv) => argv.first().cloned(),
            CommandSpec::Shell(_) => explanation
                .evaluation
                .analysis
                .as_ref()
                .ok()
                .and_then(|c| c.segments.first())
                .and_then(|s| s.argv.first().cloned()),
        };
        let (argv, rebuilt) = match (via_allowlist, &explanation.evaluation.rebuilt, command) {
            (true, Some(Rebuilt::Argv(argv)), _) => (argv.clone(), true),
            (true, Some(Rebuilt::Script(text)), _) => (shell_argv(text), true),
            (true, None, _) => {
                report.outcome = Outcome::Denied {
                    reason: DenyReason::AllowlistMiss.to_string(),
                    rule: "allowlist satisfied but no rebuilt command".into(),
                };
                return report;
            }
            (false, _, CommandSpec::Shell(text)) => (shell_argv(text), false),
            (false, _, CommandSpec::Argv(argv)) => match self.resolve_argv(argv, &cwd) {
                Ok(argv) => (argv, false),
                Err((message, code)) => {
                    report.outcome = error(message, code);
                    return report;
                }
            },
        };
        report.executed = Some(Executed {
            argv: argv.clone(),
            rebuilt,
        });
        events.emit(ExecEvent::Started {
            run_id: run_id.clone(),
            host: host.label.clone(),
        });
        let mut options = ExecOptions::new(cwd, timeout);
        options.env = env;
        let is_script = argv.first().map(String::as_str) == Some(SHELL)
            && argv.get(1).map(String::as_str) == Some("-c");
        if !is_script {
            options.arg0 = arg0;
        }
        let run = host.shell.exec(&argv, &options);
        let result = tokio::select! {
            biased;
            _ = cancel.cancelled() => return cancelled(report, events, &host.label),
            result = run => result,
        };
        if via_allowlist && result.is_ok() {
            self.record_usage(agent, &explanation, command, view.file.as_deref())
                .await;
        }
        conclude(report, events, &host.label, result)
    }

    /// `host=sandbox`: run confined; the permission mode decides about writes.
    #[allow(clippy::too_many_arguments)]
    async fn run_sandboxed(
        &self,
        mut report: RunReport,
        shells: &SandboxShells,
        command: &CommandSpec,
        request: &ExecRequest,
        cwd: &Path,
        env: BTreeMap<String, String>,
        timeout: Duration,
        events: &dyn EventSink,
        cancel: &CancellationToken,
    ) -> RunReport {
        let host = &self.host;
        let mode = host.config.permission_mode(request.agent.as_deref());
        report.decision = match &shells.unconfined {
            None => Decision::Allow {
                reason: AllowReason::Sandboxed,
                rule: format!("host=sandbox, permission_mode={mode}"),
            },
            Some(why) => Decision::Allow {
                reason: AllowReason::Unconfined,
                rule: format!("host=sandbox WITHOUT an OS sandbox ({why}), permission_mode={mode}"),
            },
        };
        // The program is found inside the sandbox, by the sandbox's own view of the
        // command's PATH: a container has its own filesystem, and resolving on the host
        // would name a file that may not exist (or differ) in there.
        let argv = match command {
            CommandSpec::Shell(text) => shell_argv(text),
            CommandSpec::Argv(argv) => argv.clone(),
        };
        report.executed = Some(Executed {
            argv: argv.clone(),
            rebuilt: false,
        });
        let mut options = ExecOptions::new(cwd, timeout);
        options.env = env.clone();
        events.emit(ExecEvent::Started {
            run_id: report.run_id.clone(),
            host: host.label.clone(),
        });
        let first = match mode {
            policy::PermissionMode::Unrestricted => &shells.writable,
            policy::PermissionMode::Approval => &shells.watched,
            policy::PermissionMode::Readonly => &shells.readonly,
        };
        let mut result = tokio::select! {
            biased;
            _ = cancel.cancelled() => return cancelled(report, events, &host.label),
            r = first.exec(&argv, &options) => r,
        };
        let refused = match &result {
            Ok(out) if mode == policy::PermissionMode::Approval => refused_write(out),
            _ => None,
        };
        if let Some(paths) = refused {
            let plan = RunPlan {
                program: argv[0].clone(),
                argv: argv.clone(),
                cwd: cwd.to_string_lossy().into_owned(),
                env,
                agent: request.agent.clone().unwrap_or_default(),
                session: request.session.clone().unwrap_or_default(),
                host: format!("{} (writable retry)", host.label),
            };
            let prompt = Request::Prompt(Prompt {
                id: report.run_id.clone(),
                command: command.display(),
                plan_digest: plan.digest(),
                plan,
                security: "sandbox".into(),
                ask: mode.to_string(),
                reason: if paths.is_empty() {
                    format!(
                        "{}: the read-only run was refused a write",
                        approvals::ipc::protocol::WRITE_PERMISSION
                    )
                } else {
                    let shown: Vec<String> =
                        paths.iter().map(|p| p.display().to_string()).collect();
                    format!(
                        "{}: the read-only run was refused a write to {}",
                        approvals::ipc::protocol::WRITE_PERMISSION,
                        shown.join(", ")
                    )
                },
            });
            let outcome = tokio::select! {
                biased;
                _ = cancel.cancelled() => return cancelled(report, events, &host.label),
                o = host.approvals.ask(&prompt) => o,
            };
            let approved = matches!(&outcome, AskOutcome::Answered(r)
                if r.answer != approvals::ipc::protocol::Answer::Deny);
            if !approved {
                let (deny, why) = match outcome {
                    AskOutcome::Answered(_) => (
                        DenyReason::ApprovalDenied,
                        "denied by the approver".to_string(),
                    ),
                    AskOutcome::TimedOut => (
                        DenyReason::ApprovalTimeout,
                        "the approver did not answer in time".to_string(),
                    ),
                    AskOutcome::NoApprover(w) => {
                        (DenyReason::NoApprover, format!("no approver: {w}"))
                    }
                };
                report.decision = Decision::Deny {
                    reason: deny,
                    rule: format!("write access was not approved ({why})"),
                };
                report.outcome = Outcome::Denied {
                    reason: "rejected".into(),
                    rule: format!(
                        "write access was not approved ({why}); the read-only run was discarded"
                    ),
                };
                events.emit(ExecEvent::Denied {
                    run_id: report.run_id.clone(),
                    host: host.label.clone(),
                    reason: "rejected".into(),
                });
                return report;
            }
            result = tokio::select! {
                biased;
                _ = cancel.cancelled() => return cancelled(report, events, &host.label),
                r = shells.writable.exec(&argv, &options) => r,
            };
        }
        conclude(report, events, &host.label, result)
    }

    fn env_extras(&self, agent: Option<&str>) -> Vec<String> {
        let config = &self.host.config;
        let mut extras = config.exec.env.clone();
        if let Some(a) = agent.and_then(|a| config.agent(a)) {
            extras.extend(a.exec.env.iter().cloned());
        }
        extras
    }

    /// An argv whose program is the file the trusted PATH resolves it to.
    fn resolve_argv(&self, argv: &[String], cwd: &Path) -> Result<Vec<String>, (String, i32)> {
        let Some(program) = argv.first() else {
            return Err(("empty argv".into(), 125));
        };
        match policy::resolve_executable(
            self.host.fs.as_ref(),
            program,
            cwd,
            &self.host.trusted_path,
        ) {
            Ok(exe) => {
                let mut argv = argv.to_vec();
                argv[0] = exe.path.to_string_lossy().into_owned();
                Ok(argv)
            }
            Err(policy::ResolveFailure::NotExecutable { path }) => Err((
                format!("program not executable: {program} ({})", path.display()),
                126,
            )),
            Err(_) => Err((format!("program not found: {program}"), 127)),
        }
    }

    /// The exact plan a human approves: what will run if they say yes.
    fn plan_for(
        &self,
        command: &CommandSpec,
        cwd: &Path,
        env: &BTreeMap<String, String>,
        request: &ExecRequest,
    ) -> RunPlan {
        let (program, argv) = match command {
            CommandSpec::Shell(text) => (String::new(), shell_argv(text)),
            CommandSpec::Argv(argv) => match self.resolve_argv(argv, cwd) {
                Ok(resolved) => (resolved[0].clone(), resolved),
                Err(_) => (String::new(), argv.clone()),
            },
        };
        RunPlan {
            program,
            argv,
            cwd: cwd.to_string_lossy().into_owned(),
            env: env.clone(),
            agent: request.agent.clone().unwrap_or_default(),
            session: request.session.clone().unwrap_or_default(),
            host: self.host.label.clone(),
        }
    }

    /// Record `lastUsedAt` & co. for every pattern that matched, off the async threads.
    async fn record_usage(
        &self,
        agent: Option<&str>,
        explanation: &Explanation,
        command: &CommandSpec,
        file: Option<&approvals::ApprovalsFile>,
    ) {
        let Some(agent) = agent.map(str::to_owned) else {
            return;
        };
        let now = self.host.clock.now_ms();
        let text = command.display();
        // Skip the locked read-modify-write when the file already says this (the store
        // would write nothing anyway).
        let already_recorded = |pattern: &str, path: &str| {
            file.and_then(|f| f.agents.get(&agent))
                .and_then(|a| a.allowlist.iter().find(|e| e.pattern == pattern))
                .is_some_and(|e| {
                    e.last_used_command.as_deref() == Some(text.as_str())
                        && e.last_resolved_path.as_deref() == Some(path)
                        && e.last_used_at.is_some_and(|t| {
                            now.saturating_sub(t) < approvals::USAGE_TIME_GRANULARITY_MS
                        })
                })
        };
        let uses: Vec<(String, String)> = explanation
            .evaluation
            .leaves
            .iter()
            .filter_map(|l| {
                let pattern = l.matched.clone()?;
                let path = l.resolved.as_ref()?.path.to_string_lossy().into_owned();
                Some((pattern, path))
            })
            .filter(|(pattern, path)| !already_recorded(pattern, path))
            .collect();
        if uses.is_empty() {
            return;
        }
        let store: Store = self.host.store.clone();
        let recorded = tokio::task::spawn_blocking(move || {
            for (pattern, path) in uses {
                if let Err(e) = store.record_use(&agent, &pattern, &text, &path, now) {
                    tracing::warn!("could not record allowlist usage: {e}");
                }
            }
        })
        .await;
        if let Err(e) = recorded {
            tracing::warn!("usage recording task failed: {e}");
        }
    }
}

/// `[/bin/sh, -c, text]`.
pub fn shell_argv(text: &str) -> Vec<String> {
    vec![SHELL.to_owned(), "-c".to_owned(), text.to_owned()]
}
