//! Outside crates: each crate is built only with the outside crates its
//! [`ALLOWED_EXTERNAL`] entry names, so an OS crate cannot reach around the seam.

use super::metadata::{Edges, short};

/// Outside crates each crate may depend on (normal and build dependencies, by name; tests,
/// benches and examples are composition roots). A library reaches processes, files and
/// the environment only through `caps`, so an outside crate that can (`nix`, `rustix`,
/// `libc`, `cap-std`, `tempfile`, `walkdir`...) belongs to a provider crate: adding one
/// to a library is a decision made here, not a line in its `Cargo.toml`. `*`: any.
const ALLOWED_EXTERNAL: &[(&str, &[&str])] = &[
    // The providers live in caps and sandbox; cli is the composition root.
    ("caps", &["*"]),
    ("sandbox", &["*"]),
    ("cli", &["*"]),
    ("bench", &["*"]),
    ("xtask", &["*"]),
    (
        "audit",
        &[
            "humantime",
            "memchr",
            "serde",
            "serde_json",
            "sha2",
            "thiserror",
            "tracing",
        ],
    ),
    (
        "policy",
        &[
            "brush-parser",
            "globset",
            "humantime",
            "schemars",
            "serde",
            "serde_json",
            "serde_path_to_error",
            "sha2",
            "strsim",
            "thiserror",
            "toml",
            "toml_edit",
        ],
    ),
    (
        "approvals",
        &[
            "async-trait",
            "base64",
            "getrandom",
            "hmac",
            "indexmap",
            "serde",
            "serde_json",
            "sha2",
            "subtle",
            "thiserror",
            "tokio",
            "tracing",
        ],
    ),
    (
        "runner",
        &[
            "async-trait",
            "getrandom",
            "serde",
            "serde_json",
            "sha2",
            "tokio",
            "tokio-util",
            "tracing",
        ],
    ),
    (
        "bridge",
        &[
            "base64",
            "futures-util",
            "getrandom",
            "hmac",
            "rcgen",
            "ring",
            "rustls",
            "serde",
            "serde_json",
            "sha2",
            "subtle",
            "thiserror",
            "tokio",
            "tokio-rustls",
            "tokio-tungstenite",
            "tokio-util",
            "tracing",
        ],
    ),
    (
        "gateway",
        &[
            "async-trait",
            "axum",
            "base64",
            "futures-util",
            "getrandom",
            "globset",
            "http",
            "http-body",
            "humantime",
            "hyper",
            "hyper-util",
            // Only nix::sys::socket and nix::errno (the listener's peek and shutdown of
            // its own TCP connections); the token scan holds it to that.
            "nix",
            // Counters, gauges and histograms encoded as text: no file, process or
            // environment access (its process collector is a separate crate).
            "prometheus-client",
            "regex",
            "rmcp",
            "serde",
            "serde_json",
            "sha2",
            // Text in, text out (a terminal's escape sequences parsed by vte and dropped):
            // no file, process or environment access.
            "strip-ansi-escapes",
            "subtle",
            "thiserror",
            "tokio",
            "tokio-util",
            "tower-service",
            "tracing",
        ],
    ),
];

/// Outside crates a crate is built with that its [`ALLOWED_EXTERNAL`] entry does not name.
pub fn problems(built_with: &Edges, workspace: &Edges) -> Vec<String> {
    let mut problems = Vec::new();
    for name in workspace.keys() {
        let Some((_, allowed)) = ALLOWED_EXTERNAL.iter().find(|(n, _)| *n == short(name)) else {
            problems.push(format!(
                "crate {name} has no entry in ALLOWED_EXTERNAL (xtask/src/lint/external.rs): say which \
                 outside crates it may use"
            ));
            continue;
        };
        if allowed.contains(&"*") {
            continue;
        }
        let outside = built_with
            .get(name)
            .into_iter()
            .flatten()
            .filter(|d| !workspace.contains_key(*d));
        for dep in outside {
            if !allowed.contains(&dep.as_str()) {
                problems.push(format!(
                    "outside crate: {name} depends on {dep}, which its ALLOWED_EXTERNAL entry \
                     (xtask/src/lint/external.rs) does not name; a library reaches processes, files and \
                     the environment only through caps — if {dep} cannot, add it there"
                ));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::lint::assert_mentions;

    #[test]
    fn libraries_use_only_the_outside_crates_they_list() {
        let mut workspace = BTreeMap::new();
        let mut built_with = BTreeMap::new();
        for (name, deps) in [
            ("warden-caps", vec!["rustix", "nix"]),
            ("warden-policy", vec!["serde", "rustix", "warden-caps"]),
            ("warden-runner", vec!["tokio"]),
            ("warden-mystery", vec![]),
        ] {
            let deps: Vec<String> = deps.into_iter().map(str::to_owned).collect();
            workspace.insert(name.to_owned(), deps.clone());
            built_with.insert(name.to_owned(), deps);
        }
        // A test-only dependency is not what the library is built with.
        workspace
            .get_mut("warden-runner")
            .unwrap()
            .push("tempfile".into());
        let problems = problems(&built_with, &workspace);
        assert_mentions(&problems, "warden-policy depends on rustix");
        assert_mentions(&problems, "warden-mystery has no entry in ALLOWED_EXTERNAL");
        assert_eq!(problems.len(), 2, "{problems:?}");
    }
}
