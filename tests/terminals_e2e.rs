//! End-to-end: runs on a terminal, driven by a real MCP client (rmcp) over `warden mcp`
//! (stdio) and `warden gateway run` (Streamable HTTP): a REPL typed at on the gateway
//! host and in the sandbox (a line and Enter, Ctrl-C to interrupt it, a resize it sees,
//! Ctrl-D to leave it), a terminal's escape sequences read as plain text, and signals
//! sent to a run that has no terminal — with the mistakes an agent makes refused by name.

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Skips say why on stderr.
#![allow(clippy::print_stderr)]

#[path = "support/mcp_runs.rs"]
mod mcp_runs;
mod support;

use mcp_runs::*;
use rmcp::model::CallToolRequestParams;
use serde_json::json;

fn python() -> bool {
    let found = std::process::Command::new("python3")
        .args(["-c", "1"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("SKIP: python3 is not installed (the REPL these tests drive)");
    }
    found
}

/// A Python REPL on a terminal on `host`: typed at, interrupted with Ctrl-C, resized,
/// left with Ctrl-D.
async fn drives_a_repl_on(host: &str) {
    let s = setup();
    let client = stdio_client(&s).await;
    let started = structured(
        &client,
        "exec",
        json!({"argv": ["python3", "-q"], "tty": true, "rows": 30, "cols": 90, "background": true, "host": host}),
    )
    .await;
    assert!(
        ["pending", "running"].contains(&started["status"].as_str().unwrap()),
        "{started}"
    );
    let run = started["runId"].as_str().unwrap().to_owned();
    poll_until(&client, &run, ">>> ").await;
    let listed = structured(&client, "process", json!({"action": "list"})).await;
    assert_eq!(
        listed["runs"][0]["tty"],
        json!({"rows": 30, "cols": 90}),
        "{listed}"
    );

    // A line typed and entered: echoed by the terminal, evaluated by the REPL.
    let typed = structured(
        &client,
        "process",
        json!({"action": "write", "runId": run, "input": "print(6 * 7)", "keys": ["Enter"]}),
    )
    .await;
    assert_eq!(typed["ok"], true, "{typed}");
    poll_until(&client, &run, "42").await;

    // Ctrl-C interrupts what runs in the foreground, not the REPL.
    structured(
        &client,
        "process",
        json!({"action": "write", "runId": run, "input": "import time; time.sleep(120)\r"}),
    )
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    structured(
        &client,
        "process",
        json!({"action": "write", "runId": run, "keys": ["C-c"]}),
    )
    .await;
    poll_until(&client, &run, "KeyboardInterrupt").await;

    // A resize reaches the program.
    let resized = structured(
        &client,
        "process",
        json!({"action": "resize", "runId": run, "rows": 40, "cols": 100}),
    )
    .await;
    assert_eq!(resized["ok"], true, "{resized}");
    structured(
        &client,
        "process",
        json!({"action": "write", "runId": run, "input": "import os; print(os.get_terminal_size())", "keys": ["Enter"]}),
    )
    .await;
    poll_until(&client, &run, "columns=100, lines=40").await;

    // Ctrl-D at the prompt ends the REPL.
    structured(
        &client,
        "process",
        json!({"action": "write", "runId": run, "keys": ["C-d"]}),
    )
    .await;
    let ended = structured(
        &client,
        "process",
        json!({"action": "wait", "runId": run, "wait": 20}),
    )
    .await;
    assert_eq!(ended["run"]["state"], "ended", "{ended}");
    assert_eq!(ended["result"]["exitCode"], 0, "{ended}");
    assert_eq!(ended["result"]["host"], host, "{ended}");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repl_is_driven_on_a_terminal_on_the_gateway_host() {
    if !python() {
        return;
    }
    drives_a_repl_on("gateway").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repl_is_driven_on_a_terminal_in_the_sandbox() {
    if !python() {
        return;
    }
    if !support::bwrap_usable() {
        eprintln!("SKIP: bubblewrap / user namespaces unavailable here");
        return;
    }
    drives_a_repl_on("sandbox").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminals_output_reads_as_plain_text_when_asked() {
    let s = setup();
    let client = stdio_client(&s).await;
    let started = structured(
        &client,
        "exec",
        json!({"command": "printf '\\033]0;title\\007\\033[1;31mred\\033[0m plain\\n'; sleep 0.2", "tty": true, "background": true, "host": "gateway"}),
    )
    .await;
    let run = started["runId"].as_str().unwrap().to_owned();
    let raw = structured(
        &client,
        "process",
        json!({"action": "wait", "runId": run, "wait": 20, "cursor": 0}),
    )
    .await;
    let raw_text = raw["output"].as_str().unwrap();
    assert!(raw_text.contains("\u{1b}[1;31mred"), "{raw}");
    assert!(
        raw_text.contains("plain\r\n"),
        "the terminal's line end: {raw}"
    );
    let plain = structured(
        &client,
        "process",
        json!({"action": "poll", "runId": run, "cursor": 0, "plain": true}),
    )
    .await;
    assert_eq!(plain["output"], "red plain\n", "{plain}");
    assert_eq!(
        plain["cursor"], raw["cursor"],
        "cursors count the bytes written"
    );
    // The whole result of a terminal run: one stream, in stdout.
    let finished = structured(
        &client,
        "exec",
        json!({"command": "echo out; echo err >&2", "tty": true, "host": "gateway"}),
    )
    .await;
    assert_eq!(finished["stdout"], "out\r\nerr\r\n", "{finished}");
    assert_eq!(finished["stderr"], "", "{finished}");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_reach_a_run_without_a_terminal_over_http_and_mistakes_are_named() {
    let s = setup();
    let gateway = support::GatewayProcess::start(s.home.path(), &s.ws(), &[]);
    let client = http_client(
        &gateway.addr,
        &support::gateway_token(s.home.path(), "coder"),
    )
    .await;
    let started = structured(
        &client,
        "exec",
        json!({"command": "trap 'echo got-term; exit 5' TERM; echo ready; while :; do sleep 0.05; done", "background": true, "host": "gateway"}),
    )
    .await;
    let run = started["runId"].as_str().unwrap().to_owned();
    poll_until(&client, &run, "ready").await;

    // A run without a terminal has nothing to resize.
    let resized = call(
        &client,
        "process",
        json!({"action": "resize", "runId": run, "rows": 10, "cols": 10}),
    )
    .await;
    assert_eq!(resized.is_error, Some(true));
    assert!(
        structured_text(&resized).contains("no terminal"),
        "{resized:?}"
    );
    // Bad arguments are refused by name, before anything is sent.
    for (args, field) in [
        (
            json!({"action": "signal", "runId": run, "signal": "BOGUS"}),
            "signal",
        ),
        (json!({"action": "signal", "runId": run}), "signal"),
        (
            json!({"action": "write", "runId": run, "keys": ["Enter", "Hyper-X"]}),
            "keys[1]",
        ),
        (
            json!({"action": "resize", "runId": run, "rows": 10}),
            "cols",
        ),
        (
            json!({"action": "resize", "runId": run, "rows": 10, "cols": 5000}),
            "cols",
        ),
        (json!({"command": "true", "rows": 10}), "rows"),
    ] {
        let tool = if args.get("action").is_some() {
            "process"
        } else {
            "exec"
        };
        let serde_json::Value::Object(map) = args.clone() else {
            unreachable!()
        };
        let refused = client
            .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(map))
            .await;
        let message = match refused {
            Err(e) => e.to_string(),
            Ok(r) => panic!("{args} was accepted: {r:?}"),
        };
        assert!(message.contains(&format!("`{field}`")), "{args}: {message}");
    }

    let signalled = structured(
        &client,
        "process",
        json!({"action": "signal", "runId": run, "signal": "sigterm"}),
    )
    .await;
    assert_eq!(signalled["ok"], true, "{signalled}");
    let ended = structured(
        &client,
        "process",
        json!({"action": "wait", "runId": run, "wait": 20}),
    )
    .await;
    assert_eq!(ended["result"]["exitCode"], 5, "{ended}");
    assert!(
        ended["output"].as_str().unwrap().contains("got-term"),
        "{ended}"
    );
    // An ended run takes no signal, and says so.
    let late = call(
        &client,
        "process",
        json!({"action": "signal", "runId": run, "signal": "INT"}),
    )
    .await;
    assert_eq!(late.is_error, Some(true));
    assert!(structured_text(&late).contains("has ended"), "{late:?}");
    client.cancel().await.unwrap();
}
