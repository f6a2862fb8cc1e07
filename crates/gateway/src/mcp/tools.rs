//! The tools as clients list them: titles, annotations, input schemas (enforced by
//! `args.rs`) and output schemas (what `structuredContent` always satisfies, `result.rs`).
//!
//! Input schemas keep a flat root — `type`, `properties`, `required`,
//! `additionalProperties` and nothing else. The Anthropic API refuses a tool whose root
//! has `oneOf`/`anyOf`/`allOf`, and Claude Code silently drops tools whose root has
//! those, `not` or `if`/`then`/`else`; so the one rule that needs a sibling of a field —
//! exactly one of `exec`'s `command` and `argv` — is stated in both fields' descriptions
//! and enforced by the server (-32602 naming the field). Every other constraint sits
//! inside the field it constrains.

use std::sync::{Arc, OnceLock};

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

/// The run events delivered with a result (every tool's output has them).
fn events_schema() -> Value {
    json!({
        "type": "array",
        "items": {"type": "string"},
        "description": "System events about other runs of this session since the last call (delivered once); a run whose result was already returned is one line, without output."
    })
}

/// What every file tool result may carry: its words, an error, the events.
fn file_output(properties: Value, required: &[&str]) -> Arc<JsonObject> {
    let mut props = match properties {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    };
    props.insert(
        "ok".into(),
        json!({"type": "boolean", "description": "False when the call failed; `error` says why."}),
    );
    props.insert(
        "message".into(),
        json!({"type": "string", "description": "What happened, in words."}),
    );
    props.insert(
        "error".into(),
        json!({"type": "string", "description": "Why the call failed (only when `ok` is false)."}),
    );
    props.insert("events".into(), events_schema());
    let mut req: Vec<&str> = vec!["ok", "message", "events"];
    req.extend_from_slice(required);
    object(json!({
        "type": "object",
        "properties": props,
        "required": req,
    }))
}

fn exec_output() -> Value {
    json!({
        "type": "object",
        "properties": {
            "message": {"type": "string", "description": "What happened, in words: the exit code, or the denial with its rule, or the error."},
            "status": {"type": "string", "enum": ["finished", "denied", "error", "cancelled", "pending", "running"], "description": "pending and running: the call returned at its `yield` (or at once, `background`) and the run goes on; read it with the `process` tool."},
            "exitCode": {"type": ["integer", "null"], "description": "The command's code (124 timed out, 128+N signal N), 77 denied, 75 nobody answered, 130 cancelled, 125-127 not run; null while it runs."},
            "runId": {"type": "string"},
            "host": {"type": "string", "description": "Where it ran or would have run."},
            "decision": {
                "type": "object",
                "properties": {
                    "decision": {"type": "string", "enum": ["allow", "ask", "deny"]},
                    "reason": {"type": "string"},
                    "rule": {"type": "string"}
                },
                "required": ["decision", "reason", "rule"]
            },
            "stdout": {"type": "string", "description": "Standard output (lossy where it is not UTF-8: see stdoutBase64). When it was cut: its beginning, a line `… (truncated: N bytes dropped here; …) …`, its end."},
            "stderr": {"type": "string", "description": "Standard error, likewise. Its end is always here when the command wrote any."},
            "stdoutBase64": {"type": "string", "contentEncoding": "base64", "description": "The exact kept bytes of stdout (the first keptFirst, then the last keptLast), present only when they are not UTF-8."},
            "stderrBase64": {"type": "string", "contentEncoding": "base64"},
            "stdoutSize": stream_size(),
            "stderrSize": stream_size(),
            "signal": {"type": ["integer", "null"], "description": "The signal that killed the command, or null."},
            "truncated": {"type": "boolean", "description": "Some output was dropped to keep within the 200,000-byte cap (see stdoutSize and stderrSize)."},
            "timedOut": {"type": "boolean", "description": "The run hit its timeout and its process tree was killed."},
            "cancelled": {"type": "boolean", "description": "The call was cancelled (the command, if started, was killed)."},
            "durationMs": {"type": "integer", "minimum": 0},
            "reason": {"type": "string", "description": "Machine-readable reason of a denial."},
            "rule": {"type": "string", "description": "The rule that denied it."},
            "error": {"type": "string"},
            "started": {"type": "boolean", "description": "For a cancelled run: whether the command had started."},
            "notices": {"type": "array", "items": {"type": "string"}, "description": "What stands on the host that you (and your user) should know though it did not change this run: a config edit not in force, the record not being written. Usually empty."},
            "egress": {
                "type": "array",
                "description": "sandbox.network = \"proxy\": every connection the command asked Warden's egress proxy for, in the order they ended. Absent otherwise.",
                "items": {
                    "type": "object",
                    "properties": {
                        "host": {"type": "string"},
                        "port": {"type": "integer", "minimum": 0, "maximum": 65535},
                        "kind": {"type": "string", "enum": ["connect", "http", "dns"], "description": "connect: a tunnel; http: one plain request; dns: a name looked up inside the sandbox (allowed: answered)."},
                        "allowed": {"type": "boolean"},
                        "reason": {"type": "string", "description": "The rule that allowed it, or why it was refused."},
                        "sent": {"type": "integer", "minimum": 0},
                        "received": {"type": "integer", "minimum": 0}
                    },
                    "required": ["host", "port", "kind", "allowed", "reason", "sent", "received"]
                }
            },
            "output": {"type": "string", "description": "pending, running: the output so far (stdout and stderr as they arrived), up to `cursor`."},
            "cursor": {"type": "integer", "minimum": 0, "description": "pending, running: where `process` poll goes on reading."},
            "events": events_schema()
        },
        "required": ["message", "status", "exitCode", "signal", "timedOut", "cancelled", "truncated", "runId", "host", "events"]
    })
}

