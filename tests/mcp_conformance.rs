//! MCP conformance, end to end: both official SDKs — Python (`tests/clients/
//! mcp_conformance.py`, from `target/mcp-sdk`) and TypeScript (`tests/clients/
//! mcp_conformance.mjs`, from `target/mcp-ts`), each pinned and installed by `.ci/run` —
//! drive `warden mcp` (stdio) and `warden gateway run` (Streamable HTTP): every protocol
//! version the SDK offers, ping, every schema through a JSON Schema validator, every tool
//! allowed / denied / asked with no approver / with invalid arguments, every structured
//! result against its output schema, progress, cancellation (the process is gone), and a
//! client killed mid-call (its run goes with it). Below the SDKs: raw HTTP frames get the
//! JSON-RPC errors the specification gives, stderr carries colour only to a terminal, and
//! `warden completions` writes a script for each shell.
//!
//! A missing SDK skips its test and says so; CI installs both.
// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Skips and timings are reported on stderr.
#![allow(clippy::print_stderr)]

#[path = "support/raw_http.rs"]
mod raw_http;
mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{
    GatewayProcess, configure, gateway_token, python_sdk, typescript_sdk, warden, warden_home,
};

/// Checks every SDK run must have passed (by the names the clients print).
const REQUIRED: &[&str] = &[
    "initialize 2025-06-18",
    "ping 2025-06-18",
    "exec input schema has a flat root",
    "exec allowed",
    "exec denied",
    "a denial says why in words",
    "exec asked with no approver",
    "exec content[0] is the whole result",
    "non-UTF-8 output is lossless",
    "read allowed",
    "write allowed",
    "edit allowed",
    "list allowed",
    "grep allowed",
    "session allowed",
    "progress notifications, increasing",
    "progress shows elapsed time and output",
    "progress is rate-limited",
    "cancel stops the run",
    "ping after all that",
];

/// A home where host=gateway runs anything and file writes need nobody (the denials the
/// clients check come from their tool parameters), and a workspace with a file.
fn setup() -> (tempfile::TempDir, tempfile::TempDir) {
    let home = warden_home();
    configure(
        home.path(),
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"full\"\nask = \"off\"\n[sandbox]\npermission_mode = \"unrestricted\"\n",
        r#"{"version":1,"defaults":{"security":"full","ask":"off","askFallback":"deny"}}"#,
    );
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("notes.txt"), "alpha\nbeta\ngamma\n").unwrap();
    (home, workspace)
}

/// A marker unique to this test process and `n`.
fn marker(n: u32) -> String {
    format!("{}{:02}", std::process::id(), n)
}

fn sleeps(marker: &str) -> usize {
    support::pids_with_cmdline(&format!("sleep {marker}")).len()
}

