//! docs/ARCHITECTURE.md's account of `unsafe` against the code: the Invariants bullet
//! "`unsafe` lives only in …" names every file (or directory) under `crates/` whose code
//! says `unsafe`, and its "(Among the tests, …)" sentence every test file that does; each
//! path it names exists and still says `unsafe`. And the sentence "`policy`, … say
//! `#![forbid(unsafe_code)]`" names exactly the crates whose `lib.rs` says it.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Context;
use proc_macro2::{TokenStream, TokenTree};

use super::files::{is_test_path, rel_path, rust_files};
use super::markdown::{code_spans, expand_braces, list_item, one_line, section};

const DOC: &str = "docs/ARCHITECTURE.md";
/// How the bullet starts, after `- `.
const BULLET: &str = "`unsafe` lives only in";
/// Where the bullet's test files begin.
const TESTS_PART: &str = "(Among the tests,";
/// What the sentence naming the crates that forbid `unsafe` ends with.
const FORBID_SENTENCE: &str = "say `#![forbid(unsafe_code)]`";

/// What the tree says about `unsafe`: paths relative to the workspace root.
#[derive(Default)]
pub struct Tree {
    /// Every Rust file under `crates/` and `tests/`.
    pub files: BTreeSet<String>,
    /// Those whose tokens include `unsafe`.
    pub unsafe_files: BTreeSet<String>,
    /// Short names of the crates whose `src/lib.rs` says `#![forbid(unsafe_code)]`.
    pub forbidding: BTreeSet<String>,
}

/// Read the tree at `root` and compare it with its ARCHITECTURE.md.
pub fn problems(root: &Path) -> anyhow::Result<Vec<String>> {
    let Ok(doc) = std::fs::read_to_string(root.join(DOC)) else {
        return Ok(vec![format!("unsafe list: cannot read {DOC}")]);
    };
    let mut tree = Tree::default();
    for file in rust_files(root)? {
        let rel = rel_path(root, &file);
        if !(rel.starts_with("crates/") || rel.starts_with("tests/")) {
            continue;
        }
        let source = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        if says_unsafe(&source).with_context(|| format!("lexing {rel}"))? {
            tree.unsafe_files.insert(rel.clone());
        }
        let parts: Vec<&str> = rel.split('/').collect();
        if let ["crates", krate, "src", "lib.rs"] = parts.as_slice()
            && forbids_unsafe(&source).with_context(|| format!("parsing {rel}"))?
        {
            tree.forbidding.insert((*krate).to_owned());
        }
        tree.files.insert(rel);
    }
    Ok(compare(&doc, &tree))
}

/// Whether the code (not its comments or strings) uses the `unsafe` keyword.
pub fn says_unsafe(source: &str) -> anyhow::Result<bool> {
    fn walk(stream: TokenStream) -> bool {
        stream.into_iter().any(|tt| match tt {
            TokenTree::Ident(i) => i == "unsafe",
            TokenTree::Group(g) => walk(g.stream()),
            _ => false,
        })
    }
    let stream: TokenStream = source.parse().map_err(|e| anyhow::anyhow!("{e:?}"))?;
    Ok(walk(stream))
}

/// Whether the file's inner attributes include `#![forbid(unsafe_code)]`.
fn forbids_unsafe(source: &str) -> anyhow::Result<bool> {
    let file = syn::parse_file(source)?;
    Ok(file.attrs.iter().any(|a| {
        a.path().is_ident("forbid")
            && quote::ToTokens::to_token_stream(&a.meta)
                .to_string()
                .contains("unsafe_code")
    }))
}

/// A path as the bullet writes it, relative to `crates/` with the crate's `src/` left out
/// (`caps/providers/local/spawn.rs`) or kept (`cli/src/main.rs`), as a root-relative path.
fn resolve_crate_path(named: &str) -> String {
    match named.split_once('/') {
        Some((krate, rest)) if !rest.starts_with("src/") => format!("crates/{krate}/src/{rest}"),
        _ => format!("crates/{named}"),
    }
}

