//! The agent-facing MCP server: the `exec` tool, the file tools, and `session` (slash
//! commands), served over stdio (`warden mcp`) and Streamable HTTP (`warden gateway
//! run`). A denial or a non-zero exit is a normal tool result that says what happened;
//! pending system events ride along with every result.

use std::collections::BTreeMap;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use runner::{CommandSpec, ExecRequest, Outcome, RunReport};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::credentials::Identity;
use crate::gateway::{Gateway, seconds};
use crate::http::RequestStop;
use crate::sessions::SessionKey;

/// One MCP connection's view of the gateway.
#[derive(Clone)]
pub struct WardenMcp {
    gateway: Arc<Gateway>,
    /// The agent of a stdio server (chosen by whoever started it). Over HTTP there is
    /// none: each request's credential names the agent.
    agent: Option<String>,
    default_session: String,
}

impl WardenMcp {
    /// Serve `gateway` over stdio as `agent`, in `session`.
    pub fn new(
        gateway: Arc<Gateway>,
        agent: impl Into<String>,
        session: impl Into<String>,
    ) -> Self {
        WardenMcp {
            gateway,
            agent: Some(agent.into()),
            default_session: session.into(),
        }
    }

    /// Serve `gateway` over HTTP: the agent of every request comes from the credential it
    /// authenticated with, the session is its MCP session.
    pub fn for_http(gateway: Arc<Gateway>) -> Self {
        WardenMcp {
            gateway,
            agent: None,
            default_session: "default".into(),
        }
    }

    /// Whose session this request acts in. Over HTTP the agent is the authenticated
    /// credential's and nothing else; a request that somehow lacks one is refused.
    fn key(&self, context: &RequestContext<RoleServer>) -> Result<SessionKey, ErrorData> {
        let parts = context.extensions.get::<http::request::Parts>();
        let agent = match (
            parts.and_then(|p| p.extensions.get::<Identity>()),
            &self.agent,
        ) {
            (Some(identity), _) => identity.agent.clone(),
            (None, Some(agent)) => agent.clone(),
            (None, None) => {
                return Err(ErrorData::invalid_request(
                    "unauthenticated request: no credential names the agent",
                    None,
                ));
            }
        };
        let session = parts
            .and_then(|p| p.headers.get("mcp-session-id"))
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .unwrap_or_else(|| self.default_session.clone());
        Ok(SessionKey { agent, session })
    }
}

