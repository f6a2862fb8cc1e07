//! The sandbox's filesystem, built with the new mount API (`open_tree`, `fsmount`,
//! `mount_setattr`, `move_mount`) by the sandbox's pid 1 in its own user and mount
//! namespaces.
//!
//! The same steps as bubblewrap, in the same order (but with the whole tree made private
//! first, where bubblewrap keeps it a slave of the host's): a private tmpfs becomes the
//! root for a moment (`pivot_root`), the host's tree is reachable under it only as `/oldroot`, and
//! the new root is a read-only recursive clone of that tree attached at `/newroot`. Every
//! operation of the plan then lands beneath `/newroot`, each path resolved *inside* it
//! (`openat2` with `RESOLVE_IN_ROOT`: a symlink cannot lead a mount out of the sandbox's
//! tree), every source looked up under `/oldroot`. Last, `/newroot` becomes `/` and the
//! host's tree is detached. Unlike bubblewrap, no step re-reads the mount table: flags
//! are set on a detached clone, recursively, before it is attached, which is what makes
//! the plan nearly free.
//!
//! Descriptors bound with `--bind-fd` were opened (and checked) by Warden in the host's
//! mount namespace; a mount of another namespace cannot be cloned, so each is looked up
//! again by the path the kernel gave for it before the namespaces were made, and must be
//! the same file (device and inode) — else nothing runs.

use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::mount::{
    FsMountFlags, FsOpenFlags, MountAttrFlags, MoveMountFlags, OpenTreeFlags, UnmountFlags,
};

use super::spec::Op;
use crate::SandboxError;
use crate::exec_allowlist::keep_executable_only;
use crate::mount_api::{attach, clone_tree, err, open_in, relative, set_attrs, tmpfs};

/// Device nodes a minimal `/dev` gets from the host (bubblewrap's set).
const DEVICE_NODES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// `/proc` entries that stay read-only inside (bubblewrap's set): kernel settings and
/// triggers a sandbox has no business writing.
const PROC_READ_ONLY: &[&str] = &["sys", "sysrq-trigger", "irq", "bus"];

/// The file a `--bind-fd` descriptor named when Warden opened it.
#[derive(Clone, Debug)]
pub struct FdSource {
    /// The descriptor number.
    pub fd: i32,
    /// Its path in the host's mount namespace.
    pub path: PathBuf,
    /// Device and inode, to recognise it again.
    pub id: (u64, u64),
}

impl FdSource {
    /// What descriptor `fd` is, read through the host's `/proc` at `proc` (where this
    /// process finds it: a standby's root has moved, see `super::standby`).
    pub fn of(fd: i32, proc: &str) -> Result<FdSource, SandboxError> {
        let path = std::fs::read_link(format!("{proc}/self/fd/{fd}"))
            .map_err(|e| SandboxError::Tree(format!("descriptor {fd} to bind: {e}")))?;
        // SAFETY: the descriptor was handed to this process for this bind and stays open
        // for its whole life; it is only borrowed here.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let st = rustix::fs::fstat(borrowed).map_err(|e| {
            SandboxError::Tree(format!("descriptor {fd} to bind ({}): {e}", path.display()))
        })?;
        Ok(FdSource {
            fd,
            path,
            id: (st.st_dev, st.st_ino),
        })
    }
}

/// What descriptor `fd` holds, from its start to its end (whatever its offset, as
/// bubblewrap reads it): at most [`super::spec::MAX_DATA`] bytes.
fn read_data(fd: i32) -> Result<Vec<u8>, SandboxError> {
    // SAFETY: the descriptor was handed to this process for this file and stays open for
    // its whole life; it is only borrowed here.
    let source = unsafe { BorrowedFd::borrow_raw(fd) };
    let limit = super::spec::MAX_DATA;
    let mut data = vec![0u8; limit + 1];
    let mut len = 0;
    loop {
        let n = rustix::io::pread(source, &mut data[len..], len as u64)
            .map_err(|e| SandboxError::Tree(format!("descriptor {fd} to bind as a file: {e}")))?;
        if n == 0 {
            break;
        }
        len += n;
        if len > limit {
            return Err(SandboxError::Tree(format!(
                "descriptor {fd} holds more than {limit} bytes to bind as a file"
            )));
        }
    }
    data.truncate(len);
    Ok(data)
}

