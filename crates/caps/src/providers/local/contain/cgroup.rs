//! A cgroup per run. Discovered from `/proc/self/mountinfo` and `/proc/self/cgroup`:
//! cgroup v2 (`cgroup.kill`, and `pids.max` / `memory.max` where the controllers can be
//! enabled for Warden's runs) and, on hybrid hosts, the v1 `pids` and `memory`
//! hierarchies for the limits. Runs live under `warden.<pid>/run.<n>` beside the
//! process's own cgroup.
//!
//! A process is put into its run's cgroup *before* it executes. Where a spare is
//! prepared (`spare.rs`: v1 hierarchies), a thread already inside the run's cgroups
//! starts it, and the v2 cgroup is entered at birth (`CLONE_INTO_CGROUP`) where glibc
//! can, or left out (the v1 `pids` cgroup then ends the run). Otherwise, for the instant
//! of the spawn, the spawning thread (v1 `tasks`) joins the run's cgroups and goes back
//! right after; spawns are serialised for that instant. A child that cannot be born in
//! its v2 cgroup is left out of it where v1 `pids` holds the run; only on a pure v2 host
//! without `CLONE_INTO_CGROUP` does this whole process join the v2 cgroup for the spawn
//! (v2 moves every thread at once: on a hybrid host a process another thread started in
//! that instant was born in the run's cgroup and killed with it). Either way the children are members from
//! their first instruction, and every descendant after them. The CPU weight of a run is
//! a quarter of the default, so a spinning run cannot starve Warden or the host. Ending
//! a run never kills this process: it is checked to be out of the run's cgroup first.

use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::spare::{self, Keeper, Parked};
use crate::providers::local::spawn::{SpawnRequest, SpawnedChild};
use crate::shell::ResourceLimits;

/// Run numbers, unique within this process (every `Hierarchies` of the process shares
/// the `warden.<pid>` parent).
static NEXT_RUN: AtomicU64 = AtomicU64::new(0);

/// Serialises join → spawn → leave: while this process sits in one run's cgroup, no
/// other spawn may happen (its child would land in the wrong run).
static SPAWN_LOCK: Mutex<()> = Mutex::new(());

/// A run's CPU weight (v2; the default is 100) and shares (v1; the default is 1024):
/// a quarter of any other cgroup's when the CPUs are contended, so a run that spins —
/// a fork bomb at its process limit, a runaway build — cannot starve Warden (whose
/// timeouts must fire) or the host. An idle machine still gives a run every CPU.
const RUN_CPU_WEIGHT: u32 = 25;
const RUN_CPU_SHARES: u32 = 256;

/// How long ending a run waits for its cgroup to empty before giving up on removing it.
const EMPTY_WAIT: Duration = Duration::from_secs(2);

/// How long killing a v1-only run keeps killing what its cgroup lists (it may be called
/// on an async thread, so it is bounded well below `EMPTY_WAIT`).
const KILL_WAIT: Duration = Duration::from_millis(500);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// cgroup v2: `cgroup.procs` moves whole processes; `cgroup.kill` ends a run.
    V2,
    /// A v1 hierarchy: `tasks` moves one thread.
    V1Pids,
    /// The v1 memory hierarchy.
    V1Memory,
    /// The v1 cpu hierarchy: a run's share of the CPUs when they are contended.
    V1Cpu,
}

impl Flavor {
    /// The flavor's name on the watchdog's command line.
    pub(super) fn name(self) -> &'static str {
        match self {
            Flavor::V2 => "v2",
            Flavor::V1Pids => "pids",
            Flavor::V1Memory => "memory",
            Flavor::V1Cpu => "cpu",
        }
    }

    /// The flavor [`Flavor::name`] names.
    pub(super) fn from_name(name: &str) -> Option<Flavor> {
        [Flavor::V2, Flavor::V1Pids, Flavor::V1Memory, Flavor::V1Cpu]
            .into_iter()
            .find(|f| f.name() == name)
    }
}

/// This process's cgroup watchdog (see `watchdog.rs`): one per process, however many
/// `Hierarchies` it makes (they share the `warden.<pid>` parents), and never stopped —
/// its pipe closes when the process ends.
static WATCHDOG: Mutex<Watchdog> = Mutex::new(Watchdog::NotStarted);

