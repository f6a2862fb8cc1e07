//! Containment: what holds every process of one run together, so that nothing a run
//! starts outlives it — whatever it does with sessions and process groups (`setsid`,
//! double forks, daemons) — and what bounds the processes and memory it may take.
//!
//! Three mechanisms, the strongest this host allows (chosen once, by the composition
//! root, and reported by `warden doctor`):
//!
//! - **cgroups** (`cgroup/`): a cgroup per run. The process is started inside it (the
//!   spawning thread, or the whole process on cgroup v2, joins the run's cgroup for the
//!   instant of the spawn), so every descendant is a member from its first instruction.
//!   Ending the run is `cgroup.kill` (v2), then — the kernel's kill passes over a process
//!   whose main thread exited while others run on — killing every listed member that can
//!   still act until none is left (all v1 has). A member already exiting (a sandbox's
//!   pid 1 tearing its namespaces down) is not waited for: the result goes back and its
//!   cgroup is removed once the kernel lets go (or by the watchdog, if this process
//!   ends first). `pids.max` and `memory.max` bound the run. On hybrid v1/v2 hosts (Debian
//!   without systemd) the v2 hierarchy holds the run for the kill and the v1 `pids` and
//!   `memory` hierarchies hold it for the limits. Should this process itself be killed,
//!   a watchdog (`watchdog.rs`, one per process) ends every run it left behind.
//! - **a subreaper** (`reaper.rs`): where no cgroup can be made, a small helper becomes
//!   the run's child subreaper: every orphan of the run is re-parented to it, and it
//!   kills and reaps all of them when the command ends or the run is stopped. Limits are
//!   then not enforced (the doctor says so).
//! - **the session**: process group and session kill only — enough inside the OS
//!   sandbox, whose pid namespace ends every descendant with it.

mod cgroup;
pub mod companion;
mod reaper;
mod spare;
mod watchdog;

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

use super::spawn::{SpawnRequest, SpawnedChild};
use crate::shell::ResourceLimits;

pub(crate) use cgroup::Removal;
pub use reaper::{REAPER_SUBCOMMAND, run_reaper};
pub use watchdog::{WATCHDOG_SUBCOMMAND, run_watchdog};

/// Which mechanism holds a run together on this host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "mechanism")]
pub enum Mechanism {
    /// A cgroup per run.
    Cgroup {
        /// What holds the run and what enforces its limits, in words.
        detail: String,
        /// Whether process and memory limits are enforced.
        limits: bool,
        /// Whether each run's start waits for a cgroup migration — one RCU grace period,
        /// several milliseconds — because, on a host with cgroup v2 only, this process
        /// moves into each run's cgroup (glibc cannot start the child there) and no
        /// cgroup hierarchy is mounted with `favordynmods`.
        #[serde(rename = "startWaitsForMigration")]
        start_waits_for_migration: bool,
    },
    /// A per-run child subreaper (no limits).
    Subreaper,
    /// Process group and session only.
    Session,
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mechanism::Cgroup { detail, .. } => write!(f, "a cgroup per run ({detail})"),
            Mechanism::Subreaper => f.write_str(
                "a child subreaper per run (process and memory limits are not enforced)",
            ),
            Mechanism::Session => f.write_str(
                "process group and session only (descendants that call setsid can escape)",
            ),
        }
    }
}

#[derive(Debug)]
enum Kind {
    Cgroups(cgroup::Hierarchies),
    Reaper(PathBuf),
    Session,
}

/// How runs are contained on this host. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Containment(Arc<Kind>);

impl Default for Containment {
    fn default() -> Self {
        Containment::session_only()
    }
}

impl Containment {
    /// Process group and session kill only (the OS sandbox adds its pid namespace).
    pub fn session_only() -> Self {
        Containment(Arc::new(Kind::Session))
    }

    /// The strongest mechanism this host allows: cgroups where Warden may make them,
    /// else a subreaper run through `reaper` (a binary that dispatches
    /// [`REAPER_SUBCOMMAND`] to [`run_reaper`] and [`WATCHDOG_SUBCOMMAND`] to
    /// [`run_watchdog`], which ends the runs of a killed Warden), else the session.
    pub fn detect(reaper: Option<PathBuf>) -> Self {
        match cgroup::Hierarchies::detect(reaper.clone()) {
            Ok(h) => Containment(Arc::new(Kind::Cgroups(h))),
            Err(why) => {
                tracing::debug!("no cgroup containment: {why}");
                match reaper {
                    Some(helper) => Containment(Arc::new(Kind::Reaper(helper))),
                    None => Containment::session_only(),
                }
            }
        }
    }

    /// A subreaper per run through `helper`, even where cgroups exist (for tests of the
    /// fallback).
    pub fn subreaper(helper: PathBuf) -> Self {
        Containment(Arc::new(Kind::Reaper(helper)))
    }

