//! End-to-end: the OS sandbox for real — bubblewrap, seccomp, Landlock, namespaces —
//! probed from inside with an errno-only syscall probe, attacked through the filesystem
//! and the network, and refused outright when its backend is missing.

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Skips and the probe report on stdout/stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

#[path = "sandbox_egress.rs"]
mod sandbox_egress;
#[path = "sandbox_terminal.rs"]
mod sandbox_terminal;
mod support;

use std::collections::BTreeMap;
use std::os::linux::net::SocketAddrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use caps::process::OpenedProgram;
use caps::{ExecOptions, ExecOutput, RefusedWrites, Shell};
use sandbox::{LandlockMode, NamespaceSandbox, Profile, SandboxPolicy};
use support::{bwrap_usable, configure, trusted_dirs, wait_gone, warden_home, warden_in};

/// A workspace (writable path) with a copy of this test binary in it, so the probe can
/// run inside the sandbox wherever the repository lives.
struct Lab {
    workspace: tempfile::TempDir,
    state: tempfile::TempDir,
    probe: PathBuf,
}

fn lab() -> Lab {
    let workspace = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    std::fs::write(
        state.path().join("exec-approvals.json"),
        "{\"secret\": true}",
    )
    .unwrap();
    let probe = workspace.path().join("probe");
    std::fs::copy(std::env::current_exe().unwrap(), &probe).unwrap();
    Lab {
        workspace,
        state,
        probe,
    }
}

impl Lab {
    fn ws(&self) -> PathBuf {
        std::fs::canonicalize(self.workspace.path()).unwrap()
    }

    fn sandbox(&self, network: bool) -> Arc<NamespaceSandbox> {
        self.sandbox_held_by(network, caps::process::Containment::session_only())
    }

    /// [`Lab::sandbox`] with each run held by `containment`.
    fn sandbox_held_by(
        &self,
        network: bool,
        containment: caps::process::Containment,
    ) -> Arc<NamespaceSandbox> {
        let network = if network {
            sandbox::Network::On
        } else {
            sandbox::Network::Off
        };
        Arc::new(
            self.namespace_sandbox(network)
                .with_containment(containment),
        )
    }

    /// The lab's sandbox with `network`, built as `WARDEN_TEST_BUILDER` says.
    fn namespace_sandbox(&self, network: sandbox::Network) -> NamespaceSandbox {
        self.namespace_sandbox_reading(network, Vec::new())
    }

    /// [`Lab::namespace_sandbox`] that also shows `readable` (read-only).
    fn namespace_sandbox_reading(
        &self,
        network: sandbox::Network,
        readable: Vec<PathBuf>,
    ) -> NamespaceSandbox {
        let policy = SandboxPolicy {
            writable_paths: vec![self.ws()],
            readable_extra_paths: readable,
            hidden_paths: vec![std::fs::canonicalize(self.state.path()).unwrap()],
            read_only_paths: Vec::new(),
            network,
            landlock: LandlockMode::Auto,
        };
        let helper = OpenedProgram::open(lab_helper()).unwrap();
        // Warden's own builder, as `sandbox.builder = "auto"` picks it here; `cargo xtask
        // ci` runs this file again with WARDEN_TEST_BUILDER=bubblewrap, so that both
        // builders pass the same checks.
        match std::env::var("WARDEN_TEST_BUILDER").as_deref() {
            Ok("bubblewrap") => NamespaceSandbox::new(policy, helper, &trusted_dirs()).unwrap(),
            _ => NamespaceSandbox::built_by_warden(policy, helper).unwrap(),
        }
    }

    fn options(&self, env: &[(&str, &str)]) -> ExecOptions {
        let mut o = ExecOptions::new(self.ws(), Duration::from_secs(60))
            .with_env("PATH", "/usr/local/bin:/usr/bin:/bin");
        for (k, v) in env {
            o.env.insert((*k).into(), (*v).into());
        }
        o
    }

    async fn sh(&self, profile: Profile, script: &str) -> ExecOutput {
        let shell = self.sandbox(false).shell(profile);
        shell
            .exec(
                &["/bin/sh".into(), "-c".into(), script.into()],
                &self.options(&[]),
            )
            .await
            .unwrap()
    }

    /// Run this test binary inside as the probe in `mode`, returning `name=errno` pairs.
    async fn probe(
        &self,
        network: bool,
        mode: &str,
        extra: &[(&str, &str)],
    ) -> BTreeMap<String, String> {
        self.probe_in(&self.sandbox(network), mode, extra).await
    }

