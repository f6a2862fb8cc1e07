//! MCP sessions over HTTP, by owner: each session belongs to the credential (agent) whose
//! `initialize` created it, and a request naming someone else's session is answered as
//! if it did not exist. Sessions per credential are capped (`429` past the cap, with the
//! reason) and a session with no request for the idle timeout is closed — its rmcp worker
//! and its Warden state (overrides, undelivered events) both — so neither a flood of
//! `initialize` calls nor clients that never say goodbye grow the gateway without bound.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Method, StatusCode};
use axum::response::Response;
use futures_util::StreamExt as _;

use rmcp::transport::streamable_http_server::session::SessionManager as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio_util::sync::CancellationToken;

use crate::credentials::Identity;
use crate::gateway::Gateway;
use crate::sessions::SessionKey;

/// Sessions one credential may hold at once, unless configured.
pub const DEFAULT_SESSIONS_PER_CREDENTIAL: usize = 16;
/// How long a session may go without a request before it is closed, unless configured.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// The bounds on MCP sessions (`[gateway]` in config.toml).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionLimits {
    /// Sessions one credential may hold at once.
    pub per_credential: usize,
    /// A session idle this long is closed.
    pub idle_timeout: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            per_credential: DEFAULT_SESSIONS_PER_CREDENTIAL,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// Why a request is not admitted.
pub struct Refusal {
    pub status: StatusCode,
    pub message: String,
}

/// What a request is, for its session bookkeeping.
pub enum Admission {
    /// A request in a session of its own credential, with what stops the work it starts.
    Existing(String, CancellationToken),
    /// A request that may create a session (counted against the cap while it runs).
    New,
    /// Anything else (rmcp answers it).
    Other,
}

struct Owned {
    agent: String,
    last_seen: Instant,
    /// Requests (and open response streams) in this session right now: it is not idle
    /// while one is running, however long.
    in_flight: usize,
    /// Cancelled when the session ends (DELETE, idle close): every run it started stops.
    ended: CancellationToken,
}

#[derive(Default)]
struct Table {
    sessions: HashMap<String, Owned>,
    /// `initialize` requests under way, per agent (they count against the cap).
    pending: HashMap<String, usize>,
}

/// Session ownership, the cap and the idle sweep.
#[derive(Clone)]
pub struct Owners {
    table: Arc<Mutex<Table>>,
    limits: SessionLimits,
    gateway: Arc<Gateway>,
    manager: Arc<LocalSessionManager>,
}

fn lock(table: &Mutex<Table>) -> std::sync::MutexGuard<'_, Table> {
    table.lock().unwrap_or_else(|p| p.into_inner())
}

