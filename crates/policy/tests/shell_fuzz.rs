//! Fuzzing the shell analysis (security invariant 9: no input crashes or stalls it): the
//! regression corpus in `tests/corpus/shell/` replayed every run, then property tests
//! with nested constructs up to and past `MAX_NESTING_DEPTH`, random mixes of every
//! construct, `sh -c` nesting, and inputs up to 1 MiB. Every case runs on a thread with
//! the 2 MiB stack of a tokio worker (where `warden mcp` analyses), through `analyze` and
//! the whole `explain` pipeline, and must finish promptly without the parser panicking.
//!
//! The case counts fit CI (about 15 s in a debug build); `WARDEN_FUZZ_SCALE=100 cargo
//! test -p warden-policy --test shell_fuzz` runs a hundred times as many. A failure is
//! saved by proptest under `tests/proptest-regressions/`; keep it, and add the shrunk
//! input to the corpus.

// Tests read the corpus from disk.
#![allow(clippy::disallowed_methods)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use caps::{Fs, MemoryFs, WriteOptions};
use policy::shell::{MAX_NESTING_DEPTH, MAX_SCRIPT_BYTES, MAX_SHELL_NESTING, PARSER_PANIC, quote};
use policy::{
    Allowlist, Ask, AskFallback, CaseMode, CommandInput, Config, ExecParams, Host, HostCeiling,
    MissReason, Security, analyze,
};
use proptest::prelude::*;
use support::{Setup, explain_request};

/// The stack of a tokio worker thread.
const SERVER_STACK: usize = 2 * 1024 * 1024;

/// A bound that tells "finishes" from "blows up", not a speed target (speed is the
/// `decide` benchmark's): the slowest 64 KiB input is about 0.3 s in a debug build, and
/// a superlinear blowup on inputs this size takes hours, so a stall shows up as a
/// failure, not a hung CI run. 10 s was once exceeded (10.4 s) on a 2-core machine
/// running four builds at once: the bound leaves room for any machine CI may get.
const PROMPT: Duration = Duration::from_secs(60);

/// `base` cases, times `WARDEN_FUZZ_SCALE` if set (for a long local run).
fn cases(base: u32) -> u32 {
    let scale = std::env::var("WARDEN_FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .unwrap_or(1);
    base.saturating_mul(scale.max(1))
}

/// Run `f` on a thread with a server's stack (an overflow aborts the test run: that is a
/// failure too).
fn on_server_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(SERVER_STACK)
            .spawn_scoped(s, f)
            .unwrap()
            .join()
            .unwrap()
    })
}

/// A small world for `explain`: a few programs on the trusted PATH, all allowlisted.
fn world() -> MemoryFs {
    let fs = MemoryFs::new();
    fs.create_dir_all(Path::new("/usr/bin"), 0o755).unwrap();
    for p in [
        "a", "ls", "echo", "sh", "bash", "cat", "git", "true", "nice",
    ] {
        let exe = WriteOptions {
            mode: 0o755,
            ..Default::default()
        };
        fs.write(&Path::new("/usr/bin").join(p), b"", exe).unwrap();
    }
    fs
}

/// Analyse `script` and explain it, checking that neither panics (inside the parser or
/// out of it) nor takes long. Returns the analysis' miss reason, if any.
fn check(fs: &MemoryFs, script: &str) -> Result<(), MissReason> {
    let started = Instant::now();
    let analysis = analyze(CommandInput::Shell(script));
    if let Err(m) = &analysis {
        assert_ne!(m.detail, PARSER_PANIC, "the parser panicked on {script:?}");
    }
    let allowlist = Allowlist::compile(
        &["/usr/bin/*".to_string()],
        Path::new("/home/u"),
        CaseMode::Sensitive,
    );
    let ceiling = HostCeiling {
        security: Security::Allowlist,
        ask: Ask::OnMiss,
        ask_fallback: AskFallback::Deny,
    };
    let setup = Setup {
        fs,
        allowlist: &allowlist,
        cwd: "/",
        config: &Config::default(),
        ceiling: &ceiling,
    };
    let params = ExecParams {
        host: Some(Host::Gateway),
        ..Default::default()
    };
    let explained = explain_request(&setup, &params, CommandInput::Shell(script));
    assert_eq!(
        explained.evaluation.analysis.is_ok(),
        analysis.is_ok(),
        "{script:?}"
    );
    if analysis.is_err() {
        assert!(!explained.decision.is_allow(), "{script:?} allowed");
    }
    // The text and JSON reports render whatever the input was.
    assert!(!explained.to_text().is_empty());
    serde_json::to_string(&explained).unwrap();
    // As a `sh -c` payload it is bounded the same way.
    let argv = vec!["sh".to_string(), "-c".to_string(), script.to_string()];
    if let Err(m) = analyze(CommandInput::Argv(&argv)) {
        assert_ne!(m.detail, PARSER_PANIC, "the parser panicked on {script:?}");
    }
    let took = started.elapsed();
    assert!(
        took < PROMPT,
        "{took:?} for {:?}…",
        script.chars().take(80).collect::<String>()
    );
    analysis.map(|_| ()).map_err(|m| m.reason)
}

