//! `warden gateway run|token` and `warden mcp`: the long-running gateway with its
//! Streamable HTTP MCP endpoint, and the same tools over stdio.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use approvals::{Clock, SystemClock};
use gateway::credentials::LegacyImport;
use gateway::{Credentials, HttpLimits};
use rmcp::ServiceExt;

use crate::exit;
use crate::host::HostFacts;

/// `warden gateway ...`
#[derive(Debug, clap::Subcommand)]
pub enum GatewayCommand {
    /// Run the gateway: the MCP endpoint over Streamable HTTP (a per-agent bearer
    /// credential required; the credential decides the agent).
    Run(RunArgs),
    /// Create or show an agent's bearer credential; rotate, revoke or list them.
    Token(TokenArgs),
}

/// Arguments of `warden gateway run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Address to listen on (loopback by default).
    #[arg(long, default_value = "127.0.0.1:7878")]
    listen: SocketAddr,
    /// Removed: each request's agent now comes from its credential.
    #[arg(long, hide = true)]
    agent: Option<String>,
    /// The workspace the file tools and commands start in (default: the current directory).
    #[arg(long)]
    workspace: Option<PathBuf>,
    /// Take node connections (the Bridge, WebSocket) on this address; a non-loopback
    /// address needs --bridge-tls.
    #[arg(long)]
    bridge_listen: Option<SocketAddr>,
    /// TLS on the Bridge listener, with a certificate made on first use; nodes pin the
    /// fingerprint printed at start.
    #[arg(long)]
    bridge_tls: bool,
    /// Seconds between Bridge heartbeats (a node silent for 3.5 of them is dropped).
    #[arg(long, default_value_t = 10.0, hide = true)]
    bridge_heartbeat: f64,
    /// Do not host this host's approver (the web approver, which prints a one-time login
    /// link): questions go to an approver started elsewhere, or askFallback decides.
    #[arg(long)]
    no_approver: bool,
    /// Serve Prometheus metrics at http://ADDR/metrics: runs by host and outcome, decision
    /// and run latency, runs in progress, pending approvals, connected nodes, sessions.
    /// A loopback address only (port 0: any free port); off unless given.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    /// Loopback address and port of the web approver it hosts (port 0: any free port).
    #[arg(long, default_value = crate::web::DEFAULT_LISTEN, conflicts_with = "no_approver")]
    approver_listen: SocketAddr,
}

