//! The runner: one exec, end to end, on one host. It takes its providers (`Fs`,
//! `Shell`), its approvals store, its clock and its approver client as values, so the
//! same code runs on the gateway, on a node, and on the memory provider in tests.
//!
//! The flow of [`Runner::run`]: policy against this host's approvals file → decision →
//! ask the approver (or apply askFallback) → environment from the allowlist → run through
//! `caps::Shell` with the timeout and output cap → record allowlist usage → emit
//! `exec.started` / `exec.finished` / `exec.denied`.

mod approver;
mod events;
mod run;

pub use approver::{Approvals, NoApprover, SocketApprovals};
pub use events::{CollectEvents, EventSink, ExecEvent, NoEvents};
pub use run::{
    CommandSpec, ExecRequest, Executed, Gate, Outcome, READ_ONLY_FS, RunReport, Runner, RunnerHost,
    SHELL, SandboxShells, new_run_id, shell_argv,
};
