//! Tool arguments: the only place a client's JSON becomes typed values. Every constraint
//! the published input schemas state (`tools.rs`) is enforced here, and anything else a
//! client sends is refused with JSON-RPC `-32602` naming the field, before anything runs
//! (`tests::the_decoder_agrees_with_the_published_schemas` holds the two together).
//! `exec`'s arguments are `policy::ExecArgs`, whose schema and decoder come from one type;
//! the file tools' few flat fields are read here.
//!
//! The transport already parsed the request (serde_json stops at 128 levels of nesting);
//! every field is a flat value, so nothing here recurses into what the client sent.

use policy::ExecArgs;
use rmcp::ErrorData;
use rmcp::model::JsonObject;
use serde_json::{Value, json};

/// Largest line number or count accepted: the largest integer every JSON client (a
/// JavaScript one included) represents exactly.
pub const MAX_COUNT: u64 = (1 << 53) - 1;

#[derive(Debug)]
pub struct ReadArgs {
    pub path: String,
    pub offset: Option<usize>,
    pub limit: Option<usize>,
}

#[derive(Debug)]
pub struct WriteArgs {
    pub path: String,
    pub content: String,
}

#[derive(Debug)]
pub struct EditArgs {
    pub path: String,
    pub old_string: String,
    pub new_string: String,
    pub replace_all: bool,
}

#[derive(Debug)]
pub struct ListArgs {
    pub path: String,
}

#[derive(Debug)]
pub struct GrepArgs {
    pub pattern: String,
    pub path: String,
    pub glob: Option<String>,
}

#[derive(Debug)]
pub struct SessionArgs {
    pub command: String,
}

/// What the `process` tool is asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessAction {
    List,
    Poll,
    Write,
    Close,
    Kill,
    Wait,
    Signal,
    Resize,
}

impl ProcessAction {
    pub const NAMES: [&'static str; 8] = [
        "list", "poll", "write", "close", "kill", "wait", "signal", "resize",
    ];

    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "list" => ProcessAction::List,
            "poll" => ProcessAction::Poll,
            "write" => ProcessAction::Write,
            "close" => ProcessAction::Close,
            "kill" => ProcessAction::Kill,
            "wait" => ProcessAction::Wait,
            "signal" => ProcessAction::Signal,
            "resize" => ProcessAction::Resize,
            _ => return None,
        })
    }
}

/// Longest a `process` call waits (`wait`), in seconds: below the request timeout of
/// common clients (60 s in the TypeScript SDK) with room for the answer.
pub const MAX_WAIT_SECONDS: f64 = 50.0;

#[derive(Debug)]
pub struct ProcessArgs {
    pub action: ProcessAction,
    /// Every action but `list`.
    pub run_id: String,
    pub cursor: Option<u64>,
    pub wait: Option<std::time::Duration>,
    /// `write`: the text, then the keys' bytes.
    pub input: Option<String>,
    pub keys: Vec<u8>,
    /// `signal`: which, by number and name.
    pub signal: Option<(i32, &'static str)>,
    /// `resize`: the terminal's new size.
    pub size: Option<caps::TerminalSize>,
    /// The output as plain text (a terminal's escape sequences and control characters
    /// other than newlines removed).
    pub plain: bool,
}

/// The signals `process` `signal` sends, by name.
pub use caps::SIGNALS;

/// The signal `name` names (`INT` or `SIGINT`, any case).
fn signal_named(name: &str) -> Option<(i32, &'static str)> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    SIGNALS
        .iter()
        .find(|(n, _)| *n == bare)
        .map(|(n, number)| (*number, *n))
}

/// A tool call with its arguments decoded.
#[derive(Debug)]
pub enum ToolCall {
    Exec(ExecArgs),
    Read(ReadArgs),
    Write(WriteArgs),
    Edit(EditArgs),
    List(ListArgs),
    Grep(GrepArgs),
    Session(SessionArgs),
    Process(ProcessArgs),
}

/// `-32602` for `field` of `tool`: the message names both, `data` carries them.
pub fn invalid(tool: &str, field: &str, why: impl std::fmt::Display) -> ErrorData {
    ErrorData::invalid_params(
        format!("{tool}: `{field}` {why}"),
        Some(json!({"tool": tool, "field": field})),
    )
}

/// A tool's arguments, read field by field; whatever is left at the end is unknown.
struct Fields<'a> {
    tool: &'a str,
    map: JsonObject,
}

