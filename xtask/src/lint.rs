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
//! may depend on ([`ALLOWED_EXTERNAL`]), and the one OS crate a consumer uses, `nix`,
//! only for its socket calls ([`NIX_OUTSIDE_PROVIDERS`]). The type-aware half of the
//! rule (a `Path`'s own filesystem methods, types reached through aliases) is
//! `clippy.toml`'s `disallowed-methods` and `disallowed-types`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use proc_macro2::{Delimiter, TokenStream, TokenTree};
use quote::ToTokens;

/// A banned module: its path and the capability to use instead.
struct Banned {
    path: &'static str,
    instead: &'static str,
}

const BANNED: &[Banned] = &[
    Banned {
        path: "std::process",
        instead: "run programs through caps::Shell",
    },
    Banned {
        path: "tokio::process",
        instead: "run programs through caps::Shell",
    },
    Banned {
        path: "std::fs",
        instead: "touch files through caps::Fs",
    },
    Banned {
        path: "tokio::fs",
        instead: "touch files through caps::Fs",
    },
    Banned {
        path: "std::env",
        instead: "take configuration as a value from the cli composition root",
    },
    Banned {
        path: "nix",
        instead: "outside providers only nix::sys::socket and nix::errno (a socket the crate owns); reach processes, files and the environment through caps",
    },
];

/// The `nix` modules code outside providers may use: calls on a socket the crate owns.
const NIX_OUTSIDE_PROVIDERS: &[&[&str]] = &[&["sys", "socket"], &["errno"]];

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
];

/// Workspace crates each crate may depend on (by short name, without `warden-`).
/// Edges point toward `caps`; tooling crates may depend on anything.
const ALLOWED_DEPS: &[(&str, &[&str])] = &[
    ("caps", &[]),
    ("policy", &["caps"]),
    ("approvals", &["caps", "policy"]),
    ("runner", &["caps", "policy", "approvals"]),
    ("sandbox", &["caps"]),
    ("bridge", &["caps", "policy", "approvals", "runner"]),
    (
        "gateway",
        &["caps", "policy", "approvals", "runner", "bridge"],
    ),
    ("cli", &["*"]),
    ("bench", &["*"]),
    ("xtask", &[]),
];

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
            "regex",
            "rmcp",
            "serde",
            "serde_json",
            "sha2",
            "subtle",
            "thiserror",
            "tokio",
            "tokio-util",
            "tower-service",
            "tracing",
        ],
    ),
];

/// One banned access found in a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// File, relative to the workspace root.
    pub file: PathBuf,
    /// Line of the first token of the access.
    pub line: usize,
    /// The banned module it reaches (`std::fs`...).
    pub banned: &'static str,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let instead = BANNED
            .iter()
            .find(|b| b.path == self.banned)
            .map(|b| b.instead)
            .unwrap_or("");
        write!(
            f,
            "{}:{}: `{}` outside provider code: {instead}",
            self.file.display(),
            self.line,
            self.banned
        )
    }
}

/// `cargo xtask lint`.
pub fn run(root: &Path) -> anyhow::Result<()> {
    let report = check_workspace(root)?;
    for problem in &report {
        eprintln!("{problem}");
    }
    if !report.is_empty() {
        bail!("{} seam violation(s)", report.len());
    }
    eprintln!("xtask lint: seam and dependency direction OK");
    Ok(())
}

