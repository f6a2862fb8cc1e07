//! Differential test against the real programs, the known attacks: every code-running or
//! path-writing vector is run with the real program (where installed), to show it
//! really executes or writes (it creates a marker file outside the working directory),
//! and then evaluated by Warden against an allowlist entry for that very program — which
//! must refuse it, naming the word. A benign use of each program is allowed, and an
//! entry that allows the refused names allows the vector: nothing else got in the way.
//! (`grammar_differential.rs` runs everyday use and generated invocations.)
//!
//! A program that is not installed is skipped, loudly, with the vectors not run.

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A skipped program says so on stderr.
#![allow(clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use policy::{
    Allowlist, CaseMode, CommandInput, EvalContext, Profiles, RuleSpec, TrustedPath, escape_glob,
    evaluate, resolve_executable,
};

/// The trusted PATH the programs are looked up in (and run with).
const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// One vector: run `setup` (bash) in a fresh directory, then `argv` (`{D}` is the
/// directory, `{M}` the marker); it must create the marker, and Warden must refuse it
/// with the profile hit `hit` (`None`: refused before any profile, by the analysis).
struct Vector {
    setup: String,
    /// Run after the vector (bash), for vectors that plant what a later command runs.
    after: String,
    argv: Vec<String>,
    hit: Option<String>,
    /// Run under `script` (a pseudo-terminal): pagers run only on a terminal.
    pty: bool,
}

fn v(argv: &[&str], hit: &str) -> Vector {
    s("", argv, hit)
}

fn s(setup: &str, argv: &[&str], hit: &str) -> Vector {
    Vector {
        setup: setup.to_owned(),
        after: String::new(),
        argv: argv.iter().map(|w| w.to_string()).collect(),
        hit: Some(hit.to_owned()),
        pty: false,
    }
}

const GIT_REPO: &str = "git init -q . && git config user.name t && git config user.email t@t \
    && echo one > f && git add f && git commit -qm one && echo two > f && git commit -qam two";

/// `{D}/tool` marks and passes its input through (a compressor); `{D}/quit` marks and
/// fails (a remote shell, which must not be left waiting for a protocol).
const SCRIPT: &str = "printf '#!/bin/sh\\ntouch \"$MARK\"\\ncat\\n' > {D}/tool && chmod +x {D}/tool \
    && printf '#!/bin/sh\\ntouch \"$MARK\"\\nexit 1\\n' > {D}/quit && chmod +x {D}/quit";