/// Arguments of `warden gateway token`.
#[derive(Debug, clap::Args)]
pub struct TokenArgs {
    /// The agent the credential acts for.
    #[arg(long, default_value = "main")]
    agent: String,
    /// Replace the agent's token by a new one (the old one stops working at once).
    #[arg(long, conflicts_with_all = ["revoke", "list"])]
    rotate: bool,
    /// Remove the agent's credential.
    #[arg(long, conflicts_with_all = ["rotate", "list"])]
    revoke: bool,
    /// List the credentials (agents, dates, fingerprints; never the tokens).
    #[arg(long, conflicts_with_all = ["rotate", "revoke"])]
    list: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Arguments of `warden mcp`.
#[derive(Debug, clap::Args)]
pub struct McpArgs {
    /// The agent id this server acts for.
    #[arg(long, default_value = "main")]
    agent: String,
    /// The session id (default: a fresh one per process).
    #[arg(long)]
    session: Option<String>,
    /// The workspace the file tools and commands start in (default: the current directory).
    #[arg(long)]
    workspace: Option<PathBuf>,
}

/// Run `warden gateway ...`.
pub fn run(command: GatewayCommand) -> i32 {
    match command {
        GatewayCommand::Run(args) => {
            exit::block_on(true, async { gateway_run(args).await.map(|()| 0) })
        }
        GatewayCommand::Token(args) => exit::or_report(token(args)),
    }
}

/// Run `warden mcp`.
pub fn mcp(args: McpArgs) -> i32 {
    exit::block_on(true, async { mcp_stdio(args).await.map(|()| 0) })
}

/// This host's gateway credentials (files that must be this user's own), with a single
/// token of an earlier version brought in as `main`'s when it is safe to keep (said on
/// stderr either way).
fn credentials(facts: &HostFacts) -> anyhow::Result<Credentials> {
    let credentials = Credentials::new(facts.fs(), facts.warden_home.clone())
        .with_owner(nix::unistd::geteuid().as_raw());
    let legacy = facts
        .warden_home
        .join(gateway::credentials::LEGACY_TOKEN_FILE);
    match credentials.import_legacy(SystemClock.now_ms())? {
        LegacyImport::Nothing => {}
        LegacyImport::Imported => eprintln!(
            "warden: the gateway token of an earlier version ({}) is now agent {:?}'s credential in {}; the old file was removed",
            legacy.display(),
            gateway::credentials::LEGACY_AGENT,
            credentials.path().display()
        ),
        LegacyImport::Refused(why) => eprintln!(
            "warden: warning: the gateway token of an earlier version ({}) was not imported: {why}. Clients using it will be refused; give them a new credential (`warden gateway token --agent {}`) and delete the old file",
            legacy.display(),
            gateway::credentials::LEGACY_AGENT,
        ),
    }
    Ok(credentials)
}

/// `warden gateway token`.
fn token(args: TokenArgs) -> anyhow::Result<i32> {
    let facts = HostFacts::read()?;
    let credentials = credentials(&facts)?;
    let now = SystemClock.now_ms();
    if args.list {
        let list = credentials.list()?;
        if args.json {
            outln!("{}", serde_json::to_string_pretty(&list)?);
        } else if list.is_empty() {
            outln!("no gateway credentials (create one with `warden gateway token --agent ID`)");
        } else {
            for c in list {
                let rotated = c
                    .rotated_at
                    .map(|t| format!(", rotated {}", when(t)))
                    .unwrap_or_default();
                outln!(
                    "{:<24} {}  created {}{rotated}",
                    c.agent,
                    c.fingerprint,
                    when(c.created_at)
                );
            }
        }
        return Ok(0);
    }
    if args.revoke {
        credentials.revoke(&args.agent)?;
        facts.record_policy(
            gateway::credentials::CREDENTIALS_FILE,
            format!("gateway credential of agent {} revoked", args.agent),
        );
        if args.json {
            outln!(
                "{}",
                serde_json::json!({"agent": args.agent, "revoked": true})
            );
        } else {
            outln!("revoked agent {:?}'s gateway credential", args.agent);
        }
        return Ok(0);
    }
    let (token, created) = if args.rotate {
        (credentials.rotate(&args.agent, now)?, false)
    } else {
        credentials.get_or_create(&args.agent, now)?
    };
    if args.rotate || created {
        facts.record_policy(
            gateway::credentials::CREDENTIALS_FILE,
            format!(
                "gateway credential of agent {} {}",
                args.agent,
                if args.rotate { "rotated" } else { "created" }
            ),
        );
    }
    if args.json {
        outln!(
            "{}",
            serde_json::json!({"agent": args.agent, "token": token, "created": created, "rotated": args.rotate})
        );
    } else {
        outln!("{token}");
    }
    Ok(0)
}

/// A moment (ms since the epoch) as UTC RFC 3339.
fn when(ms: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms))
        .to_string()
}

