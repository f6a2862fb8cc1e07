//! Per-agent, per-session state held by the gateway: the slash-command overrides and a
//! bounded queue of system events, delivered with the session's next interaction.
//!
//! Each agent's sessions are kept apart, with a quota of their own: no agent's use can
//! push another agent's state (its `/exec security=deny`, say) out. A session exists
//! from its start ([`Sessions::open`]: the MCP session was created, the stdio server
//! started, a stateless call named the agent's default session) until it ends ([`Sessions::forget`]); an event for a session that has ended is
//! delivered nowhere — it never brings the session back with default settings.
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

/// Sessions one agent may have state for at once, unless its MCP session cap asks for
/// more. An agent that never ends its sessions must not grow the gateway without bound:
/// past this, *its own* least recently used session is forgotten, with its overrides and
/// undelivered events. (Its MCP sessions are capped lower, at 16 by default, so a live
/// one is not forgotten this way.)
pub const MAX_SESSIONS_PER_AGENT: usize = 64;

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

/// One agent's sessions.
#[derive(Debug, Default)]
struct AgentSessions {
    map: HashMap<String, SessionState>,
}

#[derive(Debug, Default)]
struct Table {
    agents: HashMap<String, AgentSessions>,
    clock: u64,
}

/// All live sessions.
#[derive(Debug)]
pub struct Sessions {
    inner: Mutex<Table>,
    per_agent: usize,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions::with_quota(MAX_SESSIONS_PER_AGENT)
    }
}

