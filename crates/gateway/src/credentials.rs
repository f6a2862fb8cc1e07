//! The gateway's per-agent credentials (`$WARDEN_HOME/gateway-credentials.json`, 0600):
//! one bearer token per agent, and the agent a request acts for comes from the token it
//! presented — never from a header, a parameter or a name the client chose.
//!
//! Tokens are 256-bit CSPRNG secrets. The file keeps them so `warden gateway token
//! --agent A` can show an agent's token again; the gateway keeps only their SHA-256 and
//! compares in constant time. A rotated token stops working at once, a revoked agent has
//! none. The file is rewritten atomically under a lock and fields this version does not
//! know are kept.
//!
//! The file's kind, mode and owner are checked on every authentication: a file made
//! readable by others (or handed to another user, or replaced by a symlink) lets nobody
//! in from the next request on, whether or not its bytes changed. That check is a
//! `stat`; the file is read and parsed again only when its identity or metadata (inode,
//! size, modification time, mode, owner) changed — every rewrite through this module is a
//! rename, so a new token is always a new inode.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use caps::{Fs, WriteOptions};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The credentials file's name in the state directory.
pub const CREDENTIALS_FILE: &str = "gateway-credentials.json";
/// The single token of earlier versions, imported as the `main` agent's credential.
pub const LEGACY_TOKEN_FILE: &str = "gateway-token";
/// The agent a legacy single token is imported for.
pub const LEGACY_AGENT: &str = "main";
/// Prefix that makes a Warden token recognisable (e.g. to secret scanners).
const TOKEN_PREFIX: &str = "wdn_";

/// Why the credentials could not be read or changed.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The file could not be read or written.
    #[error("{path}: {message}")]
    Io {
        /// The credentials file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The file is not a credentials file this version understands.
    #[error("{path} is not a valid credentials file: {message}")]
    Corrupt {
        /// The credentials file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// An agent id that cannot name an agent.
    #[error("invalid agent id {0:?}: {rule}", rule = policy::AGENT_ID_RULE)]
    InvalidAgent(String),
    /// The agent has no credential.
    #[error("agent {0:?} has no gateway credential")]
    NoSuchAgent(String),
}

/// One agent's credential, as stored.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredCredential {
    agent: String,
    token: String,
    created_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rotated_at: Option<u64>,
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct StoredFile {
    version: u32,
    #[serde(default)]
    credentials: Vec<StoredCredential>,
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
}

/// A credential as listed (no secret).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CredentialInfo {
    /// The agent it acts for.
    pub agent: String,
    /// When it was created (ms since the epoch).
    pub created_at: u64,
    /// When its token was last rotated.
    pub rotated_at: Option<u64>,
    /// The first 12 hex digits of the token's SHA-256, to tell tokens apart.
    pub fingerprint: String,
}

/// Who a request authenticated as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The agent the credential is bound to.
    pub agent: String,
}

/// The credentials file of one state directory.
#[derive(Clone)]
pub struct Credentials {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    /// The user the files must belong to; `None`: the state directory's owner.
    owner: Option<u32>,
    /// Parsed hashes, parsed again when the file's identity or metadata change.
    cache: Arc<Mutex<Option<Cached>>>,
}

/// What identifies one version of the file without reading it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp {
    id: caps::FileId,
    len: u64,
    modified: Option<std::time::SystemTime>,
    mode: u32,
    uid: u32,
}

impl Stamp {
    fn of(meta: &caps::Metadata) -> Self {
        Stamp {
            id: meta.id,
            len: meta.len,
            modified: meta.modified,
            mode: meta.mode,
            uid: meta.uid,
        }
    }
}

struct Cached {
    stamp: Stamp,
    by_hash: Vec<([u8; 32], String)>,
}

/// What became of a legacy single-token file at start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LegacyImport {
    /// There was none to import (or the credentials file already exists).
    Nothing,
    /// Imported as `main`'s credential; the legacy file was removed.
    Imported,
    /// Not imported, for this reason (the file was left as it is).
    Refused(String),
}

