//! `$WARDEN_HOME/config.toml`: global `tools.exec.*` defaults, per-agent overrides, the
//! `[sandbox]` and `[gateway]` tables — the types, and loading them (`walk.rs` checks
//! every key against the schema).

pub mod edit;
pub mod live;
mod walk;

use std::path::{Path, PathBuf};
use std::time::Duration;

use caps::Fs;

use crate::PolicyError;
use crate::modes::{Ask, ExecAllowlistMode, Host, InvalidChoice, PermissionMode, Security};
use walk::Walker;

/// The `tools.exec` settings at one level (global or one agent). `None` means "not set
/// here", so resolution falls through to the next level.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecSettings {
    /// `tools.exec.host`.
    pub host: Option<Host>,
    /// `tools.exec.security`.
    pub security: Option<Security>,
    /// `tools.exec.ask`.
    pub ask: Option<Ask>,
    /// `tools.exec.node`: the default node binding.
    pub node: Option<String>,
    /// `tools.exec.env`: extra environment variable names requests may set.
    pub env: Vec<String>,
    /// `tools.exec.timeout`: the timeout when a request names none.
    pub timeout: Option<Duration>,
    /// `tools.exec.max_processes`: processes and threads one run may have at once.
    pub max_processes: Option<u64>,
    /// `tools.exec.max_memory`: bytes of memory one run may use.
    pub max_memory: Option<u64>,
    /// `tools.exec.run_in_approver`: commands a human is asked about are run by the
    /// approver itself, in its own context, when allowed (gateway and node hosts).
    pub run_in_approver: Option<bool>,
}

/// One `[[agents.list]]` entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentConfig {
    /// The agent id.
    pub id: String,
    /// Its `tools.exec` overrides.
    pub exec: ExecSettings,
    /// Its `sandbox.permission_mode` override.
    pub permission_mode: Option<PermissionMode>,
    /// Its `sandbox.exec_allowlist` (replaces the global list for this agent).
    pub exec_allowlist: Option<Vec<PathBuf>>,
    /// Its `sandbox.exec_allowlist_mode`.
    pub exec_allowlist_mode: Option<ExecAllowlistMode>,
    /// Its `sandbox.egress.allow`: replaces the global allow list for this agent.
    pub egress_allow: Option<Vec<crate::egress::DomainRule>>,
    /// Its `sandbox.egress.deny`: added to the global deny list for this agent (a global
    /// deny is never lifted).
    pub egress_deny: Option<Vec<crate::egress::DomainRule>>,
}

/// The whole config file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Global `tools.exec` defaults.
    pub exec: ExecSettings,
    /// `tools.exec.max_timeout`: the largest timeout a request may ask for (global only).
    pub max_timeout: Option<Duration>,
    /// Per-agent overrides.
    pub agents: Vec<AgentConfig>,
    /// The `[sandbox]` table: how `host = sandbox` runs commands.
    pub sandbox: SandboxSettings,
    /// The `[gateway]` table: bounds on the HTTP endpoint's MCP sessions.
    pub gateway: GatewaySettings,
    /// The `[audit]` table: the record of decisions, answers, runs and policy changes.
    pub audit: AuditSettings,
    /// The run limits when the file sets none — not read from the file: the host's
    /// composition fills them in from the machine (see [`RunLimits::for_host`]).
    pub default_limits: RunLimits,
}

/// A run's process and memory limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunLimits {
    /// Processes and threads alive at once.
    pub max_processes: u64,
    /// Bytes of memory.
    pub max_memory: u64,
}

/// Processes one run may have unless configured: far above what builds use (a `make
/// -j64` with compilers and their threads stays in the hundreds), far below what hurts
/// a host.
pub const DEFAULT_MAX_PROCESSES: u64 = 4096;
/// Memory one run may use unless configured, at most: 8 GiB, or half the host's memory
/// where that is less.
pub const DEFAULT_MAX_MEMORY: u64 = 8 << 30;

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits {
            max_processes: DEFAULT_MAX_PROCESSES,
            max_memory: DEFAULT_MAX_MEMORY,
        }
    }
}

impl RunLimits {
    /// The defaults for a host with `total_memory` bytes: half of it, at most
    /// [`DEFAULT_MAX_MEMORY`].
    pub fn for_host(total_memory: u64) -> Self {
        RunLimits {
            max_processes: DEFAULT_MAX_PROCESSES,
            max_memory: (total_memory / 2).clamp(256 << 20, DEFAULT_MAX_MEMORY),
        }
    }
}

