//! `gateway-soak`: `warden gateway run` (release binary, default limits) serving agents
//! that exec `/bin/true` in a loop, first alone (the quiet baseline), then while a
//! hostile local client floods it: silent connections opened as fast as it can and
//! held (far past the connection cap), slowloris connections trickling headers, and an
//! agent of its own churning sessions — initialize, start a long run, cancel it by
//! disconnecting or by DELETE — and stateless calls it abandons mid-run.
//!
//! Reported: the legitimate calls' p50 and p99 in both phases (the row is p99 under the
//! flood against p99 quiet), the legitimate calls that failed, the gateway's descriptors
//! before the flood and once it has ended, its peak RSS, and what a second flood leaves
//! in its RSS beyond the first's (the allocator keeps pages a peak needed, so growth
//! across two floods, not the level after one, is what a leak would show).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;

use crate::harness::{RatioSpec, Report, median};

/// Agents calling in a loop.
const AGENTS: usize = 3;
/// Silent connections the flood keeps open (the default cap is 1024).
const FLOOD_HELD: usize = 3000;
/// Slowloris connections.
const SLOWLORIS: usize = 200;

struct Home {
    root: PathBuf,
}

impl Home {
    fn new() -> anyhow::Result<Home> {
        let root = std::env::temp_dir().join(format!("warden-bench-soak-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let home = root.join("home");
        std::fs::create_dir_all(&home)?;
        std::fs::create_dir_all(root.join("workspace"))?;
        std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        std::fs::write(
            home.join("config.toml"),
            "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\nask = \"off\"\n\
             [[agents.list]]\nid = \"churner\"\ntools.exec.security = \"full\"\n",
        )?;
        let approvals = json!({
            "version": 1,
            "defaults": {"security": "allowlist", "ask": "off", "askFallback": "deny"},
            "agents": {
                "bench": {"allowlist": [{"pattern": std::fs::canonicalize("/bin/true")?}]},
                "churner": {"security": "full", "ask": "off"}
            }
        });
        let path = home.join("exec-approvals.json");
        std::fs::write(&path, serde_json::to_vec(&approvals)?)?;
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        Ok(Home { root })
    }

    fn home(&self) -> PathBuf {
        self.root.join("home")
    }

    fn warden(&self) -> anyhow::Result<std::process::Command> {
        let exe = std::env::current_exe()?.with_file_name("warden");
        if !exe.is_file() {
            bail!("{} is missing (cargo xtask bench builds it)", exe.display());
        }
        let mut cmd = std::process::Command::new(exe);
        cmd.env("WARDEN_HOME", self.home()).env("WARDEN_LOG", "off");
        Ok(cmd)
    }

    fn token(&self, agent: &str) -> anyhow::Result<String> {
        let out = self
            .warden()?
            .args(["gateway", "token", "--agent", agent])
            .output()?;
        if !out.status.success() {
            bail!(
                "warden gateway token: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8(out.stdout)?.trim().to_owned())
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The running gateway (killed when dropped).
struct Gateway {
    child: std::process::Child,
    addr: String,
}

impl Gateway {
    fn start(home: &Home) -> anyhow::Result<Gateway> {
        let mut child = home
            .warden()?
            .args(crate::fixtures::GATEWAY_RUN)
            .arg(home.root.join("workspace"))
            .stdout(std::process::Stdio::piped())
            .spawn()?;
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().context("gateway stdout")?),
            &mut line,
        )?;
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .with_context(|| format!("no address in {line:?}"))?
            .to_owned();
        Ok(Gateway { child, addr })
    }

    fn rss_kib(&self) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .context("no VmRSS")
    }

    fn descriptors(&self) -> anyhow::Result<usize> {
        Ok(std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))?.count())
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

type Client = RunningService<RoleClient, ()>;

async fn client(addr: &str, token: &str) -> anyhow::Result<Client> {
    let config = StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
        .auth_header(token);
    Ok(
        ().serve(StreamableHttpClientTransport::from_config(config))
            .await?,
    )
}

/// Latencies of the agents' calls for `duration`, and how many failed.
async fn agents_for(clients: &[Arc<Client>], duration: Duration) -> (Vec<Duration>, usize) {
    let deadline = Instant::now() + duration;
    let tasks: Vec<_> = clients
        .iter()
        .map(|client| {
            let client = Arc::clone(client);
            tokio::spawn(async move {
                let (mut samples, mut failed) = (Vec::new(), 0);
                while Instant::now() < deadline {
                    let start = Instant::now();
                    let r = client
                        .call_tool(
                            CallToolRequestParams::new("exec").with_arguments(
                                json!({"argv": ["/bin/true"]})
                                    .as_object()
                                    .cloned()
                                    .unwrap_or_default(),
                            ),
                        )
                        .await;
                    let ok = match &r {
                        Ok(r) => r
                            .structured_content
                            .as_ref()
                            .is_some_and(|v| v["exitCode"] == 0),
                        Err(_) => false,
                    };
                    if !ok && failed < 3 {
                        eprintln!("gateway-soak: an agent's call failed: {r:?}");
                    }
                    if ok {
                        samples.push(start.elapsed());
                    } else {
                        failed += 1;
                    }
                }
                (samples, failed)
            })
        })
        .collect();
    let (mut all, mut failed) = (Vec::new(), 0);
    for task in tasks {
        if let Ok((samples, f)) = task.await {
            all.extend(samples);
            failed += f;
        } else {
            failed += 1;
        }
    }
    (all, failed)
}

fn percentile(samples: &[Duration], p: f64) -> Duration {
    let mut s = samples.to_vec();
    s.sort();
    let i = ((s.len() as f64 * p).ceil() as usize).clamp(1, s.len().max(1)) - 1;
    s.get(i).copied().unwrap_or_default()
}

/// The hostile client's threads; they stop (closing everything they hold) on `stop`.
fn hostile(
    addr: &str,
    churner: &str,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<usize>> {
    let mut threads = Vec::new();
    // Silent connections, as fast as they can be opened, the newest FLOOD_HELD kept.
    {
        let (addr, stop) = (addr.to_owned(), Arc::clone(stop));
        threads.push(std::thread::spawn(move || {
            let mut held = std::collections::VecDeque::new();
            let mut opened = 0;
            while !stop.load(Ordering::Relaxed) {
                if let Ok(s) = TcpStream::connect(&addr) {
                    held.push_back(s);
                    opened += 1;
                }
                if held.len() > FLOOD_HELD {
                    held.pop_front();
                }
            }
            opened
        }));
    }
    // Slowloris: a header byte per connection every 100 ms, reconnecting when cut off.
    {
        let (addr, stop) = (addr.to_owned(), Arc::clone(stop));
        threads.push(std::thread::spawn(move || {
            let head = b"POST /mcp HTTP/1.1\r\nHost: x\r\nX-Slow: ";
            let mut streams: Vec<(TcpStream, usize)> = Vec::new();
            let mut cut = 0;
            while !stop.load(Ordering::Relaxed) {
                while streams.len() < SLOWLORIS {
                    match TcpStream::connect(&addr) {
                        Ok(s) => streams.push((s, 0)),
                        Err(_) => break,
                    }
                }
                streams.retain_mut(|(s, at)| {
                    let byte = head.get(*at).copied().unwrap_or(b'a');
                    *at += 1;
                    let alive = s.write_all(&[byte]).is_ok();
                    cut += usize::from(!alive);
                    alive
                });
                std::thread::sleep(Duration::from_millis(100));
            }
            cut
        }));
    }
    // Session churn with cancellations, with a credential of its own.
    {
        let (addr, token, stop) = (addr.to_owned(), churner.to_owned(), Arc::clone(stop));
        threads.push(std::thread::spawn(move || {
            let mut rounds = 0;
            while !stop.load(Ordering::Relaxed) {
                churn_once(&addr, &token, rounds);
                rounds += 1;
            }
            rounds
        }));
    }
    threads
}

/// Write `request` on a new connection and read its response head (or what came).
fn request_head(addr: &str, request: &str) -> Option<(TcpStream, String)> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream.write_all(request.as_bytes()).ok()?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    Some((stream, String::from_utf8_lossy(&head).into_owned()))
}

fn post(addr: &str, token: &str, session: Option<&str>, extra: &str, body: &str) -> String {
    let session = session
        .map(|s| format!("Mcp-Session-Id: {s}\r\nMcp-Protocol-Version: 2025-06-18\r\n"))
        .unwrap_or_default();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{session}{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// One round of the churner: a session opened, a long run started in it and cancelled
/// (by disconnecting, or by DELETE), the session ended; or a stateless call abandoned.
fn churn_once(addr: &str, token: &str, round: usize) {
    let sleep = json!({"argv": ["sleep", "4321.5"]});
    if round % 2 == 1 {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "exec", "arguments": sleep, "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "churn", "version": "0"}}}})
        .to_string();
        let extra =
            "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: exec\r\n";
        if let Ok(mut s) = TcpStream::connect(addr) {
            let _ = s.write_all(post(addr, token, None, extra, &body).as_bytes());
            std::thread::sleep(Duration::from_millis(20));
        }
        return;
    }
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "churn", "version": "0"}}})
    .to_string();
    let Some((_, head)) = request_head(addr, &post(addr, token, None, "", &init)) else {
        return;
    };
    let Some(session) = head.lines().find_map(|l| {
        l.to_ascii_lowercase()
            .starts_with("mcp-session-id:")
            .then(|| l.split_once(':').map(|(_, v)| v.trim().to_owned()))
            .flatten()
    }) else {
        return;
    };
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let _ = request_head(addr, &post(addr, token, Some(&session), "", &initialized));
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "exec", "arguments": sleep}})
    .to_string();
    let running = request_head(addr, &post(addr, token, Some(&session), "", &call));
    std::thread::sleep(Duration::from_millis(20));
    if round.is_multiple_of(4) {
        drop(running);
    }
    let delete = format!(
        "DELETE /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nMcp-Session-Id: {session}\r\nMcp-Protocol-Version: 2025-06-18\r\nConnection: close\r\n\r\n"
    );
    let _ = request_head(addr, &delete);
}

