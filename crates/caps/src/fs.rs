//! The `Fs` capability: the file operations Warden components may perform, and the
//! value types they exchange.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::Result;

/// What kind of object a path names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (only reported by [`Fs::symlink_metadata`] and [`Fs::list`]).
    Symlink,
    /// A Unix domain socket.
    Socket,
    /// A FIFO or device.
    Other,
}

impl FileKind {
    /// The kind from a file type's predicates (std's and cap-std's file types answer the
    /// same questions but are different types).
    pub(crate) fn classify(symlink: bool, dir: bool, file: bool, socket: bool) -> FileKind {
        match (symlink, dir, file, socket) {
            (true, ..) => FileKind::Symlink,
            (_, true, ..) => FileKind::Dir,
            (_, _, true, _) => FileKind::File,
            (.., true) => FileKind::Socket,
            _ => FileKind::Other,
        }
    }
}

impl std::fmt::Display for FileKind {
    /// Words for error messages: "it is a symbolic link".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FileKind::File => "a regular file",
            FileKind::Dir => "a directory",
            FileKind::Symlink => "a symbolic link",
            FileKind::Socket => "a socket",
            FileKind::Other => "a FIFO or device",
        })
    }
}

/// Which file a path named: the device and inode, the identity a rename, a replacement
/// or a new file at the same path does not keep.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct FileId {
    /// The device.
    pub dev: u64,
    /// The inode on that device.
    pub ino: u64,
}

impl fmt::Display for FileId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.dev, self.ino)
    }
}

/// The facts about a file that Warden needs: kind, size, permission bits, owner and
/// identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metadata {
    /// What the path names.
    pub kind: FileKind,
    /// Size in bytes.
    pub len: u64,
    /// Permission bits (`0o7777` mask of `st_mode`).
    pub mode: u32,
    /// Owning user id.
    pub uid: u32,
    /// Last modification time, when the provider knows it.
    pub modified: Option<SystemTime>,
    /// Which file this is.
    pub id: FileId,
}

impl Metadata {
    /// True for a regular file.
    pub fn is_file(&self) -> bool {
        self.kind == FileKind::File
    }
    /// True for a directory.
    pub fn is_dir(&self) -> bool {
        self.kind == FileKind::Dir
    }
    /// True when any execute bit is set on a regular file.
    pub fn is_executable_file(&self) -> bool {
        self.is_file() && self.mode & 0o111 != 0
    }
}

/// One entry of a directory listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's file name (not a path).
    pub name: OsString,
    /// The entry's kind, without following symlinks.
    pub kind: FileKind,
}

/// How a file is created by [`Fs::write`] and [`Fs::write_atomic`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteOptions {
    /// Permission bits for a newly created file. [`Fs::write`] leaves the mode of an
    /// existing file alone; [`Fs::write_atomic`] always creates a new file with this mode,
    /// so a secret is never readable by others, not even for an instant.
    pub mode: u32,
    /// Fail with [`crate::CapsError::AlreadyExists`] if the file exists
    /// (only for [`Fs::write`]).
    pub create_new: bool,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            mode: 0o644,
            create_new: false,
        }
    }
}

impl WriteOptions {
    /// Options for a private file (mode 0600).
    pub fn private() -> Self {
        WriteOptions {
            mode: 0o600,
            ..WriteOptions::default()
        }
    }
}

/// An exclusive advisory lock, released when dropped.
///
/// Providers put whatever keeps the lock alive (an open, `flock`ed file; a slot in an
/// in-memory table) inside; callers only hold it.
pub struct FsLock {
    _guard: Box<dyn Send + Sync>,
}

impl FsLock {
    /// Wrap a provider's guard value.
    pub fn new(guard: impl Send + Sync + 'static) -> Self {
        FsLock {
            _guard: Box::new(guard),
        }
    }
}

impl fmt::Debug for FsLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FsLock")
    }
}

