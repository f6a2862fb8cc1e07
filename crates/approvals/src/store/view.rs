//! The policy engine's view of the store for one agent — its ceiling and compiled
//! allowlist — cached by the file's content so that a busy gateway parses and compiles
//! only when the file changed, and built fail-closed.

use std::sync::Arc;

use policy::{Allowlist, HostCeiling};

use super::Store;
use crate::file::ApprovalsFile;

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
pub(super) struct ViewCache {
    pub(super) hash: String,
    pub(super) file: Option<Arc<ApprovalsFile>>,
    pub(super) views: std::collections::HashMap<Option<String>, (HostCeiling, Arc<Allowlist>)>,
}

impl Store {
    /// The policy view for `agent`, fail-closed.
    pub fn host_view(&self, agent: Option<&str>) -> HostView {
        let profiles = match self.profiles() {
            Ok(p) => p,
            Err(e) => {
                return HostView {
                    ceiling: HostCeiling::DENY_ALL,
                    allowlist: Arc::new(Allowlist::default()),
                    file: None,
                    error: Some(e),
                };
            }
        };
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
                let rules = file.rules_for(agent);
                let ceiling = file.ceiling_for(agent);
                let allowlist = Arc::new(Allowlist::compile_rules(
                    &rules,
                    &self.config.home,
                    self.config.case,
                    profiles,
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
}
