//! The `exec-approvals.json` document, schema version 1. Every level keeps the fields
//! this version does not know (`extra`), in their original order, so a rewrite never
//! loses them.
//!
//! Allowlist entries may carry argument rules (`args`, `argsMatch`, `allowFlags`,
//! `examples`): fields a version-1 reader that does not know them ignores, so the file
//! stays a superset of version 1. The agent id `*` is OpenClaw's "every agent": its
//! settings sit between `defaults` and each agent's own, and its entries apply to all.

use indexmap::IndexMap;
use policy::{ArgsMatch, Ask, AskFallback, Examples, HostCeiling, RuleSpec, Security};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The agent id that stands for every agent (as in OpenClaw).
pub const EVERY_AGENT: &str = "*";

/// The only schema version Warden reads or writes.
pub const SCHEMA_VERSION: u64 = 1;

/// What `get` prints instead of the token.
pub const REDACTED: &str = "<redacted>";

/// The whole file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalsFile {
    /// Always 1.
    pub version: u64,
    /// The approver socket and its credential.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<SocketSettings>,
    /// Host-wide defaults.
    #[serde(default)]
    pub defaults: Defaults,
    /// Per-agent settings and allowlists, in file order.
    #[serde(default)]
    pub agents: IndexMap<String, AgentEntry>,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `socket`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SocketSettings {
    /// Where the approver UI listens (`~` is the executing user's home).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The shared secret (base64url of 32 random bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The settings a host file holds both host-wide (`defaults`) and per agent. `None` is
/// unset: an agent inherits `defaults`, and `defaults` falls back to the strict value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ceilings {
    /// Security ceiling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security: Option<Security>,
    /// Ask floor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask: Option<Ask>,
    /// What happens when no approver answers.
    #[serde(
        default,
        rename = "askFallback",
        skip_serializing_if = "Option::is_none"
    )]
    pub ask_fallback: Option<AskFallback>,
}

impl Ceilings {
    /// Each value of `self`, else `under`'s.
    pub fn over(self, under: Ceilings) -> Ceilings {
        Ceilings {
            security: self.security.or(under.security),
            ask: self.ask.or(under.ask),
            ask_fallback: self.ask_fallback.or(under.ask_fallback),
        }
    }

    /// Set every value `change` names; the others stay as they are.
    pub fn apply(&mut self, change: Ceilings) {
        *self = change.over(*self);
    }
}

