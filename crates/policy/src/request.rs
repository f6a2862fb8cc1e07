//! The exec request an agent or an operator makes — one type for every front end: the
//! MCP `exec` tool (its input schema is generated from this type and its arguments are
//! decoded into it), `warden exec` and `warden policy explain` (their flags fill it in),
//! and the Bridge's `system.run` (it crosses to a node as this type). Adding a parameter
//! means a field here, the place that uses it, and the docs.
//!
//! Decoding names the field a refusal is about (`argv[1]`, `env.A`) and refuses anything
//! the published schema does not allow — the two are held together by the gateway's
//! `the_decoder_agrees_with_the_published_schemas`. The schema's root stays flat (`type`,
//! `properties`, `additionalProperties`): the one rule that needs two fields, exactly one
//! of `command` and `argv`, is said in both fields' descriptions and checked here.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::OnceLock;
use std::time::Duration;

use schemars::JsonSchema;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::CommandInput;
use crate::modes::{Ask, Host, Security};
use crate::resolve::ExecParams;

/// Largest timeout a request may ask for, in seconds (the policy's `max_timeout` caps it
/// further; this bound only keeps the number meaningful).
pub const MAX_TIMEOUT_SECONDS: f64 = 1e9;

/// The parameters of one exec request, as an agent or an operator gives them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecArgs {
    /// A shell command line. Give exactly one of `command` and `argv`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "non_empty"
    )]
    #[schemars(with = "String", length(min = 1))]
    pub command: Option<String>,
    /// A program and its arguments, run without a shell. Give exactly one of `command` and `argv`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "program_and_arguments"
    )]
    #[schemars(schema_with = "argv_schema")]
    pub argv: Option<Vec<String>>,
    /// Working directory (absolute, or relative to the workspace).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "non_empty"
    )]
    #[schemars(with = "String", length(min = 1))]
    pub cwd: Option<String>,
    /// Extra environment variables (only names the host allows; others refuse the call before anything runs).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "variables"
    )]
    #[schemars(schema_with = "env_schema")]
    pub env: BTreeMap<String, String>,
    /// Timeout in seconds (capped by the host's max_timeout).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "seconds"
    )]
    #[schemars(schema_with = "timeout_schema")]
    pub timeout: Option<f64>,
    /// Where to run; the host's approvals file still caps what runs.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    #[schemars(schema_with = "host_schema")]
    pub host: Option<Host>,
    /// Requested security; never looser than the host allows.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    #[schemars(schema_with = "security_schema")]
    pub security: Option<Security>,
    /// When to ask a human; never less than the host asks.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    #[schemars(schema_with = "ask_schema")]
    pub ask: Option<Ask>,
    /// The node for host=node.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "non_empty"
    )]
    #[schemars(with = "String", length(min = 1))]
    pub node: Option<String>,
    /// Seconds to wait for the command to end; if it is still running then, the call returns its run id, its state and the output so far, and the command goes on (read its output, write to its input and stop it with the `process` tool). Without `yield` or `background` the call waits for the end.
    #[serde(
        rename = "yield",
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "yield_seconds"
    )]
    #[schemars(schema_with = "yield_schema")]
    pub yield_after: Option<f64>,
    /// Return at once with the run's id (`yield: 0`); the command goes on, under the same policy and limits.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub background: bool,
    /// Run the command on a terminal made for the run (its stdin, stdout, stderr and controlling terminal): for programs that need one (REPLs, prompts, full-screen tools). The output is the terminal's stream, all in `stdout`; type on it with the `process` tool's `write` (`input`, `keys` such as Enter or C-c).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tty: bool,
    /// The terminal's rows, with `tty` (default 24).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "terminal_cells"
    )]
    #[schemars(schema_with = "terminal_cells_schema")]
    pub rows: Option<u16>,
    /// The terminal's columns, with `tty` (default 80).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "terminal_cells"
    )]
    #[schemars(schema_with = "terminal_cells_schema")]
    pub cols: Option<u16>,
    /// Narrow this run's network through Warden's egress proxy (a sandbox with sandbox.network = "proxy"): `allow`, the only hosts it may reach (each still only as the host's rules, the agent's egressAllow or its approver allow); `deny`, hosts it never reaches. A rule is a host (`example.com`, `*.example.com`, an address) with an optional port (`example.com:443`). It never widens anything; a run it cannot be enforced on (the host's network, the gateway, a node) is refused.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    #[schemars(schema_with = "egress_schema")]
    pub egress: Option<crate::egress::RequestEgress>,
}

