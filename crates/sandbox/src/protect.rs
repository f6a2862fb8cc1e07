//! Warden's own files out of a command's reach, whatever the layout: which directories
//! are protected, that each exists before a sandbox starts (a missing one inside a
//! writable path could be created by the command), and that no symlink a command could
//! replace leads to one. The mount plan (`mounts.rs`) then hides each and pins every
//! writable ancestor, so no rename, removal, symlink swap or recreation of an ancestor
//! can plant a file where Warden will read it.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::Unavailable;

/// One path Warden decides from, and what is to be done to keep it out of reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtectedPath {
    /// The path as Warden reads it (it may pass through symlinks nobody else can change).
    pub path: PathBuf,
    /// Create it (mode 0700, owned by us) when missing: Warden's state directory and the
    /// approver socket's directory. Other paths (a home) are only hidden if they exist.
    pub create: bool,
    /// What it is, for messages ("Warden's state directory").
    pub role: &'static str,
}

impl ProtectedPath {
    /// One of Warden's own directories (state, approver socket): created when missing,
    /// and kept from the file tools as well as from commands.
    pub fn warden_dir(path: PathBuf, role: &'static str) -> ProtectedPath {
        ProtectedPath {
            path,
            create: true,
            role,
        }
    }

    /// Someone else's data, hidden from commands when it exists (a home directory).
    pub fn hidden_if_present(path: PathBuf, role: &'static str) -> ProtectedPath {
        ProtectedPath {
            path,
            create: false,
            role,
        }
    }
}

/// Where a protected path really is, and why it is safe there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Protection {
    /// What it is.
    pub role: &'static str,
    /// The real path (no symlinks): what the sandbox hides.
    pub real: PathBuf,
    /// The writable path it lies inside, if any (then its ancestors are pinned).
    pub inside_writable: Option<PathBuf>,
    /// One of Warden's own directories (kept from the file tools too).
    pub warden_owned: bool,
}

/// Check every protected path against the writable paths, creating the directories that
/// must exist, and return the real paths to hide. Refused (with a diagnosis that says
/// how to fix the layout) when a path runs through a symlink inside a writable path —
/// the command could point it elsewhere — or when a directory to create cannot be.
pub fn protect(
    paths: &[ProtectedPath],
    writable: &[PathBuf],
) -> Result<Vec<Protection>, Unavailable> {
    let mut out = Vec::new();
    for p in paths {
        if !p.path.is_absolute() {
            return Err(Unavailable(format!(
                "{} {} is not an absolute path",
                p.role,
                p.path.display()
            )));
        }
        if p.create {
            create_private_dir(&p.path, p.role)?;
        } else if std::fs::symlink_metadata(&p.path).is_err() {
            continue; // nothing there to hide, and nothing Warden creates
        }
        if let Some(link) = replaceable_symlink(&p.path, writable) {
            return Err(Unavailable(format!(
                "{} {} is reached through the symlink {}, which lies in a writable path, so a sandboxed command could point it elsewhere; use the real path ({}) instead",
                p.role,
                p.path.display(),
                link.display(),
                std::fs::canonicalize(&p.path)
                    .unwrap_or_else(|_| p.path.clone())
                    .display()
            )));
        }
        let real = std::fs::canonicalize(&p.path).map_err(|e| {
            Unavailable(format!(
                "{} {} cannot be resolved: {e}",
                p.role,
                p.path.display()
            ))
        })?;
        let inside_writable = writable
            .iter()
            .filter(|w| real.starts_with(w))
            .max_by_key(|w| w.components().count())
            .cloned();
        out.push(Protection {
            role: p.role,
            real,
            inside_writable,
            warden_owned: p.create,
        });
    }
    Ok(out)
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
}

/// What a sandboxed command must not see or change besides the emptied `/home`, `/root`,
/// `/run`: Warden's state directory, the approver socket's directory when it is
/// elsewhere, and the user's home wherever it is (service accounts often live under
/// `/var/lib`). The state and socket directories are created if missing, so no command
/// can create them first; a layout a command could redirect is refused with the fix.
pub fn warden_paths(
    layout: &WardenLayout<'_>,
    writable: &[PathBuf],
) -> Result<Vec<Protection>, Unavailable> {
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
    protect(&paths, writable)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn protected(path: &Path, create: bool) -> ProtectedPath {
        ProtectedPath {
            path: path.to_path_buf(),
            create,
            role: "test path",
        }
    }

    #[test]
    fn the_node_state_is_protected_wherever_it_lies() {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        let (state, home) = (base.join("state"), base.join("home"));
        let inside = state.join("node.json");
        let layout = WardenLayout {
            state_dir: &state,
            socket: None,
            node_state: Some(&inside),
            home: &home,
        };
        let got = warden_paths(&layout, &[]).unwrap();
        assert!(got.iter().any(|p| inside.starts_with(&p.real)), "{got:?}");
        let elsewhere = base.join("nodes/node.json");
        let layout = WardenLayout {
            node_state: Some(&elsewhere),
            ..layout
        };
        let got = warden_paths(&layout, &[]).unwrap();
        assert!(got.iter().any(|p| p.real == base.join("nodes")), "{got:?}");
    }

    #[test]
    fn missing_directories_are_created_private_and_located() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(tmp.path()).unwrap();
        let state = ws.join("a/b/.warden");
        let got = protect(&[protected(&state, true)], std::slice::from_ref(&ws)).unwrap();
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
            std::slice::from_ref(&ws),
        )
        .unwrap_err();
        assert!(err.0.contains("symlink"), "{err}");
        // A link outside the writable paths cannot be replaced by a command.
        std::os::unix::fs::symlink(ws.join("real"), base.join("outside")).unwrap();
        let got = protect(
            &[protected(&base.join("outside/.warden"), true)],
            std::slice::from_ref(&ws),
        )
        .unwrap();
        assert_eq!(got[0].real, real);
    }

    #[test]
    fn absent_paths_that_are_not_created_are_skipped_and_files_in_the_way_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(tmp.path()).unwrap();
        let got = protect(&[protected(&ws.join("nohome"), false)], &[]).unwrap();
        assert!(got.is_empty());
        std::fs::write(ws.join("file"), "x").unwrap();
        assert!(protect(&[protected(&ws.join("file"), true)], &[]).is_err());
    }
}
