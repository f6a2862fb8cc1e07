//! End-to-end: a real MCP client (rmcp) drives `warden mcp` over stdio and `warden
//! gateway run` over Streamable HTTP — exec allowed, denied and asked (answered by the
//! real terminal approver), system events, slash commands, file tools and their escape
//! attempts, authentication, and clean shutdown that kills in-flight runs.

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use support::{TerminalApprover, configure, wait_gone};

const TOKEN: &str = "mcp-test-token-0123456789";

/// A workspace with Warden's state directory inside it (to prove the file tools refuse it).
struct Setup {
    workspace: tempfile::TempDir,
    home: PathBuf,
}

fn canonical(program: &str) -> String {
    std::fs::canonicalize(format!("/usr/bin/{program}"))
        .or_else(|_| std::fs::canonicalize(format!("/bin/{program}")))
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn setup() -> Setup {
    let workspace = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(workspace.path()).unwrap();
    std::fs::write(ws.join("notes.txt"), "alpha\nbeta\ngamma\n").unwrap();
    std::fs::create_dir(ws.join("src")).unwrap();
    std::fs::write(
        ws.join("src/main.rs"),
        "fn main() {\n    println!(\"TODO\");\n}\n",
    )
    .unwrap();
    let home = ws.join(".warden");
    std::fs::create_dir(&home).unwrap();
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let approvals = json!({
        "version": 1,
        "socket": {"path": home.join("exec-approvals.sock"), "token": TOKEN},
        "defaults": {"security": "allowlist", "ask": "on-miss", "askFallback": "deny"},
        "agents": {"coder": {"allowlist": [
            {"pattern": canonical("echo")},
            {"pattern": canonical("sleep")},
            {"pattern": canonical("pwd")}
        ]}}
    });
    configure(
        &home,
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\n[[agents.list]]\nid = \"coder\"\n",
        &approvals.to_string(),
    );
    Setup { workspace, home }
}

impl Setup {
    fn ws(&self) -> PathBuf {
        std::fs::canonicalize(self.workspace.path()).unwrap()
    }
}

async fn stdio_client(s: &Setup) -> RunningService<RoleClient, ()> {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_warden"));
    cmd.args(["mcp", "--agent", "coder", "--session", "s1", "--workspace"])
        .arg(s.ws())
        .env("WARDEN_HOME", &s.home)
        .env("WARDEN_LOG", "warn");
    ().serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap()
}

async fn call(client: &RunningService<RoleClient, ()>, tool: &str, args: Value) -> CallToolResult {
    let Value::Object(map) = args else {
        panic!("arguments must be an object")
    };
    client
        .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(map))
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"))
}

