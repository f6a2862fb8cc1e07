//! The exit-code table against the code: docs/configuration.md's "Exit codes of `warden
//! exec`" lists every code the code defines for `warden exec` and `policy explain`
//! besides the child's own, and nothing else.
//!
//! The codes are not in one list in the code: a run's come from
//! `runner::RunReport::exit_code` (its `EXIT_*` constants, the timeout's
//! `caps::TIMED_OUT_EXIT_CODE`, `caps::CapsError::exit_code`'s 126/127/125) and Warden's
//! own situations are constants in `cli/src/exit.rs`. So the lint reads those files: every
//! top-level `const NAME: i32` (a literal, or a path naming another such constant) and
//! every integer literal in the body of a function named `exit_code`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::Context;
use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;

const DOC: &str = "docs/configuration.md";
const HEADING: &str = "## Exit codes of `warden exec`";

/// The files that define exit codes.
pub const SOURCES: &[&str] = &[
    "crates/runner/src/report.rs",
    "crates/cli/src/exit.rs",
    "crates/caps/src/error.rs",
    "crates/caps/src/exec_output.rs",
];

/// Read the sources and the table at `root` and compare them.
pub fn problems(root: &Path) -> anyhow::Result<Vec<String>> {
    let Ok(doc) = std::fs::read_to_string(root.join(DOC)) else {
        return Ok(vec![format!("exit codes: cannot read {DOC}")]);
    };
    let mut sources = Vec::new();
    for rel in SOURCES {
        let Ok(text) = std::fs::read_to_string(root.join(rel)) else {
            return Ok(vec![format!(
                "exit codes: cannot read {rel} (xtask/src/lint/exit_codes.rs SOURCES names it)"
            )]);
        };
        sources.push((*rel, text));
    }
    let sources: Vec<(&str, &str)> = sources.iter().map(|(p, t)| (*p, t.as_str())).collect();
    let defined = defined_codes(&sources)?;
    Ok(compare(&doc, &defined))
}

/// Every code the sources define, with where (`file: NAME` or `file: exit_code()`).
pub fn defined_codes(sources: &[(&str, &str)]) -> anyhow::Result<BTreeMap<i32, String>> {
    // Constants first (by name, across files), so a path to one resolves wherever it is.
    let mut consts: BTreeMap<String, (i32, String)> = BTreeMap::new();
    let mut aliases: Vec<(String, String, String)> = Vec::new();
    let mut codes = BTreeMap::new();
    for (path, source) in sources {
        let file = syn::parse_file(source).with_context(|| format!("parsing {path}"))?;
        for item in &file.items {
            match item {
                syn::Item::Const(c) if c.ty.to_token_stream().to_string() == "i32" => {
                    let name = c.ident.to_string();
                    let at = format!("{path}: {name}");
                    match &*c.expr {
                        syn::Expr::Lit(syn::ExprLit {
                            lit: syn::Lit::Int(i),
                            ..
                        }) => {
                            consts.insert(name, (i.base10_parse()?, at));
                        }
                        syn::Expr::Path(p) => {
                            let target = p.path.segments.last().map(|s| s.ident.to_string());
                            aliases.push((name, target.unwrap_or_default(), at));
                        }
                        _ => anyhow::bail!(
                            "exit codes: {at} is neither a literal nor a constant's name; the \
                             lint cannot read it"
                        ),
                    }
                }
                syn::Item::Fn(f) if f.sig.ident == "exit_code" => {
                    literals(f.block.to_token_stream(), path, &mut codes);
                }
                syn::Item::Impl(i) => {
                    for inner in &i.items {
                        if let syn::ImplItem::Fn(f) = inner
                            && f.sig.ident == "exit_code"
                        {
                            literals(f.block.to_token_stream(), path, &mut codes);
                        }
                    }
                }
                _ => {}
            }
        }
    }
    for (name, target, at) in aliases {
        let Some((value, _)) = consts.get(&target).cloned() else {
            anyhow::bail!(
                "exit codes: {at} names {target}, which no file in SOURCES \
                 (xtask/src/lint/exit_codes.rs) defines as a literal"
            );
        };
        consts.insert(name, (value, at));
    }
    for (value, at) in consts.into_values() {
        codes.entry(value).or_insert(at);
    }
    Ok(codes)
}

