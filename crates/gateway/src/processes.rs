//! Runs that outlive the call that started them (`exec` with `yield` or `background`):
//! the table the `process` tool reads, one entry per run, visible only to the agent
//! that started it. A run here is an ordinary run — decided once, at start, on its
//! exact plan, held to the plan's limits, counted in its agent's run slots — whose
//! output is kept in a bounded buffer ([`OUTPUT_BUFFER_BYTES`]) that the agent reads
//! from a cursor, and whose standard input stays open for the agent to write to.
//!
//! A run ends as any run does (its end, its timeout, the gateway's shutdown), when its
//! agent kills it, or when the session that started it ends. A finished run's entry is
//! kept for [`KEEP_FINISHED`] so that its result can still be read (at most
//! [`MAX_FINISHED_PER_AGENT`] per agent, the oldest forgotten first).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use caps::{InputSender, LiveOutput};
use runner::{ExecEvent, RunReport};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::sessions::SessionKey;

/// Output kept per run, most recent last: 1 MiB. A reader further behind is told how
/// many bytes it missed.
pub const OUTPUT_BUFFER_BYTES: usize = 1 << 20;

/// How long a finished run's result stays readable.
pub const KEEP_FINISHED: Duration = Duration::from_secs(15 * 60);

/// Finished runs kept per agent.
pub const MAX_FINISHED_PER_AGENT: usize = 32;

/// Where a run is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ProcessState {
    /// Being decided, or waiting for a human's answer: nothing runs yet.
    Pending,
    /// The command runs.
    Running,
    /// It ended (its result says how: finished, denied, error, cancelled).
    Ended,
}

/// The MCP task (`io.modelcontextprotocol/tasks`) a run's call became: how its client
/// follows it after the call returned.
#[derive(Debug)]
pub struct RunTask {
    /// The task id: 128 random bits, never derived from the run id (which is not secret:
    /// it appears in events and logs).
    pub id: String,
    /// When the task was made.
    pub created_at: SystemTime,
    cancel_requested: AtomicBool,
}

impl RunTask {
    /// A task with a fresh id; `None` when no randomness can be had (no task then: an id
    /// that could be guessed would let another caller read the run).
    pub fn new() -> Option<RunTask> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).ok()?;
        Some(RunTask {
            id: format!("task-{}", policy::hex(&bytes)),
            created_at: SystemTime::now(),
            cancel_requested: AtomicBool::new(false),
        })
    }

    /// Its client asked to cancel it (`tasks/cancel`).
    pub fn cancel_requested(&self) -> bool {
        self.cancel_requested.load(Ordering::Acquire)
    }
}

/// One run in the table.
#[derive(Debug)]
pub struct Process {
    /// The run id (also the report's).
    pub id: String,
    /// Who started it, and in which session.
    pub key: SessionKey,
    /// The command as the agent wrote it.
    pub command: String,
    /// Where it was asked to run (before the decision: `sandbox`, `gateway`, `node`).
    pub host: policy::Host,
    /// When it was started.
    pub started_at: SystemTime,
    /// The terminal it runs on (`exec` `tty`), at its latest size.
    terminal: Mutex<Option<caps::TerminalSize>>,
    started: Instant,
    output: LiveOutput,
    input: InputSender,
    stop: CancellationToken,
    state: Mutex<ProcessState>,
    report: watch::Sender<Option<Arc<RunReport>>>,
    ended_at: Mutex<Option<Instant>>,
    /// Where the last answer about its output stopped (a poll without a cursor goes on
    /// from here).
    read_to: Mutex<u64>,
    /// Since when it waits for a human's answer (`None` when it does not).
    awaiting: watch::Sender<Option<SystemTime>>,
    /// When its state last changed (asked, started, ended).
    updated_at: Mutex<SystemTime>,
    /// The MCP task its call became, if it did.
    task: OnceLock<RunTask>,
    /// The gateway's operator ended it (`warden runs kill`).
    killed_by_operator: AtomicBool,
}

