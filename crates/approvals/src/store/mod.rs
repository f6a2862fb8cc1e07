//! The store: `exec-approvals.json` read and written through `caps::Fs`, under an
//! exclusive lock on a sidecar file for every read-modify-write, replaced atomically,
//! 0600 in a directory nobody else can write.
//!
//! Fail closed: a missing file means the secure defaults; a corrupt, unreadable,
//! symlinked, foreign-owned or too-open file is never overwritten — a corrupt one is
//! copied aside under a clear name — and the host denies everything until it is fixed.

mod changes;
mod edit;
mod import;
mod view;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use caps::{CapsError, FileKind, Fs, WriteOptions};
use policy::{CaseMode, Profiles, hex};
use sha2::{Digest, Sha256};

use crate::file::{ApprovalsFile, SocketSettings};

pub use import::{DryRun, ImportSummary, merge_import};
pub use view::HostView;
use view::ViewCache;

/// Repeated uses of an entry within this window, with the same command and resolved
/// path, do not rewrite the file (usage bookkeeping must not churn the disk).
pub const USAGE_TIME_GRANULARITY_MS: u64 = 60_000;

/// Hash reported for a file that does not exist yet.
pub const ABSENT_HASH: &str = "absent";

/// Everything that can go wrong with the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file exists but is not a valid version-1 document. It was left in place and a
    /// copy kept aside.
    #[error(
        "{path} is corrupt: {message}; it was not modified (a copy is kept at {kept_at}); this host denies every command until the file is fixed or removed"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
        /// Where the copy is.
        kept_at: PathBuf,
    },
    /// The file or its directory has unsafe ownership, type or permissions.
    #[error("{path}: {message}; this host denies every command until it is fixed")]
    Insecure {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// `set` was based on a different version of the file.
    #[error(
        "the file changed since it was read (expected hash {expected}, found {actual}); get it again and retry"
    )]
    Conflict {
        /// The hash the caller based its change on.
        expected: String,
        /// The current hash.
        actual: String,
    },
    /// The requested change is invalid; nothing was written.
    #[error("invalid change: {}", problems.join("; "))]
    Invalid {
        /// Every problem found.
        problems: Vec<String>,
    },
    /// An agent id that is neither in the file nor known to the caller.
    #[error("unknown agent {agent:?}{}", suggestion.as_ref().map(|s| format!(" (did you mean {s:?}?)")).unwrap_or_default())]
    UnknownAgent {
        /// The agent as given.
        agent: String,
        /// The closest known agent id.
        suggestion: Option<String>,
    },
    /// A filesystem failure.
    #[error("{0}")]
    Io(#[from] CapsError),
    /// The OS random generator failed.
    #[error("cannot generate a token: {0}")]
    Random(String),
}

/// Where the store lives and whose it is.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// `$WARDEN_HOME/exec-approvals.json`.
    pub path: PathBuf,
    /// The uid that must own the file and its directory.
    pub owner_uid: u32,
    /// The executing user's home, for `~` in patterns and the socket path.
    pub home: PathBuf,
    /// How patterns compare letters on this host.
    pub case: CaseMode,
}

impl StoreConfig {
    /// The default socket path: next to the file.
    pub fn default_socket_path(&self) -> PathBuf {
        self.dir().join("exec-approvals.sock")
    }

    fn dir(&self) -> PathBuf {
        self.path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/"))
    }

    fn lock_path(&self) -> PathBuf {
        let mut name = self.path.file_name().unwrap_or_default().to_os_string();
        name.push(".lock");
        self.dir().join(name)
    }
}

/// The file as read, with the hash `set` must be based on.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// The document (defaults if the file does not exist).
    pub file: ApprovalsFile,
    /// `sha256:<hex>` of the bytes on disk, or [`ABSENT_HASH`].
    pub hash: String,
}

/// The result of a read-modify-write.
#[derive(Clone, Debug, PartialEq)]
pub struct Updated<R> {
    /// What the change function returned.
    pub value: R,
    /// True if the file was rewritten (false when nothing changed).
    pub written: bool,
    /// The hash after the change.
    pub hash: String,
}

/// Source of secrets (the OS CSPRNG in production).
pub trait Randomness: Send + Sync {
    /// Fill `buf` with unpredictable bytes.
    fn fill(&self, buf: &mut [u8]) -> Result<(), String>;
}

/// The operating system's CSPRNG (`getrandom(2)`).
#[derive(Clone, Copy, Debug, Default)]
pub struct OsRandom;

impl Randomness for OsRandom {
    fn fill(&self, buf: &mut [u8]) -> Result<(), String> {
        getrandom::fill(buf).map_err(|e| e.to_string())
    }
}

