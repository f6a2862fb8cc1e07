//! The container backend against a real engine (Podman): exit status, output, the exact
//! environment, working directory, stdin, the output cap, argv passed literally, and the
//! process tree inside the container dying on timeout, on cancellation and when the
//! command exits. The container keeping the sandbox's promises (the workspace at its own
//! path, nothing hidden or unauthorized mounted, no network) and the read-only view
//! (every write refused by the kernel, the view locked, the container's other processes
//! out of reach; refused where it cannot be made). Also every way construction fails
//! closed.
//!
//! Each test gets its own image, container and workspace (`support/podman.rs`). Without
//! Podman the real tests print `SKIPPED: ...` and return; the fail-closed tests that need
//! no engine always run.

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Skipped tests say so, loudly.
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "support/podman.rs"]
mod podman;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use caps::{
    CapsError, ExecOptions, ExitStatus, RefusedWrites, Script, Shell, Stdin, TRUNCATION_MARKER,
};
use podman::{
    Applets, Fixture, Setup, Workspace, podman, podman_or_skip, run_podman, shout, trusted_dirs,
    unique_name,
};
use sandbox::container::{Container, ContainerConfig, ContainerShell, probe_engine};
use sandbox::{Profile, SandboxPolicy, Unavailable};

/// What a test's commands are authorized for: the fixture's workspace, writable.
fn policy(fx: &Fixture) -> SandboxPolicy {
    SandboxPolicy {
        writable_paths: vec![fx.workspace.clone()],
        ..Default::default()
    }
}

fn container(fx: &Fixture) -> Container {
    Container::connect(fx.config(), &policy(fx)).expect("the container backend is available")
}

/// The writable shell of the fixture's container.
fn shell(fx: &Fixture) -> ContainerShell {
    container(fx).shell(Profile::Writable)
}

/// The read-only shell of a container that can make the read-only view.
fn read_only_shell(fx: &Fixture) -> ContainerShell {
    let container = container(fx);
    assert_eq!(
        container.read_only().map_err(|e| e.to_string()),
        Ok(()),
        "the read-only view works here"
    );
    container.shell(Profile::ReadOnly)
}

/// Run in the workspace with `PATH=/bin`.
fn opts(fx: &Fixture) -> ExecOptions {
    ExecOptions::new(&fx.workspace, Duration::from_secs(20)).with_env("PATH", "/bin")
}

fn argv(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn unavailable_for(config: ContainerConfig, policy: &SandboxPolicy) -> String {
    match Container::connect(config, policy) {
        Ok(container) => panic!("expected the backend to be unavailable, got {container:?}"),
        Err(Unavailable(why)) => why,
    }
}

fn unavailable(config: ContainerConfig) -> String {
    unavailable_for(config, &SandboxPolicy::default())
}

// ---------------------------------------------------------------- fail closed (always)

#[test]
fn engine_missing_from_the_trusted_dirs_is_unavailable() {
    let empty = tempfile::tempdir().unwrap();
    let config = ContainerConfig {
        engine: "podman".into(),
        container: "anything".into(),
        engine_dirs: vec![empty.path().to_path_buf()],
    };
    let why = unavailable(config.clone());
    assert!(why.contains("podman"), "{why}");
    assert!(why.contains("not found"), "{why}");
    assert!(why.contains(&empty.path().display().to_string()), "{why}");
    assert!(why.contains("apt-get install podman"), "{why}");
    assert_eq!(probe_engine(&config).unwrap_err().0, why);
    // Docker's diagnosis names Debian's package for it.
    let why = unavailable(ContainerConfig {
        engine: "docker".into(),
        ..config
    });
    assert!(why.contains("docker") && why.contains("docker.io"), "{why}");
}

#[test]
fn untrusted_engine_binaries_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("podman");
    std::fs::write(&fake, "#!/bin/sh\necho should never run\n").unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o777)).unwrap();
    let config = ContainerConfig {
        engine: "podman".into(),
        container: "anything".into(),
        engine_dirs: vec![dir.path().to_path_buf()],
    };
    let why = unavailable(config.clone());
    assert!(why.contains("not trustworthy"), "{why}");
    assert!(why.contains(&fake.display().to_string()), "{why}");
    // Not executable is refused too (as root the owner check passes; as a user it is the
    // owner check that refuses).
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o644)).unwrap();
    let why = unavailable(config.clone());
    assert!(why.contains("not trustworthy"), "{why}");
    // A relative directory is never searched.
    let why = unavailable(ContainerConfig {
        engine_dirs: vec![PathBuf::from("usr/bin")],
        ..config
    });
    assert!(why.contains("not absolute"), "{why}");
}

