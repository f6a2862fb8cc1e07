//! The node runner's serving loop: each `system.run` goes through the same
//! [`runner::Runner`] as on the gateway host — decided against the node's **own**
//! `exec-approvals.json` (the gateway's values are requests, capped by the node's file;
//! a gateway's claim of approval is not an approval) and asked of the node's own
//! approver — and runs under the node's containment. Lifecycle events go back as they
//! happen; the result carries the aggregated output, and a streamed run's output also
//! goes back as it is written while its input, signals and terminal size come in
//! (`node_stream.rs`). A `cancel`, or the connection ending for any reason, kills the
//! run's whole process tree before the loop returns.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use approvals::{ApprovalsFile, Store};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use caps::Fs;
use policy::{Decision, Host, TrustedPath};
use runner::{EventSink, ExecEvent, ExecRequest, Executor, Outcome, RunReport, Runner};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::conn::{self, Dispatch, Heartbeat, Outbox};
use crate::handshake::Keys;
use crate::message::{
    self, ApprovalsGetResult, ApprovalsSetParams, ApprovalsSetResult, InvokeError, Msg, RunParams,
    RunResult, WhichParams, WhichResult, WireDecision, WireExecuted, WireOutcome,
};
use crate::node_stream::{self, Streams};
use crate::wire::Transport;

/// Runs that may be in flight on one connection at once; more are refused.
pub const MAX_RUNS_PER_CONNECTION: usize = 64;

/// What a node serves with.
pub struct NodeService {
    /// This node's id (its runs are reported as `host = <id>`).
    pub node_id: String,
    /// The node's runner: its files, its approvals store, its config, its approver.
    pub runner: Runner,
    /// Runs the approved plan on this machine (the node's containment).
    pub executor: Executor,
    /// The node's files (for `system.which`).
    pub fs: Arc<dyn Fs>,
    /// The node's trusted PATH.
    pub trusted_path: TrustedPath,
    /// Where `system.which` resolves relative names.
    pub default_cwd: PathBuf,
    /// The node's approvals file (for `system.execApprovals.*`).
    pub store: Store,
}

impl std::fmt::Debug for NodeService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeService")
            .field("node_id", &self.node_id)
            .finish_non_exhaustive()
    }
}

