//! Differential test against real bash: for every command the analyser accepts, run it
//! under `bash -c` with PATH pointing at argv-logging stub programs and check that the
//! argv bash actually executed equals the analyser's segments — and that the rebuilt
//! command (absolute paths, every word quoted) executes exactly the same argv.
//!
//! This is what makes the analysis trustworthy: quoting, escaping and operator handling
//! are checked against the real shell, not against our reading of its manual.

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A skipped test says so on stderr.
#![allow(clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::Command;

use policy::{
    Allowlist, CaseMode, Chain, CommandInput, EvalContext, Op, Rebuilt, TrustedPath, analyze,
    evaluate,
};
use proptest::prelude::*;

const BASH: &str = "/bin/bash";

struct Stubs {
    _tmp: tempfile::TempDir,
    bin: PathBuf,
    records: PathBuf,
}

/// Stub programs for every name in `names`: each writes its argv (basename of $0, then
/// the arguments, NUL-separated) into its own file, then exits with $STUB_STATUS.
fn stubs() -> Stubs {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    let records = tmp.path().join("records");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&records).unwrap();
    let script = "#!/bin/sh\n\
        f=\"$STUB_RECORDS/$$\"\n\
        printf '%s\\0' \"${0##*/}\" > \"$f\"\n\
        for a in \"$@\"; do printf '%s\\0' \"$a\" >> \"$f\"; done\n\
        exit \"${STUB_STATUS:-0}\"\n";
    let mut names: Vec<String> = [
        "bash", "sh", "nice", "env", "timeout", "nohup", "stdbuf", "git", "rg", "cargo", "make",
        "jq", "dd",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for a in ["a", "b", "c"] {
        names.push(a.to_string());
        for b in ["a", "b", "c"] {
            names.push(format!("{a}{b}"));
            for c in ["a", "b", "c"] {
                names.push(format!("{a}{b}{c}"));
            }
        }
    }
    for name in names {
        let p = bin.join(&name);
        std::fs::write(&p, script).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    Stubs {
        _tmp: tmp,
        bin,
        records,
    }
}

impl Stubs {
    fn known(&self, name: &str) -> bool {
        !name.contains('/') && self.bin.join(name).exists()
    }

    /// Run `program args` with the stub PATH; return the sorted argv records.
    fn run(&self, program: &str, args: &[&str], status: u8) -> Vec<Vec<String>> {
        for entry in std::fs::read_dir(&self.records).unwrap() {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
        }
        Command::new(program)
            .args(args)
            .env_clear()
            .env("PATH", &self.bin)
            .env("STUB_RECORDS", &self.records)
            .env("STUB_STATUS", status.to_string())
            .output()
            .unwrap();
        let mut out: Vec<Vec<String>> = std::fs::read_dir(&self.records)
            .unwrap()
            .map(|e| {
                let bytes = std::fs::read(e.unwrap().path()).unwrap();
                let mut words: Vec<String> = bytes
                    .split(|b| *b == 0)
                    .map(|w| String::from_utf8(w.to_vec()).unwrap())
                    .collect();
                words.pop(); // trailing empty piece after the last NUL
                words
            })
            .collect();
        out.sort();
        out
    }
}

/// The top-level segments bash executes when every command exits with `status`.
fn expected_runs(chain: &Chain, status: i32) -> Vec<Vec<String>> {
    let mut runs = Vec::new();
    let mut last_status = 0;
    let mut i = 0;
    let mut skip = false;
    while i < chain.segments.len() {
        // Gather one pipeline: segments joined by `|`.
        let mut j = i;
        while j < chain.ops.len() && chain.ops[j] == Op::Pipe {
            j += 1;
        }
        if !skip {
            for s in &chain.segments[i..=j] {
                let mut argv = s.argv.clone();
                argv[0] = argv[0].rsplit('/').next().unwrap().to_owned();
                runs.push(argv);
            }
            last_status = status;
        }
        // Decide whether the next pipeline runs.
        skip = match chain.ops.get(j) {
            Some(Op::And) => last_status != 0,
            Some(Op::Or) => last_status == 0,
            _ => false,
        };
        i = j + 1;
    }
    runs.sort();
    runs
}

/// Check one command; returns false if the analyser refused it (nothing to compare).
fn check(stubs: &Stubs, script: &str) -> bool {
    let Ok(chain) = analyze(CommandInput::Shell(script)) else {
        return false;
    };
    if !chain.segments.iter().all(|s| stubs.known(&s.argv[0])) {
        return false;
    }
    // Every flag allowed: this test is about the shell analysis and the rebuilt
    // command, not the profiles (profiles_differential.rs is).
    let allowlist = Allowlist::compile_rules(
        &[policy::RuleSpec {
            allow_flags: vec!["*".into()],
            ..policy::RuleSpec::program(format!("{}/*", stubs.bin.display()))
        }],
        Path::new("/"),
        CaseMode::Sensitive,
        policy::Profiles::shipped(),
    );
    let fs = caps::LocalFs::new("/").unwrap();
    let trusted = TrustedPath::parse(&stubs.bin.to_string_lossy());
    let ctx = EvalContext {
        fs: &fs,
        cwd: Path::new("/"),
        trusted_path: &trusted,
        allowlist: &allowlist,
        cache: None,
        protected: &[],
        writable: &[],
    };
    let evaluation = evaluate(CommandInput::Shell(script), &ctx);
    for status in [0u8, 1] {
        let expected = expected_runs(&chain, status.into());
        let by_bash = stubs.run(BASH, &["-c", script], status);
        assert_eq!(
            by_bash, expected,
            "bash ran something else for {script:?} (status {status})"
        );
        // Nested payloads are not stubs' concern here; rebuilt commands of accepted,
        // satisfied scripts must run the same argv.
        if chain.segments.iter().all(|s| s.nested.is_none()) {
            let rebuilt = evaluation
                .rebuilt
                .as_ref()
                .unwrap_or_else(|| panic!("no rebuilt command for {script:?}"));
            let by_rebuilt = match rebuilt {
                Rebuilt::Argv(argv) => {
                    let args: Vec<&str> = argv[1..].iter().map(String::as_str).collect();
                    stubs.run(&argv[0], &args, status)
                }
                Rebuilt::Script(text) => stubs.run("/bin/sh", &["-c", text], status),
            };
            // The rebuilt command names wrapped programs by absolute path: compare names.
            let prefix = format!("{}/", stubs.bin.display());
            let mut by_rebuilt: Vec<Vec<String>> = by_rebuilt
                .into_iter()
                .map(|argv| {
                    argv.into_iter()
                        .map(|w| w.strip_prefix(&prefix).map(str::to_owned).unwrap_or(w))
                        .collect()
                })
                .collect();
            by_rebuilt.sort();
            assert_eq!(
                by_rebuilt, expected,
                "rebuilt {rebuilt:?} of {script:?} ran something else"
            );
        }
    }
    true
}

fn have_bash() -> bool {
    if Path::new(BASH).exists() {
        return true;
    }
    eprintln!("SKIPPED: {BASH} is not installed; the bash differential test needs it");
    false
}

#[test]
fn corpus_agrees_with_bash() {
    if !have_bash() {
        return;
    }
    let stubs = stubs();
    let corpus = [
        "a",
        "a b c",
        "a 'b c' \"d e\"",
        "a \"it's\" 'say \"hi\"'",
        r#"a "back\\slash" "dollar\$" "tick\`" "quote\"" "other\x""#,
        r#"a esc\ aped \'single\' \"double\""#,
        "a 'it'\\''s'",
        "a '' \"\" b",
        "a --flag=1 -x -- --not-a-flag",
        "a x=y CC=gcc",
        "a && b",
        "a || b",
        "a; b",
        "a | b | c",
        "a && b || c; aa | bb && cc",
        "a\nb\nc",
        "a ; b ;",
        "a 'multi\nline'",
        "a \"tab\tinside\"",
        "a héllo wörld 日本",
        "a '#not a comment' b#c",
        "a # trailing comment",
        "nice -n 5 a x",
        "timeout -s KILL 5 a x",
        "env a",
        "nohup a",
        "stdbuf -oL a",
        "git log --format='%H %s' -n 3",
        "rg -n 'fn main' && cargo test -- --nocapture",
        "make CC=gcc CFLAGS='-O2 -g'",
        "jq '.a | .b' && dd if=x of=y",
        "bash -c 'a b && c'",
        "sh -c \"a 'x y'\"",
    ];
    let mut accepted = 0;
    for script in corpus {
        if check(&stubs, script) {
            accepted += 1;
        } else {
            panic!("corpus entry {script:?} was refused; the corpus holds only literal commands");
        }
    }
    assert_eq!(accepted, corpus.len());
}

fn literal_word() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9_.=/-]{1,6}",
        "[a-z ;|&$*?()<>`\"\\\\]{0,6}".prop_map(|s| format!("'{}'", s.replace('\'', ""))),
        "[a-z ;|&'*?()<>]{0,6}".prop_map(|s| format!("\"{s}\"")),
        "[a-z]{1,3}".prop_map(|s| format!("{s}\\ {s}")),
        Just("\"a\\\"b\\\\c\\$d\\`e\\x\"".to_string()),
        Just("'it'\\''s'".to_string()),
    ]
}