fn reason_name(reason: Result<(), MissReason>) -> String {
    match reason {
        Ok(()) => "ok".into(),
        Err(r) => serde_json::to_value(r)
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned(),
    }
}

/// Every file in the corpus is named `<expected>--<what>.txt`: the expected analysis
/// (`ok`, a miss reason, or `miss` for any miss) and what the input is. Inputs that are
/// not UTF-8 are analysed as the text a JSON or command-line client would send
/// (invalid sequences replaced).
#[test]
fn the_corpus_replays_with_the_expected_outcome() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/shell");
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    assert!(entries.len() >= 40, "the corpus is gone: {}", dir.display());
    let fs = world();
    on_server_stack(|| {
        for path in &entries {
            let name = path.file_stem().unwrap().to_str().unwrap();
            let (expected, _) = name.split_once("--").unwrap();
            let bytes = std::fs::read(path).unwrap();
            let script = String::from_utf8_lossy(&bytes);
            let got = reason_name(check(&fs, &script));
            let detail = analyze(CommandInput::Shell(&script))
                .err()
                .map(|m| m.detail);
            match expected {
                "miss" => assert_ne!(got, "ok", "{name}"),
                _ => assert_eq!(got, expected, "{name}: {detail:?}"),
            }
        }
    });
}

/// One construct of a nesting path, and the context it leaves its content in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ctx {
    /// Unquoted, where commands are.
    Top,
    /// Inside `$( … )`.
    Sub,
    /// Inside `${a:- … }`.
    Param,
    /// Inside `" … "`.
    Quoted,
}

/// Wrap `inner` (which is in context `ctx`) in construct `choice`, allowed in `outer`:
/// the text, the levels the pre-scan counts for it, and the context of `inner`.
fn constructs(outer: Ctx) -> &'static [(&'static str, &'static str, usize, Ctx)] {
    match outer {
        Ctx::Top => &[
            ("{ ", "; }", 1, Ctx::Top),
            ("( ", " )", 1, Ctx::Top),
            ("if true; then ", "; fi", 1, Ctx::Top),
            ("while true; do ", "; done", 1, Ctx::Top),
            ("case x in x) ", ";; esac", 1, Ctx::Top),
            ("echo $( ", " )", 1, Ctx::Sub),
            ("echo ${a:-", "}", 1, Ctx::Param),
            ("echo \"", "\"", 1, Ctx::Quoted),
        ],
        Ctx::Sub => &[
            ("( ", " )", 1, Ctx::Sub),
            ("echo $( ", " )", 1, Ctx::Sub),
            ("echo ${a:-", "}", 1, Ctx::Param),
            ("echo \"", "\"", 1, Ctx::Quoted),
            // Inside `$(` reserved words are text to brush: no level.
            ("{ ", "; }", 0, Ctx::Sub),
        ],
        Ctx::Param => &[
            ("$( ", " )", 1, Ctx::Sub),
            ("${a:-", "}", 1, Ctx::Param),
            ("\"", "\"", 1, Ctx::Quoted),
            // Parentheses are text inside `${`.
            ("(", ")", 0, Ctx::Param),
        ],
        Ctx::Quoted => &[("$( ", " )", 1, Ctx::Sub), ("${a:-", "}", 1, Ctx::Param)],
    }
}

/// Build a nesting path from `choices` (outermost first): the script and its depth.
fn path(choices: &[usize], quoted_leaf: bool) -> (String, usize) {
    let mut ctx = Ctx::Top;
    let mut layers = Vec::new();
    let mut depth = 0;
    for &c in choices {
        let options = constructs(ctx);
        let (open, close, levels, inner) = options[c % options.len()];
        layers.push((open, close));
        depth += levels;
        ctx = inner;
    }
    let leaf = match (ctx, quoted_leaf) {
        (Ctx::Top | Ctx::Sub, true) => {
            depth += 1;
            "ls 'a b'"
        }
        (Ctx::Top | Ctx::Sub, false) => "ls",
        _ => "x",
    };
    let mut script = leaf.to_string();
    for (open, close) in layers.iter().rev() {
        script = format!("{open}{script}{close}");
    }
    (script, depth)
}