/// The `process` tool's arguments: a flat object (which action needs which field is in
/// the descriptions, and checked by the server).
fn process_input() -> Value {
    json!({
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": super::args::ProcessAction::NAMES, "description": "list: your runs. poll: a run's output since `cursor`. write: `input` and `keys` to its standard input (typed on its terminal, with `tty`). close: end its standard input (on a terminal: Ctrl-D). kill: end it and its whole process tree. wait: wait up to `wait` seconds for its end. signal: send `signal` to its processes. resize: set its terminal to `rows` × `cols`."},
            "runId": {"type": "string", "minLength": 1, "description": "The run (`runId` of exec's result). Required by every action but list."},
            "cursor": {"type": "integer", "minimum": 0, "maximum": super::args::MAX_COUNT, "description": "poll, wait: the output offset to read from (the `cursor` a previous answer gave; 0 from the start). Absent: where the last answer about this run stopped."},
            "wait": {"type": "number", "minimum": 0, "maximum": super::args::MAX_WAIT_SECONDS, "description": "poll: seconds to wait for new output if there is none yet; wait: seconds to wait for the end (default 30). The answer comes at once when the run ends."},
            "input": {"type": "string", "minLength": 1, "description": "write (this or `keys`): text for the run's standard input, sent as UTF-8; include \\n to end a line (on a terminal, \\r or the Enter key)."},
            "keys": {"type": "array", "maxItems": super::keys::MAX_KEYS, "items": {"type": "string", "minLength": 1}, "description": "write: named keys sent after `input`, in order: Enter, Tab, Escape, Backspace, Space, Up, Down, Left, Right, Home, End, PageUp, PageDown, Insert, Delete, F1-F12, and control keys as C-c (Ctrl-C), C-d, C-z, C-\\ ... (case-insensitive)."},
            "signal": {"type": "string", "enum": super::args::SIGNALS.map(|(name, _)| name), "description": "signal (required): which signal (SIG prefix optional) goes to every process of the run."},
            "rows": {"type": "integer", "minimum": 1, "maximum": caps::TerminalSize::MAX, "description": "resize (required): the terminal's rows."},
            "cols": {"type": "integer", "minimum": 1, "maximum": caps::TerminalSize::MAX, "description": "resize (required): the terminal's columns."},
            "plain": {"type": "boolean", "description": "poll, wait, kill: `output` as plain text, a terminal's escape sequences and control characters (but newlines) removed; `cursor` still counts the bytes written."}
        },
        "required": ["action"], "additionalProperties": false
    })
}

