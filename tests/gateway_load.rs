//! End-to-end: `warden gateway run` under hostile load from a local process. Each test
//! is one way of exhausting the gateway, tried against the real listener over real
//! sockets: a connection flood and slowloris (agents keep being served, `/healthz`
//! answers, descriptors come back), idle and slow-body connections and a keep-alive connection's
//! trickled next request (closed by their timeouts), thousands of cancelled calls stateless and stateful (every count returns
//! to zero), one agent's session churn (another's `/exec security=deny` survives), late
//! events (a forgotten session stays forgotten), concurrent runs (capped per agent on
//! every path), event streams (bounded, closed with their session), and the credentials
//! file's mode and owner (checked on every request).

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Measurements are reported on stderr.
#![allow(clippy::print_stderr)]

#[path = "support/raw_http.rs"]
mod raw_http;
mod support;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::{GatewayProcess, configure, gateway_token, warden_home, warden_in};

/// A home whose agents may run anything on the gateway host, with `[gateway]` settings.
fn home_with(gateway: &str) -> tempfile::TempDir {
    let home = warden_home();
    configure(
        home.path(),
        &format!(
            "[tools.exec]\nhost = \"gateway\"\nsecurity = \"full\"\nask = \"off\"\n[gateway]\n{gateway}"
        ),
        r#"{"version":1,"defaults":{"security":"full","ask":"off","askFallback":"deny"}}"#,
    );
    home
}

/// Room for the sockets these tests hold (several tests run at once in this process).
fn raise_descriptor_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    let _ = setrlimit(Resource::RLIMIT_NOFILE, hard.min(65_536), hard);
}

/// Descriptors the gateway process has open.
fn descriptors(g: &GatewayProcess) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", g.child.id()))
        .unwrap()
        .count()
}

