//! The store: `exec-approvals.json` read and written through `caps::Fs`, under an
//! exclusive lock on a sidecar file for every read-modify-write, replaced atomically,
//! 0600 in a directory nobody else can write.
//!
//! Fail closed: a missing file means the secure defaults; a corrupt, unreadable,
//! symlinked, foreign-owned or too-open file is never overwritten — a corrupt one is
//! copied aside under a clear name — and the host denies everything until it is fixed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use caps::{CapsError, FileKind, Fs, WriteOptions};
use policy::{Allowlist, CaseMode, HostCeiling};
use sha2::{Digest, Sha256};

use crate::file::{AgentEntry, AllowlistEntry, ApprovalsFile, Ceilings, REDACTED, SocketSettings};

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

/// What this host's approvals say for one agent, ready for the policy engine. Built
/// fail-closed: if the store is unusable, the ceiling denies everything and `error` says
/// why.
#[derive(Clone, Debug)]
pub struct HostView {
    /// The ceiling for the agent.
    pub ceiling: HostCeiling,
    /// The agent's compiled allowlist.
    pub allowlist: Arc<Allowlist>,
    /// The document it was built from (absent when the store is unusable).
    pub file: Option<Arc<ApprovalsFile>>,
    /// Why the store could not be used, if it could not.
    pub error: Option<String>,
}

/// Parsed documents and compiled allowlists, keyed by the SHA-256 of the file's bytes:
/// the file is read (and its permissions checked) on every use, but parsed and compiled
/// only when its content changed. Keying by content, not timestamps, means an edit is
/// never missed.
#[derive(Debug, Default)]
struct ViewCache {
    hash: String,
    file: Option<Arc<ApprovalsFile>>,
    views: std::collections::HashMap<Option<String>, (HostCeiling, Arc<Allowlist>)>,
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

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn serialize(file: &ApprovalsFile) -> Vec<u8> {
    // Serialising plain data (maps of strings, numbers and enums) cannot fail.
    let mut bytes = serde_json::to_vec_pretty(file).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// Levenshtein distance, for "did you mean" suggestions.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            cur.push(
                (prev[j] + usize::from(ca != *cb))
                    .min(prev[j + 1] + 1)
                    .min(cur[j] + 1),
            );
        }
        prev = cur;
    }
    prev[b.len()]
}

