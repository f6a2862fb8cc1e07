//! The mount plan of the Linux sandbox: what is emptied, bound back in and hidden on top
//! of the read-only root, in one list ordered parents first.
//!
//! Order is what makes hiding hold. A later mount covers an earlier one beneath it, so
//! every operation must come after the operations on its ancestors: an authorized path
//! bound back inside an emptied home, a hidden directory inside an authorized path, a
//! masked credential file inside a readable extra path, a read-only extra path inside a
//! writable one. Sorting by depth (and, at equal paths, empty → bind → hide) gives that
//! for any combination of paths instead of a fixed sequence of special cases. The same
//! plan answers "is this path visible inside?" for the working-directory check and the
//! helper binary.
//!
//! Hiding a path is not enough when it lies inside a writable bind: its mount travels with
//! its dentry, so renaming an ancestor (`mv a b`) would carry the hidden mount away and
//! free the old name for a planted replacement (`mkdir -p a/.warden`) that Warden would
//! then read. Every ancestor between the writable bind and the hidden path is therefore
//! *pinned* — bound onto itself — because the kernel refuses to rename or remove a mount
//! point (`EBUSY`), whatever the nesting.

use std::path::{Path, PathBuf};

use crate::SandboxPolicy;

/// Host directories replaced by empty tmpfs inside: user data, keys, runtime sockets,
/// and the host's `/tmp` (the sandbox gets a private one).
pub const EMPTIED_DIRS: &[&str] = &["/home", "/root", "/run", "/tmp"];

/// Host files masked with an empty file when Warden runs as root: credential stores
/// only root should read, which a root-mapped sandbox user could otherwise still open as
/// their owner.
const MASKED_FILES: &[&str] = &[
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
    "/etc/sudoers",
];

/// Host directories of keys only root should read, hidden when Warden runs as root
/// (same reason as [`MASKED_FILES`]).
const MASKED_DIRS: &[&str] = &["/etc/ssl/private", "/etc/wireguard"];

/// One mount operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mount {
    /// An empty, writable tmpfs (paths bound beneath it show through).
    Empty(PathBuf),
    /// A host directory bound back in.
    Bind {
        /// The directory (same path inside and out).
        path: PathBuf,
        /// Writable, or read-only.
        writable: bool,
    },
    /// Out of sight: a directory becomes an empty read-only tmpfs, a file an empty file.
    Hide(PathBuf),
    /// A writable directory between a writable bind and a hidden path, bound onto itself
    /// so it cannot be renamed, removed or replaced (see the module header). Its contents
    /// stay writable.
    Pin(PathBuf),
    /// A directory of Warden's own programs that would otherwise be writable, bound
    /// read-only onto itself: commands see it and cannot change, add or remove a file in
    /// it (its writable ancestors are pinned like a hidden path's).
    Lock(PathBuf),
}

impl Mount {
    /// The path this operation mounts on.
    pub fn path(&self) -> &Path {
        match self {
            Mount::Empty(p)
            | Mount::Hide(p)
            | Mount::Pin(p)
            | Mount::Lock(p)
            | Mount::Bind { path: p, .. } => p,
        }
    }

    fn order(&self) -> (usize, u8) {
        let rank = match self {
            Mount::Empty(_) => 0,
            Mount::Bind { .. } | Mount::Pin(_) => 1,
            // At the same path, hiding and locking win: fail closed.
            Mount::Hide(_) | Mount::Lock(_) => 2,
        };
        (self.path().components().count(), rank)
    }
}

/// The ordered mount operations for one launch.
#[derive(Clone, Debug)]
pub struct MountPlan {
    mounts: Vec<Mount>,
}

impl MountPlan {
    /// The plan for `policy`: authorized paths writable when `writable`, credential
    /// stores masked when `as_root`. Hidden paths that do not exist are skipped (there is
    /// nothing to hide); whether each is a file or a directory is decided when emitted.
    pub fn new(policy: &SandboxPolicy, writable: bool, as_root: bool) -> MountPlan {
        Self::build(policy, writable, EMPTIED_DIRS, as_root)
    }

    /// The plan of the policy's own paths only — no emptied system directories, no
    /// masks — for backends whose base layout differs (Seatbelt on macOS).
    pub fn without_layout(policy: &SandboxPolicy, writable: bool) -> MountPlan {
        Self::build(policy, writable, &[], false)
    }

