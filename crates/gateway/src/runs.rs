//! Per-agent admission of runs: how many commands one agent may have in progress at once
//! (deciding, waiting for a human, running) over every path — stdio, stateful and
//! stateless HTTP. A slot is a guard: it is given back however the run ends (finished,
//! failed, cancelled, its client gone, its future dropped), so an agent's count always
//! returns to zero.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Runs one agent may have in progress at once, unless configured
/// (`[gateway] max_runs_per_agent`).
pub const DEFAULT_RUNS_PER_AGENT: usize = 16;

/// The per-agent counts.
#[derive(Debug)]
pub struct RunSlots {
    limit: usize,
    counts: Arc<Mutex<HashMap<String, usize>>>,
}

impl Default for RunSlots {
    fn default() -> Self {
        RunSlots::new(DEFAULT_RUNS_PER_AGENT)
    }
}

fn lock(
    counts: &Mutex<HashMap<String, usize>>,
) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
    counts.lock().unwrap_or_else(|p| p.into_inner())
}

impl RunSlots {
    /// Room for `limit` runs per agent (at least one).
    pub fn new(limit: usize) -> Self {
        RunSlots {
            limit: limit.max(1),
            counts: Arc::default(),
        }
    }

    /// The configured limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// A slot for one of `agent`'s runs, or `None` when it has `limit` in progress.
    pub fn take(&self, agent: &str) -> Option<RunSlot> {
        let mut counts = lock(&self.counts);
        let n = counts.entry(agent.to_owned()).or_default();
        if *n >= self.limit {
            return None;
        }
        *n += 1;
        Some(RunSlot {
            counts: Arc::clone(&self.counts),
            agent: agent.to_owned(),
        })
    }

    /// `agent`'s runs in progress now.
    pub fn in_progress(&self, agent: &str) -> usize {
        lock(&self.counts).get(agent).copied().unwrap_or(0)
    }
}

/// One run in progress; dropping it gives the slot back.
#[derive(Debug)]
pub struct RunSlot {
    counts: Arc<Mutex<HashMap<String, usize>>>,
    agent: String,
}

impl Drop for RunSlot {
    fn drop(&mut self) {
        let mut counts = lock(&self.counts);
        if let Some(n) = counts.get_mut(&self.agent) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.agent);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_per_agent_and_given_back_on_drop() {
        let slots = RunSlots::new(2);
        let a1 = slots.take("a").unwrap();
        let a2 = slots.take("a").unwrap();
        assert!(slots.take("a").is_none(), "a is at its limit");
        let b = slots.take("b").expect("b has slots of its own");
        assert_eq!((slots.in_progress("a"), slots.in_progress("b")), (2, 1));
        drop(a1);
        let a3 = slots.take("a").unwrap();
        drop((a2, a3, b));
        assert_eq!((slots.in_progress("a"), slots.in_progress("b")), (0, 0));
        assert!(
            lock(&slots.counts).is_empty(),
            "no agent is remembered at zero"
        );
    }

    #[test]
    fn a_slot_held_by_a_dropped_future_comes_back() {
        let slots = Arc::new(RunSlots::new(1));
        let held = Arc::clone(&slots);
        let work = async move {
            let _slot = held.take("a").unwrap();
            std::future::pending::<()>().await;
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            let _ = tokio::time::timeout(std::time::Duration::from_millis(10), work).await;
        });
        assert_eq!(slots.in_progress("a"), 0);
    }
}
