//! Where an invocation is read (working directory, writable paths, what is protected,
//! whether the command line pipes into it), and the check on a path a grammar marks as
//! written: inside the run's writable paths — as written and with every symlink of its
//! existing part resolved — and never Git's own files (`.git/config`, `.git/hooks/…`,
//! whose settings run programs) or a directory where Warden keeps its own.

use std::path::{Component, Path, PathBuf};

use caps::Fs;

use crate::protected::{normalize, related, resolve_existing};

/// What a grammar needs to know about where a command runs.
#[derive(Clone, Copy)]
pub struct Invocation<'a> {
    /// The executing host's filesystem, for symlinks (`None`: paths are read as written).
    pub fs: Option<&'a dyn Fs>,
    /// The command's working directory.
    pub cwd: &'a Path,
    /// Where the run may write besides its working directory (`sandbox.writable_paths`).
    pub writable: &'a [PathBuf],
    /// Directories where Warden keeps its own files (real paths).
    pub protected: &'a [PathBuf],
    /// Whether the command line pipes into this command's standard input.
    pub stdin_piped: bool,
}

impl std::fmt::Debug for Invocation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Invocation")
            .field("cwd", &self.cwd)
            .field("writable", &self.writable)
            .field("stdin_piped", &self.stdin_piped)
            .finish_non_exhaustive()
    }
}

/// The working directory an example is read in (`/workspace`, writable), with no
/// filesystem and nothing piped: what load-time examples are checked against.
pub const EXAMPLE_CWD: &str = "/workspace";

impl Invocation<'static> {
    /// An invocation in [`EXAMPLE_CWD`], which alone is writable.
    pub fn example() -> Invocation<'static> {
        Invocation {
            fs: None,
            cwd: Path::new(EXAMPLE_CWD),
            writable: &[],
            protected: &[],
            stdin_piped: false,
        }
    }
}

/// Written through the standard streams, not a file of the filesystem.
const STREAMS: &[&str] = &["-", "/dev/stdout", "/dev/stderr", "/dev/null"];

/// `host:path` or `user@host:path`: a colon before any slash (how tar, rsync and scp
/// tell a remote file from a local one).
pub(crate) fn is_remote(value: &str) -> bool {
    match (value.find(':'), value.find('/')) {
        (Some(colon), Some(slash)) => colon < slash,
        (Some(_), None) => true,
        _ => false,
    }
}

/// Whether `path` is one of Git's own files whose content runs programs, or the `.git`
/// entry itself (a `.git` file names the directory Git reads its configuration from).
fn git_internal(path: &Path) -> bool {
    let parts: Vec<Component<'_>> = path.components().collect();
    parts.iter().enumerate().any(|(k, c)| {
        c.as_os_str() == ".git"
            && match parts.get(k + 1).map(|n| n.as_os_str().to_string_lossy()) {
                None => true,
                Some(next) => {
                    matches!(next.as_ref(), "hooks" | "commondir" | "info")
                        || next.starts_with("config")
                }
            }
    })
}

/// Check a path the program writes (`workdir`: a directory it works in, which may be
/// Git's own); the reason it may not. Not an error type: the reason is the text of a
/// grammar refusal (a [`super::ProfileHit`]'s `reason`), which is all it is ever used as.
pub(crate) fn check_write(value: &str, workdir: bool, inv: &Invocation<'_>) -> Result<(), String> {
    if STREAMS.contains(&value) {
        return Ok(());
    }
    if value.is_empty() {
        return Err("writes to an empty path".into());
    }
    if is_remote(value) && !value.starts_with('/') && !value.starts_with('.') {
        // A remote destination (`host:path`) is written on that host, not here.
        if value.starts_with('-') {
            return Err(format!(
                "{value:?} names a host that reads as an ssh option"
            ));
        }
        return Ok(());
    }
    let written = normalize(&inv.cwd.join(value));
    let real = inv.fs.and_then(|fs| resolve_existing(fs, &written));
    for path in std::iter::once(&written).chain(real.as_ref()) {
        if !workdir && git_internal(path) {
            return Err(format!(
                "writes to {}, one of Git's own files (its settings and hooks run programs)",
                path.display()
            ));
        }
        // A file written inside Warden's directories; a directory worked in that is one
        // of them or holds one (git -C DIR clean would reach it).
        let reached = match workdir {
            true => related(path, inv.protected),
            false => inv.protected.iter().find(|p| path.starts_with(p)).cloned(),
        };
        if let Some(dir) = reached {
            return Err(format!(
                "writes to {}, which is or holds where Warden keeps its own files ({})",
                path.display(),
                dir.display()
            ));
        }
    }
    // The working directory and the configured paths, as written (lexically) and, for
    // the path's real location, also with their own symlinks resolved.
    let roots = || std::iter::once(inv.cwd).chain(inv.writable.iter().map(PathBuf::as_path));
    let inside_lexically = |p: &Path| roots().any(|r| p.starts_with(normalize(r)));
    let inside_really = |p: &Path| {
        inside_lexically(p)
            || roots().any(|r| {
                inv.fs
                    .and_then(|fs| fs.canonicalize(r).ok())
                    .is_some_and(|real_root| p.starts_with(real_root))
            })
    };
    if !inside_lexically(&written) || !real.as_deref().is_none_or(inside_really) {
        let listed: Vec<String> = roots().map(|r| r.display().to_string()).collect();
        return Err(format!(
            "writes to {}, outside the run's writable paths ({})",
            real.as_ref().unwrap_or(&written).display(),
            listed.join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_path_must_stay_inside_and_off_gits_own_files() {
        let inv = Invocation::example();
        assert!(check_write("out.txt", false, &inv).is_ok());
        assert!(check_write("sub/../out.txt", false, &inv).is_ok());
        assert!(check_write("-", false, &inv).is_ok());
        assert!(check_write("/dev/null", false, &inv).is_ok());
        assert!(check_write("host:dir/file", false, &inv).is_ok());
        assert!(check_write("../out.txt", false, &inv).is_err());
        assert!(check_write("/etc/passwd", false, &inv).is_err());
        assert!(check_write(".git/config", false, &inv).is_err());
        assert!(check_write("./.git/hooks/pre-commit", false, &inv).is_err());
        assert!(check_write("sub/.git", false, &inv).is_err());
        assert!(check_write(".git/config.worktree", false, &inv).is_err());
        assert!(check_write(".git/info/attributes", false, &inv).is_err());
        assert!(check_write("-oProxyCommand=x:y", false, &inv).is_err());
        assert!(check_write("", false, &inv).is_err());
        // A directory a program works in may be Git's own, never outside.
        assert!(check_write(".git", true, &inv).is_ok());
        assert!(check_write("/tmp/repo", true, &inv).is_err());
        // Warden's own directories: a file inside, or a working directory above.
        let protected = [PathBuf::from("/workspace/state")];
        let guarded = Invocation {
            protected: &protected,
            ..Invocation::example()
        };
        assert!(check_write("state/x", false, &guarded).is_err());
        assert!(check_write(".", true, &guarded).is_err());
        assert!(check_write("out.txt", false, &guarded).is_ok());
        assert!(
            is_remote("h:x") && is_remote("u@h:/x") && !is_remote("./a:b") && !is_remote("/a:b")
        );
    }
}