/// Fragments of everything the analysis has to survive.
fn fragment() -> impl Strategy<Value = String> {
    let fixed = proptest::sample::select(vec![
        "{ ",
        "} ",
        "( ",
        ") ",
        "(",
        ")",
        "$(",
        "${",
        "$((",
        "$[",
        "]",
        "\"",
        "'",
        "`",
        "\\`",
        "$'",
        "$\"",
        "if ",
        "then ",
        "else ",
        "fi ",
        "while ",
        "until ",
        "for a in b; ",
        "do ",
        "done ",
        "case x in ",
        "x) ",
        ";; ",
        "esac ",
        "[[ ",
        " ]] ",
        "! ",
        "time ",
        "coproc ",
        "function f ",
        "f() ",
        "<(",
        ">(",
        "<<",
        "<<<",
        "<<-E\n",
        "\nE\n",
        " > x",
        " < x",
        " 2>&1",
        " && ",
        " || ",
        " | ",
        "; ",
        " & ",
        "\n",
        "\\\n",
        "\\",
        "#",
        " # c\n",
        "~",
        "~+99999999999999999999",
        "99999999999>",
        "=",
        "a=b ",
        "ls ",
        "echo ",
        "sh -c ",
        "bash -c ",
        "nice ",
        "env ",
        "sudo ",
        "x",
        " ",
        "\t",
        "*",
        "?",
        "[",
        "$a",
        "$1",
        "$$",
        "é",
        "日本",
        "\u{202e}",
        "\u{200b}",
        "\u{0}",
        "\u{fffd}",
        "\r",
    ])
    .prop_map(str::to_owned);
    prop_oneof![
        8 => fixed,
        1 => "[ -~]{0,12}",
        1 => any::<String>().prop_map(|s| s.chars().take(12).collect()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(1500), ..ProptestConfig::default() })]

    /// Nesting of every kind and in every context, up to twice the limit: a miss naming
    /// the limit exactly when the pre-scan's count is past it.
    #[test]
    fn the_depth_limit_is_honoured(
        choices in proptest::collection::vec(0usize..8, 0..(2 * MAX_NESTING_DEPTH + 2)),
        quoted_leaf in any::<bool>(),
    ) {
        let (script, depth) = path(&choices, quoted_leaf);
        let fs = world();
        let got = on_server_stack(|| check(&fs, &script));
        if depth > MAX_NESTING_DEPTH {
            prop_assert_eq!(got, Err(MissReason::DepthLimit), "depth {} {:?}", depth, script);
        } else {
            prop_assert_ne!(got, Err(MissReason::DepthLimit), "depth {} {:?}", depth, script);
        }
        if depth == 0 || (depth == 1 && quoted_leaf && choices.is_empty()) {
            prop_assert_eq!(got, Ok(()), "{:?}", script);
        }
    }

}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(3000), ..ProptestConfig::default() })]

    /// Random mixes of every construct, quote, operator, keyword and odd character.
    #[test]
    fn random_mixes_never_panic_or_stall(
        parts in proptest::collection::vec(fragment(), 0..400),
    ) {
        let script: String = parts.concat();
        let fs = world();
        let _ = on_server_stack(|| check(&fs, &script));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256), ..ProptestConfig::default() })]

    /// `sh -c` payloads quoted inside each other: followed up to `MAX_SHELL_NESTING`.
    #[test]
    fn nested_shell_payloads_are_bounded(
        levels in 0usize..8,
        shells in proptest::collection::vec(proptest::sample::select(vec!["sh", "bash", "nice bash"]), 8),
    ) {
        let mut script = "ls -la".to_string();
        for shell in shells.iter().take(levels) {
            script = format!("{shell} -c {}", quote(&script));
        }
        let fs = world();
        let got = on_server_stack(|| check(&fs, &script));
        if levels <= MAX_SHELL_NESTING {
            prop_assert_eq!(got, Ok(()), "{:?}", script);
        } else {
            prop_assert_eq!(got, Err(MissReason::NestingTooDeep), "{:?}", script);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(24), ..ProptestConfig::default() })]

    /// Up to 1 MiB: anything over `MAX_SCRIPT_BYTES` is refused unread, anything under
    /// is analysed in bounded time, whatever it repeats.
    #[test]
    fn inputs_up_to_a_mebibyte_are_bounded(
        unit in proptest::collection::vec(fragment(), 1..6),
        size in prop_oneof![1usize..(MAX_SCRIPT_BYTES + 1), (MAX_SCRIPT_BYTES + 1)..(1 << 20) + 1],
    ) {
        let unit: String = unit.concat();
        prop_assume!(!unit.is_empty());
        let mut script = unit.repeat(size / unit.len() + 1);
        let mut cut = size.min(script.len());
        while !script.is_char_boundary(cut) {
            cut -= 1;
        }
        script.truncate(cut);
        let fs = world();
        let got = on_server_stack(|| check(&fs, &script));
        if script.len() > MAX_SCRIPT_BYTES {
            prop_assert_eq!(got, Err(MissReason::TooLarge));
        }
    }
}

#[test]
fn the_largest_inputs_are_refused_or_analysed_promptly() {
    let fs = world();
    let at_limit = [
        "a\n".repeat(MAX_SCRIPT_BYTES / 2),
        "a && ".repeat(MAX_SCRIPT_BYTES / 5),
        "{ ".repeat(MAX_SCRIPT_BYTES / 2),
        "$(".repeat(MAX_SCRIPT_BYTES / 2),
        format!("a '{}'", "x".repeat(MAX_SCRIPT_BYTES - 4)),
    ];
    on_server_stack(|| {
        for script in &at_limit {
            assert!(script.len() <= MAX_SCRIPT_BYTES);
            let _ = check(&fs, script);
        }
        let over = "{ ".repeat(1 << 19);
        assert_eq!(check(&fs, &over), Err(MissReason::TooLarge));
        let argv: Vec<String> = vec!["x".repeat(1 << 20); 4];
        assert!(analyze(CommandInput::Argv(&argv)).is_ok());
    });
}