/// What a JSON value is, for messages.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl<'a> Fields<'a> {
    fn new(tool: &'a str, args: Option<JsonObject>) -> Self {
        Fields {
            tool,
            map: args.unwrap_or_default(),
        }
    }

    fn err(&self, field: &str, why: impl std::fmt::Display) -> ErrorData {
        invalid(self.tool, field, why)
    }

    /// An optional string; `non_empty` refuses `""`.
    fn string(&mut self, field: &str, non_empty: bool) -> Result<Option<String>, ErrorData> {
        match self.map.remove(field) {
            None => Ok(None),
            Some(Value::String(s)) if non_empty && s.is_empty() => {
                Err(self.err(field, "must not be empty"))
            }
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.err(field, format!("must be a string, got {}", kind(&other)))),
        }
    }

    fn required_string(&mut self, field: &str, non_empty: bool) -> Result<String, ErrorData> {
        self.string(field, non_empty)?
            .ok_or_else(|| self.err(field, "is required"))
    }

    fn boolean(&mut self, field: &str) -> Result<Option<bool>, ErrorData> {
        match self.map.remove(field) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(other) => Err(self.err(field, format!("must be a boolean, got {}", kind(&other)))),
        }
    }

    /// An optional integer from 1 to [`MAX_COUNT`] (`2.0` counts, as JSON Schema's
    /// `integer` says).
    fn positive_integer(&mut self, field: &str) -> Result<Option<usize>, ErrorData> {
        let Some(v) = self.map.remove(field) else {
            return Ok(None);
        };
        let n = match &v {
            Value::Number(n) => n.as_u64().or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0)
                    .map(|f| f as u64)
            }),
            _ => return Err(self.err(field, format!("must be an integer, got {}", kind(&v)))),
        };
        match n {
            Some(n) if (1..=MAX_COUNT).contains(&n) => {
                Ok(Some(usize::try_from(n).unwrap_or(usize::MAX)))
            }
            _ => Err(self.err(
                field,
                format!("must be an integer from 1 to {MAX_COUNT}, got {v}"),
            )),
        }
    }

    /// An optional integer from 0 to [`MAX_COUNT`].
    fn offset(&mut self, field: &str) -> Result<Option<u64>, ErrorData> {
        let Some(v) = self.map.remove(field) else {
            return Ok(None);
        };
        match v.as_u64().or_else(|| {
            v.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= MAX_COUNT as f64)
                .map(|f| f as u64)
        }) {
            Some(n) if n <= MAX_COUNT => Ok(Some(n)),
            _ => Err(self.err(
                field,
                format!("must be an integer from 0 to {MAX_COUNT}, got {v}"),
            )),
        }
    }

    /// An optional number of seconds from 0 to `max`.
    fn seconds(&mut self, field: &str, max: f64) -> Result<Option<std::time::Duration>, ErrorData> {
        let Some(v) = self.map.remove(field) else {
            return Ok(None);
        };
        match v.as_f64() {
            Some(t) if (0.0..=max).contains(&t) => Ok(Some(std::time::Duration::from_secs_f64(t))),
            _ => Err(self.err(
                field,
                format!("must be a number of seconds from 0 to {max}, got {v}"),
            )),
        }
    }

    /// An optional array of strings.
    fn strings(&mut self, field: &str) -> Result<Option<Vec<String>>, ErrorData> {
        match self.map.remove(field) {
            None => Ok(None),
            Some(Value::Array(items)) => items
                .into_iter()
                .enumerate()
                .map(|(i, item)| match item {
                    Value::String(s) => Ok(s),
                    other => Err(self.err(
                        &format!("{field}[{i}]"),
                        format!("must be a string, got {}", kind(&other)),
                    )),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(other) => Err(self.err(field, format!("must be an array, got {}", kind(&other)))),
        }
    }

    /// Refuse whatever was not read.
    fn finish(self) -> Result<(), ErrorData> {
        match self.map.keys().next() {
            None => Ok(()),
            Some(field) => Err(invalid(
                self.tool,
                field,
                "is not a parameter of this tool (see its inputSchema)",
            )),
        }
    }
}

/// Decode the arguments of tool `name`.
pub fn decode(name: &str, args: Option<JsonObject>) -> Result<ToolCall, ErrorData> {
    if name == "exec" {
        return ExecArgs::from_json(args.unwrap_or_default())
            .map(ToolCall::Exec)
            .map_err(|e| invalid(name, &e.field, e.message));
    }
    let mut f = Fields::new(name, args);
    let call = match name {
        "read" => ToolCall::Read(ReadArgs {
            path: f.required_string("path", true)?,
            offset: f.positive_integer("offset")?,
            limit: f.positive_integer("limit")?,
        }),
        "write" => ToolCall::Write(WriteArgs {
            path: f.required_string("path", true)?,
            content: f.required_string("content", false)?,
        }),
        "edit" => ToolCall::Edit(EditArgs {
            path: f.required_string("path", true)?,
            old_string: f.required_string("old_string", true)?,
            new_string: f.required_string("new_string", false)?,
            replace_all: f.boolean("replace_all")?.unwrap_or(false),
        }),
        "list" => ToolCall::List(ListArgs {
            path: f.string("path", false)?.unwrap_or_default(),
        }),
        "grep" => ToolCall::Grep(GrepArgs {
            pattern: f.required_string("pattern", true)?,
            path: f.string("path", false)?.unwrap_or_default(),
            glob: f.string("glob", true)?,
        }),
        "session" => ToolCall::Session(SessionArgs {
            command: f.required_string("command", true)?,
        }),
        "process" => ToolCall::Process(process_args(&mut f)?),
        other => {
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown tool {other:?}: the tools are exec, process, read, write, edit, list, grep and session"
                ),
                Some(json!({"field": "name"})),
            ));
        }
    };
    f.finish()?;
    Ok(call)
}

