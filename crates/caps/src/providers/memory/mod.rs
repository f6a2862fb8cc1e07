//! The memory provider: a filesystem in a map and a process world without processes.
//! Used for fast tests of logic; it never touches the real disk or starts anything.

mod fs;
mod shell;

pub use fs::MemoryFs;
pub use shell::{NoProcesses, RecordedCall, ScriptedShell};
