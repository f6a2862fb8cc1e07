//! Runs on a terminal Warden makes for them (`ExecOptions::terminal`), for the local and
//! bounded providers: the command's three descriptors are the terminal and it is the
//! command's controlling terminal; input is typed on it (echoed, Ctrl-C interrupts the
//! foreground program, "close" is Ctrl-D); a resize reaches the program; signals reach
//! the run with or without a terminal.
// Tests set up and inspect real processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use caps::{
    BoundedFs, BoundedShell, ExecOptions, ExitStatus, InputSender, LiveOutput, LocalShell, Script,
    Shell, Stdin, TerminalSize, input_channel,
};

struct World {
    shell: Box<dyn Shell>,
    cwd: PathBuf,
    _tmp: tempfile::TempDir,
}

fn local() -> World {
    let tmp = tempfile::tempdir().unwrap();
    World {
        shell: Box::new(LocalShell::new()),
        cwd: tmp.path().to_path_buf(),
        _tmp: tmp,
    }
}

fn bounded() -> World {
    let tmp = tempfile::tempdir().unwrap();
    let fs = BoundedFs::open(tmp.path()).unwrap();
    World {
        shell: Box::new(BoundedShell::for_fs(&fs).unwrap()),
        cwd: PathBuf::new(),
        _tmp: tmp,
    }
}

/// Options for a run on a terminal of `size`, driven through the returned sender, its
/// output watched through the returned live copy.
fn on_terminal(w: &World, size: TerminalSize) -> (ExecOptions, InputSender, LiveOutput) {
    let (sender, stream) = input_channel();
    let live = LiveOutput::new(64 * 1024);
    let mut o = ExecOptions::new(w.cwd.clone(), Duration::from_secs(30))
        .with_env("PATH", "/usr/local/bin:/usr/bin:/bin");
    o.stdin = Stdin::Stream(stream);
    o.terminal = Some(size);
    o.live = Some(live.clone());
    (o, sender, live)
}

/// Wait until the run's output so far contains `needle`.
async fn wait_for(live: &LiveOutput, needle: &str) {
    caps::testkit::wait_for_output(live, needle, Duration::from_secs(10))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

async fn the_terminal_is_all_three_descriptors_and_the_controlling_terminal(w: World) {
    let (o, _sender, _live) = on_terminal(
        &w,
        TerminalSize {
            rows: 30,
            cols: 100,
        },
    );
    let script = "test -t 0 && test -t 1 && test -t 2 && echo all-three; \
                  stty size; exec 3</dev/tty && echo controlling; tty";
    let out = w.shell.run(&Script::sh(script), &o).await.unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(out.stdout.contains("all-three"), "{:?}", out.stdout);
    assert!(out.stdout.contains("30 100"), "{:?}", out.stdout);
    assert!(out.stdout.contains("controlling"), "{:?}", out.stdout);
    assert!(out.stdout.contains("/dev/pts/"), "{:?}", out.stdout);
    // The terminal's line endings: one stream, nothing on stderr.
    assert!(out.stdout.contains("all-three\r\n"), "{:?}", out.stdout);
    assert_eq!(out.stderr, "");
}

async fn typed_input_is_echoed_and_read_and_close_is_end_of_file(w: World) {
    let (o, sender, live) = on_terminal(&w, TerminalSize::DEFAULT);
    let script = "echo ready; read line; echo \"got:$line\"; cat; echo after-eof";
    let script = Script::sh(script);
    let run = w.shell.run(&script, &o);
    let drive = async {
        wait_for(&live, "ready").await;
        sender.write(b"hello\r".to_vec()).unwrap();
        wait_for(&live, "got:hello").await;
        sender.close().unwrap();
    };
    let (out, ()) = tokio::join!(run, drive);
    let out = out.unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(out.stdout.contains("hello\r\n"), "echoed: {:?}", out.stdout);
    assert!(out.stdout.contains("after-eof"), "{:?}", out.stdout);
}

async fn ctrl_c_interrupts_the_foreground_program(w: World) {
    let (o, sender, live) = on_terminal(&w, TerminalSize::DEFAULT);
    let script = "trap 'echo interrupted; exit 7' INT; echo ready; while :; do sleep 0.05; done";
    let script = Script::sh(script);
    let run = w.shell.run(&script, &o);
    let drive = async {
        wait_for(&live, "ready").await;
        sender.write(vec![0x03]).unwrap();
    };
    let (out, ()) = tokio::join!(run, drive);
    let out = out.unwrap();
    assert_eq!(out.status, ExitStatus::Code(7), "{out:?}");
    assert!(out.stdout.contains("interrupted"), "{:?}", out.stdout);
    assert!(!out.timed_out);
}

async fn a_resize_reaches_the_program(w: World) {
    let (o, sender, live) = on_terminal(&w, TerminalSize::DEFAULT);
    let script = "trap 'stty size; exit 0' WINCH; echo ready; while :; do sleep 0.05; done";
    let script = Script::sh(script);
    let run = w.shell.run(&script, &o);
    let drive = async {
        wait_for(&live, "ready").await;
        sender
            .resize(TerminalSize {
                rows: 40,
                cols: 120,
            })
            .unwrap();
    };
    let (out, ()) = tokio::join!(run, drive);
    let out = out.unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(out.stdout.contains("40 120"), "{:?}", out.stdout);
}

async fn a_signal_reaches_a_run_without_a_terminal(w: World) {
    let (sender, stream) = input_channel();
    let live = LiveOutput::new(64 * 1024);
    let mut o = ExecOptions::new(w.cwd.clone(), Duration::from_secs(30))
        .with_env("PATH", "/usr/local/bin:/usr/bin:/bin");
    o.stdin = Stdin::Stream(stream);
    o.live = Some(live.clone());
    let script = "trap 'echo got-usr1; exit 3' USR1; echo ready; while :; do sleep 0.05; done";
    let script = Script::sh(script);
    let run = w.shell.run(&script, &o);
    let drive = async {
        wait_for(&live, "ready").await;
        sender.signal(10 /* SIGUSR1 */).unwrap();
    };
    let (out, ()) = tokio::join!(run, drive);
    let out = out.unwrap();
    assert_eq!(out.status, ExitStatus::Code(3), "{out:?}");
    assert!(out.stdout.contains("got-usr1"), "{:?}", out.stdout);
}

macro_rules! contract {
    ($($test:ident),* $(,)?) => {
        mod local_provider { use super::*; $(#[tokio::test] async fn $test() { super::$test(local()).await })* }
        mod bounded_provider { use super::*; $(#[tokio::test] async fn $test() { super::$test(bounded()).await })* }
    };
}

contract!(
    the_terminal_is_all_three_descriptors_and_the_controlling_terminal,
    typed_input_is_echoed_and_read_and_close_is_end_of_file,
    ctrl_c_interrupts_the_foreground_program,
    a_resize_reaches_the_program,
    a_signal_reaches_a_run_without_a_terminal,
);
