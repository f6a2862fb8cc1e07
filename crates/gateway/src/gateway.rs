//! The gateway: one exec request from an agent's session becomes one pipeline — decide
//! (the runner reads this host's approvals file once and explains the request once),
//! route by the resolved host, execute on that route's executor, report — with the
//! session's overrides going in and its lifecycle events coming out.

use std::sync::Arc;

use policy::{Confinement, DenyReason, Host};
use runner::{Decided, EventSink, ExecEvent, ExecRequest, Executor, RunHost, RunReport, Runner};
use tokio_util::sync::CancellationToken;

use crate::files::FileTools;
use crate::metrics::{Asking, Metrics};
use crate::processes::{OUTPUT_BUFFER_BYTES, Process, Processes};
use crate::route::Routes;
use crate::runs::RunSlots;
use crate::sessions::{SessionEvents, SessionKey, Sessions};

/// Everything behind the agent-facing tools.
pub struct Gateway {
    runner: Runner,
    routes: Routes,
    sessions: Sessions,
    runs: RunSlots,
    processes: Processes,
    files: Option<FileTools>,
    shutdown: CancellationToken,
    /// How long a session's runs outlive it (`with_runs_kept_after_session`).
    keep_runs: std::time::Duration,
    /// Agents already reported to the operator as having no policy of their own; `None`:
    /// no reports (`with_agent_reports`).
    reported_agents: Option<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// What an operator's Prometheus scrapes.
    metrics: Metrics,
}

/// Agents remembered as reported (past this, nobody more is reported: the log is not a
/// place an unbounded number of names should reach).
const MAX_REPORTED_AGENTS: usize = 1024;

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("files", &self.files)
            .finish()
    }
}

impl Gateway {
    /// A gateway deciding with `runner`, running through `routes`, and serving file tools
    /// through `files`.
    pub fn new(runner: Runner, routes: Routes, files: Option<FileTools>) -> Self {
        Gateway {
            runner,
            routes,
            sessions: Sessions::default(),
            runs: RunSlots::default(),
            processes: Processes::default(),
            files,
            shutdown: CancellationToken::new(),
            keep_runs: std::time::Duration::ZERO,
            reported_agents: None,
            metrics: Metrics::new(),
        }
    }

    /// The metrics in Prometheus' text format, as of now.
    pub fn metrics_text(&self) -> String {
        let nodes = self.routes.node.as_ref().map_or(0, |hub| hub.connected());
        self.metrics.encode(nodes, self.sessions.len())
    }

    /// Report to the operator (in the log, once per agent) an agent that runs something
    /// with no policy of its own — for a server whose agents come from credentials.
    pub fn with_agent_reports(mut self) -> Self {
        self.reported_agents = Some(std::sync::Mutex::default());
        self
    }

    /// Runs started with `yield` or `background` outlive the session that started them by
    /// `keep` (`[gateway] keep_runs_after_session`); zero, the default: they end with it.
    pub fn with_runs_kept_after_session(mut self, keep: std::time::Duration) -> Self {
        self.keep_runs = keep;
        self
    }

    /// At most `per_agent` runs of one agent in progress at once (default
    /// [`crate::DEFAULT_RUNS_PER_AGENT`]); a run past that is refused, saying so. Session
    /// state is kept for at least twice `sessions_per_agent` sessions of each agent, so an
    /// agent's live sessions never lose theirs to its own churn.
    pub fn with_limits(mut self, per_agent: usize, sessions_per_agent: usize) -> Self {
        self.runs = RunSlots::new(per_agent);
        self.sessions = Sessions::with_quota(
            crate::sessions::MAX_SESSIONS_PER_AGENT.max(sessions_per_agent.saturating_mul(2) + 1),
        );
        self
    }

    /// `Ok` if `host=sandbox` can run commands now, else the diagnosis.
    pub fn sandbox_available(&self) -> Result<(), String> {
        self.routes.sandbox(&self.runner.config()).map(|_| ())
    }

    /// The nodes connected over the Bridge, if this gateway takes node connections.
    pub fn nodes(&self) -> Option<&std::sync::Arc<bridge::Hub>> {
        self.routes.node.as_ref()
    }

    /// The sessions.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// The per-agent run slots.
    pub fn runs(&self) -> &RunSlots {
        &self.runs
    }

