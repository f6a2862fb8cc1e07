//! `cargo xtask hot-symbols`: remake `crates/cli/hot-symbols.txt`, the functions of the
//! `warden` binary that a `warden exec` enters, which `crates/cli/build.rs` has the linker
//! place side by side (why: that file's header).
//!
//! How: build `warden` for release as `cargo xtask install` does (statically linked), and
//! run `warden exec -- /bin/true` under Valgrind's callgrind, as the `exec-sandbox-cli`
//! benchmark runs it (a workspace under `/var/tmp`, a minimal environment, standard output
//! a pipe): once from a fresh home and once from the home that run left. Every function
//! of the binary that either run entered is listed by its symbol name (glibc's too, linked
//! in). Valgrind's simulated CPU makes a few paths differ (a system call it does not know
//! fails, a CPU feature it lacks is not used); the functions real runs take there instead
//! stay in the linker's order, which costs a page fault or two each.
//!
//! Needs `valgrind` (Debian: `apt-get install valgrind`). Run it after a toolchain or
//! dependency update: symbol names carry their crate's hash, so an old list matches less
//! (`nm target/release/warden` shows what the binary has).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

/// Where the list lives, relative to the workspace root.
const LIST: &str = "crates/cli/hot-symbols.txt";

/// Remake the list.
pub fn run(root: &Path) -> anyhow::Result<()> {
    let valgrind_there = Command::new("valgrind")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !valgrind_there {
        bail!("valgrind is not installed (Debian: apt-get install valgrind)");
    }
    crate::install::build_glibc_helper(root)?;
    crate::install::build_warden(root)?;
    let warden = root
        .join("target/release/warden")
        .canonicalize()
        .context("finding the built warden")?;
    // Under /var/tmp, not /tmp: the sandbox hides /tmp (as the benchmark's workspace).
    let scratch = tempfile::Builder::new()
        .prefix("warden-hot-symbols")
        .tempdir_in("/var/tmp")
        .context("making a scratch directory under /var/tmp")?;
    let (home, workspace) = (scratch.path().join("home"), scratch.path().join("ws"));
    std::fs::create_dir(&home)?;
    std::fs::create_dir(&workspace)?;
    let mut names = BTreeSet::new();
    for (run, what) in ["fresh home", "warm home"].iter().enumerate() {
        let profile = scratch.path().join(format!("callgrind.{run}"));
        profile_one_run(&warden, &home, &workspace, &profile)
            .with_context(|| format!("profiling `warden exec -- /bin/true` ({what})"))?;
        let text = std::fs::read_to_string(&profile)
            .with_context(|| format!("reading {}", profile.display()))?;
        names.extend(functions_of(&text, &warden));
    }
    if names.is_empty() {
        bail!("callgrind saw no function of {}", warden.display());
    }
    let mut out = String::from(HEADER);
    for name in &names {
        out.push_str(name);
        out.push('\n');
    }
    std::fs::write(root.join(LIST), out).with_context(|| format!("writing {LIST}"))?;
    println!(
        "xtask hot-symbols: {} functions written to {LIST}",
        names.len()
    );
    Ok(())
}

/// Say how much of the list the built `warden` still has (`nm` reads its symbols): an
/// old list only costs speed, so this is reported, not enforced.
pub fn report_match(root: &Path) {
    let Ok(list) = std::fs::read_to_string(root.join(LIST)) else {
        return;
    };
    let Ok(nm) = Command::new("nm")
        .args(["--defined-only", "--format=just-symbols"])
        .arg(root.join("target/release/warden"))
        .stderr(Stdio::null())
        .output()
    else {
        return;
    };
    if !nm.status.success() {
        return;
    }
    let present: BTreeSet<&str> = std::str::from_utf8(&nm.stdout)
        .unwrap_or_default()
        .lines()
        .collect();
    let wanted: Vec<&str> = list.lines().filter(|l| !l.starts_with('#')).collect();
    let found = wanted.iter().filter(|name| present.contains(*name)).count();
    eprintln!(
        "xtask: {found} of the {} functions in {LIST} are in the built warden{}",
        wanted.len(),
        if found * 10 < wanted.len() * 9 {
            " (remake it: cargo xtask hot-symbols)"
        } else {
            ""
        }
    );
}

