//! Resolution of everything one exec is decided and run with — host, security, ask,
//! askFallback, node, permission mode, timeout and the extra environment names: tool
//! parameter → session override → agent override → global default → built-in default.
//! Then ceilings: the executing host's approvals file caps security and ask, the
//! configured permission mode caps a session's, `tools.exec.max_timeout` bounds the
//! timeout. Every value carries the level it came from.

use std::time::Duration;

use serde::Serialize;

use crate::config::{Config, DEFAULT_MAX_TIMEOUT, DEFAULT_TIMEOUT};
use crate::modes::{Ask, AskFallback, Host, PermissionMode, Security};
use crate::sourced::{Source, Sourced};

/// The policy parameters a single request may carry (the "tool parameter" level).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ExecParams {
    /// Requested host.
    pub host: Option<Host>,
    /// Requested security (can only tighten what the host file allows).
    pub security: Option<Security>,
    /// Requested ask mode (can only ask more than the host file says).
    pub ask: Option<Ask>,
    /// Requested node.
    pub node: Option<String>,
    /// Requested timeout (never above `tools.exec.max_timeout`).
    #[serde(skip_serializing_if = "Option::is_none", with = "opt_duration")]
    pub timeout: Option<Duration>,
    /// The request's own egress rules (they only narrow; refused where they cannot be
    /// enforced).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress: Option<crate::egress::RequestEgress>,
}

/// Per-agent, per-session overrides set by slash commands; never persisted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionOverrides {
    /// `/exec host=`.
    pub host: Option<Host>,
    /// `/exec security=`.
    pub security: Option<Security>,
    /// `/exec ask=`.
    pub ask: Option<Ask>,
    /// `/exec node=`.
    pub node: Option<String>,
    /// `/exec permission_mode=` (can only be stricter than the configured mode).
    pub permission_mode: Option<PermissionMode>,
    /// `/exec timeout=`.
    #[serde(skip_serializing_if = "Option::is_none", with = "opt_duration")]
    pub timeout: Option<Duration>,
    /// The settings from before `/elevated`, restored by `/elevated off`.
    pub before_elevation: Option<Box<SessionOverrides>>,
}

impl SessionOverrides {
    /// True while an `/elevated` mode is active.
    pub fn is_elevated(&self) -> bool {
        self.before_elevation.is_some()
    }
}

/// What the executing host's approvals file says for this agent (its agent entry over
/// its defaults). It is a ceiling: nothing above it may loosen it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostCeiling {
    /// The most permissive security this host allows.
    pub security: Security,
    /// The least asking this host allows.
    pub ask: Ask,
    /// What to do when no approver answers.
    pub ask_fallback: AskFallback,
}

impl HostCeiling {
    /// The ceiling of a host whose approvals file is missing, corrupt or unreadable:
    /// nothing runs on it (fail closed).
    pub const DENY_ALL: HostCeiling = HostCeiling {
        security: Security::Deny,
        ask: Ask::OnMiss,
        ask_fallback: AskFallback::Deny,
    };

    /// No ceiling: what a request asks for before any host file caps it (how a gateway
    /// routes a request to a node, whose own file is the ceiling there). Its fallback is
    /// the strictest, the one value this host cannot leave to the requester.
    pub const NONE: HostCeiling = HostCeiling {
        security: Security::Full,
        ask: Ask::Off,
        ask_fallback: AskFallback::Deny,
    };
}

