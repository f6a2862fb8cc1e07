//! Differential test of the grammars against the real programs: whatever a grammar
//! accepts must, run for real, neither run another program nor write outside the run's
//! writable path.
//!
//! Each case runs in a scratch directory `S`: `S/work` is the working directory and the
//! only writable path; `S/out` holds a file and must stay as it is; `S/bin/m` is a marker
//! program that creates `S/marker` when anything runs it. A command line is read by
//! Warden (an allowlist entry for the program, the real filesystem) and, if its grammar
//! accepts it, run for real — in a network namespace of its own, with `/dev/null` as
//! standard input and a time limit — after which the marker must be absent, `S/out`
//! unchanged, nothing new in `S`, and `work/.git/config`, `work/.git/hooks` and
//! `work/.git/info` as they were.
//!
//! Two corpora: everyday use (every `accept` example of the shipped grammars plus a list
//! here, each of which must also be accepted), and generated invocations (proptest over
//! each program's words: known code-running forms, writes inside and outside, clustered,
//! abbreviated, stuck and spaced variants). A program that is not installed is skipped,
//! loudly; so is everything when network namespaces cannot be made here.

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A skipped program says so on stderr.
#![allow(clippy::print_stderr)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use policy::{
    Allowlist, CaseMode, CommandInput, EvalContext, Profiles, RuleSpec, TrustedPath, escape_glob,
    evaluate, resolve_executable,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// What each program's scratch directory holds before a case (bash, run in `work`;
/// `{S}` is the scratch directory).
fn setup_for(program: &str) -> &'static str {
    match program {
        "git" => {
            "git init -q . && git config user.name t && git config user.email t@t \
             && echo one > f && git add f && git commit -qm one && echo two > f \
             && git commit -qam two && echo three > f && git commit -qam three && mkdir sub \
             && ln -s ../.git sub/g && ln -s .git/hooks sym"
        }
        "tar" => "echo x > f && mkdir -p sub .git/hooks && tar -cf a.tar f",
        "zip" | "unzip" => "echo x > f && mkdir -p sub .git/hooks && zip -q a.zip f",
        "make" => {
            "printf 'all:\\n\\t@true\\nx:\\n\\t@$(CC) y\\n' > Makefile \
             && printf 'x:\\n\\t@{S}/bin/m\\n' > other.mk"
        }
        _ => "echo one > f && mkdir sub",
    }
}