    /// [`Lab::probe`] in `sandbox`.
    async fn probe_in(
        &self,
        sandbox: &Arc<NamespaceSandbox>,
        mode: &str,
        extra: &[(&str, &str)],
    ) -> BTreeMap<String, String> {
        let shell = sandbox.shell(Profile::Writable);
        let mut env = vec![("WARDEN_PROBE", mode)];
        env.extend_from_slice(extra);
        let argv = vec![
            self.probe.to_string_lossy().into_owned(),
            "--exact".into(),
            "probe_main".into(),
            "--nocapture".into(),
            "-q".into(),
        ];
        let out = shell.exec(&argv, &self.options(&env)).await.unwrap();
        out.stdout
            .lines()
            .filter_map(|l| l.strip_prefix("PROBE ")?.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }
}

/// Not a test on its own: the body of the in-sandbox probe (selected by WARDEN_PROBE).
#[test]
fn probe_main() {
    let Ok(mode) = std::env::var("WARDEN_PROBE") else {
        return;
    };
    let errno = |r: i64| {
        if r < 0 {
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(0)
                .to_string()
        } else {
            "ok".into()
        }
    };
    let report = |name: &str, value: String| println!("PROBE {name}={value}");
    match mode.as_str() {
        "fd-writes" => {
            // Writes through descriptors and /proc/self, each refused by a read-only mount.
            let file = std::fs::File::open("fd.txt").unwrap();
            let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
            let proc_path = std::ffi::CString::new(format!("/proc/self/fd/{fd}")).unwrap();
            let name = c"user.warden";
            // SAFETY: plain system calls on a descriptor this test owns and on valid
            // NUL-terminated strings.
            unsafe {
                report("fchmod", errno(libc::fchmod(fd, 0o600) as i64));
                report(
                    "fsetxattr",
                    errno(libc::fsetxattr(fd, name.as_ptr(), c"v".as_ptr().cast(), 1, 0) as i64),
                );
                report(
                    "chmod_proc_self",
                    errno(libc::chmod(proc_path.as_ptr(), 0o600) as i64),
                );
            }
        }
        "syscalls" => {
            // Every call is made with arguments that are invalid if the call is allowed,
            // so EPERM/ENOSYS (filtered) is distinguishable from EBADF/EFAULT/EINVAL.
            // SAFETY: raw system calls with invalid descriptors and null pointers; the
            // kernel validates them and returns an error without touching memory.
            unsafe {
                report(
                    "ioctl_tiocsti",
                    errno(libc::syscall(libc::SYS_ioctl, -1, libc::TIOCSTI, 0)),
                );
                report(
                    "ioctl_tiocsti_high_bits",
                    errno(libc::syscall(
                        libc::SYS_ioctl,
                        -1,
                        (1u64 << 32) | libc::TIOCSTI,
                        0,
                    )),
                );
                report(
                    "ioctl_tioclinux",
                    errno(libc::syscall(libc::SYS_ioctl, -1, libc::TIOCLINUX, 0)),
                );
                report(
                    "ioctl_other",
                    errno(libc::syscall(libc::SYS_ioctl, -1, libc::FIONREAD, 0)),
                );
                report(
                    "open_tree",
                    errno(libc::syscall(libc::SYS_open_tree, -1, 0, 0)),
                );
                report(
                    "move_mount",
                    errno(libc::syscall(libc::SYS_move_mount, -1, 0, -1, 0, 0)),
                );
                report("fsopen", errno(libc::syscall(libc::SYS_fsopen, 0, 0)));
                report(
                    "fsconfig",
                    errno(libc::syscall(libc::SYS_fsconfig, -1, 0, 0, 0, 0)),
                );
                report("fsmount", errno(libc::syscall(libc::SYS_fsmount, -1, 0, 0)));
                report("fspick", errno(libc::syscall(libc::SYS_fspick, -1, 0, 0)));
                report(
                    "mount_setattr",
                    errno(libc::syscall(libc::SYS_mount_setattr, -1, 0, 0, 0, 0)),
                );
                report("clone3", errno(libc::syscall(libc::SYS_clone3, 0, 0)));
                report(
                    "unshare_user",
                    errno(libc::syscall(libc::SYS_unshare, libc::CLONE_NEWUSER)),
                );
                report(
                    "clone_newuser",
                    errno(libc::syscall(
                        libc::SYS_clone,
                        (libc::CLONE_NEWUSER | libc::CLONE_FS) as i64,
                        0,
                        0,
                        0,
                        0,
                    )),
                );
                report(
                    "ptrace",
                    errno(libc::syscall(
                        libc::SYS_ptrace,
                        libc::PTRACE_PEEKDATA,
                        0,
                        0,
                        0,
                    )),
                );
                report(
                    "process_vm_writev",
                    errno(libc::syscall(libc::SYS_process_vm_writev, 0, 0, 0, 0, 0, 0)),
                );
                report(
                    "keyctl",
                    errno(libc::syscall(libc::SYS_keyctl, -1, 0, 0, 0, 0)),
                );
                report(
                    "add_key",
                    errno(libc::syscall(libc::SYS_add_key, 0, 0, 0, 0, 0)),
                );
                report(
                    "perf_event_open",
                    errno(libc::syscall(libc::SYS_perf_event_open, 0, 0, -1, -1, 0)),
                );
                report("bpf", errno(libc::syscall(libc::SYS_bpf, -1, 0, 0)));
                report(
                    "userfaultfd",
                    errno(libc::syscall(libc::SYS_userfaultfd, -1)),
                );
                report(
                    "io_uring_setup",
                    errno(libc::syscall(libc::SYS_io_uring_setup, 0, 0)),
                );
                report(
                    "socket_inet",
                    errno(libc::syscall(
                        libc::SYS_socket,
                        libc::AF_INET,
                        libc::SOCK_STREAM,
                        0,
                    )),
                );
                report(
                    "socket_unix",
                    errno(libc::syscall(
                        libc::SYS_socket,
                        libc::AF_UNIX,
                        libc::SOCK_STREAM,
                        0,
                    )),
                );
            }
            let status = std::fs::read_to_string("/proc/self/status").unwrap();
            for field in ["CapEff", "CapPrm", "CapBnd", "NoNewPrivs"] {
                let v = status
                    .lines()
                    .find(|l| l.starts_with(field))
                    .unwrap()
                    .split_whitespace()
                    .nth(1)
                    .unwrap()
                    .to_owned();
                report(field, v);
            }
            // Descriptors above 2 and what they point to (the test harness and the listing
            // itself open some; anything pointing at a host directory would be a leak).
            let mut targets: Vec<String> = std::fs::read_dir("/proc/self/fd")
                .unwrap()
                .filter_map(|e| {
                    let e = e.ok()?;
                    let n: i32 = e.file_name().to_str()?.parse().ok()?;
                    (n > 2).then(|| {
                        std::fs::read_link(e.path())
                            .map(|t| t.display().to_string())
                            .unwrap_or_default()
                    })
                })
                .collect();
            targets.sort();
            report("fd_targets", targets.join(","));
        }
        "net" => {
            let tcp = std::env::var("TCP").unwrap();
            report(
                "tcp",
                match std::net::TcpStream::connect_timeout(
                    &tcp.parse().unwrap(),
                    Duration::from_secs(2),
                ) {
                    Ok(_) => "connected".into(),
                    Err(e) => e.raw_os_error().unwrap_or(0).to_string(),
                },
            );
            let udp = std::env::var("UDP").unwrap();
            report(
                "udp",
                match std::net::UdpSocket::bind("127.0.0.1:0")
                    .and_then(|s| s.send_to(b"leak", &udp))
                {
                    Ok(_) => "sent".into(),
                    Err(e) => e.raw_os_error().unwrap_or(0).to_string(),
                },
            );
            let name = std::env::var("ABSTRACT").unwrap();
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
            report(
                "abstract",
                match std::os::unix::net::UnixStream::connect_addr(&addr) {
                    Ok(_) => "connected".into(),
                    Err(e) => e.raw_os_error().unwrap_or(0).to_string(),
                },
            );
        }
        other => panic!("unknown probe mode {other}"),
    }
}

fn eperm() -> String {
    libc::EPERM.to_string()
}

#[tokio::test]
async fn blocked_syscalls_fail_with_eperm_or_enosys_and_no_capabilities_remain() {
    if !bwrap_usable() {
        return;
    }
    let lab = lab();
    let got = lab.probe(false, "syscalls", &[]).await;
    let blocked = [
        "ioctl_tiocsti",
        "ioctl_tiocsti_high_bits",
        "ioctl_tioclinux",
        "open_tree",
        "move_mount",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "mount_setattr",
        "unshare_user",
        "clone_newuser",
        "ptrace",
        "process_vm_writev",
        "keyctl",
        "add_key",
        "perf_event_open",
        "bpf",
        "userfaultfd",
        "io_uring_setup",
        "socket_inet",
    ];
    let mut wrong = Vec::new();
    for name in blocked {
        if got.get(name) != Some(&eperm()) {
            wrong.push(format!("{name}={:?}", got.get(name)));
        }
    }
    assert!(
        wrong.is_empty(),
        "not blocked with EPERM: {wrong:?}\nall: {got:?}"
    );
    assert_eq!(
        got["clone3"],
        libc::ENOSYS.to_string(),
        "clone3 must be ENOSYS so libc falls back to clone"
    );
    // Allowed calls fail for their own reasons, proving the probe tells the difference.
    assert_eq!(got["ioctl_other"], libc::EBADF.to_string());
    assert_eq!(got["socket_unix"], "ok");
    assert_eq!(
        got["CapEff"],
        "0000000000000000",
        "capabilities left inside (running as uid {})",
        nix::unistd::getuid()
    );
    assert_eq!(got["CapPrm"], "0000000000000000");
    assert_eq!(got["NoNewPrivs"], "1");
    // Only what the probe process opened itself: no bubblewrap setup descriptor (seccomp
    // programs, handles of authorized directories) reached the command.
    for target in got["fd_targets"].split(',').filter(|t| !t.is_empty()) {
        assert!(
            target.starts_with("/proc/")
                || target.starts_with("anon_inode:")
                || target.starts_with("pipe:")
                || target.starts_with("socket:"),
            "descriptor to {target} leaked into the sandbox (all: {})",
            got["fd_targets"]
        );
        assert!(
            !target.contains("memfd:warden-seccomp"),
            "a seccomp program descriptor leaked"
        );
    }
}

/// What the "net" probe tries to reach on the host: a TCP and a UDP socket on its
/// loopback and an abstract Unix socket.
struct HostSockets {
    tcp: std::net::TcpListener,
    udp: std::net::UdpSocket,
    name: String,
    abstract_listener: std::os::unix::net::UnixListener,
}

impl HostSockets {
    fn open(tag: &str) -> HostSockets {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let name = format!("warden-e2e-{tag}-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let abstract_listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
        abstract_listener.set_nonblocking(true).unwrap();
        HostSockets {
            tcp,
            udp,
            name,
            abstract_listener,
        }
    }

    /// The probe's environment naming them.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("TCP", self.tcp.local_addr().unwrap().to_string()),
            ("UDP", self.udp.local_addr().unwrap().to_string()),
            ("ABSTRACT", self.name.clone()),
        ]
    }