/// The tree being built: the host's under `/oldroot`, the sandbox's under `/newroot`.
pub struct Tree {
    old_root: OwnedFd,
    new_root: OwnedFd,
    /// Files staged for `--ro-bind-data` so far (each gets a name of its own).
    staged: std::cell::Cell<usize>,
}

impl Tree {
    /// Step 1: a private tmpfs as `/` with the host's tree at `/oldroot`, and the host's
    /// tree cloned read-only at `/newroot`. The caller is in new user and mount
    /// namespaces.
    pub fn start() -> Result<Tree, SandboxError> {
        let root = Path::new("/");
        // Nothing propagates either way from here on: not the sandbox's mounts to the
        // host, and — stricter than bubblewrap, which keeps the tree a downstream (slave)
        // of the host's — not a mount the host makes during the run into the sandbox,
        // where it would appear without the read-only flag set below.
        rustix::mount::mount_change(
            "/",
            rustix::mount::MountPropagationFlags::PRIVATE
                | rustix::mount::MountPropagationFlags::REC,
        )
        .map_err(|e| err("make private", root, e))?;
        let base = tmpfs(MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV)
            .map_err(|e| err("tmpfs for", Path::new("the base"), e))?;
        let tmp = rustix::fs::open(
            "/tmp",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| err("open", Path::new("/tmp"), e))?;
        attach(&base, tmp.as_fd()).map_err(|e| err("mount the base on", Path::new("/tmp"), e))?;
        for dir in ["/tmp/newroot", "/tmp/oldroot"] {
            rustix::fs::mkdir(dir, Mode::from_raw_mode(0o755))
                .map_err(|e| err("mkdir", Path::new(dir), e))?;
        }
        rustix::process::pivot_root("/tmp", "/tmp/oldroot")
            .map_err(|e| err("pivot_root to", Path::new("/tmp"), e))?;
        rustix::process::chdir("/").map_err(|e| err("chdir", root, e))?;
        let dir = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let old_root = rustix::fs::open("/oldroot", dir, Mode::empty())
            .map_err(|e| err("open", Path::new("/oldroot"), e))?;
        let clone = clone_tree(old_root.as_fd()).map_err(|e| err("clone", root, e))?;
        set_attrs(
            clone.as_fd(),
            MountAttrFlags::MOUNT_ATTR_RDONLY
                | MountAttrFlags::MOUNT_ATTR_NOSUID
                | MountAttrFlags::MOUNT_ATTR_NODEV,
            true,
        )
        .map_err(|e| err("make read-only", root, e))?;
        let target = rustix::fs::open("/newroot", dir, Mode::empty())
            .map_err(|e| err("open", Path::new("/newroot"), e))?;
        attach(&clone, target.as_fd())
            .map_err(|e| err("mount the root on", Path::new("/newroot"), e))?;
        let new_root = rustix::fs::open("/newroot", dir, Mode::empty())
            .map_err(|e| err("open", Path::new("/newroot"), e))?;
        Ok(Tree {
            old_root,
            new_root,
            staged: std::cell::Cell::new(0),
        })
    }

    /// The tree a standby began before its run (`super::standby`: [`Tree::start`] and
    /// the plan's first operations), found again by path: this process's root is the
    /// private tmpfs by then, which nothing else can reach.
    pub fn resume() -> Result<Tree, SandboxError> {
        let dir = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let open = |path: &str| {
            rustix::fs::open(path, dir, Mode::empty()).map_err(|e| err("open", Path::new(path), e))
        };
        Ok(Tree {
            old_root: open("/oldroot")?,
            new_root: open("/newroot")?,
            staged: std::cell::Cell::new(0),
        })
    }