/// Poll `check` until it holds or `within` passes; the last value it saw.
fn eventually<T: std::fmt::Debug>(
    within: Duration,
    mut probe: impl FnMut() -> T,
    check: impl Fn(&T) -> bool,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        let value = probe();
        if check(&value) || Instant::now() > deadline {
            return value;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The body of a complete HTTP/1.1 response read to the end of its connection.
fn body_of(response: &str) -> &str {
    response.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

/// `GET /status` as `token`'s agent.
fn status(g: &GatewayProcess, token: &str) -> Value {
    let response = g.raw(&format!(
        "GET /status HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n",
        g.addr
    ));
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    serde_json::from_str(body_of(&response)).unwrap()
}

/// True when everything the agent held has been given back (its default stateless
/// session's state may stay: one per agent, bounded).
fn all_given_back(status: &Value) -> bool {
    status["mcp"] == json!({"sessions": 0, "starting": 0, "requests": 0, "streams": 0})
        && status["runs"] == 0
        && status["sessionStates"].as_u64().unwrap() <= 1
}

/// A stateless (2026-07-28 revision) `tools/call` of `exec` as raw HTTP.
fn stateless_exec(addr: &str, token: &str, arguments: Value) -> String {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "exec", "arguments": arguments, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"}}}})
    .to_string();
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: exec\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Send `request` on a new connection and read the whole response.
fn round_trip(addr: &str, request: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response
}

fn delete_session(addr: &str, token: &str, session: &str) {
    let (_, head) = raw_http::request(addr, token, "DELETE", Some(session), None);
    assert!(head.starts_with("HTTP/1.1 204"), "{head}");
}

/// A session call of `tool` with `arguments`; the whole SSE answer's JSON-RPC result.
fn session_call(addr: &str, token: &str, session: &str, tool: &str, arguments: Value) -> Value {
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}});
    let (mut stream, head) = raw_http::request(addr, token, "POST", Some(session), Some(&call));
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut seen = String::new();
    let mut buf = [0u8; 8192];
    loop {
        if let Some(line) = seen
            .lines()
            .find(|l| l.starts_with("data: ") && l.contains("\"id\":9"))
        {
            let message: Value = serde_json::from_str(&line["data: ".len()..]).unwrap();
            return message["result"].clone();
        }
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "no answer: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
}

/// The tests' `sleep MARKER` processes alive now.
fn running(marker: &str) -> usize {
    support::pids_with_cmdline(&format!("sleep {marker}")).len()
}

#[test]
fn a_connection_flood_and_slowloris_neither_lock_agents_out_nor_keep_their_descriptors() {
    raise_descriptor_limit();
    let home = home_with(
        "max_connections = 128\nmax_connections_per_peer = 128\nheader_read_timeout = \"2s\"\n",
    );
    let ws = tempfile::tempdir().unwrap();
    let g = GatewayProcess::start(home.path(), ws.path(), &[]);
    let token = gateway_token(home.path(), "main");
    let quiet = descriptors(&g);
    let addr = g.addr.clone();

    // A local process opens connections as fast as it can and keeps them, while a few
    // more trickle request headers one byte at a time.
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let (stop, addr) = (Arc::clone(&stop), addr.clone());
        std::thread::spawn(move || {
            let mut held = std::collections::VecDeque::new();
            let mut opened = 0usize;
            while !stop.load(Ordering::Relaxed) {
                if let Ok(s) = TcpStream::connect(&addr) {
                    held.push_back(s);
                    opened += 1;
                }
                if held.len() > 600 {
                    held.pop_front();
                }
            }
            opened
        })
    };
    let slowloris = {
        let (stop, addr) = (Arc::clone(&stop), addr.clone());
        std::thread::spawn(move || {
            let mut streams: Vec<TcpStream> = (0..20)
                .filter_map(|_| TcpStream::connect(&addr).ok())
                .collect();
            let head =
                b"POST /mcp HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
            let mut closed_by_gateway = 0;
            for byte in head.iter().cycle() {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                streams.retain_mut(|s| {
                    let alive = s.write_all(&[*byte]).is_ok();
                    closed_by_gateway += usize::from(!alive);
                    alive
                });
                std::thread::sleep(Duration::from_millis(100));
            }
            closed_by_gateway
        })
    };
    std::thread::sleep(Duration::from_millis(300));

    // Under the flood: every agent call and every health check is served.
    let started = Instant::now();
    for i in 0..30 {
        let response = round_trip(
            &addr,
            &stateless_exec(
                &addr,
                &token,
                json!({"argv": ["echo", format!("call-{i}")]}),
            ),
        );
        assert!(
            response.starts_with("HTTP/1.1 200") && response.contains(&format!("call-{i}\\n")),
            "call {i} under the flood: {response}"
        );
        let health = round_trip(
            &addr,
            &format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
        );
        assert!(health.starts_with("HTTP/1.1 200"), "healthz: {health}");
    }
    let during = status(&g, &token);
    assert!(
        during["connections"]["total"].as_u64().unwrap() <= 128,
        "{during}"
    );
    assert!(
        descriptors(&g) <= quiet + 128 + 8,
        "the cap bounds the gateway's descriptors"
    );
    eprintln!(
        "30 calls and health checks under the flood in {:?}",
        started.elapsed()
    );

    // Slowloris connections are cut off by the header-read timeout.
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    let opened = flood.join().unwrap();
    let cut = slowloris.join().unwrap();
    eprintln!("flood opened {opened} connections; {cut} slowloris connections were cut off");
    assert!(opened > 128, "the flood went past the cap ({opened})");
    assert!(
        cut >= 15,
        "slowloris connections outlived the header timeout ({cut} of 20 cut)"
    );

    // The flood over, the gateway is back where it was.
    let back = eventually(
        Duration::from_secs(10),
        || descriptors(&g),
        |n| *n <= quiet + 2,
    );
    assert!(
        back <= quiet + 2,
        "descriptors: {quiet} quiet, {back} after"
    );
    let after = status(&g, &token);
    assert!(
        after["connections"]["total"].as_u64().unwrap() <= 2,
        "{after}"
    );
    assert!(all_given_back(&after), "{after}");
}

#[test]
fn idle_connections_and_slow_bodies_are_closed_by_their_timeouts() {
    let home = home_with("connection_idle_timeout = \"1s\"\nbody_read_timeout = \"1s\"\n");
    let ws = tempfile::tempdir().unwrap();
    let g = GatewayProcess::start(home.path(), ws.path(), &[]);
    let token = gateway_token(home.path(), "main");

    // A keep-alive connection that stops asking is closed: also when its first request
    // came after the gateway had begun waiting for it (the idle timeout then counts from
    // the response, not from the first request's header deadline).
    let mut idle = TcpStream::connect(&g.addr).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    idle.write_all(
        format!(
            "GET /status HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\r\n",
            g.addr
        )
        .as_bytes(),
    )
    .unwrap();
    assert!(raw_http::read_head(&mut idle).starts_with("HTTP/1.1 200"));
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    let _ = idle.read_to_end(&mut rest);
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(5),
        "an idle keep-alive connection stayed open {waited:?}"
    );

    // A body that does not arrive in time is refused and its connection closed.
    let mut slow = TcpStream::connect(&g.addr).unwrap();
    slow.write_all(
        format!(
            "POST /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{{\"jsonrpc\"",
            g.addr
        )
        .as_bytes(),
    )
    .unwrap();
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut response = String::new();
    let _ = slow.read_to_string(&mut response);
    assert!(response.starts_with("HTTP/1.1 408"), "{response}");
    assert!(response.contains("body_read_timeout"), "{response}");
    assert!(
        response.to_ascii_lowercase().contains("connection: close"),
        "{response}"
    );

    // A body over the cap is refused without reading it all.
    let mut large = TcpStream::connect(&g.addr).unwrap();
    large
        .write_all(
            format!(
                "POST /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                g.addr,
                64 * 1024 * 1024
            )
            .as_bytes(),
        )
        .unwrap();
    let chunk = vec![b' '; 1 << 20];
    for _ in 0..8 {
        if large.write_all(&chunk).is_err() {
            break;
        }
    }
    let head = raw_http::read_head(&mut large);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");

    // The same without a length: a chunked body is counted as it arrives.
    let mut chunked = TcpStream::connect(&g.addr).unwrap();
    chunked
        .write_all(
            format!(
                "POST /mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
                g.addr
            )
            .as_bytes(),
        )
        .unwrap();
    let mut piece = format!("{:x}\r\n", 1 << 20).into_bytes();
    piece.extend(std::iter::repeat_n(b' ', 1 << 20));
    piece.extend_from_slice(b"\r\n");
    for _ in 0..8 {
        if chunked.write_all(&piece).is_err() {
            break;
        }
    }
    let head = raw_http::read_head(&mut chunked);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");

    // Headers past the read buffer (before any credential is looked at) are refused, not
    // buffered: no connection holds more than 64 KiB of them.
    let mut huge = TcpStream::connect(&g.addr).unwrap();
    let _ = huge.write_all(
        format!(
            "GET /healthz HTTP/1.1\r\nHost: {}\r\nX-Big: {}\r\n\r\n",
            g.addr,
            "a".repeat(256 * 1024)
        )
        .as_bytes(),
    );
    huge.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut response = String::new();
    let ended = huge.read_to_string(&mut response);
    // Closed (a 431, or reset with the rest unread), not left waiting.
    assert!(
        !matches!(&ended, Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)),
        "a connection with oversized headers was left open: {ended:?}"
    );
    assert!(
        response.is_empty() || response.starts_with("HTTP/1.1 431"),
        "{response}"
    );
    let after = eventually(
        Duration::from_secs(5),
        || status(&g, &token),
        |s| s["connections"]["total"] == 1,
    );
    assert_eq!(
        after["connections"]["total"], 1,
        "only /status's own: {after}"
    );
}

