//! `warden doctor`: probe what the configured sandbox backend needs on this machine —
//! for bubblewrap: user namespaces, a fresh `/proc`, seccomp, the Landlock ABI, the write
//! watch; for a container: the engine, the container, its mounts, the read-only view —
//! which permission modes it serves, and what that means for each host. `warden sandbox direct|status`: the operator's time-limited direct mode.

use std::path::PathBuf;
use std::time::Duration;

use approvals::Clock;
use policy::{PermissionMode, SandboxBackend};
use sandbox::probe::Check;
use serde_json::json;

use crate::exit;
use crate::host::HostFacts;

/// Arguments of `warden doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `warden sandbox ...`
#[derive(Debug, clap::Subcommand)]
pub enum SandboxCommand {
    /// Run host=sandbox commands WITHOUT an OS sandbox for a limited time (operator only).
    ///
    /// While it is on, agents' commands run with your full privileges: they can read
    /// Warden's state (including the approver token) and anything else you can. Use it
    /// only while you watch, and keep the TTL short.
    Direct {
        /// How long (e.g. 10m, 1h; at most 24h). Direct mode then ends by itself.
        #[arg(long, value_parser = humantime::parse_duration, required_unless_present = "off")]
        ttl: Option<Duration>,
        /// End direct mode now.
        #[arg(long)]
        off: bool,
    },
    /// Show whether direct mode is on.
    Status,
}

/// What `doctor` found at the approver socket.
enum Approver {
    /// Something accepted a connection there.
    Listening(PathBuf),
    /// Nobody listens; asks fall back to askFallback.
    Absent(PathBuf),
    /// The socket's directory would make `warden approvals ui` refuse to start.
    Unsafe(String),
}

