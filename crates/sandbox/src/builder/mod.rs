//! Warden's own namespace builder: the sandbox bubblewrap builds, built by the helper
//! binary itself (`sandbox.builder = "warden"`), without bubblewrap's process, its exec of
//! the helper, or its re-reads of the mount table.
//!
//! It takes the same command line Warden writes for bubblewrap (parsed strictly by
//! `spec.rs`: the subset Warden uses, nothing else) and builds the same sandbox:
//!
//! 1. **The launcher** — only when the builder was started as a program in the host's
//!    namespaces (by `posix_spawn`, where Warden has no companion): notes what each bound
//!    descriptor is, makes new user, mount, pid, ipc, uts and (unless the network is
//!    allowed) network namespaces, maps the caller's uid and gid to themselves, forks the
//!    sandbox's pid 1, and exits with its status. It dies with Warden. Started by Warden's
//!    companion (`caps::process::start_companion`), the builder is *born* as pid 1 of
//!    those namespaces (`caps::process::ProcessSpec::born_in`, asked for by
//!    `NamespaceSandbox::born_in`): there is no launcher, and pid 1 checks that every namespace its
//!    command line needs was made (`check_namespaces`); a standby may have done that, and
//!    made the plan's first mounts, while it waited (`standby.rs`).
//! 2. **pid 1** builds the filesystem (`fs.rs`), brings the loopback interface up in a new
//!    network namespace (in `proxy` mode also binding the DNS stub's privileged port,
//!    `crate::egress::dns`, for the command's process to hand over), drops every capability, makes itself non-dumpable (the command,
//!    the same user, cannot reach its descriptors), forks the command's process and reaps
//!    whatever is left to it — in a watched run it is also the write watch's observer
//!    (`crate::watch::observe_as_pid1`). When the command's process ends it reports the
//!    status (`--json-status-fd`, before the sandbox is torn down: Warden need not wait
//!    for that) and exits with it, and the kernel kills everything else in the namespace.
//!    It dies with Warden (or with the launcher, which drops its capabilities once pid 1
//!    is started, and only waits).
//! 3. **The command's process**: a new session, no new privileges, every capability
//!    dropped (bounding set, ambient, effective, permitted, inheritable — also when Warden
//!    runs as root), the seccomp programs installed as one (`crate::seccomp::merge`; in a
//!    watched run with the watch's notifications, whose listener goes to pid 1), then the
//!    helper's own work in the same process (`crate::helper::run`: descriptors closed,
//!    Landlock, the exec allowlist) and the command's exec. It dies with pid 1.
//!
//! Setup failures print `warden sandbox: …` and exit 125, before the command runs.

mod fs;
mod spec;
pub(crate) mod standby;

pub use spec::{Op, Spec, parse};

use std::os::fd::AsRawFd;

use nix::libc;

use crate::SandboxError;
use crate::confine::{drop_privileges, install_merged, read_program};
use crate::exit_report::End;
use crate::setup_failure::fail;

/// The helper's argument that selects the builder: `HELPER __sandbox-build <bubblewrap's
/// arguments>`.
pub const SUBCOMMAND: &str = "__sandbox-build";