/// The `process` tool's arguments: `action`, and what that action takes.
fn process_args(f: &mut Fields<'_>) -> Result<ProcessArgs, ErrorData> {
    let name = f.required_string("action", true)?;
    let Some(action) = ProcessAction::parse(&name) else {
        return Err(f.err(
            "action",
            format!(
                "must be one of {}, got {name:?}",
                ProcessAction::NAMES.join(", ")
            ),
        ));
    };
    // Which fields an action needs is said in the fields' descriptions (a flat schema
    // cannot say it) and checked here; a field an action does not use is ignored.
    let run_id = match action {
        ProcessAction::List => f.string("runId", true)?.unwrap_or_default(),
        _ => f.required_string("runId", true)?,
    };
    let input = f.string("input", true)?;
    let mut keys = Vec::new();
    let names = f.strings("keys")?.unwrap_or_default();
    if names.len() > crate::mcp::keys::MAX_KEYS {
        return Err(f.err(
            "keys",
            format!(
                "takes at most {} keys per write, got {}",
                crate::mcp::keys::MAX_KEYS,
                names.len()
            ),
        ));
    }
    for (i, name) in names.iter().enumerate() {
        match crate::mcp::keys::key_bytes(name) {
            Some(bytes) => keys.extend(bytes),
            None => {
                return Err(f.err(
                    &format!("keys[{i}]"),
                    format!(
                        "{name:?} is not a key name (Enter, Tab, Escape, Backspace, Space, Up, Down, Left, Right, Home, End, PageUp, PageDown, Insert, Delete, F1-F12, C-a..C-z and C-@ C-[ C-\\ C-] C-^ C-_ C-Space)"
                    ),
                ));
            }
        }
    }
    if action == ProcessAction::Write && input.is_none() && keys.is_empty() {
        return Err(f.err("input", "is required for write (or `keys`): what to send"));
    }
    let signal = match f.string("signal", true)? {
        Some(name) => Some(signal_named(&name).ok_or_else(|| {
            let names: Vec<&str> = SIGNALS.iter().map(|(n, _)| *n).collect();
            f.err(
                "signal",
                format!("must be one of {}, got {name:?}", names.join(", ")),
            )
        })?),
        None if action == ProcessAction::Signal => {
            return Err(f.err("signal", "is required for signal (INT, TERM, ...)"));
        }
        None => None,
    };
    let rows = f.positive_integer("rows")?;
    let cols = f.positive_integer("cols")?;
    let size = match (rows, cols) {
        (Some(rows), Some(cols)) => {
            let max = usize::from(caps::TerminalSize::MAX);
            for (field, n) in [("rows", rows), ("cols", cols)] {
                if n > max {
                    return Err(f.err(field, format!("must be from 1 to {max}, got {n}")));
                }
            }
            let cell = |n: usize| u16::try_from(n).unwrap_or(u16::MAX);
            Some(caps::TerminalSize {
                rows: cell(rows),
                cols: cell(cols),
            })
        }
        (None, None) if action != ProcessAction::Resize => None,
        (_, None) => return Err(f.err("cols", "is required for resize (with `rows`)")),
        (None, _) => return Err(f.err("rows", "is required for resize (with `cols`)")),
    };
    Ok(ProcessArgs {
        action,
        run_id,
        cursor: f.offset("cursor")?,
        wait: f.seconds("wait", MAX_WAIT_SECONDS)?,
        input,
        keys,
        signal,
        size,
        plain: f.boolean("plain")?.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What the server does with decoded arguments before the analysis or the file tools
    /// see them: the timeout, prompt previews.
    fn use_decoded(call: &ToolCall) {
        match call {
            ToolCall::Exec(a) => {
                if let Some(t) = a.timeout {
                    let d = a.params().timeout.expect("a decoded timeout is a duration");
                    assert!(d.as_secs_f64() <= 1e9 && (d.as_secs_f64() - t).abs() < 1e-3);
                }
                assert!(a.command().is_ok());
            }
            ToolCall::Write(a) => {
                let _ = super::super::result::preview(&a.content);
            }
            ToolCall::Edit(a) => {
                let _ = (
                    super::super::result::preview(&a.old_string),
                    super::super::result::preview(&a.new_string),
                );
            }
            _ => {}
        }
    }

    /// A `tools/call` request as rmcp reads it off the wire: the whole JSON-RPC message
    /// parsed by serde_json, then the arguments decoded. `Err(None)`: the line does not
    /// parse (the transport answers -32700 and keeps reading).
    fn receive(params: &str) -> Result<ToolCall, Option<ErrorData>> {
        let line = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{params}}}"#);
        let message: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                use serde_json::error::Category;
                assert!(
                    matches!(e.classify(), Category::Syntax | Category::Eof),
                    "{e}"
                );
                return Err(None);
            }
        };
        let name = message["params"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let args = match message["params"].get("arguments") {
            Some(Value::Object(map)) => Some(map.clone()),
            _ => None,
        };
        let call = decode(&name, args).map_err(Some)?;
        use_decoded(&call);
        Ok(call)
    }

    /// Each file in `tests/corpus/mcp/` is the `params` of a `tools/call`, named
    /// `<expected>--<what>.json`: `ok` decodes, `invalid` is refused with invalid params,
    /// `unparsable` never reaches the decoding.
    #[test]
    #[allow(clippy::disallowed_methods)]
    fn decoding_the_corpus_gives_the_expected_outcome() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/mcp");
        let mut entries: Vec<_> = std::fs::read_dir(&dir)
            .expect("corpus")
            .map(|e| e.expect("entry").path())
            .collect();
        entries.sort();
        assert!(entries.len() >= 20, "the corpus is gone");
        for path in entries {
            let name = path.file_stem().and_then(|n| n.to_str()).expect("name");
            let (expected, _) = name.split_once("--").expect("expected outcome");
            let bytes = std::fs::read(&path).expect("read");
            let text = String::from_utf8_lossy(&bytes);
            let got = match receive(&text) {
                Ok(_) => "ok",
                Err(Some(e)) => {
                    assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS, "{name}");
                    "invalid"
                }
                Err(None) => "unparsable",
            };
            assert_eq!(got, expected, "{name}");
        }
    }

    #[test]
    fn decoding_is_bounded_by_the_transport_however_deep_or_long() {
        // Nesting far past serde_json's limit is refused while parsing, long before any
        // stack is at risk (10^6 levels: 2 MB of brackets).
        for depth in [129, 5_000, 1_000_000] {
            let params = format!(
                r#"{{"name":"exec","arguments":{{"command":{}"x"{}}}}}"#,
                "[".repeat(depth),
                "]".repeat(depth)
            );
            assert!(matches!(receive(&params), Err(None)), "{depth}");
        }
        // Just under it, the value is built and the decoding refuses it at the first
        // level: a command must be a string.
        let params = format!(
            r#"{{"name":"exec","arguments":{{"command":{}"x"{}}}}}"#,
            "[".repeat(120),
            "]".repeat(120)
        );
        assert!(matches!(receive(&params), Err(Some(_))));
        // A megabyte of anything is just a long string here; the analysis bounds it.
        let command = "{ ".repeat(1 << 19);
        let params = serde_json::json!({"name": "exec", "arguments": {"command": command}});
        assert!(matches!(
            receive(&params.to_string()),
            Ok(ToolCall::Exec(_))
        ));
    }

    #[test]
    fn every_refusal_names_the_field_it_is_about() {
        for (tool, args, field) in [
            ("read", json!({"path": "a", "offset": 0}), "offset"),
            ("read", json!({"path": "a", "limit": -1}), "limit"),
            ("read", json!({"path": "a", "limit": 1.5}), "limit"),
            ("read", json!({"offset": 1}), "path"),
            ("read", json!({"path": ""}), "path"),
            ("exec", json!({"command": "true", "timeout": -5}), "timeout"),
            ("exec", json!({"command": "true", "timeout": 0}), "timeout"),
            (
                "exec",
                json!({"command": "true", "timeout": "5"}),
                "timeout",
            ),
            ("exec", json!({"command": ""}), "command"),
            ("exec", json!({}), "command"),
            ("exec", json!({"command": "x", "argv": ["x"]}), "command"),
            ("exec", json!({"argv": []}), "argv"),
            ("exec", json!({"argv": [""]}), "argv[0]"),
            ("exec", json!({"argv": ["ls", 3]}), "argv[1]"),
            ("exec", json!({"argv": "ls"}), "argv"),
            ("exec", json!({"command": "x", "host": "moon"}), "host"),
            ("exec", json!({"command": "x", "security": 1}), "security"),
            ("exec", json!({"command": "x", "env": {"A": 1}}), "env.A"),
            (
                "exec",
                json!({"command": "x", "env": {"1A": "x"}}),
                "env.1A",
            ),
            ("exec", json!({"command": "x", "bogus": true}), "bogus"),
            (
                "edit",
                json!({"path": "a", "old_string": "", "new_string": "b"}),
                "old_string",
            ),
            (
                "edit",
                json!({"path": "a", "old_string": "a", "new_string": "b", "replace_all": "yes"}),
                "replace_all",
            ),
            ("grep", json!({"pattern": "x", "glob": ""}), "glob"),
            ("session", json!({"command": 7}), "command"),
        ] {
            let Value::Object(map) = args.clone() else {
                unreachable!()
            };
            let e = decode(tool, Some(map)).expect_err(&format!("{tool} {args}"));
            assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
            assert!(
                e.message.contains(&format!("`{field}`")),
                "{tool} {args}: {}",
                e.message
            );
            assert_eq!(e.data.as_ref().unwrap()["field"], field, "{tool} {args}");
        }
    }

    /// The published input schemas, compiled once.
    fn validators() -> &'static [(String, jsonschema::Validator)] {
        static COMPILED: std::sync::OnceLock<Vec<(String, jsonschema::Validator)>> =
            std::sync::OnceLock::new();
        COMPILED.get_or_init(|| {
            super::super::tools::tools()
                .into_iter()
                .map(|t| {
                    let schema = Value::Object(t.input_schema.as_ref().clone());
                    (
                        t.name.to_string(),
                        jsonschema::draft202012::new(&schema).expect("a valid schema"),
                    )
                })
                .collect()
        })
    }

    /// Any JSON value: every scalar kind (extreme numbers, odd strings) and nesting.
    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-3i64..4).prop_map(Value::from),
            any::<f64>()
                .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            Just(Value::from(f64::MAX)),
            Just(Value::from(0.5)),
            Just(Value::from(f64::MIN_POSITIVE)),
            any::<String>().prop_map(Value::from),
            "[a-zA-Z_0-9/ .~-]{0,12}".prop_map(Value::from),
            Just(Value::from("")),
            Just(Value::from("gateway")),
            Just(Value::from("on-miss")),
            proptest::sample::select(super::ProcessAction::NAMES.to_vec()).prop_map(Value::from),
            Just(Value::from("x".repeat(100_000))),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                proptest::collection::btree_map(field(), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Field names: every tool's, and a few that are nobody's.
    fn field() -> impl Strategy<Value = String> {
        prop_oneof![
            proptest::sample::select(vec![
                "command",
                "argv",
                "cwd",
                "env",
                "timeout",
                "host",
                "security",
                "ask",
                "node",
                "egress",
                "path",
                "offset",
                "limit",
                "content",
                "old_string",
                "new_string",
                "replace_all",
                "pattern",
                "glob",
                "action",
                "runId",
                "cursor",
                "wait",
                "input",
                "PATH",
                "LANG",
            ])
            .prop_map(str::to_owned),
            "[a-z_]{0,8}",
            any::<String>(),
        ]
    }

    /// Tool names, and a few that are no tool's.
    fn tool() -> impl Strategy<Value = &'static str> {
        proptest::sample::select(vec![
            "exec", "process", "read", "write", "edit", "list", "grep", "session", "", "rm",
        ])
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Any arguments for any tool decode or are refused as invalid parameters; nothing
        /// panics, and whatever decodes survives what the server does with it next.
        #[test]
        fn decoding_any_arguments_never_panics(
            tool in tool(),
            fields in proptest::collection::btree_map(field(), any_json(), 0..8),
            bare in any::<bool>(),
        ) {
            let args: JsonObject = fields.into_iter().collect();
            let args = if bare && args.is_empty() { None } else { Some(args) };
            match decode(tool, args) {
                Ok(call) => use_decoded(&call),
                Err(e) => prop_assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS),
            }
        }

        /// The server accepts exactly what the published schema accepts (for `exec`, plus
        /// the one rule a flat schema cannot state: exactly one of `command` and `argv`).
        #[test]
        fn the_decoder_agrees_with_the_published_schemas(
            tool in tool(),
            fields in proptest::collection::btree_map(field(), any_json(), 0..6),
        ) {
            let validators = validators();
            let Some((_, validator)) = validators.iter().find(|(n, _)| n == tool) else {
                prop_assert!(decode(tool, None).is_err());
                return Ok(());
            };
            let args: JsonObject = fields.into_iter().collect();
            let one_command = tool != "exec"
                || (args.contains_key("command") != args.contains_key("argv"));
            // `process`: every action but `list` names its run, `write` its input.
            let action = args.get("action").and_then(Value::as_str);
            let needs = tool != "process"
                || ((action == Some("list") || args.contains_key("runId"))
                    && (action != Some("write") || args.contains_key("input")));
            let schema_ok =
                validator.is_valid(&Value::Object(args.clone())) && one_command && needs;
            let decoded = decode(tool, Some(args.clone()));
            prop_assert_eq!(schema_ok, decoded.is_ok(), "{} {:?}: {:?}", tool, args, decoded.err());
        }
    }
}
