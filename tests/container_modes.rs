//! End to end: `warden exec` and `warden doctor` with `sandbox.backend = "container"` on
//! a real Podman container, in each permission mode — `unrestricted` writes what the
//! container's mounts allow; `readonly` and approval's first run are refused every write
//! by the kernel; approval asks the human and retries once writable; a container that
//! cannot run commands read-only refuses those modes, naming the setting, and runs
//! nothing; a container that does not see the workspace is refused with the command
//! that starts one that does. The report never claims a mode that was not applied. An
//! agent drives runs in the container over MCP as anywhere else: a question answered on
//! standard input, a shell on a terminal, a signal, a kill that leaves nothing inside.
//!
//! Each test gets its own image, container and workspace (the sandbox crate's
//! `tests/support/podman.rs`). Without Podman the tests print `SKIPPED: ...` and return.

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/mcp_runs.rs"]
mod mcp_runs;
mod support;

#[path = "../crates/sandbox/tests/support/podman.rs"]
mod podman;

use std::path::Path;
use std::process::Output;

use podman::{Fixture, Setup, Workspace, run_podman, text};
use serde_json::Value;
use support::{TerminalApprover, configure, warden_home, warden_in};

/// A Warden home whose sandbox is `fx`'s container, in `mode` (`None`: the built-in
/// default, approval).
fn home_for(fx: &Fixture, mode: Option<&str>) -> tempfile::TempDir {
    let home = warden_home();
    let mode = mode
        .map(|m| format!("permission_mode = \"{m}\"\n"))
        .unwrap_or_default();
    configure(
        home.path(),
        &format!(
            "[sandbox]\nbackend = \"container\"\n{mode}container.engine = \"podman\"\n\
             container.name = \"{}\"\n",
            fx.name
        ),
        r#"{"version":1}"#,
    );
    home
}

/// `warden exec --json --shell SCRIPT` in the fixture's workspace.
fn exec(home: &Path, fx: &Fixture, script: &str) -> (Output, Value) {
    let out = warden_in(home)
        .args(["exec", "--json", "--shell", script])
        .current_dir(&fx.workspace)
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out, report)
}

/// Whether `path` exists inside the container.
fn exists_inside(fx: &Fixture, path: &str) -> bool {
    run_podman(&fx.podman, &["exec", &fx.name, "test", "-e", path])
        .status
        .success()
}

fn stderr(out: &Output) -> String {
    text(&out.stderr)
}

/// What `warden exec --json` says about how a run ended.
fn message(report: &Value) -> String {
    report["message"].as_str().unwrap_or_default().to_owned()
}

