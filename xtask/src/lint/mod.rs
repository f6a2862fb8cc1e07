//! The seam lint: no raw process, filesystem or environment access outside provider
//! code and the `cli` composition root, and dependency edges only toward `caps`.
//!
//! The scan works on token streams parsed by `syn`, so mentions in strings and comments
//! never count while `use` trees, paths and macro bodies do. Items under `#[cfg(test)]`
//! and files under `tests/`, `benches/` and `examples/` directories are exempt: they are
//! small composition roots that set up real worlds for the code under test.
//!
//! A scanner that silently matches nothing must not pass: the lint also scans the
//! provider code it exempts and fails unless it finds the accesses it knows are there.
//!
//! Outside crates are a way around the seam too (`nix`, `rustix`, `cap-std` reach
//! processes and files without naming `std`): each library lists the outside crates it
//! may depend on (`external::ALLOWED_EXTERNAL`), and the one OS crate a consumer uses,
//! `nix`, only for its socket calls (`scan::NIX_OUTSIDE_PROVIDERS`). The type-aware half
//! of the rule (a `Path`'s own filesystem methods, types reached through aliases) is
//! `clippy.toml`'s `disallowed-methods` and `disallowed-types`.
//!
//! One module a job: [`scan`] the token scan, [`seam`] where it applies and its canaries,
//! [`metadata`] the dependency graph, [`deps`] the direction of workspace edges,
//! [`external`] the outside crates. And three checks that keep the documents true to the
//! code: [`unsafe_list`] (ARCHITECTURE.md's account of `unsafe`), [`doc_list`] (README.md's
//! list of docs/) and [`exit_codes`] (configuration.md's exit-code table), reading
//! Markdown with [`markdown`].

mod deps;
mod doc_list;
mod exit_codes;
mod external;
mod files;
mod markdown;
mod metadata;
mod scan;
mod seam;
mod unsafe_list;

use std::path::Path;

use anyhow::bail;

/// `cargo xtask lint`.
pub fn run(root: &Path) -> anyhow::Result<()> {
    let report = check_workspace(root)?;
    for problem in &report {
        eprintln!("{problem}");
    }
    if !report.is_empty() {
        bail!("{} problem(s)", report.len());
    }
    eprintln!(
        "xtask lint: seam, dependency direction, unsafe list, document list and exit codes OK"
    );
    Ok(())
}

/// Every problem in the workspace at `root`: seam findings, missing canaries, dependency
/// edges that break the direction rule, and documents that no longer say what the code
/// does.
pub fn check_workspace(root: &Path) -> anyhow::Result<Vec<String>> {
    let mut problems = seam::problems(root)?;
    let graph = metadata::read(root)?;
    problems.extend(deps::problems(&graph.workspace));
    problems.extend(external::problems(&graph.built_with, &graph.workspace));
    problems.extend(unsafe_list::problems(root)?);
    problems.extend(doc_list::problems(root)?);
    problems.extend(exit_codes::problems(root)?);
    Ok(problems)
}

/// Some problem in `problems` says `needle`.
#[cfg(test)]
fn assert_mentions(problems: &[String], needle: &str) {
    assert!(
        problems.iter().any(|p| p.contains(needle)),
        "no problem mentions {needle:?}: {problems:?}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workspace itself passes: `cargo test` enforces the seam too.
    #[test]
    fn the_workspace_passes_the_lint() {
        let problems = check_workspace(&crate::workspace_root()).unwrap();
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    /// A planted `std::process::Command::new` in a non-provider crate is caught, and an
    /// empty provider directory trips the canary.
    #[test]
    fn a_planted_violation_in_a_copy_of_the_workspace_fails_the_lint() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("crates/policy/src")).unwrap();
        std::fs::write(
            root.join("crates/policy/src/lib.rs"),
            "//! planted\npub fn f() { let _ = std::process::Command::new(\"sh\"); }\n",
        )
        .unwrap();
        std::fs::write(
            root.join("Cargo.toml"),
            "[workspace]\nmembers = []\nresolver = \"3\"\n",
        )
        .unwrap();
        let problems = check_workspace(root).unwrap();
        assert!(
            problems
                .iter()
                .any(|p| p.contains("crates/policy/src/lib.rs:2") && p.contains("std::process")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.starts_with("canary")),
            "{problems:?}"
        );
    }
}
