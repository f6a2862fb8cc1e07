//! The gateway's side of the Bridge: the nodes connected now, how one is chosen
//! (product spec §6.3, `policy::select_node`), invoking commands on it, and routing what
//! comes back. A node's events reach only the run they belong to — the hub forwards an
//! `exec.*` event only for a run id it dispatched on that same connection, to the sink
//! of the call that dispatched it; a node cannot name a session. A node that disconnects
//! fails its calls at once with the reason; a cancelled call cancels the remote run.
//!
//! Nodes arrive two ways: they dial in (`accept`: a `hello` authenticated against the
//! registry, or a `pair.request`), or the gateway runs a configured command and speaks
//! over its stdio ([`Hub::supervise_stdio`], reconnecting with backoff and keeping the
//! last failure for `warden nodes list`). The registry is watched: revoking a node or
//! rotating its token drops its connection.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use policy::NodeInfo;
use runner::{ExecEvent, RunHost};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::BridgeError;
use crate::conn::{self, Heartbeat, Outbox, ReasonHandle};
use crate::handshake::{self, Hello, refuse};
use crate::message::{InvokeError, Msg, Opening};
use crate::registry::{Lookup, NodeEntry, NodeState, Registry, token_fingerprint};
use crate::wire::{Transport, TransportKind};

/// Hub settings.
#[derive(Clone, Copy, Debug)]
pub struct HubConfig {
    /// Heartbeats on every connection.
    pub heartbeat: Heartbeat,
    /// How long a cancelled call waits for the node to confirm the run is gone.
    pub cancel_grace: Duration,
    /// How often the registry is looked at (revocations, new stdio nodes).
    pub watch_every: Duration,
}

impl Default for HubConfig {
    fn default() -> Self {
        HubConfig {
            heartbeat: Heartbeat::default(),
            cancel_grace: Duration::from_secs(5),
            watch_every: Duration::from_secs(1),
        }
    }
}

/// Starts the command of a stdio node and gives its stdio as a transport.
pub trait Connector: Send + Sync {
    /// Run `command`; its stdin and stdout carry the Bridge.
    fn connect<'a>(
        &'a self,
        command: &'a [String],
    ) -> Pin<Box<dyn Future<Output = Result<Transport, BridgeError>> + Send + 'a>>;
}

type Reply = Result<serde_json::Value, BridgeError>;

struct PendingCall {
    reply: oneshot::Sender<Reply>,
    run_id: Option<String>,
    events: Option<mpsc::Sender<ExecEvent>>,
    /// Events delivered for the run so far ([`MAX_EVENTS_PER_RUN`]).
    events_seen: u32,
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
    token_fingerprint: String,
    outbox: Outbox,
    pending: Mutex<HashMap<u64, PendingCall>>,
    next_id: AtomicU64,
    closed: CancellationToken,
    reason: ReasonHandle,
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
}

