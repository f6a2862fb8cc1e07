//! End-to-end: every way a request ends stops its run — the whole tree, also what left
//! the session — and says so in the session's events. Driven by the official MCP Python
//! SDK (`tests/clients/mcp_cancel.py`; `.ci/run` installs it into `target/mcp-sdk`) and
//! by raw JSON-RPC frames, over stdio (`warden mcp`) and Streamable HTTP (`warden gateway
//! run`), on the gateway and sandbox hosts: `notifications/cancelled`, a killed client,
//! stdin closed, an HTTP client that disconnects, a `DELETE` of the MCP session, gateway
//! shutdown — and a pending approval withdrawn from the human when its request is
//! cancelled.
//!
//! The time from cancelling to the last process gone is printed (`gone after N ms`); the
//! tests only bound it loosely, the product's target (under a second) is checked in the
//! numbers the tests print and in the closing notes.
// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Skips and measured times are reported on stderr.
#![allow(clippy::print_stderr)]

#[path = "support/raw_http.rs"]
mod raw_http;
mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{
    GatewayProcess, TerminalApprover, gateway_token, open_gateway_home, python_sdk, warden_in,
};

/// A cancelled run must be gone well within this (the target is one second; this bound
/// only keeps a slow CI machine from failing a correct build).
const GONE_BOUND: Duration = Duration::from_secs(5);

/// Processes whose command line is exactly `sleep MARKER`.
fn sleeps(marker: &str) -> usize {
    support::pids_with_cmdline(&format!("sleep {marker}")).len()
}

/// A marker unique to this test process and `n`.
fn marker(n: u32) -> String {
    format!("{}{:03}", std::process::id(), n)
}

/// Wait until both sleeps of `marker` run.
fn wait_running(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while sleeps(marker) < 2 {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Wait until no sleep of `marker` is left; how long that took.
fn wait_gone(marker: &str, what: &str) -> Duration {
    let since = Instant::now();
    while sleeps(marker) > 0 {
        assert!(
            since.elapsed() < GONE_BOUND,
            "{what}: the run is still going {GONE_BOUND:?} after it was cancelled"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = since.elapsed();
    eprintln!("{what}: gone after {} ms", took.as_millis());
    took
}

/// The command every test runs: one sleep in its own session, one in the run's.
fn command(marker: &str) -> String {
    format!("setsid sleep {marker} & sleep {marker}")
}

/// The hosts to try: the gateway, and the sandbox where it works here.
fn hosts(home: &Path) -> Vec<&'static str> {
    let out = warden_in(home)
        .args(["exec", "--host", "sandbox", "--", "true"])
        .output()
        .unwrap();
    if out.status.success() {
        vec!["gateway", "sandbox"]
    } else {
        eprintln!(
            "SKIPPED (sandbox half): host=sandbox is unavailable here: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        vec!["gateway"]
    }
}

// ---- the official Python SDK -------------------------------------------------------

fn client_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients/mcp_cancel.py")
}

/// Where the SDK client runs: its Python, Warden's home and the agent's credential.
struct Sdk<'a> {
    python: &'a Path,
    home: &'a Path,
    token: &'a str,
}

impl Sdk<'_> {
    /// The SDK client, started over `transport` in `mode` (see the script), running
    /// `sleep MARKER` on `host` through `target` (`warden mcp …`, or the gateway's URL).
    fn client(
        &self,
        (transport, mode): (&str, &str),
        marker: &str,
        host: &str,
        target: &[&str],
    ) -> (Child, mpsc::Receiver<String>) {
        let mut child = Command::new(self.python)
            .arg(client_script())
            .args([transport, mode, marker, host])
            .args(target)
            .env("WARDEN_HOME", self.home)
            .env("WARDEN_LOG", "warn")
            .env("WARDEN_TOKEN", self.token)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if tx.send(line.unwrap_or_default()).is_err() {
                    break;
                }
            }
        });
        (child, rx)
    }
}

fn next_line(lines: &mpsc::Receiver<String>, what: &str) -> String {
    lines
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what}: the client said nothing more"))
}

