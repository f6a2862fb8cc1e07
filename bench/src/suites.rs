//! The benchmarks themselves (ids as in docs/benchmarks.md).

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use caps::{ExecOptions, LocalShell, Shell};

use crate::harness::{RatioSpec, Report, compare, median};
use crate::in_process::InProcess;

/// Run every benchmark whose id matches `filter` (all when empty).
pub async fn run_all(report: &mut Report, quick: bool, filter: &[&String]) -> anyhow::Result<()> {
    let wanted = |id: &str| filter.is_empty() || filter.iter().any(|f| id.contains(f.as_str()));
    if wanted("exec-local") {
        exec_local(report, quick).await?;
    }
    if wanted("output") {
        output(report, quick).await?;
    }
    if wanted("exec-gateway") {
        exec_gateway(report, quick).await?;
    }
    if crate::audit_bench::ROWS.iter().any(|id| wanted(id)) {
        crate::audit_bench::run(report, quick, &wanted).await?;
    }
    // A row id names its suite's rows only in part (`exec-sandbox-cli`), so each suite runs
    // when any of its rows is wanted.
    if crate::sandbox_bench::ROWS.iter().any(|id| wanted(id)) {
        crate::sandbox_bench::run(report, quick, &wanted).await?;
    }
    if crate::egress_bench::ROWS.iter().any(|id| wanted(id)) {
        crate::egress_bench::run(report, quick, &wanted).await?;
    }
    if wanted("mcp-exec-sandbox") {
        crate::mcp_sandbox_bench::run(report, quick).await?;
    }
    if wanted("decide") {
        decide(report, quick).await?;
    }
    if wanted("ask-ipc") {
        ask_ipc(report, quick).await?;
    }
    if wanted("exec-node") {
        crate::bridge_bench::exec_node(report, quick).await?;
    }
    if wanted("fleet") {
        crate::bridge_bench::fleet(report, quick).await?;
    }
    if wanted("gateway-soak") {
        crate::soak_bench::run(report, quick).await?;
    }
    if crate::process_bench::ROWS.iter().any(|id| wanted(id)) {
        crate::process_bench::run(report, quick, &wanted).await?;
    }
    if crate::mcp_bench::ROWS.iter().any(|id| wanted(id)) {
        // The `warden` binary holds every run in the containment this host allows (a
        // cgroup per run here); the in-process baseline does the same, so that the ratio
        // is what MCP costs, not what a cgroup costs.
        let helper = std::env::current_exe()?.with_file_name("warden-sandbox-helper");
        let gateway = InProcess::new(Some(caps::process::Containment::detect(Some(helper))))?;
        crate::mcp_bench::run(report, quick, &gateway).await?;
    }
    Ok(())
}

/// Median of a bare `/bin/true` spawn+wait (the baseline of several rows).
async fn bare_true(iterations: usize) -> anyhow::Result<f64> {
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let started = Instant::now();
        let status = tokio::process::Command::new("/bin/true").status().await?;
        if !status.success() {
            bail!("/bin/true failed");
        }
        samples.push(started.elapsed());
    }
    Ok(crate::harness::ms(median(&samples)))
}

/// `decide`: see `decide.rs`.
async fn decide(report: &mut Report, quick: bool) -> anyhow::Result<()> {
    let rounds = if quick { 1 } else { 5 };
    let base = bare_true(if quick { 20 } else { 300 }).await?;
    let warden = crate::harness::ms(crate::decide::median_decision(rounds));
    report.ratio(
        RatioSpec {
            id: "decide",
            what: "full policy decision, 1,000 realistic commands × 1,000 argument-aware rules + profiles (median)",
            baseline: "bare spawn+wait of /bin/true",
            unit: "ms",
            max_ratio: 0.01,
            iterations: rounds * 1000,
        },
        base,
        warden,
    );
    Ok(())
}

