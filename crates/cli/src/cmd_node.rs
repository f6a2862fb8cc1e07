//! `warden node run|stdio|pair|install|status`: this machine as a node of a gateway. It
//! runs what the gateway sends through its own runner, against its own approvals file
//! and approver (see `compose_node.rs`), and dials the gateway over WebSocket (`run`) or
//! speaks the Bridge on stdin/stdout (`stdio`, for SSH and container exec transports).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use approvals::{Clock, SystemClock};
use bridge::conn::Heartbeat;
use bridge::ws::GatewayUrl;
use bridge::{BridgeError, NodeFile, handshake, pair};

use crate::exit;
use crate::host::HostFacts;

/// `warden node ...`
#[derive(Debug, clap::Subcommand)]
pub enum NodeCommand {
    /// Dial the gateway this node was paired with and serve it (reconnecting with backoff).
    Run(ServeArgs),
    /// Serve the Bridge on stdin/stdout (`ssh HOST warden node stdio`, `podman exec -i`,
    /// `kubectl exec -i`); the gateway runs this.
    Stdio(ServeArgs),
    /// Ask a gateway to pair this node (the operator approves with `warden nodes
    /// approve ID`), or store the token of a stdio node (`--stdio`).
    Pair(PairArgs),
    /// Write a systemd user unit that runs `warden node run`.
    Install(InstallArgs),
    /// Show this node's pairing and connection state.
    Status(StatusArgs),
}

/// Arguments of `warden node run` and `warden node stdio`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The directory commands start in when the gateway names none.
    #[arg(long)]
    workspace: Option<PathBuf>,
    /// Seconds between heartbeats (the connection is given up after 3.5 silent ones).
    #[arg(long, default_value_t = 10.0, hide = true)]
    heartbeat: f64,
}

