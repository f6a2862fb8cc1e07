//! The `exec-approvals.json` document, schema version 1. Every level keeps the fields
//! this version does not know (`extra`), in their original order, so a rewrite never
//! loses them.

use indexmap::IndexMap;
use policy::{Ask, AskFallback, HostCeiling, Security};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

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

/// `defaults`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Defaults {
    /// Host-wide security ceiling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security: Option<Security>,
    /// Host-wide ask floor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask: Option<Ask>,
    /// What happens when no approver answers.
    #[serde(
        default,
        rename = "askFallback",
        skip_serializing_if = "Option::is_none"
    )]
    pub ask_fallback: Option<AskFallback>,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `agents.<id>`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentEntry {
    /// This agent's security ceiling (over `defaults`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security: Option<Security>,
    /// This agent's ask floor (over `defaults`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask: Option<Ask>,
    /// This agent's fallback (over `defaults`).
    #[serde(
        default,
        rename = "askFallback",
        skip_serializing_if = "Option::is_none"
    )]
    pub ask_fallback: Option<AskFallback>,
    /// Allowlist entries, in order.
    #[serde(default)]
    pub allowlist: Vec<AllowlistEntry>,
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
        let entry = agent.and_then(|a| self.agents.get(a));
        HostCeiling {
            security: entry
                .and_then(|e| e.security)
                .or(self.defaults.security)
                .unwrap_or(Security::Deny),
            ask: entry
                .and_then(|e| e.ask)
                .or(self.defaults.ask)
                .unwrap_or(Ask::OnMiss),
            ask_fallback: entry
                .and_then(|e| e.ask_fallback)
                .or(self.defaults.ask_fallback)
                .unwrap_or(AskFallback::Deny),
        }
    }

    /// The allowlist patterns of `agent`, in order.
    pub fn patterns_for(&self, agent: Option<&str>) -> Vec<String> {
        agent
            .and_then(|a| self.agents.get(a))
            .map(|e| e.allowlist.iter().map(|x| x.pattern.clone()).collect())
            .unwrap_or_default()
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
                if let Err(err) = policy::validate_pattern(&e.pattern) {
                    problems.push(format!("agents.{agent}: {err}"));
                }
            }
        }
        problems
    }
}
