//! Arguments that reach Warden's own files. On the gateway host and on a node, commands
//! run outside any sandbox, as Warden's user: an allowlisted file reader (`cat`, `grep`,
//! `cp`) handed the path of the approvals file, the node's `node.json` or a directory
//! above them would read the token that makes a node a node, or an approver an approver.
//! Such an invocation is therefore not *provably* harmless, and an allowlist entry does
//! not allow it: it is a miss (the human is asked, or it is denied).
//!
//! A word reaches a protected directory when the path it names — as written, and with
//! every symlink resolved — is the directory, lies inside it, or lies above it (a
//! recursive reader of a parent reads it too). Words of the form `--opt=VALUE` are
//! looked at for their value. What this does not see: a program that reads a protected
//! file it is not told about (a recursive search of the working directory when the
//! working directory lies above one), which is why the gateway host should keep
//! Warden's state outside the directories its commands work in.

use std::path::{Component, Path, PathBuf};

use caps::Fs;

/// The first word of `args` (the words after the program) that names a path reaching one
/// of `protected` (real paths of directories), from `cwd`: the word, and the protected
/// directory it reaches.
pub fn reaches_protected(
    fs: &dyn Fs,
    args: &[String],
    cwd: &Path,
    protected: &[PathBuf],
) -> Option<(String, PathBuf)> {
    if protected.is_empty() {
        return None;
    }
    let real_cwd = fs.canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    for word in args {
        let value = word.split_once('=').map(|(_, v)| v);
        for candidate in std::iter::once(word.as_str()).chain(value) {
            if candidate.is_empty() {
                continue;
            }
            for base in [cwd, real_cwd.as_path()] {
                let path = normalize(&base.join(candidate));
                if let Some(hit) = related(&path, protected) {
                    return Some((word.clone(), hit));
                }
                // Through a symlink (the command's own, in the workspace): where it
                // leads, for as much of the path as exists — resolved as written, so a
                // `..` after a symlink goes up from where the symlink leads, as the
                // kernel takes it.
                if candidate.contains('/')
                    && let Ok(Some(real)) = resolve_as_written(fs, &base.join(candidate))
                    && let Some(hit) = related(&real, protected)
                {
                    return Some((word.clone(), hit));
                }
            }
        }
    }
    None
}

/// Where `path` — as written, `..` included — really leads: its longest existing
/// beginning resolved by the filesystem (each symlink before the `..` that follows it,
/// as the kernel does) and the rest appended as written. `Ok(None)` where nothing of it
/// resolves (a `..` after a missing directory, which the kernel refuses too); `Err` with
/// the entry on the way that exists but cannot be resolved — a symlink that leads
/// nowhere (or cannot be followed), which a write would follow to create what it names.
pub(crate) fn resolve_as_written(fs: &dyn Fs, path: &Path) -> Result<Option<PathBuf>, PathBuf> {
    let mut rest: Vec<&std::ffi::OsStr> = Vec::new();
    for ancestor in path.ancestors() {
        if let Ok(real) = fs.canonicalize(ancestor) {
            return Ok(Some(rest.iter().rev().fold(real, |p, c| p.join(c))));
        }
        if fs.symlink_metadata(ancestor).is_ok() {
            return Err(ancestor.to_path_buf());
        }
        match ancestor.file_name() {
            Some(name) => rest.push(name),
            None => return Ok(None),
        }
    }
    Ok(None)
}

/// The protected directory `path` is, lies inside, or lies above.
pub(crate) fn related(path: &Path, protected: &[PathBuf]) -> Option<PathBuf> {
    protected
        .iter()
        .find(|p| path.starts_with(p) || p.starts_with(path))
        .cloned()
}

/// `path` with `.` and `..` resolved lexically (the kernel resolves `..` after symlinks;
/// [`resolve_as_written`] covers what that changes).
pub(crate) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use caps::MemoryFs;

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn paths_into_above_or_through_a_link_to_a_protected_directory_are_found() {
        let fs = MemoryFs::new();
        fs.create_dir_all(Path::new("/home/u/.warden"), 0o700)
            .unwrap();
        fs.create_dir_all(Path::new("/home/u/proj"), 0o755).unwrap();
        fs.symlink(Path::new("/home/u/.warden"), Path::new("/home/u/proj/s"))
            .unwrap();
        // A link to a directory inside the protected one: `..` after it goes up into it.
        fs.create_dir_all(Path::new("/home/u/.warden/audit"), 0o700)
            .unwrap();
        fs.symlink(
            Path::new("/home/u/.warden/audit"),
            Path::new("/home/u/proj/a"),
        )
        .unwrap();
        let protected = [PathBuf::from("/home/u/.warden")];
        let cwd = Path::new("/home/u/proj");
        let hit = |w: &[&str]| reaches_protected(&fs, &words(w), cwd, &protected);
        for w in [
            &["/home/u/.warden/node.json"][..],
            &["../.warden/node.json"],
            &["-r", "token", ".."],
            &["/"],
            &["--file=/home/u/.warden/exec-approvals.json"],
            &["s/node.json"],
            &["./s"],
            &["a/../node.json"],
        ] {
            assert!(hit(w).is_some(), "{w:?}");
        }
        for w in [
            &["src/main.rs"][..],
            &["-n", "TODO", "."],
            &["/home/u/.wardenx"],
            &["status"],
        ] {
            assert_eq!(hit(w), None, "{w:?}");
        }
        assert_eq!(reaches_protected(&fs, &words(&["/"]), cwd, &[]), None);
    }
}
