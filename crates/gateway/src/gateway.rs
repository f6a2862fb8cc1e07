//! The gateway: sessions with their slash-command overrides, routing of each exec by its
//! effective host, and the per-session system-event queues.
//!
//! Routing fails closed: `sandbox` without a sandbox backend and `node` without a paired
//! node are denials that say so — never a silent run on the gateway itself.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use approvals::Store;
use policy::{Config, Decision, DenyReason, Host, PolicyError};
use runner::{EventSink, ExecEvent, ExecRequest, Outcome, RunReport, Runner};
use tokio_util::sync::CancellationToken;

use crate::files::FileTools;
use crate::sessions::{SessionEvents, SessionKey, Sessions};

/// How `host = sandbox` is served.
pub enum SandboxRoute {
    /// A runner whose shell is an OS sandbox.
    Available(Box<Runner>),
    /// No sandbox backend: every sandboxed exec is refused with this diagnosis.
    Unavailable(String),
    /// Worked out on first use (see [`SandboxRoute::deferred`]).
    Deferred(Box<DeferredRoute>),
}

/// A sandbox route built the first time it is needed: probing a backend starts
/// processes, which a gateway serving only `host = gateway` commands (or a single
/// `warden exec` that is denied) should not pay for.
pub struct DeferredRoute {
    route: OnceLock<SandboxRoute>,
    build: Mutex<Option<RouteBuilder>>,
}

type RouteBuilder = Box<dyn FnOnce() -> SandboxRoute + Send>;

impl SandboxRoute {
    /// A route that `build` works out on first use, once.
    pub fn deferred(build: impl FnOnce() -> SandboxRoute + Send + 'static) -> SandboxRoute {
        SandboxRoute::Deferred(Box::new(DeferredRoute {
            route: OnceLock::new(),
            build: Mutex::new(Some(Box::new(build))),
        }))
    }

    /// The route itself, building a deferred one now if it has not been built.
    fn resolved(&self) -> &SandboxRoute {
        let SandboxRoute::Deferred(deferred) = self else {
            return self;
        };
        deferred.route.get_or_init(|| {
            let build = deferred
                .build
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            match build.map(|b| b()) {
                Some(SandboxRoute::Deferred(_)) | None => {
                    SandboxRoute::Unavailable("the sandbox route could not be built".into())
                }
                Some(route) => route,
            }
        })
    }
}

/// Direct execution: an operator may switch `host = sandbox` to run without an OS
/// sandbox for a limited time (a TTL recorded in a file); once it expires, commands are
/// sandboxed again without anyone having to remember.
pub struct DirectMode {
    /// Runs commands directly on this machine.
    pub runner: Box<Runner>,
    /// Tells whether direct mode is on now.
    pub active: Box<dyn Fn() -> bool + Send + Sync>,
}

/// Everything behind the agent-facing tools.
pub struct Gateway {
    runner: Runner,
    sandbox: SandboxRoute,
    direct: Option<DirectMode>,
    sessions: Sessions,
    files: Option<FileTools>,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("files", &self.files)
            .finish()
    }
}

/// Reason given when the sandbox route cannot be served.
pub const SANDBOX_UNAVAILABLE: &str = "sandbox-unavailable";
/// Reason given when the node route cannot be served.
pub const NO_NODE: &str = "no-node";

impl Gateway {
    /// A gateway running commands through `runner` (this machine), `sandbox`, and serving
    /// file tools through `files`.
    pub fn new(runner: Runner, sandbox: SandboxRoute, files: Option<FileTools>) -> Self {
        Gateway {
            runner,
            sandbox,
            direct: None,
            sessions: Sessions::default(),
            files,
            shutdown: CancellationToken::new(),
        }
    }

    /// Enable the operator's direct-execution switch (see [`DirectMode`]).
    pub fn with_direct_mode(mut self, direct: DirectMode) -> Self {
        self.direct = Some(direct);
        self
    }