#[test]
fn a_later_requests_headers_are_due_within_the_header_timeout_not_the_idle_one() {
    // The idle timeout is long and the header timeout short: a keep-alive connection that
    // answered one request and then trickles the next one's headers is held to the short
    // one, counted from that request's first byte.
    let home = home_with("header_read_timeout = \"1s\"\nconnection_idle_timeout = \"60s\"\n");
    let ws = tempfile::tempdir().unwrap();
    let g = GatewayProcess::start(home.path(), ws.path(), &[]);
    let token = gateway_token(home.path(), "main");
    let mut conn = TcpStream::connect(&g.addr).unwrap();
    let ask = format!(
        "GET /status HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\r\n",
        g.addr
    );
    conn.write_all(ask.as_bytes()).unwrap();
    let head = raw_http::read_head(&mut conn);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().unwrap())
        })
        .expect("a sized /status body");
    let mut body = vec![0u8; length];
    conn.read_exact(&mut body).unwrap();

    // Idle a moment (well inside the idle timeout), then one byte every 200 ms.
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let mut closed = false;
    for byte in ask.bytes().take(40) {
        if conn.write_all(&[byte]).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        if started.elapsed() > Duration::from_secs(6) {
            break;
        }
    }
    if !closed {
        conn.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        // Closed: an end of stream or a reset; still open: the read times out.
        closed = match conn.read_to_end(&mut Vec::new()) {
            Ok(_) => true,
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
        };
    }
    let waited = started.elapsed();
    assert!(closed, "a trickled second request kept its connection open");
    assert!(
        waited < Duration::from_secs(5),
        "a trickled second request held its connection {waited:?} (header timeout 1s)"
    );
}