    /// The probe's answers (`got`) and the host's side both say nothing was reached.
    fn assert_unreached(&self, got: &BTreeMap<String, String>) {
        assert!(got.contains_key("tcp"), "the probe did not run: {got:?}");
        assert_ne!(got["tcp"], "connected", "{got:?}");
        assert_ne!(got["abstract"], "connected", "{got:?}");
        let mut buf = [0u8; 16];
        assert!(
            self.udp.recv_from(&mut buf).is_err(),
            "a UDP datagram from the sandbox reached the host"
        );
        assert!(
            self.abstract_listener.accept().is_err(),
            "the sandbox reached a host abstract socket"
        );
    }
}

#[tokio::test]
async fn network_off_means_no_tcp_udp_or_abstract_socket_reaches_the_host() {
    if !bwrap_usable() {
        return;
    }
    let lab = lab();
    let host = HostSockets::open("off");
    let env = host.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let got = lab.probe(false, "net", &env).await;
    host.assert_unreached(&got);
    let abstract_listener = &host.abstract_listener;
    // With the network allowed, the same probe connects (the test can tell the difference).
    let got = lab.probe(true, "net", &env).await;
    assert_eq!(got["tcp"], "connected");
    // ...but host abstract sockets stay out of reach where Landlock can scope them (ABI 6).
    if sandbox::landlock::abi() >= 6 {
        assert_ne!(got["abstract"], "connected", "{got:?}");
        assert!(abstract_listener.accept().is_err());
    } else {
        eprintln!("SKIPPED: abstract-socket scoping needs Landlock ABI 6");
    }
}

/// The sandbox's pid 1 (bubblewrap's, or Warden's own builder's) is the command's
/// neighbour for the whole run: it must hold no capability a command could borrow, and no
/// way to gain one.
#[tokio::test]
async fn the_sandboxes_pid_1_holds_no_capabilities() {
    if !bwrap_usable() {
        return;
    }
    let lab = lab();
    let out = lab
        .sh(
            Profile::ReadOnly,
            "grep -E '^(CapPrm|CapEff|CapInh|CapAmb|NoNewPrivs):' /proc/1/status",
        )
        .await;
    assert!(out.status.success(), "{out:?}");
    let fields: Vec<(&str, &str)> = out
        .stdout
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k, v.trim()))
        .collect();
    assert_eq!(fields.len(), 5, "{out:?}");
    for (name, value) in fields {
        let expected = if name == "NoNewPrivs" {
            "1"
        } else {
            "0000000000000000"
        };
        assert_eq!(value, expected, "pid 1's {name}: {out:?}");
    }
}

#[tokio::test]
async fn writes_outside_writable_paths_fail_and_the_host_is_unchanged() {
    if !bwrap_usable() {
        return;
    }
    let lab = lab();
    let marker = format!("warden-e2e-{}", std::process::id());
    let out = lab
        .sh(Profile::Writable, &format!("echo x > /etc/{marker}; echo x > /usr/{marker}; mkdir /opt/{marker}; echo ok > inside.txt; echo tmp > /tmp/{marker}; cat /tmp/{marker}"))
        .await;
    assert!(out.stderr.contains("Read-only file system"), "{out:?}");
    assert_eq!(out.stdout, "tmp\n", "the private /tmp is writable");
    for p in [
        format!("/etc/{marker}"),
        format!("/usr/{marker}"),
        format!("/opt/{marker}"),
        format!("/tmp/{marker}"),
    ] {
        assert!(!Path::new(&p).exists(), "{p} was created on the host");
    }
    assert_eq!(
        std::fs::read_to_string(lab.ws().join("inside.txt")).unwrap(),
        "ok\n"
    );
    // The read-only profile refuses the workspace too.
    let out = lab.sh(Profile::ReadOnly, "echo no > ro.txt").await;
    assert!(
        !out.status.success() && out.stderr.contains("Read-only file system"),
        "{out:?}"
    );
    assert!(!lab.ws().join("ro.txt").exists());
}

#[tokio::test]
async fn secrets_state_and_homes_are_invisible_even_through_symlinks() {
    if !bwrap_usable() {
        return;
    }
    let lab = lab();
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let secret = PathBuf::from(&home).join(format!(".warden-e2e-secret-{}", std::process::id()));
    std::fs::write(&secret, "TOP-SECRET").unwrap();
    std::os::unix::fs::symlink(&secret, lab.ws().join("leak")).unwrap();
    std::os::unix::fs::symlink(lab.state.path(), lab.ws().join("state-link")).unwrap();
    let state = std::fs::canonicalize(lab.state.path()).unwrap();
    let out = lab
        .sh(Profile::Writable, &format!("cat leak; cat {}; ls -A {}; cat state-link/exec-approvals.json; ls -A {home}/.ssh; cat /etc/shadow; cat /etc/ssl/private/*", secret.display(), state.display()))
        .await;
    std::fs::remove_file(&secret).unwrap();
    assert!(!out.combined.contains("TOP-SECRET"), "{out:?}");
    assert!(!out.combined.contains("secret\": true"), "{out:?}");
    assert!(!out.combined.contains("root:"), "{out:?}");
    assert!(!out.combined.contains("PRIVATE KEY"), "{out:?}");
}

#[tokio::test]
async fn programs_run_under_the_name_they_were_called_by_and_path_lookup_follows_the_contract() {
    // Multi-call programs (`unxz` → xz, busybox applets) choose what to do by argv[0]:
    // the sandbox must execute the resolved file under the name the caller gave.
    if !bwrap_usable() {
        return;
    }
    let lab = lab();
    let shell = lab.sandbox(false).shell(Profile::ReadOnly);
    let mut opts = lab.options(&[]);
    opts.arg0 = Some("called-as".into());
    let out = shell
        .exec(&["/bin/cat".into(), "/proc/self/cmdline".into()], &opts)
        .await
        .unwrap();
    assert_eq!(out.stdout, "called-as\0/proc/self/cmdline\0", "{out:?}");
    // A bare name is looked up in the command's PATH; without one there is no lookup.
    let out = shell
        .exec(&["true".into()], &lab.options(&[]))
        .await
        .unwrap();
    assert_eq!(out.status, caps::ExitStatus::Code(0), "{out:?}");
    let mut no_path = lab.options(&[]);
    no_path.env.remove("PATH");
    let out = shell.exec(&["true".into()], &no_path).await.unwrap();
    assert_eq!(out.status, caps::ExitStatus::Code(127), "{out:?}");
}

#[tokio::test]
async fn nested_paths_cannot_reexpose_what_is_hidden() {
    // A readable parent, a hidden directory inside it, a writable workspace inside that,
    // a read-only path inside the workspace, and /etc readable: each later bind must not
    // uncover what an earlier mount hid, and the read-only path must stay read-only.
    if !bwrap_usable() {
        return;
    }
    let top = tempfile::tempdir().unwrap();
    let top = std::fs::canonicalize(top.path()).unwrap();
    let home = top.join("u");
    let proj = home.join("proj");
    let reference = proj.join("ref");
    std::fs::create_dir_all(&reference).unwrap();
    std::fs::write(home.join("secret"), "HOME-SECRET").unwrap();
    std::fs::write(reference.join("data"), "ref").unwrap();
    let policy = SandboxPolicy {
        writable_paths: vec![proj.clone()],
        readable_extra_paths: vec![top.clone(), reference.clone(), PathBuf::from("/etc")],
        hidden_paths: vec![home.clone()],
        read_only_paths: Vec::new(),
        network: sandbox::Network::Off,
        landlock: LandlockMode::Auto,
    };
    let sb = Arc::new(
        NamespaceSandbox::new(
            policy,
            OpenedProgram::open(lab_helper()).unwrap(),
            &trusted_dirs(),
        )
        .unwrap(),
    );
    let script = format!(
        "cat {home}/secret; cat /etc/shadow; echo w > {proj}/made && echo made-ok; \
         echo x > {reference}/data || echo ref-refused; cat {reference}/data",
        home = home.display(),
        proj = proj.display(),
        reference = reference.display(),
    );
    let opts = ExecOptions::new(&proj, Duration::from_secs(60))
        .with_env("PATH", "/usr/local/bin:/usr/bin:/bin");
    let out = sb
        .shell(Profile::Writable)
        .exec(&["/bin/sh".into(), "-c".into(), script], &opts)
        .await
        .unwrap();
    assert!(!out.combined.contains("HOME-SECRET"), "{out:?}");
    assert!(!out.combined.contains("root:"), "{out:?}");
    assert!(out.stdout.contains("made-ok"), "{out:?}");
    assert!(out.stdout.contains("ref-refused"), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(reference.join("data")).unwrap(),
        "ref"
    );
}