fn structured(r: &CallToolResult) -> Value {
    r.structured_content.clone().unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_exec_allowed_denied_asked_and_events() {
    let s = setup();
    let client = stdio_client(&s).await;
    let tools: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(
        tools,
        vec![
            "exec", "process", "read", "write", "edit", "list", "grep", "session"
        ]
    );

    // Allowed by the allowlist.
    let r = call(&client, "exec", json!({"command": "echo hello"})).await;
    let v = structured(&r);
    assert_eq!(v["status"], "finished", "{v:#}");
    assert_eq!(v["exitCode"], 0);
    assert_eq!(v["stdout"], "hello\n");
    assert_eq!(v["decision"]["reason"], "allowlist-match");
    assert_eq!(r.is_error, Some(false));
    let first_run = v["runId"].as_str().unwrap().to_owned();

    // A miss with nobody to ask: askFallback=deny. The previous run's events ride along.
    let r = call(&client, "exec", json!({"argv": ["sh", "-c", "exit 3"]})).await;
    let v = structured(&r);
    assert_eq!(v["status"], "denied", "{v:#}");
    assert_eq!(v["reason"], "no-approver");
    assert!(v["rule"].as_str().unwrap().contains("askFallback=deny"));
    assert_eq!(r.is_error, Some(true));
    // One line: the agent already has that run's whole result.
    assert_eq!(
        v["events"],
        json!([format!(
            "Exec finished (node=gateway, id={first_run}, code=0)"
        )])
    );
    let denied_run = v["runId"].as_str().unwrap().to_owned();

    // Tool parameters cannot loosen the host file.
    let r = call(
        &client,
        "exec",
        json!({"argv": ["sh", "-c", "exit 3"], "security": "full", "ask": "off"}),
    )
    .await;
    let v = structured(&r);
    assert_eq!(v["status"], "denied");
    assert_eq!(
        v["events"],
        json!([format!(
            "Exec denied (node=gateway, id={denied_run}, no-approver)"
        )])
    );

    // With the real approver: deny, allow once (a non-zero exit is a normal result),
    // allow always (which stores the pattern).
    let mut approver = TerminalApprover::start(&s.home);
    let asked = {
        let c = &client;
        async move { call(c, "exec", json!({"argv": ["sh", "-c", "exit 3"]})).await }
    };
    let answer = tokio::task::spawn_blocking(move || {
        approver.answer("argv:     [\"", "d\n");
        approver
    });
    let r = asked.await;
    let mut approver = answer.await.unwrap();
    assert_eq!(structured(&r)["reason"], "approval-denied");

    let asked = call(&client, "exec", json!({"argv": ["sh", "-c", "exit 3"]}));
    let answer = tokio::task::spawn_blocking(move || {
        approver.answer("exit 3", "o\n");
        approver
    });
    let r = asked.await;
    let mut approver = answer.await.unwrap();
    let v = structured(&r);
    assert_eq!(v["status"], "finished", "{v:#}");
    assert_eq!(v["exitCode"], 3);
    assert_eq!(r.is_error, Some(false));

    let asked = call(&client, "exec", json!({"argv": ["true"]}));
    let answer = tokio::task::spawn_blocking(move || {
        approver.answer(&format!("would store {}", canonical("true")), "a\n");
        approver
    });
    let r = asked.await;
    let approver = answer.await.unwrap();
    assert_eq!(structured(&r)["exitCode"], 0);
    let file: Value =
        serde_json::from_slice(&std::fs::read(s.home.join("exec-approvals.json")).unwrap())
            .unwrap();
    let patterns: Vec<&str> = file["agents"]["coder"]["allowlist"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["pattern"].as_str().unwrap())
        .collect();
    assert!(
        patterns.contains(&canonical("true").as_str()),
        "{patterns:?}"
    );
    drop(approver);
    // Now allowlisted: runs without asking anyone.
    let r = call(&client, "exec", json!({"argv": ["true"]})).await;
    assert_eq!(structured(&r)["decision"]["reason"], "allowlist-match");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relative_cwd_starts_at_the_workspace_not_where_the_server_was_started() {
    let s = setup();
    let client = stdio_client(&s).await;
    for (cwd, expected) in [
        ("src", s.ws().join("src")),
        (".", s.ws()),
        ("/", PathBuf::from("/")),
    ] {
        let r = call(&client, "exec", json!({"argv": ["pwd"], "cwd": cwd})).await;
        let v = structured(&r);
        assert_eq!(
            v["stdout"],
            format!("{}\n", expected.display()),
            "cwd {cwd}: {v:#}"
        );
    }
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_slash_commands_and_limits() {
    let s = setup();
    let client = stdio_client(&s).await;
    // /elevated full is still capped by the host file (allowlist, ask on-miss).
    let r = call(&client, "session", json!({"command": "/elevated full"})).await;
    assert_eq!(structured(&r)["ok"], true);
    let r = call(&client, "exec", json!({"argv": ["sh", "-c", "true"]})).await;
    let v = structured(&r);
    assert_eq!(v["status"], "denied", "{v:#}");
    assert_eq!(v["reason"], "no-approver");
    // /exec host=node routes to the (absent) Bridge.
    call(&client, "session", json!({"command": "/exec host=node"})).await;
    let r = call(&client, "exec", json!({"command": "echo x"})).await;
    assert_eq!(structured(&r)["reason"], "no-node");
    // Invalid slash commands change nothing.
    let r = call(&client, "session", json!({"command": "/exec host=moon"})).await;
    assert_eq!(r.is_error, Some(true));
    call(&client, "session", json!({"command": "/elevated off"})).await;
    let r = call(&client, "exec", json!({"command": "echo back"})).await;
    assert_eq!(
        structured(&r)["status"],
        "finished",
        "/elevated off restored host=gateway from config"
    );
    // Timeouts kill the tree; output is capped.
    let started = Instant::now();
    let r = call(
        &client,
        "exec",
        json!({"argv": ["sleep", "300"], "timeout": 1}),
    )
    .await;
    let v = structured(&r);
    assert_eq!(v["timedOut"], true);
    assert_eq!(v["exitCode"], 124);
    assert!(started.elapsed() < Duration::from_secs(30));
    // Bad arguments are protocol errors, not runs.
    let err = client
        .call_tool(
            CallToolRequestParams::new("exec").with_arguments(
                json!({"command": "echo", "argv": ["x"]})
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
        )
        .await;
    assert!(err.is_err());
    let r = call(
        &client,
        "exec",
        json!({"command": "echo x", "env": {"LD_PRELOAD": "/tmp/evil.so"}}),
    )
    .await;
    assert!(
        structured(&r)["error"]
            .as_str()
            .unwrap()
            .contains("LD_PRELOAD")
    );
    client.cancel().await.unwrap();
}

/// Security invariant 9 over MCP: before the analysis was bounded, one `exec` with a few
/// hundred nested groups overflowed a worker thread's stack and aborted `warden mcp` (the
/// agent lost its tool server). Every such command is now an ordinary denial, and the
/// server answers the next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_survives_pathological_commands_and_keeps_answering() {
    let s = setup();
    let client = stdio_client(&s).await;
    let nested =
        |open: &str, close: &str, n: usize| format!("{}ls{}", open.repeat(n), close.repeat(n));
    let commands = vec![
        nested("{ ", "; }", 300),
        nested("{ ", "; }", 12_000),
        "{ ".repeat(50_000),
        "{ ".repeat(1 << 19),
        nested("( ", " )", 12_000),
        nested("$( ", " )", 12_000),
        nested("${a:-", "}", 10_000),
        nested("if true; then ", "; fi", 3_000),
        format!("echo \"{}\"", nested("$\\\n(", ")", 6_000)),
        "( ".repeat(40),
        nested("case x in a) ", " esac ", 30),
        "ls 99999999999>x".to_string(),
        "ls ~+99999999999999999999".to_string(),
    ];
    let started = Instant::now();
    for command in &commands {
        for args in [
            json!({"command": command}),
            json!({"argv": ["sh", "-c", command]}),
        ] {
            let r = call(&client, "exec", args).await;
            let v = structured(&r);
            // A miss: asking was required, and with nobody to ask, askFallback=deny.
            assert_eq!(v["status"], "denied", "{:.60}…: {v:#}", command);
            assert_eq!(v["reason"], "no-approver", "{:.60}…", command);
            assert_eq!(r.is_error, Some(true));
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    // Still the same server, still serving.
    let r = call(&client, "exec", json!({"command": "echo still here"})).await;
    let v = structured(&r);
    assert_eq!(v["status"], "finished", "{v:#}");
    assert_eq!(v["stdout"], "still here\n");
    client.cancel().await.unwrap();
}

/// Below the MCP client: JSON-RPC lines written straight to `warden mcp`'s stdin. A line
/// that does not parse (nested 100,000 deep, cut short, or not JSON) is answered with a
/// parse error (-32700, id null); arguments nested just under serde_json's limit, or not
/// an object, are invalid parameters (-32602) naming the field; an unknown method is
/// -32601, a batch -32600; and the server answers the next request.
#[test]
fn stdio_answers_undecodable_lines_with_the_specified_errors_and_keeps_answering() {
    let s = setup();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["mcp", "--agent", "coder", "--session", "s1", "--workspace"])
        .arg(s.ws())
        .env("WARDEN_HOME", &s.home)
        .env("WARDEN_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Ok(v) = serde_json::from_str(&line)
                && tx.send(v).is_err()
            {
                break;
            }
        }
    });
    // Owns stdin: dropping it is the end of input, after which the server exits.
    let mut send = move |line: &str| {
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    };
    let answer = |id: Value| loop {
        let v = rx.recv_timeout(Duration::from_secs(30)).expect("an answer");
        if v["id"] == id {
            return v;
        }
    };
    send(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}})
        .to_string(),
    );
    assert!(answer(json!(1))["result"]["serverInfo"].is_object());
    send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let deep = 100_000;
    send(&format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"exec","arguments":{{"command":{}"x"{}}}}}}}"#,
        "[".repeat(deep),
        "]".repeat(deep)
    ));
    send(&format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":3,{}",
        "{\"a\":".repeat(deep)
    ));
    send("\u{0}\u{fffd} not json at all");
    for _ in 0..3 {
        let parse = answer(Value::Null);
        assert_eq!(parse["error"]["code"], -32700, "{parse}");
    }
    let nested = 120;
    send(&format!(
        r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{{"name":"exec","arguments":{{"command":{}"x"{}}}}}}}"#,
        "[".repeat(nested),
        "]".repeat(nested)
    ));
    let refused = answer(json!(4));
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`command`"),
        "{refused}"
    );
    send(
        r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"exec","arguments":"str"}}"#,
    );
    let refused = answer(json!(6));
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    assert_eq!(refused["error"]["data"]["field"], "arguments", "{refused}");
    send(r#"{"jsonrpc":"2.0","id":7,"method":"no/such/method"}"#);
    assert_eq!(answer(json!(7))["error"]["code"], -32601);
    send(r#"[{"jsonrpc":"2.0","id":8,"method":"ping"}]"#);
    assert_eq!(answer(Value::Null)["error"]["code"], -32600);
    send(r#"{"jsonrpc":"1.0","id":9,"method":"ping"}"#);
    assert_eq!(answer(json!(9))["error"]["code"], -32600);
    send(
        &json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
            "name": "exec", "arguments": {"command": "echo after"}}})
        .to_string(),
    );
    let ran = answer(json!(5));
    assert_eq!(
        ran["result"]["structuredContent"]["stdout"], "after\n",
        "{ran}"
    );
    assert!(child.try_wait().unwrap().is_none(), "warden mcp exited");
    drop(send);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

