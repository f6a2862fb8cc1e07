//! One run's cgroups: starting its process inside them, killing every member, and
//! removing them once the run has ended.

use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::limits::oom_killed;
use super::liveness::{live_members, members};
use super::watchdog::{WATCHDOG, Watchdog};
use super::{Flavor, SPAWN_LOCK, lock, move_into, write};
use crate::providers::local::contain::companion;
use crate::providers::local::contain::spare::{Keeper, Parked};
use crate::providers::local::spawn::{SpawnRequest, SpawnedChild};

/// How long ending a run waits for its cgroup to empty before giving up on removing it.
const EMPTY_WAIT: Duration = Duration::from_secs(2);

/// How long killing a v1-only run keeps killing what its cgroup lists (it may be called
/// on an async thread, so it is bounded well below `EMPTY_WAIT`).
const KILL_WAIT: Duration = Duration::from_millis(500);

#[derive(Debug, Clone)]
pub(super) struct Member {
    pub(super) flavor: Flavor,
    pub(super) dir: PathBuf,
    pub(super) home: PathBuf,
}

/// One run's cgroups.
#[derive(Debug)]
pub(crate) struct RunGroup {
    pub(super) dirs: Vec<Member>,
    pub(super) finished: bool,
    pub(super) oom_limit: Option<u64>,
    /// A thread already inside the v1 cgroups, to start the child (see `spare.rs`).
    pub(super) spawner: Option<Parked>,
    /// That thread, kept until the run ends.
    pub(super) keeper: Option<Keeper>,
    /// The helper binary, whose subcommands this process's companion starts in-process.
    pub(super) helper: Option<Arc<Path>>,
}

impl RunGroup {
    /// Start `request`'s process inside the run. With a parked spawner, that thread —
    /// already in the v1 cgroups — starts it. Otherwise the v2 cgroup is entered by the
    /// child itself at birth where glibc and the kernel can (`CLONE_INTO_CGROUP`), and
    /// the v1 hierarchies (and v2 otherwise) by the spawning thread joining for the
    /// instant of the spawn — migrations (a whole process's, into v2, waits for an RCU
    /// grace period).
    pub(crate) fn spawn_inside(&mut self, request: SpawnRequest) -> io::Result<SpawnedChild> {
        if self.spawner.is_none()
            && let Some(started) = self.start_through_companion(&request)
        {
            return started;
        }
        let open_v2 = || {
            self.dirs
                .iter()
                .find(|m| m.flavor == Flavor::V2)
                .filter(|_| crate::providers::local::spawn::can_spawn_into_cgroup())
                .and_then(|m| {
                    fs::File::open(&m.dir)
                        .inspect_err(|e| tracing::debug!("cannot open {}: {e}", m.dir.display()))
                        .ok()
                })
        };
        if let Some(parked) = self.spawner.take() {
            let keep_thread = request.watches_its_parent;
            let (child, keeper) = parked.spawn(request, open_v2())?;
            // Only a child whose parent-death signal follows that thread needs it kept;
            // otherwise it ends now, and a long-lived run holds no thread of ours.
            self.keeper = keep_thread.then_some(keeper);
            return Ok(child);
        }
        let _serial = SPAWN_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        let v2_dir = open_v2();
        if v2_dir.is_none() && self.leave_out_v2() {
            return self.with_joined(false, || request.spawn(None));
        }
        let started = self.with_joined(v2_dir.is_none(), || {
            request.spawn(v2_dir.as_ref().map(|d| d.as_raw_fd()))
        });
        match started {
            // An older kernel refuses CLONE_INTO_CGROUP: join v2 the slow way instead.
            Err(e)
                if v2_dir.is_some()
                    && matches!(
                        e.raw_os_error(),
                        Some(nix::libc::EINVAL | nix::libc::ENOSYS | nix::libc::E2BIG)
                    ) =>
            {
                tracing::debug!("spawning into a cgroup failed ({e}); migrating instead");
                let v2 = !self.leave_out_v2();
                self.with_joined(v2, || request.spawn(None))
            }
            other => other,
        }
    }

