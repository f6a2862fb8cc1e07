//! The shipped profiles load (with every example holding), find each vector the issue
//! listed, and an operator's file extends them — or is refused with a reason.

use std::path::Path;

use caps::{Fs, MemoryFs, WriteOptions};

use super::*;

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|s| s.to_string()).collect()
}

fn hit_names(words: &[&str]) -> Vec<String> {
    let argv = argv(words);
    Profiles::shipped()
        .hits(super::super::shell::base_name(&argv[0]), &argv)
        .into_iter()
        .map(|h| h.name)
        .collect()
}

#[test]
fn the_shipped_profiles_load_and_their_examples_hold() {
    let p = Profiles::parse(SHIPPED, "shipped").unwrap();
    assert!(p.table().programs.len() > 20);
}

#[test]
fn every_vector_of_the_issue_is_a_hit() {
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
        (
            &["git", "rebase", "--exec", "id", "HEAD~1"],
            "rebase --exec",
        ),
        (&["git", "submodule", "foreach", "id"], "submodule foreach"),
        (&["git", "difftool", "-x", "id"], "difftool -x"),
        (&["find", ".", "-exec", "id", ";"], "-exec"),
        (&["sed", "1e id"], "e"),
        (&["sed", "w /tmp/x"], "w"),
        (&["awk", "BEGIN{system(\"id\")}"], "system()"),
        (&["mawk", "BEGIN{system(\"id\")}"], "system()"),
        (&["tar", "-xf", "a.tar", "--to-command=id"], "--to-command"),
        (&["rsync", "-e", "id", "a", "b:c"], "-e"),
        (&["ssh", "-o", "ProxyCommand=id", "x"], "-o ProxyCommand"),
        (&["scp", "-S", "id", "a", "b:c"], "-S"),
        (&["zip", "-TT", "id", "-T", "a.zip", "f"], "-TT"),
        (&["xargs", "id"], "any invocation"),
        (&["env", "-S", "id"], "-S"),
        (&["make", "--eval=x:;id", "x"], "--eval"),
        (&["less", "+!id", "f"], "+cmd"),
        (&["man", "-P", "id", "ls"], "-P"),
        (&["vim", "-c", "!id"], "-c"),
        (&["vi", "+!id"], "+cmd"),
        (&["perl", "-e", "1"], "any invocation"),
        (&["python3.11", "-c", "1"], "any invocation"),
        (&["ruby", "-e", "1"], "any invocation"),
        (&["node", "-e", "1"], "any invocation"),
    ];
    for (words, want) in cases {
        let names = hit_names(words);
        assert!(
            names.iter().any(|n| n == want),
            "{words:?}: want {want:?}, got {names:?}"
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
        .contains(&"-c alias.*".to_string())
    );
    // ...but not after it, where `-c` is the subcommand's own option.
    assert!(hit_names(&["git", "commit", "-c", "alias.x"]).is_empty());
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
    // Combined short flags, stuck and separate values, abbreviations.
    assert!(hit_names(&["rsync", "-avze", "id", "a", "b:"]).contains(&"-e".to_string()));
    assert!(
        hit_names(&["ssh", "-voProxyCommand=id", "h"]).contains(&"-o ProxyCommand".to_string())
    );
    assert!(hit_names(&["sed", "-ne", "1e id"]).contains(&"e".to_string()));
    assert!(hit_names(&["sed", "--expr=1e id"]).contains(&"e".to_string()));
    assert!(hit_names(&["tar", "--to-c=id", "-xf", "a"]).contains(&"--to-command".to_string()));
    // A value is not read as a flag when the program reads it as a value.
    assert!(hit_names(&["sed", "-e", "s/x/y/", "-i.bak", "f"]).is_empty());
    assert!(hit_names(&["tar", "-cf", "-I", "."]).is_empty());
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
        p.hits(w[0], &argv(w)).into_iter().map(|h| h.name).collect()
    };
    assert_eq!(names(&["git", "push"]), vec!["push"]);
    assert!(names(&["git", "-c", "alias.x=!id", "x"]).contains(&"-c alias.*".to_string()));
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
