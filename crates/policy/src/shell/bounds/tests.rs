//! Tests of `shell::bounds`.

use super::super::{CommandInput, MAX_SCRIPT_BYTES, analyze, chain_of, parse_prescanned};
use super::*;

/// The stack of a tokio worker thread, where `warden mcp` and the gateway analyse.
const SERVER_STACK: usize = 2 * 1024 * 1024;

/// Run `f` on a thread with `stack` bytes of stack (an overflow aborts the test run).
fn on_stack<T: Send>(stack: usize, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(stack)
            .spawn_scoped(s, f)
            .expect("spawn")
            .join()
            .expect("join")
    })
}

fn reason(script: &str) -> Result<(), MissReason> {
    analyze(CommandInput::Shell(script))
        .map(|_| ())
        .map_err(|m| m.reason)
}

/// `levels` levels of one construct, as the pre-scan counts them (2 for `"$(`).
fn nested(kind: &str, n: usize) -> String {
    let wrap = |open: &str, close: &str| format!("{}ls{}", open.repeat(n), close.repeat(n));
    match kind {
        "group" => wrap("{ ", "; } "),
        "subshell" => wrap("( ", " ) "),
        "subshell-tight" => wrap("(", ")"),
        "cmdsub" => format!("echo {}", wrap("$( ", " )")),
        "quoted-cmdsub" => format!("echo {}", wrap("\"$( ", " )\"")),
        "param" => format!("echo {}", wrap("${a:-", "}")),
        "if" => wrap("if true; then ", "; fi "),
        "while" => wrap("while true; do ", "; done "),
        "until" => wrap("until true; do ", "; done "),
        "for" => wrap("for a in b; do ", "; done "),
        "case" => wrap("case x in x) ", ";; esac "),
        "case-no-terminator" => wrap("case x in x) ", "\nesac\n"),
        "function" => wrap("f() { ", "; } "),
        "test" => format!("[[ {} ]]", wrap("( ", " )")),
        "arith" => format!("echo $(( {}1{} ))", "(".repeat(n), ")".repeat(n)),
        "procsub" => format!("cat {}", wrap("<( cat ", " )")),
        "open-group" => "{ ".repeat(n),
        "open-paren" => "( ".repeat(n),
        "open-cmdsub" => "$( ".repeat(n),
        "open-param" => "${".repeat(n),
        "open-if" => "if true; then ".repeat(n),
        "open-quotes" => "\"$(".repeat(n),
        "mixed" => {
            let parts = [("{ ", "; }"), ("( ", " )"), ("if a; then ", "; fi")];
            let mut s = "ls".to_string();
            for i in 0..n {
                let (open, close) = parts[i % parts.len()];
                s = format!("{open}{s}{close}");
            }
            s
        }
        _ => unreachable!("{kind}"),
    }
}

/// (kind, levels the pre-scan counts per repetition)
const KINDS: &[(&str, usize)] = &[
    ("group", 1),
    ("subshell", 1),
    ("subshell-tight", 1),
    ("cmdsub", 1),
    ("quoted-cmdsub", 2),
    ("param", 1),
    ("if", 1),
    ("while", 1),
    ("until", 1),
    ("for", 1),
    ("case", 1),
    ("case-no-terminator", 1),
    ("function", 1),
    ("test", 1),
    ("procsub", 1),
    ("open-group", 1),
    ("open-paren", 1),
    ("open-cmdsub", 1),
    ("open-param", 1),
    ("open-if", 1),
    ("open-quotes", 2),
    ("mixed", 1),
];

#[test]
fn nesting_at_the_limit_is_analysed_and_one_level_more_is_a_depth_miss() {
    on_stack(SERVER_STACK, || {
        for &(kind, per) in KINDS {
            let at = nested(kind, MAX_NESTING_DEPTH / per);
            let over = nested(kind, MAX_NESTING_DEPTH / per + 1);
            let got = reason(&at);
            assert!(
                got.is_err() && got != Err(MissReason::DepthLimit),
                "{kind} at the limit: {got:?}"
            );
            let m = analyze(CommandInput::Shell(&over)).expect_err(kind);
            assert_eq!(m.reason, MissReason::DepthLimit, "{kind}: {m:?}");
            assert!(m.detail.contains("64 levels"), "{kind}: {}", m.detail);
            // Far past the limit (the crashes this replaces were at 117 to 1,900
            // levels) and at the size limit: the same miss, found as fast.
            let far = nested(kind, 3_000)
                .chars()
                .take(MAX_SCRIPT_BYTES)
                .collect::<String>();
            assert_eq!(reason(&far), Err(MissReason::DepthLimit), "{kind}");
        }
        // Arithmetic parentheses count one level each, `$((` two.
        assert_ne!(reason(&nested("arith", 62)), Err(MissReason::DepthLimit));
        assert_eq!(reason(&nested("arith", 63)), Err(MissReason::DepthLimit));
    });
}

