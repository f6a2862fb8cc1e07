//! `warden approvals import`: merging an OpenClaw-format approvals file into this host's.

use super::{Store, StoreError, Updated};
use crate::file::{AgentEntry, ApprovalsFile};

impl Store {
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