#[test]
fn a_home_outside_home_is_hidden_while_a_workspace_inside_it_works() {
    if !bwrap_usable() {
        return;
    }
    // A service account's home, as CI machines have them (not under /home or /tmp).
    let base = tempfile::Builder::new()
        .prefix("warden-svc-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let home = std::fs::canonicalize(base.path()).unwrap().join("svc");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "HOME-SECRET-KEY").unwrap();
    let ws = home.join("project");
    std::fs::create_dir_all(&ws).unwrap();
    let warden_home = warden_home();
    configure(
        warden_home.path(),
        "[sandbox]\npermission_mode = \"unrestricted\"\n",
        r#"{"version":1}"#,
    );
    let out = warden_in(warden_home.path())
        .env("HOME", &home)
        .args([
            "exec",
            "--shell",
            "cat ../.ssh/id_ed25519; cat \"$HOME/.ssh/id_ed25519\"; ls -a ..; echo ok > made.txt && cat made.txt",
        ])
        .current_dir(&ws)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("HOME-SECRET-KEY"), "{stdout}");
    assert!(!stdout.contains(".ssh"), "{stdout}");
    assert!(
        stdout.contains("ok"),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("made.txt")).unwrap(),
        "ok\n"
    );
}

#[tokio::test]
async fn git_hooks_and_config_stay_read_only_while_commits_work() {
    if !bwrap_usable() {
        return;
    }
    let git = ["/usr/bin/git", "/usr/local/bin/git"]
        .into_iter()
        .find(|g| Path::new(g).exists());
    let Some(git) = git else {
        eprintln!("SKIPPED: git is not installed");
        return;
    };
    let lab = lab();
    let ws = lab.ws();
    assert!(
        Command::new(git)
            .args(["init", "-q"])
            .current_dir(&ws)
            .status()
            .unwrap()
            .success()
    );
    std::fs::write(ws.join("README"), "hello\n").unwrap();
    let hooks_before = std::fs::read_dir(ws.join(".git/hooks")).unwrap().count();
    let config_before = std::fs::read(ws.join(".git/config")).unwrap();
    let out = lab
        .sh(
            Profile::Writable,
            &format!(
                "{git} add README probe && {git} -c user.name=w -c user.email=w@example.invalid commit -q -m first && echo COMMITTED; \
                 echo 'echo pwned' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; \
                 {git} config core.hooksPath /tmp/evil; echo '[alias]' >> .git/config"
            ),
        )
        .await;
    assert!(out.stdout.contains("COMMITTED"), "{out:?}");
    assert!(
        out.stderr.contains("Read-only file system") || out.stderr.contains("Permission denied"),
        "{out:?}"
    );
    assert_eq!(
        std::fs::read_dir(ws.join(".git/hooks")).unwrap().count(),
        hooks_before
    );
    assert!(!ws.join(".git/hooks/pre-commit").exists());
    assert_eq!(
        std::fs::read(ws.join(".git/config")).unwrap(),
        config_before
    );
    let log = Command::new(git)
        .args(["log", "--oneline"])
        .current_dir(&ws)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&log.stdout).contains("first"));
}

#[tokio::test]
async fn a_writable_run_cannot_redirect_git_to_planted_hooks() {
    if !bwrap_usable() {
        return;
    }
    let Some(git) = ["/usr/bin/git", "/usr/local/bin/git"]
        .into_iter()
        .find(|g| Path::new(g).exists())
    else {
        eprintln!("SKIPPED: git is not installed");
        return;
    };
    let lab = lab();
    let ws = lab.ws();
    let host_git = |args: &[&str]| {
        Command::new(git)
            .args(args)
            .current_dir(&ws)
            .output()
            .unwrap()
    };
    assert!(host_git(&["init", "-q"]).status.success());
    // A husky-style hooks directory inside the workspace.
    assert!(
        host_git(&["config", "core.hooksPath", ".githooks"])
            .status
            .success()
    );
    std::fs::create_dir_all(ws.join(".githooks")).unwrap();
    std::fs::write(ws.join(".githooks/pre-commit"), "#!/bin/sh\nexit 0\n").unwrap();
    let marker = lab.state.path().join("hook-ran");
    let evil = format!("#!/bin/sh\necho ran > {}\n", marker.display());
    let out = lab
        .sh(
            Profile::Writable,
            &format!(
                "mkdir -p evil/hooks; printf '{evil}' > evil/hooks/pre-commit; chmod +x evil/hooks/pre-commit; \
                 printf '[core]\\n\\thooksPath = evil/hooks\\n' > evil/config; \
                 echo ../evil > .git/commondir && echo PLANTED; \
                 mv .git .git-moved || echo RENAME-REFUSED; \
                 printf '{evil}' > .githooks/pre-commit || echo HOOKSPATH-READ-ONLY; \
                 echo data > tracked.txt && echo WRITES-WORK"
            ),
        )
        .await;
    for expected in [
        "PLANTED",
        "RENAME-REFUSED",
        "HOOKSPATH-READ-ONLY",
        "WRITES-WORK",
    ] {
        assert!(out.stdout.contains(expected), "{expected}: {out:?}");
    }
    // The planted redirection was moved aside when the run ended, and the run says so.
    assert!(!ws.join(".git/commondir").exists());
    assert!(
        out.stderr.contains("commondir was created by the command"),
        "{out:?}"
    );
    let quarantined = std::fs::read_dir(ws.join(".git"))
        .unwrap()
        .flatten()
        .any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("commondir.warden-quarantined-")
        });
    assert!(quarantined);
    assert!(ws.join(".git/HEAD").exists() && !ws.join(".git-moved").exists());
    // The user's next commit on the host runs none of the planted code.
    assert!(host_git(&["add", "tracked.txt"]).status.success());
    let commit = host_git(&[
        "-c",
        "user.name=u",
        "-c",
        "user.email=u@example.invalid",
        "commit",
        "-q",
        "-m",
        "after",
    ]);
    assert!(commit.status.success(), "{commit:?}");
    assert!(!marker.exists(), "a planted hook ran on the host");
}

#[tokio::test]
async fn descendants_die_with_the_sandbox_even_if_they_leave_the_session() {
    if !bwrap_usable() {
        return;
    }
    let lab = lab();
    let shell = lab.sandbox(false).shell(Profile::Writable);
    let mut options = lab.options(&[]);
    options.timeout = Duration::from_millis(800);
    let started = Instant::now();
    let out = shell
        .exec(
            &[
                "/bin/sh".into(),
                "-c".into(),
                "setsid sleep 313 & (trap '' TERM; sleep 313) & sleep 313".into(),
            ],
            &options,
        )
        .await
        .unwrap();
    assert!(out.timed_out);
    assert!(started.elapsed() < Duration::from_secs(20));
    for pid in support::pids_with_cmdline("sleep 313") {
        assert!(wait_gone(pid), "sleep {pid} outlived the sandbox");
    }
}

