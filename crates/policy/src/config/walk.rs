//! The config file's schema walker: every key of `config.toml` is checked against the
//! schema, so an unknown key or a bad value is an error naming the key, the value and the
//! file — never silently ignored.

use std::path::Path;
use std::time::Duration;

use super::{
    AgentConfig, AuditSettings, Config, ExecSettings, GatewaySettings, SandboxBackend,
    SandboxNetwork, SandboxSettings,
};
use crate::PolicyError;
use crate::env::check_extra_env_name;
use crate::modes::InvalidChoice;

/// The smallest process limit accepted: below it a shell pipeline cannot start (and the
/// spawning thread itself counts while a run starts on cgroup v2).
const MIN_PROCESSES: i64 = 32;
/// The smallest memory limit accepted, in MiB.
const MIN_MEMORY_MIB: u64 = 16;

/// `"512MiB"`, `"4 GiB"`, `"2G"`, `"1048576"` → bytes.
fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().ok()?;
    let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return None,
    };
    n.checked_mul(multiplier)
}

pub(super) struct Walker<'a> {
    pub(super) file: &'a Path,
}

/// The keys each table takes (what a misspelled one is compared with).
const TOP_KEYS: &[&str] = &["tools", "agents", "sandbox", "gateway", "audit"];
const AUDIT_KEYS: &[&str] = &["enabled", "required", "max_file_size"];
const GLOBAL_EXEC_KEYS: &[&str] = &[
    "host",
    "security",
    "ask",
    "node",
    "env",
    "timeout",
    "max_timeout",
    "max_processes",
    "max_memory",
    "run_in_approver",
];
const AGENT_EXEC_KEYS: &[&str] = &[
    "host",
    "security",
    "ask",
    "node",
    "env",
    "timeout",
    "max_processes",
    "max_memory",
    "run_in_approver",
];
const AGENT_KEYS: &[&str] = &["id", "tools", "sandbox"];
const AGENT_SANDBOX_KEYS: &[&str] = &[
    "permission_mode",
    "exec_allowlist",
    "exec_allowlist_mode",
    "egress",
];
const GATEWAY_KEYS: &[&str] = &[
    "max_sessions_per_credential",
    "max_streams_per_session",
    "max_runs_per_agent",
    "max_connections",
    "max_connections_per_peer",
    "session_idle_timeout",
    "header_read_timeout",
    "connection_idle_timeout",
    "body_read_timeout",
    "keep_runs_after_session",
];
const SANDBOX_KEYS: &[&str] = &[
    "backend",
    "builder",
    "network",
    "landlock",
    "permission_mode",
    "writable_paths",
    "readable_extra_paths",
    "exec_allowlist",
    "exec_allowlist_mode",
    "container",
    "egress",
];
const CONTAINER_KEYS: &[&str] = &["engine", "name"];
const EGRESS_KEYS: &[&str] = &["allow", "deny"];

/// What to say after "unknown key `KEY`": the known key it is closest to, if one is close
/// (a typo: a few letters off, or the same words in another case or with `-`), else the
/// keys its table takes.
fn did_you_mean(key: &str, known: &[&str]) -> String {
    let (prefix, last) = match key.rsplit_once('.') {
        Some((prefix, last)) => (format!("{prefix}."), last),
        None => (String::new(), key),
    };
    let normalised = last.to_ascii_lowercase().replace('-', "_");
    let closest = known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(&normalised, k), *k))
        .min();
    match closest {
        Some((distance, k)) if distance <= (k.len() / 3).max(1) => {
            format!(": did you mean `{prefix}{k}`?")
        }
        _ if prefix.is_empty() => format!(": the file's tables are {}", known.join(", ")),
        _ => format!(
            ": `{}` takes {}",
            prefix.trim_end_matches('.'),
            known.join(", ")
        ),
    }
}

