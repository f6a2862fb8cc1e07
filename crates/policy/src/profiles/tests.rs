//! The shipped profiles load (with every example holding), find each vector the issue
//! listed, and an operator's file extends them — or is refused with a reason.

use std::path::Path;

use caps::{Fs, MemoryFs, WriteOptions};

use super::*;

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|s| s.to_string()).collect()
}

fn hits(words: &[&str]) -> Vec<ProfileHit> {
    let argv = argv(words);
    Profiles::shipped().hits(
        super::super::shell::base_name(&argv[0]),
        &argv,
        &Invocation::example(),
    )
}

fn hit_names(words: &[&str]) -> Vec<String> {
    hits(words).into_iter().map(|h| h.name).collect()
}

#[test]
fn the_shipped_profiles_load_and_their_examples_hold() {
    let p = Profiles::parse(SHIPPED, "shipped").unwrap();
    assert!(p.table().programs.len() > 20);
}

#[test]
fn every_vector_of_the_issue_is_refused_and_named() {
    // (command, the name an entry's allowFlags would give to allow it)
    let cases: &[(&[&str], &str)] = &[
        (&["git", "-c", "alias.x=!id > FILE", "x"], "-c alias.*"),
        (&["git", "log", "--output=/tmp/elsewhere"], "--output"),
        (&["git", "-c", "core.pager=id", "log"], "-c core.pager"),
        (&["git", "--exec-path=/tmp", "x"], "--exec-path"),
        (
            &["git", "-c", "diff.external=id", "diff"],
            "-c diff.external",
        ),
        (&["git", "bisect", "run", "id"], "bisect run"),
        (&["git", "rebase", "--exec", "id", "HEAD~1"], "--exec"),
        (&["git", "submodule", "foreach", "id"], "submodule foreach"),
        (&["git", "difftool", "-x", "id"], "difftool"),
        (&["git", "config", "alias.x", "!id"], "config operand"),
        (&["find", ".", "-exec", "id", ";"], "-exec"),
        (&["sed", "1e id"], "e"),
        (&["sed", "w /tmp/x"], "w"),
        (&["awk", "BEGIN{system(\"id\")}"], "system()"),
        (&["mawk", "BEGIN{system(\"id\")}"], "system()"),
        (&["tar", "-xf", "a.tar", "--to-command=id"], "--to-command"),
        (&["rsync", "-e", "id", "a", "b:c"], "--rsh"),
        (&["ssh", "-o", "ProxyCommand=id", "x"], "-o proxycommand"),
        (&["scp", "-S", "id", "a", "b:c"], "-S"),
        (&["zip", "-TT", "id", "-T", "a.zip", "f"], "--unzip-command"),
        (&["xargs", "id"], "operand"),
        (&["env", "-S", "id"], "-S"),
        (&["make", "--eval=x:;id", "x"], "--eval"),
        (&["less", "+!id", "f"], "+cmd"),
        (&["man", "-P", "id", "ls"], "-P"),
        (&["vim", "-c", "!id"], "--cmd"),
        (&["vi", "+!id"], "+cmd"),
        (&["perl", "-e", "1"], "any invocation"),
        (&["python3.11", "-c", "1"], "any invocation"),
        (&["ruby", "-e", "1"], "any invocation"),
        (&["node", "-e", "1"], "any invocation"),
    ];
    for (words, want) in cases {
        let hits = hits(words);
        assert!(
            hits.iter().any(|h| h.allowed_by(&[want.to_string()])),
            "{words:?}: want {want:?}, got {hits:?}"
        );
    }
    for plain in [
        &["git", "status"][..],
        &["git", "log", "--oneline", "-n", "5"],
        &["git", "-C", "repo", "commit", "-m", "x"],
        &["find", ".", "-name", "*.rs"],
        &["sed", "-n", "s/a/b/p", "f"],
        &["awk", "-F:", "$3 > 100 { print $1 }", "/etc/passwd"],
        &["tar", "-czf", "a.tgz", "src"],
        &["ssh", "-o", "BatchMode=yes", "host"],
        &["make", "test"],
        &["ls", "-la"],
    ] {
        assert_eq!(hit_names(plain), Vec::<String>::new(), "{plain:?}");
    }
}