    /// Where the run's v1 `pids` cgroup holds it (hybrid hosts), a child that cannot be
    /// born in the run's v2 cgroup is left out of v2 — its empty v2 cgroup removed, the
    /// run listed and ended through v1 `pids` — instead of this whole process migrating
    /// into v2 for the spawn: v2 moves every thread at once, so a process another thread
    /// started in that instant (a spare spawner's run, a probe) would be born in this
    /// run's cgroup and killed with it. True when v2 was left out (or there was none).
    fn leave_out_v2(&mut self) -> bool {
        if !self.dirs.iter().any(|m| m.flavor == Flavor::V1Pids) {
            return !self.dirs.iter().any(|m| m.flavor == Flavor::V2);
        }
        self.dirs.retain(|m| {
            let keep = m.flavor != Flavor::V2;
            if !keep {
                let _ = fs::remove_dir(&m.dir);
            }
            keep
        });
        true
    }

    /// Start `request` through this process's companion, if it has one and the request
    /// runs the helper binary (whose subcommands the companion runs without executing
    /// it): born in the v2 cgroup, joining the v1 cgroups before anything else. `None`:
    /// the caller starts it itself — no companion, another program, or a kernel that
    /// cannot clone into a cgroup (before Linux 5.7).
    fn start_through_companion(
        &mut self,
        request: &SpawnRequest,
    ) -> Option<io::Result<SpawnedChild>> {
        let companion = companion::get()?;
        if self.helper.as_deref() != Some(request.program.as_path()) {
            return None;
        }
        let open = |m: &Member, flags: rustix::fs::OFlags| {
            rustix::fs::open(
                &m.dir,
                flags | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .inspect_err(|e| tracing::debug!("cannot open {}: {e}", m.dir.display()))
            .ok()
        };
        let v2 = match self.dirs.iter().find(|m| m.flavor == Flavor::V2) {
            Some(m) => Some(open(
                m,
                rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
            )?),
            None => None,
        };
        let v1 = self
            .dirs
            .iter()
            .filter(|m| m.flavor != Flavor::V2)
            .map(|m| {
                let tasks = Member {
                    dir: m.dir.join("tasks"),
                    ..m.clone()
                };
                open(&tasks, rustix::fs::OFlags::WRONLY)
            })
            .collect::<Option<Vec<_>>>()?;
        use std::os::fd::AsFd as _;
        // A process made before the run (the companion's standby pid 1) is outside its v2
        // cgroup; where a v1 pids cgroup holds the run too, that is allowed.
        let v2_optional = self.dirs.iter().any(|m| m.flavor == Flavor::V1Pids);
        let started = companion.spawn(request, v2.as_ref().map(|d| d.as_fd()), v2_optional, &v1)?;
        let started = started.map(|s| {
            if s.outside_v2 {
                // The run is listed and ended through its v1 pids cgroup then; the empty
                // v2 one goes.
                self.dirs.retain(|m| {
                    let keep = m.flavor != Flavor::V2;
                    if !keep {
                        let _ = fs::remove_dir(&m.dir);
                    }
                    keep
                });
            }
            s.child
        });
        match started {
            // An older kernel refuses CLONE_INTO_CGROUP (or clone3): the old way.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(nix::libc::EINVAL | nix::libc::ENOSYS | nix::libc::E2BIG)
                ) =>
            {
                tracing::debug!("the companion cannot clone into a cgroup ({e})");
                None
            }
            other => Some(other),
        }
    }

    /// Run `f` with the calling thread in the run's v1 cgroups (and its v2 cgroup, with
    /// `v2`), then leave them.
    fn with_joined<R>(&self, v2: bool, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        let mut joined = Vec::new();
        for m in self.dirs.iter().filter(|m| v2 || m.flavor != Flavor::V2) {
            if let Err(e) = move_into(m.flavor, &m.dir) {
                self.leave(&joined);
                return Err(e);
            }
            joined.push(m);
        }
        let result = f();
        self.leave(&joined);
        result
    }

    fn leave(&self, joined: &[&Member]) {
        for m in joined {
            if let Err(e) = move_into(m.flavor, &m.home) {
                tracing::error!("could not leave a run's cgroup: {e}");
            }
        }
    }

    /// The cgroup whose listing ending a run reads: v2 where the run has one, else the v1
    /// `pids` hierarchy (a run's processes are in every one of its hierarchies).
    fn listing(&self) -> Option<&Member> {
        self.dirs
            .iter()
            .find(|m| m.flavor == Flavor::V2)
            .or_else(|| self.dirs.iter().find(|m| m.flavor == Flavor::V1Pids))
    }

    /// The run's members that can still act — never this process.
    pub(crate) fn members(&self) -> Vec<i32> {
        let me = std::process::id() as i32;
        self.listing()
            .map(|listed| live_members(&listed.dir, me))
            .unwrap_or_default()
    }

