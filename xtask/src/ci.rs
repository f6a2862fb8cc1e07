//! `cargo xtask ci`: everything CI checks, in the order that fails fastest.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

fn cargo(root: &Path, args: &[&str]) -> anyhow::Result<()> {
    cargo_with(root, args, &[])
}

/// `cargo args` with `env` set.
fn cargo_with(root: &Path, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let shown: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    eprintln!("xtask ci: {}cargo {}", shown.concat(), args.join(" "));
    let status = Command::new(&cargo)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(root)
        .status()
        .with_context(|| format!("running cargo {}", args.join(" ")))?;
    if !status.success() {
        bail!("cargo {} failed ({status})", args.join(" "));
    }
    Ok(())
}

/// Run the full CI sequence.
pub fn run(root: &Path) -> anyhow::Result<()> {
    cargo(root, &["fmt", "--all", "--check"])?;
    crate::lint::run(root)?;
    cargo(
        root,
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--locked",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    cargo(root, &["test", "--workspace", "--locked", "--no-fail-fast"])?;
    // The sandbox's own checks once more with bubblewrap building it (the run above used
    // Warden's own namespace builder, as `sandbox.builder = "auto"` does here).
    cargo_with(
        root,
        &[
            "test",
            "-p",
            "warden-cli",
            "--locked",
            "--test",
            "e2e_sandbox",
        ],
        &[("WARDEN_TEST_BUILDER", "bubblewrap")],
    )?;
    crate::bench::run(root, &["--quick".to_string()])?;
    eprintln!("xtask ci: all checks passed");
    Ok(())
}
