//! The token scan: which `std`, `tokio`, `nix` and concrete `caps` provider paths a
//! file's code reaches, read from token streams parsed by `syn`, so mentions in strings
//! and comments never count while `use` trees, paths and macro bodies do. Items under
//! `#[cfg(test)]` are skipped.

use std::fmt;
use std::path::{Path, PathBuf};

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
    // The concrete providers that reach the OS, and the process supervisor and mount
    // table behind them: a library is handed an `Arc<dyn Fs>` / `Arc<dyn Shell>` by the
    // composition root and never picks (or opens) one itself.
    Banned {
        path: "caps::LocalFs",
        instead: "take an Arc<dyn caps::Fs> from the composition root",
    },
    Banned {
        path: "caps::BoundedFs",
        instead: "take an Arc<dyn caps::Fs> from the composition root (a closure that opens one, like gateway::OpenRoot, when the library decides where)",
    },
    Banned {
        path: "caps::LocalShell",
        instead: "take an Arc<dyn caps::Shell> from the composition root",
    },
    Banned {
        path: "caps::BoundedShell",
        instead: "take an Arc<dyn caps::Shell> from the composition root",
    },
    Banned {
        path: "caps::process",
        instead: "run programs through caps::Shell",
    },
    Banned {
        path: "caps::mounts",
        instead: "take the facts as values from the composition root",
    },
];

/// What `use KRATE::*` or `KRATE as alias` is reported as: it reaches every banned
/// module of that crate at once (`None`: the crate is not scanned here).
fn whole_crate(krate: &str) -> Option<&'static str> {
    match krate {
        "std" => Some("std::fs"),
        "tokio" => Some("tokio::fs"),
        "caps" => Some("caps::LocalFs"),
        _ => None,
    }
}

/// The `nix` modules code outside providers may use: calls on a socket the crate owns.
const NIX_OUTSIDE_PROVIDERS: &[&[&str]] = &[&["sys", "socket"], &["errno"]];

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
        let Some(whole) = whole_crate(krate) else {
            continue;
        };
        // A path that only ends in a segment named like the crate (`crate::caps::…`) is
        // someone else's module.
        if i >= 2 && toks[i - 1] == Tok::PathSep && matches!(toks[i - 2], Tok::Ident(..)) {
            continue;
        }
        // `use std as s;` / `extern crate std as s;` would hide later paths.
        if matches!(toks.get(i + 1), Some(Tok::Ident(kw, _)) if kw == "as") {
            report(*line, whole);
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
            Some(Tok::Star) => report(*line, whole),
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_library_names_no_concrete_provider_and_no_supervisor() {
        for (src, banned) in [
            ("use caps::LocalFs;", "caps::LocalFs"),
            ("use caps::{Fs, BoundedFs};", "caps::BoundedFs"),
            (
                "fn f() { let _ = caps::BoundedFs::open(\"/x\"); }",
                "caps::BoundedFs",
            ),
            ("use caps::{Shell, LocalShell as S};", "caps::LocalShell"),
            (
                "fn f() -> caps::BoundedShell { todo!() }",
                "caps::BoundedShell",
            ),
            ("use caps::process::supervise;", "caps::process"),
            ("use caps::mounts::read_mount_table;", "caps::mounts"),
            ("use caps::*;", "caps::LocalFs"),
            ("use caps as c;", "caps::LocalFs"),
        ] {
            assert_eq!(scan(src), vec![banned], "{src}");
        }
        for clean in [
            "use caps::{Fs, Shell, FileKind, WriteOptions};",
            "fn f(fs: std::sync::Arc<dyn caps::Fs>) {}",
            "use crate::caps::LocalFs;",
            "/// Give it a `caps::LocalFs`.\nfn f() {}",
        ] {
            assert!(scan(clean).is_empty(), "{clean}: {:?}", scan(clean));
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
}
