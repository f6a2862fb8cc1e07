//! End to end: one table of commands — a build that floods stdout and fails on stderr,
//! `yes` past the cap with a last word on stderr, a command killed by SIGKILL, SIGTERM
//! and SIGSEGV, `exit 137`, output that is not UTF-8 across the cap, a multibyte
//! character split at both ends of the cut, a timeout — run on every host Warden has
//! and through both MCP transports, each result checked against the same expectations:
//! the agent sees the end of stdout and all of a short stderr, and `exitCode`, `signal`,
//! `timedOut`, `cancelled`, `truncated` and the per-stream sizes mean one thing
//! everywhere.
//!
//! Hosts: the gateway host, the sandbox with Warden's builder and with bubblewrap and in
//! a Podman container (`warden exec --json`); the gateway host and a paired node over
//! MCP on HTTP (`warden gateway run`); the sandbox over MCP on stdio (`warden mcp`).
//! Where bubblewrap or Podman is missing, those hosts are skipped loudly.
//!
//! The one host that cannot tell a signal from an exit code is the container: the
//! engine and the shell inside report only the number (128 + N). There `signal` is
//! null and `exitCode` the same as everywhere (see docs/mcp.md).

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

#[path = "support/bridge.rs"]
mod bridge_support;
#[path = "../crates/sandbox/tests/support/podman.rs"]
mod podman;
mod support;

use std::path::Path;

use base64::Engine as _;
use serde_json::{Value, json};
use support::{bwrap_usable, configure, gateway_token, warden_home, warden_in};

/// The output cap (product spec: 200,000 bytes of stdout and stderr together).
const CAP: u64 = 200_000;

/// What a host can say about a run.
#[derive(Clone, Copy)]
struct Host {
    name: &'static str,
    /// It tells a command killed by signal N from one that exited with 128 + N.
    knows_signals: bool,
}

/// One command and what every host must report for it.
struct Case {
    name: &'static str,
    script: &'static str,
    timeout_s: Option<u64>,
    check: fn(&Value, Host),
}

