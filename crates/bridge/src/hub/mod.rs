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
//!
//! `node_conn.rs` is one connected node and its calls, `attach.rs` how a node is
//! admitted, `supervise.rs` the registry watch and the stdio nodes' supervisors.

mod attach;
mod node_conn;
mod supervise;

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use policy::NodeInfo;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::BridgeError;
use crate::conn::Heartbeat;
use crate::registry::{Lookup, NodeState, Registry};
use crate::wire::{Transport, TransportKind};

pub use node_conn::{MAX_EVENTS_PER_RUN, NodeConn, RunCall, RunStream};

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

    pub(super) fn refresh_snapshot(&self) {
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
}
