//! The gateway's node registry on disk: `nodes.json` (0600) in its state directory.
//! Every node the operator knows of, with its state — `pending` (a pairing request
//! waiting for `warden nodes approve`), `approved` (holds a token), `rejected`,
//! `revoked` — and how it is reached (it dials in over WebSocket, or the gateway runs a
//! configured command and speaks over its stdio). Only an approved node's token opens a
//! session; a pending, rejected or revoked node gets nothing. Rewritten atomically under
//! a sidecar lock; fields this version does not know are kept; a corrupt or readable
//! file lets no node in and is never overwritten.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use caps::{FileKind, Fs, WriteOptions};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::BridgeError;
use crate::message::{check_id, check_name};
use crate::wire::TransportKind;

/// The file's name in the gateway's state directory.
pub const NODES_FILE: &str = "nodes.json";
/// How long a pairing request waits for the operator.
pub const PAIR_TTL_MS: u64 = 10 * 60 * 1000;
/// Pending requests kept at once: a flood of requests cannot grow the file.
pub const MAX_PENDING: usize = 32;
/// Requests one node id may make while its request is pending.
pub const MAX_ATTEMPTS: u32 = 5;

/// Where a node stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    /// Waiting for the operator.
    Pending,
    /// Paired: holds a token.
    Approved,
    /// The operator said no.
    Rejected,
    /// Its token was revoked.
    Revoked,
}

impl std::fmt::Display for NodeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NodeState::Pending => "pending",
            NodeState::Approved => "approved",
            NodeState::Rejected => "rejected",
            NodeState::Revoked => "revoked",
        })
    }
}

/// A pairing request as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PairRequest {
    /// When it arrived (ms since the epoch).
    pub requested_at: u64,
    /// When it expires.
    pub expires_at: u64,
    /// How many times this node asked while pending.
    pub attempts: u32,
    /// Where it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
    /// The node's X25519 public key (hex).
    pub public_key: String,
    /// The short code both sides show.
    pub code: String,
    /// What it says it serves.
    #[serde(default)]
    pub capabilities: Vec<String>,
}

/// One node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeEntry {
    /// The node id.
    pub id: String,
    /// Its display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Where it stands.
    pub state: NodeState,
    /// How it is reached.
    pub transport: TransportKind,
    /// For stdio nodes: the command whose stdin/stdout carry the Bridge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// The token (approved nodes only; never printed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// When the entry was made.
    pub created_at: u64,
    /// When it last changed state.
    pub updated_at: u64,
    /// The request the operator approved last (its `expires_at` is 0), kept so that the
    /// node waiting on it learns the answer, and for the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<PairRequest>,
    /// Pairing requests waiting for the operator, each with its own key and code. More
    /// than one makes approval refuse as ambiguous until the operator rejects the ones
    /// that are not this node's (see `requests.rs`).
    #[serde(
        default,
        rename = "pendingRequests",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub pending: Vec<PairRequest>,
    /// The gateway's X25519 public key of the last approval (hex), sent to the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_public_key: Option<String>,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl NodeEntry {
    /// A node the operator approved, reached over `transport`, holding `token` (set
    /// `display_name` and, for a stdio node, `command` on the result).
    pub fn approved(id: &str, transport: TransportKind, token: String, now: u64) -> NodeEntry {
        NodeEntry {
            id: id.to_owned(),
            display_name: None,
            state: NodeState::Approved,
            transport,
            command: None,
            token: Some(token),
            created_at: now,
            updated_at: now,
            request: None,
            pending: Vec::new(),
            gateway_public_key: None,
            extra: Map::new(),
        }
    }

    /// The token's fingerprint, if it has one.
    pub fn token_fingerprint(&self) -> Option<String> {
        self.token.as_deref().map(token_fingerprint)
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct StoredFile {
    version: u32,
    #[serde(default)]
    nodes: Vec<NodeEntry>,
    #[serde(flatten)]
    extra: Map<String, Value>,
}

/// The first 12 hex digits of a token's SHA-256.
pub fn token_fingerprint(token: &str) -> String {
    policy::hex(&Sha256::digest(token.as_bytes())[..6])
}

/// A new 256-bit token.
pub fn new_token() -> Result<String, BridgeError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| BridgeError::State(format!("no randomness: {e}")))?;
    Ok(format!(
        "wnd_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    ))
}

/// What a node's `hello` finds.
#[derive(Clone, Debug, PartialEq)]
pub enum Lookup {
    /// Paired: challenge it with this token.
    Approved(Box<NodeEntry>),
    /// Known but not paired, in this state.
    NotApproved(NodeState),
    /// Never heard of.
    Unknown,
}

/// The file's parsed entries, under the SHA-256 of the bytes they came from.
type Parsed = ([u8; 32], Arc<Vec<NodeEntry>>);

/// `nodes.json` of one state directory.
#[derive(Clone)]
pub struct Registry {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    cache: Arc<Mutex<Option<Parsed>>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").field("dir", &self.dir).finish()
    }
}