/// What `process` returns: the run's state and output, or the list of runs.
fn process_output() -> Value {
    json!({
        "type": "object",
        "properties": {
            "message": {"type": "string", "description": "What happened, in words."},
            "ok": {"type": "boolean", "description": "False when the call failed; `error` says why."},
            "error": {"type": "string"},
            "runs": {"type": "array", "description": "list: your runs, oldest first.", "items": run_summary()},
            "run": run_summary(),
            "output": {"type": "string", "description": "poll, wait, kill: output (stdout and stderr as they arrived) from `from` to `cursor`."},
            "from": {"type": "integer", "minimum": 0, "description": "The offset of the first byte of `output`."},
            "cursor": {"type": "integer", "minimum": 0, "description": "The offset to read from next time."},
            "dropped": {"type": "integer", "minimum": 0, "description": "Bytes between the cursor asked for and `from` that are no longer kept (each run keeps its last 1 MiB of output)."},
            "more": {"type": "boolean", "description": "More output is already there past `cursor` (this answer stopped at the 200,000-byte cap)."},
            "result": {"type": "object", "description": "Once the run has ended: its result as `exec` gives it (without stdout and stderr, which are in `output`)."},
            "events": events_schema()
        },
        "required": ["message", "ok", "events"]
    })
}

/// One run as `process` lists it.
fn run_summary() -> Value {
    json!({
        "type": "object",
        "properties": {
            "runId": {"type": "string"},
            "command": {"type": "string"},
            "state": {"type": "string", "enum": ["pending", "running", "ended"], "description": "pending: being decided or waiting for a human; running; ended (see `exitCode`)."},
            "exitCode": {"type": ["integer", "null"], "description": "Once ended, as exec's exitCode; null before."},
            "elapsedMs": {"type": "integer", "minimum": 0},
            "written": {"type": "integer", "minimum": 0, "description": "Bytes of output written so far."},
            "tty": {"type": ["object", "null"], "description": "The run's terminal (exec's `tty`) at its latest size; null without one.", "properties": {"rows": {"type": "integer"}, "cols": {"type": "integer"}}}
        },
        "required": ["runId", "command", "state", "exitCode", "elapsedMs", "written"]
    })
}

/// What a command wrote to one stream, and which bytes of it the result keeps.
fn stream_size() -> Value {
    json!({
        "type": "object",
        "properties": {
            "written": {"type": "integer", "minimum": 0, "description": "Bytes the command wrote."},
            "kept": {"type": "integer", "minimum": 0, "description": "Bytes in the result (keptFirst + keptLast)."},
            "keptFirst": {"type": "integer", "minimum": 0, "description": "Kept bytes from the stream's beginning."},
            "keptLast": {"type": "integer", "minimum": 0, "description": "Kept bytes from the stream's end (0 unless cut)."},
            "cut": {"type": "boolean", "description": "Bytes between the two were dropped."}
        },
        "required": ["written", "kept", "keptFirst", "keptLast", "cut"]
    })
}