fn raise_nofile() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    limit.current = limit.maximum.or(Some(65536));
    let _ = setrlimit(Resource::Nofile, limit);
}

/// Wait (up to `within`) for the gateway's descriptors to come down to `target`.
async fn settle(gateway: &Gateway, target: usize, within: Duration) -> anyhow::Result<usize> {
    let deadline = Instant::now() + within;
    loop {
        let now = gateway.descriptors()?;
        if now <= target || Instant::now() > deadline {
            return Ok(now);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The `gateway-soak` rows.
pub async fn run(report: &mut Report, quick: bool) -> anyhow::Result<()> {
    raise_nofile();
    let (quiet_for, flood_for) = if quick {
        (Duration::from_secs(2), Duration::from_secs(3))
    } else {
        (Duration::from_secs(15), Duration::from_secs(30))
    };
    let home = Home::new()?;
    let bench = home.token("bench")?;
    let churner = home.token("churner")?;
    let gateway = Gateway::start(&home)?;
    let mut clients = Vec::new();
    for _ in 0..AGENTS {
        clients.push(Arc::new(client(&gateway.addr, &bench).await?));
    }
    // Warm-up, then the quiet baseline.
    agents_for(&clients, Duration::from_secs(1)).await;
    let (quiet, quiet_failed) = agents_for(&clients, quiet_for).await;
    let rss_before = gateway.rss_kib()?;
    let fds_before = gateway.descriptors()?;

    let stop = Arc::new(AtomicBool::new(false));
    let threads = hostile(&gateway.addr, &churner, &stop);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (loaded, loaded_failed) = agents_for(&clients, flood_for).await;
    let mut rss_peak = gateway.rss_kib()?;
    let fds_peak = gateway.descriptors()?;
    stop.store(true, Ordering::Relaxed);
    let counts: Vec<usize> = threads
        .into_iter()
        .map(|t| t.join().unwrap_or_default())
        .collect();

    // The flood is over: the gateway should be back where it was.
    let fds_after = settle(&gateway, fds_before, Duration::from_secs(20)).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_after = gateway.rss_kib()?;

    // A second flood, as long as the first: whatever it adds beyond the first is kept
    // per connection, session or run, not by the allocator.
    stop.store(false, Ordering::Relaxed);
    let threads = hostile(&gateway.addr, &churner, &stop);
    let (_, second_failed) = agents_for(&clients, flood_for).await;
    rss_peak = rss_peak.max(gateway.rss_kib()?);
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        let _ = thread.join();
    }
    let fds_after = fds_after.max(settle(&gateway, fds_before, Duration::from_secs(20)).await?);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_after_second = gateway.rss_kib()?;
    let loaded_failed = loaded_failed + second_failed;
    for client in clients {
        if let Ok(client) = Arc::try_unwrap(client) {
            let _ = client.cancel().await;
        }
    }
    // The churner's cancelled runs: none should be left.
    let leftover = std::fs::read_dir("/proc")?
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline")).unwrap_or_default() == b"sleep\x004321.5\x00"
        })
        .count();

    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let (quiet_p50, quiet_p99) = (ms(median(&quiet)), ms(percentile(&quiet, 0.99)));
    let (loaded_p50, loaded_p99) = (ms(median(&loaded)), ms(percentile(&loaded, 0.99)));
    eprintln!(
        "gateway-soak: quiet {} calls p50 {quiet_p50:.3} ms p99 {quiet_p99:.3} ms; under the flood {} calls p50 {loaded_p50:.3} ms p99 {loaded_p99:.3} ms; failed {quiet_failed} quiet, {loaded_failed} flooded",
        quiet.len(),
        loaded.len()
    );
    eprintln!(
        "gateway-soak: flood opened {} connections, {} slowloris cut off, {} churn rounds; RSS {rss_before} KiB before, {rss_peak} KiB peak, {rss_after} KiB after, {rss_after_second} KiB after a second flood; descriptors {fds_before} before, {fds_peak} peak, {fds_after} after; {} runs left behind",
        counts.first().copied().unwrap_or(0),
        counts.get(1).copied().unwrap_or(0),
        counts.get(2).copied().unwrap_or(0),
        leftover
    );
    let iterations = loaded.len();
    report.ratio(
        RatioSpec {
            id: "gateway-soak",
            what: "p99 of agents' exec of /bin/true over HTTP while a local client floods the gateway (silent connections past the cap, slowloris, session churn with cancellations)",
            baseline: "p99 of the same calls with the gateway quiet, same run",
            unit: "ms",
            max_ratio: 3.0,
            iterations,
        },
        quiet_p99,
        loaded_p99,
    );
    report.value(
        "gateway-soak-failed",
        "agents' calls that failed during the floods (and before them)",
        (quiet_failed + loaded_failed) as f64,
        "calls",
        0.0,
        iterations,
    );
    report.value(
        "gateway-soak-fds",
        "the gateway's descriptors after the flood ended, above their count before it",
        fds_after.saturating_sub(fds_before) as f64,
        "fds",
        0.0,
        iterations,
    );
    report.value(
        "gateway-soak-rss-peak",
        "the gateway's peak RSS during the floods",
        rss_peak as f64 / 1024.0,
        "MiB",
        64.0,
        iterations,
    );
    report.value(
        "gateway-soak-rss",
        "the gateway's RSS after a second flood ended, above its RSS after the first",
        rss_after_second.saturating_sub(rss_after) as f64 / 1024.0,
        "MiB",
        // ~20,000 connections and 1,000 sessions a flood: 4 MiB is under 200 bytes
        // left per connection; the allocator's own drift between runs is ±3 MiB.
        4.0,
        iterations,
    );
    Ok(())
}
