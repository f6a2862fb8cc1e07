//! The web approver's requests: what waits for the human, what runs here, and what was
//! decided lately. The page reads it as JSON built here — every text from the agent
//! escaped by `approvals::display`, exactly as the terminal shows it — and is told of
//! every change through a version counter.
//!
//! A request lives as long as its requester waits: when the runner gives up (timeout,
//! cancellation), the IPC server drops the future and the request leaves the page. An
//! exec request the human allowed is run inside that same future, so a requester that
//! goes away also ends the run.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use approvals::display::{escape, render_prompt};
use approvals::ipc::Approver;
use approvals::ipc::protocol::{Answer, ExecPrompt, ExecReport, Prompt, PromptKind};
use caps::LocalShell;
use serde::Serialize;
use tokio::sync::{oneshot, watch};

use crate::approver_run::{run_here, runner_identity, summary};

/// Decisions kept for the page's "recent" list.
const RECENT: usize = 20;

/// Where a request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Waiting for the human.
    Waiting,
    /// Allowed; this approver is running it.
    Running,
}

struct Entry {
    prompt: Prompt,
    /// True for an exec request: this approver runs it if allowed.
    runs_here: bool,
    phase: Phase,
    received_ms: u64,
    reply: Option<oneshot::Sender<(Answer, Option<usize>)>>,
}

/// One of the scopes "allow always" may store, as the page offers it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AlwaysView {
    /// Its index among the prompt's options: what the answer names
    /// (`allowAlwaysOption`), and, plus one, its number in the prompt's text.
    index: usize,
    /// exact, subcommand or program.
    scope: &'static str,
    /// The rules it stores, escaped, one line each.
    rules: Vec<String>,
    /// The option the runner preselected (`a`).
    preselected: bool,
}

/// A request as the page shows it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingView {
    key: u64,
    id: String,
    digest: String,
    agent: String,
    session: String,
    host: String,
    kind: &'static str,
    /// The whole prompt, exactly as the terminal approver prints it.
    text: String,
    /// The scopes "allow always" may store, the preselected one first; empty: nothing
    /// can be stored.
    allow_always: Vec<AlwaysView>,
    /// For an exec request: who will run it.
    runs_here: Option<String>,
    phase: Phase,
    received_ms: u64,
}

/// A decision as the page shows it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecentView {
    id: String,
    agent: String,
    /// allow-once, allow-always, deny, withdrawn.
    outcome: String,
    note: Option<String>,
    /// For a run here: its summary and output (escaped line by line).
    ran: Option<RanView>,
    at_ms: u64,
}

/// A run this approver performed.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RanView {
    summary: String,
    exit_code: i32,
    stdout: String,
    stderr: String,
}

#[derive(Default)]
struct Inner {
    next_key: u64,
    pending: BTreeMap<u64, Entry>,
    recent: VecDeque<RecentView>,
}

/// The requests of one web approver.
pub struct Queue {
    inner: Mutex<Inner>,
    version: watch::Sender<u64>,
    shell: LocalShell,
}

