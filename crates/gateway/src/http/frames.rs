//! JSON-RPC errors over HTTP as the specification numbers them: a POST to `/mcp` whose
//! body is not JSON gets `400` with a `-32700` error response, one that is not a JSON-RPC
//! request `400` with `-32600` (rmcp alone would answer a plain-text `415`). Everything
//! else passes on to rmcp unchanged. Runs after authentication, so nobody learns
//! anything from it without a credential.

use axum::body::{Body, to_bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::mcp::protocol::{Frame, classify};

/// Check a POST's body before rmcp reads it.
pub async fn check(req: Request, next: Next) -> Response {
    let json = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
        });
    if req.method() != Method::POST || !json {
        // rmcp answers what is not a JSON POST (405, 406, 415).
        return next.run(req).await;
    }
    let (parts, body) = req.into_parts();
    let bytes = match to_bytes(body, super::MAX_REQUEST_BYTES).await {
        Ok(bytes) => bytes,
        Err(_) => {
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the request body is larger than {} bytes\n",
                    super::MAX_REQUEST_BYTES
                ),
            )
                .into_response();
        }
    };
    if let Frame::Reject(response) = classify(&bytes) {
        let mut response = (StatusCode::BAD_REQUEST, response.to_string()).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return response;
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}
