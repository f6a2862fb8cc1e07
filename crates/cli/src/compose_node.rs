//! Composition of a node: the same runner as the gateway host — this machine's files,
//! this node's own approvals file and approver socket, its config, its containment —
//! with `host = node` runs executed directly and reported under the node's id. The
//! Bridge serving loop (`bridge::serve_node`) gets it as a value.

use std::path::Path;
use std::sync::Arc;

use bridge::NodeService;
use caps::{LocalShell, Shell};
use runner::{Executor, RunHost, Runner};

use crate::host::HostFacts;

impl HostFacts {
    /// The node service of this machine as node `node_id`, starting requests without a
    /// working directory in `workspace` (default: the current directory).
    pub fn node_service(
        &self,
        node_id: &str,
        workspace: Option<&Path>,
    ) -> anyhow::Result<NodeService> {
        let config = self.config()?;
        let store = self.store();
        let workspace = self.workspace(workspace)?;
        let host = self.runner_host(
            &store,
            self.live_config(config),
            &workspace,
            self.own_directories(&store),
        );
        let containment = self.containment()?;
        containment.keep_ready();
        let shell: Arc<dyn Shell> = Arc::new(LocalShell::contained(containment));
        Ok(NodeService {
            node_id: node_id.to_owned(),
            runner: Runner::new(host),
            executor: Executor::Plain {
                shell,
                host: RunHost::Node(node_id.to_owned()),
            },
            fs: self.fs(),
            trusted_path: self.trusted_path.clone(),
            default_cwd: workspace,
            store,
        })
    }

    /// This machine's node state (`node.json`).
    pub fn node_state(&self) -> bridge::NodeStateStore {
        bridge::NodeStateStore::new(self.fs(), self.warden_home.clone())
    }

    /// This gateway's node registry (`nodes.json`).
    pub fn node_registry(&self) -> bridge::Registry {
        bridge::Registry::new(self.fs(), self.warden_home.clone())
    }
}