    /// `Ok` if `host=sandbox` can run commands, else the diagnosis.
    pub fn sandbox_available(&self) -> Result<(), String> {
        self.sandbox_runner().map(|_| ())
    }

    /// The sandbox runner, or why there is none.
    fn sandbox_runner(&self) -> Result<&Runner, String> {
        match self.sandbox.resolved() {
            SandboxRoute::Available(runner) => Ok(runner),
            SandboxRoute::Unavailable(why) => Err(why.clone()),
            SandboxRoute::Deferred(_) => Err("the sandbox route could not be built".into()),
        }
    }

    /// May `key`'s agent change `path` with the file tool `tool`? The permission mode
    /// decides, as it does for sandboxed commands: `readonly` refuses, `unrestricted`
    /// allows, `approval` asks the human — showing `detail`, what would be written — and
    /// refuses when nobody approves.
    pub async fn authorize_write(
        &self,
        key: &SessionKey,
        tool: &str,
        path: &str,
        detail: &str,
    ) -> Result<(), String> {
        use approvals::ipc::protocol::{Answer, Prompt, Request, WRITE_PERMISSION};
        let mode = self.config().permission_mode(Some(&key.agent));
        match mode {
            policy::PermissionMode::Readonly => {
                return Err(format!(
                    "agent {} is in readonly permission mode: write tools are refused",
                    key.agent
                ));
            }
            policy::PermissionMode::Unrestricted => return Ok(()),
            policy::PermissionMode::Approval => {}
        }
        let host = self.runner.host();
        let plan = approvals::RunPlan {
            program: String::new(),
            argv: vec![tool.to_owned(), path.to_owned()],
            cwd: host.default_cwd.to_string_lossy().into_owned(),
            env: Default::default(),
            agent: key.agent.clone(),
            session: key.session.clone(),
            host: "files".into(),
        };
        let prompt = Request::Prompt(Prompt {
            id: runner::new_run_id(),
            command: format!("{tool} {path}: {detail}"),
            plan_digest: plan.digest(),
            plan,
            security: "files".into(),
            ask: mode.to_string(),
            reason: format!("{WRITE_PERMISSION}: the {tool} tool would change {path}"),
        });
        let outcome = tokio::select! {
            o = host.approvals.ask(&prompt) => o,
            _ = self.shutdown.cancelled() => approvals::ipc::AskOutcome::NoApprover("shutting down".into()),
        };
        match outcome {
            approvals::ipc::AskOutcome::Answered(r) if r.answer != Answer::Deny => Ok(()),
            approvals::ipc::AskOutcome::Answered(_) => Err(format!(
                "rejected: the {tool} of {path} was denied by the approver"
            )),
            approvals::ipc::AskOutcome::TimedOut => Err(format!(
                "rejected: the {tool} of {path} was not approved in time (permission_mode = approval)"
            )),
            approvals::ipc::AskOutcome::NoApprover(why) => Err(format!(
                "rejected: the {tool} of {path} needs approval (permission_mode = approval) and no approver answered: {why}"
            )),
        }
    }

    /// The sessions.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// The file tools, if a workspace is configured.
    pub fn files(&self) -> Option<&FileTools> {
        self.files.as_ref()
    }