/// Every problem in the workspace at `root`: seam findings, missing canaries, and
/// dependency edges that break the direction rule.
pub fn check_workspace(root: &Path) -> anyhow::Result<Vec<String>> {
    let mut problems = Vec::new();
    let mut allowed_hits: Vec<Finding> = Vec::new();
    let files = rust_files(root)?;
    if files.is_empty() {
        bail!("no Rust files found under {}", root.display());
    }
    for file in files {
        let rel = file.strip_prefix(root).unwrap_or(&file).to_path_buf();
        let rel_str = rel.to_string_lossy().replace('\\', "/");
        if is_test_path(&rel_str) {
            continue;
        }
        let source = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        let findings =
            scan_source(&rel, &source).with_context(|| format!("parsing {}", file.display()))?;
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
    problems.extend(check_dependency_direction(root)?);
    Ok(problems)
}

/// Tests, benches and examples are composition roots of their own: they build providers
/// from real files and processes to exercise the code, as `cli` does for users.
fn is_test_path(rel: &str) -> bool {
    rel.split('/')
        .any(|c| c == "tests" || c == "benches" || c == "examples")
        || rel.starts_with("target/")
}

fn rust_files(root: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))?
        {
            let entry = entry?;
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if entry.file_type()?.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    stack.push(path);
                }
            } else if name.ends_with(".rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Scan one file's source for banned accesses, skipping `#[cfg(test)]` items.
pub fn scan_source(file: &Path, source: &str) -> anyhow::Result<Vec<Finding>> {
    let parsed = syn::parse_file(source)?;
    let mut findings = Vec::new();
    for attr in &parsed.attrs {
        scan_tokens(file, attr.to_token_stream(), &mut findings);
    }
    scan_items(file, &parsed.items, &mut findings);
    Ok(findings)
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Ident>()
                .map(|i| i == "test")
                .unwrap_or(false)
    })
}

fn scan_items(file: &Path, items: &[syn::Item], findings: &mut Vec<Finding>) {
    for item in items {
        let attrs: &[syn::Attribute] = match item {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Use(u) => &u.attrs,
            syn::Item::Struct(s) => &s.attrs,
            syn::Item::Enum(e) => &e.attrs,
            syn::Item::Const(c) => &c.attrs,
            syn::Item::Static(s) => &s.attrs,
            syn::Item::Trait(t) => &t.attrs,
            syn::Item::Macro(m) => &m.attrs,
            _ => &[],
        };
        if is_cfg_test(attrs) {
            continue;
        }
        match item {
            // Recurse so that a `#[cfg(test)]` item nested in an inline module is skipped.
            syn::Item::Mod(syn::ItemMod {
                content: Some((_, inner)),
                attrs,
                ..
            }) => {
                for attr in attrs {
                    scan_tokens(file, attr.to_token_stream(), findings);
                }
                scan_items(file, inner, findings);
            }
            other => scan_tokens(file, other.to_token_stream(), findings),
        }
    }
}

/// A flattened token, enough to recognise paths and `use` trees.
#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String, usize),
    PathSep,
    Star,
    Open(Delimiter),
    Close,
    Comma,
    Other,
}

fn flatten(stream: TokenStream, out: &mut Vec<Tok>) {
    let mut iter = stream.into_iter().peekable();
    while let Some(tt) = iter.next() {
        match tt {
            TokenTree::Ident(i) => out.push(Tok::Ident(i.to_string(), i.span().start().line)),
            TokenTree::Punct(p) if p.as_char() == ':' => {
                if matches!(iter.peek(), Some(TokenTree::Punct(q)) if q.as_char() == ':') {
                    iter.next();
                    out.push(Tok::PathSep);
                } else {
                    out.push(Tok::Other);
                }
            }
            TokenTree::Punct(p) if p.as_char() == '*' => out.push(Tok::Star),
            TokenTree::Punct(p) if p.as_char() == ',' => out.push(Tok::Comma),
            TokenTree::Punct(_) | TokenTree::Literal(_) => out.push(Tok::Other),
            TokenTree::Group(g) => {
                out.push(Tok::Open(g.delimiter()));
                flatten(g.stream(), out);
                out.push(Tok::Close);
            }
        }
    }
}

fn banned_module(krate: &str, module: &str) -> Option<&'static str> {
    BANNED
        .iter()
        .find(|b| b.path.split_once("::") == Some((krate, module)))
        .map(|b| b.path)
}

