//! `host = node`: the request goes to a node connected over the Bridge, chosen by the
//! request's (or session's, agent's, global) `node` within the agent's binding (product
//! spec §6.3); ambiguity and absence are refusals naming the candidates.
//!
//! Routed before anything is decided: the gateway resolves the request once, *before
//! any host file* (`Runner::requested` — its own file is the gateway machine's ceiling,
//! not the node's), analyses nothing, and sends the request with the security and ask it
//! asks for. The node decides with its own runner against its own approvals file and
//! caps them with it, so a node whose file says deny denies whatever the gateway sends.
//! Until the node's decision arrives, the report says `sent-to-node`. Events the node sends
//! for this run go to the session that dispatched it (the hub only delivers events for
//! run ids it dispatched on that connection). A node that drops mid-run makes this call
//! end at once with that reason; cancelling the call cancels the remote run. A run
//! someone watches or drives (progress, a run that goes on, input, a terminal) is
//! streamed when the node can: its output arrives into the run's live output as it is
//! written, and the agent's input, signals and resizes are relayed to the node.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use bridge::message::{self, RunParams, RunResult, WireDecision, WireOutcome};
use bridge::{BridgeError, Hub, RunCall, RunStream};
use caps::{ExecOutput, ExitStatus, RefusedWrites};
use policy::{AllowReason, Decision, DenyReason, ResolvedPolicy, Source};
use runner::{EventSink, ExecEvent, ExecRequest, Executed, Outcome, RunHost, RunReport, Runner};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Events one node run may have queued before the gateway reads them.
const EVENT_QUEUE: usize = 32;

/// What the gateway allows a node beyond a run's own time before it stops waiting: the
/// node's answer needs a moment to arrive.
pub const NODE_SLACK: Duration = Duration::from_secs(10);

/// How long the gateway waits for a node to *start* a run: the node may first ask its
/// own approver, which waits this long at most.
pub const NODE_START_WAIT: Duration =
    Duration::from_secs(approvals::ipc::DEFAULT_APPROVAL_TIMEOUT.as_secs() + NODE_SLACK.as_secs());

/// The gateway's own deadlines for a run on a node whose timeout is `timeout`: until it
/// starts ([`NODE_START_WAIT`]), and from its start (`timeout` and [`NODE_SLACK`]). A
/// node that has not answered by then is told to cancel the run, and the run is
/// reported timed out — a stalled node never holds the agent's call longer.
fn deadline_from(started: Option<tokio::time::Instant>, timeout: Duration) -> tokio::time::Instant {
    match started {
        Some(at) => at + timeout.saturating_add(NODE_SLACK),
        None => tokio::time::Instant::now() + NODE_START_WAIT,
    }
}

