//! Watching for refused writes: how approval mode learns from the kernel — not from the
//! command's output text — that a read-only run was refused a write that the writable
//! profile would allow.
//!
//! Under Warden's own builder the sandbox's pid 1 is the observer and the command's
//! process installs the filter — merged with the sandbox's other seccomp programs — and
//! executes the command itself ([`observe_as_pid1`]). Under bubblewrap, which is pid 1
//! there, the helper forks instead, as follows.
//!
//! In the watched read-only profile the helper forks. The child installs a seccomp filter
//! that turns every write-intent file syscall into a user notification (`open`/`openat`/
//! `creat` with a write access mode, `O_CREAT` or `O_TRUNC`; `openat2`; `mkdir`, `mknod`,
//! `unlink`, `rmdir`, `rename`, `link`, `symlink`, `truncate`, `chmod`, `chown`, `utimes`
//! and their `*at` forms), hands the listener to the parent and executes the command. The
//! parent stays behind as an observer: for each notification it reads the path from the
//! caller's memory, resolves it against the caller's working directory or directory
//! descriptor, and records it if it lies beneath a writable path — which the read-only
//! profile mounts read-only, so the kernel refuses the call with `EROFS`. It always
//! answers `CONTINUE`: the kernel then performs the syscall exactly as it would without
//! the watch.
//!
//! The watch decides nothing and enforces nothing; the read-only mount does. That is why
//! the kernel's warning about `CONTINUE` (the caller's memory can change after it was
//! read) costs at most a needless prompt here, never a write.
//!
//! When the child exits, the observer writes a small JSON-lines report to a pipe that the
//! sandbox shell reads, and exits with the child's status (re-raising a fatal signal).
//! Where the kernel has no user notification (before Linux 5.5), or a path could not be
//! read, the report says so and the runner falls back to the `EROFS` message text.
//!
//! The parts: `calls.rs` (which syscalls are watched, and the filter built from them),
//! `listener.rs` (installing the filter and handing its listener to the observer),
//! `observer.rs` (what each notified call would write, and whether it counts) and
//! `report.rs` (the report written after the run and read by the sandbox shell). This file
//! is the process around them: fork, observe, exit as the command did.

pub(crate) mod calls;
mod listener;
mod observer;
mod report;

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

use nix::libc;

pub use calls::program;
pub use observer::refusable;
pub use report::{MAX_REPORTED, WatchReport, parse_report, read_report};

pub(crate) use listener::send_listener;
use listener::{install, receive_listener};
use observer::Observer;
use report::write_all;

use crate::SandboxError;
pub use crate::exit_report::Exec;