fn program() -> impl Strategy<Value = String> {
    "[abc]{1,3}"
}

fn op() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just(" && "),
        Just(" || "),
        Just("; "),
        Just(" | "),
        Just("\n")
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Generated literal commands are accepted and agree with bash.
    #[test]
    fn generated_literal_commands_agree_with_bash(
        segments in proptest::collection::vec((program(), proptest::collection::vec(literal_word(), 0..4)), 1..4),
        ops in proptest::collection::vec(op(), 3),
    ) {
        if !have_bash() { return Ok(()); }
        let stubs = stubs();
        let mut script = String::new();
        for (i, (prog, args)) in segments.iter().enumerate() {
            if i > 0 { script.push_str(ops[i - 1]); }
            script.push_str(prog);
            for a in args { script.push(' '); script.push_str(a); }
        }
        prop_assert!(check(&stubs, &script), "literal command refused: {:?}", script);
    }
}

/// Arbitrary strings from shell-meaningful characters: whatever the analyser accepts,
/// bash agrees with. A fixed-seed generator keeps the run reproducible, and the test
/// insists that enough strings were accepted for the comparison to mean something.
#[test]
fn whatever_is_accepted_agrees_with_bash() {
    if !have_bash() {
        return;
    }
    let stubs = stubs();
    let alphabet: Vec<char> = "abc  '\"\\;|&$*?(){}<>=\n#~!-".chars().collect();
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut tried, mut accepted) = (0, 0);
    while tried < 1500 {
        tried += 1;
        let len = (next() % 16) as usize;
        let mut script = ["a", "b", "c", "ab"][(next() % 4) as usize].to_string();
        for _ in 0..len {
            script.push(alphabet[(next() % alphabet.len() as u64) as usize]);
        }
        if check(&stubs, &script) {
            accepted += 1;
        }
    }
    assert!(
        accepted >= 100,
        "only {accepted} of {tried} random strings were accepted"
    );
}
