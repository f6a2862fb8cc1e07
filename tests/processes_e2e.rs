//! End-to-end: runs that outlive their call, driven by a real MCP client (rmcp) over
//! `warden mcp` (stdio) and `warden gateway run` (Streamable HTTP): a server started in
//! the background and polled, a program's question answered through standard input (on
//! the gateway host and in the sandbox), a flood of output nobody reads, a run killed by
//! the agent and by the end of its session with its whole tree gone (a `setsid` child
//! included), and another agent that can neither see nor touch the run.

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/mcp_runs.rs"]
mod mcp_runs;
mod support;

use mcp_runs::*;
use rmcp::RoleClient;
use rmcp::service::RunningService;
use serde_json::{Value, json};

/// A script that starts a `setsid` grandchild (leaving the run's session and group),
/// prints both pids, says it is ready and serves until killed.
const SERVER: &str = "setsid sleep 300 & echo child=$!; echo self=$$; echo ready; exec sleep 300";

fn pid_of(output: &str, name: &str) -> i32 {
    output
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name}= in {output:?}"))
        .trim()
        .parse()
        .unwrap()
}

/// Start [`SERVER`] in the background and wait until it is ready: its run id, its own
/// pid and its `setsid` child's.
async fn start_server(client: &RunningService<RoleClient, ()>) -> (String, i32, i32) {
    let started = structured(
        client,
        "exec",
        json!({"command": SERVER, "background": true}),
    )
    .await;
    assert!(
        matches!(started["status"].as_str(), Some("pending" | "running")),
        "{started}"
    );
    assert_eq!(started["exitCode"], Value::Null);
    let run = started["runId"].as_str().unwrap().to_owned();
    let seen = poll_until(client, &run, "ready").await;
    let (this, child) = (pid_of(&seen, "self"), pid_of(&seen, "child"));
    assert!(!gone(child) && !gone(this));
    (run, this, child)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_server_is_polled_listed_and_killed_with_its_whole_tree() {
    let s = setup();
    let client = stdio_client(&s).await;
    let (run, this, child) = start_server(&client).await;

    let listed = structured(&client, "process", json!({"action": "list"})).await;
    let runs = listed["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{listed}");
    assert_eq!(runs[0]["runId"], run.as_str());
    assert_eq!(runs[0]["state"], "running");

    // Nothing new: a poll from where the last stopped answers at once with nothing.
    let quiet = structured(&client, "process", json!({"action": "poll", "runId": run})).await;
    assert_eq!(quiet["output"], "", "{quiet}");
    // A cursor past the end is refused, saying how far the output goes.
    let past = call(
        &client,
        "process",
        json!({"action": "poll", "runId": run, "cursor": 1_000_000}),
    )
    .await;
    assert_eq!(past.is_error, Some(true));
    assert!(structured_text(&past).contains("past the end"), "{past:?}");

    let killed = structured(&client, "process", json!({"action": "kill", "runId": run})).await;
    assert_eq!(killed["run"]["state"], "ended", "{killed}");
    assert_eq!(killed["result"]["cancelled"], true, "{killed}");
    wait_gone(this);
    wait_gone(child);

    // The kill was answered whole: the run's finish event is one line without output.
    let next = call(&client, "exec", json!({"command": "true"})).await;
    let events = next.structured_content.unwrap()["events"].clone();
    let events: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("Exec finished") && e.contains(&run) && !e.contains('\n')),
        "{events:?}"
    );
    client.cancel().await.unwrap();
}

