//! Tests of `shell`.

use super::*;

fn argvs(script: &str) -> Vec<Vec<String>> {
    analyze(CommandInput::Shell(script))
        .unwrap_or_else(|m| panic!("{script:?}: {m:?}"))
        .leaves()
        .iter()
        .map(|s| s.argv.clone())
        .collect()
}

fn miss_reason(script: &str) -> MissReason {
    analyze(CommandInput::Shell(script))
        .map(|c| panic!("{script:?} accepted: {c:?}"))
        .unwrap_err()
        .reason
}

#[test]
fn plain_lists_become_segments() {
    assert_eq!(argvs("ls -la"), vec![vec!["ls", "-la"]]);
    assert_eq!(
        argvs("git status && cargo test -- --nocapture || echo 'it failed'; rg TODO | head -n 5"),
        vec![
            vec!["git", "status"],
            vec!["cargo", "test", "--", "--nocapture"],
            vec!["echo", "it failed"],
            vec!["rg", "TODO"],
            vec!["head", "-n", "5"],
        ]
    );
    let chain = analyze(CommandInput::Shell("a && b || c; d | e")).unwrap();
    assert_eq!(chain.ops, vec![Op::And, Op::Or, Op::Seq, Op::Pipe]);
    assert_eq!(argvs("a\nb"), vec![vec!["a"], vec!["b"]]);
}

#[test]
fn everything_outside_the_positive_list_is_a_miss() {
    use MissReason::*;
    let cases = [
        ("ls > out", UnsupportedSyntax),
        ("ls 2>&1", UnsupportedSyntax),
        ("cat < /etc/passwd", UnsupportedSyntax),
        ("FOO=1 ls", UnsupportedSyntax),
        ("(ls)", UnsupportedSyntax),
        ("{ ls; }", UnsupportedSyntax),
        ("if true; then ls; fi", UnsupportedSyntax),
        ("for f in a; do ls; done", UnsupportedSyntax),
        ("f() { ls; }", UnsupportedSyntax),
        ("ls &", UnsupportedSyntax),
        ("sleep 1 & ls", UnsupportedSyntax),
        ("! ls", UnsupportedSyntax),
        ("time ls", UnsupportedSyntax),
        ("[[ -f x ]]", UnsupportedSyntax),
        ("cat <<EOF\nhi\nEOF", UnsupportedSyntax),
        ("diff <(ls) <(ls)", UnsupportedSyntax),
        ("echo $HOME", NonLiteralWord),
        ("echo $(id)", NonLiteralWord),
        ("echo `id`", NonLiteralWord),
        ("ls *.rs", NonLiteralWord),
        ("echo {a,b}", NonLiteralWord),
        ("ls ~", NonLiteralWord),
        ("echo \"$USER\"", NonLiteralWord),
        ("$CMD", NonLiteralWord),
        ("sudo ls", PrivilegeWrapper),
        ("doas rm -rf /", PrivilegeWrapper),
        ("nice sudo ls", PrivilegeWrapper),
        ("env -i ls", WrapperModifier),
        ("env FOO=1 ls", WrapperModifier),
        ("eval ls", UnsafeBuiltin),
        ("exec ls", UnsafeBuiltin),
        (". ./x", UnsafeBuiltin),
        ("source x", UnsafeBuiltin),
        ("ls 'unterminated", ParseError),
        ("&& ls", ParseError),
        ("", Empty),
        ("   ", Empty),
    ];
    for (script, reason) in cases {
        assert_eq!(miss_reason(script), reason, "{script:?}");
    }
}

#[test]
fn assignments_after_the_command_are_arguments() {
    assert_eq!(argvs("make CC=gcc"), vec![vec!["make", "CC=gcc"]]);
    assert_eq!(
        argvs("dd if=/dev/zero of=out count=1"),
        vec![vec!["dd", "if=/dev/zero", "of=out", "count=1"]]
    );
    assert_eq!(miss_reason("make CC=$EVIL"), MissReason::NonLiteralWord);
}

