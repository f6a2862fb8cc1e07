//! Where this process's cgroups are: the cgroup mounts and memberships, where its runs
//! go (`warden.<pid>.run.<n>` in them) and what dead Wardens left there, the v2
//! controllers enabled for the runs, and what the hierarchies found can do.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Flavor, Hierarchies, Hierarchy, own_leaf, write};
use crate::providers::local::contain::companion;

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
pub(super) fn parse_memberships(text: &str) -> (Option<String>, Vec<V1Membership>) {
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

/// `home/warden.<pid>`, the prefix of this process's runs in `home` (see
/// [`super::run_dir`]); `None` when runs cannot be made there. Nothing is made: whether
/// a cgroup may be made in `home` is whether this process may write and search it (a
/// cgroup filesystem checks a `mkdir` against the directory's permissions, and a
/// read-only mount says `EROFS`). Leftovers of dead Wardens in `home` are removed first,
/// unless this process has a companion, which removes them after the run, off its path.
fn runs_prefix(home: &Path) -> Option<PathBuf> {
    if companion::get().is_none() {
        remove_stale_runs(home);
    }
    // With the effective ids and capabilities, as mkdir is checked (plain access(2)
    // asks for the real ones).
    let may_make = nix::unistd::faccessat(
        nix::fcntl::AT_FDCWD,
        home,
        nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK,
        nix::fcntl::AtFlags::AT_EACCESS,
    );
    match may_make {
        Ok(()) => Some(home.join(format!("warden.{}", std::process::id()))),
        Err(e) => {
            tracing::debug!("cgroup {} is not usable: {e}", home.display());
            None
        }
    }
}

/// Remove what Wardens that died without cleaning up (SIGKILL, a crash, no watchdog)
/// left in `home`: `warden.<pid>.run.<n>` and `warden.<pid>.self` cgroups of processes
/// that no longer exist, and `warden.<pid>` parents with their runs (how runs were laid
/// out before). A cgroup that still has members is left alone (rmdir refuses it).
pub(super) fn remove_stale_runs(home: &Path) {
    let Ok(entries) = fs::read_dir(home) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("warden."))
            .and_then(|rest| rest.split('.').next())
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

/// Enable `pids`, `memory` and `cpu` for the runs, children of a v2 `home`: in `home`'s
/// subtree, which the kernel allows only for the root cgroup or one without processes —
/// if this process is alone in `home`, it moves into a leaf of its own first
/// (`home/warden.<pid>.self`, and `home` becomes that leaf; the runs stay beside it).
fn enable_v2_controllers(home: &mut PathBuf, prefix: &Path, is_root: bool) -> (bool, bool, bool) {
    let available = fs::read_to_string(home.join("cgroup.controllers")).unwrap_or_default();
    let wanted: Vec<&str> = ["pids", "memory", "cpu"]
        .into_iter()
        .filter(|c| available.split_whitespace().any(|a| a == *c))
        .collect();
    if wanted.is_empty() {
        return (false, false, false);
    }
    let runs_dir = home.clone();
    if !is_root && contains_only_us(home) {
        let leaf = own_leaf(prefix);
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
    let text: String = wanted.iter().map(|c| format!("+{c} ")).collect();
    if let Err(e) = write(&runs_dir.join("cgroup.subtree_control"), text.trim_end()) {
        tracing::debug!("cgroup v2 controllers not available for runs: {e}");
        return (false, false, false);
    }
    let enabled = fs::read_to_string(runs_dir.join("cgroup.subtree_control")).unwrap_or_default();
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
            if let Some(prefix) = runs_prefix(&home) {
                list.push(Hierarchy {
                    flavor,
                    home,
                    prefix,
                    pids: false,
                    memory: false,
                    cpu: false,
                });
            }
        }
        if let (Some(mount), Some(path)) = (mounts.iter().find(|m| m.v2), v2_path)
            && let Some(mut home) = dir_of(mount, &path)
            && let Some(prefix) = runs_prefix(&home)
        {
            // Limits come from v1 where it has them (hybrid hosts); else from v2.
            // Hybrid hosts: v2 holds the run for ending it, v1 limits it.
            let (pids, memory, cpu) = if list.iter().all(|h| h.flavor == Flavor::V1Cpu) {
                enable_v2_controllers(&mut home, &prefix, path == "/")
            } else {
                (false, false, false)
            };
            list.push(Hierarchy {
                flavor: Flavor::V2,
                home,
                prefix,
                pids,
                memory,
                cpu,
            });
        }
        let can_end_runs = list
            .iter()
            .any(|h| matches!(h.flavor, Flavor::V2 | Flavor::V1Pids));
        if !can_end_runs {
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
    /// (see [`move_into`](super::move_into)), which does not wait, and a v2 cgroup the
    /// child cannot be born into is left out of the run.
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
