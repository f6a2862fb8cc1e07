//! The gateway's Bridge side, composed: the node registry of this state directory, the
//! hub, stdio nodes' commands started and supervised, the WebSocket listener (TLS with
//! the gateway's own certificate, or plain on loopback only), and `nodes-live.json` kept
//! current for `warden nodes list`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use approvals::{Clock, SystemClock};
use bridge::conn::Heartbeat;
use bridge::{Hub, HubConfig};

use crate::bridge_connector::ProcessConnector;
use crate::cmd_nodes::LIVE_FILE;
use crate::host::HostFacts;

/// Build the hub, start supervising stdio nodes and, with `listen`, take WebSocket nodes.
pub async fn start(
    facts: &HostFacts,
    listen: &Option<SocketAddr>,
    tls: bool,
    heartbeat_secs: f64,
) -> anyhow::Result<Arc<Hub>> {
    if !(heartbeat_secs.is_finite() && (0.05..=3600.0).contains(&heartbeat_secs)) {
        bail!("--bridge-heartbeat must be between 0.05 and 3600 seconds");
    }
    let config = HubConfig {
        heartbeat: Heartbeat::every(Duration::from_secs_f64(heartbeat_secs)),
        ..HubConfig::default()
    };
    let hub = Hub::new(
        facts.node_registry(),
        config,
        Arc::new(|| SystemClock.now_ms()),
    );
    // Fail early on an unusable registry rather than admitting nobody silently.
    hub.registry().list()?;
    hub.watch(Some(Arc::new(ProcessConnector)));
    if let Some(addr) = listen {
        if !tls && !addr.ip().is_loopback() {
            bail!(
                "a Bridge listener on a non-loopback address ({addr}) needs --bridge-tls: plain connections could be read and changed on the way"
            );
        }
        let acceptor = if tls {
            let cert =
                bridge::tls::GatewayCert::load_or_create(facts.fs().as_ref(), &facts.warden_home)?;
            eprintln!(
                "warden: Bridge certificate fingerprint {} (nodes pair with --fingerprint {})",
                cert.fingerprint(),
                cert.fingerprint()
            );
            Some(Arc::new(cert.acceptor()?))
        } else {
            None
        };
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen for nodes on {addr}"))?;
        let bound = listener.local_addr()?;
        outln!(
            "warden bridge listening on {}://{bound}/bridge",
            if tls { "wss" } else { "ws" }
        );
        let accepting = Arc::clone(&hub);
        tokio::spawn(bridge::ws::serve(listener, acceptor, move |t| {
            let hub = Arc::clone(&accepting);
            async move { hub.accept(t).await }
        }));
    }
    keep_live_file(facts, Arc::clone(&hub));
    Ok(hub)
}

/// Rewrite `nodes-live.json` every second (atomically; it names who is connected and why
/// the others are not — no secrets).
fn keep_live_file(facts: &HostFacts, hub: Arc<Hub>) {
    let path = facts.warden_home.join(LIVE_FILE);
    tokio::spawn(async move {
        loop {
            if let Ok(nodes) = hub.status() {
                let doc = serde_json::json!({"writtenAt": SystemClock.now_ms(), "nodes": nodes});
                let tmp = path.with_extension("json.tmp");
                if std::fs::write(&tmp, doc.to_string()).is_ok() {
                    let _ = std::fs::rename(&tmp, &path);
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
}