/// `defaults`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Defaults {
    /// Host-wide settings.
    #[serde(flatten)]
    pub ceilings: Ceilings,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `agents.<id>`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentEntry {
    /// This agent's settings (over `defaults`).
    #[serde(flatten)]
    pub ceilings: Ceilings,
    /// Allowlist entries, in order.
    #[serde(default)]
    pub allowlist: Vec<AllowlistEntry>,
    /// Hosts this agent's sandboxed runs may reach through Warden's proxy besides what
    /// `[sandbox.egress]` allows (`host:port` rules, as `policy::egress` reads them),
    /// stored by "allow always" on a connection question. A rule that does not read
    /// allows nothing; `[sandbox.egress]`'s deny rules still win.
    #[serde(default, rename = "egressAllow", skip_serializing_if = "Vec::is_empty")]
    pub egress_allow: Vec<String>,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One allowlist entry.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AllowlistEntry {
    /// The glob or bare name.
    pub pattern: String,
    /// Milliseconds since the epoch of the last use.
    #[serde(
        default,
        rename = "lastUsedAt",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_used_at: Option<u64>,
    /// The command that last used it.
    #[serde(
        default,
        rename = "lastUsedCommand",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_used_command: Option<String>,
    /// The file it last resolved to.
    #[serde(
        default,
        rename = "lastResolvedPath",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_resolved_path: Option<String>,
    /// Patterns for the arguments after the program; absent: any arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    /// `prefix` (default) or `exact`.
    #[serde(default, rename = "argsMatch", skip_serializing_if = "Option::is_none")]
    pub args_match: Option<ArgsMatch>,
    /// Profile hits this entry allows by name (`-c alias.*`, `-exec`; `*`: all).
    #[serde(default, rename = "allowFlags", skip_serializing_if = "Vec::is_empty")]
    pub allow_flags: Vec<String>,
    /// Commands that must (not) match, checked when the file is loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub examples: Option<Examples>,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl AllowlistEntry {
    /// A new, never-used entry.
    pub fn new(pattern: impl Into<String>) -> Self {
        AllowlistEntry {
            pattern: pattern.into(),
            ..Default::default()
        }
    }

    /// A new, never-used entry for `rule`.
    pub fn from_rule(rule: &RuleSpec) -> Self {
        AllowlistEntry {
            pattern: rule.pattern.clone(),
            args: rule.args.clone(),
            args_match: (rule.args.is_some() && rule.args_match == ArgsMatch::Exact)
                .then_some(ArgsMatch::Exact),
            allow_flags: rule.allow_flags.clone(),
            examples: (rule.examples != Examples::default()).then(|| rule.examples.clone()),
            ..Default::default()
        }
    }

    /// The entry as the policy reads it.
    pub fn rule(&self) -> RuleSpec {
        RuleSpec {
            pattern: self.pattern.clone(),
            args: self.args.clone(),
            args_match: self.args_match.unwrap_or_default(),
            allow_flags: self.allow_flags.clone(),
            examples: self.examples.clone().unwrap_or_default(),
        }
    }
}

impl Default for ApprovalsFile {
    fn default() -> Self {
        ApprovalsFile {
            version: SCHEMA_VERSION,
            socket: None,
            defaults: Defaults::default(),
            agents: IndexMap::new(),
            extra: Map::new(),
        }
    }
}

impl ApprovalsFile {
    /// The ceiling this host imposes on `agent`: its agent entry over `defaults`, each
    /// missing value at its secure default (deny / on-miss / deny).
    pub fn ceiling_for(&self, agent: Option<&str>) -> HostCeiling {
        let every = self
            .agents
            .get(EVERY_AGENT)
            .map_or(self.defaults.ceilings, |e| {
                e.ceilings.over(self.defaults.ceilings)
            });
        let set = agent
            .and_then(|a| self.agents.get(a))
            .map_or(every, |e| e.ceilings.over(every));
        HostCeiling {
            security: set.security.unwrap_or(Security::Deny),
            ask: set.ask.unwrap_or(Ask::OnMiss),
            ask_fallback: set.ask_fallback.unwrap_or(AskFallback::Deny),
        }
    }

    /// The allowlist patterns of `agent`, in order (its own, then those for every
    /// agent).
    pub fn patterns_for(&self, agent: Option<&str>) -> Vec<String> {
        self.rules_for(agent)
            .into_iter()
            .map(|r| r.pattern)
            .collect()
    }

    /// The allowlist rules of `agent`: its own entries, then those of `*`.
    pub fn rules_for(&self, agent: Option<&str>) -> Vec<RuleSpec> {
        let own = agent
            .filter(|a| *a != EVERY_AGENT)
            .and_then(|a| self.agents.get(a));
        own.into_iter()
            .chain(self.agents.get(EVERY_AGENT))
            .flat_map(|e| e.allowlist.iter().map(AllowlistEntry::rule))
            .collect()
    }

    /// The egress rules stored for `agent` (its own, then those of `*`) that read; a
    /// rule that does not read allows nothing and is left out.
    pub fn egress_allow_for(&self, agent: &str) -> Vec<policy::egress::DomainRule> {
        let own = (agent != EVERY_AGENT)
            .then(|| self.agents.get(agent))
            .flatten();
        own.into_iter()
            .chain(self.agents.get(EVERY_AGENT))
            .flat_map(|e| &e.egress_allow)
            .filter_map(|text| policy::egress::DomainRule::parse(text).ok())
            .collect()
    }

    /// The token, if one has been created.
    pub fn token(&self) -> Option<&str> {
        self.socket.as_ref().and_then(|s| s.token.as_deref())
    }

    /// A copy with the token replaced by [`REDACTED`], for display.
    pub fn redacted(&self) -> ApprovalsFile {
        let mut copy = self.clone();
        if let Some(token) = copy.socket.as_mut().and_then(|s| s.token.as_mut()) {
            *token = REDACTED.to_owned();
        }
        copy
    }

    /// Every problem that makes this document unusable (schema version, invalid
    /// patterns, empty agent ids).
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.version != SCHEMA_VERSION {
            problems.push(format!(
                "unsupported schema version {} (only version {SCHEMA_VERSION} is supported)",
                self.version
            ));
        }
        for (agent, entry) in &self.agents {
            if agent.trim().is_empty() || agent.chars().any(char::is_control) {
                problems.push(format!("invalid agent id {agent:?}"));
            }
            for e in &entry.allowlist {
                let rule = e.rule();
                let checked = policy::validate_pattern(&e.pattern)
                    .and_then(|_| rule.validate(&policy::Profiles::shipped()));
                if let Err(err) = checked {
                    problems.push(format!("agents.{agent}: {err}"));
                }
            }
        }
        problems
    }
}
