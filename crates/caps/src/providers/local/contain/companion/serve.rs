//! The companion's side: its loop, the clone that starts each process — or the pid 1
//! kept ready for the next sandboxed run — and its watchdog duty at the end.
//!
//! The standby pid 1: a sandboxed run's first process is born in new namespaces, and making them
//! (the network namespace above all) is most of a millisecond of the kernel's time. Asked
//! to (`Prepare`), the companion makes that process ahead of time — while Warden is
//! still deciding — waiting on a socket of its own, whose other end it hands to Warden
//! with the standby's pid. Warden sends a request that asks for exactly those namespaces
//! straight to the standby (no hop through the companion), which then joins the run's v1
//! cgroups and carries on as any child of the companion would. It was born before the
//! run's cgroups existed, so it is outside the v2 one: Warden uses it only where the run
//! is also held by a v1 `pids` cgroup, which then ends it. It dies with Warden, and when
//! its socket closes unused. While it waits it runs the helper binary's
//! [`PrepareStandby`] (the sandbox's builder begins its tree there: what every plan
//! starts with), so that work, too, is done while Warden decides.
//!
//! Leftovers: a finished run's cgroups may still list its sandbox's pid 1 on its way out;
//! Warden hands them over (`Remove`) and the companion removes them once the kernel lets
//! it, instead of a thread of Warden's waiting for that.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

use nix::libc;

use super::child::Child;
use super::{Dispatch, PrepareStandby, wire};
use crate::providers::local::contain::cgroup::{self, Flavor};

/// The companion's `main` (see the module header): `dispatch` runs a helper subcommand,
/// `prepare` is what each standby does while it waits. Its socket to Warden is standard
/// input. Never returns.
pub fn run_companion(dispatch: Dispatch, prepare: PrepareStandby) -> ! {
    // SAFETY: descriptor 0 is the socket the companion was started with (see
    // `start_companion`); nothing else owns it.
    let socket = unsafe { OwnedFd::from_raw_fd(0) };
    quiet_output();
    let mut prefixes: Vec<(Flavor, PathBuf)> = Vec::new();
    loop {
        match wire::receive(socket.as_fd()) {
            Ok(Some((wire::Message::Watch(list), _))) => {
                prefixes = list
                    .into_iter()
                    .filter_map(|(f, p)| Some((Flavor::from_name(&f)?, p)))
                    .collect();
            }
            Ok(Some((wire::Message::Prepare { namespaces }, _))) => {
                let answered = match standby(namespaces, dispatch, prepare) {
                    Ok((pid, theirs)) => {
                        wire::send_standby(socket.as_fd(), Ok((pid, theirs.as_fd())))
                    }
                    Err(errno) => wire::send_standby(socket.as_fd(), Err(errno)),
                };
                if answered.is_err() {
                    break;
                }
            }
            Ok(Some((wire::Message::Remove(dirs), _))) => cgroup::remove_paths_when_empty(&dirs),
            Ok(Some((wire::Message::Spawn(spawn), fds))) => {
                if wire::send_reply(socket.as_fd(), start(&spawn, fds, dispatch)).is_err() {
                    break;
                }
            }
            // A message that does not parse cannot be answered in step: stop serving.
            Ok(None) | Err(_) => break,
        }
    }
    cgroup::end_every_run(&prefixes);
    std::process::exit(0)
}

/// Standard output and error on `/dev/null` (they were pipes nobody reads: a stray write
/// would kill the companion), and SIGPIPE ignored in the companion itself (its children
/// get every signal back at its default).
fn quiet_output() {
    // SAFETY: open of a constant path, dup2 onto 1 and 2, and ignoring one signal; the
    // descriptors replaced are the companion's own, unused.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if null >= 0 {
            libc::dup2(null, 1);
            libc::dup2(null, 2);
            libc::close(null);
        }
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// `struct clone_args` (`linux/sched.h`), as far as `cgroup` (the size `clone3` is told).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// `CLONE_INTO_CGROUP` (Linux 5.7; not in every `libc` version).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Clone this process as Warden's child (`CLONE_PARENT`) in new `namespaces`, born in
/// the v2 cgroup `cgroup` if given: `Ok(0)` in the child, its pid in the companion.
fn clone_for_warden(namespaces: u64, cgroup: Option<RawFd>) -> Result<i32, i32> {
    let mut args = CloneArgs {
        flags: libc::CLONE_PARENT as u64 | (namespaces & wire::NAMESPACE_FLAGS),
        ..CloneArgs::default()
    };
    if let Some(fd) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = fd as u64;
    }
    // SAFETY: clone3 with a correctly sized, initialised clone_args and no shared memory
    // (no CLONE_VM): the child is a copy of this single-threaded process, like a fork's.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if pid < 0 {
        Err(nix::errno::Errno::last_raw())
    } else {
        Ok(pid as i32)
    }
}

/// The caller's ids, read in the companion: a child born in a new user namespace sees
/// itself as nobody until they are mapped.
fn ids() -> (u32, u32) {
    (
        nix::unistd::getuid().as_raw(),
        nix::unistd::getgid().as_raw(),
    )
}

/// Start `spawn` with `fds` (see [`wire::Spawn`] for their order): the child's pid, or
/// the error number of the clone.
fn start(spawn: &wire::Spawn, fds: Vec<OwnedFd>, dispatch: Dispatch) -> Result<i32, i32> {
    let (child, v2) = Child::take(spawn, fds, ids())?;
    let pid = clone_for_warden(spawn.namespaces, v2.as_ref().map(AsRawFd::as_raw_fd))?;
    if pid == 0 {
        child.run(spawn, dispatch, false);
    }
    Ok(pid)
}

/// Make the standby (see the module header) in `namespaces`: its pid and Warden's end of
/// its socket, or the error number of the clone.
fn standby(
    namespaces: u64,
    dispatch: Dispatch,
    prepare: PrepareStandby,
) -> Result<(i32, OwnedFd), i32> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    let (warden_end, standby_end) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| e as i32)?;
    let ids = ids();
    let pid = clone_for_warden(namespaces, None)?;
    if pid == 0 {
        drop(warden_end);
        Child::wait_as_standby(standby_end, ids, namespaces, dispatch, prepare);
    }
    Ok((pid, warden_end))
}
