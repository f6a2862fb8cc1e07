//! The console's node bindings (`tools.exec.node` in `config.toml`, global and per
//! agent): what each level binds to, the paired nodes of this gateway's registry
//! (`nodes.json`) to choose from, and the edit.
//!
//! The edit keeps the discipline of the console's `exec-approvals.json` edits: under a
//! sidecar lock (`config.toml.lock`), the file is read and its version (hash) compared
//! with the one the page showed — if it changed meanwhile, the edit is a conflict and
//! nothing is written — then rewritten atomically (temporary file, rename) with the same
//! permission bits. The text is edited by `policy::config::edit`, which keeps every
//! comment and refuses a file that does not parse. Only a paired node's id may be bound.
//! An editor that does not take the lock can still race the rename; the compare catches
//! every change made before the lock was taken.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bridge::{NodeEntry, NodeState};
use caps::{FileKind, Fs, WriteOptions};
use policy::config::edit;
use policy::{Config, NodeInfo, Source};
use serde::Serialize;

/// `config.toml`, read and edited through `fs`.
#[derive(Clone, Debug)]
pub struct ConfigFile {
    fs: Arc<dyn Fs>,
    path: PathBuf,
    audit: Arc<dyn audit::AuditSink>,
}

/// The file as read: its text (none: no file) and its version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigVersion {
    pub text: Option<String>,
    pub hash: String,
}

/// Why a binding was not changed; nothing was written.
#[derive(Debug, PartialEq, Eq)]
pub enum BindingError {
    /// config.toml changed since the page read it.
    Conflict,
    /// The edit itself is wrong (an unknown node, a file that does not parse...).
    Invalid(String),
    /// The file could not be used.
    Failed(String),
}

impl ConfigFile {
    /// The config file at `path`.
    pub fn new(fs: Arc<dyn Fs>, path: PathBuf) -> Self {
        ConfigFile {
            fs,
            path,
            audit: Arc::new(audit::NoAudit),
        }
    }

