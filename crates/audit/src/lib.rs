//! The record: what did which agent run, where, under which rule, who approved it, and
//! what came of it — kept as an append-only log in the state directory that anyone
//! holding it can verify.
//!
//! ```text
//! Entry ──AuditLog::record──▶ one JSON line ──▶ audit/audit.jsonl ──rotated──▶ audit/audit.000001.jsonl
//!                            {"v":1,"seq":…,"prev":…,…,"hash":…}
//! ```
//!
//! Each line is one [`Record`]: the caller's [`Entry`] plus its sequence number, time,
//! origin and the hash of the record before it; the line ends with the SHA-256 of its own
//! bytes before the hash. So a record edited, removed or reordered breaks the chain, and
//! [`verify`] names the first break. Writers in several processes (a gateway, a
//! `warden exec`, an approver) share the log under one lock; a record is one `write(2)`,
//! so a crash loses at most the record being written and leaves a torn line that
//! verification tells apart from tampering. Files rotate by size; the chain continues
//! across them.
//!
//! The log reaches the disk only through [`caps::Fs`], so tests run it on the memory
//! provider and the product on the real files.
//!
//! ```
//! use std::sync::Arc;
//! use audit::{AuditLog, AuditSink as _, Entry, Kind, Settings};
//! use caps::MemoryFs;
//!
//! let fs = Arc::new(MemoryFs::new());
//! let log = AuditLog::new(fs.clone(), "/state/audit".into(), "example", Settings::default());
//! log.record(Entry::new(Kind::Decision).agent("coder").decision("allow")).unwrap();
//! log.record(Entry::new(Kind::Run).agent("coder").exit_code(0)).unwrap();
//! let report = audit::verify(fs.as_ref(), "/state/audit".as_ref()).unwrap();
//! assert_eq!(report.records, 2);
//! assert!(report.first_break.is_none());
//! ```

#![forbid(unsafe_code)]

mod entry;
mod error;
mod files;
mod line;
mod log;
mod query;
mod queue;
mod verify;

pub use entry::{Entry, Kind, MAX_FIELD_CHARS};
pub use error::AuditError;
pub use files::{CURRENT_FILE, LOCK_FILE};
pub use line::{GENESIS, Record, SCHEMA_VERSION, encode, sha256_hex};
pub use log::{AuditLog, AuditSink, NoAudit, Settings};
pub use query::{FOLLOW_INTERVAL, Filter, Records, Stored, parse_time_bound};
pub use verify::{Break, VerifyReport, verify};
