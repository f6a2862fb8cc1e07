//! The Bridge: how a gateway reaches its nodes (`docs/protocol-bridge.md`).
//!
//! ```text
//!  gateway (Hub)                                   node (serve_node)
//!   │ accept / supervise ──── transport ────  connect / stdio
//!   │   WebSocket (TLS, fingerprint pinned; plain on loopback) or a command's stdio
//!   │ ◀── hello (node id, nonce) ─────────────┤
//!   ├── challenge (nonce) ───────────────────▶│
//!   │ ◀── auth (HMAC proof of the token) ──────┤   the token never crosses the wire
//!   ├── welcome (the gateway's proof) ───────▶│
//!   │ ═══ sealed frames: HMAC(session key, direction, sequence, JSON) ═══
//!   ├── node.invoke system.run ──────────────▶│   the node's own runner decides
//!   │ ◀── exec.started / finished / denied ────┤   against its own approvals file
//!   │ ◀── node.invoke.result ──────────────────┤
//! ```
//!
//! - [`wire`]: frames over a byte stream (length-prefixed) or a WebSocket, size-capped.
//! - [`message`]: the JSON messages of each phase, strictly parsed.
//! - [`seal`]: proofs, the per-connection session key and sealed, sequence-numbered frames.
//! - [`handshake`]: hello/challenge/auth/welcome on either side.
//! - [`conn`]: an authenticated connection's reader and writer tasks and heartbeats.
//! - [`node`]: the node's serving loop around the same `runner::Runner` as the gateway.
//! - [`hub`]: the gateway's connected nodes, selection, invocation and cancellation.
//! - [`registry`]: the gateway's `nodes.json` (pending, approved, revoked, stdio nodes).
//! - [`requests`]: pairing requests (codes over the key's bytes, several per id) and the
//!   operator's answers.
//! - [`state`]: the node's `node.json` (node id + token).
//! - [`pair`]: pairing by request, operator approval and an X25519 agreement.
//! - [`tls`]: the gateway's certificate and the node's fingerprint pin.

#![forbid(unsafe_code)]

pub mod conn;
mod error;
pub mod handshake;
pub mod hub;
pub mod message;
pub mod node;
mod node_stream;
pub mod pair;
mod pair_keys;
pub mod registry;
pub mod requests;
pub mod seal;
pub mod state;
pub mod tls;
pub mod wire;
pub mod ws;

pub use error::BridgeError;
pub use hub::{Connector, Hub, HubConfig, NodeConn, NodeStatus, RunCall, RunStream};
pub use node::{NodeService, serve_node};
pub use registry::{NodeEntry, NodeState, Registry};
pub use state::{NodeFile, NodeStateStore};
pub use wire::{FrameRx, FrameTx, Transport, TransportKind};

/// The Bridge protocol versions this build speaks. Version 2 sends `system.run`'s request
/// as the one exec request type ([`policy::ExecArgs`]); version 1 had its own flat fields
/// (`shell`, `timeoutMs`), and a peer that speaks only 1 is refused, naming both sides.
pub const PROTOCOL_VERSIONS: &[u32] = &[2];
/// The protocol's name in `hello`.
pub const PROTOCOL_NAME: &str = "warden-bridge";