/// `std::env::consts` is compile-time data, not the ambient environment.
fn is_allowed_env_path(toks: &[Tok], after_module: usize) -> bool {
    matches!(
        (toks.get(after_module), toks.get(after_module + 1)),
        (Some(Tok::PathSep), Some(Tok::Ident(name, _))) if name == "consts"
    )
}

/// The index of the first token of each element of the `use` tree group whose contents
/// start at `toks[first]` (just after its `{`): `{fs, io::Read}` → `fs`, `io`.
fn tree_elements(toks: &[Tok], first: usize) -> Vec<usize> {
    let mut elements = Vec::new();
    let mut depth = 0usize;
    let mut at_element_start = true;
    for (j, tok) in toks.iter().enumerate().skip(first) {
        match tok {
            Tok::Close if depth == 0 => break,
            Tok::Comma if depth == 0 => {
                at_element_start = true;
                continue;
            }
            _ if depth == 0 && at_element_start => elements.push(j),
            _ => {}
        }
        match tok {
            Tok::Open(_) => depth += 1,
            Tok::Close => depth -= 1,
            _ => {}
        }
        at_element_start = false;
    }
    elements
}

/// Whether the path starting at `toks[at]` (a module name) is one of the `nix` modules
/// code outside providers may use.
fn is_nix_module_allowed(toks: &[Tok], at: usize) -> bool {
    NIX_OUTSIDE_PROVIDERS.iter().any(|chain| {
        chain.iter().enumerate().all(|(k, name)| {
            matches!(toks.get(at + 2 * k), Some(Tok::Ident(n, _)) if n == name)
                && (k + 1 == chain.len() || toks.get(at + 2 * k + 1) == Some(&Tok::PathSep))
        })
    })
}

/// The line of a use of `nix` (at `toks[i]`) that reaches beyond its allowed modules:
/// `nix::unistd::…`, `use nix::*`, `use nix::{fcntl, …}`, `nix as n`. A path that only
/// ends in a segment named `nix` (`crate::nix::…`) is someone else's module.
fn nix_outside_its_modules(toks: &[Tok], i: usize) -> Option<usize> {
    let Tok::Ident(_, line) = &toks[i] else {
        return None;
    };
    if i >= 2 && toks[i - 1] == Tok::PathSep && matches!(toks[i - 2], Tok::Ident(..)) {
        return None;
    }
    match toks.get(i + 1) {
        Some(Tok::Ident(kw, _)) if kw == "as" => return Some(*line),
        Some(Tok::PathSep) => {}
        _ => return None,
    }
    match toks.get(i + 2) {
        Some(Tok::Ident(..)) => (!is_nix_module_allowed(toks, i + 2)).then_some(*line),
        Some(Tok::Open(Delimiter::Brace)) => {
            tree_elements(toks, i + 3)
                .into_iter()
                .find_map(|j| match &toks[j] {
                    Tok::Ident(_, l) => (!is_nix_module_allowed(toks, j)).then_some(*l),
                    Tok::Star => Some(*line),
                    _ => None,
                })
        }
        _ => Some(*line),
    }
}

