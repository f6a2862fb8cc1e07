//! What `warden doctor` looks at, one probe each: the approver socket, how runs are
//! contained and bounded, the sandbox backend's checks and which permission modes they
//! serve, and the node side of this machine.

use crate::host::HostFacts;
use policy::{PermissionMode, SandboxBackend};
use sandbox::probe::Check;
use std::path::{Path, PathBuf};

/// What `doctor` found at the approver socket.
pub(super) enum Approver {
    /// Something accepted a connection there.
    Listening(PathBuf),
    /// Nobody listens; asks fall back to askFallback.
    Absent(PathBuf),
    /// The socket's directory would make `warden approvals ui` refuse to start.
    Unsafe(String),
}

impl Approver {
    pub(super) fn detail(&self) -> String {
        match self {
            Approver::Listening(p) => format!("listening at {}", p.display()),
            Approver::Absent(p) => format!(
                "none running (asks get askFallback); start `warden approvals ui` to host {}",
                p.display()
            ),
            Approver::Unsafe(why) => why.clone(),
        }
    }
}

/// Probe the approver socket without speaking the protocol: the directory's owner and
/// mode (what `approvals ui` insists on), then whether anything accepts a connection.
pub(super) fn approver(socket: &std::path::Path, uid: u32) -> Approver {
    use std::os::unix::fs::MetadataExt;
    let Some(dir) = socket.parent() else {
        return Approver::Unsafe(format!("{} has no parent directory", socket.display()));
    };
    if let Ok(meta) = std::fs::symlink_metadata(dir)
        && (!meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0)
    {
        return Approver::Unsafe(format!(
            "the socket directory {} must be a directory owned by uid {uid} with mode 0700 \
                 (it has uid {}, mode {:04o}); `warden approvals ui` will refuse to start",
            dir.display(),
            meta.uid(),
            meta.mode() & 0o7777
        ));
    }
    match std::os::unix::net::UnixStream::connect(socket) {
        Ok(_) => Approver::Listening(socket.to_path_buf()),
        Err(_) => Approver::Absent(socket.to_path_buf()),
    }
}

/// How runs are held together and bounded on this host, as `doctor` reports it.
pub(super) struct ContainmentReport {
    pub(super) ok: bool,
    pub(super) mechanism: serde_json::Value,
    pub(super) limits_enforced: bool,
    pub(super) defaults: Option<policy::RunLimits>,
    pub(super) detail: String,
}

pub(super) fn containment(facts: &HostFacts, config: Option<&policy::Config>) -> ContainmentReport {
    let defaults = config.map(|c| c.default_limits);
    match facts.containment() {
        Err(e) => ContainmentReport {
            ok: false,
            mechanism: serde_json::Value::Null,
            limits_enforced: false,
            defaults,
            detail: format!("{e:#}"),
        },
        Ok(c) => {
            let mechanism = c.mechanism();
            let limits_enforced = matches!(
                mechanism,
                caps::process::Mechanism::Cgroup { limits: true, .. }
            );
            let limits = match (defaults, limits_enforced) {
                (Some(d), true) => format!(
                    "; each run is limited to {} processes and {} MiB by default (tools.exec.max_processes / max_memory)",
                    d.max_processes,
                    d.max_memory >> 20
                ),
                (_, true) => String::new(),
                (_, false) if matches!(mechanism, caps::process::Mechanism::Cgroup { .. }) => {
                    "; process and memory limits are NOT enforced here (no pids or memory controller Warden may use)".to_owned()
                }
                (_, false) => String::new(),
            };
            let waits = if matches!(
                mechanism,
                caps::process::Mechanism::Cgroup {
                    start_waits_for_migration: true,
                    ..
                }
            ) {
                "; each run's start waits for a cgroup migration (one RCU grace period: ~6 ms on a 2-core VM, more on a busy host) — mounting a cgroup hierarchy with `favordynmods` (Linux 6.0 or later, e.g. `mount -o remount,favordynmods /sys/fs/cgroup`) removes that wait host-wide, at a small cost to every fork and exit"
            } else {
                ""
            };
            ContainmentReport {
                ok: matches!(mechanism, caps::process::Mechanism::Cgroup { .. }),
                mechanism: serde_json::to_value(&mechanism).unwrap_or_default(),
                limits_enforced,
                defaults,
                detail: format!("{mechanism}{limits}{waits}"),
            }
        }
    }
}

