//! The agent-facing MCP server: the `exec` tool, the file tools, and `session` (slash
//! commands), served over stdio (`warden mcp`) and Streamable HTTP (`warden gateway
//! run`). A denial or a non-zero exit is a normal tool result that says what happened;
//! pending system events about other runs ride along in a block of their own.
//!
//! `tools.rs` lists the tools and their schemas, `args.rs` decodes (and refuses, naming
//! the field) what a client sends, `result.rs` shapes what goes back, `progress.rs`
//! reports long calls, `process_tool.rs` serves runs that outlive their call (`exec`'s
//! `yield`, the `process` tool), `tasks.rs` turns a long `exec` into an MCP task for
//! clients that take them, and `protocol.rs` keeps JSON-RPC error codes to the
//! specification.

mod args;
mod keys;
pub(crate) mod process_tool;
mod progress;
pub mod protocol;
mod result;
mod tasks;
mod tools;

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, CustomRequest,
    CustomResult, GetTaskParams, GetTaskResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use runner::{ExecRequest, Outcome};
use serde_json::json;

use crate::credentials::Identity;
use crate::gateway::Gateway;
use crate::sessions::SessionKey;

pub use policy::MAX_TIMEOUT_SECONDS;
pub use result::{report_json, report_text};
pub use tasks::{POLL_INTERVAL as TASK_POLL_INTERVAL, TASK_AFTER};
pub use tools::tools;

use args::ToolCall;
use policy::ExecArgs;
use progress::Progress;

/// What a transport puts in a request's extensions: cancelled when the request's client
/// goes away before its response is complete, or when its MCP session ends (DELETE, idle
/// close). The handler stops what the request started when it fires.
#[derive(Clone, Debug)]
pub(crate) struct RequestStop(pub tokio_util::sync::CancellationToken);

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
        let named = parts
            .and_then(|p| p.headers.get("mcp-session-id"))
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let key = SessionKey {
            agent,
            session: named
                .clone()
                .unwrap_or_else(|| self.default_session.clone()),
        };
        if named.is_none() {
            // The stdio server's session, or a stateless HTTP call's: it goes on as long
            // as calls come. (A named MCP session's state began when it was created.)
            self.gateway.sessions().open(&key);
        }
        Ok(key)
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

/// Lines of `text`, for messages.
fn lines(text: &str) -> usize {
    text.lines().count()
}

impl WardenMcp {
    async fn exec(
        &self,
        args: ExecArgs,
        key: &SessionKey,
        events: Vec<String>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let yield_for = args.yield_for();
        let background = args.background;
        // The agent and session come from the connection, never from the arguments.
        let request = match ExecRequest::from_args(&key.agent, &key.session, args) {
            Ok(request) => request,
            // Decoding already refused these; a request built otherwise says why here.
            Err(e) => return result::failed(format!("exec: {e}"), events).into(),
        };
        // `background` asks for a run id to drive with `process`: no task for it.
        if tasks::client_takes_tasks(context) && !background {
            let wait = yield_for.unwrap_or(tasks::TASK_AFTER);
            return self.exec_as_task(request, key, wait, events, context).await;
        }
        match yield_for {
            Some(yield_for) => {
                self.exec_yielding(request, key, yield_for, events, context)
                    .await
            }
            None => self.exec_to_end(request, key, events, context).await,
        }
        .into()
    }

    /// Run `request` to its end and answer with its whole result.
    async fn exec_to_end(
        &self,
        mut request: ExecRequest,
        key: &SessionKey,
        events: Vec<String>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let progress = Progress::of(context);
        request.live = progress.as_ref().map(|p| p.live.clone());
        let run = self.gateway.exec(key, request, stop_of(context));
        let report = match progress {
            Some(progress) => progress.during(run).await,
            None => run.await,
        };
        if !matches!(report.outcome, Outcome::Cancelled { .. }) {
            // This response carries the whole result: later events about the run need
            // not repeat it.
            self.gateway.sessions().mark_delivered(key, &report.run_id);
        }
        result::exec_result(&report, events)
    }

