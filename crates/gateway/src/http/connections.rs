//! The HTTP listener's connections, counted and capped: a total cap and a per-peer cap,
//! and what happens at the cap. Opening a connection needs no credential, so a local
//! process could hold every slot; instead of refusing newcomers (which would lock agents
//! out for as long as the flood lasts), the newcomer takes the slot of a connection that
//! is doing nothing: first one that has not authenticated yet (oldest first), then an
//! authenticated one idle between requests (idle longest first). A connection with a
//! request in progress is never taken; when every connection is busy, the newcomer is
//! closed at once.
//!
//! A connection is marked authenticated by the first request whose credential checked
//! out, so a flood without a credential only ever competes with itself. Among those, a
//! connection that has sent nothing goes before one whose request has begun to arrive:
//! an agent's request arrives in one write and is authenticated moments later, so
//! connections that only open and wait never push it out however fast they come.
//! "Sent nothing" is asked of the kernel before a connection is taken (bytes may be
//! waiting in its socket that its task, busy machine, has not read yet), not only of
//! what the connection's task has seen.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio_util::sync::CancellationToken;

/// The caps.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    /// Connections open at once.
    pub total: usize,
    /// Connections open at once from one peer address.
    pub per_peer: usize,
}

struct Conn {
    peer: IpAddr,
    /// The agent whose credential a request on it presented.
    agent: Option<String>,
    /// Whether any byte has arrived on it.
    heard: bool,
    /// Requests whose response is not finished.
    in_flight: usize,
    /// When it opened, or its last request started or finished.
    last_active: Instant,
    /// Cancelled to close the connection at once (its slot was taken).
    close: CancellationToken,
    /// Whether bytes are waiting in its socket (asked of the kernel; no socket: never).
    bytes_waiting: BytesWaiting,
}

/// Asks whether bytes have arrived on a connection that its task has not read yet.
pub type BytesWaiting = Box<dyn Fn() -> bool + Send + Sync>;

#[derive(Default)]
struct Registry {
    next_id: u64,
    conns: HashMap<u64, Conn>,
    per_peer: HashMap<IpAddr, usize>,
}

impl Registry {
    fn remove(&mut self, id: u64) -> Option<Conn> {
        let conn = self.conns.remove(&id)?;
        if let Some(n) = self.per_peer.get_mut(&conn.peer) {
            *n -= 1;
            if *n == 0 {
                self.per_peer.remove(&conn.peer);
            }
        }
        Some(conn)
    }

    /// The connection whose slot a newcomer may take: among `peer`'s connections when
    /// `peer` is given, else among all; never one with a request in progress. A
    /// connection its task has not heard from is asked again of the kernel first (and,
    /// with bytes waiting, counts as heard from now on), so a silent connection never
    /// goes after one whose request is already in its socket.
    fn victim(&mut self, peer: Option<IpAddr>) -> Option<u64> {
        loop {
            let id = self
                .conns
                .iter()
                .filter(|(_, c)| c.in_flight == 0 && peer.is_none_or(|p| c.peer == p))
                .min_by_key(|(_, c)| (c.agent.is_some(), c.heard, c.last_active))
                .map(|(id, _)| *id)?;
            let conn = self.conns.get_mut(&id)?;
            if conn.heard || !(conn.bytes_waiting)() {
                return Some(id);
            }
            conn.heard = true;
        }
    }
}

/// Every open connection of one listener.
pub struct Connections {
    caps: Caps,
    registry: Mutex<Registry>,
}

/// Why a connection was not taken.
#[derive(Debug, PartialEq, Eq)]
pub struct Full;

