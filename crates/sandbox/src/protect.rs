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

use std::collections::BTreeSet;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use caps::mounts::MountEntry;
use serde::Serialize;

use crate::Unavailable;

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

/// Where Warden's own files are, for [`warden_paths`].
#[derive(Clone, Debug)]
pub struct WardenLayout<'a> {
    /// `$WARDEN_HOME` (config, approvals file, direct-mode switch, tokens, node state).
    pub state_dir: &'a Path,
    /// The approver socket, if the approvals file names one.
    pub socket: Option<&'a Path>,
    /// The node's state (`node.json`: its id and pairing token).
    pub node_state: Option<&'a Path>,
    /// The user's home.
    pub home: &'a Path,
    /// The programs Warden executes outside the sandbox (its own binary and the helper),
    /// as they are found on disk.
    pub programs: &'a [PathBuf],
}

/// The protected set of `layout` for `authorized`: Warden's state directory, the approver
/// socket's directory and the node state's directory when they are elsewhere (created if
/// missing, so no command can create them first), the user's home wherever it is (service
/// accounts often live under `/var/lib`), and the directories of Warden's programs — each
/// with its aliases, checked as [`protect`] and [`check_links`] say.
pub fn warden_paths(
    layout: &WardenLayout<'_>,
    authorized: Authorized<'_>,
) -> Result<Vec<Protection>, LayoutProblems> {
    let mut paths = vec![ProtectedPath::warden_dir(
        layout.state_dir.to_path_buf(),
        "state directory",
    )];
    if let Some(dir) = layout.socket.and_then(Path::parent)
        && !dir.starts_with(layout.state_dir)
    {
        paths.push(ProtectedPath::warden_dir(
            dir.to_path_buf(),
            "approver socket dir",
        ));
    }
    // node.json holds the node's pairing token: a command that read it could act as
    // the node. It lives in the state directory (hidden above); should a layout ever
    // put it elsewhere, its directory is hidden the same way.
    if let Some(dir) = layout.node_state.and_then(Path::parent)
        && !dir.starts_with(layout.state_dir)
    {
        paths.push(ProtectedPath::warden_dir(
            dir.to_path_buf(),
            "node state dir",
        ));
    }
    let home = std::fs::canonicalize(layout.home).unwrap_or_else(|_| layout.home.to_path_buf());
    if hideable(&home) {
        paths.push(ProtectedPath::hidden_if_present(home, "home directory"));
    }
    for dir in program_dirs(layout.programs) {
        paths.push(ProtectedPath::programs(
            dir,
            "directory of Warden's programs",
        ));
    }
    let table = caps::mounts::read_mount_table().unwrap_or_default();
    let protections = protect(&paths, authorized, &table)?;
    let cache = layout.state_dir.join("cache");
    let problems = check_links(
        &protections,
        layout.programs,
        authorized.writable,
        &table,
        &cache,
    );
    if problems.is_empty() {
        Ok(protections)
    } else {
        Err(LayoutProblems(problems))
    }
}

/// The real directories holding `programs`, each once.
fn program_dirs(programs: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for program in programs {
        let real = std::fs::canonicalize(program).unwrap_or_else(|_| program.clone());
        if let Some(dir) = real.parent()
            && !dirs.iter().any(|d| d == dir)
        {
            dirs.push(dir.to_path_buf());
        }
    }
    dirs
}

/// The devices a command could write on: each writable path's, and those of the mounts
/// beneath one (the sandbox binds writable paths with everything mounted in them).
fn writable_devices(writable: &[PathBuf], table: &[MountEntry]) -> BTreeSet<u64> {
    let mut devices = BTreeSet::new();
    for w in writable {
        let under = table
            .iter()
            .filter(|m| m.point.starts_with(w))
            .map(|m| m.point.clone());
        for path in std::iter::once(w.clone()).chain(under) {
            if let Ok(m) = std::fs::metadata(&path) {
                devices.insert(m.dev());
            }
        }
    }
    devices
}

