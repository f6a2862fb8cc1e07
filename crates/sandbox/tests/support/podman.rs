//! A real Podman container per test, shared by the container backend's tests
//! (`crates/sandbox/tests/container.rs`) and the end-to-end tests of `warden` on that
//! backend (`tests/container_modes.rs`, which includes this file by path).
//!
//! Nothing needs a registry: each fixture builds its own image from a static busybox
//! (`/bin/busybox` from Debian's `busybox-static`) with `podman import`, starts its own
//! container with a fresh workspace directory mounted at its own path, and removes both
//! when dropped, under names unique to the test process. Without Podman the fixture
//! says `SKIPPED: ...` (loudly, past the harness's capture) and the test returns.
//!
//! Setup uses `podman --runtime runc --cgroup-manager cgroupfs` (works in containers and
//! VMs without systemd) and caps `nofile`/`nproc` so runc never has to raise a limit
//! (which fails without `CAP_SYS_RESOURCE`). The backend itself needs none of this: it
//! only runs `podman exec` and `podman container inspect`.

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Not every test file uses every helper.
#![allow(dead_code)]

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use sandbox::container::{ContainerConfig, TRUSTED_ENGINE_DIRS, find_engine};

/// Global options for the test's own podman calls (image and container setup).
pub const SETUP_OPTIONS: &[&str] = &["--runtime", "runc", "--cgroup-manager", "cgroupfs"];

pub fn trusted_dirs() -> Vec<PathBuf> {
    TRUSTED_ENGINE_DIRS.iter().map(PathBuf::from).collect()
}

/// The podman binary the backend would use, if installed.
pub fn podman() -> Option<PathBuf> {
    find_engine("podman", &trusted_dirs()).ok()
}

/// Say something that must be seen even when the test passes: written to the stderr
/// descriptor directly, which the test harness's output capture (it hooks the print
/// macros only) does not swallow.
pub fn shout(message: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{message}");
}

/// `None` (after saying so, loudly) when podman is missing.
pub fn podman_or_skip() -> Option<PathBuf> {
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

pub fn run_podman(podman: &Path, args: &[&str]) -> Output {
    Command::new(podman)
        .args(SETUP_OPTIONS)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run podman")
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub fn unique_name(label: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("warden-test-{label}-{}-{nanos}", std::process::id())
}

/// Which busybox applets the image gets.
pub enum Applets {
    /// Every applet (`busybox --list`).
    All,
    /// Every applet except these.
    Without(&'static [&'static str]),
}

/// Where the container sees the fixture's workspace.
pub enum Workspace {
    /// At its own host path (what the backend needs).
    SamePath,
    /// At another path inside.
    At(&'static str),
    /// Not at all.
    Unmounted,
}

/// How to make a fixture's container.
pub struct Setup {
    pub applets: Applets,
    /// `podman run` (a running container) or only `podman create`.
    pub start: bool,
    /// `--read-only`: what the read-only view requires.
    pub read_only_root: bool,
    pub workspace: Workspace,
    /// `--network` (default `none`, as `sandbox.network = false` requires).
    pub network: &'static str,
    /// More `podman run` options (e.g. `-v` of other paths).
    pub extra: Vec<String>,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            applets: Applets::All,
            start: true,
            read_only_root: false,
            workspace: Workspace::SamePath,
            network: "none",
            extra: Vec::new(),
        }
    }
}

/// One image, one container and one workspace made for one test, removed on drop.
pub struct Fixture {
    pub podman: PathBuf,
    pub name: String,
    pub image: String,
    /// The host directory mounted into the container (canonical), with `sub/` inside.
    pub workspace: PathBuf,
    _dir: tempfile::TempDir,
    _workspace: tempfile::TempDir,
}

impl Fixture {
    /// A running container with a full busybox and the workspace at its own path, or
    /// `None` if podman is missing. `label` goes into the container and image names.
    pub fn start(label: &str) -> Option<Fixture> {
        Fixture::with(label, Setup::default())
    }

    /// Like [`Fixture::start`], with a read-only root: every permission mode works.
    pub fn read_only_root(label: &str) -> Option<Fixture> {
        Fixture::with(
            label,
            Setup {
                read_only_root: true,
                ..Setup::default()
            },
        )
    }

