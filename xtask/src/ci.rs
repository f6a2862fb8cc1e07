//! `cargo xtask ci`: everything CI checks, in the order that fails fastest.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

fn cargo(root: &Path, args: &[&str]) -> anyhow::Result<()> {
    cargo_with(root, args, &[])
}

/// `cargo args` with `env` set.
fn cargo_with(root: &Path, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<()> {
    let shown: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
    eprintln!("xtask ci: {}cargo {}", shown.concat(), args.join(" "));
    let status = crate::cargo()
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
    // And with the helper built for musl (the recommended install): the same logic on
    // another C library, started from another entry.
    sandbox_tests_with_musl_helper(root)?;
    // And with `warden` linked statically, as `cargo xtask install` builds it.
    tests_with_static_warden(root)?;
    crate::bench::run(root, &["--quick".to_string()])?;
    eprintln!("xtask ci: all checks passed");
    Ok(())
}

/// The end-to-end tests that run the helper (as the in-sandbox step under bubblewrap,
/// the builder and companion, the watchdog and the subreaper), and the environment each
/// runs with.
const MUSL_HELPER_TESTS: &[(&str, &[(&str, &str)])] = &[
    // The lab's own sandboxes run the small helper too (else they run `warden`).
    ("e2e_sandbox", &[("WARDEN_TEST_HELPER", "small")]),
    (
        "e2e_sandbox",
        &[
            ("WARDEN_TEST_HELPER", "small"),
            ("WARDEN_TEST_BUILDER", "bubblewrap"),
        ],
    ),
    ("e2e_containment", &[]),
];

/// Run [`MUSL_HELPER_TESTS`] with the static musl helper next to the debug `warden`
/// (skipped, and said, where the musl target is not installed). The test binaries are
/// run directly: `cargo test` would put cargo's own helper back first. Cargo's helper is
/// back in place afterwards, whatever the tests did.
fn sandbox_tests_with_musl_helper(root: &Path) -> anyhow::Result<()> {
    let Some(musl) = crate::musl::build_helper(root, false)? else {
        eprintln!(
            "xtask ci: SKIPPED the helper's tests with the musl helper (target not installed)"
        );
        return Ok(());
    };
    let binaries = test_binaries(root, MUSL_HELPER_TESTS.iter().map(|(name, _)| *name))?;
    let bin_dir = root.join("target/debug");
    let cargo_helper = bin_dir.join("warden-sandbox-helper");
    let kept = bin_dir.join(".warden-sandbox-helper.cargo");
    std::fs::copy(&cargo_helper, &kept).context("keeping cargo's helper")?;
    let ran = crate::install::place(&musl, &bin_dir, "warden-sandbox-helper").and_then(|placed| {
        for (name, env) in MUSL_HELPER_TESTS {
            let shown: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
            eprintln!(
                "xtask ci: {}{name} with {} (built for musl)",
                shown.concat(),
                placed.display()
            );
            let status = Command::new(&binaries[*name])
                .envs(env.iter().copied())
                .current_dir(root.join("crates/cli"))
                .status()
                .with_context(|| format!("running {name}"))?;
            if !status.success() {
                bail!("{name} with the musl helper failed ({status})");
            }
        }
        Ok(())
    });
    std::fs::rename(&kept, &cargo_helper).context("putting cargo's helper back")?;
    ran
}

/// The end-to-end tests run once more with `warden` linked statically: running
/// commands (spawn, the sandbox, containment), the node link over WebSockets, the MCP
/// server under the official SDKs, and the protected set of Warden's own programs.
const STATIC_WARDEN_TESTS: &[&str] = &[
    "e2e_exec",
    "e2e_sandbox",
    "e2e_containment",
    "e2e_bridge",
    "e2e_mcp_conformance",
    "e2e_protected_set",
];

/// Run [`STATIC_WARDEN_TESTS`] against a debug `warden` linked statically (skipped, and
/// said, where it cannot be). The test binaries are built first and run directly: they
/// start `target/debug/warden`, which `cargo rustc` then replaces; the next cargo build
/// puts cargo's own back.
fn tests_with_static_warden(root: &Path) -> anyhow::Result<()> {
    let binaries = test_binaries(root, STATIC_WARDEN_TESTS.iter().copied())?;
    if !crate::install::build_static_warden(root, false)? {
        eprintln!("xtask ci: SKIPPED the tests with a static warden (it cannot be linked here)");
        return Ok(());
    }
    for name in STATIC_WARDEN_TESTS {
        eprintln!("xtask ci: {name} with warden linked statically");
        let status = Command::new(&binaries[*name])
            .current_dir(root.join("crates/cli"))
            .status()
            .with_context(|| format!("running {name}"))?;
        if !status.success() {
            bail!("{name} with a static warden failed ({status})");
        }
    }
    Ok(())
}

/// Build warden-cli's test targets `names` (and the binaries they run); each one's
/// executable.
fn test_binaries<'a>(
    root: &Path,
    names: impl Iterator<Item = &'a str>,
) -> anyhow::Result<std::collections::HashMap<String, std::path::PathBuf>> {
    let mut args = vec!["test", "-p", "warden-cli", "--locked", "--no-run"];
    args.push("--message-format=json");
    let names: Vec<&str> = names.collect();
    for name in &names {
        args.extend(["--test", name]);
    }
    let built = crate::cargo()
        .args(&args)
        .current_dir(root)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("building the helper's tests")?;
    if !built.status.success() {
        bail!("building the helper's tests failed ({})", built.status);
    }
    let mut found = std::collections::HashMap::new();
    for message in String::from_utf8_lossy(&built.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
    {
        if let (Some(name), Some(exe)) = (
            message["target"]["name"].as_str(),
            message["executable"].as_str(),
        ) && names.contains(&name)
        {
            found.insert(name.to_owned(), std::path::PathBuf::from(exe));
        }
    }
    if let Some(missing) = names.iter().find(|n| !found.contains_key(**n)) {
        bail!("cargo named no {missing} test binary");
    }
    Ok(found)
}
