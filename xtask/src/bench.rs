//! `cargo xtask bench [--quick]`: build the benchmark binary in release mode and run it.
//! The binary writes `target/bench/report.json` and `target/bench/report.md`.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

/// Run the benchmark suite.
pub fn run(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out_dir = root.join("target/bench");
    // The sandbox benchmark runs the `warden` binary inside bubblewrap as its helper.
    let built = Command::new(&cargo)
        .args(["build", "--release", "--locked", "--package", "warden-cli"])
        .current_dir(root)
        .status()
        .context("building the warden binary")?;
    if !built.success() {
        bail!("building the warden binary failed ({built})");
    }
    let status = Command::new(cargo)
        .args([
            "run",
            "--release",
            "--locked",
            "--package",
            "warden-bench",
            "--",
        ])
        .arg("--out")
        .arg(&out_dir)
        .args(args)
        .current_dir(root)
        .status()
        .context("running the benchmark binary")?;
    if !status.success() {
        bail!("benchmarks failed ({status})");
    }
    Ok(())
}
