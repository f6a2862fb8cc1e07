//! `BoundedFs`: the [`Fs`] trait over a cap-std directory handle.

use std::io::{Seek as _, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use cap_std::fs::{
    Dir, DirBuilder, DirBuilderExt, FileTypeExt, MetadataExt, OpenOptions, OpenOptionsExt,
    Permissions, PermissionsExt,
};
use nix::fcntl::{Flock, FlockArg};

use super::guard::{Access, Guard, check, real_path};
use super::map_err;
use crate::fs::{DirEntry, FileId, FileKind, Fs, FsLock, Metadata, WriteOptions};
use crate::providers::paths::normalize_beneath;
use crate::{CapsError, Result};

/// A filesystem confined beneath one directory.
///
/// `..` is applied lexically and may not climb above the root; absolute paths, NUL bytes
/// and symlinks whose target lies outside the root are [`CapsError::Denied`] — including
/// symlinks created after the provider was built and directories swapped for symlinks
/// while operations run, because every call is resolved through the root handle by the
/// kernel, not checked as a string beforehand.
///
/// With a [`Guard`] ([`BoundedFs::with_guard`]), parts of the tree beneath the root are
/// refused too: every operation first opens the handle it will act on — the file read,
/// the directory listed, the directory a write lands in — asks the guard about where
/// that handle really is, and then acts through it. Under a guard a symlink in the last
/// component of a path that is written is not followed (it is replaced, or refused).
pub struct BoundedFs {
    root: Dir,
    root_path: PathBuf,
    guard: Option<Guard>,
}

impl std::fmt::Debug for BoundedFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundedFs")
            .field("root_path", &self.root_path)
            .field("guarded", &self.guard.is_some())
            .finish()
    }
}

fn to_metadata(m: &cap_std::fs::Metadata) -> Metadata {
    let ft = m.file_type();
    let kind = FileKind::classify(ft.is_symlink(), ft.is_dir(), ft.is_file(), ft.is_socket());
    Metadata {
        kind,
        len: m.len(),
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        modified: m.modified().ok().map(|t| t.into_std()),
        id: FileId {
            dev: m.dev(),
            ino: m.ino(),
        },
    }
}

/// `.` for the root itself (cap-std wants a non-empty path).
fn rel(p: &Path) -> &Path {
    if p.as_os_str().is_empty() {
        Path::new(".")
    } else {
        p
    }
}

impl BoundedFs {
    /// Confine to the directory at `root`. This is the one ambient step: opening the root.
    pub fn open(root: impl AsRef<Path>) -> Result<Self> {
        let root_path = root.as_ref().to_path_buf();
        let dir = Dir::open_ambient_dir(&root_path, cap_std::ambient_authority())
            .map_err(|e| CapsError::from_io("open bounded root", &root_path, e))?;
        Ok(BoundedFs {
            root: dir,
            root_path,
            guard: None,
        })
    }

    /// Confine to an already-open directory handle. `display` is only used in messages.
    pub fn from_dir(root: Dir, display: impl Into<PathBuf>) -> Self {
        BoundedFs {
            root,
            root_path: display.into(),
            guard: None,
        }
    }

    /// Refuse, beneath the root, whatever `guard` refuses (see the type's docs).
    pub fn with_guard(mut self, guard: Guard) -> Self {
        self.guard = Some(guard);
        self
    }

    /// Open `p` (symlinks followed beneath the root) with `flags` added to a read-only
    /// open, for a guard to judge.
    fn open_handle(
        &self,
        path: &Path,
        p: &Path,
        flags: i32,
        op: &'static str,
    ) -> Result<cap_std::fs::File> {
        let mut open = OpenOptions::new();
        open.read(true).custom_flags(flags | nix::libc::O_CLOEXEC);
        self.root
            .open_with(rel(p), &open)
            .map_err(|e| map_err(op, path, e))
    }

    /// Open the directory `p` lands in, check with the guard where it really is (with
    /// the last name joined on), and return it with that name.
    fn guarded_parent(
        &self,
        guard: &Guard,
        path: &Path,
        p: &Path,
        access: Access,
        op: &'static str,
    ) -> Result<(Dir, PathBuf)> {
        let (dir, name) = self.parent_dir(path, p, op)?;
        let real = real_path(&dir, path)?;
        check(guard, &real.join(&name), access, path)?;
        Ok((dir, name))
    }

