//! End-to-end: the record (`$WARDEN_HOME/audit/`), written by the real binaries and read
//! back with `warden log`. Every request leaves exactly one decision and one run record
//! (and an answer when a human — a real `warden approvals ui` — was asked); policy
//! changes leave one each; secrets never appear. The attacker's moves against the file
//! — an edited record, a removed one, two swapped, a record cut short to pass for a
//! crash — are each found by `warden log --verify`; a real crash's torn line is not a
//! break; writers in many processes at once keep one chain; and with `audit.required`, a
//! record that cannot be written refuses the request before anything runs.

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/mcp_runs.rs"]
mod mcp_runs;
mod support;

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};
use support::{TerminalApprover, warden_in};

/// A home whose gateway host runs `ls` and asks about anything else.
fn home() -> (tempfile::TempDir, PathBuf) {
    let tmp = support::warden_home();
    let h = tmp.path().to_path_buf();
    support::configure(
        &h,
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\nask = \"on-miss\"\n",
        r#"{"version":1,"defaults":{"security":"allowlist","ask":"on-miss","askFallback":"deny"},
            "agents":{"main":{"allowlist":[{"pattern":"/usr/bin/ls"}]}}}"#,
    );
    (tmp, h)
}

fn log_file(home: &Path) -> PathBuf {
    home.join("audit").join("audit.jsonl")
}

/// Every record, as `warden log --json` prints it.
fn records(home: &Path, filter: &[&str]) -> Vec<Value> {
    support::log_records(home, filter)
}

fn verify(home: &Path) -> Output {
    warden_in(home).args(["log", "--verify"]).output().unwrap()
}

fn exec(home: &Path, args: &[&str]) -> Output {
    warden_in(home).arg("exec").args(args).output().unwrap()
}