/// Tokens shorter than this are not imported from a legacy file.
const MIN_LEGACY_TOKEN_CHARS: usize = 32;
/// Nor are tokens whose estimated strength is below this many bits.
const MIN_LEGACY_TOKEN_BITS: f64 = 128.0;

/// Why `token` is too weak to keep as a credential, if it is: shorter than 32 characters,
/// anything but printable ASCII, or below 128 bits by a simple estimate (its length
/// times log2 of the number of distinct characters it uses — a random base64 token of
/// 43 characters scores about 210, `passwordpassword…` 96).
fn legacy_token_weakness(token: &str) -> Option<String> {
    if token.chars().count() < MIN_LEGACY_TOKEN_CHARS {
        return Some(format!(
            "it is shorter than {MIN_LEGACY_TOKEN_CHARS} characters"
        ));
    }
    if !token.chars().all(|c| c.is_ascii_graphic()) {
        return Some("it holds characters other than printable ASCII".into());
    }
    let distinct = token
        .chars()
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let bits = token.len() as f64 * (distinct as f64).log2();
    (bits < MIN_LEGACY_TOKEN_BITS).then(|| {
        format!(
            "it looks guessable (about {bits:.0} bits; at least {MIN_LEGACY_TOKEN_BITS:.0} are needed)"
        )
    })
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("dir", &self.dir)
            .finish()
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn fingerprint(token: &str) -> String {
    digest(token)[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Agent ids are used in messages and keys, never as paths; still, keep them plain.
fn check_agent(agent: &str) -> Result<(), CredentialError> {
    if policy::is_agent_id(agent) {
        Ok(())
    } else {
        Err(CredentialError::InvalidAgent(agent.to_owned()))
    }
}

fn new_token() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("cannot generate a token: {e}"))?;
    Ok(format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    ))
}

impl Credentials {
    /// The credentials kept in the state directory `dir`.
    pub fn new(fs: Arc<dyn Fs>, dir: impl Into<PathBuf>) -> Self {
        Credentials {
            fs,
            dir: dir.into(),
            owner: None,
            cache: Arc::new(Mutex::new(None)),
        }
    }

    /// The files must belong to `uid` (the gateway's user); by default, to the state
    /// directory's owner.
    pub fn with_owner(mut self, uid: u32) -> Self {
        self.owner = Some(uid);
        self
    }

    /// The user the files must belong to.
    fn expected_owner(&self) -> Result<u32, CredentialError> {
        match self.owner {
            Some(uid) => Ok(uid),
            None => Ok(self.fs.metadata(&self.dir).map_err(|e| self.io(e))?.uid),
        }
    }

    /// Why a file holding secrets, as `meta` describes it, must not be trusted: not a
    /// regular file, readable or writable by others, or someone else's.
    fn unsafe_secret_file(&self, meta: &caps::Metadata) -> Result<Option<String>, CredentialError> {
        if !meta.is_file() {
            return Ok(Some(
                "it is not a regular file (a symlink or a directory)".into(),
            ));
        }
        if meta.mode & 0o077 != 0 {
            return Ok(Some(format!(
                "its mode is {:04o}; it holds secrets and must be 0600",
                meta.mode
            )));
        }
        let owner = self.expected_owner()?;
        if meta.uid != owner {
            return Ok(Some(format!(
                "it belongs to uid {}, not to uid {owner} (the gateway's user): whoever owns it can change who is let in",
                meta.uid
            )));
        }
        Ok(None)
    }

    /// The credentials file.
    pub fn path(&self) -> PathBuf {
        self.dir.join(CREDENTIALS_FILE)
    }

    fn io(&self, e: impl std::fmt::Display) -> CredentialError {
        CredentialError::Io {
            path: self.path(),
            message: e.to_string(),
        }
    }

