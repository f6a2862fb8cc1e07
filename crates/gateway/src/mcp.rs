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
        match name {
            "exec" => {
                let request = exec_request(parse(args)?, gateway)?;
                let report = gateway.exec(key, request, stop).await;
                let failed = !matches!(report.outcome, Outcome::Finished { .. });
                Ok(result(
                    report_json(&report),
                    report_text(&report),
                    events,
                    failed,
                ))
            }
            "read" => {
                let a: ReadArgs = parse(args)?;
                let r = files()?
                    .read(&a.path, a.offset, a.limit)
                    .map(|t| json!({"path": a.path, "text": t}));
                Ok(file_result(r, events))
            }
            "write" => {
                let a: WriteArgs = parse(args)?;
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
            "edit" => {
                let a: EditArgs = parse(args)?;
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
            "list" => {
                let a: ListArgs = parse(args)?;
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
            "grep" => {
                let a: GrepArgs = parse(args)?;
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
            "session" => {
                let a: SessionArgs = parse(args)?;
                Ok(match gateway.slash_command(key, &a.command) {
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
                })
            }
            other => Err(ErrorData::invalid_params(
                format!("unknown tool {other:?}"),
                None,
            )),
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
