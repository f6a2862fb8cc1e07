//! What an operator should know about an exec allowlist's entries (`warden doctor`):
//! entries that allow nothing — missing on this host, hidden inside the sandbox — and
//! what weakens it — a writable path, where a command can put any program, and the
//! dynamic loader that dynamically linked programs need, which can map the programs that
//! lie inside the library directories kept executable.

use std::path::PathBuf;

use crate::SandboxPolicy;
use crate::mounts::MountPlan;

/// Where dynamic loaders live on this host (real paths). The kernel opens a program's
/// loader for execution, so the allowlist must allow it; but `ld.so FILE` maps FILE
/// without executing it, so an allowed loader lets any readable ELF file run.
pub fn dynamic_loaders() -> Vec<PathBuf> {
    let is_loader = |name: &str| {
        name.starts_with("ld-linux") || name.starts_with("ld-musl") || name.starts_with("ld64.so")
    };
    let mut dirs: Vec<PathBuf> = Vec::new();
    for top in [
        "/lib",
        "/lib64",
        "/lib32",
        "/libx32",
        "/usr/lib",
        "/usr/lib64",
        "/usr/lib32",
    ] {
        let top = PathBuf::from(top);
        // Multiarch directories (`x86_64-linux-gnu`) hold the loader on Debian.
        if let Ok(entries) = std::fs::read_dir(&top) {
            dirs.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().contains("-linux-"))
                    .map(|e| e.path()),
            );
        }
        dirs.push(top);
    }
    let mut loaders: Vec<PathBuf> = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if is_loader(&entry.file_name().to_string_lossy())
                && let Ok(real) = std::fs::canonicalize(entry.path())
                && !loaders.contains(&real)
            {
                loaders.push(real);
            }
        }
    }
    loaders
}

/// What an operator should know about `entries` in a sandbox with `policy`: entries that
/// allow nothing (missing, hidden inside), entries inside a writable path, and the
/// dynamic loaders the list allows. One sentence each, naming the entry.
pub fn diagnose(entries: &[PathBuf], policy: &SandboxPolicy) -> Vec<String> {
    let as_root = nix::unistd::geteuid().is_root();
    let plan = MountPlan::new(policy, true, as_root);
    let mut notes = Vec::new();
    for entry in entries {
        let shown = entry.display();
        let Ok(real) = std::fs::canonicalize(entry) else {
            notes.push(format!("{shown} does not exist here: it allows nothing"));
            continue;
        };
        let real_shown = if &real == entry {
            String::new()
        } else {
            format!(" (= {})", real.display())
        };
        if !plan.visible(&real) {
            notes.push(format!(
                "{shown}{real_shown} is hidden inside the sandbox: it allows nothing (add it to sandbox.readable_extra_paths)"
            ));
        }
        if let Some(w) = policy
            .writable_paths
            .iter()
            .find(|w| real.starts_with(w) || w.starts_with(&real))
        {
            notes.push(format!(
                "{shown}{real_shown} covers the writable {}: a command can write any program there and run it",
                w.display()
            ));
        }
    }
    let resolved = super::resolve(entries);
    let loaders: Vec<String> = dynamic_loaders()
        .into_iter()
        .filter(|l| super::covers(&resolved.executable, l))
        .map(|l| l.display().to_string())
        .collect();
    if let Some(first) = loaders.first() {
        let libraries: Vec<String> = resolved
            .libraries
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        notes.push(format!(
            "the dynamic loader {} may be executed (dynamically linked programs need it): `{first} FILE` maps only files on mounts that allow code — the listed programs and whatever lies in the library directories {} — so a program kept inside one of those directories can run through it",
            loaders.join(", "),
            libraries.join(", ")
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diagnose_names_entries_that_allow_nothing_or_too_much() {
        let ws = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(ws.path()).unwrap();
        let policy = SandboxPolicy {
            writable_paths: vec![ws.clone()],
            ..Default::default()
        };
        let entries = vec![ws.join("bin"), ws.clone(), PathBuf::from("/usr/bin/true")];
        std::fs::create_dir(ws.join("bin")).unwrap();
        let notes = diagnose(&entries, &policy);
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with(&ws.join("bin").display().to_string())
                    && n.contains("covers the writable")),
            "{notes:?}"
        );
        let missing = diagnose(&[ws.join("nope")], &policy);
        assert_eq!(missing.len(), 1);
        assert!(missing[0].contains("does not exist"), "{missing:?}");
        // The dynamic loader a listed program needs is named as a way around the list.
        let me = std::env::current_exe().unwrap();
        if super::super::interpreter(&me).is_some() {
            let notes = diagnose(&[me], &policy);
            assert!(
                notes.iter().any(|n| n.contains("dynamic loader")),
                "{notes:?}"
            );
        } else {
            eprintln!("SKIPPED (part): this test binary has no dynamic loader");
        }
    }
}
