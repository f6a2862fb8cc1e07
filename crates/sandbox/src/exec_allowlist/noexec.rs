//! An exec allowlist's first layer: every mount `noexec` except the allowed programs,
//! their loaders and their libraries' directories (see [`keep_executable_only`]). Warden's
//! builder applies it to the new root; under bubblewrap the helper applies it to its own.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::mount::MountAttrFlags;

use crate::SandboxError;
use crate::mount_api::{attach, clone_tree, err, open_in, set_attrs};

/// With an exec allowlist, every mount of the tree at `root` becomes `noexec` except
/// `allowed` — the listed programs, their loaders and the directories of the libraries
/// they need (real paths; one the tree hides or lacks is skipped: it allows nothing).
/// Each is cloned as it is now, before the tree is marked, and attached again on top of
/// itself: a clone keeps the flags it was made with. A file clone is made read-only too,
/// so a listed program inside a writable path cannot be changed into another during the
/// run (and, a mount point, not renamed or removed). Warden's builder does this before
/// the new root is entered; under bubblewrap, the helper does it to its own root with
/// the capability bubblewrap left it for this, before dropping it.
pub(crate) fn keep_executable_only(
    root: BorrowedFd<'_>,
    allowed: &[PathBuf],
) -> Result<(), SandboxError> {
    let mut ordered: Vec<&PathBuf> = allowed.iter().collect();
    ordered.sort_by_key(|p| p.components().count());
    let mut clones: Vec<(&PathBuf, OwnedFd)> = Vec::new();
    for path in ordered {
        // Beneath a directory already kept: it comes with it.
        if clones.iter().any(|(kept, _)| path.starts_with(kept)) {
            continue;
        }
        let Ok(at) = open_in(root, path) else {
            continue; // hidden or missing inside: nothing to allow
        };
        let is_dir = rustix::fs::fstat(&at)
            .map(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir())
            .map_err(|e| err("stat", path, e))?;
        let clone = clone_tree(at.as_fd()).map_err(|e| err("clone", path, e))?;
        if !is_dir {
            set_attrs(clone.as_fd(), MountAttrFlags::MOUNT_ATTR_RDONLY, false)
                .map_err(|e| err("make read-only", path, e))?;
        }
        clones.push((path, clone));
    }
    set_attrs(root, MountAttrFlags::MOUNT_ATTR_NOEXEC, true)
        .map_err(|e| err("make noexec", Path::new("/"), e))?;
    for (path, clone) in clones {
        let target = open_in(root, path)?;
        attach(&clone, target.as_fd()).map_err(|e| err("keep executable", path, e))?;
    }
    Ok(())
}