/// The builder's `main` (the launcher): never returns.
pub fn main(args: &[String]) -> ! {
    let spec = parse(args).unwrap_or_else(|e| fail(e));
    // The command is always the helper, which runs in the command's process without
    // another exec: this binary is the helper.
    let helper_args = match spec.command.get(1) {
        Some(sub) if sub == crate::helper::SUBCOMMAND => spec.command[2..].to_vec(),
        _ => fail("the builder runs the sandbox helper only"),
    };
    if nix::unistd::getpid().as_raw() == 1 {
        // Born as the pid 1 of new namespaces (the companion started it so, asked by
        // `namespaces`): no launcher — this process is the sandbox's pid 1 already.
        if spec.die_with_parent {
            die_with_parent();
        }
        // A standby may have checked its namespaces and begun the tree while it waited
        // (`standby.rs`); its root is then the tree's tmpfs, the host's /proc under
        // /oldroot.
        match standby::resume(&spec) {
            Some(resumed) => {
                let resumed = resumed.unwrap_or_else(|e| fail(e));
                let fd_sources = bound_sources(&spec, "/oldroot/proc");
                pid1(&spec, &fd_sources, &helper_args, Some(resumed))
            }
            None => {
                let fd_sources = bound_sources(&spec, "/proc");
                check_namespaces(spec.unshare_net).unwrap_or_else(|e| fail(e));
                pid1(&spec, &fd_sources, &helper_args, None)
            }
        }
    }
    let fd_sources = bound_sources(&spec, "/proc");
    if spec.die_with_parent {
        die_with_parent();
    }
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    let mut flags = rustix::thread::UnshareFlags::NEWUSER
        | rustix::thread::UnshareFlags::NEWNS
        | rustix::thread::UnshareFlags::NEWPID
        | rustix::thread::UnshareFlags::NEWIPC
        | rustix::thread::UnshareFlags::NEWUTS;
    if spec.unshare_net {
        flags |= rustix::thread::UnshareFlags::NEWNET;
    }
    // SAFETY: this process has one thread, so no other thread can see a changed
    // descriptor table (FILES is not asked for anyway).
    unsafe { rustix::thread::unshare_unsafe(flags) }.unwrap_or_else(|e| {
        fail(format!(
            "cannot create the sandbox's namespaces ({e}); user namespaces may be disabled"
        ))
    });
    crate::confine::map_ids((uid.as_raw(), gid.as_raw()), (uid.as_raw(), gid.as_raw()))
        .unwrap_or_else(|e| fail(e));
    // SAFETY: one thread; the child only makes system calls and runs the helper.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => pid1(&spec, &fd_sources, &helper_args, None),
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            close_from(3);
            // It only waits from here on: nothing it holds in the new user namespace is
            // needed (if this fails, pid 1 dies with it, and the sandbox with pid 1).
            drop_privileges().unwrap_or_else(|e| fail(e));
            std::process::exit(wait_for(child))
        }
        Err(e) => fail(format!("fork: {e}")),
    }
}

/// What each bound descriptor is, read through the host's `/proc` at `proc` before the
/// sandbox's tree is finished.
fn bound_sources(spec: &Spec, proc: &str) -> Vec<fs::FdSource> {
    spec.ops
        .iter()
        .filter_map(|op| match op {
            Op::BindFd { fd, .. } => Some(*fd),
            _ => None,
        })
        .map(|fd| fs::FdSource::of(fd, proc).unwrap_or_else(|e| fail(e)))
        .collect()
}

/// Born as pid 1: check that every namespace a sandbox needs was made (the network's too
/// when `net`) — this process is the first of a new pid namespace (it is pid 1), its
/// user namespace is a new one (the caller's ids mapped to themselves, one each), and the
/// other namespaces are owned by that user namespace, so they were made with it. Whoever
/// started it cannot have left one out unnoticed.
fn check_namespaces(net: bool) -> Result<(), SandboxError> {
    let (uid, gid) = (
        nix::unistd::getuid().as_raw(),
        nix::unistd::getgid().as_raw(),
    );
    let one_line = |file: &str, id: u32| {
        let map = std::fs::read_to_string(file).unwrap_or_default();
        let fields: Vec<&str> = map.split_whitespace().collect();
        fields == [id.to_string(), id.to_string(), "1".to_owned()]
    };
    if !one_line("/proc/self/uid_map", uid) || !one_line("/proc/self/gid_map", gid) {
        return Err(SandboxError::Confine(
            "started as pid 1 but not in a new user namespace".into(),
        ));
    }
    let user = ns_inode("user")?;
    let mut needed = vec!["mnt", "pid", "ipc", "uts"];
    if net {
        needed.push("net");
    }
    for kind in needed {
        if owner_inode(kind)? != Some(user) {
            return Err(SandboxError::Confine(format!(
                "started as pid 1 but its {kind} namespace was not made with its user namespace"
            )));
        }
    }
    Ok(())
}