fn schema(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

/// The tools, with their input schemas.
pub fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "exec",
            "Run a shell command (`command`) or a program with arguments (`argv`). Warden decides where it \
             runs and whether it may (policy, allowlist, human approval) and enforces a timeout and a \
             200,000-byte output cap. A denial is reported with the rule that produced it.",
            schema(json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "A shell command line."},
                    "argv": {"type": "array", "items": {"type": "string"}, "description": "Program and arguments; no shell involved."},
                    "cwd": {"type": "string", "description": "Working directory (absolute, or relative to the workspace)."},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Extra environment variables (only allowlisted names)."},
                    "timeout": {"type": "number", "description": "Timeout in seconds."},
                    "host": {"type": "string", "enum": ["sandbox", "gateway", "node"]},
                    "security": {"type": "string", "enum": ["deny", "allowlist", "full"]},
                    "ask": {"type": "string", "enum": ["off", "on-miss", "always"]},
                    "node": {"type": "string"}
                },
                "additionalProperties": false
            })),
        ),
        Tool::new(
            "read",
            "Read a text file (optionally `offset` = first line, 1-based, and `limit` = number of lines).",
            schema(json!({
                "type": "object",
                "properties": {"path": {"type": "string"}, "offset": {"type": "integer", "minimum": 1}, "limit": {"type": "integer", "minimum": 1}},
                "required": ["path"], "additionalProperties": false
            })),
        ),
        Tool::new(
            "write",
            "Create or replace a file with `content` (parent directories are created).",
            schema(json!({
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"], "additionalProperties": false
            })),
        ),
        Tool::new(
            "edit",
            "Replace the exact text `old_string` with `new_string` in a file (once, unless `replace_all`).",
            schema(json!({
                "type": "object",
                "properties": {"path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"}, "replace_all": {"type": "boolean"}},
                "required": ["path", "old_string", "new_string"], "additionalProperties": false
            })),
        ),
        Tool::new(
            "list",
            "List a directory (default: the workspace).",
            schema(json!({
                "type": "object", "properties": {"path": {"type": "string"}}, "additionalProperties": false
            })),
        ),
        Tool::new(
            "grep",
            "Search files for a regular expression (`path` defaults to the workspace; `glob` filters file names).",
            schema(json!({
                "type": "object",
                "properties": {"pattern": {"type": "string"}, "path": {"type": "string"}, "glob": {"type": "string"}},
                "required": ["pattern"], "additionalProperties": false
            })),
        ),
        Tool::new(
            "session",
            "Apply a slash command to this session: `/exec host=… security=… ask=… node=…` (any subset) or \
             `/elevated on|off|ask|full`. Session settings are still capped by the host's approvals file.",
            schema(json!({
                "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"], "additionalProperties": false
            })),
        ),
    ]
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecArgs {
    command: Option<String>,
    argv: Option<Vec<String>>,
    cwd: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    timeout: Option<f64>,
    host: Option<String>,
    security: Option<String>,
    ask: Option<String>,
    node: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    path: String,
    offset: Option<usize>,
    limit: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    path: String,
    content: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EditArgs {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    #[serde(default)]
    path: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GrepArgs {
    pattern: String,
    #[serde(default)]
    path: String,
    glob: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SessionArgs {
    command: String,
}

fn parse<T: serde::de::DeserializeOwned>(args: Option<JsonObject>) -> Result<T, ErrorData> {
    serde_json::from_value(Value::Object(args.unwrap_or_default()))
        .map_err(|e| ErrorData::invalid_params(format!("invalid arguments: {e}"), None))
}

/// A tool call with its arguments decoded.
#[derive(Debug)]
enum ToolCall {
    Exec(ExecArgs),
    Read(ReadArgs),
    Write(WriteArgs),
    Edit(EditArgs),
    List(ListArgs),
    Grep(GrepArgs),
    Session(SessionArgs),
}

/// Decode the arguments of tool `name`: the only place a client's JSON becomes typed
/// values. The transport already parsed the request (serde_json stops at 128 levels of
/// nesting, and rmcp ignores what does not parse); every field is a flat value, so
/// nothing here recurses into what the client sent (`tests::decoding_*`).
fn decode(name: &str, args: Option<JsonObject>) -> Result<ToolCall, ErrorData> {
    Ok(match name {
        "exec" => ToolCall::Exec(parse(args)?),
        "read" => ToolCall::Read(parse(args)?),
        "write" => ToolCall::Write(parse(args)?),
        "edit" => ToolCall::Edit(parse(args)?),
        "list" => ToolCall::List(parse(args)?),
        "grep" => ToolCall::Grep(parse(args)?),
        "session" => ToolCall::Session(parse(args)?),
        other => {
            return Err(ErrorData::invalid_params(
                format!("unknown tool {other:?}"),
                None,
            ));
        }
    })
}

fn parse_mode<T: std::str::FromStr<Err = String>>(
    value: Option<String>,
) -> Result<Option<T>, ErrorData> {
    value
        .map(|v| {
            v.parse::<T>()
                .map_err(|e| ErrorData::invalid_params(e, None))
        })
        .transpose()
}

/// The exec request a tool call describes (the agent and session come from the
/// connection, not from the arguments).
fn exec_request(args: ExecArgs, gateway: &Gateway) -> Result<ExecRequest, ErrorData> {
    let command = match (args.command, args.argv) {
        (Some(c), None) => CommandSpec::Shell(c),
        (None, Some(a)) => CommandSpec::Argv(a),
        _ => {
            return Err(ErrorData::invalid_params(
                "give exactly one of `command` or `argv`",
                None,
            ));
        }
    };
    let cwd = args.cwd.map(|c| {
        let p = std::path::PathBuf::from(&c);
        match (p.is_absolute(), gateway.files().and_then(|f| f.workspace())) {
            (false, Some(ws)) => ws.join(p),
            _ => p,
        }
    });
    let mut request = ExecRequest::new(String::new(), String::new(), command);
    request.cwd = cwd;
    request.env = args.env;
    request.params = policy::ExecParams {
        host: parse_mode(args.host)?,
        security: parse_mode(args.security)?,
        ask: parse_mode(args.ask)?,
        node: args.node,
        timeout: args.timeout.and_then(seconds),
    };
    Ok(request)
}

/// The structured form of a run report.
pub fn report_json(report: &RunReport) -> Value {
    let mut v = json!({
        "runId": report.run_id,
        "host": report.host,
        "decision": report.decision,
        "exitCode": report.exit_code(),
    });
    match &report.outcome {
        Outcome::Finished { output } => {
            v["status"] = "finished".into();
            v["signal"] = match output.status {
                caps::ExitStatus::Signal(s) => s.into(),
                caps::ExitStatus::Code(_) => Value::Null,
            };
            v["stdout"] = output.stdout.clone().into();
            v["stderr"] = output.stderr.clone().into();
            v["truncated"] = output.truncated.into();
            v["timedOut"] = output.timed_out.into();
            v["durationMs"] = (output.duration.as_millis() as u64).into();
        }
        Outcome::Denied { reason, rule } => {
            v["status"] = "denied".into();
            v["reason"] = reason.as_str().into();
            v["rule"] = rule.clone().into();
        }
        Outcome::Error { message, .. } => {
            v["status"] = "error".into();
            v["error"] = message.clone().into();
        }
        Outcome::Cancelled { started } => {
            v["status"] = "cancelled".into();
            v["started"] = (*started).into();
        }
    }
    v["message"] = report.summary().into();
    v
}

fn report_text(report: &RunReport) -> String {
    match &report.outcome {
        Outcome::Finished { output } => format!(
            "{} · {} ms · run {}\n{}",
            report.summary(),
            output.duration.as_millis(),
            report.run_id,
            output.combined
        ),
        _ => format!("{} · run {}", report.summary(), report.run_id),
    }
}

/// A tool result carrying `value`, a text summary, and the pending events.
fn result(mut value: Value, text: String, events: Vec<String>, is_error: bool) -> CallToolResult {
    let mut content = vec![ContentBlock::text(text)];
    if !events.is_empty() {
        content.push(ContentBlock::text(format!(
            "System events:\n{}",
            events.join("\n")
        )));
    }
    value["events"] = json!(events);
    let mut r = if is_error {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    r.structured_content = Some(value);
    r
}

/// At most this much of written text is shown in an approval prompt.
const PREVIEW_CHARS: usize = 400;

/// Text as the approver sees it in a prompt: quoted, cut at [`PREVIEW_CHARS`] characters.
fn preview(text: &str) -> String {
    let cut: String = text.chars().take(PREVIEW_CHARS).collect();
    if cut.len() < text.len() {
        format!("{cut:?}… ({} more bytes)", text.len() - cut.len())
    } else {
        format!("{cut:?}")
    }
}

/// A file-tool write: refused paths are refused before anyone is asked; then the
/// permission mode decides.
async fn authorize(
    gateway: &Gateway,
    key: &SessionKey,
    files: &crate::files::FileTools,
    (tool, path, detail): (&str, &str, &str),
    stop: impl Future<Output = ()>,
) -> Result<(), String> {
    files.check_writable(path).map_err(|e| e.to_string())?;
    gateway
        .authorize_write(key, path, format!("{tool} {path}: {detail}"), stop)
        .await
}

/// What ends the work of one request: the client's `notifications/cancelled` for it
/// (rmcp's request token, which also fires when the connection's service ends) and,
/// over HTTP, the client going away before its response is complete or its MCP session
/// ending.
fn stop_of(context: &RequestContext<RoleServer>) -> impl Future<Output = ()> + use<> {
    let cancelled = context.ct.clone();
    let gone = context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.extensions.get::<RequestStop>())
        .map(|s| s.0.clone());
    async move {
        match gone {
            Some(gone) => tokio::select! {
                () = cancelled.cancelled() => {}
                () = gone.cancelled() => {}
            },
            None => cancelled.cancelled().await,
        }
    }
}

impl WardenMcp {
    async fn dispatch(
        &self,
        name: &str,
        args: Option<JsonObject>,
        key: &SessionKey,
        events: Vec<String>,
        stop: impl Future<Output = ()>,
    ) -> Result<CallToolResult, ErrorData> {
        let gateway = &self.gateway;
        let files = || {
            gateway.files().ok_or_else(|| {
                ErrorData::invalid_request("no workspace is configured for file tools", None)
            })
        };
        let file_result = |r: Result<Value, crate::files::FileError>, events: Vec<String>| match r {
            Ok(v) => {
                let text = match &v["text"] {
                    Value::String(s) => s.clone(),
                    _ => serde_json::to_string_pretty(&v).unwrap_or_default(),
                };
                result(v, text, events, false)
            }
            Err(e) => result(json!({"error": e.to_string()}), e.to_string(), events, true),
        };
        match decode(name, args)? {
            ToolCall::Exec(a) => {
                let request = exec_request(a, gateway)?;
                let report = gateway.exec(key, request, stop).await;
                let failed = !matches!(report.outcome, Outcome::Finished { .. });
                Ok(result(
                    report_json(&report),
                    report_text(&report),
                    events,
                    failed,
                ))
            }
            ToolCall::Read(a) => {
                let r = files()?
                    .read(&a.path, a.offset, a.limit)
                    .map(|t| json!({"path": a.path, "text": t}));
                Ok(file_result(r, events))
            }
            ToolCall::Write(a) => {
                let detail = format!("{} bytes: {}", a.content.len(), preview(&a.content));
                if let Err(e) =
                    authorize(gateway, key, files()?, ("write", &a.path, &detail), stop).await
                {
                    return Ok(result(json!({"error": e.clone()}), e, events, true));
                }
                let r = files()?
                    .write(&a.path, &a.content)
                    .map(|n| json!({"path": a.path, "bytes": n, "text": format!("wrote {n} bytes to {}", a.path)}));
                Ok(file_result(r, events))
            }
            ToolCall::Edit(a) => {
                let detail = format!(
                    "replace {} with {}",
                    preview(&a.old_string),
                    preview(&a.new_string)
                );
                if let Err(e) =
                    authorize(gateway, key, files()?, ("edit", &a.path, &detail), stop).await
                {
                    return Ok(result(json!({"error": e.clone()}), e, events, true));
                }
                let r = files()?
                    .edit(&a.path, &a.old_string, &a.new_string, a.replace_all)
                    .map(|n| json!({"path": a.path, "replacements": if a.replace_all { n } else { 1 }, "text": format!("edited {}", a.path)}));
                Ok(file_result(r, events))
            }
            ToolCall::List(a) => {
                let r = files()?.list(&a.path).map(|(entries, truncated)| {
                    let text = entries
                        .iter()
                        .map(|e| if e.kind == caps::FileKind::Dir { format!("{}/", e.name) } else { e.name.clone() })
                        .collect::<Vec<_>>()
                        .join("\n");
                    json!({"path": a.path, "entries": entries, "truncated": truncated, "text": text})
                });
                Ok(file_result(r, events))
            }
            ToolCall::Grep(a) => {
                let r = files()?.grep(&a.pattern, &a.path, a.glob.as_deref()).map(
                    |(matches, truncated)| {
                        let text = matches
                            .iter()
                            .map(|m| format!("{}:{}:{}", m.path, m.line, m.text))
                            .collect::<Vec<_>>()
                            .join("\n");
                        json!({"matches": matches, "truncated": truncated, "text": text})
                    },
                );
                Ok(file_result(r, events))
            }
            ToolCall::Session(a) => Ok(match gateway.slash_command(key, &a.command) {
                Ok(message) => result(
                    json!({"ok": true, "message": message}),
                    message,
                    events,
                    false,
                ),
                Err(e) => result(
                    json!({"ok": false, "error": e.to_string()}),
                    e.to_string(),
                    events,
                    true,
                ),
            }),
        }
    }
}

impl ServerHandler for WardenMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("warden", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Warden runs your shell commands under policy: `exec` runs a command (denials name the \
                 rule), the file tools work inside the authorized paths, and `session` applies /exec and \
                 /elevated. System events about earlier runs arrive with later results.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let key = self.key(&context)?;
        // Events queued before this call ride along with its result; a call rejected as
        // a protocol error delivers nothing, so they wait for the next one.
        let events = self.gateway.take_events(&key);
        let result = self
            .dispatch(
                &request.name,
                request.arguments,
                &key,
                events.clone(),
                stop_of(&context),
            )
            .await;
        if result.is_err() {
            self.gateway.return_events(&key, events);
        }
        result.map(Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What the server does with decoded arguments before the analysis or the file tools
    /// see them: policy modes, the timeout, prompt previews.
    fn use_decoded(call: &ToolCall) {
        match call {
            ToolCall::Exec(a) => {
                let _ = parse_mode::<policy::Host>(a.host.clone());
                let _ = parse_mode::<policy::Security>(a.security.clone());
                let _ = parse_mode::<policy::Ask>(a.ask.clone());
                if let Some(t) = a.timeout {
                    assert!(seconds(t).is_none_or(|d| d.as_secs_f64() <= 1e9));
                }
            }
            ToolCall::Write(a) => {
                let _ = preview(&a.content);
            }
            ToolCall::Edit(a) => {
                let _ = (preview(&a.old_string), preview(&a.new_string));
            }
            _ => {}
        }
    }

    /// A `tools/call` request as rmcp reads it off the wire: the whole JSON-RPC message
    /// parsed by serde_json, then the arguments decoded. `Err(None)`: the transport drops
    /// the line as unparsable (it answers nothing and keeps reading).
    fn receive(params: &str) -> Result<ToolCall, Option<ErrorData>> {
        let line = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{params}}}"#);
        let message: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                // rmcp ignores syntax errors (too deep included) and truncated lines
                // rather than failing.
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

    /// Any JSON value: every scalar kind (extreme numbers, odd strings) and nesting.
    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>()
                .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            Just(Value::from(f64::MAX)),
            Just(Value::from(f64::MIN_POSITIVE)),
            any::<String>().prop_map(Value::from),
            "[a-z/ .~-]{0,12}".prop_map(Value::from),
            Just(Value::from("gateway")),
            Just(Value::from("x".repeat(100_000))),
        ];
        leaf.prop_recursive(8, 64, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
                proptest::collection::btree_map(field(), inner, 0..6)
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
                "path",
                "offset",
                "limit",
                "content",
                "old_string",
                "new_string",
                "replace_all",
                "pattern",
                "glob",
            ])
            .prop_map(str::to_owned),
            "[a-z_]{0,8}",
            any::<String>(),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Any arguments for any tool decode or are refused as invalid parameters; nothing
        /// panics, and whatever decodes survives what the server does with it next.
        #[test]
        fn decoding_any_arguments_never_panics(
            tool in proptest::sample::select(vec![
                "exec", "read", "write", "edit", "list", "grep", "session", "", "rm",
            ]),
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
    }
}
