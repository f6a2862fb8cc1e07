//! Hard links a command could write a protected file through ([`check_links`]): files
//! in Warden's directories must have one link, a program's other links must lie in its
//! read-only directory (a search whose success is remembered).

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use caps::mounts::MountEntry;

use super::*;

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
pub(super) fn remembered(cache: &Path, key: &str) -> bool {
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