const BUILD_ERROR: &str = "error[E0308]: mismatched types\n";

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "build",
            script: "yes 'compiling crate 0123456789' | head -c 1000000; echo; \
                     echo 'error[E0308]: mismatched types' >&2; echo 'build failed'; exit 101",
            timeout_s: None,
            check: |r, _| {
                ended(r, 101, None, false, true);
                assert_eq!(r["stderr"], BUILD_ERROR, "all of a short stderr");
                size(
                    r,
                    "stderr",
                    BUILD_ERROR.len() as u64,
                    BUILD_ERROR.len() as u64,
                    false,
                );
                let out = text(r, "stdout");
                assert!(out.starts_with("compiling crate 0123456789\n"));
                assert!(out.ends_with("\nbuild failed\n"), "the end of stdout");
                assert!(
                    out.contains("… (truncated: "),
                    "the dropped middle is marked"
                );
                size(r, "stdout", 1_000_014, CAP - BUILD_ERROR.len() as u64, true);
            },
        },
        Case {
            name: "yes past the cap",
            script: "yes | head -c 5000000; echo 'the last word' >&2",
            timeout_s: None,
            check: |r, _| {
                ended(r, 0, None, false, true);
                assert_eq!(r["stderr"], "the last word\n");
                let out = text(r, "stdout");
                assert!(out.starts_with("y\ny\n") && out.ends_with("y\ny\n"));
                size(r, "stdout", 5_000_000, CAP - 14, true);
            },
        },
        Case {
            name: "SIGKILL",
            script: "echo before; kill -KILL $$",
            timeout_s: None,
            check: |r, host| killed(r, host, 9),
        },
        Case {
            name: "SIGTERM",
            script: "echo before; kill -TERM $$",
            timeout_s: None,
            check: |r, host| killed(r, host, 15),
        },
        Case {
            name: "SIGSEGV",
            script: "echo before; kill -SEGV $$",
            timeout_s: None,
            check: |r, host| killed(r, host, 11),
        },
        Case {
            name: "exit 137",
            script: "echo before; exit 137",
            timeout_s: None,
            check: |r, _| {
                ended(r, 137, None, false, false);
                assert_eq!(r["stdout"], "before\n");
            },
        },
        Case {
            name: "not found",
            script: "/nonexistent/warden-results-missing",
            timeout_s: None,
            check: |r, _| {
                ended(r, 127, None, false, false);
                assert!(text(r, "stderr").contains("warden-results-missing"));
            },
        },
        Case {
            name: "not UTF-8 across the cap",
            script: "yes \"$(printf 'ab\\377')\" | head -c 300000",
            timeout_s: None,
            check: |r, _| {
                ended(r, 0, None, false, true);
                size(r, "stdout", 300_000, CAP, true);
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(r["stdoutBase64"].as_str().expect("exact bytes"))
                    .unwrap();
                let pattern: Vec<u8> = b"ab\xff\n".repeat(75_000);
                let mut expected = pattern[..100_000].to_vec();
                expected.extend_from_slice(&pattern[200_000..]);
                assert!(
                    bytes == expected,
                    "the kept bytes are the first and last 100,000"
                );
                let out = text(r, "stdout");
                assert!(out.contains('\u{fffd}') && out.contains("… (truncated: "));
            },
        },
        Case {
            name: "a character split at both ends of the cut",
            // stdout: "a" then 2-byte characters; one byte of stderr makes stdout's
            // share odd, so the head ends and the tail starts inside a character.
            script: "printf a; awk 'BEGIN { for (i = 0; i < 150000; i++) printf \"é\" }'; printf x >&2",
            timeout_s: None,
            check: |r, _| {
                ended(r, 0, None, false, true);
                assert_eq!(r["stderr"], "x");
                let s = &r["stdoutSize"];
                assert_eq!(
                    (&s["written"], &s["keptFirst"], &s["keptLast"]),
                    (&json!(300_001), &json!(100_000), &json!(99_999)),
                    "{s}"
                );
                let out = text(r, "stdout");
                assert!(
                    !out.contains('\u{fffd}'),
                    "no character is split or replaced"
                );
                assert!(
                    r.get("stdoutBase64").is_none(),
                    "valid UTF-8 needs no bytes"
                );
                assert!(out.starts_with("aéé") && out.ends_with("éé"));
            },
        },
        Case {
            name: "timeout",
            script: "echo started; sleep 30",
            timeout_s: Some(1),
            check: |r, _| {
                assert_eq!(r["status"], "finished", "{r:#}");
                assert_eq!(r["exitCode"], 124);
                assert_eq!(r["timedOut"], true);
                assert_eq!(r["cancelled"], false);
                assert_eq!(r["stdout"], "started\n");
                // Warden's own SIGTERM (or SIGKILL after the grace) ended it, if the host
                // can tell.
                assert!(
                    r["signal"].is_null() || r["signal"] == 15 || r["signal"] == 9,
                    "{r:#}"
                );
            },
        },
    ]
}

/// A finished run's outcome fields.
fn ended(r: &Value, code: i64, signal: Option<i64>, timed_out: bool, truncated: bool) {
    assert_eq!(r["status"], "finished", "{r:#}");
    assert_eq!(r["exitCode"], code, "{}", r["message"]);
    assert_eq!(r["signal"], json!(signal), "{}", r["message"]);
    assert_eq!(r["timedOut"], timed_out);
    assert_eq!(r["cancelled"], false);
    assert_eq!(r["truncated"], truncated, "{}", r["message"]);
}

fn killed(r: &Value, host: Host, signal: i64) {
    let named = host.knows_signals.then_some(signal);
    ended(r, 128 + signal, named, false, false);
    assert_eq!(r["stdout"], "before\n");
    if host.knows_signals {
        let said = format!("killed by signal {signal}");
        assert!(
            r["message"].as_str().unwrap().contains(&said),
            "{}",
            r["message"]
        );
    }
}

fn text<'a>(r: &'a Value, stream: &str) -> &'a str {
    r[stream]
        .as_str()
        .unwrap_or_else(|| panic!("no {stream}: {r:#}"))
}

