//! The capability seam: every file and process operation Warden performs goes through
//! the [`Fs`] and [`Shell`] traits defined here.
//!
//! Consumers (`policy`, `approvals`, `runner`, `gateway`) receive `&dyn Fs` / `&dyn Shell`
//! and never touch `std::fs` or `std::process`; swapping the provider swaps the whole
//! execution world. Three providers ship with this crate:
//!
//! | provider | files | processes |
//! | --- | --- | --- |
//! | [`LocalFs`] / [`LocalShell`] | the real disk | real processes, own session, whole-tree kill |
//! | [`MemoryFs`] / [`NoProcesses`] / [`ScriptedShell`] | a map in memory | none (explicit error) / scripted for tests |
//! | [`BoundedFs`] / [`BoundedShell`] | confined under a root directory handle | real processes with the cwd confined |
//!
//! ```
//! use caps::{Fs, MemoryFs, WriteOptions};
//! use std::path::Path;
//!
//! let fs = MemoryFs::new();
//! fs.create_dir_all(Path::new("/work"), 0o755).unwrap();
//! fs.write(Path::new("/work/notes.txt"), b"hello", WriteOptions::default()).unwrap();
//! assert_eq!(fs.read(Path::new("/work/notes.txt")).unwrap(), b"hello");
//! ```

mod connection_ask;
mod error;
mod exec_output;
mod fs;
mod input;
mod output;
mod providers;
mod shell;
mod signals;
mod terminal;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use connection_ask::{
    Admission, AdmitConnection, AskConnection, ConnectionAnswer, ConnectionAsker,
    ConnectionQuestion, ConnectionRules, host_port,
};
pub use error::CapsError;
pub use fs::{DirEntry, FileId, FileKind, Fs, FsLock, Metadata, WriteOptions};
pub use input::{
    INPUT_QUEUE_BYTES, INPUT_QUEUE_CHUNKS, InputCredit, InputError, InputRelay, InputSender,
    InputStream, Relayed, input_channel,
};
pub use output::{
    CursorPastEnd, DROPPED_MARKER_PREFIX, LiveOutput, OutputCollector, OutputSince, Stream,
    TRUNCATION_MARKER, dropped_marker, truncate_utf8_head, truncate_utf8_tail,
};
pub use providers::bounded::{Access, BoundedFs, BoundedShell, Guard};
pub use providers::local::{LocalFs, LocalShell};
pub use providers::memory::{MemoryFs, NoProcesses, RecordedCall, ScriptedShell};
pub use shell::{
    DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_TAIL_BYTES, EgressConnection, ExecAllowlist, ExecOptions,
    ExecOutput, ExitStatus, OutputLimits, RefusedWrites, ResourceLimits, Script, Shell, Stdin,
    StreamSize, TIMED_OUT_EXIT_CODE,
};
pub use signals::{SIGNALS, signal_name, signal_number};
pub use terminal::TerminalSize;

/// The process supervisor used by the local and bounded shells, for providers in other
/// crates (the OS sandbox) that wrap a program such as `bwrap` around the command, and
/// the containment that holds each run's processes together.
pub mod process {
    pub use crate::providers::local::OpenedProgram;
    pub use crate::providers::local::contain::companion::{
        COMPANION_SUBCOMMAND, Dispatch, PrepareStandby, keep_companion_standby, prepare_companion,
        run_companion, start_companion,
    };
    pub use crate::providers::local::contain::{
        Containment, Mechanism, REAPER_SUBCOMMAND, WATCHDOG_SUBCOMMAND, run_reaper, run_watchdog,
    };
    pub use crate::providers::local::process::{
        DRAIN_AFTER_EXIT, KILL_GRACE, NewNamespaces, ProcessSpec, SignalRoute, TerminalOwner,
        WorkingDir, supervise, supervise_live,
    };
}

/// The kernel's mount table (`/proc/self/mountinfo`), parsed once for every reader:
/// cgroup discovery, and the sandbox's search for every place a protected directory
/// shows through.
pub mod mounts {
    pub use crate::providers::local::mount_table::{
        MountEntry, parse_mount_table, read_mount_table,
    };
}

/// Result type of every capability call.
pub type Result<T, E = CapsError> = std::result::Result<T, E>;