/// Whether Warden's own namespace builder works here (`Err`: why not).
pub(super) fn own_builder_works() -> Result<(), String> {
    let helper = crate::host::helper_binary().map_err(|e| format!("{e:#}"))?;
    sandbox::probe::builder_works(helper.exec_path()).map_err(|e| e.to_string())
}

/// Which program is the sandbox's helper (started for every run bubblewrap builds, and
/// as `warden exec`'s companion), and whether it starts without a dynamic loader.
fn helper_check() -> Check {
    let name = "sandbox helper".to_owned();
    let Some(small) = crate::host::small_helper() else {
        return Check {
            name,
            ok: true,
            detail: "warden itself (no warden-sandbox-helper next to it): the whole binary starts for every run bubblewrap builds and for each `warden exec`; `cargo install --path crates/cli` installs the small one".into(),
        };
    };
    let path = small.real_path();
    let detail = how_it_starts(path, "starts without a dynamic loader", |dir| {
        format!(
            "every start pays the loader and the C library's CPU probing; a static build starts in about half the time — `cargo xtask musl-helper --install {}`",
            dir.display()
        )
    });
    Check {
        name,
        ok: true,
        detail,
    }
}

/// How the program at `path` starts: statically linked (`statically` says what that
/// gives), or through its dynamic loader (`dynamically` says what to do about it, given
/// the program's directory).
fn how_it_starts(path: &Path, statically: &str, dynamically: impl Fn(&Path) -> String) -> String {
    match sandbox::exec_allowlist::dynamic(path).map(|d| d.interpreter) {
        None => format!("{} (not an ELF file this Warden reads)", path.display()),
        Some(None) => format!("{} (statically linked: {statically})", path.display()),
        Some(Some(loader)) => format!(
            "{} (dynamically linked, through {}: {})",
            path.display(),
            loader.display(),
            dynamically(path.parent().unwrap_or(path))
        ),
    }
}

/// Whether this `warden` starts without a dynamic loader: every `warden exec` is a new
/// `warden` process, so on a virtual machine its start is much of a run's own time.
fn warden_program_check() -> Check {
    let name = "warden program".to_owned();
    let Ok(path) = std::env::current_exe() else {
        return Check {
            name,
            ok: true,
            detail: "its path is unknown (/proc/self/exe unreadable)".into(),
        };
    };
    let detail = how_it_starts(
        &path,
        "each `warden exec` starts without a dynamic loader",
        |dir| {
            format!(
                "each `warden exec` takes about 1 ms longer on a VM; `cargo xtask install {}` builds it statically",
                dir.display()
            )
        },
    );
    Check {
        name,
        ok: true,
        detail,
    }
}

/// Check name of Warden's own builder's probe in [`backend_checks`].
pub(super) const OWN_BUILDER_CHECK: &str = "namespace builder";

/// Who builds the sandbox's namespaces here: what `sandbox.builder` asks for, and for
/// `auto` what its probe (already run among `checks`) answered — the same choice every
/// exec makes.
pub(super) fn builder_in_use(config: Option<&policy::Config>, checks: &[Check]) -> &'static str {
    let own = "Warden's namespace builder";
    let own_works = checks.iter().any(|c| c.name == OWN_BUILDER_CHECK && c.ok);
    match config.map(|c| c.sandbox.builder).unwrap_or_default() {
        policy::NamespaceBuilder::Bubblewrap => "bubblewrap",
        policy::NamespaceBuilder::Warden => own,
        policy::NamespaceBuilder::Auto if own_works => own,
        policy::NamespaceBuilder::Auto => "bubblewrap",
    }
}

/// The checks of the configured backend only: what the others would need is no concern
/// of this host's commands.
pub(super) fn backend_checks(facts: &HostFacts, backend: SandboxBackend) -> Vec<Check> {
    match backend {
        SandboxBackend::Bwrap => {
            let dirs: Vec<PathBuf> = sandbox::namespace::TRUSTED_BWRAP_DIRS
                .iter()
                .map(PathBuf::from)
                .collect();
            let mut checks = sandbox::probe::probe(&dirs).checks;
            let own = own_builder_works();
            checks.insert(
                0,
                Check {
                    name: OWN_BUILDER_CHECK.into(),
                    ok: own.is_ok(),
                    detail: match own {
                        Ok(()) => {
                            "Warden's own builder builds the sandbox (sandbox.builder = auto or warden)"
                                .into()
                        }
                        Err(why) => format!(
                            "{why}; bubblewrap builds it (sandbox.builder = auto or bubblewrap)"
                        ),
                    },
                },
            );
            checks.insert(1, helper_check());
            checks.insert(2, warden_program_check());
            checks
        }
        SandboxBackend::Container => facts.container_checks().unwrap_or_else(|e| {
            vec![Check {
                name: "container".into(),
                ok: false,
                detail: format!("{e:#}"),
            }]
        }),
        SandboxBackend::Macos | SandboxBackend::Off => Vec::new(),
    }
}