impl Walker<'_> {
    /// `key` is not one of `known`, the keys its table takes.
    fn unknown_of(&self, key: String, known: &[&str]) -> PolicyError {
        PolicyError::UnknownKey {
            file: self.file.to_path_buf(),
            hint: did_you_mean(&key, known),
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

    fn parsed<T: std::str::FromStr<Err = InvalidChoice>>(
        &self,
        key: &str,
        value: &toml::Value,
    ) -> Result<T, PolicyError> {
        let text = self.string(key, value)?;
        // Only what is expected: the message already names the key and the value.
        text.parse::<T>()
            .map_err(|e| self.invalid(key, value, format!("expected {}", e.expected)))
    }

    /// A memory size: bytes as an integer, or text like `"512MiB"`, `"4 GiB"`, `"2G"`.
    fn size(&self, key: &str, value: &toml::Value) -> Result<u64, PolicyError> {
        let expected = || {
            format!("expected a size like \"512MiB\" or \"4GiB\", at least {MIN_MEMORY_MIB} MiB")
        };
        let bytes = match value {
            toml::Value::Integer(n) if *n > 0 => Some(*n as u64),
            toml::Value::String(s) => parse_size(s),
            _ => None,
        }
        .ok_or_else(|| self.invalid(key, value, expected()))?;
        if bytes < MIN_MEMORY_MIB * 1024 * 1024 {
            return Err(self.invalid(key, value, expected()));
        }
        Ok(bytes)
    }

    fn duration(&self, key: &str, value: &toml::Value) -> Result<Duration, PolicyError> {
        let d = match value {
            toml::Value::Integer(secs) if *secs > 0 => Duration::from_secs(*secs as u64),
            // A number of seconds, as a string, reads as the number does.
            toml::Value::String(s) if s.trim().parse::<u64>().is_ok() => {
                Duration::from_secs(s.trim().parse::<u64>().unwrap_or_default())
            }
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

    pub(super) fn config(&self, table: &toml::Table) -> Result<Config, PolicyError> {
        let mut config = Config::default();
        for (key, value) in table {
            match key.as_str() {
                "tools" => {
                    let (exec, max) = self.tools("tools", value, true)?;
                    config.exec = exec;
                    config.max_timeout = max;
                }
                "agents" => config.agents = self.agents(value)?,
                "sandbox" => config.sandbox = self.sandbox(value)?,
                "gateway" => config.gateway = self.gateway(value)?,
                "audit" => config.audit = self.audit(value)?,
                other => return Err(self.unknown_of(other.to_owned(), TOP_KEYS)),
            }
        }
        // A configured timeout above the maximum could never be used: say so now.
        let max = config.max_timeout.unwrap_or(super::DEFAULT_MAX_TIMEOUT);
        let levels = std::iter::once(("tools.exec.timeout".to_owned(), config.exec.timeout)).chain(
            config.agents.iter().enumerate().map(|(i, a)| {
                (
                    format!("agents.list[{i}].tools.exec.timeout"),
                    a.exec.timeout,
                )
            }),
        );
        for (key, timeout) in levels {
            if let Some(t) = timeout.filter(|t| *t > max) {
                return Err(PolicyError::InvalidValue {
                    file: self.file.to_path_buf(),
                    key,
                    value: humantime::format_duration(t).to_string(),
                    expected: format!(
                        "at most tools.exec.max_timeout ({})",
                        humantime::format_duration(max)
                    ),
                });
            }
        }
        Ok(config)
    }

    /// A `tools` table; timeouts are only accepted at the global level.
    fn tools(
        &self,
        prefix: &str,
        value: &toml::Value,
        global: bool,
    ) -> Result<(ExecSettings, Option<Duration>), PolicyError> {
        let mut settings = ExecSettings::default();
        let mut max = None;
        for (key, value) in self.table(prefix, value)? {
            let exec_prefix = format!("{prefix}.{key}");
            if key != "exec" {
                return Err(self.unknown_of(exec_prefix, &["exec"]));
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
                                .map_err(|why| self.invalid(&full, item, why.to_string()))?;
                            settings.env.push(name.to_owned());
                        }
                    }
                    "timeout" => settings.timeout = Some(self.duration(&full, value)?),
                    "max_timeout" if global => max = Some(self.duration(&full, value)?),
                    "max_processes" => {
                        let n = value
                            .as_integer()
                            .filter(|n| (MIN_PROCESSES..=1_000_000).contains(n))
                            .ok_or_else(|| {
                                self.invalid(
                                    &full,
                                    value,
                                    format!("expected a number of processes from {MIN_PROCESSES} to 1000000"),
                                )
                            })?;
                        settings.max_processes = Some(n as u64);
                    }
                    "max_memory" => settings.max_memory = Some(self.size(&full, value)?),
                    "run_in_approver" => {
                        settings.run_in_approver =
                            Some(value.as_bool().ok_or_else(|| {
                                self.invalid(&full, value, "expected true or false")
                            })?)
                    }
                    _ => {
                        return Err(self.unknown_of(
                            full,
                            if global {
                                GLOBAL_EXEC_KEYS
                            } else {
                                AGENT_EXEC_KEYS
                            },
                        ));
                    }
                }
            }
        }
        Ok((settings, max))
    }

    fn agents(&self, value: &toml::Value) -> Result<Vec<AgentConfig>, PolicyError> {
        let mut agents: Vec<AgentConfig> = Vec::new();
        for (key, value) in self.table("agents", value)? {
            if key != "list" {
                // `[agents.coder]` is how other tools write it; here each agent is an
                // entry of a list.
                return Err(PolicyError::UnknownKey {
                    file: self.file.to_path_buf(),
                    key: format!("agents.{key}"),
                    hint: format!(
                        ": agents are entries of a list — write `[[agents.list]]` with `id = {}` on the next line, then that agent's settings",
                        toml::Value::String(key.clone())
                    ),
                });
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
                                    "exec_allowlist" => {
                                        agent.exec_allowlist = Some(self.exec_paths(&full, v)?)
                                    }
                                    "exec_allowlist_mode" => {
                                        agent.exec_allowlist_mode = Some(self.parsed(&full, v)?)
                                    }
                                    "egress" => {
                                        let (allow, deny) = self.egress_rules(&full, v)?;
                                        agent.egress_allow = allow;
                                        agent.egress_deny = deny;
                                    }
                                    _ => return Err(self.unknown_of(full, AGENT_SANDBOX_KEYS)),
                                }
                            }
                        }
                        other => {
                            return Err(self.unknown_of(format!("{prefix}.{other}"), AGENT_KEYS));
                        }
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

    /// An exec allowlist: absolute paths of programs or of directories whose contents may
    /// run. Empty lists and `/` are refused: the one would let nothing run, the other
    /// everything — neither is what an operator who writes the key means.
    fn exec_paths(
        &self,
        key: &str,
        value: &toml::Value,
    ) -> Result<Vec<std::path::PathBuf>, PolicyError> {
        let expected = "expected a list of absolute paths of programs or directories";
        let list = value
            .as_array()
            .ok_or_else(|| self.invalid(key, value, expected))?;
        if list.is_empty() {
            return Err(self.invalid(
                key,
                value,
                format!("{expected}: an empty list would let nothing run (leave the key out for no exec allowlist)"),
            ));
        }
        let mut out = Vec::new();
        for item in list {
            let text = self.string(key, item)?;
            let path = std::path::PathBuf::from(text);
            if !path.is_absolute() || text.contains('\0') {
                return Err(self.invalid(
                    key,
                    item,
                    "expected an absolute path (resolved on this host, symlinks followed)",
                ));
            }
            if path
                .components()
                .any(|c| c == std::path::Component::ParentDir)
            {
                return Err(self.invalid(
                    key,
                    item,
                    "`..` is not allowed in exec allowlist entries",
                ));
            }
            if path.parent().is_none() {
                return Err(self.invalid(key, item, "`/` would let every program run: list the programs, or the directories they live in"));
            }
            out.push(path);
        }
        Ok(out)
    }

    fn gateway(&self, value: &toml::Value) -> Result<GatewaySettings, PolicyError> {
        let mut g = GatewaySettings::default();
        for (key, value) in self.table("gateway", value)? {
            let full = format!("gateway.{key}");
            let count = |max: i64| {
                value
                    .as_integer()
                    .filter(|n| (1..=max).contains(n))
                    .map(|n| Some(n as usize))
                    .ok_or_else(|| {
                        self.invalid(&full, value, format!("expected a number from 1 to {max}"))
                    })
            };
            match key.as_str() {
                "max_sessions_per_credential" => g.max_sessions_per_credential = count(100_000)?,
                "max_streams_per_session" => g.max_streams_per_session = count(1_000)?,
                "max_runs_per_agent" => g.max_runs_per_agent = count(100_000)?,
                // Each connection is a descriptor: more than a process can have is a typo.
                "max_connections" => g.max_connections = count(65_536)?,
                "max_connections_per_peer" => g.max_connections_per_peer = count(65_536)?,
                "session_idle_timeout" => {
                    g.session_idle_timeout = Some(self.duration(&full, value)?)
                }
                "header_read_timeout" => g.header_read_timeout = Some(self.duration(&full, value)?),
                "connection_idle_timeout" => {
                    g.connection_idle_timeout = Some(self.duration(&full, value)?)
                }
                "body_read_timeout" => g.body_read_timeout = Some(self.duration(&full, value)?),
                "keep_runs_after_session" => {
                    let d = self.duration(&full, value)?;
                    if d > super::MAX_KEEP_RUNS_AFTER_SESSION {
                        return Err(self.invalid(
                            &full,
                            value,
                            "expected a duration of at most 24h (a run no session holds is still bounded)",
                        ));
                    }
                    g.keep_runs_after_session = Some(d);
                }
                _ => return Err(self.unknown_of(full, GATEWAY_KEYS)),
            }
        }
        Ok(g)
    }

    fn audit(&self, value: &toml::Value) -> Result<AuditSettings, PolicyError> {
        let mut a = AuditSettings::default();
        for (key, value) in self.table("audit", value)? {
            let full = format!("audit.{key}");
            let flag = || {
                value
                    .as_bool()
                    .ok_or_else(|| self.invalid(&full, value, "expected true or false"))
            };
            match key.as_str() {
                "enabled" => a.enabled = flag()?,
                "required" => a.required = flag()?,
                "max_file_size" => a.max_file_size = self.size(&full, value)?,
                _ => return Err(self.unknown_of(full, AUDIT_KEYS)),
            }
        }
        if a.required && !a.enabled {
            return Err(self.invalid(
                "audit.required",
                &toml::Value::Boolean(true),
                "audit.enabled = true (a record cannot be required and off)",
            ));
        }
        Ok(a)
    }

    /// A list of egress rules (`policy::egress`), each checked as it is read.
    fn domain_rules(
        &self,
        key: &str,
        value: &toml::Value,
    ) -> Result<Vec<crate::egress::DomainRule>, PolicyError> {
        let items = value
            .as_array()
            .ok_or_else(|| self.invalid(key, value, "expected a list of hosts"))?;
        items
            .iter()
            .map(|item| {
                let text = self.string(key, item)?;
                crate::egress::DomainRule::parse(text)
                    .map_err(|e| self.invalid(key, item, e.problem))
            })
            .collect()
    }

    /// An `egress` table (global or an agent's): its allow and deny lists, each `None`
    /// when not written.
    #[allow(clippy::type_complexity)]
    fn egress_rules(
        &self,
        key: &str,
        value: &toml::Value,
    ) -> Result<
        (
            Option<Vec<crate::egress::DomainRule>>,
            Option<Vec<crate::egress::DomainRule>>,
        ),
        PolicyError,
    > {
        let (mut allow, mut deny) = (None, None);
        for (k, v) in self.table(key, value)? {
            let full = format!("{key}.{k}");
            let rules = match k.as_str() {
                "allow" => &mut allow,
                "deny" => &mut deny,
                _ => return Err(self.unknown_of(full, EGRESS_KEYS)),
            };
            *rules = Some(self.domain_rules(&full, v)?);
        }
        Ok((allow, deny))
    }

    fn sandbox(&self, value: &toml::Value) -> Result<SandboxSettings, PolicyError> {
        let mut s = SandboxSettings::default();
        for (key, value) in self.table("sandbox", value)? {
            let full = format!("sandbox.{key}");
            match key.as_str() {
                "backend" => s.backend = self.parsed(&full, value)?,
                "builder" => s.builder = self.parsed(&full, value)?,
                "network" => {
                    s.network = match value {
                        toml::Value::Boolean(false) => SandboxNetwork::Off,
                        toml::Value::Boolean(true) => SandboxNetwork::On,
                        toml::Value::String(text) if text == "proxy" => SandboxNetwork::Proxy,
                        _ => {
                            return Err(self.invalid(
                                &full,
                                value,
                                "expected true or false, or \"proxy\"",
                            ));
                        }
                    }
                }
                "egress" => {
                    let (allow, deny) = self.egress_rules(&full, value)?;
                    s.egress.allow = allow.unwrap_or_default();
                    s.egress.deny = deny.unwrap_or_default();
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
                "permission_mode" => s.permission_mode = Some(self.parsed(&full, value)?),
                "writable_paths" => s.writable_paths = self.paths(&full, value)?,
                "readable_extra_paths" => s.readable_extra_paths = self.paths(&full, value)?,
                "exec_allowlist" => s.exec_allowlist = Some(self.exec_paths(&full, value)?),
                "exec_allowlist_mode" => s.exec_allowlist_mode = Some(self.parsed(&full, value)?),
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
                            _ => return Err(self.unknown_of(key, CONTAINER_KEYS)),
                        }
                    }
                }
                _ => return Err(self.unknown_of(full, SANDBOX_KEYS)),
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