fn build() -> Vec<Tool> {
    let path = |what: &str| json!({"type": "string", "minLength": 1, "description": what});
    vec![
        Tool::new(
            "exec",
            "Run a shell command (`command`) or a program with arguments (`argv`). Warden decides where it \
             runs and whether it may (policy, allowlist, human approval) and enforces a timeout and a \
             200,000-byte output cap. The first content block is the whole result: the exit code or the \
             denial with the rule that produced it, then stdout and stderr, each labelled.",
            Arc::new(policy::ExecArgs::schema().clone()),
        )
        .with_title("Run a command")
        .with_raw_output_schema(object(exec_output()))
        .with_annotations(
            ToolAnnotations::with_title("Run a command")
                .read_only(false)
                .destructive(true)
                .idempotent(false)
                .open_world(true),
        ),
        Tool::new(
            "process",
            "Runs started by `exec` with `yield` or `background` that are still going (or ended \
             recently): `list` them; `poll` one's new output (from `cursor`, or from where the last \
             poll stopped; `wait` seconds for more); `write` text and named keys to its standard \
             input (its terminal, with `tty`); `close` its input; `signal` it; `resize` its \
             terminal; `kill` it (its whole process tree); `wait` for its end. Only your own runs \
             are visible. Each answer carries at most 200,000 bytes of output.",
            object(process_input()),
        )
        .with_title("Manage running commands")
        .with_raw_output_schema(object(process_output()))
        .with_annotations(
            ToolAnnotations::with_title("Manage running commands")
                .read_only(false)
                .destructive(true)
                .idempotent(false)
                .open_world(true),
        ),
        Tool::new(
            "read",
            "Read a text file (optionally `offset` = first line, 1-based, and `limit` = number of lines).",
            object(json!({
                "type": "object",
                "properties": {
                    "path": path("The file, relative to the workspace or absolute inside an authorized path."),
                    "offset": {"type": "integer", "minimum": 1, "maximum": super::args::MAX_COUNT, "description": "First line to return (1-based)."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": super::args::MAX_COUNT, "description": "Number of lines to return."}
                },
                "required": ["path"], "additionalProperties": false
            })),
        )
        .with_title("Read a file")
        .with_raw_output_schema(file_output(
            json!({"path": {"type": "string"}, "text": {"type": "string"}}),
            &[],
        ))
        .with_annotations(
            ToolAnnotations::with_title("Read a file")
                .read_only(true)
                .open_world(false),
        ),
        Tool::new(
            "write",
            "Create or replace a file with `content` (parent directories are created).",
            object(json!({
                "type": "object",
                "properties": {"path": path("The file to write."), "content": {"type": "string"}},
                "required": ["path", "content"], "additionalProperties": false
            })),
        )
        .with_title("Write a file")
        .with_raw_output_schema(file_output(
            json!({"path": {"type": "string"}, "bytes": {"type": "integer", "minimum": 0}}),
            &[],
        ))
        .with_annotations(
            ToolAnnotations::with_title("Write a file")
                .read_only(false)
                .destructive(true)
                .idempotent(true)
                .open_world(false),
        ),
        Tool::new(
            "edit",
            "Replace the exact text `old_string` with `new_string` in a file (once, unless `replace_all`).",
            object(json!({
                "type": "object",
                "properties": {
                    "path": path("The file to edit."),
                    "old_string": {"type": "string", "minLength": 1},
                    "new_string": {"type": "string"},
                    "replace_all": {"type": "boolean"}
                },
                "required": ["path", "old_string", "new_string"], "additionalProperties": false
            })),
        )
        .with_title("Edit a file")
        .with_raw_output_schema(file_output(
            json!({"path": {"type": "string"}, "replacements": {"type": "integer", "minimum": 0}}),
            &[],
        ))
        .with_annotations(
            ToolAnnotations::with_title("Edit a file")
                .read_only(false)
                .destructive(true)
                .idempotent(false)
                .open_world(false),
        ),
        Tool::new(
            "list",
            "List a directory (default: the workspace).",
            object(json!({
                "type": "object",
                "properties": {"path": {"type": "string", "description": "The directory (empty or absent: the workspace)."}},
                "additionalProperties": false
            })),
        )
        .with_title("List a directory")
        .with_raw_output_schema(file_output(
            json!({
                "path": {"type": "string"},
                "entries": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "kind": {"type": "string", "enum": ["file", "dir", "symlink", "socket", "other"]}},
                    "required": ["name", "kind"]
                }},
                "truncated": {"type": "boolean"}
            }),
            &[],
        ))
        .with_annotations(
            ToolAnnotations::with_title("List a directory")
                .read_only(true)
                .open_world(false),
        ),
        Tool::new(
            "grep",
            "Search files for a regular expression (`path` defaults to the workspace; `glob` filters file names).",
            object(json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "minLength": 1, "description": "A regular expression (Rust regex syntax)."},
                    "path": {"type": "string", "description": "Where to search (empty or absent: the workspace)."},
                    "glob": {"type": "string", "minLength": 1, "description": "Only files whose names match this glob."}
                },
                "required": ["pattern"], "additionalProperties": false
            })),
        )
        .with_title("Search files")
        .with_raw_output_schema(file_output(
            json!({
                "matches": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}, "line": {"type": "integer", "minimum": 1}, "text": {"type": "string"}},
                    "required": ["path", "line", "text"]
                }},
                "truncated": {"type": "boolean"}
            }),
            &[],
        ))
        .with_annotations(
            ToolAnnotations::with_title("Search files")
                .read_only(true)
                .open_world(false),
        ),
        Tool::new(
            "session",
            "Apply a slash command to this session: `/exec host=… security=… ask=… node=…` (any subset) or \
             `/elevated on|off|ask|full`. Session settings are still capped by the host's approvals file.",
            object(json!({
                "type": "object",
                "properties": {"command": {"type": "string", "minLength": 1, "description": "`/exec …` or `/elevated …`."}},
                "required": ["command"], "additionalProperties": false
            })),
        )
        .with_title("Session settings")
        .with_raw_output_schema(file_output(json!({}), &[]))
        .with_annotations(
            ToolAnnotations::with_title("Session settings")
                .read_only(false)
                .destructive(false)
                .idempotent(true)
                .open_world(false),
        ),
    ]
}