/// Why an answer from the page was not taken.
#[derive(Debug, PartialEq, Eq)]
pub enum AnswerError {
    /// No such request (answered in another tab, or withdrawn).
    Gone,
    /// The page showed another prompt than the one waiting under this key.
    Digest,
    /// Already answered and running.
    Running,
    /// An allow-always option the prompt did not offer (why); nothing was answered.
    Option(String),
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Escape every line of command output, keeping the line breaks.
fn escape_output(text: &str) -> String {
    text.split('\n').map(escape).collect::<Vec<_>>().join("\n")
}

/// Rules as the human sees them: escaped, one line each.
fn shown_rules(rules: &[policy::RuleSpec]) -> Vec<String> {
    rules.iter().map(|r| escape(&r.describe())).collect()
}

fn answer_name(answer: Answer) -> String {
    match answer {
        Answer::AllowOnce => "allow-once",
        Answer::AllowAlways => "allow-always",
        Answer::Deny => "deny",
    }
    .to_owned()
}

impl Queue {
    /// An empty queue; exec requests run on `shell`.
    pub fn new(shell: LocalShell) -> Queue {
        Queue {
            inner: Mutex::default(),
            version: watch::channel(0).0,
            shell,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn changed(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    /// Told of every change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// What the page shows: waiting and running requests, oldest first, and recent
    /// decisions, newest first.
    pub fn views(&self) -> (Vec<PendingView>, Vec<RecentView>) {
        let inner = self.lock();
        let pending = inner
            .pending
            .iter()
            .map(|(key, e)| {
                let p = &e.prompt;
                let (kind, allow_always) = match &p.kind {
                    PromptKind::Command {
                        allow_always,
                        allow_always_default,
                        ..
                    } => {
                        let mut options: Vec<AlwaysView> = allow_always
                            .iter()
                            .enumerate()
                            .filter(|(_, o)| !o.rules.is_empty())
                            .map(|(index, o)| AlwaysView {
                                index,
                                scope: o.scope.as_str(),
                                rules: shown_rules(&o.rules),
                                preselected: index == *allow_always_default,
                            })
                            .collect();
                        // The preselected scope first (what `a` answers), then the others
                        // in the runner's order, narrowest first.
                        options.sort_by_key(|o| !o.preselected);
                        ("command", options)
                    }
                    PromptKind::Write { .. } => ("write", Vec::new()),
                    PromptKind::Connection { store, .. } => (
                        "connection",
                        store
                            .iter()
                            .map(|rule| AlwaysView {
                                index: 0,
                                scope: "host",
                                rules: vec![escape(&format!("{rule} (egressAllow)"))],
                                preselected: true,
                            })
                            .collect(),
                    ),
                };
                PendingView {
                    key: *key,
                    id: escape(&p.id),
                    digest: p.digest.clone(),
                    agent: escape(&p.agent),
                    session: escape(&p.session),
                    host: escape(&p.host),
                    kind,
                    text: render_prompt(p),
                    allow_always,
                    runs_here: e.runs_here.then(runner_identity),
                    phase: e.phase,
                    received_ms: e.received_ms,
                }
            })
            .collect();
        (pending, inner.recent.iter().cloned().collect())
    }

    fn remember(&self, inner: &mut Inner, recent: RecentView) {
        inner.recent.push_front(recent);
        inner.recent.truncate(RECENT);
    }

    /// The human's answer to request `key`, whose prompt had `digest` on their screen;
    /// with "allow always", `option` is the scope chosen (`None`: the preselected one),
    /// which must be one the prompt offered. "Allow always" for a request that can store
    /// nothing becomes "allow once", and the note says so.
    pub fn answer(
        &self,
        key: u64,
        digest: &str,
        answer: Answer,
        option: Option<usize>,
    ) -> Result<(Answer, Option<String>), AnswerError> {
        let mut inner = self.lock();
        let entry = inner.pending.get_mut(&key).ok_or(AnswerError::Gone)?;
        if entry.prompt.digest != digest {
            return Err(AnswerError::Digest);
        }
        if entry.reply.is_none() {
            return Err(AnswerError::Running);
        }
        let option = match answer {
            Answer::AllowAlways => option,
            _ if option.is_some() => {
                return Err(AnswerError::Option(
                    "an allow-always scope was sent with another answer".into(),
                ));
            }
            _ => None,
        };
        let (answer, note) = match answer {
            Answer::AllowAlways => match entry.prompt.always_stores(option) {
                Err(why) => return Err(AnswerError::Option(why)),
                Ok(stored) if stored.is_empty() => (
                    Answer::AllowOnce,
                    Some("nothing can be stored for this request; allowed once".to_owned()),
                ),
                Ok(stored) => (
                    answer,
                    Some(format!(
                        "stored for {}: {}",
                        escape(&entry.prompt.agent),
                        stored
                            .iter()
                            .map(|s| escape(s))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                ),
            },
            other => (other, None),
        };
        let option = option.filter(|_| answer == Answer::AllowAlways);
        let Some(reply) = entry.reply.take() else {
            return Err(AnswerError::Running);
        };
        // The requester may have gone in between: then nothing is decided.
        if reply.send((answer, option)).is_err() {
            return Err(AnswerError::Gone);
        }
        let allowed = answer != Answer::Deny;
        if entry.runs_here && allowed {
            entry.phase = Phase::Running;
        } else {
            let prompt = entry.prompt.clone();
            inner.pending.remove(&key);
            let recent = RecentView {
                id: escape(&prompt.id),
                agent: escape(&prompt.agent),
                outcome: answer_name(answer),
                note: note.clone(),
                ran: None,
                at_ms: now_ms(),
            };
            self.remember(&mut inner, recent);
        }
        drop(inner);
        self.changed();
        Ok((answer, note))
    }

    /// Put a request on the page and wait for the human (the answer and the
    /// allow-always option chosen); `None` if the page is gone.
    async fn wait(
        &self,
        prompt: &Prompt,
        runs_here: bool,
    ) -> (Slot<'_>, Option<(Answer, Option<usize>)>) {
        let (reply, answered) = oneshot::channel();
        let key = {
            let mut inner = self.lock();
            inner.next_key += 1;
            let key = inner.next_key;
            inner.pending.insert(
                key,
                Entry {
                    prompt: prompt.clone(),
                    runs_here,
                    phase: Phase::Waiting,
                    received_ms: now_ms(),
                    reply: Some(reply),
                },
            );
            key
        };
        self.changed();
        let slot = Slot {
            queue: self,
            key,
            done: false,
        };
        (slot, answered.await.ok())
    }
}

/// A request's place on the page. Dropped before it is done — the requester went away
/// while the human looked, or while the command ran here — it leaves as "withdrawn".
struct Slot<'a> {
    queue: &'a Queue,
    key: u64,
    done: bool,
}

impl Slot<'_> {
    /// The request ended as `outcome`; it leaves the page for the recent list.
    fn finish(mut self, outcome: RecentView) {
        self.done = true;
        let mut inner = self.queue.lock();
        inner.pending.remove(&self.key);
        self.queue.remember(&mut inner, outcome);
        drop(inner);
        self.queue.changed();
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut inner = self.queue.lock();
        if let Some(entry) = inner.pending.remove(&self.key) {
            let note = match entry.phase {
                Phase::Waiting => "the requester gave up before an answer",
                Phase::Running => "the requester went away; the run here was stopped",
            };
            let recent = RecentView {
                id: escape(&entry.prompt.id),
                agent: escape(&entry.prompt.agent),
                outcome: "withdrawn".into(),
                note: Some(note.into()),
                ran: None,
                at_ms: now_ms(),
            };
            self.queue.remember(&mut inner, recent);
            drop(inner);
            self.queue.changed();
        }
    }
}

#[async_trait::async_trait]
impl Approver for Queue {
    async fn decide(&self, prompt: &Prompt) -> (Answer, Option<usize>) {
        // `answer` recorded the decision and took the request off the page.
        let (_slot, answer) = self.wait(prompt, false).await;
        answer.unwrap_or((Answer::Deny, None))
    }

    async fn exec(&self, request: &ExecPrompt) -> (Answer, Option<usize>, Option<ExecReport>) {
        let (slot, answer) = self.wait(&request.prompt, true).await;
        let (answer, option) = answer.unwrap_or((Answer::Deny, None));
        if answer == Answer::Deny {
            return (answer, None, None);
        }
        let report = run_here(request, &self.shell).await;
        slot.finish(RecentView {
            id: escape(&request.prompt.id),
            agent: escape(&request.prompt.agent),
            outcome: answer_name(answer),
            note: Some(match (answer, request.prompt.allow_always_rules(option)) {
                (Answer::AllowAlways, Ok(rules)) if !rules.is_empty() => format!(
                    "ran here by {}; stored for {}: {}",
                    runner_identity(),
                    escape(&request.prompt.agent),
                    shown_rules(rules).join(", ")
                ),
                _ => format!("ran here by {}", runner_identity()),
            }),
            ran: Some(RanView {
                summary: summary(&report),
                exit_code: report.exit_code,
                stdout: escape_output(&report.stdout),
                stderr: escape_output(&report.stderr),
            }),
            at_ms: now_ms(),
        });
        (answer, option, Some(report))
    }
}
