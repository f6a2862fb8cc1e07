//! End-to-end: `host = node` over the Bridge, on one machine, with real processes and
//! real sockets — a gateway (`warden gateway run`) and nodes in WARDEN_HOMEs of their
//! own, reached over stdio (the gateway runs `warden node stdio`) and over WebSocket
//! (`warden node run` dials in, TLS pinned by fingerprint). Nodes enforce their own
//! approvals file and approver whatever the gateway's config says; selection follows
//! product spec §6.3; pairing needs the operator; a revoked node gets nothing; a
//! dropped connection fails the call at once and kills the node's run tree; replayed,
//! forged and unversioned frames are refused; nodes come back after a gateway restart;
//! a node's run is driven like a local one — a REPL on its terminal, a question answered
//! on its standard input — over both transports.

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stderr)]

#[path = "support/bridge.rs"]
mod bridge_support;
#[path = "support/mcp_runs.rs"]
mod mcp_runs;
#[path = "support/proxy.rs"]
mod proxy;
mod support;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use bridge_support::{
    Gateway, add_stdio_node, client, exec, home_with, local_stdio_command, nodes, wait_node,
    workspace,
};
use serde_json::{Value, json};
use support::{TerminalApprover, gateway_token, warden_in};

/// The gateway would run anything on a node and asks nobody — and its own machine's
/// file denies everything: only the node's file decides what runs there.
const GATEWAY_CONFIG: &str = "[tools.exec]\nhost = \"node\"\nsecurity = \"full\"\nask = \"off\"\n\
                              [[agents.list]]\nid = \"bound\"\ntools.exec.node = \"box-alpha-2\"\n";
const GATEWAY_FILE: &str =
    r#"{"version":1,"defaults":{"security":"deny","ask":"off","askFallback":"deny"}}"#;

/// A node that runs `/usr/bin/echo` for `main`, asks about anything else (and denies
/// when nobody answers).
const NODE_FILE: &str = r#"{"version":1,"defaults":{"security":"allowlist","ask":"on-miss","askFallback":"deny"},
    "agents":{"main":{"allowlist":[{"pattern":"/usr/bin/echo"},{"pattern":"/usr/bin/head"}]},"bound":{"security":"full","ask":"off"}}}"#;
/// A node that runs anything.
const OPEN_NODE_FILE: &str =
    r#"{"version":1,"defaults":{"security":"full","ask":"off","askFallback":"deny"}}"#;

fn gateway_home() -> tempfile::TempDir {
    home_with(GATEWAY_CONFIG, GATEWAY_FILE)
}

