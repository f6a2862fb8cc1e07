//! `warden doctor` for the container backend: the steps [`Container::connect`] takes, each
//! reported on its own line — the engine, the container, what it sees of the host, what
//! the wrapper needs, and whether commands can run read-only — stopping at the first
//! step that fails, as connecting does.
//!
//! [`Container::connect`]: super::Container::connect

use super::check::check_container_name;
use super::command::Target;
use super::engine::{ContainerConfig, engine_env, find_engine, probe_engine};
use super::readonly::read_only_view;
use super::view::check_promises;
use crate::SandboxPolicy;
use crate::probe::Check;

/// A step's line: what it found, or (`Err`) the diagnosis.
fn check(name: &str, result: Result<String, String>) -> Check {
    let ok = result.is_ok();
    Check {
        name: name.into(),
        ok,
        detail: result.unwrap_or_else(|e| e),
    }
}

/// One check per step of connecting to the configured container for `policy`.
pub fn diagnose(config: &ContainerConfig, policy: &SandboxPolicy) -> Vec<Check> {
    let mut checks = Vec::new();
    let engine = probe_engine(config)
        .and_then(|version| Ok((find_engine(&config.engine, &config.engine_dirs)?, version)));
    let (engine, version) = match engine {
        Ok(found) => found,
        Err(e) => {
            checks.push(check("container engine", Err(e.0)));
            return checks;
        }
    };
    checks.push(check(
        "container engine",
        Ok(format!("{} ({version})", engine.display())),
    ));
    let mut target = Target {
        engine,
        container: config.container.clone(),
        env_program: String::new(),
        engine_env: engine_env(&config.engine_dirs),
    };
    let inspected =
        check_container_name(&config.container).and_then(|()| target.inspect(&config.engine));
    let inspected = match inspected {
        Ok(i) => i,
        Err(e) => {
            checks.push(check("container", Err(e.0)));
            return checks;
        }
    };
    checks.push(check(
        "container",
        Ok(format!("{} is running", config.container)),
    ));
    let promises = check_promises(&inspected, policy, &config.engine, &config.container);
    checks.push(check(
        "workspace mapping",
        promises.map_err(|e| e.0).map(|()| {
            let mapped: Vec<String> = inspected
                .mapped(policy)
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            format!(
                "sees {} at the same path{}; nothing the sandbox hides is mounted",
                mapped.join(", "),
                if policy.network == crate::Network::On {
                    ""
                } else {
                    "; no network"
                }
            )
        }),
    ));
    if !checks.iter().all(|c| c.ok) {
        return checks;
    }
    let probe = match target.probe_container(&config.engine) {
        Ok((env, probe)) => {
            checks.push(check(
                "container tools",
                Ok(format!("/bin/sh, env at {env}, /proc readable")),
            ));
            target.env_program = env;
            probe
        }
        Err(e) => {
            checks.push(check("container tools", Err(e.0)));
            return checks;
        }
    };
    let view = read_only_view(&target, &probe, &inspected, &config.engine, policy)
        .map(|tools| {
            format!(
                "commands can run read-only (locked by {} and {} in new namespaces)",
                tools.unshare, tools.mount
            )
        })
        .map_err(|e| e.to_string());
    checks.push(check("read-only view", view));
    checks
}