    /// Cancelled on shutdown: in-flight runs are stopped and their trees killed.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    fn config(&self) -> &Config {
        &self.runner.host().config
    }

    fn store(&self) -> &Store {
        &self.runner.host().store
    }

    /// Apply a slash command (`/exec ...`, `/elevated ...`) to the session.
    pub fn slash_command(&self, key: &SessionKey, text: &str) -> Result<String, PolicyError> {
        let current = self.sessions.overrides(key);
        let outcome = policy::apply_slash_command(&current, text)?;
        self.sessions.set_overrides(key, outcome.overrides);
        Ok(outcome.message)
    }

    /// Take the session's pending system events.
    pub fn take_events(&self, key: &SessionKey) -> Vec<String> {
        self.sessions.take_events(key)
    }

    /// Put back events taken for a call that failed before it could deliver them.
    pub fn return_events(&self, key: &SessionKey, events: Vec<String>) {
        self.sessions.return_events(key, events)
    }

    /// Run one exec for `key`'s session, routed by its effective host.
    pub async fn exec(&self, key: &SessionKey, mut request: ExecRequest) -> RunReport {
        request.agent = Some(key.agent.clone());
        request.session = Some(key.session.clone());
        request.session_overrides = self.sessions.overrides(key);
        let events = SessionEvents {
            sessions: &self.sessions,
            key: key.clone(),
        };
        let view = self.store().host_view(Some(&key.agent));
        let resolved = policy::resolve(
            &request.params,
            &request.session_overrides,
            self.config(),
            Some(&key.agent),
            &view.ceiling,
        );
        match resolved.host.value {
            Host::Gateway => self.runner.run(request, &events, &self.shutdown).await,
            Host::Sandbox if self.direct.as_ref().is_some_and(|d| (d.active)()) => {
                let direct = self.direct.as_ref().map(|d| &d.runner);
                match direct {
                    Some(runner) => runner.run(request, &events, &self.shutdown).await,
                    None => unreachable_direct(request, resolved, &events),
                }
            }
            Host::Sandbox => match self.sandbox_runner() {
                Ok(sandboxed) => sandboxed.run(request, &events, &self.shutdown).await,
                Err(why) => refuse(
                    request,
                    resolved,
                    "sandbox",
                    SANDBOX_UNAVAILABLE,
                    format!(
                        "host=sandbox but no sandbox backend is available: {why}; nothing was run"
                    ),
                    &events,
                ),
            },
            Host::Node => refuse(
                request,
                resolved,
                "node",
                NO_NODE,
                "host=node but no node is paired with this gateway; nothing was run".into(),
                &events,
            ),
        }
    }
}

/// Direct mode was checked just above; if it vanished, refuse rather than guess.
fn unreachable_direct(
    request: ExecRequest,
    policy: policy::ResolvedPolicy,
    events: &dyn EventSink,
) -> RunReport {
    refuse(
        request,
        policy,
        "sandbox",
        SANDBOX_UNAVAILABLE,
        "direct mode ended".into(),
        events,
    )
}

fn refuse(
    request: ExecRequest,
    policy: policy::ResolvedPolicy,
    host: &str,
    reason: &str,
    rule: String,
    events: &dyn EventSink,
) -> RunReport {
    let run_id = request.run_id.unwrap_or_else(runner::new_run_id);
    events.emit(ExecEvent::Denied {
        run_id: run_id.clone(),
        host: host.into(),
        reason: reason.into(),
    });
    RunReport {
        run_id,
        host: host.into(),
        policy,
        decision: Decision::Deny {
            reason: DenyReason::HostUnavailable,
            rule: rule.clone(),
        },
        executed: None,
        outcome: Outcome::Denied {
            reason: reason.into(),
            rule,
        },
    }
}

/// A request timeout given in seconds by a tool call.
pub fn seconds(value: f64) -> Option<Duration> {
    (value.is_finite() && value > 0.0).then(|| Duration::from_secs_f64(value.min(1e9)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_deferred_route_is_built_once_and_only_when_needed() {
        let built = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&built);
        let route = SandboxRoute::deferred(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            SandboxRoute::Unavailable("no backend here".into())
        });
        assert_eq!(
            built.load(Ordering::SeqCst),
            0,
            "nothing is probed up front"
        );
        for _ in 0..3 {
            assert!(matches!(
                route.resolved(),
                SandboxRoute::Unavailable(why) if why == "no backend here"
            ));
        }
        assert_eq!(built.load(Ordering::SeqCst), 1);
    }
}