fn write_approvals(home: &Path, text: &str) {
    let path = home.join("exec-approvals.json");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_node_runs_only_what_its_own_approvals_file_and_human_allow() {
    let (gw, node) = (gateway_home(), home_with("", NODE_FILE));
    let (_ws, ws) = workspace();
    let cmd = local_stdio_command(node.path());
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    add_stdio_node(gw.path(), node.path(), "n1", "Build Box", &cmd);
    // doctor on each side says what host=node reaches.
    let doctor = |home: &Path| -> Value {
        let out = warden_in(home).args(["doctor", "--json"]).output().unwrap();
        serde_json::from_slice::<Value>(&out.stdout).unwrap()["hosts"]["node"].clone()
    };
    let on_gateway = doctor(gw.path());
    assert_eq!(
        (&on_gateway["available"], &on_gateway["paired"]),
        (&json!(true), &json!(1)),
        "{on_gateway}"
    );
    let on_node = doctor(node.path());
    assert!(
        on_node["thisMachineIsNode"]
            .as_str()
            .unwrap()
            .starts_with("n1 of"),
        "{on_node}"
    );
    let g = Gateway::start(gw.path(), &ws, &["--bridge-heartbeat", "0.5"]);
    let entry = wait_node(gw.path(), "n1", true, Duration::from_secs(20));
    assert_eq!(entry["transport"], "stdio");
    let c = client(&g.http, &gateway_token(gw.path(), "main")).await;

    // Allowlisted on the node: runs there, under the node's id.
    let r = exec(
        &c,
        json!({"argv": ["/usr/bin/echo", "hello from the node"]}),
    )
    .await;
    assert_eq!(r["status"], "finished", "{r:#}");
    assert_eq!(r["host"], "n1");
    assert_eq!(r["stdout"], "hello from the node\n");
    assert_eq!(r["exitCode"], 0);
    // The largest results still fit one frame: output at the cap in the costliest JSON
    // form (NUL bytes, six bytes each once escaped), and output at the cap that is not
    // UTF-8 (lossy text plus its base64).
    for source in ["/dev/zero", "/dev/urandom"] {
        let r = exec(
            &c,
            json!({"argv": ["/usr/bin/head", "-c", "300000", source]}),
        )
        .await;
        assert_eq!(r["status"], "finished", "{source}: {r:#}");
        assert_eq!(r["truncated"], true, "{source}");
        assert!(r["stdout"].as_str().unwrap().len() >= 150_000, "{source}");
        assert_eq!(
            r["stdoutBase64"].is_string(),
            source == "/dev/urandom",
            "{source}"
        );
    }
    let r = exec(
        &c,
        json!({"argv": ["/usr/bin/echo", "-ne", "\\xff\\xfeok"]}),
    )
    .await;
    assert_eq!(r["status"], "finished", "{r:#}");
    // Bytes that are not UTF-8 cross the Bridge intact, in base64 beside the lossy text.
    assert_eq!(r["stdoutBase64"], "//5vaw==", "{r:#}");
    assert_eq!(r["stdout"], "\u{fffd}\u{fffd}ok");
    let echo_run = r["runId"].as_str().unwrap().to_owned();

    // Not allowlisted: the node asks its own approver; there is none, so it denies. The
    // node's events for the run before ride along, as one line (its whole result was
    // already returned), naming the node.
    let r = exec(&c, json!({"argv": ["/usr/bin/id"]})).await;
    assert_eq!(r["status"], "denied", "{r:#}");
    assert_eq!(r["reason"], "no-approver");
    assert_eq!(r["exitCode"], 75);
    assert_eq!(
        r["events"],
        json!([format!("Exec finished (node=n1, id={echo_run}, code=0)")]),
        "{r:#}"
    );

    // With the node's terminal approver up, its human decides.
    let mut ui = TerminalApprover::start(node.path());
    let asking = tokio::spawn({
        let c = c.clone();
        async move { exec(&c, json!({"argv": ["/usr/bin/id", "-u"]})).await }
    });
    tokio::task::spawn_blocking(move || {
        ui.answer("/usr/bin/id", "o\n");
        ui
    })
    .await
    .unwrap();
    let r = asking.await.unwrap();
    assert_eq!(r["status"], "finished", "{r:#}");
    assert_eq!(r["decision"]["reason"], "approved-once");
    assert_eq!(r["stdout"].as_str().unwrap().trim(), "0");

    // The node's file says deny: nothing runs, whatever the gateway says.
    write_approvals(
        node.path(),
        r#"{"version":1,"defaults":{"security":"deny","ask":"off","askFallback":"deny"}}"#,
    );
    let r = exec(
        &c,
        json!({"argv": ["/usr/bin/echo", "x"], "security": "full"}),
    )
    .await;
    assert_eq!(r["status"], "denied", "{r:#}");
    assert_eq!(r["reason"], "security=deny");
    assert!(r["rule"].as_str().unwrap().contains("host file"), "{r:#}");
    // The gateway's records are written by its writer thread within moments: wait for
    // them before the gateway is stopped.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(gw.path().join("audit/audit.jsonl"))
        .unwrap_or_default()
        .matches("\"kind\":\"run\"")
        .count()
        < 7
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the gateway's records never came"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(g);

    // The record: the node keeps its own (it decided: decision, answer, run); the
    // gateway records where each request went and how it ended, under the node's id.
    let log = |home: &Path, args: &[&str]| -> Vec<Value> {
        let out = warden_in(home)
            .args(["log", "--json"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let at_gateway = log(gw.path(), &["--host", "node", "--kind", "run"]);
    let at_node = log(node.path(), &["--kind", "run"]);
    assert_eq!(at_gateway.len(), 7, "{at_gateway:#?}");
    assert_eq!(at_node.len(), 7, "{at_node:#?}");
    for (g, n) in at_gateway.iter().zip(&at_node) {
        assert_eq!(g["runId"], n["runId"]);
        assert_eq!(
            (&g["node"], &g["origin"]),
            (&json!("n1"), &json!("gateway"))
        );
        assert_eq!(n["origin"], "node");
        assert_eq!(g["decision"], n["decision"], "{g} {n}");
        assert_eq!(g["outputSha256"], n["outputSha256"], "{g} {n}");
    }
    let answered = log(node.path(), &["--kind", "answer", "--decision", "allow"]);
    assert_eq!(answered.len(), 1, "{answered:#?}");
    assert_eq!(answered[0]["reason"], "approved-once");
    for home in [gw.path(), node.path()] {
        let out = warden_in(home).args(["log", "--verify"]).output().unwrap();
        assert!(out.status.success(), "{out:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_are_selected_by_id_name_and_prefix_and_bindings_and_ambiguity_hold() {
    let (gw, a, b) = (
        gateway_home(),
        home_with("", OPEN_NODE_FILE),
        home_with("", OPEN_NODE_FILE),
    );
    let (_ws, ws) = workspace();
    for (home, id, name) in [
        (&a, "box-alpha-1", "Build Box"),
        (&b, "box-alpha-2", "GPU Box"),
    ] {
        let cmd = local_stdio_command(home.path());
        let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
        add_stdio_node(gw.path(), home.path(), id, name, &cmd);
    }
    let g = Gateway::start(gw.path(), &ws, &[]);
    wait_node(gw.path(), "box-alpha-1", true, Duration::from_secs(20));
    wait_node(gw.path(), "box-alpha-2", true, Duration::from_secs(20));
    let main = client(&g.http, &gateway_token(gw.path(), "main")).await;
    let echo = |node: Option<&str>| {
        let mut args = json!({"argv": ["/usr/bin/echo", "ok"]});
        if let Some(n) = node {
            args["node"] = n.into();
        }
        args
    };
    let r = exec(&main, echo(None)).await;
    assert_eq!(r["reason"], "no-node", "{r:#}");
    assert!(
        r["rule"]
            .as_str()
            .unwrap()
            .contains("several nodes are connected"),
        "{r:#}"
    );
    assert_eq!(
        exec(&main, echo(Some("build  box"))).await["host"],
        "box-alpha-1"
    );
    assert_eq!(
        exec(&main, echo(Some("box-alpha-2"))).await["host"],
        "box-alpha-2"
    );
    let r = exec(&main, echo(Some("box-alpha"))).await;
    assert!(r["rule"].as_str().unwrap().contains("ambiguous"), "{r:#}");
    let r = exec(&main, echo(Some("nothing-here"))).await;
    assert_eq!(r["reason"], "no-node", "{r:#}");
    // A request that narrows its network cannot be held to that on a node (no egress
    // proxy there): the node refuses it rather than run it wider.
    let mut narrowed = echo(Some("box-alpha-2"));
    narrowed["egress"] = json!({"allow": ["pypi.org"]});
    let r = exec(&main, narrowed).await;
    assert!(
        r.to_string()
            .contains("runs on a node, which has no egress proxy"),
        "{r:#}"
    );
    assert_ne!(r["exitCode"], 0, "{r:#}");

    // `bound` is bound to box-alpha-2: used without asking, and nothing else allowed.
    let bound = client(&g.http, &gateway_token(gw.path(), "bound")).await;
    assert_eq!(exec(&bound, echo(None)).await["host"], "box-alpha-2");
    let r = exec(&bound, echo(Some("Build Box"))).await;
    assert!(
        r["rule"]
            .as_str()
            .unwrap()
            .contains("bound to node box-alpha-2"),
        "{r:#}"
    );
}

fn spawn_node(home: &Path, args: &[&str]) -> Child {
    warden_in(home)
        .args(["node"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Pair the node in `home` with the gateway in `gw` at `url`, approving it as the
/// operator would.
fn pair_ws(gw: &Path, home: &Path, url: &str, id: &str, fingerprint: Option<&str>) {
    let mut args = vec!["pair", "--gateway", url, "--id", id];
    if let Some(fp) = fingerprint {
        args.extend(["--fingerprint", fp]);
    }
    let pairing = spawn_node(home, &args);
    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        let all = nodes(gw);
        if let Some(n) = all["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["id"] == id)
            && let Some(code) = n["requests"][0]["code"].as_str()
        {
            assert_eq!(n["state"], "pending", "{n:#}");
            break code.to_owned();
        }
        assert!(Instant::now() < deadline, "no pairing request: {all:#}");
        std::thread::sleep(Duration::from_millis(100));
    };
    // Until the operator approves, the node has nothing.
    assert!(!home.join("node.json").exists());
    // The operator must give the code they compared with the node's.
    let out = warden_in(gw)
        .args(["nodes", "approve", id])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--code"));
    let out = warden_in(gw)
        .args(["nodes", "approve", id, "--code", &code.to_lowercase()])
        .output()
        .unwrap();
    support::assert_success(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains(&code));
    let out = pairing.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains(&code), "the node showed the same code: {err}");
    let mode = std::fs::metadata(home.join("node.json")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0o600
    );
    let text = std::fs::read_to_string(home.join("node.json")).unwrap();
    assert!(text.contains("\"token\": \"wnd_"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_node_pairs_over_pinned_tls_serves_and_is_revoked() {
    let (gw, node) = (gateway_home(), home_with("", OPEN_NODE_FILE));
    let (_ws, ws) = workspace();
    let g = Gateway::start(
        gw.path(),
        &ws,
        &[
            "--bridge-listen",
            "127.0.0.1:0",
            "--bridge-tls",
            "--bridge-heartbeat",
            "0.5",
        ],
    );
    let url = format!("wss://{}", g.bridge.as_deref().unwrap());
    let fp = g.fingerprint();

    // Another certificate's fingerprint: refused before anything is asked.
    let wrong = format!("sha256:{}", "ab".repeat(32));
    let out = spawn_node(
        node.path(),
        &[
            "pair",
            "--gateway",
            &url,
            "--id",
            "ws1",
            "--fingerprint",
            &wrong,
        ],
    )
    .wait_with_output()
    .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not the pinned one"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // wss:// without a pin is refused too, and plain ws:// only to loopback.
    let out = spawn_node(node.path(), &["pair", "--gateway", &url, "--id", "ws1"])
        .wait_with_output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("fingerprint"));
    let out = spawn_node(
        node.path(),
        &["pair", "--gateway", "ws://192.0.2.1:9", "--id", "ws1"],
    )
    .wait_with_output()
    .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("loopback"));

    pair_ws(gw.path(), node.path(), &url, "ws1", Some(&fp));
    let mut serving = spawn_node(node.path(), &["run", "--heartbeat", "0.5"]);
    let entry = wait_node(gw.path(), "ws1", true, Duration::from_secs(20));
    assert_eq!(entry["transport"], "websocket");
    assert_eq!(entry["remote"], "127.0.0.1");
    assert!(
        entry["capabilities"].to_string().contains("system.run"),
        "{entry:#}"
    );
    let c = client(&g.http, &gateway_token(gw.path(), "main")).await;
    let r = exec(
        &c,
        json!({"argv": ["/usr/bin/echo", "over tls"], "node": "ws1"}),
    )
    .await;
    assert_eq!(r["stdout"], "over tls\n", "{r:#}");
    let st = warden_in(node.path())
        .args(["node", "status", "--json"])
        .output()
        .unwrap();
    let st: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    assert_eq!(st["connection"]["connected"], true, "{st:#}");
    assert!(
        !st.to_string().contains("wnd_"),
        "status never prints the token"
    );

    // Revoked: dropped at once, refused on reconnect (the node stops), and nothing runs.
    let out = warden_in(gw.path())
        .args(["nodes", "revoke", "ws1"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = serving.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the revoked node kept running");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!status.success());
    let mut err = String::new();
    std::io::Read::read_to_string(serving.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(err.contains("revoked"), "{err}");
    let r = exec(&c, json!({"argv": ["/usr/bin/echo", "x"], "node": "ws1"})).await;
    assert_eq!(r["reason"], "no-node", "{r:#}");
    // The agent is told why, in words.
    assert!(
        r.to_string()
            .contains("node \\\"ws1\\\" was revoked by the operator"),
        "{r:#}"
    );
    assert_eq!(nodes(gw.path())["nodes"][0]["state"], "revoked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_fails_the_call_at_once_and_kills_the_nodes_run_tree() {
    let (gw, node) = (gateway_home(), home_with("", OPEN_NODE_FILE));
    let (_ws, ws) = workspace();
    let g = Gateway::start(
        gw.path(),
        &ws,
        &[
            "--bridge-listen",
            "127.0.0.1:0",
            "--bridge-heartbeat",
            "0.5",
        ],
    );
    let relay = proxy::Proxy::start(g.bridge.as_deref().unwrap());
    pair_ws(
        gw.path(),
        node.path(),
        &format!("ws://{}", relay.addr),
        "drop1",
        None,
    );
    let _serving = KillOnDrop(spawn_node(node.path(), &["run", "--heartbeat", "0.5"]));
    wait_node(gw.path(), "drop1", true, Duration::from_secs(20));
    let c = client(&g.http, &gateway_token(gw.path(), "main")).await;
    let took = bridge_support::cut_mid_run(&c, "drop1", &ws.join("pid"), || relay.cut()).await;
    assert!(took < Duration::from_secs(3), "the caller waited {took:?}");
    eprintln!("call failed {took:?} after the cut; the node's tree is gone");
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_forged_and_unversioned_frames_are_refused_and_a_gateway_restart_is_survived() {
    let (gw, node) = (gateway_home(), home_with("", OPEN_NODE_FILE));
    let (_ws, ws) = workspace();
    let port = bridge_support::free_port();
    let listen = format!("127.0.0.1:{port}");
    let args = [
        "--bridge-listen",
        listen.as_str(),
        "--bridge-heartbeat",
        "0.5",
    ];
    let g = Gateway::start(gw.path(), &ws, &args);
    let relay = proxy::Proxy::start(&listen);
    pair_ws(
        gw.path(),
        node.path(),
        &format!("ws://{}", relay.addr),
        "rp1",
        None,
    );
    let _serving = KillOnDrop(spawn_node(node.path(), &["run", "--heartbeat", "0.5"]));
    wait_node(gw.path(), "rp1", true, Duration::from_secs(20));
    let c = client(&g.http, &gateway_token(gw.path(), "main")).await;
    assert_eq!(
        exec(&c, json!({"argv": ["/usr/bin/echo", "1"]})).await["stdout"],
        "1\n"
    );

    // Replay everything the node sent on its connection, on a new connection: the
    // gateway's challenge is new, so the recorded proof is worthless.
    let recorded = relay.recorded.lock().unwrap().last().unwrap().clone();
    // (As a client would: the upgrade request, its answer, then the recorded frames.)
    let split = recorded.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let mut raw = std::net::TcpStream::connect(&listen).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    std::io::Write::write_all(&mut raw, &recorded[..split]).unwrap();
    let mut upgrade = Vec::new();
    while !upgrade.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        std::io::Read::read_exact(&mut raw, &mut byte).unwrap();
        upgrade.push(byte[0]);
    }
    assert!(String::from_utf8_lossy(&upgrade).contains("101"));
    std::io::Write::write_all(&mut raw, &recorded[split..]).unwrap();
    let mut answer = Vec::new();
    let _ = std::io::Read::read_to_end(&mut raw, &mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.contains("bad-proof"),
        "{answer}\n{}\nrecorded {} bytes",
        g.log(),
        recorded.len()
    );

    // A bit flipped in a frame on the live connection: the gateway drops it.
    relay.corrupt_next();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !g.log().contains("failed authentication") {
        assert!(
            Instant::now() < deadline,
            "the forged frame was not refused: {}",
            g.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // ... and the node comes back by itself on a fresh, authenticated connection.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = exec(&c, json!({"argv": ["/usr/bin/echo", "2"]})).await;
        if r["stdout"] == "2\n" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the node did not come back: {r:#}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A Bridge version this gateway does not speak: refused with words saying so.
    let url = bridge::ws::GatewayUrl::parse(&format!("ws://{listen}")).unwrap();
    let mut t = bridge::ws::connect(&url, None).await.unwrap();
    let hello = json!({"type": "hello", "protocol": "warden-bridge", "versions": [99], "nodeId": "rp1",
                       "nonce": "00".repeat(32), "capabilities": []});
    t.tx.send(hello.to_string().into_bytes()).await.unwrap();
    let reply: serde_json::Value =
        serde_json::from_slice(&t.rx.recv().await.unwrap().unwrap()).unwrap();
    assert_eq!(reply["code"], "unsupported-version", "{reply:#}");
    assert!(
        reply["message"].as_str().unwrap().contains("[99]"),
        "{reply:#}"
    );

    // The gateway restarts on the same address: the node reconnects by itself.
    drop(c);
    drop(g);
    let g = Gateway::start(gw.path(), &ws, &args);
    wait_node(gw.path(), "rp1", true, Duration::from_secs(30));
    let c = client(&g.http, &gateway_token(gw.path(), "main")).await;
    assert_eq!(
        exec(&c, json!({"argv": ["/usr/bin/echo", "3"]})).await["stdout"],
        "3\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_approvals_edits_go_through_the_gateway_compare_and_swap_and_only_tighten() {
    let (gw, node) = (gateway_home(), home_with("", NODE_FILE));
    let (_ws, ws) = workspace();
    let cmd = local_stdio_command(node.path());
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    add_stdio_node(gw.path(), node.path(), "edit1", "Edit Box", &cmd);
    let _g = Gateway::start(gw.path(), &ws, &[]);
    wait_node(gw.path(), "edit1", true, Duration::from_secs(20));
    let approvals = |args: &[&str]| {
        let out = warden_in(gw.path())
            .arg("approvals")
            .args(args)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
        (out.status.success(), v)
    };
    let (ok, got) = approvals(&["get", "--node", "Edit Box", "--json"]);
    assert!(ok, "{got:#}");
    assert_eq!(got["node"], "edit1");
    let hash = got["hash"].as_str().unwrap().to_owned();
    let before = std::fs::read_to_string(node.path().join("exec-approvals.json")).unwrap();
    let edit = |doc: &serde_json::Value| {
        let f = ws.join("edit.json");
        std::fs::write(&f, doc.to_string()).unwrap();
        f.display().to_string()
    };

    // Looser: refused, the node's file untouched.
    let mut looser = got["file"].clone();
    looser["defaults"]["security"] = "full".into();
    looser["agents"]["main"]["allowlist"]
        .as_array_mut()
        .unwrap()
        .push(json!({"pattern": "/bin/sh"}));
    let (ok, r) = approvals(&[
        "set",
        "--node",
        "edit1",
        "--file",
        &edit(&looser),
        "--base-hash",
        &hash,
        "--json",
    ]);
    assert!(!ok);
    let e = r["error"].as_str().unwrap();
    assert!(
        e.contains("not-tighter")
            && e.contains("security allowlist → full")
            && e.contains("/bin/sh"),
        "{e}"
    );
    assert_eq!(
        std::fs::read_to_string(node.path().join("exec-approvals.json")).unwrap(),
        before
    );

    // Tighter: applied on the node.
    let mut tighter = got["file"].clone();
    tighter["defaults"]["security"] = "deny".into();
    let (ok, r) = approvals(&[
        "set",
        "--node",
        "edit1",
        "--file",
        &edit(&tighter),
        "--base-hash",
        &hash,
        "--json",
    ]);
    assert!(ok, "{r:#}");
    assert_eq!(r["written"], true);
    let after = std::fs::read_to_string(node.path().join("exec-approvals.json")).unwrap();
    assert!(after.contains("\"security\": \"deny\""), "{after}");

    // The old hash is stale now: compare-and-swap refuses.
    let (ok, r) = approvals(&[
        "set",
        "--node",
        "edit1",
        "--file",
        &edit(&tighter),
        "--base-hash",
        &hash,
        "--json",
    ]);
    assert!(!ok);
    assert!(r["error"].as_str().unwrap().contains("conflict"), "{r:#}");
}

/// A remote edit that keeps an entry's pattern but widens it in any field is refused,
/// and the node still refuses what its own file refused: a git alias carrying a shell.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_edit_widening_any_field_of_an_entry_is_refused() {
    let Some(git) = ["/usr/bin/git", "/bin/git"]
        .into_iter()
        .find(|g| Path::new(g).exists())
    else {
        eprintln!("SKIPPED: no git here for the node's entry");
        return;
    };
    let file = format!(
        r#"{{"version":1,"defaults":{{"security":"allowlist","ask":"on-miss","askFallback":"deny"}},
            "agents":{{"main":{{"allowlist":[{{"pattern":"{git}","args":["status"],"argsMatch":"exact"}},
            {{"pattern":"/usr/bin/echo"}},{{"pattern":"/usr/bin/cat"}}]}}}}}}"#
    );
    let (gw, node) = (gateway_home(), home_with("", &file));
    let (_ws, ws) = workspace();
    let cmd = local_stdio_command(node.path());
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    add_stdio_node(gw.path(), node.path(), "wide1", "Wide Box", &cmd);
    let g = Gateway::start(gw.path(), &ws, &[]);
    wait_node(gw.path(), "wide1", true, Duration::from_secs(20));
    let approvals = |args: &[&str]| {
        let out = warden_in(gw.path())
            .arg("approvals")
            .args(args)
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
        (out.status.success(), v)
    };
    let (ok, got) = approvals(&["get", "--node", "wide1", "--json"]);
    assert!(ok, "{got:#}");
    let hash = got["hash"].as_str().unwrap().to_owned();
    let before = std::fs::read_to_string(node.path().join("exec-approvals.json")).unwrap();
    type Widen = Box<dyn Fn(&mut Value)>;
    let widenings: Vec<(&str, Widen)> = vec![
        (
            "allowFlags",
            Box::new(|e: &mut Value| e["allowFlags"] = json!(["-c alias.*"])),
        ),
        (
            "any arguments",
            Box::new(|e: &mut Value| {
                e.as_object_mut().unwrap().remove("args");
            }),
        ),
        (
            "prefix",
            Box::new(|e: &mut Value| {
                e.as_object_mut().unwrap().remove("argsMatch");
            }),
        ),
        (
            "matches more",
            Box::new(|e: &mut Value| e["args"] = json!(["*"])),
        ),
        (
            "does not know",
            Box::new(|e: &mut Value| e["runAsRoot"] = json!(true)),
        ),
    ];
    for (expect, widen) in &widenings {
        let mut doc = got["file"].clone();
        widen(&mut doc["agents"]["main"]["allowlist"][0]);
        let f = ws.join("edit.json");
        std::fs::write(&f, doc.to_string()).unwrap();
        let (ok, r) = approvals(&[
            "set",
            "--node",
            "wide1",
            "--file",
            &f.display().to_string(),
            "--base-hash",
            &hash,
            "--json",
        ]);
        assert!(!ok, "{expect}: {r:#}");
        let e = r["error"].as_str().unwrap();
        assert!(
            e.contains("not-tighter") && e.contains(expect),
            "{expect}: {e}"
        );
        assert_eq!(
            std::fs::read_to_string(node.path().join("exec-approvals.json")).unwrap(),
            before,
            "{expect}"
        );
    }
    // The token may not be set remotely either.
    let mut doc = got["file"].clone();
    doc["socket"]["token"] = "chosen-by-the-editor".into();
    let f = ws.join("edit.json");
    std::fs::write(&f, doc.to_string()).unwrap();
    let (ok, r) = approvals(&[
        "set",
        "--node",
        "wide1",
        "--file",
        &f.display().to_string(),
        "--base-hash",
        &hash,
        "--json",
    ]);
    assert!(
        !ok && r["error"].as_str().unwrap().contains("socket.token"),
        "{r:#}"
    );
    // And the node still refuses a shell through the flag its file refused.
    let marker = ws.join("ALIAS-RAN");
    let c = client(&g.http, &gateway_token(gw.path(), "main")).await;
    let r = exec(
        &c,
        json!({"argv": [git, "-c", format!("alias.x=!touch {}", marker.display()), "x"]}),
    )
    .await;
    assert_eq!(r["decision"]["decision"], "deny", "{r:#}");
    assert!(!marker.exists());
    let r = exec(
        &c,
        json!({"argv": [git, "status"], "cwd": ws.display().to_string()}),
    )
    .await;
    assert_ne!(r["decision"]["decision"], "deny", "{r:#}");
    // An allowlisted reader on the node cannot read the node's own state: its token,
    // its approver's token.
    for file in ["node.json", "exec-approvals.json"] {
        let path = node.path().join(file);
        let r = exec(&c, json!({"argv": ["/usr/bin/cat", path]})).await;
        // A miss, where `cat` of anything else is allowed: the node asks, and with
        // nobody there its fallback denies.
        assert_eq!(r["decision"]["decision"], "deny", "{file}: {r:#}");
        assert_eq!(r["reason"], "no-approver", "{file}: {r:#}");
        assert!(!r.to_string().contains("wnd_"), "{r:#}");
    }
    let r = exec(&c, json!({"argv": ["/usr/bin/cat", "/etc/hostname"]})).await;
    assert_eq!(r["exitCode"], 0, "{r:#}");
}

#[test]
fn install_writes_a_user_unit_and_status_and_run_say_what_is_missing() {
    let node = home_with("", OPEN_NODE_FILE);
    let out = warden_in(node.path())
        .args(["node", "status"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("not paired"));
    let out = warden_in(node.path())
        .args(["node", "run"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("warden node pair"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A WebSocket node's state, as pairing leaves it.
    let state = json!({"version": 1, "nodeId": "unit1", "token": "wnd_0123456789abcdef0123456789abcdef",
                       "gateway": "wss://gw.example:7879/bridge", "fingerprint": format!("sha256:{}", "ab".repeat(32))});
    let path = node.path().join("node.json");
    std::fs::write(&path, state.to_string()).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let out = warden_in(node.path())
        .args(["node", "status"])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "a node.json others can read is refused"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("0600"));
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let units = tempfile::tempdir().unwrap();
    let out = warden_in(node.path())
        .args(["node", "install", "--unit-dir"])
        .arg(units.path())
        .output()
        .unwrap();
    support::assert_success(&out);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("enable-linger") && said.contains("systemctl --user"),
        "{said}"
    );
    let unit = std::fs::read_to_string(units.path().join("warden-node.service")).unwrap();
    assert!(
        unit.contains(&format!("WARDEN_HOME={}", node.path().display())),
        "{unit}"
    );
    assert!(
        unit.contains(" node run") && unit.contains("Restart=always"),
        "{unit}"
    );
    let out = warden_in(node.path())
        .args(["node", "status", "--json"])
        .output()
        .unwrap();
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["nodeId"], "unit1");
    assert!(
        !st.to_string().contains("wnd_0123"),
        "the token is never shown"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_run_is_driven_on_its_terminal_and_its_input_over_stdio_and_websocket() {
    let gw = gateway_home();
    let (stdio_node, ws_node) = (home_with("", OPEN_NODE_FILE), home_with("", OPEN_NODE_FILE));
    let (_ws, ws) = workspace();
    let cmd = local_stdio_command(stdio_node.path());
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    add_stdio_node(gw.path(), stdio_node.path(), "n1", "Stdio Box", &cmd);
    let g = Gateway::start(
        gw.path(),
        &ws,
        &[
            "--bridge-listen",
            "127.0.0.1:0",
            "--bridge-tls",
            "--bridge-heartbeat",
            "0.5",
        ],
    );
    let url = format!("wss://{}", g.bridge.as_deref().unwrap());
    pair_ws(
        gw.path(),
        ws_node.path(),
        &url,
        "ws1",
        Some(&g.fingerprint()),
    );
    let _serving = KillOnDrop(spawn_node(ws_node.path(), &["run", "--heartbeat", "0.5"]));
    for id in ["n1", "ws1"] {
        let entry = wait_node(gw.path(), id, true, Duration::from_secs(20));
        assert!(
            entry["capabilities"].to_string().contains("exec.stream"),
            "{entry:#}"
        );
    }
    let c = client(&g.http, &gateway_token(gw.path(), "main")).await;
    for node in ["n1", "ws1"] {
        // A REPL on the node, on a terminal of the size asked for.
        let started = exec(
            &c,
            json!({"command": "stty size; exec python3 -q", "tty": true, "rows": 33, "cols": 99,
                   "background": true, "node": node}),
        )
        .await;
        let run = started["runId"].as_str().unwrap().to_owned();
        let seen = mcp_runs::poll_until(&c, &run, ">>> ").await;
        assert!(seen.contains("33 99"), "{node}: {seen:?}");
        let typed = mcp_runs::structured(
            &c,
            "process",
            json!({"action": "write", "runId": run, "input": "print(6*7)", "keys": ["Enter"]}),
        )
        .await;
        assert_eq!(typed["ok"], true, "{typed}");
        mcp_runs::poll_until(&c, &run, "42").await;
        // Ctrl-C reaches the REPL through its terminal; Ctrl-D ends it.
        mcp_runs::structured(
            &c,
            "process",
            json!({"action": "write", "runId": run, "keys": ["C-c"]}),
        )
        .await;
        mcp_runs::poll_until(&c, &run, "KeyboardInterrupt").await;
        mcp_runs::structured(&c, "process", json!({"action": "close", "runId": run})).await;
        let ended = mcp_runs::structured(
            &c,
            "process",
            json!({"action": "wait", "runId": run, "wait": 20}),
        )
        .await;
        assert_eq!(ended["run"]["state"], "ended", "{node}: {ended:#}");
        assert_eq!(ended["result"]["exitCode"], 0, "{node}: {ended:#}");

        // A question answered on standard input, without a terminal.
        let asked = exec(
            &c,
            json!({"command": "echo name?; read name; echo hello $name", "background": true, "node": node}),
        )
        .await;
        let run = asked["runId"].as_str().unwrap().to_owned();
        mcp_runs::poll_until(&c, &run, "name?").await;
        mcp_runs::structured(
            &c,
            "process",
            json!({"action": "write", "runId": run, "input": "node\n"}),
        )
        .await;
        let ended = mcp_runs::structured(
            &c,
            "process",
            json!({"action": "wait", "runId": run, "wait": 20}),
        )
        .await;
        assert!(
            ended["output"].as_str().unwrap().contains("hello node"),
            "{node}: {ended:#}"
        );
        assert_eq!(ended["result"]["exitCode"], 0, "{node}: {ended:#}");
    }

    // A server on each node, ended three ways, its process gone each time: by its agent
    // (n1), by the gateway's operator (ws1), and by the end of the agent's session.
    let server = |node: &str| json!({"command": "echo pid=$$; exec sleep 600", "background": true, "node": node});
    let pid_of = |seen: &str| -> i32 {
        seen.lines()
            .find_map(|l| l.trim().strip_prefix("pid="))
            .unwrap()
            .parse()
            .unwrap()
    };
    let mut servers = Vec::new();
    for node in ["n1", "ws1", "n1"] {
        let run = exec(&c, server(node)).await["runId"]
            .as_str()
            .unwrap()
            .to_owned();
        let pid = pid_of(&mcp_runs::poll_until(&c, &run, "pid=").await);
        servers.push((run, pid));
    }
    let killed = mcp_runs::structured(
        &c,
        "process",
        json!({"action": "kill", "runId": servers[0].0}),
    )
    .await;
    assert_eq!(killed["run"]["state"], "ended", "{killed:#}");
    mcp_runs::wait_gone(servers[0].1);
    let out = warden_in(gw.path())
        .args(["runs", "kill", &servers[1].0])
        .output()
        .unwrap();
    support::assert_success(&out);
    mcp_runs::wait_gone(servers[1].1);
    assert!(!mcp_runs::gone(servers[2].1));
    c.cancel().await.unwrap();
    mcp_runs::wait_gone(servers[2].1);
    drop(g);
}
