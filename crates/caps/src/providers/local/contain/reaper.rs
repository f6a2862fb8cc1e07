//! The subreaper fallback, for hosts where no cgroup can be made: a small process in
//! front of the command that makes itself the run's child subreaper
//! (`PR_SET_CHILD_SUBREAPER`), so that every process of the run that loses its parent —
//! a double fork, a daemon that left the session — is re-parented to it instead of to
//! init. When the command ends, or the supervisor asks (`SIGUSR1`), it kills every
//! descendant it has, reaps them all, and exits with the command's status.
//!
//! It ignores the run's own `SIGTERM`/`SIGINT`/`SIGHUP` (the command receives them
//! through its process group), so a timeout's polite signal cannot end the reaper before
//! it has done its work. Should Warden itself die (`kill -9`, the OOM killer), the
//! kernel sends the reaper `SIGUSR1` as its parent-death signal, and it ends the run the
//! same way: nothing of a killed Warden's run lives on. (The signal follows the thread
//! that started the reaper — a runtime's worker or the main thread, which live as long as
//! the runs they start.)

use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;

use nix::libc;
use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal, kill, signal, sigprocmask};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid, execv, fork};

use crate::providers::local::proc_stat::process_stats;

/// The helper binary's subcommand that runs [`run_reaper`].
pub const REAPER_SUBCOMMAND: &str = "__warden-reaper";

/// Ask the reaper `pid` to end its run.
pub(crate) fn stop(pid: i32) {
    let _ = kill(Pid::from_raw(pid), Signal::SIGUSR1);
}

/// Every descendant of this process, from `/proc` (parents before children).
fn descendants() -> Vec<i32> {
    let me = std::process::id() as i32;
    let parent_of: Vec<(i32, i32)> = process_stats()
        .into_iter()
        .filter_map(|(pid, fields)| Some((pid, fields.get(1)?.parse::<i32>().ok()?)))
        .collect();
    let mut found = vec![me];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            parent_of
                .iter()
                .filter(|(_, ppid)| *ppid == parent)
                .map(|(pid, _)| *pid),
        );
        i += 1;
    }
    found.remove(0);
    found
}

/// Reap whatever has ended; remember the command's status if it is among them.
fn reap_ended(child: Pid, status: &mut Option<WaitStatus>) {
    while let Ok(s) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
        match s {
            WaitStatus::StillAlive => break,
            WaitStatus::Exited(pid, _) | WaitStatus::Signaled(pid, _, _) if pid == child => {
                *status = Some(s);
            }
            _ => {}
        }
    }
}

/// Kill and reap everything below this process until nothing is left.
fn end_everything(child: Pid, status: &mut Option<WaitStatus>) {
    for _ in 0..1000 {
        let all = descendants();
        if all.is_empty() {
            reap_ended(child, status);
            return;
        }
        for pid in all {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        reap_ended(child, status);
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

fn exit_like(status: Option<WaitStatus>) -> ! {
    match status {
        Some(WaitStatus::Exited(_, code)) => std::process::exit(code),
        Some(WaitStatus::Signaled(_, sig, _)) => {
            // SAFETY: restoring the default action of one signal before raising it.
            let _ = unsafe { signal(sig, SigHandler::SigDfl) };
            let mut only = SigSet::empty();
            only.add(sig);
            let _ = sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&only), None);
            let _ = nix::sys::signal::raise(sig);
            std::process::exit(128 + sig as i32)
        }
        _ => std::process::exit(125),
    }
}

/// The reaper's arguments after [`REAPER_SUBCOMMAND`]: the pid of the Warden starting
/// it, the program, and its argv (`argv[0]` included).
pub(crate) fn reaper_args(program: OsString, argv: Vec<OsString>) -> Vec<OsString> {
    let mut args = vec![std::process::id().to_string().into(), program];
    args.extend(argv);
    args
}

/// Run the reaper described above; `args` as [`reaper_args`] made them. Never returns.
pub fn run_reaper(args: &[OsString]) -> ! {
    let (Some(parent), Some(program), argv) = (
        args.first().and_then(|p| p.to_str()?.parse::<i32>().ok()),
        args.get(1),
        args.get(2..).unwrap_or_default(),
    ) else {
        std::process::exit(125)
    };
    if argv.is_empty() {
        std::process::exit(125)
    }
    let cstr = |s: &OsString| CString::new(s.as_bytes()).unwrap_or_default();
    let program_c = cstr(program);
    let argv_c: Vec<CString> = argv.iter().map(cstr).collect();
    let mut watched = SigSet::empty();
    watched.add(Signal::SIGCHLD);
    watched.add(Signal::SIGUSR1);
    // Blocked before the parent-death signal is asked for, so that it waits for the
    // loop below instead of killing this process with the run still going.
    let _ = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&watched), None);
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGUSR1, 0, 0, 0);
    }
    if nix::unistd::getppid().as_raw() != parent {
        // Warden died before the signal was asked for: the command never starts.
        std::process::exit(125)
    }
    // SAFETY: this process is single-threaded (it was just started), so the child may
    // run arbitrary code before it executes the command.
    let child = match unsafe { fork() } {
        Err(_) => std::process::exit(125),
        Ok(ForkResult::Child) => {
            let _ = sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&watched), None);
            // Rust's runtime ignored SIGPIPE in this process, and an ignored signal stays
            // ignored across exec: the command gets the default, as it would unwrapped.
            // SAFETY: restoring a signal's default action in the single-threaded child.
            let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
            let _ = execv(&program_c, &argv_c);
            // Exec failed: 127 for not found, 126 otherwise, as a shell would say.
            let code = match nix::errno::Errno::last() {
                nix::errno::Errno::ENOENT => 127,
                _ => 126,
            };
            std::process::exit(code)
        }
        Ok(ForkResult::Parent { child }) => child,
    };
    for sig in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        // SAFETY: ignoring signals in this single-threaded process.
        let _ = unsafe { signal(sig, SigHandler::SigIgn) };
    }
    let mut status = None;
    loop {
        match watched.wait() {
            Ok(Signal::SIGUSR1) => break,
            Ok(_) => {
                // SIGCHLD: reap what ended; the command's own end ends the run.
                reap_ended(child, &mut status);
                if status.is_some() {
                    break;
                }
            }
            Err(_) => continue,
        }
    }
    end_everything(child, &mut status);
    exit_like(status)
}