/// `[gateway]`: the bounds on the gateway's listener, sessions and runs. `None` means the
/// built-in default (the gateway crate names each one).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GatewaySettings {
    /// `gateway.max_sessions_per_credential`.
    pub max_sessions_per_credential: Option<usize>,
    /// `gateway.session_idle_timeout`.
    pub session_idle_timeout: Option<Duration>,
    /// `gateway.max_streams_per_session`.
    pub max_streams_per_session: Option<usize>,
    /// `gateway.max_runs_per_agent`.
    pub max_runs_per_agent: Option<usize>,
    /// `gateway.max_connections`.
    pub max_connections: Option<usize>,
    /// `gateway.max_connections_per_peer`.
    pub max_connections_per_peer: Option<usize>,
    /// `gateway.header_read_timeout`.
    pub header_read_timeout: Option<Duration>,
    /// `gateway.connection_idle_timeout`.
    pub connection_idle_timeout: Option<Duration>,
    /// `gateway.body_read_timeout`.
    pub body_read_timeout: Option<Duration>,
    /// `gateway.keep_runs_after_session`: how long a run started with `yield` or
    /// `background` outlives the session that started it (at most
    /// [`MAX_KEEP_RUNS_AFTER_SESSION`]); `None`: it ends with the session.
    pub keep_runs_after_session: Option<Duration>,
}

/// The longest `gateway.keep_runs_after_session` accepted: a run nobody's session holds
/// is still bounded.
pub const MAX_KEEP_RUNS_AFTER_SESSION: Duration = Duration::from_secs(24 * 60 * 60);

/// The OS sandbox backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxBackend {
    /// bubblewrap + seccomp + Landlock (Linux).
    Bwrap,
    /// Exec into a long-running container.
    Container,
    /// `sandbox-exec` (macOS).
    Macos,
    /// No OS sandbox: an explicit operator choice that runs commands directly.
    Off,
}

impl SandboxBackend {
    /// The default for the platform Warden was built for.
    pub const fn for_this_platform() -> SandboxBackend {
        if cfg!(target_os = "macos") {
            SandboxBackend::Macos
        } else {
            SandboxBackend::Bwrap
        }
    }
}

impl std::str::FromStr for SandboxBackend {
    type Err = InvalidChoice;
    fn from_str(s: &str) -> Result<Self, InvalidChoice> {
        match s {
            "bwrap" => Ok(SandboxBackend::Bwrap),
            "container" => Ok(SandboxBackend::Container),
            "macos" => Ok(SandboxBackend::Macos),
            "off" => Ok(SandboxBackend::Off),
            _ => Err(InvalidChoice {
                what: "sandbox backend",
                value: s.to_owned(),
                expected: "one of bwrap, container, macos, off".to_owned(),
            }),
        }
    }
}

/// Who builds the Linux sandbox's namespaces and mounts (`sandbox.builder`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NamespaceBuilder {
    /// Warden's own builder where it can build the namespaces here, else bubblewrap (the
    /// default; both build the same sandbox).
    #[default]
    Auto,
    /// bubblewrap only.
    Bubblewrap,
    /// Warden's own builder only (in its helper binary: the same sandbox as bubblewrap's,
    /// faster to start; no bubblewrap needed).
    Warden,
}

impl std::str::FromStr for NamespaceBuilder {
    type Err = InvalidChoice;
    fn from_str(s: &str) -> Result<Self, InvalidChoice> {
        match s {
            "auto" => Ok(NamespaceBuilder::Auto),
            "bubblewrap" => Ok(NamespaceBuilder::Bubblewrap),
            "warden" => Ok(NamespaceBuilder::Warden),
            _ => Err(InvalidChoice {
                what: "sandbox builder",
                value: s.to_owned(),
                expected: "auto, bubblewrap or warden".to_owned(),
            }),
        }
    }
}

/// `sandbox.network`: what network a sandboxed command has. Written `false`, `true` or
/// `"proxy"` (and shown the same way).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SandboxNetwork {
    /// None (the default): a network namespace of its own with only loopback.
    #[default]
    Off,
    /// The host's own network.
    On,
    /// Only through Warden's egress proxy, to what `[sandbox.egress]` allows.
    Proxy,
}

impl serde::Serialize for SandboxNetwork {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            SandboxNetwork::Off => s.serialize_bool(false),
            SandboxNetwork::On => s.serialize_bool(true),
            SandboxNetwork::Proxy => s.serialize_str("proxy"),
        }
    }
}

