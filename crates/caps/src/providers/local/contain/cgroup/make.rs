//! Making a run's cgroups: fresh ones in every hierarchy, or the spare prepared in the
//! background (see `spare.rs`), with the run's limits written before its child exists.

use std::fs;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::limits::apply_limits;
use super::run_group::{Member, RunGroup};
use super::watchdog::ensure_watchdog;
use super::{Flavor, Hierarchies, Hierarchy, lock, move_into, run_dir};
use crate::providers::local::contain::companion;
use crate::providers::local::contain::spare::{self, Parked};
use crate::shell::ResourceLimits;

/// Run numbers, unique within this process (every `Hierarchies` of the process names
/// its runs `warden.<pid>.run.<n>`).
static NEXT_RUN: AtomicU64 = AtomicU64::new(0);

/// How long a run waits for a spare that is being prepared (it is usually a grace
/// period away) before making its own cgroups.
const SPARE_WAIT: Duration = Duration::from_millis(200);

/// The spare run group (see `spare.rs`): one ready — with a spawner parked inside it,
/// or none where the companion starts runs — one being prepared, and whether using one
/// prepares the next.
#[derive(Debug, Default)]
pub(super) struct Spare {
    ready: Option<(Vec<Member>, Option<Parked>)>,
    preparing: bool,
    keep: bool,
}

