//! `warden gateway run`'s HTTP side: the MCP endpoint over Streamable HTTP at `/mcp`, on
//! loopback by default, behind Host/Origin checks against DNS rebinding.
//!
//! Every request authenticates with a per-agent bearer credential (`auth.rs`), and the
//! credential alone decides the agent. Each MCP session belongs to the credential that
//! created it; sessions per credential are capped and idle ones are closed
//! (`sessions.rs`), so no client can reach another's session or grow the gateway without
//! bound. Nodes do not connect here: the Bridge has a listener of its own
//! (`warden gateway run --bridge-listen`, TLS), and `/bridge` on this port says so.

mod auth;
mod frames;
mod sessions;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::credentials::Credentials;
use crate::gateway::Gateway;
use crate::mcp::WardenMcp;

pub(crate) use auth::RequestStop;
pub use sessions::SessionLimits;

/// Largest MCP request body accepted.
pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// The HTTP application for `gateway`, admitting holders of `credentials`.
pub fn app(gateway: Arc<Gateway>, credentials: Credentials, limits: SessionLimits) -> Router {
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
    manager.session_config.keep_alive = Some(limits.idle_timeout + Duration::from_secs(60));
    manager.session_config.sse_retry = None;
    let manager = Arc::new(manager);
    let factory_gateway = Arc::clone(&gateway);
    let mcp: StreamableHttpService<WardenMcp, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(WardenMcp::for_http(Arc::clone(&factory_gateway))),
        Arc::clone(&manager),
        config,
    );
    let owners = sessions::Owners::new(limits, Arc::clone(&gateway), manager, cancel);
    let guard = Arc::new(auth::Guard::new(credentials, owners));
    Router::new()
        .nest_service("/mcp", mcp)
        .route("/bridge", get(bridge_elsewhere).post(bridge_elsewhere))
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

/// Serve `app` on `listener` until `shutdown` resolves; then cancel in-flight runs
/// (killing their process trees) and finish.
pub async fn serve(
    gateway: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    credentials: Credentials,
    limits: SessionLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let cancel = gateway.shutdown_token();
    let router = app(gateway, credentials, limits);
    let on_shutdown = cancel.clone();
    // A response streamed as SSE goes out in several small writes (head, event, end);
    // with Nagle's algorithm each waits for the client's ACK of the one before.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY: {e}");
        }
    });
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async move {
        shutdown.await;
        // Stop every run first, so graceful shutdown does not wait on them.
        on_shutdown.cancel();
    })
    .await
}
