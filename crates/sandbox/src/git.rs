//! Keeping git repositories from becoming a way out of the sandbox.
//!
//! A writable workspace must let a command commit, yet git runs code from a repository's
//! hooks and takes commands from its configuration (`core.fsmonitor`, `core.pager`,
//! filters...) — whatever a sandboxed command plants there would run later, outside the
//! sandbox, the next time the user runs git. So in the writable profile, for every
//! repository that exists at the top of a writable path:
//!
//! - `.git` is bound onto itself, so it cannot be renamed, removed or replaced by a fresh
//!   repository while the command runs;
//! - the entries git loads code or configuration from — `hooks`, `config`,
//!   `config.worktree`, `commondir` (which redirects git to another directory's config
//!   and hooks) and the hooks directory named by `core.hooksPath` when it lies in a
//!   writable path — are bound read-only, also in the gitdirs of existing submodules
//!   (`modules/*`) and linked worktrees (`worktrees/*`);
//! - a `.git` *file* (a worktree or submodule pointer) is bound read-only;
//! - after the run (when no sandboxed process is left), `commondir`, `config.worktree`
//!   or `hooks` that did not exist before and were created by the command are moved
//!   aside under a `.warden-quarantined-*` name, and the run's output says so.
//!
//! Not covered: repositories deeper inside a writable path than its top level, and
//! repositories the command creates itself (their content is the command's), and
//! `include.path` directives of the repository's configuration.

use std::path::{Path, PathBuf};

/// Entries of a gitdir that git loads code or configuration from.
const PROTECTED: &[&str] = &["hooks", "config", "config.worktree", "commondir"];

/// Entries whose creation during a run is undone afterwards.
const MUST_NOT_APPEAR: &[&str] = &["commondir", "config.worktree", "hooks"];

/// How deep submodule and worktree gitdirs are followed (`modules/a/modules/b/...`).
const MAX_DEPTH: usize = 3;

/// What to check after a writable run: the gitdirs found before it, with the entries of
/// [`MUST_NOT_APPEAR`] each one lacked.
#[derive(Debug, Default)]
pub struct Guard {
    absent: Vec<(PathBuf, Vec<&'static str>)>,
}

/// What keeps the repository at `root` from becoming a way out, independent of how a
/// backend enforces it.
#[derive(Debug, Default)]
pub struct Protection {
    /// `.git` itself: a directory to pin in place (no rename or replacement), or a
    /// gitfile (`gitdir: ...`) to keep read-only.
    dot_git: Option<(PathBuf, bool)>,
    /// Existing entries git executes from or is redirected by, where they resolve inside
    /// a writable path: kept read-only.
    read_only: Vec<PathBuf>,
    /// What must not appear during the run.
    guard: Guard,
}

impl Protection {
    /// The repository at `root` (a writable path). `writable` is every writable path (a
    /// symlinked entry is protected where it points, when that is writable).
    pub fn of(root: &Path, writable: &[PathBuf]) -> Protection {
        let mut protection = Protection::default();
        let dot_git = root.join(".git");
        let Ok(meta) = std::fs::symlink_metadata(&dot_git) else {
            return protection;
        };
        if meta.is_file() {
            protection.dot_git = Some((dot_git, false));
        } else if meta.is_dir() {
            protection.dot_git = Some((dot_git.clone(), true));
            protect_gitdir(&dot_git, root, writable, 0, &mut protection);
        }
        protection
    }

    /// As bubblewrap arguments (after the workspace is bound).
    pub fn bwrap_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some((path, is_dir)) = &self.dot_git {
            let p = path.to_string_lossy().into_owned();
            let flag = if *is_dir { "--bind" } else { "--ro-bind" };
            args.extend([flag.to_owned(), p.clone(), p]);
        }
        for target in &self.read_only {
            let t = target.to_string_lossy().into_owned();
            args.extend(["--ro-bind".to_owned(), t.clone(), t]);
        }
        args
    }

    /// Paths no write may touch, for backends that deny by path (Seatbelt), each with
    /// whether everything beneath it is covered too: `.git` itself (the directory entry
    /// only — commits must still write inside it — or a whole gitfile), the read-only
    /// entries, and the entries that must not appear.
    pub fn write_denied(&self) -> Vec<(PathBuf, bool)> {
        let mut out: Vec<(PathBuf, bool)> = self
            .dot_git
            .iter()
            .map(|(p, is_dir)| (p.clone(), !is_dir))
            .collect();
        out.extend(self.read_only.iter().map(|p| (p.clone(), true)));
        for (gitdir, names) in &self.guard.absent {
            out.extend(names.iter().map(|n| (gitdir.join(n), true)));
        }
        out
    }

