//! What the end-to-end tests of runs that outlive their call share: a workspace and an
//! open home, real MCP clients (rmcp) over `warden mcp` (stdio) and `warden gateway run`
//! (Streamable HTTP), tool calls, polling a run until its output shows something, and
//! checks that a process is gone.
// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

/// A workspace and a home where agents may run anything, asking nobody.
pub struct Setup {
    pub workspace: tempfile::TempDir,
    pub home: tempfile::TempDir,
}

pub fn setup() -> Setup {
    Setup {
        workspace: tempfile::tempdir().unwrap(),
        home: super::support::open_gateway_home(),
    }
}

impl Setup {
    pub fn ws(&self) -> PathBuf {
        std::fs::canonicalize(self.workspace.path()).unwrap()
    }
}

pub async fn stdio_client(s: &Setup) -> RunningService<RoleClient, ()> {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_warden"));
    cmd.args(["mcp", "--agent", "coder", "--session", "s1", "--workspace"])
        .arg(s.ws())
        .env("WARDEN_HOME", s.home.path())
        .env("WARDEN_LOG", "warn");
    ().serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap()
}

pub async fn http_client(addr: &str, token: &str) -> RunningService<RoleClient, ()> {
    let config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            format!("http://{addr}/mcp"),
        )
        .auth_header(token);
    ().serve(rmcp::transport::StreamableHttpClientTransport::from_config(
        config,
    ))
    .await
    .unwrap()
}

pub async fn call(
    client: &RunningService<RoleClient, ()>,
    tool: &str,
    args: Value,
) -> CallToolResult {
    let Value::Object(map) = args else {
        panic!("arguments must be an object")
    };
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(map))
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"))
}

pub async fn structured(client: &RunningService<RoleClient, ()>, tool: &str, args: Value) -> Value {
    call(client, tool, args)
        .await
        .structured_content
        .unwrap_or(Value::Null)
}

/// Poll `run` until its output — all it still keeps, from its first byte — contains
/// `needle` (within 20 s); the output seen.
pub async fn poll_until(
    client: &RunningService<RoleClient, ()>,
    run: &str,
    needle: &str,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = String::new();
    // The first look reads everything the run still keeps: what `exec`'s own answer
    // already carried (a fast run's first lines) counts as seen.
    let mut from_start = true;
    while Instant::now() < deadline {
        let mut poll = json!({"action": "poll", "runId": run, "wait": 2});
        if std::mem::take(&mut from_start) {
            poll["cursor"] = json!(0);
        }
        let r = structured(client, "process", poll).await;
        assert_eq!(r["ok"], true, "{r}");
        seen.push_str(r["output"].as_str().unwrap());
        if seen.contains(needle) {
            return seen;
        }
    }
    panic!("{needle:?} never appeared in run {run}'s output: {seen:?}");
}

/// Whether process `pid` is gone (or a zombie nobody will run again).
pub fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

pub fn wait_gone(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gone(pid) {
        assert!(Instant::now() < deadline, "process {pid} survived");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn structured_text(r: &CallToolResult) -> String {
    r.structured_content
        .as_ref()
        .map(|v| v["message"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_default()
}
