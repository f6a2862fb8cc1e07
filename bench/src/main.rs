//! The benchmark binary behind `cargo xtask bench`. Every figure is a ratio against a
//! baseline measured in the same run (medians after a warm-up), because the machines are
//! shared and noisy; absolute times are reported for context only.
// Benchmarks measure bare processes and files as baselines.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// The benchmark binary reports to the terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod audit_bench;
mod bridge_bench;
mod decide;
mod egress_bench;
mod fixtures;
mod harness;
mod in_process;
mod ipc_bench;
mod mcp_bench;
mod mcp_sandbox_bench;
mod process_bench;
mod sandbox_bench;
mod soak_bench;
mod suites;

use std::path::PathBuf;

use harness::Report;

/// The same allocator as the `warden` binary, so figures describe what users run.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Internal entry point: one measured run in a fresh process (for peak-RSS figures).
    if args.first().map(String::as_str) == Some("--child") {
        return suites::child_main(&args[1..]);
    }
    let quick = args.iter().any(|a| a == "--quick");
    let out_dir = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/bench"));
    let filter: Vec<&String> = args
        .iter()
        .enumerate()
        .filter(|(i, a)| !a.starts_with("--") && (*i == 0 || args[*i - 1] != "--out"))
        .map(|(_, a)| a)
        .collect();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut report = Report::new(quick);
    runtime.block_on(suites::run_all(&mut report, quick, &filter))?;
    report.write(&out_dir)?;
    println!("{}", report.markdown());
    if quick {
        println!("(quick mode: harness check only, figures are not judged)");
    }
    Ok(())
}