#[test]
fn thousands_of_cancelled_calls_give_back_everything_they_held() {
    raise_descriptor_limit();
    let home = home_with("max_sessions_per_credential = 4\nmax_runs_per_agent = 4\n");
    let ws = tempfile::tempdir().unwrap();
    let g = GatewayProcess::start(home.path(), ws.path(), &[]);
    let token = gateway_token(home.path(), "main");
    let addr = g.addr.clone();
    let marker = "4217.5";
    let sleep = json!({"argv": ["sleep", marker]});
    let started = Instant::now();

    // Stateless: the client goes away at every point of the call — before its body is
    // complete, right after sending it, while the run starts, once the run is running.
    let request = stateless_exec(&addr, &token, sleep.clone());
    let (head, body) = request.split_once("\r\n\r\n").unwrap();
    for i in 0..1200 {
        let mut stream = TcpStream::connect(&addr).unwrap();
        match i % 4 {
            0 => {
                stream.write_all(head.as_bytes()).unwrap();
                stream.write_all(b"\r\n\r\n").unwrap();
                stream
                    .write_all(&body.as_bytes()[..body.len() / 2])
                    .unwrap();
            }
            1 => stream.write_all(request.as_bytes()).unwrap(),
            2 => {
                stream.write_all(request.as_bytes()).unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
            _ => {
                // The calls cancelled so far have given back what they held...
                let now = eventually(
                    Duration::from_secs(10),
                    || status(&g, &token),
                    all_given_back,
                );
                assert!(all_given_back(&now), "after call {i}: {now}");
                // ...so this one runs (a refused call would never start).
                let own = format!("4217.{i}");
                let request = stateless_exec(&addr, &token, json!({"argv": ["sleep", own]}));
                stream.write_all(request.as_bytes()).unwrap();
                let started = eventually(Duration::from_secs(10), || running(&own), |n| *n == 1);
                assert_eq!(started, 1, "call {i} never ran: the agent's slots leaked?");
            }
        }
        let _ = stream.shutdown(Shutdown::Both);
    }

    // Stateful: cancelled by notifications/cancelled, by DELETE of the session, by the
    // client going away mid-call — each session ended afterwards.
    for i in 0..150 {
        let session = raw_http::new_session(&addr, &token);
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "exec", "arguments": sleep}});
        let (stream, head) = raw_http::request(&addr, &token, "POST", Some(&session), Some(&call));
        assert!(
            head.starts_with("HTTP/1.1 200"),
            "stateful call {i} was refused: {head}"
        );
        match i % 3 {
            0 => {
                let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": 2, "reason": "test"}});
                let (_, head) =
                    raw_http::request(&addr, &token, "POST", Some(&session), Some(&cancel));
                assert!(head.starts_with("HTTP/1.1 202"), "{head}");
                drop(stream);
                delete_session(&addr, &token, &session);
            }
            1 => {
                delete_session(&addr, &token, &session);
                drop(stream);
            }
            _ => {
                drop(stream);
                delete_session(&addr, &token, &session);
            }
        }
    }
    eprintln!(
        "1200 stateless and 150 stateful cancellations in {:?}",
        started.elapsed()
    );

    let after = eventually(
        Duration::from_secs(20),
        || status(&g, &token),
        all_given_back,
    );
    assert!(all_given_back(&after), "the agent still holds: {after}");
    let left = eventually(
        Duration::from_secs(20),
        || support::pids_with_cmdline_words(&["sleep 4217."]).len(),
        |n| *n == 0,
    );
    assert_eq!(left, 0, "runs outlived their cancelled calls");
    // And the agent has its whole allowance: four sessions, four runs.
    let sessions: Vec<String> = (0..4)
        .map(|_| raw_http::new_session(&addr, &token))
        .collect();
    for session in &sessions {
        delete_session(&addr, &token, session);
    }
    let response = round_trip(
        &addr,
        &stateless_exec(&addr, &token, json!({"argv": ["true"]})),
    );
    assert!(
        response.contains("\\\"exitCode\\\":0") || response.contains("\"exitCode\":0"),
        "{response}"
    );
}

