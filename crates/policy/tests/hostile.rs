//! Hostile commands against a generous allowlist: each must be a miss (ask or deny),
//! never an allow.

// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;

use caps::{Fs, MemoryFs, WriteOptions};
use policy::{
    Allowlist, Ask, AskFallback, CaseMode, CommandInput, Config, Decision, EvalContext, ExecParams,
    Host, HostCeiling, Security, TrustedPath,
};
use support::{Setup, explain_request};

fn world() -> MemoryFs {
    let fs = MemoryFs::new();
    let exe = WriteOptions {
        mode: 0o755,
        ..Default::default()
    };
    for d in [
        "/usr/bin",
        "/tmp",
        "/work/bin",
        "/home/u/TOOLS",
        "/home/u/tools",
    ] {
        fs.create_dir_all(Path::new(d), 0o755).unwrap();
    }
    for p in [
        "/usr/bin/ls",
        "/usr/bin/cat",
        "/usr/bin/bash",
        "/usr/bin/sudo",
        "/usr/bin/env",
        "/usr/bin/nice",
        "/usr/bin/python3",
        "/work/bin/nice",
        "/work/bin/env",
        "/work/bin/bash",
        "/tmp/sh",
        "/tmp/evil",
        "/work/bin/ls",
        "/home/u/TOOLS/evil",
        "/home/u/tools/ok",
    ] {
        fs.write(Path::new(p), b"", exe).unwrap();
    }
    fs.symlink("/tmp/evil", "/usr/bin/innocent").unwrap();
    fs
}

fn decision(fs: &MemoryFs, patterns: &[&str], input: CommandInput<'_>) -> Decision {
    let patterns: Vec<String> = patterns.iter().map(|s| s.to_string()).collect();
    let allowlist = Allowlist::compile(&patterns, Path::new("/home/u"), CaseMode::Sensitive);
    let ceiling = HostCeiling {
        security: Security::Allowlist,
        ask: Ask::Off,
        ask_fallback: AskFallback::Deny,
    };
    let setup = Setup {
        fs,
        allowlist: &allowlist,
        cwd: "/work",
        config: &Config::default(),
        ceiling: &ceiling,
    };
    // The allowlist governs the gateway (and node) hosts.
    let params = ExecParams {
        host: Some(Host::Gateway),
        security: Some(Security::Full),
        ask: Some(Ask::Off),
        ..Default::default()
    };
    explain_request(&setup, &params, input).decision
}

#[test]
fn hostile_shell_strings_are_never_allowed() {
    let fs = world();
    let generous = ["/usr/bin/ls", "/usr/bin/cat", "ls", "cat", "~/tools/*"];
    // Sanity: the plain command is allowed.
    assert!(decision(&fs, &generous, CommandInput::Shell("ls -la && cat x")).is_allow());
    // Wrappers and shells are looked through only when they are the system's own.
    assert!(decision(&fs, &generous, CommandInput::Shell("nice env ls")).is_allow());
    assert!(decision(&fs, &generous, CommandInput::Shell("/usr/bin/nice ls")).is_allow());
    let hostile = [
        "./bin/nice ls",
        "bin/env ls",
        "/work/bin/bash -c ls",
        "/tmp/sh -c 'ls'",
        "nice ./bin/env ls",
        "bash -c './bin/nice ls'",
        "ls; /tmp/evil",
        "ls && evil",
        "ls | sh",
        "ls $(evil)",
        "ls `evil`",
        "ls > /etc/passwd",
        "ls 2>/dev/null",
        "cat < /etc/shadow",
        "LD_PRELOAD=/tmp/x.so ls",
        "ls &",
        "(ls)",
        "{ ls; }",
        "ls || bash -c evil",
        "bash -c 'ls; /tmp/evil'",
        "sudo ls",
        "env ls; env -i evil",
        "env PATH=/tmp ls",
        "python3 -c 'import os'",
        "/usr/bin/../../tmp/evil",
        "../tmp/evil",
        "./bin/ls",
        "innocent",
        "~/TOOLS/evil",
        "/home/u/TOOLS/evil",
        "ｌｓ",
        "l\u{200b}s",
        "\u{202e}sl",
        "ls\nevil",
        "exec ls",
        "eval ls",
        "ls ${IFS}",
        "ls *",
        "",
    ];
    for script in hostile {
        let d = decision(&fs, &generous, CommandInput::Shell(script));
        assert!(!d.is_allow(), "{script:?} was allowed: {d:?}");
    }
}

