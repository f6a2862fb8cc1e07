//! `exec-node` and `fleet`: the Bridge under load, on loopback, with real WebSockets.
//!
//! - `exec-node`: an allowlisted `/bin/true` through the gateway (`gateway::Gateway::exec`
//!   with `host = node`) to a node served by the same runner code over a loopback
//!   WebSocket, against the same exec through the runner locally: the sequential median,
//!   and the wall time of a batch at 32 concurrent requests (≤ 1.25 × is ≥ 0.8 × the
//!   local throughput).
//! - `fleet`: 1,000 nodes (real Bridge sessions, each with its own heartbeat timer)
//!   connected to a gateway hub in a process of its own: its RSS, node selection among
//!   them, an exec to a random node against the local runner in that process, and the
//!   hub's CPU while the fleet only heartbeats.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bridge::conn::Heartbeat;
use bridge::handshake::NodeIdentity;
use bridge::registry::NodeEntry;
use bridge::{Hub, HubConfig, NodeService, Registry, TransportKind};
use caps::LocalShell;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio_util::sync::CancellationToken;

use crate::harness::{RatioSpec, Report, median, ms};

/// Nodes in the fleet.
const FLEET: usize = 1000;

/// A private state directory with an approvals file allowing `/bin/true` to `bench`.
fn state_dir(tag: &str) -> anyhow::Result<PathBuf> {
    crate::fixtures::true_allowed_home(tag)
}

fn runner_for(home: &Path, host: &str) -> anyhow::Result<runner::Runner> {
    let fs: Arc<caps::LocalFs> = Arc::new(caps::LocalFs::new("/")?);
    let store = crate::fixtures::store(fs.clone(), home);
    let config = policy::Config::parse(
        &format!("[tools.exec]\nhost = \"{host}\"\nsecurity = \"allowlist\"\nask = \"off\"\n"),
        Path::new("config.toml"),
    )?;
    let clock: Arc<dyn approvals::Clock> = Arc::new(approvals::SystemClock);
    Ok(runner::Runner::new(
        runner::HostContext::builder(fs, store, config)
            .trusted_path(policy::TrustedPath::parse("/usr/bin:/bin"))
            .default_cwd("/")
            .clock(clock)
            .build(),
    ))
}

fn node_service(home: &Path, id: &str) -> anyhow::Result<NodeService> {
    let runner = runner_for(home, "node")?;
    let fs: Arc<caps::LocalFs> = Arc::new(caps::LocalFs::new("/")?);
    let store = crate::fixtures::store(fs.clone(), home);
    Ok(NodeService {
        node_id: id.to_owned(),
        runner,
        executor: runner::Executor::Plain {
            shell: Arc::new(LocalShell::new()),
            host: runner::RunHost::Node(id.to_owned()),
        },
        fs,
        trusted_path: policy::TrustedPath::parse("/usr/bin:/bin"),
        default_cwd: PathBuf::from("/"),
        store,
    })
}

fn token(i: usize) -> String {
    format!("wnd_bench-token-{i:08}-0123456789abcdef0123456789")
}

/// A registry in `home` approving nodes `n0..n{count}`.
fn registry(home: &Path, count: usize) -> anyhow::Result<Registry> {
    let fs: Arc<caps::LocalFs> = Arc::new(caps::LocalFs::new("/")?);
    let registry = Registry::new(fs, home);
    registry.update(|nodes| {
        for i in 0..count {
            nodes.push(NodeEntry {
                display_name: Some(format!("Bench Node {i}")),
                ..NodeEntry::approved(&format!("n{i}"), TransportKind::WebSocket, token(i), 0)
            });
        }
        Ok(())
    })?;
    Ok(registry)
}

fn clock() -> Arc<dyn Fn() -> u64 + Send + Sync> {
    Arc::new(|| approvals::Clock::now_ms(&approvals::SystemClock))
}

/// Listen for nodes on loopback for `hub`; the address.
async fn listen(hub: &Arc<Hub>) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let hub = Arc::clone(hub);
    tokio::spawn(bridge::ws::serve(listener, None, move |t| {
        let hub = Arc::clone(&hub);
        async move { hub.accept(t).await }
    }));
    Ok(addr)
}

/// Connect node `i` to `addr` and serve it with `service`.
async fn connect_node(
    addr: &str,
    i: usize,
    service: Arc<NodeService>,
    hb: Heartbeat,
) -> anyhow::Result<()> {
    let url = bridge::ws::GatewayUrl::parse(&format!("ws://{addr}"))?;
    let mut t = bridge::ws::connect(&url, None).await?;
    let me = NodeIdentity {
        node_id: format!("n{i}"),
        display_name: Some(format!("Bench Node {i}")),
        token: token(i),
    };
    let keys = bridge::handshake::node_side(&mut t, &me).await?;
    tokio::spawn(async move {
        bridge::serve_node(t, keys, hb, service, &CancellationToken::new()).await
    });
    Ok(())
}

