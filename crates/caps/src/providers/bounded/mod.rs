//! The bounded provider: everything confined beneath a root directory handle.
//!
//! Confinement belongs to the provider value: there is no per-call "root" argument that
//! could be left out. Paths are resolved through the handle with cap-std (`openat2` with
//! `RESOLVE_BENEATH`, or its per-component `O_NOFOLLOW` walk on kernels without it),
//! never by canonicalising a string and checking its prefix.

mod fs;
mod guard;
mod shell;

pub use fs::BoundedFs;
pub use guard::{Access, Guard};
pub use shell::BoundedShell;

use std::io;
use std::path::Path;

use crate::CapsError;

/// Map a cap-std error: an escape attempt (which cap-std reports as a
/// `PermissionDenied` with no OS error code) becomes [`CapsError::Denied`].
pub(crate) fn map_err(op: &'static str, path: &Path, e: io::Error) -> CapsError {
    if e.kind() == io::ErrorKind::PermissionDenied && e.raw_os_error().is_none() {
        return CapsError::denied(path, "resolves outside the bounded root");
    }
    if e.raw_os_error() == Some(nix::libc::ELOOP) {
        return CapsError::denied(path, "symlink loop or a symlink where none is allowed");
    }
    CapsError::from_io(op, path, e)
}