/// Integer literals in a function body: the codes it returns.
fn literals(stream: TokenStream, path: &str, codes: &mut BTreeMap<i32, String>) {
    for tt in stream {
        match tt {
            TokenTree::Literal(l) => {
                if let Ok(value) = l.to_string().parse::<i32>() {
                    codes
                        .entry(value)
                        .or_insert_with(|| format!("{path}: exit_code()"));
                }
            }
            TokenTree::Group(g) => literals(g.stream(), path, codes),
            _ => {}
        }
    }
}

/// The codes in the first column of the table under [`HEADING`] (`126 / 127` is two).
pub fn table_codes(doc: &str) -> Option<BTreeSet<i32>> {
    let body = super::markdown::section(doc, HEADING)?;
    let rows = body
        .lines()
        .filter(|l| l.starts_with('|'))
        .skip(2) // the header and its separator
        .filter_map(|l| l.split('|').nth(1));
    Some(
        rows.flat_map(|cell| {
            cell.split(|c: char| !c.is_ascii_digit())
                .filter_map(|n| n.parse::<i32>().ok())
                .collect::<Vec<_>>()
        })
        .collect(),
    )
}

/// Every mismatch between the table in `doc` and the `defined` codes.
pub fn compare(doc: &str, defined: &BTreeMap<i32, String>) -> Vec<String> {
    let Some(table) = table_codes(doc) else {
        return vec![format!("exit codes: {DOC} has no section \"{HEADING}\"")];
    };
    if table.is_empty() || defined.is_empty() {
        return vec![format!(
            "exit codes: found {} code(s) in {DOC}'s table and {} in the code; the lint reads \
             neither any more (see xtask/src/lint/exit_codes.rs)",
            table.len(),
            defined.len()
        )];
    }
    let mut problems = Vec::new();
    for (code, at) in defined {
        if !table.contains(code) {
            problems.push(format!(
                "exit codes: {at} defines exit code {code}, which {DOC}'s table \"{HEADING}\" \
                 does not list: add a row for it"
            ));
        }
    }
    for code in table.iter().filter(|c| !defined.contains_key(c)) {
        problems.push(format!(
            "exit codes: {DOC}'s table \"{HEADING}\" lists {code}, which no file in SOURCES \
             (xtask/src/lint/exit_codes.rs) defines: remove the row or define the code"
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lint::assert_mentions;

    const REPORT: &str = "\
pub const EXIT_DENIED: i32 = 77;
pub const EXIT_WARDEN_ERROR: i32 = 125;
impl RunReport {
    pub fn exit_code(&self) -> i32 { if self.x { EXIT_DENIED } else { 126 } }
}
const NOT_A_CODE: u64 = 5;
";
    const EXIT: &str = "\
pub const WARDEN_ERROR: i32 = runner::EXIT_WARDEN_ERROR;
pub const ASK: i32 = 10;
";
    const TABLE: &str = "\
## Exit codes of `warden exec`

| code | meaning |
| --- | --- |
| the child's | the command ran (128+N if a signal N killed it) |
| 125 | Warden failed |
| 126 / 127 | not executable / not found |
| 77 | denied |
| 10 | would ask |

## Nodes
";

    fn defined() -> BTreeMap<i32, String> {
        defined_codes(&[("report.rs", REPORT), ("exit.rs", EXIT)]).unwrap()
    }

    #[test]
    fn constants_aliases_and_literals_are_read() {
        let codes: Vec<i32> = defined().into_keys().collect();
        assert_eq!(codes, vec![10, 77, 125, 126]);
        assert_eq!(
            table_codes(TABLE).unwrap().into_iter().collect::<Vec<_>>(),
            vec![10, 77, 125, 126, 127]
        );
    }

    /// The canary: a code the code defines that the table lacks, and a row the code
    /// does not define, both fail.
    #[test]
    fn planted_mismatches_fail() {
        let exit = format!("{EXIT}pub const TERMINATED: i32 = 143;\n");
        let defined = defined_codes(&[("report.rs", REPORT), ("exit.rs", &exit)]).unwrap();
        let problems = compare(TABLE, &defined);
        assert_mentions(&problems, "exit.rs: TERMINATED defines exit code 143");
        assert_mentions(&problems, "lists 127, which no file");
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert_mentions(&compare("# none\n", &defined), "has no section");
        assert_mentions(
            &compare("## Exit codes of `warden exec`\n\nprose\n", &defined),
            "the lint reads neither",
        );
    }
}
