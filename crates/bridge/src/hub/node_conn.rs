//! One connected node: its outbox, the calls waiting for its answers, and where each
//! run's events go (only to the call that dispatched that run, on this connection).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use caps::{InputCredit, LiveOutput, Relayed};
use runner::{ExecEvent, RunHost};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::BridgeError;
use crate::conn::{Outbox, ReasonHandle};
use crate::message::{InvokeError, Msg};
use crate::wire::TransportKind;

pub(super) type Reply = Result<serde_json::Value, BridgeError>;

pub(super) struct PendingCall {
    pub(super) reply: oneshot::Sender<Reply>,
    pub(super) run_id: Option<String>,
    pub(super) events: Option<mpsc::Sender<ExecEvent>>,
    /// Events delivered for the run so far ([`MAX_EVENTS_PER_RUN`]).
    pub(super) events_seen: u32,
    /// Where a streamed run's output goes, and where the node's word that it took
    /// input goes.
    pub(super) stream: Option<RunStream>,
}

/// The gateway's side of a streamed run.
pub struct RunStream {
    /// The run's output, as the node streams it.
    pub output: LiveOutput,
    /// The run's input relay's credit (the node says how much it took).
    pub input: Option<InputCredit>,
}

/// Events one run on a node may deliver: its lifecycle is a handful (started, then one
/// of finished, denied, cancelled, with a retry or two); past this a node is flooding
/// and the rest are dropped.
pub const MAX_EVENTS_PER_RUN: u32 = 16;

/// One connected node.
pub struct NodeConn {
    /// Its id (proven by its token).
    pub id: String,
    /// Its display name.
    pub display_name: Option<String>,
    /// Where it connected from.
    pub remote: Option<String>,
    /// How.
    pub transport: TransportKind,
    /// What it serves.
    pub capabilities: Vec<String>,
    /// When it connected (ms since the epoch).
    pub connected_at: u64,
    pub(super) token_fingerprint: String,
    pub(super) outbox: Outbox,
    pub(super) pending: Mutex<HashMap<u64, PendingCall>>,
    pub(super) next_id: AtomicU64,
    pub(super) closed: CancellationToken,
    pub(super) reason: ReasonHandle,
}

impl std::fmt::Debug for NodeConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeConn")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// What a run on a node needs from the caller.
pub struct RunCall<'a> {
    /// The gateway's run id (the node's events carry it).
    pub run_id: &'a str,
    /// Where the node's events for this run go.
    pub events: mpsc::Sender<ExecEvent>,
    /// A streamed run (`RunParams::stream`): where its output and input credit go.
    pub stream: Option<RunStream>,
}

impl NodeConn {
    pub(super) fn disconnected(&self) -> BridgeError {
        let reason = self.reason.get();
        BridgeError::Closed(format!(
            "node {} disconnected{}",
            self.id,
            if reason.is_empty() {
                String::new()
            } else {
                format!(" ({reason})")
            }
        ))
    }

