//! End-to-end: the real `warden exec` binary, real processes, real signals.
// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// A test that cannot run says so on stderr.
#![allow(clippy::print_stderr)]

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::{open_gateway_home, process_alive, wait_gone, warden, warden_in};

/// `warden` in a home where host=gateway runs everything.
fn w() -> (tempfile::TempDir, Command) {
    let home = open_gateway_home();
    let cmd = warden_in(home.path());
    (home, cmd)
}

#[test]
fn by_default_commands_run_in_the_sandbox_and_nothing_runs_outside_it() {
    let home = support::warden_home();
    let out = warden_in(home.path())
        .args(["exec", "--json", "--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(77) {
        // No usable bubblewrap here: the refusal must say why, and nothing ran.
        assert!(
            stderr.contains("no sandbox backend is available"),
            "{stderr}"
        );
    } else {
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["host"], "sandbox", "{v:#}");
        assert_eq!(v["decision"]["reason"], "sandboxed");
        assert_eq!(out.status.code(), Some(0));
    }
    let out = warden_in(home.path())
        .args(["exec", "--host", "gateway", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(77));
    assert!(String::from_utf8_lossy(&out.stderr).contains("security=deny"));
    let out = warden_in(home.path())
        .args(["exec", "--host", "node", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(77));
    assert!(String::from_utf8_lossy(&out.stderr).contains("reaches no nodes"));
}

#[test]
fn a_switched_off_sandbox_refuses_instead_of_running_unconfined() {
    let home = support::warden_home();
    support::configure(
        home.path(),
        "[sandbox]\nbackend = \"off\"\npermission_mode = \"unrestricted\"\n",
        r#"{"version":1}"#,
    );
    let marker = home.path().join("pwned");
    let out = warden_in(home.path())
        .args(["exec", "--shell", &format!("touch {}", marker.display())])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(77));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sandbox.backend = \"off\""), "{stderr}");
    assert!(!marker.exists(), "nothing may run");
}