#[test]
fn unrestricted_writes_what_the_containers_mounts_allow() {
    let Some(fx) = Fixture::start("e2e-unrestricted") else {
        return;
    };
    let home = home_for(&fx, Some("unrestricted"));
    let (out, report) = exec(
        home.path(),
        &fx,
        "echo x > out.txt && echo y > /etc/planted && cat /etc/warden-test-id",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(report["host"], "sandbox", "{report}");
    assert_eq!(report["policy"]["permissionMode"]["value"], "unrestricted");
    // It ran in the container (its own /etc) and wrote the host's workspace.
    assert!(report["stdout"].as_str().unwrap().contains(&fx.name));
    assert_eq!(
        std::fs::read_to_string(fx.workspace.join("out.txt")).unwrap(),
        "x\n"
    );
    assert!(exists_inside(&fx, "/etc/planted"));
    assert!(!Path::new("/etc/planted").exists());
}

/// An HTTP server on the host's loopback answering every request with `body`.
fn serve_http(body: &'static str) -> std::net::SocketAddr {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let at = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut client in listener.incoming().flatten() {
            let mut head = [0u8; 4096];
            let _ = client.read(&mut head);
            let _ = write!(
                client,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    at
}

/// A Warden home whose sandbox is `fx`'s container, unrestricted, in proxy mode with
/// `allow` its one egress rule.
fn proxy_home(fx: &Fixture, allow: &str) -> tempfile::TempDir {
    let home = warden_home();
    configure(
        home.path(),
        &format!(
            "[sandbox]\nbackend = \"container\"\npermission_mode = \"unrestricted\"\n\
             network = \"proxy\"\ncontainer.engine = \"podman\"\ncontainer.name = \"{}\"\n\n\
             [sandbox.egress]\nallow = [\"{allow}\"]\n",
            fx.name
        ),
        r#"{"version":1}"#,
    );
    home
}

/// `sandbox.network = "proxy"` in a container (`--network none`): the run's proxy
/// variables name a listener Warden made inside the container's own namespace, and
/// through it the command reaches what the rules allow — a server on the host's
/// loopback, named by an address rule — and nothing else: another port is refused (and
/// reported), and a client told to ignore the proxy reaches nothing at all. Every
/// connection is on the run's report.
#[test]
fn a_proxy_run_in_the_container_reaches_only_what_its_rules_allow() {
    let Some(fx) = Fixture::start("e2e-proxy") else {
        return;
    };
    let allowed = serve_http("through the proxy");
    let other = serve_http("must not be reached");
    let home = proxy_home(&fx, &format!("127.0.0.1:{}", allowed.port()));
    let out = warden_in(home.path())
        .args(["exec", "--json", "--ask", "off", "--shell"])
        .arg(format!(
            "wget -q -O - http://{allowed}/; echo; \
             wget -q -O - http://{other}/ || echo other=refused; \
             wget -Y off -q -O - http://{allowed}/ || echo direct=refused; \
             echo \"proxy=$http_proxy\""
        ))
        .current_dir(&fx.workspace)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let said = report["stdout"].as_str().unwrap_or_default();
    assert_eq!(out.status.code(), Some(0), "{report}\n{}", stderr(&out));
    assert!(said.contains("through the proxy"), "{report}");
    assert!(said.contains("other=refused"), "{report}");
    assert!(said.contains("direct=refused"), "{report}");
    assert!(!said.contains("must not be reached"), "{report}");
    assert!(said.contains("proxy=http://127.0.0.1:"), "{report}");
    let egress = report["egress"].as_array().cloned().unwrap_or_default();
    assert_eq!(egress.len(), 2, "{report}");
    let port_of = |c: &Value| c["port"].as_u64().unwrap_or_default();
    let reached = egress
        .iter()
        .find(|c| port_of(c) == u64::from(allowed.port()))
        .expect("the allowed connection is reported");
    assert_eq!(reached["allowed"], true, "{reached}");
    assert!(
        reached["received"].as_u64().unwrap_or_default() > 0,
        "{reached}"
    );
    let refused = egress
        .iter()
        .find(|c| port_of(c) == u64::from(other.port()))
        .expect("the refused connection is reported");
    assert_eq!(refused["allowed"], false, "{refused}");
    // Nothing of the run's stays in the container: its listener was Warden's alone and
    // is closed with the run (a second run gets a listener of its own).
    let again = warden_in(home.path())
        .args(["exec", "--json", "--ask", "off", "--shell"])
        .arg(format!("wget -q -O - http://{allowed}/"))
        .current_dir(&fx.workspace)
        .output()
        .unwrap();
    let again: Value = serde_json::from_slice(&again.stdout).unwrap_or(Value::Null);
    assert!(
        again["stdout"]
            .as_str()
            .unwrap_or_default()
            .contains("through the proxy"),
        "{again}"
    );
}

/// A container with a network of its own is refused in proxy mode as with the network
/// off: nothing would stand between its commands and that network.
#[test]
fn a_container_with_a_network_is_refused_in_proxy_mode() {
    let Some(fx) = Fixture::with(
        "e2e-proxy-net",
        Setup {
            network: "bridge",
            ..Setup::default()
        },
    ) else {
        return;
    };
    let home = proxy_home(&fx, "example.com");
    let marker = fx.workspace.join("ran");
    let (out, report) = exec(home.path(), &fx, &format!("touch {}", marker.display()));
    assert_ne!(out.status.code(), Some(0), "{report}");
    assert!(message(&report).contains("--network none"), "{report}");
    assert!(!marker.exists(), "the command ran");
}

#[test]
fn readonly_is_refused_every_write_and_never_asks() {
    let Some(fx) = Fixture::read_only_root("e2e-readonly") else {
        return;
    };
    if !fx.user_namespaces_or_skip() {
        return;
    }
    std::fs::write(fx.workspace.join("in.txt"), "data").unwrap();
    let home = home_for(&fx, Some("readonly"));
    let (out, report) = exec(home.path(), &fx, "cat in.txt");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(report["stdout"], "data");
    for script in ["echo x > out.txt", "echo y > /var/tmp/planted"] {
        let (out, report) = exec(home.path(), &fx, script);
        assert_eq!(out.status.code(), Some(1), "{script}: {report}");
        assert!(
            report["stderr"]
                .as_str()
                .unwrap()
                .contains("Read-only file system"),
            "{report}"
        );
        assert_eq!(report["policy"]["permissionMode"]["value"], "readonly");
        assert_ne!(report["executed"]["writable_retry"], true, "{report}");
    }
    assert!(!fx.workspace.join("out.txt").exists());
    assert!(!exists_inside(&fx, "/var/tmp/planted"));
}

#[test]
fn approval_runs_read_only_first_then_asks_and_retries_once_writable() {
    let Some(fx) = Fixture::read_only_root("e2e-approval") else {
        return;
    };
    if !fx.user_namespaces_or_skip() {
        return;
    }
    // The built-in default mode is approval.
    let home = home_for(&fx, None);
    // No approver: the write is rejected (75, nobody answered) and nothing is written.
    let (out, report) = exec(home.path(), &fx, "echo x > out.txt");
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    assert_eq!(report["policy"]["permissionMode"]["value"], "approval");
    assert!(message(&report).contains("rejected"), "{report}");
    assert!(!fx.workspace.join("out.txt").exists());
    // Reading needs no approval.
    std::fs::write(fx.workspace.join("in.txt"), "data").unwrap();
    let (out, report) = exec(home.path(), &fx, "cat in.txt");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(report["stdout"], "data");
    // With a human: denied, nothing written; allowed once, the retry's result is the
    // result and the write happened.
    let mut ui = TerminalApprover::start(home.path());
    for (reply, code) in [("d\n", 77), ("o\n", 0)] {
        let runner = {
            let (home, ws) = (home.path().to_path_buf(), fx.workspace.clone());
            std::thread::spawn(move || {
                warden_in(&home)
                    .args([
                        "exec",
                        "--json",
                        "--shell",
                        "echo approved > out.txt && echo done",
                    ])
                    .current_dir(ws)
                    .output()
                    .unwrap()
            })
        };
        ui.answer("the read-only run was refused a write", reply);
        let out = runner.join().unwrap();
        assert_eq!(out.status.code(), Some(code), "{}", stderr(&out));
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        if code == 0 {
            assert_eq!(report["stdout"], "done\n", "{report}");
            assert_eq!(report["executed"]["writable_retry"], true, "{report}");
            assert_eq!(
                std::fs::read_to_string(fx.workspace.join("out.txt")).unwrap(),
                "approved\n"
            );
        } else {
            assert!(!fx.workspace.join("out.txt").exists(), "{report}");
        }
    }
    ui.stop();
}

#[test]
fn a_container_without_a_read_only_view_refuses_readonly_and_approval_and_runs_nothing() {
    let Some(fx) = Fixture::start("e2e-noview") else {
        return;
    };
    for (mode, key) in [
        (None, "built-in default"),
        (Some("approval"), "global"),
        (Some("readonly"), "global"),
    ] {
        let home = home_for(&fx, mode);
        let (out, report) = exec(home.path(), &fx, "echo x > out.txt; echo y > /etc/planted");
        assert_eq!(out.status.code(), Some(77), "{mode:?}: {report}");
        let err = message(&report);
        assert!(
            err.contains(&format!(
                "permission_mode={} ({key}) runs commands read-only first, which this sandbox cannot do",
                mode.unwrap_or("approval")
            )),
            "{err}"
        );
        assert!(err.contains("was not started with --read-only"), "{err}");
        assert!(
            err.contains("set permission_mode = \"unrestricted\" (the sandbox's own mounts then decide what commands write) in the [sandbox] table of config.toml"),
            "{err}"
        );
        assert!(
            err.contains(&format!("podman run -d --name {} --read-only", fx.name)),
            "{err}"
        );
        assert_eq!(report["decision"]["decision"], "deny", "{report}");
        assert_eq!(report["decision"]["reason"], "sandbox-unavailable");
        assert!(!fx.workspace.join("out.txt").exists());
        assert!(!exists_inside(&fx, "/etc/planted"));
    }
    // An agent's own mode is named as the agent's.
    let home = warden_home();
    configure(
        home.path(),
        &format!(
            "[sandbox]\nbackend = \"container\"\npermission_mode = \"unrestricted\"\n\
             container.name = \"{}\"\n\n[[agents.list]]\nid = \"cli\"\n\
             sandbox.permission_mode = \"readonly\"\n",
            fx.name
        ),
        r#"{"version":1}"#,
    );
    let out = warden_in(home.path())
        .args(["exec", "--agent", "cli", "--", "true"])
        .current_dir(&fx.workspace)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(77), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("in agent \"cli\"'s [[agents.list]] entry"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_container_that_does_not_see_the_workspace_is_refused_with_how_to_start_one() {
    let Some(fx) = Fixture::with(
        "e2e-elsewhere",
        Setup {
            workspace: Workspace::At("/workspace"),
            ..Setup::default()
        },
    ) else {
        return;
    };
    let home = home_for(&fx, Some("unrestricted"));
    let (out, report) = exec(home.path(), &fx, "echo x > out.txt");
    let err = message(&report);
    assert_eq!(out.status.code(), Some(77), "{report}");
    let ws = fx.workspace.display().to_string();
    assert!(err.contains("no sandbox backend is available"), "{err}");
    assert!(
        err.contains(&format!("does not see {ws} at the same path")),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "podman run -d --name {} --read-only --network none -v {ws}:{ws} IMAGE sleep infinity",
            fx.name
        )),
        "{err}"
    );
    assert!(!err.contains("chdir"), "{err}");
    assert!(!fx.workspace.join("out.txt").exists());
}

#[test]
fn doctor_reports_the_container_backend_and_its_modes() {
    let Some(fx) = Fixture::read_only_root("e2e-doctor") else {
        return;
    };
    if !fx.user_namespaces_or_skip() {
        return;
    }
    let doctor = |home: &Path| {
        let out = warden_in(home)
            .args(["doctor", "--json"])
            .current_dir(&fx.workspace)
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.code(), v)
    };
    let home = home_for(&fx, None);
    let (code, v) = doctor(home.path());
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(v["backend"], "container");
    let names: Vec<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "container engine",
            "container",
            "workspace mapping",
            "container tools",
            "read-only view"
        ],
        "only the configured backend's checks (no bubblewrap, no write watch): {v}"
    );
    assert!(
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["ok"] == true),
        "{v}"
    );
    assert_eq!(
        v["permissionModes"]["supported"],
        serde_json::json!(["readonly", "approval", "unrestricted"])
    );
    assert_eq!(v["hosts"]["sandbox"]["available"], true, "{v}");
    // Without a read-only root: only unrestricted, and the configured approval is a NO.
    let plain = Fixture::start("e2e-doctor-plain").unwrap();
    let home = home_for(&plain, None);
    let out = warden_in(home.path())
        .arg("doctor")
        .current_dir(&plain.workspace)
        .output()
        .unwrap();
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        report.contains("checks (sandbox.backend = \"container\")"),
        "{report}"
    );
    assert!(report.contains("NO  read-only view"), "{report}");
    assert!(
        report.contains("NO  permission modes   unrestricted — readonly and approval are refused"),
        "{report}"
    );
    assert!(
        report.contains("configured: approval (refused here"),
        "{report}"
    );
    assert!(!report.contains("write watch"), "{report}");
}