    /// Invoke `command` on the node. Cancelling `cancel` sends `cancel` and waits up to
    /// `grace` for the node to confirm.
    pub async fn invoke(
        &self,
        command: &str,
        params: serde_json::Value,
        run: Option<RunCall<'_>>,
        cancel: &CancellationToken,
        grace: Duration,
    ) -> Reply {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, mut rx) = oneshot::channel();
        {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            if self.closed.is_cancelled() {
                return Err(self.disconnected());
            }
            let (run_id, events, stream) = match run {
                Some(r) => (Some(r.run_id.to_owned()), Some(r.events), r.stream),
                None => (None, None, None),
            };
            pending.insert(
                id,
                PendingCall {
                    reply: tx,
                    run_id,
                    events,
                    events_seen: 0,
                    stream,
                },
            );
        }
        let sent = self
            .outbox
            .send(Msg::Invoke {
                id,
                command: command.to_owned(),
                params,
            })
            .await;
        if sent.is_err() {
            self.forget(id);
            return Err(self.disconnected());
        }
        tokio::select! {
            biased;
            reply = &mut rx => return reply.unwrap_or_else(|_| Err(self.disconnected())),
            () = cancel.cancelled() => {}
        }
        let _ = self.outbox.send(Msg::Cancel { id }).await;
        match tokio::time::timeout(grace, rx).await {
            Ok(reply) => reply.unwrap_or_else(|_| Err(self.disconnected())),
            Err(_) => {
                self.forget(id);
                Err(BridgeError::Timeout(format!(
                    "node {} did not confirm the cancellation within {}s",
                    self.id,
                    grace.as_secs()
                )))
            }
        }
    }

    pub(super) fn forget(&self, id: u64) {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }

    /// Close the connection (the node's runs are cancelled on its side).
    pub fn close(&self) {
        self.closed.cancel();
    }

    /// True while connected.
    pub fn is_connected(&self) -> bool {
        !self.closed.is_cancelled()
    }

    /// Carry one thing of a streamed run's input (its relay's next) to the node.
    pub async fn relay_input(&self, run_id: &str, item: Relayed) -> Result<(), BridgeError> {
        let run_id = run_id.to_owned();
        let msg = match item {
            Relayed::Bytes(bytes) => Msg::ExecInput {
                run_id,
                data: BASE64.encode(bytes),
            },
            Relayed::Close => Msg::ExecEof { run_id },
            Relayed::Signal(number) => match caps::signal_name(number) {
                Some(name) => Msg::ExecSignal {
                    run_id,
                    signal: name.to_owned(),
                },
                // Only the named signals are ever sent (the MCP tool takes names).
                None => return Ok(()),
            },
            Relayed::Resize(size) => Msg::ExecResize {
                run_id,
                rows: size.rows,
                cols: size.cols,
            },
        };
        self.outbox.send(msg).await.map_err(|_| self.disconnected())
    }

    /// A streamed run's output or input credit, for the call that dispatched it on this
    /// connection (anything else is dropped; undecodable data ends the connection).
    fn deliver_stream(&self, run_id: &str, output: Option<&str>, taken: Option<u64>) {
        let pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let Some(stream) = pending
            .values()
            .find(|c| c.run_id.as_deref() == Some(run_id))
            .and_then(|c| c.stream.as_ref())
        else {
            tracing::debug!(
                "bridge: node {} streamed for run {run_id:?}, which it is not streaming for this gateway; dropped",
                self.id
            );
            return;
        };
        if let Some(data) = output {
            match BASE64.decode(data) {
                Ok(bytes) if bytes.len() <= crate::message::MAX_OUTPUT_CHUNK => {
                    stream.output.relay(&bytes)
                }
                _ => {
                    tracing::warn!(
                        "bridge: node {} sent output that is not base64 of at most {} bytes; closing",
                        self.id,
                        crate::message::MAX_OUTPUT_CHUNK
                    );
                    self.close();
                }
            }
        }
        if let (Some(bytes), Some(credit)) = (taken, &stream.input) {
            credit.delivered(usize::try_from(bytes).unwrap_or(usize::MAX));
        }
    }

    pub(super) fn deliver(&self, msg: Msg) {
        let (run_id, event) = match msg {
            Msg::ExecOutput { run_id, data } => {
                self.deliver_stream(&run_id, Some(&data), None);
                return;
            }
            Msg::ExecInputTaken { run_id, bytes } => {
                self.deliver_stream(&run_id, None, Some(bytes));
                return;
            }
            Msg::InvokeResult { id, ok, error } => {
                let call = self
                    .pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
                let Some(call) = call else {
                    tracing::warn!(
                        "bridge: node {} answered invoke {id}, which is not pending",
                        self.id
                    );
                    return;
                };
                let reply = match (ok, error) {
                    (Some(v), None) => Ok(v),
                    (None, Some(InvokeError { code, message })) => {
                        Err(BridgeError::Refused { code, message })
                    }
                    _ => Err(BridgeError::Protocol(
                        "a result with both or neither of ok and error".into(),
                    )),
                };
                let _ = call.reply.send(reply);
                return;
            }
            other => match other.into_event(RunHost::Node(self.id.clone())) {
                Ok(event) => (event.run_id().to_owned(), event),
                Err(other) => {
                    tracing::warn!(
                        "bridge: node {} sent {other:?}, which nodes do not send; dropping it",
                        self.id
                    );
                    self.close();
                    return;
                }
            },
        };
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let call = pending
            .values_mut()
            .find(|c| c.run_id.as_deref() == Some(run_id.as_str()));
        match call {
            // Bounded: a node flooding events loses them, it cannot grow the gateway.
            Some(call) if call.events_seen < MAX_EVENTS_PER_RUN => {
                call.events_seen += 1;
                if let Some(sink) = &call.events {
                    let _ = sink.try_send(event);
                }
            }
            Some(call) => {
                if call.events_seen == MAX_EVENTS_PER_RUN {
                    call.events_seen += 1;
                    tracing::warn!(
                        "bridge: node {} sent more than {MAX_EVENTS_PER_RUN} events for run {run_id:?}; the rest are dropped",
                        self.id
                    );
                }
            }
            None => tracing::debug!(
                "bridge: node {} sent an event for run {run_id:?}, which it is not running for this gateway; dropped",
                self.id
            ),
        }
    }
}