/// What the list says about itself (LLD skips lines that start with `#`).
const HEADER: &str = "\
# The functions of `warden` that a `warden exec` enters, placed side by side by the linker
# (crates/cli/build.rs says why). Made by `cargo xtask hot-symbols`; do not edit by hand.
";

/// Run `warden exec -- /bin/true` once under callgrind, writing its profile to `profile`.
fn profile_one_run(
    warden: &Path,
    home: &Path,
    workspace: &Path,
    profile: &Path,
) -> anyhow::Result<()> {
    let mut out_file = std::ffi::OsString::from("--callgrind-out-file=");
    out_file.push(profile);
    let output = Command::new("valgrind")
        .args(["--tool=callgrind", "--demangle=no", "--compress-strings=no"])
        .arg(out_file)
        .arg(warden)
        .args(["exec", "--", "/bin/true"])
        .current_dir(workspace)
        .env_clear()
        .env("HOME", home)
        .env("WARDEN_HOME", home)
        .env("PATH", "/usr/bin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .context("running valgrind")?;
    if !output.status.success() {
        bail!(
            "it exited with {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// The names of the functions of `object` in a callgrind profile (written with
/// `--compress-strings=no`: every `ob=`, `cob=`, `fn=` and `cfn=` line spells its name).
/// A function belongs to the object of the `ob=` line before it; a called function
/// (`cfn=`) to the `cob=` line just before it, else to that same object.
fn functions_of(profile: &str, object: &Path) -> BTreeSet<String> {
    let object = object.to_string_lossy();
    let mut names = BTreeSet::new();
    let mut current: Option<&str> = None;
    let mut called: Option<&str> = None;
    for line in profile.lines() {
        if let Some(name) = line.strip_prefix("ob=") {
            current = Some(name);
        } else if let Some(name) = line.strip_prefix("cob=") {
            called = Some(name);
        } else if let Some(name) = line.strip_prefix("fn=") {
            if current == Some(&*object) {
                names.extend(symbol(name));
            }
        } else if let Some(name) = line.strip_prefix("cfn=")
            && called.take().or(current) == Some(&*object)
        {
            names.extend(symbol(name));
        }
    }
    names
}

/// The symbol a callgrind function name stands for: without the `'N` callgrind adds to a
/// function entered again while it runs, and none for an address with no symbol
/// (`0x…`) or callgrind's own entries (`(below main)`).
fn symbol(name: &str) -> Option<String> {
    let name = match name.rsplit_once('\'') {
        Some((base, depth)) if !depth.is_empty() && depth.bytes().all(|b| b.is_ascii_digit()) => {
            base
        }
        _ => name,
    };
    let plain = !name.is_empty()
        && !name.starts_with("0x")
        && !name.contains(|c: char| c.is_whitespace() || c == '(');
    plain.then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn functions_are_those_of_the_object_named_before_them() {
        let profile = "\
ob=???
fn=0x0000000001279054
ob=/bin/warden
fn=(below main)
fn=0x0000000000391820
fn=_RNvCs1_6warden4main
fn=_RNvCs1_6warden4main'2
cob=/lib/libc.so.6
cfn=write
calls=1 0
cfn=_RNvCs1_6warden4exit
calls=1 0
ob=/lib/libc.so.6
fn=write
cob=/bin/warden
cfn=_RNvCs1_6warden8callback
calls=1 0
";
        let names = functions_of(profile, &PathBuf::from("/bin/warden"));
        let expected: BTreeSet<String> = [
            "_RNvCs1_6warden4main",
            "_RNvCs1_6warden4exit",
            "_RNvCs1_6warden8callback",
        ]
        .map(String::from)
        .into();
        assert_eq!(names, expected);
    }
}
