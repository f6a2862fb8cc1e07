//! The direction of workspace edges: each crate depends only on the crates its
//! [`ALLOWED_DEPS`] entry names, so edges point toward `caps`.

use super::metadata::{Edges, short};

/// Workspace crates each crate may depend on (by short name, without `warden-`).
/// Edges point toward `caps`; tooling crates may depend on anything.
const ALLOWED_DEPS: &[(&str, &[&str])] = &[
    ("caps", &[]),
    ("audit", &["caps"]),
    ("policy", &["caps"]),
    ("approvals", &["caps", "policy", "audit"]),
    ("runner", &["caps", "policy", "approvals", "audit"]),
    ("sandbox", &["caps"]),
    (
        "bridge",
        &["caps", "policy", "approvals", "runner", "audit"],
    ),
    (
        "gateway",
        &["caps", "policy", "approvals", "runner", "bridge", "audit"],
    ),
    ("cli", &["*"]),
    ("bench", &["*"]),
    ("xtask", &[]),
];

/// Problems with the workspace-internal edges of `packages` (name → dependency names).
pub fn problems(packages: &Edges) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, deps) in packages {
        let Some((_, allowed)) = ALLOWED_DEPS.iter().find(|(n, _)| *n == short(name)) else {
            problems.push(format!(
                "crate {name} has no entry in ALLOWED_DEPS (xtask/src/lint/deps.rs): say which \
                 workspace crates it may depend on"
            ));
            continue;
        };
        // A crate's dev-dependency on itself only turns on its own features (the test-kit)
        // for its own tests: not an edge between crates.
        for dep in deps
            .iter()
            .filter(|d| packages.contains_key(*d) && *d != name)
        {
            if !allowed.contains(&"*") && !allowed.contains(&short(dep)) {
                problems.push(format!(
                    "dependency direction: {name} -> {dep} is not allowed (allowed: {allowed:?}); \
                     edges point toward caps"
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
    fn dependency_edges_must_point_toward_caps() {
        let mut packages = BTreeMap::new();
        packages.insert("warden-caps".to_string(), vec!["warden-cli".to_string()]);
        packages.insert("warden-cli".to_string(), vec!["warden-caps".to_string()]);
        packages.insert("warden-mystery".to_string(), vec![]);
        packages.insert(
            "warden-policy".to_string(),
            vec!["warden-caps".to_string(), "warden-policy".to_string()],
        );
        let problems = problems(&packages);
        assert_mentions(&problems, "warden-caps -> warden-cli");
        assert_mentions(&problems, "warden-mystery has no entry");
        assert_eq!(problems.len(), 2, "{problems:?}");
    }
}