#[test]
fn the_python_sdk_cancelling_a_call_stops_the_run_over_stdio_and_http() {
    let Some(python) = python_sdk() else { return };
    let home = open_gateway_home();
    let workspace = tempfile::tempdir().unwrap();
    let gateway = GatewayProcess::start(home.path(), workspace.path(), &[]);
    let token = gateway_token(home.path(), "main");
    let url = format!("http://{}/mcp", gateway.addr);
    let warden = env!("CARGO_BIN_EXE_warden");
    let sdk = Sdk {
        python: &python,
        home: home.path(),
        token: &token,
    };
    for (i, host) in hosts(home.path()).into_iter().enumerate() {
        for (j, transport) in ["stdio", "http"].into_iter().enumerate() {
            let what = format!("SDK notifications/cancelled over {transport} on {host}");
            let marker = marker((i * 2 + j) as u32);
            let target: Vec<&str> = match transport {
                "stdio" => vec![
                    warden,
                    "mcp",
                    "--workspace",
                    workspace.path().to_str().unwrap(),
                ],
                _ => vec![url.as_str()],
            };
            let (mut child, lines) = sdk.client((transport, "cancel"), &marker, host, &target);
            assert_eq!(next_line(&lines, &what), "running");
            let gone = next_line(&lines, &what);
            let ms: u64 = gone.strip_prefix("gone_ms ").unwrap().parse().unwrap();
            eprintln!("{what}: gone after {ms} ms");
            assert!(Duration::from_millis(ms) < GONE_BOUND, "{what}: {ms} ms");
            let events = next_line(&lines, &what);
            let events: Vec<String> =
                serde_json::from_str(events.strip_prefix("events ").unwrap()).unwrap();
            assert!(
                events
                    .iter()
                    .any(|e| e.contains("code=130, cancelled") && e.contains(host)),
                "{what}: {events:#?}"
            );
            assert!(child.wait().unwrap().success(), "{what}");
            assert_eq!(sleeps(&marker), 0, "{what}");
        }
    }
}

#[test]
fn a_killed_sdk_client_takes_its_run_with_it() {
    let Some(python) = python_sdk() else { return };
    let home = open_gateway_home();
    let workspace = tempfile::tempdir().unwrap();
    let gateway = GatewayProcess::start(home.path(), workspace.path(), &[]);
    let token = gateway_token(home.path(), "main");
    let url = format!("http://{}/mcp", gateway.addr);
    let warden = env!("CARGO_BIN_EXE_warden");
    let sdk = Sdk {
        python: &python,
        home: home.path(),
        token: &token,
    };
    for (i, host) in hosts(home.path()).into_iter().enumerate() {
        for (j, transport) in ["stdio", "http"].into_iter().enumerate() {
            // Over stdio the server sees its stdin close; over HTTP, the connection drop.
            let what = format!("SDK client killed over {transport} on {host}");
            let marker = marker(10 + (i * 2 + j) as u32);
            let target: Vec<&str> = match transport {
                "stdio" => vec![
                    warden,
                    "mcp",
                    "--workspace",
                    workspace.path().to_str().unwrap(),
                ],
                _ => vec![url.as_str()],
            };
            let (mut child, lines) = sdk.client((transport, "hold"), &marker, host, &target);
            assert_eq!(next_line(&lines, &what), "running");
            child.kill().unwrap();
            child.wait().unwrap();
            wait_gone(&marker, &what);
        }
    }
}

// ---- raw JSON-RPC over stdio -------------------------------------------------------