#[test]
fn hostile_argvs_are_never_allowed() {
    let fs = world();
    let generous = ["/usr/bin/ls", "ls"];
    let cases: Vec<Vec<&str>> = vec![
        vec![],
        vec![""],
        vec!["./bin/ls"],
        vec!["/tmp/evil"],
        vec!["sudo", "ls"],
        vec!["env", "LD_PRELOAD=x", "ls"],
        vec!["bash", "-c", "ls; evil"],
        vec!["innocent"],
        vec!["ls\0"],
    ];
    for argv in cases {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let d = decision(&fs, &generous, CommandInput::Argv(&argv));
        assert!(!d.is_allow(), "{argv:?} was allowed: {d:?}");
    }
    let huge = vec!["ls".to_string(); 5000];
    assert!(!decision(&fs, &generous, CommandInput::Argv(&huge)).is_allow());
}

/// The patterns of the rules "allow always" would store by default.
fn stored(e: &policy::Explanation) -> Vec<String> {
    let always = policy::derive_allow_always(&e.evaluation);
    for rule in always.default_rules() {
        assert!(
            rule.args.is_none(),
            "single-purpose programs are stored alone: {rule:?}"
        );
    }
    always
        .default_rules()
        .iter()
        .map(|r| r.pattern.clone())
        .collect()
}

#[test]
fn allow_always_never_stores_shells_interpreters_or_wrappers() {
    let fs = world();
    let setup = Setup {
        fs: &fs,
        allowlist: &Allowlist::default(),
        cwd: "/work",
        config: &Config::default(),
        ceiling: &HostCeiling::DENY_ALL,
    };
    let explain = |text| explain_request(&setup, &ExecParams::default(), CommandInput::Shell(text));
    let e = explain("bash -c 'ls -l && python3 x.py' | cat");
    assert_eq!(stored(&e), vec!["/usr/bin/ls", "/usr/bin/cat"]);
    assert_eq!(policy::derive_allow_always(&e.evaluation).skipped.len(), 1);
    let e = explain("python3 x.py");
    assert!(stored(&e).is_empty());
    assert!(
        !policy::derive_allow_always(&e.evaluation)
            .skipped
            .is_empty(),
        "an empty result says why"
    );
    let e = explain("env nice ls");
    assert_eq!(
        stored(&e),
        vec!["/usr/bin/ls"],
        "wrappers are looked through, never stored"
    );
}

#[test]
fn rebuilt_command_names_the_resolved_files() {
    let fs = world();
    let allowlist = Allowlist::compile(
        &["/usr/bin/*".into()],
        Path::new("/home/u"),
        CaseMode::Sensitive,
    );
    let trusted = TrustedPath::parse("/usr/bin");
    let ctx = EvalContext {
        fs: &fs,
        cwd: Path::new("/work"),
        trusted_path: &trusted,
        allowlist: &allowlist,
        cache: None,
        protected: &[],
        writable: &[],
    };
    let e = policy::evaluate(
        CommandInput::Shell("ls 'a b' && cat \"it's\" | env ls"),
        &ctx,
    );
    assert_eq!(
        e.rebuilt,
        Some(policy::Rebuilt::Script(
            "/usr/bin/ls 'a b' && /usr/bin/cat 'it'\\''s' | /usr/bin/env /usr/bin/ls".into()
        ))
    );
    let e = policy::evaluate(CommandInput::Shell("ls -la"), &ctx);
    assert_eq!(
        e.rebuilt,
        Some(policy::Rebuilt::Argv(vec![
            "/usr/bin/ls".into(),
            "-la".into()
        ]))
    );
}
