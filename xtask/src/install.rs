//! `cargo xtask install DIR`: Warden's two programs built as they should run, and put in
//! `DIR` — `warden` statically linked with glibc, and the helper statically linked with
//! musl (`musl.rs`). The benchmarks and `cargo xtask hot-symbols` build `warden` the same
//! way, so what they measure is what this installs.
//!
//! Why static: every `warden exec` is a new `warden` process, and on a virtual machine a
//! dynamically linked one spends a good part of its start in the loader — mapping
//! `libc`, `libm` and `libgcc_s`, binding every imported name, running their
//! constructors — before `main`. Linked statically, `warden --version` took 1.49 ms instead of 1.90 ms
//! here, and a whole `warden exec -- /bin/true` about 1 ms less (docs/benchmarks.md,
//! stop 56). The binary stays position independent (`static-pie`: its address is still
//! random), with its relocations read-only after start (`BIND_NOW`, RELRO).
//!
//! Why glibc and not musl, as the helper: `caps`' spawn closes inherited descriptors with
//! glibc's `posix_spawn_file_actions_addclosefrom_np` and refuses to start anything on a C
//! library without it. Static glibc looks names up itself for nsswitch.conf's `files` and
//! `dns` (Debian's default); another module named there (`resolve`, `mdns4`, ...) is
//! loaded from the system at run time, which needs the glibc `warden` was built with —
//! one more reason to build where it runs, as cargo does.
//!
//! How: `cargo rustc` gives `-C target-feature=+crt-static` to the `warden` binary's own
//! compilation only. The C runtime and libraries a binary links are chosen when it is
//! linked, by its own crate's target features, so every dependency is the same compiled
//! library as in `cargo build --release` (and the hot-symbol list's names still match).
//! The flag cannot go in RUSTFLAGS: there it reaches the proc-macro crates too, which
//! cannot be built statically. Where the static link fails (no `libc.a`: Debian's
//! `libc6-dev`), that is said and `warden` is built as cargo builds it.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// Build the release `warden` (statically linked where this machine can) at
/// `target/release/warden`; whether it is static.
pub fn build_warden(root: &Path) -> anyhow::Result<bool> {
    if build_static_warden(root, true)? {
        return Ok(true);
    }
    build_release_bin(root, "warden")?;
    Ok(false)
}

/// Build `warden` statically linked (release or debug) where cargo puts it; `false`, said
/// on stderr, where this machine cannot link it so.
pub fn build_static_warden(root: &Path, release: bool) -> anyhow::Result<bool> {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        eprintln!("xtask: warden is linked statically only with glibc on Linux");
        return Ok(false);
    }
    let mut args = vec![
        "rustc",
        "--locked",
        "--package",
        "warden-cli",
        "--bin",
        "warden",
    ];
    if release {
        args.push("--release");
    }
    args.extend(["--", "-C", "target-feature=+crt-static"]);
    let status = cargo_status(root, &args)?;
    if !status.success() {
        eprintln!(
            "xtask: linking warden statically failed ({status}; Debian: apt-get install libc6-dev)"
        );
    }
    Ok(status.success())
}

/// Build the release helper with cargo's defaults (the one used where the musl target is
/// not installed) at `target/release/warden-sandbox-helper`.
pub fn build_glibc_helper(root: &Path) -> anyhow::Result<PathBuf> {
    build_release_bin(root, "warden-sandbox-helper")?;
    Ok(root.join("target/release/warden-sandbox-helper"))
}

/// `cargo build --release` of warden-cli's binary `bin`, failing if cargo does.
fn build_release_bin(root: &Path, bin: &str) -> anyhow::Result<()> {
    let args = [
        "build",
        "--release",
        "--locked",
        "--package",
        "warden-cli",
        "--bin",
        bin,
    ];
    let status = cargo_status(root, &args)?;
    if !status.success() {
        bail!("building {bin} failed ({status})");
    }
    Ok(())
}

/// Run `cargo args` in `root`, shown on stderr first; how it ended.
fn cargo_status(root: &Path, args: &[&str]) -> anyhow::Result<std::process::ExitStatus> {
    eprintln!("xtask: cargo {}", args.join(" "));
    crate::cargo()
        .args(args)
        .current_dir(root)
        .status()
        .with_context(|| format!("running cargo {}", args.join(" ")))
}

/// `cargo xtask install DIR`: build both programs and put them in `DIR` (which must
/// exist), each by [`place`].
pub fn run(root: &Path, args: &[String]) -> anyhow::Result<()> {
    let [dir] = args else {
        bail!("usage: cargo xtask install DIR (e.g. ~/.cargo/bin)");
    };
    let dir = PathBuf::from(dir);
    if !dir.is_dir() {
        bail!("{} is not a directory: nothing was built", dir.display());
    }
    let warden_static = build_warden(root)?;
    let helper = match crate::musl::build_helper(root, true)? {
        Some(musl) => musl,
        None => build_glibc_helper(root)?,
    };
    let warden = place(&root.join("target/release/warden"), &dir, "warden")?;
    let helper = place(&helper, &dir, "warden-sandbox-helper")?;
    eprintln!(
        "xtask install: {} ({}) and {} — `warden doctor` says how each starts",
        warden.display(),
        if warden_static {
            "statically linked"
        } else {
            "dynamically linked"
        },
        helper.display()
    );
    Ok(())
}

/// Put `built` in `dir` as `name`: copied beside it, then renamed over whatever was there,
/// so a running Warden's opened program is untouched and no reader sees half a file.
pub fn place(built: &Path, dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let dest = dir.join(name);
    let partial = dir.join(format!(".{name}.partial"));
    std::fs::copy(built, &partial)
        .with_context(|| format!("copying {} to {}", built.display(), partial.display()))?;
    std::fs::rename(&partial, &dest)
        .with_context(|| format!("renaming {} to {}", partial.display(), dest.display()))?;
    Ok(dest)
}