impl Store {
    /// A store at `config.path`, read and written through `fs`.
    pub fn new(fs: Arc<dyn Fs>, config: StoreConfig) -> Self {
        Store {
            fs,
            config,
            cache: Arc::default(),
        }
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

    /// The policy view for `agent`, fail-closed.
    pub fn host_view(&self, agent: Option<&str>) -> HostView {
        match self.load_shared() {
            Ok((file, hash)) => {
                let key = agent.map(str::to_owned);
                let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
                if cache.hash == hash
                    && let Some((ceiling, allowlist)) = cache.views.get(&key)
                {
                    return HostView {
                        ceiling: *ceiling,
                        allowlist: Arc::clone(allowlist),
                        file: Some(file),
                        error: None,
                    };
                }
                let patterns = file.patterns_for(agent);
                let ceiling = file.ceiling_for(agent);
                let allowlist = Arc::new(Allowlist::compile(
                    &patterns,
                    &self.config.home,
                    self.config.case,
                ));
                if cache.hash == hash {
                    cache.views.insert(key, (ceiling, Arc::clone(&allowlist)));
                }
                HostView {
                    ceiling,
                    allowlist,
                    file: Some(file),
                    error: None,
                }
            }
            Err(e) => HostView {
                ceiling: HostCeiling::DENY_ALL,
                allowlist: Arc::new(Allowlist::default()),
                file: None,
                error: Some(e.to_string()),
            },
        }
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
        Ok(Updated {
            value,
            written: true,
            hash: hash_bytes(&bytes),
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

    /// Add `patterns` to `agent`'s allowlist (duplicates are skipped). An agent that is
    /// neither in the file nor in `known_agents` is refused unless `create_agent`.
    pub fn add_patterns(
        &self,
        agent: &str,
        patterns: &[String],
        known_agents: &[String],
        create_agent: bool,
    ) -> Result<Updated<Vec<String>>, StoreError> {
        let mut problems = Vec::new();
        for p in patterns {
            if let Err(e) = policy::validate_pattern(p) {
                problems.push(e.to_string());
            }
        }
        if !problems.is_empty() {
            return Err(StoreError::Invalid { problems });
        }
        self.update(None, |file| {
            if !file.agents.contains_key(agent)
                && !known_agents.iter().any(|a| a == agent)
                && !create_agent
            {
                let mut candidates: Vec<&String> =
                    file.agents.keys().chain(known_agents.iter()).collect();
                candidates.sort_by_key(|c| distance(c, agent));
                let suggestion = candidates
                    .first()
                    .filter(|c| distance(c, agent) <= 2.max(agent.len() / 3))
                    .map(|c| c.to_string());
                return Err(StoreError::UnknownAgent {
                    agent: agent.to_owned(),
                    suggestion,
                });
            }
            if agent.trim().is_empty() || agent.chars().any(char::is_control) {
                return Err(StoreError::Invalid {
                    problems: vec![format!("invalid agent id {agent:?}")],
                });
            }
            let entry = file
                .agents
                .entry(agent.to_owned())
                .or_insert_with(AgentEntry::default);
            let mut added = Vec::new();
            for p in patterns {
                if !entry.allowlist.iter().any(|e| &e.pattern == p) {
                    entry.allowlist.push(AllowlistEntry::new(p.clone()));
                    added.push(p.clone());
                }
            }
            Ok(added)
        })
    }

    /// Remove `pattern` from `agent`'s allowlist; an absent pattern is an error naming it.
    pub fn remove_pattern(&self, agent: &str, pattern: &str) -> Result<Updated<()>, StoreError> {
        self.update(None, |file| {
            let entry = file
                .agents
                .get_mut(agent)
                .ok_or_else(|| StoreError::UnknownAgent {
                    agent: agent.to_owned(),
                    suggestion: None,
                })?;
            let before = entry.allowlist.len();
            entry.allowlist.retain(|e| e.pattern != pattern);
            if entry.allowlist.len() == before {
                return Err(StoreError::Invalid {
                    problems: vec![format!(
                        "agent {agent:?} has no allowlist entry {pattern:?}"
                    )],
                });
            }
            Ok(())
        })
    }

    /// Record that `pattern` of `agent` was used at `now_ms`. Writes only when something
    /// changed (see [`USAGE_TIME_GRANULARITY_MS`]).
    pub fn record_use(
        &self,
        agent: &str,
        pattern: &str,
        command: &str,
        resolved_path: &str,
        now_ms: u64,
    ) -> Result<bool, StoreError> {
        let updated = self.update(None, |file| {
            let Some(entry) = file
                .agents
                .get_mut(agent)
                .and_then(|a| a.allowlist.iter_mut().find(|e| e.pattern == pattern))
            else {
                return Ok(());
            };
            let same_use = entry.last_used_command.as_deref() == Some(command)
                && entry.last_resolved_path.as_deref() == Some(resolved_path)
                && entry
                    .last_used_at
                    .is_some_and(|t| now_ms.saturating_sub(t) < USAGE_TIME_GRANULARITY_MS);
            if !same_use {
                entry.last_used_at = Some(now_ms);
                entry.last_used_command = Some(command.to_owned());
                entry.last_resolved_path = Some(resolved_path.to_owned());
            }
            Ok(())
        })?;
        Ok(updated.written)
    }

    /// Replace the whole document with `text` (as printed by `get`, token redacted or
    /// not), provided the file still has hash `base_hash`. The token is kept when `text`
    /// carries the redaction marker or none.
    pub fn set_from_text(&self, text: &str, base_hash: &str) -> Result<Updated<()>, StoreError> {
        // `get` prints `# path` and `# hash` lines before the document; JSON never starts
        // with `#`, so they are skipped rather than refused.
        let body: Vec<&str> = text
            .lines()
            .skip_while(|l| l.trim_start().starts_with('#'))
            .collect();
        let text = body.join("\n");
        let mut incoming: ApprovalsFile =
            serde_json::from_str(&text).map_err(|e| StoreError::Invalid {
                problems: vec![format!("not a valid approvals document: {e}")],
            })?;
        let problems = incoming.problems();
        if !problems.is_empty() {
            return Err(StoreError::Invalid { problems });
        }
        self.update(Some(base_hash), |file| {
            let keep_token = file.token().map(str::to_owned);
            let socket = incoming.socket.get_or_insert_with(SocketSettings::default);
            if socket.token.as_deref().is_none_or(|t| t == REDACTED) {
                socket.token = keep_token;
            }
            if incoming
                .socket
                .as_ref()
                .is_some_and(|s| *s == SocketSettings::default())
            {
                incoming.socket = None;
            }
            *file = incoming;
            Ok(())
        })
    }

    /// Set the host-wide defaults (`agent` = `None`) or one agent's settings. An agent
    /// that is neither in the file nor in `known_agents` is refused unless `create_agent`.
    pub fn set_settings(
        &self,
        agent: Option<&str>,
        change: Ceilings,
        known_agents: &[String],
        create_agent: bool,
    ) -> Result<Updated<()>, StoreError> {
        self.update(None, |file| {
            let ceilings = match agent {
                None => &mut file.defaults.ceilings,
                Some(id) => {
                    if id.trim().is_empty() || id.chars().any(char::is_control) {
                        return Err(StoreError::Invalid {
                            problems: vec![format!("invalid agent id {id:?}")],
                        });
                    }
                    if !file.agents.contains_key(id)
                        && !known_agents.iter().any(|a| a == id)
                        && !create_agent
                    {
                        return Err(StoreError::UnknownAgent {
                            agent: id.to_owned(),
                            suggestion: None,
                        });
                    }
                    &mut file.agents.entry(id.to_owned()).or_default().ceilings
                }
            };
            ceilings.apply(change);
            Ok(())
        })
    }

    /// Merge an OpenClaw-format (schema version 1) approvals file: new agents are added
    /// whole; for known agents, missing settings are filled and allowlist entries added
    /// (existing entries and settings are kept). The socket and token are never imported.
    pub fn import_openclaw(&self, text: &str) -> Result<Updated<ImportSummary>, StoreError> {
        let incoming: ApprovalsFile =
            serde_json::from_str(text).map_err(|e| StoreError::Invalid {
                problems: vec![format!("not a valid OpenClaw approvals file: {e}")],
            })?;
        let problems = incoming.problems();
        if !problems.is_empty() {
            return Err(StoreError::Invalid { problems });
        }
        self.update(None, |file| {
            let mut summary = ImportSummary::default();
            let set = &mut summary.settings_set;
            file.defaults
                .ceilings
                .fill_from(incoming.defaults.ceilings, "defaults", set);
            for (id, mut theirs) in incoming.agents {
                // A new agent goes through the same path as a known one, so settings it
                // brings (which may loosen the host) are reported too.
                if !file.agents.contains_key(&id) {
                    summary.agents_added.push(id.clone());
                }
                let ours = file.agents.entry(id.clone()).or_insert_with(|| AgentEntry {
                    extra: std::mem::take(&mut theirs.extra),
                    ..AgentEntry::default()
                });
                let set = &mut summary.settings_set;
                ours.ceilings
                    .fill_from(theirs.ceilings, &format!("agents.{id}"), set);
                for e in theirs.allowlist {
                    if !ours.allowlist.iter().any(|o| o.pattern == e.pattern) {
                        ours.allowlist.push(e);
                        summary.patterns_added += 1;
                    }
                }
            }
            Ok(summary)
        })
    }
}

/// What an import added.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportSummary {
    /// Agents that were new.
    pub agents_added: Vec<String>,
    /// Allowlist entries added (to new and existing agents).
    pub patterns_added: usize,
    /// Settings that were unset and now have the imported value (`name = value`).
    pub settings_set: Vec<String>,
}