/// Which permission modes the backend serves, as `doctor` reports them.
pub(super) struct ModesReport {
    pub(super) supported: Vec<PermissionMode>,
    pub(super) configured: PermissionMode,
    pub(super) ok: bool,
    pub(super) detail: String,
}

pub(super) fn permission_modes(
    backend: SandboxBackend,
    checks: &[Check],
    config: Option<&policy::Config>,
) -> ModesReport {
    use PermissionMode::{Approval, Readonly, Unrestricted};
    let configured = config
        .and_then(|c| c.sandbox.permission_mode)
        .unwrap_or_default();
    let (supported, why) = match backend {
        SandboxBackend::Off => (
            Vec::new(),
            Some("the sandbox host is switched off".to_owned()),
        ),
        SandboxBackend::Container => match checks.iter().find(|c| c.name == "read-only view") {
            Some(c) if c.ok => (vec![Readonly, Approval, Unrestricted], None),
            Some(c) => (
                vec![Unrestricted],
                Some(format!("readonly and approval are refused: {}", c.detail)),
            ),
            None => (
                Vec::new(),
                Some("the container cannot be used (see above)".to_owned()),
            ),
        },
        SandboxBackend::Bwrap | SandboxBackend::Macos => {
            (vec![Readonly, Approval, Unrestricted], None)
        }
    };
    let ok = supported.contains(&configured);
    let names: Vec<String> = supported.iter().map(ToString::to_string).collect();
    let mut detail = if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    };
    if let Some(why) = why {
        detail.push_str(&format!(" — {why}"));
    }
    detail.push_str(&format!("; configured: {configured}"));
    if !ok && !supported.is_empty() {
        detail.push_str(
            " (refused here: set sandbox.permission_mode = \"unrestricted\", or make the \
             read-only view possible)",
        );
    }
    ModesReport {
        supported,
        configured,
        ok,
        detail,
    }
}

/// What `host = node` can reach from here: the gateway's paired nodes (`nodes.json`),
/// and whether this machine is itself a node (`node.json`).
pub(super) struct NodeStatus {
    pub(super) available: bool,
    pub(super) paired: usize,
    pub(super) pending: usize,
    pub(super) this_machine: Option<String>,
    pub(super) detail: String,
}

pub(super) fn node_status(facts: &HostFacts) -> NodeStatus {
    let (paired, pending, registry_error) = match facts.node_registry().list() {
        Ok(list) => (
            list.iter()
                .filter(|n| n.state == bridge::NodeState::Approved)
                .count(),
            list.iter()
                .filter(|n| n.state == bridge::NodeState::Pending)
                .count(),
            None,
        ),
        Err(e) => (0, 0, Some(e.to_string())),
    };
    let this_machine = facts.node_state().load().ok().flatten().map(|n| {
        format!(
            "{} of {}",
            n.node_id,
            n.gateway.as_deref().unwrap_or("a stdio gateway")
        )
    });
    let mut detail = match (&registry_error, paired) {
        (Some(e), _) => format!("the node registry is unusable: {e}"),
        (None, 0) => "no node is paired (`warden node pair --gateway URL` on the node, or `warden nodes add ID -- COMMAND` here)".to_owned(),
        (None, n) => format!(
            "{n} paired node{} in the registry; host=node runs go through `warden gateway run` (`warden nodes list` shows who is connected)",
            if n == 1 { "" } else { "s" }
        ),
    };
    if pending > 0 {
        detail.push_str(&format!(
            "; {pending} pairing request{} waiting (`warden nodes approve ID`)",
            if pending == 1 { "" } else { "s" }
        ));
    }
    if let Some(me) = &this_machine {
        detail.push_str(&format!("; this machine is node {me}"));
    }
    NodeStatus {
        available: registry_error.is_none() && paired > 0,
        paired,
        pending,
        this_machine,
        detail,
    }
}
