//! End-to-end: a running `warden mcp` (a real process, a real MCP client) follows
//! `config.toml` and `exec-approvals.json` without a restart. An edit is in force for the
//! next request; an edit that does not parse is refused with its reason while the last
//! good configuration stays in force, and every result, `warden doctor`, the console's
//! data and the record say so until it is fixed; an edit of `[sandbox]` rebuilds the
//! sandbox for the next sandboxed run. A node follows its own files the same way, and
//! its notice reaches the gateway's result over the Bridge, naming the node.
//!
//! The attacker's (and the tired operator's) moves: a typo meant to loosen (refused, the
//! old policy stands), a typo meant to tighten (refused, and said everywhere, so nobody
//! believes it took), a file replaced by rename (an editor's save) or rewritten in place,
//! a fix back to the text in force.

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/bridge.rs"]
mod bridge_support;
#[path = "support/mcp_runs.rs"]
mod mcp_runs;
mod support;

use std::path::Path;
use std::time::Duration;

use mcp_runs::{Setup, call, stdio_client};
use serde_json::{Value, json};
use support::warden_in;

const FULL: &str = "[tools.exec]\nhost = \"gateway\"\nsecurity = \"full\"\nask = \"off\"\n";
const DENY: &str = "[tools.exec]\nhost = \"gateway\"\nsecurity = \"deny\"\n";

