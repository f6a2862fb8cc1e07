//! The run's process tree until it is reaped: the group killed on timeout, and when
//! the supervising future is dropped early the group, the session and the containment
//! unit killed and the child reaped off the run's path.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::providers::local::contain::{Removal, Unit};
use crate::providers::local::proc_stat::process_stats;
use crate::shell::ExitStatus;

/// Whether `pid` is the first process (init) of a pid namespace below this one: its
/// `NSpid` ends in 1 after this namespace's number.
fn is_namespace_init(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
            let ids: Vec<&str> = line["NSpid:".len()..].split_whitespace().collect();
            Some(ids.len() > 1 && ids.last() == Some(&"1"))
        })
        .unwrap_or(false)
}

/// Owns the run's process tree until it is reaped: kills the group on timeout, and when
/// the supervising future is dropped early kills the group, the session and the
/// containment unit, releases the output reader, and reaps the child on a helper thread
/// so no zombie is left.
pub(super) struct TreeGuard {
    leader: Pid,
    unit: Option<Unit>,
    reaped: bool,
    /// The leader reported its end and is still exiting: reaped after the unit is
    /// finished, on that thread, without the run waiting for it.
    reap_later: bool,
    pub(super) reader_wake: Option<OwnedFd>,
    /// The leader launches the command (a sandbox): [`TreeGuard::signal_run`] passes it
    /// over.
    pub(super) spare_leader_from_signals: bool,
}

impl TreeGuard {
    pub(super) fn new(leader: Pid, unit: Unit) -> Self {
        TreeGuard {
            leader,
            unit: Some(unit),
            reaped: false,
            reap_later: false,
            reader_wake: None,
            spare_leader_from_signals: false,
        }
    }

    pub(super) fn signal(&self, signal: Signal) {
        // ESRCH (nothing left in the group) is the normal case after a clean exit.
        let _ = killpg(self.leader, signal);
    }

    /// Send `signal` to the run's processes, as its driver asked: every member of the
    /// run's cgroup that can still act (however it left the group or session), else the
    /// leader's process group. A launching leader and pid namespace inits are passed
    /// over: the signal is for the command, and a namespace's init ends everything in it.
    ///
    /// A member is signalled through a pidfd opened first and checked after: a pid still
    /// listed in the run's cgroup once its pidfd is open names a process of the run, so
    /// a member that exited and whose pid was reused outside the run (between reading the
    /// list and signalling) is never signalled.
    pub(super) fn signal_run(&self, signal: Signal) {
        match self.unit.as_ref().and_then(Unit::members) {
            Some(pids) => {
                let Some(raw) = rustix::process::Signal::from_named_raw(signal as i32) else {
                    return;
                };
                // `None`: no pidfd here (a kernel before 5.3, a seccomp profile refusing
                // it); such a member is signalled by pid, with the check still made.
                let opened: Vec<(i32, Option<OwnedFd>)> = pids
                    .into_iter()
                    .filter(|pid| {
                        let launcher =
                            self.spare_leader_from_signals && *pid == self.leader.as_raw();
                        !launcher && !is_namespace_init(*pid)
                    })
                    .filter_map(|pid| {
                        let process = rustix::process::Pid::from_raw(pid)?;
                        match rustix::process::pidfd_open(
                            process,
                            rustix::process::PidfdFlags::empty(),
                        ) {
                            Ok(fd) => Some((pid, Some(fd))),
                            // Gone already: nothing to signal.
                            Err(rustix::io::Errno::SRCH) => None,
                            Err(_) => Some((pid, None)),
                        }
                    })
                    .collect();
                let still = self
                    .unit
                    .as_ref()
                    .and_then(Unit::members)
                    .unwrap_or_default();
                for (pid, fd) in opened {
                    if !still.contains(&pid) {
                        continue;
                    }
                    match fd {
                        Some(fd) => {
                            let _ = rustix::process::pidfd_send_signal(&fd, raw);
                        }
                        None => {
                            let _ = kill(Pid::from_raw(pid), signal);
                        }
                    }
                }
            }
            None if !self.spare_leader_from_signals => self.signal(signal),
            None => tracing::debug!("no cgroup lists the sandbox's processes: {signal} not sent"),
        }
    }

    /// End every process of the run: the unit (which also reaches what left the group),
    /// then the group. A reaper leader ends its run itself when asked and must not be
    /// killed before it has.
    pub(super) fn kill_all(&self) {
        if let Some(unit) = &self.unit {
            unit.kill();
            if matches!(unit, Unit::Reaper { .. }) {
                return;
            }
        }
        self.signal(Signal::SIGKILL);
    }

