//! Link-time layout of the `warden` binary: the functions a `warden exec` enters placed
//! side by side (`hot-symbols.txt`, made by `cargo xtask hot-symbols`).
//!
//! Why: every `warden exec` is a new process, and the kernel maps its code a 64 KiB window
//! at a time on first use. Left in the linker's default order, the thousand functions a
//! run enters are spread over 14 MB of code: a run took about 80 page faults there and
//! mapped 6.8 MB of it, faulted in while Warden decides and unmapped again before its
//! caller hears the exit. Placed together they are about 1 MB (docs/benchmarks.md, stop
//! 54). The order changes where code lies, never what it does; a name this build does not
//! have is skipped, so an old list only costs speed.
//!
//! Only for release builds of `x86_64-unknown-linux-gnu` (where the list was made), and
//! only where the linker takes such a list: LLD does (rustc's own, the default from Rust
//! 1.90), GNU ld refuses the option. Rather than guess from versions, a program with
//! nothing in it is linked once with the option and this build's linker settings; if
//! that fails, `warden` is linked in the default order.
// A build script is tooling: it reads cargo's variables and runs rustc.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=hot-symbols.txt");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    if var("PROFILE") != "release" || var("TARGET") != "x86_64-unknown-linux-gnu" {
        return;
    }
    let list = Path::new(&var("CARGO_MANIFEST_DIR")).join("hot-symbols.txt");
    if !list.is_file() {
        return;
    }
    let link_args = [
        format!("-Wl,--symbol-ordering-file={}", list.display()),
        // Names missing from this build (another toolchain or dependency version) are
        // not worth a warning each: the rest are still placed.
        "-Wl,--no-warn-symbol-ordering".to_string(),
    ];
    if !linker_takes(&link_args) {
        println!(
            "cargo:warning=the linker does not take a symbol order (LLD's --symbol-ordering-file): warden is linked in the default order, and starts a little slower"
        );
        return;
    }
    for arg in link_args {
        println!("cargo:rustc-link-arg-bin=warden={arg}");
    }
}

/// Cargo's variable `name` for this build script, empty where unset.
fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

/// Whether an empty program links with `link_args` added, by the rustc, target, linker
/// and flags of this build.
fn linker_takes(link_args: &[String]) -> bool {
    let out_dir = PathBuf::from(var("OUT_DIR"));
    let source = out_dir.join("symbol_order_probe.rs");
    if std::fs::write(&source, "fn main() {}\n").is_err() {
        return false;
    }
    let mut rustc = Command::new(std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()));
    rustc
        .args([
            "--crate-type=bin",
            "--edition=2021",
            "--target",
            &var("TARGET"),
        ])
        .arg("-o")
        .arg(out_dir.join("symbol_order_probe"));
    if let Some(linker) = std::env::var_os("RUSTC_LINKER") {
        let mut arg = std::ffi::OsString::from("-Clinker=");
        arg.push(linker);
        rustc.arg(arg);
    }
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    rustc.args(flags.split('\u{1f}').filter(|f| !f.is_empty()));
    for arg in link_args {
        rustc.arg(format!("-Clink-arg={arg}"));
    }
    rustc
        .arg(&source)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
