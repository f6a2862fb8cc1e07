//! `MemoryFs`: files, directories and symlinks in a `BTreeMap`, with POSIX-like path
//! resolution (symlinks followed component by component, `..` applied to the resolved
//! path) and an in-process lock table.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use nix::errno::Errno;

use crate::fs::{DirEntry, FileKind, Fs, FsLock, Metadata, WriteOptions};
use crate::providers::paths::{normalize_absolute, reject_nul};
use crate::{CapsError, Result};

/// Symlink hops before giving up with ELOOP, as Linux does.
const MAX_SYMLINK_HOPS: usize = 40;

/// Owner uid of nodes when none is configured.
const DEFAULT_UID: u32 = 1000;

#[derive(Clone, Debug)]
enum Data {
    File(Vec<u8>),
    Dir,
    Symlink(PathBuf),
}

#[derive(Clone, Debug)]
struct Node {
    data: Data,
    mode: u32,
    uid: u32,
    /// The node's inode number: every new node (also one replacing another at the same
    /// path) gets a fresh one, as on a real filesystem.
    ino: u64,
}

/// Inode numbers of the memory world, unique within the process.
static NEXT_INO: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn fresh_ino() -> u64 {
    NEXT_INO.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The device number every memory node reports.
const MEMORY_DEV: u64 = 0x6d656d; // "mem"

impl Node {
    fn meta(&self) -> Metadata {
        let (kind, len) = match &self.data {
            Data::File(bytes) => (FileKind::File, bytes.len() as u64),
            Data::Dir => (FileKind::Dir, 0),
            Data::Symlink(target) => (FileKind::Symlink, target.as_os_str().len() as u64),
        };
        Metadata {
            kind,
            len,
            mode: self.mode,
            uid: self.uid,
            modified: None,
            id: crate::fs::FileId {
                dev: MEMORY_DEV,
                ino: self.ino,
            },
        }
    }
}

/// An in-memory filesystem. Paths are absolute (relative ones start at `/`).
#[derive(Debug)]
pub struct MemoryFs {
    nodes: Mutex<BTreeMap<PathBuf, Node>>,
    locks: Arc<LockTable>,
    uid: u32,
}

impl Default for MemoryFs {
    fn default() -> Self {
        Self::new()
    }
}

fn os_err(op: &'static str, path: &Path, errno: i32) -> CapsError {
    CapsError::from_io(op, path, io::Error::from_raw_os_error(errno))
}

impl MemoryFs {
    /// An empty filesystem holding only `/`, owned by uid 1000.
    pub fn new() -> Self {
        Self::with_uid(DEFAULT_UID)
    }

    /// An empty filesystem whose new nodes are owned by `uid`.
    pub fn with_uid(uid: u32) -> Self {
        let mut nodes = BTreeMap::new();
        nodes.insert(
            PathBuf::from("/"),
            Node {
                data: Data::Dir,
                mode: 0o755,
                uid,
                ino: fresh_ino(),
            },
        );
        MemoryFs {
            nodes: Mutex::new(nodes),
            locks: Arc::new(LockTable::default()),
            uid,
        }
    }

    /// Create a symlink at `link` pointing to `target` (a test and setup helper; the
    /// [`Fs`] trait deliberately has no symlink creation).
    pub fn symlink(&self, target: impl AsRef<Path>, link: impl AsRef<Path>) -> Result<()> {
        let link = link.as_ref();
        let mut nodes = self.state();
        let (parent, name) = self.parent_and_name(&nodes, link, "symlink")?;
        let at = parent.join(name);
        if nodes.contains_key(&at) {
            return Err(CapsError::AlreadyExists { path: link.into() });
        }
        nodes.insert(
            at,
            Node {
                data: Data::Symlink(target.as_ref().to_path_buf()),
                mode: 0o777,
                uid: self.uid,
                ino: fresh_ino(),
            },
        );
        Ok(())
    }

    /// Change the owner of a node (to test checks on foreign-owned files).
    pub fn set_owner(&self, path: &Path, uid: u32) -> Result<()> {
        let mut nodes = self.state();
        let p = self.walk(&nodes, path, false, "chown")?;
        let node = nodes
            .get_mut(&p)
            .ok_or_else(|| CapsError::NotFound { path: path.into() })?;
        node.uid = uid;
        Ok(())
    }

    /// Every file path currently stored (for assertions in tests).
    pub fn file_paths(&self) -> Vec<PathBuf> {
        self.state()
            .iter()
            .filter(|(_, n)| matches!(n.data, Data::File(_)))
            .map(|(p, _)| p.clone())
            .collect()
    }

    fn state(&self) -> MutexGuard<'_, BTreeMap<PathBuf, Node>> {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Resolve `path` to the key of the node it names, following symlinks in every
    /// component (and in the last one when `follow_last`). The result may not exist.
    fn walk(
        &self,
        nodes: &BTreeMap<PathBuf, Node>,
        path: &Path,
        follow_last: bool,
        op: &'static str,
    ) -> Result<PathBuf> {
        reject_nul(path)?;
        // Keep `..` in place: like the kernel, apply it to the resolved path, after the
        // symlinks before it have been followed.
        let mut pending: VecDeque<OsString> = path
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.to_os_string()),
                Component::ParentDir => Some("..".into()),
                _ => None,
            })
            .collect();
        let mut resolved = PathBuf::from("/");
        let mut hops = 0;
        while let Some(name) = pending.pop_front() {
            if name == ".." {
                resolved.pop();
                continue;
            }
            if name == "." {
                continue;
            }
            let candidate = resolved.join(&name);
            let is_last = pending.is_empty();
            match nodes.get(&candidate).map(|n| &n.data) {
                Some(Data::Symlink(target)) if follow_last || !is_last => {
                    hops += 1;
                    if hops > MAX_SYMLINK_HOPS {
                        return Err(os_err(op, path, Errno::ELOOP as i32));
                    }
                    if target.is_absolute() {
                        resolved = PathBuf::from("/");
                    }
                    for c in target.components().rev() {
                        if let Component::Normal(n) = c {
                            pending.push_front(n.to_os_string());
                        } else if c == Component::ParentDir {
                            pending.push_front("..".into());
                        }
                    }
                }
                Some(Data::File(_)) if !is_last => {
                    return Err(os_err(op, path, Errno::ENOTDIR as i32));
                }
                None if !is_last => return Err(CapsError::NotFound { path: path.into() }),
                _ => resolved = candidate,
            }
        }
        Ok(resolved)
    }

    /// The resolved parent directory of `path` and the final name (not followed).
    fn parent_and_name(
        &self,
        nodes: &BTreeMap<PathBuf, Node>,
        path: &Path,
        op: &'static str,
    ) -> Result<(PathBuf, OsString)> {
        let p = self.resolve_path(path)?;
        let name = p
            .file_name()
            .ok_or_else(|| {
                CapsError::invalid(format!("{op}: {} has no file name", path.display()))
            })?
            .to_os_string();
        let parent = self.walk(nodes, p.parent().unwrap_or(Path::new("/")), true, op)?;
        match nodes.get(&parent).map(|n| &n.data) {
            Some(Data::Dir) => Ok((parent, name)),
            Some(_) => Err(os_err(op, path, Errno::ENOTDIR as i32)),
            None => Err(CapsError::NotFound { path: path.into() }),
        }
    }

    fn get<'a>(nodes: &'a BTreeMap<PathBuf, Node>, key: &Path, path: &Path) -> Result<&'a Node> {
        nodes
            .get(key)
            .ok_or_else(|| CapsError::NotFound { path: path.into() })
    }

    fn children<'a>(
        nodes: &'a BTreeMap<PathBuf, Node>,
        dir: &'a Path,
    ) -> impl Iterator<Item = (&'a PathBuf, &'a Node)> + 'a {
        nodes
            .range(dir.to_path_buf()..)
            .skip(1)
            .take_while(move |(p, _)| p.starts_with(dir))
            .filter(move |(p, _)| p.parent() == Some(dir))
    }

    fn put_file(
        &self,
        path: &Path,
        data: &[u8],
        options: WriteOptions,
        atomic: bool,
    ) -> Result<()> {
        let mut nodes = self.state();
        let key = if atomic {
            // rename() replaces the final name itself, even if it is a symlink.
            let (parent, name) = self.parent_and_name(&nodes, path, "write")?;
            parent.join(name)
        } else {
            self.parent_and_name(&nodes, path, "write")?;
            self.walk(&nodes, path, true, "write")?
        };
        let mode = match nodes.get(&key) {
            Some(Node {
                data: Data::Dir, ..
            }) => return Err(os_err("write", path, Errno::EISDIR as i32)),
            Some(_) if options.create_new && !atomic => {
                return Err(CapsError::AlreadyExists { path: path.into() });
            }
            Some(existing) if !atomic => existing.mode,
            _ => options.mode & 0o7777,
        };
        // Writing in place keeps the file; an atomic replace makes a new one.
        let ino = match nodes.get(&key) {
            Some(existing) if !atomic => existing.ino,
            _ => fresh_ino(),
        };
        nodes.insert(
            key,
            Node {
                data: Data::File(data.to_vec()),
                mode,
                uid: self.uid,
                ino,
            },
        );
        Ok(())
    }
}