    fn build(policy: &SandboxPolicy, writable: bool, emptied: &[&str], as_root: bool) -> MountPlan {
        let mut mounts: Vec<Mount> = emptied
            .iter()
            .map(PathBuf::from)
            .filter(|d| d.is_dir())
            .map(Mount::Empty)
            .collect();
        let bound: Vec<&PathBuf> = policy
            .writable_paths
            .iter()
            .chain(&policy.readable_extra_paths)
            .collect();
        let hiding: Vec<&Path> = emptied
            .iter()
            .map(Path::new)
            .chain(policy.hidden_paths.iter().map(PathBuf::as_path))
            .collect();
        for hidden in &policy.hidden_paths {
            // Already out of sight: an emptied or hidden directory above it with no bound
            // path in between (mounting inside it would only make bubblewrap create a
            // mount point in an empty, possibly read-only tmpfs).
            let out_of_sight = hiding
                .iter()
                .filter(|outer| hidden.starts_with(outer) && hidden.as_path() != **outer)
                .any(|outer| {
                    !bound
                        .iter()
                        .any(|b| hidden.starts_with(b) && b.starts_with(outer))
                });
            if out_of_sight {
                continue;
            }
            let covers_bound = bound.iter().any(|b| b.starts_with(hidden));
            mounts.push(if covers_bound && hidden.is_dir() {
                Mount::Empty(hidden.clone())
            } else {
                Mount::Hide(hidden.clone())
            });
        }
        mounts.extend(policy.readable_extra_paths.iter().map(|p| Mount::Bind {
            path: p.clone(),
            writable: false,
        }));
        mounts.extend(policy.writable_paths.iter().map(|p| Mount::Bind {
            path: p.clone(),
            writable,
        }));
        if as_root {
            let masked = MASKED_FILES
                .iter()
                .chain(MASKED_DIRS)
                .map(PathBuf::from)
                .chain(ssh_host_keys());
            mounts.extend(masked.filter(|p| p.exists()).map(Mount::Hide));
        }
        // Stable: equal keys keep the order above (readable extras before writable paths).
        mounts.sort_by_key(Mount::order);
        let mut plan = MountPlan { mounts };
        // Warden's programs are locked only where the plan so far would let a command
        // write them; elsewhere (the read-only root, a read-only bind, out of sight) they
        // cost nothing.
        let locks: Vec<PathBuf> = policy
            .read_only_paths
            .iter()
            .filter(|p| plan.writable_dir(p))
            .cloned()
            .collect();
        plan.mounts.extend(locks.into_iter().map(Mount::Lock));
        plan.mounts.sort_by_key(Mount::order);
        let guarded: Vec<PathBuf> = policy
            .hidden_paths
            .iter()
            .chain(&policy.read_only_paths)
            .cloned()
            .collect();
        let pins = plan.pins(&guarded);
        plan.mounts.extend(pins.into_iter().map(Mount::Pin));
        plan.mounts.sort_by_key(Mount::order);
        // The same path can be named twice (the state directory is also the home, a
        // path both hidden and masked): one mount does it, and each costs bubblewrap a
        // pass over the mount table. The first of equal operations stays, so the order
        // above holds.
        let mut kept: Vec<Mount> = Vec::with_capacity(plan.mounts.len());
        for m in plan.mounts {
            if !kept.contains(&m) {
                kept.push(m);
            }
        }
        plan.mounts = kept;
        plan
    }

    /// The ancestors of `guarded` (hidden or locked) paths that a command could rename
    /// or remove: those whose deepest enclosing operation is a writable bind (inside an
    /// emptied tmpfs or a read-only bind nothing reaches the host). Bound paths
    /// themselves are mount points already.
    fn pins(&self, guarded: &[PathBuf]) -> Vec<PathBuf> {
        let mut pins: Vec<PathBuf> = Vec::new();
        for path in guarded {
            if !self.mounts.iter().any(|m| m.path() == path) {
                continue; // not hidden by this plan (already out of sight, or absent)
            }
            for ancestor in path.ancestors().skip(1) {
                let deepest = self
                    .mounts
                    .iter()
                    .filter(|m| ancestor.starts_with(m.path()))
                    .max_by_key(|m| m.order());
                // Every writable ancestor, also above a read-only bind or a hidden
                // directory: renaming it would carry their mounts away just the same.
                if let Some(Mount::Bind {
                    path: bound,
                    writable: true,
                }) = deepest
                    && bound != ancestor
                    && !pins.iter().any(|p| p == ancestor)
                {
                    pins.push(ancestor.to_path_buf());
                }
            }
        }
        pins
    }

    /// The pinned ancestors of this plan (for `warden doctor`).
    pub fn pinned(&self) -> impl Iterator<Item = &Path> {
        self.mounts.iter().filter_map(|m| match m {
            Mount::Pin(p) => Some(p.as_path()),
            _ => None,
        })
    }

    /// The operations, parents first.
    pub fn mounts(&self) -> &[Mount] {
        &self.mounts
    }