/// Serve the gateway on an authenticated `transport` until the connection ends or
/// `stop` is cancelled; every run still going is then cancelled (its tree killed) and
/// awaited. Returns why the connection ended.
///
/// Each message is handled on the connection's reader task as it arrives — an invoke
/// starts its own task there and then, with no queue between — so a run starts one
/// hand-over after its frame is read, and a `cancel` finds the run it names.
pub async fn serve_node(
    transport: Transport,
    keys: Keys,
    heartbeat: Heartbeat,
    service: Arc<NodeService>,
    stop: &CancellationToken,
) -> String {
    // Every run's token is a child of this one: cancelling it at the end reaches every
    // run, including one an invoke read at that very instant starts afterwards.
    let every_run = CancellationToken::new();
    let serving = Serving {
        service,
        runs: Arc::default(),
        streams: Streams::default(),
        tasks: TaskTracker::new(),
        every_run: every_run.clone(),
    };
    let tasks = serving.tasks.clone();
    let dispatch: Dispatch = Arc::new(move |msg, outbox| serving.handle(msg, outbox));
    let conn = conn::start_dispatching(transport, keys, heartbeat, dispatch);
    tokio::select! {
        () = conn.closed.cancelled() => {}
        () = stop.cancelled() => {}
    }
    conn.closed.cancel();
    every_run.cancel();
    tasks.close();
    tasks.wait().await;
    let reason = conn.reason();
    if reason.is_empty() {
        "the connection ended".to_owned()
    } else {
        reason
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What one connection's message handler holds.
struct Serving {
    service: Arc<NodeService>,
    /// The invokes in progress, by id, with their cancel tokens.
    runs: Arc<Mutex<HashMap<u64, CancellationToken>>>,
    /// The streamed runs in progress, by run id.
    streams: Streams,
    tasks: TaskTracker,
    /// The parent of every run's token.
    every_run: CancellationToken,
}

impl Serving {
    /// One message from the gateway, on the reader task: never waits.
    fn handle(&self, msg: Msg, outbox: &Outbox) {
        let runs = &self.runs;
        match msg {
            Msg::Invoke {
                id,
                command,
                params,
            } => {
                let cancel = {
                    let mut runs = lock(runs);
                    if runs.contains_key(&id) {
                        let e = InvokeError::new(
                            "invalid",
                            format!("invoke {id} is already in progress"),
                        );
                        outbox.post(result(id, Err(e)));
                        return;
                    }
                    if runs.len() >= MAX_RUNS_PER_CONNECTION {
                        let e = InvokeError::new(
                            "busy",
                            format!(
                                "this node runs at most {MAX_RUNS_PER_CONNECTION} invokes at once"
                            ),
                        );
                        outbox.post(result(id, Err(e)));
                        return;
                    }
                    let cancel = self.every_run.child_token();
                    runs.insert(id, cancel.clone());
                    cancel
                };
                // A streamed run's input is reachable from the next message on: opened
                // here, on the reader, before anything else is read.
                let stream = match streamed_run_id(&command, &params) {
                    Some(run_id) => match self.streams.open(&run_id) {
                        Some(input) => Some((run_id, input)),
                        None => {
                            lock(runs).remove(&id);
                            let e = InvokeError::new(
                                "invalid",
                                format!("run {run_id:?} is already streaming on this connection"),
                            );
                            outbox.post(result(id, Err(e)));
                            return;
                        }
                    },
                    None => None,
                };
                let (service, outbox, runs) =
                    (Arc::clone(&self.service), outbox.clone(), Arc::clone(runs));
                let streams = self.streams.clone();
                self.tasks.spawn(async move {
                    let streaming = stream.as_ref().map(|(run_id, _)| run_id.clone());
                    let context = Context {
                        outbox: &outbox,
                        streams: &streams,
                        input: stream.map(|(_, input)| input),
                    };
                    let answer = invoke(&service, context, &command, params, &cancel).await;
                    if let Some(run_id) = streaming {
                        streams.close(&run_id);
                    }
                    let _ = outbox.send(result(id, answer)).await;
                    lock(&runs).remove(&id);
                });
            }
            msg @ (Msg::ExecInput { .. }
            | Msg::ExecEof { .. }
            | Msg::ExecSignal { .. }
            | Msg::ExecResize { .. }) => {
                if let Err(why) = self.streams.handle(msg) {
                    tracing::warn!("bridge: {why}; closing the connection");
                    outbox.close();
                }
            }
            Msg::Cancel { id } => {
                if let Some(token) = lock(runs).get(&id) {
                    token.cancel();
                }
            }
            other => {
                // Results and events travel node → gateway only: a gateway sending one is
                // broken or hostile.
                tracing::warn!("bridge: unexpected message from the gateway: {other:?}");
                outbox.close();
            }
        }
    }
}

/// The run id of a `system.run` that asks to be streamed.
fn streamed_run_id(command: &str, params: &serde_json::Value) -> Option<String> {
    (command == message::SYSTEM_RUN && params.get("stream") == Some(&serde_json::Value::Bool(true)))
        .then(|| params.get("runId")?.as_str().map(str::to_owned))
        .flatten()
}

/// What an invoke may use of its connection.
struct Context<'a> {
    outbox: &'a Outbox,
    streams: &'a Streams,
    /// A streamed run's input, opened when its invoke was read.
    input: Option<caps::InputStream>,
}

fn result(id: u64, answer: Result<serde_json::Value, InvokeError>) -> Msg {
    match answer {
        Ok(ok) => Msg::InvokeResult {
            id,
            ok: Some(ok),
            error: None,
        },
        Err(e) => Msg::InvokeResult {
            id,
            ok: None,
            error: Some(e),
        },
    }
}

fn params<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, InvokeError> {
    serde_json::from_value(value)
        .map_err(|e| InvokeError::new("invalid", format!("invalid parameters: {e}")))
}

fn json<T: serde::Serialize>(value: &T) -> Result<serde_json::Value, InvokeError> {
    serde_json::to_value(value).map_err(|e| InvokeError::new("internal", e.to_string()))
}

async fn invoke(
    service: &NodeService,
    context: Context<'_>,
    command: &str,
    value: serde_json::Value,
    cancel: &CancellationToken,
) -> Result<serde_json::Value, InvokeError> {
    match command {
        message::SYSTEM_RUN => {
            let p: RunParams = params(value)?;
            let with_notices = p.notices;
            let report = run(service, context, p, cancel).await?;
            let mut result = run_result(&report);
            if !with_notices {
                result.notices.clear();
            }
            json(&result)
        }
        message::SYSTEM_WHICH => {
            let WhichParams { name } = params(value)?;
            let path = policy::resolve_executable(
                service.fs.as_ref(),
                &name,
                &service.default_cwd,
                &service.trusted_path,
            )
            .ok()
            .map(|r| r.path.display().to_string());
            json(&WhichResult { path })
        }
        message::SYSTEM_APPROVALS_GET => {
            if !value.is_null() && value != serde_json::json!({}) {
                return Err(InvokeError::new(
                    "invalid",
                    "system.execApprovals.get takes no parameters",
                ));
            }
            let snapshot = service
                .store
                .load()
                .map_err(|e| InvokeError::new("state", e.to_string()))?;
            json(&ApprovalsGetResult {
                hash: snapshot.hash,
                file: json(&snapshot.file.redacted())?,
            })
        }
        message::SYSTEM_APPROVALS_SET => {
            let p: ApprovalsSetParams = params(value)?;
            approvals_set(&service.store, p)
        }
        other => Err(InvokeError::new(
            "unsupported",
            format!(
                "this node does not serve {other:?} (it serves {:?})",
                message::CAPABILITIES
            ),
        )),
    }
}

/// Replace the node's file by a stricter one, if it is still the file the editor read.
fn approvals_set(store: &Store, p: ApprovalsSetParams) -> Result<serde_json::Value, InvokeError> {
    let incoming: ApprovalsFile = serde_json::from_value(p.file.clone())
        .map_err(|e| InvokeError::new("invalid", format!("not a valid approvals document: {e}")))?;
    let current = store
        .load()
        .map_err(|e| InvokeError::new("state", e.to_string()))?;
    if current.hash != p.base_hash {
        return Err(InvokeError::new(
            "conflict",
            format!(
                "the node's file changed since it was read (expected {}, found {}); get it again and retry",
                p.base_hash, current.hash
            ),
        ));
    }
    let profiles = store.profiles().map_err(|e| InvokeError::new("state", e))?;
    let looser = approvals::tighten::loosenings(&current.file, &incoming, &profiles);
    if !looser.is_empty() {
        return Err(InvokeError::new(
            "not-tighter",
            format!(
                "a remote edit may only tighten this node's approvals; refused, nothing changed: {}",
                looser.join("; ")
            ),
        ));
    }
    let text =
        serde_json::to_string(&p.file).map_err(|e| InvokeError::new("invalid", e.to_string()))?;
    let updated = store.set_from_text(&text, &p.base_hash).map_err(|e| {
        let code = if matches!(e, approvals::StoreError::Conflict { .. }) {
            "conflict"
        } else {
            "invalid"
        };
        InvokeError::new(code, e.to_string())
    })?;
    json(&ApprovalsSetResult {
        hash: updated.hash,
        written: updated.written,
    })
}

/// Forwards the runner's events to the gateway as they happen.
struct Forward<'a> {
    outbox: &'a Outbox,
}

