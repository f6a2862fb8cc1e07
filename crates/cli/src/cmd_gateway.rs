//! `warden gateway run|token` and `warden mcp`: the long-running gateway with its
//! Streamable HTTP MCP endpoint, and the same tools over stdio.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use base64::Engine as _;
use caps::{Fs, WriteOptions};
use rmcp::ServiceExt;

use crate::exit;
use crate::host::HostFacts;

/// `warden gateway ...`
#[derive(Debug, clap::Subcommand)]
pub enum GatewayCommand {
    /// Run the gateway: the MCP endpoint over Streamable HTTP (bearer token required).
    Run(RunArgs),
    /// Print the bearer token MCP clients must send (created on first use).
    Token,
}

/// Arguments of `warden gateway run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Address to listen on (loopback by default).
    #[arg(long, default_value = "127.0.0.1:7878")]
    listen: SocketAddr,
    /// The agent id for requests that do not send `X-Warden-Agent`.
    #[arg(long, default_value = "main")]
    agent: String,
    /// The workspace the file tools and commands start in (default: the current directory).
    #[arg(long)]
    workspace: Option<PathBuf>,
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
        GatewayCommand::Token => {
            exit::or_report(HostFacts::read().and_then(|f| gateway_token(&f)).map(|t| {
                outln!("{t}");
                0
            }))
        }
    }
}

/// Run `warden mcp`.
pub fn mcp(args: McpArgs) -> i32 {
    exit::block_on(true, async { mcp_stdio(args).await.map(|()| 0) })
}

/// The gateway's bearer token from `$WARDEN_HOME/gateway-token`, created (0600, from the
/// OS CSPRNG) on first use.
fn gateway_token(facts: &HostFacts) -> anyhow::Result<String> {
    let fs = facts.fs();
    let path = facts.warden_home.join("gateway-token");
    match fs.read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => return Ok(t.trim().to_owned()),
        Ok(_) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(e.into()),
    }
    fs.create_dir_all(&facts.warden_home, 0o700)?;
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("cannot generate a token: {e}"))?;
    let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    fs.write_atomic(
        &path,
        format!("{token}\n").as_bytes(),
        WriteOptions::private(),
    )?;
    Ok(token)
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

async fn gateway_run(args: RunArgs) -> anyhow::Result<()> {
    let facts = HostFacts::read()?;
    let gateway = Arc::new(facts.gateway(args.workspace.as_deref())?);
    let token = gateway_token(&facts)?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    if !addr.ip().is_loopback() {
        eprintln!(
            "warden: warning: listening on a non-loopback address ({addr}); only loopback Host headers are accepted"
        );
    }
    outln!(
        "warden gateway listening on http://{addr}/mcp (bearer token: `warden gateway token`, stored in {})",
        facts.warden_home.join("gateway-token").display()
    );
    gateway::http::serve(gateway, listener, token, args.agent, shutdown_signal()).await?;
    eprintln!("warden: gateway stopped");
    Ok(())
}

async fn mcp_stdio(args: McpArgs) -> anyhow::Result<()> {
    let facts = HostFacts::read()?;
    let gateway = Arc::new(facts.gateway(args.workspace.as_deref())?);
    let session = args.session.unwrap_or_else(runner::new_run_id);
    let cancel = gateway.shutdown_token();
    let service = gateway::WardenMcp::new(gateway, args.agent, session)
        .serve(rmcp::transport::stdio())
        .await
        .context("MCP handshake over stdio failed")?;
    tokio::select! {
        result = service.waiting() => { result.context("MCP service failed")?; }
        _ = shutdown_signal() => {}
    }
    cancel.cancel();
    Ok(())
}