    /// Whether a command could create or replace `path` on the host: the deepest
    /// operation at or above its parent directory is a writable bind (or a pin inside
    /// one). A mount on `path` itself does not count — it is what a missing path lacks.
    pub fn writable(&self, path: &Path) -> bool {
        let Some(parent) = path.parent() else {
            return false;
        };
        matches!(
            self.mounts
                .iter()
                .filter(|m| parent.starts_with(m.path()))
                .max_by_key(|m| m.order()),
            Some(Mount::Bind { writable: true, .. } | Mount::Pin(_))
        )
    }

    /// Whether the directory `path` is writable inside: the deepest operation at or
    /// above it is a writable bind, or a pin inside one.
    fn writable_dir(&self, path: &Path) -> bool {
        matches!(
            self.deepest(path),
            Some(Mount::Bind { writable: true, .. } | Mount::Pin(_))
        )
    }

    /// The deepest operation at or above `path`: what decides what is seen there.
    fn deepest(&self, path: &Path) -> Option<&Mount> {
        self.mounts
            .iter()
            .filter(|m| path.starts_with(m.path()))
            .max_by_key(|m| m.order())
    }

    /// The locked directories of Warden's programs (for `warden doctor`).
    pub fn locked(&self) -> impl Iterator<Item = &Path> {
        self.mounts.iter().filter_map(|m| match m {
            Mount::Lock(p) => Some(p.as_path()),
            _ => None,
        })
    }

    /// Whether `path` can be reached inside: the deepest operation at or above it decides
    /// (a bind shows it, an emptied or hidden directory does not); below none, the
    /// read-only root shows it.
    pub fn visible(&self, path: &Path) -> bool {
        self.mounts
            .iter()
            .filter(|m| path.starts_with(m.path()))
            .max_by_key(|m| m.order())
            .is_none_or(|m| matches!(m, Mount::Bind { .. } | Mount::Pin(_) | Mount::Lock(_)))
    }
}