impl Approver {
    fn detail(&self) -> String {
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
fn approver(socket: &std::path::Path, uid: u32) -> Approver {
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

/// A moment (ms since the epoch) as UTC RFC 3339.
fn when(until_ms: u64) -> String {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(until_ms))
        .to_string()
}

/// The time left until `until_ms`, to the second.
fn remaining(until_ms: u64) -> String {
    let left = until_ms.saturating_sub(approvals::SystemClock.now_ms()) / 1000;
    humantime::format_duration(Duration::from_secs(left)).to_string()
}

fn line(ok: bool, name: &str, detail: &str) -> String {
    format!("{} {name:<18} {detail}\n", if ok { "ok " } else { "NO " })
}

/// How runs are held together and bounded on this host, as `doctor` reports it.
struct ContainmentReport {
    ok: bool,
    mechanism: serde_json::Value,
    limits_enforced: bool,
    defaults: Option<policy::RunLimits>,
    detail: String,
}

fn containment(facts: &HostFacts, config: Option<&policy::Config>) -> ContainmentReport {
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

/// Run `warden doctor`: exit 0 when the configured sandbox backend is usable.
pub fn run(args: DoctorArgs) -> i32 {
    let facts = match HostFacts::read() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("warden: {e:#}");
            return exit::WARDEN_ERROR;
        }
    };
    let config = facts.config();
    let backend = config
        .as_ref()
        .map(|c| c.sandbox.backend)
        .unwrap_or(SandboxBackend::for_this_platform());
    let checks = backend_checks(&facts, backend);
    let modes = permission_modes(backend, &checks, config.as_ref().ok());
    let gateway = facts.gateway(None);
    // The gateway's own route decides, so doctor and every exec give the same answer.
    let sandbox_status = match (&gateway, backend) {
        (Err(e), _) => Err(format!("{e:#}")),
        (Ok(g), backend) => g.sandbox_available().map(|()| match backend {
            SandboxBackend::Bwrap if sandbox::landlock::abi() >= 1 => format!(
                "{} + seccomp + Landlock ABI {}",
                builder_in_use(config.as_ref().ok(), &checks),
                sandbox::landlock::abi()
            ),
            SandboxBackend::Container => match config.as_ref() {
                Ok(c) => format!(
                    "container {} ({})",
                    c.sandbox.container_name.as_deref().unwrap_or_default(),
                    c.sandbox.container_engine
                ),
                Err(_) => "the container backend".to_owned(),
            },
            SandboxBackend::Bwrap => {
                format!(
                    "{} + seccomp",
                    builder_in_use(config.as_ref().ok(), &checks)
                )
            }
            other => format!("{other:?} backend available"),
        }),
    };
    let store = facts.store();
    let store_status = store.load().map(|_| ()).map_err(|e| e.to_string());
    let nodes = node_status(&facts);
    let approver_status = store
        .load()
        .map(|snapshot| approver(&store.socket_path(&snapshot.file), facts.uid))
        .unwrap_or_else(|_| {
            Approver::Unsafe("the approvals file is unusable (see gateway)".into())
        });
    let direct = facts.direct_switch().active_until();
    let protection = facts.protection(None).map_err(|e| layout_problems(&e));
    let containment = containment(&facts, config.as_ref().ok());
    let layout = facts.sandbox_layout(None).ok();
    let exec = config.as_ref().ok().map(|c| {
        crate::exec_allowlist::doctor(c, |entries| match &layout {
            Some(layout) => sandbox::exec_allowlist::diagnose(entries, layout),
            None => Vec::new(),
        })
    });
    if args.json {
        let v = json!({
            "backend": backend,
            "checks": checks,
            "landlockAbi": sandbox::landlock::abi(),
            "permissionModes": { "supported": modes.supported, "configured": modes.configured, "ok": modes.ok, "detail": modes.detail },
            "hosts": {
                "sandbox": { "backend": format!("{backend:?}").to_lowercase(), "available": sandbox_status.is_ok(), "detail": sandbox_status.clone().unwrap_or_else(|e| e) , "directModeUntil": direct },
                "gateway": { "approvalsFile": store.config().path, "usable": store_status.is_ok(), "detail": store_status.clone().err() },
                "node": { "available": nodes.available, "paired": nodes.paired, "pending": nodes.pending, "thisMachineIsNode": nodes.this_machine, "detail": nodes.detail },
            },
            "containment": {
                "ok": containment.ok,
                "mechanism": containment.mechanism,
                "limitsEnforced": containment.limits_enforced,
                "defaultMaxProcesses": containment.defaults.map(|d| d.max_processes),
                "defaultMaxMemory": containment.defaults.map(|d| d.max_memory),
                "detail": containment.detail,
            },
            "execAllowlist": exec.as_ref().map(|e| e.json.clone()),
            "approver": { "listening": matches!(approver_status, Approver::Listening(_)), "usable": !matches!(approver_status, Approver::Unsafe(_)), "detail": approver_status.detail() },
            "protected": match &protection {
                Ok(list) => json!({"ok": true, "paths": list.iter().map(|r| json!({
                    "role": r.protection.role,
                    "path": r.protection.real,
                    "guard": r.protection.guard,
                    "aliases": r.protection.aliases,
                    "insideWritable": r.protection.inside_writable,
                    "pinned": r.pinned,
                    "locked": r.locked,
                })).collect::<Vec<_>>()}),
                Err(problems) => json!({"ok": false, "detail": problems.join("; "), "problems": problems}),
            },
        });
        outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        let mut out = format!(
            "checks (sandbox.backend = \"{}\")\n",
            format!("{backend:?}").to_lowercase()
        );
        for c in &checks {
            out.push_str(&line(c.ok, &c.name, &c.detail));
        }
        out.push_str(&line(modes.ok, "permission modes", &modes.detail));
        out.push_str("\nhosts\n");
        out.push_str(&line(
            sandbox_status.is_ok(),
            "sandbox",
            &sandbox_status.clone().unwrap_or_else(|e| {
                format!("unavailable — every host=sandbox exec is refused: {e}")
            }),
        ));
        if let Some(until) = direct {
            out.push_str(&format!(
                "    direct mode is ON until {} (another {}): host=sandbox runs unsandboxed\n",
                when(until),
                remaining(until)
            ));
        }
        if let Some(exec) = &exec {
            out.push_str(&line(exec.ok, "  exec allowlist", &exec.detail));
            for line in &exec.allows {
                out.push_str(&format!("    {line}\n"));
            }
            for note in &exec.notes {
                out.push_str(&format!("    warning: {note}\n"));
            }
        }
        out.push_str(&line(
            store_status.is_ok(),
            "gateway",
            &match &store_status {
                Ok(()) => format!("approvals file {} usable", store.config().path.display()),
                Err(e) => format!("denies everything: {e}"),
            },
        ));
        out.push_str(&line(nodes.available, "node", &nodes.detail));
        out.push_str(&line(
            matches!(approver_status, Approver::Listening(_)),
            "approver",
            &approver_status.detail(),
        ));
        out.push_str(&line(containment.ok, "containment", &containment.detail));
        out.push_str("\nprotected from commands and file tools\n");
        match &protection {
            Ok(list) => {
                for r in list {
                    out.push_str(&line(true, r.protection.role, &protection_detail(r)));
                }
            }
            Err(problems) => {
                for problem in problems {
                    out.push_str(&line(
                        false,
                        "layout",
                        &format!("refused (sandboxed and gateway runs): {problem}"),
                    ));
                }
            }
        }
        out!("{out}");
    }
    let exec_ok = exec.as_ref().is_none_or(|e| e.ok);
    if sandbox_status.is_ok() && protection.is_ok() && modes.ok && exec_ok {
        0
    } else {
        1
    }
}

/// Each problem that makes Warden refuse this layout, or the one error that stopped the
/// check.
fn layout_problems(e: &anyhow::Error) -> Vec<String> {
    match e.downcast_ref::<sandbox::protect::LayoutProblems>() {
        Some(problems) => problems.0.clone(),
        None => vec![format!("{e:#}")],
    }
}

/// Where a protected path is, how it is kept out of reach, and what a writable run does
/// for it.
fn protection_detail(r: &crate::compose::ProtectionReport) -> String {
    let p = &r.protection;
    let list = |paths: &[std::path::PathBuf]| {
        paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let how = match p.guard {
        sandbox::protect::Guard::Hidden => "hidden",
        sandbox::protect::Guard::ReadOnly => "read-only",
    };
    let mut detail = format!("{} ({how}", p.real.display());
    match &p.inside_writable {
        None => detail.push_str(", outside the writable paths"),
        Some(w) => {
            detail.push_str(&format!(", inside the writable {}", w.display()));
            if !r.locked.is_empty() {
                detail.push_str(&format!("; bound read-only: {}", list(&r.locked)));
            }
            if !r.pinned.is_empty() {
                detail.push_str(&format!(
                    "; pinned so nothing can rename it: {}",
                    list(&r.pinned)
                ));
            }
        }
    }
    if !p.aliases.is_empty() {
        detail.push_str(&format!(
            "; also shown at {}, kept the same way",
            list(&p.aliases)
        ));
    }
    detail.push(')');
    detail
}

/// Whether Warden's own namespace builder works here (`Err`: why not).
fn own_builder_works() -> Result<(), String> {
    let helper = crate::host::helper_binary().map_err(|e| format!("{e:#}"))?;
    sandbox::probe::builder_works(helper.exec_path()).map_err(|e| e.to_string())
}

/// Check name of Warden's own builder's probe in [`backend_checks`].
const OWN_BUILDER_CHECK: &str = "namespace builder";

/// Who builds the sandbox's namespaces here: what `sandbox.builder` asks for, and for
/// `auto` what its probe (already run among `checks`) answered — the same choice every
/// exec makes.
fn builder_in_use(config: Option<&policy::Config>, checks: &[Check]) -> &'static str {
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
fn backend_checks(facts: &HostFacts, backend: SandboxBackend) -> Vec<Check> {
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
struct ModesReport {
    supported: Vec<PermissionMode>,
    configured: PermissionMode,
    ok: bool,
    detail: String,
}

fn permission_modes(
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

/// Run `warden sandbox ...`.
pub fn sandbox(command: SandboxCommand) -> i32 {
    let result = (|| -> anyhow::Result<String> {
        let facts = HostFacts::read()?;
        match command {
            SandboxCommand::Direct { ttl, off } => {
                let ttl = if off { None } else { ttl };
                Ok(match facts.direct_switch().set(ttl)? {
                    Some(until) => format!(
                        "direct mode ON: host=sandbox commands run WITHOUT an OS sandbox until {} (in {}); they can read everything you can, Warden's state included. `warden sandbox direct --off` ends it now\n",
                        when(until),
                        remaining(until)
                    ),
                    None => "direct mode off: host=sandbox commands run in the OS sandbox\n".into(),
                })
            }
            SandboxCommand::Status => Ok(match facts.direct_switch().active_until() {
                Some(until) => format!(
                    "direct mode ON until {} (another {}): host=sandbox commands run WITHOUT an OS sandbox\n",
                    when(until),
                    remaining(until)
                ),
                _ => "direct mode off: host=sandbox commands run in the OS sandbox\n".into(),
            }),
        }
    })();
    exit::or_report(result.map(|text| {
        out!("{text}");
        0
    }))
}

/// What `host = node` can reach from here: the gateway's paired nodes (`nodes.json`),
/// and whether this machine is itself a node (`node.json`).
struct NodeStatus {
    available: bool,
    paired: usize,
    pending: usize,
    this_machine: Option<String>,
    detail: String,
}

fn node_status(facts: &HostFacts) -> NodeStatus {
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