#[test]
fn the_reported_crash_is_a_depth_miss() {
    // The issue: a few hundred nested `{ … }`, about 1.5 KB, aborted `warden mcp`.
    let script = format!("{}true{}", "{ ".repeat(300), "; }".repeat(300));
    assert!(script.len() < 1600);
    let m = on_stack(SERVER_STACK, || analyze(CommandInput::Shell(&script))).unwrap_err();
    assert_eq!(m.reason, MissReason::DepthLimit);
}

#[test]
fn substitutions_and_heredocs_are_refused_before_tokenizing() {
    for script in [
        "echo $(id)",
        "echo \"$(id)\"",
        "echo `id`",
        "echo \"`id`\"",
        "echo ${HOME}",
        "echo \"${HOME}\"",
        "echo $((1+1))",
        "echo $[1+1]",
        "echo a$(id)b",
        "echo \"$\\\n(id)\"",
        "echo $\\\n{HOME}",
        "ls ~",
        "ls x=~/y",
        "ls PATH=/bin:~/b",
        "cat <<EOF\n$(id)\nEOF",
        "cat <<< x",
        "ls 99999999999>x",
    ] {
        assert!(prescan(script).is_err(), "{script:?}");
    }
    // Quoted, escaped or commented out, they are text, and nothing nests.
    for script in [
        "echo '$(id)' '`id`' '${HOME}' '~'",
        "echo \\$\\(id\\) \\` \\~",
        "echo \"\\$(id)\" \"\\`\"",
        "ls # $(id) `id` ${x} ~ (",
        "ls a#b",
        "git diff HEAD~1",
        "git log HEAD~3..HEAD",
        "echo \"it's\" 'say \"hi\"'",
        "echo $'it\\'s' \"$'\"",
        "ls 999999999>x",
        "git log --format='%H (%s)' -n 3",
        "echo if then fi { } ( done",
        "echo 'multi\nline' \\\n next",
    ] {
        assert_eq!(prescan(script), Ok(()), "{script:?}");
    }
}

#[test]
fn the_backstop_counts_whatever_the_quoting() {
    // Literal, but 65 `$(` in single quotes: the count cannot know they are quoted.
    let quoted = format!("echo '{}'", "$(".repeat(MAX_NESTING_DEPTH + 1));
    assert_eq!(
        prescan(&quoted).map_err(|m| m.reason),
        Err(MissReason::DepthLimit)
    );
    assert_eq!(
        prescan(&format!("echo '{}'", "$(".repeat(MAX_NESTING_DEPTH))),
        Ok(())
    );
    // Parentheses only count when there is an expansion for them to nest in.
    assert_eq!(prescan(&format!("echo '{}'", "(".repeat(500))), Ok(()));
    assert_eq!(recursion_bound("a '$\\\n(' ( [ ( ${"), 5);
    assert_eq!(recursion_bound("a ( [ ( {"), 0);
}

/// If the pre-scan's quote tracking were wrong, what could reach brush is bounded by
/// the backstop count: the most it lets through, of every kind of recursion left in
/// the tokenizer and the word parser (the pre-scan bypassed), fits in half a server
/// thread's stack in an unoptimised build (it needs between 384 and 512 KiB).
#[test]
fn what_the_backstop_lets_through_fits_on_a_server_thread() {
    let n = MAX_NESTING_DEPTH;
    let half = MAX_NESTING_DEPTH / 2;
    let cases = [
        format!("echo {}x{}", "$(".repeat(n), ")".repeat(n)),
        format!("echo {}x{}", "${a:-".repeat(n), "}".repeat(n)),
        format!("echo \"{}x{}\"", "$(echo \"".repeat(n), "\")".repeat(n)),
        format!("echo \"{}x{}\"", "${a:-\"".repeat(n), "\"}".repeat(n)),
        format!("echo {}1{}", "$[".repeat(n), "]".repeat(n)),
        format!("echo $(( {}1{} ))", "(".repeat(n - 2), ")".repeat(n - 2)),
        format!("echo $( {}ls{} )", "( ".repeat(n - 2), " )".repeat(n - 2)),
        format!("echo \"{}x{}\"", "$\\\n(".repeat(half), ")".repeat(half)),
        format!("a={}x{} ls", "$(".repeat(n), ")".repeat(n)),
    ];
    on_stack(SERVER_STACK / 2, || {
        for script in &cases {
            assert!(recursion_bound(script) <= MAX_NESTING_DEPTH, "{script}");
            let _ = parse_prescanned(script).and_then(|p| chain_of(&p, 0));
        }
    });
}

