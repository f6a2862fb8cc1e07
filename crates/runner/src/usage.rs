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
        let already_recorded = |rule: &policy::RuleSpec, path: &str| {
            file.and_then(|f| {
                [agent.as_str(), approvals::EVERY_AGENT]
                    .into_iter()
                    .filter_map(|a| f.agents.get(a))
                    .find_map(|a| a.allowlist.iter().find(|e| e.rule().same_rule(rule)))
            })
            .is_some_and(|e| {
                e.last_used_command.as_deref() == Some(text.as_str())
                    && e.last_resolved_path.as_deref() == Some(path)
                    && e.last_used_at.is_some_and(|t| {
                        now.saturating_sub(t) < approvals::USAGE_TIME_GRANULARITY_MS
                    })
            })
        };
        let uses: Vec<(policy::RuleSpec, String)> = decided
            .explanation
            .evaluation
            .leaves
            .iter()
            .filter_map(|l| {
                let rule = l.rule.clone()?;
                let path = l.resolved.as_ref()?.path.to_string_lossy().into_owned();
                Some((rule, path))
            })
            .filter(|(rule, path)| !already_recorded(rule, path))
            .collect();
        if uses.is_empty() {
            return;
        }
        let store = self.host.store.clone();
        let recorded = tokio::task::spawn_blocking(move || {
            for (rule, path) in uses {
                if let Err(e) = store.record_rule_use(&agent, &rule, &text, &path, now) {
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
