//! `$WARDEN_HOME/config.toml`: global `tools.exec.*` defaults and per-agent overrides.
//!
//! The file is walked against a fixed schema so that an unknown key or a bad value is an
//! error naming the key, the value and the file — never silently ignored.

use std::path::{Path, PathBuf};
use std::time::Duration;

use caps::Fs;

use crate::PolicyError;
use crate::env::check_extra_env_name;
use crate::modes::{Ask, Host, Security};

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
}

/// The whole config file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Global `tools.exec` defaults.
    pub exec: ExecSettings,
    /// `tools.exec.timeout`: the timeout when a request names none.
    pub timeout: Option<Duration>,
    /// `tools.exec.max_timeout`: the largest timeout a request may ask for.
    pub max_timeout: Option<Duration>,
    /// Per-agent overrides.
    pub agents: Vec<AgentConfig>,
    /// The `[sandbox]` table: how `host = sandbox` runs commands.
    pub sandbox: SandboxSettings,
    /// The `[gateway]` table: bounds on the HTTP endpoint's MCP sessions.
    pub gateway: GatewaySettings,
}

/// `[gateway]`: how many MCP sessions one credential may hold and how long an idle one
/// lives. `None` means the built-in default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GatewaySettings {
    /// `gateway.max_sessions_per_credential`.
    pub max_sessions_per_credential: Option<usize>,
    /// `gateway.session_idle_timeout`.
    pub session_idle_timeout: Option<Duration>,
}

/// How commands are gated on the sandbox host (product spec §6.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PermissionMode {
    /// Read-only sandbox; write tools refused.
    Readonly,
    /// Read-only first; on a permission denial ask, and retry once writable if approved.
    #[default]
    Approval,
    /// No permission gate (the sandbox still applies).
    Unrestricted,
}

impl std::str::FromStr for PermissionMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "readonly" => Ok(PermissionMode::Readonly),
            "approval" => Ok(PermissionMode::Approval),
            "unrestricted" => Ok(PermissionMode::Unrestricted),
            _ => Err(format!(
                "invalid permission mode {s:?}: expected one of readonly, approval, unrestricted"
            )),
        }
    }
}

impl std::fmt::Display for PermissionMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PermissionMode::Readonly => "readonly",
            PermissionMode::Approval => "approval",
            PermissionMode::Unrestricted => "unrestricted",
        })
    }
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
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "bwrap" => Ok(SandboxBackend::Bwrap),
            "container" => Ok(SandboxBackend::Container),
            "macos" => Ok(SandboxBackend::Macos),
            "off" => Ok(SandboxBackend::Off),
            _ => Err(format!(
                "invalid sandbox backend {s:?}: expected one of bwrap, container, macos, off"
            )),
        }
    }
}

/// `[sandbox]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxSettings {
    /// `sandbox.backend`.
    pub backend: SandboxBackend,
    /// `sandbox.network`: network access inside (default off).
    pub network: bool,
    /// `sandbox.landlock`: `auto`, `required` or `off`.
    pub landlock: String,
    /// `sandbox.permission_mode` (agents may override).
    pub permission_mode: PermissionMode,
    /// `sandbox.writable_paths`: read and write (default: the workspace).
    pub writable_paths: Vec<std::path::PathBuf>,
    /// `sandbox.readable_extra_paths`: read only.
    pub readable_extra_paths: Vec<std::path::PathBuf>,
    /// `sandbox.container.engine` (`podman` or `docker`).
    pub container_engine: String,
    /// `sandbox.container.name`.
    pub container_name: Option<String>,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        SandboxSettings {
            backend: SandboxBackend::for_this_platform(),
            network: false,
            landlock: "auto".into(),
            permission_mode: PermissionMode::default(),
            writable_paths: Vec::new(),
            readable_extra_paths: Vec::new(),
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

    /// The effective timeout for a request that asked for `requested`: the config's (or
    /// the built-in) default when absent, and never above the maximum.
    pub fn effective_timeout(&self, requested: Option<Duration>) -> Result<Duration, String> {
        let max = self.max_timeout.unwrap_or(DEFAULT_MAX_TIMEOUT);
        let timeout = requested.unwrap_or(self.timeout.unwrap_or(DEFAULT_TIMEOUT).min(max));
        if timeout.is_zero() {
            return Err("the timeout must be greater than zero".into());
        }
        if timeout > max {
            return Err(format!(
                "the timeout {} exceeds the maximum {} (tools.exec.max_timeout)",
                humantime::format_duration(timeout),
                humantime::format_duration(max)
            ));
        }
        Ok(timeout)
    }
}