    /// Prepare the next run's cgroups in the background — a thread made and moved into
    /// them ahead of time — so that starting the run waits for no cgroup `mkdir` or
    /// migration (on kernels that lock for it, an RCU grace period: several
    /// milliseconds). A one-shot command calls this once, early; a server calls
    /// [`Containment::keep_ready`]. No effect without cgroups, or where only whole
    /// processes can move (pure cgroup v2).
    pub fn prepare(&self) {
        if let Kind::Cgroups(h) = self.0.as_ref() {
            h.prepare(false);
        }
    }

    /// Like [`Containment::prepare`], and prepare the next each time one is used.
    pub fn keep_ready(&self) {
        if let Kind::Cgroups(h) = self.0.as_ref() {
            h.prepare(true);
        }
    }

    /// Whether a prepared run's cgroups wait for the next run (see
    /// [`Containment::prepare`]).
    pub fn prepared(&self) -> bool {
        match self.0.as_ref() {
            Kind::Cgroups(h) => h.has_spare(),
            _ => false,
        }
    }

    /// Which mechanism this is.
    pub fn mechanism(&self) -> Mechanism {
        match self.0.as_ref() {
            Kind::Cgroups(h) => Mechanism::Cgroup {
                detail: h.describe(),
                limits: h.enforces_limits(),
                start_waits_for_migration: h.start_waits_for_migration(),
            },
            Kind::Reaper(_) => Mechanism::Subreaper,
            Kind::Session => Mechanism::Session,
        }
    }

    /// A containment unit for one run with `limits`. A cgroup that cannot be made fails
    /// the run (it never runs uncontained where containment was promised).
    pub(crate) fn unit(&self, limits: ResourceLimits) -> io::Result<Unit> {
        Ok(match self.0.as_ref() {
            Kind::Cgroups(h) => Unit::Cgroup(h.run_group(limits)?),
            Kind::Reaper(helper) => Unit::Reaper {
                helper: helper.clone(),
                leader: None,
            },
            Kind::Session => Unit::Session,
        })
    }
}

/// One run's containment.
#[derive(Debug)]
pub(crate) enum Unit {
    Cgroup(cgroup::RunGroup),
    Reaper {
        helper: PathBuf,
        leader: Option<i32>,
    },
    Session,
}

impl Unit {
    /// The program and argv to start: the command itself, or the reaper in front of it.
    pub(crate) fn wrap(
        &self,
        program: PathBuf,
        argv: Vec<std::ffi::OsString>,
    ) -> (PathBuf, Vec<std::ffi::OsString>) {
        match self {
            Unit::Reaper { helper, .. } => {
                let mut wrapped: Vec<std::ffi::OsString> =
                    vec![helper.clone().into_os_string(), REAPER_SUBCOMMAND.into()];
                wrapped.extend(reaper::reaper_args(program.into_os_string(), argv));
                (helper.clone(), wrapped)
            }
            _ => (program, argv),
        }
    }

    /// Start `request`'s process so that it is inside this unit from its first
    /// instruction.
    pub(crate) fn spawn(&mut self, request: SpawnRequest) -> io::Result<SpawnedChild> {
        let started = match self {
            Unit::Cgroup(group) => group.spawn_inside(request)?,
            _ => request.spawn(None)?,
        };
        if let Unit::Reaper { leader, .. } = self {
            *leader = Some(started.pid);
        }
        Ok(started)
    }

    /// End every process of the run, however it left its group or session.
    pub(crate) fn kill(&self) {
        match self {
            Unit::Cgroup(group) => group.kill(),
            Unit::Reaper {
                leader: Some(pid), ..
            } => reaper::stop(*pid),
            _ => {}
        }
    }

    /// The run's processes that can still act, never this process: `None` where the
    /// unit cannot list them (no cgroup).
    pub(crate) fn members(&self) -> Option<Vec<i32>> {
        match self {
            Unit::Cgroup(group) => Some(group.members()),
            _ => None,
        }
    }

    /// After the run: wait until nothing in the unit can act any more and remove it (a
    /// cgroup still listing a process on its way out, as `removal` says). Returns what
    /// the caller should know (a limit the kernel enforced).
    pub(crate) fn finish(&mut self, removal: Removal) -> Option<String> {
        match self {
            Unit::Cgroup(group) => group.finish(removal),
            _ => None,
        }
    }

    /// [`Unit::finish`] if it has nothing to wait for — nothing in the unit can act —
    /// so that the caller may do it where it must not block; `None`: it would wait.
    pub(crate) fn finish_without_waiting(&mut self, removal: Removal) -> Option<Option<String>> {
        match self {
            Unit::Cgroup(group) => group.finish_without_waiting(removal),
            _ => Some(None),
        }
    }
}