impl Registry {
    /// The registry kept in `dir`.
    pub fn new(fs: Arc<dyn Fs>, dir: impl Into<PathBuf>) -> Self {
        Registry {
            fs,
            dir: dir.into(),
            cache: Arc::default(),
        }
    }

    /// The file.
    pub fn path(&self) -> PathBuf {
        self.dir.join(NODES_FILE)
    }

    fn err(&self, e: impl std::fmt::Display) -> BridgeError {
        BridgeError::State(format!("{}: {e}", self.path().display()))
    }

    fn read(&self) -> Result<StoredFile, BridgeError> {
        let path = self.path();
        let meta = match self.fs.symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.is_not_found() => {
                return Ok(StoredFile {
                    version: 1,
                    ..Default::default()
                });
            }
            Err(e) => return Err(self.err(e)),
        };
        if meta.kind != FileKind::File || meta.mode & 0o077 != 0 {
            return Err(self.err(format!(
                "it must be a regular file of mode 0600 (it holds node tokens); found {} of mode {:04o}",
                meta.kind, meta.mode
            )));
        }
        let bytes = self.fs.read(&path).map_err(|e| self.err(e))?;
        let mut file: StoredFile = serde_json::from_slice(&bytes)
            .map_err(|e| self.err(format!("not a valid node registry: {e}")))?;
        // Written by a Warden that kept one request per node: an unanswered one (not
        // marked answered, `expires_at` 0) is waiting.
        for n in &mut file.nodes {
            if n.request.as_ref().is_some_and(|r| r.expires_at != 0)
                && let Some(r) = n.request.take()
            {
                n.pending.push(r);
            }
        }
        if file.version != 1 {
            return Err(self.err(format!(
                "unsupported version {} (this Warden reads 1)",
                file.version
            )));
        }
        Ok(file)
    }

    /// Every node, as on disk now (parsed again only when the bytes changed).
    pub fn list(&self) -> Result<Arc<Vec<NodeEntry>>, BridgeError> {
        // Checked on every call, not only when the bytes change: a chmod changes no byte.
        match self.fs.symlink_metadata(&self.path()) {
            Ok(meta) if meta.kind != FileKind::File || meta.mode & 0o077 != 0 => {
                return Err(self.err(format!(
                    "it must be a regular file of mode 0600 (it holds node tokens); found {} of mode {:04o}",
                    meta.kind, meta.mode
                )));
            }
            Ok(_) => {}
            Err(e) if e.is_not_found() => return Ok(Arc::new(Vec::new())),
            Err(e) => return Err(self.err(e)),
        }
        let bytes = match self.fs.read(&self.path()) {
            Ok(b) => b,
            Err(e) if e.is_not_found() => return Ok(Arc::new(Vec::new())),
            Err(e) => return Err(self.err(e)),
        };
        let stamp: [u8; 32] = Sha256::digest(&bytes).into();
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((s, nodes)) = cache.as_ref()
            && *s == stamp
        {
            return Ok(Arc::clone(nodes));
        }
        let nodes = Arc::new(self.read()?.nodes);
        *cache = Some((stamp, Arc::clone(&nodes)));
        Ok(nodes)
    }

    /// Read, change with `f`, write back atomically under the lock.
    pub fn update<R>(
        &self,
        f: impl FnOnce(&mut Vec<NodeEntry>) -> Result<R, BridgeError>,
    ) -> Result<R, BridgeError> {
        self.fs
            .create_dir_all(&self.dir, 0o700)
            .map_err(|e| self.err(e))?;
        let _lock = self
            .fs
            .lock(&self.dir.join(format!("{NODES_FILE}.lock")))
            .map_err(|e| self.err(e))?;
        let mut file = self.read()?;
        file.version = 1;
        let out = f(&mut file.nodes)?;
        let text = serde_json::to_vec_pretty(&file).map_err(|e| self.err(e))?;
        self.fs
            .write_atomic(&self.path(), &text, WriteOptions::private())
            .map_err(|e| self.err(e))?;
        Ok(out)
    }

    /// What a `hello` from `id` finds.
    pub fn lookup(&self, id: &str) -> Result<Lookup, BridgeError> {
        let nodes = self.list()?;
        Ok(match nodes.iter().find(|n| n.id == id) {
            Some(n) if n.state == NodeState::Approved && n.token.is_some() => {
                Lookup::Approved(Box::new(n.clone()))
            }
            Some(n) => Lookup::NotApproved(n.state),
            None => Lookup::Unknown,
        })
    }

    /// Revoke `id`: its token is gone, and a connected node is dropped.
    pub fn revoke(&self, id: &str, now: u64) -> Result<(), BridgeError> {
        self.update(|nodes| {
            let n = find(nodes, id)?;
            n.state = NodeState::Revoked;
            n.token = None;
            n.request = None;
            n.updated_at = now;
            Ok(())
        })
    }

    /// Configure a node reached by running `command` (SSH, a container exec...): the
    /// operator's configuration is its pairing. Returns its new token, which the node
    /// stores with `warden node pair --stdio`.
    pub fn add_stdio(
        &self,
        id: &str,
        display_name: Option<&str>,
        command: Vec<String>,
        now: u64,
    ) -> Result<String, BridgeError> {
        check_id("node id", id)?;
        if let Some(name) = display_name {
            check_name(name)?;
        }
        if command.is_empty() || command.iter().any(|a| a.contains('\0')) {
            return Err(BridgeError::Invalid(
                "a stdio node needs a command (e.g. ssh HOST warden node stdio)".into(),
            ));
        }
        let token = new_token()?;
        self.update(|nodes| {
            if let Some(n) = nodes.iter().find(|n| n.id == id)
                && n.transport != TransportKind::Stdio
            {
                return Err(BridgeError::Invalid(format!(
                    "node {id:?} already exists as a {} node ({}); revoke it first or pick another id",
                    n.transport, n.state
                )));
            }
            nodes.retain(|n| n.id != id);
            nodes.push(NodeEntry {
                display_name: display_name.map(str::to_owned),
                command: Some(command),
                ..NodeEntry::approved(id, TransportKind::Stdio, token.clone(), now)
            });
            Ok(token.clone())
        })
    }

    /// Remove `id` entirely.
    pub fn remove(&self, id: &str) -> Result<(), BridgeError> {
        self.update(|nodes| {
            find(nodes, id)?;
            nodes.retain(|n| n.id != id);
            Ok(())
        })
    }
}

