//! One contract for the process-running providers (local and bounded): exit status,
//! output capture and limits, explicit environment, stdin, timeouts that kill the whole
//! tree, no leaked descriptors, no zombies. The memory world's refusal is checked too.
// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use caps::{
    BoundedFs, BoundedShell, CapsError, ExecOptions, ExitStatus, LocalShell, NoProcesses,
    RecordedCall, Script, ScriptedShell, Shell, Stdin, TRUNCATION_MARKER,
};

/// A shell plus the cwd (in its world) and the real directory behind it.
struct World {
    shell: Box<dyn Shell>,
    cwd: PathBuf,
    real_dir: PathBuf,
    _tmp: tempfile::TempDir,
}

fn local() -> World {
    let tmp = tempfile::tempdir().unwrap();
    World {
        shell: Box::new(LocalShell::new()),
        cwd: tmp.path().to_path_buf(),
        real_dir: tmp.path().to_path_buf(),
        _tmp: tmp,
    }
}

fn bounded() -> World {
    let tmp = tempfile::tempdir().unwrap();
    let fs = BoundedFs::open(tmp.path()).unwrap();
    World {
        shell: Box::new(BoundedShell::for_fs(&fs).unwrap()),
        cwd: PathBuf::new(),
        real_dir: tmp.path().to_path_buf(),
        _tmp: tmp,
    }
}

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

fn opts(w: &World) -> ExecOptions {
    ExecOptions::new(w.cwd.clone(), Duration::from_secs(30)).with_env("PATH", PATH)
}

fn argv(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

async fn sh(w: &World, script: &str, o: &ExecOptions) -> caps::ExecOutput {
    w.shell.run(&Script::sh(script), o).await.unwrap()
}

fn process_alive(pid: i32) -> bool {
    // A zombie still has a /proc entry; only count processes that are really running.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat[stat.rfind(')').unwrap() + 2..].chars().next().unwrap();
            state != 'Z' && state != 'X'
        }
        Err(_) => false,
    }
}