/// The tools, built once (every `tools/list` answers the same list).
pub fn tools() -> Vec<Tool> {
    static TOOLS: OnceLock<Vec<Tool>> = OnceLock::new();
    TOOLS.get_or_init(build).clone()
}

/// One tool's output schema.
#[cfg(test)]
pub fn output_schema(name: &str) -> Value {
    tools()
        .into_iter()
        .find(|t| t.name == name)
        .and_then(|t| t.output_schema)
        .map(|s| Value::Object(s.as_ref().clone()))
        .unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_schema_is_valid_2020_12_with_a_flat_root_object() {
        for tool in tools() {
            let input = Value::Object(tool.input_schema.as_ref().clone());
            let output = Value::Object(tool.output_schema.clone().unwrap().as_ref().clone());
            for schema in [&input, &output] {
                jsonschema::draft202012::meta::validate(schema)
                    .unwrap_or_else(|e| panic!("{}: {e}", tool.name));
                assert_eq!(schema["type"], "object", "{}", tool.name);
                // Clients that pass schemas to the Anthropic API (Claude Code among them)
                // refuse or drop tools with a composition or conditional at the root.
                for keyword in [
                    "oneOf", "anyOf", "allOf", "not", "if", "then", "else", "$ref",
                ] {
                    assert!(
                        schema.get(keyword).is_none(),
                        "{} has a root {keyword}",
                        tool.name
                    );
                }
            }
            let a = tool.annotations.as_ref().unwrap();
            assert!(tool.title.is_some() && a.title.is_some(), "{}", tool.name);
            let read_only = matches!(&*tool.name, "read" | "list" | "grep");
            assert_eq!(a.read_only_hint, Some(read_only), "{}", tool.name);
            if matches!(&*tool.name, "write" | "edit" | "exec") {
                assert_eq!(a.destructive_hint, Some(true), "{}", tool.name);
            }
            assert!(a.open_world_hint.is_some(), "{}", tool.name);
        }
    }
}
