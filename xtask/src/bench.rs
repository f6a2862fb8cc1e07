//! `cargo xtask bench [--quick]`: build the benchmark binary in release mode and run it.
//! The binary writes `target/bench/report.json` and `target/bench/report.md`.

use std::path::Path;

use anyhow::{Context, bail};

/// Run the benchmark suite.
pub fn run(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let out_dir = root.join("target/bench");
    // `warden` and its helper as `cargo xtask install` builds them (install.rs): the
    // sandbox benchmarks run both, as a user's `warden exec` does.
    crate::install::build_glibc_helper(root)?;
    if !crate::install::build_warden(root)? {
        eprintln!("xtask bench: measuring a dynamically linked warden");
    }
    crate::hot_symbols::report_match(root);
    // The helper as docs/configuration.md recommends installing it: built for musl,
    // statically, where the toolchain can (else the glibc one cargo just built, said).
    // `--quick` checks the harness, not the numbers: it spares that second build.
    let quick = args.iter().any(|a| a == "--quick");
    let musl = if quick {
        Ok(None)
    } else {
        crate::musl::build_helper(root, true)
    };
    match musl {
        Ok(Some(helper)) => {
            let placed = crate::install::place(
                &helper,
                &root.join("target/release"),
                "warden-sandbox-helper",
            )?;
            eprintln!(
                "xtask bench: measuring the static musl helper ({})",
                placed.display()
            );
        }
        Ok(None) => eprintln!("xtask bench: measuring the glibc helper"),
        Err(e) => eprintln!("xtask bench: measuring the glibc helper: {e:#}"),
    }
    let status = crate::cargo()
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