async fn wait_connected(hub: &Hub, count: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while hub.connected() < count {
        if Instant::now() > deadline {
            bail!("only {} of {count} nodes connected", hub.connected());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

fn request() -> runner::ExecRequest {
    runner::ExecRequest::new(
        "bench",
        "bench",
        runner::Command::Argv(vec!["/bin/true".into()]),
    )
}

/// `exec-node`.
pub async fn exec_node(report: &mut Report, quick: bool) -> anyhow::Result<()> {
    let (warmup, iterations, batch) = if quick {
        (3, 10, 32)
    } else {
        (50, 400, 32 * 16)
    };
    let gw_home = state_dir("node-gw")?;
    let node_home = state_dir("node-n")?;
    let hub = Hub::new(registry(&gw_home, 1)?, HubConfig::default(), clock());
    let addr = listen(&hub).await?;
    let service = Arc::new(node_service(&node_home, "n0")?);
    connect_node(&addr, 0, service, Heartbeat::default()).await?;
    wait_connected(&hub, 1).await?;
    let local = runner_for(&node_home, "gateway")?;
    let executor = runner::Executor::Plain {
        shell: Arc::new(LocalShell::new()),
        host: runner::RunHost::Gateway,
    };
    let routes = gateway::Routes {
        gateway: executor.clone(),
        sandbox: gateway::SandboxRoute::Unavailable("not measured here".into()),
        direct: None,
        node: Some(Arc::clone(&hub)),
    };
    // exec-node-32 runs 32 at once for one agent: above the default run cap (16).
    let gw = Arc::new(
        gateway::Gateway::new(runner_for(&gw_home, "node")?, routes, None).with_limits(32, 16),
    );
    let key = gateway::SessionKey {
        agent: "bench".into(),
        session: "bench".into(),
    };
    let cancel = CancellationToken::new();
    // Both sides are measured from a task on a worker thread, as a gateway serves its
    // callers (each request is a task): the runtime's main thread, which polls
    // `block_on`, would add a cross-thread wake-up to every hand-over that no served
    // call pays.
    let sequential = {
        let (gw, key, local, executor, cancel) = (
            Arc::clone(&gw),
            key.clone(),
            local.clone(),
            executor.clone(),
            cancel.clone(),
        );
        tokio::spawn(async move {
            let run_local = || async {
                let r = local
                    .run(request(), &executor, &runner::NoEvents, &cancel)
                    .await;
                if !matches!(r.outcome, runner::Outcome::Finished { .. }) {
                    bail!("the local runner did not run /bin/true: {:?}", r.outcome);
                }
                Ok(())
            };
            let run_node = || async {
                let r = gw.exec(&key, request(), std::future::pending()).await;
                if !matches!(r.outcome, runner::Outcome::Finished { .. }) || r.host.as_str() != "n0"
                {
                    bail!("the node did not run /bin/true: {:?}", r.outcome);
                }
                // Events pile up in the session otherwise.
                let _ = gw.take_events(&key);
                Ok(())
            };
            crate::harness::compare(warmup, iterations, run_local, run_node).await
        })
    };
    let (base, node) = sequential.await??;
    report.ratio(
        RatioSpec {
            id: "exec-node",
            what: "allowlisted /bin/true on a node over a loopback WebSocket (gateway → node runner → result), sequential",
            baseline: "the same exec through the runner locally",
            unit: "ms",
            max_ratio: 1.3,
            iterations,
        },
        base,
        node,
    );
    // 32 at once: wall time of a batch, node against local.
    let concurrent = |node: bool| {
        let (gw, key, local, executor, cancel) = (&gw, &key, &local, &executor, &cancel);
        async move {
            let started = Instant::now();
            let sem = Arc::new(tokio::sync::Semaphore::new(32));
            let mut all = Vec::with_capacity(batch);
            for _ in 0..batch {
                let permit = Arc::clone(&sem).acquire_owned().await?;
                let (gw, key, local, executor, cancel) = (
                    Arc::clone(gw),
                    key.clone(),
                    local.clone(),
                    executor.clone(),
                    cancel.clone(),
                );
                all.push(tokio::spawn(async move {
                    let r = if node {
                        let r = gw.exec(&key, request(), std::future::pending()).await;
                        let _ = gw.take_events(&key);
                        r
                    } else {
                        local
                            .run(request(), &executor, &runner::NoEvents, &cancel)
                            .await
                    };
                    drop(permit);
                    matches!(r.outcome, runner::Outcome::Finished { .. })
                }));
            }
            for h in all {
                if !h.await? {
                    bail!("a concurrent run failed");
                }
            }
            Ok::<_, anyhow::Error>(started.elapsed())
        }
    };
    let rounds = if quick { 1 } else { 5 };
    let (mut local_t, mut node_t) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        local_t.push(concurrent(false).await?);
        node_t.push(concurrent(true).await?);
    }
    report.ratio(
        RatioSpec {
            id: "exec-node-32",
            what: "the same at 32 concurrent requests: wall time of a batch (≤ 1.25× is ≥ 0.8× the local throughput)",
            baseline: "the same batch through the runner locally",
            unit: "ms",
            max_ratio: 1.25,
            iterations: rounds * batch,
        },
        ms(median(&local_t)),
        ms(median(&node_t)),
    );
    hub.shutdown();
    let _ = std::fs::remove_dir_all(&gw_home);
    let _ = std::fs::remove_dir_all(&node_home);
    Ok(())
}

fn raise_nofile() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.maximum.is_some() {
        limit.current = limit.maximum;
    } else {
        limit.current = Some(65536);
    }
    let _ = setrlimit(Resource::Nofile, limit);
}

/// `fleet`: the hub runs in a child (`--child fleet-gateway DIR`) so its RSS is its own.
pub async fn fleet(report: &mut Report, quick: bool) -> anyhow::Result<()> {
    raise_nofile();
    let count = if quick { 50 } else { FLEET };
    let gw_home = state_dir("fleet-gw")?;
    let node_home = state_dir("fleet-n")?;
    registry(&gw_home, count)?;
    let exe = std::env::current_exe()?;
    let mut child = tokio::process::Command::new(exe)
        .args(["--child", "fleet-gateway"])
        .arg(&gw_home)
        .arg(count.to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut lines = BufReader::new(child.stdout.take().context("no stdout")?).lines();
    let addr = lines
        .next_line()
        .await?
        .context("the fleet gateway said nothing")?;
    let service = Arc::new(node_service(&node_home, "fleet")?);
    let started = Instant::now();
    for i in 0..count {
        connect_node(&addr, i, Arc::clone(&service), Heartbeat::default()).await?;
    }
    let connect_time = started.elapsed();
    let result = lines
        .next_line()
        .await?
        .context("the fleet gateway did not report")?;
    let v: serde_json::Value = serde_json::from_str(&result)?;
    let _ = child.kill().await;
    let _ = std::fs::remove_dir_all(&gw_home);
    let _ = std::fs::remove_dir_all(&node_home);
    eprintln!("fleet: {count} nodes connected in {connect_time:?}; {v}");
    let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    report.value(
        "fleet-rss",
        &format!("gateway hub RSS with {count} nodes connected over loopback WebSockets"),
        f("rssMiB"),
        "MiB",
        100.0,
        1,
    );
    report.value(
        "fleet-select",
        &format!("node selection among {count} connected nodes (by id, name and prefix), median"),
        f("selectUs"),
        "µs",
        10.0,
        f("selectIterations") as usize,
    );
    report.ratio(
        RatioSpec {
            id: "fleet-exec",
            what: "exec of /bin/true on a random node of the fleet (hub invoke → node runner → result)",
            baseline: "the same exec through the runner locally, in the gateway's process",
            unit: "ms",
            max_ratio: 1.3,
            iterations: f("execIterations") as usize,
        },
        f("localMs"),
        f("nodeMs"),
    );
    report.value(
        "fleet-heartbeat-cpu",
        &format!("gateway CPU while {count} nodes only heartbeat (10 s interval, a timer per connection, no broadcast)"),
        f("idleCpuPercent"),
        "% of a core",
        2.0,
        1,
    );
    Ok(())
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kib| kib / 1024.0)
        .unwrap_or(f64::NAN)
}

fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line (11 and 12 after ")").
    fields
        .get(11)
        .and_then(|u| u.parse::<u64>().ok())
        .unwrap_or(0)
        + fields
            .get(12)
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
}