/// Save `text` as `config.toml` the way an editor does: a new file renamed over the old.
fn save_config(home: &Path, text: &str) {
    let tmp = home.join(".config.toml.swp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, home.join("config.toml")).unwrap();
}

/// One `exec` through the client: its structured result and its text.
async fn exec(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    command: &str,
) -> (Value, String) {
    let r = call(client, "exec", json!({"command": command})).await;
    let text = r.content[0].as_text().unwrap().text.clone();
    (r.structured_content.unwrap(), text)
}

fn notices(result: &Value) -> Vec<String> {
    result["notices"]
        .as_array()
        .unwrap_or_else(|| panic!("every exec result has notices: {result}"))
        .iter()
        .map(|n| n.as_str().unwrap().to_owned())
        .collect()
}

/// The changes the record shows for `config.toml`.
fn config_records(home: &Path) -> Vec<String> {
    support::log_records(home, &["--kind", "policy"])
        .into_iter()
        .filter(|r| {
            r["file"]
                .as_str()
                .is_some_and(|f| f.ends_with("config.toml"))
        })
        .map(|r| r["change"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn config_edits_take_effect_for_the_next_request_and_a_broken_one_keeps_the_last_good() {
    let s: Setup = mcp_runs::setup();
    let home = s.home.path().to_path_buf();
    let client = stdio_client(&s).await;
    let (first, _) = exec(&client, "echo one").await;
    assert_eq!(first["exitCode"], 0, "{first}");
    assert!(notices(&first).is_empty(), "{first}");

    // Tightened by an editor's save: the next request is denied, no restart.
    save_config(&home, DENY);
    let (denied, _) = exec(&client, "echo two").await;
    assert_eq!(denied["status"], "denied", "{denied}");
    assert_eq!(denied["exitCode"], 77, "{denied}");

    // A typo meant to loosen: refused, the deny stays, and the result says why.
    std::fs::write(
        home.join("config.toml"),
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"fulll\"\nask = \"off\"\n",
    )
    .unwrap();
    let (still, text) = exec(&client, "echo three").await;
    assert_eq!(still["status"], "denied", "{still}");
    let said = notices(&still);
    assert!(
        said.iter().any(|n| n.contains("config.toml")
            && n.contains("fulll")
            && n.contains("last good configuration")),
        "{said:?}"
    );
    assert!(
        text.lines().nth(1).is_some_and(|l| l.starts_with("note: ")),
        "the notice is under the headline:\n{text}"
    );
    // Said by `warden doctor` too (and it fails), and in the console's data.
    let doctor = warden_in(&home)
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    assert_eq!(doctor.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&doctor.stdout).unwrap();
    assert_eq!(report["config"]["ok"], false, "{}", report["config"]);
    let detail = report["config"]["detail"].as_str().unwrap();
    assert!(
        detail.contains("fulll") && detail.contains("last good"),
        "{detail}"
    );

    // Fixed: in force at once, and the notice is gone.
    save_config(&home, FULL);
    let (fixed, _) = exec(&client, "echo four").await;
    assert_eq!(fixed["exitCode"], 0, "{fixed}");
    assert_eq!(fixed["stdout"], "four\n");
    assert!(notices(&fixed).is_empty(), "{fixed}");
    client.cancel().await.unwrap();

    // Each reload is on the record: applied (what changed), refused (why), fixed.
    let records = config_records(&home);
    assert!(
        records
            .iter()
            .any(|c| c.starts_with("reloaded") && c.contains("[tools.exec]")),
        "{records:?}"
    );
    assert!(
        records
            .iter()
            .any(|c| c.starts_with("edit refused") && c.contains("fulll")),
        "{records:?}"
    );
    let verify = warden_in(&home).args(["log", "--verify"]).output().unwrap();
    support::assert_success(&verify);
}

#[tokio::test]
async fn an_approvals_file_edit_that_does_not_parse_keeps_the_last_good_version_in_a_running_server()
 {
    let s: Setup = mcp_runs::setup();
    let home = s.home.path().to_path_buf();
    support::configure(
        &home,
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\nask = \"off\"\n",
        r#"{"version":1,"defaults":{"security":"allowlist","ask":"off","askFallback":"deny"},
            "agents":{"coder":{"allowlist":[{"pattern":"/usr/bin/echo"}]}}}"#,
    );
    let client = stdio_client(&s).await;
    let (ok, _) = exec(&client, "/usr/bin/echo hi").await;
    assert_eq!(ok["exitCode"], 0, "{ok}");
    // Half an edit saved: the running server keeps the allowlist it had, and says so.
    std::fs::write(
        home.join("exec-approvals.json"),
        r#"{"version":1,"agents":{"coder":"#,
    )
    .unwrap();
    let (kept, _) = exec(&client, "/usr/bin/echo still").await;
    assert_eq!(kept["exitCode"], 0, "{kept}");
    assert!(
        notices(&kept)
            .iter()
            .any(|n| n.contains("exec-approvals.json") && n.contains("last good")),
        "{kept}"
    );
    let (other, _) = exec(&client, "/usr/bin/id").await;
    assert_eq!(other["status"], "denied", "{other}");
    client.cancel().await.unwrap();
    // A process that never read a good version (a one-shot exec) denies everything.
    let out = warden_in(&home)
        .args(["exec", "--", "/usr/bin/echo", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(77), "{out:?}");
}

#[tokio::test]
async fn a_sandbox_edit_rebuilds_the_sandbox_for_the_next_sandboxed_run() {
    if !support::bwrap_usable() {
        return;
    }
    let s: Setup = mcp_runs::setup();
    let home = s.home.path().to_path_buf();
    let sandboxed = |network: bool| {
        format!(
            "[tools.exec]\nhost = \"sandbox\"\nsecurity = \"full\"\nask = \"off\"\n[sandbox]\nnetwork = {network}\n"
        )
    };
    save_config(&home, &sandboxed(false));
    let host_net = std::fs::read_link("/proc/self/ns/net").unwrap();
    let client = stdio_client(&s).await;
    let (cut_off, _) = exec(&client, "readlink /proc/self/ns/net").await;
    assert_eq!(cut_off["exitCode"], 0, "{cut_off}");
    assert_ne!(
        cut_off["stdout"].as_str().unwrap().trim(),
        host_net.to_str().unwrap(),
        "network = false: a network namespace of its own"
    );
    save_config(&home, &sandboxed(true));
    let (on, _) = exec(&client, "readlink /proc/self/ns/net").await;
    assert_eq!(on["exitCode"], 0, "{on}");
    assert_eq!(
        on["stdout"].as_str().unwrap().trim(),
        host_net.to_str().unwrap(),
        "network = true, live: the host's network"
    );
    // And back, tightened live.
    save_config(&home, &sandboxed(false));
    let (off_again, _) = exec(&client, "readlink /proc/self/ns/net").await;
    assert_ne!(
        off_again["stdout"].as_str().unwrap().trim(),
        host_net.to_str().unwrap(),
        "{off_again}"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_own_config_edit_is_live_there_and_its_notice_reaches_the_gateways_result() {
    // The gateway sends everything to the node, which runs `main`'s echo and sleep; the
    // timeout is the node's to set (the gateway sends none of its own).
    let gw = bridge_support::home_with(
        "[tools.exec]\nhost = \"node\"\nsecurity = \"full\"\nask = \"off\"\n",
        r#"{"version":1,"defaults":{"security":"deny","ask":"off","askFallback":"deny"}}"#,
    );
    let node = bridge_support::home_with(
        "",
        r#"{"version":1,"defaults":{"security":"allowlist","ask":"off","askFallback":"deny"},
            "agents":{"main":{"allowlist":[{"pattern":"/usr/bin/echo"},{"pattern":"/usr/bin/sleep"}]}}}"#,
    );
    let command = bridge_support::local_stdio_command(node.path());
    let command: Vec<&str> = command.iter().map(String::as_str).collect();
    bridge_support::add_stdio_node(gw.path(), node.path(), "n1", "one", &command);
    let (_ws, workspace) = bridge_support::workspace();
    let gateway = bridge_support::Gateway::start(gw.path(), &workspace, &[]);
    bridge_support::wait_node(gw.path(), "n1", true, Duration::from_secs(30));
    let token = support::gateway_token(gw.path(), "main");
    let client = bridge_support::client(&gateway.http, &token).await;
    let ran = bridge_support::exec(&client, json!({"command": "/usr/bin/echo hi"})).await;
    assert_eq!(ran["exitCode"], 0, "{ran}");
    assert_eq!(ran["host"], "n1", "{ran}");
    assert!(notices(&ran).is_empty(), "{ran}");

    // A timeout set on the node, live: its next run is held to it.
    std::fs::write(
        node.path().join("config.toml"),
        "[tools.exec]\ntimeout = 1\n",
    )
    .unwrap();
    let cut = bridge_support::exec(&client, json!({"command": "/usr/bin/sleep 4"})).await;
    assert_eq!(cut["timedOut"], true, "{cut}");
    assert!(notices(&cut).is_empty(), "{cut}");

    // A broken edit on the node: the timeout stays, and the gateway's result says so,
    // naming the node.
    std::fs::write(
        node.path().join("config.toml"),
        "[tools.exec]\ntimeout = \"one\n",
    )
    .unwrap();
    let still = bridge_support::exec(&client, json!({"command": "/usr/bin/sleep 4"})).await;
    assert_eq!(still["timedOut"], true, "{still}");
    let said = notices(&still);
    assert!(
        said.iter().any(|n| n.starts_with("node n1: ")
            && n.contains("config.toml")
            && n.contains("last good")),
        "{said:?}"
    );
    client.cancel().await.unwrap();
}