#[test]
fn fails_closed_when_bubblewrap_is_missing_or_cannot_build_namespaces() {
    // Always runs: absence is simulated.
    let empty = tempfile::tempdir().unwrap();
    let policy = SandboxPolicy::default();
    let err = NamespaceSandbox::new(
        policy.clone(),
        OpenedProgram::open(Path::new("/bin/true")).unwrap(),
        &[empty.path().to_path_buf()],
    )
    .unwrap_err();
    assert!(
        err.0.contains("bubblewrap") && err.0.contains("not found"),
        "{err}"
    );
    // A bwrap that cannot create namespaces (as when user namespaces are disabled).
    let fake = tempfile::tempdir().unwrap();
    let fake_bwrap = fake.path().join("bwrap");
    std::fs::write(
        &fake_bwrap,
        "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(
        &fake_bwrap,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let err = sandbox::probe::namespaces_work(&fake_bwrap)
        .unwrap_err()
        .to_string();
    assert!(err.contains("namespaces"), "{err}");
    // A bwrap others can replace is not trusted.
    std::fs::set_permissions(
        &fake_bwrap,
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let err = sandbox::namespace::find_bwrap(&[fake.path().to_path_buf()]).unwrap_err();
    assert!(
        err.0.contains("writable by group or others") || err.0.contains("not owned by root"),
        "{err}"
    );
    // Landlock required on a kernel without it is refused (simulated, so on any kernel).
    let required = SandboxPolicy {
        landlock: LandlockMode::Required,
        ..SandboxPolicy::default()
    };
    let err = NamespaceSandbox::for_landlock_abi(
        required,
        OpenedProgram::open(Path::new("/bin/true")).unwrap(),
        &trusted_dirs(),
        0,
    )
    .unwrap_err();
    assert!(err.0.contains("Landlock is required"), "{err}");
}

#[test]
fn warden_exec_refuses_when_bubblewrap_is_hidden() {
    // Simulate a machine without bubblewrap: a private mount namespace where the binary
    // is covered by an empty file. Needs root (mount); otherwise the library-level test
    // above covers the same refusal. The configuration asks for bubblewrap: by default
    // (`auto`) Warden's own builder would build the sandbox without it.
    if !nix::unistd::geteuid().is_root() || !Path::new("/usr/bin/unshare").exists() {
        eprintln!("SKIPPED: needs root and unshare(1) to hide bubblewrap in a mount namespace");
        return;
    }
    let home = warden_home();
    std::fs::write(
        home.path().join("config.toml"),
        "[sandbox]\nbuilder = \"bubblewrap\"\n",
    )
    .unwrap();
    let warden = env!("CARGO_BIN_EXE_warden");
    let out = Command::new("/usr/bin/unshare")
        .args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "for b in /usr/bin/bwrap /bin/bwrap; do [ -e $b ] && mount --bind /dev/null $b; done; exec {warden} exec -- /bin/echo ran"
        ))
        .env("WARDEN_HOME", home.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(77),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ran"));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no sandbox backend is available"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `warden doctor` gives the same diagnosis and says what it means.
    let out = Command::new("/usr/bin/unshare")
        .args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "for b in /usr/bin/bwrap /bin/bwrap; do [ -e $b ] && mount --bind /dev/null $b; done; exec {warden} doctor"
        ))
        .env("WARDEN_HOME", home.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("NO  bubblewrap"), "{text}");
    assert!(
        text.contains("every host=sandbox exec is refused"),
        "{text}"
    );
}

#[test]
fn doctor_reports_what_this_machine_can_do() {
    if !bwrap_usable() {
        return;
    }
    let home = warden_home();
    let out = warden_in(home.path())
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let check = |name: &str| {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no {name} check in {v}"))
            .clone()
    };
    for name in ["bubblewrap", "user namespaces", "fresh /proc", "seccomp"] {
        assert_eq!(check(name)["ok"], true, "{name}: {v}");
    }
    assert!(
        check("bubblewrap")["detail"]
            .as_str()
            .unwrap()
            .contains("bubblewrap 0."),
        "the version is reported: {v}"
    );
    assert_eq!(v["landlockAbi"], sandbox::landlock::abi());
    assert_eq!(
        check("write watch")["ok"],
        sandbox::watch::available().is_ok()
    );
    assert_eq!(v["hosts"]["sandbox"]["available"], true, "{v}");
    assert_eq!(v["hosts"]["node"]["available"], false);
    // How this very `warden` starts, read here from its program headers: the test runs
    // with cargo's (dynamically linked) and, in CI, once more with a static one.
    let warden = std::fs::canonicalize(env!("CARGO_BIN_EXE_warden")).unwrap();
    let program = check("warden program")["detail"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        program.starts_with(&format!("{} (", warden.display())),
        "{program}"
    );
    let linked = if has_interpreter(&warden) {
        "dynamically linked, through /"
    } else {
        "statically linked"
    };
    assert!(program.contains(linked), "{program}");
}

/// Whether the ELF file at `path` names a dynamic loader (a `PT_INTERP` program header).
fn has_interpreter(path: &Path) -> bool {
    const PT_INTERP: u32 = 3;
    let elf = std::fs::read(path).unwrap();
    assert_eq!(&elf[..5], b"\x7fELF\x02", "a 64-bit ELF file");
    let word = |at: usize| u16::from_le_bytes([elf[at], elf[at + 1]]) as usize;
    let phoff = u64::from_le_bytes(elf[0x20..0x28].try_into().unwrap()) as usize;
    let (phentsize, phnum) = (word(0x36), word(0x38));
    (0..phnum).any(|i| {
        let at = phoff + i * phentsize;
        u32::from_le_bytes(elf[at..at + 4].try_into().unwrap()) == PT_INTERP
    })
}

#[test]
fn permission_modes_through_warden_exec() {
    if !bwrap_usable() {
        return;
    }
    // Each way `warden exec` starts the sandbox: through its companion (the sandbox's
    // pid 1 made ahead of time, in its namespaces) and without one (the helper binary
    // executed, making them itself).
    for companion in ["on", "off"] {
        permission_modes_with_companion(companion);
    }
}

fn permission_modes_with_companion(companion: &str) {
    let home = warden_home();
    let ws = tempfile::tempdir().unwrap();
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    let exec = |mode: &str, script: &str| {
        configure(
            home.path(),
            &format!("[sandbox]\npermission_mode = \"{mode}\"\n"),
            r#"{"version":1}"#,
        );
        warden_in(home.path())
            .env("WARDEN_COMPANION", companion)
            .args(["exec", "--shell", script])
            .current_dir(&ws_path)
            .output()
            .unwrap()
    };
    // Which way it started, where the builder runs the sandbox (the standby pid 1's name).
    if builder_in_use() {
        let out = exec("readonly", "cat /proc/1/comm");
        let pid1 = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert_eq!(
            pid1 == "warden-pid1",
            companion == "on",
            "pid 1 is {pid1:?}"
        );
    }
    // readonly: the workspace is read-only.
    let out = exec("readonly", "echo a > a.txt");
    assert_ne!(out.status.code(), Some(0));
    assert!(!ws_path.join("a.txt").exists());
    // approval without an approver: the write is rejected, nothing retried; the exit code
    // says nobody answered (75), as for any unanswered ask.
    let out = exec("approval", "echo b > b.txt");
    assert_eq!(
        out.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("rejected"));
    assert!(!ws_path.join("b.txt").exists());
    // approval: a command that only *says* a write was refused is not retried (the kernel
    // reports refused writes; the text is not trusted where the kernel can tell).
    let out = exec(
        "approval",
        "echo 'sh: 1: cannot create x: Read-only file system' >&2; exit 2",
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // approval, reading only: no approval needed.
    std::fs::write(ws_path.join("in.txt"), "data").unwrap();
    let out = exec("approval", "cat in.txt");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "data");
    // unrestricted: writes directly, still sandboxed.
    let out = exec(
        "unrestricted",
        "echo c > c.txt && cat /proc/self/status | grep CapEff",
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        std::fs::read_to_string(ws_path.join("c.txt")).unwrap(),
        "c\n"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("0000000000000000"));
}

