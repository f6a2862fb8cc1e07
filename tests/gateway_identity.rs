//! End-to-end: on `warden gateway run`, the credential a request presents — and nothing
//! else — decides its agent; an MCP session belongs to the credential that created it;
//! sessions per credential are capped and idle ones closed, so an `initialize` flood
//! leaves the gateway's memory where it was. Driven by a real MCP client (rmcp) and by
//! raw HTTP requests, as a hostile client would send them.

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Measurements are reported on stderr.
#![allow(clippy::print_stderr)]

#[path = "support/raw_http.rs"]
mod raw_http;
mod support;

use raw_http::session_id;

use std::path::PathBuf;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};
use support::{GatewayProcess, configure, gateway_token, warden_home, warden_in};

/// `main` may only run its allowlist (empty) and nobody answers asks; `ops` may run
/// anything. Both layers say so, so the only question is who the caller is.
fn two_agents(extra_config: &str) -> (tempfile::TempDir, PathBuf, tempfile::TempDir) {
    let home = warden_home();
    configure(
        home.path(),
        &format!(
            "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\nask = \"off\"\n\
             [[agents.list]]\nid = \"ops\"\ntools.exec.security = \"full\"\n{extra_config}"
        ),
        r#"{"version":1,"defaults":{"security":"allowlist","ask":"off","askFallback":"deny"},
            "agents":{"ops":{"security":"full","ask":"off"}}}"#,
    );
    let ws = tempfile::tempdir().unwrap();
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    (home, ws_path, ws)
}

async fn client(
    g: &GatewayProcess,
    token: &str,
    headers: &[(&str, &str)],
) -> Result<RunningService<RoleClient, ()>, String> {
    let mut custom = std::collections::HashMap::new();
    for (k, v) in headers {
        custom.insert(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            http::HeaderValue::from_str(v).unwrap(),
        );
    }
    let config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            format!("http://{}/mcp", g.addr),
        )
        .auth_header(token)
        .custom_headers(custom);
    ().serve(StreamableHttpClientTransport::from_config(config))
        .await
        .map_err(|e| e.to_string())
}