    /// The runs that outlive their call (`exec` with `yield` or `background`).
    pub fn processes(&self) -> &Processes {
        &self.processes
    }

    /// End `key`'s session: its `/exec` settings and pending events are forgotten, and
    /// the runs it started and left running end (their trees killed).
    pub fn end_session(&self, key: &SessionKey) {
        self.processes.end_session_after(key, self.keep_runs);
        self.sessions.end(key);
    }

    /// The file tools, if a workspace is configured.
    pub fn files(&self) -> Option<&FileTools> {
        self.files.as_ref()
    }

    /// Cancelled on shutdown: in-flight runs are stopped and their trees killed.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Apply a slash command (`/exec ...`, `/elevated ...`) to the session. Refused, with
    /// the reason, when the command is invalid or the session has ended.
    pub fn slash_command(&self, key: &SessionKey, text: &str) -> Result<String, String> {
        let current = self.sessions.overrides(key);
        let outcome = policy::apply_slash_command(&current, text).map_err(|e| e.to_string())?;
        if !self.sessions.set_overrides(key, outcome.overrides) {
            return Err(format!(
                "session {:?} has ended; nothing was changed (start a new one)",
                key.session
            ));
        }
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

    /// May `key`'s agent change `path` with a file tool? Its permission mode decides; in
    /// approval mode the human is asked, shown `detail`.
    /// The question is withdrawn from the approver when `stop` resolves (or the gateway
    /// shuts down).
    pub async fn authorize_write(
        &self,
        key: &SessionKey,
        path: &str,
        detail: String,
        stop: impl Future<Output = ()>,
    ) -> Result<(), String> {
        let overrides = self.sessions.overrides(key);
        let cancel = self.shutdown.child_token();
        until(
            self.runner.authorize_write(
                &key.agent,
                &key.session,
                &overrides,
                vec![path.to_owned()],
                detail,
                &cancel,
            ),
            &cancel,
            stop,
        )
        .await
    }

    /// Steps one and two for `key`'s session: the request decided against this host's
    /// approvals file, as `exec` would decide it (`warden policy explain` shows this).
    pub fn decide(&self, key: &SessionKey, request: ExecRequest) -> Decided {
        // Direct mode is read without building the sandbox route: explaining a request
        // probes nothing.
        let confinement = self
            .routes
            .direct_now()
            .map_or(Confinement::Sandbox, Executor::confinement);
        self.runner.decide(
            &self.runner.config(),
            self.in_session(key, request),
            confinement,
        )
    }

    /// `request` as `key`'s session makes it: its agent, session and `/exec` settings.
    fn in_session(&self, key: &SessionKey, mut request: ExecRequest) -> ExecRequest {
        request.agent = key.agent.clone();
        request.session = key.session.clone();
        request.session_overrides = self.sessions.overrides(key);
        request
    }

    /// Run one exec for `key`'s session: decide, route by the resolved host, execute.
    /// The session's `/exec` settings and events are kept only while it is open
    /// ([`Sessions::open`](crate::Sessions::open), which a transport calls when the session
    /// starts); a session never opened, or already ended, runs under the configured
    /// policy and its events are dropped.
    ///
    /// When `stop` resolves — the client cancelled the request, went away, or ended its
    /// session — or the gateway shuts down, the run ends: a pending question is withdrawn
    /// from the approver, a running command's whole tree is killed, and the report (and
    /// the session's event) says it was cancelled.
    pub async fn exec(
        &self,
        key: &SessionKey,
        request: ExecRequest,
        stop: impl Future<Output = ()>,
    ) -> RunReport {
        let cancel = self.shutdown.child_token();
        // On the heap: a run's future is tens of KiB, and every caller's future above it
        // (the MCP call, its progress, rmcp's and the HTTP server's) would carry it again
        // — in a debug build enough copies to overflow a worker thread's 2 MiB stack.
        until(
            Box::pin(self.run(key, request, &cancel, None)),
            &cancel,
            stop,
        )
        .await
    }

    /// The first run of an agent with no policy of its own is reported to the operator
    /// (once per agent while the gateway runs): it gets the global settings and the host
    /// file's defaults, and a client set up under a new id is denied with no other hint.
    fn report_agent_without_policy(&self, agent: &str) {
        {
            let Some(reported) = &self.reported_agents else {
                return;
            };
            let mut reported = reported.lock().unwrap_or_else(|p| p.into_inner());
            if reported.contains(agent) || reported.len() >= MAX_REPORTED_AGENTS {
                return;
            }
            reported.insert(agent.to_owned());
        }
        if !self.runner.has_own_policy(agent) {
            tracing::warn!(
                "agent {agent:?} has no policy of its own (no [[agents.list]] entry in config.toml, nothing for it in exec-approvals.json): it gets the global settings and the host file's defaults; `warden doctor` says what it may run"
            );
        }
    }

    /// Start one exec for `key`'s session that goes on without its caller: the same
    /// pipeline as [`Gateway::exec`] (decided once, on its exact plan; counted in the
    /// agent's run slots), with its output kept for the `process` tool and its standard
    /// input open for it to write. It ends when it ends, when [`Process::kill`] is
    /// called, when the session ends ([`Gateway::end_session`]) or when the gateway
    /// shuts down; its result is then in the [`Process`], and its `exec.finished` event
    /// (with the output's tail) goes to the session as any run's.
    pub fn start(self: &Arc<Self>, key: &SessionKey, mut request: ExecRequest) -> Arc<Process> {
        let id = request.run_id.clone().unwrap_or_else(runner::new_run_id);
        request.run_id = Some(id.clone());
        let output = caps::LiveOutput::new(OUTPUT_BUFFER_BYTES);
        request.live = Some(output.clone());
        let (input, stream) = caps::input_channel();
        request.input = Some(stream);
        let host = self.runner.host_of(
            &self.runner.config(),
            &self.in_session(key, request.clone()),
        );
        let process = Arc::new(Process::new(
            id,
            key.clone(),
            (request.command.display(), host),
            output,
            input,
            self.shutdown.child_token(),
        ));
        process.set_terminal(request.terminal);
        self.processes.insert(Arc::clone(&process));
        let gateway = Arc::clone(self);
        let watched = Arc::clone(&process);
        let key = key.clone();
        tokio::spawn(async move {
            let cancel = watched.stop().clone();
            let report = gateway.run(&key, request, &cancel, Some(&watched)).await;
            watched.finish(report);
        });
        process
    }

    /// [`Gateway::route_and_run`], counted in the metrics.
    async fn run(
        &self,
        key: &SessionKey,
        request: ExecRequest,
        cancel: &CancellationToken,
        watcher: Option<&Process>,
    ) -> RunReport {
        let arrived = std::time::Instant::now();
        let _in_progress = self.metrics.started();
        let report = self.route_and_run(key, request, cancel, watcher).await;
        self.metrics.ended(&report, arrived.elapsed());
        report
    }

    async fn route_and_run(
        &self,
        key: &SessionKey,
        request: ExecRequest,
        cancel: &CancellationToken,
        watcher: Option<&Process>,
    ) -> RunReport {
        self.report_agent_without_policy(&key.agent);
        // Held until this future ends, however it ends (dropped with its client too).
        let slot = self.runs.take(&key.agent);
        let request = self.in_session(key, request);
        let events = Watched {
            session: SessionEvents {
                sessions: &self.sessions,
                key: key.clone(),
            },
            process: watcher,
            metrics: &self.metrics,
            asking: std::sync::Mutex::new(None),
        };
        // Route first: a request for a node is decided there, against the node's own
        // file; this host only learns where it goes and what it asks for.
        // One snapshot of the config for this request, from routing to its end: an edit
        // made while it waits for its approver is for the next request.
        let config = self.runner.config();
        let host = self.runner.host_of(&config, &request);
        if host == Host::Node {
            let requested = self.runner.requested(&config, &request);
            let run_id = request.run_id.clone().unwrap_or_else(runner::new_run_id);
            let node = requested
                .node
                .as_ref()
                .map_or_else(|| "node".into(), |n| n.value.clone());
            let (reason, rule) = match (&slot, &self.routes.node) {
                (None, _) => (DenyReason::RunLimit, self.run_limit_message(key)),
                (Some(_), None) => (DenyReason::NoNode, NO_NODES.to_owned()),
                (Some(_), Some(hub)) => {
                    // The node decides and keeps its own record; this host records
                    // where the request went and how it ended.
                    let (agent, session, command) = (
                        request.agent.clone(),
                        request.session.clone(),
                        request.command.clone(),
                    );
                    let report = crate::node_route::run(
                        &self.runner,
                        hub,
                        run_id,
                        request,
                        requested,
                        &events,
                        cancel,
                    )
                    .await;
                    self.runner
                        .record_routed(&agent, &session, &command, &report);
                    return report;
                }
            };
            let report = self.runner.refuse_routed(
                run_id,
                requested,
                RunHost::Node(node),
                reason,
                rule,
                &events,
            );
            self.runner
                .record_routed(&request.agent, &request.session, &request.command, &report);
            return report;
        }
        // The route is fixed before the decision (direct mode read once, here): its
        // executor says how the run will be confined, and the decision and plan say the
        // same. The run goes to exactly this executor.
        let (route, run_host) = match host {
            Host::Sandbox => (self.routes.sandbox(&config), RunHost::Sandbox),
            _ => (Ok(self.routes.gateway.clone()), RunHost::Gateway),
        };
        let confinement = route
            .as_ref()
            .map_or(Confinement::Sandbox, |executor| executor.confinement());
        let deciding = std::time::Instant::now();
        let decided = self.runner.decide(&config, request, confinement);
        self.metrics.decided(deciding.elapsed());
        if slot.is_none() {
            return self.runner.refuse(
                decided,
                run_host,
                DenyReason::RunLimit,
                self.run_limit_message(key),
                &events,
            );
        }
        match route {
            Ok(executor) => {
                self.runner
                    .execute(decided, &executor, &events, cancel)
                    .await
            }
            Err(why) => self.runner.refuse(
                decided,
                RunHost::Sandbox,
                DenyReason::SandboxUnavailable,
                format!("host=sandbox but no sandbox backend is available: {why}; nothing was run"),
                &events,
            ),
        }
    }

    /// Why `key`'s agent may not start another run now.
    fn run_limit_message(&self, key: &SessionKey) -> String {
        format!(
            "agent {:?} already has {} runs in progress, the most one agent may have ([gateway] max_runs_per_agent = {}); nothing was run: wait for one to finish",
            key.agent,
            self.runs.in_progress(&key.agent),
            self.runs.limit()
        )
    }
}

/// A run's events go to its session and, for a run that outlives its call, to its
/// entry in the process table (which learns when its command started); a question to a
/// human is counted as pending from the moment it is asked to the run's next event (or
/// the run's end, however it ends).
struct Watched<'a> {
    session: SessionEvents<'a>,
    process: Option<&'a Process>,
    metrics: &'a Metrics,
    asking: std::sync::Mutex<Option<Asking<'a>>>,
}

