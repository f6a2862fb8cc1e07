//! Who is in a run's cgroup, and which of them could still act: what ending a run
//! kills and waits for.

use std::fs;
use std::io;
use std::path::Path;

pub(super) fn members(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|t| {
            t.lines()
                .filter_map(|l| l.trim().parse().ok())
                // Never a pid kill(2) would read as a group or as "everyone".
                .filter(|p: &i32| *p > 0)
                .collect()
        })
        .unwrap_or_default()
}

/// The kernel's flag on a thread that has started to exit (`include/linux/sched.h`).
const PF_EXITING: u64 = 0x4;

/// Whether process `pid` could still run code of its own or start a process. Not when it
/// has gone, is a zombie, or every one of its threads is exiting: the kernel flags a
/// thread `PF_EXITING` as it starts to exit, and such a thread never returns to user
/// space or forks again (a fork it was in the middle of has listed its child by then).
/// A sandbox's pid 1 tearing its namespaces down after its command ended stays listed
/// like that for a millisecond or more; waiting for it to go is the kernel's bookkeeping,
/// not containment. Anything unreadable other than a vanished process counts as able
/// to act (the wait then lasts until it leaves the cgroup, as it would without this).
fn can_still_act(pid: i32) -> bool {
    let tasks = match fs::read_dir(format!("/proc/{pid}/task")) {
        Ok(tasks) => tasks,
        // Gone from /proc: gone, unless the kernel still knows the pid.
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
                != Err(nix::errno::Errno::ESRCH);
        }
        Err(_) => return true,
    };
    for task in tasks {
        let Ok(task) = task else { return true };
        match fs::read_to_string(task.path().join("stat")) {
            Ok(stat) if thread_has_ended(&stat) => {}
            // A thread that went between the listing and the read has ended.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            _ => return true,
        }
    }
    false
}

/// Whether a `/proc/PID/task/TID/stat` line is a zombie, dead or exiting thread (the
/// command name, field 2, may hold spaces and parentheses: parse from the last `)`).
fn thread_has_ended(stat: &str) -> bool {
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return false;
    };
    let mut fields = rest.split_whitespace();
    // state, ppid, pgrp, session, tty_nr, tpgid, flags.
    let state = fields.next();
    if matches!(state, Some("Z" | "X" | "x")) {
        return true;
    }
    fields
        .nth(5)
        .and_then(|f| f.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_EXITING != 0)
}

/// Whether `/proc` is this process's pid namespace's (so a pid read from a cgroup names
/// the same process there): `/proc/self` is this process.
fn proc_is_ours() -> bool {
    fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str()?.parse::<u32>().ok())
        == Some(std::process::id())
}

/// The processes listed in `dir` (other than this one) that could still act — empty
/// only when none can and none joined while they were being checked: a process seen
/// exiting may have just finished a fork, whose child is listed by then, so the listing
/// is read again and must hold nobody new. Newcomers that keep coming are reported as
/// live (the caller kills them, or waits, until its deadline).
pub(super) fn live_members(dir: &Path, me: i32) -> Vec<i32> {
    live_members_seen_by(dir, me, proc_is_ours)
}

/// [`live_members`], told whether `/proc` can be trusted (tests simulate a foreign one).
fn live_members_seen_by(dir: &Path, me: i32, proc_ours: impl FnOnce() -> bool) -> Vec<i32> {
    let listing = || -> Vec<i32> { members(dir).into_iter().filter(|p| *p != me).collect() };
    let mut listed = listing();
    // Nobody listed (the usual answer at a run's end): read again, as below, but with no
    // process to look up, without asking whose /proc this is.
    if listed.is_empty() {
        listed = listing();
        if listed.is_empty() {
            return listed;
        }
    }
    if !proc_ours() {
        // A /proc of another pid namespace says nothing about these pids: every listed
        // process counts as live, and is killed and waited for until it leaves.
        return listed;
    }
    for _ in 0..16 {
        let live: Vec<i32> = listed
            .iter()
            .copied()
            .filter(|p| can_still_act(*p))
            .collect();
        if !live.is_empty() {
            return live;
        }
        let again = listing();
        if again.iter().all(|p| listed.contains(p)) {
            return Vec::new();
        }
        listed = again;
    }
    listed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_has_ended_when_it_is_a_zombie_dead_or_exiting() {
        // Fields after the name: state ppid pgrp session tty_nr tpgid flags ...
        let line = |state: &str, flags: u64| {
            format!("4242 (sh) {state} 1 4242 4242 0 -1 {flags} 120 0 0 0 1 2 3 4 20 0")
        };
        assert!(!thread_has_ended(&line("S", 0x0040_0100)));
        assert!(!thread_has_ended(&line("R", 0x0040_0000)));
        assert!(thread_has_ended(&line("R", 0x0040_0004)));
        assert!(thread_has_ended(&line("D", 0x4)));
        assert!(thread_has_ended(&line("Z", 0x0040_0100)));
        assert!(thread_has_ended(&line("X", 0)));
        // A name made to look like a zombie's line does not fool the parser.
        let hostile = "4242 (x) Z 1 1 1 0 -1 4 (y) S 1 4242 4242 0 -1 4194560 120";
        assert!(!thread_has_ended(hostile));
        assert!(!thread_has_ended("garbage"));
        assert!(!thread_has_ended("4242 (sh) S 1"));
    }

    #[test]
    fn an_empty_listing_asks_nothing_of_proc() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id() as i32;
        // Only this process listed: nobody else, whoever's /proc this is.
        fs::write(dir.path().join("cgroup.procs"), format!("{me}\n")).unwrap();
        let asked = std::cell::Cell::new(false);
        let live = live_members_seen_by(dir.path(), me, || {
            asked.set(true);
            false
        });
        assert_eq!(live, Vec::<i32>::new());
        assert!(!asked.get(), "an empty listing needs no /proc");
    }

    #[test]
    fn with_a_foreign_proc_every_listed_process_counts_as_live() {
        let dir = tempfile::tempdir().unwrap();
        let me = std::process::id() as i32;
        // A pid no process has, this process, and what kill(2) would read as groups.
        fs::write(
            dir.path().join("cgroup.procs"),
            format!("{}\n{me}\n0\n-1\n", i32::MAX),
        )
        .unwrap();
        assert_eq!(
            live_members_seen_by(dir.path(), me, || true),
            Vec::<i32>::new()
        );
        assert_eq!(
            live_members_seen_by(dir.path(), me, || false),
            vec![i32::MAX]
        );
    }

    #[test]
    fn a_vanished_process_cannot_act_and_a_running_one_can() {
        assert!(proc_is_ours());
        assert!(can_still_act(std::process::id() as i32));
        // A pid above the kernel's limit names no process, in /proc or anywhere.
        assert!(!can_still_act(i32::MAX));
    }
}
