//! A gateway and a node over an in-memory byte stream (any stream will do: a TCP
//! WebSocket, `ssh host warden node stdio`, `podman exec -i …`). The node proves it holds
//! its token (the token never crosses the wire), the gateway sends `system.run`, the
//! node decides against its *own* approvals file — here one that allows `echo` and
//! nothing else — runs it with the same runner as a gateway host, and the result comes
//! back over sealed, sequence-numbered frames.
//!
//! `cargo run -p warden-bridge --example gateway_and_node`
// An example is its own composition root: it prints, and sets up real files.
#![allow(clippy::print_stdout, clippy::disallowed_methods)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use approvals::{Store, StoreConfig};
use bridge::conn::Heartbeat;
use bridge::handshake::NodeIdentity;
use bridge::message::{RunParams, RunResult, SYSTEM_RUN, WireOutcome};
use bridge::registry::NodeEntry;
use bridge::{Hub, HubConfig, NodeService, Registry, Transport, TransportKind};
use caps::{LocalFs, LocalShell};
use policy::{CaseMode, Config, TrustedPath};
use runner::{Executor, HostContext, RunHost, Runner};
use tokio_util::sync::CancellationToken;

/// The node's token: shared by the gateway's registry and the node's `node.json`.
const TOKEN: &str = "wnd_example-token-0123456789abcdef0123456789";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (gateway_dir, node_dir) = (private_dir()?, private_dir()?);
    let fs = Arc::new(LocalFs::new("/")?);

    // The node: its own approvals file (echo only), its own runner.
    let echo = std::fs::canonicalize("/bin/echo")?;
    let approvals = serde_json::json!({
        "version": 1,
        "defaults": {"security": "allowlist", "ask": "off", "askFallback": "deny"},
        "agents": {"example": {"allowlist": [{"pattern": echo}]}}
    });
    let path = node_dir.path().join("exec-approvals.json");
    std::fs::write(&path, serde_json::to_vec(&approvals)?)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    // The file must belong to the user running Warden (the directory we just made does).
    let owner_uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(node_dir.path())?);
    let store = || {
        Store::new(
            fs.clone(),
            StoreConfig {
                path: path.clone(),
                owner_uid,
                home: node_dir.path().to_path_buf(),
                case: CaseMode::Sensitive,
            },
        )
    };
    let config = Config::parse("[tools.exec]\nhost = \"node\"\n", Path::new("config.toml"))?;
    let trusted = TrustedPath::parse("/usr/bin:/bin");
    let service = Arc::new(NodeService {
        node_id: "n1".into(),
        runner: Runner::new(
            HostContext::builder(fs.clone(), store(), config)
                .trusted_path(trusted.clone())
                .default_cwd(node_dir.path())
                .build(),
        ),
        executor: Executor::Plain {
            shell: Arc::new(LocalShell::new()),
            host: RunHost::Node("n1".into()),
        },
        fs: fs.clone(),
        trusted_path: trusted,
        default_cwd: node_dir.path().to_path_buf(),
        store: store(),
    });

    // The gateway: a registry in which the operator approved node n1.
    let registry = Registry::new(fs.clone(), gateway_dir.path());
    registry.update(|nodes| {
        nodes.push(NodeEntry {
            display_name: Some("Example node".into()),
            ..NodeEntry::approved("n1", TransportKind::Stdio, TOKEN.into(), 0)
        });
        Ok(())
    })?;
    let hub = Hub::new(registry, HubConfig::default(), Arc::new(|| 0));

    // One byte stream, a half for each side.
    let (a, b) = tokio::io::duplex(1 << 20);
    let (ar, aw) = tokio::io::split(a);
    let (br, bw) = tokio::io::split(b);
    let accepting = Arc::clone(&hub);
    tokio::spawn(async move {
        let t = Transport::stream(ar, aw, TransportKind::Stdio, None);
        accepting.accept(t).await
    });
    let mut node_end = Transport::stream(br, bw, TransportKind::Stdio, None);
    let me = NodeIdentity {
        node_id: "n1".into(),
        display_name: None,
        token: TOKEN.into(),
    };
    let keys = bridge::handshake::node_side(&mut node_end, &me).await?;
    let stop = CancellationToken::new();
    let serving = {
        let stop = stop.clone();
        tokio::spawn(async move {
            bridge::serve_node(node_end, keys, Heartbeat::default(), service, &stop).await
        })
    };
    while hub.connected() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    // Two requests: the node's file allows the first and denies the second, whatever
    // the gateway asks for.
    let node = hub.select(Some("n1"), None)?;
    for argv in [vec!["echo", "hello from the node"], vec!["id"]] {
        let params = RunParams {
            run_id: format!("example-{}", argv[0]),
            agent: "example".into(),
            session: "example".into(),
            request: policy::ExecArgs {
                security: Some(policy::Security::Full),
                ask: Some(policy::Ask::Off),
                ..policy::ExecArgs::new(policy::Command::Argv(
                    argv.iter().map(|s| s.to_string()).collect(),
                ))
            },
            // Answered once, output in the result (no exec.output frames).
            stream: false,
            notices: false,
        };
        let reply = node
            .invoke(
                SYSTEM_RUN,
                serde_json::to_value(params)?,
                None,
                &CancellationToken::new(),
                Duration::from_secs(5),
            )
            .await?;
        let result: RunResult = serde_json::from_value(reply)?;
        let shown = match &result.outcome {
            WireOutcome::Finished { code, stdout, .. } => {
                format!("ran, exit {code:?}, stdout {stdout:?}")
            }
            WireOutcome::Denied { reason, rule } => format!("denied ({reason:?}): {rule}"),
            other => format!("{other:?}"),
        };
        println!("{:?}: security {} → {shown}", argv, result.security.value);
    }
    stop.cancel();
    println!("node stopped: {}", serving.await?);
    Ok(())
}

fn private_dir() -> std::io::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
    Ok(dir)
}