/// File operations, as one provider's world sees them.
///
/// Every method resolves its path arguments through [`Fs::resolve_path`]'s logic first,
/// so a provider refuses an escape in exactly one place, before any I/O. Paths in a
/// provider's world:
/// - **local**: the real filesystem; relative paths are taken relative to the base
///   directory the provider was built with.
/// - **memory**: an absolute namespace in a map; relative paths start at `/`.
/// - **bounded**: relative to the root directory handle; absolute paths, `..` escapes and
///   symlinks leaving the root are [`crate::CapsError::Denied`].
pub trait Fs: Send + Sync + fmt::Debug {
    /// The single path-resolution choke point: check `path` against this world's rules and
    /// return the path as this world names it (absolute for local and memory, relative to
    /// the root for bounded). Symlinks are not resolved (see [`Fs::canonicalize`]).
    fn resolve_path(&self, path: &Path) -> Result<PathBuf>;

    /// Read a whole file.
    fn read(&self, path: &Path) -> Result<Vec<u8>>;

    /// Read a whole file as UTF-8.
    fn read_to_string(&self, path: &Path) -> Result<String> {
        let bytes = self.read(path)?;
        String::from_utf8(bytes).map_err(|_| {
            crate::CapsError::invalid(format!("{} is not valid UTF-8", path.display()))
        })
    }

    /// Create or truncate a file and write `data` to it.
    fn write(&self, path: &Path, data: &[u8], options: WriteOptions) -> Result<()>;

    /// Replace a file atomically: write a temporary file in the same directory (created
    /// with `options.mode`), fsync it, rename it over `path`, fsync the directory. After a
    /// crash the file holds either the old or the new contents, never a mix.
    fn write_atomic(&self, path: &Path, data: &[u8], options: WriteOptions) -> Result<()>;

    /// Add `data` at the end of a file (created with `options.mode` if missing) in one
    /// write, so concurrent appenders never interleave inside it; with `sync`, the data
    /// is on disk when this returns (and, when this write began the file, its name: the
    /// directory is synced too). Appending never follows a symlink at `path`.
    fn append(&self, path: &Path, data: &[u8], options: WriteOptions, sync: bool) -> Result<()>;

    /// Up to `len` bytes of a file from byte `offset` (fewer at its end; none past it):
    /// the tail of a log without reading all of it.
    fn read_range(&self, path: &Path, offset: u64, len: usize) -> Result<Vec<u8>> {
        let data = self.read(path)?;
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(data.len());
        let end = start.saturating_add(len).min(data.len());
        Ok(data[start..end].to_vec())
    }

    /// Create a directory and its missing parents; new directories get `mode`.
    fn create_dir_all(&self, path: &Path, mode: u32) -> Result<()>;

    /// List a directory, sorted by name.
    fn list(&self, path: &Path) -> Result<Vec<DirEntry>>;

    /// Metadata, following symlinks.
    fn metadata(&self, path: &Path) -> Result<Metadata>;

    /// Metadata of the path itself (a symlink is reported as [`FileKind::Symlink`]).
    fn symlink_metadata(&self, path: &Path) -> Result<Metadata>;

    /// The path with every symlink resolved, as this world names it.
    fn canonicalize(&self, path: &Path) -> Result<PathBuf>;

    /// Remove a file, a symlink or an empty directory.
    fn remove(&self, path: &Path) -> Result<()>;

    /// Rename `from` to `to`, replacing `to` if it is a file.
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;

    /// Set permission bits.
    fn set_permissions(&self, path: &Path, mode: u32) -> Result<()>;

    /// Take an exclusive advisory lock on `path` (created with mode 0600 if missing),
    /// blocking until it is available. Use a sidecar lock file, not the data file, so
    /// atomic replacement of the data file does not invalidate the lock.
    fn lock(&self, path: &Path) -> Result<FsLock>;

    /// True if `path` exists (following symlinks). Denials are reported, not hidden.
    fn exists(&self, path: &Path) -> Result<bool> {
        match self.metadata(path) {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }
}
