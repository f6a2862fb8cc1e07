//! `cargo xtask musl-helper [--debug] [--install DIR]`: the small helper
//! (`warden-sandbox-helper`) built for musl, statically linked.
//!
//! The helper starts once per sandboxed run under bubblewrap, and as `warden exec`'s
//! companion. A glibc program's start on a virtual machine is dominated by glibc's CPU
//! probing (`init_cpu_features`, and on AMD `handle_amd`'s cache queries: each `cpuid`
//! traps to the hypervisor); a static musl program does none of it. Measured here: the
//! helper's `--version` 0.83 → 0.39 ms; `exec-sandbox-plan-bwrap` 1.16× → 1.08×,
//! `exec-sandbox-cli` 1.62× → 1.49× (docs/benchmarks.md). `warden` itself stays a glibc
//! program (its resolver, allocator and spawning are glibc's: `caps`' spawn refuses to
//! start anything on another C library).
//!
//! Without the musl target (`rustup target add x86_64-unknown-linux-musl`) nothing is
//! built and the callers say so: the glibc helper cargo built is used.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

/// The musl target for this machine's architecture.
fn target() -> String {
    format!("{}-unknown-linux-musl", std::env::consts::ARCH)
}

/// Whether the toolchain has the musl target's standard library.
pub fn target_installed(root: &Path) -> bool {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    Command::new(rustc)
        .args(["--print", "target-libdir", "--target", &target()])
        .current_dir(root)
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
        .is_some_and(|dir| has_rlibs(&dir))
}

/// Whether `dir` holds the target's compiled standard library (rustc names the
/// directory whether or not the target is installed).
fn has_rlibs(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("libstd-"))
    })
}

/// Build the helper for musl (`release` or debug); where it was built, or `None` (said
/// on stderr) when the target is not installed.
pub fn build_helper(root: &Path, release: bool) -> anyhow::Result<Option<PathBuf>> {
    let target = target();
    if !target_installed(root) {
        eprintln!(
            "xtask: the {target} target is not installed (rustup target add {target}): the glibc helper is used"
        );
        return Ok(None);
    }
    let mut args = vec![
        "build",
        "--locked",
        "--target",
        &target,
        "--package",
        "warden-cli",
        "--bin",
        "warden-sandbox-helper",
    ];
    if release {
        args.push("--release");
    }
    eprintln!("xtask: cargo {}", args.join(" "));
    let status = crate::cargo()
        .args(&args)
        .current_dir(root)
        .status()
        .context("building the musl helper")?;
    if !status.success() {
        bail!("building the helper for {target} failed ({status})");
    }
    let profile = if release { "release" } else { "debug" };
    Ok(Some(
        root.join("target")
            .join(&target)
            .join(profile)
            .join("warden-sandbox-helper"),
    ))
}

/// `cargo xtask musl-helper [--debug] [--install DIR]`: build it, and put it in `DIR`
/// (by default next to cargo's own `warden` of the same profile).
pub fn run(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let mut release = true;
    let mut install: Option<PathBuf> = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--debug" => release = false,
            "--install" => {
                let dir = rest.next().context("--install needs a directory")?;
                install = Some(PathBuf::from(dir));
            }
            other => {
                bail!("unknown argument {other:?} (usage: musl-helper [--debug] [--install DIR])")
            }
        }
    }
    let Some(built) = build_helper(root, release)? else {
        bail!("nothing was built");
    };
    let dir = install.unwrap_or_else(|| {
        root.join("target")
            .join(if release { "release" } else { "debug" })
    });
    if !dir.join("warden").exists() {
        eprintln!(
            "xtask: {} has no warden: the helper is used only next to it",
            dir.display()
        );
    }
    let placed = crate::install::place(&built, &dir, "warden-sandbox-helper")?;
    eprintln!("xtask: the static musl helper is {}", placed.display());
    Ok(())
}