impl Process {
    /// A run about to be started by `key` (its id already chosen).
    pub(crate) fn new(
        id: String,
        key: SessionKey,
        (command, host): (String, policy::Host),
        output: LiveOutput,
        input: InputSender,
        stop: CancellationToken,
    ) -> Self {
        Process {
            id,
            key,
            command,
            host,
            started_at: SystemTime::now(),
            terminal: Mutex::new(None),
            started: Instant::now(),
            output,
            input,
            stop,
            state: Mutex::new(ProcessState::Pending),
            report: watch::channel(None).0,
            ended_at: Mutex::new(None),
            read_to: Mutex::new(0),
            awaiting: watch::channel(None).0,
            updated_at: Mutex::new(SystemTime::now()),
            task: OnceLock::new(),
            killed_by_operator: AtomicBool::new(false),
        }
    }

    /// The operator ends it (`warden runs kill`): as [`Process::kill`], and its agent is
    /// told who ended it.
    pub fn kill_by_operator(&self) {
        self.killed_by_operator.store(true, Ordering::Release);
        self.kill();
    }

    /// Whether the operator ended it.
    pub fn killed_by_operator(&self) -> bool {
        self.killed_by_operator.load(Ordering::Acquire)
    }

    /// Since when it waits for a human's answer; `None` when it does not.
    pub fn awaiting_approval(&self) -> Option<SystemTime> {
        *self.awaiting.borrow()
    }

    /// Resolves once it waits for a human's answer (at once if it does now); never if it
    /// ends without asking.
    pub async fn asks(&self) {
        let mut seen = self.awaiting.subscribe();
        if seen.wait_for(Option::is_some).await.is_err() {
            // The sender lives in `self`: unreachable while `self` is borrowed.
            std::future::pending::<()>().await;
        }
    }