    /// Open `p` itself (symlinks followed beneath the root) as a path-only handle and
    /// check it with the guard.
    fn guarded_target(
        &self,
        guard: &Guard,
        path: &Path,
        p: &Path,
        access: Access,
        op: &'static str,
    ) -> Result<cap_std::fs::File> {
        let file = self.open_handle(path, p, nix::libc::O_PATH, op)?;
        check(guard, &real_path(&file, path)?, access, path)?;
        Ok(file)
    }

    /// The root as it was named when opened (for messages; never used to resolve).
    pub fn root_path(&self) -> &Path {
        &self.root_path
    }

    /// A second handle to the same root.
    pub fn try_clone_root(&self) -> Result<Dir> {
        self.root
            .try_clone()
            .map_err(|e| CapsError::from_io("clone root handle", &self.root_path, e))
    }

    fn parent_dir(&self, path: &Path, p: &Path, op: &'static str) -> Result<(Dir, PathBuf)> {
        let name = p.file_name().ok_or_else(|| {
            CapsError::invalid(format!("{op}: {} has no file name", path.display()))
        })?;
        let parent = p.parent().unwrap_or(Path::new(""));
        let dir = self
            .root
            .open_dir(rel(parent))
            .map_err(|e| map_err(op, path, e))?;
        Ok((dir, PathBuf::from(name)))
    }
}

/// Source of unique temp-file names within this process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

impl Fs for BoundedFs {
    fn resolve_path(&self, path: &Path) -> Result<PathBuf> {
        normalize_beneath(path)
    }