/// The programs, a benign command each (allowed by a plain entry), and their vectors.
fn programs() -> Vec<(&'static str, Vector, Vec<Vector>)> {
    let bisect = format!(
        "{GIT_REPO} && echo 3 > f && git commit -qam 3 && echo 4 > f && git commit -qam 4 \
         && git bisect start HEAD HEAD~3 >/dev/null"
    );
    let script_f = format!("{SCRIPT} && echo x > f");
    vec![
        (
            "git",
            s(GIT_REPO, &["git", "log", "--oneline"], ""),
            vec![
                s(
                    GIT_REPO,
                    &["git", "-c", "alias.x=!touch {M}", "x"],
                    "-c alias.*",
                ),
                s(
                    GIT_REPO,
                    &["git", "-C", ".", "-c", "ALIAS.x=!touch {M}", "x"],
                    "-c alias.*",
                ),
                s(GIT_REPO, &["git", "log", "--output={M}"], "--output"),
                s(GIT_REPO, &["git", "log", "--output", "{M}"], "--output"),
                Vector {
                    pty: true,
                    ..s(
                        GIT_REPO,
                        &["git", "-c", "core.pager=touch {M}; cat", "-p", "log"],
                        "-c core.pager",
                    )
                },
                s(
                    "mkdir ex && printf '#!/bin/sh\\ntouch {M}\\n' > ex/git-foo && chmod +x ex/git-foo",
                    &["git", "--exec-path={D}/ex", "foo"],
                    "--exec-path",
                ),
                s(
                    "git init -q . && git config user.name t && git config user.email t@t && echo a > f && git add f && git commit -qm a && echo b > f",
                    &["git", "-c", "diff.external=touch {M} #", "diff"],
                    "-c diff.external",
                ),
                s(
                    &bisect,
                    &["git", "bisect", "run", "touch", "{M}"],
                    "bisect run",
                ),
                s(
                    GIT_REPO,
                    &["git", "rebase", "--exec", "touch {M}", "HEAD~1"],
                    "--exec",
                ),
                s(
                    GIT_REPO,
                    &["git", "rebase", "--exe=touch {M}", "HEAD~1"],
                    "--exe",
                ),
                s(
                    "mkdir sub && (cd sub && git init -q && git config user.name t && git config user.email t@t && git commit -q --allow-empty -m s) && mkdir main && cd main && git init -q && git config user.name t && git config user.email t@t && git -c protocol.file.allow=always submodule -q add {D}/sub s && git commit -qm m",
                    &["git", "-C", "main", "submodule", "foreach", "touch {M}"],
                    "submodule foreach",
                ),
                s(
                    GIT_REPO,
                    &["git", "difftool", "-y", "-x", "touch {M} #", "HEAD~1"],
                    "difftool",
                ),
                s(
                    "mkdir src && cd src && git init -q && git config user.name t && git config user.email t@t && git commit -q --allow-empty -m s",
                    &[
                        "git",
                        "clone",
                        "-q",
                        "--upload-pack=touch {M}; git-upload-pack",
                        "file://{D}/src",
                        "dst",
                    ],
                    "--upload-pack",
                ),
                s(
                    GIT_REPO,
                    &["git", "grep", "-Otouch {M} #", "two"],
                    "--open-files-in-pager",
                ),
                Vector {
                    after: "git y".into(),
                    ..s(
                        GIT_REPO,
                        &["git", "config", "alias.y", "!touch {M}"],
                        "config operand",
                    )
                },
            ],
        ),
        (
            "find",
            v(&["find", ".", "-maxdepth", "0", "-name", "*"], ""),
            vec![
                v(
                    &["find", ".", "-maxdepth", "0", "-exec", "touch", "{M}", ";"],
                    "-exec",
                ),
                v(
                    &[
                        "find",
                        ".",
                        "-maxdepth",
                        "0",
                        "-execdir",
                        "touch",
                        "{M}",
                        ";",
                    ],
                    "-exec",
                ),
                v(
                    &[
                        "find",
                        "--",
                        ".",
                        "-maxdepth",
                        "0",
                        "-exec",
                        "touch",
                        "{M}",
                        ";",
                    ],
                    "-exec",
                ),
                v(
                    &["find", ".", "-maxdepth", "0", "-fprint", "{M}"],
                    "-fprint",
                ),
                v(
                    &["find", ".", "-maxdepth", "0", "-fprintf", "{M}", "%p"],
                    "-fprintf",
                ),
            ],
        ),
        (
            "sed",
            s("echo x > in", &["sed", "-n", "s/x/y/p", "in"], ""),
            vec![
                s("echo x > in", &["sed", "-n", "1e touch {M}", "in"], "e"),
                s("echo x > in", &["sed", "-ne", "1e touch {M}", "in"], "e"),
                s(
                    "echo x > in",
                    &["sed", "--expr=1e touch {M}", "in"],
                    "--expr",
                ),
                s("echo x > in", &["sed", "--e=1e touch {M}", "in"], "--e"),
                s("echo x > in", &["sed", "s|.*|touch {M}|e", "in"], "s///e"),
                s("echo x > in", &["sed", "-n", "w {M}", "in"], "w"),
                s("echo x > in", &["sed", "s/x/y/w {M}", "in"], "s///w"),
                s(
                    "echo x > in && echo '1e touch {M}' > s.sed",
                    &["sed", "-f", "s.sed", "in"],
                    "--file",
                ),
            ],
        ),
        (
            "mawk",
            s("echo x > in", &["mawk", "$1 > 0 { print $1 }", "in"], ""),
            awk_vectors("mawk"),
        ),
        (
            "gawk",
            s("echo x > in", &["gawk", "{ print $1 }", "in"], ""),
            {
                let mut list = awk_vectors("gawk");
                list.push(v(
                    &["gawk", "BEGIN { f = \"system\"; @f(\"touch {M}\") }"],
                    "@",
                ));
                list.push(s(
                    "echo 'BEGIN { system(\"touch {M}\") }' > p.awk",
                    &["gawk", "--e", "p.awk"],
                    "--e",
                ));
                list
            },
        ),
        (
            "tar",
            s(
                "echo x > f && tar -cf a.tar f",
                &["tar", "-tf", "a.tar"],
                "",
            ),
            vec![
                s(
                    "echo x > f && tar -cf a.tar f",
                    &["tar", "-xf", "a.tar", "--to-command=touch {M}"],
                    "--to-command",
                ),
                s(
                    "echo x > f && tar -cf a.tar f",
                    &["tar", "xf", "a.tar", "--to-com", "touch {M}"],
                    "--to-com",
                ),
                s(
                    SCRIPT,
                    &["tar", "-c", "-I", "{D}/tool", "-f", "o.tar", "tool"],
                    "--use-compress-program",
                ),
                s(
                    SCRIPT,
                    &["tar", "cIf", "{D}/tool", "o.tar", "tool"],
                    "--use-compress-program",
                ),
                s(
                    "echo x > f",
                    &[
                        "tar",
                        "-cf",
                        "o.tar",
                        "--checkpoint=1",
                        "--checkpoint-action=exec=touch {M}",
                        "f",
                    ],
                    "--checkpoint-action",
                ),
            ],
        ),
        (
            "rsync",
            s("echo x > f", &["rsync", "-a", "f", "g"], ""),
            vec![
                s(
                    SCRIPT,
                    &["rsync", "-avze", "{D}/quit", "f", "host:dst"],
                    "--rsh",
                ),
                s(
                    SCRIPT,
                    &["rsync", "--rsh={D}/quit", "f", "host:dst"],
                    "--rsh",
                ),
            ],
        ),
        (
            "ssh",
            v(&["ssh", "-V"], ""),
            vec![
                v(
                    &[
                        "ssh",
                        "-o",
                        "BatchMode=yes",
                        "-o",
                        "ProxyCommand=touch {M}",
                        "host",
                    ],
                    "-o proxycommand",
                ),
                v(
                    &["ssh", "-oBatchMode=yes", "-oproxycommand touch {M}", "host"],
                    "-o proxycommand",
                ),
                v(
                    &[
                        "ssh",
                        "-qo",
                        "ProxyCommand=touch {M}",
                        "-o",
                        "BatchMode=yes",
                        "host",
                    ],
                    "-o proxycommand",
                ),
            ],
        ),
        (
            "scp",
            s("echo x > f", &["scp", "-q", "f", "g"], ""),
            vec![s(
                &script_f,
                &[
                    "scp",
                    "-S",
                    "{D}/quit",
                    "-o",
                    "BatchMode=yes",
                    "f",
                    "host:g",
                ],
                "-S",
            )],
        ),
        (
            "zip",
            s("echo x > f", &["zip", "-q", "a.zip", "f"], ""),
            vec![
                s(
                    &script_f,
                    &["zip", "-q", "-T", "-TT", "{D}/quit", "a.zip", "f"],
                    "--unzip-command",
                ),
                s(
                    &script_f,
                    &["zip", "-q", "-T", "--unzip-command={D}/quit", "a.zip", "f"],
                    "--unzip-command",
                ),
            ],
        ),
        (
            "make",
            s(
                "printf 'all:\\n\\t@true\\n' > Makefile",
                &["make", "-s", "all"],
                "",
            ),
            vec![
                v(&["make", "--eval=x:;@touch {M}", "x"], "--eval"),
                v(&["make", "-E", "x:;@touch {M}", "x"], "--eval"),
                s(
                    "printf 'x:\\n\\t@touch {M}\\n' > other.mk",
                    &["make", "-f", "other.mk", "x"],
                    "--file",
                ),
                s(
                    "printf 'all:\\n\\t@$(CC) x\\n' > Makefile",
                    &["make", "CC=touch {M}", "all"],
                    "VAR=value",
                ),
            ],
        ),
        (
            "xargs",
            v(&["xargs", "-r", "true"], "operand"),
            vec![v(&["xargs", "touch", "{M}"], "operand")],
        ),
        (
            "vim",
            v(&["vim", "--version"], ""),
            vec![
                v(
                    &["vim", "-u", "NONE", "-es", "-c", "!touch {M}", "-c", "qa!"],
                    "--cmd",
                ),
                v(&["vim", "-u", "NONE", "-es", "+!touch {M}", "+qa!"], "+cmd"),
            ],
        ),
        (
            "perl",
            v(&["perl", "-v"], "any invocation"),
            vec![v(&["perl", "-e", "open F, '>', '{M}'"], "any invocation")],
        ),
        (
            "node",
            v(&["node", "-v"], "any invocation"),
            vec![v(
                &["node", "-e", "require('fs').writeFileSync('{M}', '')"],
                "any invocation",
            )],
        ),
        (
            "env",
            v(&["env"], ""),
            vec![Vector {
                hit: None,
                ..v(&["env", "-S", "touch {M}"], "")
            }],
        ),
    ]
}