/// The inode of this process's `kind` namespace.
fn ns_inode(kind: &str) -> Result<u64, SandboxError> {
    let path = format!("/proc/self/ns/{kind}");
    std::fs::metadata(&path)
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .map_err(|e| SandboxError::Confine(format!("{path}: {e}")))
}

/// The inode of the user namespace that owns this process's `kind` namespace
/// (`NS_GET_USERNS`); `None` when that is above this process's own (the kernel does not
/// show it: EPERM).
fn owner_inode(kind: &str) -> Result<Option<u64>, SandboxError> {
    /// `NS_GET_USERNS` (`_IO(0xb7, 0x1)`, `linux/nsfs.h`).
    const NS_GET_USERNS: libc::c_ulong = 0xb701;
    let path = format!("/proc/self/ns/{kind}");
    let ns =
        std::fs::File::open(&path).map_err(|e| SandboxError::Confine(format!("{path}: {e}")))?;
    // SAFETY: NS_GET_USERNS takes no argument and returns a new descriptor (or -1).
    let owner = unsafe { libc::ioctl(ns.as_raw_fd(), NS_GET_USERNS as _) };
    if owner < 0 {
        return match nix::errno::Errno::last() {
            nix::errno::Errno::EPERM => Ok(None),
            e => Err(SandboxError::Confine(format!("owner of {path}: {e}"))),
        };
    }
    // SAFETY: the kernel just returned this descriptor to us.
    let owner = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(owner) };
    rustix::fs::fstat(&owner)
        .map(|st| Some(st.st_ino))
        .map_err(|e| SandboxError::Confine(format!("owner of {path}: {e}")))
}

/// Killed when the parent ends (bubblewrap's `--die-with-parent`).
fn die_with_parent() {
    // SAFETY: plain prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
}

/// Wait for `child`; its exit status, or 128 + the signal that killed it (bubblewrap's
/// convention).
fn wait_for(child: nix::unistd::Pid) -> i32 {
    use nix::sys::wait::{WaitStatus, waitpid};
    loop {
        match waitpid(child, None) {
            Ok(WaitStatus::Exited(_, code)) => return code,
            Ok(WaitStatus::Signaled(_, signal, _)) => return 128 + signal as i32,
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => fail(format!("waitpid: {e}")),
        }
    }
}

/// Close every descriptor from `first` on.
fn close_from(first: u32) {
    // SAFETY: close_range takes plain integers; nothing this process still uses is at
    // or above `first` when it is called.
    unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0u32) };
}