#[test]
fn one_agents_session_churn_cannot_loosen_anothers_session_and_late_events_stay_dead() {
    let home = home_with("");
    let ws = tempfile::tempdir().unwrap();
    let g = GatewayProcess::start(home.path(), ws.path(), &[]);
    let main = gateway_token(home.path(), "main");
    let ops = gateway_token(home.path(), "ops");
    let addr = g.addr.clone();

    // ops tightens its own live session.
    let strict = raw_http::new_session(&addr, &ops);
    let set = session_call(
        &addr,
        &ops,
        &strict,
        "session",
        json!({"command": "/exec security=deny"}),
    );
    assert_eq!(set["isError"], false, "{set}");
    let denied = session_call(&addr, &ops, &strict, "exec", json!({"argv": ["true"]}));
    assert_eq!(
        denied["structuredContent"]["decision"]["decision"], "deny",
        "{denied}"
    );

    // main churns through more sessions than the whole table once held.
    let started = Instant::now();
    for _ in 0..1100 {
        let session = raw_http::new_session(&addr, &main);
        delete_session(&addr, &main, &session);
    }
    for i in 0..50 {
        let session = raw_http::new_session(&addr, &main);
        let r = session_call(
            &addr,
            &main,
            &session,
            "exec",
            json!({"argv": ["echo", i.to_string()]}),
        );
        assert_eq!(r["structuredContent"]["exitCode"], 0, "{r}");
        delete_session(&addr, &main, &session);
    }
    eprintln!("1150 sessions of churn in {:?}", started.elapsed());
    let still = session_call(&addr, &ops, &strict, "exec", json!({"argv": ["true"]}));
    assert_eq!(
        still["structuredContent"]["decision"]["decision"], "deny",
        "ops's session lost its security=deny to main's churn: {still}"
    );

    // A run cancelled by its session's end finishes after the end: its late events
    // must not bring the session's state back.
    let before = status(&g, &main)["sessionStates"].as_u64().unwrap();
    let marker = "4218.5";
    for _ in 0..20 {
        let session = raw_http::new_session(&addr, &main);
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "exec", "arguments": {"argv": ["sleep", marker]}}});
        let (_stream, head) = raw_http::request(&addr, &main, "POST", Some(&session), Some(&call));
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        eventually(Duration::from_secs(10), || running(marker), |n| *n > 0);
        delete_session(&addr, &main, &session);
        eventually(Duration::from_secs(10), || running(marker), |n| *n == 0);
    }
    let after = eventually(
        Duration::from_secs(5),
        || status(&g, &main),
        |s| s["runs"] == 0,
    );
    assert_eq!(
        after["sessionStates"].as_u64().unwrap(),
        before,
        "ended sessions came back: {after}"
    );
}