    /// Kill every member of the run — never this process.
    pub(crate) fn kill(&self) {
        let me = std::process::id() as i32;
        let mut kernel_killed = false;
        if let Some(v2) = self.dirs.iter().find(|m| m.flavor == Flavor::V2) {
            let us_inside = members(&v2.dir).contains(&me);
            if us_inside {
                // A failed leave: get out before the whole cgroup is killed.
                let _ = move_into(Flavor::V2, &v2.home);
            }
            kernel_killed =
                !members(&v2.dir).contains(&me) && write(&v2.dir.join("cgroup.kill"), "1").is_ok();
        }
        // No cgroup.kill (v1 only, or a kernel before 5.14): first forbid every new
        // process (pids.max = 0: a fork in the run fails from now on).
        let forbid_forks = |flavors: &[Flavor]| {
            for m in self.dirs.iter().filter(|m| flavors.contains(&m.flavor)) {
                if let Err(e) = write(&m.dir.join("pids.max"), "0") {
                    tracing::debug!("cannot stop the run's forks: {e}");
                }
            }
        };
        if !kernel_killed {
            forbid_forks(&[Flavor::V1Pids]);
        }
        let Some(listed) = self.listing() else {
            return;
        };
        // Then kill what is listed and can still act until nothing is — after cgroup.kill
        // too: the kernel's kill passes over a process whose main thread has exited while
        // its other threads run on (seen on Linux 6.18), which kill(2) of its pid ends.
        // What is already on its way out (after a clean exit: a sandbox's pid 1 tearing
        // its namespaces down) can do nothing more and is not waited for; a process that
        // keeps forking cannot outlast the loop, because pids.max = 0 refuses its forks.
        let deadline = Instant::now() + KILL_WAIT;
        let mut pause = Pause::new();
        let mut first = true;
        loop {
            let pids = live_members(&listed.dir, me);
            if pids.is_empty() || Instant::now() >= deadline {
                return;
            }
            if first && kernel_killed {
                tracing::debug!("cgroup.kill left {pids:?} running; killing them one by one");
                forbid_forks(&[Flavor::V2, Flavor::V1Pids]);
            }
            first = false;
            for pid in pids {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            pause.sleep();
        }
    }

    /// [`RunGroup::finish`] when nothing in the run's cgroups can act any more (so it
    /// waits for nothing); `None` otherwise.
    pub(crate) fn finish_without_waiting(&mut self, removal: Removal) -> Option<Option<String>> {
        if self.finished {
            return Some(None);
        }
        let me = std::process::id() as i32;
        let quiet = self
            .listing()
            .is_none_or(|listed| live_members(&listed.dir, me).is_empty());
        // Listed once: `finish` would list again before it found nothing to wait for.
        quiet.then(|| self.finish_quiet(removal))
    }

    /// Wait until nothing in the run's cgroups can act any more, say whether the kernel
    /// enforced the memory limit, and remove the cgroups — at once where the kernel
    /// allows, otherwise as `removal` says.
    pub(crate) fn finish(&mut self, removal: Removal) -> Option<String> {
        if self.finished {
            return None;
        }
        // The spawner thread may go now; it leaves the cgroups as it ends.
        drop(self.keeper.take());
        let me = std::process::id() as i32;
        let deadline = Instant::now() + EMPTY_WAIT;
        // Every hierarchy holds the same processes: one listing is enough to wait on.
        if let Some(listed) = self.listing() {
            let mut pause = Pause::new();
            while !live_members(&listed.dir, me).is_empty() && Instant::now() < deadline {
                pause.sleep();
            }
        }
        self.finish_quiet(removal)
    }

    /// The rest of [`RunGroup::finish`], once nothing in the cgroups can act.
    fn finish_quiet(&mut self, removal: Removal) -> Option<String> {
        self.finished = true;
        drop(self.keeper.take());
        let mut note = None;
        for m in &self.dirs {
            if let Some(limit) = self.oom_limit
                && oom_killed(m)
            {
                note = Some(format!(
                    "warden: the run reached its memory limit ({} MiB) and the kernel killed a process",
                    limit / (1024 * 1024)
                ));
            }
        }
        // A one-shot `warden exec`'s companion removes them (as it would clear them once
        // this process ends): no rmdir, slow on some kernels, on the way to the answer.
        if removal == Removal::Background
            && let Some(companion) = companion::get()
            && companion.remove(
                &self
                    .dirs
                    .iter()
                    .rev()
                    .map(|m| m.dir.clone())
                    .collect::<Vec<_>>(),
            )
        {
            self.dirs.clear();
            return note;
        }
        // Children first. A cgroup still listing a process on its way out (or the spawner
        // thread leaving) cannot be removed yet.
        let left: Vec<Member> = std::mem::take(&mut self.dirs)
            .into_iter()
            .rev()
            .filter(|m| fs::remove_dir(&m.dir).is_err())
            .collect();
        if left.is_empty() {
            return note;
        }
        // The watchdog removes whatever is left when this process ends, so removal need
        // not hold up the caller; without one, it must.
        let background = removal == Removal::Background
            && matches!(
                *lock(&WATCHDOG),
                Watchdog::Running { .. } | Watchdog::Companion
            );
        if background {
            let spawned = std::thread::Builder::new()
                .name("warden-cgroup-rm".into())
                .spawn({
                    let left = left.clone();
                    move || remove_when_empty(&left)
                });
            if spawned.is_ok() {
                return note;
            }
        }
        remove_when_empty(&left);
        note
    }
}

/// How [`RunGroup::finish`] removes a cgroup that still lists a process on its way out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Removal {
    /// Wait for it (the watchdog, and threads that exist to clean up).
    Wait,
    /// On a thread of its own, so the run's result is not held up; only where the
    /// watchdog would remove it should this process end first.
    Background,
}

