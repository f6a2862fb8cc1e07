//! Runs that outlive their call, through a real MCP client (rmcp) against the release
//! `warden` binary:
//!
//! - `process-roundtrip`: a line typed on the terminal of a background `cat` and read
//!   back (`process` write, then poll until cat's copy is there), over `warden mcp`
//!   (stdio), p50 in absolute time.
//! - `exec-background`: the return of `exec` with `background: true` of `/bin/true`,
//!   against a synchronous `exec` of `/bin/true`, interleaved.
//! - `idle-runs` / `idle-runs-cpu`: 100 background `sleep`s nobody reads, in `warden
//!   gateway run`: its RSS growth, and its CPU while they idle.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use crate::harness::{RatioSpec, Report, compare, median, ms};
use crate::mcp_bench::{Client, Setup, args, exec_true, http_client, stdio_client};

/// The rows [`run`] measures.
pub const ROWS: &[&str] = &[
    "process-roundtrip",
    "exec-background",
    "idle-runs",
    "idle-runs-cpu",
];

/// Idle runs held at once in `idle-runs`.
const IDLE_RUNS: usize = 100;

async fn tool(client: &Client, name: &str, arguments: Value) -> anyhow::Result<Value> {
    let r = client
        .call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(args(arguments)))
        .await?;
    let v = r.structured_content.unwrap_or_default();
    if r.is_error == Some(true) {
        bail!("{name}: {v}");
    }
    Ok(v)
}

/// Start `argv` in the background (on a terminal with `tty`); its run id.
async fn background(client: &Client, argv: &[&str], tty: bool) -> anyhow::Result<String> {
    let v = tool(
        client,
        "exec",
        json!({"argv": argv, "background": true, "tty": tty}),
    )
    .await?;
    v["runId"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("no runId in {v}"))
}

/// Poll `run` from `cursor` until its output holds `needle`; the cursor after it.
async fn read_until(
    client: &Client,
    run: &str,
    mut cursor: u64,
    needle: &str,
) -> anyhow::Result<u64> {
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !seen.contains(needle) {
        if Instant::now() > deadline {
            bail!("{needle:?} never came from run {run}: {seen:?}");
        }
        let v = tool(
            client,
            "process",
            json!({"action": "poll", "runId": run, "cursor": cursor, "wait": 5}),
        )
        .await?;
        seen.push_str(v["output"].as_str().unwrap_or_default());
        cursor = v["cursor"].as_u64().context("no cursor")?;
    }
    Ok(cursor)
}

/// p50 in ms of one line typed on `cat`'s terminal and read back.
async fn roundtrip(client: &Client, warmup: usize, iterations: usize) -> anyhow::Result<f64> {
    let run = background(client, &["/bin/cat"], true).await?;
    let mut cursor = 0;
    let mut samples = Vec::with_capacity(iterations);
    for i in 0..warmup + iterations {
        let line = format!("line-{i}");
        let start = Instant::now();
        tool(
            client,
            "process",
            json!({"action": "write", "runId": run, "input": line, "keys": ["Enter"]}),
        )
        .await?;
        // The terminal's echo, then cat's copy.
        cursor = read_until(client, &run, cursor, &format!("{line}\r\n{line}\r\n")).await?;
        if i >= warmup {
            samples.push(start.elapsed());
        }
    }
    tool(client, "process", json!({"action": "kill", "runId": run})).await?;
    Ok(ms(median(&samples)))
}

/// One background start of `/bin/true`: returns at once.
async fn background_true(client: &Client) -> anyhow::Result<()> {
    let v = tool(
        client,
        "exec",
        json!({"argv": ["/bin/true"], "background": true}),
    )
    .await?;
    if !matches!(
        v["status"].as_str(),
        Some("pending" | "running" | "finished")
    ) {
        bail!("exec background over MCP: {v}");
    }
    Ok(())
}