/// The expansions brush's word parser finds in `word` (recursing into double quotes).
fn expansions_in(word: &str) -> Vec<String> {
    use brush_parser::word::{WordPiece, WordPieceWithSource};
    fn walk(word: &str, pieces: &[WordPieceWithSource], out: &mut Vec<String>) {
        for p in pieces {
            let text = word.get(p.start_index..p.end_index).unwrap_or("?");
            match &p.piece {
                WordPiece::CommandSubstitution(_)
                | WordPiece::BackquotedCommandSubstitution(_)
                | WordPiece::ArithmeticExpression(_) => out.push(text.to_owned()),
                WordPiece::ParameterExpansion(_) if text.starts_with("${") => {
                    out.push(text.to_owned())
                }
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => walk(word, inner, out),
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    if let Ok(pieces) = brush_parser::word::parse(word, &super::super::parser_options()) {
        walk(word, &pieces, &mut out);
    }
    out
}

/// Shell-ish strings: noise, and well-formed nestings of every quoting and expansion
/// context (so that the tokenizer accepts many of them), with line continuations and
/// comments in between.
fn shellish() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let noise = proptest::collection::vec(
        proptest::sample::select(vec![
            "a", " ", "$", "(", ")", "{", "}", "[", "]", "'", "\"", "\\", "\n", "\\\n", "#", "`",
            ";", "|", "&", "<", ">", "!", "=", "~", "$'", "if",
        ]),
        0..6,
    )
    .prop_map(|v| v.concat());
    noise.prop_recursive(5, 64, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| a + &b),
            inner.clone().prop_map(|a| format!("\"{a}\"")),
            inner.clone().prop_map(|a| format!("'{a}'")),
            inner.clone().prop_map(|a| format!("$'{a}'")),
            inner.clone().prop_map(|a| format!("$({a})")),
            inner.clone().prop_map(|a| format!("\"$({a})\"")),
            inner.clone().prop_map(|a| format!("${{a:-{a}}}")),
            inner.clone().prop_map(|a| format!("$(({a}))")),
            inner.clone().prop_map(|a| format!("`{a}`")),
            inner.clone().prop_map(|a| format!("\"$\\\n({a})\"")),
            inner.clone().prop_map(|a| format!("\\{a}")),
            inner.clone().prop_map(|a| format!("# {a}\n")),
            inner.prop_map(|a| format!("x {a} #")),
        ]
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 4000,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// The pre-scan's reading of the quoting agrees with brush's: whatever it lets
    /// through, brush's tokenizer and word parser find no substitution or braced
    /// expansion in (the places they recurse).
    #[test]
    fn the_prescan_lets_no_expansion_reach_brush(script in shellish()) {
        if prescan(&script).is_ok() {
            let options = super::super::parser_options();
            if let Ok(tokens) =
                brush_parser::uncached_tokenize_str(&script, &options.tokenizer_options())
            {
                for token in &tokens {
                    if let brush_parser::Token::Word(w, _) = token {
                        let found = expansions_in(w);
                        proptest::prop_assert!(
                            found.is_empty(),
                            "{script:?}: word {w:?} holds {found:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn brush_panics_on_what_the_prescan_refuses() {
    // Why the pre-scan refuses these: brush-parser unwraps the number.
    for script in ["ls 99999999999>x", "ls ~+99999999999999999999999"] {
        let raw = std::panic::catch_unwind(|| {
            let _ = parse_prescanned(script).and_then(|p| chain_of(&p, 0));
        });
        assert!(raw.is_err(), "brush no longer panics on {script:?}");
        let m = analyze(CommandInput::Shell(script)).unwrap_err();
        assert_ne!(m.detail, super::super::PARSER_PANIC, "{script:?}");
    }
}