    /// Step 2: one operation of the plan.
    pub fn apply(&self, op: &Op, fd_sources: &[FdSource]) -> Result<(), SandboxError> {
        let plain = MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV;
        let bind_attrs = |writable: bool| {
            if writable {
                plain
            } else {
                plain | MountAttrFlags::MOUNT_ATTR_RDONLY
            }
        };
        match op {
            Op::RootReadOnly => Ok(()), // step 1
            Op::Dev(dest) => self.dev(dest),
            Op::Proc(dest) => self.proc(dest),
            Op::Tmpfs(dest) => {
                let fs = tmpfs(plain).map_err(|e| err("tmpfs for", dest, e))?;
                let target = self.ensure(dest, true)?;
                attach(&fs, target.as_fd()).map_err(|e| err("mount tmpfs on", dest, e))
            }
            Op::RemountReadOnly(dest) => {
                let target = self.inside(dest)?;
                set_attrs(target.as_fd(), MountAttrFlags::MOUNT_ATTR_RDONLY, false)
                    .map_err(|e| err("make read-only", dest, e))
            }
            Op::Bind {
                source,
                dest,
                writable,
            } => {
                let src = rustix::fs::openat2(
                    &self.old_root,
                    relative(source),
                    OFlags::PATH | OFlags::CLOEXEC,
                    Mode::empty(),
                    ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
                )
                .map_err(|e| err("open", source, e))?;
                let is_dir = rustix::fs::fstat(&src)
                    .map(|st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_dir())
                    .map_err(|e| err("stat", source, e))?;
                self.bind(src.as_fd(), dest, bind_attrs(*writable), is_dir)
            }
            Op::BindFd { fd, dest, writable } => {
                let known = fd_sources.iter().find(|s| s.fd == *fd).ok_or_else(|| {
                    SandboxError::Tree(format!(
                        "descriptor {fd} was not looked at before the namespaces were made"
                    ))
                })?;
                let src = rustix::fs::openat2(
                    &self.old_root,
                    relative(&known.path),
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                    ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS | ResolveFlags::NO_SYMLINKS,
                )
                .map_err(|e| err("open again", &known.path, e))?;
                let st = rustix::fs::fstat(&src).map_err(|e| err("stat", &known.path, e))?;
                if (st.st_dev, st.st_ino) != known.id {
                    return Err(SandboxError::Changed {
                        path: known.path.clone(),
                    });
                }
                self.bind(src.as_fd(), dest, bind_attrs(*writable), true)
            }
            Op::BindData { fd, dest } => {
                // A file of the base tmpfs (this process's own, gone with it when the
                // tree is finished), bound read-only where it belongs.
                let data = read_data(*fd)?;
                let n = self.staged.get();
                self.staged.set(n + 1);
                let staged = PathBuf::from(format!("/data.{n}"));
                let file = rustix::fs::open(
                    &staged,
                    OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o444),
                )
                .map_err(|e| err("create", &staged, e))?;
                let mut written = 0;
                while written < data.len() {
                    written += rustix::io::write(&file, &data[written..])
                        .map_err(|e| err("write", &staged, e))?;
                }
                drop(file);
                let src = rustix::fs::open(&staged, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
                    .map_err(|e| err("open", &staged, e))?;
                self.bind(src.as_fd(), dest, bind_attrs(false), false)
            }
        }
    }

    /// Bind `src` (a descriptor of the host's file or directory) on `dest`, with `attrs`
    /// on it and everything mounted beneath it.
    fn bind(
        &self,
        src: BorrowedFd<'_>,
        dest: &Path,
        attrs: MountAttrFlags,
        is_dir: bool,
    ) -> Result<(), SandboxError> {
        let clone = clone_tree(src).map_err(|e| err("clone for", dest, e))?;
        set_attrs(clone.as_fd(), attrs, true).map_err(|e| err("set flags for", dest, e))?;
        let target = self.ensure(dest, is_dir)?;
        attach(&clone, target.as_fd()).map_err(|e| err("bind on", dest, e))
    }

