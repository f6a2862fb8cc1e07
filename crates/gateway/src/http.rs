//! `warden gateway run`'s HTTP side: the MCP endpoint over Streamable HTTP at `/mcp`,
//! behind a bearer token (compared in constant time) and Host/Origin checks against DNS
//! rebinding, on loopback by default. `/bridge` is reserved for node connections.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use subtle::ConstantTimeEq;

use crate::gateway::Gateway;
use crate::mcp::WardenMcp;

/// Largest MCP request body accepted.
pub const MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;

/// The HTTP application for `gateway`, requiring `token`.
pub fn app(gateway: Arc<Gateway>, token: String, default_agent: String) -> Router {
    let cancel = gateway.shutdown_token();
    let config = StreamableHttpServerConfig::default()
        .with_cancellation_token(cancel.child_token())
        .with_allowed_origins(["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"])
        .with_max_request_body_bytes(MAX_REQUEST_BYTES);
    let factory_gateway = Arc::clone(&gateway);
    let mcp: StreamableHttpService<WardenMcp, LocalSessionManager> = StreamableHttpService::new(
        move || {
            Ok(WardenMcp::new(
                Arc::clone(&factory_gateway),
                default_agent.clone(),
                "default",
            ))
        },
        Default::default(),
        config,
    );
    let token = Arc::new(token);
    Router::new()
        .nest_service("/mcp", mcp)
        .route("/bridge", get(bridge_not_ready).post(bridge_not_ready))
        .layer(axum::middleware::from_fn(
            move |req: Request, next: Next| {
                let token = Arc::clone(&token);
                async move { authorize(&token, req, next).await }
            },
        ))
        .route("/healthz", get(|| async { "ok\n" }))
}

async fn bridge_not_ready() -> Response {
    (
        StatusCode::NOT_IMPLEMENTED,
        "node connections (the Bridge) are not available in this version of Warden\n",
    )
        .into_response()
}

/// Require `Authorization: Bearer <token>`.
async fn authorize(token: &str, req: Request, next: Next) -> Response {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let ok: bool = presented.as_bytes().ct_eq(token.as_bytes()).into();
    if !ok {
        return Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .header(header::WWW_AUTHENTICATE, "Bearer")
            .body(Body::from("a valid bearer token is required\n"))
            .unwrap_or_else(|_| StatusCode::UNAUTHORIZED.into_response());
    }
    next.run(req).await
}

/// Serve `app` on `listener` until `shutdown` resolves; then cancel in-flight runs
/// (killing their process trees) and finish.
pub async fn serve(
    gateway: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    token: String,
    default_agent: String,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let cancel = gateway.shutdown_token();
    let router = app(gateway, token, default_agent);
    let on_shutdown = cancel.clone();
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
