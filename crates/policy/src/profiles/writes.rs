//! Where an invocation is read (working directory, writable paths, what is protected,
//! whether the command line pipes into it), and the check on a path a grammar marks as
//! written: inside the run's writable paths — as written and with every symlink of its
//! existing part resolved — and never inside a Git directory (whose settings and hooks
//! run programs) or a directory where Warden keeps its own.

use std::path::{Path, PathBuf};

use caps::Fs;

use crate::protected::{normalize, related, resolve_as_written};

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

/// How a path a grammar marks as written is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Written {
    /// A file (`write`).
    File,
    /// A directory the program works in and writes files into, whose names the program
    /// or its input chooses (`workdir`: `tar -C`, `unzip -d`, `format-patch -o`,
    /// `--work-tree`).
    Dir,
    /// A directory Git works in, which may be a (bare) repository's Git directory
    /// (`git-workdir`: `git -C`): it may be one, but not lie inside one.
    GitWorkdir,
    /// A directory named as a repository's Git directory (`git-dir`: `--git-dir`,
    /// `--separate-git-dir`): it may be one, but not lie inside one, and if it exists it
    /// must be one already or empty — a folder filled first (a `config` written there
    /// while it was no Git directory) would give Git its settings once named so.
    GitDir,
}

impl Written {
    /// Whether the path is a directory (what is done inside it reaches what lies below).
    pub(crate) fn is_dir(self) -> bool {
        !matches!(self, Written::File)
    }
}

/// The Git directory `path` lies in: a `.git` component anywhere (a directory, or the
/// pointer file of a submodule or worktree), or — with a filesystem — an existing
/// ancestor that is a Git directory by its content (`HEAD` beside `objects` or
/// `commondir`: a bare repository, a `--separate-git-dir`). Anything written there can
/// become Git's settings or hooks (its own, a submodule's under `modules/`, a worktree's),
/// which run programs; so the property is "nothing inside any Git directory", not a list
/// of its files.
fn git_dir_holding(path: &Path, fs: Option<&dyn Fs>) -> Option<PathBuf> {
    let mut prefix = PathBuf::new();
    for component in path.components() {
        prefix.push(component);
        if is_git_name(component.as_os_str()) {
            return Some(prefix);
        }
    }
    let fs = fs?;
    path.ancestors()
        .find(|dir| is_git_dir(fs, dir))
        .map(Path::to_path_buf)
}

/// Whether a path component names a Git directory: `.git` in any case (on a
/// case-insensitive filesystem `.GIT` is the same directory; on another, refusing it
/// costs nothing a command needs). The one rule for written paths and archive members.
pub(crate) fn is_git_name(name: &std::ffi::OsStr) -> bool {
    name.eq_ignore_ascii_case(".git")
}

/// Whether `dir` is a Git directory by its content: `HEAD` (a file, or a symlink as Git
/// still accepts it) beside `objects`, or beside `commondir` (a worktree's).
fn is_git_dir(fs: &dyn Fs, dir: &Path) -> bool {
    let entry = |name: &str| fs.symlink_metadata(&dir.join(name)).ok();
    let head = entry("HEAD").is_some_and(|m| m.is_file() || m.kind == caps::FileKind::Symlink);
    head && (fs.metadata(&dir.join("objects")).is_ok_and(|m| m.is_dir())
        || entry("commondir").is_some_and(|m| m.is_file()))
}

