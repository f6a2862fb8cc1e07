//! The seam: no raw process, filesystem or environment access outside provider code and
//! the `cli` composition root, found by the token scan over every non-test file, and the
//! canaries that fail the lint when the scan stops finding the accesses it knows exist.

use std::path::Path;

use anyhow::{Context, bail};

use super::files::{is_test_path, rel_path, rust_files};
use super::scan::{Finding, scan_source};

/// Paths (relative to the workspace root, `/`-separated prefixes) where raw access is
/// the point: the providers and the composition root, plus project tooling.
const ALLOWED_PREFIXES: &[&str] = &[
    "crates/caps/src/providers/local/",
    "crates/caps/src/providers/bounded/",
    "crates/sandbox/",
    "crates/cli/",
    "xtask/",
    "bench/",
];

/// Exempt code that must contain raw accesses (the canary): if the scan finds none
/// there, the scanner is broken.
const CANARIES: &[(&str, &str)] = &[
    ("crates/caps/src/providers/local/", "std::fs"),
    ("crates/cli/", "std::env"),
    ("crates/cli/", "std::process"),
    ("crates/caps/src/providers/local/", "nix"),
    ("crates/cli/", "caps::BoundedFs"),
];

/// Seam findings outside the allowed prefixes and canaries that found nothing.
pub fn problems(root: &Path) -> anyhow::Result<Vec<String>> {
    let mut problems = Vec::new();
    let mut allowed_hits: Vec<Finding> = Vec::new();
    let files = rust_files(root)?;
    if files.is_empty() {
        bail!("no Rust files found under {}", root.display());
    }
    for file in files {
        let rel_str = rel_path(root, &file);
        if is_test_path(&rel_str) {
            continue;
        }
        let rel = Path::new(&rel_str);
        let source = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        let findings =
            scan_source(rel, &source).with_context(|| format!("parsing {}", file.display()))?;
        if ALLOWED_PREFIXES.iter().any(|p| rel_str.starts_with(p)) {
            allowed_hits.extend(findings);
        } else {
            problems.extend(findings.iter().map(ToString::to_string));
        }
    }
    for (prefix, banned) in CANARIES {
        let found = allowed_hits.iter().any(|f| {
            f.file
                .to_string_lossy()
                .replace('\\', "/")
                .starts_with(prefix)
                && f.banned == *banned
        });
        if !found {
            problems.push(format!(
                "canary: the scan found no `{banned}` under {prefix}, which uses it; the scanner \
                 is broken or the code moved (update CANARIES)"
            ));
        }
    }
    Ok(problems)
}
