//! The list of documents: README.md's "Where things are" names every `docs/*.md` and
//! `docs/*.json` file, and every document it names exists.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Context;

use super::markdown::{code_spans, section};

const README: &str = "README.md";
const HEADING: &str = "## Where things are";

/// Read `docs/` and README.md at `root` and compare them.
pub fn problems(root: &Path) -> anyhow::Result<Vec<String>> {
    let Ok(readme) = std::fs::read_to_string(root.join(README)) else {
        return Ok(vec![format!("document list: cannot read {README}")]);
    };
    let mut docs = BTreeSet::new();
    if let Ok(entries) = std::fs::read_dir(root.join("docs")) {
        for entry in entries {
            let entry = entry.context("listing docs/")?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.file_type()?.is_file() && (name.ends_with(".md") || name.ends_with(".json")) {
                docs.insert(format!("docs/{name}"));
            }
        }
    }
    Ok(compare(&readme, &docs))
}

/// Every mismatch between README.md's list (`readme`) and the documents in `docs/`.
pub fn compare(readme: &str, docs: &BTreeSet<String>) -> Vec<String> {
    let Some(list) = section(readme, HEADING) else {
        return vec![format!(
            "document list: {README} has no section \"{HEADING}\" (the lint reads the list of \
             docs/ there)"
        )];
    };
    let listed: BTreeSet<String> = code_spans(list)
        .into_iter()
        .filter(|s| s.starts_with("docs/") && !s.ends_with('/'))
        .map(str::to_owned)
        .collect();
    let mut problems = Vec::new();
    for doc in docs.difference(&listed) {
        problems.push(format!(
            "document list: {doc} is not listed in {README}'s \"{HEADING}\": add a line \
             \"- `{doc}` — what it holds\""
        ));
    }
    for doc in listed.difference(docs) {
        problems.push(format!(
            "document list: {README}'s \"{HEADING}\" lists `{doc}`, which is not in docs/: fix \
             or remove the line"
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lint::assert_mentions;

    const README_FIXTURE: &str = "\
# Warden

See `docs/configuration.md` for keys (outside the list: does not count).

## Where things are

- `docs/ARCHITECTURE.md` — crates.
- `docs/protocol-bridge.md` and `docs/protocol-bridge.schema.json` — the protocol.
- Screenshots: `docs/screenshots/`.

## Licence
";

    fn docs(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| format!("docs/{n}")).collect()
    }

    #[test]
    fn a_true_list_passes() {
        let problems = compare(
            README_FIXTURE,
            &docs(&[
                "ARCHITECTURE.md",
                "protocol-bridge.md",
                "protocol-bridge.schema.json",
            ]),
        );
        assert!(problems.is_empty(), "{problems:?}");
    }

    /// The canary: an unlisted document and a listed one that is gone both fail.
    #[test]
    fn planted_mismatches_fail() {
        let problems = compare(
            README_FIXTURE,
            &docs(&["ARCHITECTURE.md", "protocol-bridge.md", "configuration.md"]),
        );
        assert_mentions(&problems, "docs/configuration.md is not listed");
        assert_mentions(
            &problems,
            "lists `docs/protocol-bridge.schema.json`, which is not",
        );
        assert_eq!(problems.len(), 2, "{problems:?}");
        let problems = compare("# Warden\n", &docs(&["ARCHITECTURE.md"]));
        assert_mentions(&problems, "has no section");
    }
}