/// `ask-ipc`: one approval round trip (connect, challenge, HMAC both ways, decision)
/// against an approver that answers at once.
async fn ask_ipc(report: &mut Report, quick: bool) -> anyhow::Result<()> {
    let iterations = if quick { 20 } else { 500 };
    let round_trip = crate::ipc_bench::median_round_trip(iterations).await?;
    let base = bare_true(if quick { 20 } else { 300 }).await?;
    report.ratio(
        RatioSpec {
            id: "ask-ipc",
            what: "one approval round trip over the Unix socket (challenge, HMAC both ways)",
            baseline: "bare spawn+wait of /bin/true",
            unit: "ms",
            max_ratio: 0.3,
            iterations,
        },
        base,
        crate::harness::ms(round_trip),
    );
    Ok(())
}

fn true_options() -> ExecOptions {
    ExecOptions::new("/", Duration::from_secs(30)).with_env("PATH", "/usr/bin:/bin")
}

/// `exec-local`: `/bin/true` through the local provider vs a bare tokio spawn.
async fn exec_local(report: &mut Report, quick: bool) -> anyhow::Result<()> {
    let (warmup, iterations) = if quick { (3, 10) } else { (50, 500) };
    let shell = LocalShell::new();
    let options = true_options();
    let argv = vec!["/bin/true".to_string()];
    let (base, warden) = compare(
        warmup,
        iterations,
        || async {
            let status = tokio::process::Command::new("/bin/true")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()?
                .wait()
                .await?;
            if !status.success() {
                bail!("/bin/true failed");
            }
            Ok(())
        },
        || async {
            let out = shell.exec(&argv, &options).await?;
            if !out.status.success() {
                bail!("/bin/true failed through the local provider");
            }
            Ok(())
        },
    )
    .await?;
    report.ratio(
        RatioSpec {
            id: "exec-local",
            what: "/bin/true through caps::LocalShell (own session, pipes, pidfd, group kill)",
            baseline: "bare tokio::process spawn+wait of /bin/true",
            unit: "ms",
            max_ratio: 1.10,
            iterations,
        },
        base,
        warden,
    );
    Ok(())
}

const GIB: u64 = 1 << 30;