/// Every mismatch between `doc` (ARCHITECTURE.md's text) and `tree`.
pub fn compare(doc: &str, tree: &Tree) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(item) =
        section(doc, "## Invariants (stated as absences)").and_then(|s| list_item(s, BULLET))
    else {
        return vec![format!(
            "unsafe list: {DOC} has no Invariants bullet starting \"{BULLET}\" (the lint \
             reads it there)"
        )];
    };
    // The tests' sentence runs to its closing parenthesis; what follows it is the
    // bullet's again.
    let (main, tests) = match item.split_once(TESTS_PART) {
        Some((before, rest)) => {
            let (tests, after) = rest.split_once(')').unwrap_or((rest, ""));
            (format!("{before} {after}"), tests.to_owned())
        }
        None => (item.clone(), String::new()),
    };
    let paths = |text: &str| -> Vec<String> {
        code_spans(text)
            .into_iter()
            .filter(|s| s.contains('/') && (s.ends_with(".rs") || s.ends_with('/')))
            .flat_map(expand_braces)
            .collect()
    };
    let named: Vec<(String, String)> = paths(&main)
        .into_iter()
        .map(|p| (resolve_crate_path(&p), p))
        .chain(paths(&tests).into_iter().map(|p| (p.clone(), p)))
        .collect();
    if named.is_empty() {
        problems.push(format!(
            "unsafe list: the bullet \"{BULLET}\" in {DOC} names no paths (the lint reads \
             `code spans` ending in .rs or /)"
        ));
    }
    for (path, as_written) in &named {
        let (exists, has_unsafe) = if path.ends_with('/') {
            (
                tree.files.iter().any(|f| f.starts_with(path.as_str())),
                tree.unsafe_files
                    .iter()
                    .any(|f| f.starts_with(path.as_str())),
            )
        } else {
            (tree.files.contains(path), tree.unsafe_files.contains(path))
        };
        if !exists {
            problems.push(format!(
                "unsafe list: {DOC} names `{as_written}` ({path}), which does not exist: fix \
                 the path in the bullet \"{BULLET}\" or remove it"
            ));
        } else if !has_unsafe {
            problems.push(format!(
                "unsafe list: {DOC} names `{as_written}` ({path}), which has no `unsafe` any \
                 more: remove it from the bullet \"{BULLET}\""
            ));
        }
    }
    for file in &tree.unsafe_files {
        let is_named = named
            .iter()
            .any(|(p, _)| p == file || (p.ends_with('/') && file.starts_with(p.as_str())));
        if is_named {
            continue;
        }
        let where_ = if is_test_path(file) {
            format!("`{file}` to its sentence \"{TESTS_PART} …)\"")
        } else {
            let short = file.strip_prefix("crates/").unwrap_or(file);
            format!("it as `{short}` (relative to crates/), with what the unsafe is for")
        };
        problems.push(format!(
            "unsafe list: {file} says `unsafe` but {DOC}'s bullet \"{BULLET}\" does not name \
             it: add {where_}"
        ));
    }
    problems.extend(forbid_problems(doc, &tree.forbidding));
    problems
}