impl EventSink for Forward<'_> {
    fn emit(&self, event: ExecEvent) {
        self.outbox.post(Msg::from_event(event));
    }
}

async fn run(
    service: &NodeService,
    context: Context<'_>,
    p: RunParams,
    cancel: &CancellationToken,
) -> Result<RunReport, InvokeError> {
    message::check_id("run id", &p.run_id)
        .map_err(|e| InvokeError::new("invalid", e.to_string()))?;
    if p.request.host.is_some() || p.request.node.is_some() {
        return Err(InvokeError::new(
            "invalid",
            "system.run's request names no host or node: the gateway chose this node",
        ));
    }
    if p.request.yield_after.is_some() || p.request.background {
        return Err(InvokeError::new(
            "invalid",
            "system.run's request has no `yield` or `background`: a node runs it to its end and answers once (the gateway keeps a run that goes on)",
        ));
    }
    if p.request.tty && !p.stream {
        return Err(InvokeError::new(
            "invalid",
            "system.run's request has `tty` without `stream`: a terminal needs its stream (the gateway streams the runs of nodes that declare exec.stream); nothing ran",
        ));
    }
    let mut request = ExecRequest::from_args(p.agent, p.session, p.request)
        .map_err(|e| InvokeError::new("invalid", format!("system.run: {e}")))?;
    request.run_id = Some(p.run_id.clone());
    // The gateway's resolution arrives at the tool-parameter level; this node's own
    // approvals file is the ceiling over it.
    request.params.host = Some(Host::Node);
    let sink = Forward {
        outbox: context.outbox,
    };
    let input = match (p.stream, context.input) {
        (false, _) => {
            // Output crosses the Bridge once, in the result: the gateway's progress
            // reports say the run is on this node.
            request.live = None;
            return Ok(service
                .runner
                .run(request, &service.executor, &sink, cancel)
                .await);
        }
        (true, Some(input)) => input,
        (true, None) => {
            return Err(InvokeError::new(
                "internal",
                "a streamed run without its input stream",
            ));
        }
    };
    let live = node_stream::output_buffer();
    request.live = Some(live.clone());
    request.input = Some(input);
    let done = CancellationToken::new();
    let forwarding = tokio::spawn(node_stream::forward_output(
        live,
        p.run_id.clone(),
        context.outbox.clone(),
        done.clone(),
    ));
    let feeding = tokio::spawn(node_stream::feed_input(
        context.streams.clone(),
        p.run_id,
        context.outbox.clone(),
        done.clone(),
    ));
    let report = service
        .runner
        .run(request, &service.executor, &sink, cancel)
        .await;
    done.cancel();
    // Every output frame leaves before the result.
    let _ = forwarding.await;
    let _ = feeding.await;
    Ok(report)
}

