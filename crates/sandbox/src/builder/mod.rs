//! Warden's own namespace builder: the sandbox bubblewrap builds, built by the helper
//! binary itself (`sandbox.builder = "warden"`), without bubblewrap's process, its exec of
//! the helper, or its re-reads of the mount table.
//!
//! It takes the same command line Warden writes for bubblewrap (parsed strictly by
//! `spec.rs`: the subset Warden uses, nothing else) and builds the same sandbox in three
//! processes, as bubblewrap does:
//!
//! 1. **The launcher** (the process Warden starts, in the host's pid namespace): notes what
//!    each bound descriptor is, makes new user, mount, pid, ipc, uts and (unless the
//!    network is allowed) network namespaces, maps the caller's uid and gid to themselves,
//!    forks the sandbox's pid 1, and exits with its status. It dies with Warden.
//! 2. **pid 1** builds the filesystem (`fs.rs`), brings the loopback interface up in a new
//!    network namespace, drops every capability, forks the command's process and reaps
//!    whatever is left to it; when the command's process ends it exits with its status,
//!    and the kernel kills everything else in the namespace. It dies with the launcher
//!    (which also drops its capabilities once pid 1 is started, and only waits).
//! 3. **The command's process**: a new session, no new privileges, every capability
//!    dropped (bounding set, ambient, effective, permitted, inheritable — also when Warden
//!    runs as root), the seccomp programs installed, then the helper's own work in the
//!    same process (`crate::helper::main`: descriptors closed, Landlock, the exec
//!    allowlist, the write watch) and the command's exec. It dies with pid 1.
//!
//! Setup failures print `warden sandbox: …` and exit 125, before the command runs.

mod fs;
mod spec;

pub use spec::{Op, Spec, parse};

use std::os::fd::{AsRawFd, BorrowedFd};

use nix::libc;

use crate::helper::fail;

/// The helper's argument that selects the builder: `HELPER __sandbox-build <bubblewrap's
/// arguments>`.
pub const SUBCOMMAND: &str = "__sandbox-build";

/// The builder's `main` (the launcher): never returns.
pub fn main(args: &[String]) -> ! {
    let spec = parse(args).unwrap_or_else(|e| fail(&e));
    // The command is always the helper, which runs in the command's process without
    // another exec: this binary is the helper.
    let helper_args = match spec.command.get(1) {
        Some(sub) if sub == crate::helper::SUBCOMMAND => spec.command[2..].to_vec(),
        _ => fail("the builder runs the sandbox helper only"),
    };
    let fd_sources: Vec<fs::FdSource> = spec
        .ops
        .iter()
        .filter_map(|op| match op {
            Op::BindFd { fd, .. } => Some(*fd),
            _ => None,
        })
        .map(|fd| fs::FdSource::of(fd).unwrap_or_else(|e| fail(&e)))
        .collect();
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
        fail(&format!(
            "cannot create the sandbox's namespaces ({e}); user namespaces may be disabled"
        ))
    });
    map_ids(uid.as_raw(), gid.as_raw()).unwrap_or_else(|e| fail(&e));
    // SAFETY: one thread; the child only makes system calls and runs the helper.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => pid1(&spec, &fd_sources, &helper_args),
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            close_from(3);
            // It only waits from here on: nothing it holds in the new user namespace is
            // needed (if this fails, pid 1 dies with it, and the sandbox with pid 1).
            drop_privileges().unwrap_or_else(|e| fail(&e));
            std::process::exit(wait_for(child))
        }
        Err(e) => fail(&format!("fork: {e}")),
    }
}

/// Killed when the parent ends (bubblewrap's `--die-with-parent`).
fn die_with_parent() {
    // SAFETY: plain prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
}

/// The caller's ids mapped to themselves in the new user namespace, as bubblewrap maps
/// them (`setgroups` denied, which an unprivileged gid map requires).
fn map_ids(uid: u32, gid: u32) -> Result<(), String> {
    let write = |file: &str, text: String| {
        std::fs::write(file, text).map_err(|e| format!("cannot write {file}: {e}"))
    };
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))
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
            Err(e) => fail(&format!("waitpid: {e}")),
        }
    }
}

/// Close every descriptor from `first` on.
fn close_from(first: u32) {
    // SAFETY: close_range takes plain integers; nothing this process still uses is at
    // or above `first` when it is called.
    unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0u32) };
}

/// The sandbox's pid 1: build, start the command, reap until it ends.
fn pid1(spec: &Spec, fd_sources: &[fs::FdSource], helper_args: &[String]) -> ! {
    if spec.die_with_parent {
        die_with_parent();
    }
    let tree = fs::Tree::start().unwrap_or_else(|e| fail(&e));
    for op in &spec.ops {
        tree.apply(op, fd_sources).unwrap_or_else(|e| fail(&e));
    }
    tree.finish(spec.chdir.as_deref())
        .unwrap_or_else(|e| fail(&e));
    if spec.unshare_net {
        loopback_up().unwrap_or_else(|e| fail(&e));
    }
    // Built: like bubblewrap's pid 1, it keeps nothing while the command runs — no
    // capability, no new privileges — and the command's process starts from that.
    drop_privileges().unwrap_or_else(|e| fail(&e));
    // SAFETY: one thread; the child only makes system calls and runs the helper.
    match unsafe { nix::unistd::fork() } {
        Ok(nix::unistd::ForkResult::Child) => command(spec, helper_args),
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            close_from(3);
            reap_until(child)
        }
        Err(e) => fail(&format!("fork: {e}")),
    }
}

