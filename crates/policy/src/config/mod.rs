//! `$WARDEN_HOME/config.toml`: global `tools.exec.*` defaults, per-agent overrides, the
//! `[sandbox]` and `[gateway]` tables — the types, and loading them (`walk.rs` checks
//! every key against the schema).

pub mod edit;
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
}

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

/// `[sandbox]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxSettings {
    /// `sandbox.backend`.
    pub backend: SandboxBackend,
    /// `sandbox.builder` (the `bwrap` backend only).
    pub builder: NamespaceBuilder,
    /// `sandbox.network`: network access inside (default off).
    pub network: bool,
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
            network: false,
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

/// The default location of the config file inside `WARDEN_HOME`.
pub fn config_path(warden_home: &Path) -> PathBuf {
    warden_home.join("config.toml")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, PolicyError> {
        Config::parse(text, Path::new("/home/u/.warden/config.toml"))
    }

    #[test]
    fn full_config_parses() {
        let c = parse(
            r#"
            [tools.exec]
            host = "gateway"
            security = "allowlist"
            ask = "on-miss"
            node = "build-box"
            env = ["RUST_LOG"]
            timeout = "2m"
            max_timeout = 600

            [[agents.list]]
            id = "coder"
            tools.exec.security = "full"
            tools.exec.ask = "always"
            "#,
        )
        .unwrap();
        assert_eq!(c.exec.host, Some(Host::Gateway));
        assert_eq!(c.exec.security, Some(Security::Allowlist));
        assert_eq!(c.exec.node.as_deref(), Some("build-box"));
        assert_eq!(c.exec.timeout, Some(Duration::from_secs(120)));
        assert_eq!(c.max_timeout, Some(Duration::from_secs(600)));
        let coder = c.agent("coder").unwrap();
        assert_eq!(coder.exec.security, Some(Security::Full));
        assert_eq!(coder.exec.ask, Some(Ask::Always));
        assert!(c.agent("other").is_none());
    }

    #[test]
    fn sandbox_settings_parse_and_are_validated() {
        let c = parse(
            "[sandbox]\nbackend = \"bwrap\"\nnetwork = true\nlandlock = \"required\"\npermission_mode = \"readonly\"\n\
             writable_paths = [\"/work\"]\nreadable_extra_paths = [\"/opt/data\"]\n\
             [[agents.list]]\nid = \"a\"\nsandbox.permission_mode = \"unrestricted\"\n",
        )
        .unwrap();
        assert_eq!(c.sandbox.backend, SandboxBackend::Bwrap);
        assert_eq!(c.sandbox.builder, NamespaceBuilder::Auto);
        for (value, builder) in [
            ("auto", NamespaceBuilder::Auto),
            ("warden", NamespaceBuilder::Warden),
            ("bubblewrap", NamespaceBuilder::Bubblewrap),
        ] {
            let c = parse(&format!("[sandbox]\nbuilder = \"{value}\"\n")).unwrap();
            assert_eq!(c.sandbox.builder, builder);
        }
        assert!(c.sandbox.network);
        assert_eq!(
            c.sandbox.writable_paths,
            vec![std::path::PathBuf::from("/work")]
        );
        assert_eq!(c.sandbox.permission_mode, Some(PermissionMode::Readonly));
        assert_eq!(
            c.agent("a").and_then(|a| a.permission_mode),
            Some(PermissionMode::Unrestricted)
        );
        for (text, expected) in [
            ("[sandbox]\nbackend = \"vm\"", "`sandbox.backend`"),
            (
                "[sandbox]\nbuilder = \"bwrap\"",
                "auto, bubblewrap or warden",
            ),
            ("[sandbox]\nwritable_paths = [\"relative\"]", "absolute"),
            ("[sandbox]\nwritable_paths = [\"/a/../etc\"]", "`..`"),
            ("[sandbox]\nnetwork = \"yes\"", "true or false"),
            (
                "[sandbox]\nbackend = \"container\"",
                "sandbox.container.name",
            ),
            ("[sandbox]\ncontainer.engine = \"lxc\"", "podman or docker"),
            ("[sandbox]\nwat = 1", "unknown key `sandbox.wat`"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn gateway_session_bounds_parse_and_are_validated() {
        let c = parse(
            "[gateway]\nmax_sessions_per_credential = 4\nsession_idle_timeout = \"90s\"\n\
             max_streams_per_session = 2\nmax_runs_per_agent = 3\nmax_connections = 100\n\
             max_connections_per_peer = 50\nheader_read_timeout = \"500ms\"\n\
             connection_idle_timeout = 20\nbody_read_timeout = \"1m\"\n",
        )
        .unwrap();
        assert_eq!(c.gateway.max_sessions_per_credential, Some(4));
        assert_eq!(
            c.gateway.session_idle_timeout,
            Some(Duration::from_secs(90))
        );
        assert_eq!(c.gateway.max_streams_per_session, Some(2));
        assert_eq!(c.gateway.max_runs_per_agent, Some(3));
        assert_eq!(c.gateway.max_connections, Some(100));
        assert_eq!(c.gateway.max_connections_per_peer, Some(50));
        assert_eq!(
            c.gateway.header_read_timeout,
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            c.gateway.connection_idle_timeout,
            Some(Duration::from_secs(20))
        );
        assert_eq!(c.gateway.body_read_timeout, Some(Duration::from_secs(60)));
        for (bad, key) in [
            (
                "max_sessions_per_credential = 0",
                "gateway.max_sessions_per_credential",
            ),
            (
                "max_sessions_per_credential = \"many\"",
                "gateway.max_sessions_per_credential",
            ),
            (
                "session_idle_timeout = \"soon\"",
                "gateway.session_idle_timeout",
            ),
            ("sessions = 3", "gateway.sessions"),
            ("max_connections = 0", "gateway.max_connections"),
            ("max_connections = 1000000", "gateway.max_connections"),
            ("max_runs_per_agent = -1", "gateway.max_runs_per_agent"),
            ("header_read_timeout = 0", "gateway.header_read_timeout"),
            ("body_read_timeout = \"never\"", "gateway.body_read_timeout"),
        ] {
            let err = parse(&format!("[gateway]\n{bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{bad}: {err}");
        }
    }

    #[test]
    fn empty_config_is_all_defaults() {
        assert_eq!(parse("").unwrap(), Config::default());
    }

    #[test]
    fn errors_name_the_key_the_value_and_the_file() {
        let cases = [
            (
                "[tools.exec]\nhots = \"gateway\"",
                "unknown key `tools.exec.hots`",
            ),
            (
                "[tools.exec]\nsecurity = \"maybe\"",
                "invalid value \"maybe\" for `tools.exec.security`: expected one of deny, allowlist, full",
            ),
            (
                "[tools.exec]\nask = 3",
                "invalid value 3 for `tools.exec.ask`: expected a string",
            ),
            ("[tool.exec]\nask = \"off\"", "unknown key `tool`"),
            (
                "[[agents.list]]\nid = \"a\"\ntools.exec.host = \"moon\"",
                "`agents.list[0].tools.exec.host`",
            ),
            (
                "[[agents.list]]\ntools.exec.host = \"gateway\"",
                "agents.list[0].id",
            ),
            (
                "[[agents.list]]\nid = \"a\"\n[[agents.list]]\nid = \"a\"",
                "agent ids must be unique",
            ),
            (
                "[[agents.list]]\nid = \"a\"\ncolour = \"red\"",
                "unknown key `agents.list[0].colour`",
            ),
            (
                "[[agents.list]]\nid = \"a\"\ntools.exec.max_timeout = \"5s\"",
                "unknown key `agents.list[0].tools.exec.max_timeout`",
            ),
            (
                "[[agents.list]]\nid = \"a\"\ntools.exec.timeout = \"2h\"",
                "`agents.list[0].tools.exec.timeout`",
            ),
            ("[tools.exec]\nenv = [\"LD_PRELOAD\"]", "`tools.exec.env`"),
            ("[tools.exec]\ntimeout = \"soon\"", "`tools.exec.timeout`"),
            (
                "[tools.exec]\ntimeout = \"10m\"\nmax_timeout = \"1m\"",
                "at most tools.exec.max_timeout",
            ),
            ("[tools.exec\n", "config.toml"),
        ];
        for (text, expected) in cases {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text:?}: {err}");
            assert!(
                err.contains("/home/u/.warden/config.toml"),
                "{text:?}: {err}"
            );
        }
    }

    #[test]
    fn run_in_approver_is_read_at_both_levels_and_must_be_a_bool() {
        let c = parse(
            "[tools.exec]\nrun_in_approver = true\n[[agents.list]]\nid = \"a\"\ntools.exec.run_in_approver = false\n",
        )
        .unwrap();
        assert_eq!(c.exec.run_in_approver, Some(true));
        assert_eq!(
            c.agent("a").and_then(|a| a.exec.run_in_approver),
            Some(false)
        );
        let err = parse("[tools.exec]\nrun_in_approver = \"yes\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("tools.exec.run_in_approver") && err.contains("true or false"),
            "{err}"
        );
    }

    #[test]
    fn run_limits_are_read_at_both_levels_and_validated() {
        let c = parse(
            "[tools.exec]\nmax_processes = 512\nmax_memory = \"2GiB\"\n[[agents.list]]\nid = \"a\"\ntools.exec.max_memory = 268435456\n",
        )
        .unwrap();
        assert_eq!(c.exec.max_processes, Some(512));
        assert_eq!(c.exec.max_memory, Some(2 << 30));
        assert_eq!(
            c.agent("a").and_then(|a| a.exec.max_memory),
            Some(256 << 20)
        );
        for (bad, key) in [
            ("max_processes = 3", "tools.exec.max_processes"),
            ("max_processes = \"many\"", "tools.exec.max_processes"),
            ("max_memory = \"lots\"", "tools.exec.max_memory"),
            ("max_memory = \"1MiB\"", "tools.exec.max_memory"),
            ("max_memory = \"3 parsecs\"", "tools.exec.max_memory"),
        ] {
            let err = parse(&format!("[tools.exec]\n{bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{bad}: {err}");
        }
        let small = RunLimits::for_host(1 << 30);
        assert_eq!(small.max_memory, 512 << 20);
        assert_eq!(RunLimits::for_host(64 << 30).max_memory, DEFAULT_MAX_MEMORY);
    }

    #[test]
    fn timeouts_are_read_at_both_levels() {
        let c = parse(
            "[tools.exec]\ntimeout = \"1m\"\nmax_timeout = \"10m\"\n[[agents.list]]\nid = \"a\"\ntools.exec.timeout = \"2m\"",
        )
        .unwrap();
        assert_eq!(c.exec.timeout, Some(Duration::from_secs(60)));
        assert_eq!(c.max_timeout, Some(Duration::from_secs(600)));
        assert_eq!(
            c.agent("a").and_then(|a| a.exec.timeout),
            Some(Duration::from_secs(120))
        );
    }

    #[test]
    fn loads_through_fs_and_treats_a_missing_file_as_defaults() {
        let fs = caps::MemoryFs::new();
        assert_eq!(
            Config::load(&fs, Path::new("/h/config.toml")).unwrap(),
            Config::default()
        );
        fs.create_dir_all(Path::new("/h"), 0o700).unwrap();
        fs.write(
            Path::new("/h/config.toml"),
            b"[tools.exec]\nhost = \"node\"",
            caps::WriteOptions::default(),
        )
        .unwrap();
        assert_eq!(
            Config::load(&fs, Path::new("/h/config.toml"))
                .unwrap()
                .exec
                .host,
            Some(Host::Node)
        );
    }
}