/// No protected file has a hard link a command could write through. A hard link is
/// the same file under another name, anywhere on its device: a link to `config.toml` in
/// the workspace, or to `warden-sandbox-helper` elsewhere than its protected directory,
/// would let a command change the file in place, whatever hides or locks its first name.
/// Only files on a device a command can write on matter ([`writable_devices`]).
///
/// - Files in Warden's own directories (to any depth Warden uses) must have one link.
/// - A program Warden executes may have more (cargo hard-links `target/*/warden` to
///   `target/*/deps/warden-…`), if every link is found within its directory, which is
///   read-only to commands: its directory and the directories in it are searched. That
///   answer is remembered in `cache` under the file's device, inode, link count and
///   change time — adding or removing a link changes the last two — so a one-shot
///   `warden exec` does not search each time.
pub fn check_links(
    protections: &[Protection],
    programs: &[PathBuf],
    writable: &[PathBuf],
    table: &[MountEntry],
    cache: &Path,
) -> Vec<String> {
    let mut problems = Vec::new();
    let devices = writable_devices(writable, table);
    if devices.is_empty() {
        return problems;
    }
    for p in protections.iter().filter(|p| p.warden_owned) {
        if let Some((file, links)) = linked_file(&p.real, &devices, 3) {
            problems.push(format!(
                "{} has {links} hard links, and another name of it could lie inside a writable path, where a command could change it: give it a single name (cp {0} {0}.new && mv {0}.new {0}), or remove the other links",
                file.display()
            ));
        }
    }
    for program in programs {
        let Ok(real) = std::fs::canonicalize(program) else {
            continue;
        };
        let Ok(meta) = std::fs::metadata(&real) else {
            continue;
        };
        if meta.nlink() <= 1 || !devices.contains(&meta.dev()) {
            continue;
        }
        let key = format!(
            "{} {} {} {}.{} {}",
            meta.dev(),
            meta.ino(),
            meta.nlink(),
            meta.ctime(),
            meta.ctime_nsec(),
            real.display()
        );
        if remembered(cache, &key) {
            continue;
        }
        let dir = real.parent().unwrap_or(Path::new("/"));
        let found = links_within(dir, (meta.dev(), meta.ino()), 1);
        if found < meta.nlink() {
            problems.push(format!(
                "{} has {} hard links, {} of them outside {} (which commands cannot change), and one could lie inside a writable path, where a command could change the program Warden runs outside the sandbox: install Warden with one name (cargo install --path crates/cli), or remove the other links",
                real.display(),
                meta.nlink(),
                meta.nlink() - found,
                dir.display()
            ));
            continue;
        }
        remember(cache, &key);
    }
    problems
}

/// The first regular file (or socket) at most `depth` levels inside `dir` that has more
/// than one link and lies on one of `devices`.
fn linked_file(dir: &Path, devices: &BTreeSet<u64>, depth: u32) -> Option<(PathBuf, u64)> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_dir() {
            if depth > 1
                && let Some(found) = linked_file(&path, devices, depth - 1)
            {
                return Some(found);
            }
            continue;
        }
        if kind.is_symlink() {
            continue;
        }
        if let Ok(meta) = entry.metadata()
            && meta.nlink() > 1
            && devices.contains(&meta.dev())
        {
            return Some((path, meta.nlink()));
        }
    }
    None
}

/// Entries looked at, at most, when counting a program's links: a build directory has
/// thousands; past this the links are taken as not found.
const MAX_LINK_SEARCH: usize = 200_000;

/// How many names of the file `id` lie in `dir` or, `depth` levels down, in the
/// directories inside it (on the same device: names of `id` can be nowhere else).
fn links_within(dir: &Path, id: (u64, u64), depth: u32) -> u64 {
    let mut budget = MAX_LINK_SEARCH;
    count_links(dir, id, depth, &mut budget)
}

fn count_links(dir: &Path, id: (u64, u64), depth: u32, budget: &mut usize) -> u64 {
    if std::fs::metadata(dir).map(|m| m.dev()).ok() != Some(id.0) {
        return 0;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut found = 0;
    for entry in entries.flatten() {
        if *budget == 0 {
            return found;
        }
        *budget -= 1;
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if depth > 0 {
                found += count_links(&entry.path(), id, depth - 1, budget);
            }
        } else if kind.is_file()
            && std::os::unix::fs::DirEntryExt::ino(&entry) == id.1
            && entry.metadata().is_ok_and(|m| (m.dev(), m.ino()) == id)
        {
            found += 1;
        }
    }
    found
}

/// The file in `cache` where a program whose links were all found is remembered (one
/// per program file).
fn links_cache(cache: &Path, key: &str) -> PathBuf {
    let id: String = key.split(' ').take(2).collect::<Vec<_>>().join("-");
    cache.join(format!("program-links-{id}"))
}

/// Whether `key` was remembered in `cache`.
fn remembered(cache: &Path, key: &str) -> bool {
    std::fs::read_to_string(links_cache(cache, key)).is_ok_and(|stored| stored == key)
}