    /// A container made as `setup` says.
    pub fn with(label: &str, setup: Setup) -> Option<Fixture> {
        let podman = podman_or_skip()?;
        let busybox = Path::new("/bin/busybox");
        assert!(
            busybox.is_file(),
            "podman is installed but /bin/busybox is missing: apt-get install busybox-static"
        );
        let name = unique_name(label);
        let dir = tempfile::tempdir().unwrap();
        // Outside /tmp, which the sandbox keeps private: a workspace there is the
        // ordinary case (and the read-only view then gets a private /tmp as well).
        let workspace_dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let workspace = std::fs::canonicalize(workspace_dir.path()).unwrap();
        std::fs::create_dir(workspace.join("sub")).unwrap();
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
            let skip = match &setup.applets {
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
            workspace: workspace.clone(),
            _dir: dir,
            _workspace: workspace_dir,
        };
        let out = run_podman(&podman, &["import", "-q", tar.to_str().unwrap(), &image]);
        assert!(out.status.success(), "podman import: {}", text(&out.stderr));
        let verb = if setup.start { "run" } else { "create" };
        let mut args: Vec<String> = vec![verb.into()];
        if setup.start {
            args.push("-d".into());
        }
        if setup.read_only_root {
            args.push("--read-only".into());
        }
        let ws = workspace.display().to_string();
        match setup.workspace {
            Workspace::SamePath => args.extend(["-v".into(), format!("{ws}:{ws}")]),
            Workspace::At(inside) => args.extend(["-v".into(), format!("{ws}:{inside}")]),
            Workspace::Unmounted => {}
        }
        args.extend(setup.extra);
        args.extend(
            [
                "--name",
                &name,
                "--network",
                setup.network,
                "--ulimit",
                "nofile=1024:1024",
                "--ulimit",
                "nproc=1024:1024",
                &image,
                "/bin/sleep",
                "1000000",
            ]
            .map(String::from),
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run_podman(&podman, &args);
        assert!(out.status.success(), "podman {verb}: {}", text(&out.stderr));
        if setup.start {
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

    pub fn config(&self) -> ContainerConfig {
        ContainerConfig {
            engine: "podman".into(),
            container: self.name.clone(),
            engine_dirs: trusted_dirs(),
        }
    }

    /// The command lines of the live (non-zombie) processes in the container.
    pub fn processes(&self) -> Vec<String> {
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
    pub fn alive(&self, needle: &str) -> Vec<String> {
        self.processes()
            .into_iter()
            .filter(|args| args.contains(needle))
            .collect()
    }

    /// True once every command line in `commands` runs in the container.
    pub fn running(&self, commands: &[&str]) -> bool {
        let procs = self.processes();
        commands.iter().all(|c| procs.iter().any(|p| p == c))
    }

    /// Whether user namespaces can be made inside the container, which the read-only
    /// view needs; when this machine refuses them (a CI runner that is itself a
    /// restricted container), say so loudly so the test can skip.
    pub fn user_namespaces_or_skip(&self) -> bool {
        let out = run_podman(
            &self.podman,
            &["exec", &self.name, "unshare", "-U", "-r", "-m", "true"],
        );
        if !out.status.success() {
            let current = std::thread::current();
            shout(&format!(
                "SKIPPED: {} because this machine allows no user namespace inside a \
                 container ({}), which the read-only view needs",
                current.name().unwrap_or("a container test"),
                text(&out.stderr).trim()
            ));
        }
        out.status.success()
    }

    /// Whether the container is still running.
    pub fn is_running(&self) -> bool {
        let out = run_podman(
            &self.podman,
            &[
                "container",
                "inspect",
                "--format",
                "{{.State.Running}}",
                &self.name,
            ],
        );
        text(&out.stdout).trim() == "true"
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let rm = run_podman(&self.podman, &["rm", "-f", "-t", "0", &self.name]);
        let rmi = run_podman(&self.podman, &["rmi", "-f", &self.image]);
        if !rm.status.success() || !rmi.status.success() {
            shout(&format!(
                "warning: cleanup of {} left something behind: {} {}",
                self.name,
                text(&rm.stderr),
                text(&rmi.stderr)
            ));
        }
    }
}
