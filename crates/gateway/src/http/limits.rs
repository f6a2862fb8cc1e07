//! The HTTP side's bounds, each with a named default (`[gateway]` in config.toml sets
//! them; docs/configuration.md lists them with why). Together they make the gateway's
//! use of descriptors, memory and tasks a function of its configuration, not of what
//! local processes choose to send.

use std::time::Duration;

/// Connections open at once (well under the descriptor limit the gateway raises itself
/// to at start).
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Connections open at once from one peer address. On loopback every local process is
/// the same peer, so this binds only a listener that other machines reach.
pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: usize = 512;
/// A request's headers must be complete within this of its first byte (a connection's
/// first request: of the connection's opening).
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// A keep-alive connection with no request in progress for this long is closed. Longer
/// than HTTP clients keep idle connections (reqwest 90 s, httpx 5 s, Node 4–5 s), so the
/// client closes first and never sends a request on a connection the gateway is closing;
/// idle connections still make room at the connection cap.
pub const DEFAULT_CONNECTION_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// A request's body must arrive within this of its headers.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Sessions one credential may hold at once.
pub const DEFAULT_SESSIONS_PER_CREDENTIAL: usize = 16;
/// How long a session may go without a request before it is closed.
pub const DEFAULT_SESSION_IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Event streams (`GET /mcp`) one session may have open at once.
pub const DEFAULT_STREAMS_PER_SESSION: usize = 4;

/// The bounds on the HTTP listener and its MCP sessions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections open at once from one peer address.
    pub max_connections_per_peer: usize,
    /// Time allowed for a request's headers.
    pub header_read_timeout: Duration,
    /// A connection idle this long between requests is closed.
    pub connection_idle_timeout: Duration,
    /// Time allowed for a request's body.
    pub body_read_timeout: Duration,
    /// Sessions one credential may hold at once.
    pub sessions_per_credential: usize,
    /// A session idle this long is closed.
    pub session_idle_timeout: Duration,
    /// Event streams one session may have open at once.
    pub streams_per_session: usize,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            connection_idle_timeout: DEFAULT_CONNECTION_IDLE_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            sessions_per_credential: DEFAULT_SESSIONS_PER_CREDENTIAL,
            session_idle_timeout: DEFAULT_SESSION_IDLE_TIMEOUT,
            streams_per_session: DEFAULT_STREAMS_PER_SESSION,
        }
    }
}