    /// Record each edit in `audit`.
    pub fn with_audit(mut self, audit: Arc<dyn audit::AuditSink>) -> Self {
        self.audit = audit;
        self
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock_path(&self) -> PathBuf {
        let mut name = self.path.file_name().unwrap_or_default().to_os_string();
        name.push(".lock");
        self.path.with_file_name(name)
    }

    /// Read it now.
    pub fn read(&self) -> Result<ConfigVersion, String> {
        match self.fs.read(&self.path) {
            Ok(bytes) => {
                let hash = edit::version(Some(&bytes));
                let text = String::from_utf8(bytes)
                    .map_err(|_| format!("{} is not valid UTF-8", self.path.display()))?;
                Ok(ConfigVersion {
                    text: Some(text),
                    hash,
                })
            }
            Err(e) if e.is_not_found() => Ok(ConfigVersion {
                text: None,
                hash: edit::version(None),
            }),
            Err(e) => Err(e.to_string()),
        }
    }

    /// What the page compares to know the file changed: the version, or why it cannot be
    /// read.
    pub fn fingerprint(&self) -> String {
        match self.read() {
            Ok(v) => v.hash,
            Err(e) => format!("error: {e}"),
        }
    }

    /// Bind agent `agent` (none: the host-wide default) to `node` (none: remove the
    /// binding at that level), based on version `base`; `nodes` is the registry. The new
    /// version on success.
    pub fn set_node_binding(
        &self,
        base: &str,
        agent: Option<&str>,
        node: Option<&str>,
        nodes: &[NodeEntry],
    ) -> Result<String, BindingError> {
        if let Some(id) = node {
            match nodes.iter().find(|n| n.id == id) {
                Some(n) if n.state == NodeState::Approved => {}
                Some(n) => {
                    return Err(BindingError::Invalid(format!(
                        "node {:?} is {}, not paired: only a paired node can be bound \
                         (`warden nodes approve`); nothing was changed",
                        approvals::display::escape(id),
                        n.state
                    )));
                }
                None => {
                    return Err(BindingError::Invalid(format!(
                        "no node {:?} is known to this gateway (see `warden nodes list`); \
                         nothing was changed",
                        approvals::display::escape(id)
                    )));
                }
            }
        }
        let failed = |e: caps::CapsError| BindingError::Failed(e.to_string());
        if let Some(dir) = self.path.parent() {
            self.fs.create_dir_all(dir, 0o700).map_err(failed)?;
        }
        let _lock = self.fs.lock(&self.lock_path()).map_err(failed)?;
        let mode = match self.fs.symlink_metadata(&self.path) {
            Ok(meta) if meta.kind == FileKind::File => meta.mode & 0o7777,
            Ok(meta) => {
                return Err(BindingError::Failed(format!(
                    "{} is a {}, not a regular file: the page rewrites only a regular \
                     file (edit it by hand); nothing was changed",
                    self.path.display(),
                    meta.kind
                )));
            }
            Err(e) if e.is_not_found() => 0o600,
            Err(e) => return Err(failed(e)),
        };
        let current = self.read().map_err(BindingError::Failed)?;
        if current.hash != base {
            return Err(BindingError::Conflict);
        }
        let text = current.text.as_deref().unwrap_or("");
        let next = edit::set_node_binding(text, &self.path, agent, node).map_err(|e| match e {
            policy::PolicyError::ConfigEdit { .. } => {
                BindingError::Invalid(format!("{e}; nothing was changed"))
            }
            e => BindingError::Invalid(format!(
                "config.toml does not parse, so the page does not rewrite it — fix it by \
                 hand: {e}"
            )),
        })?;
        if current.text.as_deref() == Some(next.as_str()) {
            return Ok(current.hash);
        }
        self.fs
            .write_atomic(
                &self.path,
                next.as_bytes(),
                WriteOptions {
                    mode,
                    create_new: false,
                },
            )
            .map_err(failed)?;
        let version = edit::version(Some(next.as_bytes()));
        let change = format!(
            "node binding of {}: {} (web console)",
            agent.unwrap_or("every agent"),
            node.unwrap_or("none")
        );
        let entry = audit::Entry::new(audit::Kind::Policy)
            .file(self.path.to_string_lossy())
            .change(change)
            .hash_before(&current.hash)
            .hash_after(&version);
        if let Err(e) = self.audit.record(entry) {
            tracing::error!(
                "a change of {} is not on the record: {e}",
                self.path.display()
            );
        }
        Ok(version)
    }
}

/// What the page compares to know the node registry changed (ids, names and states
/// only: tokens never leave the registry).
pub fn nodes_fingerprint(nodes: &Result<Arc<Vec<NodeEntry>>, String>) -> String {
    match nodes {
        Ok(list) => list
            .iter()
            .map(|n| {
                format!(
                    "{}\u{1f}{}\u{1f}{}",
                    n.id,
                    n.display_name.as_deref().unwrap_or(""),
                    n.state
                )
            })
            .collect::<Vec<_>>()
            .join("\u{1e}"),
        Err(e) => format!("error: {e}"),
    }
}

/// A node the page offers.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeChoice {
    /// The id, exactly (what the edit sends).
    id: String,
    /// The display name and id, escaped.
    label: String,
}

/// The binding at one level as the page shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BindingView {
    /// The value set at this level, exactly as written (none: not set here).
    set: Option<String>,
    /// What applies here, escaped (this level's or the inherited one), and where it is
    /// set: `agent` or `global`.
    effective: Option<String>,
    source: Option<Source>,
    /// What the effective value names among the paired nodes.
    note: String,
}

/// The node section of the console: present only when the registry has a node.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodesView {
    /// Paired nodes, which a binding may name.
    choices: Vec<NodeChoice>,
    /// Nodes not paired (pending, rejected, revoked): listed, not offered.
    not_paired: Vec<String>,
    /// Why bindings cannot be edited now (config.toml does not parse, the registry
    /// cannot be read).
    read_only: Option<String>,
    /// The host-wide default (`[tools.exec] node`).
    defaults: BindingView,
}

