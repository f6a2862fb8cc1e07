//! End-to-end: `warden policy explain` reads the real config and approvals file, and its
//! exit code always agrees with the decision it prints.

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use support::warden;

fn explain(home: &Path, args: &[&str]) -> (i32, serde_json::Value) {
    let out = warden()
        .env("WARDEN_HOME", home)
        .args(["policy", "explain", "--json"])
        .args(args)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code().unwrap(), v)
}

#[test]
fn exit_code_agrees_with_the_decision_and_sources_are_reported() {
    let tmp = support::warden_home();
    let h = tmp.path();
    support::configure(
        h,
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\n[[agents.list]]\nid = \"coder\"\ntools.exec.ask = \"off\"\n",
        r#"{"version":1,"defaults":{"security":"allowlist","ask":"off","askFallback":"deny"},"agents":{"coder":{"allowlist":[{"pattern":"/usr/bin/*"},{"pattern":"/bin/*"}]}}}"#,
    );
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--agent", "coder", "--", "ls", "-la"], "allow"),
        (
            vec!["--agent", "coder", "--shell", "ls | wc -l && true"],
            "allow",
        ),
        (vec!["--agent", "coder", "--shell", "ls > /tmp/x"], "deny"),
        (
            vec!["--agent", "coder", "--ask", "always", "--", "ls"],
            "ask",
        ),
        (
            vec!["--agent", "coder", "--security", "deny", "--", "ls"],
            "deny",
        ),
        (
            vec![
                "--agent",
                "coder",
                "--security",
                "full",
                "--shell",
                "ls > /tmp/x",
            ],
            "deny",
        ),
        (vec!["--agent", "other", "--", "ls"], "ask"),
    ];
    for (args, expected) in cases {
        let (code, v) = explain(h, &args);
        let decision = v["decision"]["decision"].as_str().unwrap();
        assert_eq!(decision, expected, "{args:?}: {v:#}");
        let expected_code = match decision {
            "allow" => 0,
            "ask" => 10,
            _ => 77,
        };
        assert_eq!(code, expected_code, "{args:?}");
        assert_eq!(v["exitCode"], expected_code);
    }
    let (_, v) = explain(h, &["--agent", "coder", "--security", "full", "--", "ls"]);
    assert_eq!(
        v["policy"]["security"]["source"], "host-file",
        "the host file caps a tool parameter"
    );
    assert_eq!(v["policy"]["ask"]["source"], "agent");
    assert_eq!(v["policy"]["host"]["source"], "global");
    assert_eq!(v["evaluation"]["rebuilt"]["value"][0], "/usr/bin/ls");
}