struct Walker<'a> {
    file: &'a Path,
}

impl Walker<'_> {
    fn unknown(&self, key: String) -> PolicyError {
        PolicyError::UnknownKey {
            file: self.file.to_path_buf(),
            key,
        }
    }

    fn invalid(&self, key: &str, value: &toml::Value, expected: impl Into<String>) -> PolicyError {
        PolicyError::InvalidValue {
            file: self.file.to_path_buf(),
            key: key.to_owned(),
            value: value.to_string(),
            expected: expected.into(),
        }
    }

    fn table<'t>(&self, key: &str, value: &'t toml::Value) -> Result<&'t toml::Table, PolicyError> {
        value
            .as_table()
            .ok_or_else(|| self.invalid(key, value, "expected a table"))
    }

    fn string<'t>(&self, key: &str, value: &'t toml::Value) -> Result<&'t str, PolicyError> {
        value
            .as_str()
            .ok_or_else(|| self.invalid(key, value, "expected a string"))
    }

    fn parsed<T: std::str::FromStr<Err = String>>(
        &self,
        key: &str,
        value: &toml::Value,
    ) -> Result<T, PolicyError> {
        let text = self.string(key, value)?;
        text.parse::<T>().map_err(|e| {
            // Strip the "invalid X "value": " prefix; the error already names both.
            let expected = e
                .split_once(": ")
                .map(|(_, rest)| rest)
                .unwrap_or(&e)
                .to_owned();
            self.invalid(key, value, expected)
        })
    }

    fn duration(&self, key: &str, value: &toml::Value) -> Result<Duration, PolicyError> {
        let d = match value {
            toml::Value::Integer(secs) if *secs > 0 => Duration::from_secs(*secs as u64),
            toml::Value::String(s) => humantime::parse_duration(s).map_err(|e| {
                self.invalid(
                    key,
                    value,
                    format!("expected a duration like \"30s\" or \"5m\" ({e})"),
                )
            })?,
            _ => {
                return Err(self.invalid(key, value, "expected a duration like \"30s\" or \"5m\""));
            }
        };
        if d.is_zero() {
            return Err(self.invalid(key, value, "expected a duration greater than zero"));
        }
        Ok(d)
    }

    fn config(&self, table: &toml::Table) -> Result<Config, PolicyError> {
        let mut config = Config::default();
        for (key, value) in table {
            match key.as_str() {
                "tools" => {
                    let (exec, timeout, max) = self.tools("tools", value, true)?;
                    config.exec = exec;
                    config.timeout = timeout;
                    config.max_timeout = max;
                }
                "agents" => config.agents = self.agents(value)?,
                "sandbox" => config.sandbox = self.sandbox(value)?,
                "gateway" => config.gateway = self.gateway(value)?,
                other => return Err(self.unknown(other.to_owned())),
            }
        }
        if let (Some(t), Some(m)) = (config.timeout, config.max_timeout)
            && t > m
        {
            return Err(PolicyError::InvalidValue {
                file: self.file.to_path_buf(),
                key: "tools.exec.timeout".into(),
                value: humantime::format_duration(t).to_string(),
                expected: format!(
                    "at most tools.exec.max_timeout ({})",
                    humantime::format_duration(m)
                ),
            });
        }
        Ok(config)
    }

    /// A `tools` table; timeouts are only accepted at the global level.
    fn tools(
        &self,
        prefix: &str,
        value: &toml::Value,
        global: bool,
    ) -> Result<(ExecSettings, Option<Duration>, Option<Duration>), PolicyError> {
        let mut settings = ExecSettings::default();
        let (mut timeout, mut max) = (None, None);
        for (key, value) in self.table(prefix, value)? {
            let exec_prefix = format!("{prefix}.{key}");
            if key != "exec" {
                return Err(self.unknown(exec_prefix));
            }
            for (key, value) in self.table(&exec_prefix, value)? {
                let full = format!("{exec_prefix}.{key}");
                match key.as_str() {
                    "host" => settings.host = Some(self.parsed(&full, value)?),
                    "security" => settings.security = Some(self.parsed(&full, value)?),
                    "ask" => settings.ask = Some(self.parsed(&full, value)?),
                    "node" => {
                        let node = self.string(&full, value)?;
                        if node.trim().is_empty() {
                            return Err(self.invalid(&full, value, "expected a node id or name"));
                        }
                        settings.node = Some(node.to_owned());
                    }
                    "env" => {
                        let list = value.as_array().ok_or_else(|| {
                            self.invalid(&full, value, "expected a list of variable names")
                        })?;
                        for item in list {
                            let name = self.string(&full, item)?;
                            check_extra_env_name(name)
                                .map_err(|why| self.invalid(&full, item, why))?;
                            settings.env.push(name.to_owned());
                        }
                    }
                    "timeout" if global => timeout = Some(self.duration(&full, value)?),
                    "max_timeout" if global => max = Some(self.duration(&full, value)?),
                    _ => return Err(self.unknown(full)),
                }
            }
        }
        Ok((settings, timeout, max))
    }

    fn agents(&self, value: &toml::Value) -> Result<Vec<AgentConfig>, PolicyError> {
        let mut agents: Vec<AgentConfig> = Vec::new();
        for (key, value) in self.table("agents", value)? {
            if key != "list" {
                return Err(self.unknown(format!("agents.{key}")));
            }
            let list = value.as_array().ok_or_else(|| {
                self.invalid("agents.list", value, "expected [[agents.list]] entries")
            })?;
            for (i, entry) in list.iter().enumerate() {
                let prefix = format!("agents.list[{i}]");
                let table = self.table(&prefix, entry)?;
                let mut agent = AgentConfig::default();
                let id_value = table.get("id").ok_or_else(|| PolicyError::InvalidValue {
                    file: self.file.to_path_buf(),
                    key: format!("{prefix}.id"),
                    value: "(missing)".into(),
                    expected: "every agent needs an id".into(),
                })?;
                agent.id = self.string(&format!("{prefix}.id"), id_value)?.to_owned();
                if agent.id.trim().is_empty() || agent.id.chars().any(char::is_control) {
                    return Err(self.invalid(
                        &format!("{prefix}.id"),
                        id_value,
                        "expected a non-empty id without control characters",
                    ));
                }
                if agents.iter().any(|a| a.id == agent.id) {
                    return Err(self.invalid(
                        &format!("{prefix}.id"),
                        id_value,
                        "agent ids must be unique",
                    ));
                }
                for (key, value) in table {
                    match key.as_str() {
                        "id" => {}
                        "tools" => {
                            agent.exec = self.tools(&format!("{prefix}.tools"), value, false)?.0
                        }
                        "sandbox" => {
                            let sprefix = format!("{prefix}.sandbox");
                            for (k, v) in self.table(&sprefix, value)? {
                                let full = format!("{sprefix}.{k}");
                                match k.as_str() {
                                    "permission_mode" => {
                                        agent.permission_mode = Some(self.parsed(&full, v)?)
                                    }
                                    _ => return Err(self.unknown(full)),
                                }
                            }
                        }
                        other => return Err(self.unknown(format!("{prefix}.{other}"))),
                    }
                }
                agents.push(agent);
            }
        }
        Ok(agents)
    }
}