fn label(n: &NodeEntry) -> String {
    match &n.display_name {
        Some(name) => format!(
            "{} ({})",
            approvals::display::escape(name),
            approvals::display::escape(&n.id)
        ),
        None => approvals::display::escape(&n.id),
    }
}

/// What `value` names among the paired `nodes`, as a binding resolves it.
fn note(value: &str, nodes: &[NodeEntry]) -> String {
    let paired: Vec<NodeInfo> = nodes
        .iter()
        .filter(|n| n.state == NodeState::Approved)
        .map(|n| NodeInfo {
            id: n.id.clone(),
            remote_ip: None,
            display_name: n.display_name.clone(),
        })
        .collect();
    match policy::select_node(&paired, None, Some(value)) {
        Ok(n) => {
            let entry = nodes.iter().find(|e| e.id == n.id);
            let shown = entry.map(label).unwrap_or_default();
            if n.id == value {
                format!("paired node {shown}")
            } else {
                format!("names paired node {shown}")
            }
        }
        Err(e) => format!(
            "names no paired node ({e}); commands of an agent bound to it fail until one does"
        ),
    }
}

/// The binding of agent `agent` (none: the host-wide default) in `config`.
pub fn binding_view(config: &Config, agent: Option<&str>, nodes: &[NodeEntry]) -> BindingView {
    let set = edit::node_binding_at(config, agent).map(str::to_owned);
    let (effective, source) = match (&set, agent) {
        (Some(v), Some(_)) => (Some(v.clone()), Some(Source::Agent)),
        (Some(v), None) => (Some(v.clone()), Some(Source::Global)),
        (None, Some(_)) => (config.exec.node.clone(), Some(Source::Global)),
        (None, None) => (None, None),
    };
    let source = effective.as_ref().and(source);
    BindingView {
        note: effective
            .as_deref()
            .map(|v| note(v, nodes))
            .unwrap_or_else(|| "none: any node may be used".into()),
        effective: effective.as_deref().map(approvals::display::escape),
        source,
        set,
    }
}