/// The report descriptor as the observer needs it: close-on-exec (the command must not
/// inherit the report), and never blocking (the reader only reads after the run, and a
/// report always fits the pipe).
fn prepare_report(report_fd: RawFd) {
    // SAFETY: fcntl on a descriptor number; failure leaves it as it was.
    unsafe {
        libc::fcntl(report_fd, libc::F_SETFD, libc::FD_CLOEXEC);
        let flags = libc::fcntl(report_fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(report_fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
}

/// Say on `report_fd` that this run is not watched, and why.
pub(crate) fn report_unavailable(report_fd: RawFd, why: SandboxError) {
    prepare_report(report_fd);
    write_all(report_fd, &report::unavailable(why.to_string()));
}

/// The watch as the namespace builder runs it: the sandbox's pid 1 is the observer. Its
/// child, the command's process, installs the notifications (merged with the sandbox's
/// other seccomp programs) and sends their listener over `socket` — or why there is none
/// — then executes the command itself, with no watching process in between. pid 1
/// answers every notification, reaps every process left to it (it is the pid
/// namespace's init), and when `command` ends writes the report and returns how it ended.
pub(crate) fn observe_as_pid1(
    report_fd: RawFd,
    writable: &[PathBuf],
    socket: OwnedFd,
    command: nix::unistd::Pid,
) -> crate::exit_report::End {
    use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};
    use nix::sys::signalfd::{SfdFlags, SignalFd};
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    prepare_report(report_fd);
    // A child's end is a signal read from a descriptor, polled with the listener. Blocked
    // only now, after the fork: the command must not inherit a blocked SIGCHLD.
    let mut chld = SigSet::empty();
    chld.add(Signal::SIGCHLD);
    let signals = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&chld), None)
        .map_err(|e| e.to_string())
        .and_then(|()| {
            SignalFd::with_flags(&chld, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
                .map_err(|e| e.to_string())
        });
    let Ok(signals) = signals else {
        // Cannot happen on a kernel with user notifications; reap blindly then.
        crate::setup_failure::fail("cannot watch for the command's end")
    };
    let listener = receive_listener(socket.as_raw_fd());
    drop(socket);
    let mut observer = Observer::new(writable);
    // Polled until it hangs up: once no process uses the filter it can hold no request,
    // and a hung-up descriptor would wake every poll until SIGCHLD arrives.
    let mut listening = listener.is_ok();
    let reap = || -> Option<WaitStatus> {
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => return None,
                Ok(status) if status.pid() == Some(command) => return Some(status),
                Ok(_) => continue,
            }
        }
    };
    let status = loop {
        if let Some(status) = reap() {
            break status;
        }
        let mut fds = [
            libc::pollfd {
                fd: signals.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: match &listener {
                    Ok(l) if listening => l.as_raw_fd(),
                    _ => -1,
                },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: polling two pollfd structs in a live array.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            continue;
        }
        if fds[0].revents & libc::POLLIN != 0 {
            while let Ok(Some(_)) = signals.read_signal() {}
        }
        if let Ok(l) = &listener
            && fds[1].revents & libc::POLLIN != 0
        {
            answer_one(l.as_raw_fd(), &mut observer);
        } else if fds[1].revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            listening = false;
        }
    };
    let report = match &listener {
        Ok(_) => observer.report(),
        Err(why) => report::unavailable(why.to_string()),
    };
    write_all(report_fd, &report);
    crate::exit_report::End::from_wait(status)
}

/// Run `command` watched, report to `report_fd` — and how it ended to `status_fd`, if
/// given (see [`crate::exit_report`]) — and exit with its status. Never returns.
pub fn run(
    report_fd: RawFd,
    status_fd: Option<RawFd>,
    writable: &[PathBuf],
    command: &dyn Exec,
) -> ! {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    use nix::sys::wait::{WaitStatus, waitpid};
    use nix::unistd::{ForkResult, fork};

    prepare_report(report_fd);
    // Without a watch the command still runs, and its end is still reported.
    let unwatched = || -> ! {
        match status_fd {
            Some(fd) => crate::exit_report::wait_and_report(fd, command),
            None => command.exec(),
        }
    };
    let program = program().map_err(|e| e.to_string());
    let pair = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    );
    if let Err(why) = available() {
        write_all(report_fd, &report::unavailable(why.to_string()));
        unwatched()
    }
    let (Ok(program), Ok((parent_end, child_end))) = (program, pair) else {
        write_all(
            report_fd,
            &report::unavailable("cannot set up the write watch".into()),
        );
        unwatched()
    };
    // The observer keeps every signal it can blocked, as the unwatched waiter does
    // (`exit_report`): a signal for the run (the driver's, or the command's own `kill 0`)
    // is the command's, and an observer killed by one would end the sandbox around it.
    // Blocked before the fork, so none can arrive before; the command gets its mask back.
    let before = crate::exit_report::block_all_signals();
    let restore = || crate::exit_report::restore_signals(&before);
    // SAFETY: the helper is single-threaded here (it has started no threads), so the
    // child may run arbitrary code before it executes the command.
    match unsafe { fork() } {
        Err(e) => {
            restore();
            write_all(report_fd, &report::unavailable(format!("fork: {e}")));
            command.exec()
        }
        Ok(ForkResult::Child) => {
            restore();
            drop(parent_end);
            send_listener(child_end.as_raw_fd(), install(&program));
            drop(child_end);
            command.exec()
        }
        Ok(ForkResult::Parent { child }) => {
            drop(child_end);
            // The command runs as the same user: keep it out of our /proc entries (our
            // descriptors include the report pipe).
            // SAFETY: plain prctl.
            unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
            let listener = receive_listener(parent_end.as_raw_fd());
            drop(parent_end);
            let mut observer = Observer::new(writable);
            let (status, report) = match listener {
                Ok(listener) => {
                    let status = serve(&listener, child, &mut observer);
                    (status, observer.report())
                }
                Err(why) => (waitpid(child, None), report::unavailable(why.to_string())),
            };
            write_all(report_fd, &report);
            if let (Some(fd), Ok(status)) = (status_fd, &status) {
                crate::exit_report::write(fd, crate::exit_report::End::from_wait(*status));
            }
            match status {
                Ok(WaitStatus::Exited(_, code)) => std::process::exit(code),
                Ok(WaitStatus::Signaled(_, signal, _)) => reraise(signal),
                _ => std::process::exit(125),
            }
        }
    }
}