    /// What to check after the run.
    pub fn into_guard(self) -> Guard {
        self.guard
    }
}

/// The bubblewrap arguments protecting the repository at `root`, and what to check after
/// the run.
pub fn protect(root: &Path, writable: &[PathBuf]) -> (Vec<String>, Guard) {
    let protection = Protection::of(root, writable);
    (protection.bwrap_args(), protection.into_guard())
}

fn protect_gitdir(
    gitdir: &Path,
    worktree: &Path,
    writable: &[PathBuf],
    depth: usize,
    protection: &mut Protection,
) {
    let mut read_only: Vec<PathBuf> = PROTECTED.iter().map(|n| gitdir.join(n)).collect();
    if let Some(hooks) = hooks_path(gitdir, worktree) {
        read_only.push(hooks);
    }
    for entry in read_only {
        // Protect what git will actually open: the entry, or where its symlink points.
        let Ok(target) = std::fs::canonicalize(&entry) else {
            continue;
        };
        if writable.iter().any(|w| target.starts_with(w)) {
            protection.read_only.push(target);
        }
    }
    let absent: Vec<&'static str> = MUST_NOT_APPEAR
        .iter()
        .copied()
        .filter(|n| std::fs::symlink_metadata(gitdir.join(n)).is_err())
        .collect();
    protection.guard.absent.push((gitdir.to_path_buf(), absent));
    if depth >= MAX_DEPTH {
        return;
    }
    for nested in ["modules", "worktrees"] {
        let Ok(entries) = std::fs::read_dir(gitdir.join(nested)) else {
            continue;
        };
        for entry in entries.flatten() {
            let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
            if is_dir {
                let sub = entry.path();
                protect_gitdir(&sub, &sub, writable, depth + 1, protection);
            }
        }
    }
}

/// `core.hooksPath` from the repository's own configuration, resolved against the
/// worktree (git runs hooks from there), if set.
fn hooks_path(gitdir: &Path, worktree: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(gitdir.join("config")).ok()?;
    let value = core_hooks_path(&text)?;
    let p = PathBuf::from(&value);
    Some(if p.is_absolute() { p } else { worktree.join(p) })
}

/// The last `hooksPath` in a `[core]` section of git configuration text. Section and key
/// names are case-insensitive; values may be quoted; `#` and `;` start comments.
pub fn core_hooks_path(config: &str) -> Option<String> {
    let mut in_core = false;
    let mut found = None;
    for raw in config.lines() {
        let line = raw.trim();
        if line.starts_with('[') {
            let name = line
                .trim_start_matches('[')
                .split(|c: char| c == ']' || c.is_whitespace() || c == '"')
                .next()
                .unwrap_or("");
            in_core = name.eq_ignore_ascii_case("core");
            // `[core] hooksPath = x` on one line.
            let rest = line.split_once(']').map(|(_, r)| r.trim()).unwrap_or("");
            if let Some(v) = hooks_value(rest).filter(|_| in_core) {
                found = Some(v);
            }
            continue;
        }
        if let Some(v) = hooks_value(line).filter(|_| in_core) {
            found = Some(v);
        }
    }
    found
}

fn hooks_value(line: &str) -> Option<String> {
    let (key, value) = line.split_once('=')?;
    if !key.trim().eq_ignore_ascii_case("hookspath") {
        return None;
    }
    let mut value = value.trim();
    // A comment after the value (outside quotes).
    if let Some(i) = value.find(['#', ';']).filter(|_| !value.starts_with('"')) {
        value = value[..i].trim();
    }
    let value = value
        .strip_prefix('"')
        .and_then(|v| v.split_once('"').map(|(inner, _)| inner))
        .unwrap_or(value);
    (!value.is_empty()).then(|| value.to_owned())
}

