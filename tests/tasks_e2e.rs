//! End-to-end: MCP Tasks (`io.modelcontextprotocol/tasks`, SEP-2663) for `exec`, driven
//! by rmcp's client — which implements the extension — over `warden mcp` (stdio) and
//! `warden gateway run` (Streamable HTTP). A call that runs past its yield, or that waits
//! for a human approver (a real `warden approvals ui`), becomes a task; `tasks/get` says
//! what it waits for and, at its end, returns the very result the call would have;
//! `tasks/cancel` withdraws the question or kills the whole tree; another agent's task is
//! "not found" like one that never was; a client that does not declare the extension
//! never gets a task, and its `tasks/*` requests are refused with -32021.
//!
//! (The official Python SDK 2.3.0 and TypeScript SDK 1.32.2 do not implement the
//! extension, so they keep getting results as before — their conformance tests in
//! `tests/mcp_conformance.rs` run against the server that now advertises it.)

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// The errors clients get are shown on stderr.
#![allow(clippy::print_stderr)]

#[path = "support/mcp_runs.rs"]
mod mcp_runs;
mod support;

use std::time::{Duration, Instant};

use mcp_runs::{Setup, gone, setup, wait_gone};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ClientCapabilities,
    ClientConfig, DetailedTask, GetTaskParams, Implementation, TaskPayload, TaskStatus,
};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use support::TerminalApprover;

type Client = RunningService<RoleClient, ClientConfig>;

/// A client that declares the tasks extension.
fn tasks_client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::builder().enable_tasks().build(),
        Implementation::new("warden-tasks-test", "1"),
    )
}

async fn stdio_tasks_client(s: &Setup) -> Client {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_warden"));
    cmd.args(["mcp", "--agent", "coder", "--session", "s1", "--workspace"])
        .arg(s.ws())
        .env("WARDEN_HOME", s.home.path())
        .env("WARDEN_LOG", "warn");
    tasks_client_config()
        .serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap()
}

async fn http_tasks_client(addr: &str, token: &str) -> Client {
    let config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            format!("http://{addr}/mcp"),
        )
        .auth_header(token);
    tasks_client_config()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_config(
            config,
        ))
        .await
        .unwrap()
}

/// `exec` once, without driving a task: what the server answered.
async fn exec_once(client: &Client, args: Value) -> CallToolResponse {
    let Value::Object(map) = args else {
        panic!("arguments must be an object")
    };
    client
        .call_tool_once(CallToolRequestParams::new("exec").with_arguments(map))
        .await
        .unwrap()
}

/// The task id of an answer that must be a task.
fn task_id(answer: &CallToolResponse) -> String {
    match answer {
        CallToolResponse::Task(created) => {
            assert_eq!(created.task.status, TaskStatus::Working, "{created:?}");
            assert!(created.task.task_id.starts_with("task-"), "{created:?}");
            // 128 random bits, hex: nothing like the run id.
            assert_eq!(created.task.task_id.len(), "task-".len() + 32);
            assert!(created.task.poll_interval_ms.is_some_and(|ms| ms > 0));
            humantime::parse_rfc3339(&created.task.created_at).unwrap();
            created.task.task_id.clone()
        }
        other => panic!("expected a task, got {other:?}"),
    }
}

async fn get(client: &Client, id: &str) -> DetailedTask {
    client
        .get_task(GetTaskParams::new(id))
        .await
        .unwrap_or_else(|e| panic!("tasks/get {id}: {e}"))
        .task
}

