//! `cargo xtask ci`: everything CI checks, in the order that fails fastest.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

fn cargo(root: &Path, args: &[&str]) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("xtask ci: cargo {}", args.join(" "));
    let status = Command::new(&cargo)
        .args(args)
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
    crate::bench::run(root, &["--quick".to_string()])?;
    eprintln!("xtask ci: all checks passed");
    Ok(())
}
