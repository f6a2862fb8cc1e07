//! MCP Tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663) for `exec`. A
//! client that declares the extension on its call gets a task handle instead of a result
//! when the call would otherwise keep it waiting: as soon as the run waits for a human
//! approver, or once it runs past the call's `yield` ([`TASK_AFTER`] without one). A run
//! that ends first answers as it always did. The client then follows the task with
//! `tasks/get` (its state in words — "awaiting operator approval", "running for 42.0 s"
//! — and, once ended, the very result the call would have returned), `tasks/cancel`
//! (withdraws a pending question, kills a running command's whole tree) and
//! `tasks/update` (acknowledged: Warden never asks the client for input).
//!
//! A task is its run: the run stays in the `process` tool's table under the same rules
//! (its agent only, its limits, its session's end, kept 15 minutes after it ends), and its
//! task id — 128 random bits, unlike the run id — is what a client must present. Another
//! agent's task id is "not found", exactly like one that never was.

use std::time::{Duration, SystemTime};

use rmcp::model::{
    CallToolResponse, CreateTaskResult, DetailedTask, GetTaskResult, JsonObject, Task, TaskPayload,
    TaskStatus,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use runner::{ExecRequest, Outcome};

use super::process_tool::{Waited, state_words};
use super::{WardenMcp, result};
use crate::processes::{KEEP_FINISHED, Process, RunTask};
use crate::sessions::SessionKey;

/// A call without `yield` from a client that takes tasks becomes a task after this long
/// (with `yield`, after its `yield`; waiting for a human, at once).
pub const TASK_AFTER: Duration = Duration::from_secs(10);

/// How often a client is asked to poll a task.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Whether the client declared the tasks extension for this request (in the request's
/// own capabilities, or at `initialize` for a client that keeps a session).
pub(super) fn client_takes_tasks(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .is_some_and(|caps| caps.supports_tasks())
}

impl WardenMcp {
    /// `exec` for a client that takes tasks: start the run, and answer with its whole
    /// result if it ends before it would keep the caller waiting (a question to a human,
    /// or `wait` elapsed), else with a task that follows it.
    pub(super) async fn exec_as_task(
        &self,
        request: ExecRequest,
        key: &SessionKey,
        wait: Duration,
        events: Vec<String>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let Some(task) = RunTask::new() else {
            // No unguessable id can be made: no task. The call waits for its end, as for
            // a client that does not take tasks.
            return CallToolResponse::Complete(
                self.exec_to_end(request, key, events, context).await,
            );
        };
        // A question to a human, or `wait` elapsed, hands the run over to a task.
        let waited = self
            .start_until(request, key, events, context, |process| async move {
                tokio::select! {
                    () = process.asks() => {}
                    () = tokio::time::sleep(wait) => {}
                }
            })
            .await;
        let (process, events) = match waited {
            Waited::Ended(result) => return CallToolResponse::Complete(result),
            Waited::GoesOn(process, events) => (process, events),
        };
        let task = process.become_task(task);
        // The events this call took were not delivered: the next call carries them.
        self.gateway.return_events(key, events);
        CallToolResponse::Task(CreateTaskResult::new(detailed(&process, task).task))
    }

    /// `tasks/get`: the task's state, and its result once its run has ended.
    pub(super) fn get_task(
        &self,
        task_id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let process = self.task_process(task_id, context)?;
        let Some(task) = process.task() else {
            return Err(not_found(task_id));
        };
        let view = detailed(&process, task);
        if view.status() == TaskStatus::Completed {
            // Its whole result reached the agent: the run's `Exec finished` event need
            // not repeat the output.
            self.gateway
                .sessions()
                .mark_delivered(&process.key, &process.id);
        }
        Ok(GetTaskResult::new(view))
    }

    /// `tasks/cancel`: withdraw a pending question or kill the run's whole tree. The
    /// task says `cancelled` once the run has ended (or `completed`, if it ended first).
    pub(super) fn cancel_task(
        &self,
        task_id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.task_process(task_id, context)?.cancel_task();
        Ok(())
    }

    /// `tasks/update`: Warden's tasks never ask the client for input, so there is
    /// nothing outstanding to answer; the responses are ignored, as the extension says of
    /// responses to requests that are not outstanding.
    pub(super) fn update_task(
        &self,
        task_id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.task_process(task_id, context).map(|_| ())
    }

    /// The run behind `task_id`, if the caller's agent owns it.
    fn task_process(
        &self,
        task_id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<std::sync::Arc<Process>, ErrorData> {
        let key = self.key(context)?;
        self.gateway
            .processes()
            .task(&key.agent, task_id)
            .map_err(|_| not_found(task_id))
    }
}

/// The extension's error for a task id the caller does not own: -32602.
fn not_found(task_id: &str) -> ErrorData {
    let why = crate::processes::ProcessError::UnknownTask(task_id.to_owned());
    ErrorData::invalid_params(format!("Failed to retrieve task: {why}"), None)
}

/// `task`, the task of `process`, as `tasks/get` shows it.
fn detailed(process: &Process, task: &RunTask) -> DetailedTask {
    let report = process.report();
    let (payload, message) = match report.as_deref() {
        None => (
            TaskPayload::Working,
            format!(
                "{}; run {} (the `process` tool reads its output so far and writes to its input)",
                state_words(process, None),
                process.id
            ),
        ),
        Some(report)
            if task.cancel_requested() && matches!(report.outcome, Outcome::Cancelled { .. }) =>
        {
            (
                TaskPayload::Cancelled,
                format!("cancelled: {}", result::headline(report)),
            )
        }
        Some(report) => (
            TaskPayload::Completed {
                result: tool_result_object(report),
            },
            result::headline(report),
        ),
    };
    let mut base = Task::new(
        task.id.clone(),
        payload.status(),
        rfc3339(task.created_at),
        rfc3339(process.updated_at()),
    )
    .with_status_message(message)
    .with_poll_interval_ms(millis(POLL_INTERVAL));
    if report.is_some() {
        // Kept (at most) this long after it ended; while it runs, as long as it runs.
        let lived = process
            .updated_at()
            .duration_since(task.created_at)
            .unwrap_or_default();
        base = base.with_ttl_ms(millis(lived + KEEP_FINISHED));
    }
    DetailedTask::new(base, payload)
}

/// The `CallToolResult` the call would have returned, as the task's `result` object.
fn tool_result_object(report: &runner::RunReport) -> JsonObject {
    match serde_json::to_value(result::exec_result(report, Vec::new())) {
        Ok(serde_json::Value::Object(map)) => map,
        // A CallToolResult is an object; an empty one would still be a valid result.
        _ => JsonObject::new(),
    }
}

fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