impl Hierarchies {
    /// A fresh cgroup for one run, in every hierarchy, with `limits` applied — the spare
    /// one, with its parked spawner, when one is ready.
    pub(crate) fn run_group(&self, limits: ResourceLimits) -> io::Result<RunGroup> {
        ensure_watchdog(self.helper.as_deref(), &self.list);
        let ready = {
            let (slot, prepared) = &*self.spare;
            let mut spare = lock(slot);
            // One on its way is nearer than new cgroups of our own.
            let deadline = Instant::now() + SPARE_WAIT;
            while spare.ready.is_none() && spare.preparing {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                spare = prepared
                    .wait_timeout(spare, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            let ready = spare.ready.take();
            if ready.is_some() && spare.keep {
                drop(spare);
                self.prepare(true);
            }
            ready
        };
        let (dirs, spawner) = match ready {
            Some((dirs, parked)) => (dirs, parked),
            None => (make_dirs(&self.list, |_| true)?, None),
        };
        // The spawner thread counts against the process limit while it waits for the
        // run to end: one more.
        let limits = ResourceLimits {
            max_processes: limits
                .max_processes
                .map(|n| n + u64::from(spawner.is_some())),
            ..limits
        };
        let group = RunGroup {
            dirs,
            finished: false,
            oom_limit: limits.max_memory,
            spawner,
            keeper: None,
            helper: self.helper.clone(),
        };
        // The limits are written now, before the child exists (a write, not a
        // migration: cheap).
        for m in &group.dirs {
            if let Some(h) = self.list.iter().find(|h| h.flavor == m.flavor) {
                apply_limits(h, &m.dir, limits)?;
            }
        }
        Ok(group)
    }

    /// Whether a spare run group is ready.
    pub(crate) fn has_spare(&self) -> bool {
        lock(&self.spare.0).ready.is_some()
    }

    /// Prepare a spare run group in the background (where runs use v1 hierarchies);
    /// with `keep`, prepare a new one each time one is used.
    pub(crate) fn prepare(&self, keep: bool) {
        if companion::get().is_some() {
            // The companion starts the helper's runs inside their cgroups itself, and is
            // the watchdog: no thread needs to wait in a spare, but the directories are
            // still made ahead, on a thread of their own.
            self.prepare_directories(keep);
            return;
        }
        if !self.list.iter().any(|h| h.flavor != Flavor::V2) {
            // Pure v2: only whole processes move, so no thread can wait inside.
            return;
        }
        if !self.start_preparing(keep) {
            return;
        }
        let (list, slot) = (Arc::clone(&self.list), Arc::clone(&self.spare));
        let helper = self.helper.clone();
        let into_v2 = crate::providers::local::spawn::can_spawn_into_cgroup();
        spare::start(
            move || {
                // First, while this thread is outside every run's cgroup.
                ensure_watchdog(helper.as_deref(), &list);
                // v2 only when the child can enter it at birth; a thread cannot.
                let dirs = make_dirs(&list, |f| f != Flavor::V2 || into_v2)?;
                for m in dirs.iter().filter(|m| m.flavor != Flavor::V2) {
                    if let Err(e) = move_into(m.flavor, &m.dir) {
                        remove_dirs(&dirs);
                        return Err(e);
                    }
                }
                Ok(dirs)
            },
            move |parked| {
                let (slot, prepared) = &*slot;
                let mut spare = lock(slot);
                spare.preparing = false;
                match parked {
                    Ok((dirs, parked)) => spare.ready = Some((dirs, Some(parked))),
                    Err(e) => tracing::debug!("no spare run group: {e}"),
                }
                prepared.notify_all();
            },
        );
    }

    /// Whether a spare should be prepared now (none ready or on its way), marked as on
    /// its way if so; `keep` is remembered either way.
    fn start_preparing(&self, keep: bool) -> bool {
        let mut spare = lock(&self.spare.0);
        spare.keep |= keep;
        if spare.ready.is_some() || spare.preparing {
            return false;
        }
        spare.preparing = true;
        true
    }

    /// [`Hierarchies::prepare`] where the companion starts runs: the next run's
    /// directories made (and the companion told what to clear if this process dies)
    /// on a short-lived thread, so that their `mkdir`s — a memory cgroup's is the
    /// slowest, tenths of a millisecond — are not on the run's path. Nothing moves into
    /// them; a `warden exec` that ends without a run leaves them to the companion.
    fn prepare_directories(&self, keep: bool) {
        if !self.start_preparing(keep) {
            return;
        }
        let (list, slot) = (Arc::clone(&self.list), Arc::clone(&self.spare));
        let helper = self.helper.clone();
        let started = std::thread::Builder::new()
            .name("warden-cgroups".into())
            .spawn(move || {
                ensure_watchdog(helper.as_deref(), &list);
                directories_made(&slot, make_dirs(&list, |_| true));
            });
        if let Err(e) = started {
            directories_made(&self.spare, Err(e));
        }
    }
}

/// Record the directories [`Hierarchies::prepare_directories`] made (or why none were)
/// and wake a run waiting for them.
fn directories_made(
    spare: &(std::sync::Mutex<Spare>, std::sync::Condvar),
    made: io::Result<Vec<Member>>,
) {
    let (slot, prepared) = spare;
    let mut spare = lock(slot);
    spare.preparing = false;
    match made {
        Ok(dirs) => spare.ready = Some((dirs, None)),
        Err(e) => tracing::debug!("no run cgroups made ahead: {e}"),
    }
    prepared.notify_all();
}

/// Make `warden.<pid>.run.<n>` in every hierarchy whose flavor `include` accepts.
fn make_dirs(list: &[Hierarchy], include: impl Fn(Flavor) -> bool) -> io::Result<Vec<Member>> {
    let n = NEXT_RUN.fetch_add(1, Ordering::Relaxed);
    let mut dirs = Vec::new();
    for h in list.iter().filter(|h| include(h.flavor)) {
        let dir = run_dir(&h.prefix, n);
        if let Err(e) = fs::create_dir(&dir) {
            remove_dirs(&dirs);
            return Err(io::Error::new(
                e.kind(),
                format!("cannot create the run's cgroup {}: {e}", dir.display()),
            ));
        }
        dirs.push(Member {
            flavor: h.flavor,
            dir,
            home: h.home.clone(),
        });
    }
    Ok(dirs)
}

fn remove_dirs(dirs: &[Member]) {
    for m in dirs {
        let _ = fs::remove_dir(&m.dir);
    }
}
