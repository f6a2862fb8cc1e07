//! `mcp-exec` and `mcp-read`: Warden's tools through a real MCP client (rmcp's), p50 of
//! sequential calls, against the release `warden` binary — `warden mcp` over stdio and
//! `warden gateway run` over Streamable HTTP on loopback.
//!
//! `mcp-exec` runs an allowlisted `/bin/true` on the gateway host; its baseline is the
//! same exec through the runner in this process (`exec-gateway`'s Warden side, with the
//! containment the `warden` binary uses on this host, a cgroup per run where it can),
//! interleaved call by call so machine noise hits both sides. `mcp-read` reads a 1 KiB
//! file over stdio and is judged in absolute time.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use rmcp::model::{CallToolRequestParams, JsonObject};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::harness::{RatioSpec, Report, compare, median, ms, time_async};

/// A Warden home where agent `bench` may run `/bin/true` (and, for the process rows,
/// `/bin/cat` and `/bin/sleep`, up to 128 runs at once) on the gateway host without
/// asking, and a workspace with a 1 KiB file.
pub(crate) struct Setup {
    home: PathBuf,
    workspace: PathBuf,
}

impl Setup {
    pub(crate) fn new() -> anyhow::Result<Setup> {
        let root = std::env::temp_dir().join(format!("warden-bench-mcp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let home = root.join("home");
        let workspace = root.join("workspace");
        std::fs::create_dir_all(&home)?;
        std::fs::create_dir_all(&workspace)?;
        std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        std::fs::write(
            home.join("config.toml"),
            "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\nask = \"off\"\n[gateway]\nmax_runs_per_agent = 128\n[[agents.list]]\nid = \"bench\"\n",
        )?;
        let allowed = ["/bin/true", "/bin/cat", "/bin/sleep"]
            .into_iter()
            .map(|p| Ok(json!({"pattern": std::fs::canonicalize(p)?})))
            .collect::<anyhow::Result<Vec<Value>>>()?;
        let approvals = json!({
            "version": 1,
            "defaults": {"security": "allowlist", "ask": "off", "askFallback": "deny"},
            "agents": {"bench": {"allowlist": allowed}}
        });
        let path = home.join("exec-approvals.json");
        std::fs::write(&path, serde_json::to_vec(&approvals)?)?;
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        let line = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n";
        std::fs::write(workspace.join("kib.txt"), line.repeat(16))?;
        Ok(Setup { home, workspace })
    }

    pub(crate) fn warden(&self) -> anyhow::Result<tokio::process::Command> {
        let exe = std::env::current_exe()?.with_file_name("warden");
        if !exe.is_file() {
            bail!("{} is missing (cargo xtask bench builds it)", exe.display());
        }
        let mut cmd = tokio::process::Command::new(exe);
        cmd.env("WARDEN_HOME", &self.home)
            .env("WARDEN_LOG", "error");
        Ok(cmd)
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let Some(root) = self.home.parent() {
            let _ = std::fs::remove_dir_all(root);
        }
    }
}

/// An MCP client connected to a Warden server.
pub type Client = RunningService<RoleClient, ()>;

pub(crate) fn args(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

/// One `exec` of `/bin/true`; an error unless it ran and exited 0.
pub async fn exec_true(client: &Client) -> anyhow::Result<()> {
    let r = client
        .call_tool(
            CallToolRequestParams::new("exec").with_arguments(args(json!({"argv": ["/bin/true"]}))),
        )
        .await?;
    let v = r.structured_content.unwrap_or_default();
    if v["exitCode"] != 0 || v["status"] != "finished" {
        bail!("exec /bin/true over MCP: {v}");
    }
    Ok(())
}

/// p50 in ms of `read` of the 1 KiB file, `iterations` sequential calls after `warmup`.
async fn read_kib(client: &Client, warmup: usize, iterations: usize) -> anyhow::Result<f64> {
    let mut samples = Vec::with_capacity(iterations);
    for i in 0..warmup + iterations {
        let took = time_async(|| async {
            let r = client
                .call_tool(
                    CallToolRequestParams::new("read")
                        .with_arguments(args(json!({"path": "kib.txt"}))),
                )
                .await?;
            let v = r.structured_content.unwrap_or_default();
            if v["text"].as_str().map(str::len) != Some(1024) {
                bail!("read over MCP: {v}");
            }
            Ok(())
        })
        .await?;
        if i >= warmup {
            samples.push(took);
        }
    }
    Ok(ms(median(&samples)))
}

/// A client of `warden mcp --agent bench --workspace WORKSPACE`, the server started by
/// `warden` (the binary, its environment and directory set).
pub async fn serve_stdio(
    mut warden: tokio::process::Command,
    workspace: &Path,
) -> anyhow::Result<Client> {
    warden
        .args(["mcp", "--agent", "bench", "--workspace"])
        .arg(workspace);
    Ok(().serve(TokioChildProcess::new(warden)?).await?)
}

pub(crate) async fn stdio_client(setup: &Setup) -> anyhow::Result<Client> {
    serve_stdio(setup.warden()?, &setup.workspace).await
}

/// A running `warden gateway run` (killed when dropped) and a client with `bench`'s
/// credential.
pub(crate) async fn http_client(setup: &Setup) -> anyhow::Result<(tokio::process::Child, Client)> {
    let token = setup
        .warden()?
        .args(["gateway", "token", "--agent", "bench"])
        .output()
        .await?;
    if !token.status.success() {
        bail!(
            "warden gateway token: {}",
            String::from_utf8_lossy(&token.stderr)
        );
    }
    let token = String::from_utf8(token.stdout)?.trim().to_owned();
    let mut gateway = setup
        .warden()?
        .args(crate::fixtures::GATEWAY_RUN)
        .arg(&setup.workspace)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = gateway.stdout.take().context("gateway stdout")?;
    let mut line = String::new();
    tokio::io::AsyncBufReadExt::read_line(&mut tokio::io::BufReader::new(stdout), &mut line)
        .await?;
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .with_context(|| format!("no address in {line:?}"))?
        .to_owned();
    let config = StreamableHttpClientTransportConfig::with_uri(url).auth_header(token);
    let client = ().serve(StreamableHttpClientTransport::from_config(config)).await?;
    Ok((gateway, client))
}

/// The rows [`run`] measures.
pub const ROWS: &[&str] = &["mcp-exec-stdio", "mcp-read", "mcp-exec-http"];

/// Its rows (all three: they share one server each way).
pub async fn run(
    report: &mut Report,
    quick: bool,
    gateway: &crate::in_process::InProcess,
) -> anyhow::Result<()> {
    let (warmup, iterations) = if quick { (3, 10) } else { (50, 400) };
    let setup = Setup::new()?;

    let stdio = stdio_client(&setup).await?;
    let (base, warden) = compare(
        warmup,
        iterations,
        || gateway.exec_true(),
        || exec_true(&stdio),
    )
    .await?;
    report.ratio(
        RatioSpec {
            id: "mcp-exec-stdio",
            what: "exec of an allowlisted /bin/true through `warden mcp` (stdio, rmcp client), p50 of sequential calls",
            baseline: "the same exec through the runner in-process (exec-gateway's Warden side, same containment)",
            unit: "ms",
            max_ratio: 1.3,
            iterations,
        },
        base,
        warden,
    );

    report.value(
        "mcp-read",
        "read of a 1 KiB file through `warden mcp` (stdio, rmcp client), p50 of sequential calls",
        read_kib(&stdio, warmup, iterations).await?,
        "ms",
        0.5,
        iterations,
    );
    stdio.cancel().await?;

    let (_gateway_process, http) = http_client(&setup).await?;
    // For context: what one call costs over HTTP with no command to run.
    eprintln!(
        "mcp: read of 1 KiB over HTTP, p50 {:.3} ms",
        read_kib(&http, warmup, iterations).await?
    );
    let (base, warden) = compare(
        warmup,
        iterations,
        || gateway.exec_true(),
        || exec_true(&http),
    )
    .await?;
    report.ratio(
        RatioSpec {
            id: "mcp-exec-http",
            what: "exec of an allowlisted /bin/true through `warden gateway run` (Streamable HTTP on loopback, rmcp client), p50 of sequential calls",
            baseline: "the same exec through the runner in-process (exec-gateway's Warden side, same containment)",
            unit: "ms",
            max_ratio: 1.5,
            iterations,
        },
        base,
        warden,
    );
    http.cancel().await?;
    Ok(())
}