/// What to run: a shell command line or a program with its arguments.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "lowercase")]
pub enum Command {
    /// A program and its arguments; no shell is involved.
    Argv(Vec<String>),
    /// A shell command line.
    Shell(String),
}

impl Command {
    /// As the policy engine reads it.
    pub fn input(&self) -> CommandInput<'_> {
        match self {
            Command::Argv(argv) => CommandInput::Argv(argv),
            Command::Shell(s) => CommandInput::Shell(s),
        }
    }

    /// The command as the agent wrote it, for prompts and usage records.
    pub fn display(&self) -> String {
        match self {
            Command::Argv(argv) => argv.join(" "),
            Command::Shell(s) => s.clone(),
        }
    }
}

/// Why a request's arguments were refused: the field (as a path: `argv[1]`, `env.A`) and
/// what is wrong with it. Nothing was run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{field}`: {message}")]
pub struct ArgsError {
    /// The field, as a path from the arguments' root.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl ArgsError {
    fn new(field: &str, message: impl Into<String>) -> Self {
        ArgsError {
            field: field.to_owned(),
            message: message.into(),
        }
    }
}

impl ExecArgs {
    /// A request to run `command`, nothing else set.
    pub fn new(command: Command) -> Self {
        let mut args = ExecArgs::default();
        match command {
            Command::Shell(s) => args.command = Some(s),
            Command::Argv(a) => args.argv = Some(a),
        }
        args
    }

    /// Decode a request's arguments (a JSON object's fields): every value as the schema
    /// says, no field the schema does not name, exactly one of `command` and `argv`.
    pub fn from_json(fields: Map<String, Value>) -> Result<Self, ArgsError> {
        if let Some(unknown) = fields.keys().find(|k| !Self::field_names().contains(k)) {
            return Err(ArgsError::new(
                unknown,
                "is not a parameter of this tool (see its inputSchema)",
            ));
        }
        let args: ExecArgs = serde_path_to_error::deserialize(Value::Object(fields))
            .map_err(|e| ArgsError::new(&e.path().to_string(), e.inner().to_string()))?;
        args.command()?;
        args.terminal()?;
        Ok(args)
    }

    /// What to run, or why the request names nothing (or two things) to run.
    pub fn command(&self) -> Result<Command, ArgsError> {
        match (&self.command, &self.argv) {
            (Some(c), None) => Ok(Command::Shell(c.clone())),
            (None, Some(a)) => Ok(Command::Argv(a.clone())),
            (Some(_), Some(_)) => Err(ArgsError::new(
                "command",
                "and `argv` were both given: give exactly one (a shell command line, or a program with its arguments)",
            )),
            (None, None) => Err(ArgsError::new(
                "command",
                "is required (or `argv`): give exactly one of them",
            )),
        }
    }

    /// The policy parameters of the request (the "tool parameter" level).
    pub fn params(&self) -> ExecParams {
        ExecParams {
            host: self.host,
            security: self.security,
            ask: self.ask,
            node: self.node.clone(),
            timeout: self
                .timeout
                .and_then(|t| Duration::try_from_secs_f64(t).ok()),
            egress: self.egress.clone().filter(|e| !e.is_empty()),
        }
    }

