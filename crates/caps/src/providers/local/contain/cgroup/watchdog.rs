//! This process's cgroup watchdog (started once, or its companion told the run prefixes), and
//! what a watchdog does once its Warden is gone: end and remove every run left.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::run_group::{Member, Removal, RunGroup};
use super::{Flavor, Hierarchy, SPAWN_LOCK, lock, own_leaf, runs_of};
use crate::providers::local::contain::companion;

/// This process's cgroup watchdog (see `watchdog.rs`): one per process, however many
/// `Hierarchies` it makes (their runs share the `warden.<pid>` prefix), and never
/// stopped — its pipe closes when the process ends.
pub(super) static WATCHDOG: Mutex<Watchdog> = Mutex::new(Watchdog::NotStarted);

pub(super) enum Watchdog {
    NotStarted,
    /// Held, never written: its closing, when this process ends, is the signal.
    Running {
        _pipe: std::os::fd::OwnedFd,
    },
    /// This process's companion (`companion/`) watches, told the run prefixes.
    Companion,
    /// It could not be started (said once, at debug level); runs still start.
    Unavailable,
}

/// Make sure this process has a watchdog unless it could not get one: its companion,
/// told the run prefixes, where it has one; else one started with `helper`. Called before a
/// run's cgroups are made, by a thread outside every run's cgroup.
pub(super) fn ensure_watchdog(helper: Option<&Path>, list: &[Hierarchy]) {
    let mut watchdog = lock(&WATCHDOG);
    if !matches!(*watchdog, Watchdog::NotStarted) {
        return;
    }
    let prefixes: Vec<(Flavor, PathBuf)> =
        list.iter().map(|h| (h.flavor, h.prefix.clone())).collect();
    if companion::get().is_some_and(|c| c.watch(&prefixes)) {
        *watchdog = Watchdog::Companion;
        return;
    }
    let Some(helper) = helper else {
        *watchdog = Watchdog::Unavailable;
        tracing::debug!("no helper binary: runs are not ended if this process is killed");
        return;
    };
    // Not while this process sits in a run's v2 cgroup for a spawn: the watchdog would
    // be born there, and end with that run.
    let _serial = SPAWN_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    *watchdog = match super::super::watchdog::start(helper, &prefixes) {
        Ok(pipe) => Watchdog::Running { _pipe: pipe },
        Err(e) => {
            tracing::warn!(
                "cannot start the cgroup watchdog ({e}): runs are not ended if this process is killed"
            );
            Watchdog::Unavailable
        }
    };
}

/// End every run left of the process whose runs `prefixes` name (`warden.<pid>` in
/// each hierarchy) and remove them, then what Wardens that died before left in the same
/// places: what the watchdog does once its Warden is gone.
pub(in crate::providers::local::contain) fn end_every_run(prefixes: &[(Flavor, PathBuf)]) {
    let mut runs: std::collections::BTreeMap<std::ffi::OsString, Vec<Member>> =
        std::collections::BTreeMap::new();
    for (flavor, prefix) in prefixes {
        let Some((dir, stem)) = runs_of(prefix) else {
            continue;
        };
        let Ok(entries) = fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name.to_string_lossy().starts_with(&stem) && entry.path().is_dir() {
                runs.entry(name).or_default().push(Member {
                    flavor: *flavor,
                    dir: entry.path(),
                    home: dir.to_path_buf(),
                });
            }
        }
    }
    for (_, dirs) in runs {
        let mut group = RunGroup {
            dirs,
            finished: false,
            oom_limit: None,
            spawner: None,
            keeper: None,
            helper: None,
        };
        group.kill();
        group.finish(Removal::Wait);
    }
    for (_, prefix) in prefixes {
        // Its own leaf (`warden.<pid>.self`, v2), which the clean-up below skips while
        // the Warden that made it is a zombie not yet reaped.
        let _ = fs::remove_dir(own_leaf(prefix));
        if let Some(dir) = prefix.parent() {
            super::discover::remove_stale_runs(dir);
        }
    }
}