#[test]
fn options_are_read_the_way_the_programs_read_them() {
    // -c anywhere before the subcommand, after options that take values.
    assert!(
        hit_names(&[
            "git",
            "-C",
            "/r",
            "--git-dir",
            "/r/.git",
            "-c",
            "alias.x=!id",
            "x"
        ])
        .contains(&"-c alias.x".to_string())
    );
    // A value-taking option consumes the next word: it is not the subcommand.
    assert_eq!(
        Profiles::shipped().subcommand_index("git", &argv(&["git", "-C", "status", "log"])),
        Some(3)
    );
    assert_eq!(
        Profiles::shipped().subcommand_index("cargo", &argv(&["cargo", "+nightly", "build"])),
        Some(2)
    );
    assert_eq!(
        Profiles::shipped().subcommand_index("rg", &argv(&["rg", "x"])),
        None
    );
    // Clusters, stuck and separate values; abbreviations are refused, named.
    assert!(hit_names(&["rsync", "-avze", "id", "a", "b:"]).contains(&"--rsh".to_string()));
    assert!(
        hit_names(&["ssh", "-voProxyCommand=id", "h"]).contains(&"-o proxycommand".to_string())
    );
    assert!(hit_names(&["sed", "-ne", "1e id"]).contains(&"e".to_string()));
    assert!(hit_names(&["sed", "--expr=1e id"]).contains(&"--expr".to_string()));
    assert!(hit_names(&["tar", "--to-c=id", "-xf", "a"]).contains(&"--to-c".to_string()));
    // A value is not read as a flag when the program reads it as a value.
    assert!(hit_names(&["sed", "-e", "s/x/y/", "-i.bak", "f"]).is_empty());
    assert!(hit_names(&["tar", "-cf", "-I", "."]).is_empty());
    // `--` ends options: what follows is an operand, even if it looks like one.
    assert!(hit_names(&["git", "log", "--", "--output=/etc/x"]).is_empty());
    // ...except for find, which reads its expression after `--` anyway.
    assert!(hit_names(&["find", "--", ".", "-exec", "id", ";"]).contains(&"-exec".to_string()));
    // Every word the grammar does not know is a refusal, named.
    assert_eq!(
        hit_names(&["git", "log", "--frobnicate"]),
        vec!["--frobnicate"]
    );
    assert_eq!(hit_names(&["git", "frobnicate"]), vec!["frobnicate"]);
}

#[test]
fn standard_input_a_command_line_pipes_is_refused_for_command_readers() {
    let piped = Invocation {
        stdin_piped: true,
        ..Invocation::example()
    };
    let names = |w: &[&str], inv: &Invocation<'_>| -> Vec<String> {
        Profiles::shipped()
            .hits(w[0], &argv(w), inv)
            .into_iter()
            .map(|h| h.name)
            .collect()
    };
    assert_eq!(
        names(&["vim", "-es"], &Invocation::example()),
        Vec::<String>::new()
    );
    assert_eq!(names(&["vim", "-es"], &piped), vec!["stdin"]);
    assert_eq!(names(&["ed", "-s", "f"], &piped), vec!["stdin"]);
    assert_eq!(names(&["bash"], &piped), vec!["stdin"]);
    assert_eq!(names(&["grep", "x"], &piped), Vec::<String>::new());
}

#[test]
fn an_operators_file_extends_the_shipped_one() {
    let fs = MemoryFs::new();
    fs.create_dir_all(Path::new("/w"), 0o700).unwrap();
    let path = Path::new("/w/profiles.toml");
    // Absent: the shipped profiles.
    assert!(Profiles::load(&fs, path).unwrap().is_multi_command("git"));
    fs.write(
        path,
        br#"
[[program]]
names = ["git"]
[[program.rule]]
name = "push"
reason = "publishes commits"
subcommands = ["push"]
examples = { hit = [["git", "push"]], miss = [["git", "pull"]] }

[[program]]
names = ["mytool"]
subcommands = true
[[program.rule]]
name = "--hook"
reason = "runs the given hook"
flags = ["--hook"]
"#,
        WriteOptions::default(),
    )
    .unwrap();
    let p = Profiles::load(&fs, path).unwrap();
    let names = |w: &[&str]| -> Vec<String> {
        p.hits(w[0], &argv(w), &Invocation::example())
            .into_iter()
            .map(|h| h.name)
            .collect()
    };
    assert_eq!(names(&["git", "push"]), vec!["push"]);
    assert!(names(&["git", "-c", "alias.x=!id", "x"]).contains(&"-c alias.x".to_string()));
    assert_eq!(names(&["mytool", "run", "--hook=x"]), vec!["--hook"]);
    assert!(p.is_multi_command("mytool"));
}