/// The sandbox's pid 1: build (from `prepared`, what a standby did while it waited, if
/// anything), start the command, reap until it ends.
fn pid1(
    spec: &Spec,
    fd_sources: &[fs::FdSource],
    helper_args: &[String],
    prepared: Option<standby::Resumed>,
) -> ! {
    if spec.die_with_parent {
        die_with_parent();
    }
    let mut helper = crate::helper::decode(helper_args).unwrap_or_else(|e| fail(e));
    let (tree, ops, loopback_is_up) = match prepared {
        Some(resumed) => (
            resumed.tree,
            &spec.ops[standby::PRELUDE_LEN..],
            resumed.loopback_up,
        ),
        None => (
            fs::Tree::start().unwrap_or_else(|e| fail(e)),
            &spec.ops[..],
            false,
        ),
    };
    for op in ops {
        tree.apply(op, fd_sources).unwrap_or_else(|e| fail(e));
    }
    // An exec allowlist's first layer: nothing but the listed programs, their loaders
    // and their libraries' directories on a mount that allows code (the helper adds
    // Landlock's execve rule as the second).
    if let Some(executable) = &helper.exec_allowlist {
        let allowed: Vec<std::path::PathBuf> = executable
            .iter()
            .chain(&helper.exec_libraries)
            .cloned()
            .collect();
        tree.exec_only(&allowed).unwrap_or_else(|e| fail(e));
    }
    tree.finish(spec.chdir.as_deref())
        .unwrap_or_else(|e| fail(e));
    if spec.unshare_net {
        if !loopback_is_up {
            loopback_up().unwrap_or_else(|e| fail(e));
        }
        // `proxy` mode's DNS stub listens on a privileged port: bound while pid 1 still
        // may, and handed to the command's process (which hands it on, with the proxy's
        // listener, before the command starts); pid 1's own copy is closed with the rest.
        if helper.egress_fd.is_some() {
            let stub = crate::egress::dns::bind_stub_socket().unwrap_or_else(|e| {
                fail(format!("the DNS stub cannot listen on 127.0.0.1:53: {e}"))
            });
            helper.dns_stub_fd = Some(std::os::fd::IntoRawFd::into_raw_fd(stub));
        }
    }
    // Built: like bubblewrap's pid 1, it keeps nothing while the command runs — no
    // capability, no new privileges — and the command's process starts from that.
    drop_privileges().unwrap_or_else(|e| fail(e));
    // Nor may the command, the same user, reach into pid 1 through /proc (its
    // descriptors: the status and watch reports).
    // SAFETY: plain prctl.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    // A watched run (approval mode's first, read-only run) is watched by pid 1 itself:
    // the command's process then executes the command with no watching process in
    // between (`crate::watch::observe_as_pid1`).
    let watch = helper
        .watch_fd
        .take()
        .map(|fd| (fd, std::mem::take(&mut helper.watch_roots)));
    let watch = watch.and_then(|(fd, roots)| match crate::watch::available() {
        Ok(()) => Some((fd, roots)),
        Err(why) => {
            crate::watch::report_unavailable(fd, why);
            None
        }
    });
    let pair = watch.as_ref().map(|_| {
        nix::sys::socket::socketpair(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::SeqPacket,
            None,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        )
        .unwrap_or_else(|e| fail(format!("socketpair for the write watch: {e}")))
    });
    // SAFETY: one thread; the child only makes system calls and runs the helper.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => command(
            spec,
            helper,
            pair.map(|(ours, theirs)| {
                drop(ours);
                theirs
            }),
        ),
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            let status = spec.status_fd.unwrap_or(-1);
            let end = match (watch, pair) {
                (Some((report, roots)), Some((ours, theirs))) => {
                    drop(theirs);
                    close_all_but(&[report, ours.as_raw_fd(), status]);
                    crate::watch::observe_as_pid1(report, &roots, ours, child)
                }
                _ => {
                    close_all_but(&[status]);
                    reap_until(child)
                }
            };
            exit_reporting(spec.status_fd, end)
        }
        Err(e) => fail(format!("fork: {e}")),
    }
}

/// Close every descriptor from 3 on except `keep`.
fn close_all_but(keep: &[i32]) {
    let mut keep: Vec<u32> = keep
        .iter()
        .filter(|fd| **fd > 2)
        .map(|fd| *fd as u32)
        .collect();
    keep.sort_unstable();
    let mut from = 3u32;
    for fd in keep {
        if fd > from {
            // SAFETY: close_range on plain integers; only descriptors this process no
            // longer uses are in the range.
            unsafe { libc::syscall(libc::SYS_close_range, from, fd - 1, 0u32) };
        }
        from = fd + 1;
    }
    close_from(from);
}

/// Reap every process left to pid 1 until `command` ends; how it ended.
fn reap_until(command: nix::unistd::Pid) -> End {
    use nix::sys::wait::{WaitStatus, waitpid};
    loop {
        match waitpid(None, None) {
            Ok(status @ (WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, _, _)))
                if pid == command =>
            {
                return End::from_wait(status);
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => fail(format!("waitpid: {e}")),
        }
    }
}