fn proc_status_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no {field} for {pid}"))
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line (11 and 12 after ")").
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    Ok(tick(11).context("utime")? + tick(12).context("stime")?)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// RSS growth (MiB) of the gateway with [`IDLE_RUNS`] idle runs, and its CPU (% of a
/// core) while they idle for `idle`.
async fn idle_runs(setup: &Setup, idle: Duration) -> anyhow::Result<(f64, f64)> {
    let (gateway, client) = http_client(setup).await?;
    let pid = gateway.id().context("gateway pid")?;
    // A few runs first, so that what every run needs once (the runtime's threads, the
    // containment's first cgroup) is not counted as the runs' cost.
    for _ in 0..3 {
        let run = background(&client, &["/bin/sleep", "3600"], false).await?;
        tool(&client, "process", json!({"action": "kill", "runId": run})).await?;
    }
    let before = proc_status_kib(pid, "VmRSS:")?;
    let mut runs = Vec::with_capacity(IDLE_RUNS);
    for _ in 0..IDLE_RUNS {
        runs.push(background(&client, &["/bin/sleep", "3600"], false).await?);
    }
    // Every run started (none is still being decided or spawned).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let listed = tool(&client, "process", json!({"action": "list"})).await?;
        let running = listed["runs"]
            .as_array()
            .map(|r| r.iter().filter(|r| r["state"] == "running").count())
            .unwrap_or(0);
        if running >= IDLE_RUNS {
            break;
        }
        if Instant::now() > deadline {
            bail!("only {running} of {IDLE_RUNS} runs started");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = proc_status_kib(pid, "VmRSS:")?;
    // For context: where the memory went.
    let threads = std::fs::read_to_string(format!("/proc/{pid}/status"))?
        .lines()
        .find_map(|l| l.strip_prefix("Threads:").map(|t| t.trim().to_owned()))
        .unwrap_or_default();
    eprintln!(
        "idle-runs: RSS {before} → {after} KiB (anonymous {} KiB), {threads} threads",
        proc_status_kib(pid, "RssAnon:")?
    );
    let ticks_before = cpu_ticks(pid)?;
    let started = Instant::now();
    tokio::time::sleep(idle).await;
    let cpu = (cpu_ticks(pid)? - ticks_before) as f64
        / TICKS_PER_SECOND
        / started.elapsed().as_secs_f64()
        * 100.0;
    for run in runs {
        tool(&client, "process", json!({"action": "kill", "runId": run})).await?;
    }
    client.cancel().await?;
    drop(gateway);
    Ok((after.saturating_sub(before) as f64 / 1024.0, cpu))
}

/// Its rows, as `wanted` says.
pub async fn run(
    report: &mut Report,
    quick: bool,
    wanted: &dyn Fn(&str) -> bool,
) -> anyhow::Result<()> {
    let (warmup, iterations) = if quick { (3, 10) } else { (50, 400) };
    let setup = Setup::new()?;
    let stdio = stdio_client(&setup).await?;
    if wanted("process-roundtrip") {
        report.value(
            "process-roundtrip",
            "a line typed on the terminal of a background `cat` (`process` write with Enter) and read back (`process` poll until cat's copy), over `warden mcp` (stdio, rmcp client), p50",
            roundtrip(&stdio, warmup, iterations).await?,
            "ms",
            1.0,
            iterations,
        );
    }
    if wanted("exec-background") {
        let (base, warden) = compare(
            warmup,
            iterations,
            || exec_true(&stdio),
            || background_true(&stdio),
        )
        .await?;
        report.ratio(
            RatioSpec {
                id: "exec-background",
                what: "the return of `exec` of /bin/true with `background: true` through `warden mcp` (stdio, rmcp client), p50 of sequential calls",
                baseline: "a synchronous `exec` of /bin/true, the same way, interleaved",
                unit: "ms",
                max_ratio: 1.1,
                iterations,
            },
            base,
            warden,
        );
    }
    stdio.cancel().await?;
    if wanted("idle-runs") {
        let idle = if quick {
            Duration::from_secs(2)
        } else {
            Duration::from_secs(10)
        };
        let (rss, cpu) = idle_runs(&setup, idle).await?;
        report.value(
            "idle-runs",
            "RSS growth of `warden gateway run` with 100 background `sleep` runs nobody reads (each with its 1 MiB output buffer, input queue and supervision)",
            rss,
            "MiB",
            16.0,
            1,
        );
        report.value(
            "idle-runs-cpu",
            "the gateway's CPU while those 100 runs idle",
            cpu,
            "% of a core",
            1.0,
            1,
        );
    }
    Ok(())
}