#[test]
fn runs_a_command_and_passes_its_output_and_exit_code_through() {
    let (_h, mut warden) = w();
    let out = warden
        .args([
            "exec",
            "--",
            "sh",
            "-c",
            "echo hello; echo oops >&2; exit 3",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "oops\n");
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn shell_mode_runs_a_script_with_sh() {
    let home = open_gateway_home();
    let out = warden_in(home.path())
        .args(["exec", "--shell", "echo a && echo b"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "a\nb\n");
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn missing_and_non_executable_programs_exit_127_and_126() {
    let home = open_gateway_home();
    let out = warden_in(home.path())
        .args(["exec", "--", "no-such-program-xyz"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("program not found"));
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("data.txt"), "x").unwrap();
    let out = warden_in(home.path())
        .args([
            "exec",
            "--cwd",
            tmp.path().to_str().unwrap(),
            "--",
            "./data.txt",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(126));
}

#[test]
fn timeout_exits_124_and_kills_the_tree() {
    let home = open_gateway_home();
    let tmp = tempfile::tempdir().unwrap();
    let pidfile = tmp.path().join("pid");
    let script = format!("sleep 300 & echo $! > {}; wait", pidfile.display());
    let started = Instant::now();
    let out = warden_in(home.path())
        .args(["exec", "--timeout", "1s", "--shell", &script])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(124));
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(String::from_utf8_lossy(&out.stderr).contains("timed out"));
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(wait_gone(pid), "background sleep survived the timeout");
}

#[test]
fn json_output_is_the_typed_result() {
    let home = open_gateway_home();
    let out = warden_in(home.path())
        .args(["exec", "--json", "--", "sh", "-c", "echo hi; exit 7"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["exitCode"], 7);
    assert_eq!(v["status"], "finished");
    assert_eq!(v["stdout"], "hi\n");
    assert_eq!(v["timedOut"], false);
    assert_eq!(v["truncated"], false);
    assert!(v["durationMs"].is_u64());
    assert_eq!(v["decision"]["reason"], "security-full");
    // The program ran as the file the trusted PATH resolves `sh` to.
    let sh = std::fs::canonicalize("/usr/bin/sh")
        .unwrap_or_else(|_| std::fs::canonicalize("/bin/sh").unwrap());
    assert_eq!(v["executed"]["argv"][0], sh.to_str().unwrap());
}

#[test]
fn output_is_capped_at_200000_bytes() {
    let home = open_gateway_home();
    let out = warden_in(home.path())
        .args(["exec", "--json", "--", "head", "-c", "5000000", "/dev/zero"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["truncated"], true);
    assert_eq!(v["stdoutSize"]["written"], 5_000_000);
    assert_eq!(v["stdoutSize"]["kept"], 200_000);
    for text in ["stdout", "combined"] {
        let text = v[text].as_str().unwrap();
        assert!(text.contains("… (truncated: 4800000 bytes dropped here"));
        assert!(text.len() <= 200_000 + 128);
    }
}

#[test]
fn the_callers_environment_is_not_inherited_wholesale() {
    let home = open_gateway_home();
    let out = warden_in(home.path())
        .env("LD_PRELOAD", "/tmp/evil.so")
        .env("SECRET_TOKEN", "hunter2")
        .env("LANG", "C.UTF-8")
        .args(["exec", "--", "env"])
        .output()
        .unwrap();
    let env = String::from_utf8_lossy(&out.stdout);
    assert!(
        !env.contains("LD_PRELOAD") && !env.contains("hunter2"),
        "{env}"
    );
    assert!(env.lines().any(|l| l == "LANG=C.UTF-8"), "{env}");
    assert!(env.lines().any(|l| l.starts_with("PATH=")), "{env}");
}

#[test]
fn bad_arguments_are_refused_before_anything_runs() {
    let out = warden()
        .args(["exec", "--timeout", "0s", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("greater than zero"));
    let out = warden()
        .args(["exec", "--timeout", "soon", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = warden().args(["exec"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    // A negative timeout is a timeout that is not above zero — not, as clap would
    // suggest, a word to pass after `--` (which would make it the command).
    let out = warden()
        .args(["exec", "--timeout", "-1", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("greater than zero, got -1"), "{err}");
    assert!(!err.contains("'-- -1'"), "{err}");
    // A program without the `--` before it: the line that works, quoted as typed.
    for (args, tip) in [
        (
            &["exec", "ls", "-la", "a b"][..],
            "`warden exec -- ls -la 'a b'`",
        ),
        (
            &["exec", "--host", "gateway", "make", "test"][..],
            "`warden exec --host gateway -- make test`",
        ),
        (
            &["policy", "explain", "git", "status"][..],
            "`warden policy explain -- git status`",
        ),
    ] {
        let out = warden().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(tip), "{args:?}: {err}");
    }
}

#[test]
fn sigint_kills_the_command_tree_and_exits_130() {
    let home = open_gateway_home();
    let tmp = tempfile::tempdir().unwrap();
    let pidfile = tmp.path().join("pid");
    let script = format!("echo $$ > {}; sleep 300", pidfile.display());
    let mut child = warden_in(home.path())
        .args(["exec", "--shell", &script])
        .spawn()
        .unwrap();
    let pid = support::read_pid(&pidfile);
    assert!(process_alive(pid));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(wait_gone(pid), "the command survived SIGINT to warden");
}

/// `warden exec` of a long-running command with `stdout` for its standard output: once
/// `lose_reader` has made the reader go away, nobody will read the result, so the run
/// stops as a SIGPIPE'd command would (141) instead of running on, and the command's tree
/// is gone.
fn a_lost_reader_ends_the_run(
    stdout: std::process::Stdio,
    lose_reader: impl FnOnce(&mut std::process::Child),
) {
    let home = open_gateway_home();
    let tmp = tempfile::tempdir().unwrap();
    let pidfile = tmp.path().join("pid");
    let script = format!("echo $$ > {}; sleep 300", pidfile.display());
    let mut child = warden_in(home.path())
        .args(["exec", "--shell", &script])
        .stdout(stdout)
        .spawn()
        .unwrap();
    let pid = support::read_pid(&pidfile);
    assert!(process_alive(pid));
    lose_reader(&mut child);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(141));
    assert!(wait_gone(pid), "the command survived its reader");
}

#[test]
fn a_vanished_stdout_reader_kills_the_command_tree_and_exits_141() {
    // `warden exec -- long-running | head` after head has exited.
    a_lost_reader_ends_the_run(std::process::Stdio::piped(), |child| {
        drop(child.stdout.take())
    });
}

#[test]
fn a_vanished_socket_reader_kills_the_command_tree_and_exits_141() {
    // Standard output a socket (as an agent's client may give it), its peer closed.
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let stdout = std::process::Stdio::from(std::os::fd::OwnedFd::from(theirs));
    a_lost_reader_ends_the_run(stdout, move |_| drop(ours));
}

#[test]
fn a_socket_reader_that_writes_is_not_a_reader_gone() {
    // Data the peer sends on standard output's socket is not Warden's: the run goes on,
    // and ends as its command does.
    let home = open_gateway_home();
    let (mut ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let mut child = warden_in(home.path())
        .args(["exec", "--shell", "sleep 1; echo done"])
        .stdout(std::process::Stdio::from(std::os::fd::OwnedFd::from(
            theirs,
        )))
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut ours, b"noise").unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    ours.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut got = String::new();
    let _ = std::io::Read::read_to_string(&mut ours, &mut got);
    assert_eq!(got, "done\n");
}

#[test]
fn version_and_help_work() {
    let out = Command::new(env!("CARGO_BIN_EXE_warden"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("warden "));
    let out = warden().args(["exec", "--help"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("124 timed out"));
}

#[test]
fn an_allowlisted_git_does_not_run_code_through_its_flags_unless_the_entry_says_so() {
    let tmp = support::warden_home();
    let h = tmp.path();
    let work = tempfile::tempdir().unwrap();
    let marker = work.path().join("marker");
    let git = std::fs::canonicalize(
        ["/usr/local/bin/git", "/usr/bin/git"]
            .iter()
            .find(|p| std::path::Path::new(p).exists())
            .expect("git is installed"),
    )
    .unwrap();
    let with_entry = |entry: serde_json::Value| {
        let approvals = serde_json::json!({
            "version": 1,
            "defaults": {"security": "allowlist", "ask": "off", "askFallback": "deny"},
            "agents": {"main": {"allowlist": [entry]}}
        });
        support::configure(
            h,
            "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\nask = \"off\"\n",
            &approvals.to_string(),
        );
    };
    let exec = |args: &[&str]| {
        support::warden_in(h)
            .arg("exec")
            .arg("--cwd")
            .arg(work.path())
            .arg("--")
            .arg(&git)
            .args(args)
            .output()
            .unwrap()
    };
    let alias = format!("alias.x=!touch {}", marker.display());
    with_entry(serde_json::json!({"pattern": git}));
    let out = exec(&["--version"]);
    support::assert_success(&out);
    // The issue's command: the entry names git; the alias would run `touch`.
    let out = exec(&["-c", &alias, "x"]);
    assert_eq!(
        out.status.code(),
        Some(77),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("git -c alias.x: sets \"alias.x\", a configuration key the git grammar does not know to be safe"),
        "{stderr}"
    );
    assert!(!marker.exists(), "the alias ran");
    // An entry that allows those words by name: it runs (the vector is real).
    with_entry(serde_json::json!({"pattern": git, "allowFlags": ["-c alias.*", "x"]}));
    let out = exec(&["-c", &alias, "x"]);
    support::assert_success(&out);
    assert!(marker.exists());
    // An entry with arguments covers only its subcommand.
    with_entry(serde_json::json!({"pattern": git, "args": ["--version"], "argsMatch": "exact"}));
    assert!(exec(&["--version"]).status.success());
    assert_eq!(exec(&["--help"]).status.code(), Some(77));
}

#[test]
fn a_bare_entry_allows_what_the_grammar_accepts_and_names_the_first_word_it_does_not() {
    let tmp = support::warden_home();
    let h = tmp.path();
    let work = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let status = std::process::Command::new("git")
            .args(args)
            .current_dir(work.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", work.path())
            .output()
            .unwrap();
        assert!(status.status.success(), "{status:?}");
    };
    git(&["init", "-q", "."]);
    for message in ["1", "2"] {
        let identity = ["-c", "user.name=t", "-c", "user.email=t@t"];
        git(&[
            &identity[..],
            &["commit", "-q", "--allow-empty", "-m", message],
        ]
        .concat());
    }
    let mut entries = Vec::new();
    for program in ["git", "vim", "sed"] {
        if let Some(path) = ["/usr/local/bin", "/usr/bin", "/bin"]
            .iter()
            .map(|d| std::path::Path::new(d).join(program))
            .find(|p| p.exists())
        {
            entries.push(serde_json::json!({"pattern": std::fs::canonicalize(path).unwrap()}));
        }
    }
    let approvals = serde_json::json!({
        "version": 1,
        "defaults": {"security": "allowlist", "ask": "off", "askFallback": "deny"},
        "agents": {"main": {"allowlist": entries}}
    });
    support::configure(
        h,
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\nask = \"off\"\n",
        &approvals.to_string(),
    );
    let exec = |script: &str| {
        support::warden_in(h)
            .args(["exec", "--cwd"])
            .arg(work.path())
            .args(["--shell", script])
            .env("HOME", work.path())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap()
    };
    // Everyday use, `~` inside a word included (bash does not expand it there).
    for plain in [
        "git log --oneline HEAD~1..HEAD",
        "git diff HEAD~1",
        "git log -1 --format=%s",
        "git log -p --output=log.txt",
        "git config --get core.bare",
    ] {
        let out = exec(plain);
        support::assert_success(&out);
    }
    assert!(work.path().join("log.txt").exists());
    // A write outside the run's working directory: refused, naming the word and why.
    let outside = elsewhere.path().join("x");
    let out = exec(&format!("git log --output={}", outside.display()));
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("git --output: writes to")
            && stderr.contains("outside the run's writable paths"),
        "{stderr}"
    );
    assert!(!outside.exists());
    // Anything inside a Git directory, even inside the working directory: refused (a
    // directory written into too, which could be its hooks).
    for inside_git in [
        "git log --output=.git/config",
        "git format-patch -o .git/hooks HEAD~1",
    ] {
        let out = exec(inside_git);
        assert_eq!(out.status.code(), Some(77), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("inside the Git directory"), "{stderr}");
    }
    assert!(!work.path().join(".git/hooks/0001-2.patch").exists());
    // A write form of git config: refused.
    let out = exec("git config core.pager cat");
    assert_eq!(out.status.code(), Some(77), "{out:?}");
    // An editor reading commands from a pipe the command line controls: refused.
    if std::path::Path::new("/usr/bin/vim").exists() {
        let out = exec("sed -n 1p .git/HEAD | vim -es");
        assert_eq!(out.status.code(), Some(77), "{out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("reads commands from its standard input"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        eprintln!("SKIPPED: vim is not installed; the pipe into an editor was not tried");
    }
}

#[test]
fn a_relative_cwd_starts_where_the_user_is() {
    let (_h, mut warden) = w();
    let here = tempfile::tempdir().unwrap();
    let here = std::fs::canonicalize(here.path()).unwrap();
    std::fs::create_dir(here.join("sub")).unwrap();
    let out = warden
        .current_dir(&here)
        .args(["exec", "--cwd", "sub", "--", "pwd"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{}\n", here.join("sub").display()),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `warden exec ARGS` in `home` on a pseudo-terminal (`script`), typing `keys` once the
/// question is shown: everything the terminal showed, and the exit code.
fn exec_at_a_terminal(home: &std::path::Path, args: &str, keys: &str) -> (String, i32) {
    use std::io::{Read, Write};
    let command = format!("{} exec {args}", env!("CARGO_BIN_EXE_warden"));
    let mut child = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("WARDEN_HOME", home)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !String::from_utf8_lossy(&seen).contains("[d]eny? ") {
        let left = deadline.saturating_duration_since(Instant::now());
        let chunk = rx.recv_timeout(left).unwrap_or_else(|_| {
            panic!(
                "no question within 30 s: {}",
                String::from_utf8_lossy(&seen)
            )
        });
        seen.extend(chunk);
    }
    child
        .stdin
        .as_mut()
        .unwrap()
        .write_all(keys.as_bytes())
        .unwrap();
    let status = child.wait().unwrap();
    while let Ok(chunk) = rx.recv_timeout(Duration::from_millis(200)) {
        seen.extend(chunk);
    }
    (
        String::from_utf8_lossy(&seen).into_owned(),
        status.code().unwrap_or(-1),
    )
}

#[test]
fn at_a_terminal_with_no_approver_the_question_is_asked_right_there() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("SKIPPED: util-linux `script` is not installed (it gives warden a terminal)");
        return;
    }
    let home = support::warden_home();
    support::configure(
        home.path(),
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\nask = \"on-miss\"\n",
        r#"{"version":1,"defaults":{"security":"allowlist","ask":"on-miss","askFallback":"deny"}}"#,
    );
    // Allowed once with one key: the prompt shows exactly what runs, and it runs.
    let (shown, code) = exec_at_a_terminal(home.path(), "-- /usr/bin/echo asked-inline", "o");
    assert_eq!(code, 0, "{shown}");
    assert!(shown.contains("asking here instead"), "{shown}");
    assert!(
        shown.contains(r#"argv:     ["/usr/bin/echo", "asked-inline"]"#),
        "{shown}"
    );
    assert!(shown.contains("\nasked-inline"), "{shown}");
    // Denied: nothing runs, and the exit code says the approver denied it.
    let (shown, code) = exec_at_a_terminal(home.path(), "-- /usr/bin/echo never-ran", "d");
    assert_eq!(code, 77, "{shown}");
    assert!(!shown.contains("\nnever-ran"), "{shown}");
    // "Allow always" stores the preselected rule: the next run asks nobody.
    let (shown, code) = exec_at_a_terminal(home.path(), "-- /usr/bin/echo stored", "a");
    assert_eq!(code, 0, "{shown}");
    let out = warden_in(home.path())
        .args(["exec", "--", "/usr/bin/echo", "again"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "again\n");
    // Without a terminal nothing is asked: no approver, so askFallback (deny) decides
    // (75: nobody answered).
    let out = warden_in(home.path())
        .args(["exec", "--", "/usr/bin/id", "-u"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(75));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("asking here"));
}

/// Warden draws its run ids and tokens from the kernel (`getrandom`) and holds no random
/// device open. Linked statically (as `cargo xtask install` builds it), a library that
/// looks the call up with `dlsym` finds nothing and reads /dev/urandom instead, keeping it
/// open for the process's life (.cargo/config.toml says how that is avoided). CI runs
/// this once more with a static `warden`.
#[test]
fn a_serving_warden_holds_no_random_device_open() {
    use std::io::{BufRead, BufReader, Write};
    let home = open_gateway_home();
    let mut server = warden_in(home.path())
        .arg("mcp")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut to_server = server.stdin.take().unwrap();
    let mut from_server = BufReader::new(server.stdout.take().unwrap());
    let mut exchange = |message: serde_json::Value| {
        writeln!(to_server, "{message}").unwrap();
        if message.get("id").is_none() {
            return String::new();
        }
        let mut line = String::new();
        from_server.read_line(&mut line).unwrap();
        line
    };
    exchange(
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "fd-check", "version": "0"}}}),
    );
    exchange(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    // An exec draws a run id.
    let answer = exchange(
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "exec", "arguments": {"command": "/bin/true"}}}),
    );
    assert!(answer.contains("run-"), "{answer}");
    let open: Vec<String> = std::fs::read_dir(format!("/proc/{}/fd", server.id()))
        .unwrap()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .map(|target| target.display().to_string())
        .collect();
    drop(to_server);
    server.wait().unwrap();
    assert!(
        !open
            .iter()
            .any(|t| t == "/dev/urandom" || t == "/dev/random"),
        "{open:?}"
    );
}