/// The approvals store of one host.
#[derive(Clone)]
pub struct Store {
    fs: Arc<dyn Fs>,
    config: StoreConfig,
    cache: Arc<std::sync::Mutex<ViewCache>>,
    /// The profiles entries are checked against, or why the operator's extension
    /// cannot be used (then this host denies everything, as for a corrupt file).
    profiles: Result<Arc<Profiles>, String>,
    /// Where a change of policy is recorded.
    audit: Arc<dyn audit::AuditSink>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.config.path)
            .finish()
    }
}

fn hash_bytes(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    format!("sha256:{}", hex(&digest))
}

fn serialize(file: &ApprovalsFile) -> Vec<u8> {
    // Serialising plain data (maps of strings, numbers and enums) cannot fail.
    let mut bytes = serde_json::to_vec_pretty(file).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

impl Store {
    /// A store at `config.path`, read and written through `fs`.
    pub fn new(fs: Arc<dyn Fs>, config: StoreConfig) -> Self {
        Store {
            fs,
            config,
            cache: Arc::default(),
            profiles: Ok(Profiles::shipped()),
            audit: Arc::new(audit::NoAudit),
        }
    }

    /// Check entries against `profiles` (the shipped ones extended by the operator's
    /// file), or, given the reason that file cannot be used, deny everything.
    pub fn with_profiles(mut self, profiles: Result<Arc<Profiles>, String>) -> Self {
        self.profiles = profiles;
        self
    }

    /// Record every change of policy this store writes in `audit` (the store's clones
    /// share it).
    pub fn with_audit(mut self, audit: Arc<dyn audit::AuditSink>) -> Self {
        self.audit = audit;
        self
    }

    /// The profiles entries are checked against (the error: why none can be used).
    pub fn profiles(&self) -> Result<Arc<Profiles>, String> {
        self.profiles.clone()
    }

    /// The filesystem it reads and writes through.
    pub fn fs(&self) -> &dyn Fs {
        self.fs.as_ref()
    }

    /// Its configuration.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    fn insecure(&self, path: &Path, message: impl Into<String>) -> StoreError {
        StoreError::Insecure {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }

    /// Refuse a directory that is a symlink, foreign-owned or writable by others.
    fn check_dir(&self) -> Result<(), StoreError> {
        let dir = self.config.dir();
        let meta = match self.fs.symlink_metadata(&dir) {
            Ok(m) => m,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        if meta.kind != FileKind::Dir {
            return Err(self.insecure(
                &dir,
                "is not a directory (symlinked state directories are refused)",
            ));
        }
        if meta.uid != self.config.owner_uid {
            return Err(self.insecure(
                &dir,
                format!(
                    "is owned by uid {}, not {}",
                    meta.uid, self.config.owner_uid
                ),
            ));
        }
        if meta.mode & 0o022 != 0 {
            return Err(self.insecure(
                &dir,
                format!(
                    "is writable by others (mode {:04o}); chmod 700 it",
                    meta.mode
                ),
            ));
        }
        Ok(())
    }

    /// Refuse a file that is a symlink, not a regular file, foreign-owned or readable by
    /// others. Returns false if it does not exist.
    fn check_file(&self) -> Result<bool, StoreError> {
        let path = &self.config.path;
        let meta = match self.fs.symlink_metadata(path) {
            Ok(m) => m,
            Err(e) if e.is_not_found() => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        match meta.kind {
            FileKind::File => {}
            FileKind::Symlink => {
                return Err(self.insecure(path, "is a symlink; refusing to follow it"));
            }
            _ => return Err(self.insecure(path, "is not a regular file")),
        }
        if meta.uid != self.config.owner_uid {
            return Err(self.insecure(
                path,
                format!(
                    "is owned by uid {}, not {}",
                    meta.uid, self.config.owner_uid
                ),
            ));
        }
        if meta.mode & 0o077 != 0 {
            return Err(self.insecure(
                path,
                format!(
                    "has mode {:04o}, which lets others read the token; chmod 600 it",
                    meta.mode
                ),
            ));
        }
        Ok(true)
    }

    /// Keep a copy of corrupt bytes next to the file (once per distinct content).
    fn keep_aside(&self, bytes: &[u8], message: String) -> StoreError {
        let digest = hex(&Sha256::digest(bytes));
        let mut name = self
            .config
            .path
            .file_name()
            .unwrap_or_default()
            .to_os_string();
        name.push(format!(".corrupt-{}", &digest[..12]));
        let kept_at = self.config.dir().join(name);
        if !self.fs.exists(&kept_at).unwrap_or(false)
            && let Err(e) = self
                .fs
                .write_atomic(&kept_at, bytes, WriteOptions::private())
        {
            tracing::error!("cannot keep a copy of the corrupt approvals file: {e}");
        }
        StoreError::Corrupt {
            path: self.config.path.clone(),
            message,
            kept_at,
        }
    }

    fn parse(&self, bytes: &[u8]) -> Result<ApprovalsFile, StoreError> {
        let file: ApprovalsFile = match serde_json::from_slice(bytes) {
            Ok(f) => f,
            Err(e) => {
                return Err(self.keep_aside(bytes, format!("not a valid approvals document: {e}")));
            }
        };
        let problems = file.problems();
        if !problems.is_empty() {
            return Err(self.keep_aside(bytes, problems.join("; ")));
        }
        Ok(file)
    }

    /// Read without locking (a reader sees the old or the new file, never a torn one,
    /// because writers replace it atomically).
    pub fn load(&self) -> Result<Snapshot, StoreError> {
        let (file, hash) = self.load_shared()?;
        Ok(Snapshot {
            file: (*file).clone(),
            hash,
        })
    }

    /// Like [`Store::load`], sharing the parsed document with other callers while the
    /// file's content is unchanged.
    fn load_shared(&self) -> Result<(Arc<ApprovalsFile>, String), StoreError> {
        self.check_dir()?;
        let absent = || Ok((Arc::new(ApprovalsFile::default()), ABSENT_HASH.to_owned()));
        if !self.check_file()? {
            return absent();
        }
        let bytes = match self.fs.read(&self.config.path) {
            Ok(b) => b,
            // Deleted between the check and the read: as if it never existed.
            Err(e) if e.is_not_found() => return absent(),
            Err(e) => return Err(e.into()),
        };
        let hash = hash_bytes(&bytes);
        {
            let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            if cache.hash == hash
                && let Some(file) = &cache.file
            {
                return Ok((Arc::clone(file), hash));
            }
        }
        let file = Arc::new(self.parse(&bytes)?);
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        *cache = ViewCache {
            hash: hash.clone(),
            file: Some(Arc::clone(&file)),
            views: Default::default(),
        };
        Ok((file, hash))
    }

    /// Read-modify-write under the sidecar lock. `base_hash`, when given, must equal the
    /// current hash. `change` edits a copy; the file is rewritten only if the copy
    /// differs, and only after the whole new document validates.
    pub fn update<R>(
        &self,
        base_hash: Option<&str>,
        change: impl FnOnce(&mut ApprovalsFile) -> Result<R, StoreError>,
    ) -> Result<Updated<R>, StoreError> {
        self.check_dir()?;
        self.fs.create_dir_all(&self.config.dir(), 0o700)?;
        self.check_dir()?;
        let _lock = self.fs.lock(&self.config.lock_path())?;
        let current = self.load()?;
        if let Some(expected) = base_hash
            && expected != current.hash
        {
            return Err(StoreError::Conflict {
                expected: expected.to_owned(),
                actual: current.hash,
            });
        }
        let mut next = current.file.clone();
        let value = change(&mut next)?;
        if next == current.file && current.hash != ABSENT_HASH {
            return Ok(Updated {
                value,
                written: false,
                hash: current.hash,
            });
        }
        let problems = next.problems();
        if !problems.is_empty() {
            return Err(StoreError::Invalid { problems });
        }
        let bytes = serialize(&next);
        self.fs
            .write_atomic(&self.config.path, &bytes, WriteOptions::private())?;
        let hash = hash_bytes(&bytes);
        if let Some(change) = changes::describe(&current.file, &next) {
            let entry = audit::Entry::new(audit::Kind::Policy)
                .file(self.config.path.to_string_lossy())
                .change(change)
                .hash_before(&current.hash)
                .hash_after(&hash);
            if let Err(e) = self.audit.record(entry) {
                tracing::error!(
                    "a change of {} is not on the record: {e}",
                    self.config.path.display()
                );
            }
        }
        Ok(Updated {
            value,
            written: true,
            hash,
        })
    }

    /// The socket path and token, creating the token (from `random`) and the file on
    /// first use.
    pub fn ensure_token(&self, random: &dyn Randomness) -> Result<(PathBuf, String), StoreError> {
        let snapshot = self.load()?;
        if let (Some(token), path) = (snapshot.file.token(), self.socket_path(&snapshot.file)) {
            return Ok((path, token.to_owned()));
        }
        let updated = self.update(None, |file| {
            let socket = file.socket.get_or_insert_with(SocketSettings::default);
            if socket.token.is_none() {
                let mut bytes = [0u8; 32];
                random.fill(&mut bytes).map_err(StoreError::Random)?;
                socket.token = Some(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes));
            }
            Ok(socket.token.clone().unwrap_or_default())
        })?;
        let file = self.load()?.file;
        Ok((self.socket_path(&file), updated.value))
    }

    /// Where the approver socket is: `socket.path` (with `~` expanded) or the default.
    pub fn socket_path(&self, file: &ApprovalsFile) -> PathBuf {
        match file.socket.as_ref().and_then(|s| s.path.as_deref()) {
            Some("~") => self.config.home.clone(),
            Some(p) => match p.strip_prefix("~/") {
                Some(rest) => self.config.home.join(rest),
                None => PathBuf::from(p),
            },
            None => self.config.default_socket_path(),
        }
    }
}