/// Per program: words that may start the command line, then groups of words the
/// generator picks from (each group is kept together).
fn vocabulary(program: &str) -> (Vec<Vec<&'static str>>, Vec<Vec<&'static str>>) {
    let w = |groups: &[&[&'static str]]| groups.iter().map(|g| g.to_vec()).collect::<Vec<_>>();
    match program {
        "git" => (
            w(&[
                &["log"],
                &["diff"],
                &["show"],
                &["status"],
                &["config"],
                &["grep"],
                &["format-patch"],
                &["archive"],
                &["init"],
                &["branch"],
                &["stash"],
                &["bisect"],
                &["rebase"],
                &["clone"],
                &["commit"],
                &["worktree"],
                &["difftool"],
                &["rev-parse"],
                &["-C", "."],
                &["-C", "{S}/out"],
                &["-c", "alias.st=!{S}/bin/m"],
                &["-c", "core.pager={S}/bin/m"],
                &["-c", "color.ui=never"],
                &["-c", "core.fsmonitor={S}/bin/m"],
                &["-c", "diff.external={S}/bin/m"],
                &["--no-pager"],
                &["-p"],
                &["--git-dir={S}/out"],
                &["--exec-path={S}/out"],
                &["-c", " alias.st=!{S}/bin/m"],
                &["-c", "Alias.St=!{S}/bin/m"],
                &["-c", "core.hooksPath={S}/out"],
                &["--work-tree={S}/out"],
                &["--work-tree=.git/hooks", "checkout"],
                &["-C", "sub", "log"],
                &["-C", ".git", "log"],
                &["-C", ".git/hooks"],
                &["--git-dir=.git"],
                &["-c", "user.name=x"],
            ]),
            w(&[
                &["--oneline"],
                &["-n", "1"],
                &["-1"],
                &["--output={S}/out/x"],
                &["--output=x.txt"],
                &["--output", "../out/y"],
                &["--outp={S}/out/z"],
                &["--stat"],
                &["--ext-diff"],
                &["HEAD~1"],
                &["--format=%H"],
                &["-s"],
                &["--porcelain"],
                &["--get", "user.name"],
                &["alias.st", "!{S}/bin/m"],
                &["core.pager"],
                &["--add", "alias.st", "!{S}/bin/m"],
                &["get", "user.name"],
                &["set", "alias.st", "!{S}/bin/m"],
                &["--file={S}/out/c", "a.b", "c"],
                &["-n", "one"],
                &["-O{S}/bin/m", "one"],
                &["--open-files-in-pager={S}/bin/m"],
                &["-o", "{S}/out", "HEAD~1"],
                &["-o", "p", "HEAD~1"],
                &["--stdout"],
                &["-o", "{S}/out/a.tar", "HEAD"],
                &["--output=a.tar", "HEAD"],
                &["{S}/out/r"],
                &["sub"],
                &["-a"],
                &["list"],
                &["run", "{S}/bin/m"],
                &["start"],
                &["--exec", "{S}/bin/m", "HEAD~1"],
                &["-x{S}/bin/m"],
                &[".", "{S}/out/c"],
                &[".", "c2"],
                &["--upload-pack={S}/bin/m", ".", "c3"],
                &["--allow-empty", "-m", "x"],
                &["add", "{S}/out/w"],
                &["add", "w"],
                &["-x", "{S}/bin/m"],
                &["HEAD"],
                &["--", "f"],
                &["-p"],
                &["--template={S}/out"],
                &["--output", ".git/config"],
                &["-o", ".git/hooks", "HEAD~1"],
                &["-o", ".git/info", "HEAD~1"],
                &["HEAD", "--", "."],
                &["--output=.git/info/attributes"],
                &["--output=sym/../config"],
                &["--output=g/config"],
                &["--prefix=.git/hooks/"],
                &["--separate-git-dir={S}/out/g", "r"],
                &["--separate-git-dir=g2", "r2"],
                &["--work-tree=sub"],
                &["-c", "protocol.ext.allow=always"],
                &["ext::sh -c {S}/bin/m", "c4"],
                &["--get-regexp", "alias"],
            ]),
        ),
        "find" => (
            w(&[&["."], &["-L", "."], &["--", "."]]),
            w(&[
                &["-name", "*"],
                &["-maxdepth", "1"],
                &["-exec", "{S}/bin/m", ";"],
                &["-execdir", "{S}/bin/m", "{}", "+"],
                &["-fprint", "{S}/out/f"],
                &["-fprint", "ok.txt"],
                &["-fprintf", "{S}/out/g", "%p"],
                &["-fls", "../out/h"],
                &["-ok", "{S}/bin/m", ";"],
                &["-print0"],
                &["-newer", "f"],
                &["(", "-name", "f", ")"],
                &["-fprint0", ".git/config"],
                &["-type", "f"],
                &["!", "-empty"],
            ]),
        ),
        "sed" => (
            w(&[&["-n"], &["-i"], &["-E"], &["s/o/0/"], &["1e {S}/bin/m"]]),
            w(&[
                &["-e", "s/a/b/"],
                &["-e", "1e {S}/bin/m"],
                &["-i"],
                &["-i.bak"],
                &["--in-place=.orig"],
                &["s/x/y/w {S}/out/w"],
                &["w {S}/out/w2"],
                &["s/.*/{S}\\/bin\\/m/e"],
                &["--expression=p"],
                &["-s"],
                &["--sandbox"],
                &["-f", "s.sed"],
                &["f"],
                &["{S}/out/victim"],
                &["-ne", "p"],
                &["--expr=p"],
                &["w /dev/stdout"],
                &["1!G;h;$!d"],
            ]),
        ),
        "gawk" | "mawk" => (
            w(&[
                &["{ print $1 }"],
                &["-F:"],
                &["BEGIN { system(\"{S}/bin/m\") }"],
                &["-f", "p.awk"],
            ]),
            w(&[
                &["-v", "x=1"],
                &["{ print > \"{S}/out/a\" }"],
                &["BEGIN { print \"x\" | \"{S}/bin/m\" }"],
                &["--source=BEGIN{system(\"{S}/bin/m\")}"],
                &["f"],
                &["-W", "version"],
                &["-W", "exec", "p.awk"],
                &["BEGIN { \"{S}/bin/m\" | getline }"],
                &["NR==1"],
                &["-e", "BEGIN{}"],
            ]),
        ),
        "tar" => (
            w(&[
                &["-c"],
                &["-x"],
                &["-t"],
                &["cf", "{S}/out/e.tar"],
                &["xf", "a.tar"],
                &["-cf", "b.tar"],
            ]),
            w(&[
                &["-f", "a.tar"],
                &["-f", "{S}/out/b.tar"],
                &["-f", "../out/c.tar"],
                &["-C", "{S}/out"],
                &["-C", "sub"],
                &["-C", ".git/hooks"],
                &["--directory=.git"],
                &["--transform=s,^,.git/hooks/,"],
                &["--to-command={S}/bin/m"],
                &["-I", "{S}/bin/m"],
                &["--use-compress-program={S}/bin/m"],
                &["--checkpoint=1", "--checkpoint-action=exec={S}/bin/m"],
                &["-z"],
                &["-v"],
                &["-P"],
                &["f"],
                &["--index-file={S}/out/i"],
                &["-cf", "{S}/out/d.tar"],
                &["-xf", "a.tar"],
                &["--to-com", "{S}/bin/m"],
                &["-f", "h:a.tar"],
            ]),
        ),
        "rsync" => (
            w(&[&["-a"], &["-v"], &["-e", "{S}/bin/m"]]),
            w(&[
                &["--rsh={S}/bin/m"],
                &["--rsync-path={S}/bin/m"],
                &["--log-file={S}/out/l"],
                &["--remove-source-files"],
                &["f", "dst/"],
                &["f", "{S}/out/"],
                &["f", "../out/z"],
                &["f", "localhost:x"],
                &["{S}/out/victim", "v2"],
                &["-r"],
                &["--delete"],
                &["--temp-dir={S}/out"],
            ]),
        ),
        "zip" => (
            w(&[&["-r"], &["-q"], &["a.zip"], &["{S}/out/z.zip"]]),
            w(&[
                &["-TT", "{S}/bin/m", "-T"],
                &["-T", "--unzip-command={S}/bin/m"],
                &["-m"],
                &["a.zip", "f"],
                &["{S}/out/z.zip", "f"],
                &["b.zip", "{S}/out/victim"],
                &["-9"],
                &["-x", "f"],
            ]),
        ),
        "unzip" => (
            w(&[&["-o"], &["-q"], &["a.zip"]]),
            w(&[
                &["-d", "{S}/out"],
                &["-d", "x"],
                &["-d", ".git/hooks"],
                &["-:"],
                &["a.zip"],
                &["-l"],
            ]),
        ),
        "make" => (
            w(&[&["-s"], &["all"], &["-j2"]]),
            w(&[
                &["-k"],
                &["all"],
                &["CC={S}/bin/m", "x"],
                &["--eval=z:;@{S}/bin/m", "z"],
                &["-f", "other.mk", "x"],
                &["-C", "{S}/out"],
                &["-n"],
                &["-E", "z:;@{S}/bin/m"],
                &["--file=other.mk"],
                &["-t", "all"],
            ]),
        ),
        "xargs" => (
            w(&[&["-0"], &["-r"], &["{S}/bin/m"]]),
            w(&[
                &["-n", "1"],
                &["{S}/bin/m"],
                &["-I{}", "{S}/bin/m", "{}"],
                &["-t"],
            ]),
        ),
        "vim" => (
            w(&[&["-es"], &["-u", "NONE", "-es"], &["-Es"], &["-R"]]),
            w(&[
                &["-c", "!{S}/bin/m"],
                &["+!{S}/bin/m"],
                &["+1"],
                &["--cmd", "!{S}/bin/m"],
                &["-S", "s.vim"],
                &["-s", "keys"],
                &["f"],
                &["-w", "{S}/out/w"],
                &["-i", "NONE"],
                &["-es"],
                &["+w {S}/out/v"],
                &["-Es"],
            ]),
        ),
        "less" => (
            w(&[&["-N"], &["f"], &["-R"]]),
            w(&[
                &["+!{S}/bin/m"],
                &["-o", "{S}/out/l"],
                &["f"],
                &["-k", "keys"],
                &["+1"],
                &["-S"],
            ]),
        ),
        "ed" => (
            w(&[&["-s"], &["f"]]),
            w(&[&["f"], &["!{S}/bin/m"], &["-p", "x"]]),
        ),
        "ssh" => (
            w(&[
                &["-o", "BatchMode=yes"],
                &["-v"],
                &["-F", "cfg"],
                &["-p", "1"],
            ]),
            w(&[
                &["-o", "ProxyCommand={S}/bin/m"],
                &["-oProxyCommand {S}/bin/m"],
                &["-o", " proxycommand={S}/bin/m"],
                &["-E", "{S}/out/log"],
                &[
                    "-o",
                    "LocalCommand={S}/bin/m",
                    "-o",
                    "PermitLocalCommand=yes",
                ],
                &["-o", "ConnectTimeout=1"],
                &["-q"],
                &["-o", "Include=../cfg"],
                &["-o", "KnownHostsCommand={S}/bin/m"],
                &["-vo", "ProxyCommand={S}/bin/m"],
            ]),
        ),
        "scp" => (
            w(&[&["-q"], &["-S", "{S}/bin/m"], &["-o", "BatchMode=yes"]]),
            w(&[
                &["-o", "ProxyCommand={S}/bin/m"],
                &["f", "h:g"],
                &["h:g", "{S}/out/x"],
                &["-F", "cfg"],
                &["-qS{S}/bin/m"],
                &["-r"],
            ]),
        ),
        _ => (Vec::new(), Vec::new()),
    }
}

/// Everyday use beyond the grammars' own examples (all must be accepted).
fn everyday(program: &str) -> Vec<Vec<&'static str>> {
    let v = |l: &[&[&'static str]]| l.iter().map(|a| a.to_vec()).collect();
    match program {
        "git" => v(&[
            &["git", "log", "--oneline", "-3"],
            &["git", "diff", "HEAD~1"],
            &["git", "log", "HEAD~2..HEAD"],
            &["git", "show", "HEAD~1:f"],
            &["git", "log", "-p", "--output=log.txt"],
            &["git", "blame", "f"],
            &["git", "stash", "list"],
            &["git", "branch", "-a"],
            &["git", "tag", "-l"],
            &["git", "rev-parse", "--show-toplevel"],
            &["git", "config", "--get", "user.name"],
            &["git", "grep", "-n", "three"],
            &["git", "format-patch", "-o", "patches", "HEAD~1"],
            &["git", "archive", "-o", "a.tar", "HEAD"],
            &["git", "-C", "sub", "status"],
            &["git", "status", "--short"],
            &["git", "ls-files"],
            &["git", "describe", "--always"],
        ]),
        "find" => v(&[
            &["find", ".", "-name", "f", "-type", "f"],
            &["find", ".", "-maxdepth", "1", "-fprint", "list.txt"],
        ]),
        "sed" => v(&[
            &["sed", "-n", "1p", "f"],
            &["sed", "-i", "s/one/1/", "f"],
            &["sed", "-e", "s/o/0/g", "f"],
        ]),
        "gawk" => v(&[
            &["gawk", "{ print NR }", "f"],
            &["gawk", "-F:", "{ print $1 }", "/etc/passwd"],
        ]),
        "mawk" => v(&[&["mawk", "{ print NR }", "f"], &["mawk", "-W", "version"]]),
        "tar" => v(&[
            &["tar", "-czf", "b.tgz", "f"],
            &["tar", "-xf", "a.tar", "-C", "sub"],
            &["tar", "tf", "a.tar"],
        ]),
        "rsync" => v(&[
            &["rsync", "-a", "f", "sub/"],
            &["rsync", "-av", "--delete", "sub/", "copy/"],
        ]),
        "zip" => v(&[&["zip", "-q", "b.zip", "f"], &["zip", "-r", "c.zip", "sub"]]),
        "unzip" => v(&[
            &["unzip", "-o", "-q", "a.zip", "-d", "x"],
            &["unzip", "-l", "a.zip"],
        ]),
        "make" => v(&[&["make"], &["make", "-s", "all"], &["make", "-j2", "all"]]),
        "xargs" => v(&[&["xargs"], &["xargs", "-0", "-r"]]),
        "vim" => v(&[
            &["vim", "-es"],
            &["vim", "-u", "NONE", "-es", "f"],
            &["vi", "--version"],
        ]),
        "less" => v(&[&["less", "f"], &["less", "-N", "+1", "f"]]),
        "ed" => v(&[&["ed", "-s", "f"]]),
        "ssh" => v(&[
            &["ssh", "-V"],
            &["ssh", "-o", "BatchMode=yes", "-p", "1", "127.0.0.1", "true"],
        ]),
        "scp" => v(&[&["scp", "-q", "-o", "BatchMode=yes", "f", "127.0.0.1:g"]]),
        _ => Vec::new(),
    }
}

/// The programs compared, and the shipped name each is known by.
const PROGRAMS: &[&str] = &[
    "git", "find", "sed", "gawk", "mawk", "tar", "rsync", "zip", "unzip", "make", "xargs", "vim",
    "less", "ed", "ssh", "scp",
];

fn installed(program: &str) -> Option<PathBuf> {
    PATH.split(':')
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
}

fn netns_works() -> bool {
    Command::new("unshare")
        .args(["--net", "--", "true"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A scratch directory set up for `program`.
struct Scratch {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Scratch {
    fn new(program: &str) -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for d in ["work", "out", "bin", ".home"] {
            std::fs::create_dir(root.join(d)).unwrap();
        }
        std::fs::write(root.join("out/victim"), "a\n").unwrap();
        let marker = root.join("bin/m");
        std::fs::write(
            &marker,
            format!(
                "#!/bin/sh\ntouch {}/marker\ncat >/dev/null\nexit 1\n",
                root.display()
            ),
        )
        .unwrap();
        Command::new("chmod")
            .arg("755")
            .arg(&marker)
            .status()
            .unwrap();
        let work = root.join("work");
        let fill = |t: &str| t.replace("{S}", &root.to_string_lossy());
        std::fs::write(work.join("s.sed"), fill("1e {S}/bin/m\n")).unwrap();
        std::fs::write(
            work.join("p.awk"),
            fill("BEGIN { system(\"{S}/bin/m\") }\n"),
        )
        .unwrap();
        std::fs::write(work.join("s.vim"), fill("!{S}/bin/m\nqa!\n")).unwrap();
        std::fs::write(work.join("keys"), fill(":!{S}/bin/m\n:qa!\n")).unwrap();
        std::fs::write(root.join("cfg"), fill("Host *\n  ProxyCommand {S}/bin/m\n")).unwrap();
        std::fs::copy(root.join("cfg"), work.join("cfg")).unwrap();
        let status = Command::new("bash")
            .args(["-ec", &fill(setup_for(program))])
            .current_dir(&work)
            .env_clear()
            .env("PATH", PATH)
            .env("HOME", root.join(".home"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "setup of {program} failed");
        Scratch { _dir: dir, root }
    }

    fn fill(&self, word: &str) -> String {
        word.replace("{S}", &self.root.to_string_lossy())
    }

    /// Everything that must not change: the top level, `out`, Git's own files.
    fn state(&self) -> BTreeMap<String, Vec<u8>> {
        let mut state = BTreeMap::new();
        for entry in std::fs::read_dir(&self.root).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            state.insert(format!("top:{name}"), Vec::new());
        }
        for entry in std::fs::read_dir(self.root.join("out")).unwrap() {
            let path = entry.unwrap().path();
            let content = std::fs::read(&path).unwrap_or_default();
            state.insert(format!("out:{}", path.display()), content);
        }
        let git = self.root.join("work/.git");
        if let Ok(config) = std::fs::read(git.join("config")) {
            state.insert("git:config".into(), config);
        }
        for (dir, label) in [("hooks", "hook"), ("info", "info")] {
            let Ok(entries) = std::fs::read_dir(git.join(dir)) else {
                continue;
            };
            for entry in entries {
                let path = entry.unwrap().path();
                state.insert(
                    format!("git:{label}:{}", path.display()),
                    std::fs::read(&path).unwrap_or_default(),
                );
            }
        }
        state
    }

    /// Run `argv` for real, in its own network namespace: its combined output. Output
    /// goes to a file (outside the scratch directory): Vim, its output a pipe, never
    /// exits.
    fn run(&self, argv: &[String]) -> String {
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut child = Command::new("unshare")
            .args(["--net", "--"])
            .args(argv)
            .current_dir(self.root.join("work"))
            .env_clear()
            .env("PATH", PATH)
            .env("HOME", self.root.join(".home"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("TERM", "dumb")
            .stdin(Stdio::null())
            .stdout(log.reopen().unwrap())
            .stderr(log.reopen().unwrap())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while child.try_wait().unwrap().is_none() {
            // Everything here ends in milliseconds but Vim outside Ex mode, which with no
            // terminal waits forever (what it could do meanwhile is what is checked).
            if started.elapsed() > Duration::from_secs(3) {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let status = child.wait().unwrap();

        let output = std::fs::read(log.path()).unwrap_or_default();
        format!(
            "exit {:?}\noutput: {}",
            status.code(),
            String::from_utf8_lossy(&output)
        )
    }

    /// Whether Warden, with a plain entry for the program, allows `argv` here; and why not.
    fn allows(&self, argv: &[String]) -> (bool, String) {
        let fs = caps::LocalFs::new("/").unwrap();
        let trusted = TrustedPath::parse(PATH);
        let cwd = self.root.join("work");
        let Ok(exe) = resolve_executable(&fs, &argv[0], &cwd, &trusted) else {
            return (false, "does not resolve".into());
        };
        let allowlist = Allowlist::compile_rules(
            &[RuleSpec::program(escape_glob(&exe.path.to_string_lossy()))],
            Path::new("/root"),
            CaseMode::Sensitive,
            Profiles::shipped(),
        );
        let ctx = EvalContext {
            fs: &fs,
            cwd: &cwd,
            trusted_path: &trusted,
            allowlist: &allowlist,
            cache: None,
            protected: &[],
            writable: &[],
        };
        let e = evaluate(CommandInput::Argv(argv), &ctx);
        (e.satisfied, e.blocked().unwrap_or("").to_owned())
    }

    /// Run an accepted `argv` and say what it did that it may not.
    fn violation(&self, argv: &[String]) -> Option<String> {
        let before = self.state();
        let output = self.run(argv);
        let after = self.state();
        if self.root.join("marker").exists() {
            return Some(format!("ran the marker program\n{output}"));
        }
        if before != after {
            let changed: Vec<&String> = before
                .keys()
                .chain(after.keys())
                .filter(|k| before.get(*k) != after.get(*k))
                .collect();
            return Some(format!("changed {changed:?}\n{output}"));
        }
        None
    }
}

/// The shipped grammars' `accept` examples of `program`.
fn shipped_examples(program: &str) -> Vec<Vec<String>> {
    let doc: toml::Value = toml::from_str(policy::profiles::SHIPPED).unwrap();
    doc["program"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            p["names"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n.as_str() == Some(program))
        })
        .flat_map(|p| {
            p.get("grammar")
                .and_then(|g| g.get("examples"))
                .and_then(|e| e.get("accept"))
                .and_then(|a| a.as_array())
                .cloned()
                .unwrap_or_default()
        })
        .map(|argv| {
            let mut argv: Vec<String> = argv
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w.as_str().unwrap().to_owned())
                .collect();
            argv[0] = program.to_owned();
            argv
        })
        .collect()
}

#[test]
fn everyday_use_is_accepted_and_stays_inside() {
    if !netns_works() {
        eprintln!(
            "SKIPPED: cannot create a network namespace here (unshare --net); nothing was run"
        );
        return;
    }
    let mut failures = Vec::new();
    let mut ran = 0;
    for program in PROGRAMS {
        if installed(program).is_none() {
            eprintln!("SKIPPED: {program} is not installed; its everyday use was not run");
            continue;
        }
        let mut corpus: Vec<Vec<String>> = shipped_examples(program);
        corpus.extend(
            everyday(program)
                .into_iter()
                .map(|a| a.into_iter().map(str::to_owned).collect()),
        );
        for argv in corpus {
            let scratch = Scratch::new(program);
            if installed(&argv[0]).is_none() {
                continue;
            }
            let (allowed, why) = scratch.allows(&argv);
            if !allowed {
                failures.push(format!("{argv:?}: everyday use refused: {why}"));
                continue;
            }
            ran += 1;
            if let Some(v) = scratch.violation(&argv) {
                failures.push(format!("{argv:?}: accepted, and it {v}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(ran > 50, "only {ran} everyday commands ran");
    eprintln!("{ran} everyday commands accepted and run for real");
}

/// Variants of one word that the programs read the same way or nearly: abbreviated long
/// options, `--opt=value` for `--opt value`, a stuck short value, blanks around a value.
fn vary(words: &[String], choice: u8) -> Vec<String> {
    let mut out = words.to_vec();
    match choice % 6 {
        // `--opt value` → `--opt=value`
        1 if out.len() >= 2 && out[0].starts_with("--") && !out[0].contains('=') => {
            let joined = format!("{}={}", out[0], out[1]);
            out.splice(0..2, [joined]);
        }
        // `-o value` → `-ovalue`
        2 if out.len() >= 2 && out[0].len() == 2 && out[0].starts_with('-') => {
            let joined = format!("{}{}", out[0], out[1]);
            out.splice(0..2, [joined]);
        }
        // `--output=x` → `--outp=x`
        3 if out[0].starts_with("--") && out[0].len() > 6 => {
            let (name, value) = out[0].split_once('=').unwrap_or((&out[0], ""));
            let short = &name[..name.len() - 2];
            out[0] = if value.is_empty() {
                short.to_owned()
            } else {
                format!("{short}={value}")
            };
        }
        // A value with a leading blank.
        4 if out.len() >= 2 => out[1] = format!(" {}", out[1]),
        // Upper case.
        5 if out.len() >= 2 && out[1].contains('=') => {
            let (k, v) = out[1].split_once('=').unwrap();
            out[1] = format!("{}={v}", k.to_uppercase());
        }
        _ => {}
    }
    out
}

#[test]
fn generated_invocations_the_grammars_accept_stay_plain() {
    if !netns_works() {
        eprintln!(
            "SKIPPED: cannot create a network namespace here (unshare --net); nothing was run"
        );
        return;
    }
    let cases: u32 = std::env::var("WARDEN_GRAMMAR_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48);
    let mut totals = Vec::new();
    for program in PROGRAMS {
        if installed(program).is_none() {
            eprintln!("SKIPPED: {program} is not installed; no invocation of it was generated");
            continue;
        }
        let (first, rest) = vocabulary(program);
        let started = Instant::now();
        let accepted = AtomicUsize::new(0);
        let refused = AtomicUsize::new(0);
        let strategy = (
            prop::sample::select(first),
            prop::collection::vec((prop::sample::select(rest), any::<u8>()), 0..4),
        );
        let mut runner = TestRunner::new(Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        });
        let result = runner.run(&strategy, |(head, groups)| {
            let scratch = Scratch::new(program);
            let mut argv = vec![program.to_string()];
            argv.extend(head.iter().map(|w| scratch.fill(w)));
            for (group, choice) in groups {
                let words: Vec<String> = group.iter().map(|w| scratch.fill(w)).collect();
                argv.extend(vary(&words, choice));
            }
            let (allowed, _) = scratch.allows(&argv);
            if !allowed {
                refused.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            accepted.fetch_add(1, Ordering::Relaxed);
            if let Some(v) = scratch.violation(&argv) {
                return Err(TestCaseError::fail(format!(
                    "{argv:?}: the {program} grammar accepted it, and it {v}"
                )));
            }
            Ok(())
        });
        if let Err(e) = result {
            panic!("{e}");
        }
        totals.push(format!(
            "{program}: {} accepted and run, {} refused ({:.1} s)",
            accepted.load(Ordering::Relaxed),
            refused.load(Ordering::Relaxed),
            started.elapsed().as_secs_f64()
        ));
        assert!(
            refused.load(Ordering::Relaxed) > 0,
            "{program}: nothing generated was refused: the vocabulary has no attack in it"
        );
    }
    eprintln!("{}", totals.join("\n"));
}

#[test]
fn a_known_code_running_form_of_each_program_really_runs_the_marker() {
    // The generator's attacks are real: each program's marker form, run for real,
    // runs the marker (so the property above is not vacuous).
    if !netns_works() {
        eprintln!("SKIPPED: cannot create a network namespace here (unshare --net)");
        return;
    }
    let forms: &[&[&str]] = &[
        &["git", "-c", "alias.st=!{S}/bin/m", "st"],
        &["find", ".", "-maxdepth", "0", "-exec", "{S}/bin/m", ";"],
        &["sed", "1e {S}/bin/m", "f"],
        &["gawk", "BEGIN { system(\"{S}/bin/m\") }"],
        &[
            "tar",
            "-cf",
            "x.tar",
            "--checkpoint=1",
            "--checkpoint-action=exec={S}/bin/m",
            "f",
        ],
        &["make", "CC={S}/bin/m", "x"],
        &["xargs", "{S}/bin/m"],
        &["vim", "-u", "NONE", "-es", "-c", "!{S}/bin/m", "-c", "qa!"],
        &["ssh", "-o", "ProxyCommand={S}/bin/m", "h"],
    ];
    for form in forms {
        if installed(form[0]).is_none() {
            eprintln!("SKIPPED: {} is not installed", form[0]);
            continue;
        }
        let scratch = Scratch::new(form[0]);
        let argv: Vec<String> = form.iter().map(|w| scratch.fill(w)).collect();
        let output = scratch.run(&argv);
        assert!(
            scratch.root.join("marker").exists(),
            "{argv:?} did not run the marker\n{output}"
        );
        assert!(!scratch.allows(&argv).0, "{argv:?} was allowed");
    }
}