/// Remember `key` (a failure only means searching again next time). The cache lives in
/// Warden's state directory, out of every command's reach.
fn remember(cache: &Path, key: &str) {
    if let Err(e) = crate::probe_cache::remember(&links_cache(cache, key), key) {
        tracing::debug!(
            "cannot remember a program's links in {}: {e}",
            cache.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn protected(path: &Path, create: bool) -> ProtectedPath {
        ProtectedPath {
            path: path.to_path_buf(),
            create,
            role: "test path",
            guard: Guard::Hidden,
        }
    }

    fn writable(paths: &[PathBuf]) -> Authorized<'_> {
        Authorized {
            writable: paths,
            readable: &[],
        }
    }

    fn layout<'a>(state: &'a Path, home: &'a Path) -> WardenLayout<'a> {
        WardenLayout {
            state_dir: state,
            socket: None,
            node_state: None,
            home,
            programs: &[],
        }
    }

    #[test]
    fn the_node_state_is_protected_wherever_it_lies() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let (state, home) = (base.join("state"), base.join("home"));
        let inside = state.join("node.json");
        let layout = WardenLayout {
            node_state: Some(&inside),
            ..layout(&state, &home)
        };
        let got = warden_paths(&layout, writable(&[])).unwrap();
        assert!(got.iter().any(|p| inside.starts_with(&p.real)), "{got:?}");
        let elsewhere = base.join("nodes/node.json");
        let layout = WardenLayout {
            node_state: Some(&elsewhere),
            ..layout
        };
        let got = warden_paths(&layout, writable(&[])).unwrap();
        assert!(got.iter().any(|p| p.real == base.join("nodes")), "{got:?}");
    }

    #[test]
    fn missing_directories_are_created_private_and_located() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(tmp.path()).unwrap();
        let state = ws.join("a/b/.warden");
        let got = protect(
            &[protected(&state, true)],
            writable(std::slice::from_ref(&ws)),
            &[],
        )
        .unwrap();
        assert_eq!(got[0].real, state);
        assert_eq!(got[0].inside_writable.as_deref(), Some(ws.as_path()));
        let mode = std::fs::metadata(&state).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn a_symlink_inside_a_writable_path_is_refused_one_outside_is_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let ws = base.join("ws");
        let real = ws.join("real/.warden");
        std::fs::create_dir_all(&real).unwrap();
        std::os::unix::fs::symlink(ws.join("real"), ws.join("link")).unwrap();
        let err = protect(
            &[protected(&ws.join("link/.warden"), true)],
            writable(std::slice::from_ref(&ws)),
            &[],
        )
        .unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
        // A link outside the writable paths cannot be replaced by a command.
        std::os::unix::fs::symlink(ws.join("real"), base.join("outside")).unwrap();
        let got = protect(
            &[protected(&base.join("outside/.warden"), true)],
            writable(std::slice::from_ref(&ws)),
            &[],
        )
        .unwrap();
        assert_eq!(got[0].real, real);
    }

    #[test]
    fn absent_paths_that_are_not_created_are_skipped_and_files_in_the_way_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(tmp.path()).unwrap();
        let got = protect(&[protected(&ws.join("nohome"), false)], writable(&[]), &[]).unwrap();
        assert!(got.is_empty());
        std::fs::write(ws.join("file"), "x").unwrap();
        assert!(protect(&[protected(&ws.join("file"), true)], writable(&[]), &[]).is_err());
    }

    #[test]
    fn an_authorized_path_equal_to_or_inside_the_state_directory_is_refused_naming_both() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let (state, home) = (base.join("state"), base.join("home"));
        std::fs::create_dir_all(state.join("sub")).unwrap();
        // Reached through a symlink too: identity, not the path's spelling.
        std::os::unix::fs::symlink(&state, base.join("alias")).unwrap();
        for (path, how) in [
            (state.clone(), "is"),
            (state.join("sub"), "lies inside"),
            (base.join("alias/sub"), "lies inside"),
        ] {
            for authorized in [
                Authorized {
                    writable: std::slice::from_ref(&path),
                    readable: &[],
                },
                Authorized {
                    writable: &[],
                    readable: std::slice::from_ref(&path),
                },
            ] {
                let err = warden_paths(&layout(&state, &home), authorized).unwrap_err();
                assert!(
                    err.to_string().contains(&path.display().to_string()),
                    "{err}"
                );
                assert!(
                    err.to_string().contains(&state.display().to_string()),
                    "{err}"
                );
                assert!(err.to_string().contains(how), "{err}");
            }
        }
        // Above it is fine: the plan hides it (and pins what leads to it).
        warden_paths(
            &layout(&state, &home),
            writable(std::slice::from_ref(&base)),
        )
        .unwrap();
    }

    #[test]
    fn the_programs_directory_is_read_only_and_a_writable_path_equal_to_it_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let (state, home) = (base.join("state"), base.join("home"));
        let bin = base.join("ws/target/release");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("warden"), "").unwrap();
        let programs = [bin.join("warden")];
        let layout = WardenLayout {
            programs: &programs,
            ..layout(&state, &home)
        };
        let ws = [base.join("ws")];
        let got = warden_paths(&layout, writable(&ws)).unwrap();
        let dir = got.iter().find(|p| p.guard == Guard::ReadOnly).unwrap();
        assert_eq!(dir.real, bin);
        assert_eq!(dir.inside_writable.as_deref(), Some(ws[0].as_path()));
        let (hidden, read_only) = plan_paths(&got);
        assert_eq!(read_only, vec![bin.clone()]);
        assert!(hidden.contains(&state));
        let err = warden_paths(&layout, writable(std::slice::from_ref(&bin))).unwrap_err();
        assert!(err.to_string().contains("cargo install"), "{err}");
    }

    #[test]
    fn aliases_are_found_by_device_and_mount_root() {
        let table = caps::mounts::parse_mount_table(
            b"1 0 8:1 / / rw - ext4 /dev/sda1 rw\n\
              2 1 8:1 /root/.warden /ws/alias rw - ext4 /dev/sda1 rw\n\
              3 1 8:1 /root /ws/home rw - ext4 /dev/sda1 rw\n\
              4 1 8:1 /root/.warden/cache /srv/cache rw - ext4 /dev/sda1 rw\n\
              5 1 0:40 / /tmp rw - tmpfs tmpfs rw\n\
              6 1 8:1 /srv /mnt/srv rw - ext4 /dev/sda1 rw\n",
        );
        let found = aliases(Path::new("/root/.warden"), &table);
        assert_eq!(
            found,
            vec![
                PathBuf::from("/ws/alias"),
                PathBuf::from("/ws/home/.warden"),
                PathBuf::from("/srv/cache"),
            ]
        );
        // Through a bind of the state directory itself, the same places.
        let found = aliases(Path::new("/ws/alias"), &table);
        assert!(found.contains(&PathBuf::from("/root/.warden")), "{found:?}");
        assert!(aliases(Path::new("/tmp/x"), &table).is_empty());
    }

    #[test]
    fn a_protected_file_with_another_name_on_a_writable_device_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let (state, home, ws) = (base.join("state"), base.join("home"), base.join("ws"));
        std::fs::create_dir_all(state.join("cache")).unwrap();
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(state.join("config.toml"), "").unwrap();
        let ws_list = [ws.clone()];
        warden_paths(&layout(&state, &home), writable(&ws_list)).unwrap();
        std::fs::hard_link(state.join("config.toml"), ws.join("planted")).unwrap();
        let err = warden_paths(&layout(&state, &home), writable(&ws_list)).unwrap_err();
        assert!(
            err.to_string().contains("config.toml has 2 hard links"),
            "{err}"
        );
        std::fs::remove_file(ws.join("planted")).unwrap();
        // Deeper in the state directory too.
        std::fs::write(state.join("cache/probe"), "").unwrap();
        std::fs::hard_link(state.join("cache/probe"), ws.join("planted")).unwrap();
        assert!(warden_paths(&layout(&state, &home), writable(&ws_list)).is_err());
        // With no writable path there is nowhere a command could write through it.
        warden_paths(&layout(&state, &home), writable(&[])).unwrap();
    }

    #[test]
    fn a_program_s_links_must_all_lie_in_its_read_only_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let (state, home, ws) = (base.join("state"), base.join("home"), base.join("ws"));
        let bin = ws.join("target/release");
        std::fs::create_dir_all(bin.join("deps")).unwrap();
        std::fs::write(bin.join("deps/warden-0123"), "").unwrap();
        // cargo's layout: the program and its twin in deps/, both read-only to commands.
        std::fs::hard_link(bin.join("deps/warden-0123"), bin.join("warden")).unwrap();
        let programs = [bin.join("warden")];
        let layout = WardenLayout {
            programs: &programs,
            ..layout(&state, &home)
        };
        let ws_list = [ws.clone()];
        warden_paths(&layout, writable(&ws_list)).unwrap();
        let cached: Vec<_> = std::fs::read_dir(state.join("cache"))
            .unwrap()
            .flatten()
            .map(|e| std::fs::read_to_string(e.path()).unwrap())
            .collect();
        assert!(
            cached.len() == 1 && remembered(&state.join("cache"), &cached[0]),
            "{cached:?}"
        );
        // A third name in the workspace: found missing, whatever was remembered.
        std::fs::hard_link(bin.join("warden"), ws.join("copy")).unwrap();
        let err = warden_paths(&layout, writable(&ws_list)).unwrap_err();
        assert!(
            err.to_string()
                .contains("has 3 hard links, 1 of them outside"),
            "{err}"
        );
    }
}
