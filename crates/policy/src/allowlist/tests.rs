//! Tests of `allowlist`.

use super::*;
use proptest::prelude::*;
use std::path::PathBuf;

fn exe(invoked: &str, how: Invocation, path: &str) -> ResolvedExe {
    ResolvedExe {
        invoked: invoked.into(),
        how,
        path: PathBuf::from(path),
        id: caps::FileId::default(),
    }
}

fn list(patterns: &[&str], case: CaseMode) -> Allowlist {
    let p: Vec<String> = patterns.iter().map(|s| s.to_string()).collect();
    Allowlist::compile(&p, Path::new("/home/u"), case)
}

#[test]
fn star_never_crosses_a_slash_but_double_star_does() {
    let a = list(&["/usr/bin/*", "~/Projects/**/bin/rg"], CaseMode::Sensitive);
    assert!(
        a.find_match(&exe("ls", Invocation::Bare, "/usr/bin/ls"))
            .is_some()
    );
    assert!(
        a.find_match(&exe("x", Invocation::Absolute, "/usr/bin/sub/x"))
            .is_none()
    );
    assert_eq!(
        a.find_match(&exe(
            "rg",
            Invocation::Relative,
            "/home/u/Projects/x/y/bin/rg"
        )),
        Some("~/Projects/**/bin/rg")
    );
    assert!(
        a.find_match(&exe("rg", Invocation::Absolute, "/home/u/Projects/bin/rg"))
            .is_some()
    );
    assert!(
        a.find_match(&exe(
            "rg",
            Invocation::Absolute,
            "/home/other/Projects/bin/rg"
        ))
        .is_none()
    );
}

#[test]
fn glob_characters_in_the_home_match_only_themselves() {
    let p = vec!["~/bin/tool".to_string()];
    let a = Allowlist::compile(&p, Path::new("/home/a*b"), CaseMode::Sensitive);
    assert!(
        a.find_match(&exe("t", Invocation::Absolute, "/home/a*b/bin/tool"))
            .is_some()
    );
    assert!(
        a.find_match(&exe("t", Invocation::Absolute, "/home/aXYb/bin/tool"))
            .is_none()
    );
}

#[test]
fn question_mark_is_one_character_never_a_slash() {
    let a = list(&["/opt/tool?"], CaseMode::Sensitive);
    assert!(
        a.find_match(&exe("t", Invocation::Absolute, "/opt/tool1"))
            .is_some()
    );
    assert!(
        a.find_match(&exe("t", Invocation::Absolute, "/opt/tool/"))
            .is_none()
    );
    assert!(
        a.find_match(&exe("t", Invocation::Absolute, "/opt/tool12"))
            .is_none()
    );
}

#[test]
fn bare_names_match_only_bare_invocations() {
    let a = list(&["rg"], CaseMode::Sensitive);
    assert_eq!(
        a.find_match(&exe("rg", Invocation::Bare, "/usr/bin/rg")),
        Some("rg")
    );
    assert!(
        a.find_match(&exe("./rg", Invocation::Relative, "/work/rg"))
            .is_none()
    );
    assert!(
        a.find_match(&exe("/tmp/rg", Invocation::Absolute, "/tmp/rg"))
            .is_none()
    );
}

#[test]
fn case_folding_is_a_mode() {
    let sensitive = list(&["~/tools/*"], CaseMode::Sensitive);
    let folded = list(&["~/tools/*"], CaseMode::Insensitive);
    let evil = exe("evil", Invocation::Absolute, "/home/u/TOOLS/evil");
    assert!(
        sensitive.find_match(&evil).is_none(),
        "Linux must not fold case"
    );
    assert!(
        folded.find_match(&evil).is_some(),
        "macOS/Windows fold case"
    );
    let rg_upper = exe("RG", Invocation::Bare, "/usr/bin/RG");
    assert!(
        list(&["rg"], CaseMode::Sensitive)
            .find_match(&rg_upper)
            .is_none()
    );
    assert!(
        list(&["rg"], CaseMode::Insensitive)
            .find_match(&rg_upper)
            .is_some()
    );
}

#[test]
fn invalid_patterns_are_rejected_at_write_and_never_match_at_load() {
    for bad in [
        "",
        " /usr/bin/ls",
        "bin/ls",
        "./ls",
        "~root/bin/x",
        "/usr/bin/[",
        "/a/../b",
        "/usr/bin/l\ns",
    ] {
        assert!(validate_pattern(bad).is_err(), "{bad:?}");
    }
    assert_eq!(validate_pattern("rg").unwrap(), PatternKind::BareName);
    assert_eq!(validate_pattern("~/bin/*").unwrap(), PatternKind::Path);
    let a = list(
        &["/usr/bin/[", "bin/ls", "/usr/bin/ls"],
        CaseMode::Sensitive,
    );
    assert_eq!(a.rejected().len(), 2);
    assert_eq!(a.len(), 1);
    assert!(
        a.find_match(&exe("[", Invocation::Absolute, "/usr/bin/["))
            .is_none()
    );
}

/// A deliberately simple matcher with the documented semantics.
fn reference(pattern: &str, path: &str) -> bool {
    fn component(p: &[char], s: &[char]) -> bool {
        match (p.first(), s.first()) {
            (None, None) => true,
            (Some('*'), _) => component(&p[1..], s) || (!s.is_empty() && component(p, &s[1..])),
            (Some('?'), Some(_)) => component(&p[1..], &s[1..]),
            (Some(a), Some(b)) if a == b => component(&p[1..], &s[1..]),
            _ => false,
        }
    }
    fn parts(p: &[&str], s: &[&str]) -> bool {
        match p.first() {
            None => s.is_empty(),
            // A trailing `**` matches one or more components; elsewhere zero or more.
            Some(&"**") if p.len() == 1 => !s.is_empty(),
            Some(&"**") => (0..=s.len()).any(|k| parts(&p[1..], &s[k..])),
            Some(c) => {
                !s.is_empty()
                    && component(
                        &c.chars().collect::<Vec<_>>(),
                        &s[0].chars().collect::<Vec<_>>(),
                    )
                    && parts(&p[1..], &s[1..])
            }
        }
    }
    let p: Vec<&str> = pattern.split('/').collect();
    let s: Vec<&str> = path.split('/').collect();
    parts(&p, &s)
}

proptest! {
    #[test]
    fn matcher_agrees_with_the_reference(
        pat in proptest::collection::vec(prop_oneof![Just("**".to_string()), "[ab.*?]{1,3}"], 1..5),
        path in proptest::collection::vec("[ab.]{1,3}", 1..5),
    ) {
        prop_assume!(pat.iter().all(|c| c == "**" || !c.contains("**")));
        // Canonical paths never contain `.` or `..` components.
        prop_assume!(path.iter().all(|c| c != "." && c != ".."));
        let pattern = format!("/{}", pat.join("/"));
        let path = format!("/{}", path.join("/"));
        let a = list(&[pattern.as_str()], CaseMode::Sensitive);
        prop_assume!(a.rejected().is_empty());
        let got = a.find_match(&exe("x", Invocation::Absolute, &path)).is_some();
        prop_assert_eq!(got, reference(&pattern, &path), "pattern {} path {}", pattern, path);
    }
}
