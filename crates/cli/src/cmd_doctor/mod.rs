//! `warden doctor`: probe what the configured sandbox backend needs on this machine —
//! for bubblewrap: user namespaces, a fresh `/proc`, seccomp, the Landlock ABI, the write
//! watch; for a container: the engine, the container, its mounts, the read-only view —
//! which permission modes it serves, and what that means for each host.
//! (`warden sandbox direct|status` is `cmd_sandbox.rs`; the probes are `probes.rs`.)

mod agents;
mod probes;
mod record;

use crate::cmd_sandbox::{remaining, when};
use crate::exit;
use crate::host::HostFacts;
use policy::SandboxBackend;
use probes::{
    Approver, approver, backend_checks, builder_in_use, containment, node_status, permission_modes,
};
use serde_json::json;

/// Arguments of `warden doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

fn line(ok: bool, name: &str, detail: &str) -> String {
    format!("{} {name:<18} {detail}\n", if ok { "ok " } else { "NO " })
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
    // Which agents the gateway host would deny everything, and which have no policy.
    let credentialed: Vec<String> =
        gateway::Credentials::new(facts.fs(), facts.warden_home.clone())
            .list()
            .map(|list| list.into_iter().map(|c| c.agent).collect())
            .unwrap_or_default();
    let agent_checks = match config.as_ref() {
        Ok(config) if store_status.is_ok() => agents::checks(config, &store, &credentialed),
        _ => Vec::new(),
    };
    let direct = facts.direct_switch().active_until();
    let protection = facts.protection(None).map_err(|e| layout_problems(&e));
    let containment = containment(&facts, config.as_ref().ok());
    let record = record::check(&facts, config.as_ref().ok());
    let config_path = policy::config::config_path(&facts.warden_home);
    let config_status = match &config {
        Ok(_) => Ok(format!(
            "{} is valid; a running gateway, `warden mcp` or node uses it for its next request",
            config_path.display()
        )),
        Err(e) => Err(format!(
            "{e:#} — a gateway, `warden mcp` or node already running keeps its last good configuration in force and says so in every result; new ones refuse to start until the file is fixed"
        )),
    };
    let network = config.as_ref().ok().map(network_status);
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
                "gateway": { "approvalsFile": store.config().path, "usable": store_status.is_ok(), "detail": store_status.clone().err(), "agents": agents::json(&agent_checks) },
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
            "network": network.as_ref().map(|detail| json!({"detail": detail, "mode": config.as_ref().ok().map(|c| c.sandbox.network)})),
            "record": { "ok": record.ok, "detail": record.detail },
            "config": { "ok": config_status.is_ok(), "path": config_path, "detail": config_status.clone().unwrap_or_else(|e| e) },
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
        out.push_str(&line(
            config_status.is_ok(),
            "config",
            &config_status.clone().unwrap_or_else(|e| e),
        ));
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
        if let Some(detail) = &network {
            out.push_str(&line(true, "  network", detail));
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
        let any_agent_runs = agent_checks.iter().any(|c| c.ok);
        out.push_str(&line(
            store_status.is_ok() && any_agent_runs,
            "gateway",
            &match &store_status {
                Ok(()) if any_agent_runs => {
                    format!("approvals file {} usable", store.config().path.display())
                }
                Ok(()) => format!(
                    "approvals file {} usable, but host=gateway denies every command of every agent below",
                    store.config().path.display()
                ),
                Err(e) => format!("denies everything: {e}"),
            },
        ));
        for check in &agent_checks {
            out.push_str(&line(
                check.ok,
                &format!("  agent {}", check.agent),
                &check.detail,
            ));
        }
        out.push_str(&line(nodes.available, "node", &nodes.detail));
        out.push_str(&line(
            matches!(approver_status, Approver::Listening(_)),
            "approver",
            &approver_status.detail(),
        ));
        out.push_str(&line(containment.ok, "containment", &containment.detail));
        out.push_str(&line(record.ok, "record", &record.detail));
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
    if sandbox_status.is_ok() && protection.is_ok() && modes.ok && exec_ok && config_status.is_ok()
    {
        0
    } else {
        1
    }
}

/// What network a sandboxed command has under `config`. A backend that cannot give it
/// is said on the sandbox line, by the route every exec takes; an allow list that is
/// empty lets nothing out, which is said here, not failed; agents with egress rules of
/// their own are named (their runs decide by those).
fn network_status(config: &policy::Config) -> String {
    let planned = crate::egress_gate::planned_network(config);
    let proxied = config.sandbox.network == policy::SandboxNetwork::Proxy;
    let own: Vec<&str> = config
        .agents
        .iter()
        .filter(|a| a.egress_allow.is_some() || a.egress_deny.is_some())
        .map(|a| a.id.as_str())
        .collect();
    let mut said = planned.to_string();
    if proxied && config.sandbox.egress.allow.is_empty() {
        said.push_str(
            " — [sandbox.egress] allows nothing yet: add the hosts commands need to `allow`",
        );
    }
    if proxied && !own.is_empty() {
        said.push_str(&format!(
            "; agents with sandbox.egress of their own: {}",
            own.join(", ")
        ));
    }
    said
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