#[test]
fn a_bad_profiles_file_is_refused_with_the_reason() {
    let cases = [
        ("[[program]]\nnames = [\"x\"]\nbogus = 1\n", "unknown field"),
        ("[[program]]\nnames = []\n", "needs `names`"),
        (
            "[[program]]\nnames = [\"x\"]\n[[program.rule]]\nname = \"n\"\nreason = \"r\"\n",
            "names no flag",
        ),
        (
            "[[program]]\nnames = [\"x\"]\n[[program.rule]]\nname = \"n\"\nreason = \"r\"\nflags = [\"exec\"]\n",
            "is not an option",
        ),
        (
            "[[program]]\nnames = [\"x\"]\n[[program.rule]]\nname = \"n\"\nreason = \"r\"\nflags = [\"--a\"]\nexamples = { hit = [[\"x\", \"--b\"]] }\n",
            "must hit it but does not",
        ),
        (
            "[[program]]\nnames = [\"x\"]\n[[program.rule]]\nname = \"n\"\nreason = \"r\"\nflags = [\"--a\"]\nexamples = { miss = [[\"x\", \"--a\"]] }\n",
            "must not hit it but does",
        ),
    ];
    for (text, want) in cases {
        let err = Profiles::parse(text, "/h/profiles.toml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("/h/profiles.toml") && err.contains(want),
            "{err}"
        );
    }
}

#[test]
fn an_operators_grammar_adds_a_program_and_extends_a_shipped_one() {
    let fs = MemoryFs::new();
    fs.create_dir_all(Path::new("/w"), 0o700).unwrap();
    let path = Path::new("/w/profiles.toml");
    fs.write(
        path,
        br#"
[[program]]
names = ["mytool"]
[program.grammar]
options = ["-v --verbose", "-o --output=write", "--[no-]cache"]
refuse = [{ options = "--hook=value", reason = "runs the given hook" }]
operands = ["path..."]
subcommand-optional = true
examples = { accept = [["mytool", "-v", "--no-cache", "-o", "out", "x"]], refuse = [["mytool", "--hook=id"]] }
[program.grammar.subcommand.build]
options = ["-j=value"]

[[program]]
names = ["git"]
[program.grammar.subcommand.log]
options = ["--my-option"]
"#,
        WriteOptions::default(),
    )
    .unwrap();
    let p = Profiles::load(&fs, path).unwrap();
    let inv = Invocation::example();
    let names = |w: &[&str]| -> Vec<String> {
        p.hits(w[0], &argv(w), &inv)
            .into_iter()
            .map(|h| h.name)
            .collect()
    };
    assert!(names(&["mytool", "--verbose", "--cache", "f"]).is_empty());
    assert_eq!(names(&["mytool", "--hook=id"]), vec!["--hook"]);
    assert_eq!(names(&["mytool", "-o", "/etc/x"]), vec!["--output"]);
    assert_eq!(names(&["mytool", "--frob"]), vec!["--frob"]);
    assert!(names(&["git", "log", "--my-option", "--oneline"]).is_empty());
    // What was shipped still holds.
    assert!(!names(&["git", "log", "--output=/etc/x"]).is_empty());
    // The trace says how each word was read.
    let trace = p
        .trace("mytool", &argv(&["mytool", "-v", "--hook=id"]), &inv)
        .unwrap();
    assert_eq!(trace.grammar, "mytool");
    assert!(trace.words[0].accepted && trace.words[0].verdict == "option");
    assert!(!trace.words[1].accepted && trace.words[1].verdict.contains("runs the given hook"));
}

#[test]
fn a_bad_grammar_is_refused_with_the_reason() {
    let grammar = |body: &str| format!("[[program]]\nnames = [\"x\"]\n[program.grammar]\n{body}\n");
    let cases = [
        (grammar("options = [\"-a=frob\"]"), "unknown kind \"frob\""),
        (
            grammar("options = [\"-a\", \"-a=value\"]"),
            "listed twice, differently",
        ),
        (grammar("options = [\"exec\"]"), "is not an option"),
        (
            grammar("operands = [\"path...\", \"value...\"]"),
            "only one operand kind may repeat",
        ),
        (grammar("write-mode = [\"-i\"]"), "which no context accepts"),
        (grammar("use = [\"nope\"]"), "which `sets` does not define"),
        (
            grammar("refuse = [{ options = \"-a\", reason = \"\" }]"),
            "needs a `reason`",
        ),
        (
            grammar("[program.grammar.subcommand.s]\nstdin-commands = true"),
            "belong to [program.grammar]",
        ),
        (grammar("bogus = 1"), "unknown field"),
        (
            grammar("options = [\"-a\"]\nexamples = { accept = [[\"x\", \"-b\"]] }"),
            "must be accepted but \"-b\" is refused",
        ),
        (
            grammar("options = [\"-a\"]\nexamples = { refuse = [[\"x\", \"-a\"]] }"),
            "must be refused but is accepted",
        ),
    ];
    for (text, want) in cases {
        let err = Profiles::parse(&text, "/h/profiles.toml")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("/h/profiles.toml") && err.contains(want),
            "{text}\n{err}"
        );
    }
}