impl Guard {
    /// After the run: move aside every entry that must not appear and did. Returns one
    /// line per entry moved, for the run's output.
    pub fn undo_planted(&self, stamp: u128) -> Vec<String> {
        let mut notes = Vec::new();
        for (gitdir, absent) in &self.absent {
            for name in absent {
                let planted = gitdir.join(name);
                if std::fs::symlink_metadata(&planted).is_err() {
                    continue;
                }
                let aside = gitdir.join(format!("{name}.warden-quarantined-{stamp}"));
                match std::fs::rename(&planted, &aside) {
                    Ok(()) => notes.push(format!(
                        "warden: sandbox: {} was created by the command and has been moved to {}: git would load configuration or hooks from it outside the sandbox",
                        planted.display(),
                        aside.display()
                    )),
                    Err(e) => notes.push(format!(
                        "warden: sandbox: {} was created by the command and could not be moved aside ({e}); inspect it before running git here",
                        planted.display()
                    )),
                }
            }
        }
        notes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hooks_path_is_read_like_git_reads_it() {
        assert_eq!(
            core_hooks_path("[core]\n\thooksPath = .husky/_\n").as_deref(),
            Some(".husky/_")
        );
        assert_eq!(
            core_hooks_path("[CORE]\nHOOKSPATH=\"my hooks\" ; note\n").as_deref(),
            Some("my hooks")
        );
        assert_eq!(
            core_hooks_path("[core] hooksPath = a # c\n[core]\nhookspath = b\n").as_deref(),
            Some("b")
        );
        assert_eq!(
            core_hooks_path("[remote \"core\"]\nhooksPath = x\n").as_deref(),
            None
        );
        assert_eq!(core_hooks_path("[user]\nhooksPath = x\n"), None);
        assert_eq!(core_hooks_path("[core]\nbare = false\n"), None);
    }

    #[test]
    fn protection_covers_existing_entries_submodules_and_symlinks() {
        let ws = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(ws.path()).unwrap();
        let git = ws.join(".git");
        std::fs::create_dir_all(git.join("hooks")).unwrap();
        std::fs::write(git.join("config"), "[core]\nhooksPath = .githooks\n").unwrap();
        std::fs::create_dir_all(ws.join(".githooks")).unwrap();
        std::fs::create_dir_all(git.join("modules/sub/hooks")).unwrap();
        std::fs::write(git.join("modules/sub/config"), "").unwrap();
        std::os::unix::fs::symlink(ws.join("elsewhere"), git.join("commondir")).unwrap();
        std::fs::write(ws.join("elsewhere"), "..").unwrap();
        let (args, guard) = protect(&ws, std::slice::from_ref(&ws));
        let joined = args.join(" ");
        let g = git.display().to_string();
        assert!(joined.starts_with(&format!("--bind {g} {g}")), "{joined}");
        for p in [
            git.join("hooks"),
            git.join("config"),
            ws.join(".githooks"),
            ws.join("elsewhere"),
            git.join("modules/sub/hooks"),
            git.join("modules/sub/config"),
        ] {
            let p = p.display().to_string();
            assert!(
                joined.contains(&format!("--ro-bind {p} {p}")),
                "{p}: {joined}"
            );
        }
        // Only config.worktree is missing at the top; hooks and commondir are missing in
        // the submodule's gitdir.
        assert_eq!(guard.absent[0].1, vec!["config.worktree"]);
        assert_eq!(guard.absent[1].1, vec!["commondir", "config.worktree"]);
    }

    #[test]
    fn a_gitdir_pointer_file_is_read_only_and_no_repository_means_nothing() {
        let ws = tempfile::tempdir().unwrap();
        let (args, _) = protect(ws.path(), &[ws.path().to_path_buf()]);
        assert!(args.is_empty());
        std::fs::write(ws.path().join(".git"), "gitdir: /elsewhere\n").unwrap();
        let (args, _) = protect(ws.path(), &[ws.path().to_path_buf()]);
        assert_eq!(args[0], "--ro-bind");
    }

    #[test]
    fn planted_entries_are_moved_aside_and_nothing_else_is_touched() {
        let ws = tempfile::tempdir().unwrap();
        let git = ws.path().join(".git");
        std::fs::create_dir_all(&git).unwrap();
        std::fs::write(git.join("config"), "").unwrap();
        let (_, guard) = protect(ws.path(), &[ws.path().to_path_buf()]);
        std::fs::write(git.join("commondir"), "../evil").unwrap();
        std::fs::create_dir_all(git.join("hooks")).unwrap();
        std::fs::write(git.join("index"), "x").unwrap();
        let notes = guard.undo_planted(7);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(!git.join("commondir").exists());
        assert!(git.join("commondir.warden-quarantined-7").exists());
        assert!(git.join("hooks.warden-quarantined-7").exists());
        assert!(git.join("index").exists() && git.join("config").exists());
    }
}
