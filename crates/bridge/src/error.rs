//! The Bridge's one error type: a refusal by the peer or by policy is its own variant,
//! distinct from a broken transport.

/// What went wrong on a Bridge connection or with Bridge state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BridgeError {
    /// The transport failed or closed.
    #[error("connection failed: {0}")]
    Io(String),
    /// The peer closed the connection.
    #[error("the connection was closed{}", if .0.is_empty() { String::new() } else { format!(": {}", .0) })]
    Closed(String),
    /// A frame was malformed, too large, not authentic, replayed or out of order.
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// The peer speaks no version this build does.
    #[error("unsupported Bridge protocol version: {0}")]
    Version(String),
    /// The peer refused us (not paired, revoked, bad proof...), with its code.
    #[error("refused by the peer ({code}): {message}")]
    Refused {
        /// Machine-readable code.
        code: String,
        /// Why.
        message: String,
    },
    /// Persistent state (node.json, nodes.json, the TLS certificate) is unusable.
    #[error("{0}")]
    State(String),
    /// A request that cannot be carried out as given (bad node id, no such node...).
    #[error("{0}")]
    Invalid(String),
    /// Timed out.
    #[error("timed out: {0}")]
    Timeout(String),
}

impl BridgeError {
    pub(crate) fn io(e: impl std::fmt::Display) -> Self {
        BridgeError::Io(e.to_string())
    }
}
