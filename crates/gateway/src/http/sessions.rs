//! MCP sessions over HTTP, by owner: each session belongs to the credential (agent) whose
//! `initialize` created it, and a request naming someone else's session is answered as
//! if it did not exist. Sessions per credential are capped (`429` past the cap, with the
//! reason) and a session with no request for the idle timeout is closed — its rmcp worker
//! and its Warden state (overrides, undelivered events) both — so neither a flood of
//! `initialize` calls nor clients that never say goodbye grow the gateway without bound.
//! Event streams per session are capped too, and a stream whose session ends closes its
//! connection.
//!
//! Everything counted here is counted by a guard that gives it back when dropped, so
//! counts return to zero however a request ends: answered, failed, cancelled, or its
//! client gone before the answer (which is how a stateless call is cancelled).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Method, StatusCode};
use axum::response::Response;
use futures_util::StreamExt as _;

use rmcp::transport::streamable_http_server::session::SessionManager as _;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::limits::HttpLimits;
use crate::credentials::Identity;
use crate::gateway::Gateway;
use crate::sessions::SessionKey;

/// Why a request is not admitted.
pub struct Refusal {
    pub status: StatusCode,
    pub message: String,
}

/// What a request is, for its session bookkeeping. Each kind holds what it counts (a
/// session slot, a request or stream in its session) and gives it back when dropped, on
/// every path: answered, failed, cancelled, or its client gone mid-request.
pub enum Admission {
    /// A request in a session of its own credential.
    Existing {
        /// The session.
        session: String,
        /// What stops the work the request starts (its session ending fires it too).
        stop: CancellationToken,
        /// The request (or event stream) counted in its session.
        in_flight: InFlight,
    },
    /// A request that may create a session: one of the agent's session slots is held
    /// until it is answered.
    New(Starting),
    /// Anything else (rmcp answers it).
    Other,
}

struct Owned {
    agent: String,
    last_seen: Instant,
    /// Requests (and open response streams) in this session right now: it is not idle
    /// while one is running, however long.
    in_flight: usize,
    /// Event streams (`GET`) open in this session now.
    streams: usize,
    /// Cancelled when the session ends (DELETE, idle close): every run it started stops
    /// and its event streams close their connections.
    ended: CancellationToken,
}

#[derive(Default)]
struct Table {
    sessions: HashMap<String, Owned>,
    /// Requests that may create a session under way, per agent (they count against the
    /// cap until answered).
    pending: HashMap<String, usize>,
}

impl Table {
    fn release_pending(&mut self, agent: &str) {
        if let Some(n) = self.pending.get_mut(agent) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.pending.remove(agent);
            }
        }
    }
}

/// One agent's share of the session table, as `/status` reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionCounts {
    /// MCP sessions it holds.
    pub sessions: usize,
    /// Requests that may create a session, under way.
    pub starting: usize,
    /// Requests (and streams) in progress in its sessions.
    pub requests: usize,
    /// Event streams open in its sessions.
    pub streams: usize,
}

/// Session ownership, the cap and the idle sweep.
#[derive(Clone)]
pub struct Owners {
    table: Arc<Mutex<Table>>,
    limits: HttpLimits,
    gateway: Arc<Gateway>,
    manager: Arc<LocalSessionManager>,
}

fn lock(table: &Mutex<Table>) -> std::sync::MutexGuard<'_, Table> {
    table.lock().unwrap_or_else(|p| p.into_inner())
}

impl Owners {
    /// Owners of `manager`'s sessions; idle ones are swept until `stop` is cancelled.
    pub fn new(
        limits: HttpLimits,
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
        let period = (limits.session_idle_timeout / 4)
            .clamp(Duration::from_millis(100), Duration::from_secs(30));
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
                    let stream = method == Method::GET;
                    if stream && owned.streams >= self.limits.streams_per_session {
                        return Err(Refusal {
                            status: StatusCode::TOO_MANY_REQUESTS,
                            message: format!(
                                "this MCP session already has {} event streams open, the most one session may have ([gateway] max_streams_per_session = {}); close one first",
                                owned.streams, self.limits.streams_per_session
                            ),
                        });
                    }
                    owned.in_flight += 1;
                    owned.streams += usize::from(stream);
                    owned.last_seen = Instant::now();
                    Ok(Admission::Existing {
                        session: id.to_owned(),
                        stop: owned.ended.child_token(),
                        in_flight: InFlight {
                            table: Arc::clone(&self.table),
                            session: id.to_owned(),
                            stream: stream.then(|| owned.ended.clone()),
                        },
                    })
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
                if open >= self.limits.sessions_per_credential {
                    return Err(Refusal {
                        status: StatusCode::TOO_MANY_REQUESTS,
                        message: format!(
                            "agent {agent:?} already holds {open} MCP sessions (or requests that may open one), the most one credential may hold ([gateway] max_sessions_per_credential = {}); end one (HTTP DELETE) or wait for idle ones to close after {}",
                            self.limits.sessions_per_credential,
                            humantime::format_duration(self.limits.session_idle_timeout)
                        ),
                    });
                }
                *table.pending.entry(agent.to_owned()).or_default() += 1;
                Ok(Admission::New(Starting {
                    table: Arc::clone(&self.table),
                    agent: Some(agent.to_owned()),
                }))
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
        match admission {
            Admission::New(mut starting) => {
                let created = created.filter(|_| status.is_success());
                {
                    let mut table = lock(&self.table);
                    starting.release_in(&mut table);
                    if let Some(id) = &created {
                        table.sessions.insert(
                            id.clone(),
                            Owned {
                                agent: identity.agent.clone(),
                                last_seen: Instant::now(),
                                in_flight: 0,
                                streams: 0,
                                ended: CancellationToken::new(),
                            },
                        );
                    }
                }
                if let Some(id) = created {
                    self.gateway.sessions().open(&SessionKey {
                        agent: identity.agent.clone(),
                        session: id,
                    });
                }
                Finish(None)
            }
            Admission::Existing {
                session, in_flight, ..
            } if is_delete && status.is_success() => {
                let removed = lock(&self.table).sessions.remove(&session);
                if let Some(owned) = removed {
                    // Whatever the session still runs stops now, not when rmcp's worker
                    // gets round to it.
                    owned.ended.cancel();
                }
                drop(in_flight);
                self.forget(&identity.agent, &session);
                Finish(None)
            }
            Admission::Existing {
                stop, in_flight, ..
            } => Finish(Some((in_flight, StopOnDrop(Some(stop))))),
            Admission::Other => Finish(None),
        }
    }