fn read_pid(path: &Path) -> i32 {
    for _ in 0..100 {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("pid file {} never written", path.display());
}

fn wait_gone(pid: i32) -> bool {
    for _ in 0..250 {
        if !process_alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

async fn exit_codes_and_signals_pass_through(w: World) {
    let o = opts(&w);
    assert_eq!(sh(&w, "exit 0", &o).await.status, ExitStatus::Code(0));
    assert_eq!(sh(&w, "exit 42", &o).await.status, ExitStatus::Code(42));
    let killed = sh(&w, "kill -TERM $$", &o).await;
    assert_eq!(killed.status, ExitStatus::Signal(15));
    assert_eq!(killed.status.shell_code(), 143);
}

async fn stdout_and_stderr_are_separate_and_combined_in_order(w: World) {
    let out = sh(&w, "echo out1; echo err1 >&2; echo out2", &opts(&w)).await;
    assert_eq!(out.stdout, "out1\nout2\n");
    assert_eq!(out.stderr, "err1\n");
    // Two pipes have no shared clock, so only each stream's own order is guaranteed.
    let mut lines: Vec<&str> = out.combined.lines().collect();
    assert!(out.combined.find("out1") < out.combined.find("out2"));
    lines.sort();
    assert_eq!(lines, vec!["err1", "out1", "out2"]);
    assert!(!out.truncated && !out.timed_out);
    assert_eq!(out.tail, out.combined);
}

async fn exec_never_involves_a_shell(w: World) {
    let hostile = "$(touch pwned); `touch pwned2`; echo hi > pwned3";
    let out = w
        .shell
        .exec(&argv(&["/bin/echo", hostile]), &opts(&w))
        .await
        .unwrap();
    assert_eq!(out.stdout, format!("{hostile}\n"));
    for f in ["pwned", "pwned2", "pwned3"] {
        assert!(
            !w.real_dir.join(f).exists(),
            "{f} was created: argv went through a shell"
        );
    }
}

async fn environment_is_exactly_what_was_given(w: World) {
    let o = opts(&w).with_env("WARDEN_TEST", "1");
    let out = w.shell.exec(&argv(&["/usr/bin/env"]), &o).await.unwrap();
    let mut lines: Vec<&str> = out.stdout.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        vec![format!("PATH={PATH}").as_str(), "WARDEN_TEST=1"]
    );
}

async fn stdin_is_dev_null_unless_given(w: World) {
    let o = opts(&w);
    let out = w.shell.exec(&argv(&["/bin/cat"]), &o).await.unwrap();
    assert_eq!(out.stdout, "");
    assert!(out.status.success());
    let link = sh(&w, "readlink /proc/self/fd/0", &o).await;
    assert_eq!(link.stdout.trim(), "/dev/null");
    let mut o = opts(&w);
    o.stdin = Stdin::Bytes(b"piped input".to_vec());
    let out = w.shell.exec(&argv(&["/bin/cat"]), &o).await.unwrap();
    assert_eq!(out.stdout, "piped input");
}

async fn arg0_can_differ_from_the_path_executed(w: World) {
    let mut o = opts(&w);
    o.arg0 = Some("kitty".into());
    let out = w
        .shell
        .exec(&argv(&["/bin/cat", "/proc/self/cmdline"]), &o)
        .await
        .unwrap();
    assert_eq!(out.stdout, "kitty\0/proc/self/cmdline\0");
}

async fn cwd_is_respected(w: World) {
    std::fs::create_dir(w.real_dir.join("sub")).unwrap();
    let mut o = opts(&w);
    o.cwd = w.cwd.join("sub");
    let out = w.shell.exec(&argv(&["/bin/pwd"]), &o).await.unwrap();
    let expected = std::fs::canonicalize(w.real_dir.join("sub")).unwrap();
    assert_eq!(Path::new(out.stdout.trim()), expected);
}

async fn each_run_gets_its_own_session_and_group(w: World) {
    let out = sh(&w, "cat /proc/$$/stat; echo $$", &opts(&w)).await;
    let mut lines = out.stdout.lines();
    let stat = lines.next().unwrap();
    let pid: i32 = lines.next().unwrap().parse().unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    assert_eq!(fields[2].parse::<i32>().unwrap(), pid, "process group");
    assert_eq!(fields[3].parse::<i32>().unwrap(), pid, "session");
}

async fn no_descriptors_leak_into_the_child(w: World) {
    // Hold an extra descriptor open in this process: the child must not see it.
    let _held = std::fs::File::open("/proc/self/status").unwrap();
    let out = w
        .shell
        .exec(&argv(&["/bin/ls", "/proc/self/fd"]), &opts(&w))
        .await
        .unwrap();
    let fds: Vec<&str> = out.stdout.split_whitespace().collect();
    // 0, 1, 2 and the descriptor `ls` itself opened to read the directory.
    assert_eq!(fds, vec!["0", "1", "2", "3"], "{}", out.stdout);
}

async fn output_is_capped_keeping_the_head_and_a_tail(w: World) {
    let out = sh(
        &w,
        "yes abcdefghi | head -c 1000000; printf END; printf 'the error' >&2",
        &opts(&w),
    )
    .await;
    assert!(out.truncated);
    let cap = caps::DEFAULT_MAX_OUTPUT_BYTES as u64;
    // stderr whole, stdout the rest of the cap: its beginning and its end.
    assert_eq!(out.stderr, "the error");
    assert_eq!(out.stdout_size.written, 1_000_003);
    assert_eq!(out.stdout_size.kept(), cap - 9);
    let marker = caps::dropped_marker(
        out.stdout_size.kept_first,
        out.stdout_size.kept_last,
        1_000_003,
    );
    let (head, end) = out.stdout.split_once(&marker).unwrap();
    assert!(head.starts_with("abcdefghi\nabcdefghi\n"));
    assert!(end.ends_with("abcdefghi\nEND"), "stdout keeps its end");
    assert_eq!(
        head.len() as u64 + end.len() as u64,
        cap - 9 + 2,
        "two newlines"
    );
    assert!(out.combined.contains(caps::DROPPED_MARKER_PREFIX));
    assert!(out.combined.ends_with("ENDthe error"));
    assert!(
        out.tail.ends_with("ENDthe error"),
        "tail keeps the end of the stream"
    );
    assert!(out.tail.starts_with(TRUNCATION_MARKER));
    assert!(out.tail.len() <= caps::DEFAULT_TAIL_BYTES + TRUNCATION_MARKER.len() + 1);
}

async fn timeout_kills_the_whole_tree_promptly(w: World) {
    let pidfile = w.real_dir.join("grandchild.pid");
    let mut o = opts(&w);
    o.timeout = Duration::from_millis(500);
    let script = format!(
        "trap '' TERM; (trap '' TERM; sleep 300) & echo $! > {}; sleep 300",
        pidfile.display()
    );
    let started = Instant::now();
    let out = sh(&w, &script, &o).await;
    let elapsed = started.elapsed();
    assert!(out.timed_out);
    assert_eq!(
        out.status,
        ExitStatus::Signal(9),
        "TERM was ignored, so KILL ended it"
    );
    assert!(
        elapsed < Duration::from_secs(20),
        "timeout took {elapsed:?}"
    );
    let grandchild = read_pid(&pidfile);
    assert!(
        wait_gone(grandchild),
        "grandchild {grandchild} survived the timeout"
    );
}

async fn background_leftovers_are_killed_when_the_command_exits(w: World) {
    let pidfile = w.real_dir.join("bg.pid");
    let script = format!("sleep 300 & echo $! > {}; echo done", pidfile.display());
    let started = Instant::now();
    let out = sh(&w, &script, &opts(&w)).await;
    assert_eq!(out.stdout, "done\n");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "waited for the background job"
    );
    assert!(
        wait_gone(read_pid(&pidfile)),
        "background job outlived the run"
    );
}

async fn a_descendant_that_escapes_the_session_cannot_hold_the_call(w: World) {
    // `setsid` leaves our session and group, keeps the pipes open, and sleeps.
    let pidfile = w.real_dir.join("escapee.pid");
    let script = format!(
        "setsid sh -c 'echo $$ > {}; exec sleep 300' & sleep 0.2; echo hi",
        pidfile.display()
    );
    let started = Instant::now();
    let out = sh(&w, &script, &opts(&w)).await;
    assert_eq!(out.stdout, "hi\n");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "held by an escaped descendant"
    );
    // Clean up the escapee (documented limitation: only a pid namespace reaches it).
    let pid = read_pid(&pidfile);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
}