impl Fs for MemoryFs {
    fn resolve_path(&self, path: &Path) -> Result<PathBuf> {
        reject_nul(path)?;
        Ok(normalize_absolute(&Path::new("/").join(path)))
    }

    fn read(&self, path: &Path) -> Result<Vec<u8>> {
        let nodes = self.state();
        let key = self.walk(&nodes, path, true, "read")?;
        match &Self::get(&nodes, &key, path)?.data {
            Data::File(bytes) => Ok(bytes.clone()),
            Data::Dir => Err(os_err("read", path, Errno::EISDIR as i32)),
            Data::Symlink(_) => Err(os_err("read", path, Errno::ELOOP as i32)),
        }
    }

    fn write(&self, path: &Path, data: &[u8], options: WriteOptions) -> Result<()> {
        self.put_file(path, data, options, false)
    }

    fn write_atomic(&self, path: &Path, data: &[u8], options: WriteOptions) -> Result<()> {
        self.put_file(path, data, options, true)
    }

    fn append(&self, path: &Path, data: &[u8], options: WriteOptions, _sync: bool) -> Result<()> {
        let mut nodes = self.state();
        let (parent, name) = self.parent_and_name(&nodes, path, "append to")?;
        let key = parent.join(name);
        match nodes.get_mut(&key) {
            Some(Node {
                data: Data::File(bytes),
                ..
            }) => bytes.extend_from_slice(data),
            Some(Node {
                data: Data::Dir, ..
            }) => {
                return Err(os_err("append to", path, Errno::EISDIR as i32));
            }
            // O_NOFOLLOW: a symlink (or anything else) at the name is refused.
            Some(_) => return Err(os_err("append to", path, Errno::ELOOP as i32)),
            None => {
                nodes.insert(
                    key,
                    Node {
                        data: Data::File(data.to_vec()),
                        mode: options.mode & 0o7777,
                        uid: self.uid,
                        ino: fresh_ino(),
                    },
                );
            }
        }
        Ok(())
    }