enum Watchdog {
    NotStarted,
    /// Held, never written: its closing, when this process ends, is the signal.
    Running {
        _pipe: std::os::fd::OwnedFd,
    },
    /// This process's companion (`companion/`) watches, told the parents.
    Companion,
    /// It could not be started (said once, at debug level); runs still start.
    Unavailable,
}

/// Make sure this process has a watchdog unless it could not get one: its companion,
/// told the parents, where it has one; else one started with `helper`. Called before a
/// run's cgroups are made, by a thread outside every run's cgroup.
fn ensure_watchdog(helper: Option<&Path>, list: &[Hierarchy]) {
    let mut watchdog = lock(&WATCHDOG);
    if !matches!(*watchdog, Watchdog::NotStarted) {
        return;
    }
    let parents: Vec<(Flavor, PathBuf)> =
        list.iter().map(|h| (h.flavor, h.parent.clone())).collect();
    if super::companion::get().is_some_and(|c| c.watch(&parents)) {
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
    *watchdog = match super::watchdog::start(helper, &parents) {
        Ok(pipe) => Watchdog::Running { _pipe: pipe },
        Err(e) => {
            tracing::warn!(
                "cannot start the cgroup watchdog ({e}): runs are not ended if this process is killed"
            );
            Watchdog::Unavailable
        }
    };
}

/// End every run left under `parents` (`warden.<pid>` of each hierarchy) and remove
/// them: what the watchdog does once its Warden is gone.
pub(super) fn end_every_run(parents: &[(Flavor, PathBuf)]) {
    let mut runs: std::collections::BTreeMap<std::ffi::OsString, Vec<Member>> =
        std::collections::BTreeMap::new();
    for (flavor, parent) in parents {
        let Ok(entries) = fs::read_dir(parent) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name.to_string_lossy().starts_with("run.") && entry.path().is_dir() {
                runs.entry(name).or_default().push(Member {
                    flavor: *flavor,
                    dir: entry.path(),
                    home: parent.clone(),
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
    for (_, parent) in parents {
        let _ = fs::remove_dir(parent);
    }
}

/// One hierarchy Warden may use: where this process is, and where its runs go.
#[derive(Debug)]
struct Hierarchy {
    flavor: Flavor,
    /// This process's own cgroup (where it returns after a spawn).
    home: PathBuf,
    /// `warden.<pid>`, the parent of this process's runs.
    parent: PathBuf,
    /// v2 only: `pids`, `memory` and `cpu` are enabled for the runs.
    pids: bool,
    memory: bool,
    cpu: bool,
}

/// The cgroup hierarchies of this host that Warden can use.
#[derive(Debug)]
pub(crate) struct Hierarchies {
    list: Arc<Vec<Hierarchy>>,
    spare: Arc<(Mutex<Spare>, std::sync::Condvar)>,
    /// Some cgroup hierarchy is mounted with `favordynmods` (the setting is host-wide).
    favordynmods: bool,
    /// The binary that runs the watchdog ([`super::watchdog::WATCHDOG_SUBCOMMAND`]).
    helper: Option<Arc<Path>>,
}

/// How long a run waits for a spare that is being prepared (it is usually a grace
/// period away) before making its own cgroups.
const SPARE_WAIT: Duration = Duration::from_millis(200);

/// The spare run group (see `spare.rs`): one ready, one being prepared, and whether
/// using one prepares the next.
#[derive(Debug, Default)]
struct Spare {
    ready: Option<(Vec<Member>, Parked)>,
    preparing: bool,
    keep: bool,
}

/// One mounted cgroup filesystem: its mount point, the hierarchy path mounted there,
/// and (v1) its controllers.
struct Mount {
    point: PathBuf,
    root: String,
    v2: bool,
    controllers: Vec<String>,
    /// Mounted with `favordynmods` (Linux 6.0+): the kernel then keeps its cgroup
    /// threadgroup lock ready for writers, so a migration waits for no grace period.
    favordynmods: bool,
}

fn mounts() -> io::Result<Vec<Mount>> {
    Ok(cgroup_mounts(crate::mounts::read_mount_table()?))
}

/// The cgroup mounts of a mount table.
fn cgroup_mounts(table: Vec<crate::mounts::MountEntry>) -> Vec<Mount> {
    table
        .into_iter()
        .filter(|m| m.fstype == "cgroup2" || m.fstype == "cgroup")
        .map(|m| Mount {
            v2: m.fstype == "cgroup2",
            favordynmods: m.super_options.iter().any(|o| o == "favordynmods"),
            point: m.point,
            root: m.root.to_string_lossy().into_owned(),
            controllers: m.super_options,
        })
        .collect()
}

/// One v1 membership line of `/proc/self/cgroup`: the hierarchy's controllers, the path.
type V1Membership = (Vec<String>, String);

/// `/proc/self/cgroup`: (v2 path, v1 memberships).
fn own_cgroups() -> io::Result<(Option<String>, Vec<V1Membership>)> {
    Ok(parse_memberships(&fs::read_to_string("/proc/self/cgroup")?))
}

/// A `/proc/<pid>/cgroup` listing: the v2 path, and each v1 hierarchy's controllers and
/// path.
fn parse_memberships(text: &str) -> (Option<String>, Vec<V1Membership>) {
    let mut v2 = None;
    let mut v1 = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            v2 = Some(path.to_owned());
        } else {
            v1.push((
                controllers.split(',').map(str::to_owned).collect(),
                path.to_owned(),
            ));
        }
    }
    (v2, v1)
}

/// The directory of cgroup `path` in `mount`, when the mount shows it.
fn dir_of(mount: &Mount, path: &str) -> Option<PathBuf> {
    let rest = if mount.root == "/" {
        path
    } else {
        path.strip_prefix(&mount.root)?
    };
    let rest = rest.trim_start_matches('/');
    Some(if rest.is_empty() {
        mount.point.clone()
    } else {
        mount.point.join(rest)
    })
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    fs::write(path, value).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// Make `warden.<pid>` under `home`; `Ok(None)` when this hierarchy is not ours to use.
fn make_parent(home: &Path) -> Option<PathBuf> {
    remove_stale_parents(home);
    let parent = home.join(format!("warden.{}", std::process::id()));
    match fs::create_dir(&parent) {
        Ok(()) => Some(parent),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Some(parent),
        Err(e) => {
            tracing::debug!("cgroup {} is not usable: {e}", home.display());
            None
        }
    }
}

/// Remove what a Warden that died without cleaning up (SIGKILL, a crash) left in `home`:
/// `warden.<pid>` (and `warden.<pid>.self`) directories of processes that no longer exist, with their emptied run
/// cgroups. A cgroup that still has members is left alone (rmdir refuses it).
fn remove_stale_parents(home: &Path) {
    let Ok(entries) = fs::read_dir(home) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("warden."))
            .map(|p| p.strip_suffix(".self").unwrap_or(p))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let stale = entry.path();
        if let Ok(runs) = fs::read_dir(&stale) {
            for run in runs.flatten().filter(|r| r.path().is_dir()) {
                let _ = fs::remove_dir(run.path());
            }
        }
        let _ = fs::remove_dir(&stale);
    }
}

fn contains_only_us(cgroup: &Path) -> bool {
    let me = std::process::id().to_string();
    fs::read_to_string(cgroup.join("cgroup.procs"))
        .map(|procs| procs.lines().all(|p| p.trim() == me))
        .unwrap_or(false)
}

/// Enable `pids` and `memory` for the runs under a v2 `parent` whose parent is `home`.
/// The controllers must be enabled in `home`'s subtree too, which the kernel allows only
/// for the root cgroup or one without processes: if this process is alone in `home`, it
/// moves into a leaf of its own first (`home/warden.<pid>.self`).
fn enable_v2_controllers(home: &mut PathBuf, parent: &Path, is_root: bool) -> (bool, bool, bool) {
    let available = fs::read_to_string(home.join("cgroup.controllers")).unwrap_or_default();
    let wanted: Vec<&str> = ["pids", "memory", "cpu"]
        .into_iter()
        .filter(|c| available.split_whitespace().any(|a| a == *c))
        .collect();
    if wanted.is_empty() {
        return (false, false, false);
    }
    if !is_root && contains_only_us(home) {
        let leaf = home.join(format!("warden.{}.self", std::process::id()));
        let moved = fs::create_dir(&leaf)
            .or_else(|e| {
                if e.kind() == io::ErrorKind::AlreadyExists {
                    Ok(())
                } else {
                    Err(e)
                }
            })
            .and_then(|()| write(&leaf.join("cgroup.procs"), &std::process::id().to_string()));
        match moved {
            Ok(()) => *home = leaf,
            Err(e) => tracing::debug!("cannot move into a leaf cgroup: {e}"),
        }
    }
    let enable = |dir: &Path| {
        let text: String = wanted.iter().map(|c| format!("+{c} ")).collect();
        write(&dir.join("cgroup.subtree_control"), text.trim_end())
    };
    let grandparent = parent.parent().map(Path::to_path_buf).unwrap_or_default();
    if let Err(e) = enable(&grandparent).and_then(|()| enable(parent)) {
        tracing::debug!("cgroup v2 controllers not available for runs: {e}");
        return (false, false, false);
    }
    let enabled = fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
    let has = |c: &str| enabled.split_whitespace().any(|e| e == c);
    (has("pids"), has("memory"), has("cpu"))
}

impl Hierarchies {
    /// The hierarchies of this host Warden can make cgroups in; an error says why none.
    pub(crate) fn detect(helper: Option<PathBuf>) -> Result<Hierarchies, String> {
        let mounts = mounts().map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
        let (v2_path, v1_paths) =
            own_cgroups().map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        let mut list = Vec::new();
        for (name, flavor) in [
            ("pids", Flavor::V1Pids),
            ("memory", Flavor::V1Memory),
            ("cpu", Flavor::V1Cpu),
        ] {
            let Some(mount) = mounts
                .iter()
                .find(|m| !m.v2 && m.controllers.iter().any(|c| c == name))
            else {
                continue;
            };
            let Some((_, path)) = v1_paths
                .iter()
                .find(|(controllers, _)| controllers.iter().any(|c| c == name))
            else {
                continue;
            };
            let Some(home) = dir_of(mount, path) else {
                continue;
            };
            if let Some(parent) = make_parent(&home) {
                list.push(Hierarchy {
                    flavor,
                    home,
                    parent,
                    pids: false,
                    memory: false,
                    cpu: false,
                });
            }
        }
        if let (Some(mount), Some(path)) = (mounts.iter().find(|m| m.v2), v2_path)
            && let Some(mut home) = dir_of(mount, &path)
            && let Some(parent) = make_parent(&home)
        {
            // Limits come from v1 where it has them (hybrid hosts); else from v2.
            // Hybrid hosts: v2 holds the run for ending it, v1 limits it.
            let (pids, memory, cpu) = if list.iter().all(|h| h.flavor == Flavor::V1Cpu) {
                enable_v2_controllers(&mut home, &parent, path == "/")
            } else {
                (false, false, false)
            };
            list.push(Hierarchy {
                flavor: Flavor::V2,
                home,
                parent,
                pids,
                memory,
                cpu,
            });
        }
        let can_end_runs = list
            .iter()
            .any(|h| matches!(h.flavor, Flavor::V2 | Flavor::V1Pids));
        if !can_end_runs {
            for h in &list {
                let _ = fs::remove_dir(&h.parent);
            }
            return Err("no cgroup hierarchy where this process may create cgroups".into());
        }
        Ok(Hierarchies {
            list: Arc::new(list),
            spare: Arc::default(),
            favordynmods: mounts.iter().any(|m| m.favordynmods),
            helper: helper.map(Arc::from),
        })
    }

    /// Whether starting a run waits for a cgroup migration: on a pure v2 host without
    /// `CLONE_INTO_CGROUP`, the whole process moves into each run's cgroup for the
    /// spawn, and that move waits for an RCU grace period unless the host favours
    /// dynamic cgroup changes. A one-shot `warden exec` cannot hide that wait behind its
    /// own start. Where v1 hierarchies exist, a prepared spawner thread moves only itself
    /// (see [`move_into`]), which does not wait, and a v2 cgroup the child cannot be born
    /// into is left out of the run.
    pub(crate) fn start_waits_for_migration(&self) -> bool {
        let migrates = self.list.iter().all(|h| h.flavor == Flavor::V2)
            && !crate::providers::local::spawn::can_spawn_into_cgroup();
        migrates && !self.favordynmods
    }

    /// Whether process and memory limits are enforced.
    pub(crate) fn enforces_limits(&self) -> bool {
        let pids = self
            .list
            .iter()
            .any(|h| h.flavor == Flavor::V1Pids || h.pids);
        let memory = self
            .list
            .iter()
            .any(|h| h.flavor == Flavor::V1Memory || h.memory);
        pids && memory
    }

    /// In words, for `warden doctor`.
    pub(crate) fn describe(&self) -> String {
        let has = |f: Flavor| self.list.iter().any(|h| h.flavor == f);
        let v2 = self.list.iter().find(|h| h.flavor == Flavor::V2);
        let ending = match (v2.is_some(), has(Flavor::V1Pids)) {
            (true, true) => {
                "cgroup v2 cgroup.kill, or for runs whose process cannot be born in their v2 cgroup (started from a prepared v1 cgroup, or without CLONE_INTO_CGROUP) the v1 pids cgroup (new processes refused, every member killed), ends a run"
            }
            (true, false) => "cgroup v2 cgroup.kill ends a run",
            (false, _) => {
                "the v1 pids cgroup ends a run (new processes refused, every member killed)"
            }
        };
        let limits = match (
            has(Flavor::V1Pids) || v2.is_some_and(|h| h.pids),
            has(Flavor::V1Memory) || v2.is_some_and(|h| h.memory),
        ) {
            (true, true) => {
                if has(Flavor::V1Pids) {
                    "process and memory limits from the v1 pids and memory hierarchies (hybrid host)"
                } else {
                    "process and memory limits from the v2 pids and memory controllers"
                }
            }
            (true, false) => "process limits only (no memory controller for Warden here)",
            (false, true) => "memory limits only (no pids controller for Warden here)",
            (false, false) => "no limits (no pids or memory controller for Warden here)",
        };
        let orphans = if self.helper.is_some() {
            "; if Warden itself is killed, its watchdog ends the runs it left"
        } else {
            "; runs outlive a killed Warden (no helper binary for the watchdog)"
        };
        format!("{ending}; {limits}{orphans}")
    }

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
            Some((dirs, parked)) => (dirs, Some(parked)),
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
        if super::companion::get().is_some() {
            // The companion starts the helper's runs inside their cgroups itself, and is
            // the watchdog (told the parents with the first run): no thread needs to
            // wait in a spare, and nothing here waits for the companion's start.
            return;
        }
        if !self.list.iter().any(|h| h.flavor != Flavor::V2) {
            // Pure v2: only whole processes move, so no thread can wait inside.
            return;
        }
        {
            let mut spare = lock(&self.spare.0);
            spare.keep |= keep;
            if spare.ready.is_some() || spare.preparing {
                return;
            }
            spare.preparing = true;
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
                    Ok(ready) => spare.ready = Some(ready),
                    Err(e) => tracing::debug!("no spare run group: {e}"),
                }
                prepared.notify_all();
            },
        );
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Make `run.<n>` in every hierarchy whose flavor `include` accepts.
fn make_dirs(list: &[Hierarchy], include: impl Fn(Flavor) -> bool) -> io::Result<Vec<Member>> {
    let n = NEXT_RUN.fetch_add(1, Ordering::Relaxed);
    let mut dirs = Vec::new();
    for h in list.iter().filter(|h| include(h.flavor)) {
        let dir = h.parent.join(format!("run.{n}"));
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

impl Drop for Hierarchies {
    fn drop(&mut self) {
        // The companion, told the parents, clears them once this process has ended.
        if matches!(*lock(&WATCHDOG), Watchdog::Companion) {
            return;
        }
        // Fails (harmlessly) while another `Hierarchies` of this process has runs there.
        for h in self.list.iter() {
            let _ = fs::remove_dir(&h.parent);
        }
    }
}

fn apply_limits(h: &Hierarchy, dir: &Path, limits: ResourceLimits) -> io::Result<()> {
    match h.flavor {
        Flavor::V2 => {
            if h.cpu {
                write(&dir.join("cpu.weight"), &RUN_CPU_WEIGHT.to_string())?;
            }
            if let Some(n) = limits.max_processes.filter(|_| h.pids) {
                write(&dir.join("pids.max"), &n.to_string())?;
            }
            if let Some(bytes) = limits.max_memory.filter(|_| h.memory) {
                write(&dir.join("memory.max"), &bytes.to_string())?;
                // A memory bomb must not push the host into swap instead.
                let swap = dir.join("memory.swap.max");
                if swap.exists() {
                    write(&swap, "0")?;
                }
            }
        }
        Flavor::V1Pids => {
            if let Some(n) = limits.max_processes {
                write(&dir.join("pids.max"), &n.to_string())?;
            }
        }
        Flavor::V1Cpu => write(&dir.join("cpu.shares"), &RUN_CPU_SHARES.to_string())?,
        Flavor::V1Memory => {
            if let Some(bytes) = limits.max_memory {
                write(&dir.join("memory.limit_in_bytes"), &bytes.to_string())?;
                let memsw = dir.join("memory.memsw.limit_in_bytes");
                if memsw.exists() {
                    write(&memsw, &bytes.to_string())?;
                }
            }
        }
    }
    Ok(())
}

#[derive(Debug, Clone)]
struct Member {
    flavor: Flavor,
    dir: PathBuf,
    home: PathBuf,
}

/// One run's cgroups.
#[derive(Debug)]
pub(crate) struct RunGroup {
    dirs: Vec<Member>,
    finished: bool,
    oom_limit: Option<u64>,
    /// A thread already inside the v1 cgroups, to start the child (see `spare.rs`).
    spawner: Option<Parked>,
    /// That thread, kept until the run ends.
    keeper: Option<Keeper>,
    /// The helper binary, whose subcommands this process's companion starts in-process.
    helper: Option<Arc<Path>>,
}

/// Move this thread (v1) or process (v2) into `to` — the run's cgroup or back home.
///
/// On v1 the thread names itself `0`, not by its id: the same move, but then the kernel
/// (seen on 6.18) skips the global threadgroup lock — a thread moving itself alone needs
/// no stable thread group — whose write side waits for an RCU grace period unless the
/// hierarchy is mounted `favordynmods` (measured here: 7.3 ms a move by id, 0.05 ms as
/// `0`). Kernels without that shortcut take the lock either way.
fn move_into(flavor: Flavor, to: &Path) -> io::Result<()> {
    match flavor {
        Flavor::V2 => write(&to.join("cgroup.procs"), &std::process::id().to_string()),
        Flavor::V1Pids | Flavor::V1Memory | Flavor::V1Cpu => write(&to.join("tasks"), "0"),
    }
}

fn members(dir: &Path) -> Vec<i32> {
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
fn live_members(dir: &Path, me: i32) -> Vec<i32> {
    live_members_seen_by(dir, me, proc_is_ours())
}

/// [`live_members`], told whether `/proc` can be trusted (tests simulate a foreign one).
fn live_members_seen_by(dir: &Path, me: i32, proc_ours: bool) -> Vec<i32> {
    let mut listed: Vec<i32> = members(dir).into_iter().filter(|p| *p != me).collect();
    if !proc_ours {
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
        let again: Vec<i32> = members(dir).into_iter().filter(|p| *p != me).collect();
        if again.iter().all(|p| listed.contains(p)) {
            return Vec::new();
        }
        listed = again;
    }
    listed
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
            let (child, keeper) = parked.spawn(request, open_v2())?;
            self.keeper = Some(keeper);
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
        let companion = super::companion::get()?;
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
        // A process made before the run (the companion's spare) is outside its v2
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
            && let Some(companion) = super::companion::get()
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
/// straggler may take longer — so short pauses first, then up to 2 ms.
struct Pause(Duration);

impl Pause {
    fn new() -> Self {
        Pause(Duration::from_micros(50))
    }

    fn sleep(&mut self) {
        std::thread::sleep(self.0);
        self.0 = (self.0 * 2).min(Duration::from_millis(2));
    }
}

fn oom_killed(m: &Member) -> bool {
    let count = |file: &str| {
        fs::read_to_string(m.dir.join(file))
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("oom_kill ").map(|v| v.trim().parse::<u64>()))
            })
            .and_then(Result::ok)
            .unwrap_or(0)
    };
    match m.flavor {
        Flavor::V2 => count("memory.events") > 0,
        Flavor::V1Memory => count("memory.oom_control") > 0,
        Flavor::V1Pids | Flavor::V1Cpu => false,
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

    /// The cgroup of thread `tid` of this process in a v1 hierarchy with `controller`.
    fn thread_cgroup(tid: i32, controller: &str) -> String {
        let text = fs::read_to_string(format!("/proc/self/task/{tid}/cgroup")).unwrap();
        parse_memberships(&text)
            .1
            .into_iter()
            .find(|(controllers, _)| controllers.iter().any(|c| c == controller))
            .map(|(_, path)| path)
            .unwrap_or_default()
    }

    #[test]
    fn a_v1_move_takes_the_calling_thread_only_and_back() {
        let Ok(hierarchies) = Hierarchies::detect(None) else {
            eprintln!("SKIP: no cgroup hierarchy this process may create cgroups in");
            return;
        };
        let Some(pids) = hierarchies.list.iter().find(|h| h.flavor == Flavor::V1Pids) else {
            eprintln!("SKIP: no v1 pids hierarchy (not a hybrid host)");
            return;
        };
        let dir = pids.parent.join("move-test");
        fs::create_dir(&dir).unwrap();
        let main_tid = nix::unistd::gettid().as_raw();
        let before = thread_cgroup(main_tid, "pids");
        let (dir2, home) = (dir.clone(), pids.home.clone());
        let (inside, main_meanwhile, after) = std::thread::spawn(move || {
            let tid = nix::unistd::gettid().as_raw();
            move_into(Flavor::V1Pids, &dir2).unwrap();
            let inside = thread_cgroup(tid, "pids");
            let main_meanwhile = thread_cgroup(main_tid, "pids");
            move_into(Flavor::V1Pids, &home).unwrap();
            (inside, main_meanwhile, thread_cgroup(tid, "pids"))
        })
        .join()
        .unwrap();
        fs::remove_dir(&dir).unwrap();
        assert!(inside.ends_with("/move-test"), "the thread moved: {inside}");
        assert_eq!(main_meanwhile, before, "no other thread moved with it");
        assert_eq!(after, before, "and it came back home");
    }

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
            live_members_seen_by(dir.path(), me, true),
            Vec::<i32>::new()
        );
        assert_eq!(live_members_seen_by(dir.path(), me, false), vec![i32::MAX]);
    }

    #[test]
    fn a_vanished_process_cannot_act_and_a_running_one_can() {
        assert!(proc_is_ours());
        assert!(can_still_act(std::process::id() as i32));
        // A pid above the kernel's limit names no process, in /proc or anywhere.
        assert!(!can_still_act(i32::MAX));
    }

    #[test]
    fn paths_are_mapped_through_the_mount_root() {
        let m = Mount {
            point: PathBuf::from("/sys/fs/cgroup/memory"),
            root: "/docker/abc".into(),
            v2: false,
            controllers: vec!["memory".into()],
            favordynmods: false,
        };
        assert_eq!(
            dir_of(&m, "/docker/abc/sub"),
            Some(PathBuf::from("/sys/fs/cgroup/memory/sub"))
        );
        assert_eq!(
            dir_of(&m, "/docker/abc"),
            Some(PathBuf::from("/sys/fs/cgroup/memory"))
        );
        assert_eq!(dir_of(&m, "/elsewhere"), None);
    }

    #[test]
    fn favordynmods_is_read_from_the_super_options_of_either_cgroup_version() {
        let text = "\
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,favordynmods
50 31 0:40 / /mnt/favordynmods rw,relatime - tmpfs favordynmods rw
";
        let parse = |text: &str| cgroup_mounts(crate::mounts::parse_mount_table(text.as_bytes()));
        let mounts = parse(text);
        assert_eq!(mounts.len(), 2, "only cgroup mounts are kept");
        assert!(!mounts[0].favordynmods);
        assert!(mounts[1].favordynmods && mounts[1].v2);
        let v1 =
            parse("39 31 0:36 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids,favordynmods\n");
        assert!(v1[0].favordynmods);
        assert_eq!(v1[0].controllers, ["rw", "pids", "favordynmods"]);
    }
}