#[test]
fn only_known_engines_and_well_formed_container_names_are_accepted() {
    let base = ContainerConfig {
        engine: "podman".into(),
        container: "box".into(),
        engine_dirs: trusted_dirs(),
    };
    for engine in ["sh", "../podman", "/usr/bin/podman", ""] {
        let why = unavailable(ContainerConfig {
            engine: engine.into(),
            ..base.clone()
        });
        assert!(
            why.contains("unsupported container engine"),
            "{engine}: {why}"
        );
    }
    for container in ["--privileged", "-it", "a b", "a;b", "a/b"] {
        let why = unavailable(ContainerConfig {
            container: container.into(),
            ..base.clone()
        });
        assert!(
            why.contains("invalid container name"),
            "{container:?}: {why}"
        );
    }
    // Nothing configured: say which setting is missing.
    let why = unavailable(ContainerConfig {
        container: String::new(),
        ..base
    });
    assert!(why.contains("sandbox.container.name"), "{why}");
}

#[test]
fn a_missing_container_is_unavailable() {
    let name = unique_name("missing");
    let why = unavailable(ContainerConfig {
        engine: "podman".into(),
        container: name.clone(),
        engine_dirs: trusted_dirs(),
    });
    if podman().is_some() {
        assert!(why.contains(&name), "{why}");
        assert!(why.contains("does not exist"), "{why}");
    } else {
        shout(
            "NOTE: a_missing_container_is_unavailable: podman is not installed; checking the engine diagnosis instead",
        );
        assert!(why.contains("not found in [/usr/bin, /bin]"), "{why}");
    }
}

// ---------------------------------------------------------------- fail closed (podman)

#[test]
fn a_container_that_is_not_running_is_unavailable() {
    let Some(fx) = Fixture::with(
        "stopped",
        Setup {
            start: false,
            ..Setup::default()
        },
    ) else {
        return;
    };
    let why = unavailable_for(fx.config(), &policy(&fx));
    assert!(why.contains("not running"), "{why}");
    assert!(why.contains(&format!("podman start {}", fx.name)), "{why}");
}

#[test]
fn a_container_without_a_shell_or_env_is_unavailable() {
    let Some(no_sh) = Fixture::with(
        "nosh",
        Setup {
            applets: Applets::Without(&["sh"]),
            ..Setup::default()
        },
    ) else {
        return;
    };
    let why = unavailable_for(no_sh.config(), &policy(&no_sh));
    assert!(why.contains("/bin/sh"), "{why}");
    drop(no_sh);
    let no_env = Fixture::with(
        "noenv",
        Setup {
            applets: Applets::Without(&["env"]),
            ..Setup::default()
        },
    )
    .unwrap();
    let why = unavailable_for(no_env.config(), &policy(&no_env));
    assert!(why.contains("no env program"), "{why}");
}

#[test]
fn probe_engine_reports_the_version() {
    let Some(_) = podman_or_skip() else {
        return;
    };
    let version = probe_engine(&ContainerConfig {
        engine: "podman".into(),
        container: "unused".into(),
        engine_dirs: trusted_dirs(),
    })
    .unwrap();
    assert!(version.starts_with("podman version "), "{version}");
}

// ---------------------------------------------------------------- running commands

