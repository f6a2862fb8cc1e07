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
    reply: Option<oneshot::Sender<Answer>>,
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
    /// The rules "allow always" stores (escaped); empty: nothing can be stored.
    allow_always: Vec<String>,
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
                    PromptKind::Command { allow_always, .. } => {
                        ("command", allow_always.iter().map(|s| escape(s)).collect())
                    }
                    PromptKind::Write { .. } => ("write", Vec::new()),
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

    /// The human's answer to request `key`, whose prompt had `digest` on their screen.
    /// "Allow always" for a request that can store nothing becomes "allow once", and the
    /// note says so.
    pub fn answer(
        &self,
        key: u64,
        digest: &str,
        answer: Answer,
    ) -> Result<(Answer, Option<String>), AnswerError> {
        let mut inner = self.lock();
        let entry = inner.pending.get_mut(&key).ok_or(AnswerError::Gone)?;
        if entry.prompt.digest != digest {
            return Err(AnswerError::Digest);
        }
        let reply = entry.reply.take().ok_or(AnswerError::Running)?;
        let storable = matches!(&entry.prompt.kind, PromptKind::Command { allow_always, .. } if !allow_always.is_empty());
        let (answer, note) = match answer {
            Answer::AllowAlways if !storable => (
                Answer::AllowOnce,
                Some("nothing can be stored for this request; allowed once".to_owned()),
            ),
            Answer::AllowAlways => {
                let PromptKind::Command { allow_always, .. } = &entry.prompt.kind else {
                    unreachable!("storable is a command")
                };
                let shown: Vec<String> = allow_always.iter().map(|s| escape(s)).collect();
                (
                    answer,
                    Some(format!(
                        "stored for {}: {}",
                        escape(&entry.prompt.agent),
                        shown.join(", ")
                    )),
                )
            }
            other => (other, None),
        };
        // The requester may have gone in between: then nothing is decided.
        if reply.send(answer).is_err() {
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

    /// Put a request on the page and wait for the human; `None` if the page is gone.
    async fn wait(&self, prompt: &Prompt, runs_here: bool) -> (Slot<'_>, Option<Answer>) {
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
    async fn decide(&self, prompt: &Prompt) -> Answer {
        // `answer` recorded the decision and took the request off the page.
        let (_slot, answer) = self.wait(prompt, false).await;
        answer.unwrap_or(Answer::Deny)
    }

    async fn exec(&self, request: &ExecPrompt) -> (Answer, Option<ExecReport>) {
        let (slot, answer) = self.wait(&request.prompt, true).await;
        let answer = answer.unwrap_or(Answer::Deny);
        if answer == Answer::Deny {
            return (answer, None);
        }
        let report = run_here(request, &self.shell).await;
        slot.finish(RecentView {
            id: escape(&request.prompt.id),
            agent: escape(&request.prompt.agent),
            outcome: answer_name(answer),
            note: Some(format!("ran here by {}", runner_identity())),
            ran: Some(RanView {
                summary: summary(&report),
                exit_code: report.exit_code,
                stdout: escape_output(&report.stdout),
                stderr: escape_output(&report.stderr),
            }),
            at_ms: now_ms(),
        });
        (answer, Some(report))
    }
}