#[test]
fn bad_config_is_a_clear_error() {
    let tmp = support::warden_home();
    let h = tmp.path();
    support::configure(
        h,
        "[tools.exec]\nsecurity = \"maybe\"\n",
        r#"{"version":1}"#,
    );
    let out = warden()
        .env("WARDEN_HOME", h)
        .args(["policy", "explain", "--", "ls"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tools.exec.security") && err.contains("maybe") && err.contains("config.toml"),
        "{err}"
    );
}

/// Security invariant 9: no shell string crashes `explain`. Before the analysis was
/// bounded, a few hundred nested groups overflowed the stack (exit 134), and some numbers
/// panicked the parser (exit 101); now each is an ordinary miss, with the limit named.
#[test]
fn pathological_shell_strings_are_a_miss_that_names_the_limit() {
    let tmp = support::warden_home();
    let h = tmp.path();
    support::configure(
        h,
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\n",
        r#"{"version":1,"defaults":{"security":"allowlist","ask":"on-miss","askFallback":"deny"},"agents":{"main":{"allowlist":[{"pattern":"/usr/bin/*"},{"pattern":"/bin/*"}]}}}"#,
    );
    let nested =
        |open: &str, close: &str, n: usize| format!("{}ls{}", open.repeat(n), close.repeat(n));
    // (shell string, expected miss reason, text the detail must contain)
    let cases: Vec<(String, &str, &str)> = vec![
        // The brief: a deeply nested 100 KB string.
        ("{ ".repeat(50_000), "too-large", "65536 bytes"),
        (nested("{ ", "; }", 12_000), "depth-limit", "64 levels"),
        // The reported size: about 1.5 KB of nested groups.
        (nested("{ ", "; }", 300), "depth-limit", "64 levels"),
        (nested("$( ", " )", 12_000), "depth-limit", "64 levels"),
        (
            nested("\"$(echo ", ")\"", 6_000),
            "depth-limit",
            "64 levels",
        ),
        (nested("${a:-", "}", 10_000), "depth-limit", "64 levels"),
        (
            nested("if true; then ", "; fi", 3_000),
            "depth-limit",
            "64 levels",
        ),
        (
            format!("echo $(( {} ))", nested("(", ")", 30_000)),
            "depth-limit",
            "64 levels",
        ),
        // Exponential in the parser before (seconds to hours): refused on its tokens.
        ("( ".repeat(40), "unsupported-syntax", "arithmetic command"),
        (
            nested("case x in a) ", " esac ", 30),
            "unsupported-syntax",
            "case",
        ),
        // Panicked the parser before.
        (
            "ls 99999999999>x".into(),
            "unsupported-syntax",
            "file descriptor",
        ),
        ("ls ~+99999999999999999999".into(), "non-literal-word", "~"),
    ];
    for (script, reason, detail) in &cases {
        let (code, v) = explain(h, &["--shell", script]);
        let miss = &v["evaluation"]["analysis"]["miss"];
        assert_eq!(miss["reason"], *reason, "{:.60}…: {v:#}", script);
        assert!(
            miss["detail"].as_str().unwrap().contains(detail),
            "{:.60}…: {miss}",
            script
        );
        assert_eq!(v["decision"]["decision"], "ask");
        assert_eq!(code, 10, "{:.60}…", script);
    }
    // The same as a `sh -c` payload, and in the text report.
    let payload = nested("( ", " )", 5_000);
    let out = warden()
        .env("WARDEN_HOME", h)
        .args(["policy", "explain", "--", "sh", "-c", &payload])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(10));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("nesting deeper than 64 levels") && text.contains("(depth-limit)"),
        "{text}"
    );
    // An argument that is not UTF-8 is a usage error, not a panic.
    let out = warden()
        .env("WARDEN_HOME", h)
        .args(["policy", "explain", "--shell"])
        .arg(std::ffi::OsStr::from_bytes(b"ls \xff"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid UTF-8"));
}

#[test]
fn explain_names_the_profile_hit_and_an_operators_profiles_extend_the_shipped_ones() {
    let tmp = support::warden_home();
    let h = tmp.path();
    let git = std::fs::canonicalize(
        ["/usr/local/bin/git", "/usr/bin/git"]
            .iter()
            .find(|p| Path::new(p).exists())
            .expect("git is installed"),
    )
    .unwrap();
    let approvals = serde_json::json!({
        "version": 1,
        "defaults": {"security": "allowlist", "ask": "on-miss", "askFallback": "deny"},
        "agents": {"coder": {"allowlist": [{"pattern": git}]}}
    });
    support::configure(
        h,
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\n",
        &approvals.to_string(),
    );
    let git = git.to_string_lossy().into_owned();
    let (code, v) = explain(h, &["--agent", "coder", "--", &git, "status"]);
    assert_eq!(code, 0, "{v}");
    // The issue's command: the entry names git, its grammar refuses the alias.
    let (code, v) = explain(
        h,
        &[
            "--agent",
            "coder",
            "--",
            &git,
            "-c",
            "alias.x=!id > FILE",
            "x",
        ],
    );
    assert_eq!(code, 10, "{v}");
    let rule = v["decision"]["rule"].as_str().unwrap();
    assert!(
        rule.contains("git -c alias.x: sets \"alias.x\", a configuration key the git grammar does not know to be safe"),
        "{rule}"
    );
    assert_eq!(
        v["evaluation"]["leaves"][0]["profile"][0]["name"],
        "-c alias.x"
    );
    let text = support::warden_in(h)
        .args([
            "policy",
            "explain",
            "--agent",
            "coder",
            "--",
            &git,
            "log",
            "--output=/tmp/elsewhere",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(
            "profile: git --output: writes to /tmp/elsewhere, outside the run's writable paths"
        ),
        "{text}"
    );
    assert!(text.contains("git grammar: refuses 1 word(s)"), "{text}");
    assert!(text.contains("+ log: subcommand"), "{text}");

    // `git gc` is not in the shipped grammar: a miss, naming it; the operator adds it.
    let (code, v) = explain(h, &["--agent", "coder", "--", &git, "gc"]);
    assert_eq!(code, 10, "{v}");
    assert!(
        v["decision"]["rule"]
            .as_str()
            .unwrap()
            .contains("git gc: a subcommand the git grammar does not know"),
        "{v}"
    );
    std::fs::write(
        h.join("profiles.toml"),
        "[[program]]\nnames = [\"git\"]\n[program.grammar.subcommand.gc]\noptions = [\"--auto\", \"--quiet\"]\n",
    )
    .unwrap();
    let (code, v) = explain(h, &["--agent", "coder", "--", &git, "gc", "--auto"]);
    assert_eq!(code, 0, "{v}");

    // The operator adds a rule: `git push` now asks too, naming it.
    std::fs::write(
        h.join("profiles.toml"),
        "[[program]]\nnames = [\"git\"]\n[[program.rule]]\nname = \"push\"\nreason = \"publishes commits\"\nsubcommands = [\"push\"]\n",
    )
    .unwrap();
    let (code, v) = explain(h, &["--agent", "coder", "--", &git, "push"]);
    assert_eq!(code, 10, "{v}");
    assert!(
        v["decision"]["rule"]
            .as_str()
            .unwrap()
            .contains("git push: publishes commits"),
        "{v}"
    );
    // A profiles file that cannot be used: everything is denied, and the file is named.
    std::fs::write(
        h.join("profiles.toml"),
        "[[program]]\nnames = [\"git\"]\ntypo = 1\n",
    )
    .unwrap();
    let (code, v) = explain(h, &["--agent", "coder", "--", &git, "status"]);
    assert_eq!(code, 77, "{v}");
    let error = v["hostFileError"].as_str().unwrap();
    assert!(
        error.contains("profiles.toml") && error.contains("typo"),
        "{error}"
    );
}

#[test]
fn explain_says_when_the_operators_direct_mode_would_run_a_sandbox_command_unconfined() {
    let tmp = support::warden_home();
    let h = tmp.path();
    support::configure(
        h,
        "[sandbox]\nexec_allowlist = [\"/usr/bin\"]\n",
        r#"{"version":1}"#,
    );
    let (code, v) = explain(h, &["--", "ls"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["decision"]["reason"], "sandboxed", "{v}");
    let limits = &v["plans"]["asWritten"]["Ok"]["limits"];
    assert_eq!(limits["unconfined"], serde_json::Value::Null, "{v}");
    assert!(limits["execAllowlist"].is_object(), "{v}");
    let out = warden()
        .env("WARDEN_HOME", h)
        .args(["sandbox", "direct", "--ttl", "10m"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The decision and the plan (what a human would approve) both say it, before it runs.
    let (code, v) = explain(h, &["--", "ls"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["decision"]["reason"], "unconfined", "{v}");
    assert!(
        v["decision"]["rule"]
            .as_str()
            .unwrap()
            .contains("WITHOUT an OS sandbox"),
        "{v}"
    );
    let limits = &v["plans"]["asWritten"]["Ok"]["limits"];
    assert_eq!(limits["unconfined"], true, "{v}");
    assert_eq!(limits["execAllowlist"], serde_json::Value::Null, "{v}");
    assert_eq!(limits["network"], serde_json::Value::Null, "{v}");
}