/// A stream's size: `written`, `kept` and `cut`, with kept = keptFirst + keptLast and, for
/// a cut stream, the two ends within one byte of each other.
fn size(r: &Value, stream: &str, written: u64, kept: u64, cut: bool) {
    let s = &r[format!("{stream}Size")];
    assert_eq!(s["written"], written, "{stream}: {s}");
    assert_eq!(s["kept"], kept, "{stream}: {s}");
    assert_eq!(s["cut"], cut, "{stream}: {s}");
    let (first, last) = (
        s["keptFirst"].as_u64().unwrap(),
        s["keptLast"].as_u64().unwrap(),
    );
    assert_eq!(first + last, kept, "{stream}: {s}");
    if cut {
        assert!(first - last <= 1, "{stream}: half head, half tail: {s}");
    }
}

/// Run every case through `run` and check it for `host`.
async fn run_table<F, Fut>(host: Host, mut run: F)
where
    F: FnMut(&'static str, Option<u64>) -> Fut,
    Fut: std::future::Future<Output = Value>,
{
    for case in cases() {
        let r = run(case.script, case.timeout_s).await;
        let checked =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (case.check)(&r, host)));
        if let Err(e) = checked {
            eprintln!(
                "host {}, case {:?} failed; result: {}",
                host.name,
                case.name,
                brief(&r)
            );
            std::panic::resume_unwind(e);
        }
    }
}

/// A result without its long texts, for a failure message.
fn brief(r: &Value) -> String {
    let mut r = r.clone();
    for key in ["stdout", "stderr", "stdoutBase64", "combined", "tail"] {
        if let Some(s) = r.get(key).and_then(Value::as_str)
            && s.len() > 300
        {
            let shown: String = s.chars().take(300).collect();
            r[key] = format!("{shown}… ({} bytes)", s.len()).into();
        }
    }
    format!("{r:#}")
}

/// `warden exec --json --shell SCRIPT` in `home`, from `cwd`.
fn cli_exec(home: &Path, cwd: &Path, script: &str, timeout_s: Option<u64>) -> Value {
    let mut cmd = warden_in(home);
    cmd.args(["exec", "--json"]);
    if let Some(t) = timeout_s {
        cmd.args(["--timeout", &t.to_string()]);
    }
    let out = cmd
        .args(["--shell", script])
        .current_dir(cwd)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
}

const OPEN_FILE: &str =
    r#"{"version":1,"defaults":{"security":"full","ask":"off","askFallback":"deny"}}"#;

