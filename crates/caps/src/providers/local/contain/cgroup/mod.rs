//! A cgroup per run. Discovered from `/proc/self/mountinfo` and `/proc/self/cgroup`:
//! cgroup v2 (`cgroup.kill`, and `pids.max` / `memory.max` where the controllers can be
//! enabled for Warden's runs) and, on hybrid hosts, the v1 `pids` and `memory`
//! hierarchies for the limits. Runs live in `warden.<pid>.run.<n>`, children of the
//! cgroup the process was in when it started (beside its `warden.<pid>.self` leaf on a
//! v2 host where it moved into one): no per-process parent to make and remove at every
//! start (each cgroup `mkdir` is tens of microseconds, a v1 memory one more), and the
//! runs of one process are still found by name — by its watchdog once it is gone, by
//! the next Warden's clean-up of a dead one's leftovers.
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

mod discover;
mod limits;
mod liveness;
mod make;
mod run_group;
mod watchdog;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use make::Spare;
pub(crate) use run_group::{Removal, RunGroup, remove_paths_when_empty};
pub(super) use watchdog::end_every_run;

/// Serialises join → spawn → leave: while this process sits in one run's cgroup, no
/// other spawn may happen (its child would land in the wrong run).
static SPAWN_LOCK: Mutex<()> = Mutex::new(());

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

/// One hierarchy Warden may use: where this process is, and where its runs go.
#[derive(Debug)]
struct Hierarchy {
    flavor: Flavor,
    /// This process's own cgroup (where it returns after a spawn).
    home: PathBuf,
    /// `<dir>/warden.<pid>`: this process's runs are `<dir>/warden.<pid>.run.<n>` (see
    /// [`run_dir`]); `<dir>` is where the process's own cgroup was when it started.
    prefix: PathBuf,
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

/// The cgroup of run `n` of the process whose runs `prefix` names.
fn run_dir(prefix: &Path, n: u64) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(format!(".run.{n}"));
    PathBuf::from(name)
}

/// The v2 leaf the process whose runs `prefix` names moves into to let controllers be
/// enabled for its runs (`warden.<pid>.self`, beside them).
fn own_leaf(prefix: &Path) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(".self");
    PathBuf::from(name)
}

/// The directory the runs of `prefix` are in, and the start of their names.
fn runs_of(prefix: &Path) -> Option<(&Path, String)> {
    let name = prefix.file_name()?.to_str()?;
    Some((prefix.parent()?, format!("{name}.run.")))
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    fs::write(path, value).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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

#[cfg(test)]
mod tests {
    use super::discover::parse_memberships;
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
        let dir = run_dir(&pids.prefix, u64::MAX);
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
        assert!(
            inside.ends_with(&format!(".run.{}", u64::MAX)),
            "the thread moved: {inside}"
        );
        assert_eq!(main_meanwhile, before, "no other thread moved with it");
        assert_eq!(after, before, "and it came back home");
    }
}