/// `warden mcp` driven with raw frames.
struct RawStdio {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl RawStdio {
    fn start(home: &Path, workspace: &Path) -> RawStdio {
        let mut child = warden_in(home)
            .args(["mcp", "--workspace"])
            .arg(workspace)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if tx.send(line.unwrap_or_default()).is_err() {
                    break;
                }
            }
        });
        let mut raw = RawStdio {
            stdin: child.stdin.take(),
            child,
            lines,
        };
        raw.send(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}),
        );
        raw.response(1);
        raw.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        raw
    }

    fn send(&mut self, frame: Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{frame}").unwrap();
        stdin.flush().unwrap();
    }

    /// The response to request `id` (other frames are skipped).
    fn response(&self, id: u64) -> Value {
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .expect("no response");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    }

    fn exec(&mut self, id: u64, command: &str, host: &str) {
        self.send(
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "exec", "arguments": {"command": command, "host": host, "timeout": 600}}}),
        );
    }

    /// The events later calls deliver, until one says a run was cancelled.
    fn events_until_cancelled(&mut self, mut id: u64, host: &str) -> Vec<String> {
        let mut events = Vec::new();
        for _ in 0..3 {
            self.exec(id, "true", host);
            let v = self.response(id);
            events.extend(
                v["result"]["structuredContent"]["events"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| e.as_str().unwrap().to_owned()),
            );
            if events.iter().any(|e| e.contains("cancelled")) {
                break;
            }
            id += 1;
        }
        events
    }
}

impl Drop for RawStdio {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// SIGKILL gives `warden mcp` no shutdown. Its companion (the helper binary it starts
/// before `main`, which is also its cgroup watchdog) sees its socket close and ends the
/// runs left in its cgroups; a sandboxed run's pid 1 dies with its parent too. Both
/// halves of the command — one of them in a session of its own — must go.
#[test]
fn a_killed_mcp_server_leaves_no_run_behind() {
    let home = open_gateway_home();
    let workspace = tempfile::tempdir().unwrap();
    for (i, host) in hosts(home.path()).into_iter().enumerate() {
        let what = format!("warden mcp SIGKILL, host={host}");
        let m = marker(90 + i as u32);
        let mut raw = RawStdio::start(home.path(), workspace.path());
        raw.exec(2, &command(&m), host);
        wait_running(&m);
        raw.child.kill().unwrap(); // SIGKILL
        raw.child.wait().unwrap();
        wait_gone(&m, &what);
    }
}

#[test]
fn raw_stdio_cancellation_and_end_of_input_stop_the_run() {
    let home = open_gateway_home();
    let workspace = tempfile::tempdir().unwrap();
    for (i, host) in hosts(home.path()).into_iter().enumerate() {
        // notifications/cancelled: the run stops, no response comes, the events say so.
        let what = format!("raw notifications/cancelled over stdio on {host}");
        let m = marker(20 + i as u32);
        let mut raw = RawStdio::start(home.path(), workspace.path());
        raw.exec(2, &command(&m), host);
        wait_running(&m);
        raw.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": 2, "reason": "user pressed stop"}}),
        );
        wait_gone(&m, &what);
        let events = raw.events_until_cancelled(3, host);
        assert!(
            events.iter().any(|e| e.contains("code=130, cancelled")),
            "{what}: {events:#?}"
        );

        // End of input: the client closed stdin; the run stops and the server exits.
        let what = format!("stdin closed under `warden mcp` on {host}");
        let m = marker(30 + i as u32);
        raw.exec(10, &command(&m), host);
        wait_running(&m);
        drop(raw.stdin.take());
        wait_gone(&m, &what);
        let status = raw.child.wait().unwrap();
        assert!(status.success(), "{what}: {status:?}");
    }
}

#[test]
fn cancelling_a_request_withdraws_its_question_from_the_approver() {
    let home = support::warden_home();
    support::configure(
        home.path(),
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\nask = \"always\"\n",
        r#"{"version":1,"defaults":{"security":"allowlist","ask":"always","askFallback":"deny"}}"#,
    );
    let approver = TerminalApprover::start(home.path());
    let workspace = tempfile::tempdir().unwrap();
    let mut raw = RawStdio::start(home.path(), workspace.path());
    let m = marker(40);
    raw.exec(2, &command(&m), "gateway");
    let prompt = approver.read_until("digest:").join("\n");
    assert!(prompt.contains(&format!("sleep {m}")), "{prompt}");
    raw.send(
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 2}}),
    );
    approver.read_until("withdrawn");
    // Nothing ran, and the session hears that the request was cancelled before it began.
    assert_eq!(sleeps(&m), 0);
    // The approver sees the question withdrawn a moment before the runner reports it:
    // ask again until the event has arrived.
    let mut events = String::new();
    for id in 3..8 {
        raw.send(
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "session", "arguments": {"command": "/exec"}}}),
        );
        let later = raw.response(id);
        events.push_str(&later["result"]["structuredContent"]["events"].to_string());
        if events.contains("Exec cancelled") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        events.contains("Exec cancelled before it started") && events.contains("nothing ran"),
        "{events}"
    );
    assert_eq!(sleeps(&m), 0);
}