    fn read(&self, path: &Path) -> Result<Vec<u8>> {
        let p = self.resolve_path(path)?;
        let Some(guard) = &self.guard else {
            return self
                .root
                .read(rel(&p))
                .map_err(|e| map_err("read", path, e));
        };
        // Non-blocking, so a FIFO planted under the name cannot hang the caller.
        let file = self.open_handle(
            path,
            &p,
            nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY,
            "read",
        )?;
        check(guard, &real_path(&file, path)?, Access::Read, path)?;
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut file.into_std(), &mut data)
            .map_err(|e| map_err("read", path, e))?;
        Ok(data)
    }

    fn write(&self, path: &Path, data: &[u8], options: WriteOptions) -> Result<()> {
        let p = self.resolve_path(path)?;
        let mut open = OpenOptions::new();
        open.write(true).mode(options.mode);
        if options.create_new {
            open.create_new(true);
        } else {
            open.create(true).truncate(true);
        }
        let mut file = match &self.guard {
            None => self.root.open_with(rel(&p), &open),
            Some(guard) => {
                let (dir, name) = self.guarded_parent(guard, path, &p, Access::Write, "write")?;
                open.custom_flags(nix::libc::O_NOFOLLOW);
                dir.open_with(&name, &open)
            }
        }
        .map_err(|e| map_err("write", path, e))?;
        file.write_all(data).map_err(|e| map_err("write", path, e))
    }

    fn append(&self, path: &Path, data: &[u8], options: WriteOptions, sync: bool) -> Result<()> {
        let p = self.resolve_path(path)?;
        let mut open = OpenOptions::new();
        open.append(true).create(true).mode(options.mode);
        open.custom_flags(nix::libc::O_NOFOLLOW);
        let mut file = match &self.guard {
            None => self.root.open_with(rel(&p), &open),
            Some(guard) => {
                let (dir, name) =
                    self.guarded_parent(guard, path, &p, Access::Write, "append to")?;
                dir.open_with(&name, &open)
            }
        }
        .map_err(|e| map_err("append to", path, e))?;
        let written = file
            .write(data)
            .map_err(|e| map_err("append to", path, e))?;
        if written != data.len() {
            return Err(map_err(
                "append to",
                path,
                std::io::Error::new(
                    std::io::ErrorKind::WriteZero,
                    format!("only {written} of {} bytes were written", data.len()),
                ),
            ));
        }
        if sync {
            file.sync_data().map_err(|e| map_err("fsync", path, e))?;
            // A write that began the file (it was empty, likely created just now) is on
            // disk only once the file's name is: sync the directory too (as
            // `write_atomic` does, through a handle opened for reading).
            let end = file
                .stream_position()
                .map_err(|e| map_err("append to", path, e))?;
            if end == written as u64 {
                let (dir, _) = match &self.guard {
                    None => self.parent_dir(path, &p, "append to")?,
                    Some(guard) => {
                        self.guarded_parent(guard, path, &p, Access::Write, "append to")?
                    }
                };
                dir.open(".")
                    .and_then(|d| d.sync_all())
                    .map_err(|e| CapsError::from_io("fsync directory of", path, e))?;
            }
        }
        Ok(())
    }

    fn write_atomic(&self, path: &Path, data: &[u8], options: WriteOptions) -> Result<()> {
        let p = self.resolve_path(path)?;
        let (dir, name) = match &self.guard {
            None => self.parent_dir(path, &p, "replace")?,
            Some(guard) => self.guarded_parent(guard, path, &p, Access::Write, "replace")?,
        };
        let (tmp_name, mut file) = loop {
            let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
            let tmp_name = format!(".{}.{}.{n}.tmp", name.display(), std::process::id());
            let mut open = OpenOptions::new();
            open.write(true).create_new(true).mode(options.mode);
            match dir.open_with(&tmp_name, &open) {
                Ok(file) => break (tmp_name, file),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(map_err("create temp file for", path, e)),
            }
        };
        let written = (|| {
            file.set_permissions(Permissions::from_mode(options.mode))?;
            file.write_all(data)?;
            file.sync_all()?;
            dir.rename(&tmp_name, &dir, &name)
        })();
        if let Err(e) = written {
            let _ = dir.remove_file(&tmp_name);
            return Err(map_err("replace", path, e));
        }
        // The handle cap-std keeps is O_PATH, which cannot be fsynced: open the
        // directory itself for reading (through the same handle) and sync that.
        dir.open(".")
            .and_then(|d| d.sync_all())
            .map_err(|e| CapsError::from_io("fsync directory of", path, e))
    }

    fn create_dir_all(&self, path: &Path, mode: u32) -> Result<()> {
        let p = self.resolve_path(path)?;
        if p.as_os_str().is_empty() {
            return Ok(());
        }
        let mut builder = DirBuilder::new();
        builder.recursive(true).mode(mode);
        let Some(guard) = &self.guard else {
            return self
                .root
                .create_dir_with(&p, &builder)
                .map_err(|e| map_err("create directory", path, e));
        };
        // One component at a time: each directory is opened, checked where it really is,
        // and the next one is created through that handle.
        let mut single = DirBuilder::new();
        single.mode(mode);
        let mut dir = self
            .root
            .try_clone()
            .map_err(|e| map_err("create directory", path, e))?;
        let mut walked = PathBuf::new();
        for component in p.components() {
            walked.push(component);
            let next = match self.root.open_dir(&walked) {
                Ok(next) => next,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let name = component.as_os_str();
                    check(
                        guard,
                        &real_path(&dir, path)?.join(name),
                        Access::Write,
                        path,
                    )?;
                    match dir.create_dir_with(name, &single) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                        Err(e) => return Err(map_err("create directory", path, e)),
                    }
                    self.root
                        .open_dir(&walked)
                        .map_err(|e| map_err("create directory", path, e))?
                }
                Err(e) => return Err(map_err("create directory", path, e)),
            };
            check(guard, &real_path(&next, path)?, Access::Write, path)?;
            dir = next;
        }
        Ok(())
    }

    fn list(&self, path: &Path) -> Result<Vec<DirEntry>> {
        let p = self.resolve_path(path)?;
        let mut entries = Vec::new();
        let listing = match &self.guard {
            None => self.root.read_dir(rel(&p)),
            Some(guard) => {
                let dir = self
                    .root
                    .open_dir(rel(&p))
                    .map_err(|e| map_err("list", path, e))?;
                check(guard, &real_path(&dir, path)?, Access::Read, path)?;
                dir.entries()
            }
        };
        for entry in listing.map_err(|e| map_err("list", path, e))? {
            let entry = entry.map_err(|e| map_err("list", path, e))?;
            let ft = entry.file_type().map_err(|e| map_err("list", path, e))?;
            let kind =
                FileKind::classify(ft.is_symlink(), ft.is_dir(), ft.is_file(), ft.is_socket());
            entries.push(DirEntry {
                name: entry.file_name(),
                kind,
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    fn metadata(&self, path: &Path) -> Result<Metadata> {
        let p = self.resolve_path(path)?;
        match &self.guard {
            None => self.root.metadata(rel(&p)),
            Some(guard) => self
                .guarded_target(guard, path, &p, Access::Read, "stat")?
                .metadata(),
        }
        .map(|m| to_metadata(&m))
        .map_err(|e| map_err("stat", path, e))
    }

    fn symlink_metadata(&self, path: &Path) -> Result<Metadata> {
        let p = self.resolve_path(path)?;
        match &self.guard {
            Some(guard) if !p.as_os_str().is_empty() => {
                let (dir, name) = self.guarded_parent(guard, path, &p, Access::Read, "lstat")?;
                dir.symlink_metadata(&name)
            }
            _ => self.root.symlink_metadata(rel(&p)),
        }
        .map(|m| to_metadata(&m))
        .map_err(|e| map_err("lstat", path, e))
    }

    fn canonicalize(&self, path: &Path) -> Result<PathBuf> {
        let p = self.resolve_path(path)?;
        if let Some(guard) = &self.guard {
            self.guarded_target(guard, path, &p, Access::Read, "canonicalize")?;
        }
        self.root
            .canonicalize(rel(&p))
            .map_err(|e| map_err("canonicalize", path, e))
    }

    fn remove(&self, path: &Path) -> Result<()> {
        let p = self.resolve_path(path)?;
        if p.as_os_str().is_empty() {
            return Err(CapsError::denied(
                path,
                "the bounded root cannot be removed",
            ));
        }
        let (dir, name) = match &self.guard {
            None => self.parent_dir(path, &p, "remove")?,
            Some(guard) => self.guarded_parent(guard, path, &p, Access::Write, "remove")?,
        };
        let meta = dir
            .symlink_metadata(&name)
            .map_err(|e| map_err("remove", path, e))?;
        if meta.is_dir() {
            dir.remove_dir(&name)
        } else {
            dir.remove_file(&name)
        }
        .map_err(|e| map_err("remove", path, e))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let f = self.resolve_path(from)?;
        let t = self.resolve_path(to)?;
        if f.as_os_str().is_empty() || t.as_os_str().is_empty() {
            return Err(CapsError::denied(
                from,
                "the bounded root cannot be renamed",
            ));
        }
        let Some(guard) = &self.guard else {
            return self
                .root
                .rename(&f, &self.root, &t)
                .map_err(|e| map_err("rename", from, e));
        };
        let (from_dir, from_name) =
            self.guarded_parent(guard, from, &f, Access::Write, "rename")?;
        let (to_dir, to_name) = self.guarded_parent(guard, to, &t, Access::Write, "rename")?;
        from_dir
            .rename(&from_name, &to_dir, &to_name)
            .map_err(|e| map_err("rename", from, e))
    }

    fn set_permissions(&self, path: &Path, mode: u32) -> Result<()> {
        let p = self.resolve_path(path)?;
        let Some(guard) = &self.guard else {
            return self
                .root
                .set_permissions(rel(&p), Permissions::from_mode(mode))
                .map_err(|e| map_err("chmod", path, e));
        };
        // chmod through the checked handle itself (fchmod refuses path-only handles; the
        // handle's /proc link names exactly the file that was checked).
        let handle = self.guarded_target(guard, path, &p, Access::Write, "chmod")?;
        let link = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&handle));
        rustix::fs::chmod(link.as_str(), rustix::fs::Mode::from_raw_mode(mode))
            .map_err(|e| CapsError::from_io("chmod", path, e.into()))
    }

    fn lock(&self, path: &Path) -> Result<FsLock> {
        let p = self.resolve_path(path)?;
        let mut open = OpenOptions::new();
        open.read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW);
        let file = match &self.guard {
            None => self.root.open_with(rel(&p), &open),
            Some(guard) => {
                let (dir, name) =
                    self.guarded_parent(guard, path, &p, Access::Write, "open lock file")?;
                dir.open_with(&name, &open)
            }
        }
        .map_err(|e| map_err("open lock file", path, e))?
        .into_std();
        let locked = Flock::lock(file, FlockArg::LockExclusive)
            .map_err(|(_, errno)| CapsError::from_io("lock", path, errno.into()))?;
        Ok(FsLock::new(locked))
    }
}