async fn exec(client: &RunningService<RoleClient, ()>, argv: &[&str]) -> Value {
    let r: CallToolResult = client
        .call_tool(
            CallToolRequestParams::new("exec")
                .with_arguments(json!({ "argv": argv }).as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    r.structured_content.unwrap()
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;

fn post(g: &GatewayProcess, headers: &str, body: &str) -> String {
    g.raw(&format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        g.addr,
        body.len()
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_credential_decides_the_agent_and_no_header_can_change_it() {
    let (home, ws, _ws) = two_agents("");
    let g = GatewayProcess::start(home.path(), &ws, &[]);
    let main = gateway_token(home.path(), "main");
    let ops = gateway_token(home.path(), "ops");
    assert_ne!(main, ops);

    // main's credential asking to be ops: refused outright, before any MCP.
    let refused = post(
        &g,
        &format!("Authorization: Bearer {main}\r\nX-Warden-Agent: ops\r\n"),
        INITIALIZE,
    );
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert!(refused.contains("belongs to agent \"main\""), "{refused}");
    assert!(
        client(&g, &main, &[("x-warden-agent", "ops")])
            .await
            .is_err()
    );

    // main runs as main: `id` is not on its allowlist.
    let as_main = client(&g, &main, &[]).await.unwrap();
    let v = exec(&as_main, &["id"]).await;
    assert_eq!(v["status"], "denied", "{v:#}");
    assert_eq!(v["reason"], "allowlist-miss", "{v:#}");
    // Naming its own agent is fine.
    let named = client(&g, &main, &[("x-warden-agent", "main")])
        .await
        .unwrap();
    assert_eq!(exec(&named, &["id"]).await["status"], "denied");
    // Only ops's own credential gets ops's powers.
    let as_ops = client(&g, &ops, &[]).await.unwrap();
    let v = exec(&as_ops, &["id"]).await;
    assert_eq!(v["status"], "finished", "{v:#}");
    assert!(v["stdout"].as_str().unwrap().contains("uid="), "{v:#}");

    // The scheme is case-insensitive; a wrong or missing token is 401.
    let lower = post(&g, &format!("Authorization: bearer {main}\r\n"), INITIALIZE);
    assert!(lower.starts_with("HTTP/1.1 200"), "{lower}");
    for auth in [
        "",
        "Authorization: Bearer wdn_wrong\r\n",
        "Authorization: Basic x\r\n",
    ] {
        let r = post(&g, auth, INITIALIZE);
        assert!(r.starts_with("HTTP/1.1 401"), "{auth:?}: {r}");
    }

    // Rotation: the old token stops working at once; revocation: no token works.
    let out = warden_in(home.path())
        .args(["gateway", "token", "--agent", "ops", "--rotate"])
        .output()
        .unwrap();
    let rotated = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert_ne!(rotated, ops);
    assert!(
        post(&g, &format!("Authorization: Bearer {ops}\r\n"), INITIALIZE)
            .starts_with("HTTP/1.1 401")
    );
    assert!(
        post(
            &g,
            &format!("Authorization: Bearer {rotated}\r\n"),
            INITIALIZE
        )
        .starts_with("HTTP/1.1 200")
    );
    let out = warden_in(home.path())
        .args(["gateway", "token", "--agent", "ops", "--revoke"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        post(
            &g,
            &format!("Authorization: Bearer {rotated}\r\n"),
            INITIALIZE
        )
        .starts_with("HTTP/1.1 401")
    );

    // The list shows agents and fingerprints, never a token.
    let out = warden_in(home.path())
        .args(["gateway", "token", "--list", "--json"])
        .output()
        .unwrap();
    let listed = String::from_utf8(out.stdout).unwrap();
    assert!(
        listed.contains("\"main\"") && !listed.contains("\"ops\""),
        "{listed}"
    );
    assert!(
        !listed.contains(&main) && !listed.contains("wdn_"),
        "{listed}"
    );
    let file = home.path().join("gateway-credentials.json");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_belongs_to_the_credential_that_created_it() {
    let (home, ws, _ws) = two_agents("[[agents.list]]\nid = \"other\"\n");
    let g = GatewayProcess::start(home.path(), &ws, &[]);
    let main = gateway_token(home.path(), "main");
    let other = gateway_token(home.path(), "other");
    let created = post(&g, &format!("Authorization: Bearer {main}\r\n"), INITIALIZE);
    let sid = session_id(&created).unwrap_or_else(|| panic!("{created}"));
    let slash = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"session","arguments":{"command":"/exec ask=always"}}}"#;
    // Another credential naming main's session: as if it did not exist.
    for body in [slash, INITIALIZE] {
        let r = post(
            &g,
            &format!(
                "Authorization: Bearer {other}\r\nMcp-Session-Id: {sid}\r\nMcp-Protocol-Version: 2025-06-18\r\n"
            ),
            body,
        );
        assert!(r.starts_with("HTTP/1.1 404"), "{r}");
    }
    // The old X-Warden-Session header names nothing: other's own session stays its own.
    let theirs = client(&g, &other, &[("x-warden-session", &sid)])
        .await
        .unwrap();
    let r = theirs
        .call_tool(
            CallToolRequestParams::new("session").with_arguments(
                json!({"command": "/exec security=deny"})
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(false));
    // main's session is untouched: a fresh client of main still gets main's policy, and
    // main's own session id works for main.
    let r = post(
        &g,
        &format!(
            "Authorization: Bearer {main}\r\nMcp-Session-Id: {sid}\r\nMcp-Protocol-Version: 2025-06-18\r\n"
        ),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert!(r.starts_with("HTTP/1.1 202"), "{r}");
    // DELETE of one's own session answers 204; afterwards the id is gone.
    let delete = g.raw(&format!(
        "DELETE /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {main}\r\nMcp-Session-Id: {sid}\r\nMcp-Protocol-Version: 2025-06-18\r\nConnection: close\r\n\r\n",
        g.addr
    ));
    assert!(delete.starts_with("HTTP/1.1 204"), "{delete}");
    let after = post(
        &g,
        &format!(
            "Authorization: Bearer {main}\r\nMcp-Session-Id: {sid}\r\nMcp-Protocol-Version: 2025-06-18\r\n"
        ),
        slash,
    );
    assert!(after.starts_with("HTTP/1.1 404"), "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_capped_per_credential_and_idle_ones_close() {
    let (home, ws, _ws) =
        two_agents("[gateway]\nmax_sessions_per_credential = 3\nsession_idle_timeout = \"2s\"\n");
    let g = GatewayProcess::start(home.path(), &ws, &[]);
    let main = gateway_token(home.path(), "main");
    let ops = gateway_token(home.path(), "ops");
    let auth = format!("Authorization: Bearer {main}\r\n");
    let sids: Vec<String> = (0..3)
        .map(|_| session_id(&post(&g, &auth, INITIALIZE)).unwrap())
        .collect();
    let over = post(&g, &auth, INITIALIZE);
    assert!(over.starts_with("HTTP/1.1 429"), "{over}");
    assert!(over.contains("max_sessions_per_credential = 3"), "{over}");
    // The cap is per credential: ops is not affected by main's sessions.
    assert!(
        post(&g, &format!("Authorization: Bearer {ops}\r\n"), INITIALIZE)
            .starts_with("HTTP/1.1 200")
    );
    // Ending one frees a place.
    let delete = g.raw(&format!(
        "DELETE /mcp HTTP/1.1\r\nHost: {}\r\n{auth}Mcp-Session-Id: {}\r\nMcp-Protocol-Version: 2025-06-18\r\nConnection: close\r\n\r\n",
        g.addr, sids[0]
    ));
    assert!(delete.starts_with("HTTP/1.1 204"), "{delete}");
    assert!(post(&g, &auth, INITIALIZE).starts_with("HTTP/1.1 200"));
    // Idle sessions close by themselves: after the timeout the old ids are gone and the
    // credential can open sessions again.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let stale = post(
        &g,
        &format!(
            "{auth}Mcp-Session-Id: {}\r\nMcp-Protocol-Version: 2025-06-18\r\n",
            sids[1]
        ),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert!(stale.starts_with("HTTP/1.1 404"), "{stale}");
    for _ in 0..3 {
        assert!(post(&g, &auth, INITIALIZE).starts_with("HTTP/1.1 200"));
    }
}

#[test]
fn an_initialize_flood_leaves_the_gateways_memory_bounded() {
    let (home, ws, _ws) = two_agents("");
    let g = GatewayProcess::start(home.path(), &ws, &[]);
    let main = gateway_token(home.path(), "main");
    let auth = format!("Authorization: Bearer {main}\r\n");
    // Warm up (first sessions, allocator arenas), then measure.
    for _ in 0..50 {
        post(&g, &auth, INITIALIZE);
    }
    let before = g.rss_kib();
    let (mut ok, mut capped) = (0, 0);
    for _ in 0..4000 {
        let r = post(&g, &auth, INITIALIZE);
        if r.starts_with("HTTP/1.1 200") {
            ok += 1;
        } else if r.starts_with("HTTP/1.1 429") {
            capped += 1;
        }
    }
    let after = g.rss_kib();
    eprintln!("initialize flood: {ok} admitted, {capped} refused; RSS {before} KiB -> {after} KiB");
    assert_eq!(ok, 0, "the cap was already reached during the warm-up");
    assert_eq!(capped, 4000);
    assert!(
        after < before + 8 * 1024,
        "the gateway grew from {before} KiB to {after} KiB under the flood"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_with_no_policy_of_its_own_is_reported_to_the_operator_once() {
    use std::io::BufRead;
    let (home, ws, _ws) = two_agents("");
    let log = home.path().join("gateway.log");
    let mut child = warden_in(home.path())
        .args(support::GATEWAY_RUN)
        .arg(&ws)
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let addr = first
        .split("http://")
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let g = GatewayProcess { child, addr };
    // `ops` has its policy; `claude` was given a credential and nothing else.
    for agent in ["ops", "claude", "claude"] {
        let c = client(&g, &gateway_token(home.path(), agent), &[])
            .await
            .unwrap();
        exec(&c, &["/bin/true"]).await;
        c.cancel().await.unwrap();
    }
    drop(g);
    let text = std::fs::read_to_string(&log).unwrap();
    let reports: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("has no policy of its own"))
        .collect();
    assert_eq!(reports.len(), 1, "{text}");
    assert!(
        reports[0].contains("agent \"claude\"") && reports[0].contains("warden doctor"),
        "{text}"
    );
}