/// Reap every process left to pid 1 until `command` ends; exit with its status.
fn reap_until(command: nix::unistd::Pid) -> ! {
    use nix::sys::wait::{WaitStatus, waitpid};
    loop {
        match waitpid(None, None) {
            Ok(WaitStatus::Exited(pid, code)) if pid == command => std::process::exit(code),
            Ok(WaitStatus::Signaled(pid, signal, _)) if pid == command => {
                std::process::exit(128 + signal as i32)
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => fail(&format!("waitpid: {e}")),
        }
    }
}

/// `lo` up in the new network namespace (bubblewrap does the same), so that a command can
/// still talk to itself; nothing else is there.
fn loopback_up() -> Result<(), String> {
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
    .map_err(|e| format!("socket for lo: {e}"))?;
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        flags: 0,
        _rest: [0; 22],
    };
    req.name[..2].copy_from_slice(b"lo");
    // SAFETY: a valid socket and a correctly sized, initialised ifreq that outlives the
    // calls.
    unsafe {
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req as *mut IfReq) != 0 {
            return Err(format!("lo: {}", nix::errno::Errno::last()));
        }
        req.flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req as *const IfReq) != 0 {
            return Err(format!("lo up: {}", nix::errno::Errno::last()));
        }
    }
    Ok(())
}

/// The command's process: session, privileges, capabilities, seccomp, then the helper.
fn command(spec: &Spec, helper_args: &[String]) -> ! {
    if spec.new_session {
        nix::unistd::setsid().unwrap_or_else(|e| fail(&format!("setsid: {e}")));
    }
    if spec.die_with_parent {
        die_with_parent();
    }
    drop_privileges().unwrap_or_else(|e| fail(&e));
    for fd in &spec.seccomp_fds {
        install_seccomp(*fd).unwrap_or_else(|e| fail(&e));
    }
    crate::helper::main(helper_args)
}

/// No new privileges, and no capability in any set (idempotent: the command's process
/// checks again what pid 1 already dropped).
fn drop_privileges() -> Result<(), String> {
    // SAFETY: plain prctl calls with integer arguments.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(format!("no_new_privs: {}", nix::errno::Errno::last()));
        }
        if libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        ) != 0
        {
            return Err(format!(
                "ambient capabilities: {}",
                nix::errno::Errno::last()
            ));
        }
        // Every capability the kernel knows (until it says there are no more) still in
        // the bounding set: dropping needs CAP_SETPCAP, which a process that already
        // dropped everything (the command's, after pid 1) no longer has.
        for cap in 0..64 {
            match libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) {
                0 => continue,
                1 => {}
                _ if nix::errno::Errno::last() == nix::errno::Errno::EINVAL && cap > 0 => break,
                _ => return Err(format!("bounding set: {}", nix::errno::Errno::last())),
            }
            if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                return Err(format!("bounding set: {}", nix::errno::Errno::last()));
            }
        }
    }
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset with a v3 header and the two data words it reads.
    let r = unsafe { libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) };
    if r != 0 {
        return Err(format!("capset: {}", nix::errno::Errno::last()));
    }
    Ok(())
}

/// Install the classic BPF program in descriptor `fd` (an array of `sock_filter`, as
/// bubblewrap's `--add-seccomp-fd` reads it).
fn install_seccomp(fd: i32) -> Result<(), String> {
    // SAFETY: the descriptor was handed to this process for this; borrowed only here.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    let mut offset = 0u64;
    loop {
        let n = rustix::io::pread(borrowed, &mut buf, offset)
            .map_err(|e| format!("read seccomp program {fd}: {e}"))?;
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&buf[..n]);
        offset += n as u64;
    }
    let size = std::mem::size_of::<libc::sock_filter>();
    if bytes.is_empty() || bytes.len() % size != 0 || bytes.len() / size > u16::MAX as usize {
        return Err(format!(
            "seccomp program {fd} is malformed ({} bytes)",
            bytes.len()
        ));
    }
    let filters: Vec<libc::sock_filter> = bytes
        .chunks_exact(size)
        .map(|c| libc::sock_filter {
            code: u16::from_ne_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect();
    let program = libc::sock_fprog {
        len: filters.len() as u16,
        filter: filters.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: a valid program that outlives the call; no_new_privs is set.
    let r = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &program as *const libc::sock_fprog,
            0,
            0,
        )
    };
    if r != 0 {
        return Err(format!(
            "install seccomp program {fd}: {}",
            nix::errno::Errno::last()
        ));
    }
    Ok(())
}