#[test]
fn runs_are_capped_per_agent_on_every_path() {
    let home = home_with("max_runs_per_agent = 2\n");
    let ws = tempfile::tempdir().unwrap();
    let g = GatewayProcess::start(home.path(), ws.path(), &[]);
    let main = gateway_token(home.path(), "main");
    let ops = gateway_token(home.path(), "ops");
    let addr = g.addr.clone();
    let marker = "4219.5";

    // Two runs held open: one stateless, one in a session.
    let mut held = TcpStream::connect(&addr).unwrap();
    held.write_all(stateless_exec(&addr, &main, json!({"argv": ["sleep", marker]})).as_bytes())
        .unwrap();
    let session = raw_http::new_session(&addr, &main);
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "exec", "arguments": {"argv": ["sleep", marker]}}});
    let (held_in_session, _) = raw_http::request(&addr, &main, "POST", Some(&session), Some(&call));
    eventually(Duration::from_secs(10), || running(marker), |n| *n == 2);

    // A third is refused, on either path, saying why; nothing was started.
    let stateless = round_trip(
        &addr,
        &stateless_exec(&addr, &main, json!({"argv": ["echo", "third"]})),
    );
    assert!(stateless.contains("run-limit"), "{stateless}");
    assert!(stateless.contains("max_runs_per_agent = 2"), "{stateless}");
    let stateful = session_call(
        &addr,
        &main,
        &session,
        "exec",
        json!({"argv": ["echo", "third"]}),
    );
    assert_eq!(
        stateful["structuredContent"]["decision"]["reason"], "run-limit",
        "{stateful}"
    );
    // Another agent has its own allowance.
    let other = round_trip(
        &addr,
        &stateless_exec(&addr, &ops, json!({"argv": ["echo", "ops-ran"]})),
    );
    assert!(other.contains("ops-ran\\n"), "{other}");

    // Cancelling the held runs gives their slots back.
    drop(held);
    drop(held_in_session);
    eventually(Duration::from_secs(10), || running(marker), |n| *n == 0);
    let s = eventually(
        Duration::from_secs(5),
        || status(&g, &main),
        |s| s["runs"] == 0,
    );
    assert_eq!(s["runs"], 0, "{s}");
    let again = round_trip(
        &addr,
        &stateless_exec(&addr, &main, json!({"argv": ["echo", "fourth"]})),
    );
    assert!(again.contains("fourth\\n"), "{again}");
}

#[test]
fn runs_are_capped_over_stdio_too() {
    let home = home_with("max_runs_per_agent = 1\n");
    let ws = tempfile::tempdir().unwrap();
    let marker = "4220.5";
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        use rmcp::ServiceExt;
        use rmcp::model::CallToolRequestParams;
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_warden"));
        command
            .env("WARDEN_HOME", home.path())
            .env("WARDEN_LOG", "warn")
            .args(["mcp", "--workspace"])
            .arg(ws.path());
        let transport = rmcp::transport::TokioChildProcess::new(command).unwrap();
        let client = ().serve(transport).await.unwrap();
        let exec = |argv: Value| {
            CallToolRequestParams::new("exec")
                .with_arguments(json!({ "argv": argv }).as_object().unwrap().clone())
        };
        let peer = client.peer().clone();
        let first =
            tokio::spawn(async move { peer.call_tool(exec(json!(["sleep", marker]))).await });
        while running(marker) == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let second = client
            .call_tool(exec(json!(["echo", "second"])))
            .await
            .unwrap();
        let second = second.structured_content.unwrap();
        assert_eq!(second["decision"]["reason"], "run-limit", "{second}");
        first.abort();
        client.cancel().await.unwrap();
    });
    assert_eq!(
        eventually(Duration::from_secs(10), || running(marker), |n| *n == 0),
        0
    );
}