    /// When its state last changed.
    pub fn updated_at(&self) -> SystemTime {
        *self.updated_at.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn touch(&self) {
        *self.updated_at.lock().unwrap_or_else(|p| p.into_inner()) = SystemTime::now();
    }

    /// The MCP task its call became, if it did.
    pub fn task(&self) -> Option<&RunTask> {
        self.task.get()
    }

    /// Its call became `task` (a run's call becomes a task at most once: were it asked
    /// twice, the first stays).
    pub(crate) fn become_task(&self, task: RunTask) -> &RunTask {
        self.task.get_or_init(|| task)
    }

    /// Its task's client asked to cancel it: end it as [`Process::kill`] does, and let
    /// the task say it was cancelled.
    pub fn cancel_task(&self) {
        if let Some(task) = self.task.get() {
            task.cancel_requested.store(true, Ordering::Release);
        }
        self.kill();
    }

    /// It now waits for a human's answer.
    pub(crate) fn saw_asking(&self) {
        self.awaiting.send_replace(Some(SystemTime::now()));
        self.touch();
    }

    /// The question it waited on (about a connection, while it runs) was settled.
    pub(crate) fn saw_answered(&self) {
        self.awaiting.send_replace(None);
        self.touch();
    }

    /// Where the last answer about its output stopped.
    pub fn read_to(&self) -> u64 {
        *self.read_to.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An answer gave its output up to `cursor`.
    pub fn mark_read(&self, cursor: u64) {
        *self.read_to.lock().unwrap_or_else(|p| p.into_inner()) = cursor;
    }

    /// Its output as it arrives.
    pub fn output(&self) -> &LiveOutput {
        &self.output
    }

    /// Its standard input (and its controls: signals, a terminal's size).
    pub fn input(&self) -> &InputSender {
        &self.input
    }

    /// The terminal it runs on, at its latest size; `None` without `tty`.
    pub fn terminal(&self) -> Option<caps::TerminalSize> {
        *self.terminal.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Record the terminal's size (at the start, and after each resize).
    pub(crate) fn set_terminal(&self, size: Option<caps::TerminalSize>) {
        *self.terminal.lock().unwrap_or_else(|p| p.into_inner()) = size;
    }

    /// Where it is in its life.
    pub fn state(&self) -> ProcessState {
        *self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long since it was started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Its result, once it has ended.
    pub fn report(&self) -> Option<Arc<RunReport>> {
        self.report.borrow().clone()
    }

    /// Resolves with its result when it ends.
    pub async fn ended(&self) -> Arc<RunReport> {
        let mut seen = self.report.subscribe();
        loop {
            if let Some(report) = seen.borrow_and_update().clone() {
                return report;
            }
            if seen.changed().await.is_err() {
                // The sender lives in `self`: unreachable while `self` is borrowed.
                std::future::pending::<()>().await;
            }
        }
    }

    /// End it: a pending question is withdrawn, a running command's whole tree killed.
    /// Its result then says it was cancelled.
    pub fn kill(&self) {
        self.stop.cancel();
    }

    /// The token whose cancellation ends it.
    pub(crate) fn stop(&self) -> &CancellationToken {
        &self.stop
    }

    /// Record one of its lifecycle events.
    pub(crate) fn saw(&self, event: &ExecEvent) {
        // Whatever comes after a question ends the wait for its answer.
        self.awaiting.send_replace(None);
        if matches!(event, ExecEvent::Started { .. }) {
            *self.state.lock().unwrap_or_else(|p| p.into_inner()) = ProcessState::Running;
        }
        self.touch();
    }

    /// Record its result.
    pub(crate) fn finish(&self, report: RunReport) {
        self.awaiting.send_replace(None);
        self.touch();
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) = ProcessState::Ended;
        *self.ended_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        self.report.send_replace(Some(Arc::new(report)));
    }

    fn ended_at(&self) -> Option<Instant> {
        *self.ended_at.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Why the `process` tool cannot act on a run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProcessError {
    /// No run of this agent has this id (another agent's runs are not named either).
    #[error(
        "no run {0:?} of yours is known here (it never existed, belongs to another agent, or ended more than 15 minutes ago); `process` with action `list` shows your runs"
    )]
    Unknown(String),
    /// No task of this agent has this id.
    #[error(
        "task {0:?} not found: it never existed, belongs to another caller, or ended more than 15 minutes ago"
    )]
    UnknownTask(String),
}

/// The table of runs that outlive their call.
#[derive(Debug, Default)]
pub struct Processes {
    runs: Mutex<BTreeMap<String, Arc<Process>>>,
}

impl Processes {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Process>>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Add a run.
    pub(crate) fn insert(&self, process: Arc<Process>) {
        let mut runs = self.lock();
        prune(&mut runs, &process.key.agent);
        runs.insert(process.id.clone(), process);
    }

    /// Forget a run (its whole result went back with the call that started it).
    pub(crate) fn remove(&self, id: &str) {
        self.lock().remove(id);
    }

    /// `agent`'s run `id`.
    pub fn get(&self, agent: &str, id: &str) -> Result<Arc<Process>, ProcessError> {
        let mut runs = self.lock();
        prune(&mut runs, agent);
        runs.get(id)
            .filter(|p| p.key.agent == agent)
            .cloned()
            .ok_or_else(|| ProcessError::Unknown(id.to_owned()))
    }

    /// The run of `agent` whose call became task `task_id` (another agent's tasks are
    /// unknown, exactly like tasks that never were).
    pub fn task(&self, agent: &str, task_id: &str) -> Result<Arc<Process>, ProcessError> {
        let mut runs = self.lock();
        prune(&mut runs, agent);
        runs.values()
            .filter(|p| p.key.agent == agent)
            .find(|p| p.task().is_some_and(|t| t.id == task_id))
            .cloned()
            .ok_or_else(|| ProcessError::UnknownTask(task_id.to_owned()))
    }

