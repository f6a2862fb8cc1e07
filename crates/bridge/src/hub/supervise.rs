//! The registry watch (revoked or re-keyed nodes dropped, stdio supervisors started and
//! stopped to match it) and the supervisor of one stdio node (reconnecting with backoff,
//! keeping the last failure for `warden nodes list`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::BridgeError;
use crate::handshake::{self};
use crate::registry::{NodeEntry, NodeState};
use crate::wire::TransportKind;

use super::{Connector, Hub};

impl Hub {
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