#[test]
fn event_streams_are_bounded_per_session_and_close_with_it() {
    let home = home_with("max_streams_per_session = 2\n");
    let ws = tempfile::tempdir().unwrap();
    let g = GatewayProcess::start(home.path(), ws.path(), &[]);
    let token = gateway_token(home.path(), "main");
    let addr = g.addr.clone();
    let session = raw_http::new_session(&addr, &token);
    let mut streams = Vec::new();
    for _ in 0..2 {
        let (stream, head) = raw_http::request(&addr, &token, "GET", Some(&session), None);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.contains("text/event-stream"), "{head}");
        streams.push(stream);
    }
    let (_, head) = raw_http::request(&addr, &token, "GET", Some(&session), None);
    assert!(head.starts_with("HTTP/1.1 429"), "{head}");
    let over = status(&g, &token);
    assert_eq!(over["mcp"]["streams"], 2, "{over}");

    // Ending the session closes its streams' connections, not only their streams.
    delete_session(&addr, &token, &session);
    for mut stream in streams {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let started = Instant::now();
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "an event stream outlived its session"
        );
    }
    let after = eventually(
        Duration::from_secs(5),
        || status(&g, &token),
        |s| s["connections"]["total"] == 1,
    );
    assert!(all_given_back(&after), "{after}");
    assert_eq!(after["connections"]["total"], 1, "{after}");
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn a_credentials_file_others_could_read_or_own_lets_nobody_in() {
    let home = home_with("");
    let ws = tempfile::tempdir().unwrap();
    let token = gateway_token(home.path(), "main");
    let g = GatewayProcess::start(home.path(), ws.path(), &[]);
    let file = home.path().join("gateway-credentials.json");
    let code = |g: &GatewayProcess| {
        g.raw(&format!(
            "GET /status HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n",
            g.addr
        ))[9..12]
            .to_owned()
    };
    assert_eq!(code(&g), "200");
    // Same bytes, looser mode: refused from the next request on, until it is fixed.
    for mode in [0o644, 0o640, 0o604, 0o660] {
        chmod(&file, mode);
        assert_eq!(code(&g), "401", "mode {mode:o}");
    }
    chmod(&file, 0o600);
    assert_eq!(code(&g), "200");
    // Given to another user: refused.
    std::os::unix::fs::chown(&file, Some(65534), None).unwrap();
    assert_eq!(code(&g), "401");
    std::os::unix::fs::chown(&file, Some(nix::unistd::geteuid().as_raw()), None).unwrap();
    assert_eq!(code(&g), "200");
    // Replaced by a symlink to a copy: refused.
    let copy = home.path().join("copy.json");
    std::fs::copy(&file, &copy).unwrap();
    chmod(&copy, 0o600);
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink(&copy, &file).unwrap();
    assert_eq!(code(&g), "401");
}

#[test]
fn a_legacy_token_is_imported_only_when_private_and_strong_and_then_removed() {
    let ws = tempfile::tempdir().unwrap();
    let strong = "Vq3xYl0P9cA7rT2mKw8ZbN4eHs1uJd6GfQoEiXyC5Lk";
    let start = |token: &str, mode: u32| {
        let home = home_with("");
        let legacy = home.path().join("gateway-token");
        std::fs::write(&legacy, format!("{token}\n")).unwrap();
        chmod(&legacy, mode);
        let out = warden_in(home.path())
            .args(["gateway", "token", "--list"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (home, legacy, stderr)
    };

    let (home, legacy, said) = start(strong, 0o600);
    assert!(said.contains("old file was removed"), "{said}");
    assert!(!legacy.exists(), "the legacy copy of the token is gone");
    let g = GatewayProcess::start(home.path(), ws.path(), &[]);
    let ok = g.raw(&format!(
        "GET /status HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {strong}\r\nConnection: close\r\n\r\n",
        g.addr
    ));
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(body_of(&ok).contains("\"agent\":\"main\""), "{ok}");

    for (token, mode, why) in [
        (strong, 0o644, "must be 0600"),
        ("changeme-changeme", 0o600, "shorter than 32"),
        ("passwordpasswordpasswordpassword", 0o600, "guessable"),
    ] {
        let (home, legacy, said) = start(token, mode);
        assert!(
            said.contains("was not imported") && said.contains(why),
            "{said}"
        );
        assert_eq!(
            std::fs::read_to_string(&legacy).unwrap(),
            format!("{token}\n"),
            "a refused legacy file is left as it was"
        );
        assert!(!home.path().join("gateway-credentials.json").exists());
        let g = GatewayProcess::start(home.path(), ws.path(), &[]);
        let refused = g.raw(&format!(
            "GET /status HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n",
            g.addr
        ));
        assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    }
}