impl Owners {
    /// Owners of `manager`'s sessions; idle ones are swept until `stop` is cancelled.
    pub fn new(
        limits: SessionLimits,
        gateway: Arc<Gateway>,
        manager: Arc<LocalSessionManager>,
        stop: CancellationToken,
    ) -> Owners {
        let owners = Owners {
            table: Arc::default(),
            limits,
            gateway,
            manager,
        };
        let sweeper = owners.clone();
        let period =
            (limits.idle_timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(30));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tick.tick() => sweeper.sweep().await,
                }
            }
        });
        owners
    }

    /// Check that `session` (if named) belongs to `agent`, or that `agent` may open
    /// another; record the request as running.
    pub fn admit(
        &self,
        agent: &str,
        session: Option<&str>,
        method: &Method,
    ) -> Result<Admission, Refusal> {
        let mut table = lock(&self.table);
        match session {
            Some(id) => match table.sessions.get_mut(id) {
                Some(owned) if owned.agent == agent => {
                    owned.in_flight += 1;
                    owned.last_seen = Instant::now();
                    Ok(Admission::Existing(
                        id.to_owned(),
                        owned.ended.child_token(),
                    ))
                }
                // Someone else's session is answered exactly like one that does not exist.
                _ => Err(Refusal {
                    status: StatusCode::NOT_FOUND,
                    message: "no such MCP session (it was closed or expired): initialize a new one"
                        .into(),
                }),
            },
            None if method == Method::POST => {
                let open = table.sessions.values().filter(|o| o.agent == agent).count()
                    + table.pending.get(agent).copied().unwrap_or(0);
                if open >= self.limits.per_credential {
                    return Err(Refusal {
                        status: StatusCode::TOO_MANY_REQUESTS,
                        message: format!(
                            "agent {agent:?} already holds {open} MCP sessions, the most one credential may hold ([gateway] max_sessions_per_credential = {}); end one (HTTP DELETE) or wait for idle ones to close after {}",
                            self.limits.per_credential,
                            humantime::format_duration(self.limits.idle_timeout)
                        ),
                    });
                }
                *table.pending.entry(agent.to_owned()).or_default() += 1;
                Ok(Admission::New)
            }
            None => Ok(Admission::Other),
        }
    }

    /// Record what the response did to the session: created it (owned by `identity`),
    /// ended it (DELETE), or is still streaming.
    pub fn finish(
        &self,
        admission: Admission,
        identity: &Identity,
        created: Option<String>,
        status: StatusCode,
        is_delete: bool,
    ) -> Finish {
        let mut table = lock(&self.table);
        match admission {
            Admission::New => {
                if let Some(n) = table.pending.get_mut(&identity.agent) {
                    *n = n.saturating_sub(1);
                }
                if let Some(id) = created.filter(|_| status.is_success()) {
                    table.sessions.insert(
                        id,
                        Owned {
                            agent: identity.agent.clone(),
                            last_seen: Instant::now(),
                            in_flight: 0,
                            ended: CancellationToken::new(),
                        },
                    );
                }
                Finish(None)
            }
            Admission::Existing(id, _) if is_delete && status.is_success() => {
                if let Some(owned) = table.sessions.remove(&id) {
                    // Whatever the session still runs stops now, not when rmcp's worker
                    // gets round to it.
                    owned.ended.cancel();
                }
                drop(table);
                self.forget(&identity.agent, &id);
                Finish(None)
            }
            Admission::Existing(id, stop) => Finish(Some(InFlight {
                table: Arc::clone(&self.table),
                session: id,
                stop: StopOnDrop(Some(stop)),
            })),
            Admission::Other => Finish(None),
        }
    }

    /// Close every session idle past the timeout with nothing running.
    async fn sweep(&self) {
        let expired: Vec<(String, String)> = {
            let mut table = lock(&self.table);
            let now = Instant::now();
            let ids: Vec<String> = table
                .sessions
                .iter()
                .filter(|(_, o)| {
                    o.in_flight == 0 && now.duration_since(o.last_seen) >= self.limits.idle_timeout
                })
                .map(|(id, _)| id.clone())
                .collect();
            ids.into_iter()
                .filter_map(|id| {
                    table.sessions.remove(&id).map(|o| {
                        o.ended.cancel();
                        (id, o.agent)
                    })
                })
                .collect()
        };
        for (id, agent) in expired {
            tracing::debug!("closing idle MCP session {id} of agent {agent}");
            if let Err(e) = self.manager.close_session(&id.clone().into()).await {
                tracing::warn!("closing idle MCP session {id}: {e}");
            }
            self.forget(&agent, &id);
        }
    }

    /// Drop the Warden state of a session that ended.
    fn forget(&self, agent: &str, session: &str) {
        self.gateway.sessions().forget(&SessionKey {
            agent: agent.to_owned(),
            session: session.to_owned(),
        });
    }
}

/// Cancels a request's stop token when dropped while armed: the client went away before
/// the request's response was complete (the connection closed, or the client was killed),
/// so what the request started must stop too. A response that reached its end disarms it.
pub struct StopOnDrop(Option<CancellationToken>);

impl StopOnDrop {
    /// A guard for `stop`.
    pub fn new(stop: CancellationToken) -> Self {
        StopOnDrop(Some(stop))
    }

    /// The response was delivered (or another guard took over): nothing to stop.
    pub fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(stop) = self.0.take() {
            stop.cancel();
        }
    }
}

/// A running request in a session; when its response body is done (or dropped), the
/// session counts as idle from then on, and a body dropped before its end stops the
/// request's work.
pub struct InFlight {
    table: Arc<Mutex<Table>>,
    session: String,
    stop: StopOnDrop,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(owned) = lock(&self.table).sessions.get_mut(&self.session) {
            owned.in_flight = owned.in_flight.saturating_sub(1);
            owned.last_seen = Instant::now();
        }
    }
}

/// What to do with a response once its session is accounted for.
pub struct Finish(Option<InFlight>);

impl Finish {
    /// The response, with its body keeping the request counted as running until the body
    /// is finished or dropped (SSE streams run long), and stopping the request's work if
    /// the body is dropped before its end.
    pub fn wrap(self, response: Response) -> Response {
        let Some(in_flight) = self.0 else {
            return response;
        };
        response.map(|body| {
            Body::from_stream(Tracked {
                inner: body.into_data_stream(),
                in_flight,
            })
        })
    }
}

/// A response body that knows whether it reached its end.
struct Tracked<S> {
    inner: S,
    in_flight: InFlight,
}

impl<S: futures_util::Stream + Unpin> futures_util::Stream for Tracked<S> {
    type Item = S::Item;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<S::Item>> {
        let next = self.inner.poll_next_unpin(cx);
        if let std::task::Poll::Ready(None) = next {
            self.in_flight.stop.disarm();
        }
        next
    }
}
