//! Runs that outlive their call, as an agent sees them: `exec` with `yield` or
//! `background` (the call returns while the command goes on, with its run id and its
//! output so far), and the `process` tool that lists such runs, reads their output from
//! a cursor, writes to their standard input, closes it, kills them and waits for their
//! end. Every answer holds at most [`caps::DEFAULT_MAX_OUTPUT_BYTES`] of output; the run
//! keeps its last [`crate::processes::OUTPUT_BUFFER_BYTES`], and a reader further behind
//! is told how much it missed.

use std::sync::Arc;
use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use runner::{ExecRequest, Outcome, RunReport};
use serde_json::{Value, json};

use super::args::{ProcessAction, ProcessArgs};
use super::progress::Progress;
use super::{WardenMcp, result, stop_of};
use crate::processes::{Process, ProcessState};
use crate::sessions::SessionKey;

/// How a call that started a run came back ([`WardenMcp::start_until`]).
pub(super) enum Waited {
    /// The run ended: its whole result.
    Ended(CallToolResult),
    /// It goes on; the events the call took are not delivered yet.
    GoesOn(Arc<Process>, Vec<String>),
}

/// Output in one answer, at most.
const ANSWER_BYTES: usize = caps::DEFAULT_MAX_OUTPUT_BYTES;

/// How long `wait` waits when the call does not say.
const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// How long `kill` waits for the run's end before answering (the tree is killed at
/// once; a pending question is withdrawn at once; this only bounds the answer).
const KILL_WAIT: Duration = Duration::from_secs(10);

impl WardenMcp {
    /// `exec` with `yield` (or `background`, a yield of zero): start the run, wait up to
    /// `yield_for` for its end, and answer with its whole result if it ended, else with
    /// its id and its output so far while it goes on.
    pub(super) async fn exec_yielding(
        &self,
        request: ExecRequest,
        key: &SessionKey,
        yield_for: Duration,
        events: Vec<String>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let waited = self
            .start_until(request, key, events, context, |_| {
                tokio::time::sleep(yield_for)
            })
            .await;
        match waited {
            Waited::Ended(result) => result,
            Waited::GoesOn(process, events) => going_on(&process, events),
        }
    }

    /// Start `request` and wait — reporting progress if the client asked — until it ends
    /// or `hand_over(process)` resolves; the caller giving up first ends the run. An
    /// ended run answers with its whole result (`events` ride along, the run leaves the
    /// table); otherwise the run goes on, and `events` are the caller's to deliver.
    pub(super) async fn start_until<F: Future<Output = ()>>(
        &self,
        request: ExecRequest,
        key: &SessionKey,
        events: Vec<String>,
        context: &RequestContext<RoleServer>,
        hand_over: impl FnOnce(Arc<Process>) -> F,
    ) -> Waited {
        let process = self.gateway.start(key, request);
        let stop = stop_of(context);
        let handed = hand_over(Arc::clone(&process));
        let waited = async {
            tokio::select! {
                biased;
                report = process.ended() => Some(report),
                () = stop => {
                    // The caller gave up before the run was handed over: it ends.
                    process.kill();
                    Some(process.ended().await)
                }
                () = handed => None,
            }
        };
        let ended = match Progress::of(context) {
            Some(mut progress) => {
                progress.live = process.output().clone();
                progress.during(waited).await
            }
            None => waited.await,
        };
        match ended {
            Some(report) => {
                // The whole result goes back now, as a plain exec's would.
                self.gateway.processes().remove(&process.id);
                if !matches!(report.outcome, Outcome::Cancelled { .. }) {
                    self.gateway.sessions().mark_delivered(key, &report.run_id);
                }
                Waited::Ended(result::exec_result(&report, events))
            }
            None => Waited::GoesOn(process, events),
        }
    }