    /// How long the caller waits before the run goes on without it: `None` to its end
    /// (the default), zero for `background`.
    pub fn yield_for(&self) -> Option<Duration> {
        if self.background {
            return Some(Duration::ZERO);
        }
        self.yield_after
            .map(|t| Duration::try_from_secs_f64(t).unwrap_or(Duration::MAX))
    }

    /// The terminal the command runs on: `None` without `tty`; refused when `rows` or
    /// `cols` come without it (a size for no terminal is a mistake worth naming).
    pub fn terminal(&self) -> Result<Option<caps::TerminalSize>, ArgsError> {
        if !self.tty {
            for (field, given) in [("rows", self.rows), ("cols", self.cols)] {
                if given.is_some() {
                    return Err(ArgsError::new(
                        field,
                        "is the size of the run's terminal: give it with `tty: true`",
                    ));
                }
            }
            return Ok(None);
        }
        Ok(Some(caps::TerminalSize {
            rows: self.rows.unwrap_or(caps::TerminalSize::DEFAULT.rows),
            cols: self.cols.unwrap_or(caps::TerminalSize::DEFAULT.cols),
        }))
    }

    /// The JSON Schema of the arguments, generated from this type: a flat object.
    pub fn schema() -> &'static Map<String, Value> {
        static SCHEMA: OnceLock<Map<String, Value>> = OnceLock::new();
        SCHEMA.get_or_init(|| {
            // Every optional field is described by its value's schema (`with`,
            // `schema_with`): an absent field is the default, and `null` is not a value
            // of any field.
            let schema = schemars::generate::SchemaSettings::draft2020_12()
                .into_generator()
                .into_root_schema_for::<ExecArgs>();
            let mut root = match schema.to_value() {
                Value::Object(map) => map,
                _ => Map::new(),
            };
            // Clients read the root's shape: keep it to the object's own keywords.
            root.retain(|k, _| {
                matches!(k.as_str(), "type" | "properties" | "additionalProperties")
            });
            root
        })
    }

    /// The names of the fields, as the schema lists them.
    fn field_names() -> &'static [String] {
        static NAMES: OnceLock<Vec<String>> = OnceLock::new();
        NAMES.get_or_init(|| {
            Self::schema()
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| p.keys().cloned().collect())
                .unwrap_or_default()
        })
    }
}

/// Whether `name` is a valid environment variable name (as the schema's pattern says).
pub fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A present field's value (`null` is refused, as the schema says).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// A string that is not empty.
struct NonEmpty(String);

impl<'de> Deserialize<'de> for NonEmpty {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.is_empty() {
            return Err(de::Error::custom("must not be empty"));
        }
        Ok(NonEmpty(s))
    }
}

fn non_empty<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    NonEmpty::deserialize(d).map(|s| Some(s.0))
}

/// `argv`: a non-empty program name, then any arguments.
fn program_and_arguments<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    struct Argv;
    impl<'de> Visitor<'de> for Argv {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an array of strings, the program first")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
            let Some(NonEmpty(program)) = seq.next_element()? else {
                return Err(de::Error::custom("must name a program (at least one item)"));
            };
            let mut argv = vec![program];
            while let Some(arg) = seq.next_element::<String>()? {
                argv.push(arg);
            }
            Ok(argv)
        }
    }
    d.deserialize_seq(Argv).map(Some)
}

/// `env`: variable names as the schema's pattern says, string values.
fn variables<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    /// A value, refused when its name is not a variable name: the refusal then carries
    /// the path `env.<name>`.
    struct ValueOf<'a>(&'a str);
    impl<'de> DeserializeSeed<'de> for ValueOf<'_> {
        type Value = String;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
            if !is_env_name(self.0) {
                return Err(de::Error::custom(
                    "is not a variable name (letters, digits and _, not starting with a digit)",
                ));
            }
            String::deserialize(d)
        }
    }
    struct Env;
    impl<'de> Visitor<'de> for Env {
        type Value = BTreeMap<String, String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object of strings")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut env = BTreeMap::new();
            while let Some(name) = map.next_key::<String>()? {
                let value = map.next_value_seed(ValueOf(&name))?;
                env.insert(name, value);
            }
            Ok(env)
        }
    }
    d.deserialize_map(Env)
}