/// sshd's private host keys (`/etc/ssh/ssh_host_*_key`).
fn ssh_host_keys() -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/etc/ssh") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("ssh_host_") && name.ends_with("_key")
        })
        .map(|e| e.path())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LandlockMode;

    fn policy(writable: &[&str], readable: &[&str], hidden: &[&str]) -> SandboxPolicy {
        let paths = |v: &[&str]| v.iter().map(PathBuf::from).collect();
        SandboxPolicy {
            writable_paths: paths(writable),
            readable_extra_paths: paths(readable),
            hidden_paths: paths(hidden),
            read_only_paths: Vec::new(),
            network: crate::Network::Off,
            landlock: LandlockMode::Off,
        }
    }

    fn position(plan: &MountPlan, m: &Mount) -> usize {
        plan.mounts()
            .iter()
            .position(|x| x == m)
            .unwrap_or_else(|| panic!("{m:?} not in {plan:?}"))
    }

    fn bind(path: &str, writable: bool) -> Mount {
        Mount::Bind {
            path: path.into(),
            writable,
        }
    }

    #[test]
    fn every_operation_comes_after_its_ancestors() {
        // A hidden home between a readable parent and a writable child: the parent's bind
        // must not re-expose it, and the child must still show through.
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_str().unwrap().to_owned();
        let home = format!("{root}/u");
        let proj = format!("{home}/proj");
        std::fs::create_dir_all(&proj).unwrap();
        let plan = MountPlan::new(&policy(&[&proj], &[&root], &[&home]), true, false);
        let outer = position(&plan, &bind(&root, false));
        let hidden = position(&plan, &Mount::Empty(home.clone().into()));
        let inner = position(&plan, &bind(&proj, true));
        assert!(outer < hidden && hidden < inner, "{plan:?}");
        assert!(!plan.visible(Path::new(&format!("{home}/.ssh"))));
        assert!(plan.visible(Path::new(&format!("{proj}/src"))));
        assert!(plan.visible(Path::new(&format!("{root}/other"))));
    }

    #[test]
    fn a_path_named_twice_is_mounted_once() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().to_str().unwrap().to_owned();
        let state = format!("{ws}/.warden");
        std::fs::create_dir(&state).unwrap();
        let plan = MountPlan::new(&policy(&[&ws, &ws], &[], &[&state, &state]), true, false);
        let count = |m: &Mount| plan.mounts().iter().filter(|x| *x == m).count();
        assert_eq!(count(&Mount::Hide(state.clone().into())), 1, "{plan:?}");
        assert_eq!(count(&bind(&ws, true)), 1, "{plan:?}");
        assert!(!plan.visible(Path::new(&format!("{state}/config.toml"))));
    }

    #[test]
    fn a_readable_path_inside_a_writable_one_stays_read_only() {
        let plan = MountPlan::new(&policy(&["/w"], &["/w/ref"], &[]), true, false);
        assert!(position(&plan, &bind("/w", true)) < position(&plan, &bind("/w/ref", false)));
    }

    #[test]
    fn hidden_paths_inside_authorized_paths_are_hidden_after_the_bind() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().to_str().unwrap().to_owned();
        let state = format!("{ws}/.warden");
        std::fs::create_dir(&state).unwrap();
        let plan = MountPlan::new(&policy(&[&ws], &[], &[&state]), false, false);
        assert!(
            position(&plan, &bind(&ws, false))
                < position(&plan, &Mount::Hide(state.clone().into()))
        );
        assert!(!plan.visible(Path::new(&format!("{state}/exec-approvals.json"))));
        assert!(plan.visible(Path::new(&ws)));
    }

    #[test]
    fn every_writable_ancestor_of_a_hidden_path_is_pinned_whatever_the_depth() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().to_str().unwrap().to_owned();
        for depth in 0..4 {
            let mut state = PathBuf::from(&ws);
            for level in 0..depth {
                state.push(format!("d{level}"));
            }
            state.push(".warden");
            std::fs::create_dir_all(&state).unwrap();
            let hidden = [state.to_str().unwrap()];
            let plan = MountPlan::new(&policy(&[&ws], &[], &hidden), true, false);
            let pinned: Vec<&Path> = plan.pinned().collect();
            let expected: Vec<PathBuf> = state
                .ancestors()
                .skip(1)
                .take_while(|a| *a != Path::new(&ws))
                .map(Path::to_path_buf)
                .collect();
            assert_eq!(pinned.len(), expected.len(), "{plan:?}");
            for a in &expected {
                let pin = position(&plan, &Mount::Pin(a.clone()));
                assert!(position(&plan, &bind(&ws, true)) < pin, "{plan:?}");
                assert!(
                    pin < position(&plan, &Mount::Hide(state.clone())),
                    "{plan:?}"
                );
            }
            // The read-only profile needs no pins: nothing there can be renamed.
            let ro = MountPlan::new(&policy(&[&ws], &[], &hidden), false, false);
            assert_eq!(ro.pinned().count(), 0, "{ro:?}");
            assert!(plan.writable(&state.parent().unwrap().join("x")));
            assert!(!plan.writable(&state.join("config.toml")));
        }
    }

    #[test]
    fn pins_stop_at_read_only_and_emptied_ancestors() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().to_str().unwrap().to_owned();
        // A read-only path inside the workspace holds the state: below it nothing can be
        // renamed, above it (inside the writable workspace) the path is pinned.
        let state = format!("{ws}/a/ro/b/.warden");
        std::fs::create_dir_all(&state).unwrap();
        let ro = format!("{ws}/a/ro");
        let plan = MountPlan::new(&policy(&[&ws], &[&ro], &[&state]), true, false);
        let pinned: Vec<&Path> = plan.pinned().collect();
        assert_eq!(pinned, vec![Path::new(&format!("{ws}/a"))], "{plan:?}");
        // A state directory inside a hidden home inside the workspace is out of sight
        // with the home; only the home's ancestors are pinned.
        let home = format!("{ws}/h/u");
        std::fs::create_dir_all(format!("{home}/.warden")).unwrap();
        let plan = MountPlan::new(
            &policy(&[&ws], &[], &[&home, &format!("{home}/.warden")]),
            true,
            false,
        );
        assert!(
            !plan
                .mounts()
                .iter()
                .any(|m| m.path() == Path::new(&format!("{home}/.warden"))),
            "{plan:?}"
        );
        let pinned: Vec<&Path> = plan.pinned().collect();
        assert_eq!(pinned, vec![Path::new(&format!("{ws}/h"))], "{plan:?}");
    }

    #[test]
    fn masks_apply_inside_a_readable_etc() {
        let plan = MountPlan::new(&policy(&[], &["/etc"], &[]), false, true);
        if Path::new("/etc/shadow").exists() {
            let etc = position(&plan, &bind("/etc", false));
            assert!(etc < position(&plan, &Mount::Hide("/etc/shadow".into())));
            assert!(!plan.visible(Path::new("/etc/shadow")));
        }
        assert!(plan.visible(Path::new("/etc/hostname")));
    }

    #[test]
    fn the_layout_hides_homes_and_tmp_but_not_the_root() {
        let plan = MountPlan::new(&policy(&[], &[], &[]), false, false);
        for dir in EMPTIED_DIRS.iter().filter(|d| Path::new(d).is_dir()) {
            assert!(!plan.visible(&Path::new(dir).join("x")), "{dir}");
        }
        assert!(plan.visible(Path::new("/usr/bin")));
    }
}