/// pid 1's end: the command's status reported on the status descriptor, if asked for
/// (bubblewrap's `--json-status-fd` line, naming a signal too: see
/// [`crate::exit_report`]) — before the sandbox is torn down, which this process's exit
/// does next, so that Warden need not wait for that — then the exit with its code.
fn exit_reporting(status_fd: Option<i32>, end: End) -> ! {
    if let Some(fd) = status_fd {
        // Every other descriptor first — the output pipes, the watch report — so that
        // their readers see end of file with the status, not after this exit.
        // SAFETY: close_range on plain integers; this process writes nothing more but
        // the status.
        unsafe {
            libc::syscall(libc::SYS_close_range, 0u32, fd as u32 - 1, 0u32);
            libc::syscall(libc::SYS_close_range, fd as u32 + 1, u32::MAX, 0u32);
        }
        crate::exit_report::write(fd, end);
    }
    // SAFETY: _exit ends the process at once: nothing is left to flush.
    unsafe { libc::_exit(end.code()) }
}

/// `lo` up in the new network namespace (bubblewrap does the same), so that a command can
/// still talk to itself; nothing else is there.
fn loopback_up() -> Result<(), SandboxError> {
    /// `struct ifreq` as far as the flags.
    #[repr(C)]
    struct IfReq {
        name: [u8; libc::IFNAMSIZ],
        flags: libc::c_short,
        _rest: [u8; 22],
    }
    let sock = nix::sys::socket::socket(
        nix::sys::socket::AddressFamily::Inet,
        nix::sys::socket::SockType::Datagram,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|errno| SandboxError::Syscall {
        step: "socket for lo",
        errno,
    })?;
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: 0,
        _rest: [0; 22],
    };
    req.name[..2].copy_from_slice(b"lo");
    // SAFETY: a valid socket and a correctly sized, initialised ifreq that outlives the
    // calls.
    unsafe {
        if libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCGIFFLAGS as _,
            &mut req as *mut IfReq,
        ) != 0
        {
            return Err(SandboxError::last_errno("lo"));
        }
        req.flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCSIFFLAGS as _,
            &req as *const IfReq,
        ) != 0
        {
            return Err(SandboxError::last_errno("lo up"));
        }
    }
    Ok(())
}

/// The command's process: session, privileges, capabilities, seccomp, then the helper.
/// The seccomp programs are installed as one (see `crate::seccomp::merge`); in a watched
/// run that one also holds the write watch's notifications, whose listener goes to pid 1
/// over `watch`.
fn command(
    spec: &Spec,
    helper: crate::helper::HelperArgs,
    watch: Option<std::os::fd::OwnedFd>,
) -> ! {
    if spec.new_session {
        nix::unistd::setsid().unwrap_or_else(|e| fail(format!("setsid: {e}")));
    }
    if spec.die_with_parent {
        die_with_parent();
    }
    drop_privileges().unwrap_or_else(|e| fail(e));
    let mut programs: Vec<Vec<libc::sock_filter>> = spec
        .seccomp_fds
        .iter()
        .map(|fd| read_program(*fd).unwrap_or_else(|e| fail(e)))
        .collect();
    if let Some(socket) = watch {
        // Notifications installed first: the merged program runs the latest installed
        // first and takes its first answer, and every error answer is more severe than a
        // notification for the same call (a set-id `openat` is refused, not watched).
        let listener = match crate::watch::program() {
            Ok(notify) => {
                programs.insert(0, crate::seccomp::to_raw(&notify));
                match install_merged(&programs, true) {
                    Ok(listener) => {
                        listener.ok_or_else(|| SandboxError::Watch("no listener".to_owned()))
                    }
                    // Without notifications here: the denials still, alone.
                    Err(e) => {
                        programs.remove(0);
                        install_merged(&programs, false).unwrap_or_else(|e| fail(e));
                        Err(SandboxError::Watch(format!(
                            "seccomp user notification is not available: {e}"
                        )))
                    }
                }
            }
            Err(e) => {
                install_merged(&programs, false).unwrap_or_else(|e| fail(e));
                Err(SandboxError::from(e))
            }
        };
        crate::watch::send_listener(socket.as_raw_fd(), listener);
    } else if !programs.is_empty() {
        install_merged(&programs, false).unwrap_or_else(|e| fail(e));
    }
    crate::helper::run(helper)
}