/// A report as sent back.
pub fn run_result(report: &RunReport) -> RunResult {
    let decision = match &report.decision {
        Decision::Allow { reason, rule } => WireDecision::Allow {
            reason: *reason,
            rule: rule.clone(),
        },
        Decision::Ask { reason, rule } => WireDecision::Ask {
            reason: *reason,
            rule: rule.clone(),
        },
        Decision::Deny { reason, rule } => WireDecision::Deny {
            reason: *reason,
            rule: rule.clone(),
        },
    };
    let outcome = match &report.outcome {
        Outcome::Finished { output } => {
            let (code, signal) = match output.status {
                caps::ExitStatus::Code(c) => (Some(c), None),
                caps::ExitStatus::Signal(s) => (None, Some(s)),
            };
            WireOutcome::Finished {
                code,
                signal,
                stdout: output.stdout.clone(),
                stderr: output.stderr.clone(),
                stdout_base64: output.stdout_bytes.as_deref().map(|b| BASE64.encode(b)),
                stderr_base64: output.stderr_bytes.as_deref().map(|b| BASE64.encode(b)),
                stdout_size: Some(output.stdout_size),
                stderr_size: Some(output.stderr_size),
                combined: output.combined.clone(),
                tail: output.tail.clone(),
                truncated: output.truncated,
                timed_out: output.timed_out,
                duration_ms: output.duration.as_millis() as u64,
            }
        }
        Outcome::Denied { reason, rule } => WireOutcome::Denied {
            reason: *reason,
            rule: rule.clone(),
        },
        Outcome::Error { message, exit_code } => WireOutcome::Error {
            message: message.clone(),
            exit_code: *exit_code,
        },
        Outcome::Cancelled { started } => WireOutcome::Cancelled { started: *started },
    };
    RunResult {
        run_id: report.run_id.clone(),
        security: report.policy.security.clone(),
        ask: report.policy.ask.clone(),
        ask_fallback: report.policy.ask_fallback.clone(),
        decision,
        executed: report.executed.as_ref().map(|e| WireExecuted {
            argv: e.argv.clone(),
            rebuilt: e.rebuilt,
            in_approver: e.in_approver,
        }),
        outcome,
        notices: report.notices.clone(),
    }
}