impl Watched<'_> {
    fn settled(&self) {
        self.asking.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

impl EventSink for Watched<'_> {
    fn emit(&self, event: ExecEvent) {
        self.settled();
        if let Some(process) = self.process {
            process.saw(&event);
        }
        self.session.emit(event);
    }

    fn awaiting_approval(&self, _run_id: &str) {
        *self.asking.lock().unwrap_or_else(|p| p.into_inner()) = Some(self.metrics.asking());
        if let Some(process) = self.process {
            process.saw_asking();
        }
    }

    fn connection_question(&self, run_id: &str, to: Option<&str>) {
        match to {
            Some(_) => self.awaiting_approval(run_id),
            None => {
                self.settled();
                if let Some(process) = self.process {
                    process.saw_answered();
                }
            }
        }
    }
}

/// Why a `host = node` request is refused by a process that takes no node connections.
const NO_NODES: &str = "host=node but this process reaches no nodes: node runs go through `warden gateway run` (nodes pair with its `--bridge-listen`, or it starts those added with `warden nodes add`); nothing was run";

/// Drive `work` to its end; if `stop` resolves first, cancel `cancel` (which `work`
/// watches) and still let `work` finish, so that it reports what cancelling did.
async fn until<T>(
    work: impl Future<Output = T>,
    cancel: &CancellationToken,
    stop: impl Future<Output = ()>,
) -> T {
    tokio::pin!(work);
    tokio::select! {
        biased;
        done = &mut work => return done,
        () = stop => cancel.cancel(),
    }
    work.await
}
