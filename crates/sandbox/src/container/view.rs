//! What the container sees of the host, from `ENGINE container inspect`: its mounts, its
//! root filesystem and its network — and whether that keeps the sandbox's promises.
//!
//! Commands run at the host path of their working directory inside the container, so a
//! container is usable only when it sees every authorized path at the *same* path (the
//! operator mounted `-v /ws:/ws`). It must also not show commands more than the
//! bubblewrap sandbox would: nothing the mount plan hides (Warden's state directory, the
//! home, `/run`, ...), nothing writable outside `sandbox.writable_paths`, the readable
//! extra paths read-only, and no network unless `sandbox.network = true`. Each is checked
//! once, when the container backend is connected, and refused with the `run` command
//! line that would work.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::mounts::{Mount, MountPlan};
use crate::{SandboxError, SandboxPolicy, Unavailable};

/// The `--format` of the one inspect call: one field per line, the lists as JSON.
pub(super) const INSPECT_FORMAT: &str = "{{.State.Running}}\n{{.State.Status}}\n\
     {{.HostConfig.ReadonlyRootfs}}\n{{.HostConfig.NetworkMode}}\n{{json .Mounts}}\n\
     {{json .HostConfig.Tmpfs}}";

/// One mount as the engine reports it (Docker and Podman share these field names).
#[derive(Debug, Deserialize)]
struct MountEntry {
    #[serde(rename = "Type", default)]
    kind: String,
    #[serde(rename = "Source", default)]
    source: PathBuf,
    #[serde(rename = "Destination")]
    destination: PathBuf,
    #[serde(rename = "RW", default)]
    writable: bool,
}

/// One mount of the container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ContainerMount {
    /// The host directory or file a bind mount shows (its real path); `None` for a
    /// volume or tmpfs, which hold no host data Warden authorizes.
    pub(super) host: Option<PathBuf>,
    /// Where the container sees it.
    pub(super) destination: PathBuf,
    /// Whether commands may write through it.
    pub(super) writable: bool,
}

/// The facts about a container that decide whether and how it can be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Inspected {
    /// `State.Running`.
    pub(super) running: bool,
    /// `State.Status` (`running`, `exited`, `created`, `paused`...).
    pub(super) status: String,
    /// `HostConfig.ReadonlyRootfs`: started with `--read-only`.
    pub(super) read_only_root: bool,
    /// `HostConfig.NetworkMode` (`none` means no network).
    pub(super) network: String,
    /// Every mount the operator gave it (binds, volumes, tmpfs).
    pub(super) mounts: Vec<ContainerMount>,
}

impl Inspected {
    /// Parse the answer to [`INSPECT_FORMAT`].
    pub(super) fn parse(answer: &str) -> Result<Inspected, SandboxError> {
        let mut lines = answer.lines();
        let mut next = |what: &str| {
            lines
                .next()
                .map(str::trim)
                .ok_or_else(|| SandboxError::Container(format!("no {what} in {answer:?}")))
        };
        let running = next("State.Running")? == "true";
        let status = next("State.Status")?.to_owned();
        let read_only_root = next("HostConfig.ReadonlyRootfs")? == "true";
        let network = next("HostConfig.NetworkMode")?.to_owned();
        let entries: Option<Vec<MountEntry>> =
            serde_json::from_str(next("Mounts")?).map_err(|e| {
                SandboxError::Container(format!("unreadable Mounts ({e}) in {answer:?}"))
            })?;
        let tmpfs: Option<std::collections::BTreeMap<PathBuf, String>> =
            serde_json::from_str(next("HostConfig.Tmpfs")?).map_err(|e| {
                SandboxError::Container(format!("unreadable HostConfig.Tmpfs ({e}) in {answer:?}"))
            })?;
        let mut mounts: Vec<ContainerMount> = entries
            .unwrap_or_default()
            .into_iter()
            .map(|m| ContainerMount {
                // The engine reports the source as it was given; judge where it really is.
                host: (m.kind == "bind")
                    .then(|| std::fs::canonicalize(&m.source).unwrap_or(m.source)),
                destination: m.destination,
                writable: m.writable,
            })
            .collect();
        // `--tmpfs` and the tmpfs `--read-only` adds (Podman: /tmp, /var/tmp, /run) are
        // writable places that hold no host data.
        for (destination, options) in tmpfs.unwrap_or_default() {
            if !mounts.iter().any(|m| m.destination == destination) {
                mounts.push(ContainerMount {
                    host: None,
                    writable: !options.split(',').any(|o| o == "ro"),
                    destination,
                });
            }
        }
        Ok(Inspected {
            running,
            status,
            read_only_root,
            network,
            mounts,
        })
    }

    /// The mount that decides what the container sees at `path`: the deepest one at or
    /// above it.
    fn covering(&self, path: &Path) -> Option<&ContainerMount> {
        self.mounts
            .iter()
            .filter(|m| path.starts_with(&m.destination))
            .max_by_key(|m| m.destination.components().count())
    }

    /// Whether the container sees the host's `path` at the same path.
    pub(super) fn same_path(&self, path: &Path) -> bool {
        self.covering(path).is_some_and(|m| match &m.host {
            Some(host) => path
                .strip_prefix(&m.destination)
                .is_ok_and(|rest| host.join(rest) == path),
            None => false,
        })
    }

    /// Whether `path` inside the container lies on its read-only root filesystem: the
    /// root is read-only and no writable mount is at or above it.
    pub(super) fn on_read_only_root(&self, path: &Path) -> bool {
        self.read_only_root
            && !self
                .mounts
                .iter()
                .any(|m| m.writable && path.starts_with(&m.destination))
    }

