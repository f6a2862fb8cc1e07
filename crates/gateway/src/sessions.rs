//! Per-agent, per-session state held by the gateway: the slash-command overrides and a
//! bounded queue of system events, delivered with the session's next interaction.
//!
//! Events are kept typed until they are delivered, so that what the agent already knows
//! is not told twice: a run whose result went back to the agent in its own response
//! (marked with [`Sessions::mark_delivered`]) is reported by one line, its finish, with no
//! output; runs the agent has not seen (cancelled callers, runs that outlived their
//! request) keep their started event and their output tail.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use policy::SessionOverrides;
use runner::{EventSink, ExecEvent};

/// Events kept per session; older ones are dropped (and counted) past this.
pub const MAX_EVENTS_PER_SESSION: usize = 100;

/// Sessions kept at once. A client that never ends its sessions (HTTP clients come and
/// go) must not grow the gateway without bound: past this, the least recently used
/// session is forgotten, with its overrides and undelivered events.
pub const MAX_SESSIONS: usize = 1024;

/// Which agent's which session.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SessionKey {
    /// Agent id.
    pub agent: String,
    /// Session id.
    pub session: String,
}

/// Runs remembered per session as delivered with their own result.
const DELIVERED_RUNS: usize = 64;

/// One queued event.
#[derive(Clone, Debug)]
enum Pending {
    /// A run's lifecycle event.
    Exec(ExecEvent),
    /// Anything else, as text.
    Text(String),
}

#[derive(Debug, Default)]
struct SessionState {
    overrides: SessionOverrides,
    events: VecDeque<Pending>,
    dropped: usize,
    last_used: u64,
    /// Runs whose result the agent received in their own response (newest last).
    delivered: VecDeque<String>,
}

impl SessionState {
    fn push(&mut self, event: Pending) {
        if self.events.len() >= MAX_EVENTS_PER_SESSION {
            self.events.pop_front();
            self.dropped += 1;
        }
        self.events.push_back(event);
    }

    /// The text of one event, as the agent should read it now.
    fn render(&self, event: &Pending) -> Option<String> {
        match event {
            Pending::Text(text) => Some(text.clone()),
            Pending::Exec(event) if !self.delivered.iter().any(|r| r == event.run_id()) => {
                Some(event.text())
            }
            // The agent saw the run start and end in its own call.
            Pending::Exec(ExecEvent::Started { .. }) => None,
            Pending::Exec(event) => Some(event.text_without_output()),
        }
    }
}

#[derive(Debug, Default)]
struct Table {
    map: HashMap<SessionKey, SessionState>,
    clock: u64,
}

/// All live sessions.
#[derive(Debug, Default)]
pub struct Sessions {
    inner: Mutex<Table>,
}

impl Sessions {
    /// Run `f` on the session, creating it (and evicting the least recently used one
    /// when full) if it does not exist.
    fn with<R>(&self, key: &SessionKey, f: impl FnOnce(&mut SessionState) -> R) -> R {
        let mut table = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        table.clock += 1;
        let now = table.clock;
        if !table.map.contains_key(key) && table.map.len() >= MAX_SESSIONS {
            let oldest = table
                .map
                .iter()
                .min_by_key(|(_, s)| s.last_used)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                table.map.remove(&oldest);
            }
        }
        let state = table.map.entry(key.clone()).or_default();
        state.last_used = now;
        f(state)
    }

    /// Run `f` on the session if it exists (reads never create one).
    fn read<R: Default>(&self, key: &SessionKey, f: impl FnOnce(&mut SessionState) -> R) -> R {
        let mut table = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        table.map.get_mut(key).map(f).unwrap_or_default()
    }

    /// Forget a session that ended: its overrides and undelivered events.
    pub fn forget(&self, key: &SessionKey) {
        let mut table = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        table.map.remove(key);
    }

    /// The session's overrides.
    pub fn overrides(&self, key: &SessionKey) -> SessionOverrides {
        self.read(key, |s| s.overrides.clone())
    }

    /// Replace the session's overrides.
    pub fn set_overrides(&self, key: &SessionKey, overrides: SessionOverrides) {
        self.with(key, |s| s.overrides = overrides);
    }

    /// `enqueueSystemEvent`: add an event text to the session's queue (bounded).
    pub fn enqueue_system_event(&self, key: &SessionKey, text: String) {
        self.with(key, |s| s.push(Pending::Text(text)));
    }

    /// Add a run's lifecycle event to the session's queue (bounded).
    pub fn enqueue_exec_event(&self, key: &SessionKey, event: ExecEvent) {
        self.with(key, |s| s.push(Pending::Exec(event)));
    }

    /// The agent received `run_id`'s result in the response to its own call: its events
    /// shrink to one line without output.
    pub fn mark_delivered(&self, key: &SessionKey, run_id: &str) {
        self.read(key, |s| {
            if s.delivered.len() >= DELIVERED_RUNS {
                s.delivered.pop_front();
            }
            s.delivered.push_back(run_id.to_owned());
        })
    }

    /// Take (and clear) the session's pending events, as text.
    pub fn take_events(&self, key: &SessionKey) -> Vec<String> {
        self.read(key, |s| {
            let mut out = Vec::with_capacity(s.events.len() + 1);
            if s.dropped > 0 {
                out.push(format!(
                    "({} earlier system events were dropped)",
                    s.dropped
                ));
                s.dropped = 0;
            }
            let events: Vec<Pending> = s.events.drain(..).collect();
            out.extend(events.iter().filter_map(|e| s.render(e)));
            out
        })
    }

    /// Put back events taken for a call that then failed, ahead of anything queued
    /// since, so they are delivered with the next interaction instead of lost.
    pub fn return_events(&self, key: &SessionKey, events: Vec<String>) {
        if events.is_empty() {
            return;
        }
        self.with(key, |s| {
            for event in events.into_iter().rev() {
                s.events.push_front(Pending::Text(event));
            }
            while s.events.len() > MAX_EVENTS_PER_SESSION {
                s.events.pop_front();
                s.dropped += 1;
            }
        });
    }

    /// End a session: its overrides and events are gone.
    pub fn end(&self, key: &SessionKey) {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map
            .remove(key);
    }
}

