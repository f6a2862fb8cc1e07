//! End-to-end: `warden gateway run --metrics-listen` serves Prometheus' text format on
//! loopback. Runs are counted by host and outcome, requests by decision, latencies as
//! histograms; a question waiting for a real approver (`warden approvals ui`) shows as a
//! pending approval until it is answered. The attacker's moves: a non-loopback listen
//! address (refused at start), a request whose Host is not loopback (DNS rebinding from a
//! web page: refused), labels an agent could grow (none: hosts, outcomes and decisions
//! only — never an agent, node id or command).

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/bridge.rs"]
mod bridge_support;
mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use bridge_support::Gateway;
use serde_json::json;
use support::{TerminalApprover, warden_in};

/// `GET /metrics` with `host` as the Host header: status line and body.
fn scrape(addr: &str, host: &str) -> (String, String) {
    let mut tcp = TcpStream::connect(addr).unwrap();
    write!(
        tcp,
        "GET /metrics HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    tcp.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_owned(), body.to_owned())
}

/// The value of the sample `name` (with its labels exactly as written), if present.
fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// The metrics address the gateway printed.
fn metrics_addr(gw: &Gateway) -> String {
    assert!(
        gw.log_says("metrics for Prometheus on http://", Duration::from_secs(10)),
        "{}",
        gw.log()
    );
    gw.log()
        .split("metrics for Prometheus on http://")
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned()
}

/// Scrape until `name` reads `value` (the gauges follow runs a moment later).
fn wait_for(addr: &str, name: &str, value: f64) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, text) = scrape(addr, addr);
        if sample(&text, name) == Some(value) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{name} never read {value}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_decisions_latency_and_pending_approvals_are_scraped_on_loopback() {
    let home = bridge_support::home_with(
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\nask = \"on-miss\"\n",
        r#"{"version":1,"defaults":{"security":"allowlist","ask":"on-miss","askFallback":"deny"},
            "agents":{"coder":{"allowlist":[{"pattern":"/usr/bin/echo"}]}}}"#,
    );
    let token = support::gateway_token(home.path(), "coder");
    let (_ws, workspace) = bridge_support::workspace();
    let gw = Gateway::start(
        home.path(),
        &workspace,
        &["--metrics-listen", "127.0.0.1:0"],
    );
    let addr = metrics_addr(&gw);
    let client = bridge_support::client(&gw.http, &token).await;

    // Allowed and run; then a miss with nobody to ask (askFallback denies).
    let ok = bridge_support::exec(&client, json!({"command": "/usr/bin/echo hi"})).await;
    assert_eq!(ok["exitCode"], 0, "{ok}");
    let denied = bridge_support::exec(&client, json!({"command": "/usr/bin/id"})).await;
    assert_eq!(denied["status"], "denied", "{denied}");

    let (status, text) = scrape(&addr, &addr);
    assert!(status.contains(" 200 "), "{status}");
    assert_eq!(
        sample(
            &text,
            r#"warden_runs_total{host="gateway",outcome="finished"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"warden_runs_total{host="gateway",outcome="denied"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, r#"warden_requests_total{decision="allow"}"#),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, r#"warden_requests_total{decision="deny"}"#),
        Some(1.0)
    );
    assert_eq!(sample(&text, "warden_decide_seconds_count"), Some(2.0));
    assert_eq!(
        sample(&text, r#"warden_run_seconds_count{host="gateway"}"#),
        Some(2.0)
    );
    assert_eq!(sample(&text, "warden_runs_in_progress"), Some(0.0));
    assert_eq!(sample(&text, "warden_connected_nodes"), Some(0.0));
    assert!(
        sample(&text, "warden_sessions").is_some_and(|n| n >= 1.0),
        "{text}"
    );
    // Nothing an agent sent is a label.
    for secret in ["coder", "/usr/bin/echo", "hi"] {
        assert!(
            !text
                .lines()
                .filter(|l| !l.starts_with('#'))
                .any(|l| l.contains(secret)),
            "{secret} in:\n{text}"
        );
    }

    // A question held by a real approver is pending until answered.
    let mut ui = TerminalApprover::start(home.path());
    let asked = {
        let client = client.clone();
        tokio::spawn(async move {
            bridge_support::exec(&client, json!({"command": "/usr/bin/true"})).await
        })
    };
    tokio::task::spawn_blocking({
        let addr = addr.clone();
        move || wait_for(&addr, "warden_pending_approvals", 1.0)
    })
    .await
    .unwrap();
    tokio::task::spawn_blocking(move || {
        ui.answer("/usr/bin/true", "o\n");
        ui.stop();
    })
    .await
    .unwrap();
    let answered = asked.await.unwrap();
    assert_eq!(answered["exitCode"], 0, "{answered}");
    let text = wait_for(&addr, "warden_pending_approvals", 0.0);
    assert_eq!(
        sample(
            &text,
            r#"warden_runs_total{host="gateway",outcome="finished"}"#
        ),
        Some(2.0),
        "{text}"
    );

    // DNS rebinding: a page on evil.example resolved to 127.0.0.1 is refused.
    let (status, body) = scrape(&addr, "evil.example:80");
    assert!(status.contains(" 421 "), "{status}: {body}");
    assert!(!body.contains("warden_runs_total"), "{body}");
    client.cancel().await.unwrap();
}

#[test]
fn a_metrics_listener_off_loopback_is_refused_at_start() {
    let home = support::open_gateway_home();
    let (_ws, workspace) = bridge_support::workspace();
    let out = warden_in(home.path())
        .args(support::GATEWAY_RUN)
        .arg(&workspace)
        .args(["--metrics-listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--metrics-listen 0.0.0.0:0") && stderr.contains("loopback"),
        "{stderr}"
    );
}
