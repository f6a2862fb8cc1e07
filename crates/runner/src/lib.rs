//! The runner: one exec on one host, as one pipeline —
//!
//! ```text
//! ExecRequest ──decide──▶ Decided ──route──▶ Executor ──(ask)──▶ RunPlan runs ──▶ RunReport
//!              host view   (explanation:      (gateway,     Prompt      verbatim      + ExecEvents
//!              read once    policy, decision,  sandbox,     (one ask
//!                           plans)             node)        path)
//! ```
//!
//! [`Runner::decide`] reads the host's approvals file once and explains the request once;
//! [`Runner::execute`] asks a human only if the decision says so, then runs exactly the
//! approved [`policy::RunPlan`] — the resolved file (refused if it is no longer that file),
//! argv, cwd and environment the human saw — and returns one [`RunReport`] whose
//! [`RunReport::exit_code`] every caller uses. Providers (`Fs`, `Shell`), the store, the
//! approver and the clock are values, so the same code runs on the gateway, on a node,
//! and on the memory provider in tests.

#![forbid(unsafe_code)]

mod approver;
mod ask;
mod conclude;
mod connection_ask;
mod decide;
mod events;
mod execute;
mod executor;
mod host;
mod launch;
mod record;
mod report;
mod request;
mod runner;
mod sandboxed;
mod usage;

pub use approver::{Approvals, NoApprover, SocketApprovals};
pub use connection_ask::MAX_QUESTIONS;
pub use decide::Decided;
pub use events::{CollectEvents, EventSink, ExecEvent, NoEvents};
pub use executor::{Executor, SandboxShells};
pub use host::{HostContext, HostContextBuilder};
pub use launch::launch;
pub use policy::Command;
pub use report::{
    EXIT_CANCELLED, EXIT_DENIED, EXIT_NO_APPROVER, EXIT_WARDEN_ERROR, Executed, Outcome, RunHost,
    RunReport,
};
pub use request::{ExecRequest, new_run_id};
pub use runner::Runner;