fn awk_vectors(awk: &str) -> Vec<Vector> {
    vec![
        v(&[awk, "BEGIN { system(\"touch {M}\") }"], "system()"),
        v(&[awk, "BEGIN { print \"x\" > \"{M}\" }"], ">"),
        v(&[awk, "BEGIN { print \"x\" | \"cat > {M}\" }"], "|"),
        v(&[awk, "BEGIN { \"touch {M}\" | getline }"], "|"),
        s(
            "echo 'BEGIN { system(\"touch {M}\") }' > p.awk",
            &[awk, "-f", "p.awk"],
            "--file",
        ),
    ]
}

fn installed(program: &str) -> Option<PathBuf> {
    PATH.split(':')
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
}

fn fill(word: &str, dir: &Path, marker: &Path) -> String {
    word.replace("{D}", &dir.to_string_lossy())
        .replace("{M}", &marker.to_string_lossy())
}

/// Run `argv` in `dir` with a clean environment; bounded in time.
fn run(dir: &Path, argv: &[String], marker: &Path, pty: bool) -> String {
    let mut command = if pty {
        let line: Vec<String> = argv
            .iter()
            .map(|w| policy::shell::quote(w).to_string())
            .collect();
        let mut c = Command::new("script");
        c.args(["-qec", &line.join(" "), "/dev/null"]);
        c
    } else {
        let mut c = Command::new(&argv[0]);
        c.args(&argv[1..]);
        c
    };
    let home = dir.join(".home");
    std::fs::create_dir_all(&home).unwrap();
    command
        .current_dir(dir)
        .env_clear()
        .env("PATH", PATH)
        .env("HOME", &home)
        .env("MARK", marker)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("TERM", "dumb")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn setup(dir: &Path, script: &str, marker: &Path) {
    if script.is_empty() {
        return;
    }
    let status = Command::new("bash")
        .args(["-ec", &fill(script, dir, marker)])
        .current_dir(dir)
        .env("PATH", PATH)
        .env("HOME", dir.join(".home"))
        .env("MARK", marker)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "setup failed: {script}");
}

