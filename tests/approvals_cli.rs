//! End-to-end: `warden approvals ...` on a real WARDEN_HOME, and the terminal approver
//! answering real requests over its real socket.

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use approvals::ipc::protocol::{Answer, Prompt, PromptKind, Request};
use approvals::ipc::{AskOutcome, ClientConfig, ask};
use approvals::{RunPlan, SystemClock};
use policy::Launch;
use support::TerminalApprover;

/// A fresh, private WARDEN_HOME.
fn home() -> tempfile::TempDir {
    support::warden_home()
}

/// A home whose commands run on the gateway host, allowlisted, asking on a miss (and
/// denying when nobody answers); the directory's guard and its path.
fn asking_gateway_home() -> (tempfile::TempDir, PathBuf) {
    let tmp = home();
    let h = tmp.path().to_path_buf();
    support::configure(
        &h,
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\nask = \"on-miss\"\n",
        r#"{"version":1,"defaults":{"security":"allowlist","ask":"on-miss","askFallback":"deny"}}"#,
    );
    (tmp, h)
}

fn w(home: &Path) -> std::process::Command {
    support::warden_in(home)
}

fn file(home: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(home.join("exec-approvals.json")).unwrap()).unwrap()
}

#[test]
fn get_add_remove_set_and_import() {
    let tmp = home();
    let h = tmp.path();
    let out = w(h).args(["approvals", "get", "--json"]).output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["hash"], "absent");

    let out = w(h)
        .args([
            "approvals",
            "allowlist",
            "add",
            "--agent",
            "coder",
            "/usr/bin/rg",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(125),
        "unknown agents need --create-agent"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("--create-agent"));
    assert!(
        !h.join("exec-approvals.json").exists(),
        "a failed command created the file"
    );

    let out = w(h)
        .args([
            "approvals",
            "allowlist",
            "add",
            "--agent",
            "coder",
            "--create-agent",
            "/usr/bin/rg",
            "git",
        ])
        .output()
        .unwrap();
    support::assert_success(&out);
    assert_eq!(file(h)["agents"]["coder"]["allowlist"][1]["pattern"], "git");

    // A typo gets a suggestion; invalid patterns are named; nothing changes.
    let before = std::fs::read(h.join("exec-approvals.json")).unwrap();
    let out = w(h)
        .args([
            "approvals",
            "allowlist",
            "add",
            "--agent",
            "codr",
            "/bin/ls",
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("did you mean \"coder\""),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = w(h)
        .args([
            "approvals",
            "allowlist",
            "add",
            "--agent",
            "coder",
            "./bin/x",
            "/ok",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("./bin/x"));
    assert_eq!(
        std::fs::read(h.join("exec-approvals.json")).unwrap(),
        before
    );

    let out = w(h)
        .args([
            "approvals",
            "allowlist",
            "remove",
            "--agent",
            "coder",
            "git",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        file(h)["agents"]["coder"]["allowlist"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // set: compare-and-swap on the hash from get.
    let got: serde_json::Value = serde_json::from_slice(
        &w(h)
            .args(["approvals", "get", "--json"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let mut doc = got["file"].clone();
    doc["defaults"]["security"] = "allowlist".into();
    let edited = h.join("edited.json");
    std::fs::write(&edited, serde_json::to_vec(&doc).unwrap()).unwrap();
    let hash = got["hash"].as_str().unwrap();
    let out = w(h)
        .args([
            "approvals",
            "set",
            "--file",
            edited.to_str().unwrap(),
            "--base-hash",
            hash,
        ])
        .output()
        .unwrap();
    support::assert_success(&out);
    assert_eq!(file(h)["defaults"]["security"], "allowlist");
    let out = w(h)
        .args([
            "approvals",
            "set",
            "--file",
            edited.to_str().unwrap(),
            "--base-hash",
            hash,
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(125),
        "a stale base hash must be refused"
    );
    std::fs::write(&edited, "{broken").unwrap();
    let current = file(h);
    let out = w(h)
        .args([
            "approvals",
            "set",
            "--file",
            edited.to_str().unwrap(),
            "--base-hash",
            "x",
        ])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a valid approvals document"));
    assert_eq!(file(h), current);

    // import
    let oc = h.join("openclaw.json");
    std::fs::write(
        &oc,
        r#"{"version":1,"agents":{"main":{"allowlist":[{"pattern":"~/bin/*"}]}}}"#,
    )
    .unwrap();
    let out = w(h)
        .args(["approvals", "import", oc.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        file(h)["agents"]["main"]["allowlist"][0]["pattern"],
        "~/bin/*"
    );
    assert_eq!(
        file(h)["agents"]["coder"]["allowlist"][0]["pattern"],
        "/usr/bin/rg"
    );
}

#[test]
fn get_never_prints_the_token_and_corrupt_files_are_reported_and_kept() {
    let tmp = home();
    let h = tmp.path();
    // Running the approver creates the token.
    let mut ui = TerminalApprover::start(h);
    ui.stop();
    let token = file(h)["socket"]["token"].as_str().unwrap().to_owned();
    assert!(token.len() >= 43);
    let out = w(h).args(["approvals", "get"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains(&token) && text.contains("<redacted>"));

    std::fs::write(
        h.join("exec-approvals.json"),
        "{\"version\": 1, \"agents\": ",
    )
    .unwrap();
    std::fs::set_permissions(
        h.join("exec-approvals.json"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let out = w(h)
        .args([
            "approvals",
            "allowlist",
            "add",
            "--agent",
            "a",
            "--create-agent",
            "/bin/ls",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("corrupt"));
    assert_eq!(
        std::fs::read_to_string(h.join("exec-approvals.json")).unwrap(),
        "{\"version\": 1, \"agents\": "
    );
    let kept: Vec<_> = std::fs::read_dir(h)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains(".corrupt-"))
        .collect();
    assert_eq!(kept.len(), 1);
    // And the policy denies.
    let out = w(h)
        .args([
            "policy",
            "explain",
            "--host",
            "gateway",
            "--security",
            "full",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(77));
}

/// A requester's view of the approver `ui` hosts for `home`, and a runtime to ask from.
fn client_of(home: &Path, ui: &TerminalApprover) -> (ClientConfig, tokio::runtime::Runtime) {
    let token = file(home)["socket"]["token"].as_str().unwrap().to_owned();
    let config = ClientConfig {
        socket_path: ui.socket.clone(),
        token,
        approver_uid: nix::unistd::geteuid().as_raw(),
        connect_timeout: Duration::from_secs(5),
        approval_timeout: Duration::from_secs(60),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    (config, rt)
}

/// A command prompt for `argv`, telling the approver that allow-always stores
/// `allow_always`.
fn prompt(id: &str, argv: &[&str], agent: &str, allow_always: &[&str]) -> Request {
    let plan = RunPlan {
        launch: Launch::Exec {
            program: format!("/usr/bin/{}", argv[0]),
            program_id: None,
            argv: argv.iter().map(|s| s.to_string()).collect(),
        },
        cwd: "/".into(),
        env: BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]),
        agent: agent.into(),
        session: "s1".into(),
        host: "gateway".into(),
        limits: policy::PlannedLimits {
            timeout_ms: 30_000,
            max_processes: 4096,
            max_memory: 1 << 30,
            exec_allowlist: None,
            network: None,
            unconfined: false,
        },
    };
    Request::Prompt(Prompt::new(
        id,
        agent,
        "s1",
        "gateway",
        PromptKind::Command {
            plan,
            command: argv.join(" "),
            security: policy::Security::Allowlist,
            ask: policy::Ask::OnMiss,
            reason: policy::AskReason::AllowlistMiss,
            allow_always: policy::AlwaysOption::programs(allow_always),
            allow_always_default: 0,
            not_stored: Vec::new(),
            why: None,
        },
    ))
}

#[test]
fn terminal_approver_queues_prompts_escapes_them_and_shows_what_allow_always_stores() {
    let tmp = home();
    let h = tmp.path().to_path_buf();
    let mut ui = TerminalApprover::start(&h);
    let (config, rt) = client_of(&h, &ui);
    // Three prompts at once: the approver must queue them, not lose any.
    let requests = [
        prompt(
            "p1",
            &["rm", "-rf", "/tmp/x\u{202e}fdp.exe"],
            "coder",
            &["/usr/bin/rm"],
        ),
        prompt(
            "p2",
            &["echo", "line1\nline2\u{1b}[2J"],
            "coder",
            &["/usr/bin/echo"],
        ),
        prompt("p3", &["ls", "-la"], "coder", &["/usr/bin/ls"]),
    ];
    let handles: Vec<_> = requests
        .iter()
        .map(|r| {
            let (c, r) = (config.clone(), r.clone());
            rt.spawn(async move { ask(&c, &SystemClock, &r).await })
        })
        .collect();
    let mut shown = Vec::new();
    for _ in 0..3 {
        let block = ui.read_until("digest:");
        let id = block
            .iter()
            .find_map(|l| l.strip_prefix("── approval request "))
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .to_owned();
        let text = block.join("\n");
        let reply = match id.as_str() {
            "p1" => "d\n",
            "p2" => "o\n",
            _ => "a\n",
        };
        shown.push(text);
        ui.type_text(reply);
        ui.read_until("→");
    }
    let all = shown.join("\n");
    assert!(
        all.contains("\\u{202e}"),
        "bidi override not escaped:\n{all}"
    );
    assert!(
        all.contains("line1\\nline2\\x1b[2J"),
        "control characters not escaped:\n{all}"
    );
    assert!(!all.contains('\u{202e}') && !all.contains('\u{1b}'));
    assert!(all.contains("would store /usr/bin/ls"), "{all}");
    let outcomes: Vec<AskOutcome> = handles
        .into_iter()
        .map(|h| rt.block_on(h).unwrap())
        .collect();
    for (request, outcome) in requests.iter().zip(outcomes) {
        let AskOutcome::Answered(response) = outcome else {
            panic!("{outcome:?}")
        };
        let expected = match request.prompt().id.as_str() {
            "p1" => Answer::Deny,
            "p2" => Answer::AllowOnce,
            _ => Answer::AllowAlways,
        };
        assert_eq!(response.answer, expected);
    }
    // A second approver on the same socket is refused while this one runs.
    let out = w(&h)
        .args(["approvals", "ui"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("already listening"));
    ui.stop();
    assert!(!ui.socket.exists(), "the socket is removed on exit");
}

#[test]
fn allow_always_through_warden_exec_stores_the_program_and_never_a_shell() {
    let (_home, h) = asking_gateway_home();
    let mut ui = TerminalApprover::start(&h);
    let ls = std::fs::canonicalize("/usr/bin/ls")
        .or_else(|_| std::fs::canonicalize("/bin/ls"))
        .unwrap();
    let exec = |args: &[&str]| {
        let mut cmd = w(&h);
        cmd.arg("exec")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.spawn().unwrap()
    };
    // A miss: the human is shown the exact pattern allow-always stores, and says yes.
    let child = exec(&["--", "ls", "/usr"]);
    ui.answer(&format!("would store {}", ls.display()), "a\n");
    let out = child.wait_with_output().unwrap();
    support::assert_success(&out);
    assert_eq!(
        file(&h)["agents"]["main"]["allowlist"][0]["pattern"],
        ls.to_string_lossy().as_ref()
    );
    // The next time the allowlist matches: nobody is asked.
    let out = w(&h).args(["exec", "--", "ls", "/usr"]).output().unwrap();
    support::assert_success(&out);
    // A shell is never stored: allow-always becomes allow-once, and says so.
    let child = exec(&["--", "sh", "-n", "/dev/null"]);
    ui.answer(
        "not stored: sh: shells, interpreters and wrappers are never stored",
        "a\n",
    );
    ui.read_until("nothing can be stored");
    let out = child.wait_with_output().unwrap();
    support::assert_success(&out);
    let stored = file(&h)["agents"]["main"]["allowlist"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(stored, 1, "{}", file(&h));
    ui.stop();
}

#[test]
fn an_answer_typed_as_stdin_closes_is_delivered_and_a_pending_prompt_goes_unanswered() {
    let (_home, h) = asking_gateway_home();
    let exec = |args: &[&str]| {
        w(&h)
            .arg("exec")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // The answer and the end of stdin arrive together: the approver stops, but only
    // after the answer has reached the requester.
    for _ in 0..3 {
        let mut ui = TerminalApprover::start(&h);
        let child = exec(&["--", "id", "-u"]);
        ui.answer("digest:", "o\n");
        drop(ui.child.stdin.take());
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "the answer given before stdin closed was lost: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(ui.child.wait().unwrap().success());
    }
    // A prompt nobody answered when stdin closes is not a human's "deny": the requester
    // hears that nobody answered and applies askFallback.
    let mut ui = TerminalApprover::start(&h);
    let child = exec(&["--", "id", "-u"]);
    ui.read_until("digest:");
    drop(ui.child.stdin.take());
    ui.read_until("stdin closed");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no-approver"), "{err}");
    assert!(ui.child.wait().unwrap().success());
}

#[test]
fn egress_rules_are_added_and_removed_as_rules_and_bad_ones_change_nothing() {
    let tmp = home();
    let h = tmp.path();
    let out = w(h)
        .args([
            "approvals",
            "egress",
            "add",
            "--agent",
            "main",
            "--json",
            "PyPI.org.:443",
            "*.example.com",
        ])
        .output()
        .unwrap();
    support::assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["added"],
        serde_json::json!(["pypi.org:443", "*.example.com"])
    );
    assert_eq!(
        file(h)["agents"]["main"]["egressAllow"],
        serde_json::json!(["pypi.org:443", "*.example.com"])
    );
    // The same rule spelled another way is not added twice.
    let out = w(h)
        .args([
            "approvals",
            "egress",
            "add",
            "--agent",
            "main",
            "pypi.org:443",
        ])
        .output()
        .unwrap();
    support::assert_success(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("added 0"));
    // A rule that does not read, among good ones, changes nothing and says why.
    let before = std::fs::read(h.join("exec-approvals.json")).unwrap();
    for bad in [
        vec!["ok.example", "a b"],
        vec!["*.com"],
        vec!["x.example:0"],
    ] {
        let mut args = vec!["approvals", "egress", "add", "--agent", "main"];
        args.extend(bad.iter().copied());
        let out = w(h).args(&args).output().unwrap();
        assert!(!out.status.success(), "{bad:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("egress rule"),
            "{bad:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            std::fs::read(h.join("exec-approvals.json")).unwrap(),
            before
        );
    }
    // Removed as a rule, however it is spelled; an absent one is an error naming it.
    let out = w(h)
        .args([
            "approvals",
            "egress",
            "remove",
            "--agent",
            "main",
            "PYPI.ORG:443",
        ])
        .output()
        .unwrap();
    support::assert_success(&out);
    assert_eq!(
        file(h)["agents"]["main"]["egressAllow"],
        serde_json::json!(["*.example.com"])
    );
    let out = w(h)
        .args([
            "approvals",
            "egress",
            "remove",
            "--agent",
            "main",
            "pypi.org:443",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("has no egressAllow rule pypi.org:443"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Each change is on the record as a policy change.
    let changes: Vec<String> = support::log_records(h, &["--kind", "policy"])
        .iter()
        .filter_map(|r| r["change"].as_str().map(str::to_owned))
        .collect();
    assert!(
        changes
            .iter()
            .any(|c| c.contains("main egressAllow + pypi.org:443")),
        "{changes:?}"
    );
    assert!(
        changes
            .iter()
            .any(|c| c.contains("main egressAllow - pypi.org:443")),
        "{changes:?}"
    );
}

#[test]
fn defaults_show_and_set_the_host_ceilings() {
    let tmp = home();
    let h = tmp.path();
    let out = w(h).args(["approvals", "defaults"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("security:    unset (= deny)"), "{text}");
    let out = w(h)
        .args([
            "approvals",
            "defaults",
            "--security",
            "allowlist",
            "--ask-fallback",
            "deny",
            "--json",
        ])
        .output()
        .unwrap();
    support::assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["security"], "allowlist");
    assert_eq!(v["ask"], serde_json::Value::Null);
    assert_eq!(file(h)["defaults"]["security"], "allowlist");
    // Bad values and unknown agents change nothing.
    let before = std::fs::read(h.join("exec-approvals.json")).unwrap();
    let out = w(h)
        .args(["approvals", "defaults", "--security", "everything"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected one of deny, allowlist, full"));
    let out = w(h)
        .args([
            "approvals",
            "defaults",
            "--agent",
            "ghost",
            "--security",
            "full",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--create-agent"));
    assert_eq!(
        std::fs::read(h.join("exec-approvals.json")).unwrap(),
        before
    );
}

#[test]
fn doctor_says_whether_an_approver_is_listening_and_closing_stdin_stops_it() {
    let home = home();
    let approver_json = |home: &Path| {
        let out = w(home).args(["doctor", "--json"]).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["approver"].clone()
    };
    let absent = approver_json(home.path());
    assert_eq!(absent["listening"], false, "{absent}");
    assert_eq!(absent["usable"], true, "{absent}");
    assert!(
        absent["detail"]
            .as_str()
            .unwrap()
            .contains("warden approvals ui"),
        "says how to start one: {absent}"
    );

    let mut ui = TerminalApprover::start(home.path());
    let listening = approver_json(home.path());
    assert_eq!(listening["listening"], true, "{listening}");
    // The doctor's probe connection does not disturb the approver.
    drop(ui.child.stdin.take());
    ui.read_until("stdin closed");
    assert!(ui.child.wait().unwrap().success());

    // A socket directory others can enter is what `approvals ui` refuses; doctor says so
    // before anyone tries.
    std::fs::set_permissions(
        home.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let unsafe_dir = approver_json(home.path());
    assert_eq!(unsafe_dir["usable"], false, "{unsafe_dir}");
    assert!(
        unsafe_dir["detail"].as_str().unwrap().contains("0700"),
        "{unsafe_dir}"
    );
    let out = w(home.path())
        .args(["approvals", "ui"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("it is a directory") && err.contains("chmod 700"),
        "{err}"
    );
}

#[test]
fn the_approved_file_runs_and_a_file_swapped_in_while_the_human_looks_never_does() {
    let (_home, h) = asking_gateway_home();
    // A program on Warden's trusted PATH, in a directory someone can write to.
    let bin_dir = tempfile::tempdir().unwrap();
    let bin = std::fs::canonicalize(bin_dir.path()).unwrap();
    let tool = bin.join("tool");
    let install = |path: &Path, body: &str| {
        let staged = path.with_extension("new");
        std::fs::write(&staged, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&staged, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        std::fs::rename(&staged, path).unwrap();
    };
    install(&tool, "echo APPROVED-FILE");
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let mut ui = TerminalApprover::start(&h);
    let exec = || {
        w(&h)
            .env("PATH", &path)
            .args(["exec", "--", "tool"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // The human is shown the resolved file; while they look, it is replaced.
    let child = exec();
    let shown = ui.read_until("digest:").join("\n");
    assert!(shown.contains(&tool.display().to_string()), "{shown}");
    install(&tool, "echo SWAPPED-IN");
    ui.type_text("o\n");
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stdout.contains("SWAPPED-IN"), "the new file ran: {stdout}");
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr.contains("no longer the file that was approved"),
        "{stderr}"
    );
    // Unchanged between prompt and answer, the approved file runs.
    let child = exec();
    ui.answer(&tool.display().to_string(), "o\n");
    let out = child.wait_with_output().unwrap();
    support::assert_success(&out);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "SWAPPED-IN\n");
    ui.stop();
}

#[test]
fn a_socket_path_others_could_take_is_refused_when_set_and_never_sent_to() {
    let tmp = home();
    let h = tmp.path();
    let got = |h: &Path| -> serde_json::Value {
        serde_json::from_slice(
            &w(h)
                .args(["approvals", "get", "--json"])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap()
    };
    // `approvals set` refuses a socket in a directory others can write (or create).
    let world = tempfile::tempdir().unwrap();
    std::fs::set_permissions(world.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    for path in [
        world.path().join("approver.sock"),
        world.path().join("not-yet/approver.sock"),
        PathBuf::from("/tmp/warden-approver.sock"),
    ] {
        let before = got(h);
        let mut doc = before["file"].clone();
        doc["socket"] = serde_json::json!({"path": path});
        let edited = h.join("edited.json");
        std::fs::write(&edited, serde_json::to_vec(&doc).unwrap()).unwrap();
        let out = w(h)
            .args(["approvals", "set", "--file"])
            .arg(&edited)
            .args(["--base-hash", before["hash"].as_str().unwrap()])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{}: {stderr}", path.display());
        assert!(
            stderr.contains("another user") && stderr.contains(&path.display().to_string()),
            "{stderr}"
        );
        assert_eq!(got(h)["hash"], before["hash"], "the file changed");
    }

    // A file that names such a path anyway (edited by hand) gets nothing sent there:
    // the runner refuses the directory and applies askFallback at once.
    let open_dir = h.join("open");
    std::fs::create_dir(&open_dir).unwrap();
    std::fs::set_permissions(&open_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let socket = open_dir.join("a.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    support::configure(
        h,
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\nask = \"always\"\n",
        &format!(
            r#"{{"version":1,"socket":{{"path":"{}","token":"t0k"}},"defaults":{{"security":"allowlist","ask":"always","askFallback":"deny"}}}}"#,
            socket.display()
        ),
    );
    let out = w(h)
        .args(["exec", "--json", "--", "echo", "secret-value"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rule = v["rule"].as_str().unwrap_or_default().to_owned() + &v.to_string();
    assert!(rule.contains("not sent"), "{v:#}");
    assert!(
        listener.accept().is_err(),
        "the runner connected to a socket in a directory others can enter"
    );
}

#[test]
fn the_human_sees_each_scope_allow_always_could_store_and_picks_one() {
    let (_home, h) = asking_gateway_home();
    let git = std::fs::canonicalize(
        ["/usr/local/bin/git", "/usr/bin/git"]
            .iter()
            .find(|p| Path::new(p).exists())
            .expect("git is installed"),
    )
    .unwrap();
    let git = git.to_string_lossy().into_owned();
    let mut ui = TerminalApprover::start(&h);
    let exec = |args: &[&str]| {
        w(&h)
            .arg("exec")
            .arg("--")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // Preselected: git with its subcommand; the other scopes are listed.
    let child = exec(&[&git, "help", "-a"]);
    let text = ui.read_until("digest:").join("\n");
    assert!(
        text.contains(&format!("would store {git} help …")),
        "{text}"
    );
    assert!(
        text.contains(&format!("[1] exact      {git} help -a (exactly)")),
        "{text}"
    );
    assert!(
        text.contains("[2] subcommand") && text.contains("(preselected)"),
        "{text}"
    );
    assert!(text.contains(&format!("[3] program    {git}")), "{text}");
    // An option that was not offered is not taken: the question is asked again.
    ui.type_text("a7\n");
    ui.type_text("a1\n");
    let stored = ui.read_until("will be stored").join("\n");
    assert_eq!(
        stored.matches("(a1–a3: another scope)").count(),
        2,
        "asked again after a7: {stored}"
    );
    assert!(
        stored.contains(&format!("{git} help -a (exactly) will be stored for main")),
        "{stored}"
    );
    let out = child.wait_with_output().unwrap();
    support::assert_success(&out);
    let entry = &file(&h)["agents"]["main"]["allowlist"][0];
    assert_eq!(entry["pattern"], git.as_str());
    assert_eq!(entry["args"], serde_json::json!(["help", "-a"]));
    assert_eq!(entry["argsMatch"], "exact");
    // Exactly that runs without asking now; another subcommand still asks (and, with
    // nobody answering it here, the fallback denies).
    let out = w(&h)
        .args(["exec", "--", &git, "help", "-a"])
        .output()
        .unwrap();
    support::assert_success(&out);
    let child = exec(&[&git, "version"]);
    ui.answer("would store", "d\n");
    assert_eq!(child.wait_with_output().unwrap().status.code(), Some(77));
    ui.stop();
}

#[test]
fn allowlist_add_takes_argument_rules_and_refuses_bad_ones_changing_nothing() {
    let tmp = home();
    let h = tmp.path();
    let add = |args: &[&str]| {
        w(h).args([
            "approvals",
            "allowlist",
            "add",
            "--agent",
            "coder",
            "--create-agent",
        ])
        .args(args)
        .output()
        .unwrap()
    };
    let out = add(&["--arg", "log", "--arg", "-n", "--arg", "*", "/usr/bin/git"]);
    support::assert_success(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("/usr/bin/git log -n '*' …"));
    let out = add(&[
        "--arg",
        "-exec",
        "--allow-flag",
        "-exec",
        "--match",
        r#"["find","-exec","wc","{}",";"]"#,
        "/usr/bin/find",
    ]);
    support::assert_success(&out);
    let entries = file(h)["agents"]["coder"]["allowlist"].clone();
    assert_eq!(entries[0]["args"], serde_json::json!(["log", "-n", "*"]));
    assert!(
        entries[0].get("argsMatch").is_none(),
        "prefix is the default"
    );
    assert_eq!(entries[1]["allowFlags"], serde_json::json!(["-exec"]));
    assert_eq!(
        entries[1]["examples"]["match"],
        serde_json::json!([["find", "-exec", "wc", "{}", ";"]])
    );
    let before = std::fs::read(h.join("exec-approvals.json")).unwrap();
    for (args, why) in [
        (vec!["--exact", "/usr/bin/git"], "--exact needs"),
        (
            vec!["--match", "git status", "/usr/bin/git"],
            "not a JSON array",
        ),
        (
            vec![
                "--arg",
                "status",
                "--match",
                r#"["git","push"]"#,
                "/usr/bin/git",
            ],
            "must match but does not",
        ),
        (
            vec![
                "--match",
                r#"["git","-c","alias.x=!id","x"]"#,
                "/usr/bin/git",
            ],
            "git -c alias.x is not allowed",
        ),
        (vec!["--arg", "x\\", "/usr/bin/git"], "lone"),
    ] {
        let out = add(&args);
        assert_eq!(out.status.code(), Some(125), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(why), "{args:?}: {stderr}");
        assert_eq!(
            std::fs::read(h.join("exec-approvals.json")).unwrap(),
            before
        );
    }
    // Removing with argument rules removes that one entry.
    let out = w(h)
        .args(["approvals", "allowlist", "remove", "--agent", "coder"])
        .args(["--arg", "-exec", "--allow-flag", "-exec", "/usr/bin/find"])
        .output()
        .unwrap();
    support::assert_success(&out);
    assert_eq!(
        file(h)["agents"]["coder"]["allowlist"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn import_dry_run_shows_the_result_and_what_loosens_and_writes_nothing() {
    let tmp = home();
    let h = tmp.path();
    let oc = h.join("openclaw.json");
    std::fs::write(
        &oc,
        r#"{"version":1,"defaults":{"security":"full","askFallback":"allowlist","autoAllowSkills":true},
            "agents":{"*":{"allowlist":[{"id":"a1","pattern":"/usr/bin/rg"}]}},"ui":{"theme":"dark"}}"#,
    )
    .unwrap();
    let out = w(h)
        .args(["approvals", "import", "--dry-run", oc.to_str().unwrap()])
        .output()
        .unwrap();
    support::assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    for shown in [
        "LOOSENS THIS HOST:",
        "defaults.security: deny → full",
        "defaults.askFallback: deny → allowlist",
        "agents.*: allowlist entry /usr/bin/rg applies to every agent",
        "defaults.autoAllowSkills",
        "dry run: nothing was written",
        "\"theme\": \"dark\"",
    ] {
        assert!(text.contains(shown), "{shown:?} not in {text}");
    }
    assert!(
        !h.join("exec-approvals.json").exists(),
        "a dry run wrote the file"
    );
    let out = w(h)
        .args(["approvals", "import", "--json", oc.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["summary"]["agentsAdded"], serde_json::json!(["*"]));
    assert_eq!(file(h)["ui"]["theme"], "dark");
    assert_eq!(file(h)["defaults"]["autoAllowSkills"], true);
}

#[test]
fn with_run_in_approver_the_terminal_approver_says_it_runs_the_command_and_does() {
    let tmp = home();
    let h = tmp.path().to_path_buf();
    support::configure(
        &h,
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\nrun_in_approver = true\n",
        r#"{"version":1,"defaults":{"security":"allowlist","ask":"on-miss","askFallback":"deny"}}"#,
    );
    let explain = w(&h)
        .args(["policy", "explain", "--", "printf", "x"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&explain.stdout);
    assert!(
        text.contains("in approver  yes: an approved command is run by the approver")
            && text.contains("(global)"),
        "{text}"
    );
    let mut ui = TerminalApprover::start(&h);
    let child = w(&h)
        .args(["exec", "--json", "--", "printf", "from %s", "the approver"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let shown = ui.read_until("digest:").join("\n");
    assert!(
        shown.contains("runs this command ITSELF, with its own permissions"),
        "{shown}"
    );
    ui.type_text("o\n");
    let after = ui.read_until("→ allow-once").join("\n");
    assert!(after.contains("run it HERE: allow [o]nce"), "{after}");
    assert!(after.contains("ran here: exit 0"), "{after}");
    let out = child.wait_with_output().unwrap();
    support::assert_success(&out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["executed"]["in_approver"], true, "{report}");
    assert_eq!(report["stdout"], "from the approver", "{report}");
    // Denied: nothing runs anywhere, and the requester is told.
    let child = w(&h)
        .args(["exec", "--", "printf", "never"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    ui.answer("printf", "d\n");
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(77));
    assert!(out.stdout.is_empty());
    ui.stop();
}

/// Prints the process and memory limits of the run's own cgroup (v1 or v2), one per
/// line; nothing where the run has no cgroup of its own.
const PRINT_OWN_LIMITS: &str = r#"while IFS=: read -r _ ctl path; do
  case $ctl in
    pids) cat "/sys/fs/cgroup/pids$path/pids.max" ;;
    memory) cat "/sys/fs/cgroup/memory$path/memory.limit_in_bytes" ;;
    "") [ "$path" != / ] && [ -f "/sys/fs/cgroup$path/pids.max" ] && cat "/sys/fs/cgroup$path/pids.max" "/sys/fs/cgroup$path/memory.max" ;;
  esac
done < /proc/self/cgroup
true"#;

#[test]
fn a_command_run_in_the_approver_has_exactly_the_limits_the_runner_gives_it() {
    let tmp = home();
    let h = tmp.path().to_path_buf();
    support::configure(
        &h,
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"full\"\nask = \"off\"\nrun_in_approver = true\n\
         max_processes = 37\nmax_memory = \"300MiB\"\n",
        r#"{"version":1,"defaults":{"security":"full","ask":"off","askFallback":"deny"}}"#,
    );
    // Run by the runner (nobody is asked).
    let by_runner = w(&h)
        .args(["exec", "--json", "--shell", PRINT_OWN_LIMITS])
        .output()
        .unwrap();
    support::assert_success(&by_runner);
    let by_runner: serde_json::Value = serde_json::from_slice(&by_runner.stdout).unwrap();
    let runner_limits = by_runner["stdout"].as_str().unwrap().to_owned();
    if !runner_limits.contains("37") {
        eprintln!(
            "SKIPPED: runs get no cgroup limits on this host (the runner's run saw {runner_limits:?})"
        );
        return;
    }
    assert!(
        runner_limits.contains(&(300u64 << 20).to_string()),
        "{runner_limits}"
    );
    // The same command, asked about and run by the approver.
    let mut ui = TerminalApprover::start(&h);
    // `warden exec --json --ask always ARGS`, allowed once in the approver.
    let allowed_once = |ui: &mut TerminalApprover, args: &[&str]| {
        let child = w(&h)
            .args(["exec", "--json", "--ask", "always"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        ui.read_until("digest:");
        ui.type_text("o\n");
        ui.read_until("→ allow-once");
        child.wait_with_output().unwrap()
    };
    let out = allowed_once(&mut ui, &["--shell", PRINT_OWN_LIMITS]);
    support::assert_success(&out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["executed"]["in_approver"], true, "{report}");
    assert_eq!(
        report["stdout"].as_str().unwrap(),
        runner_limits,
        "the approver's run had other limits than the runner's"
    );
    // And the timeout: the plan's, not more.
    let out = allowed_once(&mut ui, &["--timeout", "1s", "--", "sleep", "30"]);
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    ui.stop();
}

#[test]
fn on_a_terminal_one_key_press_answers_and_cursor_keys_never_do() {
    use std::io::{Read, Write};
    use std::os::fd::AsFd;
    let tmp = home();
    let h = tmp.path().to_path_buf();
    let pty = nix::pty::openpty(None, None).unwrap();
    let slave = || Stdio::from(pty.slave.try_clone().unwrap());
    let mut child = w(&h)
        .args(["approvals", "ui"])
        .stdin(slave())
        .stdout(slave())
        .stderr(slave())
        .spawn()
        .unwrap();
    let mut master = std::fs::File::from(pty.master);
    let mut reader = master.try_clone().unwrap();
    let (tx, screen) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0
                || tx
                    .send(String::from_utf8_lossy(&buf[..n]).into_owned())
                    .is_err()
            {
                break;
            }
        }
    });
    let mut seen = String::new();
    let mut wait_for = |needle: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !seen.contains(needle) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match screen.recv_timeout(left) {
                Ok(chunk) => seen.push_str(&chunk),
                Err(_) => panic!("no {needle:?} on the terminal: {seen}"),
            }
        }
        std::mem::take(&mut seen)
    };
    let first = wait_for("no Enter needed");
    let socket = first
        .lines()
        .find_map(|l| l.trim().strip_prefix("warden approver listening on "))
        .unwrap()
        .to_owned();
    let token = file(&h)["socket"]["token"].as_str().unwrap().to_owned();
    let config = ClientConfig {
        socket_path: PathBuf::from(socket),
        token,
        approver_uid: nix::unistd::geteuid().as_raw(),
        connect_timeout: Duration::from_secs(5),
        approval_timeout: Duration::from_secs(60),
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ask_one = |id: &str| {
        let (c, r) = (
            config.clone(),
            prompt(id, &["ls", "-la"], "coder", &["/usr/bin/ls"]),
        );
        rt.spawn(async move { ask(&c, &SystemClock, &r).await })
    };
    // Up, Down and F1 send upper-case letters inside escape sequences; none is "a".
    let pending = ask_one("k1");
    wait_for("allow [o]nce, allow [a]lways, [d]eny?");
    master.write_all(b"\x1b[A\x1b[B\x1bOP").unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(!pending.is_finished(), "a cursor key answered the prompt");
    // One key, no Enter.
    master.write_all(b"d").unwrap();
    let AskOutcome::Answered(r) = rt.block_on(pending).unwrap() else {
        panic!()
    };
    assert_eq!(r.answer, Answer::Deny);
    wait_for("→ deny");
    let pending = ask_one("k2");
    wait_for("[d]eny?");
    master.write_all(b"o").unwrap();
    let AskOutcome::Answered(r) = rt.block_on(pending).unwrap() else {
        panic!()
    };
    assert_eq!(r.answer, Answer::AllowOnce);
    // Several scopes: the question names the number keys; a number out of range is no
    // answer, and `2` allows always with the second scope, shown as it will be stored.
    let scoped = {
        let c = config.clone();
        let Request::Prompt(mut p) = prompt("k3", &["git", "status", "-s"], "coder", &[]) else {
            unreachable!()
        };
        let rule = |args: &[&str], exact: bool| policy::RuleSpec {
            args: (!args.is_empty()).then(|| args.iter().map(|a| a.to_string()).collect()),
            args_match: if exact {
                policy::ArgsMatch::Exact
            } else {
                policy::ArgsMatch::Prefix
            },
            ..policy::RuleSpec::program("/usr/bin/git")
        };
        if let PromptKind::Command {
            allow_always,
            allow_always_default,
            ..
        } = &mut p.kind
        {
            *allow_always = vec![
                policy::AlwaysOption {
                    scope: policy::Scope::Exact,
                    rules: vec![rule(&["status", "-s"], true)],
                },
                policy::AlwaysOption {
                    scope: policy::Scope::Subcommand,
                    rules: vec![rule(&["status"], false)],
                },
                policy::AlwaysOption {
                    scope: policy::Scope::Program,
                    rules: vec![rule(&[], false)],
                },
            ];
            *allow_always_default = 1;
        }
        let r = Request::Prompt(Prompt::new(
            &p.id,
            &p.agent,
            &p.session,
            &p.host,
            p.kind.clone(),
        ));
        rt.spawn(async move { ask(&c, &SystemClock, &r).await })
    };
    wait_for("allow [o]nce, allow [a]lways (1–3: another scope), [d]eny?");
    master.write_all(b"7").unwrap();
    wait_for("(1–3: another scope), [d]eny?");
    assert!(
        !scoped.is_finished(),
        "a scope that was not offered answered"
    );
    master.write_all(b"3").unwrap();
    let AskOutcome::Answered(r) = rt.block_on(scoped).unwrap() else {
        panic!()
    };
    assert_eq!(
        (r.answer, r.allow_always_option),
        (Answer::AllowAlways, Some(2))
    );
    wait_for("/usr/bin/git will be stored for coder");
    // Ctrl-D ends it, and the terminal is left as it was found.
    master.write_all(b"\x04").unwrap();
    wait_for("stdin closed");
    assert!(child.wait().unwrap().success());
    let restored = nix::sys::termios::tcgetattr(pty.slave.as_fd()).unwrap();
    assert!(
        restored
            .local_flags
            .contains(nix::sys::termios::LocalFlags::ICANON | nix::sys::termios::LocalFlags::ECHO),
        "the terminal was left in key mode"
    );
}

/// `warden doctor --json`'s word on each agent's gateway runs, by agent.
fn doctor_agents(home: &Path) -> BTreeMap<String, serde_json::Value> {
    let out = support::warden_in(home)
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["hosts"]["gateway"]["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["agent"].as_str().unwrap().to_owned(), a.clone()))
        .collect()
}

#[test]
fn doctor_says_which_layer_makes_the_gateway_deny_and_which_agents_have_no_policy() {
    let home = support::warden_home();
    // Out of the box: the built-in default denies, and doctor says what to set.
    let agents = doctor_agents(home.path());
    let main = &agents["main"];
    assert_eq!(main["gatewayRuns"], false, "{main}");
    let detail = main["detail"].as_str().unwrap();
    assert!(
        detail.contains("built-in default") && detail.contains("security = \"allowlist\""),
        "{detail}"
    );
    // The config allows an allowlist, the host file still denies: the host file is named,
    // with the command that raises it.
    support::configure(
        home.path(),
        "[tools.exec]\nsecurity = \"allowlist\"\n[[agents.list]]\nid = \"coder\"\n",
        r#"{"version":1,"defaults":{"security":"deny"}}"#,
    );
    let agents = doctor_agents(home.path());
    let coder = agents["coder"]["detail"].as_str().unwrap().to_owned();
    assert!(
        coder.contains("host file") && coder.contains("warden approvals defaults"),
        "{coder}"
    );
    assert!(!coder.contains("no policy of its own"), "{coder}");
    // Raised: coder runs; an agent with a credential and nothing else is pointed out.
    let out = support::warden_in(home.path())
        .args(["approvals", "defaults", "--security", "allowlist"])
        .output()
        .unwrap();
    support::assert_success(&out);
    let out = support::warden_in(home.path())
        .args(["gateway", "token", "--agent", "claude"])
        .output()
        .unwrap();
    support::assert_success(&out);
    let agents = doctor_agents(home.path());
    assert_eq!(
        agents["coder"]["gatewayRuns"], true,
        "{:?}",
        agents["coder"]
    );
    let claude = agents["claude"]["detail"].as_str().unwrap();
    assert!(
        claude.contains("no policy of its own although it has a gateway credential"),
        "{claude}"
    );
}