    fn create_dir_all(&self, path: &Path, mode: u32) -> Result<()> {
        let target = self.resolve_path(path)?;
        let mut nodes = self.state();
        let mut prefix = PathBuf::from("/");
        for component in target.components().skip(1) {
            prefix.push(component);
            let key = self.walk(&nodes, &prefix, true, "create directory")?;
            match nodes.get(&key).map(|n| &n.data) {
                Some(Data::Dir) => {}
                Some(_) => return Err(os_err("create directory", path, Errno::ENOTDIR as i32)),
                None => {
                    nodes.insert(
                        key,
                        Node {
                            data: Data::Dir,
                            mode: mode & 0o7777,
                            uid: self.uid,
                            ino: fresh_ino(),
                        },
                    );
                }
            }
        }
        Ok(())
    }

    fn list(&self, path: &Path) -> Result<Vec<DirEntry>> {
        let nodes = self.state();
        let key = self.walk(&nodes, path, true, "list")?;
        if !matches!(Self::get(&nodes, &key, path)?.data, Data::Dir) {
            return Err(os_err("list", path, Errno::ENOTDIR as i32));
        }
        let mut entries: Vec<DirEntry> = Self::children(&nodes, &key)
            .map(|(p, n)| DirEntry {
                name: p.file_name().unwrap_or_default().to_os_string(),
                kind: n.meta().kind,
            })
            .collect();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }

    fn metadata(&self, path: &Path) -> Result<Metadata> {
        let nodes = self.state();
        let key = self.walk(&nodes, path, true, "stat")?;
        Ok(Self::get(&nodes, &key, path)?.meta())
    }

    fn symlink_metadata(&self, path: &Path) -> Result<Metadata> {
        let nodes = self.state();
        let key = self.walk(&nodes, path, false, "lstat")?;
        Ok(Self::get(&nodes, &key, path)?.meta())
    }