/// Warden's view of `argv` with an entry for the program that allows `allow_flags`.
fn evaluate_with(argv: &[String], dir: &Path, allow_flags: &[String]) -> policy::Evaluation {
    let fs = caps::LocalFs::new("/").unwrap();
    let trusted = TrustedPath::parse(PATH);
    let exe = resolve_executable(&fs, &argv[0], dir, &trusted).unwrap();
    let allowlist = Allowlist::compile_rules(
        &[RuleSpec {
            allow_flags: allow_flags.to_vec(),
            ..RuleSpec::program(escape_glob(&exe.path.to_string_lossy()))
        }],
        Path::new("/root"),
        CaseMode::Sensitive,
        Profiles::shipped(),
    );
    let ctx = EvalContext {
        fs: &fs,
        cwd: dir,
        trusted_path: &trusted,
        allowlist: &allowlist,
        cache: None,
        protected: &[],
        writable: &[],
    };
    evaluate(CommandInput::Argv(argv), &ctx)
}

#[test]
fn every_listed_vector_runs_for_real_and_warden_refuses_it_by_name() {
    let mut failures = Vec::new();
    let mut ran = 0;
    for (program, benign, vectors) in programs() {
        if installed(program).is_none() {
            eprintln!(
                "SKIPPED: {program} is not installed on this machine; its {} vector(s) were not run",
                vectors.len()
            );
            continue;
        }
        // The benign command: a plain entry allows it (interpreters: never, by profile).
        let tmp = tempfile::tempdir().unwrap();
        let marker = tmp.path().join("marker");
        setup(tmp.path(), &benign.setup, &marker);
        let argv: Vec<String> = benign
            .argv
            .iter()
            .map(|w| fill(w, tmp.path(), &marker))
            .collect();
        let e = evaluate_with(&argv, tmp.path(), &[]);
        let expect_allowed = benign.hit.as_deref() == Some("");
        if e.satisfied != expect_allowed {
            failures.push(format!(
                "{argv:?}: benign command satisfied = {}",
                e.satisfied
            ));
        }
        for vector in vectors {
            let tmp = tempfile::tempdir().unwrap();
            // Outside the working directory (the run's writable path): a vector that
            // writes there writes where it may not.
            let elsewhere = tempfile::tempdir().unwrap();
            let marker = elsewhere.path().join("marker");
            setup(tmp.path(), &vector.setup, &marker);
            let argv: Vec<String> = vector
                .argv
                .iter()
                .map(|w| fill(w, tmp.path(), &marker))
                .collect();
            let output = run(tmp.path(), &argv, &marker, vector.pty);
            setup(tmp.path(), &vector.after, &marker);
            ran += 1;
            if !marker.exists() {
                failures.push(format!(
                    "{argv:?}: the real {program} did not execute the vector (no marker)\n{output}"
                ));
                continue;
            }
            let e = evaluate_with(&argv, tmp.path(), &[]);
            if e.satisfied {
                failures.push(format!("{argv:?}: Warden allowed it"));
                continue;
            }
            if let Some(hit) = vector.hit.as_deref() {
                let leaf = &e.leaves[0];
                let names: Vec<&str> = leaf.profile.iter().map(|h| h.name.as_str()).collect();
                let blocked = leaf.blocked.as_deref().unwrap_or("");
                // Named as an entry's allowFlags would name it (a glob over names).
                let named = leaf
                    .profile
                    .iter()
                    .find(|h| h.allowed_by(&[hit.to_owned()]));
                if named.is_none_or(|h| !blocked.contains(&format!("{program} {}:", h.name))) {
                    failures.push(format!(
                        "{argv:?}: want the hit {hit:?} named, got {names:?} / {blocked:?}"
                    ));
                    continue;
                }
                // Allowing exactly these hits by name lets the same entry allow it.
                let all: Vec<String> = leaf.profile.iter().map(|h| h.name.clone()).collect();
                if !evaluate_with(&argv, tmp.path(), &all).satisfied {
                    failures.push(format!("{argv:?}: an entry allowing {all:?} still misses"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(
        ran > 0,
        "no program of the profiles is installed: nothing was compared"
    );
    eprintln!("{ran} vectors executed for real and refused by Warden");
}
