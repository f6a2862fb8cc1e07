//! Knowing a run has ended: the pidfd (or `waitid` fallback) that becomes readable when
//! the child exits, and the exit report a sandbox writes for the command it ran.

use std::os::fd::OwnedFd;

use nix::libc;
use tokio::io::unix::AsyncFd;

use super::REPORT_AFTER_EXIT;
use crate::shell::ExitStatus;

/// Resolves when process `pid` has exited — or, with an exit report (see
/// [`ProcessSpec::exit_report`](super::ProcessSpec::exit_report)), when it reported its status, whichever comes first:
/// `Some(status)` when the report decided.
pub(super) async fn wait_for_end(
    pid: libc::pid_t,
    report: Option<OwnedFd>,
) -> std::io::Result<Option<ExitStatus>> {
    let exited = wait_for_exit(pid);
    tokio::pin!(exited);
    if let Some(report) = report {
        let reported = reported_exit(report);
        tokio::pin!(reported);
        tokio::select! {
            result = &mut exited => {
                result?;
                // Both may be ready at once (the process wrote its report and exited):
                // a report already written still says how the command ended — bubblewrap's
                // exit code cannot tell a signal from 128 + N. Every writer is gone with
                // the process, so this is a read of what is there, bounded all the same.
                return Ok(tokio::time::timeout(REPORT_AFTER_EXIT, reported)
                    .await
                    .ok()
                    .flatten());
            }
            code = &mut reported => {
                if let Some(code) = code {
                    return Ok(Some(code));
                }
            }
        }
    }
    exited.await.map(|()| None)
}

/// The exit status reported on `fd` (`{ "exit-code": N }`, after any other lines), or
/// `None` if the pipe closes without one (or cannot be read).
pub(super) async fn reported_exit(fd: OwnedFd) -> Option<ExitStatus> {
    let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(fd).ok()?;
    let mut text = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        use tokio::io::AsyncReadExt as _;
        let n = pipe.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        text.extend_from_slice(&buf[..n]);
        if let Some(status) = exit_status_in(&text) {
            return Some(status);
        }
        if text.len() > 64 * 1024 {
            return None;
        }
    }
}

/// The status in the first complete `{ "exit-code": N }` line in `text`: a signal when
/// the line also says `"signal": S` and N is 128 + S (what a shell would report for it),
/// else the code. bubblewrap's own lines say only the code, 128 + S for a signal too.
pub(super) fn exit_status_in(text: &[u8]) -> Option<ExitStatus> {
    let text = std::str::from_utf8(text).ok()?;
    let complete = &text[..text.rfind('\n')? + 1];
    complete.lines().find_map(|line| {
        let code = number_after(line, "\"exit-code\"")?;
        Some(match number_after(line, "\"signal\"") {
            Some(signal) if signal > 0 && code == 128 + signal => ExitStatus::Signal(signal),
            _ => ExitStatus::Code(code),
        })
    })
}

/// The integer after `key` and a colon in `line`.
pub(super) fn number_after(line: &str, key: &str) -> Option<i32> {
    let rest = line.split_once(key)?.1.trim_start();
    let value = rest.strip_prefix(':')?.trim_start();
    let digits: String = value
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    digits.parse().ok()
}

/// Resolves when process `pid` has exited, without reaping it.
pub(super) async fn wait_for_exit(pid: libc::pid_t) -> std::io::Result<()> {
    let pid =
        rustix::process::Pid::from_raw(pid).ok_or_else(|| std::io::Error::other("invalid pid"))?;
    match rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::NONBLOCK) {
        Ok(pidfd) => {
            // SAFETY: `pidfd` is an `OwnedFd` moved into the `AsyncFd`, so the descriptor
            // is valid and stays open for as long as the registration exists.
            let pidfd =
                unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) }
                    .map_err(|e| e.into_parts().1)?;
            // A pidfd polls readable once the process has exited and stays readable, so
            // one readiness event is the whole answer.
            let _ready = pidfd.readable().await?;
            Ok(())
        }
        // Kernels before 5.3, or container seccomp profiles that refuse pidfd_open: wait
        // on a blocking thread with WNOWAIT, which also leaves the zombie unreaped.
        Err(e) if e == rustix::io::Errno::NOSYS || e == rustix::io::Errno::PERM => {
            tokio::task::spawn_blocking(move || {
                use rustix::process::{WaitId, WaitIdOptions, waitid};
                waitid(
                    WaitId::Pid(pid),
                    WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
                )
                .map(|_| ())
                .map_err(std::io::Error::from)
            })
            .await
            .map_err(std::io::Error::other)?
        }
        Err(e) => Err(e.into()),
    }
}
