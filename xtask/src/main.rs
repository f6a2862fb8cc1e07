//! `cargo xtask`: project automation that is code, not shell scripts.
//!
//! - `cargo xtask lint`  — the capability-seam lint, the dependency-direction rule, and
//!   the checks that keep docs/ true to the code (unsafe list, document list, exit codes).
//! - `cargo xtask ci`    — fmt check, clippy `-D warnings`, lint, the whole test suite.
//! - `cargo xtask bench [--quick]` — the benchmark suite (see docs/benchmarks.md).
//! - `cargo xtask install DIR` — `warden` and its helper built statically, as they should
//!   run, and put in `DIR` (docs/configuration.md, "Where to install Warden").
//! - `cargo xtask musl-helper [--debug] [--install DIR]` — the small helper built for
//!   musl, statically (it starts in half the time; docs/configuration.md).
//! - `cargo xtask hot-symbols` — remake the list of the functions a `warden exec` runs,
//!   which the linker places side by side (needs valgrind; crates/cli/build.rs).
// Project tooling drives cargo and reads the source tree.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Tooling reports to the terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod bench;
mod ci;
mod hot_symbols;
mod install;
mod lint;
mod musl;

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    let result = match args.first().map(String::as_str) {
        Some("lint") => lint::run(&root),
        Some("ci") => ci::run(&root),
        Some("bench") => bench::run(&root, &args[1..]),
        Some("install") => install::run(&root, &args[1..]),
        Some("musl-helper") => musl::run(&root, &args[1..]),
        Some("hot-symbols") => hot_symbols::run(&root),
        _ => {
            eprintln!(
                "usage: cargo xtask <lint | ci | bench [--quick] | install DIR | musl-helper [--debug] [--install DIR] | hot-symbols>"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A command running the cargo that runs xtask (`$CARGO`), else the one on `PATH`.
pub fn cargo() -> std::process::Command {
    std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// The workspace root: xtask lives one level below it.
pub fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}