    fn canonicalize(&self, path: &Path) -> Result<PathBuf> {
        let nodes = self.state();
        let key = self.walk(&nodes, path, true, "canonicalize")?;
        Self::get(&nodes, &key, path)?;
        Ok(key)
    }

    fn remove(&self, path: &Path) -> Result<()> {
        let mut nodes = self.state();
        let key = self.walk(&nodes, path, false, "remove")?;
        if key == Path::new("/") {
            return Err(os_err("remove", path, Errno::EBUSY as i32));
        }
        if matches!(Self::get(&nodes, &key, path)?.data, Data::Dir)
            && Self::children(&nodes, &key).next().is_some()
        {
            return Err(os_err("remove", path, Errno::ENOTEMPTY as i32));
        }
        nodes.remove(&key);
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut nodes = self.state();
        let (fp, fname) = self.parent_and_name(&nodes, from, "rename")?;
        let (tp, tname) = self.parent_and_name(&nodes, to, "rename")?;
        let src = fp.join(fname);
        let dst = tp.join(tname);
        let moving = Self::get(&nodes, &src, from)?.clone();
        if src == dst {
            return Ok(());
        }
        if dst.starts_with(&src) {
            return Err(os_err("rename", from, Errno::EINVAL as i32));
        }
        match nodes.get(&dst).map(|n| &n.data) {
            Some(Data::Dir) if !matches!(moving.data, Data::Dir) => {
                return Err(os_err("rename", to, Errno::EISDIR as i32));
            }
            Some(Data::Dir) if Self::children(&nodes, &dst).next().is_some() => {
                return Err(os_err("rename", to, Errno::ENOTEMPTY as i32));
            }
            Some(d) if !matches!(d, Data::Dir) && matches!(moving.data, Data::Dir) => {
                return Err(os_err("rename", to, Errno::ENOTDIR as i32));
            }
            _ => {}
        }
        let descendants: Vec<PathBuf> = nodes
            .range(src.clone()..)
            .take_while(|(p, _)| p.starts_with(&src))
            .map(|(p, _)| p.clone())
            .collect();
        for old in descendants {
            if let Some(node) = nodes.remove(&old) {
                let suffix = old.strip_prefix(&src).unwrap_or(Path::new(""));
                let new = if suffix.as_os_str().is_empty() {
                    dst.clone()
                } else {
                    dst.join(suffix)
                };
                nodes.insert(new, node);
            }
        }
        Ok(())
    }

    fn set_permissions(&self, path: &Path, mode: u32) -> Result<()> {
        let mut nodes = self.state();
        let key = self.walk(&nodes, path, true, "chmod")?;
        let node = nodes
            .get_mut(&key)
            .ok_or_else(|| CapsError::NotFound { path: path.into() })?;
        node.mode = mode & 0o7777;
        Ok(())
    }

    fn lock(&self, path: &Path) -> Result<FsLock> {
        let key = {
            let mut nodes = self.state();
            let (parent, name) = self.parent_and_name(&nodes, path, "lock")?;
            let key = parent.join(name);
            match nodes.get(&key).map(|n| &n.data) {
                Some(Data::File(_)) => {}
                Some(_) => return Err(os_err("lock", path, Errno::ELOOP as i32)),
                None => {
                    nodes.insert(
                        key.clone(),
                        Node {
                            data: Data::File(Vec::new()),
                            mode: 0o600,
                            uid: self.uid,
                            ino: fresh_ino(),
                        },
                    );
                }
            }
            key
        };
        Ok(FsLock::new(LockTable::acquire(&self.locks, key)))
    }
}

/// Paths currently locked, with a condition variable for waiters.
#[derive(Debug, Default)]
struct LockTable {
    held: Mutex<HashSet<PathBuf>>,
    released: Condvar,
}

impl LockTable {
    fn acquire(table: &Arc<LockTable>, key: PathBuf) -> HeldLock {
        let mut held = table.held.lock().unwrap_or_else(|p| p.into_inner());
        while held.contains(&key) {
            held = table.released.wait(held).unwrap_or_else(|p| p.into_inner());
        }
        held.insert(key.clone());
        HeldLock {
            table: Arc::clone(table),
            key,
        }
    }
}

struct HeldLock {
    table: Arc<LockTable>,
    key: PathBuf,
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        let mut held = self.table.held.lock().unwrap_or_else(|p| p.into_inner());
        held.remove(&self.key);
        self.table.released.notify_all();
    }
}
