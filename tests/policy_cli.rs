//! End-to-end: `warden policy explain` reads the real config and approvals file, and its
//! exit code always agrees with the decision it prints.

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

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