/// The child: a hub with `count` approved nodes; prints its address, waits for all of
/// them, measures, prints one JSON line.
pub fn fleet_gateway(args: &[String]) -> anyhow::Result<()> {
    raise_nofile();
    let home = PathBuf::from(args.first().context("missing dir")?);
    let count: usize = args.get(1).context("missing count")?.parse()?;
    // A whole heartbeat interval (10 s) and then some; a quick run only checks the harness.
    let idle_window = Duration::from_secs(if count >= FLEET { 12 } else { 1 });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let fs: Arc<caps::LocalFs> = Arc::new(caps::LocalFs::new("/")?);
        let hub = Hub::new(Registry::new(fs, &home), HubConfig::default(), clock());
        let addr = listen(&hub).await?;
        println!("{addr}");
        wait_connected(&hub, count).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let rss = rss_mib();
        // Selection: by exact id, by display name, by id prefix — spread over the fleet.
        let queries: Vec<String> = (0..300)
            .map(|k| {
                let i = (k * 7919) % count;
                match k % 3 {
                    0 => format!("n{i}"),
                    1 => format!("bench node {i}"),
                    _ => format!("n{i}"),
                }
            })
            .collect();
        let mut samples = Vec::new();
        for _ in 0..10 {
            for q in &queries {
                let t = Instant::now();
                let chosen = hub.select(Some(q), None)?;
                samples.push(t.elapsed());
                std::hint::black_box(chosen);
            }
        }
        let select_us = median(&samples).as_secs_f64() * 1e6;
        // Exec on random nodes against the local runner in this process.
        let local_home = home.join("local");
        std::fs::create_dir_all(&local_home)?;
        std::fs::set_permissions(
            &local_home,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )?;
        let true_path = std::fs::canonicalize("/bin/true")?;
        let approvals = serde_json::json!({"version": 1,
            "defaults": {"security": "allowlist", "ask": "off", "askFallback": "deny"},
            "agents": {"bench": {"allowlist": [{"pattern": true_path}]}}});
        let path = local_home.join("exec-approvals.json");
        std::fs::write(&path, serde_json::to_vec(&approvals)?)?;
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        let local = runner_for(&local_home, "gateway")?;
        let executor = runner::Executor::Plain {
            shell: Arc::new(LocalShell::new()),
            host: runner::RunHost::Gateway,
        };
        let cancel = CancellationToken::new();
        let iterations = 200;
        // Called from a task on a worker, as a gateway serves a request (see exec-node).
        let measured = {
            let (hub, local, executor, cancel) = (
                Arc::clone(&hub),
                local.clone(),
                executor.clone(),
                cancel.clone(),
            );
            tokio::spawn(async move {
                let (mut local_t, mut node_t) = (Vec::new(), Vec::new());
                for k in 0..iterations + 20 {
                    let t = Instant::now();
                    let r = local
                        .run(request(), &executor, &runner::NoEvents, &cancel)
                        .await;
                    let l = t.elapsed();
                    if !matches!(r.outcome, runner::Outcome::Finished { .. }) {
                        bail!("local run failed: {:?}", r.outcome);
                    }
                    let node = hub.select(Some(&format!("n{}", (k * 104_729) % count)), None)?;
                    let params = serde_json::to_value(bridge::message::RunParams {
                        run_id: format!("run-{k}"),
                        agent: "bench".into(),
                        session: "bench".into(),
                        request: policy::ExecArgs {
                            security: Some(policy::Security::Allowlist),
                            ask: Some(policy::Ask::Off),
                            ..policy::ExecArgs::new(policy::Command::Argv(vec!["/bin/true".into()]))
                        },
                        stream: false,
                        notices: false,
                    })?;
                    let t = Instant::now();
                    let v = node
                        .invoke(
                            bridge::message::SYSTEM_RUN,
                            params,
                            None,
                            &cancel,
                            Duration::from_secs(1),
                        )
                        .await?;
                    let n = t.elapsed();
                    let result: bridge::message::RunResult = serde_json::from_value(v)?;
                    if !matches!(
                        result.outcome,
                        bridge::message::WireOutcome::Finished { .. }
                    ) {
                        bail!("node run failed: {:?}", result.outcome);
                    }
                    if k >= 20 {
                        local_t.push(l);
                        node_t.push(n);
                    }
                }
                Ok::<_, anyhow::Error>((local_t, node_t))
            })
        };
        let (local_t, node_t) = measured.await??;
        // Idle: the fleet only heartbeats.
        let (ticks0, t0) = (cpu_ticks(), Instant::now());
        tokio::time::sleep(idle_window).await;
        let hz = rustix::param::clock_ticks_per_second() as f64;
        let idle = (cpu_ticks() - ticks0) as f64 / hz / t0.elapsed().as_secs_f64() * 100.0;
        println!(
            "{}",
            serde_json::json!({
                "connected": hub.connected(),
                "rssMiB": rss,
                "selectUs": select_us,
                "selectIterations": samples.len(),
                "localMs": ms(median(&local_t)),
                "nodeMs": ms(median(&node_t)),
                "execIterations": iterations,
                "idleCpuPercent": idle,
            })
        );
        Ok(())
    })
}