fn scan_tokens(file: &Path, stream: TokenStream, findings: &mut Vec<Finding>) {
    let mut toks = Vec::new();
    flatten(stream, &mut toks);
    let mut report = |line: usize, banned: &'static str| {
        let finding = Finding {
            file: file.to_path_buf(),
            line,
            banned,
        };
        if !findings.contains(&finding) {
            findings.push(finding);
        }
    };
    for i in 0..toks.len() {
        let Tok::Ident(krate, line) = &toks[i] else {
            continue;
        };
        if krate == "nix" {
            if let Some(line) = nix_outside_its_modules(&toks, i) {
                report(line, "nix");
            }
            continue;
        }
        if krate != "std" && krate != "tokio" {
            continue;
        }
        // `use std as s;` / `extern crate std as s;` would hide later paths.
        if matches!(toks.get(i + 1), Some(Tok::Ident(kw, _)) if kw == "as") {
            report(
                *line,
                if krate == "std" {
                    "std::fs"
                } else {
                    "tokio::fs"
                },
            );
            continue;
        }
        if toks.get(i + 1) != Some(&Tok::PathSep) {
            continue;
        }
        match toks.get(i + 2) {
            Some(Tok::Ident(module, _)) => {
                if let Some(banned) = banned_module(krate, module)
                    && !(module == "env" && is_allowed_env_path(&toks, i + 3))
                {
                    report(*line, banned);
                }
            }
            // `use std::*;` imports every banned module at once.
            Some(Tok::Star) => report(
                *line,
                if krate == "std" {
                    "std::fs"
                } else {
                    "tokio::fs"
                },
            ),
            // `use std::{fs, io::Read};`: check the first identifier of each element.
            Some(Tok::Open(Delimiter::Brace)) => {
                for j in tree_elements(&toks, i + 3) {
                    if let Tok::Ident(module, l) = &toks[j]
                        && let Some(banned) = banned_module(krate, module)
                        && !(module == "env" && is_allowed_env_path(&toks, j + 1))
                    {
                        report(*l, banned);
                    }
                }
            }
            _ => {}
        }
    }
}

fn check_dependency_direction(root: &Path) -> anyhow::Result<Vec<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
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
    let mut workspace: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // ... and what a crate's own code is built with (normal and build dependencies).
    let mut built_with: BTreeMap<String, Vec<String>> = BTreeMap::new();
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
    let mut problems = dependency_problems(&workspace);
    problems.extend(external_problems(&built_with, &workspace));
    Ok(problems)
}

/// Outside crates a crate is built with that its [`ALLOWED_EXTERNAL`] entry does not name.
fn external_problems(
    built_with: &BTreeMap<String, Vec<String>>,
    workspace: &BTreeMap<String, Vec<String>>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for name in workspace.keys() {
        let Some((_, allowed)) = ALLOWED_EXTERNAL.iter().find(|(n, _)| *n == short(name)) else {
            problems.push(format!(
                "crate {name} has no entry in ALLOWED_EXTERNAL (xtask/src/lint.rs): say which \
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
                     (xtask/src/lint.rs) does not name; a library reaches processes, files and \
                     the environment only through caps — if {dep} cannot, add it there"
                ));
            }
        }
    }
    problems
}

fn short(name: &str) -> &str {
    name.strip_prefix("warden-").unwrap_or(name)
}