impl Connections {
    /// An empty set under `caps`.
    pub fn new(caps: Caps) -> Arc<Self> {
        Arc::new(Connections {
            caps: Caps {
                total: caps.total.max(1),
                per_peer: caps.per_peer.max(1),
            },
            registry: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Take a slot for a connection from `peer` (`bytes_waiting` asks its socket whether
    /// bytes are waiting unread), closing an idle connection's if the caps are reached;
    /// [`Full`] when every connection in the way is busy.
    pub fn admit(
        self: &Arc<Self>,
        peer: IpAddr,
        bytes_waiting: BytesWaiting,
    ) -> Result<Connection, Full> {
        let mut registry = self.lock();
        loop {
            let from_peer = registry.per_peer.get(&peer).copied().unwrap_or(0);
            let scope = if from_peer >= self.caps.per_peer {
                Some(peer)
            } else if registry.conns.len() >= self.caps.total {
                None
            } else {
                break;
            };
            let victim = registry.victim(scope).ok_or(Full)?;
            if let Some(conn) = registry.remove(victim) {
                tracing::debug!(
                    "connection cap reached: closing an idle connection from {} (agent {:?}, heard: {})",
                    conn.peer,
                    conn.agent,
                    conn.heard
                );
                conn.close.cancel();
            }
        }
        let id = registry.next_id;
        registry.next_id += 1;
        let close = CancellationToken::new();
        registry.conns.insert(
            id,
            Conn {
                peer,
                agent: None,
                heard: false,
                in_flight: 0,
                last_active: Instant::now(),
                close: close.clone(),
                bytes_waiting,
            },
        );
        *registry.per_peer.entry(peer).or_default() += 1;
        let now = Instant::now();
        Ok(Connection {
            id,
            set: Arc::clone(self),
            close,
            local: Mutex::new(Local {
                in_flight: 0,
                // The first request's headers are due from the moment it opened.
                head_since: Some(now),
                idle_since: now,
            }),
            changed: tokio::sync::Notify::new(),
        })
    }

    /// Connections open now.
    pub fn len(&self) -> usize {
        self.lock().conns.len()
    }

    /// True when no connection is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Connections authenticated as `agent` now.
    pub fn of_agent(&self, agent: &str) -> usize {
        self.lock()
            .conns
            .values()
            .filter(|c| c.agent.as_deref() == Some(agent))
            .count()
    }
}

/// One open connection's slot; dropping it frees the slot.
pub struct Connection {
    id: u64,
    set: Arc<Connections>,
    close: CancellationToken,
    /// What only this connection's task and requests touch (no global lock per read).
    local: Mutex<Local>,
    /// Told when [`Connection::waiting`] changes, so the connection's task works out its
    /// next deadline from the new state (a deadline worked out from the old one may be
    /// later: a header deadline 10 s away while the idle one is 1 s away).
    changed: tokio::sync::Notify,
}

struct Local {
    in_flight: usize,
    /// Since when a request's headers have been arriving (or, before the first request,
    /// since the connection opened): they must be complete within the header timeout.
    head_since: Option<Instant>,
    /// Since when nothing has been in progress.
    idle_since: Instant,
}

/// What a connection is waiting for now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waiting {
    /// A request's headers, due since then.
    Head(Instant),
    /// Nothing: idle between requests since then.
    Idle(Instant),
    /// A request is in progress.
    Busy,
}

impl Connection {
    /// Cancelled when the connection's slot was taken: close it at once.
    pub fn closed(&self) -> &CancellationToken {
        &self.close
    }

    /// Resolves once what the connection waits for has changed since the last time it
    /// resolved (a change with nobody waiting is kept for the next wait).
    pub async fn waiting_changed(&self) {
        self.changed.notified().await;
    }

    fn local(&self) -> std::sync::MutexGuard<'_, Local> {
        self.local.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes arrived; `first` when they are the first on this connection. Bytes that
    /// arrive with nothing in progress begin a request, whose headers are due from now.
    pub fn bytes_arrived(&self, first: bool) {
        {
            let mut local = self.local();
            if local.in_flight == 0 && local.head_since.is_none() {
                local.head_since = Some(Instant::now());
                self.changed.notify_one();
            }
        }
        if first && let Some(conn) = self.set.lock().conns.get_mut(&self.id) {
            conn.heard = true;
        }
    }

    /// What the connection is waiting for.
    pub fn waiting(&self) -> Waiting {
        let local = self.local();
        match (local.in_flight, local.head_since) {
            (0, Some(since)) => Waiting::Head(since),
            (0, None) => Waiting::Idle(local.idle_since),
            _ => Waiting::Busy,
        }
    }

    /// A request on this connection authenticated as `agent`.
    pub fn authenticated(&self, agent: &str) {
        if let Some(conn) = self.set.lock().conns.get_mut(&self.id)
            && conn.agent.as_deref() != Some(agent)
        {
            conn.agent = Some(agent.to_owned());
        }
    }

    /// A request started; it counts until the returned guard is dropped (its response
    /// finished or was abandoned).
    pub fn request(self: &Arc<Self>) -> RequestOnConnection {
        {
            let mut local = self.local();
            local.in_flight += 1;
            local.head_since = None;
        }
        self.changed.notify_one();
        if let Some(conn) = self.set.lock().conns.get_mut(&self.id) {
            conn.in_flight += 1;
            conn.last_active = Instant::now();
        }
        RequestOnConnection(Arc::clone(self))
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.set.lock().remove(self.id);
    }
}

/// A request in progress on a connection.
pub struct RequestOnConnection(Arc<Connection>);

impl Drop for RequestOnConnection {
    fn drop(&mut self) {
        {
            let mut local = self.0.local();
            local.in_flight = local.in_flight.saturating_sub(1);
            local.idle_since = Instant::now();
        }
        self.0.changed.notify_one();
        if let Some(conn) = self.0.set.lock().conns.get_mut(&self.0.id) {
            conn.in_flight = conn.in_flight.saturating_sub(1);
            conn.last_active = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 2));

    /// A socket with nothing waiting in it.
    fn nothing_waiting() -> BytesWaiting {
        Box::new(|| false)
    }

    #[test]
    fn at_the_cap_the_oldest_unauthenticated_idle_connection_makes_room() {
        let set = Connections::new(Caps {
            total: 3,
            per_peer: 3,
        });
        let agent = Arc::new(set.admit(A, nothing_waiting()).unwrap());
        agent.authenticated("main");
        let flood1 = set.admit(A, nothing_waiting()).unwrap();
        let flood2 = set.admit(A, nothing_waiting()).unwrap();
        let newcomer = set.admit(A, nothing_waiting()).unwrap();
        assert!(
            flood1.closed().is_cancelled(),
            "the oldest flood connection went"
        );
        assert!(!flood2.closed().is_cancelled());
        assert!(
            !agent.closed().is_cancelled(),
            "the agent's connection stays"
        );
        assert_eq!(set.len(), 3);
        drop((flood1, flood2, newcomer));
        assert_eq!(set.len(), 1);
        assert_eq!(set.of_agent("main"), 1);
    }

    #[test]
    fn a_connection_that_sent_nothing_goes_before_one_whose_request_is_arriving() {
        let set = Connections::new(Caps {
            total: 2,
            per_peer: 2,
        });
        let silent = set.admit(A, nothing_waiting()).unwrap();
        let speaking = set.admit(A, nothing_waiting()).unwrap();
        speaking.bytes_arrived(true);
        let _newcomer = set.admit(A, nothing_waiting()).unwrap();
        assert!(silent.closed().is_cancelled());
        assert!(!speaking.closed().is_cancelled());
    }

    #[test]
    fn bytes_waiting_unread_count_as_heard() {
        let set = Connections::new(Caps {
            total: 2,
            per_peer: 2,
        });
        // Its request is in the socket, but its task has not run yet.
        let unread = set.admit(A, Box::new(|| true)).unwrap();
        let silent = set.admit(A, nothing_waiting()).unwrap();
        let _newcomer = set.admit(A, nothing_waiting()).unwrap();
        assert!(silent.closed().is_cancelled());
        assert!(!unread.closed().is_cancelled());
    }

    #[test]
    fn busy_connections_are_never_taken_and_a_full_set_refuses() {
        let set = Connections::new(Caps {
            total: 2,
            per_peer: 2,
        });
        let one = Arc::new(set.admit(A, nothing_waiting()).unwrap());
        let two = Arc::new(set.admit(A, nothing_waiting()).unwrap());
        let _busy1 = one.request();
        let busy2 = two.request();
        assert_eq!(set.admit(A, nothing_waiting()).err(), Some(Full));
        drop(busy2);
        // Idle again (authenticated or not): its slot may be taken.
        let _three = set.admit(A, nothing_waiting()).unwrap();
        assert!(two.closed().is_cancelled());
        assert!(!one.closed().is_cancelled());
    }

    #[test]
    fn the_per_peer_cap_takes_from_that_peer_only() {
        let set = Connections::new(Caps {
            total: 10,
            per_peer: 2,
        });
        let b = set.admit(B, nothing_waiting()).unwrap();
        let a1 = set.admit(A, nothing_waiting()).unwrap();
        let _a2 = set.admit(A, nothing_waiting()).unwrap();
        let _a3 = set.admit(A, nothing_waiting()).unwrap();
        assert!(a1.closed().is_cancelled());
        assert!(
            !b.closed().is_cancelled(),
            "another peer's connection is untouched"
        );
    }

    #[test]
    fn headers_are_due_from_the_open_and_from_each_requests_first_byte() {
        let set = Connections::new(Caps {
            total: 2,
            per_peer: 2,
        });
        let conn = Arc::new(set.admit(A, nothing_waiting()).unwrap());
        let Waiting::Head(opened) = conn.waiting() else {
            panic!("a new connection owes its first request's headers")
        };
        conn.bytes_arrived(true);
        assert_eq!(
            conn.waiting(),
            Waiting::Head(opened),
            "still the same request"
        );
        let request = conn.request();
        conn.bytes_arrived(false);
        assert_eq!(conn.waiting(), Waiting::Busy, "body bytes begin nothing");
        drop(request);
        let Waiting::Idle(idle) = conn.waiting() else {
            panic!("idle between requests: no header is due")
        };
        assert!(idle >= opened);
        conn.bytes_arrived(false);
        assert!(matches!(conn.waiting(), Waiting::Head(t) if t >= idle));
    }
}
