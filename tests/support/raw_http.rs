//! Raw HTTP/1.1 to the gateway's MCP endpoint, one request per connection, for the tests
//! that must see (or abandon) a response mid-way: what an SDK client would hide.

// Each test binary uses a different subset.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;

use serde_json::{Value, json};

/// Send one request to `/mcp` with `token`'s credential, in `session` (or none), on a new
/// connection; the connection, and the response head read from it (what arrived, if the
/// connection closed first).
pub fn request(
    addr: &str,
    token: &str,
    method: &str,
    session: Option<&str>,
    body: Option<&Value>,
) -> (TcpStream, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut request = format!(
        "{method} /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nAccept: application/json, text/event-stream\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(s) = session {
        request.push_str(&format!(
            "Mcp-Session-Id: {s}\r\nMcp-Protocol-Version: 2025-06-18\r\n"
        ));
    }
    request.push_str("\r\n");
    request.push_str(&body);
    stream.write_all(request.as_bytes()).unwrap();
    let head = read_head(&mut stream);
    (stream, head)
}

/// A response head, byte by byte (nothing of the body is consumed); what arrived if the
/// connection closed first.
pub fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// The `Mcp-Session-Id` a response head names (the header's name in any case).
pub fn session_id(head: &str) -> Option<String> {
    head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("mcp-session-id")
            .then(|| value.trim().to_owned())
    })
}

/// Open an MCP session (initialize, then initialized); its id.
pub fn new_session(addr: &str, token: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}});
    let (mut stream, head) = request(addr, token, "POST", None, Some(&init));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let session = session_id(&head).expect("no session id");
    // The initialize response arrives as one SSE event; wait for it.
    let mut seen = String::new();
    let mut buf = [0u8; 4096];
    while !seen.contains("\"id\":1") {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "no initialize response: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    drop(stream);
    let (_, head) = request(
        addr,
        token,
        "POST",
        Some(&session),
        Some(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
    );
    assert!(head.starts_with("HTTP/1.1 202"), "{head}");
    session
}