    /// The `process` tool.
    pub(super) async fn process(
        &self,
        args: ProcessArgs,
        key: &SessionKey,
        events: Vec<String>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let processes = self.gateway.processes();
        if args.action == ProcessAction::List {
            let runs: Vec<Value> = processes
                .of_agent(&key.agent)
                .iter()
                .map(|p| summary(p))
                .collect();
            let text = if runs.is_empty() {
                "no runs: start one with exec and `yield` or `background`".to_owned()
            } else {
                processes
                    .of_agent(&key.agent)
                    .iter()
                    .map(|p| summary_line(p))
                    .collect::<Vec<_>>()
                    .join("\n")
            };
            let message = format!("{} run(s)", runs.len());
            return result::done(json!({"runs": runs}), message, text, events);
        }
        let process = match processes.get(&key.agent, &args.run_id) {
            Ok(process) => process,
            Err(e) => return result::failed(e.to_string(), events),
        };
        let stop = stop_of(context);
        match args.action {
            ProcessAction::List => unreachable!("answered above"),
            ProcessAction::Write => {
                let mut bytes = args.input.unwrap_or_default().into_bytes();
                bytes.extend_from_slice(&args.keys);
                let n = bytes.len();
                let sent = process.input().write(bytes);
                let place = if process.terminal().is_some() {
                    "typed on the terminal of"
                } else {
                    "to the standard input of"
                };
                acknowledged(
                    &process,
                    sent,
                    || format!("sent {n} bytes {place} run {}", process.id),
                    events,
                )
            }
            ProcessAction::Signal => {
                let Some((number, name)) = args.signal else {
                    return result::failed("signal: `signal` is required".to_owned(), events);
                };
                if let Some(why) = not_running(&process) {
                    return result::failed(why, events);
                }
                acknowledged(
                    &process,
                    process.input().signal(number),
                    || {
                        format!(
                            "sent SIG{name} to the processes of run {} (the command and what it started, wherever they moved to in the run)",
                            process.id
                        )
                    },
                    events,
                )
            }
            ProcessAction::Resize => {
                let Some(size) = args.size else {
                    return result::failed(
                        "resize: `rows` and `cols` are required".to_owned(),
                        events,
                    );
                };
                if process.terminal().is_none() {
                    return result::failed(
                        format!(
                            "run {} has no terminal (it was started without `tty`): nothing to resize",
                            process.id
                        ),
                        events,
                    );
                }
                if let Some(why) = not_running(&process) {
                    return result::failed(why, events);
                }
                let sent = process.input().resize(size);
                if sent.is_ok() {
                    process.set_terminal(Some(size));
                }
                acknowledged(
                    &process,
                    sent,
                    || {
                        format!(
                            "resized the terminal of run {} to {} rows × {} columns",
                            process.id, size.rows, size.cols
                        )
                    },
                    events,
                )
            }
            ProcessAction::Close => acknowledged(
                &process,
                process.input().close(),
                || match process.terminal() {
                    Some(_) => format!(
                        "typed Ctrl-D (end of input at the start of a line) on the terminal of run {} after what was sent; nothing more can be written",
                        process.id
                    ),
                    None => format!(
                        "closed the standard input of run {} (it reads end-of-file after what was sent)",
                        process.id
                    ),
                },
                events,
            ),
            ProcessAction::Kill => {
                process.kill();
                tokio::select! {
                    _ = process.ended() => {}
                    () = tokio::time::sleep(KILL_WAIT) => {}
                    () = stop => {}
                }
                self.read(&process, key, args.cursor, args.plain, events)
            }
            ProcessAction::Poll => {
                let cursor = args.cursor.unwrap_or_else(|| process.read_to());
                if let Some(wait) = args.wait.filter(|w| !w.is_zero())
                    && process.report().is_none()
                {
                    tokio::select! {
                        () = process.output().more_than(cursor) => {}
                        _ = process.ended() => {}
                        () = tokio::time::sleep(wait) => {}
                        () = stop => {}
                    }
                }
                self.read(&process, key, Some(cursor), args.plain, events)
            }
            ProcessAction::Wait => {
                tokio::select! {
                    _ = process.ended() => {}
                    () = tokio::time::sleep(args.wait.unwrap_or(DEFAULT_WAIT)) => {}
                    () = stop => {}
                }
                self.read(&process, key, args.cursor, args.plain, events)
            }
        }
    }

    /// The answer about `process`: its output from `cursor` (or from where the last
    /// answer stopped) — as plain text with `plain` — and its result once it has ended and
    /// everything has been read.
    fn read(
        &self,
        process: &Arc<Process>,
        key: &SessionKey,
        cursor: Option<u64>,
        plain: bool,
        events: Vec<String>,
    ) -> CallToolResult {
        let cursor = cursor.unwrap_or_else(|| process.read_to());
        // The result is read before the output: a run that ended has written all it will.
        let report = process.report();
        let read = match process.output().since(cursor, ANSWER_BYTES) {
            Ok(read) => read,
            Err(e) => return result::failed(format!("run {}: {e}", process.id), events),
        };
        process.mark_read(read.next);
        let more = read.next < read.written;
        let read = caps::OutputSince {
            text: if plain {
                plain_text(&read.text)
            } else {
                read.text
            },
            ..read
        };
        let mut value = json!({
            "run": summary(process),
            "output": read.text,
            "from": read.from,
            "cursor": read.next,
            "dropped": read.dropped,
            "more": more,
        });
        let mut head = format!(
            "run {} ({}): {}",
            process.id,
            process.command,
            state_words(process, report.as_deref())
        );
        if read.dropped > 0 {
            head.push_str(&format!(
                "; {} earlier bytes are no longer kept (a run keeps its last {} bytes)",
                read.dropped,
                crate::processes::OUTPUT_BUFFER_BYTES
            ));
        }
        head.push_str(&format!(
            "\noutput bytes {}..{} of {}{}",
            read.from,
            read.next,
            read.written,
            if more {
                " (more follows: poll again)"
            } else {
                ""
            }
        ));
        if let Some(report) = &report {
            let mut ended = result::report_json(report);
            if let Some(fields) = ended.as_object_mut() {
                for field in ["stdout", "stderr", "stdoutBase64", "stderrBase64"] {
                    fields.remove(field);
                }
            }
            value["result"] = ended;
            if !more {
                // The agent has the end and every byte kept: the run's finish event
                // need not repeat the output.
                self.gateway.sessions().mark_delivered(key, &report.run_id);
            }
        }
        let text = if read.text.is_empty() {
            format!("{head}\n(no new output)")
        } else {
            format!("{head}\n{}", read.text)
        };
        let message = head.lines().next().unwrap_or_default().to_owned();
        result::done(value, message, text, events)
    }
}