#[test]
fn each_request_leaves_one_decision_one_run_and_the_answer_of_whoever_was_asked() {
    let (_tmp, h) = home();
    let ws = tempfile::tempdir().unwrap();
    // Allowed by the allowlist.
    let out = warden_in(&h)
        .current_dir(ws.path())
        .args(["exec", "--", "/usr/bin/ls", "-a"])
        .output()
        .unwrap();
    support::assert_success(&out);
    // Asked, and allowed once by a human.
    let mut ui = TerminalApprover::start(&h);
    let asked = std::thread::spawn({
        let h = h.clone();
        move || exec(&h, &["--", "/usr/bin/true"])
    });
    ui.answer("/usr/bin/true", "o\n");
    support::assert_success(&asked.join().unwrap());
    ui.stop();
    // Asked with nobody there: askFallback denies.
    let out = exec(&h, &["--", "/usr/bin/touch", "x"]);
    assert_eq!(out.status.code(), Some(75), "{out:?}");

    let all = records(&h, &[]);
    let kinds: Vec<(&str, &str)> = all
        .iter()
        .filter(|r| r["kind"] != "policy")
        .map(|r| (r["kind"].as_str().unwrap(), r["decision"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("decision", "allow"),
            ("run", "allow"),
            ("decision", "ask"),
            ("answer", "allow"),
            ("run", "allow"),
            ("decision", "ask"),
            ("answer", "deny"),
            ("run", "deny"),
        ],
        "{all:#?}"
    );
    let runs: Vec<&Value> = all.iter().filter(|r| r["kind"] == "run").collect();
    let first = runs[0];
    assert_eq!(first["agent"], "main");
    assert_eq!(first["host"], "gateway");
    assert_eq!(first["origin"], "exec");
    assert_eq!(first["command"], "/usr/bin/ls -a");
    assert_eq!(first["outcome"], "finished");
    assert_eq!(first["exitCode"], 0);
    assert_eq!(first["reason"], "allowlist-match");
    assert!(first["planDigest"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(first["outputSha256"].as_str().unwrap().len(), 64);
    // The three records of one request share its run id; every run id differs.
    let answers: Vec<&Value> = all.iter().filter(|r| r["kind"] == "answer").collect();
    assert_eq!(answers[0]["reason"], "approved-once");
    assert_eq!(answers[0]["approver"], "the approver on this host's socket");
    assert_eq!(answers[1]["reason"], "no-approver");
    assert_eq!(answers[1]["approver"], "nobody (askFallback)");
    assert_eq!(runs[2]["runId"], answers[1]["runId"]);
    assert_eq!(runs[2]["outcome"], "denied");
    // Filters.
    let denied = records(&h, &["--decision", "deny", "--kind", "run"]);
    assert_eq!(denied.len(), 1);
    assert_eq!(denied[0]["command"], "/usr/bin/touch x");
    assert!(records(&h, &["--agent", "nobody"]).is_empty());
    let run_id = first["runId"].as_str().unwrap();
    assert_eq!(records(&h, &["--run", run_id]).len(), 2);
    assert_eq!(records(&h, &["--since", "1h"]).len(), all.len());
    assert!(records(&h, &["--until", "2000-01-01"]).is_empty());
    // --json prints the stored lines themselves.
    let stored = std::fs::read_to_string(log_file(&h)).unwrap();
    let json = warden_in(&h).args(["log", "--json"]).output().unwrap();
    assert_eq!(String::from_utf8(json.stdout).unwrap(), stored);
    support::assert_success(&verify(&h));
}

#[test]
fn policy_changes_are_recorded_once_each_and_no_secret_ever_is() {
    let (_tmp, h) = home();
    let run = |args: &[&str]| {
        let out = warden_in(&h).args(args).output().unwrap();
        support::assert_success(&out);
        String::from_utf8(out.stdout).unwrap()
    };
    run(&[
        "approvals",
        "allowlist",
        "add",
        "--agent",
        "main",
        "/usr/bin/cat",
    ]);
    // The same again changes nothing, and records nothing.
    run(&[
        "approvals",
        "allowlist",
        "add",
        "--agent",
        "main",
        "/usr/bin/cat",
    ]);
    // An allowlisted run updates the entry's last use: not a change of policy.
    support::assert_success(&exec(&h, &["--", "/usr/bin/cat", "/dev/null"]));
    run(&["approvals", "defaults", "--ask", "always"]);
    let token = run(&["gateway", "token", "--agent", "claude"])
        .trim()
        .to_owned();
    run(&["gateway", "token", "--agent", "claude"]);
    run(&["gateway", "token", "--agent", "claude", "--rotate"]);
    let rotated = run(&["gateway", "token", "--agent", "claude"])
        .trim()
        .to_owned();
    // The approver's socket token is created when an approver first starts.
    let mut ui = TerminalApprover::start(&h);
    ui.stop();
    let changes: Vec<String> = records(&h, &["--kind", "policy"])
        .iter()
        .map(|r| r["change"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        changes,
        [
            "main allowlist + /usr/bin/cat",
            "defaults.ask: on-miss → always",
            "gateway credential of agent claude created",
            "gateway credential of agent claude rotated",
            "approver token created",
        ],
        "{changes:#?}"
    );
    let approvals: Value =
        serde_json::from_slice(&std::fs::read(h.join("exec-approvals.json")).unwrap()).unwrap();
    let socket_token = approvals["socket"]["token"].as_str().unwrap().to_owned();
    let everything = std::fs::read_to_string(log_file(&h)).unwrap();
    for secret in [&token, &rotated, &socket_token] {
        assert!(
            !everything.contains(secret.as_str()),
            "a secret is on the record"
        );
    }
    support::assert_success(&verify(&h));
}

#[test]
fn every_move_against_the_file_is_found_and_a_crash_is_not_a_break() {
    let (_tmp, h) = home();
    for _ in 0..3 {
        support::assert_success(&exec(&h, &["--", "/usr/bin/ls"]));
    }
    let original = std::fs::read_to_string(log_file(&h)).unwrap();
    let lines: Vec<&str> = original.lines().collect();
    assert_eq!(lines.len(), 6);
    let put = |lines: &[String]| {
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(log_file(&h), text).unwrap();
        verify(&h)
    };
    let owned = || {
        lines
            .iter()
            .map(|l| (*l).to_owned())
            .collect::<Vec<String>>()
    };
    let broken = |out: Output, needle: &str, at_line: usize| {
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains(needle), "{text}");
        assert!(text.contains(&format!("line {at_line}")), "{text}");
    };
    // An edit: the agent of record 3 (hiding who ran it).
    let mut edited = owned();
    edited[2] = edited[2].replace("\"agent\":\"main\"", "\"agent\":\"mein\"");
    broken(put(&edited), "edited", 3);
    // A removal: record 2 gone.
    let mut removed = owned();
    removed.remove(1);
    broken(put(&removed), "removed", 2);
    // A reorder.
    let mut swapped = owned();
    swapped.swap(2, 3);
    broken(put(&swapped), "record 4", 3);
    // A record cut short to pass for a crash: the chain does not pass over it.
    let mut cut = owned();
    cut[1].truncate(30);
    broken(put(&cut), "removed", 3);
    // The last records removed and the hashes recomputed cannot be told apart from a
    // shorter log by the chain alone (docs/audit.md says to ship records elsewhere);
    // what can be checked is checked: the rest is intact.
    support::assert_success(&put(&owned()[..4]));

    // A real crash: the record being written is cut short, nothing after it yet.
    std::fs::write(log_file(&h), &original).unwrap();
    let mut torn = original.clone();
    torn.push_str(&lines[5][..40]);
    std::fs::write(log_file(&h), &torn).unwrap();
    let out = verify(&h);
    support::assert_success(&out);
    // The next writer starts a new line and chains to the last intact record.
    support::assert_success(&exec(&h, &["--", "/usr/bin/ls"]));
    let out = verify(&h);
    support::assert_success(&out);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("intact: 8 record(s)") && text.contains("1 cut-short line"),
        "{text}"
    );
}

#[test]
fn many_writers_at_once_keep_one_chain() {
    let (_tmp, h) = home();
    let writers: Vec<_> = (0..6)
        .map(|_| {
            let h = h.clone();
            std::thread::spawn(move || {
                for _ in 0..5 {
                    support::assert_success(&exec(&h, &["--", "/usr/bin/ls"]));
                }
            })
        })
        .collect();
    // A gateway writes at the same time, with an MCP client.
    let ws = tempfile::tempdir().unwrap();
    let gateway = support::GatewayProcess::start(&h, ws.path(), &[]);
    let token = support::gateway_token(&h, "main");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = mcp_runs::http_client(&gateway.addr, &token).await;
        for _ in 0..5 {
            let r = mcp_runs::structured(&client, "exec", json!({"command": "/usr/bin/ls"})).await;
            assert_eq!(r["exitCode"], 0, "{r}");
        }
        client.cancel().await.unwrap();
    });
    for w in writers {
        w.join().unwrap();
    }
    // The gateway's writer thread writes within moments; the `exec` processes wrote
    // theirs before they exited.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while records(&h, &["--kind", "run"]).len() < 35 {
        assert!(std::time::Instant::now() < deadline, "records never came");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = verify(&h);
    support::assert_success(&out);
    let all = records(&h, &["--kind", "run"]);
    assert_eq!(all.len(), 35);
    let seqs: Vec<u64> = records(&h, &[])
        .iter()
        .map(|r| r["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    let from_gateway = records(&h, &["--kind", "run"])
        .iter()
        .filter(|r| r["origin"] == "gateway")
        .count();
    assert_eq!(from_gateway, 5);
}

#[test]
fn a_required_record_that_cannot_be_written_refuses_before_anything_runs() {
    let (_tmp, h) = home();
    let config = std::fs::read_to_string(h.join("config.toml")).unwrap();
    std::fs::write(
        h.join("config.toml"),
        format!("{config}\n[audit]\nrequired = true\n"),
    )
    .unwrap();
    // Where the record's directory should be, a file: nothing can be written there.
    std::fs::write(h.join("audit"), "").unwrap();
    let ws = tempfile::tempdir().unwrap();
    let marker = ws.path().join("ran");
    let out = exec(&h, &["--", "/usr/bin/touch", marker.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("audit-unavailable") && stderr.contains("audit.required"),
        "{stderr}"
    );
    assert!(
        !marker.exists(),
        "a request ran that the record does not show"
    );
    let doctor = warden_in(&h).arg("doctor").output().unwrap();
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        text.contains("NO  record") && text.contains("every request is refused"),
        "{text}"
    );
    // Not required: the run goes on, and the failure is said.
    std::fs::write(h.join("config.toml"), &config).unwrap();
    let out = exec(&h, &["--", "/usr/bin/ls"]);
    support::assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("not on the record"), "{stderr}");
}