/// A program that asks a question gets the answer through its standard input, on
/// `host`; the call that started it returned at its yield.
async fn answers_a_question_on(host: &str) {
    let s = setup();
    let client = stdio_client(&s).await;
    let asked = structured(
        &client,
        "exec",
        json!({
            "command": "printf 'name? '; read -r name; echo \"hello $name\"; read -r more; echo \"then $more\"",
            "host": host,
            "yield": 0.5
        }),
    )
    .await;
    assert_eq!(asked["status"], "running", "{asked}");
    let run = asked["runId"].as_str().unwrap().to_owned();
    // The call returned the output so far; a poll goes on from there.
    if !asked["output"].as_str().unwrap().contains("name?") {
        poll_until(&client, &run, "name?").await;
    }
    let wrote = structured(
        &client,
        "process",
        json!({"action": "write", "runId": run, "input": "world\n"}),
    )
    .await;
    assert_eq!(wrote["ok"], true, "{wrote}");
    poll_until(&client, &run, "hello world").await;
    // Closing its input is the end-of-file the second `read` sees.
    let closed = structured(&client, "process", json!({"action": "close", "runId": run})).await;
    assert_eq!(closed["ok"], true, "{closed}");
    let ended = structured(
        &client,
        "process",
        json!({"action": "wait", "runId": run, "wait": 20}),
    )
    .await;
    assert_eq!(ended["run"]["state"], "ended", "{ended}");
    assert_eq!(ended["result"]["exitCode"], 0, "{ended}");
    assert!(
        ended["output"].as_str().unwrap().ends_with("then \n"),
        "the second read saw end-of-file: {ended}"
    );
    assert_eq!(ended["result"]["host"], host, "{ended}");
    // Its input is closed now: a write says so and sends nothing.
    let late = call(
        &client,
        "process",
        json!({"action": "write", "runId": run, "input": "x\n"}),
    )
    .await;
    assert_eq!(late.is_error, Some(true));
    assert!(structured_text(&late).contains("closed"), "{late:?}");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_answered_through_standard_input_on_the_gateway_host() {
    answers_a_question_on("gateway").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_answered_through_standard_input_in_the_sandbox() {
    if !support::bwrap_usable() {
        eprintln!("SKIP: bubblewrap / user namespaces unavailable here");
        return;
    }
    answers_a_question_on("sandbox").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_ends_within_its_yield_returns_its_whole_result() {
    let s = setup();
    let client = stdio_client(&s).await;
    let r = structured(
        &client,
        "exec",
        json!({"command": "echo out; echo err >&2", "yield": 30}),
    )
    .await;
    assert_eq!(r["status"], "finished", "{r}");
    assert_eq!(
        (r["stdout"].as_str(), r["stderr"].as_str()),
        (Some("out\n"), Some("err\n"))
    );
    let listed = structured(&client, "process", json!({"action": "list"})).await;
    assert_eq!(
        listed["runs"],
        json!([]),
        "a run returned whole is not kept"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_nobody_reads_is_bounded_and_every_answer_within_the_cap() {
    let s = setup();
    let client = stdio_client(&s).await;
    let started = structured(
        &client,
        "exec",
        json!({"command": "head -c 5000000 /dev/zero | tr '\\0' x; echo; echo end", "background": true}),
    )
    .await;
    let run = started["runId"].as_str().unwrap().to_owned();
    let ended = structured(
        &client,
        "process",
        json!({"action": "wait", "runId": run, "wait": 30, "cursor": 0}),
    )
    .await;
    assert_eq!(ended["result"]["exitCode"], 0, "{ended}");
    let dropped = ended["dropped"].as_u64().unwrap();
    assert!(dropped >= 5_000_000 - (1 << 20), "{dropped} dropped");
    assert!(ended["output"].as_str().unwrap().len() <= 200_000);
    assert_eq!(ended["more"], true);
    // Reading on reaches the end in answers within the cap.
    let mut last = ended;
    for _ in 0..10 {
        if last["more"] == false {
            break;
        }
        last = structured(&client, "process", json!({"action": "poll", "runId": run})).await;
        assert!(last["output"].as_str().unwrap().len() <= 200_000);
    }
    assert!(
        last["output"].as_str().unwrap().ends_with("end\n"),
        "{}",
        last["cursor"]
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_ends_with_the_session_that_started_it() {
    let s = setup();
    let client = stdio_client(&s).await;
    let (_, this, child) = start_server(&client).await;
    // The client goes away: the stdio session ends, and its runs with it.
    client.cancel().await.unwrap();
    wait_gone(this);
    wait_gone(child);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_run_outlives_its_session_for_the_configured_time_only() {
    let s = setup();
    let config = s.home.path().join("config.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("[gateway]\nkeep_runs_after_session = \"3s\"\n");
    std::fs::write(&config, text).unwrap();
    let gateway = support::GatewayProcess::start(s.home.path(), &s.ws(), &[]);
    let token = support::gateway_token(s.home.path(), "coder");
    let first = http_client(&gateway.addr, &token).await;
    let (run, this, child) = start_server(&first).await;
    // The session that started it ends (DELETE): the run goes on, for now.
    let ended_at = std::time::Instant::now();
    first.cancel().await.unwrap();
    let second = http_client(&gateway.addr, &token).await;
    let listed = structured(&second, "process", json!({"action": "list"})).await;
    assert_eq!(listed["runs"][0]["runId"], run.as_str(), "{listed}");
    assert_eq!(listed["runs"][0]["state"], "running", "{listed}");
    // Its agent, in another session, can still drive it.
    let polled = structured(&second, "process", json!({"action": "poll", "runId": run})).await;
    assert_eq!(polled["ok"], true, "{polled}");
    assert!(!gone(this) && !gone(child));
    // Then it ends, its whole tree with it, when the configured time has passed.
    wait_gone(this);
    wait_gone(child);
    assert!(
        ended_at.elapsed() >= std::time::Duration::from_secs(3),
        "ended {:?} after its session, before the 3 s it was to be kept",
        ended_at.elapsed()
    );
    second.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_agent_can_neither_see_nor_touch_a_run() {
    let s = setup();
    let gateway = support::GatewayProcess::start(s.home.path(), &s.ws(), &[]);
    let coder = http_client(
        &gateway.addr,
        &support::gateway_token(s.home.path(), "coder"),
    )
    .await;
    let other = http_client(
        &gateway.addr,
        &support::gateway_token(s.home.path(), "other"),
    )
    .await;
    let (run, this, _) = start_server(&coder).await;

    let listed = structured(&other, "process", json!({"action": "list"})).await;
    assert_eq!(listed["runs"], json!([]), "{listed}");
    for action in ["poll", "kill", "wait", "close"] {
        let r = call(&other, "process", json!({"action": action, "runId": run})).await;
        assert_eq!(r.is_error, Some(true), "{action}");
        assert!(structured_text(&r).contains("no run"), "{action}: {r:?}");
    }
    for args in [
        json!({"action": "write", "runId": run, "input": "x"}),
        json!({"action": "signal", "runId": run, "signal": "KILL"}),
        json!({"action": "resize", "runId": run, "rows": 5, "cols": 5}),
    ] {
        let r = call(&other, "process", args.clone()).await;
        assert_eq!(r.is_error, Some(true), "{args}");
        assert!(structured_text(&r).contains("no run"), "{args}: {r:?}");
    }
    assert!(
        !gone(this),
        "the other agent's kill and SIGKILL did nothing"
    );

    // Its owner's HTTP session ends (DELETE): the run ends with it.
    coder.cancel().await.unwrap();
    wait_gone(this);
    drop(other);
}

/// `warden runs ...` against the gateway of `home`: exit code, stdout, stderr.
fn runs_cli(home: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = support::warden_in(home)
        .arg("runs")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_lists_reads_and_kills_every_agents_runs() {
    let s = setup();
    // No gateway yet: the operator is told where runs live.
    let (code, _, err) = runs_cli(s.home.path(), &[]);
    assert_ne!(code, 0);
    assert!(err.contains("warden gateway run"), "{err}");

    let gateway = support::GatewayProcess::start(s.home.path(), &s.ws(), &[]);
    let coder = http_client(
        &gateway.addr,
        &support::gateway_token(s.home.path(), "coder"),
    )
    .await;
    let (run, this, child) = start_server(&coder).await;
    // Output that would drive a terminal: a title, a screen clear, a bidi override.
    let hostile = structured(
        &coder,
        "exec",
        json!({"command": "printf 'a\\033]0;pwned\\007\\033[2Jb\\342\\200\\256c\\n'; sleep 0.3; printf 'tick\\n'", "background": true}),
    )
    .await;
    let hostile_run = hostile["runId"].as_str().unwrap().to_owned();

    let (code, listed, err) = runs_cli(s.home.path(), &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(&run) && l.contains("agent coder") && l.contains("running")),
        "{listed}"
    );
    let (_, as_json, _) = runs_cli(s.home.path(), &["list", "--json"]);
    let as_json: Value = serde_json::from_str(&as_json).unwrap();
    let entry = as_json["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["runId"] == run.as_str())
        .unwrap();
    assert_eq!(entry["agent"], "coder");
    assert_eq!(entry["state"], "running");

    // Following a run prints everything it writes and returns at its end; escape
    // sequences never reach the operator's terminal unless asked for (`--raw`).
    let (code, followed, err) = runs_cli(s.home.path(), &["logs", &hostile_run, "--follow"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        followed.contains("ab") && followed.contains("tick"),
        "{followed:?}"
    );
    assert!(
        !followed.contains('\u{1b}') && !followed.contains("pwned"),
        "{followed:?}"
    );
    assert!(
        !followed.contains('\u{202E}') && followed.contains("\\u{202e}"),
        "{followed:?}"
    );
    assert!(err.contains("ended"), "{err}");
    let (_, raw, _) = runs_cli(s.home.path(), &["logs", &hostile_run, "--raw"]);
    assert!(raw.contains("\u{1b}]0;pwned"), "{raw:?}");

    // The operator kills the server: its whole tree goes, and its agent reads who did it.
    let (code, killed, err) = runs_cli(s.home.path(), &["kill", &run]);
    assert_eq!(code, 0, "{err}");
    assert!(killed.starts_with("killed "), "{killed}");
    wait_gone(this);
    wait_gone(child);
    let polled = structured(&coder, "process", json!({"action": "poll", "runId": run})).await;
    assert!(
        polled["message"]
            .as_str()
            .unwrap()
            .contains("killed by the gateway's operator"),
        "{polled}"
    );
    let (code, again, _) = runs_cli(s.home.path(), &["kill", &run]);
    assert_eq!(code, 0);
    assert!(again.starts_with("had already ended"), "{again}");

    // A run nobody has: a clear error, nothing done.
    let (code, _, err) = runs_cli(s.home.path(), &["kill", "run-0000000000000000"]);
    assert_ne!(code, 0);
    assert!(err.contains("no run \"run-0000000000000000\""), "{err}");

    // Another user cannot reach the operator socket at all.
    let socket = s.home.path().join("gateway-operator.sock");
    let other = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args([
            "python3",
            "-c",
            "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])",
        ])
        .arg(&socket)
        .output()
        .unwrap();
    assert!(
        !other.status.success(),
        "another user connected to {}",
        socket.display()
    );
    coder.cancel().await.unwrap();
}