/// Routes a run's events to the session that dispatched it — never to one the event
/// names itself.
pub struct SessionEvents<'a> {
    /// The session store.
    pub sessions: &'a Sessions,
    /// The dispatching session.
    pub key: SessionKey,
}

impl EventSink for SessionEvents<'_> {
    fn emit(&self, event: ExecEvent) {
        self.sessions.enqueue_exec_event(&self.key, event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> SessionKey {
        SessionKey {
            agent: "a".into(),
            session: s.into(),
        }
    }

    #[test]
    fn reads_create_nothing_and_old_sessions_are_forgotten_past_the_cap() {
        let s = Sessions::default();
        assert!(s.take_events(&key("ghost")).is_empty());
        assert_eq!(s.inner.lock().unwrap().map.len(), 0);
        for i in 0..MAX_SESSIONS + 10 {
            s.enqueue_system_event(&key(&i.to_string()), format!("e{i}"));
        }
        assert_eq!(s.inner.lock().unwrap().map.len(), MAX_SESSIONS);
        assert!(s.take_events(&key("0")).is_empty(), "the oldest went first");
        let last = (MAX_SESSIONS + 9).to_string();
        assert_eq!(s.take_events(&key(&last)), vec![format!("e{last}")]);
    }

    #[test]
    fn returned_events_come_first_next_time() {
        let s = Sessions::default();
        s.enqueue_system_event(&key("1"), "old".into());
        let taken = s.take_events(&key("1"));
        s.enqueue_system_event(&key("1"), "new".into());
        s.return_events(&key("1"), taken);
        assert_eq!(s.take_events(&key("1")), vec!["old", "new"]);
    }

    #[test]
    fn events_are_per_session_delivered_once_and_bounded() {
        let s = Sessions::default();
        s.enqueue_system_event(&key("1"), "one".into());
        s.enqueue_system_event(&key("2"), "two".into());
        assert_eq!(s.take_events(&key("1")), vec!["one"]);
        assert!(s.take_events(&key("1")).is_empty());
        assert_eq!(s.take_events(&key("2")), vec!["two"]);
        for i in 0..(MAX_EVENTS_PER_SESSION + 5) {
            s.enqueue_system_event(&key("3"), format!("e{i}"));
        }
        let got = s.take_events(&key("3"));
        assert_eq!(got.len(), MAX_EVENTS_PER_SESSION + 1);
        assert_eq!(got[0], "(5 earlier system events were dropped)");
        assert_eq!(got[1], "e5");
    }

    fn finished(run: &str) -> ExecEvent {
        ExecEvent::Finished {
            run_id: run.into(),
            host: runner::RunHost::Gateway,
            code: 0,
            signal: None,
            timed_out: false,
            cancelled: false,
            tail: "out\n".into(),
        }
    }

    #[test]
    fn a_run_delivered_with_its_own_result_is_one_line_without_output() {
        let s = Sessions::default();
        for run in ["seen", "unseen"] {
            s.enqueue_exec_event(
                &key("1"),
                ExecEvent::Started {
                    run_id: run.into(),
                    host: runner::RunHost::Gateway,
                },
            );
            s.enqueue_exec_event(&key("1"), finished(run));
        }
        s.mark_delivered(&key("1"), "seen");
        assert_eq!(
            s.take_events(&key("1")),
            vec![
                "Exec finished (node=gateway, id=seen, code=0)".to_owned(),
                "Exec started (node=gateway, id=unseen)".to_owned(),
                "Exec finished (node=gateway, id=unseen, code=0)\nout\n".to_owned(),
            ]
        );
    }

    #[test]
    fn ending_a_session_forgets_its_overrides() {
        let s = Sessions::default();
        let o = SessionOverrides {
            host: Some(policy::Host::Gateway),
            ..Default::default()
        };
        s.set_overrides(&key("1"), o.clone());
        assert_eq!(s.overrides(&key("1")), o);
        s.end(&key("1"));
        assert_eq!(s.overrides(&key("1")), SessionOverrides::default());
    }
}
