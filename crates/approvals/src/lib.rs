//! Approvals: the `exec-approvals.json` store of one host, the authenticated approver IPC
//! over a local Unix socket, and the terminal presentation of prompts.
//!
//! - [`Store`] reads and writes the file through `caps::Fs` (atomic replace under a
//!   sidecar lock, 0600, fail closed on anything suspicious) and gives the policy engine
//!   its [`HostView`] (ceiling + compiled allowlist).
//! - [`ipc`] is the wire protocol, the server an approver UI hosts, and the client the
//!   runner uses; see `docs/protocol-approvals.md`.
//! - [`display`] escapes what the human sees so that it is exactly what runs.

#![forbid(unsafe_code)]

pub mod clock;
pub mod display;
pub mod file;
pub mod ipc;
pub mod socket_location;
pub mod store;
pub mod tighten;

pub use clock::{Clock, SystemClock};
pub use file::{
    AgentEntry, AllowlistEntry, ApprovalsFile, Ceilings, Defaults, EVERY_AGENT, REDACTED,
    SCHEMA_VERSION, SocketSettings,
};
pub use policy::RunPlan;
pub use store::{
    ABSENT_HASH, DryRun, HostView, ImportSummary, OsRandom, Randomness, Snapshot, Store,
    StoreConfig, StoreError, USAGE_TIME_GRANULARITY_MS, Updated,
};