    /// Every agent's runs, oldest first: the operator's view (`warden runs`), never an
    /// agent's.
    pub fn all(&self) -> Vec<Arc<Process>> {
        let mut runs = self.lock();
        let agents: std::collections::BTreeSet<String> =
            runs.values().map(|p| p.key.agent.clone()).collect();
        for agent in &agents {
            prune(&mut runs, agent);
        }
        let mut all: Vec<Arc<Process>> = runs.values().cloned().collect();
        all.sort_by_key(|p| p.started);
        all
    }

    /// Run `id`, whoever started it: the operator's view.
    pub fn find(&self, id: &str) -> Option<Arc<Process>> {
        self.all().into_iter().find(|p| p.id == id)
    }

    /// `agent`'s runs, oldest first: live ones and those finished recently.
    pub fn of_agent(&self, agent: &str) -> Vec<Arc<Process>> {
        let mut runs = self.lock();
        prune(&mut runs, agent);
        let mut mine: Vec<Arc<Process>> = runs
            .values()
            .filter(|p| p.key.agent == agent)
            .cloned()
            .collect();
        mine.sort_by_key(|p| p.started);
        mine
    }

    /// The session `key` ended: its runs end with it.
    pub fn end_session(&self, key: &SessionKey) {
        self.end_session_after(key, Duration::ZERO);
    }