/// Answer notifications until the child exits; return its status. The listener is
/// served until then whatever happens: an unserved notification would hang the command.
fn serve(
    listener: &OwnedFd,
    child: nix::unistd::Pid,
    observer: &mut Observer,
) -> nix::Result<nix::sys::wait::WaitStatus> {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    // Wake on the child's exit where pidfds exist; otherwise poll for it now and then.
    let pidfd = rustix::process::Pid::from_raw(child.as_raw()).and_then(|pid| {
        rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
    });
    let mut listening = true;
    loop {
        let mut fds = [
            libc::pollfd {
                fd: pidfd.as_ref().map_or(-1, |p| p.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if listening { listener.as_raw_fd() } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let timeout = if pidfd.is_some() { -1 } else { 50 };
        // SAFETY: polling two pollfd structs in a live array.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return waitpid(child, None);
        }
        if fds[1].revents & libc::POLLIN != 0 {
            answer_one(listener.as_raw_fd(), observer);
        } else if fds[1].revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            // Every process using the filter is gone.
            listening = false;
        }
        if pidfd.is_none() || fds[0].revents & libc::POLLIN != 0 {
            match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => {}
                other => return other,
            }
        }
    }
}

/// Whether this kernel can run the watch: `CONTINUE` answers need Linux 5.5. Without
/// them the watch is not installed at all (and the runner falls back to the text).
pub fn available() -> Result<(), SandboxError> {
    let uname = rustix::system::uname();
    let release = uname.release().to_string_lossy();
    if release_at_least(&release, (5, 5)) {
        Ok(())
    } else {
        Err(SandboxError::Watch(format!(
            "the write watch needs Linux 5.5 or later (seccomp CONTINUE answers); this kernel is {release}"
        )))
    }
}

/// Compare a kernel release string (`6.1.0-18-amd64`) with `(major, minor)`.
fn release_at_least(release: &str, want: (u32, u32)) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= want
}

/// Receive one notification, observe it, and let the kernel carry on.
fn answer_one(listener: RawFd, observer: &mut Observer) {
    // SAFETY: the kernel requires a zeroed struct; it fills it in.
    let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: RECV writes one seccomp_notif into `req`.
    if unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_RECV as _, &mut req) } != 0 {
        // The caller died or a signal interrupted it; nothing to answer.
        return;
    }
    observer.observe(
        listener,
        req.pid,
        req.data.nr as i64,
        &req.data.args,
        req.id,
    );
    let mut resp = libc::seccomp_notif_resp {
        id: req.id,
        val: 0,
        error: 0,
        flags: libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
    };
    // SAFETY: SEND reads one seccomp_notif_resp from a valid pointer. ENOENT (the caller
    // was interrupted meanwhile) needs no handling.
    unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_SEND as _, &mut resp) };
}

/// Die of `signal` as the command did, so the sandbox reports the same status.
fn reraise(signal: nix::sys::signal::Signal) -> ! {
    use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, raise, signal as set, sigprocmask};
    // SAFETY: restoring the default disposition of one signal.
    let _ = unsafe { set(signal, SigHandler::SigDfl) };
    let mut only = SigSet::empty();
    only.add(signal);
    let _ = sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&only), None);
    let _ = raise(signal);
    std::process::exit(128 + signal as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_releases_compare_by_major_and_minor() {
        assert!(release_at_least("6.18.0-1-amd64", (5, 5)));
        assert!(release_at_least("5.5.0", (5, 5)));
        assert!(release_at_least("5.10.0-rc1+", (5, 5)));
        assert!(!release_at_least("5.4.0-150-generic", (5, 5)));
        assert!(!release_at_least("4.19.0", (5, 5)));
        assert!(!release_at_least("", (5, 5)));
    }
}