/// The resolved policy for one exec.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedPolicy {
    /// Where it runs.
    pub host: Sourced<Host>,
    /// Effective security (after the host ceiling).
    pub security: Sourced<Security>,
    /// Effective ask mode (after the host ceiling).
    pub ask: Sourced<Ask>,
    /// What happens when no approver answers.
    pub ask_fallback: Sourced<AskFallback>,
    /// The target node (only meaningful for `host = node`).
    pub node: Option<Sourced<String>>,
    /// The node binding that restricts this agent, if any (`tools.exec.node` of the
    /// agent or the global config): it may use no other node.
    pub node_binding: Option<Sourced<String>>,
    /// How writes are gated on the sandbox host (a session can only tighten the
    /// configured mode).
    pub permission_mode: Sourced<PermissionMode>,
    /// The run's timeout.
    #[serde(serialize_with = "sourced_duration")]
    pub timeout: Sourced<Duration>,
    /// The largest timeout allowed.
    #[serde(serialize_with = "sourced_duration")]
    pub max_timeout: Sourced<Duration>,
    /// Environment variable names requests may set beyond the built-in list.
    pub env_names: Vec<Sourced<String>>,
    /// Processes and threads the run may have at once.
    pub max_processes: Sourced<u64>,
    /// Bytes of memory the run may use.
    pub max_memory: Sourced<u64>,
    /// The only programs a sandboxed run may execute (`null`: no such restriction).
    pub exec_allowlist: Option<crate::exec_allowlist::ResolvedExecAllowlist>,
    /// What network a sandboxed run has (`sandbox.network`).
    pub network: Sourced<crate::SandboxNetwork>,
    /// With `network = "proxy"`, the hosts a sandboxed run may reach through Warden's
    /// egress proxy (`[sandbox.egress]`, or the agent's own `sandbox.egress`; the plan
    /// adds the request's narrowing, [`ResolvedPolicy::egress_request`]); `None` in every
    /// other mode.
    pub egress: Option<ResolvedEgress>,
    /// The request's own egress rules as it gave them (`egress`), whatever the network:
    /// a run they cannot be enforced on is refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress_request: Option<crate::egress::RequestEgress>,
    /// Whether a command a human is asked about is sent to the approver to run in its
    /// own context (gateway and node hosts; a sandboxed command always runs sandboxed).
    pub run_in_approver: Sourced<bool>,
}

/// A run's egress rules as `policy explain` and the plan show them: each rule in its
/// normal form (`*.Example.COM.` is `*.example.com`). Deny wins; a host neither names is
/// refused.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolvedEgress {
    /// Hosts that may be reached.
    pub allow: Vec<String>,
    /// Hosts never reached.
    pub deny: Vec<String>,
    /// The agent whose `[[agents.list]]` entry has a `sandbox.egress` of its own (its
    /// allow list replaces the global one, its deny list adds to the global one); `None`:
    /// the global `[sandbox.egress]` alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// In a plan, the request's own rules (`egress`), which narrow these: a host its
    /// allow list does not name is refused unasked, and its deny rules are refused too.
    /// (A resolved policy keeps them once, in `egress_request`.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<crate::egress::RequestEgress>,
}

impl ResolvedEgress {
    /// `rules` in their normal form.
    pub fn of(rules: &crate::egress::EgressRules) -> Self {
        ResolvedEgress {
            allow: rules.allow.iter().map(ToString::to_string).collect(),
            deny: rules.deny.iter().map(ToString::to_string).collect(),
            agent: None,
            request: None,
        }
    }

    /// The rules `agent`'s runs decide by: its `sandbox.egress.allow` instead of the
    /// global list when it has one, the global deny list and its own together.
    pub fn for_agent(config: &Config, agent: Option<&str>) -> Self {
        let global = &config.sandbox.egress;
        let entry = agent
            .and_then(|id| config.agent(id))
            .filter(|a| a.egress_allow.is_some() || a.egress_deny.is_some());
        let Some(entry) = entry else {
            return ResolvedEgress::of(global);
        };
        let mut deny = global.deny.clone();
        for rule in entry.egress_deny.iter().flatten() {
            if !deny.contains(rule) {
                deny.push(rule.clone());
            }
        }
        ResolvedEgress {
            agent: Some(entry.id.clone()),
            ..ResolvedEgress::of(&crate::egress::EgressRules {
                allow: entry
                    .egress_allow
                    .clone()
                    .unwrap_or_else(|| global.allow.clone()),
                deny,
            })
        }
    }

    /// The gate a run with these rules decides its connections by: one that refuses
    /// everything should any rule not read back (a plan from elsewhere), never one with
    /// a rule dropped.
    pub fn gate(&self) -> caps::ConnectionRules {
        use crate::egress_gate::RulesGate;
        let gate = match (self.rules(), self.request.as_ref().map(|r| r.rules())) {
            (Some(rules), None) => RulesGate::new(rules, self.agent.clone()),
            (Some(rules), Some(Some(narrowing))) => {
                RulesGate::new(rules, self.agent.clone()).narrowed(narrowing)
            }
            (None, _) | (_, Some(None)) => RulesGate::refusing_all(),
        };
        gate.into_rules()
    }

    /// The rules again. Each was checked when the config was read and its normal form
    /// reads back as itself; should any text not (a plan from elsewhere), `None` — the
    /// caller refuses everything rather than drop a rule.
    pub fn rules(&self) -> Option<crate::egress::EgressRules> {
        let parse = |texts: &[String]| -> Option<Vec<crate::egress::DomainRule>> {
            texts
                .iter()
                .map(|t| crate::egress::DomainRule::parse(t).ok())
                .collect()
        };
        Some(crate::egress::EgressRules {
            allow: parse(&self.allow)?,
            deny: parse(&self.deny)?,
        })
    }
}

