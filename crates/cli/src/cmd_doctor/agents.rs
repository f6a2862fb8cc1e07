//! What the gateway host does for each agent `warden doctor` can name: whether it denies
//! every command of that agent (and which layer says so: the config's global table, the
//! agent's entry, this host's approvals file, or the built-in default), and which agents
//! with a gateway credential have no policy of their own (they get the defaults, which
//! first-time users rarely mean).

use std::collections::BTreeSet;

use approvals::Store;
use policy::{Config, ExecParams, Host, Security, SessionOverrides, Source};
use serde_json::{Value, json};

/// One agent's line.
pub struct AgentCheck {
    /// The agent.
    pub agent: String,
    /// Whether its gateway-host commands can run at all.
    pub ok: bool,
    /// What doctor says.
    pub detail: String,
}

/// Every agent named in `config`, in the approvals file, or by a gateway credential
/// (`with_credentials`), and `main` (the default of `warden exec` and `warden mcp`).
pub fn checks(config: &Config, store: &Store, with_credentials: &[String]) -> Vec<AgentCheck> {
    let file = store.load().ok().map(|s| s.file);
    let in_config: BTreeSet<String> = config.agents.iter().map(|a| a.id.clone()).collect();
    let in_file: BTreeSet<String> = file
        .as_ref()
        .map(|f| f.agents.keys().filter(|k| *k != "*").cloned().collect())
        .unwrap_or_default();
    let mut names: BTreeSet<String> = in_config.union(&in_file).cloned().collect();
    names.extend(with_credentials.iter().cloned());
    names.insert("main".to_owned());
    names
        .into_iter()
        .map(|agent| {
            let own_policy = in_config.contains(&agent) || in_file.contains(&agent);
            check(
                config,
                store,
                &agent,
                own_policy,
                with_credentials.contains(&agent),
            )
        })
        .collect()
}

fn check(
    config: &Config,
    store: &Store,
    agent: &str,
    own_policy: bool,
    credential: bool,
) -> AgentCheck {
    let view = store.host_view(Some(agent));
    let params = ExecParams {
        host: Some(Host::Gateway),
        ..ExecParams::default()
    };
    let resolved = policy::resolve(
        &params,
        &SessionOverrides::default(),
        config,
        Some(agent),
        &view.ceiling,
    );
    let security = &resolved.security;
    let mut detail = if security.value == Security::Deny {
        let fix = match (&view.error, security.source) {
            (Some(err), _) => format!("this host's approvals file cannot be used ({err})"),
            (None, Source::HostFile) => format!(
                "exec-approvals.json caps it (`warden approvals defaults{} --security allowlist` raises the ceiling)",
                if view.file.as_ref().is_some_and(|f| f.agents.contains_key(agent)) {
                    format!(" --agent {agent}")
                } else {
                    String::new()
                }
            ),
            (None, Source::Agent) => "its `[[agents.list]]` entry in config.toml says so (set `tools.exec.security = \"allowlist\"` there)".to_owned(),
            (None, Source::Global) => "`[tools.exec] security = \"deny\"` in config.toml".to_owned(),
            (None, _) => "nothing allows it: set `[tools.exec] security = \"allowlist\"` in config.toml (and allowlist entries with `warden approvals allowlist add`)".to_owned(),
        };
        format!(
            "host=gateway denies every command: security=deny ({}) — {fix}",
            security.source
        )
    } else {
        format!(
            "host=gateway: security={} ({}), ask={} ({})",
            security.value, security.source, resolved.ask.value, resolved.ask.source
        )
    };
    if !own_policy {
        detail.push_str(&format!(
            "; no policy of its own{}: it gets the global settings and the host file's defaults (add `[[agents.list]]` with `id = \"{agent}\"` in config.toml, or allowlist entries with `warden approvals allowlist add --agent {agent}`)",
            if credential { " although it has a gateway credential" } else { "" }
        ));
    }
    AgentCheck {
        agent: agent.to_owned(),
        ok: security.value != Security::Deny,
        detail,
    }
}

/// The checks as JSON.
pub fn json(checks: &[AgentCheck]) -> Value {
    json!(
        checks
            .iter()
            .map(|c| json!({"agent": c.agent, "gatewayRuns": c.ok, "detail": c.detail}))
            .collect::<Vec<_>>()
    )
}