/// The crates the sentence ending "say `#![forbid(unsafe_code)]`" names against those
/// whose `lib.rs` says it.
fn forbid_problems(doc: &str, forbidding: &BTreeSet<String>) -> Vec<String> {
    let text = one_line(doc);
    let Some(end) = text.find(FORBID_SENTENCE) else {
        return vec![format!(
            "unsafe list: {DOC} has no sentence ending \"{FORBID_SENTENCE}\" naming the crates \
             that forbid unsafe code (the lint reads it)"
        )];
    };
    let start = text[..end].rfind(". ").map_or(0, |i| i + 2);
    let said: BTreeSet<String> = code_spans(&text[start..end])
        .into_iter()
        .map(str::to_owned)
        .collect();
    let mut problems = Vec::new();
    for krate in forbidding.difference(&said) {
        problems.push(format!(
            "unsafe list: crates/{krate}/src/lib.rs says #![forbid(unsafe_code)] but {DOC}'s \
             sentence \"… {FORBID_SENTENCE}\" does not name `{krate}`: add it"
        ));
    }
    for krate in said.difference(forbidding) {
        problems.push(format!(
            "unsafe list: {DOC} says `{krate}` has #![forbid(unsafe_code)] but \
             crates/{krate}/src/lib.rs does not: remove it from the sentence \"… \
             {FORBID_SENTENCE}\" (or forbid unsafe code there)"
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lint::assert_mentions;

    const DOC_FIXTURE: &str = "\
# Architecture

`policy` and `runner` say
`#![forbid(unsafe_code)]`.

## Invariants (stated as absences)

- Something else.
- `unsafe` lives only in `caps/providers/local/{spawn,process}.rs`,
  `caps/providers/local/contain/companion/` (clone3), `cli/src/main.rs` (the
  constructor's `argv`), each block with a `// SAFETY:` comment. (Among the tests,
  `tests/support/netns.rs` calls `setns`.) Checked, and `sandbox/helper.rs` too.

## Exit codes
";

    fn tree(unsafe_files: &[&str], other_files: &[&str], forbidding: &[&str]) -> Tree {
        let set = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
        Tree {
            files: set(unsafe_files)
                .union(&set(other_files))
                .cloned()
                .collect(),
            unsafe_files: set(unsafe_files),
            forbidding: set(forbidding),
        }
    }

    const TRUE_UNSAFE: &[&str] = &[
        "crates/caps/src/providers/local/spawn.rs",
        "crates/caps/src/providers/local/process.rs",
        "crates/caps/src/providers/local/contain/companion/wire.rs",
        "crates/cli/src/main.rs",
        "tests/support/netns.rs",
        "crates/sandbox/src/helper.rs",
    ];

    #[test]
    fn a_true_list_passes() {
        let problems = compare(
            DOC_FIXTURE,
            &tree(
                TRUE_UNSAFE,
                &["crates/caps/src/providers/local/contain/companion/mod.rs"],
                &["policy", "runner"],
            ),
        );
        assert!(problems.is_empty(), "{problems:?}");
    }

    /// The canary: each kind of planted mismatch fails the check, naming the file.
    #[test]
    fn planted_mismatches_fail() {
        let mut unsafe_files = TRUE_UNSAFE.to_vec();
        unsafe_files.push("crates/caps/src/providers/local/contain/reaper.rs");
        unsafe_files.push("tests/containment.rs");
        unsafe_files.retain(|f| *f != "crates/cli/src/main.rs");
        unsafe_files.retain(|f| *f != "crates/caps/src/providers/local/process.rs");
        let problems = compare(
            DOC_FIXTURE,
            &tree(
                &unsafe_files,
                &["crates/caps/src/providers/local/process.rs"],
                &["policy", "gateway"],
            ),
        );
        assert_mentions(
            &problems,
            "crates/caps/src/providers/local/contain/reaper.rs says `unsafe`",
        );
        assert_mentions(
            &problems,
            "add it as `caps/src/providers/local/contain/reaper.rs`",
        );
        assert_mentions(&problems, "tests/containment.rs says `unsafe`");
        assert_mentions(
            &problems,
            "`cli/src/main.rs` (crates/cli/src/main.rs), which does not exist",
        );
        assert_mentions(&problems, "which has no `unsafe` any more");
        assert_mentions(&problems, "does not name `gateway`");
        assert_mentions(&problems, "says `runner` has #![forbid(unsafe_code)]");
        assert_eq!(problems.len(), 6, "{problems:?}");
    }

    #[test]
    fn a_missing_bullet_or_sentence_fails() {
        let problems = compare("# Architecture\n", &tree(TRUE_UNSAFE, &[], &[]));
        assert_mentions(&problems, "has no Invariants bullet");
        let doc = DOC_FIXTURE.replace("say\n`#![forbid", "declare\n`#![forbid");
        let problems = compare(&doc, &tree(TRUE_UNSAFE, &[], &["policy", "runner"]));
        assert_mentions(&problems, "has no sentence ending");
    }

    #[test]
    fn only_the_keyword_in_code_counts() {
        assert!(says_unsafe("fn f() { unsafe { g() } }").unwrap());
        assert!(says_unsafe("#[unsafe(no_mangle)] extern \"C\" fn f() {}").unwrap());
        assert!(
            !says_unsafe("// unsafe\n/// unsafe\nfn f() -> &'static str { \"unsafe\" }").unwrap()
        );
        assert!(forbids_unsafe("//! x\n#![forbid(unsafe_code)]\n").unwrap());
        assert!(!forbids_unsafe("#![deny(unsafe_code)]\n").unwrap());
    }
}