/// A client process, killed if the test fails before it does.
struct Client(std::process::Child);

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Run one SDK client to its `holding` line, check what it passed, then kill it mid-call
/// and check its run goes with it.
fn drive(mut client: Command, marker: &str, what: &str) {
    let started = Instant::now();
    let mut child = Client(
        client
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let mut passed = Vec::new();
    loop {
        let Ok(line) = rx.recv_timeout(Duration::from_secs(120)) else {
            panic!("{what}: the client stopped after {passed:#?}");
        };
        if line == "holding" {
            break;
        }
        match line.strip_prefix("ok ") {
            Some(check) => passed.push(check.to_owned()),
            None => panic!("{what}: {line}\n(passed: {passed:#?})"),
        }
    }
    for check in REQUIRED {
        assert!(
            passed.iter().any(|p| p == check),
            "{what}: {check:?} was not checked: {passed:#?}"
        );
    }
    for tool in [
        "exec", "process", "read", "write", "edit", "list", "grep", "session",
    ] {
        assert!(
            passed
                .iter()
                .any(|p| p.starts_with(tool) && p.contains("refused naming"))
                || tool == "list" && passed.iter().any(|p| p.starts_with("list ")),
            "{what}: no invalid-argument check of {tool}"
        );
    }
    let held = format!("{marker}2");
    assert_eq!(sleeps(&held), 1, "{what}: the held call is not running");
    eprintln!(
        "{what}: {} checks passed in {} ms",
        passed.len(),
        started.elapsed().as_millis()
    );
    // A client killed mid-call: over stdio the server's stdin closes, over HTTP the
    // connection drops; either way the run ends.
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let since = Instant::now();
    while sleeps(&held) > 0 {
        assert!(
            since.elapsed() < Duration::from_secs(5),
            "{what}: the run of a killed client is still going"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!(
        "{what}: the killed client's run was gone after {} ms",
        since.elapsed().as_millis()
    );
}

/// `warden mcp` for `workspace`, as a client starts it.
fn stdio_target(workspace: &Path) -> Vec<String> {
    vec![
        env!("CARGO_BIN_EXE_warden").to_owned(),
        "mcp".into(),
        "--workspace".into(),
        workspace.to_str().unwrap().to_owned(),
    ]
}

/// Run `client` (a command line before the transport arguments) over both transports.
fn both_transports(name: &str, client: impl Fn() -> Command, first_marker: u32) {
    let (home, workspace) = setup();
    let gateway = GatewayProcess::start(home.path(), workspace.path(), &[]);
    let token = gateway_token(home.path(), "main");
    let url = format!("http://{}/mcp", gateway.addr);
    for (i, (transport, target)) in [
        ("stdio", stdio_target(workspace.path())),
        ("http", vec![url.clone()]),
    ]
    .into_iter()
    .enumerate()
    {
        let m = marker(first_marker + i as u32);
        let mut command = client();
        command
            .args([transport, m.as_str()])
            .args(&target)
            .env("WARDEN_HOME", home.path())
            .env("WARDEN_LOG", "error")
            .env("WARDEN_TOKEN", &token);
        drive(command, &m, &format!("{name} over {transport}"));
    }
}

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients")
}

#[test]
fn the_python_sdk_finds_warden_conformant_over_stdio_and_http() {
    let Some(python) = python_sdk() else { return };
    let script = clients_dir().join("mcp_conformance.py");
    both_transports(
        "Python SDK",
        || {
            let mut c = Command::new(&python);
            c.arg(&script);
            c
        },
        10,
    );
}

#[test]
fn the_typescript_sdk_finds_warden_conformant_over_stdio_and_http() {
    let Some(sdk) = typescript_sdk() else { return };
    // Node resolves the SDK from the script's own directory: run a copy placed beside it.
    let script = sdk.join("mcp_conformance.mjs");
    std::fs::copy(clients_dir().join("mcp_conformance.mjs"), &script).unwrap();
    both_transports(
        "TypeScript SDK",
        || {
            let mut c = Command::new("node");
            c.arg(&script);
            c
        },
        20,
    );
}

/// One raw HTTP POST to `/mcp` with `body`; the status line, the headers and the body.
fn post(addr: &str, token: &str, session: Option<&str>, body: &str) -> (String, String) {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let session = session
        .map(|s| format!("Mcp-Session-Id: {s}\r\nMcp-Protocol-Version: 2025-06-18\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: bearer {token}\r\nAccept: application/json, text/event-stream\r\nContent-Type: application/json\r\n{session}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (head.to_owned(), body.to_owned())
}

/// The JSON-RPC message in a response body (plain JSON, or the data of an SSE event).
fn message(body: &str) -> Value {
    let json = body
        .lines()
        .find_map(|l| l.strip_prefix("data: ").filter(|d| d.starts_with('{')))
        .unwrap_or(body.trim());
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[test]
fn raw_http_frames_get_the_json_rpc_errors_the_specification_gives() {
    let (home, workspace) = setup();
    let gateway = GatewayProcess::start(home.path(), workspace.path(), &[]);
    let token = gateway_token(home.path(), "main");
    let addr = gateway.addr.as_str();
    for (body, code) in [
        ("not json at all", -32700),
        ("{\"jsonrpc\":\"2.0\",\"id\":1,", -32700),
        (
            "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]",
            -32600,
        ),
        (
            "{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"initialize\"}",
            -32600,
        ),
        ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":5}", -32600),
    ] {
        let (head, response) = post(addr, &token, None, body);
        assert!(head.starts_with("HTTP/1.1 400"), "{body}: {head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{head}"
        );
        let v = message(&response);
        assert_eq!(v["error"]["code"], code, "{body}: {v}");
        assert_eq!(v["jsonrpc"], "2.0");
    }
    // Without a credential nothing is looked at.
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(stream, "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 3\r\nConnection: close\r\n\r\nbad").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 401"), "{response}");

    // In a session: a known method with parameters that do not fit is -32602 naming the
    // field; an unknown method is -32601.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}});
    let (head, _) = post(addr, &token, None, &init.to_string());
    let session = raw_http::session_id(&head).expect("a session");
    let (head, _) = post(
        addr,
        &token,
        Some(&session),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert!(head.starts_with("HTTP/1.1 202"), "{head}");
    for (body, code, field) in [
        (
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"exec","arguments":"str"}}"#,
            -32602,
            Some("arguments"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read","arguments":{"path":"notes.txt","offset":0}}}"#,
            -32602,
            Some("offset"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"exec","arguments":{"command":"true","timeout":-5}}}"#,
            -32602,
            Some("timeout"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":5,"method":"no/such"}"#,
            -32601,
            None,
        ),
    ] {
        let (_, response) = post(addr, &token, Some(&session), body);
        let v = message(&response);
        assert_eq!(v["error"]["code"], code, "{body}: {v}");
        if let Some(field) = field {
            assert_eq!(v["error"]["data"]["field"], field, "{v}");
        }
    }
}

/// JSON-RPC lines for `warden mcp`: a handshake and a call it refuses (which rmcp logs at
/// WARN on stderr when asked to: [`LOUD`]).
const FRAMES: &str = concat!(
    r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}"#,
    "\n",
    r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    "\n",
    r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"exec","arguments":{"command":""}}}"#,
    "\n"
);

/// Logging that shows rmcp's WARN line about each error response.
const LOUD: &str = "warn,rmcp::service=warn";

#[test]
fn stderr_has_colour_only_for_a_terminal_and_never_with_no_color() {
    let (home, workspace) = setup();
    let frames = home.path().join("frames.jsonl");
    std::fs::write(&frames, FRAMES).unwrap();
    let mcp = format!(
        "{} mcp --workspace {} < {}",
        env!("CARGO_BIN_EXE_warden"),
        workspace.path().display(),
        frames.display()
    );
    // A pipe (how every MCP client reads a server's stderr): plain text.
    let out = warden()
        .args(["mcp", "--workspace"])
        .arg(workspace.path())
        .env("WARDEN_HOME", home.path())
        .env("WARDEN_LOG", LOUD)
        .stdin(std::fs::File::open(&frames).unwrap())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("WARN"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "colour on a pipe: {stderr:?}");
    // A terminal (util-linux `script` gives the command one): colour, unless NO_COLOR.
    let script = Command::new("script").arg("--version").output();
    if !script.is_ok_and(|o| o.status.success()) {
        eprintln!("SKIPPED (terminal half): util-linux `script` is not installed");
        return;
    }
    for (no_color, coloured) in [(None, true), (Some("1"), false)] {
        let mut cmd = Command::new("script");
        cmd.args(["-qec", &mcp, "/dev/null"])
            .env("WARDEN_HOME", home.path())
            .env("WARDEN_LOG", LOUD)
            .env_remove("NO_COLOR");
        if let Some(v) = no_color {
            cmd.env("NO_COLOR", v);
        }
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let warn = text
            .lines()
            .find(|l| l.contains("WARN"))
            .unwrap_or_else(|| panic!("no log line on the terminal: {text:?}"));
        assert_eq!(
            warn.contains('\u{1b}'),
            coloured,
            "NO_COLOR={no_color:?}: {warn:?}"
        );
    }
}

#[test]
fn completions_are_written_for_bash_zsh_and_fish() {
    for (shell, expect) in [
        ("bash", "complete -F _warden"),
        ("zsh", "#compdef warden"),
        ("fish", "complete -c warden"),
    ] {
        let out = warden().args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.contains(expect), "{shell}: {script:.200}");
        for sub in ["gateway", "mcp", "approvals", "completions"] {
            assert!(script.contains(sub), "{shell} lacks {sub}");
        }
    }
    let out = warden().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("possible values: bash, zsh, fish"));
}