/// The node section, or none when the registry has no node (then the page shows no node
/// controls at all). `config_error`: why config.toml cannot be used.
pub fn nodes_view(
    config: &Config,
    config_error: Option<&str>,
    nodes: &Result<Arc<Vec<NodeEntry>>, String>,
) -> Option<NodesView> {
    let (list, registry_error): (&[NodeEntry], Option<String>) = match nodes {
        Ok(list) if list.is_empty() => return None,
        Ok(list) => (list, None),
        Err(e) => (&[], Some(format!("the node registry cannot be read: {e}"))),
    };
    let read_only = registry_error.or_else(|| {
        config_error
            .map(|e| format!("config.toml cannot be used, so bindings cannot be changed here: {e}"))
    });
    Some(NodesView {
        choices: list
            .iter()
            .filter(|n| n.state == NodeState::Approved)
            .map(|n| NodeChoice {
                id: n.id.clone(),
                label: label(n),
            })
            .collect(),
        not_paired: list
            .iter()
            .filter(|n| n.state != NodeState::Approved)
            .map(|n| format!("{} — {}", label(n), n.state))
            .collect(),
        read_only,
        defaults: binding_view(config, None, list),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use caps::MemoryFs;

    const HOME: &str = "/home/u/.warden";
    const TEXT: &str = "# my config\n[tools.exec]\nhost = \"gateway\" # here\n\n[[agents.list]]\nid = \"main\" # the coding agent\n\n# the end\n";

    fn node(id: &str, name: Option<&str>, state: NodeState) -> NodeEntry {
        NodeEntry {
            id: id.into(),
            display_name: name.map(str::to_owned),
            state,
            transport: bridge::TransportKind::Stdio,
            command: Some(vec!["true".into()]),
            token: Some("wnd_secret".into()),
            created_at: 1,
            updated_at: 1,
            request: None,
            pending: Vec::new(),
            gateway_public_key: None,
            extra: Default::default(),
        }
    }

    fn nodes() -> Vec<NodeEntry> {
        vec![
            node("build", Some("Build Box"), NodeState::Approved),
            node("gpu", None, NodeState::Pending),
        ]
    }

    fn world(text: Option<&str>, mode: u32) -> (Arc<MemoryFs>, ConfigFile) {
        let fs = Arc::new(MemoryFs::new());
        fs.create_dir_all(Path::new(HOME), 0o700).unwrap();
        let path = Path::new(HOME).join("config.toml");
        if let Some(text) = text {
            fs.write(
                &path,
                text.as_bytes(),
                WriteOptions {
                    mode,
                    create_new: false,
                },
            )
            .unwrap();
        }
        let file = ConfigFile::new(fs.clone(), path);
        (fs, file)
    }

    fn on_disk(fs: &MemoryFs) -> String {
        fs.read_to_string(&Path::new(HOME).join("config.toml"))
            .unwrap()
    }

    #[test]
    fn a_binding_is_written_on_the_version_shown_keeping_comments_and_mode() {
        let (fs, file) = world(Some(TEXT), 0o640);
        let base = file.read().unwrap().hash;
        let hash = file
            .set_node_binding(&base, Some("main"), Some("build"), &nodes())
            .unwrap();
        let text = on_disk(&fs);
        assert_eq!(
            text,
            TEXT.replace("agent\n", "agent\ntools.exec.node = \"build\"\n"),
            "the comments and everything else stay"
        );
        assert_eq!(hash, file.read().unwrap().hash);
        let meta = fs
            .symlink_metadata(&Path::new(HOME).join("config.toml"))
            .unwrap();
        assert_eq!(meta.mode, 0o640, "the permissions stay");
        // The global default, then clearing both: back to the very text.
        let hash = file
            .set_node_binding(&hash, None, Some("build"), &nodes())
            .unwrap();
        assert!(on_disk(&fs).contains("host = \"gateway\" # here\nnode = \"build\"\n"));
        let hash = file
            .set_node_binding(&hash, Some("main"), None, &nodes())
            .unwrap();
        file.set_node_binding(&hash, None, None, &nodes()).unwrap();
        assert_eq!(on_disk(&fs), TEXT);
    }

    #[test]
    fn a_file_changed_since_the_page_read_it_is_a_conflict_and_untouched() {
        let (fs, file) = world(Some(TEXT), 0o600);
        let base = file.read().unwrap().hash;
        let edited = format!("{TEXT}# edited by hand\n");
        fs.write(
            &Path::new(HOME).join("config.toml"),
            edited.as_bytes(),
            WriteOptions::default(),
        )
        .unwrap();
        assert_eq!(
            file.set_node_binding(&base, Some("main"), Some("build"), &nodes()),
            Err(BindingError::Conflict)
        );
        assert_eq!(on_disk(&fs), edited);
        // A file created meanwhile is a conflict too.
        let (fs, file) = world(None, 0o600);
        let absent = file.read().unwrap().hash;
        assert_eq!(absent, edit::ABSENT_VERSION);
        fs.write(
            &Path::new(HOME).join("config.toml"),
            TEXT.as_bytes(),
            WriteOptions::default(),
        )
        .unwrap();
        assert_eq!(
            file.set_node_binding(&absent, None, Some("build"), &nodes()),
            Err(BindingError::Conflict)
        );
        assert_eq!(on_disk(&fs), TEXT);
    }

    #[test]
    fn unknown_and_unpaired_nodes_are_refused_and_nothing_changes() {
        let (fs, file) = world(Some(TEXT), 0o600);
        let base = file.read().unwrap().hash;
        for (node, says) in [("nope", "no node \"nope\""), ("gpu", "is pending")] {
            match file.set_node_binding(&base, Some("main"), Some(node), &nodes()) {
                Err(BindingError::Invalid(why)) => assert!(why.contains(says), "{why}"),
                other => panic!("{node}: {other:?}"),
            }
            assert_eq!(on_disk(&fs), TEXT);
        }
        assert!(
            !fs.exists(&Path::new(HOME).join("config.toml.lock"))
                .unwrap()
        );
    }

    #[test]
    fn a_file_that_does_not_parse_or_is_a_symlink_is_never_rewritten() {
        let broken = "[tools.exec]\nhost = \"gateway\"\nbogus = 1 # keep me\n";
        let (fs, file) = world(Some(broken), 0o600);
        let base = file.read().unwrap().hash;
        match file.set_node_binding(&base, None, Some("build"), &nodes()) {
            Err(BindingError::Invalid(why)) => {
                assert!(why.contains("does not parse"), "{why}");
                assert!(why.contains("bogus"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(on_disk(&fs), broken);

        let (fs, file) = world(None, 0o600);
        fs.write(
            Path::new("/elsewhere.toml"),
            TEXT.as_bytes(),
            WriteOptions::default(),
        )
        .unwrap();
        fs.symlink("/elsewhere.toml", Path::new(HOME).join("config.toml"))
            .unwrap();
        let base = file.read().unwrap().hash;
        match file.set_node_binding(&base, None, Some("build"), &nodes()) {
            Err(BindingError::Failed(why)) => assert!(why.contains("not a regular file"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            fs.read_to_string(Path::new("/elsewhere.toml")).unwrap(),
            TEXT
        );
    }

    #[test]
    fn a_missing_file_is_created_private() {
        let (fs, file) = world(None, 0o600);
        file.set_node_binding(edit::ABSENT_VERSION, None, Some("build"), &nodes())
            .unwrap();
        assert_eq!(on_disk(&fs), "[tools.exec]\nnode = \"build\"\n");
        let meta = fs
            .symlink_metadata(&Path::new(HOME).join("config.toml"))
            .unwrap();
        assert_eq!(meta.mode, 0o600);
    }

    #[test]
    fn the_view_shows_each_level_with_its_source_only_when_nodes_exist() {
        let config = Config::parse(
            "[tools.exec]\nnode = \"build box\"\n[[agents.list]]\nid = \"main\"\ntools.exec.node = \"gone\"\n[[agents.list]]\nid = \"ops\"\n",
            Path::new("config.toml"),
        )
        .unwrap();
        assert!(nodes_view(&config, None, &Ok(Arc::new(Vec::new()))).is_none());
        let list = Ok(Arc::new(nodes()));
        let view = serde_json::to_value(nodes_view(&config, None, &list).unwrap()).unwrap();
        assert_eq!(
            view["choices"],
            serde_json::json!([{"id": "build", "label": "Build Box (build)"}])
        );
        assert_eq!(view["notPaired"], serde_json::json!(["gpu — pending"]));
        assert_eq!(view["defaults"]["set"], "build box");
        assert_eq!(view["defaults"]["source"], "global");
        let note = view["defaults"]["note"].as_str().unwrap();
        assert_eq!(note, "names paired node Build Box (build)");
        let main = serde_json::to_value(binding_view(&config, Some("main"), &nodes())).unwrap();
        assert_eq!(main["source"], "agent");
        assert!(
            main["note"]
                .as_str()
                .unwrap()
                .contains("names no paired node")
        );
        let ops = serde_json::to_value(binding_view(&config, Some("ops"), &nodes())).unwrap();
        assert_eq!(ops["set"], serde_json::Value::Null);
        assert_eq!(ops["effective"], "build box");
        assert_eq!(ops["source"], "global");
        // No token ever reaches the page.
        assert!(!view.to_string().contains("wnd_secret"));
        let broken = nodes_view(&config, Some("bad"), &list).unwrap();
        assert!(broken.read_only.unwrap().contains("bad"));
    }
}
