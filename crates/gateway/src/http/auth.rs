//! Who a request is: the bearer credential it presents (scheme matched without regard to
//! case), checked against the per-agent credentials, and nothing else. A header naming
//! another agent is refused, never followed; the identity travels to the MCP handler in
//! the request's extensions.
//!
//! Only then is the request's body read — within the body-read timeout and the size cap,
//! so an authenticated client cannot hold a request open by trickling its body either —
//! and its session admitted.

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;

use super::listener::OnConnection;
use super::sessions::{Admission, Owners, StopOnDrop};
use crate::credentials::{Credentials, Identity};
use crate::mcp::RequestStop;

/// The header through which earlier versions let a client choose its agent. Accepted
/// only when it names the credential's own agent.
pub const AGENT_HEADER: &str = "x-warden-agent";
/// The MCP session header.
const SESSION_ID: &str = "mcp-session-id";

/// The bearer token of `Authorization`, if the scheme is `Bearer` (any case).
fn bearer(req: &Request) -> Option<&str> {
    let value = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// A plain-text refusal.
fn refuse(status: StatusCode, text: String) -> Response {
    let mut response = (status, format!("{text}\n")).into_response();
    if status == StatusCode::UNAUTHORIZED {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

/// A refusal after which the connection is not reused: what is left of the request on it
/// (an unread body, a client that does not authenticate) is not worth reading.
fn refuse_and_close(status: StatusCode, text: String) -> Response {
    let mut response = refuse(status, text);
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Why a body could not be read.
enum BodyProblem {
    TooLarge,
    Broken(String),
}

/// The whole body, if it is at most `max` bytes.
async fn read_body(body: Body, max: usize) -> Result<Vec<u8>, BodyProblem> {
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| BodyProblem::Broken(e.to_string()))?;
        if bytes.len() + chunk.len() > max {
            return Err(BodyProblem::TooLarge);
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// Admits requests: authentication, the agent, and the session's owner.
pub struct Guard {
    credentials: Credentials,
    owners: Owners,
    body_read_timeout: Duration,
    max_body: usize,
}

impl Guard {
    pub fn new(
        credentials: Credentials,
        owners: Owners,
        body_read_timeout: Duration,
        max_body: usize,
    ) -> Self {
        Guard {
            credentials,
            owners,
            body_read_timeout,
            max_body,
        }
    }

    /// The request with its body read in full (bounded in time and size), or the
    /// refusal to send instead.
    async fn with_body(&self, req: Request) -> Result<Request, Response> {
        let (parts, body) = req.into_parts();
        match tokio::time::timeout(self.body_read_timeout, read_body(body, self.max_body)).await {
            Ok(Ok(bytes)) => Ok(Request::from_parts(parts, Body::from(bytes))),
            Ok(Err(BodyProblem::TooLarge)) => Err(refuse_and_close(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the request body is larger than {} bytes, the most the gateway reads",
                    self.max_body
                ),
            )),
            Ok(Err(BodyProblem::Broken(e))) => Err(refuse_and_close(
                StatusCode::BAD_REQUEST,
                format!("the request body could not be read: {e}"),
            )),
            Err(_) => Err(refuse_and_close(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} ([gateway] body_read_timeout)",
                    humantime::format_duration(self.body_read_timeout)
                ),
            )),
        }
    }

    /// `agent`'s counts, for `/status`.
    pub fn owners(&self) -> &Owners {
        &self.owners
    }

    /// Authenticate `req`, check its session belongs to the credential, and pass it on.
    pub async fn admit(&self, req: Request, next: Next) -> Response {
        let identity: Identity = match bearer(&req).and_then(|t| self.credentials.authenticate(t)) {
            Some(identity) => identity,
            None => {
                return refuse_and_close(
                    StatusCode::UNAUTHORIZED,
                    "a valid bearer credential is required (`warden gateway token --agent ID`)"
                        .into(),
                );
            }
        };
        if let Some(OnConnection(conn)) = req.extensions().get::<OnConnection>() {
            conn.authenticated(&identity.agent);
        }
        if let Some(named) = req.headers().get(AGENT_HEADER)
            && named.to_str().ok().map(str::trim) != Some(identity.agent.as_str())
        {
            return refuse(
                StatusCode::FORBIDDEN,
                format!(
                    "this credential belongs to agent {:?}; the agent comes from the credential and {AGENT_HEADER} cannot choose another",
                    identity.agent
                ),
            );
        }
        let session = req
            .headers()
            .get(SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let is_delete = req.method() == Method::DELETE;
        let mut req = match self.with_body(req).await {
            Ok(req) => req,
            Err(refusal) => return refusal,
        };
        let admission = match self
            .owners
            .admit(&identity.agent, session.as_deref(), req.method())
        {
            Ok(admission) => admission,
            Err(refusal) => return refuse(refusal.status, refusal.message),
        };
        req.extensions_mut().insert(identity.clone());
        // The work this request starts stops if its client goes away — also before the
        // response has begun (the connection drops this future) — or its session ends.
        let mut gone_early = match &admission {
            Admission::Existing { stop, .. } => {
                req.extensions_mut().insert(RequestStop(stop.clone()));
                Some(StopOnDrop::new(stop.clone()))
            }
            _ => None,
        };
        let mut response = next.run(req).await;
        // From here on the response body carries the guard (see `Finish::wrap`).
        if let Some(guard) = gone_early.as_mut() {
            guard.disarm();
        }
        if is_delete && response.status() == StatusCode::ACCEPTED {
            // The session is gone and there is nothing to accept later: 204, which
            // clients expect from a DELETE (the Python SDK logs 202 as a failure).
            *response.status_mut() = StatusCode::NO_CONTENT;
            *response.body_mut() = Body::empty();
        }
        let created = response
            .headers()
            .get(SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        self.owners
            .finish(admission, &identity, created, response.status(), is_delete)
            .wrap(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_auth(value: &str) -> Request {
        let mut req = Request::new(Body::empty());
        req.headers_mut()
            .insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        req
    }

    #[test]
    fn the_bearer_scheme_is_matched_without_regard_to_case() {
        for value in ["Bearer t0k", "bearer t0k", "BEARER  t0k ", "BeArEr t0k"] {
            assert_eq!(bearer(&with_auth(value)), Some("t0k"), "{value}");
        }
        for value in ["Basic t0k", "Bearer", "Bearer ", "t0k", "Bearertok"] {
            assert_eq!(bearer(&with_auth(value)), None, "{value}");
        }
    }
}