/// A home whose `host` runs everything, with `sandbox` settings.
fn open_home(host: &str, sandbox: &str) -> tempfile::TempDir {
    let home = warden_home();
    configure(
        home.path(),
        &format!("[tools.exec]\nhost = \"{host}\"\nsecurity = \"full\"\nask = \"off\"\n{sandbox}"),
        OPEN_FILE,
    );
    home
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_host_and_both_sandbox_builders_report_the_same_outcomes() {
    let (_ws, ws) = bridge_support::workspace();
    let gateway = open_home("gateway", "");
    run_table(
        Host {
            name: "gateway",
            knows_signals: true,
        },
        |script, t| {
            let r = cli_exec(gateway.path(), &ws, script, t);
            async move { r }
        },
    )
    .await;
    if !bwrap_usable() {
        return;
    }
    for (builder, name) in [
        ("warden", "sandbox (Warden's builder)"),
        ("bubblewrap", "sandbox (bubblewrap)"),
    ] {
        let home = open_home(
            "sandbox",
            &format!(
                "[sandbox]\nbuilder = \"{builder}\"\nwritable_paths = [\"{}\"]\n",
                ws.display()
            ),
        );
        run_table(
            Host {
                name,
                knows_signals: true,
            },
            |script, t| {
                let r = cli_exec(home.path(), &ws, script, t);
                assert_eq!(r["host"], "sandbox", "{}", brief(&r));
                async move { r }
            },
        )
        .await;
    }
}

/// The status line is out of the command's reach: inside the sandbox's pid namespace it
/// writes a forged `{ "exit-code": 0 }` into every descriptor of every process it can
/// open through `/proc`, then is killed — and the result still names the signal. (The
/// process that waits for the command, pid 1 or the helper, is not dumpable; its status
/// descriptor is close-on-exec.)
#[test]
fn a_command_cannot_forge_its_own_end_in_the_sandbox() {
    if !bwrap_usable() {
        return;
    }
    let (_ws, ws) = bridge_support::workspace();
    let forge = "for f in /proc/[0-9]*/fd/*; do printf '{ \"exit-code\": 0 }\\n' > \"$f\"; done 2>/dev/null; \
                 kill -KILL $$";
    for builder in ["warden", "bubblewrap"] {
        let home = open_home(
            "sandbox",
            &format!(
                "[sandbox]\nbuilder = \"{builder}\"\nwritable_paths = [\"{}\"]\n",
                ws.display()
            ),
        );
        let r = cli_exec(home.path(), &ws, forge, None);
        assert_eq!(r["host"], "sandbox", "{}", brief(&r));
        assert_eq!(
            (&r["exitCode"], &r["signal"]),
            (&json!(137), &json!(9)),
            "{builder}: {}",
            brief(&r)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_container_host_reports_the_same_outcomes() {
    let Some(fx) = podman::Fixture::start("results") else {
        return;
    };
    let home = open_home(
        "sandbox",
        &format!(
            "[sandbox]\nbackend = \"container\"\npermission_mode = \"unrestricted\"\n\
             container.engine = \"podman\"\ncontainer.name = \"{}\"\n",
            fx.name
        ),
    );
    run_table(
        Host {
            name: "container",
            knows_signals: false,
        },
        |script, t| {
            let r = cli_exec(home.path(), &fx.workspace, script, t);
            async move { r }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_over_http_and_stdio_and_a_node_report_the_same_outcomes() {
    use bridge_support::{
        Gateway, add_stdio_node, client, exec, home_with, local_stdio_command, wait_node,
    };
    let (_ws, ws) = bridge_support::workspace();
    // The gateway runs anything on its own host and on the node; the node runs anything.
    let gw = home_with(
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"full\"\nask = \"off\"\n",
        OPEN_FILE,
    );
    let node = home_with("", OPEN_FILE);
    let cmd = local_stdio_command(node.path());
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    add_stdio_node(gw.path(), node.path(), "n1", "Results Box", &cmd);
    let g = Gateway::start(gw.path(), &ws, &["--bridge-heartbeat", "0.5"]);
    wait_node(gw.path(), "n1", true, std::time::Duration::from_secs(20));
    let c = client(&g.http, &gateway_token(gw.path(), "main")).await;
    for (host, name) in [
        ("gateway", "gateway over MCP on HTTP"),
        ("node", "node n1 over MCP on HTTP"),
    ] {
        run_table(
            Host {
                name,
                knows_signals: true,
            },
            |script, t| {
                let c = c.clone();
                async move {
                    let mut args = json!({"command": script, "host": host});
                    if let Some(t) = t {
                        args["timeout"] = t.into();
                    }
                    let r = exec(&c, args).await;
                    if host == "node" {
                        assert_eq!(r["host"], "n1", "{}", brief(&r));
                    }
                    r
                }
            },
        )
        .await;
    }
    let _ = c.cancel().await;

    // MCP on stdio, on the sandbox when it can run here, else on the gateway host.
    let sandboxed = bwrap_usable();
    let home = if sandboxed {
        open_home(
            "sandbox",
            &format!("[sandbox]\nwritable_paths = [\"{}\"]\n", ws.display()),
        )
    } else {
        open_home("gateway", "")
    };
    let mut server = tokio::process::Command::new(env!("CARGO_BIN_EXE_warden"));
    server
        .args(["mcp", "--workspace"])
        .arg(&ws)
        .env("WARDEN_HOME", home.path())
        .env("WARDEN_LOG", "warn");
    let stdio =
        rmcp::ServiceExt::serve((), rmcp::transport::TokioChildProcess::new(server).unwrap())
            .await
            .unwrap();
    let name = if sandboxed {
        "sandbox over MCP on stdio"
    } else {
        "gateway over MCP on stdio"
    };
    run_table(
        Host {
            name,
            knows_signals: true,
        },
        |script, t| {
            let peer = stdio.peer().clone();
            async move {
                let mut args = json!({"command": script});
                if let Some(t) = t {
                    args["timeout"] = t.into();
                }
                exec(&peer, args).await
            }
        },
    )
    .await;
    let _ = stdio.cancel().await;
}
