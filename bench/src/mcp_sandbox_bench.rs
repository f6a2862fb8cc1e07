//! `mcp-exec-sandbox`: a sandboxed `/bin/true` through `warden mcp` over stdio (the rmcp
//! client of `mcp-exec-stdio`), p50 of sequential calls, against bare bubblewrap with the
//! same namespace flags as a process (`exec-sandbox-cli`'s baseline). The server runs as
//! `warden exec` does in `exec-sandbox-cli`: a fresh home's defaults, so `exec` runs on
//! the sandbox host, from a workspace under /var/tmp, with a minimal environment.

use std::path::Path;

use anyhow::bail;

use crate::harness::{RatioSpec, Report, compare};
use crate::mcp_bench::{exec_true, serve_stdio};
use crate::sandbox_bench::{Dirs, bare_bwrap, find_bwrap};

/// The row, or a loud skip where bubblewrap is missing.
pub async fn run(report: &mut Report, quick: bool) -> anyhow::Result<()> {
    let Some(bwrap) = find_bwrap() else {
        println!("mcp-exec-sandbox: SKIPPED (bubblewrap is not installed)");
        return Ok(());
    };
    let warden = std::env::current_exe()?.with_file_name("warden");
    if !warden.is_file() {
        bail!(
            "{} is missing (cargo xtask bench builds it)",
            warden.display()
        );
    }
    let (warmup, iterations) = if quick { (2, 5) } else { (20, 200) };
    let dirs = Dirs::new("mcpsb")?;
    let client = serve_stdio(server(&warden, &dirs), &dirs.workspace).await?;
    let (base, through_mcp) = compare(
        warmup,
        iterations,
        || bare_bwrap(&bwrap),
        || exec_true(&client),
    )
    .await?;
    report.ratio(
        RatioSpec {
            id: "mcp-exec-sandbox",
            what: "sandboxed /bin/true through `warden mcp` (stdio, rmcp client) on the sandbox host with a fresh home's defaults, p50 of sequential calls",
            baseline: "bare bwrap with the same namespace flags, as a process",
            unit: "ms",
            max_ratio: 1.0,
            iterations,
        },
        base,
        through_mcp,
    );
    client.cancel().await?;
    Ok(())
}

/// `warden` set up as `exec-sandbox-cli` runs `warden exec`.
fn server(warden: &Path, dirs: &Dirs) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(warden);
    cmd.current_dir(&dirs.workspace)
        .env_clear()
        .env("HOME", &dirs.home)
        .env("WARDEN_HOME", &dirs.home)
        .env("PATH", "/usr/bin:/bin")
        .env("WARDEN_LOG", "error");
    cmd
}
