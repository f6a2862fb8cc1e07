//! JSON-RPC errors as the specification numbers them, whatever rmcp does by itself:
//! `-32700` for a frame that is not JSON, `-32600` for JSON that is not a JSON-RPC 2.0
//! request (a batch, a wrong `jsonrpc`, a non-string method, an `id` of the wrong type),
//! `-32602` for a known method whose parameters do not fit, and `-32601` only for a
//! method that does not exist.
//!
//! rmcp drops unparsable stdio lines without a word, answers HTTP bodies that are not
//! JSON with a plain-text 415, and reads a known method with bad parameters (`tools/call`
//! with `"arguments": "str"`) as an unknown custom method (`-32601 tools/call`). The
//! stdio transport (`crate::stdio`) and the HTTP endpoint (`crate::http`) therefore check
//! each frame here first, and the handler maps rmcp's custom-request fallback back to
//! what it was ([`custom_request_error`]).

use rmcp::ErrorData;
use rmcp::model::{ClientJsonRpcMessage, ErrorCode};
use serde_json::{Value, json};

/// What to do with one incoming frame.
#[derive(Debug)]
pub enum Frame {
    /// A message for the MCP service.
    Message(Box<ClientJsonRpcMessage>),
    /// Not valid JSON-RPC: answer with this error response instead.
    Reject(Value),
    /// Something nobody answers (a notification or a response that does not fit).
    Ignore(String),
}

/// A JSON-RPC error response.
pub fn error_response(id: Value, code: ErrorCode, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code.0, "message": message.into()}})
}

/// Whether `id` is a request id JSON-RPC and MCP accept (a string or an integer).
fn valid_id(id: &Value) -> bool {
    id.is_string() || id.as_i64().is_some() || id.as_u64().is_some()
}

/// Classify one frame's bytes.
pub fn classify(bytes: &[u8]) -> Frame {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let value: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => {
            return Frame::Reject(error_response(
                Value::Null,
                ErrorCode::PARSE_ERROR,
                format!("Parse error: the message is not JSON ({e})"),
            ));
        }
    };
    let invalid = |id: Value, why: &str| {
        Frame::Reject(error_response(
            id,
            ErrorCode::INVALID_REQUEST,
            format!("Invalid Request: {why}"),
        ))
    };
    let object = match &value {
        Value::Object(o) => o,
        Value::Array(_) => {
            return invalid(
                Value::Null,
                "JSON-RPC batches are not supported by MCP; send one message at a time",
            );
        }
        _ => return invalid(Value::Null, "a JSON-RPC message must be an object"),
    };
    let id = object.get("id");
    // Errors echo the id when it is one; anything else is answered with null.
    let echo = id.filter(|i| valid_id(i)).cloned().unwrap_or(Value::Null);
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid(echo, "`jsonrpc` must be \"2.0\"");
    }
    match object.get("method") {
        Some(Value::String(_)) => {}
        Some(_) => return invalid(echo, "`method` must be a string"),
        None if object.contains_key("result") || object.contains_key("error") => {}
        None => return invalid(echo, "a request needs a `method`"),
    }
    let is_request = object.contains_key("method") && id.is_some();
    if let Some(id) = id
        && !valid_id(id)
        && (is_request || !id.is_null())
    {
        return invalid(Value::Null, "`id` must be a string or an integer");
    }
    if let Some(params) = object.get("params")
        && !params.is_object()
    {
        if is_request {
            return invalid(echo, "`params` must be an object");
        }
        return Frame::Ignore("a notification whose params are not an object".into());
    }
    match serde_json::from_value::<ClientJsonRpcMessage>(value) {
        Ok(message) => Frame::Message(Box::new(message)),
        Err(e) if is_request => invalid(echo, &format!("not an MCP request ({e})")),
        Err(e) => Frame::Ignore(format!("a message that is not MCP ({e})")),
    }
}

/// Request methods rmcp reads into typed requests: when one arrives as a custom request,
/// its parameters did not fit.
const KNOWN_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "tools/call",
    "tools/list",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "resources/subscribe",
    "resources/unsubscribe",
    "resources/directory/read",
    "prompts/get",
    "prompts/list",
    "completion/complete",
    "logging/setLevel",
    "subscriptions/listen",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "skills/list",
    "skills/get",
];

/// The error for a request rmcp could only read as a custom one: `-32602` naming what
/// does not fit for a known method, `-32601` for a method that does not exist.
pub fn custom_request_error(method: &str, params: Option<&Value>) -> ErrorData {
    if !KNOWN_METHODS.contains(&method) {
        return ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
            Some(json!({"method": method})),
        );
    }
    let field = |field: &str, why: &str| {
        ErrorData::invalid_params(
            format!("{method}: `{field}` {why}"),
            Some(json!({"method": method, "field": field})),
        )
    };
    let Some(params) = params.and_then(Value::as_object) else {
        return field("params", "must be an object");
    };
    if let Some(meta) = params.get("_meta")
        && !meta.is_object()
    {
        return field("_meta", "must be an object");
    }
    if method == "tools/call" {
        if !params.get("name").is_some_and(Value::is_string) {
            return field("name", "must be the tool's name, a string");
        }
        if params.get("arguments").is_some_and(|a| !a.is_object()) {
            return field("arguments", "must be an object of the tool's parameters");
        }
    }
    ErrorData::invalid_params(
        format!("{method}: the parameters do not fit the method"),
        Some(json!({"method": method})),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(frame: Frame) -> Option<i64> {
        match frame {
            Frame::Reject(v) => v["error"]["code"].as_i64(),
            _ => None,
        }
    }

    #[test]
    fn frames_get_the_codes_the_specification_gives() {
        for (text, expected) in [
            ("not json", -32700),
            ("{\"jsonrpc\":\"2.0\",", -32700),
            ("[]", -32600),
            (
                "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]",
                -32600,
            ),
            ("7", -32600),
            ("{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}", -32600),
            ("{\"id\":1,\"method\":\"ping\"}", -32600),
            ("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":7}", -32600),
            ("{\"jsonrpc\":\"2.0\",\"id\":1}", -32600),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"ping\"}",
                -32600,
            ),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}",
                -32600,
            ),
            (
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":3}",
                -32600,
            ),
        ] {
            assert_eq!(code(classify(text.as_bytes())), Some(expected), "{text}");
        }
        let ok = br#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"exec","arguments":{}}}"#;
        assert!(matches!(classify(ok), Frame::Message(_)));
        let bom = b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}";
        assert!(matches!(classify(bom), Frame::Message(_)));
        // Errors echo a usable id.
        let Frame::Reject(v) = classify(br#"{"jsonrpc":"1.0","id":"x","method":"ping"}"#) else {
            panic!()
        };
        assert_eq!(v["id"], "x");
    }

    #[test]
    fn a_known_method_with_bad_params_is_invalid_params_naming_the_field() {
        let e = custom_request_error(
            "tools/call",
            Some(&json!({"name": "exec", "arguments": "str"})),
        );
        assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
        assert!(e.message.contains("`arguments`"), "{}", e.message);
        let e = custom_request_error("tools/call", Some(&json!({"arguments": {}})));
        assert!(e.message.contains("`name`"), "{}", e.message);
        let e = custom_request_error("tools/call", None);
        assert!(e.message.contains("`params`"), "{}", e.message);
        let e = custom_request_error("no/such", None);
        assert_eq!(e.code, ErrorCode::METHOD_NOT_FOUND);
        assert!(e.message.contains("no/such"));
    }
}