    /// What the container sees at `path`, for messages.
    fn describe(&self, path: &Path) -> String {
        match self.covering(path) {
            None => "it has no mount there".to_owned(),
            Some(ContainerMount {
                host: Some(host),
                destination,
                ..
            }) => format!(
                "it shows the host's {} there (mounted at {})",
                match path.strip_prefix(destination) {
                    Ok(rest) if !rest.as_os_str().is_empty() => host.join(rest),
                    _ => host.clone(),
                }
                .display(),
                destination.display()
            ),
            Some(m) => format!(
                "a volume or tmpfs is mounted at {}",
                m.destination.display()
            ),
        }
    }

    /// The authorized paths the container sees at the same path (for messages).
    pub(super) fn mapped<'p>(&self, policy: &'p SandboxPolicy) -> Vec<&'p Path> {
        policy
            .writable_paths
            .iter()
            .chain(&policy.readable_extra_paths)
            .map(PathBuf::as_path)
            .filter(|p| self.same_path(p))
            .collect()
    }

    /// Every way this container would break a promise of the sandbox `policy` makes,
    /// each with its fix; empty when it keeps them all. `as_root`: Warden runs as root
    /// (the mount plan then also hides credential stores).
    pub(super) fn broken_promises(&self, policy: &SandboxPolicy, as_root: bool) -> Vec<String> {
        let mut broken = Vec::new();
        let writable_paths = &policy.writable_paths;
        for path in writable_paths.iter().chain(&policy.readable_extra_paths) {
            if !self.same_path(path) {
                broken.push(format!(
                    "it does not see {} at the same path ({}); commands run in the host's \
                     paths, so mount it there: -v {0}:{0}",
                    path.display(),
                    self.describe(path)
                ));
            }
        }
        for path in &policy.readable_extra_paths {
            let inside_writable = writable_paths.iter().any(|w| path.starts_with(w));
            if !inside_writable
                && self.same_path(path)
                && self.covering(path).is_some_and(|m| m.writable)
            {
                broken.push(format!(
                    "it mounts {} writable, but it is one of sandbox.readable_extra_paths: \
                     mount it read-only (-v {0}:{0}:ro)",
                    path.display()
                ));
            }
        }
        // What the bubblewrap sandbox hides must stay out of sight here too.
        let plan = MountPlan::new(policy, true, as_root);
        for mount in &self.mounts {
            let Some(host) = &mount.host else { continue };
            if mount.writable && !writable_paths.iter().any(|w| host.starts_with(w)) {
                broken.push(format!(
                    "it mounts the host's {} writable at {}, but commands may write only \
                     sandbox.writable_paths ({}): mount it read-only or add it there",
                    host.display(),
                    mount.destination.display(),
                    list(writable_paths)
                ));
            }
            if mount.writable
                && let Some(programs) = policy
                    .read_only_paths
                    .iter()
                    .find(|r| r.starts_with(host) || host.starts_with(r))
            {
                broken.push(format!(
                    "it mounts the host's {} writable at {}, which holds {}, where Warden's own programs are: a command could replace what Warden runs outside the sandbox; install Warden elsewhere (cargo install --path crates/cli) or mount only other paths writable",
                    host.display(),
                    mount.destination.display(),
                    programs.display()
                ));
            }
            let exposed = plan
                .mounts()
                .iter()
                .filter(|m| matches!(m, Mount::Empty(_) | Mount::Hide(_)))
                .map(Mount::path)
                .filter(|hidden| hidden.starts_with(host) && !plan.visible(hidden))
                .chain((!plan.visible(host)).then_some(host.as_path()))
                .next();
            if let Some(hidden) = exposed {
                broken.push(format!(
                    "it mounts the host's {} (at {}), which shows {}: the sandbox keeps that \
                     from commands (Warden's state, homes, /run, /tmp, credentials); mount \
                     only the authorized paths",
                    host.display(),
                    mount.destination.display(),
                    hidden.display()
                ));
            }
        }
        if policy.network != crate::Network::On && self.network != "none" {
            broken.push(format!(
                "it has a network ({}) but sandbox.network = false: start it with \
                 --network none, or set sandbox.network = true",
                self.network
            ));
        }
        broken
    }
}

/// How to start a container this backend can use for `policy`.
pub(super) fn run_command(engine: &str, container: &str, policy: &SandboxPolicy) -> String {
    let mut cmd = format!("{engine} run -d --name {container} --read-only");
    if policy.network != crate::Network::On {
        cmd.push_str(" --network none");
    }
    for path in &policy.writable_paths {
        cmd.push_str(&format!(" -v {0}:{0}", path.display()));
    }
    for path in &policy.readable_extra_paths {
        cmd.push_str(&format!(" -v {0}:{0}:ro", path.display()));
    }
    cmd.push_str(" IMAGE sleep infinity");
    cmd
}

fn list(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Check that the container can serve `policy`, with one diagnosis naming every problem
/// and how to start a container that has none.
pub(super) fn check_promises(
    inspected: &Inspected,
    policy: &SandboxPolicy,
    engine: &str,
    container: &str,
) -> Result<(), Unavailable> {
    let as_root = nix::unistd::geteuid().is_root();
    let broken = inspected.broken_promises(policy, as_root);
    if broken.is_empty() {
        return Ok(());
    }
    Err(Unavailable(format!(
        "container {container} cannot keep the sandbox's promises: {} — recreate it, e.g. \
         `{}` (add :Z to each -v on SELinux hosts)",
        broken.join("; "),
        run_command(engine, container, policy)
    )))
}

#[cfg(test)]
mod tests;