/// Remove `dirs` (children first), retrying while the kernel still lists a process on
/// its way out — for as long as a run's end waited for its cgroups to empty before.
fn remove_when_empty(dirs: &[Member]) {
    let paths: Vec<PathBuf> = dirs.iter().map(|m| m.dir.clone()).collect();
    remove_paths_when_empty(&paths);
}

/// [`remove_when_empty`] of cgroup directories given by path (the companion's, handed
/// them by Warden).
pub(crate) fn remove_paths_when_empty(dirs: &[PathBuf]) {
    let deadline = Instant::now() + EMPTY_WAIT;
    for dir in dirs {
        let mut pause = Pause::new();
        while let Err(e) = fs::remove_dir(dir) {
            if e.kind() == io::ErrorKind::NotFound {
                break;
            }
            if Instant::now() >= deadline {
                tracing::warn!("could not remove the run's cgroup {}: {e}", dir.display());
                break;
            }
            pause.sleep();
        }
    }
}

/// Waiting for the kernel to empty a cgroup: the last processes of a run usually go
/// within a fraction of a millisecond (this wait is on the run's critical path), a
/// straggler may take longer — so short pauses first, then up to 2 ms. The first is no
/// sleep but a yield of the processor: what was just killed is often waiting for this
/// very one (the sandbox's pid 1 writes its command's status, which wakes Warden on
/// the processor pid 1 ran on, before pid 1 has got to its exit), and a sleep, however
/// short, costs the timer's slack on top.
struct Pause(Option<Duration>);

impl Pause {
    fn new() -> Self {
        Pause(None)
    }

    fn sleep(&mut self) {
        match self.0 {
            None => {
                std::thread::yield_now();
                self.0 = Some(Duration::from_micros(50));
            }
            Some(pause) => {
                std::thread::sleep(pause);
                self.0 = Some((pause * 2).min(Duration::from_millis(2)));
            }
        }
    }
}

impl Drop for RunGroup {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.kill();
        let mut rest = RunGroup {
            dirs: std::mem::take(&mut self.dirs),
            finished: false,
            oom_limit: None,
            spawner: None,
            keeper: self.keeper.take(),
            helper: None,
        };
        self.finished = true;
        // Waiting for the kernel to empty the cgroups must not block an async runtime.
        std::thread::spawn(move || {
            rest.finish(Removal::Wait);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_pause_yields_then_pauses_double_up_to_two_milliseconds() {
        let mut pause = Pause::new();
        let started = Instant::now();
        pause.sleep();
        assert_eq!(pause.0, Some(Duration::from_micros(50)));
        let mut seen = Vec::new();
        for _ in 0..8 {
            pause.sleep();
            seen.push(pause.0.unwrap().as_micros());
        }
        assert_eq!(seen, [100, 200, 400, 800, 1600, 2000, 2000, 2000]);
        // 50 + 100 + … + 2000 µs of sleeps at least: the first was no sleep.
        assert!(
            started.elapsed() >= Duration::from_micros(50 + 100 + 200 + 400 + 800 + 1600 + 2000)
        );
    }
}