#[tokio::test]
async fn exit_status_stdout_and_stderr_pass_through() {
    let Some(fx) = Fixture::start("status") else {
        return;
    };
    let shell = shell(&fx);
    let out = shell
        .exec(
            &argv(&["sh", "-c", "echo out; echo err >&2; exit 42"]),
            &opts(&fx),
        )
        .await
        .unwrap();
    assert_eq!(out.status, ExitStatus::Code(42));
    assert_eq!(out.stdout, "out\n");
    assert_eq!(out.stderr, "err\n");
    assert!(!out.timed_out && !out.truncated);

    let out = shell.run(&Script::sh("exit 7"), &opts(&fx)).await.unwrap();
    assert_eq!(out.status, ExitStatus::Code(7));
    let out = shell.exec(&argv(&["true"]), &opts(&fx)).await.unwrap();
    assert!(out.status.success());
    let out = shell
        .exec(&argv(&["/bin/false"]), &opts(&fx))
        .await
        .unwrap();
    assert_eq!(out.status, ExitStatus::Code(1));
    // Death by signal arrives as the shell convention (the engine reports a code).
    let out = shell
        .exec(&argv(&["sh", "-c", "kill -KILL $$"]), &opts(&fx))
        .await
        .unwrap();
    assert_eq!(out.status.shell_code(), 137);
    // Not found inside the container: `env` says so with 127.
    let out = shell
        .exec(&argv(&["no-such-program"]), &opts(&fx))
        .await
        .unwrap();
    assert_eq!(out.status, ExitStatus::Code(127));
    // No PATH: a bare name is not looked up anywhere (the Shell contract).
    let no_path = ExecOptions::new(&fx.workspace, Duration::from_secs(5));
    let err = shell.exec(&argv(&["true"]), &no_path).await.unwrap_err();
    assert!(
        matches!(err, caps::CapsError::ProgramNotFound { .. }),
        "{err}"
    );
}

#[tokio::test]
async fn the_environment_is_exactly_what_was_given() {
    let Some(fx) = Fixture::start("env") else {
        return;
    };
    let options = opts(&fx)
        .with_env("WARDEN_A", "two words")
        .with_env("WARDEN_B", "a=b;$(echo no)`echo no`'\"")
        .with_env("EMPTY", "");
    let out = shell(&fx).exec(&argv(&["env"]), &options).await.unwrap();
    assert!(out.status.success(), "{out:?}");
    let mut got: Vec<&str> = out.stdout.lines().collect();
    got.sort_unstable();
    assert_eq!(
        got,
        [
            "EMPTY=",
            "PATH=/bin",
            "WARDEN_A=two words",
            "WARDEN_B=a=b;$(echo no)`echo no`'\""
        ],
        "nothing from the engine (HOME, TERM, container...) or a shell (PWD, SHLVL) leaks in"
    );
}

#[tokio::test]
async fn the_working_directory_is_the_host_path_the_container_sees() {
    let Some(fx) = Fixture::start("cwd") else {
        return;
    };
    let shell = shell(&fx);
    let mut options = opts(&fx);
    let sub = fx.workspace.join("sub");
    options.cwd = sub.clone();
    let out = shell.exec(&argv(&["pwd"]), &options).await.unwrap();
    assert_eq!(out.stdout, format!("{}\n", sub.display()));
    let out = shell
        .run(&Script::sh("pwd; ls .."), &options)
        .await
        .unwrap();
    assert_eq!(out.stdout, format!("{}\nsub\n", sub.display()));
    // A directory the container does not see at the host's path is refused before
    // anything runs, naming what it does see — not the runtime's "chdir" error, and not
    // a run in an unrelated directory of the same name (/work/sub is in the image).
    for elsewhere in ["/work/sub", "/does/not/exist", "/"] {
        options.cwd = PathBuf::from(elsewhere);
        let err = shell.exec(&argv(&["pwd"]), &options).await.unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, CapsError::InvalidInput { .. }), "{msg}");
        assert!(
            msg.contains("not visible at the same path") && msg.contains(&fx.name),
            "{msg}"
        );
        assert!(msg.contains(&fx.workspace.display().to_string()), "{msg}");
    }
    // Relative working directories are refused before anything runs.
    options.cwd = PathBuf::from("work");
    assert!(shell.exec(&argv(&["pwd"]), &options).await.is_err());
}