pub(crate) fn find<'a>(
    nodes: &'a mut [NodeEntry],
    id: &str,
) -> Result<&'a mut NodeEntry, BridgeError> {
    nodes
        .iter_mut()
        .find(|n| n.id == id)
        .ok_or_else(|| BridgeError::Invalid(format!("no node {id:?} (see `warden nodes list`)")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use caps::MemoryFs;

    fn key(n: u8) -> String {
        crate::seal::to_hex(&[n; 32])
    }

    fn registry() -> (Arc<MemoryFs>, Registry) {
        let fs = Arc::new(MemoryFs::new());
        (fs.clone(), Registry::new(fs, "/state"))
    }

    #[test]
    fn stdio_nodes_are_configured_not_paired_and_the_file_is_private_and_strict() {
        let (fs, r) = registry();
        let token = r
            .add_stdio("ssh1", None, vec!["ssh".into(), "h".into()], 1)
            .unwrap();
        assert!(token.starts_with("wnd_") && token.len() > 40);
        assert!(matches!(r.lookup("ssh1").unwrap(), Lookup::Approved(_)));
        let e = r
            .request_pairing("ssh1", None, &key(1), None, &[], 2)
            .unwrap_err();
        assert!(e.to_string().contains("stdio"), "{e}");
        assert!(r.add_stdio("x", None, vec![], 1).is_err());
        assert_eq!(fs.metadata(&r.path()).unwrap().mode & 0o777, 0o600);
        fs.set_permissions(&r.path(), 0o644).unwrap();
        assert!(
            r.lookup("ssh1").is_err(),
            "a readable registry admits nobody"
        );
        fs.set_permissions(&r.path(), 0o600).unwrap();
        fs.write_atomic(
            &r.path(),
            b"{\"version\":2,\"nodes\":[]}",
            WriteOptions::private(),
        )
        .unwrap();
        assert!(
            r.lookup("ssh1")
                .unwrap_err()
                .to_string()
                .contains("unsupported version")
        );
    }
}