impl Walker<'_> {
    fn paths(
        &self,
        key: &str,
        value: &toml::Value,
    ) -> Result<Vec<std::path::PathBuf>, PolicyError> {
        let list = value
            .as_array()
            .ok_or_else(|| self.invalid(key, value, "expected a list of absolute paths"))?;
        let mut out = Vec::new();
        for item in list {
            let text = self.string(key, item)?;
            let path = std::path::PathBuf::from(text);
            if !path.is_absolute() || text.contains('\0') {
                return Err(self.invalid(key, item, "expected an absolute path"));
            }
            if path
                .components()
                .any(|c| c == std::path::Component::ParentDir)
            {
                return Err(self.invalid(key, item, "`..` is not allowed in authorized paths"));
            }
            out.push(path);
        }
        Ok(out)
    }

    fn gateway(&self, value: &toml::Value) -> Result<GatewaySettings, PolicyError> {
        let mut g = GatewaySettings::default();
        for (key, value) in self.table("gateway", value)? {
            let full = format!("gateway.{key}");
            match key.as_str() {
                "max_sessions_per_credential" => {
                    let n = value
                        .as_integer()
                        .filter(|n| (1..=100_000).contains(n))
                        .ok_or_else(|| {
                            self.invalid(&full, value, "expected a number from 1 to 100000")
                        })?;
                    g.max_sessions_per_credential = Some(n as usize);
                }
                "session_idle_timeout" => {
                    g.session_idle_timeout = Some(self.duration(&full, value)?)
                }
                _ => return Err(self.unknown(full)),
            }
        }
        Ok(g)
    }

    fn sandbox(&self, value: &toml::Value) -> Result<SandboxSettings, PolicyError> {
        let mut s = SandboxSettings::default();
        for (key, value) in self.table("sandbox", value)? {
            let full = format!("sandbox.{key}");
            match key.as_str() {
                "backend" => s.backend = self.parsed(&full, value)?,
                "network" => {
                    s.network = value
                        .as_bool()
                        .ok_or_else(|| self.invalid(&full, value, "expected true or false"))?
                }
                "landlock" => {
                    let mode = self.string(&full, value)?;
                    if !["auto", "required", "off"].contains(&mode) {
                        return Err(self.invalid(
                            &full,
                            value,
                            "expected one of auto, required, off",
                        ));
                    }
                    s.landlock = mode.to_owned();
                }
                "permission_mode" => s.permission_mode = self.parsed(&full, value)?,
                "writable_paths" => s.writable_paths = self.paths(&full, value)?,
                "readable_extra_paths" => s.readable_extra_paths = self.paths(&full, value)?,
                "container" => {
                    for (k, v) in self.table(&full, value)? {
                        let key = format!("{full}.{k}");
                        match k.as_str() {
                            "engine" => {
                                let e = self.string(&key, v)?;
                                if !["podman", "docker"].contains(&e) {
                                    return Err(self.invalid(&key, v, "expected podman or docker"));
                                }
                                s.container_engine = e.to_owned();
                            }
                            "name" => s.container_name = Some(self.string(&key, v)?.to_owned()),
                            _ => return Err(self.unknown(key)),
                        }
                    }
                }
                _ => return Err(self.unknown(full)),
            }
        }
        if s.backend == SandboxBackend::Container && s.container_name.is_none() {
            return Err(PolicyError::InvalidValue {
                file: self.file.to_path_buf(),
                key: "sandbox.container.name".into(),
                value: "(missing)".into(),
                expected: "the container backend needs the name of a running container".into(),
            });
        }
        Ok(s)
    }
}

