//! Where Warden's own files are ([`WardenLayout`]) and the protected set they make
//! ([`warden_paths`]): the state, socket and node directories, the home, and the
//! directories of Warden's programs, each with its aliases.

use std::path::{Path, PathBuf};

use super::*;

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
