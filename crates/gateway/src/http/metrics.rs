//! `GET /metrics` for Prometheus, on a listener of its own that only loopback may use
//! (the composition root refuses any other address): the counts say nothing of what was
//! run, but nobody off this machine reads them. A `Host` that is not loopback is refused
//! too, so a web page cannot read them through DNS rebinding. The listener keeps the
//! gateway's bounds (connections, header and idle timeouts).

use std::sync::Arc;

use axum::Router;
use axum::extract::{Extension, Request};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::{Caps, Connections, HttpLimits, listener};
use crate::gateway::Gateway;

/// The content type of Prometheus' text format.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serve `gateway`'s metrics on `listener` (loopback) until `shutdown` resolves.
pub async fn serve_metrics(
    gateway: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = HttpLimits::default();
    // A scraper or two, and an operator's curl: a handful of connections is plenty.
    let connections = Connections::new(Caps {
        total: 16,
        per_peer: 8,
    });
    let router = Router::new()
        .route("/metrics", get(metrics))
        .layer(Extension(gateway));
    listener::serve(
        listener,
        router,
        connections,
        limits,
        shutdown,
        tokio_util::sync::CancellationToken::new(),
    )
    .await
}

async fn metrics(Extension(gateway): Extension<Arc<Gateway>>, request: Request) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    if !is_loopback_host(host) {
        return (
            StatusCode::MISDIRECTED_REQUEST,
            "metrics answer only requests to a loopback host (127.0.0.1, [::1], localhost)\n",
        )
            .into_response();
    }
    (
        [(header::CONTENT_TYPE, TEXT_FORMAT)],
        gateway.metrics_text(),
    )
        .into_response()
}

/// `127.0.0.1[:port]`, `[::1][:port]` or `localhost[:port]`.
fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map_or("", |(name, _)| name),
        None => host.split_once(':').map_or(host, |(name, _)| name),
    };
    matches!(name, "127.0.0.1" | "::1" | "localhost")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_names_are_loopback_hosts() {
        for ok in [
            "127.0.0.1:9464",
            "127.0.0.1",
            "[::1]:9464",
            "localhost:1",
            "localhost",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "",
            "evil.example:9464",
            "127.0.0.1.evil.example",
            "localhost.evil.example:80",
            "[::2]:9464",
            "0.0.0.0:9464",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }
}