async fn gateway_run(args: RunArgs) -> anyhow::Result<()> {
    if let Some(agent) = args.agent {
        anyhow::bail!(
            "`gateway run --agent` is gone: each request's agent comes from the credential it presents; give the agent's client the token of `warden gateway token --agent {agent}`"
        );
    }
    if let Some(addr) = args.metrics_listen
        && !addr.ip().is_loopback()
    {
        anyhow::bail!(
            "--metrics-listen {addr}: metrics are served on a loopback address only (127.0.0.1 or [::1]); to scrape from elsewhere, put an authenticating proxy in front of it"
        );
    }
    let facts = HostFacts::read()?;
    let config = facts.config()?;
    // Each run's cgroups are ready before it starts (prepared after the previous one).
    facts.containment()?.keep_ready();
    let hub = crate::gateway_bridge::start(
        &facts,
        &args.bridge_listen,
        args.bridge_tls,
        args.bridge_heartbeat,
    )
    .await?;
    let gateway = Arc::new(
        facts
            .gateway_with_nodes(args.workspace.as_deref(), Some(Arc::clone(&hub)))?
            .with_agent_reports(),
    );
    crate::operator::serve(&facts, Arc::clone(&hub), Arc::clone(&gateway))?;
    let credentials = credentials(&facts)?;
    let limits = http_limits(&config.gateway);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    if !addr.ip().is_loopback() {
        eprintln!(
            "warden: warning: listening on a non-loopback address ({addr}); only loopback Host headers are accepted"
        );
    }
    let agents = credentials.list()?;
    let stop = exit::shutdown_signal();
    outln!(
        "warden gateway listening on http://{addr}/mcp (agents with a credential: {}; `warden gateway token --agent ID` creates one)",
        if agents.is_empty() {
            "none yet".to_owned()
        } else {
            agents
                .iter()
                .map(|c| c.agent.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    if let Some(addr) = args.metrics_listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen for metrics on {addr}"))?;
        let bound = listener.local_addr()?;
        let metered = Arc::clone(&gateway);
        tokio::spawn(async move {
            if let Err(e) =
                gateway::http::serve_metrics(metered, listener, exit::shutdown_signal()).await
            {
                tracing::error!("the metrics listener stopped: {e}");
            }
        });
        eprintln!("warden: metrics for Prometheus on http://{bound}/metrics (loopback only)");
    }
    // The web approver too, so that a question reaches a human without a second
    // terminal — unless told not to, or another approver already listens here.
    let approver = if args.no_approver {
        None
    } else {
        match crate::web::start(&facts, args.approver_listen, exit::shutdown_signal()).await {
            Ok(started) => {
                outln!(
                    "warden approver listening on {}\nweb approver: open {}\n(the link works once; keep it private; --no-approver leaves approving to `warden approvals ui`)",
                    started.socket.display(),
                    started.login
                );
                Some(started)
            }
            Err(e) => {
                eprintln!(
                    "warden: not hosting the web approver: {e:#}; questions go to the approver that listens, or askFallback decides"
                );
                None
            }
        }
    };
    gateway::http::serve(gateway, listener, credentials, limits, stop).await?;
    hub.shutdown();
    if let Some(approver) = approver {
        // It stops on the same signal; a stop for another reason does not wait for it.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), approver.done).await;
    }
    eprintln!("warden: gateway stopped");
    Ok(())
}

/// The HTTP bounds `[gateway]` sets, the rest at their defaults; the connection cap kept
/// within the descriptors this process may have.
fn http_limits(settings: &policy::GatewaySettings) -> HttpLimits {
    let d = HttpLimits::default();
    let mut limits = HttpLimits {
        max_connections: settings.max_connections.unwrap_or(d.max_connections),
        max_connections_per_peer: settings
            .max_connections_per_peer
            .unwrap_or(d.max_connections_per_peer),
        header_read_timeout: settings
            .header_read_timeout
            .unwrap_or(d.header_read_timeout),
        connection_idle_timeout: settings
            .connection_idle_timeout
            .unwrap_or(d.connection_idle_timeout),
        body_read_timeout: settings.body_read_timeout.unwrap_or(d.body_read_timeout),
        sessions_per_credential: settings
            .max_sessions_per_credential
            .unwrap_or(d.sessions_per_credential),
        session_idle_timeout: settings
            .session_idle_timeout
            .unwrap_or(d.session_idle_timeout),
        streams_per_session: settings
            .max_streams_per_session
            .unwrap_or(d.streams_per_session),
    };
    let available = raise_descriptor_limit(limits.max_connections as u64 + DESCRIPTOR_RESERVE);
    let fits = available.saturating_sub(DESCRIPTOR_RESERVE).max(16) as usize;
    if fits < limits.max_connections {
        eprintln!(
            "warden: warning: this process may open {available} descriptors, too few for {} connections ([gateway] max_connections) and its own files; at most {fits} connections will be kept open",
            limits.max_connections
        );
        limits.max_connections = fits;
    }
    limits
}

/// Descriptors kept for everything but connections: runs' pipes, files, the Bridge.
const DESCRIPTOR_RESERVE: u64 = 256;

/// Raise this process's descriptor limit towards `wanted` (never above the hard limit,
/// never lowering it); returns the limit now in force.
fn raise_descriptor_limit(wanted: u64) -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return wanted;
    };
    let target = wanted.min(hard);
    if target > soft && setrlimit(Resource::RLIMIT_NOFILE, target, hard).is_ok() {
        return target;
    }
    soft
}

