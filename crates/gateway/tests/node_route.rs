//! In process, with real processes on the node side: the gateway's `host = node` route
//! over a Bridge session carried by an in-memory stream. Cancelling the caller cancels
//! the remote run (its whole tree is killed); a node's events reach the dispatching
//! session only for the run it was sent, never for a run id it makes up; a node that
//! sends what only a gateway sends is dropped, and the call fails at once saying so. A
//! streamed run's output arrives while it runs and its input, signals and terminal size
//! reach it, its input held to the same bound as on the gateway host.

// Tests set up real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use approvals::{Store, StoreConfig};
use bridge::conn::Heartbeat;
use bridge::handshake::NodeIdentity;
use bridge::message::Msg;
use bridge::registry::NodeEntry;
use bridge::{Hub, HubConfig, NodeService, Registry, Transport, TransportKind};
use caps::testkit::{read_pid, wait_gone};
use caps::{LocalFs, LocalShell};
use gateway::{Gateway, Routes, SandboxRoute, SessionKey};
use policy::{CaseMode, Config, TrustedPath};
use runner::{Command, ExecRequest, Executor, HostContext, Outcome, RunHost, Runner};
use serde_json::json;

const TOKEN: &str = "wnd_test-token-0123456789abcdef0123456789";
const OPEN: &str =
    r#"{"version":1,"defaults":{"security":"full","ask":"off","askFallback":"deny"}}"#;

fn private_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        d.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    d
}

fn store(dir: &Path, approvals: &str) -> Store {
    let path = dir.join("exec-approvals.json");
    std::fs::write(&path, approvals).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    Store::new(
        Arc::new(LocalFs::new("/").unwrap()),
        StoreConfig {
            path,
            owner_uid: nix::unistd::geteuid().as_raw(),
            home: dir.to_path_buf(),
            case: CaseMode::Sensitive,
        },
    )
}

fn runner(dir: &Path, host: &str, approvals: &str) -> Runner {
    let config = Config::parse(
        &format!("[tools.exec]\nhost = \"{host}\"\nsecurity = \"full\"\nask = \"off\"\n"),
        Path::new("config.toml"),
    )
    .unwrap();
    Runner::new(
        HostContext::builder(
            Arc::new(LocalFs::new("/").unwrap()),
            store(dir, approvals),
            config,
        )
        .trusted_path(TrustedPath::parse("/usr/bin:/bin"))
        .default_cwd(dir)
        .build(),
    )
}

struct Lab {
    gateway: Arc<Gateway>,
    hub: Arc<Hub>,
    _dirs: Vec<tempfile::TempDir>,
    work: std::path::PathBuf,
}

fn lab() -> Lab {
    lab_with(OPEN)
}

/// A gateway whose own approvals file is `gateway_approvals`, routing to node n1.
fn lab_with(gateway_approvals: &str) -> Lab {
    let (gw_dir, node_dir) = (private_dir(), private_dir());
    let registry = Registry::new(Arc::new(LocalFs::new("/").unwrap()), gw_dir.path());
    registry
        .update(|nodes| {
            nodes.push(NodeEntry::approved(
                "n1",
                TransportKind::Stdio,
                TOKEN.into(),
                0,
            ));
            Ok(())
        })
        .unwrap();
    let hub = Hub::new(registry, HubConfig::default(), Arc::new(|| 0));
    let routes = Routes {
        gateway: Executor::Plain {
            shell: Arc::new(LocalShell::new()),
            host: RunHost::Gateway,
        },
        sandbox: SandboxRoute::Unavailable("not in this test".into()),
        direct: None,
        node: Some(Arc::clone(&hub)),
    };
    let gateway = Arc::new(Gateway::new(
        runner(gw_dir.path(), "node", gateway_approvals),
        routes,
        None,
    ));
    // The session the tests exec in (a transport opens it when the session starts).
    gateway.sessions().open(&key());
    let work = node_dir.path().to_path_buf();
    Lab {
        gateway,
        hub,
        _dirs: vec![gw_dir, node_dir],
        work,
    }
}