impl NodeConn {
    fn disconnected(&self) -> BridgeError {
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
            let (run_id, events) = match run {
                Some(r) => (Some(r.run_id.to_owned()), Some(r.events)),
                None => (None, None),
            };
            pending.insert(
                id,
                PendingCall {
                    reply: tx,
                    run_id,
                    events,
                    events_seen: 0,
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

    fn forget(&self, id: u64) {
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

    fn deliver(&self, msg: Msg) {
        let (run_id, event) = match msg {
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

/// A node as `warden nodes list` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// The node id.
    pub id: String,
    /// Its display name.
    pub display_name: Option<String>,
    /// Where it connected from.
    pub remote: Option<String>,
    /// How it is reached.
    pub transport: TransportKind,
    /// What it serves.
    pub capabilities: Vec<String>,
    /// Connected now.
    pub connected: bool,
    /// Since when (ms since the epoch).
    pub connected_at: Option<u64>,
    /// Why the last connection (or attempt) ended.
    pub last_error: Option<String>,
}

type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The connected nodes of one gateway.
pub struct Hub {
    registry: Registry,
    config: HubConfig,
    clock: Clock,
    nodes: RwLock<HashMap<String, Arc<NodeConn>>>,
    /// What selection looks at, rebuilt on every connect and disconnect (not per call).
    snapshot: RwLock<Arc<Vec<NodeInfo>>>,
    last_errors: Mutex<HashMap<String, String>>,
    supervised: Mutex<HashMap<String, CancellationToken>>,
    shutdown: CancellationToken,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

impl Hub {
    /// A hub admitting the nodes `registry` approves; `clock` gives ms since the epoch.
    pub fn new(registry: Registry, config: HubConfig, clock: Clock) -> Arc<Hub> {
        Arc::new(Hub {
            registry,
            config,
            clock,
            nodes: RwLock::default(),
            snapshot: RwLock::default(),
            last_errors: Mutex::default(),
            supervised: Mutex::default(),
            shutdown: CancellationToken::new(),
        })
    }

    /// The registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The hub's settings.
    pub fn config(&self) -> HubConfig {
        self.config
    }

    /// Stop every supervisor and drop every node.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
        for conn in self
            .nodes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
        {
            conn.close();
        }
    }

    /// A node that dialled in: a `hello` is authenticated, a `pair.request` waits for
    /// the operator. Returns when the connection ends.
    pub async fn accept(self: &Arc<Self>, mut t: Transport) {
        let opening = match handshake::read_opening(&mut t).await {
            Ok(o) => o,
            Err(e) => {
                tracing::info!("bridge: refused a connection: {e}");
                return;
            }
        };
        if matches!(opening, Opening::PairRequest { .. }) {
            let clock = Arc::clone(&self.clock);
            if let Err(e) =
                crate::pair::serve_request(t, opening, &self.registry, move || clock()).await
            {
                tracing::info!("bridge: pairing request ended: {e}");
            }
            return;
        }
        if let Err(e) = self.attach(t, opening, None).await {
            tracing::info!("bridge: {e}");
        }
    }

    /// Authenticate the `hello` in `opening` and serve the node until it disconnects.
    /// `expected` is the node a stdio command was configured for: its hello must name it.
    async fn attach(
        self: &Arc<Self>,
        mut t: Transport,
        opening: Opening,
        expected: Option<&str>,
    ) -> Result<String, BridgeError> {
        let hello: Hello = match handshake::check_hello(opening) {
            Ok(h) => h,
            Err(e) => return Err(refuse(&mut t, "bad-request", e.to_string()).await),
        };
        if let Some(expected) = expected
            && hello.node_id != expected
        {
            let why = format!(
                "this command was configured for node {expected:?}, but the node there is {:?}",
                hello.node_id
            );
            return Err(refuse(&mut t, "wrong-node", why).await);
        }
        let entry = match self.registry.lookup(&hello.node_id) {
            Ok(Lookup::Approved(entry)) => *entry,
            Ok(Lookup::NotApproved(state)) => {
                let why = format!(
                    "node {:?} is {state}; it gets nothing until the operator pairs it",
                    hello.node_id
                );
                return Err(refuse(&mut t, &state.to_string(), why).await);
            }
            Ok(Lookup::Unknown) => {
                let why = format!(
                    "node {:?} is not paired with this gateway (`warden node pair`)",
                    hello.node_id
                );
                return Err(refuse(&mut t, "not-paired", why).await);
            }
            Err(e) => {
                return Err(refuse(
                    &mut t,
                    "unavailable",
                    format!("the gateway cannot read its node registry: {e}"),
                )
                .await);
            }
        };
        // A token works only over the transport it was issued for: a stdio node's (given
        // to whoever runs its command) opens no WebSocket session, and the reverse.
        if entry.transport != t.kind {
            let why = format!(
                "node {:?} is paired for {}, not {}; its token is not accepted here",
                hello.node_id, entry.transport, t.kind
            );
            return Err(refuse(&mut t, "wrong-transport", why).await);
        }
        let token = entry.token.clone().unwrap_or_default();
        let keys = handshake::gateway_side(&mut t, &hello, &token).await?;
        let remote = t.remote.clone();
        let transport = t.kind;
        // Results and events are routed on the connection's reader task. Nothing a node
        // may send arrives before the first invoke, which needs the node registered
        // below; anything earlier finds no node and is dropped.
        let slot: Arc<std::sync::OnceLock<std::sync::Weak<NodeConn>>> = Arc::default();
        let dispatch = {
            let slot = Arc::clone(&slot);
            Arc::new(move |msg: Msg, _: &conn::Outbox| {
                if let Some(node) = slot.get().and_then(std::sync::Weak::upgrade) {
                    node.deliver(msg);
                }
            })
        };
        let conn = conn::start_dispatching(t, keys, self.config.heartbeat, dispatch);
        let node = Arc::new(NodeConn {
            id: hello.node_id.clone(),
            // The operator's name for the node wins over the one it gives itself.
            display_name: entry.display_name.clone().or(hello.display_name.clone()),
            remote,
            transport,
            capabilities: hello.capabilities.clone(),
            connected_at: (self.clock)(),
            token_fingerprint: token_fingerprint(&token),
            outbox: conn.outbox.clone(),
            pending: Mutex::default(),
            next_id: AtomicU64::new(1),
            closed: conn.closed.clone(),
            reason: conn.reason_handle(),
        });
        let _ = slot.set(Arc::downgrade(&node));
        tracing::info!("bridge: node {} connected ({transport})", node.id);
        // A node that reconnects replaces its old connection.
        if let Some(old) = self
            .nodes
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(node.id.clone(), Arc::clone(&node))
        {
            old.close();
        }
        self.refresh_snapshot();
        self.last_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&node.id);
        tokio::select! {
            () = node.closed.cancelled() => {}
            () = self.shutdown.cancelled() => {}
        }
        node.close();
        // Every call still waiting learns now, with the reason.
        let calls: Vec<PendingCall> = node
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .map(|(_, c)| c)
            .collect();
        for call in calls {
            let _ = call.reply.send(Err(node.disconnected()));
        }
        {
            let mut nodes = self.nodes.write().unwrap_or_else(|p| p.into_inner());
            if nodes.get(&node.id).is_some_and(|n| Arc::ptr_eq(n, &node)) {
                nodes.remove(&node.id);
            }
        }
        self.refresh_snapshot();
        let reason = node.reason.get();
        tracing::info!("bridge: node {} disconnected: {reason}", node.id);
        self.last_errors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(node.id.clone(), reason.clone());
        Ok(reason)
    }

    fn refresh_snapshot(&self) {
        let infos: Vec<NodeInfo> = self
            .nodes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|n| n.is_connected())
            .map(|n| NodeInfo {
                id: n.id.clone(),
                remote_ip: n.remote.clone(),
                display_name: n.display_name.clone(),
            })
            .collect();
        *self.snapshot.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(infos);
    }

    /// The node for `query` within `binding` (product spec §6.3).
    pub fn select(
        &self,
        query: Option<&str>,
        binding: Option<&str>,
    ) -> Result<Arc<NodeConn>, BridgeError> {
        let snapshot = Arc::clone(&self.snapshot.read().unwrap_or_else(|p| p.into_inner()));
        let chosen = policy::select_node(&snapshot, query, binding).map_err(|e| {
            // A node the operator took away is named so, not as one that is away.
            let named = binding.or(query);
            match named.and_then(|n| self.registry.lookup(n).ok()) {
                Some(Lookup::NotApproved(NodeState::Revoked)) => BridgeError::Invalid(format!(
                    "node {:?} was revoked by the operator; nothing was run",
                    named.unwrap_or_default()
                )),
                Some(Lookup::NotApproved(state)) => BridgeError::Invalid(format!(
                    "node {:?} is {state}, not paired; nothing was run",
                    named.unwrap_or_default()
                )),
                _ => BridgeError::Invalid(e.to_string()),
            }
        })?;
        self.nodes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&chosen.id)
            .filter(|n| n.is_connected())
            .cloned()
            .ok_or_else(|| {
                BridgeError::Invalid(format!("node {} disconnected just now", chosen.id))
            })
    }

    /// Connected nodes.
    pub fn connected(&self) -> usize {
        self.snapshot
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// Every node the registry knows, with its live state.
    pub fn status(&self) -> Result<Vec<NodeStatus>, BridgeError> {
        let entries = self.registry.list()?;
        let nodes = self.nodes.read().unwrap_or_else(|p| p.into_inner());
        let errors = self.last_errors.lock().unwrap_or_else(|p| p.into_inner());
        Ok(entries
            .iter()
            .map(|e| {
                let live = nodes.get(&e.id).filter(|n| n.is_connected());
                NodeStatus {
                    id: e.id.clone(),
                    display_name: live
                        .and_then(|n| n.display_name.clone())
                        .or(e.display_name.clone()),
                    remote: live.and_then(|n| n.remote.clone()),
                    transport: e.transport,
                    capabilities: live.map(|n| n.capabilities.clone()).unwrap_or_default(),
                    connected: live.is_some(),
                    connected_at: live.map(|n| n.connected_at),
                    last_error: if live.is_some() {
                        None
                    } else {
                        errors.get(&e.id).cloned()
                    },
                }
            })
            .collect())
    }

    /// Look at the registry every `watch_every`: drop nodes that are no longer approved
    /// (or whose token was rotated), and start or stop stdio supervisors to match it.
    pub fn watch(self: &Arc<Self>, connector: Option<Arc<dyn Connector>>) {
        let hub = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                hub.reconcile(connector.as_ref());
                tokio::select! {
                    () = hub.shutdown.cancelled() => break,
                    () = tokio::time::sleep(hub.config.watch_every) => {}
                }
            }
        });
    }

    /// One look at the registry (see [`Hub::watch`]).
    pub fn reconcile(self: &Arc<Self>, connector: Option<&Arc<dyn Connector>>) {
        let entries = match self.registry.list() {
            Ok(e) => e,
            Err(e) => {
                // An unreadable registry admits nobody: drop everyone (fail closed).
                tracing::warn!("bridge: node registry unusable, dropping every node: {e}");
                Arc::new(Vec::new())
            }
        };
        let by_id: HashMap<&str, &NodeEntry> = entries.iter().map(|e| (e.id.as_str(), e)).collect();
        for conn in self
            .nodes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
        {
            let entry = by_id.get(conn.id.as_str());
            let why = match entry {
                None => Some("node removed by the operator"),
                Some(e) if e.state == NodeState::Revoked => Some("node revoked by the operator"),
                Some(e) if e.state != NodeState::Approved => Some("node no longer paired"),
                Some(e)
                    if e.token_fingerprint().as_deref()
                        != Some(conn.token_fingerprint.as_str()) =>
                {
                    Some("node paired again with a new token")
                }
                Some(_) => None,
            };
            if let Some(why) = why {
                tracing::info!("bridge: node {}: {why}; dropping its connection", conn.id);
                conn.reason.note(why);
                conn.close();
            }
        }
        let Some(connector) = connector else { return };
        let mut supervised = self.supervised.lock().unwrap_or_else(|p| p.into_inner());
        let wanted: HashMap<&str, &NodeEntry> = by_id
            .iter()
            .filter(|(_, e)| e.transport == TransportKind::Stdio && e.state == NodeState::Approved)
            .map(|(k, v)| (*k, *v))
            .collect();
        supervised.retain(|id, token| {
            let keep = wanted.contains_key(id.as_str());
            if !keep {
                token.cancel();
            }
            keep
        });
        for (id, entry) in wanted {
            if supervised.contains_key(id) {
                continue;
            }
            let stop = self.shutdown.child_token();
            supervised.insert(id.to_owned(), stop.clone());
            let (hub, connector) = (Arc::clone(self), Arc::clone(connector));
            let (id, command) = (id.to_owned(), entry.command.clone().unwrap_or_default());
            tokio::spawn(async move { hub.supervise_stdio(id, command, connector, stop).await });
        }
    }

    /// Keep stdio node `id` connected by running `command`, reconnecting with backoff
    /// (1 s doubling to 30 s) and recording each failure for `warden nodes list`.
    pub async fn supervise_stdio(
        self: Arc<Self>,
        id: String,
        command: Vec<String>,
        connector: Arc<dyn Connector>,
        stop: CancellationToken,
    ) {
        let mut backoff = Duration::from_secs(1);
        while !stop.is_cancelled() {
            let started = tokio::time::Instant::now();
            let outcome = tokio::select! {
                () = stop.cancelled() => break,
                outcome = self.stdio_once(&id, &command, connector.as_ref(), &stop) => outcome,
            };
            let why = match outcome {
                Ok(reason) => reason,
                Err(e) => e.to_string(),
            };
            tracing::warn!("bridge: stdio node {id} ({}): {why}", command.join(" "));
            self.last_errors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id.clone(), why);
            if started.elapsed() > Duration::from_secs(30) {
                backoff = Duration::from_secs(1);
            }
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(backoff) => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(30));
        }
        if let Some(conn) = self
            .nodes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            && conn.transport == TransportKind::Stdio
        {
            conn.close();
        }
    }

    async fn stdio_once(
        self: &Arc<Self>,
        id: &str,
        command: &[String],
        connector: &dyn Connector,
        stop: &CancellationToken,
    ) -> Result<String, BridgeError> {
        let mut t = connector.connect(command).await?;
        let opening = handshake::read_opening(&mut t).await?;
        let stop = stop.clone();
        let hub = Arc::clone(self);
        let id = id.to_owned();
        // The supervisor being stopped (the node's entry revoked) closes the connection.
        let watcher = tokio::spawn({
            let hub = Arc::clone(&hub);
            let id = id.clone();
            async move {
                stop.cancelled().await;
                if let Some(c) = hub.nodes.read().unwrap_or_else(|p| p.into_inner()).get(&id) {
                    c.close();
                }
            }
        });
        let out = hub.attach(t, opening, Some(&id)).await;
        watcher.abort();
        out
    }
}