/// Check a path the program writes, written as `how`; the reason it may not. Not an
/// error type: the reason is the text of a grammar refusal (a [`super::ProfileHit`]'s
/// `reason`), which is all it is ever used as.
///
/// `base` is the directory the program reads `value` from: the run's working directory,
/// or one it was told to work in (`git -C`); the run's writable paths are the same
/// whatever `base` is.
pub(crate) fn check_write(
    value: &str,
    how: Written,
    inv: &Invocation<'_>,
    base: &Path,
) -> Result<(), String> {
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
    let raw = base.join(value);
    let written = normalize(&raw);
    let real = match inv.fs {
        Some(fs) => resolve_as_written(fs, &raw).map_err(|link| {
            format!(
                "writes through {}, a symlink that leads nowhere or cannot be followed (the write would create what it names)",
                link.display()
            )
        })?,
        None => None,
    };
    for path in std::iter::once(&written).chain(real.as_ref()) {
        // A Git directory may itself be one; everything else may not be in one.
        let within = match how {
            Written::GitDir | Written::GitWorkdir => path.parent(),
            Written::File | Written::Dir => Some(path.as_path()),
        };
        if let Some(git_dir) = within.and_then(|p| git_dir_holding(p, inv.fs)) {
            return Err(format!(
                "writes to {}, inside the Git directory {} (Git's settings and hooks there run programs)",
                path.display(),
                git_dir.display()
            ));
        }
        // A file written inside Warden's directories; a directory worked in that is one
        // of them or holds one (git -C DIR clean would reach it).
        let reached = if how.is_dir() {
            related(path, inv.protected)
        } else {
            inv.protected.iter().find(|p| path.starts_with(p)).cloned()
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
    if how == Written::GitDir
        && let Some(fs) = inv.fs
    {
        let target = real.as_ref().unwrap_or(&written);
        let empty = || fs.list(target).is_ok_and(|entries| entries.is_empty());
        if fs.symlink_metadata(target).is_ok() && !is_git_dir(fs, target) && !empty() {
            return Err(format!(
                "names {} as a Git directory, which it is not and which is not empty (what was put there would become Git's settings and hooks)",
                target.display()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Written::{Dir, File, GitDir, GitWorkdir};
    use super::*;

    /// Each `(path, how, allowed)` checked against `inv` from `base`.
    fn assert_writes(inv: &Invocation<'_>, base: &Path, cases: &[(&str, Written, bool)]) {
        for (value, how, allowed) in cases {
            let got = check_write(value, *how, inv, base);
            assert_eq!(got.is_ok(), *allowed, "{value:?} as {how:?}: {got:?}");
        }
    }

    /// [`assert_writes`] in the example invocation on `fs`, from its working directory.
    fn assert_writes_on(fs: &dyn Fs, cases: &[(&str, Written, bool)]) {
        let inv = Invocation {
            fs: Some(fs),
            ..Invocation::example()
        };
        assert_writes(&inv, inv.cwd, cases);
    }

    #[test]
    fn a_written_path_must_stay_inside_and_off_gits_own_files() {
        let inv = Invocation::example();
        assert_writes(
            &inv,
            inv.cwd,
            &[
                ("out.txt", File, true),
                ("sub/../out.txt", File, true),
                ("-", File, true),
                ("/dev/null", File, true),
                ("host:dir/file", File, true),
                ("../out.txt", File, false),
                ("/etc/passwd", File, false),
                (".git/config", File, false),
                ("./.git/hooks/pre-commit", File, false),
                ("sub/.git", File, false),
                (".git/config.worktree", File, false),
                (".git/info/attributes", File, false),
                ("-oProxyCommand=x:y", File, false),
                ("", File, false),
                // Anything inside a Git directory: a submodule's or a worktree's too, in
                // any case of its name.
                (".git/modules/sub/hooks/pre-commit", File, false),
                (".git/worktrees/w/config.worktree", File, false),
                (".git/objects/x", File, false),
                (".GIT/hooks/pre-commit", File, false),
                ("a.git/x", File, true),
                // A directory a program works in: never in a Git directory, never outside.
                ("sub", Dir, true),
                (".git", Dir, false),
                (".git/hooks", Dir, false),
                ("/tmp/repo", Dir, false),
                // A Git directory may be one, but not lie inside one.
                (".git", GitDir, true),
                ("sub/.git", GitDir, true),
                ("g2", GitDir, true),
                (".git/hooks", GitDir, false),
                (".git/modules/m", GitDir, false),
                ("/tmp/g", GitDir, false),
            ],
        );
        // Warden's own directories: a file inside, or a working directory above.
        let protected = [PathBuf::from("/workspace/state")];
        let guarded = Invocation {
            protected: &protected,
            ..Invocation::example()
        };
        assert_writes(
            &guarded,
            guarded.cwd,
            &[
                ("state/x", File, false),
                (".", Dir, false),
                ("out.txt", File, true),
            ],
        );
        assert!(
            is_remote("h:x") && is_remote("u@h:/x") && !is_remote("./a:b") && !is_remote("/a:b")
        );
    }

    #[test]
    fn a_write_is_checked_where_the_kernel_takes_it() {
        use caps::MemoryFs;
        let fs = MemoryFs::new();
        for dir in ["/workspace/.git/hooks", "/workspace/sub"] {
            fs.create_dir_all(Path::new(dir), 0o755).unwrap();
        }
        fs.symlink("/workspace/.git/hooks", "/workspace/sym")
            .unwrap();
        fs.symlink("/workspace/.git/commondir", "/workspace/dangling")
            .unwrap();
        fs.symlink("/workspace/.git", "/workspace/sub/g").unwrap();
        let inv = Invocation {
            fs: Some(&fs),
            ..Invocation::example()
        };
        // `..` after a symlink goes up from where it leads: .git/config, not ./config.
        assert_writes(
            &inv,
            inv.cwd,
            &[
                ("sym/../config", File, false),
                ("sub/../config", File, true),
            ],
        );
        // A symlink that leads nowhere: the write would create its target.
        let why = check_write("dangling", File, &inv, inv.cwd).unwrap_err();
        assert!(why.contains("leads nowhere"), "{why}");
        // Read from the directory the program works in (`git -C sub`).
        assert_writes(
            &inv,
            Path::new("/workspace/sub"),
            &[
                ("g/config", File, false),
                ("out.txt", File, true),
                ("../../elsewhere", File, false),
            ],
        );
    }

    #[test]
    fn a_directory_named_a_git_directory_is_one_already_empty_or_new() {
        use caps::{MemoryFs, WriteOptions};
        let fs = MemoryFs::new();
        for dir in [
            "/workspace/prepared",
            "/workspace/empty",
            "/workspace/r.git/objects",
        ] {
            fs.create_dir_all(Path::new(dir), 0o755).unwrap();
        }
        fs.write(
            Path::new("/workspace/prepared/config"),
            b"[core]\n\tfsmonitor = x\n",
            WriteOptions::default(),
        )
        .unwrap();
        // HEAD as a symlink (an unborn branch) still makes a Git directory.
        fs.symlink("refs/heads/main", "/workspace/r.git/HEAD")
            .unwrap();
        assert_writes_on(
            &fs,
            &[
                ("prepared", GitDir, false),
                ("empty", GitDir, true),
                ("new", GitDir, true),
                ("r.git", GitDir, true),
                ("r.git/config", File, false),
                // Git may work in a bare repository, and write nothing of its own inside.
                ("r.git", GitWorkdir, true),
                ("r.git", Dir, false),
            ],
        );
    }

    #[test]
    fn a_git_directory_is_known_by_its_content_whatever_its_name() {
        use caps::{MemoryFs, WriteOptions};
        let fs = MemoryFs::new();
        let (bare, worktree) = (Path::new("/workspace/b.git"), Path::new("/workspace/g2/w"));
        // A directory with only a HEAD file is not one (a file someone named HEAD).
        let notes = Path::new("/workspace/notes");
        for (dir, head) in [
            (bare, &b"ref: refs/heads/main\n"[..]),
            (worktree, b"ref: refs/heads/main\n"),
            (notes, b"x"),
        ] {
            fs.create_dir_all(dir, 0o755).unwrap();
            fs.write(&dir.join("HEAD"), head, WriteOptions::default())
                .unwrap();
        }
        fs.create_dir_all(&bare.join("objects"), 0o755).unwrap();
        fs.write(
            &worktree.join("commondir"),
            b"../..\n",
            WriteOptions::default(),
        )
        .unwrap();
        assert_writes_on(
            &fs,
            &[
                ("b.git/hooks/pre-commit", File, false),
                ("b.git/config", File, false),
                ("b.git", Dir, false),
                ("g2/w/config.worktree", File, false),
                ("b.git", GitDir, true),
                ("b.git/modules/m", GitDir, false),
                ("notes/todo", File, true),
                ("out/x", File, true),
            ],
        );
    }
}
