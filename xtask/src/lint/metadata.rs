//! The dependency graph as `cargo metadata` reports it: every edge of each workspace
//! crate (dev-dependencies are edges between crates too) and what its own code is built
//! with (normal and build dependencies).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, bail};

/// Package name → dependency names.
pub type Edges = BTreeMap<String, Vec<String>>;

/// The workspace's dependencies.
pub struct Graph {
    /// Every dependency of each workspace crate, test-only ones included.
    pub workspace: Edges,
    /// Normal and build dependencies only: what the crate's own code is built with.
    pub built_with: Edges,
}

/// Read the graph of the workspace at `root`.
pub fn read(root: &Path) -> anyhow::Result<Graph> {
    let output = crate::cargo()
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .context("running cargo metadata")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let meta: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let packages = meta["packages"].as_array().into_iter().flatten();
    // Every dependency (dev-dependencies are edges between crates too) ...
    let mut workspace = Edges::new();
    // ... and what a crate's own code is built with (normal and build dependencies).
    let mut built_with = Edges::new();
    for pkg in packages {
        let name = pkg["name"].as_str().unwrap_or_default().to_owned();
        let deps = pkg["dependencies"].as_array().into_iter().flatten();
        for dep in deps {
            let Some(dep_name) = dep["name"].as_str() else {
                continue;
            };
            workspace
                .entry(name.clone())
                .or_default()
                .push(dep_name.to_owned());
            if dep["kind"].is_null() || dep["kind"] == "build" {
                built_with
                    .entry(name.clone())
                    .or_default()
                    .push(dep_name.to_owned());
            }
        }
        workspace.entry(name).or_default();
    }
    Ok(Graph {
        workspace,
        built_with,
    })
}

/// A workspace crate's short name, as the allowlists spell it (without `warden-`).
pub fn short(name: &str) -> &str {
    name.strip_prefix("warden-").unwrap_or(name)
}