    /// The runs `key`'s session started and left running end `keep` after the session
    /// did (at once for zero, or where no runtime can wait): meanwhile their agent, in
    /// another session, still sees them and may poll, write to or kill them. The
    /// server's shutdown ends them either way.
    pub fn end_session_after(&self, key: &SessionKey, keep: Duration) {
        let left: Vec<Arc<Process>> = self
            .lock()
            .values()
            .filter(|p| &p.key == key && p.report().is_none())
            .cloned()
            .collect();
        let runtime = tokio::runtime::Handle::try_current();
        match runtime {
            Ok(runtime) if !keep.is_zero() && !left.is_empty() => {
                runtime.spawn(async move {
                    tokio::time::sleep(keep).await;
                    for process in left {
                        process.kill();
                    }
                });
            }
            _ => {
                for process in left {
                    process.kill();
                }
            }
        }
    }
}

/// Forget `agent`'s finished runs older than [`KEEP_FINISHED`], and the oldest past
/// [`MAX_FINISHED_PER_AGENT`].
fn prune(runs: &mut BTreeMap<String, Arc<Process>>, agent: &str) {
    let mut finished: Vec<(Instant, String)> = runs
        .values()
        .filter(|p| p.key.agent == agent)
        .filter_map(|p| p.ended_at().map(|at| (at, p.id.clone())))
        .collect();
    finished.sort();
    let excess = finished.len().saturating_sub(MAX_FINISHED_PER_AGENT);
    for (i, (at, id)) in finished.into_iter().enumerate() {
        if i < excess || at.elapsed() > KEEP_FINISHED {
            runs.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(agent: &str, session: &str, id: &str) -> Arc<Process> {
        let (input, _) = caps::input_channel();
        Arc::new(Process::new(
            id.into(),
            SessionKey {
                agent: agent.into(),
                session: session.into(),
            },
            ("sleep 1".into(), policy::Host::Gateway),
            LiveOutput::new(16),
            input,
            CancellationToken::new(),
        ))
    }

    /// Ended, as far as the table's bookkeeping goes (the result is read in the
    /// gateway's tests, which run real commands).
    fn mark_ended(p: &Process) {
        *p.state.lock().unwrap() = ProcessState::Ended;
        *p.ended_at.lock().unwrap() = Some(Instant::now());
    }

    #[test]
    fn another_agents_run_is_unknown_exactly_like_a_run_that_never_was() {
        let table = Processes::default();
        table.insert(process("a", "s", "run-1"));
        assert!(table.get("a", "run-1").is_ok());
        let theirs = table.get("b", "run-1").unwrap_err();
        let nobodys = table.get("b", "run-2").unwrap_err();
        assert_eq!(
            theirs.to_string().replace("run-1", "X"),
            nobodys.to_string().replace("run-2", "X"),
        );
        assert!(table.of_agent("b").is_empty());
        assert_eq!(table.of_agent("a").len(), 1);
    }

    #[test]
    fn a_session_ending_ends_its_runs_and_no_others() {
        let table = Processes::default();
        let (mine, other, elsewhere) = (
            process("a", "s1", "r1"),
            process("a", "s2", "r2"),
            process("b", "s1", "r3"),
        );
        for p in [&mine, &other, &elsewhere] {
            table.insert(Arc::clone(p));
        }
        table.end_session(&mine.key);
        assert!(mine.stop().is_cancelled());
        assert!(!other.stop().is_cancelled());
        assert!(!elsewhere.stop().is_cancelled());
    }

    #[test]
    fn finished_runs_are_kept_up_to_a_bound() {
        let table = Processes::default();
        for i in 0..MAX_FINISHED_PER_AGENT + 5 {
            let p = process("a", "s", &format!("r{i:03}"));
            mark_ended(&p);
            table.insert(p);
        }
        let live = process("a", "s", "live");
        table.insert(Arc::clone(&live));
        let kept = table.of_agent("a");
        assert_eq!(
            kept.len(),
            MAX_FINISHED_PER_AGENT + 1,
            "the live run is never pruned"
        );
        assert!(
            table.get("a", "r000").is_err(),
            "the oldest finished run went first"
        );
        assert!(table.get("a", "live").is_ok());
    }

    #[test]
    fn a_task_is_found_only_by_its_agent_and_only_by_its_own_id() {
        let table = Processes::default();
        let mine = process("a", "s", "run-1");
        table.insert(Arc::clone(&mine));
        table.insert(process("a", "s", "run-2"));
        let first = RunTask::new().unwrap();
        let id = first.id.clone();
        assert!(id.starts_with("task-") && id.len() == 5 + 32, "{id}");
        assert_ne!(RunTask::new().unwrap().id, id, "ids are random");
        assert_eq!(mine.become_task(first).id, id);
        // A second task for the same run changes nothing.
        assert_eq!(mine.become_task(RunTask::new().unwrap()).id, id);
        assert_eq!(table.task("a", &id).unwrap().id, "run-1");
        let theirs = table.task("b", &id).unwrap_err();
        assert_eq!(theirs, ProcessError::UnknownTask(id.clone()));
        // Neither the run id nor a run without a task is a task.
        assert!(table.task("a", "run-1").is_err());
        assert!(table.task("a", "run-2").is_err());
    }

    #[test]
    fn a_question_is_awaited_until_whatever_comes_next() {
        let p = process("a", "s", "r");
        assert!(p.awaiting_approval().is_none());
        p.saw_asking();
        assert!(p.awaiting_approval().is_some());
        p.saw(&ExecEvent::Started {
            run_id: "r".into(),
            host: runner::RunHost::Gateway,
        });
        assert!(p.awaiting_approval().is_none());
        // Running, a connection's question: awaited until it is settled.
        p.saw_asking();
        assert!(p.awaiting_approval().is_some());
        assert!(
            crate::mcp::process_tool::state_words(&p, None)
                .contains("a connection awaiting operator approval")
        );
        p.saw_answered();
        assert!(p.awaiting_approval().is_none());
        assert!(crate::mcp::process_tool::state_words(&p, None).starts_with("running for"));
    }

    #[test]
    fn a_run_is_running_once_its_command_started() {
        let p = process("a", "s", "r");
        assert_eq!(p.state(), ProcessState::Pending);
        p.saw(&ExecEvent::Started {
            run_id: "r".into(),
            host: runner::RunHost::Gateway,
        });
        assert_eq!(p.state(), ProcessState::Running);
        assert!(p.report().is_none());
    }
}