/// Poll `id` until it is terminal (within 30 s).
async fn settle(client: &Client, id: &str) -> DetailedTask {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let task = get(client, id).await;
        if task.status().is_terminal() {
            return task;
        }
        assert!(Instant::now() < deadline, "task {id} never ended: {task:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The `CallToolResult` a completed task carries.
fn completed_result(task: &DetailedTask) -> CallToolResult {
    match &task.payload {
        TaskPayload::Completed { result } => {
            serde_json::from_value(Value::Object(result.clone())).unwrap()
        }
        other => panic!("expected a completed task, got {other:?} ({task:?})"),
    }
}

fn status_message(task: &DetailedTask) -> String {
    task.task.status_message.clone().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_its_yield_becomes_a_task_whose_result_is_the_calls() {
    let s = setup();
    let client = stdio_tasks_client(&s).await;

    // A run that ends within its yield answers as it always did.
    let quick = exec_once(&client, json!({"command": "echo quick", "yield": 10})).await;
    let CallToolResponse::Complete(quick) = quick else {
        panic!("a quick run is no task: {quick:?}")
    };
    assert_eq!(quick.structured_content.unwrap()["stdout"], "quick\n");

    // One that does not becomes a task.
    let answer = exec_once(
        &client,
        json!({"command": "echo started; sleep 1; echo done >&2; exit 3", "yield": 0.2}),
    )
    .await;
    let id = task_id(&answer);
    let working = get(&client, &id).await;
    assert_eq!(working.status(), TaskStatus::Working, "{working:?}");
    let message = status_message(&working);
    assert!(
        message.contains("running for") && message.contains("run run-"),
        "{message}"
    );
    assert_eq!(working.task.ttl_ms, None, "kept while it runs");

    let ended = settle(&client, &id).await;
    let result = completed_result(&ended);
    // The call's own result (a command's non-zero exit is a result, as exec gives it),
    // in a `completed` task: `failed` is only for protocol errors.
    assert_eq!(result.is_error, Some(false));
    let value = result.structured_content.unwrap();
    assert_eq!(value["status"], "finished", "{value}");
    assert_eq!(value["exitCode"], 3);
    assert_eq!(value["stdout"], "started\n");
    assert_eq!(value["stderr"], "done\n");
    assert!(status_message(&ended).contains("exit code 3"), "{ended:?}");
    // Kept for 15 minutes after its end, and the end is after the start.
    let ttl = ended.task.ttl_ms.unwrap();
    assert!(ttl >= 15 * 60 * 1000, "{ttl}");
    let created = humantime::parse_rfc3339(&ended.task.created_at).unwrap();
    let updated = humantime::parse_rfc3339(&ended.task.last_updated_at).unwrap();
    assert!(updated > created, "{ended:?}");
    // Reading it again gives the same result.
    assert_eq!(completed_result(&get(&client, &id).await), {
        let mut again = completed_result(&ended);
        again.meta = None;
        again
    });

    // `background` asks for a run id to drive with `process`: never a task.
    let background = exec_once(&client, json!({"command": "sleep 0.1", "background": true})).await;
    let CallToolResponse::Complete(background) = background else {
        panic!("background is no task: {background:?}")
    };
    assert!(background.structured_content.unwrap()["runId"].is_string());
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_awaiting_approval_is_a_task_at_once_and_cancelling_withdraws_the_question() {
    let home = support::warden_home();
    support::configure(
        home.path(),
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\nask = \"always\"\n",
        r#"{"version":1,"defaults":{"security":"allowlist","ask":"always","askFallback":"deny"}}"#,
    );
    let mut approver = TerminalApprover::start(home.path());
    let s = Setup {
        workspace: tempfile::tempdir().unwrap(),
        home,
    };
    let client = stdio_tasks_client(&s).await;

    // No yield: the call would wait up to TASK_AFTER (10 s) for a run, but a question to
    // a human makes it a task at once.
    let asked_at = Instant::now();
    let answer = exec_once(&client, json!({"command": "echo approved-run"})).await;
    let id = task_id(&answer);
    assert!(
        asked_at.elapsed() < Duration::from_secs(8),
        "a task as soon as the human is asked, not after the default wait"
    );
    let prompt = approver.read_until("digest:").join("\n");
    assert!(prompt.contains("echo approved-run"), "{prompt}");
    let waiting = get(&client, &id).await;
    assert_eq!(waiting.status(), TaskStatus::Working);
    assert!(
        status_message(&waiting).contains("awaiting operator approval"),
        "{waiting:?}"
    );
    approver.type_text("y\n");
    let ended = settle(&client, &id).await;
    let value = completed_result(&ended).structured_content.unwrap();
    assert_eq!(value["stdout"], "approved-run\n", "{value}");
    assert_eq!(value["decision"]["decision"], "allow", "{value}");

    // The next one is cancelled while the human is asked: the question is withdrawn and
    // nothing runs.
    let marker = std::env::temp_dir().join(format!("warden-task-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let command = format!("touch {}", marker.display());
    let id = task_id(&exec_once(&client, json!({"command": command})).await);
    approver.read_until("digest:");
    client
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .unwrap();
    approver.read_until("withdrawn");
    let ended = settle(&client, &id).await;
    assert_eq!(ended.status(), TaskStatus::Cancelled, "{ended:?}");
    assert!(status_message(&ended).contains("cancelled"), "{ended:?}");
    assert!(!marker.exists(), "a withdrawn question runs nothing");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_task_kills_its_whole_tree_and_only_its_agent_may() {
    let s = setup();
    let gateway = support::GatewayProcess::start(s.home.path(), &s.ws(), &[]);
    let coder = http_tasks_client(
        &gateway.addr,
        &support::gateway_token(s.home.path(), "coder"),
    )
    .await;
    let other = http_tasks_client(
        &gateway.addr,
        &support::gateway_token(s.home.path(), "other"),
    )
    .await;
    let pids_dir = tempfile::tempdir().unwrap();
    let pid_file = pids_dir.path().join("pids");
    let command = format!(
        "setsid sleep 300 & echo $! > {f}; echo $$ >> {f}; exec sleep 300",
        f = pid_file.display()
    );
    let id = task_id(&exec_once(&coder, json!({"command": command, "yield": 0.3})).await);
    let deadline = Instant::now() + Duration::from_secs(10);
    let pids: Vec<i32> = loop {
        let text = std::fs::read_to_string(&pid_file).unwrap_or_default();
        let pids: Vec<i32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        if pids.len() == 2 {
            break pids;
        }
        assert!(Instant::now() < deadline, "the run never wrote its pids");
        std::thread::sleep(Duration::from_millis(20));
    };

    // Another agent: the task is unknown to it, exactly like an id that never was.
    let theirs = other.get_task(GetTaskParams::new(id.clone())).await;
    let nobodys = other
        .get_task(GetTaskParams::new(format!("task-{}", "0".repeat(32))))
        .await;
    let (theirs, nobodys) = (
        format!("{:?}", theirs.unwrap_err()),
        format!("{:?}", nobodys.unwrap_err()),
    );
    eprintln!("another agent's tasks/get: {theirs}");
    assert!(
        theirs.contains("-32602") && theirs.contains("not found"),
        "{theirs}"
    );
    assert_eq!(
        theirs.replace(&id, "X"),
        nobodys.replace(&format!("task-{}", "0".repeat(32)), "X")
    );
    assert!(
        other
            .cancel_task(CancelTaskParams::new(id.clone()))
            .await
            .is_err()
    );
    assert!(
        pids.iter().all(|&p| !gone(p)),
        "the other agent's cancel did nothing"
    );
    assert_eq!(get(&coder, &id).await.status(), TaskStatus::Working);

    // Its own agent cancels it: the whole tree goes, the `setsid` child included.
    coder
        .cancel_task(CancelTaskParams::new(id.clone()))
        .await
        .unwrap();
    for pid in pids {
        wait_gone(pid);
    }
    let ended = settle(&coder, &id).await;
    assert_eq!(ended.status(), TaskStatus::Cancelled, "{ended:?}");

    // A task's run is a run of its session: the session ending (DELETE) ends it, tree
    // and all, as it ends a background run.
    let pid_file = pids_dir.path().join("second");
    let command = format!("echo $$ > {}; exec sleep 300", pid_file.display());
    task_id(&exec_once(&coder, json!({"command": command, "yield": 0.2})).await);
    let deadline = Instant::now() + Duration::from_secs(10);
    let pid: i32 = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "the second run never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    coder.cancel().await.unwrap();
    wait_gone(pid);
    other.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_declare_tasks_never_gets_one() {
    let s = setup();
    let client = mcp_runs::stdio_client(&s).await;
    let answer = mcp_runs::structured(
        &client,
        "exec",
        json!({"command": "sleep 0.5; echo late", "yield": 0.1}),
    )
    .await;
    // The yield-and-poll answer, as before the extension existed.
    assert_eq!(answer["status"], "running", "{answer}");
    let refused = client
        .get_task(GetTaskParams::new(format!("task-{}", "0".repeat(32))))
        .await
        .unwrap_err();
    eprintln!("tasks/get without the extension: {refused:?}");
    assert!(format!("{refused:?}").contains("-32021"), "{refused:?}");
    client.cancel().await.unwrap();
}

// ---- the wire, raw ----------------------------------------------------------------

/// `_meta` that declares the extension on one request (the 2026-07-28 way: per request,
/// not at `initialize`).
fn declaring() -> Value {
    json!({"io.modelcontextprotocol/clientCapabilities":
        {"extensions": {"io.modelcontextprotocol/tasks": {}}}})
}

/// Check `value` against definition `name` of the extension's published schema
/// (`tests/clients/ext-tasks-schema.json`: modelcontextprotocol/ext-tasks
/// `schema/draft/schema.json` at e4345978be1f602f1fc48d89051e8559dd5302a6).
fn assert_matches_schema(name: &str, value: &Value) {
    let published: Value =
        serde_json::from_str(include_str!("clients/ext-tasks-schema.json")).unwrap();
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": format!("#/$defs/{name}"),
        "$defs": published["$defs"],
    });
    let validator = jsonschema::draft202012::new(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(value)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{name}: {errors:#?}\n{value:#}");
}

struct RawStdio {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
    /// The server's answer to `initialize`.
    initialized: Value,
}

impl RawStdio {
    /// `warden mcp` initialized by a client that declares nothing at `initialize`.
    fn start(s: &Setup) -> RawStdio {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_warden"))
            .args(["mcp", "--agent", "coder", "--workspace"])
            .arg(s.ws())
            .env("WARDEN_HOME", s.home.path())
            .env("WARDEN_LOG", "warn")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                if tx.send(line.unwrap_or_default()).is_err() {
                    break;
                }
            }
        });
        let mut raw = RawStdio {
            stdin: child.stdin.take().unwrap(),
            child,
            lines,
            initialized: Value::Null,
        };
        raw.initialized = raw.request(
            1,
            "initialize",
            json!({"protocolVersion": "2025-06-18",
            "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}),
        );
        raw.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        raw
    }

    fn send(&mut self, frame: Value) {
        use std::io::Write;
        writeln!(self.stdin, "{frame}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Send request `id` and return its response.
    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("no response to {method} ({id})"));
            let frame: Value = serde_json::from_str(&line).unwrap();
            if frame["id"] == id {
                return frame;
            }
        }
    }
}

impl Drop for RawStdio {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_wire_follows_the_published_schema_with_the_extension_declared_per_request() {
    let s = setup();
    let mut raw = RawStdio::start(&s);
    // The server says it takes the extension.
    let extensions = &raw.initialized["result"]["capabilities"]["extensions"];
    assert_eq!(
        extensions["io.modelcontextprotocol/tasks"],
        json!({}),
        "{}",
        raw.initialized
    );

    let created = raw.request(
        3,
        "tools/call",
        json!({"name": "exec", "arguments": {"command": "sleep 0.3; echo raw", "yield": 0.05},
               "_meta": declaring()}),
    );
    let created = &created["result"];
    assert_eq!(created["resultType"], "task", "{created}");
    assert_matches_schema("CreateTaskResult", created);
    let id = created["taskId"].as_str().unwrap().to_owned();

    let mut next = 4;
    let ended = loop {
        let got = raw.request(
            next,
            "tasks/get",
            json!({"taskId": id, "_meta": declaring()}),
        );
        next += 1;
        let task = got["result"].clone();
        assert_matches_schema("GetTaskResult", &task);
        assert_eq!(task["resultType"], "complete", "{task}");
        if task["status"] != "working" {
            break task;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(ended["status"], "completed", "{ended}");
    assert_eq!(
        ended["result"]["structuredContent"]["stdout"], "raw\n",
        "{ended}"
    );

    // Acknowledgements are empty results; an unknown task is -32602; without the
    // extension declared on the request (nor at initialize), -32021.
    let ack = raw.request(
        next,
        "tasks/update",
        json!({"taskId": id, "inputResponses": {},
        "_meta": declaring()}),
    );
    assert_matches_schema("UpdateTaskResult", &ack["result"]);
    let ack = raw.request(
        next + 1,
        "tasks/cancel",
        json!({"taskId": id, "_meta": declaring()}),
    );
    assert_matches_schema("CancelTaskResult", &ack["result"]);
    let unknown = raw.request(
        next + 2,
        "tasks/get",
        json!({"taskId": "task-nope", "_meta": declaring()}),
    );
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let undeclared = raw.request(next + 3, "tasks/get", json!({"taskId": id}));
    assert_eq!(undeclared["error"]["code"], -32021, "{undeclared}");
    // Nor does an undeclared call get a task: the yield-and-poll answer.
    let plain = raw.request(
        next + 4,
        "tools/call",
        json!({"name": "exec", "arguments": {"command": "sleep 0.3", "yield": 0.05}}),
    );
    assert_eq!(
        plain["result"]["structuredContent"]["status"], "running",
        "{plain}"
    );
}
