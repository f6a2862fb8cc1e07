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
                        other => return Err(self.unknown(format!("{prefix}.{other}"))),
                    }
                }
                agents.push(agent);
            }
        }
        Ok(agents)
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