async fn dropping_the_future_kills_the_tree(w: World) {
    let pidfile = w.real_dir.join("cancel.pid");
    let script = format!("echo $$ > {}; sleep 300", pidfile.display());
    let o = opts(&w);
    let script = Script::sh(script);
    let run = w.shell.run(&script, &o);
    let _ = tokio::time::timeout(Duration::from_millis(500), run).await;
    let pid = read_pid(&pidfile);
    assert!(wait_gone(pid), "cancelled run {pid} kept running");
}

async fn children_are_reaped(w: World) {
    let out = sh(&w, "echo $$", &opts(&w)).await;
    let pid: i32 = out.stdout.trim().parse().unwrap();
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "child {pid} left a zombie"
    );
}

async fn missing_and_non_executable_programs_are_typed(w: World) {
    let o = opts(&w);
    let err = w
        .shell
        .exec(&argv(&["definitely-not-a-program-xyz"]), &o)
        .await
        .unwrap_err();
    assert!(matches!(err, CapsError::ProgramNotFound { .. }), "{err:?}");
    let err = w
        .shell
        .exec(&argv(&["/nonexistent/prog"]), &o)
        .await
        .unwrap_err();
    assert!(matches!(err, CapsError::ProgramNotFound { .. }), "{err:?}");
    std::fs::write(w.real_dir.join("plain.txt"), "not a program").unwrap();
    let err = w.shell.exec(&argv(&["./plain.txt"]), &o).await.unwrap_err();
    assert!(matches!(err, CapsError::NotExecutable { .. }), "{err:?}");
    let err = w.shell.exec(&argv(&["/tmp"]), &o).await.unwrap_err();
    assert!(matches!(err, CapsError::NotExecutable { .. }), "{err:?}");
}

