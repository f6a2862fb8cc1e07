//! Warden's own files out of a command's reach, whatever the layout: the **protected
//! set**. It holds Warden's state directory (config, approvals file, direct-mode switch,
//! tokens, node state, caches), the approver socket's directory, the user's home, and the
//! directories of the programs Warden executes (`warden` and `warden-sandbox-helper`).
//!
//! Each member is known by identity, not by the path it was named with: its real path,
//! and every other place the kernel's mount table shows the same directory (a bind mount
//! of it, of a directory above it, or of one inside it — found by device and mount root),
//! so a symlink, a bind mount or any nesting of the state directory, the home and the
//! authorized paths leads to the same answer. Authorized paths are compared with it by
//! device and inode. What this module decides:
//!
//! - each Warden directory exists before a sandbox starts (a missing one inside a writable
//!   path could be created by the command), and no symlink a command could replace leads
//!   to one;
//! - an authorized path equal to or inside a Warden directory is refused, naming both;
//!   so is a writable path that *is* the directory of Warden's programs;
//! - no file of a Warden directory, and no program Warden executes, has a hard link a
//!   command could write through (a link's other names can lie anywhere on its device);
//! - what the mount plan (`mounts.rs`) must do: hide the state directory, the socket's
//!   directory and the home wherever they show ([`Guard::Hidden`]); keep the programs'
//!   directories read-only where they would be writable ([`Guard::ReadOnly`]); and pin
//!   every writable ancestor of either, so no rename, removal, symlink swap or recreation
//!   of an ancestor plants a file where Warden will read or execute it.
//!
//! Here: the protected set's members and the checks on authorized paths; `layout.rs`:
//! Warden's layout made into that set; `links.rs`: the hard-link check.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use caps::mounts::MountEntry;
use serde::Serialize;

use crate::Unavailable;

mod layout;
mod links;
#[cfg(test)]
mod tests;

pub use layout::{WardenLayout, warden_paths};
pub use links::check_links;

/// Why a layout is refused: every problem found, each with its fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join("; "))]
pub struct LayoutProblems(pub Vec<String>);

impl From<LayoutProblems> for Unavailable {
    fn from(p: LayoutProblems) -> Unavailable {
        Unavailable(p.to_string())
    }
}

/// How a protected directory is kept from commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Guard {
    /// Out of sight (an empty read-only tmpfs over it): Warden's state, the approver's
    /// socket, the home.
    Hidden,
    /// Seen, never changed (bound read-only onto itself where it would be writable): the
    /// directories of the programs Warden executes.
    ReadOnly,
}

/// One path Warden decides from or executes, and what is to be done to keep it out of
/// reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtectedPath {
    /// The path as Warden reads it (it may pass through symlinks nobody else can change).
    pub path: PathBuf,
    /// Create it (mode 0700, owned by us) when missing: Warden's state directory and the
    /// approver socket's directory. Other paths are protected only if they exist.
    pub create: bool,
    /// What it is, for messages ("state directory").
    pub role: &'static str,
    /// Hidden, or read-only.
    pub guard: Guard,
}

impl ProtectedPath {
    /// One of Warden's own directories (state, approver socket): created when missing,
    /// hidden, and kept from the file tools as well as from commands.
    pub fn warden_dir(path: PathBuf, role: &'static str) -> ProtectedPath {
        ProtectedPath {
            path,
            create: true,
            role,
            guard: Guard::Hidden,
        }
    }

    /// Someone else's data, hidden from commands when it exists (a home directory).
    pub fn hidden_if_present(path: PathBuf, role: &'static str) -> ProtectedPath {
        ProtectedPath {
            path,
            create: false,
            role,
            guard: Guard::Hidden,
        }
    }

    /// A directory of programs Warden executes: read-only for commands, when it exists.
    pub fn programs(path: PathBuf, role: &'static str) -> ProtectedPath {
        ProtectedPath {
            path,
            create: false,
            role,
            guard: Guard::ReadOnly,
        }
    }
}

/// Where a protected path really is, and why it is safe there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Protection {
    /// What it is.
    pub role: &'static str,
    /// The real path (no symlinks).
    pub real: PathBuf,
    /// Hidden, or read-only.
    pub guard: Guard,
    /// Every other place the same directory (or a part of it) shows on this host, from
    /// the mount table: each is hidden, or kept read-only, like [`Protection::real`].
    pub aliases: Vec<PathBuf>,
    /// The writable path it lies inside, if any (then its ancestors are pinned).
    pub inside_writable: Option<PathBuf>,
    /// One of Warden's own directories (kept from the file tools too).
    pub warden_owned: bool,
}

