//! Allowlist entries that see arguments, and the profiles that narrow them, through the
//! whole policy pipeline: what matches, what misses and why, what `explain` shows, and
//! what "allow always" offers.

// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;

use caps::{Fs, MemoryFs, WriteOptions};
use policy::{
    Allowlist, ArgsMatch, Ask, AskFallback, CaseMode, CommandInput, Config, Decision, ExecParams,
    Explanation, Host, HostCeiling, Profiles, RuleSpec, Scope, Security,
};
use support::{Setup, explain_request};

fn world() -> MemoryFs {
    let fs = MemoryFs::new();
    fs.create_dir_all(Path::new("/usr/bin"), 0o755).unwrap();
    fs.create_dir_all(Path::new("/work"), 0o755).unwrap();
    for p in ["git", "find", "ls", "cargo", "mawk", "tar"] {
        let opts = WriteOptions {
            mode: 0o755,
            ..Default::default()
        };
        fs.write(&Path::new("/usr/bin").join(p), b"", opts).unwrap();
    }
    fs.symlink("/usr/bin/mawk", "/usr/bin/awk").unwrap();
    fs
}

fn rule(pattern: &str, args: Option<&[&str]>, exact: bool, allow: &[&str]) -> RuleSpec {
    RuleSpec {
        pattern: pattern.into(),
        args: args.map(|a| a.iter().map(|s| s.to_string()).collect()),
        args_match: if exact {
            ArgsMatch::Exact
        } else {
            ArgsMatch::Prefix
        },
        allow_flags: allow.iter().map(|s| s.to_string()).collect(),
        ..RuleSpec::default()
    }
}

fn explain_with(fs: &MemoryFs, rules: &[RuleSpec], command: &str) -> Explanation {
    let allowlist = Allowlist::compile_rules(
        rules,
        Path::new("/home/u"),
        CaseMode::Sensitive,
        Profiles::shipped(),
    );
    assert!(
        allowlist.rejected().is_empty(),
        "{:?}",
        allowlist.rejected()
    );
    let ceiling = HostCeiling {
        security: Security::Allowlist,
        ask: Ask::OnMiss,
        ask_fallback: AskFallback::Deny,
    };
    let setup = Setup {
        fs,
        allowlist: &allowlist,
        cwd: "/work",
        config: &Config::default(),
        ceiling: &ceiling,
    };
    let params = ExecParams {
        host: Some(Host::Gateway),
        security: Some(Security::Allowlist),
        ..Default::default()
    };
    explain_request(&setup, &params, CommandInput::Shell(command))
}

fn allowed(fs: &MemoryFs, rules: &[RuleSpec], command: &str) -> bool {
    explain_with(fs, rules, command).decision.is_allow()
}

#[test]
fn argument_patterns_decide_which_invocations_an_entry_covers() {
    let fs = world();
    let status = [rule("/usr/bin/git", Some(&["status"]), false, &[])];
    assert!(allowed(&fs, &status, "git status"));
    assert!(allowed(&fs, &status, "git status --short"));
    assert!(!allowed(&fs, &status, "git push"));
    assert!(!allowed(&fs, &status, "git"));
    let log_any = [rule("/usr/bin/git", Some(&["log", "*"]), false, &[])];
    assert!(!allowed(&fs, &log_any, "git log"));
    assert!(allowed(&fs, &log_any, "git log -n 3"));
    let exact = [rule("git", Some(&["status", "-s"]), true, &[])];
    assert!(allowed(&fs, &exact, "git status -s"));
    assert!(!allowed(&fs, &exact, "git status -s -b"));
    // Every segment must match its own entry.
    let both = [
        rule("/usr/bin/git", Some(&["status"]), false, &[]),
        rule("/usr/bin/ls", None, false, &[]),
    ];
    assert!(allowed(&fs, &both, "git status && ls -la"));
    assert!(!allowed(&fs, &both, "git status && git push"));
    // An entry without arguments keeps version 1's meaning: any arguments...
    let plain = [rule("/usr/bin/git", None, false, &[])];
    assert!(allowed(&fs, &plain, "git push --force origin main"));
    // ...but never a flag of the profile.
    assert!(!allowed(&fs, &plain, "git -c alias.x='!id > FILE' x"));
}