impl std::fmt::Display for SandboxNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SandboxNetwork::Off => "false",
            SandboxNetwork::On => "true",
            SandboxNetwork::Proxy => "\"proxy\"",
        })
    }
}

/// `[sandbox]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxSettings {
    /// `sandbox.backend`.
    pub backend: SandboxBackend,
    /// `sandbox.builder` (the `bwrap` backend only).
    pub builder: NamespaceBuilder,
    /// `sandbox.network`: network access inside (default off).
    pub network: SandboxNetwork,
    /// `[sandbox.egress]`: with `network = "proxy"`, the hosts a sandboxed command may
    /// reach (`allow`) and never reaches (`deny`, which wins).
    pub egress: crate::egress::EgressRules,
    /// `sandbox.landlock`: `auto`, `required` or `off`.
    pub landlock: String,
    /// `sandbox.permission_mode` (agents may override; the built-in default is
    /// `approval`).
    pub permission_mode: Option<PermissionMode>,
    /// `sandbox.writable_paths`: read and write (default: the workspace).
    pub writable_paths: Vec<std::path::PathBuf>,
    /// `sandbox.readable_extra_paths`: read only.
    pub readable_extra_paths: Vec<std::path::PathBuf>,
    /// `sandbox.exec_allowlist`: the only files (and directories' contents) a sandboxed
    /// command may execute; `None`: no such restriction.
    pub exec_allowlist: Option<Vec<PathBuf>>,
    /// `sandbox.exec_allowlist_mode` (default `required`).
    pub exec_allowlist_mode: Option<ExecAllowlistMode>,
    /// `sandbox.container.engine` (`podman` or `docker`).
    pub container_engine: String,
    /// `sandbox.container.name`.
    pub container_name: Option<String>,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        SandboxSettings {
            backend: SandboxBackend::for_this_platform(),
            builder: NamespaceBuilder::default(),
            network: SandboxNetwork::Off,
            egress: crate::egress::EgressRules::default(),
            landlock: "auto".into(),
            permission_mode: None,
            writable_paths: Vec::new(),
            readable_extra_paths: Vec::new(),
            exec_allowlist: None,
            exec_allowlist_mode: None,
            container_engine: "podman".into(),
            container_name: None,
        }
    }
}

/// `[audit]`: the append-only record in `$WARDEN_HOME/audit/` (docs/audit.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuditSettings {
    /// `audit.enabled` (default true): keep the record.
    pub enabled: bool,
    /// `audit.required` (default false): every record is on disk before a result is
    /// returned, and a request that cannot be recorded is refused.
    pub required: bool,
    /// `audit.max_file_size` (default 64 MiB): the current file is rotated at this size.
    pub max_file_size: u64,
}

impl Default for AuditSettings {
    fn default() -> Self {
        AuditSettings {
            enabled: true,
            required: false,
            max_file_size: 64 * 1024 * 1024,
        }
    }
}

/// Timeout when neither the request nor the config names one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// Largest timeout when the config names no maximum.
pub const DEFAULT_MAX_TIMEOUT: Duration = Duration::from_secs(3600);

impl Config {
    /// Load `path` through `fs`. A missing file is the empty config (all defaults).
    pub fn load(fs: &dyn Fs, path: &Path) -> Result<Config, PolicyError> {
        match fs.read_to_string(path) {
            Ok(text) => Config::parse(&text, path),
            Err(e) if e.is_not_found() => Ok(Config::default()),
            Err(e) => Err(PolicyError::ConfigUnreadable {
                file: path.to_path_buf(),
                message: e.to_string(),
            }),
        }
    }

    /// Parse config text; `file` is only used in error messages.
    pub fn parse(text: &str, file: &Path) -> Result<Config, PolicyError> {
        let table: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| PolicyError::ConfigSyntax {
                    file: file.to_path_buf(),
                    message: e.to_string().trim_end().to_owned(),
                })?;
        let walker = Walker { file };
        walker.config(&table)
    }

    /// The overrides of agent `id`, if configured.
    pub fn agent(&self, id: &str) -> Option<&AgentConfig> {
        self.agents.iter().find(|a| a.id == id)
    }
}

/// The config file's name inside `WARDEN_HOME`.
pub const CONFIG_FILE: &str = "config.toml";

/// The default location of the config file inside `WARDEN_HOME`.
pub fn config_path(warden_home: &Path) -> PathBuf {
    warden_home.join(CONFIG_FILE)
}

#[cfg(test)]
mod tests;
