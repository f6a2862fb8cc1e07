//! The local provider: the real disk and real processes.
// The local provider is where raw file and process access is the point.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

pub mod contain;
mod fs;
pub mod mount_table;
mod proc_stat;
pub mod process;
mod program;
pub(crate) mod pty;
mod shell;
pub(crate) mod shell_support;
pub(crate) mod spawn;

pub use fs::LocalFs;
pub use program::OpenedProgram;
pub use shell::LocalShell;

use std::fs::Metadata as StdMetadata;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::fs::MetadataExt;

use crate::fs::{FileId, FileKind, Metadata};

/// Convert std metadata (also what cap-std hands back) into the seam's value type.
pub(crate) fn metadata_from_std(m: &StdMetadata) -> Metadata {
    let ft = m.file_type();
    let kind = FileKind::classify(ft.is_symlink(), ft.is_dir(), ft.is_file(), ft.is_socket());
    Metadata {
        kind,
        len: m.len(),
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        modified: m.modified().ok(),
        id: FileId {
            dev: m.dev(),
            ino: m.ino(),
        },
    }
}
