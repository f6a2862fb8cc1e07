//! The container backend against a real engine (Podman): exit status, output, the exact
//! environment, working directory, stdin, the output cap, argv passed literally, and the
//! process tree inside the container dying on timeout, on cancellation and when the
//! command exits. Also every way construction fails closed.
//!
//! Nothing here needs a registry: each test builds its own image from a static busybox
//! (`/bin/busybox` from Debian's `busybox-static`) with `podman import`, starts its own
//! container, and removes both when it ends, under names unique to the test process.
//! Without Podman the real tests print `SKIPPED: ...` and return; the fail-closed tests
//! that need no engine always run.
//!
//! Setup uses `podman --runtime runc --cgroup-manager cgroupfs` (works in containers and
//! VMs without systemd) and caps `nofile`/`nproc` so runc never has to raise a limit
//! (which fails without `CAP_SYS_RESOURCE`). The backend itself needs none of this: it
//! only runs `podman exec` and `podman container inspect`.

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Skipped tests say so, loudly.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use caps::{ExecOptions, ExitStatus, Script, Shell, Stdin, TRUNCATION_MARKER};
use sandbox::Unavailable;
use sandbox::container::{
    ContainerConfig, ContainerShell, TRUSTED_ENGINE_DIRS, find_engine, probe_engine,
};

/// Global options for the test's own podman calls (image and container setup).
const SETUP_OPTIONS: &[&str] = &["--runtime", "runc", "--cgroup-manager", "cgroupfs"];

fn trusted_dirs() -> Vec<PathBuf> {
    TRUSTED_ENGINE_DIRS.iter().map(PathBuf::from).collect()
}

/// The podman binary the backend would use, if installed.
fn podman() -> Option<PathBuf> {
    find_engine("podman", &trusted_dirs()).ok()
}

/// Say something that must be seen even when the test passes: written to the stderr
/// descriptor directly, which the test harness's output capture (it hooks the print
/// macros only) does not swallow.
fn shout(message: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{message}");
}

/// `None` (after saying so, loudly) when podman is missing.
fn podman_or_skip() -> Option<PathBuf> {
    let found = podman();
    if found.is_none() {
        // The harness names each test's thread after the test.
        let current = std::thread::current();
        let test = current.name().unwrap_or("a container test");
        shout(&format!(
            "SKIPPED: {test} because podman is not installed \
             (apt-get install podman runc busybox-static)"
        ));
    }
    found
}

fn run_podman(podman: &Path, args: &[&str]) -> Output {
    Command::new(podman)
        .args(SETUP_OPTIONS)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run podman")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn unique_name(label: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("warden-test-{label}-{}-{nanos}", std::process::id())
}

/// Which busybox applets the image gets.
enum Applets {
    /// Every applet (`busybox --list`).
    All,
    /// Every applet except these.
    Without(&'static [&'static str]),
}

/// One image and one container made for one test, removed on drop.
struct Fixture {
    podman: PathBuf,
    name: String,
    image: String,
    _dir: tempfile::TempDir,
}

impl Fixture {
    /// A running container with a full busybox, or `None` if podman is missing. `label`
    /// goes into the container and image names.
    fn start(label: &str) -> Option<Fixture> {
        Fixture::with(label, Applets::All, true)
    }