#[tokio::test]
async fn stdin_is_the_given_bytes_or_empty() {
    let Some(fx) = Fixture::start("stdin") else {
        return;
    };
    let shell = shell(&fx);
    let mut options = opts(&fx);
    let input: Vec<u8> = (0..10_000u32)
        .flat_map(|i| format!("line {i}\n").into_bytes())
        .collect();
    options.stdin = Stdin::Bytes(input.clone());
    let out = shell.exec(&argv(&["cat"]), &options).await.unwrap();
    assert!(out.status.success(), "{}", out.stderr);
    assert!(!out.truncated);
    assert_eq!(out.stdout.as_bytes(), &input[..]);
    // The default is /dev/null: `cat` sees end-of-file at once instead of waiting.
    let started = Instant::now();
    let out = shell.exec(&argv(&["cat"]), &opts(&fx)).await.unwrap();
    assert!(out.status.success() && out.stdout.is_empty(), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn output_is_capped_at_the_default_limit() {
    let Some(fx) = Fixture::start("cap") else {
        return;
    };
    let out = shell(&fx)
        .run(
            &Script::sh("yes abcdefghi | head -c 1000000; printf END"),
            &opts(&fx),
        )
        .await
        .unwrap();
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.truncated);
    // stdout keeps its beginning and its end within the cap.
    assert_eq!(out.stdout_size.written, 1_000_003);
    assert_eq!(
        out.stdout_size.kept(),
        caps::DEFAULT_MAX_OUTPUT_BYTES as u64
    );
    assert!(out.stdout.starts_with("abcdefghi\nabcdefghi\n"));
    assert!(out.stdout.contains(caps::DROPPED_MARKER_PREFIX));
    assert!(out.stdout.ends_with("abcdefghi\nEND"));
    assert!(out.combined.ends_with("END"));
    // The tail keeps the end of the stream even past the cap.
    assert!(out.tail.starts_with(TRUNCATION_MARKER));
    assert!(
        out.tail.ends_with("END"),
        "{:?}",
        &out.tail[out.tail.len() - 40..]
    );
}

#[tokio::test]
async fn argv_with_shell_metacharacters_is_passed_literally() {
    let Some(fx) = Fixture::start("argv") else {
        return;
    };
    let args = [
        "$(touch /tmp/pwned)",
        "`touch /tmp/pwned`",
        "a;touch /tmp/pwned",
        "a && b || c",
        "| > /tmp/pwned <",
        "*",
        "'single'",
        "\"double\"",
        "back\\slash",
        "  spaced  out  ",
        "new\nline",
        "$HOME ${PATH}",
        "",
        "-n",
        "--",
        "a=b",
        "ünïcödé",
    ];
    let mut full = argv(&["printf", "[%s]\\n"]);
    full.extend(args.iter().map(|s| (*s).to_owned()));
    let shell = shell(&fx);
    let out = shell.exec(&full, &opts(&fx)).await.unwrap();
    assert!(out.status.success(), "{}", out.stderr);
    let expected: String = args.iter().map(|a| format!("[{a}]\n")).collect();
    assert_eq!(out.stdout, expected);
    let out = shell
        .exec(&argv(&["ls", "/tmp"]), &opts(&fx))
        .await
        .unwrap();
    assert_eq!(out.stdout, "", "nothing was interpreted by a shell");
}

// ---------------------------------------------------------------- nothing outlives a run

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_kills_the_process_tree_inside_the_container() {
    let Some(fx) = Fixture::start("timeout") else {
        return;
    };
    let shell = std::sync::Arc::new(shell(&fx));
    let mut options = opts(&fx);
    options.timeout = Duration::from_secs(3);
    let run = {
        let shell = std::sync::Arc::clone(&shell);
        tokio::spawn(async move {
            let script = Script::sh("sleep 4711 & sleep 4712 & sh -c 'sleep 4713'; echo never");
            shell.run(&script, &options).await
        })
    };
    wait_until(&fx, "the tree runs", Duration::from_secs(3), |fx| {
        fx.running(&["sleep 4711", "sleep 4712", "sleep 4713"])
    })
    .await;
    let out = run.await.unwrap().unwrap();
    assert!(out.timed_out, "{out:?}");
    assert!(!out.stdout.contains("never"));
    assert!(out.duration < Duration::from_secs(10), "{:?}", out.duration);
    // Killing the engine client is not enough; the call returns only once the tree
    // inside the container is gone.
    assert_eq!(fx.alive("471"), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_run_kills_the_process_tree_inside_the_container() {
    let Some(fx) = Fixture::start("cancel") else {
        return;
    };
    let shell = std::sync::Arc::new(shell(&fx));
    let run = {
        let shell = std::sync::Arc::clone(&shell);
        let options = opts(&fx);
        tokio::spawn(async move {
            let script = Script::sh("sleep 4721 & sleep 4722");
            shell.run(&script, &options).await
        })
    };
    wait_until(&fx, "the tree runs", Duration::from_secs(10), |fx| {
        fx.running(&["sleep 4721", "sleep 4722"])
    })
    .await;
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
    // The kill runs on a helper thread after the drop; give it a moment.
    wait_until(&fx, "the tree is gone", Duration::from_secs(10), |fx| {
        fx.alive("472").is_empty()
    })
    .await;
}

#[tokio::test]
async fn background_leftovers_die_when_the_command_exits() {
    let Some(fx) = Fixture::start("leftover") else {
        return;
    };
    let out = shell(&fx)
        .run(
            &Script::sh("sleep 4731 & sleep 4732 & echo started"),
            &opts(&fx),
        )
        .await
        .unwrap();
    assert!(out.status.success());
    assert_eq!(out.stdout, "started\n");
    assert_eq!(fx.alive("473"), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_runs_timeout_does_not_touch_another_run() {
    let Some(fx) = Fixture::start("isolation") else {
        return;
    };
    let shell = shell(&fx);
    let mut short = opts(&fx);
    short.timeout = Duration::from_secs(1);
    let (slow_script, doomed_script, long) = (
        Script::sh("sleep 2; echo survived"),
        Script::sh("sleep 4741"),
        opts(&fx),
    );
    let slow = shell.run(&slow_script, &long);
    let doomed = shell.run(&doomed_script, &short);
    let (slow, doomed) = tokio::join!(slow, doomed);
    let (slow, doomed) = (slow.unwrap(), doomed.unwrap());
    assert!(doomed.timed_out);
    assert!(slow.status.success() && !slow.timed_out, "{slow:?}");
    assert_eq!(slow.stdout, "survived\n");
}

/// Poll `check` until it holds, or fail after `limit` showing the container's processes.
async fn wait_until(fx: &Fixture, what: &str, limit: Duration, check: impl Fn(&Fixture) -> bool) {
    let deadline = Instant::now() + limit;
    while !check(fx) {
        assert!(
            Instant::now() < deadline,
            "timed out waiting until {what}; processes: {:?}",
            fx.processes()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------- the sandbox's promises

#[test]
fn the_workspace_must_be_seen_at_its_own_path() {
    for (label, workspace) in [
        ("elsewhere", Workspace::At("/workspace")),
        ("unmounted", Workspace::Unmounted),
    ] {
        let Some(fx) = Fixture::with(
            label,
            Setup {
                workspace,
                ..Setup::default()
            },
        ) else {
            return;
        };
        let why = unavailable_for(fx.config(), &policy(&fx));
        let ws = fx.workspace.display().to_string();
        assert!(
            why.contains(&format!("does not see {ws} at the same path")),
            "{why}"
        );
        // Mounted elsewhere or not at all: at the workspace's path the container shows
        // its own image (or nothing), not the workspace.
        assert!(why.contains("no mount there"), "{why}");
        // How to start a container that works, for this very policy.
        assert!(
            why.contains(&format!(
                "podman run -d --name {} --read-only --network none -v {ws}:{ws} IMAGE sleep infinity",
                fx.name
            )),
            "{why}"
        );
    }
}

#[test]
fn mounts_beyond_the_authorized_paths_and_a_network_are_refused() {
    let Some(_) = podman_or_skip() else {
        return;
    };
    let state = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let state = std::fs::canonicalize(state.path()).unwrap();
    let other = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let other = std::fs::canonicalize(other.path()).unwrap();
    let (state_s, other_s) = (state.display().to_string(), other.display().to_string());
    let fx = Fixture::with(
        "promises",
        Setup {
            extra: vec![
                "-v".into(),
                format!("{state_s}:{state_s}:ro"),
                "-v".into(),
                format!("{other_s}:/data"),
            ],
            network: "host",
            ..Setup::default()
        },
    )
    .unwrap();
    let mut p = policy(&fx);
    // The state directory is what the sandbox hides (as Warden's own would be).
    p.hidden_paths = vec![state.clone()];
    let why = unavailable_for(fx.config(), &p);
    assert!(
        why.contains(&format!(
            "host's {state_s} (at {state_s}), which shows {state_s}"
        )),
        "{why}"
    );
    assert!(
        why.contains(&format!("host's {other_s} writable at /data")),
        "{why}"
    );
    assert!(why.contains("has a network (host)"), "{why}");
    // With the network allowed and nothing hidden mounted, only /data is left.
    p.network = sandbox::Network::On;
    p.hidden_paths.clear();
    let why = unavailable_for(fx.config(), &p);
    assert!(
        !why.contains("network") && !why.contains("which shows"),
        "{why}"
    );
    assert!(why.contains("writable at /data"), "{why}");
    assert!(why.contains("mount it read-only or add it there"), "{why}");
}

// ---------------------------------------------------------------- the read-only view

#[tokio::test]
async fn the_read_only_view_refuses_every_write_and_stays_locked() {
    let Some(fx) = Fixture::read_only_root("ro") else {
        return;
    };
    if !fx.user_namespaces_or_skip() {
        return;
    }
    let ro = read_only_shell(&fx);
    let rw = shell(&fx);
    assert_eq!(
        (ro.profile(), rw.profile()),
        (Profile::ReadOnly, Profile::Writable)
    );
    let ws = fx.workspace.display().to_string();
    // The workspace, and the container's own writable tmpfs (/var/tmp, /run), are
    // read-only in the view; the kernel says so and approval mode learns of it.
    for script in [
        "echo x > out.txt".to_owned(),
        format!("mkdir {ws}/sub/new"),
        "echo y > /var/tmp/planted".to_owned(),
        "echo y > /run/planted".to_owned(),
    ] {
        let out = ro
            .run(&Script::sh(script.clone()), &opts(&fx))
            .await
            .unwrap();
        assert!(!out.status.success(), "{script}: {out:?}");
        assert!(
            out.stderr.contains("Read-only file system"),
            "{script}: {out:?}"
        );
        assert_eq!(
            out.refused_writes,
            RefusedWrites::Refused(Vec::new()),
            "{script}"
        );
    }
    assert!(!fx.workspace.join("out.txt").exists());
    assert!(!fx.workspace.join("sub/new").exists());
    // Neither undoing the view nor going around it through another process's root helps,
    // and the container's other processes cannot be signalled.
    let bystander = run_podman(&fx.podman, &["exec", "-d", &fx.name, "sleep", "4799"]);
    assert!(bystander.status.success());
    wait_until(&fx, "the bystander runs", Duration::from_secs(10), |fx| {
        fx.running(&["sleep 4799"])
    })
    .await;
    let out = ro
        .run(
            &Script::sh(format!(
                "mount -o remount,bind,rw {ws}; umount {ws}; umount -l {ws}; \
                 echo x > {ws}/after-remount.txt; \
                 echo x > /proc/1/root{ws}/via-proc.txt; \
                 for p in $(pidof sleep); do kill -KILL $p; done; \
                 echo done"
            )),
            &opts(&fx),
        )
        .await
        .unwrap();
    assert!(out.stdout.contains("done"), "{out:?}");
    assert!(!fx.workspace.join("after-remount.txt").exists(), "{out:?}");
    assert!(!fx.workspace.join("via-proc.txt").exists(), "{out:?}");
    assert!(
        out.stderr.contains("can't unmount")
            && out.stderr.contains("via-proc.txt: Permission denied"),
        "{out:?}"
    );
    assert!(fx.is_running() && fx.running(&["sleep 4799"]), "{out:?}");
    // A private /tmp is writable, and gone with the run.
    let out = ro
        .run(
            &Script::sh("echo t > /tmp/t && cat /tmp/t && id -u"),
            &opts(&fx),
        )
        .await
        .unwrap();
    assert_eq!(
        (out.status.success(), out.stdout.as_str()),
        (true, "t\n0\n"),
        "{out:?}"
    );
    let out = rw.exec(&argv(&["ls", "/tmp"]), &opts(&fx)).await.unwrap();
    assert_eq!(out.stdout, "");
    // The writable profile writes what the container's mounts allow.
    let out = rw
        .run(&Script::sh("echo x > out.txt"), &opts(&fx))
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.refused_writes, RefusedWrites::NotWatched);
    assert_eq!(
        std::fs::read_to_string(fx.workspace.join("out.txt")).unwrap(),
        "x\n"
    );
}

#[tokio::test]
async fn the_read_only_view_runs_commands_exactly_as_the_writable_one() {
    let Some(fx) = Fixture::read_only_root("roexact") else {
        return;
    };
    if !fx.user_namespaces_or_skip() {
        return;
    }
    let ro = read_only_shell(&fx);
    std::fs::write(fx.workspace.join("input.txt"), "hello\n").unwrap();
    let options = opts(&fx).with_env("WARDEN_A", "two words");
    let out = ro.exec(&argv(&["env"]), &options).await.unwrap();
    let mut got: Vec<&str> = out.stdout.lines().collect();
    got.sort_unstable();
    assert_eq!(got, ["PATH=/bin", "WARDEN_A=two words"], "{out:?}");
    let out = ro
        .run(
            &Script::sh("pwd; cat input.txt; echo err >&2; exit 42"),
            &opts(&fx),
        )
        .await
        .unwrap();
    assert_eq!(out.status, ExitStatus::Code(42));
    assert_eq!(
        out.stdout,
        format!("{}\nhello\n", fx.workspace.display()),
        "{out:?}"
    );
    assert_eq!(out.stderr, "err\n");
    // Nothing failed on a write, so nothing counts as refused.
    assert_eq!(out.refused_writes, RefusedWrites::None);
    let out = ro
        .exec(&argv(&["sh", "-c", "kill -KILL $$"]), &opts(&fx))
        .await
        .unwrap();
    assert_eq!(out.status.shell_code(), 137);
    let mut options = opts(&fx);
    options.stdin = Stdin::Bytes(b"from stdin\n".to_vec());
    let out = ro.exec(&argv(&["cat"]), &options).await.unwrap();
    assert_eq!(out.stdout, "from stdin\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_kills_the_tree_inside_the_read_only_view() {
    let Some(fx) = Fixture::read_only_root("rotimeout") else {
        return;
    };
    if !fx.user_namespaces_or_skip() {
        return;
    }
    let ro = std::sync::Arc::new(read_only_shell(&fx));
    let mut options = opts(&fx);
    options.timeout = Duration::from_secs(3);
    let run = {
        let ro = std::sync::Arc::clone(&ro);
        tokio::spawn(async move {
            let script = Script::sh("sleep 4751 & sleep 4752 & sh -c 'sleep 4753'; echo never");
            ro.run(&script, &options).await
        })
    };
    wait_until(&fx, "the tree runs", Duration::from_secs(3), |fx| {
        fx.running(&["sleep 4751", "sleep 4752", "sleep 4753"])
    })
    .await;
    let out = run.await.unwrap().unwrap();
    assert!(out.timed_out, "{out:?}");
    assert_eq!(fx.alive("475"), Vec::<String>::new());
}

#[tokio::test]
async fn without_a_read_only_root_there_is_no_read_only_view() {
    let Some(fx) = Fixture::start("rwroot") else {
        return;
    };
    let container = container(&fx);
    let why = container.read_only().unwrap_err().to_string();
    assert!(why.contains("was not started with --read-only"), "{why}");
    assert!(
        why.contains(&format!("podman run -d --name {} --read-only", fx.name)),
        "{why}"
    );
    // The read-only shell refuses, it never runs the command writable.
    let ro = container.shell(Profile::ReadOnly);
    let err = ro
        .run(&Script::sh("echo x > out.txt"), &opts(&fx))
        .await
        .unwrap_err();
    assert!(matches!(err, CapsError::Unsupported { .. }), "{err}");
    assert!(err.to_string().contains("--read-only"), "{err}");
    assert!(!fx.workspace.join("out.txt").exists());
}

#[test]
fn the_read_only_view_needs_its_programs_and_user_namespaces() {
    let Some(no_unshare) = Fixture::with(
        "nounshare",
        Setup {
            applets: Applets::Without(&["unshare"]),
            read_only_root: true,
            ..Setup::default()
        },
    ) else {
        return;
    };
    let why = container(&no_unshare).read_only().unwrap_err().to_string();
    assert!(why.contains("no unshare"), "{why}");
    drop(no_unshare);
    // A seccomp profile that refuses unshare(2), as Docker's default does for
    // CLONE_NEWUSER.
    let profile = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        profile.path(),
        r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["unshare"],"action":"SCMP_ACT_ERRNO"}]}"#,
    )
    .unwrap();
    let no_userns = Fixture::with(
        "nouserns",
        Setup {
            read_only_root: true,
            extra: vec![
                "--security-opt".into(),
                format!("seccomp={}", profile.path().display()),
            ],
            ..Setup::default()
        },
    )
    .unwrap();
    let why = container(&no_userns).read_only().unwrap_err().to_string();
    assert!(why.contains("user namespaces must be allowed"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_on_a_terminal_gets_one_inside_the_container_and_ctrl_c_reaches_it() {
    let Some(fx) = Fixture::start("tty") else {
        return;
    };
    let shell = shell(&fx);
    let (sender, stream) = caps::input_channel();
    let live = caps::LiveOutput::new(64 * 1024);
    let mut options = opts(&fx);
    options.stdin = Stdin::Stream(stream);
    options.terminal = Some(caps::TerminalSize { rows: 27, cols: 91 });
    options.live = Some(live.clone());
    let script = Script {
        shell: PathBuf::from("/bin/sh"),
        source: "test -t 0 && test -t 1 && echo on-a-tty; stty size; \
                 trap 'echo interrupted; exit 7' INT; echo ready; while :; do sleep 0.1; done"
            .into(),
    };
    let run = shell.run(&script, &options);
    let drive = async {
        caps::testkit::wait_for_output(&live, "ready", Duration::from_secs(30))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        sender.write(vec![0x03]).unwrap();
    };
    let (out, ()) = tokio::join!(run, drive);
    let out = out.unwrap();
    assert_eq!(out.status, ExitStatus::Code(7), "{out:?}");
    for want in ["on-a-tty", "27 91", "interrupted"] {
        assert!(out.stdout.contains(want), "{want:?} in {:?}", out.stdout);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_reaches_the_command_and_its_children_inside_the_container() {
    let Some(fx) = Fixture::start("signal") else {
        return;
    };
    let shell = shell(&fx);
    let (sender, stream) = caps::input_channel();
    let live = caps::LiveOutput::new(64 * 1024);
    let mut options = opts(&fx);
    options.stdin = Stdin::Stream(stream);
    options.live = Some(live.clone());
    // The command traps USR1 and says so, and so do a child it started and an orphan it
    // left by a double fork; all go on.
    let script = Script {
        shell: PathBuf::from("/bin/sh"),
        source:
            "(trap 'echo child-got-usr1' USR1; echo child-ready; while :; do sleep 0.1; done) & \
                 ( (trap 'echo orphan-got-usr1' USR1; echo orphan-ready; while :; do sleep 0.1; done) & ) ; \
                 trap 'echo got-usr1' USR1; trap 'echo got-term; exit 9' TERM; \
                 echo ready; while :; do sleep 0.1; done"
                .into(),
    };
    let run = shell.run(&script, &options);
    let drive = async {
        for ready in ["ready", "child-ready", "orphan-ready"] {
            caps::testkit::wait_for_output(&live, ready, Duration::from_secs(30))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        sender.signal(10).unwrap();
        // The orphan (double fork, reparented) is still the run's: its session.
        for got in ["got-usr1", "child-got-usr1", "orphan-got-usr1"] {
            caps::testkit::wait_for_output(&live, got, Duration::from_secs(30))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        sender.signal(15).unwrap();
    };
    let (out, ()) = tokio::join!(run, drive);
    let out = out.unwrap();
    // The wrapper that reports the command's end was not signalled: the status is the
    // command's own.
    assert_eq!(out.status, ExitStatus::Code(9), "{out:?}");
    assert!(out.stdout.contains("got-term"), "{:?}", out.stdout);
}