    async fn dispatch(
        &self,
        call: ToolCall,
        key: &SessionKey,
        events: Vec<String>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let gateway = &self.gateway;
        let files = || {
            gateway.files().ok_or_else(|| {
                ErrorData::invalid_request("no workspace is configured for file tools", None)
            })
        };
        let done: CallToolResult = match call {
            ToolCall::Exec(a) => return Ok(self.exec(a, key, events, context).await),
            ToolCall::Process(a) => self.process(a, key, events, context).await,
            ToolCall::Read(a) => match files()?.read(&a.path, a.offset, a.limit) {
                Ok(text) => result::done(
                    json!({"path": a.path, "text": text}),
                    format!("read {} lines of {}", lines(&text), a.path),
                    text,
                    events,
                ),
                Err(e) => result::file_failed(&e, events),
            },
            ToolCall::Write(a) => {
                let detail = format!("{} bytes: {}", a.content.len(), result::preview(&a.content));
                let asked = ("write", a.path.as_str(), detail.as_str());
                if let Err(e) = authorize(gateway, key, files()?, asked, stop_of(context)).await {
                    return Ok(result::failed(e, events).into());
                }
                match files()?.write(&a.path, &a.content) {
                    Ok(n) => {
                        let message = format!("wrote {n} bytes to {}", a.path);
                        result::done(
                            json!({"path": a.path, "bytes": n}),
                            message.clone(),
                            message,
                            events,
                        )
                    }
                    Err(e) => result::file_failed(&e, events),
                }
            }
            ToolCall::Edit(a) => {
                let detail = format!(
                    "replace {} with {}",
                    result::preview(&a.old_string),
                    result::preview(&a.new_string)
                );
                let asked = ("edit", a.path.as_str(), detail.as_str());
                if let Err(e) = authorize(gateway, key, files()?, asked, stop_of(context)).await {
                    return Ok(result::failed(e, events).into());
                }
                match files()?.edit(&a.path, &a.old_string, &a.new_string, a.replace_all) {
                    Ok(n) => {
                        let n = if a.replace_all { n } else { 1 };
                        let message = format!("edited {}: {n} replacement(s)", a.path);
                        result::done(
                            json!({"path": a.path, "replacements": n}),
                            message.clone(),
                            message,
                            events,
                        )
                    }
                    Err(e) => result::file_failed(&e, events),
                }
            }
            ToolCall::List(a) => match files()?.list(&a.path) {
                Ok((entries, truncated)) => {
                    let text = entries
                        .iter()
                        .map(|e| {
                            if e.kind == caps::FileKind::Dir {
                                format!("{}/", e.name)
                            } else {
                                e.name.clone()
                            }
                        })
                        .collect::<Vec<_>>()
                        .join("\n");
                    let message = format!(
                        "{} entries{}",
                        entries.len(),
                        if truncated { " (truncated)" } else { "" }
                    );
                    result::done(
                        json!({"path": a.path, "entries": entries, "truncated": truncated}),
                        message,
                        text,
                        events,
                    )
                }
                Err(e) => result::file_failed(&e, events),
            },
            ToolCall::Grep(a) => match files()?.grep(&a.pattern, &a.path, a.glob.as_deref()) {
                Ok((matches, truncated)) => {
                    let text = matches
                        .iter()
                        .map(|m| format!("{}:{}:{}", m.path, m.line, m.text))
                        .collect::<Vec<_>>()
                        .join("\n");
                    let message = format!(
                        "{} matching lines{}",
                        matches.len(),
                        if truncated { " (truncated)" } else { "" }
                    );
                    result::done(
                        json!({"matches": matches, "truncated": truncated}),
                        message,
                        text,
                        events,
                    )
                }
                Err(e) => result::file_failed(&e, events),
            },
            ToolCall::Session(a) => match gateway.slash_command(key, &a.command) {
                Ok(message) => result::done(json!({}), message.clone(), message, events),
                Err(e) => result::failed(e.to_string(), events),
            },
        };
        Ok(done.into())
    }
}

impl ServerHandler for WardenMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
            .with_server_info(
                Implementation::new("warden", env!("CARGO_PKG_VERSION"))
                    .with_title("Warden"),
            )
            .with_instructions(
                "Warden runs your shell commands under policy: `exec` runs a command (denials name the \
                 rule), the file tools work inside the authorized paths, and `session` applies /exec and \
                 /elevated. The first block of every result is the whole result of that call; events about \
                 other runs come in a second, labelled block. Send a progressToken to hear about long runs.",
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
        // Arguments are checked before anything else: a refused call delivers nothing.
        let call = args::decode(&request.name, request.arguments)?;
        // Events queued before this call ride along with its result.
        let events = self.gateway.take_events(&key);
        let result = self.dispatch(call, &key, events.clone(), &context).await;
        if result.is_err() {
            // Not delivered after all: they wait for the next call.
            self.gateway.return_events(&key, events);
        }
        result
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        WardenMcp::get_task(self, &request.task_id, &context)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        WardenMcp::update_task(self, &request.task_id, &context)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        WardenMcp::cancel_task(self, &request.task_id, &context)
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        Err(protocol::custom_request_error(
            &request.method,
            request.params.as_ref(),
        ))
    }
}