    /// An image with `applets`, and a container from it, started or only created.
    fn with(label: &str, applets: Applets, start: bool) -> Option<Fixture> {
        let podman = podman_or_skip()?;
        let busybox = Path::new("/bin/busybox");
        assert!(
            busybox.is_file(),
            "podman is installed but /bin/busybox is missing: apt-get install busybox-static"
        );
        let name = unique_name(label);
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("rootfs");
        for sub in ["bin", "tmp", "proc", "dev", "sys", "etc", "work/sub"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        std::fs::set_permissions(root.join("tmp"), std::fs::Permissions::from_mode(0o1777))
            .unwrap();
        // A file unique to this test makes the image unique, so concurrent tests never
        // share (and remove) each other's images.
        std::fs::write(root.join("etc/warden-test-id"), &name).unwrap();
        std::fs::copy(busybox, root.join("bin/busybox")).unwrap();
        let list = Command::new(busybox).arg("--list").output().unwrap();
        for applet in text(&list.stdout).lines() {
            let skip = match &applets {
                Applets::All => false,
                Applets::Without(missing) => missing.contains(&applet),
            };
            if applet != "busybox" && !skip {
                symlink("busybox", root.join("bin").join(applet)).unwrap();
            }
        }
        let tar = dir.path().join("image.tar");
        let status = Command::new("tar")
            .arg("-C")
            .arg(&root)
            .arg("-cf")
            .arg(&tar)
            .arg(".")
            .status()
            .unwrap();
        assert!(status.success(), "tar failed");
        let image = format!("localhost/{name}:test");
        let fixture = Fixture {
            podman: podman.clone(),
            name: name.clone(),
            image: image.clone(),
            _dir: dir,
        };
        let out = run_podman(&podman, &["import", "-q", tar.to_str().unwrap(), &image]);
        assert!(out.status.success(), "podman import: {}", text(&out.stderr));
        let verb = if start { "run" } else { "create" };
        let mut args = vec![verb];
        if start {
            args.push("-d");
        }
        args.extend([
            "--name",
            &name,
            "--network",
            "none",
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
            &image,
            "/bin/sleep",
            "1000000",
        ]);
        let out = run_podman(&podman, &args);
        assert!(out.status.success(), "podman {verb}: {}", text(&out.stderr));
        if start {
            let out = run_podman(&podman, &["exec", &name, "/bin/busybox", "true"]);
            assert!(
                out.status.success(),
                "cannot exec in the test container ({}); is /bin/busybox static \
                 (apt-get install busybox-static)?",
                text(&out.stderr)
            );
        }
        Some(fixture)
    }

    fn config(&self) -> ContainerConfig {
        ContainerConfig {
            engine: "podman".into(),
            container: self.name.clone(),
            engine_dirs: trusted_dirs(),
        }
    }

    fn shell(&self) -> ContainerShell {
        ContainerShell::new(self.config()).expect("the container backend is available")
    }

    /// The command lines of the live (non-zombie) processes in the container.
    fn processes(&self) -> Vec<String> {
        let out = run_podman(&self.podman, &["exec", &self.name, "ps", "-o", "stat,args"]);
        assert!(out.status.success(), "ps: {}", text(&out.stderr));
        text(&out.stdout)
            .lines()
            .skip(1)
            .filter_map(|l| l.trim_start().split_once(' '))
            .filter(|(stat, _)| !stat.starts_with('Z'))
            .map(|(_, args)| args.trim().to_owned())
            .collect()
    }

    /// Live processes whose command line contains `needle` (the run's wrapper and shells
    /// included, since their command lines hold the script).
    fn alive(&self, needle: &str) -> Vec<String> {
        self.processes()
            .into_iter()
            .filter(|args| args.contains(needle))
            .collect()
    }

    /// True once every command line in `commands` runs in the container.
    fn running(&self, commands: &[&str]) -> bool {
        let procs = self.processes();
        commands.iter().all(|c| procs.iter().any(|p| p == c))
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let rm = run_podman(&self.podman, &["rm", "-f", "-t", "0", &self.name]);
        let rmi = run_podman(&self.podman, &["rmi", "-f", &self.image]);
        if !rm.status.success() || !rmi.status.success() {
            eprintln!(
                "warning: cleanup of {} left something behind: {} {}",
                self.name,
                text(&rm.stderr),
                text(&rmi.stderr)
            );
        }
    }
}

fn opts() -> ExecOptions {
    ExecOptions::new("/", Duration::from_secs(20)).with_env("PATH", "/bin")
}

fn argv(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn unavailable(config: ContainerConfig) -> String {
    match ContainerShell::new(config) {
        Ok(shell) => panic!("expected the backend to be unavailable, got {shell:?}"),
        Err(Unavailable(why)) => why,
    }
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
        assert!(
            why.contains("not found in the trusted directories"),
            "{why}"
        );
    }
}

// ---------------------------------------------------------------- fail closed (podman)

#[test]
fn a_container_that_is_not_running_is_unavailable() {
    let Some(fx) = Fixture::with("stopped", Applets::All, false) else {
        return;
    };
    let why = unavailable(fx.config());
    assert!(why.contains("not running"), "{why}");
    assert!(why.contains(&format!("podman start {}", fx.name)), "{why}");
}

#[test]
fn a_container_without_a_shell_or_env_is_unavailable() {
    let Some(no_sh) = Fixture::with("nosh", Applets::Without(&["sh"]), true) else {
        return;
    };
    let why = unavailable(no_sh.config());
    assert!(why.contains("/bin/sh"), "{why}");
    drop(no_sh);
    let no_env = Fixture::with("noenv", Applets::Without(&["env"]), true).unwrap();
    let why = unavailable(no_env.config());
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
    let shell = fx.shell();
    let out = shell
        .exec(
            &argv(&["sh", "-c", "echo out; echo err >&2; exit 42"]),
            &opts(),
        )
        .await
        .unwrap();
    assert_eq!(out.status, ExitStatus::Code(42));
    assert_eq!(out.stdout, "out\n");
    assert_eq!(out.stderr, "err\n");
    assert!(!out.timed_out && !out.truncated);

    let out = shell.run(&Script::sh("exit 7"), &opts()).await.unwrap();
    assert_eq!(out.status, ExitStatus::Code(7));
    let out = shell.exec(&argv(&["true"]), &opts()).await.unwrap();
    assert!(out.status.success());
    let out = shell.exec(&argv(&["/bin/false"]), &opts()).await.unwrap();
    assert_eq!(out.status, ExitStatus::Code(1));
    // Death by signal arrives as the shell convention (the engine reports a code).
    let out = shell
        .exec(&argv(&["sh", "-c", "kill -KILL $$"]), &opts())
        .await
        .unwrap();
    assert_eq!(out.status.shell_code(), 137);
    // Not found inside the container: `env` says so with 127.
    let out = shell
        .exec(&argv(&["no-such-program"]), &opts())
        .await
        .unwrap();
    assert_eq!(out.status, ExitStatus::Code(127));
    // No PATH: a bare name is not looked up anywhere (the Shell contract).
    let no_path = ExecOptions::new("/", Duration::from_secs(5));
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
    let options = opts()
        .with_env("WARDEN_A", "two words")
        .with_env("WARDEN_B", "a=b;$(echo no)`echo no`'\"")
        .with_env("EMPTY", "");
    let out = fx.shell().exec(&argv(&["env"]), &options).await.unwrap();
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
async fn the_working_directory_is_respected() {
    let Some(fx) = Fixture::start("cwd") else {
        return;
    };
    let shell = fx.shell();
    let mut options = opts();
    options.cwd = PathBuf::from("/work/sub");
    let out = shell.exec(&argv(&["pwd"]), &options).await.unwrap();
    assert_eq!(out.stdout, "/work/sub\n");
    let out = shell
        .run(&Script::sh("pwd; ls /work"), &options)
        .await
        .unwrap();
    assert_eq!(out.stdout, "/work/sub\nsub\n");
    // A directory missing inside the container fails the run, not Warden.
    options.cwd = PathBuf::from("/does/not/exist");
    let out = shell.exec(&argv(&["pwd"]), &options).await.unwrap();
    assert!(!out.status.success(), "{out:?}");
    // Relative working directories are refused before anything runs.
    options.cwd = PathBuf::from("work");
    assert!(shell.exec(&argv(&["pwd"]), &options).await.is_err());
}

#[tokio::test]
async fn stdin_is_the_given_bytes_or_empty() {
    let Some(fx) = Fixture::start("stdin") else {
        return;
    };
    let shell = fx.shell();
    let mut options = opts();
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
    let out = shell.exec(&argv(&["cat"]), &opts()).await.unwrap();
    assert!(out.status.success() && out.stdout.is_empty(), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn output_is_capped_at_the_default_limit() {
    let Some(fx) = Fixture::start("cap") else {
        return;
    };
    let out = fx
        .shell()
        .run(
            &Script::sh("yes abcdefghi | head -c 1000000; printf END"),
            &opts(),
        )
        .await
        .unwrap();
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.truncated);
    let body = out
        .combined
        .strip_suffix(TRUNCATION_MARKER)
        .expect("combined is cut with the marker");
    assert_eq!(body.len(), caps::DEFAULT_MAX_OUTPUT_BYTES);
    assert!(body.starts_with("abcdefghi\nabcdefghi\n"));
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
    let shell = fx.shell();
    let out = shell.exec(&full, &opts()).await.unwrap();
    assert!(out.status.success(), "{}", out.stderr);
    let expected: String = args.iter().map(|a| format!("[{a}]\n")).collect();
    assert_eq!(out.stdout, expected);
    let out = shell.exec(&argv(&["ls", "/tmp"]), &opts()).await.unwrap();
    assert_eq!(out.stdout, "", "nothing was interpreted by a shell");
}

// ---------------------------------------------------------------- nothing outlives a run

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_kills_the_process_tree_inside_the_container() {
    let Some(fx) = Fixture::start("timeout") else {
        return;
    };
    let shell = std::sync::Arc::new(fx.shell());
    let mut options = opts();
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
    let shell = std::sync::Arc::new(fx.shell());
    let run = {
        let shell = std::sync::Arc::clone(&shell);
        tokio::spawn(async move {
            let script = Script::sh("sleep 4721 & sleep 4722");
            shell.run(&script, &opts()).await
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
    let out = fx
        .shell()
        .run(
            &Script::sh("sleep 4731 & sleep 4732 & echo started"),
            &opts(),
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
    let shell = fx.shell();
    let mut short = opts();
    short.timeout = Duration::from_secs(1);
    let (slow_script, doomed_script, long) = (
        Script::sh("sleep 2; echo survived"),
        Script::sh("sleep 4741"),
        opts(),
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