/// Send `request` (run id `run_id`) to the node `requested` selects: the node decides
/// it against its own file. `requested` is what the request asks for before any host
/// file ([`Runner::requested`]); nothing about the command is analysed here.
pub async fn run(
    runner: &Runner,
    hub: &Arc<Hub>,
    run_id: String,
    request: ExecRequest,
    requested: ResolvedPolicy,
    events: &dyn EventSink,
    cancel: &CancellationToken,
) -> RunReport {
    let query = requested.node.as_ref().map(|n| n.value.clone());
    let node = match hub.select(
        query.as_deref(),
        requested.node_binding.as_ref().map(|b| b.value.as_str()),
    ) {
        Ok(node) => node,
        Err(e) => {
            let shown = query.unwrap_or_else(|| "node".to_owned());
            return runner.refuse_routed(
                run_id,
                requested,
                RunHost::Node(shown),
                DenyReason::NoNode,
                format!("host=node: {e}; nothing was run"),
                events,
            );
        }
    };
    let mut args = policy::ExecArgs::new(request.command.clone());
    // As the agent gave it: a relative directory starts at the node's own default.
    args.cwd = request.cwd.as_ref().map(|c| c.display().to_string());
    args.env = request.env.clone();
    args.security = Some(requested.security.value);
    args.ask = Some(requested.ask.value);
    args.timeout = (requested.timeout.source != Source::Default)
        .then_some(requested.timeout.value.as_secs_f64());
    // As the agent asked: the node decides whether it can hold the run to it (without
    // an egress proxy it refuses), never the gateway by leaving it out.
    args.egress = request.params.egress.clone();
    // The node decides whether it can give the command a terminal (one that does not
    // stream refuses), never the gateway by leaving it out.
    if let Some(size) = request.terminal {
        args.tty = true;
        args.rows = Some(size.rows);
        args.cols = Some(size.cols);
    }
    // Streamed when someone watches it (progress, a run that goes on) or drives it (its
    // input, its terminal), and the node can.
    let streams = node.capabilities.iter().any(|c| c == message::EXEC_STREAM);
    let stream = streams
        && (request.live.is_some() || request.input.is_some() || request.terminal.is_some());
    let params = RunParams {
        run_id: run_id.clone(),
        agent: request.agent.clone(),
        session: request.session.clone(),
        request: args,
        stream,
        notices: node.capabilities.iter().any(|c| c == message::RUN_NOTICES),
    };
    let host = RunHost::Node(node.id.clone());
    let relay = request.input.as_ref().and_then(caps::InputStream::relay);
    // A node that does not stream takes no input: writes are refused as closed at once,
    // not queued for nobody.
    let relay = relay.filter(|_| stream);
    let run_stream = match (&request.live, stream) {
        (Some(live), true) => Some(RunStream {
            output: live.clone(),
            input: relay.as_ref().map(caps::InputRelay::credit),
        }),
        // A stream with nobody reading its output still carries the input.
        (None, true) => Some(RunStream {
            output: caps::LiveOutput::new(0),
            input: relay.as_ref().map(caps::InputRelay::credit),
        }),
        (live, false) => {
            // The node sends its output with the result; progress reports say where
            // it runs.
            if let Some(live) = live {
                live.runs_elsewhere(format!("node {}", node.id));
            }
            None
        }
    };
    let (tx, mut rx) = mpsc::channel::<ExecEvent>(EVENT_QUEUE);
    // Cancelled by the caller, or by the gateway's own deadline: a stalled node does not
    // hold the agent's call past the run's timeout.
    let stop = cancel.child_token();
    let timeout = requested.timeout.value;
    let begun = tokio::time::Instant::now();
    let call = node.invoke(
        message::SYSTEM_RUN,
        serde_json::to_value(&params).unwrap_or_default(),
        Some(RunCall {
            run_id: &run_id,
            events: tx,
            stream: run_stream,
        }),
        &stop,
        hub.config().cancel_grace,
    );
    tokio::pin!(call);
    // The agent's input, signals and resizes go to the node as they come, until the call
    // ends (the node drops what arrives for a run that has ended).
    let relaying = relay.map(|mut relay| {
        let (node, run_id) = (Arc::clone(&node), run_id.clone());
        let ended = stop.clone();
        tokio::spawn(async move {
            loop {
                let item = tokio::select! {
                    item = relay.next() => item,
                    () = ended.cancelled() => None,
                };
                let Some(item) = item else { return };
                if node.relay_input(&run_id, item).await.is_err() {
                    return;
                }
            }
        })
    });
    let expiry = tokio::time::sleep_until(deadline_from(None, timeout));
    tokio::pin!(expiry);
    let (mut expired, mut started) = (false, false);
    let reply = loop {
        tokio::select! {
            reply = &mut call => break reply,
            Some(event) = rx.recv() => {
                if !started && matches!(event, ExecEvent::Started { .. }) {
                    started = true;
                    expiry
                        .as_mut()
                        .reset(deadline_from(Some(tokio::time::Instant::now()), timeout));
                }
                events.emit(event);
            }
            () = &mut expiry, if !expired => {
                expired = true;
                stop.cancel();
            }
        }
    };
    while let Ok(event) = rx.try_recv() {
        events.emit(event);
    }
    if let Some(relaying) = relaying {
        relaying.abort();
    }
    let mut report = RunReport {
        run_id: run_id.clone(),
        host: host.clone(),
        // Until the node's own arrive: what was asked for, and that it went to the node.
        policy: requested,
        decision: Decision::Allow {
            reason: AllowReason::SentToNode,
            rule: format!("host=node: sent to node {}, which decides", node.id),
        },
        executed: None,
        outcome: Outcome::Cancelled { started: false },
        notices: runner.notices(),
    };
    let failed = |message: String| Outcome::Error {
        message,
        exit_code: runner::EXIT_WARDEN_ERROR,
    };
    if expired && !cancel.is_cancelled() {
        let message = if started {
            format!(
                "warden: node {} did not finish the run within its timeout ({}s) and {}s more; the gateway cancelled it there",
                node.id,
                timeout.as_secs(),
                NODE_SLACK.as_secs()
            )
        } else {
            format!(
                "warden: node {} did not start the run within {}s (the longest its approver may take, and {}s more); the gateway cancelled it there",
                node.id,
                NODE_START_WAIT.as_secs(),
                NODE_SLACK.as_secs()
            )
        };
        report.outcome = Outcome::Finished {
            output: timed_out(message, begun.elapsed()),
        };
        return report;
    }
    match reply.and_then(|v| {
        serde_json::from_value::<RunResult>(v).map_err(|e| {
            BridgeError::Protocol(format!("node {} sent an invalid result: {e}", node.id))
        })
    }) {
        Ok(result) if result.run_id == run_id => fill(&mut report, result, &node.id),
        Ok(result) => {
            report.outcome = failed(format!(
                "node {} answered for run {:?}, not {:?}; the answer was discarded",
                node.id, result.run_id, run_id
            ));
        }
        Err(BridgeError::Closed(why)) => {
            let message = format!(
                "{why}: the run's result is lost (a node ends a run's whole process tree when its connection drops)"
            );
            events.emit(ExecEvent::Finished {
                run_id: run_id.clone(),
                host: host.clone(),
                code: runner::EXIT_WARDEN_ERROR,
                signal: None,
                timed_out: false,
                cancelled: false,
                tail: message.clone(),
            });
            report.outcome = failed(message);
        }
        Err(BridgeError::Timeout(_)) if cancel.is_cancelled() => {
            report.outcome = Outcome::Cancelled { started: true };
        }
        Err(BridgeError::Refused { code, message }) => {
            report.outcome = failed(format!(
                "node {} refused the request ({code}): {message}",
                node.id
            ));
        }
        Err(e) => report.outcome = failed(format!("node {}: {e}", node.id)),
    }
    report
}