impl Config {
    /// The permission mode for `agent` (its override, else the global one).
    pub fn permission_mode(&self, agent: Option<&str>) -> PermissionMode {
        agent
            .and_then(|a| self.agent(a))
            .and_then(|a| a.permission_mode)
            .unwrap_or(self.sandbox.permission_mode)
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
        assert_eq!(c.timeout, Some(Duration::from_secs(120)));
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
        assert!(c.sandbox.network);
        assert_eq!(
            c.sandbox.writable_paths,
            vec![std::path::PathBuf::from("/work")]
        );
        assert_eq!(c.permission_mode(Some("a")), PermissionMode::Unrestricted);
        assert_eq!(c.permission_mode(Some("b")), PermissionMode::Readonly);
        for (text, expected) in [
            ("[sandbox]\nbackend = \"vm\"", "`sandbox.backend`"),
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
        let c =
            parse("[gateway]\nmax_sessions_per_credential = 4\nsession_idle_timeout = \"90s\"\n")
                .unwrap();
        assert_eq!(c.gateway.max_sessions_per_credential, Some(4));
        assert_eq!(
            c.gateway.session_idle_timeout,
            Some(Duration::from_secs(90))
        );
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
                "[[agents.list]]\nid = \"a\"\ntools.exec.timeout = \"5s\"",
                "unknown key `agents.list[0].tools.exec.timeout`",
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
    fn timeouts_default_and_are_capped() {
        let c = parse("[tools.exec]\ntimeout = \"1m\"\nmax_timeout = \"10m\"").unwrap();
        assert_eq!(c.effective_timeout(None).unwrap(), Duration::from_secs(60));
        assert_eq!(
            c.effective_timeout(Some(Duration::from_secs(5))).unwrap(),
            Duration::from_secs(5)
        );
        assert!(
            c.effective_timeout(Some(Duration::from_secs(3600)))
                .is_err()
        );
        assert!(c.effective_timeout(Some(Duration::ZERO)).is_err());
        assert_eq!(
            Config::default().effective_timeout(None).unwrap(),
            DEFAULT_TIMEOUT
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
