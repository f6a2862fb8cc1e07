//! `warden gateway run`'s HTTP side: the MCP endpoint over Streamable HTTP at `/mcp`, on
//! loopback by default, behind Host/Origin checks against DNS rebinding.
//!
//! Every request authenticates with a per-agent bearer credential (`auth.rs`), and the
//! credential alone decides the agent. Each MCP session belongs to the credential that
//! created it; sessions per credential are capped and idle ones are closed
//! (`sessions.rs`), so no client can reach another's session or grow the gateway without
//! bound. The listener itself is bounded too (`listener.rs`, `connections.rs`): a
//! connection cap that makes room by closing idle connections, header, body and idle
//! timeouts — every limit is in `limits.rs`. `/healthz` answers anyone; `/status` tells
//! an authenticated agent its own counts. Nodes do not connect here: the Bridge has a
//! listener of its own (`warden gateway run --bridge-listen`, TLS), and `/bridge` on this
//! port says so.

mod auth;
mod connections;
mod frames;
mod limits;
mod listener;
mod metrics;
mod sessions;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Extension, Request};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;

use crate::credentials::{Credentials, Identity};
use crate::gateway::Gateway;
use crate::mcp::WardenMcp;

pub use connections::{Caps, Connections};
pub use limits::*;
pub use metrics::serve_metrics;
pub use sessions::SessionCounts;

/// Largest MCP request body accepted.
pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// The HTTP application for `gateway`, admitting holders of `credentials`; `connections`
/// is the listener's connection set, reported by `/status`.
pub fn app(
    gateway: Arc<Gateway>,
    credentials: Credentials,
    limits: HttpLimits,
    connections: Arc<Connections>,
) -> Router {
    let cancel = gateway.shutdown_token();
    // No SSE priming events (rmcp sends one ahead of every response, for a client that
    // reconnects and resumes a stream): a request whose client goes away is cancelled,
    // so there is never a stream to resume, and each call saves an event.
    let config = StreamableHttpServerConfig::default()
        .with_sse_retry(None)
        .with_cancellation_token(cancel.child_token())
        .with_allowed_origins(["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"])
        .with_max_request_body_bytes(MAX_REQUEST_BYTES);
    let mut manager = LocalSessionManager::default();
    // rmcp's own inactivity close is a safety net behind ours (which also forgets the
    // session's Warden state); never shorter than ours.
    manager.session_config.keep_alive = Some(limits.session_idle_timeout + Duration::from_secs(60));
    manager.session_config.sse_retry = None;
    let manager = Arc::new(manager);
    let factory_gateway = Arc::clone(&gateway);
    let mcp: StreamableHttpService<WardenMcp, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(WardenMcp::for_http(Arc::clone(&factory_gateway))),
        Arc::clone(&manager),
        config,
    );
    let owners = sessions::Owners::new(limits, Arc::clone(&gateway), manager, cancel);
    let guard = Arc::new(auth::Guard::new(
        credentials,
        owners,
        limits.body_read_timeout,
        MAX_REQUEST_BYTES,
    ));
    let status = Status {
        guard: Arc::clone(&guard),
        gateway,
        connections,
        limits,
    };
    Router::new()
        .nest_service("/mcp", mcp)
        .route("/bridge", get(bridge_elsewhere).post(bridge_elsewhere))
        .route("/status", get(status_of_agent))
        .layer(Extension(Arc::new(status)))
        // Inside the guard: only an authenticated request's frames are looked at.
        .layer(axum::middleware::from_fn(frames::check))
        .layer(axum::middleware::from_fn(
            move |req: Request, next: Next| {
                let guard = Arc::clone(&guard);
                async move { guard.admit(req, next).await }
            },
        ))
        .route("/healthz", get(|| async { "ok\n" }))
}

async fn bridge_elsewhere() -> Response {
    (
        StatusCode::NOT_FOUND,
        "nodes connect to the gateway's Bridge listener, not to the MCP port: start it with `warden gateway run --bridge-listen ADDR --bridge-tls` (docs/configuration.md, Nodes)\n",
    )
        .into_response()
}

/// What `/status` reads.
struct Status {
    guard: Arc<auth::Guard>,
    gateway: Arc<Gateway>,
    connections: Arc<Connections>,
    limits: HttpLimits,
}

/// `GET /status`: the calling agent's own sessions, requests, streams, runs and
/// connections, the gateway's connection count, and the limits that apply — what an
/// operator (or a test) needs to see that everything an agent held was given back.
async fn status_of_agent(
    Extension(status): Extension<Arc<Status>>,
    Extension(identity): Extension<Identity>,
) -> Json<serde_json::Value> {
    let agent = identity.agent.as_str();
    let limits = &status.limits;
    Json(json!({
        "agent": agent,
        "mcp": status.guard.owners().counts(agent),
        "sessionStates": status.gateway.sessions().of_agent(agent),
        "runs": status.gateway.runs().in_progress(agent),
        "connections": {
            "agent": status.connections.of_agent(agent),
            "total": status.connections.len(),
        },
        "limits": {
            "maxConnections": limits.max_connections,
            "maxConnectionsPerPeer": limits.max_connections_per_peer,
            "headerReadTimeoutMs": limits.header_read_timeout.as_millis() as u64,
            "connectionIdleTimeoutMs": limits.connection_idle_timeout.as_millis() as u64,
            "bodyReadTimeoutMs": limits.body_read_timeout.as_millis() as u64,
            "maxSessionsPerCredential": limits.sessions_per_credential,
            "sessionIdleTimeoutMs": limits.session_idle_timeout.as_millis() as u64,
            "maxStreamsPerSession": limits.streams_per_session,
            "maxRunsPerAgent": status.gateway.runs().limit(),
        },
    }))
}

/// Serve `gateway` on `listener` until `shutdown` resolves; then cancel in-flight runs
/// (killing their process trees) and finish.
pub async fn serve(
    gateway: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    credentials: Credentials,
    limits: HttpLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let runs = gateway.shutdown_token();
    let connections = Connections::new(Caps {
        total: limits.max_connections,
        per_peer: limits.max_connections_per_peer,
    });
    let router = app(gateway, credentials, limits, Arc::clone(&connections));
    listener::serve(listener, router, connections, limits, shutdown, runs).await
}
