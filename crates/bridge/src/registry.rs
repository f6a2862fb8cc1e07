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
    /// The pending (or last) pairing request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<PairRequest>,
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

/// How a pairing request stands, for the connection waiting on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PairStatus {
    /// Still waiting.
    Waiting,
    /// Approved: send this public key.
    Approved(String),
    /// Rejected, revoked or expired.
    Refused(String),
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
        let file: StoredFile = serde_json::from_slice(&bytes)
            .map_err(|e| self.err(format!("not a valid node registry: {e}")))?;
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

    /// Record a pairing request from `id` (a re-pair of a known node, too: its old token
    /// keeps working until the new request is approved). Returns the request.
    #[allow(clippy::too_many_arguments)]
    pub fn request_pairing(
        &self,
        id: &str,
        display_name: Option<&str>,
        public_key: &str,
        remote: Option<&str>,
        capabilities: &[String],
        now: u64,
    ) -> Result<PairRequest, BridgeError> {
        check_id("node id", id)?;
        if let Some(name) = display_name {
            check_name(name)?;
        }
        self.update(|nodes| {
            // Expired requests make room.
            for n in nodes.iter_mut() {
                if n.state == NodeState::Pending && n.request.as_ref().is_some_and(|r| r.expires_at <= now) {
                    n.state = NodeState::Rejected;
                    n.updated_at = now;
                }
            }
            let pending = nodes.iter().filter(|n| n.state == NodeState::Pending).count();
            let code = pairing_code(public_key);
            let fresh = |attempts| PairRequest {
                requested_at: now,
                expires_at: now + PAIR_TTL_MS,
                attempts,
                remote: remote.map(str::to_owned),
                public_key: public_key.to_owned(),
                code: code.clone(),
                capabilities: capabilities.to_vec(),
            };
            match nodes.iter_mut().find(|n| n.id == id) {
                Some(n) if n.transport == TransportKind::Stdio => Err(BridgeError::Refused {
                    code: "pairing-refused".into(),
                    message: format!("node {id:?} is configured as a stdio node; its operator's configuration is its pairing"),
                }),
                Some(n) => {
                    let attempts = match (&n.request, n.state) {
                        (Some(r), NodeState::Pending) => r.attempts + 1,
                        _ => 1,
                    };
                    if attempts > MAX_ATTEMPTS {
                        return Err(BridgeError::Refused {
                            code: "pairing-refused".into(),
                            message: format!(
                                "node {id:?} asked {MAX_ATTEMPTS} times already; wait for the operator or for the request to expire"
                            ),
                        });
                    }
                    if n.state != NodeState::Pending && pending >= MAX_PENDING {
                        return Err(too_many());
                    }
                    if n.state != NodeState::Approved {
                        n.state = NodeState::Pending;
                    }
                    n.display_name = display_name.map(str::to_owned).or(n.display_name.take());
                    n.request = Some(fresh(attempts));
                    n.updated_at = now;
                    Ok(fresh(attempts))
                }
                None => {
                    if pending >= MAX_PENDING {
                        return Err(too_many());
                    }
                    nodes.push(NodeEntry {
                        id: id.to_owned(),
                        display_name: display_name.map(str::to_owned),
                        state: NodeState::Pending,
                        transport: TransportKind::WebSocket,
                        command: None,
                        token: None,
                        created_at: now,
                        updated_at: now,
                        request: Some(fresh(1)),
                        gateway_public_key: None,
                        extra: Map::new(),
                    });
                    Ok(fresh(1))
                }
            }
        })
    }

    /// How the request with `code` from `id` stands now.
    pub fn pairing_status(
        &self,
        id: &str,
        code: &str,
        now: u64,
    ) -> Result<PairStatus, BridgeError> {
        let nodes = self.list()?;
        let Some(n) = nodes.iter().find(|n| n.id == id) else {
            return Ok(PairStatus::Refused("the request was removed".into()));
        };
        let Some(req) = n.request.as_ref().filter(|r| r.code == code) else {
            return Ok(PairStatus::Refused(
                "a newer request replaced this one".into(),
            ));
        };
        if let (Some(gw), NodeState::Approved) = (&n.gateway_public_key, n.state)
            && req.expires_at == 0
        {
            return Ok(PairStatus::Approved(gw.clone()));
        }
        match n.state {
            NodeState::Rejected => {
                return Ok(PairStatus::Refused(
                    "the operator rejected the request".into(),
                ));
            }
            NodeState::Revoked => return Ok(PairStatus::Refused("the node was revoked".into())),
            _ => {}
        }
        if req.expires_at <= now {
            return Ok(PairStatus::Refused(
                "the request expired before the operator approved it".into(),
            ));
        }
        Ok(PairStatus::Waiting)
    }

    /// Approve `id`'s pending request: agree on its token with the node's key (the
    /// token never travels) and rotate any previous one.
    pub fn approve(&self, id: &str, now: u64) -> Result<NodeEntry, BridgeError> {
        self.update(|nodes| {
            let n = find(nodes, id)?;
            let req = match &n.request {
                Some(r) if r.expires_at > now => r.clone(),
                Some(_) => return Err(BridgeError::Invalid(format!("node {id:?}'s pairing request expired; have it ask again (`warden node pair`)"))),
                None => return Err(BridgeError::Invalid(format!("node {id:?} has no pending pairing request"))),
            };
            let (gateway_public, token) = crate::pair::gateway_agree(id, &req.public_key)?;
            n.token = Some(token);
            n.gateway_public_key = Some(gateway_public);
            n.state = NodeState::Approved;
            n.updated_at = now;
            // Marks the request answered (kept for `pairing_status` and the record).
            n.request = Some(PairRequest { expires_at: 0, ..req });
            Ok(n.clone())
        })
    }

    /// Reject `id`'s pending request.
    pub fn reject(&self, id: &str, now: u64) -> Result<(), BridgeError> {
        self.update(|nodes| {
            let n = find(nodes, id)?;
            if n.state != NodeState::Pending
                && n.request.as_ref().is_none_or(|r| r.expires_at <= now)
            {
                return Err(BridgeError::Invalid(format!(
                    "node {id:?} has no pending pairing request"
                )));
            }
            if n.state == NodeState::Pending {
                n.state = NodeState::Rejected;
            }
            n.request = None;
            n.updated_at = now;
            Ok(())
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

fn too_many() -> BridgeError {
    BridgeError::Refused {
        code: "pairing-refused".into(),
        message: format!("{MAX_PENDING} pairing requests are already waiting for the operator"),
    }
}

fn find<'a>(nodes: &'a mut [NodeEntry], id: &str) -> Result<&'a mut NodeEntry, BridgeError> {
    nodes
        .iter_mut()
        .find(|n| n.id == id)
        .ok_or_else(|| BridgeError::Invalid(format!("no node {id:?} (see `warden nodes list`)")))
}

/// The short code shown on both sides of a pairing: the operator approves the request
/// whose code the node printed.
pub fn pairing_code(public_key: &str) -> String {
    let d = Sha256::digest(public_key.as_bytes());
    let h = policy::hex(&d[..4]).to_uppercase();
    format!("{}-{}", &h[..4], &h[4..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use caps::MemoryFs;

    fn registry() -> (Arc<MemoryFs>, Registry) {
        let fs = Arc::new(MemoryFs::new());
        (fs.clone(), Registry::new(fs, "/state"))
    }

    fn key(n: u8) -> String {
        crate::seal::to_hex(&[n; 32])
    }

    fn real_key() -> String {
        use ring::agreement::{EphemeralPrivateKey, X25519};
        let rng = ring::rand::SystemRandom::new();
        let k = EphemeralPrivateKey::generate(&X25519, &rng).unwrap();
        crate::seal::to_hex(k.compute_public_key().unwrap().as_ref())
    }

    #[test]
    fn a_request_gets_nothing_until_approved_and_a_re_pair_rotates_the_token() {
        let (_, r) = registry();
        let req = r
            .request_pairing(
                "n1",
                Some("Box"),
                &real_key(),
                Some("127.0.0.1"),
                &[],
                1_000,
            )
            .unwrap();
        assert_eq!(
            r.lookup("n1").unwrap(),
            Lookup::NotApproved(NodeState::Pending)
        );
        assert_eq!(
            r.pairing_status("n1", &req.code, 2_000).unwrap(),
            PairStatus::Waiting
        );
        let first = r.approve("n1", 3_000).unwrap().token.unwrap();
        assert!(matches!(
            r.pairing_status("n1", &req.code, 4_000).unwrap(),
            PairStatus::Approved(_)
        ));
        assert!(matches!(r.lookup("n1").unwrap(), Lookup::Approved(_)));
        // Asking again: the old token keeps working until the new request is approved.
        let again = r
            .request_pairing("n1", None, &real_key(), None, &[], 5_000)
            .unwrap();
        assert!(
            matches!(r.lookup("n1").unwrap(), Lookup::Approved(e) if e.token.as_deref() == Some(first.as_str()))
        );
        let second = r.approve("n1", 6_000).unwrap().token.unwrap();
        assert_ne!(first, second);
        assert_eq!(
            r.pairing_status("n1", &req.code, 7_000).unwrap(),
            PairStatus::Refused("a newer request replaced this one".into())
        );
        let _ = again;
        r.revoke("n1", 8_000).unwrap();
        assert_eq!(
            r.lookup("n1").unwrap(),
            Lookup::NotApproved(NodeState::Revoked)
        );
        assert!(
            r.list().unwrap()[0].token.is_none(),
            "a revoked node keeps no token"
        );
    }

    #[test]
    fn requests_expire_are_capped_and_rejections_stick() {
        let (_, r) = registry();
        let req = r
            .request_pairing("late", None, &key(1), None, &[], 0)
            .unwrap();
        assert!(matches!(
            r.pairing_status("late", &req.code, PAIR_TTL_MS).unwrap(),
            PairStatus::Refused(_)
        ));
        assert!(
            r.approve("late", PAIR_TTL_MS + 1).is_err(),
            "an expired request cannot be approved"
        );
        for attempt in 1..=MAX_ATTEMPTS {
            r.request_pairing("eager", None, &key(2), None, &[], 10)
                .unwrap_or_else(|e| panic!("attempt {attempt}: {e}"));
        }
        let e = r
            .request_pairing("eager", None, &key(2), None, &[], 11)
            .unwrap_err();
        assert!(e.to_string().contains("asked"), "{e}");
        for i in 0..MAX_PENDING {
            let _ = r.request_pairing(&format!("flood{i}"), None, &key(3), None, &[], 20);
        }
        let e = r
            .request_pairing("one-more", None, &key(4), None, &[], 21)
            .unwrap_err();
        assert!(e.to_string().contains("already waiting"), "{e}");
        let q = r.request_pairing("flood0", None, &key(5), None, &[], 22);
        assert!(q.is_ok(), "an id already pending may ask again");
        r.reject("flood0", 23).unwrap();
        assert_eq!(
            r.lookup("flood0").unwrap(),
            Lookup::NotApproved(NodeState::Rejected)
        );
        assert!(
            r.request_pairing("../x", None, &key(6), None, &[], 1)
                .is_err()
        );
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