/// Arguments of `warden node pair`.
#[derive(Debug, clap::Args)]
pub struct PairArgs {
    /// The gateway's Bridge address: wss://HOST:PORT (or ws://127.0.0.1:PORT).
    #[arg(long, required_unless_present = "stdio")]
    gateway: Option<String>,
    /// The gateway certificate's fingerprint (sha256:…, printed by `warden gateway run
    /// --bridge-tls`); required for wss://.
    #[arg(long)]
    fingerprint: Option<String>,
    /// This node's id (default: kept from an earlier pairing, else generated).
    #[arg(long)]
    id: Option<String>,
    /// This node's display name (default: the host name).
    #[arg(long)]
    name: Option<String>,
    /// A stdio node: read the token `warden nodes add` printed from stdin.
    #[arg(long, conflicts_with_all = ["gateway", "fingerprint"])]
    stdio: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Arguments of `warden node install`.
#[derive(Debug, clap::Args)]
pub struct InstallArgs {
    /// Where to write the unit (default: ~/.config/systemd/user).
    #[arg(long)]
    unit_dir: Option<PathBuf>,
    /// The directory commands start in when the gateway names none.
    #[arg(long)]
    workspace: Option<PathBuf>,
}

/// Arguments of `warden node status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// What `node run` leaves for `node status`.
pub const STATUS_FILE: &str = "node-status.json";

/// Run `warden node ...`.
pub fn run(command: NodeCommand) -> i32 {
    match command {
        NodeCommand::Run(args) => exit::block_on(true, serve_ws(args)),
        NodeCommand::Stdio(args) => exit::block_on(true, serve_stdio(args)),
        NodeCommand::Pair(args) => exit::block_on(false, pair_node(args)),
        NodeCommand::Install(args) => exit::or_report(install(args)),
        NodeCommand::Status(args) => exit::or_report(status(args)),
    }
}

fn heartbeat(secs: f64) -> anyhow::Result<Heartbeat> {
    if !(secs.is_finite() && (0.05..=3600.0).contains(&secs)) {
        bail!("--heartbeat must be between 0.05 and 3600 seconds");
    }
    Ok(Heartbeat::every(Duration::from_secs_f64(secs)))
}

fn paired(facts: &HostFacts) -> anyhow::Result<NodeFile> {
    facts.node_state().load()?.with_context(|| {
        format!(
            "this machine is not paired as a node ({} is missing): run `warden node pair --gateway URL` (or `--stdio` for a node the gateway reaches by command)",
            facts.node_state().path().display()
        )
    })
}

/// `warden node stdio`: one connection on stdin/stdout; its end ends the process (and
/// every run it started).
async fn serve_stdio(args: ServeArgs) -> anyhow::Result<i32> {
    let facts = HostFacts::read()?;
    let node = paired(&facts)?;
    let service = Arc::new(facts.node_service(&node.node_id, args.workspace.as_deref())?);
    let hb = heartbeat(args.heartbeat)?;
    let mut t = bridge::Transport::stream(
        tokio::io::stdin(),
        tokio::io::stdout(),
        bridge::TransportKind::Stdio,
        None,
    );
    let keys = handshake::node_side(&mut t, &node.identity()).await?;
    let stop = tokio_util::sync::CancellationToken::new();
    let serving = bridge::serve_node(t, keys, hb, service, &stop);
    tokio::pin!(serving);
    let reason = tokio::select! {
        reason = &mut serving => reason,
        () = exit::shutdown_signal() => { stop.cancel(); serving.await }
    };
    eprintln!("warden node: connection ended: {reason}");
    Ok(0)
}

fn write_status(facts: &HostFacts, connected: bool, detail: &str) {
    let status = serde_json::json!({
        "connected": connected,
        "since": SystemClock.now_ms(),
        "detail": detail,
        "pid": std::process::id(),
    });
    let path = facts.warden_home.join(STATUS_FILE);
    let _ = std::fs::write(path, status.to_string());
}

/// `warden node run`: dial, serve, and dial again with backoff (1 s doubling to 30 s)
/// until stopped; a gateway that refuses this node (revoked, not paired) ends it.
async fn serve_ws(args: ServeArgs) -> anyhow::Result<i32> {
    let facts = HostFacts::read()?;
    let node = paired(&facts)?;
    let Some(url) = node.gateway.clone() else {
        bail!(
            "node {:?} is a stdio node (the gateway reaches it by command); `warden node run` needs one paired with --gateway",
            node.node_id
        );
    };
    let url = GatewayUrl::parse(&url)?;
    let service = Arc::new(facts.node_service(&node.node_id, args.workspace.as_deref())?);
    let hb = heartbeat(args.heartbeat)?;
    let stop = tokio_util::sync::CancellationToken::new();
    let on_signal = stop.clone();
    tokio::spawn(async move {
        exit::shutdown_signal().await;
        on_signal.cancel();
    });
    let mut backoff = Duration::from_secs(1);
    eprintln!("warden node: node {} dialling {url}", node.node_id);
    while !stop.is_cancelled() {
        let attempt = async {
            let mut t = bridge::ws::connect(&url, node.fingerprint.as_deref()).await?;
            let keys = handshake::node_side(&mut t, &node.identity()).await?;
            Ok::<_, BridgeError>((t, keys))
        };
        let session = tokio::select! {
            () = stop.cancelled() => break,
            c = attempt => c,
        };
        match session {
            Ok((t, keys)) => {
                eprintln!("warden node: connected to {url}");
                write_status(&facts, true, &format!("connected to {url}"));
                backoff = Duration::from_secs(1);
                let reason = bridge::serve_node(t, keys, hb, Arc::clone(&service), &stop).await;
                eprintln!("warden node: disconnected: {reason}");
                write_status(&facts, false, &reason);
            }
            Err(BridgeError::Refused { code, message }) if code != "unavailable" => {
                write_status(&facts, false, &message);
                bail!("the gateway refused this node ({code}): {message}");
            }
            Err(e @ BridgeError::Version(_)) => {
                write_status(&facts, false, &e.to_string());
                return Err(e.into());
            }
            Err(e) => {
                eprintln!("warden node: {e}; retrying in {}s", backoff.as_secs());
                write_status(&facts, false, &e.to_string());
            }
        }
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
    write_status(&facts, false, "stopped");
    Ok(0)
}

fn host_name() -> String {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "node".to_owned())
}

fn new_node_id() -> anyhow::Result<String> {
    let mut b = [0u8; 6];
    getrandom::fill(&mut b).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    Ok(format!("node-{}", policy::hex(&b)))
}

async fn pair_node(args: PairArgs) -> anyhow::Result<i32> {
    let facts = HostFacts::read()?;
    let store = facts.node_state();
    // An unreadable node.json is an error here too: never silently start over.
    let existing = store.load()?;
    let node_id = match (&args.id, &existing) {
        (Some(id), _) => id.clone(),
        (None, Some(e)) => e.node_id.clone(),
        (None, None) if args.stdio => {
            bail!("a stdio node needs --id (the id given to `warden nodes add`)")
        }
        (None, None) => new_node_id()?,
    };
    bridge::message::check_id("node id", &node_id)?;
    let name = args
        .name
        .clone()
        .or(existing.as_ref().and_then(|e| e.display_name.clone()))
        .unwrap_or_else(host_name);
    bridge::message::check_name(&name)?;
    let (token, gateway, fingerprint) = if args.stdio {
        let mut line = String::new();
        std::io::stdin()
            .read_line(&mut line)
            .context("reading the token from stdin")?;
        let token = line.trim().to_owned();
        if !token.starts_with("wnd_") || token.len() < 40 {
            bail!("expected the token `warden nodes add` printed (wnd_…) on stdin");
        }
        (token, None, None)
    } else {
        let raw = args.gateway.clone().unwrap_or_default();
        let url = GatewayUrl::parse(&raw)?;
        if let Some(fp) = &args.fingerprint {
            bridge::tls::parse_fingerprint(fp)?;
        }
        let mut t = bridge::ws::connect(&url, args.fingerprint.as_deref()).await?;
        let json = args.json;
        let (id, shown) = (node_id.clone(), name.clone());
        let token = pair::request(&mut t, &node_id, Some(&name), |p| {
            if !json {
                eprintln!(
                    "warden node: pairing request sent to {url} as node {id:?} ({shown}), code {}; on the gateway run:\n  warden nodes approve {id}\nwaiting (the request expires in {} minutes)…",
                    p.code,
                    p.expires_at_ms.saturating_sub(SystemClock.now_ms()) / 60_000
                );
            }
        })
        .await?;
        (token, Some(url.to_string()), args.fingerprint.clone())
    };
    let file = NodeFile {
        version: 1,
        node_id: node_id.clone(),
        display_name: Some(name),
        token,
        gateway,
        fingerprint,
        paired_at: SystemClock.now_ms(),
        extra: existing.map(|e| e.extra).unwrap_or_default(),
    };
    store.save(&file)?;
    if args.json {
        outln!(
            "{}",
            serde_json::json!({"nodeId": node_id, "paired": true, "state": store.path(), "tokenFingerprint": file.token_fingerprint()})
        );
    } else {
        outln!(
            "paired as node {node_id:?}; state in {} (0600). {}",
            store.path().display(),
            if file.gateway.is_some() {
                "Start serving with `warden node run` (or `warden node install`)."
            } else {
                "The gateway reaches this node by running `warden node stdio` here."
            }
        );
    }
    Ok(0)
}

fn install(args: InstallArgs) -> anyhow::Result<i32> {
    let facts = HostFacts::read()?;
    let node = paired(&facts)?;
    if node.gateway.is_none() {
        bail!(
            "node {:?} is a stdio node: the gateway starts `warden node stdio` itself, no service is needed",
            node.node_id
        );
    }
    let exe = std::env::current_exe().context("cannot locate the warden binary")?;
    let dir = args
        .unit_dir
        .unwrap_or_else(|| facts.home.join(".config/systemd/user"));
    let workspace = args
        .workspace
        .map(|w| format!(" --workspace {}", facts.absolute(&w).display()))
        .unwrap_or_default();
    let unit = format!(
        "[Unit]\nDescription=Warden node {id} (runs commands a Warden gateway sends, under this machine's own approvals)\nAfter=network-online.target\nWants=network-online.target\n\n[Service]\nEnvironment=WARDEN_HOME={home}\nExecStart={exe} node run{workspace}\nRestart=always\nRestartSec=5\n# Runs end with the service: every run lives in a cgroup of its own.\nKillMode=control-group\n\n[Install]\nWantedBy=default.target\n",
        id = node.node_id,
        home = facts.warden_home.display(),
        exe = exe.display(),
    );
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("warden-node.service");
    std::fs::write(&path, unit).with_context(|| format!("writing {}", path.display()))?;
    let user = facts
        .env
        .get("USER")
        .cloned()
        .unwrap_or_else(|| "$USER".into());
    outln!(
        "wrote {}\nenable it with:\n  systemctl --user daemon-reload && systemctl --user enable --now warden-node.service\nand let it run without a login session:\n  loginctl enable-linger {user}",
        path.display()
    );
    Ok(0)
}

fn status(args: StatusArgs) -> anyhow::Result<i32> {
    let facts = HostFacts::read()?;
    let node = facts.node_state().load()?;
    let live: Option<serde_json::Value> =
        std::fs::read_to_string(facts.warden_home.join(STATUS_FILE))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
    let Some(node) = node else {
        if args.json {
            outln!("{}", serde_json::json!({"paired": false}));
        } else {
            outln!("not paired (run `warden node pair --gateway URL`)");
        }
        return Ok(1);
    };
    let report = serde_json::json!({
        "paired": true,
        "nodeId": node.node_id,
        "displayName": node.display_name,
        "gateway": node.gateway,
        "fingerprint": node.fingerprint,
        "tokenFingerprint": node.token_fingerprint(),
        "pairedAt": node.paired_at,
        "connection": live,
    });
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        outln!(
            "node {} ({})",
            node.node_id,
            node.display_name.as_deref().unwrap_or("-")
        );
        outln!(
            "gateway: {}",
            node.gateway
                .as_deref()
                .unwrap_or("reached over stdio (ssh, container exec)")
        );
        if let Some(fp) = &node.fingerprint {
            outln!("pinned certificate: {fp}");
        }
        outln!("token: {} (fingerprint)", node.token_fingerprint());
        match live {
            Some(l) => outln!(
                "connection: {} — {}",
                if l["connected"].as_bool() == Some(true) {
                    "connected"
                } else {
                    "not connected"
                },
                l["detail"].as_str().unwrap_or("")
            ),
            None => outln!("connection: `warden node run` has not run here"),
        }
    }
    Ok(0)
}
