//! The node's own state: `node.json` in its state directory (0600, in the 0700
//! directory that the sandbox hides) — its node id, display name, the pairing token and
//! where its gateway is. Written atomically under a sidecar lock; a file that others can
//! read, a symlink or a file this version does not understand is refused, never used.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use caps::{FileKind, Fs, WriteOptions};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::BridgeError;
use crate::handshake::NodeIdentity;

/// The file's name in the state directory.
pub const NODE_FILE: &str = "node.json";

/// `node.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeFile {
    /// Always 1.
    pub version: u32,
    /// This node's id.
    pub node_id: String,
    /// Its display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// The pairing token (a secret: never printed).
    pub token: String,
    /// The gateway it dials (`wss://…`); none for a node reached over stdio.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    /// The gateway certificate's pinned fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// When it was paired (ms since the epoch).
    #[serde(default)]
    pub paired_at: u64,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl NodeFile {
    /// What the handshake needs.
    pub fn identity(&self) -> NodeIdentity {
        NodeIdentity {
            node_id: self.node_id.clone(),
            display_name: self.display_name.clone(),
            token: self.token.clone(),
        }
    }

    /// The first 12 hex digits of the token's SHA-256, to tell tokens apart.
    pub fn token_fingerprint(&self) -> String {
        crate::registry::token_fingerprint(&self.token)
    }
}

/// `node.json` of one state directory.
#[derive(Clone)]
pub struct NodeStateStore {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
}

impl std::fmt::Debug for NodeStateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeStateStore")
            .field("dir", &self.dir)
            .finish()
    }
}

impl NodeStateStore {
    /// The node state kept in `dir`.
    pub fn new(fs: Arc<dyn Fs>, dir: impl Into<PathBuf>) -> Self {
        NodeStateStore {
            fs,
            dir: dir.into(),
        }
    }

    /// The file.
    pub fn path(&self) -> PathBuf {
        self.dir.join(NODE_FILE)
    }

    fn err(&self, e: impl std::fmt::Display) -> BridgeError {
        BridgeError::State(format!("{}: {e}", self.path().display()))
    }

    /// The node's state, `None` if it was never paired.
    pub fn load(&self) -> Result<Option<NodeFile>, BridgeError> {
        let path = self.path();
        let meta = match self.fs.symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(self.err(e)),
        };
        if meta.kind != FileKind::File {
            return Err(self.err(format!("it is {}, not a regular file", meta.kind)));
        }
        if meta.mode & 0o077 != 0 {
            return Err(self.err(format!(
                "its mode is {:04o}; it holds the node's token and must be 0600",
                meta.mode
            )));
        }
        let bytes = self.fs.read(&path).map_err(|e| self.err(e))?;
        let file: NodeFile = serde_json::from_slice(&bytes)
            .map_err(|e| self.err(format!("not a valid node state file: {e}")))?;
        if file.version != 1 {
            return Err(self.err(format!(
                "unsupported version {} (this Warden reads 1)",
                file.version
            )));
        }
        crate::message::check_id("node id", &file.node_id)?;
        if file.token.len() < 16 {
            return Err(self.err("the token is missing or too short"));
        }
        Ok(Some(file))
    }

    /// Write `file` atomically, 0600.
    pub fn save(&self, file: &NodeFile) -> Result<(), BridgeError> {
        self.fs
            .create_dir_all(&self.dir, 0o700)
            .map_err(|e| self.err(e))?;
        let _lock = self
            .fs
            .lock(&self.dir.join(format!("{NODE_FILE}.lock")))
            .map_err(|e| self.err(e))?;
        let text = serde_json::to_vec_pretty(file).map_err(|e| self.err(e))?;
        self.fs
            .write_atomic(&self.path(), &text, WriteOptions::private())
            .map_err(|e| self.err(e))
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

    fn file() -> NodeFile {
        NodeFile {
            version: 1,
            node_id: "box-1".into(),
            display_name: Some("Box".into()),
            token: "wnd_0123456789abcdef0123".into(),
            gateway: Some("wss://gw:7879".into()),
            fingerprint: None,
            paired_at: 5,
            extra: Map::new(),
        }
    }

    #[test]
    fn saved_private_and_refused_when_readable_or_corrupt() {
        let fs = Arc::new(MemoryFs::new());
        let store = NodeStateStore::new(fs.clone(), "/state");
        assert_eq!(store.load().unwrap(), None);
        store.save(&file()).unwrap();
        assert_eq!(store.load().unwrap().unwrap(), file());
        assert_eq!(fs.metadata(&store.path()).unwrap().mode & 0o777, 0o600);
        fs.set_permissions(&store.path(), 0o644).unwrap();
        assert!(store.load().unwrap_err().to_string().contains("0600"));
        fs.write_atomic(&store.path(), b"{", WriteOptions::private())
            .unwrap();
        assert!(store.load().is_err());
    }
}
