//! A bounded root's guard: parts of the tree the provider refuses to touch even though
//! they lie beneath its root (Warden's state directory inside a workspace, a
//! repository's `.git` for writes). The guard judges where an *opened handle* really is —
//! the kernel's own path for the descriptor, from `/proc/self/fd` — and the operation
//! then uses that same handle, so no symlink, rename or race between a check and an
//! open can steer an operation into a guarded place.

use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::{CapsError, Result};

/// What an operation does where the guard is asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Reads, stats or lists.
    Read,
    /// Creates, replaces, removes, renames or changes.
    Write,
}

/// Decides whether an operation may touch a real (absolute, symlink-free) path: `Err`
/// carries the reason shown to the caller.
pub type Guard = Arc<dyn Fn(&Path, Access) -> std::result::Result<(), String> + Send + Sync>;

/// Where the opened `handle` really is. Fails closed: a handle whose path the kernel
/// cannot tell (no `/proc`) is refused.
pub(crate) fn real_path(handle: impl AsFd, shown: &Path) -> Result<PathBuf> {
    let link = format!("/proc/self/fd/{}", handle.as_fd().as_raw_fd());
    let real = std::fs::read_link(&link).map_err(|e| {
        CapsError::denied(
            shown,
            format!("cannot tell where the opened file is ({link}: {e}); refused"),
        )
    })?;
    if !real.is_absolute() {
        // "anon_inode:…", "/path (deleted)" is still absolute; anything else is not a
        // path the guard can judge.
        return Err(CapsError::denied(
            shown,
            format!("the opened file has no path ({})", real.display()),
        ));
    }
    Ok(real)
}

/// Ask `guard` about `real` (for `shown`, as the caller named it).
pub(crate) fn check(guard: &Guard, real: &Path, access: Access, shown: &Path) -> Result<()> {
    guard(real, access).map_err(|why| CapsError::denied(shown, why))
}
