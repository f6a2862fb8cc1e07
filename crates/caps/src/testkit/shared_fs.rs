//! The memory provider behind a shared handle: a test keeps the [`MemoryFs`] (to plant a
//! symlink, to read what was written) while the code under test owns the `Fs` — and,
//! where a test needs it, a fault: every synced append fails after its bytes landed (as
//! the local provider does when the file's directory cannot be synced).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::{DirEntry, Fs, FsLock, MemoryFs, Metadata, Result, WriteOptions};

/// See the module header.
#[derive(Debug)]
pub struct SharedMemoryFs {
    memory: Arc<MemoryFs>,
    synced_appends_fail: bool,
}

impl SharedMemoryFs {
    /// `memory`, shared.
    pub fn new(memory: Arc<MemoryFs>) -> Self {
        SharedMemoryFs {
            memory,
            synced_appends_fail: false,
        }
    }

    /// `memory`, shared, where every append with `sync` writes its bytes and then fails.
    pub fn failing_synced_appends(memory: Arc<MemoryFs>) -> Self {
        SharedMemoryFs {
            memory,
            synced_appends_fail: true,
        }
    }
}

impl Fs for SharedMemoryFs {
    fn resolve_path(&self, p: &Path) -> Result<PathBuf> {
        self.memory.resolve_path(p)
    }
    fn read(&self, p: &Path) -> Result<Vec<u8>> {
        self.memory.read(p)
    }
    fn write(&self, p: &Path, d: &[u8], o: WriteOptions) -> Result<()> {
        self.memory.write(p, d, o)
    }
    fn write_atomic(&self, p: &Path, d: &[u8], o: WriteOptions) -> Result<()> {
        self.memory.write_atomic(p, d, o)
    }
    fn append(&self, p: &Path, d: &[u8], o: WriteOptions, sync: bool) -> Result<()> {
        self.memory.append(p, d, o, sync)?;
        if sync && self.synced_appends_fail {
            let e = std::io::Error::other("the directory could not be synced (test fault)");
            return Err(crate::CapsError::from_io("fsync directory of", p, e));
        }
        Ok(())
    }
    fn create_dir_all(&self, p: &Path, m: u32) -> Result<()> {
        self.memory.create_dir_all(p, m)
    }
    fn list(&self, p: &Path) -> Result<Vec<DirEntry>> {
        self.memory.list(p)
    }
    fn metadata(&self, p: &Path) -> Result<Metadata> {
        self.memory.metadata(p)
    }
    fn symlink_metadata(&self, p: &Path) -> Result<Metadata> {
        self.memory.symlink_metadata(p)
    }
    fn canonicalize(&self, p: &Path) -> Result<PathBuf> {
        self.memory.canonicalize(p)
    }
    fn remove(&self, p: &Path) -> Result<()> {
        self.memory.remove(p)
    }
    fn rename(&self, f: &Path, t: &Path) -> Result<()> {
        self.memory.rename(f, t)
    }
    fn set_permissions(&self, p: &Path, m: u32) -> Result<()> {
        self.memory.set_permissions(p, m)
    }
    fn lock(&self, p: &Path) -> Result<FsLock> {
        self.memory.lock(p)
    }
}
