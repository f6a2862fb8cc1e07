//! How a node is admitted: a `hello` authenticated against the registry (or a
//! `pair.request` handed to pairing), then served until it disconnects.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use crate::BridgeError;
use crate::conn;
use crate::handshake::{self, Hello, refuse};
use crate::message::{Msg, Opening};
use crate::registry::{Lookup, token_fingerprint};
use crate::wire::Transport;

use super::Hub;
use super::node_conn::{NodeConn, PendingCall};

impl Hub {
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
    pub(super) async fn attach(
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
}