    fn read(&self) -> Result<StoredFile, CredentialError> {
        let path = self.path();
        let text = match self.fs.read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.is_not_found() => return Ok(StoredFile::default()),
            Err(e) => return Err(self.io(e)),
        };
        let meta = self.fs.symlink_metadata(&path).map_err(|e| self.io(e))?;
        if let Some(message) = self.unsafe_secret_file(&meta)? {
            return Err(CredentialError::Corrupt { path, message });
        }
        let file: StoredFile =
            serde_json::from_str(&text).map_err(|e| CredentialError::Corrupt {
                path: path.clone(),
                message: e.to_string(),
            })?;
        if file.version != 1 {
            return Err(CredentialError::Corrupt {
                path,
                message: format!("unsupported version {} (this Warden reads 1)", file.version),
            });
        }
        Ok(file)
    }

    /// Read, change with `f`, and write back atomically under the lock.
    fn update<R>(
        &self,
        f: impl FnOnce(&mut StoredFile) -> Result<R, CredentialError>,
    ) -> Result<R, CredentialError> {
        self.fs
            .create_dir_all(&self.dir, 0o700)
            .map_err(|e| self.io(e))?;
        let _lock = self
            .fs
            .lock(&self.dir.join(format!("{CREDENTIALS_FILE}.lock")))
            .map_err(|e| self.io(e))?;
        let mut file = self.read()?;
        file.version = 1;
        let out = f(&mut file)?;
        let text = serde_json::to_string_pretty(&file).map_err(|e| self.io(e))?;
        self.fs
            .write_atomic(&self.path(), text.as_bytes(), WriteOptions::private())
            .map_err(|e| self.io(e))?;
        Ok(out)
    }

    /// Bring a single token of an earlier version in as `main`'s credential, once, so the
    /// clients configured with it keep working — only if its file is 0600, the gateway
    /// user's own, and the token strong enough (a token others could read, or guess, is
    /// not worth keeping). An imported file is removed: its token lives on in the
    /// credentials file only. A refused one is left as it is, and the reason returned.
    pub fn import_legacy(&self, now_ms: u64) -> Result<LegacyImport, CredentialError> {
        if self.fs.exists(&self.path()).map_err(|e| self.io(e))? {
            return Ok(LegacyImport::Nothing);
        }
        let legacy = self.dir.join(LEGACY_TOKEN_FILE);
        let meta = match self.fs.symlink_metadata(&legacy) {
            Ok(meta) => meta,
            Err(e) if e.is_not_found() => return Ok(LegacyImport::Nothing),
            Err(e) => return Err(self.io(e)),
        };
        if let Some(why) = self.unsafe_secret_file(&meta)? {
            return Ok(LegacyImport::Refused(why));
        }
        let token = match self.fs.read_to_string(&legacy) {
            Ok(t) if !t.trim().is_empty() => t.trim().to_owned(),
            Ok(_) => return Ok(LegacyImport::Nothing),
            Err(e) if e.is_not_found() => return Ok(LegacyImport::Nothing),
            Err(e) => return Err(self.io(e)),
        };
        if let Some(why) = legacy_token_weakness(&token) {
            return Ok(LegacyImport::Refused(why));
        }
        let imported = self.update(|file| {
            if file.credentials.is_empty() {
                file.credentials.push(StoredCredential {
                    agent: LEGACY_AGENT.to_owned(),
                    token,
                    created_at: now_ms,
                    rotated_at: None,
                    unknown: BTreeMap::new(),
                });
                Ok(true)
            } else {
                Ok(false)
            }
        })?;
        if !imported {
            return Ok(LegacyImport::Nothing);
        }
        // The token is in the credentials file now (written and renamed into place
        // above); the old copy, with whatever mode it may be given later, goes.
        self.fs.remove(&legacy).map_err(|e| CredentialError::Io {
            path: legacy.clone(),
            message: format!("imported, but could not be removed: {e}"),
        })?;
        Ok(LegacyImport::Imported)
    }

    /// `agent`'s token, created now if it has none. Returns the token and whether it
    /// was created.
    pub fn get_or_create(
        &self,
        agent: &str,
        now_ms: u64,
    ) -> Result<(String, bool), CredentialError> {
        check_agent(agent)?;
        self.update(|file| {
            if let Some(c) = file.credentials.iter().find(|c| c.agent == agent) {
                return Ok((c.token.clone(), false));
            }
            let token = new_token().map_err(|e| self.io(e))?;
            file.credentials.push(StoredCredential {
                agent: agent.to_owned(),
                token: token.clone(),
                created_at: now_ms,
                rotated_at: None,
                unknown: BTreeMap::new(),
            });
            Ok((token, true))
        })
    }

    /// Replace `agent`'s token by a new one (the old one stops working at once).
    pub fn rotate(&self, agent: &str, now_ms: u64) -> Result<String, CredentialError> {
        check_agent(agent)?;
        self.update(|file| {
            let c = file
                .credentials
                .iter_mut()
                .find(|c| c.agent == agent)
                .ok_or_else(|| CredentialError::NoSuchAgent(agent.to_owned()))?;
            c.token = new_token().map_err(|e| self.io(e))?;
            c.rotated_at = Some(now_ms);
            Ok(c.token.clone())
        })
    }

    /// Remove `agent`'s credential.
    pub fn revoke(&self, agent: &str) -> Result<(), CredentialError> {
        check_agent(agent)?;
        self.update(|file| {
            let before = file.credentials.len();
            file.credentials.retain(|c| c.agent != agent);
            if file.credentials.len() == before {
                return Err(CredentialError::NoSuchAgent(agent.to_owned()));
            }
            Ok(())
        })
    }

    /// Every credential, without secrets.
    pub fn list(&self) -> Result<Vec<CredentialInfo>, CredentialError> {
        Ok(self
            .read()?
            .credentials
            .iter()
            .map(|c| CredentialInfo {
                agent: c.agent.clone(),
                created_at: c.created_at,
                rotated_at: c.rotated_at,
                fingerprint: fingerprint(&c.token),
            })
            .collect())
    }

    /// Who presents `token`, if anyone. The file is looked at on every call (a rotation,
    /// a revocation or a loosened mode takes effect on the next request; it is read and
    /// parsed again only when its identity or metadata changed). A missing, unreadable or
    /// unsafe file authenticates nobody.
    pub fn authenticate(&self, token: &str) -> Option<Identity> {
        let stamp = match self.fs.symlink_metadata(&self.path()) {
            Ok(meta) => Stamp::of(&meta),
            Err(_) => return None,
        };
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.as_ref().is_none_or(|c| c.stamp != stamp) {
            match self.read() {
                Ok(file) => {
                    *cache = Some(Cached {
                        stamp,
                        by_hash: file
                            .credentials
                            .iter()
                            .map(|c| (digest(&c.token), c.agent.clone()))
                            .collect(),
                    });
                }
                Err(e) => {
                    tracing::warn!("gateway credentials unusable, nobody is let in: {e}");
                    *cache = None;
                    return None;
                }
            }
        }
        let presented = digest(token);
        // Every entry is compared, in constant time, so timing says nothing about which
        // (or whether any) matched.
        let mut found = None;
        for (hash, agent) in cache.as_ref().map(|c| c.by_hash.as_slice()).unwrap_or(&[]) {
            if bool::from(hash.ct_eq(&presented)) {
                found = Some(agent.clone());
            }
        }
        found.map(|agent| Identity { agent })
    }

    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use caps::MemoryFs;

    fn creds() -> Credentials {
        let fs = Arc::new(MemoryFs::new());
        Credentials::new(fs, "/state")
    }

    #[test]
    fn each_agent_gets_its_own_token_and_only_that_token_names_it() {
        let c = creds();
        let (coder, created) = c.get_or_create("coder", 1).unwrap();
        assert!(created && coder.starts_with(TOKEN_PREFIX) && coder.len() > 40);
        let (again, created) = c.get_or_create("coder", 2).unwrap();
        assert_eq!((again.as_str(), created), (coder.as_str(), false));
        let (ops, _) = c.get_or_create("ops", 3).unwrap();
        assert_ne!(ops, coder);
        assert_eq!(c.authenticate(&coder).unwrap().agent, "coder");
        assert_eq!(c.authenticate(&ops).unwrap().agent, "ops");
        assert_eq!(c.authenticate("wdn_guess"), None);
        assert_eq!(c.authenticate(""), None);
        let listed = c.list().unwrap();
        assert_eq!(listed.len(), 2);
        assert!(!format!("{listed:?}").contains(&coder));
    }

    #[test]
    fn rotation_and_revocation_take_effect_at_once() {
        let c = creds();
        let (old, _) = c.get_or_create("coder", 1).unwrap();
        assert!(c.authenticate(&old).is_some());
        let new = c.rotate("coder", 2).unwrap();
        assert_ne!(old, new);
        assert_eq!(c.authenticate(&old), None);
        assert_eq!(c.authenticate(&new).unwrap().agent, "coder");
        assert_eq!(c.list().unwrap()[0].rotated_at, Some(2));
        c.revoke("coder").unwrap();
        assert_eq!(c.authenticate(&new), None);
        assert!(matches!(
            c.revoke("coder"),
            Err(CredentialError::NoSuchAgent(_))
        ));
        assert!(matches!(
            c.rotate("nobody", 3),
            Err(CredentialError::NoSuchAgent(_))
        ));
    }

    #[test]
    fn bad_agent_ids_are_refused_and_change_nothing() {
        let c = creds();
        for bad in ["", "../x", "a b", "x\n", &"a".repeat(129)] {
            assert!(matches!(
                c.get_or_create(bad, 1),
                Err(CredentialError::InvalidAgent(_))
            ));
        }
        assert!(c.list().unwrap().is_empty());
    }

    /// A legacy token as earlier versions wrote it: 32 random bytes, base64url.
    const LEGACY: &str = "Vq3xYl0P9cA7rT2mKw8ZbN4eHs1uJd6GfQoEiXyC5Lk";

    fn with_legacy(text: &str, mode: u32) -> (Arc<MemoryFs>, Credentials) {
        let fs = Arc::new(MemoryFs::new());
        fs.create_dir_all(Path::new("/state"), 0o700).unwrap();
        fs.write(
            Path::new("/state/gateway-token"),
            text.as_bytes(),
            WriteOptions {
                mode,
                create_new: false,
            },
        )
        .unwrap();
        let c = Credentials::new(fs.clone(), "/state");
        (fs, c)
    }

    #[test]
    fn a_legacy_token_becomes_mains_credential_once_and_unknown_fields_survive() {
        let (fs, c) = with_legacy(&format!("{LEGACY}\n"), 0o600);
        assert_eq!(c.import_legacy(5).unwrap(), LegacyImport::Imported);
        assert_eq!(c.authenticate(LEGACY).unwrap().agent, "main");
        assert!(
            !fs.exists(Path::new("/state/gateway-token")).unwrap(),
            "the old copy is gone"
        );
        assert_eq!(c.import_legacy(6).unwrap(), LegacyImport::Nothing);
        // A newer writer's fields are kept across our rewrites.
        let text = fs.read_to_string(&c.path()).unwrap();
        let mut v: Value = serde_json::from_str(&text).unwrap();
        v["future"] = "kept".into();
        v["credentials"][0]["scope"] = "kept too".into();
        fs.write_atomic(&c.path(), v.to_string().as_bytes(), WriteOptions::private())
            .unwrap();
        c.get_or_create("coder", 7).unwrap();
        let v: Value = serde_json::from_str(&fs.read_to_string(&c.path()).unwrap()).unwrap();
        assert_eq!(v["future"], "kept");
        assert_eq!(v["credentials"][0]["scope"], "kept too");
    }

    #[test]
    fn a_legacy_token_others_could_read_or_guess_is_not_imported_and_is_left_alone() {
        let weak = [
            ("legacy-token", "shorter than 32"),
            (&"a".repeat(64), "guessable"),
            ("passwordpasswordpasswordpassword", "guessable"),
            (
                "Vq3xYl0P9cA7rT2mKw8Zb N4eHs1uJd6GfQoEiXyC5Lk",
                "printable ASCII",
            ),
        ];
        for (token, why) in weak {
            let (fs, c) = with_legacy(token, 0o600);
            match c.import_legacy(1).unwrap() {
                LegacyImport::Refused(reason) => assert!(reason.contains(why), "{token}: {reason}"),
                other => panic!("{token}: {other:?}"),
            }
            assert!(!fs.exists(&c.path()).unwrap());
            assert_eq!(
                fs.read_to_string(Path::new("/state/gateway-token"))
                    .unwrap(),
                token,
                "left as it was"
            );
        }
        for mode in [0o644, 0o640, 0o604, 0o660] {
            let (_, c) = with_legacy(LEGACY, mode);
            match c.import_legacy(1).unwrap() {
                LegacyImport::Refused(reason) => {
                    assert!(reason.contains("must be 0600"), "{reason}")
                }
                other => panic!("{mode:o}: {other:?}"),
            }
            assert_eq!(c.authenticate(LEGACY), None);
        }
        let (fs, c) = with_legacy(LEGACY, 0o600);
        fs.set_owner(Path::new("/state/gateway-token"), 4242)
            .unwrap();
        assert!(
            matches!(c.import_legacy(1).unwrap(), LegacyImport::Refused(r) if r.contains("uid 4242"))
        );
    }

    #[test]
    fn mode_owner_and_kind_are_checked_on_every_authentication() {
        let fs = Arc::new(MemoryFs::new());
        let c = Credentials::new(fs.clone(), "/state");
        let (token, _) = c.get_or_create("coder", 1).unwrap();
        assert!(c.authenticate(&token).is_some());
        // Same bytes, looser mode: nobody is let in from now on.
        fs.set_permissions(&c.path(), 0o644).unwrap();
        assert_eq!(c.authenticate(&token), None);
        fs.set_permissions(&c.path(), 0o600).unwrap();
        assert!(c.authenticate(&token).is_some());
        fs.set_owner(&c.path(), 4242).unwrap();
        assert_eq!(c.authenticate(&token), None);
        fs.set_owner(&c.path(), 1000).unwrap();
        assert!(c.authenticate(&token).is_some());
        // Owned by the state directory's owner, but not the user the gateway runs as.
        let strict = Credentials::new(fs.clone(), "/state").with_owner(0);
        assert_eq!(strict.authenticate(&token), None);
    }

    #[test]
    fn a_corrupt_or_readable_file_lets_nobody_in_and_is_not_overwritten() {
        let fs = Arc::new(MemoryFs::new());
        let c = Credentials::new(fs.clone(), "/state");
        let (token, _) = c.get_or_create("coder", 1).unwrap();
        fs.write_atomic(&c.path(), b"{not json", WriteOptions::private())
            .unwrap();
        assert_eq!(c.authenticate(&token), None);
        assert!(c.get_or_create("ops", 2).is_err());
        assert_eq!(fs.read_to_string(&c.path()).unwrap(), "{not json");
        fs.write_atomic(
            &c.path(),
            br#"{"version":1,"credentials":[]}"#,
            WriteOptions {
                mode: 0o644,
                create_new: false,
            },
        )
        .unwrap();
        assert!(matches!(c.list(), Err(CredentialError::Corrupt { .. })));
    }
}