/// A session for `hub` on an in-memory stream; the node's end, authenticated.
async fn session(hub: &Arc<Hub>) -> bridge::conn::Conn {
    let (node_end, keys) = authenticated(hub).await;
    bridge::conn::start(node_end, keys, Heartbeat::default())
}

/// The node's end of a session with `hub`, after the handshake, once the hub lists it.
async fn authenticated(hub: &Arc<Hub>) -> (Transport, bridge::handshake::Keys) {
    let (a, b) = tokio::io::duplex(1 << 20);
    let (ar, aw) = tokio::io::split(a);
    let (br, bw) = tokio::io::split(b);
    let gateway_end = Transport::stream(ar, aw, TransportKind::Stdio, None);
    let accepting = Arc::clone(hub);
    tokio::spawn(async move { accepting.accept(gateway_end).await });
    let mut node_end = Transport::stream(br, bw, TransportKind::Stdio, None);
    let me = NodeIdentity {
        node_id: "n1".into(),
        display_name: None,
        token: TOKEN.into(),
    };
    let keys = bridge::handshake::node_side(&mut node_end, &me)
        .await
        .unwrap();
    for _ in 0..200 {
        if hub.connected() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(hub.connected(), 1);
    (node_end, keys)
}

/// Node n1, working in `dir`, whose approvals file allows everything.
fn open_node(dir: &Path) -> Arc<NodeService> {
    Arc::new(NodeService {
        node_id: "n1".into(),
        runner: runner(dir, "node", OPEN),
        executor: Executor::Plain {
            shell: Arc::new(LocalShell::new()),
            host: RunHost::Node("n1".into()),
        },
        fs: Arc::new(LocalFs::new("/").unwrap()),
        trusted_path: TrustedPath::parse("/usr/bin:/bin"),
        default_cwd: dir.to_path_buf(),
        store: store(dir, OPEN),
    })
}

fn key() -> SessionKey {
    SessionKey {
        agent: "a".into(),
        session: "s".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_caller_kills_the_remote_runs_whole_tree() {
    let lab = lab();
    let node_dir = lab.work.clone();
    let service = open_node(&node_dir);
    let (node_end, keys) = authenticated(&lab.hub).await;
    tokio::spawn(async move {
        let stop = tokio_util::sync::CancellationToken::new();
        bridge::serve_node(node_end, keys, Heartbeat::default(), service, &stop).await
    });
    let pidfile = node_dir.join("pid");
    let script = format!("sleep 600 & echo $! > {}; wait", pidfile.display());
    let mut request = ExecRequest::new("a", "s", Command::Shell(script));
    // A caller watching progress gets the run's output as the node streams it.
    let live = caps::LiveOutput::new(64);
    request.live = Some(live.clone());
    let stop = {
        let pidfile = pidfile.clone();
        async move {
            tokio::task::spawn_blocking(move || read_pid(&pidfile))
                .await
                .unwrap();
        }
    };
    let report = lab.gateway.exec(&key(), request, stop).await;
    assert_eq!(report.host, RunHost::Node("n1".into()));
    assert_eq!(
        live.elsewhere(),
        None,
        "a node that streams is watched live"
    );
    assert_eq!(
        report.outcome,
        Outcome::Cancelled { started: true },
        "{report:?}"
    );
    let pid = read_pid(&pidfile);
    assert!(
        wait_gone(pid),
        "the remote run's tree outlived the cancellation"
    );
    let events = lab.gateway.take_events(&key()).join("\n");
    assert!(events.contains("Exec started (node=n1"), "{events}");
    assert!(events.contains("cancelled"), "{events}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cannot_post_events_for_runs_it_was_not_sent_and_a_misbehaving_one_is_dropped() {
    let lab = lab();
    let mut node = session(&lab.hub).await;
    let outbox = node.outbox.clone();
    // A scripted node: for the first invoke, an event for a made-up run, then the real
    // run's start, then a result for another invoke id, then the real result.
    tokio::spawn(async move {
        let Some(Msg::Invoke { id, params, .. }) = node.inbox.recv().await else {
            panic!("no invoke");
        };
        let run_id = params["runId"].as_str().unwrap().to_owned();
        for msg in [
            Msg::ExecStarted {
                run_id: "run-of-another-session".into(),
            },
            Msg::ExecStarted {
                run_id: run_id.clone(),
            },
            Msg::InvokeResult {
                id: id + 100,
                ok: Some(serde_json::json!({})),
                error: None,
            },
        ] {
            outbox.send(msg).await.unwrap();
        }
        let result = serde_json::json!({
            "runId": run_id, "security": {"value": "full", "source": "host-file"},
            "ask": {"value": "off", "source": "host-file"}, "askFallback": {"value": "deny", "source": "host-file"},
            "decision": {"decision": "allow", "reason": "security-full", "rule": "security=full (host file)"},
            "outcome": {"status": "finished", "code": 0, "stdout": "scripted\n", "stderr": "", "combined": "scripted\n",
                        "stdoutBase64": "not base64!", "stderrBase64": "/w==",
                        "tail": "", "truncated": false, "timedOut": false, "durationMs": 1}});
        outbox
            .send(Msg::InvokeResult {
                id,
                ok: Some(result),
                error: None,
            })
            .await
            .unwrap();
        // The second invoke: answer with something only a gateway sends.
        let Some(Msg::Invoke { .. }) = node.inbox.recv().await else {
            panic!("no second invoke");
        };
        outbox.send(Msg::Cancel { id: 1 }).await.unwrap();
        node.closed.cancelled().await;
    });
    let r = lab
        .gateway
        .exec(
            &key(),
            ExecRequest::new("a", "s", Command::Argv(vec!["/bin/true".into()])),
            std::future::pending(),
        )
        .await;
    let Outcome::Finished { output } = &r.outcome else {
        panic!("{r:?}");
    };
    assert_eq!(output.stdout, "scripted\n");
    // Bytes a node claims in base64: kept when they decode, dropped (the text stays) when
    // they do not.
    assert_eq!(output.stdout_bytes, None);
    assert_eq!(output.stderr_bytes.as_deref(), Some(&[0xffu8][..]));
    let events = lab.gateway.take_events(&key());
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0].contains(&r.run_id), "{events:?}");
    assert!(!events.iter().any(|e| e.contains("another-session")));

    let started = std::time::Instant::now();
    let r = lab
        .gateway
        .exec(
            &key(),
            ExecRequest::new("a", "s", Command::Argv(vec!["/bin/true".into()])),
            std::future::pending(),
        )
        .await;
    let Outcome::Error { message, .. } = &r.outcome else {
        panic!("{r:?}");
    };
    assert!(message.contains("node n1 disconnected"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(2));
    // The call fails as soon as the connection is closed; the hub forgets the node when
    // its connection task has ended, a moment later.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while lab.hub.connected() != 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        lab.hub.connected(),
        0,
        "the misbehaving node is still connected"
    );
}

/// A gateway end of a raw session with a node served by `service` (the node's handling
/// of whatever the gateway sends, message by message); the node's serving future.
async fn raw_gateway(
    service: Arc<NodeService>,
) -> (bridge::conn::Conn, tokio::task::JoinHandle<String>) {
    let (a, b) = tokio::io::duplex(1 << 20);
    let (ar, aw) = tokio::io::split(a);
    let (br, bw) = tokio::io::split(b);
    let serving = tokio::spawn(async move {
        let mut t = Transport::stream(br, bw, TransportKind::Stdio, None);
        let me = NodeIdentity {
            node_id: "n1".into(),
            display_name: None,
            token: TOKEN.into(),
        };
        let keys = bridge::handshake::node_side(&mut t, &me).await.unwrap();
        let stop = tokio_util::sync::CancellationToken::new();
        bridge::serve_node(t, keys, Heartbeat::default(), service, &stop).await
    });
    let mut t = Transport::stream(ar, aw, TransportKind::Stdio, None);
    let opening = bridge::handshake::read_opening(&mut t).await.unwrap();
    let hello = bridge::handshake::check_hello(opening).unwrap();
    let keys = bridge::handshake::gateway_side(&mut t, &hello, TOKEN)
        .await
        .unwrap();
    (bridge::conn::start(t, keys, Heartbeat::default()), serving)
}

fn sleep_invoke(id: u64, pidfile: &Path) -> Msg {
    let params = bridge::message::RunParams {
        run_id: format!("run-{id}"),
        agent: "a".into(),
        session: "s".into(),
        request: policy::ExecArgs {
            security: Some(policy::Security::Full),
            ask: Some(policy::Ask::Off),
            ..policy::ExecArgs::new(policy::Command::Shell(format!(
                "echo $$ > {}; exec sleep 600",
                pidfile.display()
            )))
        },
        stream: false,
        notices: false,
    };
    Msg::Invoke {
        id,
        command: "system.run".into(),
        params: serde_json::to_value(params).unwrap(),
    }
}

/// The next invoke result on `conn` (events skipped): its id, and its error code if any.
async fn next_result(conn: &mut bridge::conn::Conn) -> (u64, Option<String>) {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(20), conn.inbox.recv())
            .await
            .expect("no result within 20 s")
            .expect("the connection ended");
        if let Msg::InvokeResult { id, error, .. } = msg {
            return (id, error.map(|e| e.code));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_refuses_a_reused_invoke_id_and_runs_past_its_limit_and_drops_a_gateway_sending_results()
 {
    let dir = private_dir();
    let node_dir = dir.path().to_path_buf();
    let service = open_node(&node_dir);
    let (mut gw, serving) = raw_gateway(service).await;
    let limit = bridge::node::MAX_RUNS_PER_CONNECTION as u64;
    let pidfile = |id: u64| node_dir.join(format!("pid-{id}"));
    for id in 1..=limit {
        gw.outbox
            .send(sleep_invoke(id, &pidfile(id)))
            .await
            .unwrap();
    }
    // The same id while that invoke runs, then one more than the node runs at once.
    gw.outbox.send(sleep_invoke(1, &pidfile(0))).await.unwrap();
    gw.outbox
        .send(sleep_invoke(limit + 1, &pidfile(0)))
        .await
        .unwrap();
    assert_eq!(next_result(&mut gw).await, (1, Some("invalid".into())));
    assert_eq!(next_result(&mut gw).await, (limit + 1, Some("busy".into())));
    let pids: Vec<i32> = (1..=limit).map(|id| read_pid(&pidfile(id))).collect();
    assert!(!pidfile(0).exists(), "a refused invoke ran");

    // A cancel ends the run it names, and only that one.
    gw.outbox.send(Msg::Cancel { id: 7 }).await.unwrap();
    assert_eq!(next_result(&mut gw).await, (7, None));
    assert!(wait_gone(pids[6]), "the cancelled run's tree outlived it");
    assert!(
        std::path::Path::new(&format!("/proc/{}", pids[0])).exists(),
        "a cancel ended another run"
    );

    // Something only a node sends: the node drops the gateway, and every run dies.
    gw.outbox
        .send(Msg::InvokeResult {
            id: 2,
            ok: Some(serde_json::json!({})),
            error: None,
        })
        .await
        .unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(20), serving)
        .await
        .expect("the node kept serving a gateway that sent a result")
        .unwrap();
    assert!(!reason.is_empty());
    for pid in pids {
        assert!(wait_gone(pid), "run {pid} outlived the connection");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_refuses_a_run_request_the_exec_request_type_does_not_allow_and_runs_nothing() {
    let dir = private_dir();
    let node_dir = dir.path().to_path_buf();
    let service = open_node(&node_dir);
    let (mut gw, _serving) = raw_gateway(service).await;
    let marker = node_dir.join("ran");
    let touch = format!("touch {}", marker.display());
    let who = json!({"runId": "r", "agent": "a", "session": "s"});
    let with = |request: serde_json::Value| {
        let mut params = who.clone();
        params["request"] = request;
        params
    };
    let refused = [
        // The gateway chooses the host and the node; a request naming them is not one
        // a gateway sends.
        with(json!({"command": touch, "host": "gateway"})),
        with(json!({"command": touch, "node": "other"})),
        // Exactly one command.
        with(json!({"command": touch, "argv": ["/usr/bin/touch", "x"]})),
        with(json!({"cwd": "/"})),
        // Values the schema refuses, and fields it does not name.
        with(json!({"command": touch, "env": {"A=B": "x"}})),
        with(json!({"command": touch, "timeout": -1})),
        with(json!({"command": touch, "shell": touch})),
        // What a node cannot do: a run that goes on, a terminal (never run without one).
        with(json!({"command": touch, "background": true})),
        with(json!({"command": touch, "yield": 1})),
        with(json!({"command": touch, "tty": true, "security": "full", "ask": "off"})),
        with(json!({"command": touch, "rows": 10})),
        // Version 1's shape.
        json!({"runId": "r", "agent": "a", "session": "s", "shell": touch,
               "security": "full", "ask": "off"}),
    ];
    for (i, params) in refused.iter().enumerate() {
        let id = i as u64 + 1;
        gw.outbox
            .send(Msg::Invoke {
                id,
                command: "system.run".into(),
                params: params.clone(),
            })
            .await
            .unwrap();
        assert_eq!(
            next_result(&mut gw).await,
            (id, Some("invalid".into())),
            "{params}"
        );
    }
    assert!(!marker.exists(), "a refused request ran");
    // The same request, well formed, runs.
    gw.outbox
        .send(Msg::Invoke {
            id: 100,
            command: "system.run".into(),
            params: with(json!({"command": touch, "security": "full", "ask": "off"})),
        })
        .await
        .unwrap();
    assert_eq!(next_result(&mut gw).await, (100, None));
    assert!(marker.exists(), "the well-formed request did not run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_request_is_routed_before_anything_is_decided_on_the_gateway() {
    // The gateway's own file is unusable, which denies everything *on the gateway
    // machine*; it is not the node's ceiling, and a node request is not decided here.
    let lab = lab_with("{ not json");
    let mut node = session(&lab.hub).await;
    let (seen_tx, seen_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let Some(Msg::Invoke { params, .. }) = node.inbox.recv().await else {
            panic!("no invoke");
        };
        seen_tx.send(params).unwrap();
        // The node goes away before it decides anything.
        drop(node);
    });
    let r = lab
        .gateway
        .exec(
            &key(),
            ExecRequest::new("a", "s", Command::Shell("echo hi".into())),
            std::future::pending(),
        )
        .await;
    let params = seen_rx.await.unwrap();
    // What the request asks for, from the gateway's config; nothing of its file.
    assert_eq!(params["request"]["security"], "full", "{params}");
    assert_eq!(params["request"]["ask"], "off", "{params}");
    assert_eq!(params["request"]["command"], "echo hi", "{params}");
    assert!(params["request"].get("host").is_none(), "{params}");
    assert!(matches!(r.outcome, Outcome::Error { .. }), "{r:?}");
    // No decision of the gateway's stands in for the node's.
    assert_eq!(
        r.decision,
        policy::Decision::Allow {
            reason: policy::AllowReason::SentToNode,
            rule: "host=node: sent to node n1, which decides".into(),
        }
    );
    assert_ne!(r.policy.security.source, policy::Source::HostFile, "{r:?}");
    assert_eq!(r.host, RunHost::Node("n1".into()));
}

/// A lab whose node n1 is served by `open_node` in its work directory.
async fn serving_lab() -> Lab {
    let lab = lab();
    let service = open_node(&lab.work);
    let (node_end, keys) = authenticated(&lab.hub).await;
    tokio::spawn(async move {
        let stop = tokio_util::sync::CancellationToken::new();
        bridge::serve_node(node_end, keys, Heartbeat::default(), service, &stop).await
    });
    lab
}

/// Start `script` on the node as a run that goes on (as `exec` with `background`).
fn start_on_node(
    lab: &Lab,
    script: &str,
    terminal: Option<caps::TerminalSize>,
) -> Arc<gateway::Process> {
    let mut request = ExecRequest::new("a", "s", Command::Shell(script.into()));
    request.terminal = terminal;
    lab.gateway.start(&key(), request)
}

async fn ended(process: &gateway::Process) -> Arc<runner::RunReport> {
    tokio::time::timeout(Duration::from_secs(20), process.ended())
        .await
        .expect("the run never ended")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_node_run_is_read_and_written_while_it_runs() {
    let lab = serving_lab().await;
    let run = start_on_node(&lab, "echo ready; read line; echo got:$line; cat", None);
    caps::testkit::wait_for_output(run.output(), "ready", Duration::from_secs(10))
        .await
        .unwrap();
    run.input().write(b"first\n".to_vec()).unwrap();
    caps::testkit::wait_for_output(run.output(), "got:first", Duration::from_secs(10))
        .await
        .unwrap();
    run.input().write(b"copied\n".to_vec()).unwrap();
    run.input().close().unwrap();
    let report = ended(&run).await;
    assert_eq!(report.host, RunHost::Node("n1".into()));
    let Outcome::Finished { output } = &report.outcome else {
        panic!("{report:?}");
    };
    assert_eq!(output.exit_code(), 0, "{report:?}");
    assert_eq!(output.stdout, "ready\ngot:first\ncopied\n");
    // What the node streamed is what its result says, byte for byte.
    let streamed = run.output().since(0, 1 << 20).unwrap().text;
    assert_eq!(streamed, output.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_run_gets_a_terminal_its_size_and_its_signals() {
    let lab = serving_lab().await;
    let size = caps::TerminalSize::new(30, 100).unwrap();
    let run = start_on_node(
        &lab,
        "stty size; tty >/dev/null && echo on-a-tty; read x; echo got:$x; sleep 600",
        Some(size),
    );
    caps::testkit::wait_for_output(run.output(), "on-a-tty", Duration::from_secs(10))
        .await
        .unwrap();
    let seen = run.output().since(0, 1 << 20).unwrap().text;
    assert!(seen.contains("30 100"), "{seen:?}");
    // Typed on its terminal: echoed, then read as a line.
    run.input().write(b"abc\r".to_vec()).unwrap();
    caps::testkit::wait_for_output(run.output(), "got:abc", Duration::from_secs(10))
        .await
        .unwrap();
    run.input()
        .resize(caps::TerminalSize::new(40, 120).unwrap())
        .unwrap();
    // Ctrl-C through the terminal ends the foreground `sleep` and the shell.
    run.input().write(vec![0x03]).unwrap();
    let report = ended(&run).await;
    let Outcome::Finished { output } = &report.outcome else {
        panic!("{report:?}");
    };
    assert_eq!(output.exit_code(), 130, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_commands_unread_input_pushes_back_on_the_gateway_as_on_its_own_host() {
    let lab = serving_lab().await;
    let run = start_on_node(&lab, "echo ready; exec sleep 600", None);
    caps::testkit::wait_for_output(run.output(), "ready", Duration::from_secs(10))
        .await
        .unwrap();
    // The node's command queue and what is in flight together hold at most the bound:
    // the gateway refuses input past it, whatever the Bridge carried meanwhile.
    let mut sent = 0usize;
    let refused = loop {
        match run.input().write(vec![b'x'; 64 * 1024]) {
            Ok(()) => sent += 64 * 1024,
            Err(e) => break e,
        }
        assert!(
            sent <= 4 * caps::INPUT_QUEUE_BYTES,
            "input past every bound was taken"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(refused, caps::InputError::Full);
    assert!(sent >= caps::INPUT_QUEUE_BYTES, "{sent}");
    // A signal still reaches it.
    run.input().signal(15).unwrap();
    let report = ended(&run).await;
    let Outcome::Finished { output } = &report.outcome else {
        panic!("{report:?}");
    };
    assert_eq!(output.status, caps::ExitStatus::Signal(15), "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_streams_only_into_the_run_it_was_sent_and_oversized_output_drops_it() {
    let lab = lab();
    let mut node = session(&lab.hub).await;
    let outbox = node.outbox.clone();
    let (said, heard) = tokio::sync::oneshot::channel();
    // A scripted node: output for a made-up run, then for the real one; then a chunk
    // larger than a frame may carry.
    tokio::spawn(async move {
        let Some(Msg::Invoke { params, .. }) = node.inbox.recv().await else {
            panic!("no invoke");
        };
        assert_eq!(
            params["stream"], true,
            "a watched run is streamed: {params}"
        );
        let run_id = params["runId"].as_str().unwrap().to_owned();
        for (run, text) in [
            ("run-of-another-session", "stolen"),
            (run_id.as_str(), "mine"),
        ] {
            outbox
                .send(Msg::ExecOutput {
                    run_id: run.into(),
                    data: base64::Engine::encode(&base64::engine::general_purpose::STANDARD, text),
                })
                .await
                .unwrap();
        }
        let _ = said.send(run_id.clone());
        let huge = vec![b'x'; bridge::message::MAX_OUTPUT_CHUNK + 1];
        outbox
            .send(Msg::ExecOutput {
                run_id,
                data: base64::Engine::encode(&base64::engine::general_purpose::STANDARD, huge),
            })
            .await
            .unwrap();
        node.closed.cancelled().await;
    });
    let run = start_on_node(&lab, "true", None);
    heard.await.unwrap();
    caps::testkit::wait_for_output(run.output(), "mine", Duration::from_secs(10))
        .await
        .unwrap();
    let report = ended(&run).await;
    let Outcome::Error { message, .. } = &report.outcome else {
        panic!("{report:?}");
    };
    assert!(message.contains("node n1 disconnected"), "{message}");
    let seen = run.output().since(0, 1 << 20).unwrap().text;
    assert_eq!(
        seen, "mine",
        "only its own run's output, and nothing past the bound"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_sending_more_input_than_it_may_have_in_flight_is_dropped_and_its_runs_die() {
    let dir = private_dir();
    let node_dir = dir.path().to_path_buf();
    let service = open_node(&node_dir);
    let (gw, serving) = raw_gateway(service).await;
    let pidfile = node_dir.join("pid");
    let Msg::Invoke {
        id,
        command,
        mut params,
    } = sleep_invoke(1, &pidfile)
    else {
        unreachable!()
    };
    params["stream"] = true.into();
    gw.outbox
        .send(Msg::Invoke {
            id,
            command,
            params,
        })
        .await
        .unwrap();
    let pid = read_pid(&pidfile);
    // The command reads nothing: its queue fills, then what waits on the node; a gateway
    // ignoring `exec.input.taken` goes past both.
    let chunk = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        vec![b'x'; 64 * 1024],
    );
    for _ in 0..(3 * caps::INPUT_QUEUE_BYTES / (64 * 1024)) {
        if gw
            .outbox
            .send(Msg::ExecInput {
                run_id: "run-1".into(),
                data: chunk.clone(),
            })
            .await
            .is_err()
        {
            break;
        }
    }
    let reason = tokio::time::timeout(Duration::from_secs(20), serving)
        .await
        .expect("the node kept serving a gateway past the input bound")
        .unwrap();
    assert!(!reason.is_empty());
    assert!(wait_gone(pid), "the run outlived the connection");
}