/// What a command sees of the mount table is the sandbox's tree alone: its root the
/// read-only clone of the host's (never the private tmpfs the tree was built on), and
/// nothing of the build left reachable — no `/oldroot` with the host's whole tree under
/// it, no `/newroot` — whichever way the sandbox was started: `warden exec` through its
/// companion (a standby pid 1 that began the tree ahead of its run), without one, and
/// the sandbox run in-process (through bubblewrap in CI's second run).
#[tokio::test]
async fn the_command_sees_the_sandbox_tree_and_nothing_of_how_it_was_built() {
    if !bwrap_usable() {
        return;
    }
    fn check(how: &str, mountinfo: &str) {
        let mut roots = 0;
        for line in mountinfo.lines() {
            // mountinfo: id, parent, major:minor, root, mount point, options, …
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert!(fields.len() > 5, "{how}: {line}");
            let point = fields[4];
            for built in ["/oldroot", "/newroot"] {
                assert!(
                    point != built && !point.starts_with(&format!("{built}/")),
                    "{how}: the build's {built} is still mounted: {line}"
                );
            }
            if point == "/" {
                roots += 1;
                assert!(
                    fields[5].split(',').any(|o| o == "ro"),
                    "{how}: the root is not the read-only clone: {line}"
                );
                let source_type = line.split(" - ").nth(1).unwrap_or_default();
                assert!(
                    !source_type.starts_with("tmpfs "),
                    "{how}: the root is the build's tmpfs: {line}"
                );
            }
        }
        assert_eq!(roots, 1, "{how}: {mountinfo}");
    }
    let lab = lab();
    let out = lab.sh(Profile::ReadOnly, "cat /proc/self/mountinfo").await;
    assert_eq!(out.status, caps::ExitStatus::Code(0), "{out:?}");
    check("in process", &out.stdout);
    for (companion, stdout) in
        exec_with_and_without_companion(&lab.ws(), &["/bin/cat", "/proc/self/mountinfo"])
    {
        check(&format!("warden exec, companion {companion}"), &stdout);
    }
}