/// Problems with the workspace-internal edges of `packages` (name → dependency names).
fn dependency_problems(packages: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, deps) in packages {
        let Some((_, allowed)) = ALLOWED_DEPS.iter().find(|(n, _)| *n == short(name)) else {
            problems.push(format!(
                "crate {name} has no entry in ALLOWED_DEPS (xtask/src/lint.rs): say which \
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
    use super::*;

    /// Some problem in `problems` says `needle`.
    fn assert_mentions(problems: &[String], needle: &str) {
        assert!(
            problems.iter().any(|p| p.contains(needle)),
            "no problem mentions {needle:?}: {problems:?}"
        );
    }

    fn scan(src: &str) -> Vec<&'static str> {
        scan_source(Path::new("crates/policy/src/lib.rs"), src)
            .unwrap()
            .into_iter()
            .map(|f| f.banned)
            .collect()
    }

    #[test]
    fn catches_every_spelling_of_a_banned_access() {
        let cases = [
            (
                "fn f() { std::process::Command::new(\"sh\"); }",
                "std::process",
            ),
            ("fn f() { ::std::fs::read(\"x\"); }", "std::fs"),
            ("use std::fs;", "std::fs"),
            ("use std::fs::File;", "std::fs"),
            ("use std::{io, process::Command};", "std::process"),
            ("use std::{io::{self, Read}, fs};", "std::fs"),
            ("use std as s;", "std::fs"),
            ("use std::*;", "std::fs"),
            ("fn f() { let _ = std::env::var(\"HOME\"); }", "std::env"),
            ("use std::env::var_os;", "std::env"),
            (
                "async fn f() { tokio::fs::read(\"x\").await; }",
                "tokio::fs",
            ),
            ("use tokio::process::Command;", "tokio::process"),
            (
                "fn f() { println!(\"{:?}\", std::fs::read(\"x\")); }",
                "std::fs",
            ),
            (
                "macro_rules! m { () => { std::process::exit(1) } }",
                "std::process",
            ),
            (
                "mod inner { fn f() { std::fs::remove_file(\"x\"); } }",
                "std::fs",
            ),
        ];
        for (src, banned) in cases {
            assert_eq!(scan(src), vec![banned], "{src}");
        }
    }

    #[test]
    fn ignores_strings_comments_tests_and_harmless_paths() {
        let clean = [
            "// std::fs::read is banned\nfn f() {}",
            "/// Uses `std::process::Command`.\nfn f() {}",
            "fn f() -> &'static str { \"std::fs::read\" }",
            "use std::io::Read; use std::collections::HashMap;",
            "const OS: &str = std::env::consts::OS;",
            "#[cfg(test)] mod tests { fn f() { std::fs::read(\"x\"); } }",
            "mod m { #[cfg(test)] fn f() { std::process::exit(1); } }",
            "use tokio::io::AsyncReadExt;",
        ];
        for src in clean {
            assert!(scan(src).is_empty(), "{src}: {:?}", scan(src));
        }
    }

    #[test]
    fn cfg_not_test_is_not_exempt() {
        assert_eq!(
            scan("#[cfg(not(test))] fn f() { std::fs::read(\"x\"); }"),
            vec!["std::fs"]
        );
    }

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
        let problems = dependency_problems(&packages);
        assert_mentions(&problems, "warden-caps -> warden-cli");
        assert_mentions(&problems, "warden-mystery has no entry");
        assert_eq!(problems.len(), 2, "{problems:?}");
    }

    #[test]
    fn nix_outside_providers_reaches_only_sockets_and_errno() {
        for (src, why) in [
            ("fn f() { nix::unistd::fork(); }", "a process call"),
            ("use nix::fcntl::open;", "a file call"),
            ("use nix::*;", "everything at once"),
            (
                "use nix::{errno::Errno, unistd};",
                "one bad element among good ones",
            ),
            (
                "use nix::{sys::{socket, stat}};",
                "a nested tree (not read: refused)",
            ),
            ("use nix as n;", "a renamed crate hides later paths"),
            ("extern crate nix as n;", "the same, the old way"),
            ("use nix::libc;", "raw system calls"),
            (
                "fn f() { ::nix::sys::stat::stat(\"/\"); }",
                "an absolute path",
            ),
            (
                "fn f() { println!(\"{:?}\", nix::unistd::getpid()); }",
                "inside a macro",
            ),
        ] {
            assert_eq!(scan(src), vec!["nix"], "{why}: {src}");
        }
        for src in [
            "use nix::sys::socket::{MsgFlags, recv};",
            "fn f() -> bool { nix::errno::Errno::last() == nix::errno::Errno::EINTR }",
            "use nix::{errno::Errno, sys::socket::shutdown};",
            "fn f() { crate::nix::unistd::fork(); }",
            "// nix::unistd::fork()\nfn f() {}",
            "#[cfg(test)] mod tests { fn f() { nix::unistd::fork(); } }",
        ] {
            assert!(scan(src).is_empty(), "{src}: {:?}", scan(src));
        }
    }

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
        let problems = external_problems(&built_with, &workspace);
        assert_mentions(&problems, "warden-policy depends on rustix");
        assert_mentions(&problems, "warden-mystery has no entry in ALLOWED_EXTERNAL");
        assert_eq!(problems.len(), 2, "{problems:?}");
    }

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