/// A terminal's output as plain text: escape sequences (colours, cursor moves, titles)
/// and control characters other than newlines removed. Cursors still count the bytes
/// as written.
fn plain_text(text: &str) -> String {
    strip_ansi_escapes::strip_str(text)
}

/// Why a signal or a resize cannot reach `process` now, if it cannot.
fn not_running(process: &Process) -> Option<String> {
    if process.report().is_some() {
        return Some(format!("run {} has ended: nothing was sent", process.id));
    }
    (process.state() == ProcessState::Pending).then(|| {
        format!(
            "run {} has not started yet (being decided, or waiting for a human's answer): nothing was sent",
            process.id
        )
    })
}

/// The answer to a write or a close of `process`'s input: what was done, or why not.
fn acknowledged(
    process: &Process,
    done: Result<(), caps::InputError>,
    message: impl FnOnce() -> String,
    events: Vec<String>,
) -> CallToolResult {
    match done {
        Ok(()) => {
            let message = message();
            result::done(
                json!({"run": summary(process)}),
                message.clone(),
                message,
                events,
            )
        }
        Err(e) => result::failed(format!("run {}: {e}", process.id), events),
    }
}

/// The answer of an `exec` whose call returned while its run goes on.
fn going_on(process: &Process, events: Vec<String>) -> CallToolResult {
    let read = process
        .output()
        .since(0, ANSWER_BYTES)
        .unwrap_or_else(|_| nothing_read());
    process.mark_read(read.next);
    let state = match process.state() {
        ProcessState::Pending => "pending",
        _ => "running",
    };
    let message = format!(
        "{} after {:.1} s (run {}); it goes on: read its output with `process` poll, write to its input with `process` write, stop it with `process` kill. An `Exec finished` event comes when it ends.",
        if state == "pending" {
            "not started yet (being decided, or waiting for a human's answer)"
        } else {
            "still running"
        },
        process.elapsed().as_secs_f64(),
        process.id
    );
    let value = json!({
        "message": message,
        "status": state,
        "runId": process.id,
        "host": process.host,
        "exitCode": Value::Null,
        "signal": Value::Null,
        "timedOut": false,
        "cancelled": false,
        "truncated": read.next < read.written,
        "output": read.text,
        "cursor": read.next,
    });
    let text = if read.text.is_empty() {
        format!("{message}\n(no output yet)")
    } else {
        format!("{message}\noutput so far:\n{}", read.text)
    };
    result::tool_result(value, text, events, false)
}

/// No output (reading from offset 0 is never past the end; this is never used).
fn nothing_read() -> caps::OutputSince {
    caps::OutputSince {
        from: 0,
        next: 0,
        dropped: 0,
        text: String::new(),
        written: 0,
    }
}

/// One run, as `list` shows it and every answer names it.
pub(crate) fn summary(process: &Process) -> Value {
    let report = process.report();
    json!({
        "runId": process.id,
        "command": process.command,
        "state": process.state(),
        "exitCode": report.as_ref().map(|r| r.exit_code()),
        "elapsedMs": process.elapsed().as_millis() as u64,
        "written": process.output().written(),
        "tty": process.terminal().map(|size| json!({"rows": size.rows, "cols": size.cols})),
    })
}

/// One run on a line.
fn summary_line(process: &Process) -> String {
    format!(
        "{} · {} · {} · {}",
        process.id,
        state_words(process, process.report().as_deref()),
        process.host,
        process.command
    )
}

/// How long ago the question `process` waits on was asked; `None` when it waits on none.
fn asked_ago(process: &Process) -> Option<std::time::Duration> {
    process
        .awaiting_approval()
        .map(|at| at.elapsed().unwrap_or_default())
}

/// Where a run is, in words.
pub(crate) fn state_words(process: &Process, report: Option<&RunReport>) -> String {
    match report {
        Some(report) if process.killed_by_operator() => format!(
            "ended: killed by the gateway's operator (`warden runs kill`): {}",
            result::headline(report)
        ),
        Some(report) => format!("ended: {}", result::headline(report)),
        None => match process.state() {
            ProcessState::Pending if let Some(asked) = asked_ago(process) => format!(
                "awaiting operator approval (asked {:.0} s ago)",
                asked.as_secs_f64()
            ),
            ProcessState::Pending => format!(
                "not started after {:.1} s (being decided, or waiting for a human's answer)",
                process.elapsed().as_secs_f64()
            ),
            // A running command whose connection waits for a human (egress proxy).
            ProcessState::Running if let Some(asked) = asked_ago(process) => format!(
                "running for {:.1} s, a connection awaiting operator approval (asked {:.0} s ago)",
                process.elapsed().as_secs_f64(),
                asked.as_secs_f64()
            ),
            _ => format!("running for {:.1} s", process.elapsed().as_secs_f64()),
        },
    }
}