type Input = Box<dyn tokio::io::AsyncRead + Send + Unpin>;
type Output = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

/// `warden mcp`'s stdin and stdout as streams the runtime polls. Pipes (how most
/// clients start stdio servers) are reopened non-blocking by rmcp. A socket (Claude Code
/// starts stdio servers on a socket pair) is polled too, on a duplicate of the
/// descriptor: otherwise tokio would read it on a blocking thread, which no signal can
/// interrupt. A terminal, or anything else, is read the blocking way (the server's end
/// waits only a bounded time for that thread: `exit::SERVER_SHUTDOWN_WAIT`).
fn stdio_streams() -> anyhow::Result<(Input, Output)> {
    let (pipe_in, pipe_out) = rmcp::transport::stdio_pipes();
    let input: Input = match socket_of(&std::io::stdin())? {
        Some(socket) => Box::new(socket),
        None => Box::new(pipe_in),
    };
    let output: Output = match socket_of(&std::io::stdout())? {
        Some(socket) => Box::new(socket),
        None => Box::new(pipe_out),
    };
    Ok((input, output))
}

/// A non-blocking stream on a duplicate of `stream`'s descriptor, if it is a socket.
/// (Non-blocking is a property of the socket's open file description, which only this
/// process and whoever it shares the descriptor with use; the client's end is its own.)
fn socket_of(stream: &impl std::os::fd::AsFd) -> anyhow::Result<Option<tokio::net::UnixStream>> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(fd) = stream.as_fd().try_clone_to_owned() else {
        return Ok(None);
    };
    let file = std::fs::File::from(fd);
    if !file.metadata().is_ok_and(|m| m.file_type().is_socket()) {
        return Ok(None);
    }
    let socket = std::os::unix::net::UnixStream::from(std::os::fd::OwnedFd::from(file));
    socket
        .set_nonblocking(true)
        .context("making the stdio socket non-blocking")?;
    Ok(Some(
        tokio::net::UnixStream::from_std(socket).context("polling the stdio socket")?,
    ))
}

async fn mcp_stdio(args: McpArgs) -> anyhow::Result<()> {
    let facts = HostFacts::read()?;
    // Each run's cgroups are ready before it starts (prepared after the previous one).
    facts.containment()?.keep_ready();
    let gateway = Arc::new(facts.gateway(args.workspace.as_deref())?);
    let session = args.session.unwrap_or_else(runner::new_run_id);
    let cancel = gateway.shutdown_token();
    // The client closing stdin (or dying) stops its runs at once.
    let (input, output) = stdio_streams()?;
    let transport = gateway::stdio::StdioTransport::new(input, output, cancel.clone());
    let service = gateway::WardenMcp::new(gateway, args.agent, session)
        .serve(transport)
        .await
        .context("MCP handshake over stdio failed")?;
    tokio::select! {
        result = service.waiting() => { result.context("MCP service failed")?; }
        _ = exit::shutdown_signal() => {}
    }
    cancel.cancel();
    Ok(())
}