impl Sessions {
    /// Sessions with room for `per_agent` sessions of each agent.
    pub fn with_quota(per_agent: usize) -> Self {
        Sessions {
            inner: Mutex::default(),
            per_agent: per_agent.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Run `f` on the session, creating it if it does not exist — when the agent is at
    /// its quota, after forgetting *its own* least recently used session.
    fn with<R>(&self, key: &SessionKey, f: impl FnOnce(&mut SessionState) -> R) -> R {
        let mut table = self.lock();
        table.clock += 1;
        let now = table.clock;
        let agent = table.agents.entry(key.agent.clone()).or_default();
        if !agent.map.contains_key(&key.session) && agent.map.len() >= self.per_agent {
            let oldest = agent
                .map
                .iter()
                .min_by_key(|(_, s)| s.last_used)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                agent.map.remove(&oldest);
            }
        }
        let state = agent.map.entry(key.session.clone()).or_default();
        state.last_used = now;
        f(state)
    }

    /// Run `f` on the session if it exists (never creating one); reading counts as use.
    fn read<R: Default>(&self, key: &SessionKey, f: impl FnOnce(&mut SessionState) -> R) -> R {
        let mut table = self.lock();
        table.clock += 1;
        let now = table.clock;
        table
            .agents
            .get_mut(&key.agent)
            .and_then(|a| a.map.get_mut(&key.session))
            .map(|state| {
                state.last_used = now;
                f(state)
            })
            .unwrap_or_default()
    }

    /// A session starts (or goes on): its state exists from now until it is forgotten.
    pub fn open(&self, key: &SessionKey) {
        self.with(key, |_| ());
    }

    /// Whether the session has state now.
    pub fn is_open(&self, key: &SessionKey) -> bool {
        self.lock()
            .agents
            .get(&key.agent)
            .is_some_and(|a| a.map.contains_key(&key.session))
    }

    /// Sessions with state, of every agent.
    pub fn len(&self) -> usize {
        self.lock().agents.values().map(|a| a.map.len()).sum()
    }

    /// Sessions of `agent` with state.
    pub fn of_agent(&self, agent: &str) -> usize {
        self.lock().agents.get(agent).map_or(0, |a| a.map.len())
    }

    /// True when no session has state.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forget a session that ended: its overrides and undelivered events. What arrives
    /// for it later goes nowhere.
    pub fn forget(&self, key: &SessionKey) {
        let mut table = self.lock();
        if let Some(agent) = table.agents.get_mut(&key.agent) {
            agent.map.remove(&key.session);
            if agent.map.is_empty() {
                table.agents.remove(&key.agent);
            }
        }
    }

    /// The session's overrides.
    pub fn overrides(&self, key: &SessionKey) -> SessionOverrides {
        self.read(key, |s| s.overrides.clone())
    }

    /// Replace the session's overrides. False (and nothing changes) when the session
    /// has ended.
    pub fn set_overrides(&self, key: &SessionKey, overrides: SessionOverrides) -> bool {
        self.read(key, |s| {
            s.overrides = overrides;
            true
        })
    }

    /// `enqueueSystemEvent`: add an event text to the session's queue (bounded); a
    /// session that has ended gets nothing.
    pub fn enqueue_system_event(&self, key: &SessionKey, text: String) {
        self.read(key, |s| s.push(Pending::Text(text)));
    }

    /// Add a run's lifecycle event to the session's queue (bounded); a session that has
    /// ended gets nothing (a late `finished` of a cancelled run does not bring it back).
    pub fn enqueue_exec_event(&self, key: &SessionKey, event: ExecEvent) {
        self.read(key, |s| s.push(Pending::Exec(event)));
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
        self.read(key, |s| {
            for event in events.into_iter().rev() {
                s.events.push_front(Pending::Text(event));
            }
            while s.events.len() > MAX_EVENTS_PER_SESSION {
                s.events.pop_front();
                s.dropped += 1;
            }
        });
    }

    /// End a session: its overrides and events are gone (as [`Sessions::forget`]).
    pub fn end(&self, key: &SessionKey) {
        self.forget(key);
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

    fn opened(sessions: &[&str]) -> Sessions {
        let s = Sessions::default();
        for session in sessions {
            s.open(&key(session));
        }
        s
    }

    fn of(agent: &str, session: &str) -> SessionKey {
        SessionKey {
            agent: agent.into(),
            session: session.into(),
        }
    }

    #[test]
    fn reads_and_events_create_nothing() {
        let s = Sessions::default();
        assert!(s.take_events(&key("ghost")).is_empty());
        s.enqueue_system_event(&key("ghost"), "boo".into());
        s.enqueue_exec_event(&key("ghost"), finished("late"));
        s.mark_delivered(&key("ghost"), "late");
        s.return_events(&key("ghost"), vec!["back".into()]);
        assert_eq!(s.overrides(&key("ghost")), SessionOverrides::default());
        assert!(s.is_empty(), "nothing brought a session into being");
    }

    #[test]
    fn a_forgotten_session_stays_forgotten() {
        let s = opened(&["1"]);
        let gateway = SessionOverrides {
            host: Some(policy::Host::Gateway),
            ..Default::default()
        };
        assert!(s.set_overrides(&key("1"), gateway.clone()));
        s.forget(&key("1"));
        assert!(!s.set_overrides(&key("1"), gateway), "a late slash command");
        // A cancelled run's late events arrive after the end.
        s.enqueue_exec_event(&key("1"), finished("late"));
        assert!(!s.is_open(&key("1")));
        assert!(s.take_events(&key("1")).is_empty());
        assert!(s.is_empty());
    }

    #[test]
    fn one_agents_churn_never_evicts_anothers_state() {
        let s = Sessions::default();
        let deny = SessionOverrides {
            security: Some(policy::Security::Deny),
            ..Default::default()
        };
        s.open(&of("b", "live"));
        s.set_overrides(&of("b", "live"), deny.clone());
        for i in 0..(MAX_SESSIONS_PER_AGENT * 10) {
            let k = of("a", &i.to_string());
            s.open(&k);
            s.enqueue_system_event(&k, format!("e{i}"));
        }
        assert_eq!(s.overrides(&of("b", "live")), deny);
        assert_eq!(s.len(), MAX_SESSIONS_PER_AGENT + 1);
        // Past its quota, the churning agent lost its own oldest sessions.
        assert!(!s.is_open(&of("a", "0")));
        let last = (MAX_SESSIONS_PER_AGENT * 10 - 1).to_string();
        assert_eq!(s.take_events(&of("a", &last)), vec![format!("e{last}")]);
    }

    #[test]
    fn reading_a_session_counts_as_use() {
        let s = Sessions::with_quota(2);
        s.open(&key("old"));
        s.open(&key("newer"));
        // Read the older one: now "newer" is the least recently used.
        s.overrides(&key("old"));
        s.open(&key("third"));
        assert!(s.is_open(&key("old")));
        assert!(!s.is_open(&key("newer")));
    }

    #[test]
    fn returned_events_come_first_next_time() {
        let s = opened(&["1"]);
        s.enqueue_system_event(&key("1"), "old".into());
        let taken = s.take_events(&key("1"));
        s.enqueue_system_event(&key("1"), "new".into());
        s.return_events(&key("1"), taken);
        assert_eq!(s.take_events(&key("1")), vec!["old", "new"]);
    }

    #[test]
    fn events_are_per_session_delivered_once_and_bounded() {
        let s = opened(&["1", "2", "3"]);
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
        let s = opened(&["1"]);
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
        let s = opened(&["1"]);
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
