//! The files `warden init` reads and writes: read when present, written atomically,
//! an old version kept beside the new one, and paths shown the way a user thinks of them.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use caps::{Fs as _, WriteOptions};

use crate::host::HostFacts;

/// The command clients start: `warden` when that is this program on the PATH, else
/// this program's full path (e.g. run from a checkout's `target/release`).
pub fn warden_command(facts: &HostFacts) -> String {
    let this = crate::host::this_program()
        .map(|p| p.real_path().to_path_buf())
        .ok();
    let on_path = super::host_files::find_program("warden", facts.trusted_path.dirs())
        .and_then(|p| std::fs::canonicalize(p).ok());
    match (this, on_path) {
        (Some(this), Some(found)) if this == found => "warden".to_owned(),
        (Some(this), _) => this.to_string_lossy().into_owned(),
        (None, _) => "warden".to_owned(),
    }
}

/// Why `path` (inside `base`) must not be read or written by init, if so: a symlink
/// at or above it below `base`, or something other than a regular file. A workspace
/// is where an agent writes; `.mcp.json` pointing at `~/.warden/exec-approvals.json`
/// would otherwise have that file merged into and a copy of it (the approver's
/// token) left in the workspace as the backup.
pub fn unsafe_below(base: &Path, path: &Path) -> Option<String> {
    let rest = path.strip_prefix(base).ok()?;
    let mut at = base.to_path_buf();
    for part in rest.components() {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Err(_) => return None,
            Ok(m) if m.file_type().is_symlink() => {
                return Some(format!(
                    "{} is a symbolic link; init does not follow links in the workspace",
                    at.display()
                ));
            }
            Ok(m) if at == path && !m.is_file() => {
                return Some(format!("{} is not a regular file", at.display()));
            }
            Ok(_) => {}
        }
    }
    None
}

/// A file's text, or none if there is no file.
pub fn read_optional(path: &Path) -> anyhow::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Write `text` to `path` atomically, making its directory if needed.
pub fn write_file(
    facts: &HostFacts,
    path: &Path,
    text: &str,
    options: WriteOptions,
) -> anyhow::Result<()> {
    let fs = facts.fs();
    if let Some(dir) = path.parent() {
        fs.create_dir_all(dir, 0o755)
            .with_context(|| format!("cannot create {}", dir.display()))?;
    }
    fs.write_atomic(path, text.as_bytes(), options)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Keep a copy of `path` as `path.bak` (or `.bak.1`, `.bak.2`… if taken) before it is
/// changed: no earlier backup is overwritten either.
pub fn backup(path: &Path) -> anyhow::Result<PathBuf> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let mut target = path.with_file_name(format!("{name}.bak"));
    let mut n = 1;
    while target.exists() {
        target = path.with_file_name(format!("{name}.bak.{n}"));
        n += 1;
    }
    std::fs::copy(path, &target).with_context(|| {
        format!(
            "cannot keep a copy of {} as {}",
            path.display(),
            target.display()
        )
    })?;
    Ok(target)
}

/// `path` under `base` as a relative path, else in full.
pub fn relative(path: &Path, base: &Path) -> String {
    path.strip_prefix(base)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| path.display().to_string())
}

/// `path` with the home directory as `~`.
pub fn tilde(path: &Path, home: &Path) -> String {
    match path.strip_prefix(home) {
        Ok(rest) => format!("~/{}", rest.display()),
        Err(_) => path.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_in_the_workspace_are_refused_at_every_level() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let secret = ws.join("elsewhere");
        std::fs::create_dir(&secret).unwrap();
        std::fs::write(secret.join("settings.json"), "{}").unwrap();
        // The file itself a link.
        std::os::unix::fs::symlink(secret.join("settings.json"), ws.join(".mcp.json")).unwrap();
        assert!(
            unsafe_below(ws, &ws.join(".mcp.json"))
                .unwrap()
                .contains("symbolic link")
        );
        // A directory above it a link.
        std::os::unix::fs::symlink(&secret, ws.join(".claude")).unwrap();
        let why = unsafe_below(ws, &ws.join(".claude/settings.json")).unwrap();
        assert!(why.contains(".claude is a symbolic link"), "{why}");
        // A directory where the file should be.
        std::fs::create_dir(ws.join(".cursor")).unwrap();
        std::fs::create_dir(ws.join(".cursor/mcp.json")).unwrap();
        assert!(unsafe_below(ws, &ws.join(".cursor/mcp.json")).is_some());
        // Absent, or a plain file in plain directories: fine.
        assert_eq!(unsafe_below(ws, &ws.join(".vscode/mcp.json")), None);
        std::fs::create_dir(ws.join(".vscode")).unwrap();
        std::fs::write(ws.join(".vscode/mcp.json"), "{}").unwrap();
        assert_eq!(unsafe_below(ws, &ws.join(".vscode/mcp.json")), None);
    }
}