/// The longest rule or message text taken from a node (a sentence, not a document).
const MAX_NODE_TEXT: usize = 4096;

/// `text` cut to [`MAX_NODE_TEXT`] bytes on a character boundary, marked when cut.
fn clip(text: String) -> String {
    if text.len() <= MAX_NODE_TEXT {
        return text;
    }
    caps::truncate_utf8_head(&text.as_bytes()[..MAX_NODE_TEXT], true)
}

/// The output of a run the gateway gave up waiting for after `waited`.
fn timed_out(message: String, waited: Duration) -> ExecOutput {
    ExecOutput {
        status: ExitStatus::Code(caps::TIMED_OUT_EXIT_CODE),
        stdout: String::new(),
        stderr: message.clone(),
        stdout_bytes: None,
        stderr_bytes: None,
        stdout_size: caps::StreamSize::default(),
        stderr_size: caps::StreamSize::whole(message.len() as u64),
        combined: message.clone(),
        tail: message,
        truncated: false,
        timed_out: true,
        duration: waited,
        refused_writes: RefusedWrites::NotWatched,
        egress: Vec::new(),
    }
}

/// At most this many of a node's notices are kept in a result.
const MAX_NODE_NOTICES: usize = 4;

/// The node's answer into the gateway's report, held to the gateway's own output limits
/// (a node's `truncated` can only add a truncation).
fn fill(report: &mut RunReport, result: RunResult, node: &str) {
    // The node's own notices, after the gateway's: a few, each cut like its rules.
    report.notices.extend(
        result
            .notices
            .into_iter()
            .take(MAX_NODE_NOTICES)
            .map(|n| format!("node {node}: {}", clip(n))),
    );
    // What the node enforced (its file is the ceiling), with its sources.
    report.policy.security = result.security;
    report.policy.ask = result.ask;
    report.policy.ask_fallback = result.ask_fallback;
    report.decision = match result.decision {
        WireDecision::Allow { reason, rule } => Decision::Allow {
            reason,
            rule: clip(rule),
        },
        WireDecision::Ask { reason, rule } => Decision::Ask {
            reason,
            rule: clip(rule),
        },
        WireDecision::Deny { reason, rule } => Decision::Deny {
            reason,
            rule: clip(rule),
        },
    };
    report.executed = result.executed.map(|e| Executed {
        argv: e.argv,
        rebuilt: e.rebuilt,
        writable_retry: false,
        in_approver: e.in_approver,
    });
    report.outcome = match result.outcome {
        WireOutcome::Finished {
            code,
            signal,
            stdout,
            stderr,
            stdout_base64,
            stderr_base64,
            stdout_size,
            stderr_size,
            combined,
            tail,
            truncated,
            timed_out,
            duration_ms,
        } => Outcome::Finished {
            output: ExecOutput {
                status: match (code, signal) {
                    (_, Some(s)) => ExitStatus::Signal(s),
                    (Some(c), None) => ExitStatus::Code(c),
                    (None, None) => ExitStatus::Code(runner::EXIT_WARDEN_ERROR),
                },
                stdout,
                stderr,
                // Bytes a node sends that are not base64 are dropped: the text stays.
                stdout_bytes: stdout_base64.and_then(|b| BASE64.decode(b).ok()),
                stderr_bytes: stderr_base64.and_then(|b| BASE64.decode(b).ok()),
                // A node's sizes are its word; `within` makes them agree with what is kept.
                stdout_size: stdout_size.unwrap_or_default(),
                stderr_size: stderr_size.unwrap_or_default(),
                combined,
                tail,
                truncated,
                timed_out,
                duration: Duration::from_millis(duration_ms),
                refused_writes: RefusedWrites::NotWatched,
                egress: Vec::new(),
            }
            .within(caps::OutputLimits::default()),
        },
        WireOutcome::Denied { reason, rule } => Outcome::Denied {
            reason,
            rule: clip(rule),
        },
        WireOutcome::Error { message, exit_code } => Outcome::Error {
            message: clip(message),
            exit_code,
        },
        WireOutcome::Cancelled { started } => Outcome::Cancelled { started },
    };
}