async fn malformed_requests_are_refused(w: World) {
    let o = opts(&w);
    for bad in [vec![], argv(&[""]), argv(&["/bin/echo", "a\0b"])] {
        let err = w.shell.exec(&bad, &o).await.unwrap_err();
        assert!(
            matches!(err, CapsError::InvalidInput { .. }),
            "{bad:?}: {err:?}"
        );
    }
    let mut zero = opts(&w);
    zero.timeout = Duration::ZERO;
    assert!(matches!(
        w.shell
            .exec(&argv(&["/bin/true"]), &zero)
            .await
            .unwrap_err(),
        CapsError::InvalidInput { .. }
    ));
    let bad_env = opts(&w).with_env("A=B", "x");
    assert!(matches!(
        w.shell
            .exec(&argv(&["/bin/true"]), &bad_env)
            .await
            .unwrap_err(),
        CapsError::InvalidInput { .. }
    ));
    let relative_shell = Script {
        shell: "sh".into(),
        source: "true".into(),
    };
    assert!(matches!(
        w.shell.run(&relative_shell, &o).await.unwrap_err(),
        CapsError::InvalidInput { .. }
    ));
}

macro_rules! contract {
    ($($test:ident),* $(,)?) => {
        mod local_provider { use super::*; $(#[tokio::test] async fn $test() { super::$test(local()).await })* }
        mod bounded_provider { use super::*; $(#[tokio::test] async fn $test() { super::$test(bounded()).await })* }
    };
}

contract!(
    exit_codes_and_signals_pass_through,
    stdout_and_stderr_are_separate_and_combined_in_order,
    exec_never_involves_a_shell,
    environment_is_exactly_what_was_given,
    stdin_is_dev_null_unless_given,
    cwd_is_respected,
    arg0_can_differ_from_the_path_executed,
    each_run_gets_its_own_session_and_group,
    no_descriptors_leak_into_the_child,
    output_is_capped_keeping_the_head_and_a_tail,
    timeout_kills_the_whole_tree_promptly,
    background_leftovers_are_killed_when_the_command_exits,
    a_descendant_that_escapes_the_session_cannot_hold_the_call,
    dropping_the_future_kills_the_tree,
    children_are_reaped,
    missing_and_non_executable_programs_are_typed,
    malformed_requests_are_refused,
);

#[tokio::test]
async fn the_memory_world_has_no_processes_and_says_so() {
    let o = ExecOptions::new("/", Duration::from_secs(1));
    let err = NoProcesses
        .exec(&argv(&["/bin/true"]), &o)
        .await
        .unwrap_err();
    assert!(matches!(err, CapsError::Unsupported { .. }), "{err:?}");
    let err = NoProcesses.run(&Script::sh("true"), &o).await.unwrap_err();
    assert!(matches!(err, CapsError::Unsupported { .. }), "{err:?}");
}

#[tokio::test]
async fn scripted_shell_records_calls_and_refuses_unscripted_ones() {
    let shell = ScriptedShell::new();
    let o = ExecOptions::new("/w", Duration::from_secs(1));
    assert!(matches!(
        shell.exec(&argv(&["ls"]), &o).await.unwrap_err(),
        CapsError::Unsupported { .. }
    ));
    shell.respond_with(|call| {
        let mut c = caps::OutputCollector::new(Default::default());
        if let RecordedCall::Exec { argv, .. } = call {
            c.push(caps::Stream::Stdout, argv.join(" ").as_bytes());
        }
        Ok(c.finish(ExitStatus::Code(3), false, Duration::ZERO))
    });
    let out = shell.exec(&argv(&["echo", "x"]), &o).await.unwrap();
    assert_eq!(
        (out.status, out.stdout.as_str()),
        (ExitStatus::Code(3), "echo x")
    );
    shell.run(&Script::sh("true"), &o).await.unwrap();
    let calls = shell.calls();
    assert_eq!(calls.len(), 3);
    assert!(matches!(&calls[2], RecordedCall::Run { script, .. } if script.source == "true"));
}
