//! The command's end as the sandbox reports it to Warden: one line on the status pipe,
//! `{ "exit-code": N }`, with `"signal": S` when a signal ended the command (N is then
//! 128 + S). Whoever waits for the command inside the sandbox writes it before the
//! sandbox is torn down: pid 1 under Warden's builder, the helper under bubblewrap —
//! whose own `--json-status-fd` line comes later and says only 128 + S, which cannot
//! tell `kill -9` from `exit 137`. Warden takes the first line (see
//! `caps::process::ProcessSpec::exit_report`).
//!
//! The line decides nothing: it names how the command's own run ended. A command that
//! forged one could only end its own run early, or misreport its own status.

use std::os::fd::{BorrowedFd, RawFd};

use nix::libc;
use nix::sys::wait::WaitStatus;

/// The command to watch and report on: how to execute it (in the child). The watch and
/// the waiter need nothing else from their caller, the helper.
pub trait Exec {
    /// Execute the command in place of the calling process; never returns.
    fn exec(&self) -> !;
}

/// How the command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// It exited with this code.
    Exited(i32),
    /// This signal killed it.
    Signaled(i32),
}

impl End {
    /// From a `waitpid` status of the command (anything else counts as a setup failure).
    pub(crate) fn from_wait(status: WaitStatus) -> End {
        match status {
            WaitStatus::Exited(_, code) => End::Exited(code),
            WaitStatus::Signaled(_, signal, _) => End::Signaled(signal as i32),
            _ => End::Exited(125),
        }
    }

    /// The code a shell would report: the code, or 128 + the signal.
    pub(crate) fn code(self) -> i32 {
        match self {
            End::Exited(code) => code,
            End::Signaled(signal) => 128 + signal,
        }
    }

    /// The report line.
    pub(crate) fn line(self) -> String {
        match self {
            End::Exited(code) => format!("{{ \"exit-code\": {code} }}\n"),
            End::Signaled(signal) => format!(
                "{{ \"exit-code\": {}, \"signal\": {signal} }}\n",
                128 + signal
            ),
        }
    }
}

/// Write `end`'s line to `fd` (a pipe with room for it; failures are ignored: Warden then
/// learns the status from the process's end).
pub(crate) fn write(fd: RawFd, end: End) {
    // SAFETY: the descriptor was handed to this process for this; borrowed here only.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    let _ = rustix::io::write(fd, end.line().as_bytes());
}

/// Under bubblewrap: run `command` as a child, wait for it, report how it ended on
/// `status_fd`, and exit with its code. Never returns.
///
/// The waiting process holds no standard descriptor (a pipe's last reader or writer is
/// the command's), is not dumpable (its status descriptor stays out of the command's
/// reach through `/proc`), and keeps every signal it can blocked: a signal sent to the
/// run's process group — Warden's SIGTERM at a timeout, or the command's own `kill 0` —
/// reaches the command, while the waiter stays to report what it did to it.
pub(crate) fn wait_and_report(status_fd: RawFd, command: &dyn Exec) -> ! {
    use nix::sys::wait::waitpid;
    use nix::unistd::{ForkResult, fork};

    // Blocked before the fork, not after it in the waiter: the command may start, say it
    // is ready and be signalled (with the whole run) before the waiter is scheduled at
    // all, and a waiter killed so ends the sandbox around the command. The command gets
    // the mask back before it starts; what was sent meanwhile is delivered to it then.
    let before = block_all_signals();
    let run_command = || -> ! {
        restore_signals(&before);
        command.exec()
    };
    // SAFETY: the helper is single-threaded here (it has started no threads), so the
    // child may run arbitrary code before it executes the command.
    match unsafe { fork() } {
        // Cannot wait: run the command in place; its status is then bubblewrap's.
        Err(_) => run_command(),
        Ok(ForkResult::Child) => run_command(),
        Ok(ForkResult::Parent { child }) => {
            // SAFETY: plain prctl and closing this process's standard descriptors, which
            // it never uses again.
            unsafe {
                libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
                libc::close(0);
                libc::close(1);
                libc::close(2);
            }
            let end = loop {
                match waitpid(child, None) {
                    Ok(status @ (WaitStatus::Exited(..) | WaitStatus::Signaled(..))) => {
                        break End::from_wait(status);
                    }
                    Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
                    Err(_) => break End::Exited(125),
                }
            };
            write(status_fd, end);
            // SAFETY: _exit ends the process at once: nothing is left to flush.
            unsafe { libc::_exit(end.code()) }
        }
    }
}

/// Block every signal that can be blocked, in a process about to fork the command it
/// waits around; the mask before, which the command gets back ([`restore_signals`]).
pub(crate) fn block_all_signals() -> nix::sys::signal::SigSet {
    use nix::sys::signal::{SigSet, SigmaskHow, sigprocmask};
    let mut before = SigSet::empty();
    let _ = sigprocmask(
        SigmaskHow::SIG_BLOCK,
        Some(&SigSet::all()),
        Some(&mut before),
    );
    before
}

/// Set the signal mask back to `before` (in the forked command, before it starts).
pub(crate) fn restore_signals(before: &nix::sys::signal::SigSet) {
    use nix::sys::signal::{SigmaskHow, sigprocmask};
    let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(before), None);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_is_named_beside_the_code_a_shell_would_report() {
        assert_eq!(End::Exited(3).line(), "{ \"exit-code\": 3 }\n");
        assert_eq!(
            End::Signaled(9).line(),
            "{ \"exit-code\": 137, \"signal\": 9 }\n"
        );
        assert_eq!(End::Signaled(15).code(), 143);
    }
}