/// Processes inside the container whose command line is exactly `sleep 600`.
fn sleepers_inside(fx: &Fixture) -> usize {
    let out = run_podman(
        &fx.podman,
        &[
            "exec",
            &fx.name,
            "sh",
            "-c",
            "grep -lx 'sleep.600.' /proc/[0-9]*/cmdline 2>/dev/null | wc -l",
        ],
    );
    text(&out.stdout).trim().parse().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_drives_runs_in_the_container_over_mcp() {
    let Some(fx) = Fixture::start("e2e-mcp-runs") else {
        return;
    };
    let home = home_for(&fx, Some("unrestricted"));
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_warden"));
    cmd.args(["mcp", "--agent", "coder", "--workspace"])
        .arg(&fx.workspace)
        .env("WARDEN_HOME", home.path())
        .env("WARDEN_LOG", "warn");
    let client = rmcp::ServiceExt::serve((), rmcp::transport::TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap();
    use serde_json::json;

    // A question answered on standard input.
    let asked = mcp_runs::structured(
        &client,
        "exec",
        json!({"command": "echo name?; read name; echo hello $name", "background": true}),
    )
    .await;
    let run = asked["runId"].as_str().unwrap().to_owned();
    mcp_runs::poll_until(&client, &run, "name?").await;
    mcp_runs::structured(
        &client,
        "process",
        json!({"action": "write", "runId": run, "input": "box\n"}),
    )
    .await;
    let ended = mcp_runs::structured(
        &client,
        "process",
        json!({"action": "wait", "runId": run, "wait": 30}),
    )
    .await;
    assert!(
        ended["output"].as_str().unwrap().contains("hello box"),
        "{ended:#}"
    );
    assert_eq!(ended["result"]["exitCode"], 0, "{ended:#}");
    assert_eq!(ended["result"]["host"], "sandbox", "{ended:#}");

    // A shell on a terminal: typed lines, Ctrl-C, and its end.
    let started = mcp_runs::structured(
        &client,
        "exec",
        json!({"command": "stty size; exec sh -i", "tty": true, "rows": 21, "cols": 77, "background": true}),
    )
    .await;
    let run = started["runId"].as_str().unwrap().to_owned();
    assert!(
        mcp_runs::poll_until(&client, &run, "21 77")
            .await
            .contains("21 77")
    );
    mcp_runs::structured(
        &client,
        "process",
        json!({"action": "write", "runId": run, "input": "echo $((6*7))", "keys": ["Enter"]}),
    )
    .await;
    mcp_runs::poll_until(&client, &run, "42").await;
    mcp_runs::structured(
        &client,
        "process",
        json!({"action": "write", "runId": run, "input": "exit 3", "keys": ["Enter"]}),
    )
    .await;
    let ended = mcp_runs::structured(
        &client,
        "process",
        json!({"action": "wait", "runId": run, "wait": 30}),
    )
    .await;
    assert_eq!(ended["result"]["exitCode"], 3, "{ended:#}");

    // A signal reaches the command inside; a kill leaves nothing of it there.
    let started = mcp_runs::structured(
        &client,
        "exec",
        json!({"command": "trap 'echo got-usr1' USR1; sleep 600 & echo ready; while :; do wait; done", "background": true}),
    )
    .await;
    let run = started["runId"].as_str().unwrap().to_owned();
    mcp_runs::poll_until(&client, &run, "ready").await;
    assert_eq!(sleepers_inside(&fx), 1);
    let sent = mcp_runs::structured(
        &client,
        "process",
        json!({"action": "signal", "runId": run, "signal": "USR1"}),
    )
    .await;
    assert_eq!(sent["ok"], true, "{sent:#}");
    mcp_runs::poll_until(&client, &run, "got-usr1").await;
    let killed =
        mcp_runs::structured(&client, "process", json!({"action": "kill", "runId": run})).await;
    assert_eq!(killed["run"]["state"], "ended", "{killed:#}");
    assert_eq!(
        sleepers_inside(&fx),
        0,
        "the run's tree is gone from the container"
    );
    client.cancel().await.unwrap();
}