    /// `agent`'s sessions and what runs in them now.
    pub fn counts(&self, agent: &str) -> SessionCounts {
        let table = lock(&self.table);
        let mut counts = SessionCounts {
            starting: table.pending.get(agent).copied().unwrap_or(0),
            ..SessionCounts::default()
        };
        for owned in table.sessions.values().filter(|o| o.agent == agent) {
            counts.sessions += 1;
            counts.requests += owned.in_flight;
            counts.streams += owned.streams;
        }
        counts
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
                    o.in_flight == 0
                        && now.duration_since(o.last_seen) >= self.limits.session_idle_timeout
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
        self.gateway.end_session(&SessionKey {
            agent: agent.to_owned(),
            session: session.to_owned(),
        });
    }
}

/// One of an agent's session slots, held by a request that may create a session until
/// it is answered; given back when dropped (a client gone before its answer included).
pub struct Starting {
    table: Arc<Mutex<Table>>,
    agent: Option<String>,
}

impl Starting {
    /// Give the slot back inside an already locked table.
    fn release_in(&mut self, table: &mut Table) {
        if let Some(agent) = self.agent.take() {
            table.release_pending(&agent);
        }
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        if let Some(agent) = self.agent.take() {
            lock(&self.table).release_pending(&agent);
        }
    }
}

/// A request (or event stream) counted in its session; when dropped — its response body
/// done or abandoned, or the request itself dropped — the session counts it no more and
/// is idle from then on if nothing else runs.
pub struct InFlight {
    table: Arc<Mutex<Table>>,
    session: String,
    /// For an event stream: its session's end, which closes the stream's connection.
    stream: Option<CancellationToken>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(owned) = lock(&self.table).sessions.get_mut(&self.session) {
            owned.in_flight = owned.in_flight.saturating_sub(1);
            if self.stream.is_some() {
                owned.streams = owned.streams.saturating_sub(1);
            }
            owned.last_seen = Instant::now();
        }
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

/// What to do with a response once its session is accounted for.
pub struct Finish(Option<(InFlight, StopOnDrop)>);

impl Finish {
    /// The response, with its body keeping the request counted as running until the body
    /// is finished or dropped (SSE streams run long), stopping the request's work if the
    /// body is dropped before its end, and — for an event stream — ending with an error
    /// when its session ends, so that hyper closes the connection instead of keeping it
    /// for another request.
    pub fn wrap(self, response: Response) -> Response {
        let Some((in_flight, stop)) = self.0 else {
            return response;
        };
        let session_end = in_flight
            .stream
            .clone()
            .map(|ended| Box::pin(ended.cancelled_owned()));
        response.map(|body| {
            Body::from_stream(Tracked {
                inner: body.into_data_stream(),
                _in_flight: in_flight,
                stop,
                session_end,
            })
        })
    }
}

/// A response body that knows whether it reached its end.
struct Tracked<S> {
    inner: S,
    _in_flight: InFlight,
    stop: StopOnDrop,
    session_end: Option<std::pin::Pin<Box<WaitForCancellationFutureOwned>>>,
}

impl<S> futures_util::Stream for Tracked<S>
where
    S: futures_util::Stream<Item = Result<axum::body::Bytes, axum::Error>> + Unpin,
{
    type Item = Result<axum::body::Bytes, std::io::Error>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        if let Some(end) = self.session_end.as_mut()
            && end.as_mut().poll(cx).is_ready()
        {
            self.session_end = None;
            self.stop.disarm();
            return std::task::Poll::Ready(Some(Err(std::io::Error::other(
                "the MCP session ended",
            ))));
        }
        let next = self.inner.poll_next_unpin(cx);
        if let std::task::Poll::Ready(None) = next {
            self.stop.disarm();
        }
        next.map(|item| item.map(|chunk| chunk.map_err(std::io::Error::other)))
    }
}