/// `timeout`: seconds above 0, at most [`MAX_TIMEOUT_SECONDS`].
fn seconds<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    struct Seconds;
    impl Visitor<'_> for Seconds {
        type Value = f64;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a number of seconds")
        }
        fn visit_f64<E: de::Error>(self, t: f64) -> Result<f64, E> {
            if t > 0.0 && t <= MAX_TIMEOUT_SECONDS {
                Ok(t)
            } else {
                Err(E::custom(format!(
                    "must be a number of seconds above 0 and at most {MAX_TIMEOUT_SECONDS}, got {t}"
                )))
            }
        }
        fn visit_u64<E: de::Error>(self, t: u64) -> Result<f64, E> {
            self.visit_f64(t as f64)
        }
        fn visit_i64<E: de::Error>(self, t: i64) -> Result<f64, E> {
            self.visit_f64(t as f64)
        }
    }
    d.deserialize_f64(Seconds).map(Some)
}

fn argv_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schema(json!({
        "type": "array", "minItems": 1,
        "prefixItems": [{"type": "string", "minLength": 1}],
        "items": {"type": "string"},
    }))
}

fn egress_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let rules = json!({"type": "array", "items": {"type": "string", "minLength": 1}});
    schema(json!({
        "type": "object",
        "properties": {"allow": rules, "deny": rules},
        "additionalProperties": false,
    }))
}

fn env_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schema(json!({
        "type": "object",
        "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
        "additionalProperties": {"type": "string"},
    }))
}

/// `yield`: a number of seconds, zero (return at once) included.
fn yield_seconds<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let t = f64::deserialize(d)?;
    if (0.0..=MAX_TIMEOUT_SECONDS).contains(&t) {
        Ok(Some(t))
    } else {
        Err(de::Error::custom(format!(
            "must be a number of seconds from 0 to {MAX_TIMEOUT_SECONDS}, got {t}"
        )))
    }
}

fn yield_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schema(json!({"type": "number", "minimum": 0, "maximum": MAX_TIMEOUT_SECONDS}))
}

/// `rows`, `cols`: a terminal's cells, 1 to [`caps::TerminalSize::MAX`].
fn terminal_cells<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u16>, D::Error> {
    let n = u64::deserialize(d)?;
    match u16::try_from(n) {
        Ok(n) if (1..=caps::TerminalSize::MAX).contains(&n) => Ok(Some(n)),
        _ => Err(de::Error::custom(format!(
            "must be a whole number from 1 to {}, got {n}",
            caps::TerminalSize::MAX
        ))),
    }
}

fn terminal_cells_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schema(json!({"type": "integer", "minimum": 1, "maximum": caps::TerminalSize::MAX}))
}

fn timeout_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schema(json!({"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT_SECONDS}))
}

/// A string naming one of `values` (their serde names).
fn one_of<T: Serialize>(values: &[T]) -> schemars::Schema {
    let names: Vec<Value> = values
        .iter()
        .filter_map(|v| serde_json::to_value(v).ok())
        .collect();
    schema(json!({"type": "string", "enum": names}))
}

fn host_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    one_of(&[Host::Sandbox, Host::Gateway, Host::Node])
}

fn security_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    one_of(&[Security::Deny, Security::Allowlist, Security::Full])
}

fn ask_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    one_of(&[Ask::Off, Ask::OnMiss, Ask::Always])
}