/// `warden mcp` with `input` as its whole stdin, a pipe already written and closed when
/// it starts (`printf … | warden mcp`): everything it wrote.
fn mcp_with_input(s: &Setup, input: &str) -> String {
    let (read, write) = nix::unistd::pipe().unwrap();
    std::fs::File::from(write)
        .write_all(input.as_bytes())
        .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["mcp", "--agent", "coder", "--session", "s1", "--workspace"])
        .arg(s.ws())
        .env("WARDEN_HOME", &s.home)
        .env("WARDEN_LOG", "off")
        .stdin(Stdio::from(read))
        .stderr(Stdio::null())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn stdio_answers_every_line_read_before_its_input_closes() {
    let s = setup();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}})
    .to_string();
    // The answer used to be lost about one run in ten: sixty runs of each.
    for round in 0..60 {
        let out = mcp_with_input(&s, "not json\n");
        assert!(out.contains("-32700"), "round {round}: {out:?}");
        let out = mcp_with_input(&s, &format!("{init}\n[]\n"));
        assert!(out.contains("serverInfo"), "round {round}: {out:?}");
        assert!(out.contains("-32600"), "round {round}: {out:?}");
    }
}

/// `warden mcp` on one end of a socket pair (stdin and stdout), as Claude Code starts
/// stdio servers; initialized, with an exec of `sleep 600` in flight; then `signal`.
fn stdio_server_on_a_socket_stops_on(signal: nix::sys::signal::Signal) {
    let s = setup();
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["mcp", "--agent", "coder", "--session", "s1", "--workspace"])
        .arg(s.ws())
        .env("WARDEN_HOME", &s.home)
        .env("WARDEN_LOG", "off")
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(
            theirs.try_clone().unwrap(),
        )))
        .stdout(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut writer = ours.try_clone().unwrap();
    let mut lines = BufReader::new(ours).lines();
    let mut send = |v: Value| {
        writer.write_all(format!("{v}\n").as_bytes()).unwrap();
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "socket", "version": "0"}}}),
    );
    let answer = lines.next().unwrap().unwrap();
    assert!(answer.contains("serverInfo"), "{answer}");
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    // A duration no other test uses, to find this run's process.
    let seconds = format!("600.{}", 1 + signal as i32);
    send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "exec", "arguments": {"argv": ["sleep", seconds]}}}),
    );
    let started = Instant::now();
    let pid = loop {
        if let Some(pid) = support::pids_with_cmdline(&format!("{} {seconds}", canonical("sleep")))
            .first()
            .or(support::pids_with_cmdline(&format!("sleep {seconds}")).first())
        {
            break *pid;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the run never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
    let signalled = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if signalled.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("warden mcp on a socket ignored {signal} for 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        signalled.elapsed() < Duration::from_secs(5),
        "{signal} took {:?}",
        signalled.elapsed()
    );
    assert!(
        status.code().is_some(),
        "ended by {status:?}, not by itself"
    );
    assert!(wait_gone(pid), "the run in flight outlived the server");
}

#[test]
fn stdio_server_on_a_socket_stops_on_sigterm() {
    stdio_server_on_a_socket_stops_on(nix::sys::signal::Signal::SIGTERM);
}

#[test]
fn stdio_server_on_a_socket_stops_on_sigint() {
    stdio_server_on_a_socket_stops_on(nix::sys::signal::Signal::SIGINT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_tools_work_inside_the_workspace_and_refuse_escapes() {
    let s = setup();
    // Writes without a human in the loop (approval mode is tested below).
    let config = std::fs::read_to_string(s.home.join("config.toml")).unwrap();
    std::fs::write(
        s.home.join("config.toml"),
        format!("{config}[sandbox]\npermission_mode = \"unrestricted\"\n"),
    )
    .unwrap();
    let client = stdio_client(&s).await;
    let r = call(
        &client,
        "read",
        json!({"path": "notes.txt", "offset": 2, "limit": 1}),
    )
    .await;
    assert_eq!(structured(&r)["text"], "beta\n");
    call(
        &client,
        "write",
        json!({"path": "out/new.txt", "content": "one two"}),
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(s.ws().join("out/new.txt")).unwrap(),
        "one two"
    );
    let r = call(
        &client,
        "edit",
        json!({"path": "out/new.txt", "old_string": "two", "new_string": "three"}),
    )
    .await;
    assert_eq!(r.is_error, Some(false));
    assert_eq!(
        std::fs::read_to_string(s.ws().join("out/new.txt")).unwrap(),
        "one three"
    );
    let r = call(
        &client,
        "edit",
        json!({"path": "notes.txt", "old_string": "zzz", "new_string": "x"}),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    let r = call(&client, "list", json!({})).await;
    let listing = structured(&r);
    let names: Vec<&str> = listing["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"notes.txt") && names.contains(&"src"));
    let r = call(&client, "grep", json!({"pattern": "TODO"})).await;
    assert_eq!(structured(&r)["matches"][0]["path"], "src/main.rs");
    // The token lives in the state directory inside the workspace: grep never sees it.
    let r = call(&client, "grep", json!({"pattern": TOKEN})).await;
    assert_eq!(structured(&r)["matches"], json!([]));

    std::os::unix::fs::symlink(s.ws().join(".warden"), s.ws().join("innocent")).unwrap();
    std::os::unix::fs::symlink("/etc", s.ws().join("etc-link")).unwrap();
    std::fs::create_dir_all(s.ws().join(".git/hooks")).unwrap();
    std::fs::write(s.ws().join(".git/config"), "[core]\n").unwrap();
    std::os::unix::fs::symlink(s.ws().join(".git"), s.ws().join("git-link")).unwrap();
    for (tool, args) in [
        ("read", json!({"path": "../../../../etc/passwd"})),
        ("read", json!({"path": "/etc/passwd"})),
        ("read", json!({"path": ".warden/exec-approvals.json"})),
        ("read", json!({"path": "innocent/exec-approvals.json"})),
        ("read", json!({"path": "etc-link/passwd"})),
        (
            "write",
            json!({"path": ".warden/exec-approvals.json", "content": "{}"}),
        ),
        (
            "write",
            json!({"path": "innocent/config.toml", "content": "x"}),
        ),
        ("write", json!({"path": "/tmp/escape.txt", "content": "x"})),
        (
            "edit",
            json!({"path": ".warden/config.toml", "old_string": "gateway", "new_string": "x"}),
        ),
        (
            "write",
            json!({"path": ".git/hooks/pre-commit", "content": "#!/bin/sh\n"}),
        ),
        (
            "edit",
            json!({"path": ".git/config", "old_string": "[core]", "new_string": "[core]\n\tfsmonitor = x"}),
        ),
        (
            "write",
            json!({"path": "git-link/commondir", "content": "../evil"}),
        ),
        ("list", json!({"path": ".warden"})),
        ("list", json!({"path": "innocent"})),
        ("grep", json!({"pattern": "token", "path": "innocent"})),
    ] {
        let r = call(&client, tool, args.clone()).await;
        assert_eq!(
            r.is_error,
            Some(true),
            "{tool} {args} was allowed: {:?}",
            r.structured_content
        );
        assert!(
            structured(&r)["error"].as_str().unwrap().contains("denied"),
            "{tool} {args}: {:?}",
            r.structured_content
        );
    }
    assert!(!Path::new("/tmp/escape.txt").exists());
    let config = std::fs::read_to_string(s.home.join("config.toml")).unwrap();
    assert!(config.contains("gateway"));
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_approval_mode_file_writes_wait_for_the_human() {
    let s = setup();
    let config = std::fs::read_to_string(s.home.join("config.toml")).unwrap();
    std::fs::write(
        s.home.join("config.toml"),
        format!("{config}[sandbox]\npermission_mode = \"approval\"\n"),
    )
    .unwrap();
    let client = stdio_client(&s).await;
    // Nobody to ask: refused, nothing written.
    let r = call(
        &client,
        "write",
        json!({"path": "a.txt", "content": "first"}),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    let error = structured(&r)["error"].as_str().unwrap().to_owned();
    assert!(
        error.contains("rejected") && error.contains("approval"),
        "{error}"
    );
    assert!(!s.ws().join("a.txt").exists());

    // The human sees what would be written; allow once writes, deny does not.
    let mut approver = TerminalApprover::start(&s.home);
    let asked = call(
        &client,
        "write",
        json!({"path": "a.txt", "content": "approved content"}),
    );
    let answer = tokio::task::spawn_blocking(move || {
        approver.answer("write a.txt: 16 bytes: \"approved content\"", "o\n");
        approver
    });
    let r = asked.await;
    let mut approver = answer.await.unwrap();
    assert_eq!(r.is_error, Some(false), "{:?}", r.structured_content);
    assert_eq!(
        std::fs::read_to_string(s.ws().join("a.txt")).unwrap(),
        "approved content"
    );
    let asked = call(
        &client,
        "edit",
        json!({"path": "a.txt", "old_string": "approved", "new_string": "denied"}),
    );
    let answer = tokio::task::spawn_blocking(move || {
        approver.answer("stores nothing (a write permission", "d\n");
        approver
    });
    let r = asked.await;
    let approver = answer.await.unwrap();
    assert_eq!(r.is_error, Some(true));
    assert!(
        structured(&r)["error"]
            .as_str()
            .unwrap()
            .contains("denied by the approver")
    );
    assert_eq!(
        std::fs::read_to_string(s.ws().join("a.txt")).unwrap(),
        "approved content"
    );
    // A refused path is refused outright, without bothering the human.
    let r = call(
        &client,
        "write",
        json!({"path": ".warden/config.toml", "content": "x"}),
    )
    .await;
    assert!(structured(&r)["error"].as_str().unwrap().contains("denied"));
    drop(approver);
    client.cancel().await.unwrap();
}

use support::GatewayProcess as Gateway;

fn start_gateway(s: &Setup) -> Gateway {
    Gateway::start(&s.home, &s.ws(), &[])
}

/// The agent `coder`'s credential.
fn coder_token(s: &Setup) -> String {
    support::gateway_token(&s.home, "coder")
}

async fn http_client(g: &Gateway, token: &str) -> RunningService<RoleClient, ()> {
    let config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            format!("http://{}/mcp", g.addr),
        )
        .auth_header(token);
    ().serve(StreamableHttpClientTransport::from_config(config))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_endpoint_requires_the_token_checks_hosts_and_serves_the_tools() {
    let s = setup();
    let g = start_gateway(&s);
    let token = coder_token(&s);
    assert!(token.len() >= 43);
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let post = |auth: &str, host: &str| {
        format!(
            "POST /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    assert!(
        g.raw(&post("", &g.addr)).starts_with("HTTP/1.1 401"),
        "no token"
    );
    assert!(
        g.raw(&post("Authorization: Bearer wrong\r\n", &g.addr))
            .starts_with("HTTP/1.1 401"),
        "wrong token"
    );
    let rebinding = g.raw(&post(
        &format!("Authorization: Bearer {token}\r\n"),
        "evil.example.com",
    ));
    assert!(
        rebinding.starts_with("HTTP/1.1 4"),
        "a foreign Host header must be refused: {rebinding}"
    );
    assert!(
        g.raw(&post(
            &format!("Authorization: Bearer {token}\r\n"),
            &g.addr
        ))
        .starts_with("HTTP/1.1 200")
    );
    assert!(
        g.raw("GET /bridge HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .starts_with("HTTP/1.1 401")
    );

    let client = http_client(&g, &token).await;
    assert_eq!(client.list_all_tools().await.unwrap().len(), 8);
    let r = call(&client, "exec", json!({"command": "echo over http"})).await;
    assert_eq!(structured(&r)["stdout"], "over http\n");
    let r = call(
        &client,
        "read",
        json!({"path": ".warden/gateway-credentials.json"}),
    )
    .await;
    assert_eq!(
        r.is_error,
        Some(true),
        "the gateway token must not be readable by the agent"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_shuts_the_gateway_down_and_kills_in_flight_runs() {
    let s = setup();
    let mut g = start_gateway(&s);
    let token = coder_token(&s);
    let client = http_client(&g, &token).await;
    let marker = "sleep 317";
    let in_flight = tokio::spawn(async move {
        let _ = client
            .call_tool(
                CallToolRequestParams::new("exec").with_arguments(
                    json!({"argv": ["sleep", "317"]})
                        .as_object()
                        .unwrap()
                        .clone(),
                ),
            )
            .await;
    });
    let mut pids = Vec::new();
    for _ in 0..200 {
        pids = support::pids_with_cmdline(marker);
        if !pids.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!pids.is_empty(), "the run never started");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(g.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = g.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the gateway did not stop"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status:?}");
    for pid in pids {
        assert!(wait_gone(pid), "in-flight run {pid} survived the shutdown");
    }
    in_flight.abort();
}
