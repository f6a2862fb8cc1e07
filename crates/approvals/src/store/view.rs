//! The policy engine's view of the store for one agent — its ceiling and compiled
//! allowlist — cached by the file's content so that a busy gateway parses and compiles
//! only when the file changed, and built fail-closed.

use std::sync::Arc;

use policy::{Allowlist, HostCeiling};

use super::{Store, StoreError};
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
    /// Why the file as it is now is not in force, when an earlier good version of it is
    /// (an edit that is not a valid document, read by a process that had read a good one).
    pub notice: Option<String>,
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
            Err(e) => return Self::unusable(e),
        };
        // An edit that is not a valid document, in a file that is still safely owned: a
        // process that has read a good version keeps using it (a typo must not stop a
        // running gateway), and says so in every result until it is fixed. Unsafe
        // ownership or permissions are never served this way.
        let (file, hash, notice) = match self.load_shared() {
            Ok((file, hash)) => (file, hash, None),
            Err(StoreError::Corrupt {
                path,
                message,
                kept_at,
            }) => match self.last_good() {
                Some((file, hash)) => {
                    let notice = format!(
                        "{} is corrupt: {message} — the edit is not in force (a copy is kept at {}); this process keeps the last good version in force until the file is fixed",
                        path.display(),
                        kept_at.display()
                    );
                    (file, hash, Some(notice))
                }
                None => {
                    let e = StoreError::Corrupt {
                        path,
                        message,
                        kept_at,
                    };
                    return Self::unusable(e.to_string());
                }
            },
            Err(e) => return Self::unusable(e.to_string()),
        };
        let (ceiling, allowlist) = self.compiled(&file, &hash, agent, &profiles);
        HostView {
            ceiling,
            allowlist,
            file: Some(file),
            error: None,
            notice,
        }
    }

    /// The view of a store that cannot be used: everything denied, saying why.
    fn unusable(error: String) -> HostView {
        HostView {
            ceiling: HostCeiling::DENY_ALL,
            allowlist: Arc::new(Allowlist::default()),
            file: None,
            error: Some(error),
            notice: None,
        }
    }

    /// The last document this store parsed, with its hash, if any.
    fn last_good(&self) -> Option<(Arc<ApprovalsFile>, String)> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .file
            .as_ref()
            .map(|file| (Arc::clone(file), cache.hash.clone()))
    }

    /// `agent`'s ceiling and compiled allowlist in `file` (whose hash is `hash`), from
    /// the cache when it holds them for that content.
    fn compiled(
        &self,
        file: &ApprovalsFile,
        hash: &str,
        agent: Option<&str>,
        profiles: &Arc<policy::Profiles>,
    ) -> (HostCeiling, Arc<Allowlist>) {
        let key = agent.map(str::to_owned);
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.hash == hash
            && let Some((ceiling, allowlist)) = cache.views.get(&key)
        {
            return (*ceiling, Arc::clone(allowlist));
        }
        let rules = file.rules_for(agent);
        let ceiling = file.ceiling_for(agent);
        let allowlist = Arc::new(Allowlist::compile_rules(
            &rules,
            &self.config.home,
            self.config.case,
            Arc::clone(profiles),
        ));
        if cache.hash == hash {
            cache.views.insert(key, (ceiling, Arc::clone(&allowlist)));
        }
        (ceiling, allowlist)
    }
}