impl ResolvedPolicy {
    /// True when this run, if a human is asked about it, is run by the approver: the
    /// setting is on and the host is not the sandbox (which must confine it).
    pub fn runs_in_approver(&self) -> bool {
        self.run_in_approver.value && self.host.value != Host::Sandbox
    }
}

/// A resolved timeout longer than the resolved maximum, each with where it was set.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the timeout {} ({}) exceeds the maximum {} ({})",
    humantime::format_duration(.timeout.value),
    .timeout.source,
    humantime::format_duration(.max.value),
    .max.source
)]
pub struct TimeoutTooLong {
    /// The timeout asked for.
    pub timeout: Sourced<Duration>,
    /// The most allowed.
    pub max: Sourced<Duration>,
}

impl ResolvedPolicy {
    /// The timeout, or why the requested one cannot be used.
    pub fn checked_timeout(&self) -> Result<Duration, TimeoutTooLong> {
        let (t, max) = (&self.timeout, &self.max_timeout);
        if t.value > max.value {
            return Err(TimeoutTooLong {
                timeout: t.clone(),
                max: max.clone(),
            });
        }
        Ok(t.value)
    }

    /// The extra environment names, as plain strings.
    pub fn extra_env_names(&self) -> Vec<String> {
        self.env_names.iter().map(|n| n.value.clone()).collect()
    }
}

/// `{"value": "5m", "source": ...}`: durations in explanations read like the config.
fn sourced_duration<S: serde::Serializer>(
    d: &Sourced<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    Sourced {
        value: humantime::format_duration(d.value).to_string(),
        source: d.source,
    }
    .serialize(serializer)
}

/// Optional durations as `"30s"` text.
mod opt_duration {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(
        d: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => serializer.serialize_str(&humantime::format_duration(*d).to_string()),
            None => serializer.serialize_none(),
        }
    }
}

/// Built-in secure defaults (product spec §2).
pub const DEFAULT_HOST: Host = Host::Sandbox;
/// Default security for the gateway and node hosts.
pub const DEFAULT_SECURITY: Security = Security::Deny;
/// Default ask mode.
pub const DEFAULT_ASK: Ask = Ask::OnMiss;

fn first<T: Clone>(levels: [(Option<&T>, Source); 4], default: T) -> Sourced<T> {
    levels
        .into_iter()
        .find_map(|(v, s)| v.map(|v| Sourced::new(v.clone(), s)))
        .unwrap_or_else(|| Sourced::new(default, Source::Default))
}

/// Where one exec by `agent` runs: the host alone, as [`resolve`] resolves it (no host
/// file caps it), for routing a request before anything else is worked out.
pub fn resolve_host(
    params: &ExecParams,
    session: &SessionOverrides,
    config: &Config,
    agent: Option<&str>,
) -> Sourced<Host> {
    let agent_exec = agent.and_then(|id| config.agent(id)).map(|a| &a.exec);
    first(
        [
            (params.host.as_ref(), Source::ToolParam),
            (session.host.as_ref(), Source::Session),
            (agent_exec.and_then(|a| a.host.as_ref()), Source::Agent),
            (config.exec.host.as_ref(), Source::Global),
        ],
        DEFAULT_HOST,
    )
}

