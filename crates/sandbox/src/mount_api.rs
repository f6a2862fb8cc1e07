//! Warden's thin layer over the kernel's new mount API (`open_tree`, `fsopen`/`fsmount`,
//! `mount_setattr`, `move_mount`) and `openat2` resolution inside a root: the calls both
//! of its users make — the namespace builder's tree (`crate::builder`) and an exec
//! allowlist's `noexec` layer (`crate::exec_allowlist`) — in one leaf module, so neither
//! depends on the other for them.

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::mount::{FsMountFlags, FsOpenFlags, MountAttrFlags, MoveMountFlags, OpenTreeFlags};

use crate::SandboxError;

/// A mount step `what` that failed on `path` with `e`.
pub(crate) fn err(what: &'static str, path: &Path, e: rustix::io::Errno) -> SandboxError {
    SandboxError::mount(what, path, e)
}

/// `path` relative to `/` (a plan path is absolute).
pub(crate) fn relative(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| !matches!(c, Component::RootDir))
        .collect()
}

/// `mount_setattr(2)`'s argument (rustix does not wrap the call).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Set `attrs` on the mount (or, `recursive`, the mount tree) `fd` is the root of.
pub(crate) fn set_attrs(
    fd: BorrowedFd<'_>,
    attrs: MountAttrFlags,
    recursive: bool,
) -> rustix::io::Result<()> {
    let attr = MountAttr {
        attr_set: u64::from(attrs.bits()),
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let mut flags = nix::libc::AT_EMPTY_PATH as u32;
    if recursive {
        flags |= nix::libc::AT_RECURSIVE as u32;
    }
    // SAFETY: a valid descriptor, an empty C string, and a correctly sized struct that
    // lives across the call.
    let r = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(rustix::io::Errno::from_raw_os_error(
            nix::errno::Errno::last_raw(),
        ))
    }
}

/// A detached tmpfs (`mode=0755`), mounted with `attrs`.
pub(crate) fn tmpfs(attrs: MountAttrFlags) -> rustix::io::Result<OwnedFd> {
    let fs = rustix::mount::fsopen("tmpfs", FsOpenFlags::FSOPEN_CLOEXEC)?;
    rustix::mount::fsconfig_set_string(&fs, "mode", "0755")?;
    rustix::mount::fsconfig_create(&fs)?;
    rustix::mount::fsmount(&fs, FsMountFlags::FSMOUNT_CLOEXEC, attrs)
}

/// A detached copy of the mount tree rooted where `fd` is (it and every mount beneath).
pub(crate) fn clone_tree(fd: BorrowedFd<'_>) -> rustix::io::Result<OwnedFd> {
    rustix::mount::open_tree(
        fd,
        "",
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_EMPTY_PATH
            | OpenTreeFlags::AT_RECURSIVE,
    )
}

/// Attach the detached mount `tree` on `target` (a descriptor of the mount point).
pub(crate) fn attach(tree: &OwnedFd, target: BorrowedFd<'_>) -> rustix::io::Result<()> {
    rustix::mount::move_mount(
        tree,
        "",
        target,
        "",
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH | MoveMountFlags::MOVE_MOUNT_T_EMPTY_PATH,
    )
}

/// `path` opened (`O_PATH`) beneath `root`, as if `root` were `/`: symlinks resolve
/// inside it.
pub(crate) fn open_in(root: BorrowedFd<'_>, path: &Path) -> Result<OwnedFd, SandboxError> {
    rustix::fs::openat2(
        root,
        relative(path),
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| err("open", path, e))
}