    /// `path` opened (`O_PATH`) inside the new root; symlinks resolve inside it.
    fn inside(&self, path: &Path) -> Result<OwnedFd, SandboxError> {
        open_in(self.new_root.as_fd(), path)
    }

    /// `path` inside the new root, created if missing (a directory with its parents, or
    /// an empty file) — possible only where the sandbox's own tmpfs is, as bubblewrap.
    fn ensure(&self, path: &Path, is_dir: bool) -> Result<OwnedFd, SandboxError> {
        match self.inside(path) {
            Ok(fd) => return Ok(fd),
            Err(_) if path.parent().is_none() => return self.inside(path),
            Err(_) => {}
        }
        let parent = path.parent().unwrap_or(Path::new("/"));
        let parent_fd = self.ensure(parent, true)?;
        let name = path.file_name().ok_or_else(|| {
            SandboxError::Tree(format!("{} has no name to create", path.display()))
        })?;
        let created = if is_dir {
            rustix::fs::mkdirat(&parent_fd, name, Mode::from_raw_mode(0o755))
        } else {
            rustix::fs::openat(
                &parent_fd,
                name,
                OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o444),
            )
            .map(drop)
        };
        match created {
            Ok(()) | Err(rustix::io::Errno::EXIST) => self.inside(path),
            Err(e) => Err(err("create mount point", path, e)),
        }
    }

    /// A minimal `/dev` at `dest`: a tmpfs with the host's harmless device nodes bound in,
    /// a private devpts, and the usual links.
    fn dev(&self, dest: &Path) -> Result<(), SandboxError> {
        let mut nodes = Vec::new();
        for name in DEVICE_NODES {
            let host = Path::new("/dev").join(name);
            let node = rustix::mount::open_tree(
                &self.old_root,
                relative(&host),
                OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC,
            )
            .map_err(|e| err("clone", &host, e))?;
            nodes.push((name, node));
        }
        // nodev too: the device nodes are binds, each a mount with the host's own flags;
        // nothing created in the tmpfs itself may act as a device.
        let fs = tmpfs(MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV)
            .map_err(|e| err("tmpfs for", dest, e))?;
        let target = self.ensure(dest, true)?;
        attach(&fs, target.as_fd()).map_err(|e| err("mount tmpfs on", dest, e))?;
        let dev = self.inside(dest)?;
        for (name, node) in nodes {
            rustix::fs::openat(
                &dev,
                *name,
                OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o666),
            )
            .map_err(|e| err("create", &dest.join(name), e))?;
            rustix::mount::move_mount(
                &node,
                "",
                &dev,
                *name,
                MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
            )
            .map_err(|e| err("bind", &dest.join(name), e))?;
        }
        for dir in ["pts", "shm"] {
            rustix::fs::mkdirat(&dev, dir, Mode::from_raw_mode(0o755))
                .map_err(|e| err("mkdir", &dest.join(dir), e))?;
        }
        let pts = rustix::mount::fsopen("devpts", FsOpenFlags::FSOPEN_CLOEXEC)
            .and_then(|fs| {
                rustix::mount::fsconfig_set_flag(&fs, "newinstance")?;
                rustix::mount::fsconfig_set_string(&fs, "ptmxmode", "0666")?;
                rustix::mount::fsconfig_set_string(&fs, "mode", "620")?;
                rustix::mount::fsconfig_create(&fs)?;
                rustix::mount::fsmount(
                    &fs,
                    FsMountFlags::FSMOUNT_CLOEXEC,
                    MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NOEXEC,
                )
            })
            .map_err(|e| err("devpts for", dest, e))?;
        rustix::mount::move_mount(
            &pts,
            "",
            &dev,
            "pts",
            MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
        )
        .map_err(|e| err("mount devpts on", &dest.join("pts"), e))?;
        for (link, to) in [
            ("ptmx", "pts/ptmx"),
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
            ("core", "/proc/kcore"),
        ] {
            rustix::fs::symlinkat(to, &dev, link)
                .map_err(|e| err("symlink", &dest.join(link), e))?;
        }
        Ok(())
    }

    /// A fresh `/proc` of the sandbox's pid namespace at `dest`, its kernel settings
    /// read-only. The caller is that namespace's pid 1.
    fn proc(&self, dest: &Path) -> Result<(), SandboxError> {
        let fs = rustix::mount::fsopen("proc", FsOpenFlags::FSOPEN_CLOEXEC)
            .and_then(|fs| {
                rustix::mount::fsconfig_create(&fs)?;
                rustix::mount::fsmount(
                    &fs,
                    FsMountFlags::FSMOUNT_CLOEXEC,
                    MountAttrFlags::MOUNT_ATTR_NOSUID
                        | MountAttrFlags::MOUNT_ATTR_NODEV
                        | MountAttrFlags::MOUNT_ATTR_NOEXEC,
                )
            })
            .map_err(|e| err("proc for", dest, e))?;
        let target = self.ensure(dest, true)?;
        attach(&fs, target.as_fd()).map_err(|e| err("mount proc on", dest, e))?;
        let proc = self.inside(dest)?;
        for name in PROC_READ_ONLY {
            let entry = match rustix::mount::open_tree(
                &proc,
                *name,
                OpenTreeFlags::OPEN_TREE_CLONE
                    | OpenTreeFlags::OPEN_TREE_CLOEXEC
                    | OpenTreeFlags::AT_RECURSIVE
                    | OpenTreeFlags::AT_SYMLINK_NOFOLLOW,
            ) {
                Ok(entry) => entry,
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(err("clone", &dest.join(name), e)),
            };
            set_attrs(
                entry.as_fd(),
                MountAttrFlags::MOUNT_ATTR_RDONLY
                    | MountAttrFlags::MOUNT_ATTR_NOSUID
                    | MountAttrFlags::MOUNT_ATTR_NODEV,
                true,
            )
            .map_err(|e| err("make read-only", &dest.join(name), e))?;
            rustix::mount::move_mount(
                &entry,
                "",
                &proc,
                *name,
                MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
            )
            .map_err(|e| err("bind", &dest.join(name), e))?;
        }
        Ok(())
    }

    /// Step 2b, with an exec allowlist: see [`keep_executable_only`].
    pub fn exec_only(&self, allowed: &[PathBuf]) -> Result<(), SandboxError> {
        keep_executable_only(self.new_root.as_fd(), allowed)
    }

    /// Step 3: the new root becomes `/`, the host's tree and the base are gone.
    pub fn finish(self, chdir: Option<&Path>) -> Result<(), SandboxError> {
        let root = Path::new("/");
        drop(self.old_root);
        rustix::process::fchdir(&self.new_root)
            .map_err(|e| err("chdir", Path::new("/newroot"), e))?;
        // The new root becomes the root, with the base stacked over it at "/"; detaching
        // the base detaches everything mounted beneath it — the host's tree at /oldroot
        // with it (a lazy unmount takes the whole subtree). What is left is the sandbox's
        // tree alone. One unmount, not bubblewrap's two (/oldroot first, then the base):
        // each waits for an RCU grace period, on the way to the command.
        rustix::process::pivot_root(".", ".")
            .map_err(|e| err("pivot_root to", Path::new("/newroot"), e))?;
        rustix::mount::unmount(".", UnmountFlags::DETACH)
            .map_err(|e| err("detach the base and the host's tree", root, e))?;
        rustix::process::chdir("/").map_err(|e| err("chdir", root, e))?;
        if let Some(dir) = chdir {
            let c = CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|_| {
                SandboxError::Tree(format!("{} contains a NUL byte", dir.display()))
            })?;
            rustix::process::chdir(c.as_c_str()).map_err(|e| err("Can't chdir to", dir, e))?;
        }
        Ok(())
    }
}