/// `output`: 1 GiB of stdout captured under the 200,000-byte cap, vs writing it to
/// /dev/null; plus the peak-RSS growth of a fresh process doing the capture.
async fn output(report: &mut Report, quick: bool) -> anyhow::Result<()> {
    let (warmup, iterations, bytes) = if quick { (0, 1, 64 << 20) } else { (1, 7, GIB) };
    let size = bytes.to_string();
    let shell = LocalShell::new();
    let options = true_options();
    let argv = vec![
        "head".to_string(),
        "-c".to_string(),
        size.clone(),
        "/dev/zero".to_string(),
    ];
    let (base, warden) = compare(
        warmup,
        iterations,
        || async {
            let devnull = std::fs::File::create("/dev/null")?;
            let status = tokio::process::Command::new("head")
                .args(["-c", &size, "/dev/zero"])
                .stdout(devnull)
                .status()
                .await?;
            if !status.success() {
                bail!("head failed");
            }
            Ok(())
        },
        || async {
            let out = shell.exec(&argv, &options).await?;
            if !out.truncated || out.combined.len() > caps::DEFAULT_MAX_OUTPUT_BYTES + 256 {
                bail!("capture did not apply the cap");
            }
            Ok(())
        },
    )
    .await?;
    // The physical floor of any pipe-based capture: the same bytes through a pipe into
    // `cat > /dev/null` (no capture at all). The official baseline writes straight to
    // /dev/null, which the kernel discards without copying; this row shows how much of
    // the gap is the pipe itself.
    let (floor, warden_again) = compare(
        0,
        iterations,
        || async {
            let mut head = std::process::Command::new("head")
                .args(["-c", &size, "/dev/zero"])
                .stdout(Stdio::piped())
                .spawn()?;
            let pipe = head.stdout.take().context("head stdout")?;
            let devnull = std::fs::File::create("/dev/null")?;
            let cat = tokio::process::Command::new("cat")
                .stdin(pipe)
                .stdout(devnull)
                .status();
            let status = cat.await?;
            head.wait()?;
            if !status.success() {
                bail!("cat failed");
            }
            Ok(())
        },
        || async {
            shell.exec(&argv, &options).await?;
            Ok(())
        },
    )
    .await?;
    report.ratio(
        RatioSpec {
            id: "output",
            what: &format!(
                "{} MiB of stdout captured with the 200,000-byte cap",
                bytes >> 20
            ),
            baseline: "head -c N /dev/zero > /dev/null",
            unit: "ms",
            max_ratio: 1.2,
            iterations,
        },
        base,
        warden,
    );
    report.ratio(
        RatioSpec {
            id: "output-pipe-floor",
            what: "the same capture, against the pipe floor (informational)",
            baseline: "head -c N /dev/zero | cat > /dev/null",
            unit: "ms",
            max_ratio: 1.2,
            iterations,
        },
        floor,
        warden_again,
    );

    // Peak RSS growth, measured in a fresh process so earlier work cannot hide it.
    let exe = std::env::current_exe()?;
    let mut growths = Vec::new();
    for _ in 0..if quick { 1 } else { 3 } {
        let out = std::process::Command::new(&exe)
            .args(["--child", "output-rss", &size])
            .output()
            .context("running the RSS child")?;
        if !out.status.success() {
            bail!("RSS child failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let kib: u64 = String::from_utf8_lossy(&out.stdout).trim().parse()?;
        growths.push(Duration::from_micros(kib)); // reuse median(): 1 "µs" = 1 KiB
    }
    let growth_mib = median(&growths).as_micros() as f64 / 1024.0;
    report.value(
        "output-rss",
        "peak RSS growth of the capturing process during the output benchmark",
        growth_mib,
        "MiB",
        4.0,
        growths.len(),
    );
    Ok(())
}

/// `--child output-rss BYTES`: capture BYTES of output and print the growth of VmHWM in KiB.
pub fn child_main(args: &[String]) -> anyhow::Result<()> {
    match args.first().map(String::as_str) {
        Some("output-rss") => {
            let size = args.get(1).context("missing size")?.clone();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let shell = LocalShell::new();
            let options = true_options();
            // Warm up the runtime and the spawn path so one-off allocations are excluded.
            runtime.block_on(shell.exec(&["/bin/true".to_string()], &options))?;
            let before = vm_hwm_kib()?;
            let started = Instant::now();
            let argv = vec![
                "head".to_string(),
                "-c".to_string(),
                size,
                "/dev/zero".to_string(),
            ];
            let out = runtime.block_on(shell.exec(&argv, &options))?;
            let _ = (started.elapsed(), out.truncated);
            let after = vm_hwm_kib()?;
            println!("{}", after.saturating_sub(before));
            Ok(())
        }
        Some("fleet-gateway") => crate::bridge_bench::fleet_gateway(&args[1..]),
        Some("decide-loop") => {
            crate::decide::decide_loop();
            Ok(())
        }
        Some("decide-profile") => {
            crate::decide::profile();
            Ok(())
        }
        other => bail!("unknown child benchmark {other:?}"),
    }
}

fn vm_hwm_kib() -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    for line in status.lines() {
        if let Some(rest) = line.strip_prefix("VmHWM:") {
            return Ok(rest.trim().trim_end_matches("kB").trim().parse()?);
        }
    }
    bail!("VmHWM not found in /proc/self/status")
}

/// `exec-gateway`: an allowlisted `/bin/true` through the whole runner on the gateway
/// host (approvals file, policy, environment, spawn in its own session, capture, events).
async fn exec_gateway(report: &mut Report, quick: bool) -> anyhow::Result<()> {
    let (warmup, iterations) = if quick { (3, 10) } else { (50, 500) };
    let gateway = InProcess::new(None)?;
    let (base, warden) = compare(
        warmup,
        iterations,
        || async {
            let status = tokio::process::Command::new("/bin/true")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()?
                .wait()
                .await?;
            if !status.success() {
                bail!("/bin/true failed");
            }
            Ok(())
        },
        || gateway.exec_true(),
    )
    .await?;
    report.ratio(
        RatioSpec {
            id: "exec-gateway",
            what: "allowlisted /bin/true through the runner (approvals file, policy, env, spawn, capture, events)",
            baseline: "bare tokio::process spawn+wait of /bin/true",
            unit: "ms",
            max_ratio: 1.15,
            iterations,
        },
        base,
        warden,
    );
    Ok(())
}