/// Resolve the policy for one exec by `agent`.
pub fn resolve(
    params: &ExecParams,
    session: &SessionOverrides,
    config: &Config,
    agent: Option<&str>,
    ceiling: &HostCeiling,
) -> ResolvedPolicy {
    let agent_exec = agent.and_then(|id| config.agent(id)).map(|a| &a.exec);
    let global = &config.exec;
    let host = resolve_host(params, session, config, agent);
    let requested_security = first(
        [
            (params.security.as_ref(), Source::ToolParam),
            (session.security.as_ref(), Source::Session),
            (agent_exec.and_then(|a| a.security.as_ref()), Source::Agent),
            (global.security.as_ref(), Source::Global),
        ],
        DEFAULT_SECURITY,
    );
    let requested_ask = first(
        [
            (params.ask.as_ref(), Source::ToolParam),
            (session.ask.as_ref(), Source::Session),
            (agent_exec.and_then(|a| a.ask.as_ref()), Source::Agent),
            (global.ask.as_ref(), Source::Global),
        ],
        DEFAULT_ASK,
    );
    // The ceiling: the stricter value wins; a tie keeps the requesting level's source.
    let security = if ceiling.security < requested_security.value {
        Sourced::new(ceiling.security, Source::HostFile)
    } else {
        requested_security
    };
    let ask = if ceiling.ask > requested_ask.value {
        Sourced::new(ceiling.ask, Source::HostFile)
    } else {
        requested_ask
    };
    let node_binding = agent_exec
        .and_then(|a| a.node.clone())
        .map(|n| Sourced::new(n, Source::Agent))
        .or_else(|| global.node.clone().map(|n| Sourced::new(n, Source::Global)));
    let node = params
        .node
        .clone()
        .map(|n| Sourced::new(n, Source::ToolParam))
        .or_else(|| {
            session
                .node
                .clone()
                .map(|n| Sourced::new(n, Source::Session))
        })
        .or_else(|| {
            agent_exec
                .and_then(|a| a.node.clone())
                .map(|n| Sourced::new(n, Source::Agent))
        })
        .or_else(|| global.node.clone().map(|n| Sourced::new(n, Source::Global)));
    // The operator's mode caps the session's: an agent may make its own session
    // stricter, never looser.
    let configured_mode = first(
        [
            (
                agent
                    .and_then(|id| config.agent(id))
                    .and_then(|a| a.permission_mode.as_ref()),
                Source::Agent,
            ),
            (config.sandbox.permission_mode.as_ref(), Source::Global),
            (None, Source::Default),
            (None, Source::Default),
        ],
        PermissionMode::default(),
    );
    let permission_mode = match session.permission_mode {
        Some(m) if m < configured_mode.value => Sourced::new(m, Source::Session),
        _ => configured_mode,
    };
    let max_timeout = match config.max_timeout {
        Some(m) => Sourced::new(m, Source::Global),
        None => Sourced::new(DEFAULT_MAX_TIMEOUT, Source::Default),
    };
    let timeout = first(
        [
            (params.timeout.as_ref(), Source::ToolParam),
            (session.timeout.as_ref(), Source::Session),
            (agent_exec.and_then(|a| a.timeout.as_ref()), Source::Agent),
            (global.timeout.as_ref(), Source::Global),
        ],
        DEFAULT_TIMEOUT.min(max_timeout.value),
    );
    let env_names = global
        .env
        .iter()
        .map(|n| Sourced::new(n.clone(), Source::Global))
        .chain(
            agent_exec
                .into_iter()
                .flat_map(|a| a.env.iter().map(|n| Sourced::new(n.clone(), Source::Agent))),
        )
        .collect();
    let max_processes = first(
        [
            (
                agent_exec.and_then(|a| a.max_processes.as_ref()),
                Source::Agent,
            ),
            (global.max_processes.as_ref(), Source::Global),
            (None, Source::Default),
            (None, Source::Default),
        ],
        config.default_limits.max_processes,
    );
    let max_memory = first(
        [
            (
                agent_exec.and_then(|a| a.max_memory.as_ref()),
                Source::Agent,
            ),
            (global.max_memory.as_ref(), Source::Global),
            (None, Source::Default),
            (None, Source::Default),
        ],
        config.default_limits.max_memory,
    );
    let run_in_approver = first(
        [
            (
                agent_exec.and_then(|a| a.run_in_approver.as_ref()),
                Source::Agent,
            ),
            (global.run_in_approver.as_ref(), Source::Global),
            (None, Source::Default),
            (None, Source::Default),
        ],
        false,
    );
    ResolvedPolicy {
        run_in_approver,
        host,
        security,
        ask,
        ask_fallback: Sourced::new(ceiling.ask_fallback, Source::HostFile),
        node,
        node_binding,
        permission_mode,
        timeout,
        max_timeout,
        env_names,
        max_processes,
        max_memory,
        exec_allowlist: crate::exec_allowlist::resolve_exec_allowlist(config, agent),
        // Off is the built-in default; the table cannot say it more strictly.
        network: if config.sandbox.network == crate::SandboxNetwork::Off {
            Sourced::new(crate::SandboxNetwork::Off, Source::Default)
        } else {
            Sourced::new(config.sandbox.network, Source::Global)
        },
        egress: (config.sandbox.network == crate::SandboxNetwork::Proxy)
            .then(|| ResolvedEgress::for_agent(config, agent)),
        egress_request: params.egress.clone(),
    }
}

#[cfg(test)]
mod tests;