// ---- raw HTTP ----------------------------------------------------------------------

#[test]
fn an_http_client_that_disconnects_or_deletes_its_session_stops_its_run() {
    let home = open_gateway_home();
    let workspace = tempfile::tempdir().unwrap();
    let gateway = GatewayProcess::start(home.path(), workspace.path(), &[]);
    let token = gateway_token(home.path(), "main");
    let addr = gateway.addr.clone();
    for (i, host) in hosts(home.path()).into_iter().enumerate() {
        let call = |id: u64, m: &str| {
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                "name": "exec", "arguments": {"command": command(m), "host": host, "timeout": 600}}})
        };

        // The client drops its connection while the call streams.
        let what = format!("HTTP client disconnected on {host}");
        let session = raw_http::new_session(&addr, &token);
        let m = marker(50 + i as u32);
        let (stream, head) =
            raw_http::request(&addr, &token, "POST", Some(&session), Some(&call(2, &m)));
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        wait_running(&m);
        drop(stream);
        wait_gone(&m, &what);

        // DELETE of the session from another connection while the call streams.
        let what = format!("HTTP DELETE of the session on {host}");
        let m = marker(60 + i as u32);
        let (_stream, head) =
            raw_http::request(&addr, &token, "POST", Some(&session), Some(&call(3, &m)));
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        wait_running(&m);
        let (_, head) = raw_http::request(&addr, &token, "DELETE", Some(&session), None);
        assert!(head.starts_with("HTTP/1.1 204"), "{head}");
        wait_gone(&m, &what);
        // The session is gone for good.
        let (_, head) = raw_http::request(
            &addr,
            &token,
            "POST",
            Some(&session),
            Some(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"})),
        );
        assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    }
}

#[test]
fn gateway_shutdown_stops_every_run() {
    let home = open_gateway_home();
    let workspace = tempfile::tempdir().unwrap();
    let mut gateway = GatewayProcess::start(home.path(), workspace.path(), &[]);
    let token = gateway_token(home.path(), "main");
    let session = raw_http::new_session(&gateway.addr, &token);
    let m = marker(70);
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "exec", "arguments": {"command": command(&m), "host": "gateway", "timeout": 600}}});
    let (_stream, _) =
        raw_http::request(&gateway.addr, &token, "POST", Some(&session), Some(&call));
    wait_running(&m);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(gateway.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    wait_gone(&m, "gateway SIGTERM");
    let status = gateway.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_killed_gateway_leaves_no_run_behind() {
    // SIGKILL (the OOM killer, a supervisor) gives the gateway no shutdown: on the
    // gateway host its cgroup watchdog (or, without cgroups, the subreaper's
    // parent-death signal) ends the runs; in the sandbox bubblewrap's parent-death
    // signal and the pid namespace do.
    let home = open_gateway_home();
    for (n, host) in hosts(home.path()).into_iter().enumerate() {
        let workspace = tempfile::tempdir().unwrap();
        let mut gateway = GatewayProcess::start(home.path(), workspace.path(), &[]);
        let token = gateway_token(home.path(), "main");
        let session = raw_http::new_session(&gateway.addr, &token);
        let m = marker(80 + n as u32);
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "exec", "arguments": {"command": command(&m), "host": host, "timeout": 600}}});
        let (_stream, _) =
            raw_http::request(&gateway.addr, &token, "POST", Some(&session), Some(&call));
        wait_running(&m);
        gateway.child.kill().unwrap(); // SIGKILL
        gateway.child.wait().unwrap();
        wait_gone(&m, &format!("gateway SIGKILL, host={host}"));
    }
}