/// `warden exec -- ARGV` in `cwd` from a home with the read-only profile, through its
/// companion (pid 1 a standby made ahead) and without one: each way's stdout, the run
/// having succeeded.
fn exec_with_and_without_companion(cwd: &Path, argv: &[&str]) -> Vec<(&'static str, String)> {
    let home = warden_home();
    configure(
        home.path(),
        "[sandbox]\npermission_mode = \"readonly\"\n",
        r#"{"version":1}"#,
    );
    ["on", "off"]
        .into_iter()
        .map(|companion| {
            let out = warden_in(home.path())
                .env("WARDEN_COMPANION", companion)
                .arg("exec")
                .arg("--")
                .args(argv)
                .current_dir(cwd)
                .output()
                .unwrap();
            assert_eq!(
                out.status.code(),
                Some(0),
                "companion {companion}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            (companion, String::from_utf8_lossy(&out.stdout).into_owned())
        })
        .collect()
}

/// Through `warden exec`, with its companion (pid 1 a standby that emptied its bounding
/// set while it waited, before the run's mounts) and without one: the command and pid 1
/// hold no capability in any set — bounding set included, so no program either of them
/// executes gains one — and cannot gain privileges.
#[test]
fn through_warden_exec_the_command_and_pid_1_hold_no_capability_in_any_set() {
    if !bwrap_usable() {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let grep = [
        "/bin/grep",
        "-E",
        "^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):",
        "/proc/self/status",
        "/proc/1/status",
    ];
    for (companion, stdout) in exec_with_and_without_companion(ws.path(), &grep) {
        let fields: Vec<(&str, &str)> = stdout
            .lines()
            .filter_map(|l| l.rsplit_once(':'))
            .map(|(k, v)| (k, v.trim()))
            .collect();
        assert_eq!(fields.len(), 12, "companion {companion}: {stdout}");
        for (name, value) in fields {
            let expected = if name.ends_with("NoNewPrivs") {
                "1"
            } else {
                "0000000000000000"
            };
            assert_eq!(value, expected, "companion {companion}, {name}: {stdout}");
        }
    }
}

#[test]
fn direct_mode_is_explicit_and_reverts_after_its_ttl() {
    if !bwrap_usable() {
        return;
    }
    let home = warden_home();
    configure(
        home.path(),
        "[sandbox]\npermission_mode = \"unrestricted\"\n",
        r#"{"version":1}"#,
    );
    let caps_inside = || {
        let out = warden_in(home.path())
            .args([
                "exec",
                "--json",
                "--",
                "grep",
                "CapEff",
                "/proc/self/status",
            ])
            .output()
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    assert_eq!(caps_inside()["host"], "sandbox");
    let out = warden_in(home.path())
        .args(["sandbox", "direct", "--ttl", "2s"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("direct mode ON"));
    assert_eq!(caps_inside()["host"], "direct");
    std::thread::sleep(Duration::from_millis(2200));
    assert_eq!(
        caps_inside()["host"],
        "sandbox",
        "direct mode must end by itself"
    );
    let out = warden_in(home.path())
        .args(["sandbox", "direct", "--ttl", "48h"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "TTLs are bounded");
    // A switch file written by hand is believed only within the same bounds, and only
    // when nobody but the user could have written it.
    let switch = home.path().join("direct-mode.json");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    std::fs::write(
        &switch,
        format!("{{\"until\": {}}}", now_ms + 30 * 24 * 3600 * 1000),
    )
    .unwrap();
    assert_eq!(caps_inside()["host"], "sandbox", "beyond the longest TTL");
    std::fs::write(&switch, format!("{{\"until\": {}}}", now_ms + 600_000)).unwrap();
    std::fs::set_permissions(&switch, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    assert_eq!(caps_inside()["host"], "sandbox", "writable by others");
    std::fs::set_permissions(&switch, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    assert_eq!(
        caps_inside()["host"],
        "direct",
        "a private, bounded switch is honoured"
    );
}

#[test]
fn approval_mode_asks_after_a_refused_write_and_retries_once_writable() {
    use std::io::{BufRead, BufReader, Write};
    if !bwrap_usable() {
        return;
    }
    let home = warden_home();
    configure(
        home.path(),
        "[sandbox]\npermission_mode = \"approval\"\n",
        r#"{"version":1}"#,
    );
    let ws = tempfile::tempdir().unwrap();
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    let mut ui = warden_in(home.path())
        .args(["approvals", "ui"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(ui.stdout.take().unwrap()).lines();
    assert!(lines.next().unwrap().unwrap().contains("listening"));
    let runner = {
        let home = home.path().to_path_buf();
        let ws_path = ws_path.clone();
        std::thread::spawn(move || {
            warden_in(&home)
                .args(["exec", "--shell", "echo approved > out.txt && echo done"])
                .current_dir(&ws_path)
                .output()
                .unwrap()
        })
    };
    let mut prompt = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let done = line.starts_with("digest:");
        prompt.push(line);
        if done {
            break;
        }
    }
    let prompt = prompt.join("\n");
    assert!(prompt.contains("(a write permission)"), "{prompt}");
    // The kernel told us which write was refused, and the human sees it.
    assert!(
        prompt.contains(&ws_path.join("out.txt").display().to_string()),
        "{prompt}"
    );
    assert!(prompt.contains("re-runs writable"), "{prompt}");
    let stdin = ui.stdin.as_mut().unwrap();
    stdin.write_all(b"o\n").unwrap();
    stdin.flush().unwrap();
    let out = runner.join().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "done\n",
        "the tool result is the retry's, not the refused run's"
    );
    assert_eq!(
        std::fs::read_to_string(ws_path.join("out.txt")).unwrap(),
        "approved\n"
    );
    drop(ui.stdin.take());
    ui.wait().unwrap();
}

#[tokio::test]
async fn the_watched_profile_reports_refused_writes_as_the_kernel_saw_them() {
    if !bwrap_usable() {
        return;
    }
    if let Err(why) = sandbox::watch::available() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let lab = lab();
    let ws = lab.ws();
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    std::fs::write(ws.join("exists.txt"), "old").unwrap();
    let sandbox = lab.sandbox(false);
    let watched = sandbox.watched_shell();
    let run = |script: &str| {
        let watched = watched.clone();
        let options = lab.options(&[]);
        let argv: Vec<String> = vec!["/bin/sh".into(), "-c".into(), script.into()];
        async move { watched.exec(&argv, &options).await.unwrap() }
    };
    // Writes beneath the workspace are reported (relative, through `cd`, by directory
    // and by rename); writes the writable profile would refuse too are not; /tmp works.
    let out = run(
        "echo x > a.txt; mkdir d; (cd sub && echo y > ../b.txt); mv exists.txt moved.txt; \
         echo h > .git/hooks/pre-commit; echo e > /etc/warden-test; \
         echo t > /tmp/t && cat /tmp/t; cat exists.txt; exit 3",
    )
    .await;
    assert_eq!(out.status, caps::ExitStatus::Code(3), "{}", out.combined);
    assert!(out.stdout.contains("t\nold"), "{}", out.combined);
    assert_eq!(
        out.refused_writes,
        RefusedWrites::Refused(vec![
            ws.join("a.txt"),
            ws.join("d"),
            ws.join("b.txt"),
            ws.join("exists.txt"),
            ws.join("moved.txt"),
        ]),
        "{}",
        out.combined
    );
    assert!(!ws.join("a.txt").exists() && ws.join("exists.txt").exists());
    // Writes through descriptors and /proc/self are attributed to the file.
    std::fs::write(ws.join("fd.txt"), "x").unwrap();
    let probe = vec![
        lab.probe.to_string_lossy().into_owned(),
        "--exact".into(),
        "probe_main".into(),
        "--nocapture".into(),
        "-q".into(),
    ];
    let out = watched
        .exec(&probe, &lab.options(&[("WARDEN_PROBE", "fd-writes")]))
        .await
        .unwrap();
    let erofs = libc::EROFS.to_string();
    for call in ["fchmod", "fsetxattr", "chmod_proc_self"] {
        assert!(
            out.stdout.contains(&format!("PROBE {call}={erofs}")),
            "{call}: {}",
            out.combined
        );
    }
    assert_eq!(
        out.refused_writes,
        RefusedWrites::Refused(vec![ws.join("fd.txt")]),
        "{}",
        out.combined
    );
    // Printing the message is not a refused write.
    let out = run("echo 'Read-only file system' >&2; exit 1").await;
    assert_eq!(out.status, caps::ExitStatus::Code(1));
    assert_eq!(out.refused_writes, RefusedWrites::None);
    // Opening with O_CREAT an existing file for reading is not a write.
    let out = run("cat exists.txt >/dev/null; exec 3<>/dev/null; exit 0").await;
    assert_eq!(out.refused_writes, RefusedWrites::None, "{}", out.combined);
    // The observer is out of the command's reach: it cannot open the observer's
    // descriptors (it cannot forge the report through /proc), and its own table is clean.
    let out = run("ls /proc/self/fd; \
         for f in /proc/$PPID/fd/*; do \
           echo '{\"refused\":\"/forged\"}' > $f 2>/dev/null && echo OPENED $f; \
         done; readlink /proc/$PPID/fd/0 || echo hidden")
    .await;
    assert!(out.stdout.starts_with("0\n1\n2\n3\n"), "{}", out.combined);
    assert!(!out.stdout.contains("\n4\n"), "{}", out.combined);
    assert!(!out.stdout.contains("OPENED"), "{}", out.combined);
    assert!(out.stdout.contains("hidden"), "{}", out.combined);
    assert_eq!(out.refused_writes, RefusedWrites::None, "{}", out.combined);
    // Statuses pass through the observer unchanged, signals included.
    let plain = sandbox.shell(Profile::ReadOnly);
    let argv: Vec<String> = vec!["/bin/sh".into(), "-c".into(), "kill -TERM $$".into()];
    let a = plain.exec(&argv, &lab.options(&[])).await.unwrap();
    let b = watched.exec(&argv, &lab.options(&[])).await.unwrap();
    assert_eq!(a.status, b.status);
    assert_eq!(
        a.refused_writes,
        RefusedWrites::NotWatched,
        "an unwatched shell reports nothing"
    );
}

/// The ignored signals of the process that printed `status` (`/proc/self/status`).
fn ignored_signals(status: &str) -> u64 {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .unwrap_or_else(|| panic!("no SigIgn line in {status:?}"));
    u64::from_str_radix(hex.trim(), 16).unwrap()
}

#[test]
fn commands_start_with_sigpipe_at_its_default_wherever_they_run() {
    // Warden's helpers are Rust programs, whose runtime ignores SIGPIPE — and an ignored
    // signal stays ignored across exec. A command must not inherit that: a pipeline
    // whose reader ends early (`yes | head -1`) ends quietly, as it does outside Warden.
    // Every way a command is started: the sandbox's plain exec (readonly), its watched
    // first run (approval: the helper forks), the writable profile, the subreaper
    // containment, and the gateway host.
    if !bwrap_usable() {
        return;
    }
    let home = warden_home();
    let ws = tempfile::tempdir().unwrap();
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    let script = "yes | head -1; cat /proc/self/status";
    let sigpipe = 1u64 << (nix::libc::SIGPIPE - 1);
    let cases: [(&str, &str, &[&str], Option<&str>); 5] = [
        ("sandbox, readonly", "readonly", &[], None),
        ("sandbox, approval (watched)", "approval", &[], None),
        ("sandbox, unrestricted", "unrestricted", &[], None),
        ("sandbox, subreaper", "readonly", &[], Some("subreaper")),
        (
            "gateway host, subreaper",
            "readonly",
            &["--host", "gateway"],
            Some("subreaper"),
        ),
    ];
    for (what, mode, extra, containment) in cases {
        configure(
            home.path(),
            &format!(
                "[tools.exec]\nsecurity = \"full\"\nask = \"off\"\n\
                 [sandbox]\npermission_mode = \"{mode}\"\n"
            ),
            r#"{"version":1,"defaults":{"security":"full","ask":"off"}}"#,
        );
        let mut cmd = warden_in(home.path());
        cmd.arg("exec").args(extra).args(["--shell", script]);
        if let Some(c) = containment {
            cmd.env("WARDEN_CONTAINMENT", c);
        }
        let out = cmd.current_dir(&ws_path).output().unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(out.status.code(), Some(0), "{what}: {stderr}");
        assert!(stdout.starts_with("y\n"), "{what}: {stdout}");
        assert!(!stderr.contains("Broken pipe"), "{what}: {stderr}");
        let ignored = ignored_signals(&stdout);
        assert_eq!(ignored & sigpipe, 0, "{what}: SigIgn {ignored:#x}");
    }
}

/// A server (`warden mcp`) starts its sandboxed runs through its companion, and keeps the
/// sandbox's pid 1 made ahead for EVERY run, not only the first: each of several calls in
/// a row runs in a pid 1 made ahead (`warden-pid1`); with the companion off, none does.
#[test]
fn a_server_keeps_a_sandbox_pid_1_ready_for_every_run() {
    use std::io::{BufRead, BufReader, Write};
    if !bwrap_usable() || !builder_in_use() {
        eprintln!("SKIPPED: needs Warden's own builder (user namespaces) here");
        return;
    }
    for companion in ["on", "off"] {
        let home = warden_home();
        configure(
            home.path(),
            "[sandbox]\npermission_mode = \"readonly\"\n",
            r#"{"version":1}"#,
        );
        let ws = tempfile::tempdir().unwrap();
        let mut server = warden_in(home.path())
            .env("WARDEN_COMPANION", companion)
            .args(["mcp", "--agent", "coder", "--session", "s1", "--workspace"])
            .arg(ws.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = server.stdin.take().unwrap();
        let mut lines = BufReader::new(server.stdout.take().unwrap()).lines();
        let mut ask = |id: u64, line: serde_json::Value, then: Option<&str>| {
            writeln!(stdin, "{line}").unwrap();
            stdin.flush().unwrap();
            let answer = loop {
                let v: serde_json::Value =
                    serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
                if v["id"] == id {
                    break v;
                }
            };
            if let Some(notification) = then {
                writeln!(stdin, "{notification}").unwrap();
            }
            answer
        };
        ask(
            0,
            serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"}}}),
            Some(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
        );
        for id in 1..=4 {
            let v = ask(
                id,
                serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
                    "name": "exec", "arguments": {"command": "cat /proc/1/comm"}}}),
                None,
            );
            let result = &v["result"]["structuredContent"];
            assert_eq!(result["exitCode"], 0, "{v}");
            let pid1 = result["stdout"].as_str().unwrap().trim();
            assert_eq!(
                pid1 == "warden-pid1",
                companion == "on",
                "companion {companion}, call {id}: pid 1 is {pid1:?}"
            );
        }
        drop(stdin);
        assert!(server.wait().unwrap().success());
    }
}

/// The helper the lab's sandboxes run: `warden` itself (what Warden runs where the small
/// helper is not installed), or with WARDEN_TEST_HELPER=small the small helper next to it
/// (`cargo xtask ci` runs this file so with the helper built for musl).
fn lab_helper() -> &'static Path {
    if small_helper_under_test() {
        Path::new(env!("CARGO_BIN_EXE_warden-sandbox-helper"))
    } else {
        Path::new(env!("CARGO_BIN_EXE_warden"))
    }
}

/// Whether this run tests the small helper (WARDEN_TEST_HELPER=small).
fn small_helper_under_test() -> bool {
    std::env::var("WARDEN_TEST_HELPER").as_deref() == Ok("small")
}

/// Whether `warden exec` builds the sandbox with Warden's own builder here (as
/// `sandbox.builder = "auto"` does where its probe succeeds). When the small helper is
/// under test, its builder failing where `warden`'s works is a failure, not a skip.
fn builder_in_use() -> bool {
    let small = Path::new(env!("CARGO_BIN_EXE_warden-sandbox-helper"));
    match sandbox::probe::builder_works(small) {
        Ok(()) => true,
        Err(e) => {
            let warden = Path::new(env!("CARGO_BIN_EXE_warden"));
            assert!(
                !(small_helper_under_test() && sandbox::probe::builder_works(warden).is_ok()),
                "the small helper's builder fails where warden's works: {e}"
            );
            false
        }
    }
}

/// Warden's builder, started as the pid 1 of a new pid namespace, takes it that whoever
/// started it made the sandbox's namespaces (the companion does: no launcher then) — and
/// checks: a user namespace of its own, and every other namespace the command line needs
/// made with it. Started so with any of them missing, it refuses, and the command does
/// not run. (util-linux's `unshare` makes the partial sets.)
#[test]
fn the_warden_builder_born_as_pid_1_refuses_namespaces_it_was_not_given() {
    if !builder_in_use() {
        eprintln!("SKIPPED: Warden's own builder cannot run here");
        return;
    }
    let helper = env!("CARGO_BIN_EXE_warden-sandbox-helper");
    let builder = [
        helper,
        "__sandbox-build",
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-net",
        "--ro-bind",
        "/",
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--",
        helper,
        "__sandbox-helper",
        "--landlock",
        "off",
        "--",
        "/bin/echo",
        "ran",
    ];
    let run = |namespaces: &[&str]| {
        let out = std::process::Command::new("unshare")
            .args(namespaces)
            .arg("--fork")
            .args(builder)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (namespaces, why) in [
        (&["--pid"][..], "not in a new user namespace"),
        (
            &["--user", "--map-current-user", "--pid"][..],
            "mnt namespace was not made",
        ),
        (
            &[
                "--user",
                "--map-current-user",
                "--pid",
                "--mount",
                "--ipc",
                "--uts",
            ][..],
            "net namespace was not made",
        ),
    ] {
        let (code, stdout, stderr) = run(namespaces);
        assert_eq!(code, Some(125), "{namespaces:?}: {stderr}");
        assert!(stderr.contains(why), "{namespaces:?}: {stderr}");
        assert!(!stdout.contains("ran"), "{namespaces:?}: {stdout}");
    }
    // Given all of them, it builds the sandbox and runs the command.
    let (code, stdout, stderr) = run(&[
        "--user",
        "--map-current-user",
        "--pid",
        "--mount",
        "--ipc",
        "--uts",
        "--net",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(stdout, "ran\n");
}

/// Warden's own builder binds what Warden opened and checked, or nothing: a directory
/// that is gone by the time the namespaces are made (its descriptor names a deleted
/// path) is refused, and the command does not run.
#[test]
fn the_warden_builder_refuses_a_bound_directory_that_vanished() {
    let helper = env!("CARGO_BIN_EXE_warden-sandbox-helper");
    let dir = tempfile::tempdir().unwrap();
    let bound = dir.path().join("bound");
    std::fs::create_dir(&bound).unwrap();
    let line = |remove_first: bool| {
        format!(
            "exec 3< {bound}; {remove} exec {helper} __sandbox-build --unshare-user \\
             --unshare-pid --unshare-ipc --unshare-uts --unshare-net --ro-bind / / \\
             --proc /proc --dev /dev --ro-bind-fd 3 /mnt -- {helper} __sandbox-helper \\
             --landlock off -- /bin/echo ran",
            bound = bound.display(),
            remove = if remove_first {
                format!("rmdir {};", bound.display())
            } else {
                String::new()
            },
        )
    };
    let run = |script: String| {
        std::process::Command::new("/bin/sh")
            .args(["-c", &script])
            .output()
            .unwrap()
    };
    let out = run(line(true));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("warden sandbox:") && stderr.contains("open again"),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ran"));
    // The same line with the directory in place runs the command.
    std::fs::create_dir(&bound).unwrap();
    let out = run(line(false));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
}

/// A standby pid 1 made ahead starts the sandbox's tree while it waits (tmpfs mounts its
/// run's command will have): the user's other processes cannot reach that tree through
/// `/proc/PID/root` — the standby is not dumpable, as pid 1 makes itself once built.
/// (Before, its root, then still the host's tree, was reachable.) Warden runs as
/// another user here, so that reaching in needs no privilege.
#[test]
fn a_standby_pid_1_is_not_reachable_through_proc_while_it_waits() {
    if !bwrap_usable() || !builder_in_use() {
        eprintln!("SKIPPED: needs Warden's own builder (user namespaces) here");
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: needs root, to run Warden as another user");
        return;
    }
    let as_nobody = || {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]);
        cmd
    };
    let warden = env!("CARGO_BIN_EXE_warden");
    if !as_nobody()
        .args(["test", "-x", warden])
        .status()
        .unwrap()
        .success()
    {
        eprintln!("SKIPPED: {warden} cannot be run by another user from here");
        return;
    }
    let owned = || {
        let dir = warden_home();
        nix::unistd::chown(
            dir.path(),
            Some(nix::unistd::Uid::from_raw(65534)),
            Some(nix::unistd::Gid::from_raw(65534)),
        )
        .unwrap();
        dir
    };
    let (home, ws) = (owned(), owned());
    let mut server = as_nobody()
        .arg(warden)
        .args(["mcp", "--workspace"])
        .arg(ws.path())
        .env_clear()
        .env("HOME", home.path())
        .env("WARDEN_HOME", home.path())
        .env("PATH", "/usr/bin:/bin")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The standby: Warden's child (the companion clones it with CLONE_PARENT), named so.
    let standby_of = |parent: u32| {
        std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (name, rest) = stat.split_once(" (")?.1.rsplit_once(") ")?;
            let ppid: u32 = rest.split_whitespace().nth(1)?.parse().ok()?;
            (name == "warden-pid1" && ppid == parent).then_some(pid)
        })
    };
    let reach = |pid: u32, what: &str| {
        as_nobody()
            .args(["ls", &format!("/proc/{pid}/{what}/")])
            .output()
            .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = None;
    while Instant::now() < deadline {
        if let Some(pid) = standby_of(server.id()) {
            let out = reach(pid, "root");
            last = Some((pid, out.clone()));
            // It is made dumpable no longer before its first mount: once refused, always.
            if !out.status.success() {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Nor by its working directory or its descriptors (the tree's, while it builds).
    let others = last
        .as_ref()
        .map(|(pid, _)| ["cwd", "fd"].map(|what| (what, reach(*pid, what))));
    drop(server.stdin.take());
    let _ = server.wait();
    let (pid, out) = last.expect("no standby pid 1 appeared");
    for (what, out) in others.into_iter().flatten() {
        assert!(
            !out.status.success(),
            "another process of Warden's user listed /proc/{pid}/{what}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    assert!(
        !out.status.success(),
        "another process of Warden's user listed the standby's root /proc/{pid}/root: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