    /// Kill every process still in the run's session, including members of process
    /// groups the child created (shells with job control do that).
    pub(super) fn sweep_session(&self) {
        // A reaper leader is spared: killing it before it has ended its run would hand
        // the run's orphans to init.
        let exempt = matches!(self.unit, Some(Unit::Reaper { .. })).then_some(self.leader.as_raw());
        for pid in session_members(self.leader.as_raw()) {
            if Some(pid) != exempt {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }

    /// Collect the exit status of the (already exited) leader.
    pub(super) fn reap(&mut self) -> std::io::Result<ExitStatus> {
        loop {
            match waitpid(self.leader, None) {
                Ok(status) => {
                    self.reaped = true;
                    return Ok(match status {
                        WaitStatus::Exited(_, code) => ExitStatus::Code(code),
                        WaitStatus::Signaled(_, sig, _) => ExitStatus::Signal(sig as i32),
                        // Stop/continue reports are not requested (no WUNTRACED).
                        _ => continue,
                    });
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The leader reported its end and is exiting: reap it on a thread of its own (so
    /// that no zombie is left) instead of waiting for it here.
    pub(super) fn reap_in_background(&mut self) {
        self.reaped = true;
        self.reap_later = true;
    }

    /// Wait for the unit to be empty and remove it (off the async threads); what the
    /// kernel enforced, if anything. A leader left to reap is reaped after that, on the
    /// same thread, once the answer has gone back.
    pub(super) async fn finish_unit(&mut self) -> Option<String> {
        if std::mem::take(&mut self.reap_later) {
            let leader = self.leader;
            // Not waited for: the answer does not depend on it.
            tokio::task::spawn_blocking(move || {
                while let Err(nix::errno::Errno::EINTR) = waitpid(leader, None) {}
            });
        }
        let mut unit = self.unit.take()?;
        // Usually nothing is left to wait for: then no hand-over to another thread.
        if let Some(note) = unit.finish_without_waiting(Removal::Background) {
            return note;
        }
        tokio::task::spawn_blocking(move || unit.finish(Removal::Background))
            .await
            .ok()
            .flatten()
    }

    /// Tell the output reader to stop waiting for end-of-file.
    pub(super) fn wake_reader(&mut self) {
        if let Some(fd) = self.reader_wake.take() {
            let _ = nix::unistd::write(&fd, b"x");
        }
    }
}

impl Drop for TreeGuard {
    fn drop(&mut self) {
        self.wake_reader();
        if self.reap_later {
            // It reported its end, but the run stopped before it was finished.
            let leader = self.leader;
            std::thread::spawn(
                move || while let Err(nix::errno::Errno::EINTR) = waitpid(leader, None) {},
            );
        }
        if self.reaped {
            return;
        }
        let reaper = matches!(self.unit, Some(Unit::Reaper { .. }));
        self.kill_all();
        self.sweep_session();
        let leader = self.leader;
        let mut unit = self.unit.take();
        // SIGKILL cannot be ignored, so these waits are short; they must not block the
        // async runtime that is dropping us.
        std::thread::spawn(move || {
            if reaper {
                // The reaper ends its run and exits by itself; if it does not, kill it.
                let deadline = Instant::now() + Duration::from_secs(2);
                loop {
                    match waitpid(leader, Some(nix::sys::wait::WaitPidFlag::WNOHANG)) {
                        Ok(WaitStatus::StillAlive) if Instant::now() < deadline => {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Ok(WaitStatus::StillAlive) => {
                            let _ = killpg(leader, Signal::SIGKILL);
                            while let Err(nix::errno::Errno::EINTR) = waitpid(leader, None) {}
                            break;
                        }
                        _ => break,
                    }
                }
            } else {
                while let Err(nix::errno::Errno::EINTR) = waitpid(leader, None) {}
            }
            if let Some(unit) = unit.as_mut() {
                unit.finish(Removal::Wait);
            }
        });
    }
}

/// Pids whose session id is `sid`, read from `/proc/*/stat`.
pub(super) fn session_members(sid: i32) -> Vec<i32> {
    process_stats()
        .into_iter()
        .filter(|(_, fields)| session_of(fields) == Some(sid))
        .map(|(pid, _)| pid)
        .collect()
}

/// The session field (after state, ppid and pgrp) of a stat line's fields.
fn session_of(fields: &[String]) -> Option<i32> {
    fields.get(3)?.parse().ok()
}

/// The session field of a `/proc/PID/stat` line. The command name (field 2) may contain
/// spaces and parentheses, so parse from the last `)`.
#[cfg(test)]
pub(super) fn stat_session(stat: &str) -> Option<i32> {
    session_of(&crate::providers::local::proc_stat::fields_after_name(
        stat,
    )?)
}