#[test]
fn wrappers_are_looked_through() {
    let chain = analyze(CommandInput::Shell(
        "nice -n 5 timeout -s KILL 10 env stdbuf -oL nohup rg x",
    ))
    .unwrap();
    let s = &chain.segments[0];
    assert_eq!(s.program_word(), "rg");
    assert_eq!(s.wrappers.len(), 5);
    assert_eq!(
        analyze(CommandInput::Shell("env")).unwrap().segments[0].program_word(),
        "env"
    );
    assert_eq!(miss_reason("timeout 5"), MissReason::WrapperModifier);
    assert_eq!(
        miss_reason("timeout --bogus 5 ls"),
        MissReason::WrapperModifier
    );
}

#[test]
fn shell_payloads_are_analysed_recursively_with_a_limit() {
    assert_eq!(
        argvs("bash -c 'ls -l && pwd'"),
        vec![vec!["ls", "-l"], vec!["pwd"]]
    );
    assert_eq!(argvs("sh -c \"sh -c 'echo hi'\""), vec![vec!["echo", "hi"]]);
    assert_eq!(
        miss_reason("bash -c 'ls > x'"),
        MissReason::UnsupportedSyntax
    );
    assert_eq!(
        miss_reason("sh -c 'sh -c \"sh -c \\\"sh -c ls\\\"\"'"),
        MissReason::NestingTooDeep
    );
    let argv: Vec<String> = ["bash", "-c", "rm -rf / &"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert!(analyze(CommandInput::Argv(&argv)).is_err());
    // Not `-c`: the shell itself is the program (running a script file).
    assert_eq!(argvs("bash script.sh"), vec![vec!["bash", "script.sh"]]);
}

#[test]
fn hostile_inputs_never_panic_and_huge_inputs_are_bounded() {
    let huge = "a ".repeat(MAX_SCRIPT_BYTES);
    assert_eq!(miss_reason(&huge), MissReason::TooLarge);
    let many: Vec<String> = vec!["x".to_string(); MAX_ARGV + 1];
    assert_eq!(
        analyze(CommandInput::Argv(&many)).unwrap_err().reason,
        MissReason::TooLarge
    );
    assert_eq!(
        analyze(CommandInput::Argv(&[])).unwrap_err().reason,
        MissReason::Empty
    );
    for s in [
        "\u{202e}ls",
        "l\u{200b}s",
        "ls\0",
        "'",
        "\"",
        "\\",
        "|",
        ";;",
        "a |",
        "a &&",
    ] {
        let _ = analyze(CommandInput::Shell(s));
    }
    let deep = format!(
        "{}ls{}",
        "{ ".repeat(MAX_NESTING_DEPTH + 1),
        "; }".repeat(70)
    );
    assert_eq!(miss_reason(&deep), MissReason::DepthLimit);
    assert_eq!(
        miss_reason("ls 99999999999>x"),
        MissReason::UnsupportedSyntax
    );
    assert_eq!(
        miss_reason("ls ~+99999999999999999999"),
        MissReason::NonLiteralWord
    );
    // A payload is bounded like the command around it.
    let payload = format!(
        "{}ls{}",
        "( ".repeat(MAX_NESTING_DEPTH + 1),
        " )".repeat(65)
    );
    assert_eq!(
        miss_reason(&format!("sh -c {}", quote(&payload))),
        MissReason::DepthLimit
    );
}

#[test]
fn the_guard_turns_a_panic_into_a_miss() {
    let m = guard(|| -> Result<(), Miss> { panic!("parser bug") }).unwrap_err();
    assert_eq!(m.reason, MissReason::ParseError);
    assert_eq!(m.detail, PARSER_PANIC);
    assert_eq!(guard(|| Ok(1)), Ok(1));
}

#[test]
fn a_caught_parser_panic_leaves_it_usable() {
    // brush caches parsed words behind a lock; a panic inside a parse must not poison
    // it, or every later analysis would fail.
    let options = parser_options();
    for _ in 0..2 {
        let panicked = std::panic::catch_unwind(|| {
            let _ = literal_value("~+99999999999999999999", &options);
        });
        assert!(panicked.is_err());
        assert_eq!(literal_value("'a b'", &options).as_deref(), Ok("a b"));
    }
    assert_eq!(argvs("ls 'a b'"), vec![vec!["ls", "a b"]]);
}