fn schema(value: Value) -> schemars::Schema {
    match value {
        Value::Object(map) => map.into(),
        _ => schemars::Schema::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(v: Value) -> Result<ExecArgs, ArgsError> {
        match v {
            Value::Object(map) => ExecArgs::from_json(map),
            _ => unreachable!(),
        }
    }

    #[test]
    fn the_schema_is_flat_and_names_every_field() {
        let schema = ExecArgs::schema();
        let keys: Vec<&str> = schema.keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 3, "{schema:?}");
        assert_eq!(schema["additionalProperties"], false);
        let props = schema["properties"].as_object().unwrap();
        for field in [
            "command", "argv", "cwd", "env", "timeout", "host", "security", "ask", "node", "egress",
        ] {
            let p = &props[field];
            assert!(
                p["description"].as_str().is_some_and(|d| !d.is_empty()),
                "{field}: {p}"
            );
            assert!(p.get("type").is_some(), "{field}: {p}");
        }
        assert_eq!(props["host"]["enum"], json!(["sandbox", "gateway", "node"]));
        assert_eq!(props["ask"]["enum"], json!(["off", "on-miss", "always"]));
        assert_eq!(props["command"]["minLength"], 1);
        assert_eq!(props["egress"]["additionalProperties"], false);
        assert_eq!(props["egress"]["properties"]["allow"]["type"], "array");
    }

    #[test]
    fn refusals_name_the_field_as_a_path() {
        for (args, field) in [
            (json!({"argv": ["ls", 3]}), "argv[1]"),
            (json!({"argv": [""]}), "argv[0]"),
            (json!({"argv": []}), "argv"),
            (json!({"command": "x", "env": {"1A": "x"}}), "env.1A"),
            (json!({"command": "x", "env": {"A": 1}}), "env.A"),
            (json!({"command": "x", "timeout": 0}), "timeout"),
            (json!({"command": "x", "host": "moon"}), "host"),
            (json!({"command": "x", "cwd": null}), "cwd"),
            (json!({"command": "x", "bogus": 1}), "bogus"),
            (json!({"command": "x", "argv": ["x"]}), "command"),
            (
                json!({"command": "x", "egress": {"allow": ["pypi.org", "*.com"]}}),
                "egress.allow[1]",
            ),
            (
                json!({"command": "x", "egress": {"deny": ["a b"]}}),
                "egress.deny[0]",
            ),
            (
                json!({"command": "x", "egress": {"deny": "pypi.org"}}),
                "egress.deny",
            ),
            (
                json!({"command": "x", "egress": {"allowed": []}}),
                "egress.allowed",
            ),
            (json!({"command": "x", "egress": null}), "egress"),
            (
                json!({"command": "x", "egress": {"allow": null}}),
                "egress.allow",
            ),
        ] {
            let e = decode(args.clone()).expect_err(&args.to_string());
            assert_eq!(e.field, field, "{args}: {e}");
        }
    }

    #[test]
    fn a_request_round_trips_and_says_what_it_runs() {
        let args = decode(json!({
            "argv": ["ls", "-la"], "cwd": "src", "env": {"A": "1"}, "timeout": 2.5,
            "host": "node", "security": "allowlist", "ask": "always", "node": "n1",
            "egress": {"allow": ["PyPI.org.", "*.pythonhosted.org:443"], "deny": []}
        }))
        .unwrap();
        // Rules are kept in their normal form.
        let egress = args.egress.clone().unwrap();
        let allow: Vec<&str> = egress.allow.iter().flatten().map(|r| r.as_str()).collect();
        assert_eq!(allow, ["pypi.org", "*.pythonhosted.org:443"]);
        assert_eq!(
            args.command().unwrap(),
            Command::Argv(vec!["ls".into(), "-la".into()])
        );
        let params = args.params();
        assert_eq!(params.timeout, Some(Duration::from_millis(2500)));
        assert_eq!(params.host, Some(Host::Node));
        let Value::Object(wire) = serde_json::to_value(&args).unwrap() else {
            unreachable!()
        };
        assert_eq!(ExecArgs::from_json(wire).unwrap(), args);
    }
}
