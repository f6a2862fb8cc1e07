//! `LocalFs`: the real filesystem through `std::fs`.

use std::fs::{self, DirBuilder, File, OpenOptions, Permissions};
use std::io::{Seek as _, Write};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use super::metadata_from_std;
use crate::fs::{DirEntry, FileKind, Fs, FsLock, Metadata, WriteOptions};
use crate::providers::paths::reject_nul;
use crate::{CapsError, Result};

/// The real filesystem. Relative paths are taken relative to `base`, never to the
/// process's ambient working directory, so the caller states where it is.
#[derive(Clone, Debug)]
pub struct LocalFs {
    base: PathBuf,
}

impl LocalFs {
    /// A provider resolving relative paths against `base` (must be absolute).
    pub fn new(base: impl Into<PathBuf>) -> Result<Self> {
        let base = base.into();
        if !base.is_absolute() {
            return Err(CapsError::invalid(format!(
                "LocalFs base must be absolute, got {}",
                base.display()
            )));
        }
        Ok(LocalFs { base })
    }

    /// The base directory for relative paths.
    pub fn base(&self) -> &Path {
        &self.base
    }
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> CapsError + 'a {
    move |e| CapsError::from_io(op, path, e)
}

impl Fs for LocalFs {
    fn resolve_path(&self, path: &Path) -> Result<PathBuf> {
        reject_nul(path)?;
        // `components()` drops `.`; `..` is left for the kernel, which knows about symlinks.
        Ok(self.base.join(path).components().collect())
    }

    fn read(&self, path: &Path) -> Result<Vec<u8>> {
        let p = self.resolve_path(path)?;
        fs::read(&p).map_err(io_err("read", path))
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
        let mut file = open.open(&p).map_err(io_err("write", path))?;
        file.write_all(data).map_err(io_err("write", path))
    }

    fn write_atomic(&self, path: &Path, data: &[u8], options: WriteOptions) -> Result<()> {
        let p = self.resolve_path(path)?;
        let dir = p
            .parent()
            .ok_or_else(|| CapsError::invalid("cannot replace the root directory"))?;
        let name = p.file_name().unwrap_or_default().to_string_lossy();
        let mut tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            .permissions(Permissions::from_mode(options.mode))
            .tempfile_in(dir)
            .map_err(io_err("create temp file for", path))?;
        // The umask may have removed bits we asked for; never adds any.
        tmp.as_file()
            .set_permissions(Permissions::from_mode(options.mode))
            .map_err(io_err("chmod temp file for", path))?;
        tmp.write_all(data).map_err(io_err("write", path))?;
        tmp.as_file().sync_all().map_err(io_err("fsync", path))?;
        tmp.persist(&p)
            .map_err(|e| CapsError::from_io("rename into place", path, e.error))?;
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err("fsync directory of", path))
    }

    fn append(&self, path: &Path, data: &[u8], options: WriteOptions, sync: bool) -> Result<()> {
        let p = self.resolve_path(path)?;
        let mut file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(options.mode)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&p)
            .map_err(io_err("append to", path))?;
        // One write(2) of the whole record: O_APPEND places it at the end atomically.
        let written = file.write(data).map_err(io_err("append to", path))?;
        if written != data.len() {
            return Err(CapsError::from_io(
                "append to",
                path,
                std::io::Error::new(
                    std::io::ErrorKind::WriteZero,
                    format!("only {written} of {} bytes were written", data.len()),
                ),
            ));
        }
        if sync {
            file.sync_data().map_err(io_err("fsync", path))?;
            // A write that began the file (it was empty, likely created just now) is on
            // disk only once the file's name is: sync the directory too.
            let end = file.stream_position().map_err(io_err("append to", path))?;
            if end == written as u64 {
                let dir = p.parent().unwrap_or(Path::new("/"));
                File::open(dir)
                    .and_then(|d| d.sync_all())
                    .map_err(io_err("fsync directory of", path))?;
            }
        }
        Ok(())
    }

    fn read_range(&self, path: &Path, offset: u64, len: usize) -> Result<Vec<u8>> {
        use std::os::unix::fs::FileExt as _;
        let p = self.resolve_path(path)?;
        let file = File::open(&p).map_err(io_err("read", path))?;
        let mut data = vec![0u8; len];
        let mut filled = 0;
        while filled < len {
            match file.read_at(&mut data[filled..], offset + filled as u64) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(CapsError::from_io("read", path, e)),
            }
        }
        data.truncate(filled);
        Ok(data)
    }

    fn create_dir_all(&self, path: &Path, mode: u32) -> Result<()> {
        let p = self.resolve_path(path)?;
        DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(&p)
            .map_err(io_err("create directory", path))
    }

    fn list(&self, path: &Path) -> Result<Vec<DirEntry>> {
        let p = self.resolve_path(path)?;
        let mut entries = Vec::new();
        for entry in fs::read_dir(&p).map_err(io_err("list", path))? {
            let entry = entry.map_err(io_err("list", path))?;
            let ft = entry.file_type().map_err(io_err("list", path))?;
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
        fs::metadata(&p)
            .map(|m| metadata_from_std(&m))
            .map_err(io_err("stat", path))
    }

    fn symlink_metadata(&self, path: &Path) -> Result<Metadata> {
        let p = self.resolve_path(path)?;
        fs::symlink_metadata(&p)
            .map(|m| metadata_from_std(&m))
            .map_err(io_err("lstat", path))
    }

    fn canonicalize(&self, path: &Path) -> Result<PathBuf> {
        let p = self.resolve_path(path)?;
        fs::canonicalize(&p).map_err(io_err("canonicalize", path))
    }

    fn remove(&self, path: &Path) -> Result<()> {
        let p = self.resolve_path(path)?;
        let meta = fs::symlink_metadata(&p).map_err(io_err("remove", path))?;
        if meta.is_dir() {
            fs::remove_dir(&p).map_err(io_err("remove directory", path))
        } else {
            fs::remove_file(&p).map_err(io_err("remove", path))
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let f = self.resolve_path(from)?;
        let t = self.resolve_path(to)?;
        fs::rename(&f, &t).map_err(io_err("rename", from))
    }

    fn set_permissions(&self, path: &Path, mode: u32) -> Result<()> {
        let p = self.resolve_path(path)?;
        fs::set_permissions(&p, Permissions::from_mode(mode)).map_err(io_err("chmod", path))
    }

    fn lock(&self, path: &Path) -> Result<FsLock> {
        let p = self.resolve_path(path)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&p)
            .map_err(io_err("open lock file", path))?;
        let locked = Flock::lock(file, FlockArg::LockExclusive)
            .map_err(|(_, errno)| CapsError::from_io("lock", path, errno.into()))?;
        Ok(FsLock::new(locked))
    }
}