#[test]
fn a_profile_hit_is_a_miss_that_names_the_flag_unless_the_entry_allows_it() {
    let fs = world();
    let plain = [rule("/usr/bin/git", None, false, &[])];
    let e = explain_with(&fs, &plain, "git -c 'alias.x=!id > FILE' x");
    let Decision::Ask { rule: why, .. } = &e.decision else {
        panic!("{:?}", e.decision)
    };
    assert!(
        why.contains("git -c alias.x: sets \"alias.x\", a configuration key the git grammar does not know to be safe"),
        "{why}"
    );
    let text = e.to_text();
    assert!(text.contains("profile: git -c alias.x: sets"), "{text}");
    assert!(text.contains("no entry allows it"), "{text}");
    assert!(text.contains("miss: git -c alias.x"), "{text}");
    // The grammar's reading, word by word: what it accepted and what it refused.
    assert!(text.contains("git grammar: refuses 2 word(s)"), "{text}");
    assert!(text.contains("+ -c: option"), "{text}");
    assert!(
        text.contains("- x: refused: a subcommand the git grammar does not know"),
        "{text}"
    );
    let json = serde_json::to_value(&e).unwrap();
    assert_eq!(
        json["evaluation"]["leaves"][0]["profile"][0]["name"],
        "-c alias.x"
    );
    // Word by word: `-c` accepted as an option, its value refused (and not also
    // accepted), the alias refused as a subcommand.
    let words = json["evaluation"]["leaves"][0]["grammar"]["words"]
        .as_array()
        .unwrap()
        .clone();
    let verdicts: Vec<(u64, bool, &str)> = words
        .iter()
        .map(|w| {
            (
                w["index"].as_u64().unwrap(),
                w["accepted"].as_bool().unwrap(),
                w["verdict"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        verdicts,
        vec![
            (1, true, "option"),
            (
                2,
                false,
                "refused: sets \"alias.x\", a configuration key the git grammar does not know to be safe (keys such as alias.*, core.pager and diff.external run programs)"
            ),
            (
                3,
                false,
                "refused: a subcommand the git grammar does not know"
            ),
        ]
    );

    // Allowed by name (a glob over names): the same command is allowed, and explain
    // says so. The alias is a subcommand the grammar does not know: named too.
    let allowing = [rule("/usr/bin/git", None, false, &["-c alias.*", "x"])];
    let e = explain_with(&fs, &allowing, "git -c 'alias.x=!id > FILE' x");
    assert!(e.decision.is_allow());
    assert!(
        e.to_text().contains("allowed by the entry"),
        "{}",
        e.to_text()
    );
    // Another flag is still a miss.
    assert!(!allowed(&fs, &allowing, "git log --output=/tmp/elsewhere"));
    // `*` allows every hit: the meaning such an entry had before profiles.
    let everything = [rule("/usr/bin/git", None, false, &["*"])];
    assert!(allowed(&fs, &everything, "git log --output=/tmp/elsewhere"));

    // A later entry that allows the hit wins over an earlier one that does not.
    let two = [
        rule("/usr/bin/find", None, false, &[]),
        rule("/usr/bin/find", Some(&["."]), false, &["-exec"]),
    ];
    assert!(allowed(&fs, &two, "find . -exec wc -l '{}' +"));
    assert!(!allowed(&fs, &two, "find / -exec wc -l '{}' +"));
    // The profile is found by the name the file resolves to, too (awk → mawk).
    let awk = [rule("/usr/bin/mawk", None, false, &[])];
    assert!(allowed(&fs, &awk, "awk '{ print $1 }' f"));
    let e = explain_with(&fs, &awk, "awk 'BEGIN { system(\"id\") }'");
    assert!(!e.decision.is_allow());
    assert!(
        e.to_text().contains("system(): runs a shell command"),
        "{}",
        e.to_text()
    );
}

#[test]
fn allow_always_offers_the_narrowest_useful_rule_and_the_others() {
    let fs = world();
    let always =
        |command: &str| policy::derive_allow_always(&explain_with(&fs, &[], command).evaluation);
    // A multi-command tool: program plus subcommand, preselected between exact and
    // program.
    let a = always("git -C repo status -s");
    let scopes: Vec<Scope> = a.options.iter().map(|o| o.scope).collect();
    assert_eq!(
        scopes,
        vec![Scope::Exact, Scope::Subcommand, Scope::Program]
    );
    assert_eq!(a.default, 1);
    assert_eq!(
        a.default_rules(),
        &[rule(
            "/usr/bin/git",
            Some(&["-C", "repo", "status"]),
            false,
            &[]
        )]
    );
    assert_eq!(
        a.options[0].rules,
        vec![rule(
            "/usr/bin/git",
            Some(&["-C", "repo", "status", "-s"]),
            true,
            &[]
        )]
    );
    assert_eq!(
        a.options[2].rules,
        vec![rule("/usr/bin/git", None, false, &[])]
    );
    // A single-purpose tool: the program alone.
    let a = always("ls -la /tmp");
    assert_eq!(a.default_rules(), &[rule("/usr/bin/ls", None, false, &[])]);
    // A command using a listed flag: exactly as written, with only that flag allowed,
    // and every word escaped so it matches only itself.
    let a = always("find . -name '*.o' -exec rm '{}' +");
    assert_eq!(
        a.default_rules(),
        &[rule(
            "/usr/bin/find",
            Some(&[".", "-name", "\\*.o", "-exec", "rm", "{}", "+"]),
            true,
            &["-exec"]
        )]
    );
    let stored = a.default_rules().to_vec();
    assert!(allowed(&fs, &stored, "find . -name '*.o' -exec rm '{}' +"));
    assert!(!allowed(&fs, &stored, "find . -name 'x.o' -exec rm '{}' +"));
    assert!(!allowed(&fs, &stored, "find . -name '*.o' -exec sh '{}' +"));
    // Subcommands of other tools, after their own options.
    let a = always("cargo +nightly build --release");
    assert_eq!(
        a.default_rules(),
        &[rule(
            "/usr/bin/cargo",
            Some(&["+nightly", "build"]),
            false,
            &[]
        )]
    );
    // What is stored matches the command it was derived from, at every scope.
    for command in ["git -C repo status -s", "ls -la /tmp", "cargo test -p x"] {
        for option in always(command).options {
            assert!(allowed(&fs, &option.rules, command), "{command} {option:?}");
        }
    }
}

#[test]
fn entries_that_cannot_hold_are_set_aside_and_say_why() {
    let bad = [
        RuleSpec {
            examples: policy::Examples {
                matches: vec![vec!["git".into(), "push".into()]],
                not_matches: vec![],
                ..Default::default()
            },
            ..rule("/usr/bin/git", Some(&["status"]), false, &[])
        },
        RuleSpec {
            examples: policy::Examples {
                matches: vec![],
                not_matches: vec![vec!["git".into(), "status".into()]],
                ..Default::default()
            },
            ..rule("/usr/bin/git", Some(&["status"]), false, &[])
        },
        RuleSpec {
            examples: policy::Examples {
                matches: vec![vec![
                    "git".into(),
                    "-c".into(),
                    "alias.x=!id".into(),
                    "x".into(),
                ]],
                not_matches: vec![],
                ..Default::default()
            },
            ..rule("/usr/bin/git", None, false, &[])
        },
        rule("/usr/bin/git", Some(&["trailing\\"]), false, &[]),
    ];
    let a = Allowlist::compile_rules(
        &bad,
        Path::new("/home/u"),
        CaseMode::Sensitive,
        Profiles::shipped(),
    );
    assert_eq!(a.len(), 0);
    let reasons: Vec<&str> = a.rejected().iter().map(|r| r.reason.as_str()).collect();
    assert!(
        reasons[0].contains("must match but does not: its arguments do not match"),
        "{reasons:?}"
    );
    assert!(
        reasons[1].contains("must not match but does"),
        "{reasons:?}"
    );
    assert!(
        reasons[2].contains("git -c alias.x is not allowed"),
        "{reasons:?}"
    );
    assert!(reasons[3].contains("lone"), "{reasons:?}");
    // Examples that hold are fine.
    let good = RuleSpec {
        examples: policy::Examples {
            matches: vec![vec!["git".into(), "status".into(), "-s".into()]],
            not_matches: vec![
                vec!["git".into(), "push".into()],
                vec![
                    "git".into(),
                    "-c".into(),
                    "alias.status=!id".into(),
                    "status".into(),
                ],
            ],
            ..Default::default()
        },
        ..rule("/usr/bin/git", Some(&["status"]), false, &[])
    };
    assert!(good.validate(&Profiles::shipped()).is_ok());
}
