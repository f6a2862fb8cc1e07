//! Allowlist usage bookkeeping: after an allowlisted command ran, `lastUsedAt`,
//! `lastUsedCommand` and `lastResolvedPath` of every entry that matched are recorded —
//! without rewriting the file when it already says so.

use crate::decide::Decided;
use crate::runner::Runner;

impl Runner {
    /// Record the use of every pattern that matched, off the async threads.
    pub(crate) async fn record_usage(&self, decided: &Decided) {
        let agent = decided.request.agent.clone();
        let now = self.host.clock.now_ms();
        let text = decided.request.command.display();
        let file = decided.view.file.as_deref();
        // Skip the locked read-modify-write when the file already says this (the store
        // would write nothing anyway).
        let already_recorded = |pattern: &str, path: &str| {
            file.and_then(|f| f.agents.get(&agent))
                .and_then(|a| a.allowlist.iter().find(|e| e.pattern == pattern))
                .is_some_and(|e| {
                    e.last_used_command.as_deref() == Some(text.as_str())
                        && e.last_resolved_path.as_deref() == Some(path)
                        && e.last_used_at.is_some_and(|t| {
                            now.saturating_sub(t) < approvals::USAGE_TIME_GRANULARITY_MS
                        })
                })
        };
        let uses: Vec<(String, String)> = decided
            .explanation
            .evaluation
            .leaves
            .iter()
            .filter_map(|l| {
                let pattern = l.matched.clone()?;
                let path = l.resolved.as_ref()?.path.to_string_lossy().into_owned();
                Some((pattern, path))
            })
            .filter(|(pattern, path)| !already_recorded(pattern, path))
            .collect();
        if uses.is_empty() {
            return;
        }
        let store = self.host.store.clone();
        let recorded = tokio::task::spawn_blocking(move || {
            for (pattern, path) in uses {
                if let Err(e) = store.record_use(&agent, &pattern, &text, &path, now) {
                    tracing::warn!("could not record allowlist usage: {e}");
                }
            }
        })
        .await;
        if let Err(e) = recorded {
            tracing::warn!("usage recording task failed: {e}");
        }
    }
}
