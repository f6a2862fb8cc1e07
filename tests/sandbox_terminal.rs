//! Runs on a terminal inside the sandbox (both builders: `cargo xtask ci` runs this file's
//! parent again with bubblewrap): the terminal Warden made for the run is the command's
//! three descriptors and its controlling terminal, taken inside the sandbox's own
//! session; Ctrl-C and a resize reach the foreground program; a signal for the run
//! reaches the command without ending the sandbox around it; and the terminal-injection
//! ioctls stay refused on the run's own terminal.

use super::*;
use caps::{InputSender, LiveOutput, Script, Stdin, TerminalSize, input_channel};

/// Options for a run driven through the returned sender (on a terminal of `size`, if
/// given), its output watched through the returned live copy.
fn driven(lab: &Lab, size: Option<TerminalSize>) -> (ExecOptions, InputSender, LiveOutput) {
    let (sender, stream) = input_channel();
    let live = LiveOutput::new(64 * 1024);
    let mut o = lab.options(&[]);
    o.stdin = Stdin::Stream(stream);
    o.terminal = size;
    o.live = Some(live.clone());
    (o, sender, live)
}

/// Wait until the run's output so far contains `needle`.
async fn wait_for(live: &LiveOutput, needle: &str) {
    caps::testkit::wait_for_output(live, needle, Duration::from_secs(20))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test]
async fn a_sandboxed_run_on_a_terminal_has_it_as_its_controlling_terminal() {
    if !bwrap_usable() {
        eprintln!("SKIP: bubblewrap / user namespaces unavailable here");
        return;
    }
    let lab = lab();
    for profile in [Profile::ReadOnly, Profile::Writable] {
        let (o, _sender, _live) = driven(
            &lab,
            Some(TerminalSize {
                rows: 33,
                cols: 101,
            }),
        );
        let script = "test -t 0 && test -t 1 && test -t 2 && echo all-three; \
                      stty size; exec 3</dev/tty && echo controlling";
        let out = lab
            .sandbox(false)
            .shell(profile)
            .run(&Script::sh(script), &o)
            .await
            .unwrap();
        assert!(out.status.success(), "{profile:?}: {out:?}");
        for want in ["all-three\r\n", "33 101", "controlling"] {
            assert!(
                out.stdout.contains(want),
                "{profile:?}: {want:?} in {:?}",
                out.stdout
            );
        }
    }
}

#[tokio::test]
async fn ctrl_c_and_a_resize_reach_the_sandboxed_foreground_program() {
    if !bwrap_usable() {
        eprintln!("SKIP: bubblewrap / user namespaces unavailable here");
        return;
    }
    let lab = lab();
    let (o, sender, live) = driven(&lab, Some(TerminalSize::DEFAULT));
    let script = Script::sh(
        "trap 'stty size' WINCH; trap 'echo interrupted; exit 7' INT; echo ready; \
         while :; do sleep 0.05; done",
    );
    let shell = lab.sandbox(false).shell(Profile::ReadOnly);
    let run = shell.run(&script, &o);
    let drive = async {
        wait_for(&live, "ready").await;
        sender
            .resize(TerminalSize {
                rows: 50,
                cols: 132,
            })
            .unwrap();
        wait_for(&live, "50 132").await;
        sender.write(vec![0x03]).unwrap();
    };
    let (out, ()) = tokio::join!(run, drive);
    let out = out.unwrap();
    assert_eq!(out.status, caps::ExitStatus::Code(7), "{out:?}");
    assert!(out.stdout.contains("interrupted"), "{:?}", out.stdout);
}

#[tokio::test]
async fn a_signal_reaches_the_sandboxed_command_and_not_the_sandbox() {
    if !bwrap_usable() {
        eprintln!("SKIP: bubblewrap / user namespaces unavailable here");
        return;
    }
    // A signal reaches what runs inside the sandbox through the run's cgroup, which lists
    // it; without one the run takes no signals (documented).
    let containment =
        caps::process::Containment::detect(Some(PathBuf::from(env!("CARGO_BIN_EXE_warden"))));
    if !matches!(
        containment.mechanism(),
        caps::process::Mechanism::Cgroup { .. }
    ) {
        eprintln!(
            "SKIP: no cgroup for each run here ({:?})",
            containment.mechanism()
        );
        return;
    }
    let lab = lab();
    let sandbox = lab.sandbox_held_by(false, containment.clone());
    // Plain and watched (approval mode's read-only first run, whose observer waits
    // around the command under bubblewrap), on a pipe and on a terminal.
    let shells = [
        ("writable", sandbox.shell(Profile::Writable)),
        ("watched", sandbox.watched_shell()),
    ];
    for ((profile, shell), size) in shells
        .iter()
        .flat_map(|s| [(s, None), (s, Some(TerminalSize::DEFAULT))])
    {
        let (o, sender, live) = driven(&lab, size);
        // The command handles the signal and goes on: had the sandbox around it been
        // signalled, it would have ended with it.
        let script = Script::sh(
            "trap 'echo got-usr1' USR1; echo ready; \
             while :; do sleep 0.05; if [ -e stop ]; then echo stopping; exit 4; fi; done",
        );
        let run = shell.run(&script, &o);
        let drive = async {
            wait_for(&live, "ready").await;
            sender.signal(10 /* SIGUSR1 */).unwrap();
            wait_for(&live, "got-usr1").await;
            std::fs::write(lab.ws().join("stop"), "").unwrap();
        };
        let (out, ()) = tokio::join!(run, drive);
        let out = out.unwrap();
        std::fs::remove_file(lab.ws().join("stop")).unwrap();
        assert_eq!(
            out.status,
            caps::ExitStatus::Code(4),
            "{profile} {size:?}: {out:?}"
        );
        assert!(
            out.stdout.contains("stopping"),
            "{profile} {size:?}: {:?}",
            out.stdout
        );
    }
}

#[tokio::test]
async fn terminal_injection_stays_refused_on_the_runs_own_terminal() {
    if !bwrap_usable() {
        eprintln!("SKIP: bubblewrap / user namespaces unavailable here");
        return;
    }
    if Command::new("python3").arg("-c").arg("1").output().is_err() {
        eprintln!("SKIP: python3 is not installed (it issues the ioctls)");
        return;
    }
    let lab = lab();
    let (o, _sender, _live) = driven(&lab, Some(TerminalSize::DEFAULT));
    // TIOCSTI pushes input into a terminal, TIOCLINUX reads the console: both refused
    // (EPERM) by the sandbox's seccomp program, terminal or not.
    let script = Script::sh(
        "python3 -c '\nimport fcntl, os\nfor name, request, arg in ((\"TIOCSTI\", 0x5412, b\"x\"), (\"TIOCLINUX\", 0x541C, bytes([2]))):\n    try:\n        fcntl.ioctl(0, request, arg)\n        print(name, \"allowed\")\n    except OSError as e:\n        print(name, os.strerror(e.errno))\n'",
    );
    let out = lab
        .sandbox(false)
        .shell(Profile::Writable)
        .run(&script, &o)
        .await
        .unwrap();
    assert!(
        out.stdout.contains("TIOCSTI Operation not permitted"),
        "{:?}",
        out.stdout
    );
    assert!(
        out.stdout.contains("TIOCLINUX Operation not permitted"),
        "{:?}",
        out.stdout
    );
    assert!(!out.stdout.contains("allowed"), "{:?}", out.stdout);
}