impl Protection {
    /// The real path and every alias.
    pub fn places(&self) -> impl Iterator<Item = &Path> {
        std::iter::once(self.real.as_path()).chain(self.aliases.iter().map(PathBuf::as_path))
    }
}

/// The paths commands may use: read and write, and read only (real, absolute
/// directories).
#[derive(Clone, Copy, Debug)]
pub struct Authorized<'a> {
    /// `sandbox.writable_paths` (or the workspace).
    pub writable: &'a [PathBuf],
    /// `sandbox.readable_extra_paths`.
    pub readable: &'a [PathBuf],
}

impl Authorized<'_> {
    fn all(&self) -> impl Iterator<Item = &PathBuf> {
        self.writable.iter().chain(self.readable)
    }
}

/// What the sandbox's mount plan is to keep out of reach: `(hidden, read_only)`, every
/// place of every protection.
pub fn plan_paths(protections: &[Protection]) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut hidden = Vec::new();
    let mut read_only = Vec::new();
    for p in protections {
        let into = match p.guard {
            Guard::Hidden => &mut hidden,
            Guard::ReadOnly => &mut read_only,
        };
        for place in p.places() {
            if !into.iter().any(|q: &PathBuf| q == place) {
                into.push(place.to_path_buf());
            }
        }
    }
    (hidden, read_only)
}

/// Check every protected path against the authorized paths, creating the directories that
/// must exist, and return where each really is and shows. Refused (with a diagnosis that
/// says how to fix the layout) when a path runs through a symlink inside a writable path
/// (the command could point it elsewhere), when a directory to create cannot be, when an
/// authorized path is a Warden directory or lies inside one, or when a writable path is
/// the directory of Warden's programs.
pub fn protect(
    paths: &[ProtectedPath],
    authorized: Authorized<'_>,
    table: &[MountEntry],
) -> Result<Vec<Protection>, LayoutProblems> {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for p in paths {
        if !p.path.is_absolute() {
            problems.push(format!(
                "{} {} is not an absolute path",
                p.role,
                p.path.display()
            ));
            continue;
        }
        if p.create {
            if let Err(e) = create_private_dir(&p.path, p.role) {
                problems.push(e.0);
                continue;
            }
        } else if std::fs::symlink_metadata(&p.path).is_err() {
            continue; // nothing there to protect, and nothing Warden creates
        }
        if let Some(link) = replaceable_symlink(&p.path, authorized.writable) {
            problems.push(format!(
                "{} {} is reached through the symlink {}, which lies in a writable path, so a sandboxed command could point it elsewhere; use the real path ({}) instead",
                p.role,
                p.path.display(),
                link.display(),
                std::fs::canonicalize(&p.path)
                    .unwrap_or_else(|_| p.path.clone())
                    .display()
            ));
            continue;
        }
        let real = match std::fs::canonicalize(&p.path) {
            Ok(real) => real,
            Err(e) => {
                problems.push(format!(
                    "{} {} cannot be resolved: {e}",
                    p.role,
                    p.path.display()
                ));
                continue;
            }
        };
        let inside_writable = authorized
            .writable
            .iter()
            .filter(|w| real.starts_with(w))
            .max_by_key(|w| w.components().count())
            .cloned();
        out.push(Protection {
            role: p.role,
            aliases: aliases(&real, table),
            real,
            guard: p.guard,
            inside_writable,
            warden_owned: p.create,
        });
    }
    refuse_authorized_inside(&out, authorized, &mut problems);
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(LayoutProblems(problems))
    }
}

/// An authorized path that is a Warden directory or lies inside one (by device and
/// inode: also through a bind mount or a symlink) would show it to commands: refused,
/// naming both. So is a writable path that is the directory of Warden's programs (it
/// could only be kept read-only as a whole).
fn refuse_authorized_inside(
    protections: &[Protection],
    authorized: Authorized<'_>,
    problems: &mut Vec<String>,
) {
    let identities =
        |p: &Protection| -> Vec<(u64, u64)> { p.places().filter_map(identity).collect() };
    for p in protections.iter().filter(|p| p.warden_owned) {
        let ids = identities(p);
        for path in authorized.all() {
            if let Some(at) = ancestor_with_identity(path, &ids) {
                let how = if at == *path { "is" } else { "lies inside" };
                problems.push(format!(
                    "the authorized path {} {how} Warden's {} {}{}: commands would see and change what Warden decides from; authorize another directory (sandbox.writable_paths, sandbox.readable_extra_paths, or run from another working directory), or move Warden's state elsewhere (WARDEN_HOME)",
                    path.display(),
                    p.role,
                    p.real.display(),
                    if at == p.real { String::new() } else { format!(" (shown at {})", at.display()) }
                ));
            }
        }
    }
    for p in protections.iter().filter(|p| p.guard == Guard::ReadOnly) {
        let ids = identities(p);
        for path in authorized.writable {
            if identity(path).is_some_and(|id| ids.contains(&id)) {
                problems.push(format!(
                    "the writable path {} is the {} {}: a command could replace the programs Warden runs outside the sandbox; install Warden elsewhere (cargo install --path crates/cli puts it in ~/.cargo/bin) or authorize another directory",
                    path.display(),
                    p.role,
                    p.real.display()
                ));
            }
        }
    }
}

