//! Memory worlds: a [`MemoryFs`] laid out like a host, with directories, executable
//! programs and plain files, built in one expression.

use std::path::Path;
use std::sync::Arc;

use crate::{Fs, MemoryFs, WriteOptions};

/// A memory filesystem under construction.
pub struct MemoryWorld {
    fs: Arc<MemoryFs>,
}

impl MemoryWorld {
    /// An empty world whose files belong to `uid`.
    pub fn new(uid: u32) -> Self {
        MemoryWorld {
            fs: Arc::new(MemoryFs::with_uid(uid)),
        }
    }

    /// Directories (and their parents), mode 0755.
    pub fn dirs(self, dirs: &[&str]) -> Self {
        for d in dirs {
            self.fs
                .create_dir_all(Path::new(d), 0o755)
                .unwrap_or_else(|e| panic!("testkit: mkdir {d}: {e}"));
        }
        self
    }

    /// Executable files (mode 0755, empty), their directories created.
    pub fn programs(self, programs: &[&str]) -> Self {
        for p in programs {
            self.write(p, b"", 0o755);
        }
        self
    }

    /// A file with `content` and `mode`, its directory created.
    pub fn file(self, path: &str, content: &str, mode: u32) -> Self {
        self.write(path, content.as_bytes(), mode);
        self
    }

    /// A symlink at `link` to `target`.
    pub fn symlink(self, target: &str, link: &str) -> Self {
        self.fs
            .symlink(target, link)
            .unwrap_or_else(|e| panic!("testkit: symlink {link}: {e}"));
        self
    }

    fn write(&self, path: &str, data: &[u8], mode: u32) {
        let path = Path::new(path);
        if let Some(parent) = path.parent() {
            self.fs
                .create_dir_all(parent, 0o755)
                .unwrap_or_else(|e| panic!("testkit: mkdir {}: {e}", parent.display()));
        }
        self.fs
            .write(
                path,
                data,
                WriteOptions {
                    mode,
                    create_new: false,
                },
            )
            .unwrap_or_else(|e| panic!("testkit: write {}: {e}", path.display()));
    }

    /// The filesystem.
    pub fn build(self) -> Arc<MemoryFs> {
        self.fs
    }
}