/// (device, inode) of `path`, following symlinks.
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The first of `path` (resolved) and its ancestors whose identity is one of `ids`.
fn ancestor_with_identity(path: &Path, ids: &[(u64, u64)]) -> Option<PathBuf> {
    let real = std::fs::canonicalize(path).ok()?;
    real.ancestors()
        .find(|a| identity(a).is_some_and(|id| ids.contains(&id)))
        .map(Path::to_path_buf)
}

/// Every other place the directory `real` shows through the mount table: where another
/// mount of the same filesystem shows it (its root at or above it), or shows a part of it
/// (its root inside it). Places inside `real` itself are left out (covered by it).
pub fn aliases(real: &Path, table: &[MountEntry]) -> Vec<PathBuf> {
    // The mount `real` is reached through: the deepest mount point above it (the last
    // of equals: a later mount on the same point covers an earlier one).
    let Some(containing) = table
        .iter()
        .filter(|m| real.starts_with(&m.point))
        .max_by_key(|m| m.point.components().count())
        .and_then(|deepest| table.iter().rev().find(|m| m.point == deepest.point))
    else {
        return Vec::new();
    };
    let Ok(below) = real.strip_prefix(&containing.point) else {
        return Vec::new();
    };
    let fs_path = containing.root.join(below);
    let mut out: Vec<PathBuf> = Vec::new();
    for m in table.iter().filter(|m| m.device == containing.device) {
        let place = match m.shows(&fs_path) {
            Some(place) => place,
            None if m.root.starts_with(&fs_path) => m.point.clone(),
            None => continue,
        };
        if !place.starts_with(real) && !out.contains(&place) {
            out.push(place);
        }
    }
    out
}

/// Create `dir` (and missing parents) as a private directory of ours, refusing a path
/// that exists as something else.
fn create_private_dir(dir: &Path, role: &str) -> Result<(), Unavailable> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => return Ok(()),
        // A symlink to a directory is judged by `replaceable_symlink` next.
        Ok(m) if m.file_type().is_symlink() && dir.is_dir() => return Ok(()),
        Ok(_) => {
            return Err(Unavailable(format!(
                "{role} {} exists but is not a directory",
                dir.display()
            )));
        }
        Err(_) => {}
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| {
            Unavailable(format!(
                "{role} {} does not exist and cannot be created: {e}",
                dir.display()
            ))
        })?;
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| Unavailable(format!("{role} {}: {e}", dir.display())))?;
    if !meta.is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(Unavailable(format!(
            "{role} {} was replaced while it was being created",
            dir.display()
        )));
    }
    Ok(())
}

/// The first symlink on the way to `path` (itself included) that lies inside a writable
/// path, where a command could replace it.
fn replaceable_symlink(path: &Path, writable: &[PathBuf]) -> Option<PathBuf> {
    let mut walked = PathBuf::new();
    for component in path.components() {
        walked.push(component);
        let is_link = std::fs::symlink_metadata(&walked)
            .map(|m| m.file_type().is_symlink())
            .unwrap_or(false);
        if !is_link {
            continue;
        }
        // The link's own directory, as the kernel sees it, decides who may replace it.
        let parent = walked
            .parent()
            .and_then(|p| std::fs::canonicalize(p).ok())
            .unwrap_or_else(|| walked.clone());
        if writable.iter().any(|w| parent.starts_with(w)) {
            return Some(walked);
        }
    }
    None
}

/// Whether hiding `dir` leaves the system usable: not `/`, not a top-level directory,
/// nothing programs are loaded from.
pub fn hideable(dir: &Path) -> bool {
    const SYSTEM: &[&str] = &[
        "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/sys",
        "/dev", "/opt", "/nix",
    ];
    dir.components().count() > 2 && !SYSTEM.iter().any(|s| dir.starts_with(s))
}
