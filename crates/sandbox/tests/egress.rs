//! The egress proxy over real sockets: a client on its Unix socket, upstreams on TCP in a
//! network namespace this test makes (its loopback up, and 198.51.100.7 — a public,
//! documentation-only address — on it, so a name can resolve to an address that is not
//! special). The attacker's moves: a name the rules deny or do not know; a name that
//! resolves to loopback (rebinding); the metadata address written out; TLS asking for
//! another name inside an allowed tunnel (fronting) or for none; a plain request whose
//! Host is another site, or a second request pipelined behind the first.

// Tests set up and inspect real sockets and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stderr)]

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandbox::egress::proxy::{Admission, Connection, Gate, Limits, Proxy, Resolve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener, UnixStream};

const PUBLIC: &str = "198.51.100.7";

/// Allows `allowed.test`, `plain.test` and the exact address 127.0.0.1; the metadata
/// name is allowed by name only; denies the rest.
struct TestGate;

impl Gate for TestGate {
    fn admit(&self, host: &str, _port: u16) -> Admission {
        match host {
            "allowed.test" | "plain.test" | "rebind.test" | "metadata.test" => Admission::Allow {
                rule: host.to_owned(),
                names_address: false,
            },
            "127.0.0.1" => Admission::Allow {
                rule: "127.0.0.1".into(),
                names_address: true,
            },
            other => Admission::Refuse(format!("{other} is not allowed")),
        }
    }
}

/// `rebind.test` is loopback, `metadata.test` the metadata address, the rest PUBLIC.
struct TestResolver;

impl Resolve for TestResolver {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> std::pin::Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send + 'a>> {
        let ip: IpAddr = match host {
            "rebind.test" => "127.0.0.1",
            "metadata.test" => "169.254.169.254",
            _ => PUBLIC,
        }
        .parse()
        .unwrap();
        Box::pin(async move { Ok(vec![SocketAddr::new(ip, port)]) })
    }
}

/// An upstream that keeps everything it was sent and answers `answer`.
async fn upstream(at: &str, answer: &'static [u8]) -> (u16, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind((at, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let keep = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let keep = Arc::clone(&keep);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                // Answer once something arrived; keep reading until the client is done.
                let mut answered = false;
                loop {
                    match tokio::time::timeout(Duration::from_millis(300), s.read(&mut buf)).await {
                        Ok(Ok(0)) | Ok(Err(_)) => break,
                        Ok(Ok(n)) => keep.lock().unwrap().extend_from_slice(&buf[..n]),
                        Err(_) => {}
                    }
                    if !answered && !keep.lock().unwrap().is_empty() {
                        answered = true;
                        let _ = s.write_all(answer).await;
                        let _ = s.shutdown().await;
                    }
                }
            });
        }
    });
    (port, seen)
}

/// A ClientHello naming `sni` (as `sni.rs` reads it).
fn client_hello(sni: &str) -> Vec<u8> {
    client_hello_with(sni, &[])
}

/// [`client_hello`] with the extension bytes `extra` after the server name.
fn client_hello_with(sni: &str, extra: &[u8]) -> Vec<u8> {
    let name = sni.as_bytes();
    let mut list = vec![0u8];
    list.extend_from_slice(&(name.len() as u16).to_be_bytes());
    list.extend_from_slice(name);
    let mut ext = vec![0x00, 0x00];
    ext.extend_from_slice(&((list.len() + 2) as u16).to_be_bytes());
    ext.extend_from_slice(&(list.len() as u16).to_be_bytes());
    ext.extend_from_slice(&list);
    ext.extend_from_slice(extra);
    let mut body = vec![0x03, 0x03];
    body.extend_from_slice(&[9u8; 32]);
    body.extend_from_slice(&[0, 0x00, 0x02, 0x13, 0x01, 0x01, 0x00]);
    body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
    body.extend_from_slice(&ext);
    let mut msg = vec![1u8];
    msg.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    msg.extend_from_slice(&body);
    let mut out = vec![0x16, 0x03, 0x01];
    out.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    out.extend_from_slice(&msg);
    out
}

/// Send `request` (then `after`) through the proxy at `socket`; everything it answered.
async fn through(socket: &std::path::Path, request: &str, after: &[u8]) -> String {
    let mut s = UnixStream::connect(socket).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    if !after.is_empty() {
        // As a client does: the tunnel's answer first, then its own bytes.
        let mut head = vec![0u8; 39];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut head))
            .await
            .unwrap()
            .unwrap();
        let mut all = String::from_utf8_lossy(&head[..n]).into_owned();
        if !all.starts_with("HTTP/1.1 200") {
            return all;
        }
        s.write_all(after).await.unwrap();
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await;
        all.push_str(&String::from_utf8_lossy(&rest));
        return all;
    }
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Run `test` on a runtime of this thread, inside a network namespace of its own (or
/// skip loudly where one cannot be made).
fn in_network_namespace(test: impl FnOnce() + Send + 'static) {
    std::thread::spawn(move || {
        // Deprecated for the flags that can break a process's own state (CLONE_FILES,
        // CLONE_FS under a multi-threaded runtime); a new network namespace for this one
        // thread is not one of them.
        #[allow(deprecated)]
        let unshared = rustix::thread::unshare(rustix::thread::UnshareFlags::NEWNET);
        if let Err(e) = unshared {
            eprintln!("SKIPPED: no network namespace can be made here ({e}): the egress proxy's socket tests need one (run as root)");
            return;
        }
        for args in [
            vec!["link", "set", "lo", "up"],
            vec!["addr", "add", &format!("{PUBLIC}/32"), "dev", "lo"],
        ] {
            let ok = std::process::Command::new("ip")
                .args(&args)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "ip {args:?} failed in the test's namespace");
        }
        test();
    })
    .join()
    .unwrap();
}

#[test]
fn only_what_the_rules_allow_is_reached_and_only_as_it_was_allowed() {
    in_network_namespace(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let socket = dir.path().join("egress.sock");
            let reports: Arc<Mutex<Vec<Connection>>> = Arc::default();
            let kept = Arc::clone(&reports);
            let proxy = Proxy {
                gate: Arc::new(TestGate),
                resolver: Arc::new(TestResolver),
                report: Arc::new(move |c| kept.lock().unwrap().push(c)),
                limits: Limits {
                    head_timeout: Duration::from_secs(2),
                    connect_timeout: Duration::from_secs(2),
                },
                ask: None,
            };
            let listener = UnixListener::bind(&socket).unwrap();
            tokio::spawn(proxy.serve(listener));
            let (tls_port, tls_seen) = upstream(PUBLIC, b"pong").await;
            let (http_port, http_seen) = upstream(
                PUBLIC,
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
            )
            .await;
            let (local_port, local_seen) = upstream("127.0.0.1", b"local").await;

            // An allowed tunnel, TLS asking for the allowed name: spliced both ways.
            let hello = client_hello("allowed.test");
            let got = through(
                &socket,
                &format!("CONNECT allowed.test:{tls_port} HTTP/1.1\r\nHost: allowed.test\r\n\r\n"),
                &hello,
            )
            .await;
            assert!(got.starts_with("HTTP/1.1 200") && got.ends_with("pong"), "{got:?}");
            assert_eq!(*tls_seen.lock().unwrap(), hello);

            // Fronting: TLS for another name inside the allowed tunnel; nothing reaches
            // the upstream.
            tls_seen.lock().unwrap().clear();
            let got = through(
                &socket,
                &format!("CONNECT allowed.test:{tls_port} HTTP/1.1\r\n\r\n"),
                &client_hello("evil.test"),
            )
            .await;
            assert!(!got.contains("pong"), "{got:?}");
            assert!(tls_seen.lock().unwrap().is_empty());

            // Fronting by the other two doors: an Encrypted ClientHello (its outer name
            // the allowed one), and plain HTTP inside a tunnel to a name (its `Host`
            // would go unchecked). Nothing reaches the upstream either time.
            let ech = [0xfe, 0x0d, 0x00, 0x03, 0x00, 0x00, 0x01];
            for (after, what) in [
                (client_hello_with("allowed.test", &ech), "Encrypted ClientHello"),
                (
                    b"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n".to_vec(),
                    "carries only TLS",
                ),
            ] {
                let got = through(
                    &socket,
                    &format!("CONNECT allowed.test:{tls_port} HTTP/1.1\r\n\r\n"),
                    &after,
                )
                .await;
                assert!(!got.contains("pong"), "{what}: {got:?}");
                assert!(tls_seen.lock().unwrap().is_empty(), "{what}");
            }
            // Reported once each handler has ended (just after the client saw its end).
            let refusals = || -> Vec<String> {
                reports
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|c| !c.allowed)
                    .map(|c| c.reason.clone())
                    .collect()
            };
            for what in ["Encrypted ClientHello", "carries only TLS"] {
                let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
                while !refusals().iter().any(|r| r.contains(what))
                    && tokio::time::Instant::now() < deadline
                {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                assert!(
                    refusals().iter().any(|r| r.contains(what)),
                    "{what} not reported: {:?}",
                    refusals()
                );
            }

            // Unknown, rebinding to loopback, metadata by name: refused with the reason.
            for (target, says) in [
                ("denied.test", "403"),
                ("rebind.test", "loopback"),
                ("metadata.test", "link-local"),
                ("169.254.169.254", "403"),
            ] {
                let got = through(
                    &socket,
                    &format!("CONNECT {target}:{tls_port} HTTP/1.1\r\n\r\n"),
                    b"",
                )
                .await;
                assert!(
                    got.contains(says) && got.contains("warden egress"),
                    "{target}: {got:?}"
                );
            }
            // A rule naming the address itself reaches it (no TLS needed).
            let got = through(
                &socket,
                &format!("CONNECT 127.0.0.1:{local_port} HTTP/1.1\r\n\r\n"),
                b"raw",
            )
            .await;
            assert!(got.ends_with("local"), "{got:?}");
            assert_eq!(local_seen.lock().unwrap().as_slice(), b"raw");

            // Plain HTTP: origin-form upstream, one request only.
            let got = through(
                &socket,
                &format!(
                    "GET http://plain.test:{http_port}/simple/ HTTP/1.1\r\nHost: plain.test:{http_port}\r\nProxy-Authorization: secret\r\n\r\nGET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n"
                ),
                b"",
            )
            .await;
            assert!(got.starts_with("HTTP/1.1 200 OK") && got.ends_with("ok"), "{got:?}");
            let seen = String::from_utf8(http_seen.lock().unwrap().clone()).unwrap();
            assert!(seen.starts_with("GET /simple/ HTTP/1.1\r\n"), "{seen:?}");
            assert!(!seen.contains("evil.test") && !seen.contains("secret"), "{seen:?}");
            // Host naming another site than the URL: refused.
            let got = through(
                &socket,
                &format!("GET http://plain.test:{http_port}/ HTTP/1.1\r\nHost: evil.test\r\n\r\n"),
                b"",
            )
            .await;
            assert!(got.starts_with("HTTP/1.1 400"), "{got:?}");

            // Every connection is reported, with its verdict and bytes.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let reports = reports.lock().unwrap().clone();
            let first = reports
                .iter()
                .find(|c| c.host == "allowed.test" && c.allowed)
                .expect("the allowed tunnel is reported");
            assert_eq!(first.sent, hello.len() as u64);
            assert_eq!(first.received, 4);
            assert!(reports.iter().any(|c| c.host == "allowed.test"
                && !c.allowed
                && c.reason.contains("domain fronting")));
            assert!(reports.iter().any(|c| c.host == "rebind.test" && !c.allowed));
        });
    });
}

#[tokio::test]
async fn a_run_has_an_endpoint_of_its_own_for_as_long_as_it_lives() {
    use sandbox::egress::endpoint::Endpoint;
    let dir = tempfile::tempdir().unwrap();
    let (port, seen) = upstream("127.0.0.1", b"hello").await;
    let endpoint = Endpoint::open(
        dir.path(),
        "run-1a2b",
        Arc::new(TestGate),
        Arc::new(TestResolver),
        Limits::default(),
    )
    .unwrap();
    let path = endpoint.path().to_path_buf();
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);
    let got = through(
        &path,
        &format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n"),
        b"hi",
    )
    .await;
    assert!(got.ends_with("hello"), "{got:?}");
    assert_eq!(seen.lock().unwrap().as_slice(), b"hi");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let connections = endpoint.connections();
    assert_eq!(connections.len(), 1, "{connections:?}");
    assert!(connections[0].allowed && connections[0].received == 5);
    // Gone with the run.
    drop(endpoint);
    assert!(!path.exists());
    // A run id that could name another file is refused.
    for bad in ["../x", "", "a/b", "a b"] {
        assert!(
            Endpoint::open(
                dir.path(),
                bad,
                Arc::new(TestGate),
                Arc::new(TestResolver),
                Limits::default()
            )
            .is_err(),
            "{bad:?}"
        );
    }
}

#[tokio::test]
async fn an_oversized_slow_or_malformed_request_is_refused_before_any_upstream_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("egress.sock");
    let asked: Arc<Mutex<Vec<String>>> = Arc::default();
    struct Recording(Arc<Mutex<Vec<String>>>);
    impl Gate for Recording {
        fn admit(&self, host: &str, _port: u16) -> Admission {
            self.0.lock().unwrap().push(host.to_owned());
            Admission::Refuse("recorded".into())
        }
    }
    let proxy = Proxy {
        gate: Arc::new(Recording(Arc::clone(&asked))),
        resolver: Arc::new(TestResolver),
        report: Arc::new(|_| {}),
        limits: Limits {
            head_timeout: Duration::from_millis(500),
            connect_timeout: Duration::from_secs(1),
        },
        ask: None,
    };
    tokio::spawn(proxy.serve(UnixListener::bind(&socket).unwrap()));
    // A head over 8 KiB (one header line growing without end).
    let huge = format!(
        "CONNECT a.test:443 HTTP/1.1\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(16 * 1024)
    );
    let got = through(&socket, &huge, b"").await;
    assert!(
        got.starts_with("HTTP/1.1 400") && got.contains("8192"),
        "{got:?}"
    );
    // A head that never ends (a slow client holding a connection).
    let got = through(&socket, "CONNECT a.test:443 HTTP/1.1\r\n", b"").await;
    assert!(got.starts_with("HTTP/1.1 408"), "{got:?}");
    // Not text, not HTTP, a NUL in the host.
    for head in [
        "\u{ff}\u{fe} / HTTP/1.1\r\n\r\n",
        "HELLO\r\n\r\n",
        "CONNECT a.test\0.evil:443 HTTP/1.1\r\n\r\n",
    ] {
        let got = through(&socket, head, b"").await;
        assert!(got.starts_with("HTTP/1.1 400"), "{head:?}: {got:?}");
    }
    assert!(
        asked.lock().unwrap().is_empty(),
        "{:?}",
        asked.lock().unwrap()
    );
}

/// Asks about every host, so the run's asker decides each connection.
struct AskAll;

impl Gate for AskAll {
    fn admit(&self, host: &str, port: u16) -> Admission {
        Admission::Ask(format!("no rule names {host}:{port}"))
    }
}

/// Allows `asked.test` and 127.0.0.1 after a pause (the client is held meanwhile),
/// refuses the rest; keeps every question.
struct SlowAsker(Arc<Mutex<Vec<caps::ConnectionQuestion>>>);

impl caps::AskConnection for SlowAsker {
    fn ask<'a>(
        &'a self,
        question: &'a caps::ConnectionQuestion,
    ) -> std::pin::Pin<Box<dyn Future<Output = caps::ConnectionAnswer> + Send + 'a>> {
        Box::pin(async move {
            self.0.lock().unwrap().push(question.clone());
            tokio::time::sleep(Duration::from_millis(300)).await;
            match question.host.as_str() {
                "asked.test" | "127.0.0.1" => caps::ConnectionAnswer::Allow {
                    reason: format!("allowed by the test's human: {}", question.host),
                    names_address: true,
                },
                // As a fallback would: reached, but naming no address.
                "169.254.169.254" => caps::ConnectionAnswer::Allow {
                    reason: "allowed by the test's fallback".into(),
                    names_address: false,
                },
                other => {
                    caps::ConnectionAnswer::Refuse(format!("the test's human refused {other}"))
                }
            }
        })
    }
}

/// A host no rule names is decided by the run's asker while the client waits: allowed
/// (a name, TLS still held to it; an address, which the human saw and so names), refused
/// (nothing reaches the upstream), and refused outright when the run has no asker.
#[test]
fn a_host_no_rule_names_is_decided_by_the_runs_asker_while_the_client_waits() {
    in_network_namespace(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let questions: Arc<Mutex<Vec<caps::ConnectionQuestion>>> = Arc::default();
            let reports: Arc<Mutex<Vec<Connection>>> = Arc::default();
            let kept = Arc::clone(&reports);
            let proxy = |ask: Option<caps::ConnectionAsker>| Proxy {
                gate: Arc::new(AskAll),
                resolver: Arc::new(TestResolver),
                report: {
                    let kept = Arc::clone(&kept);
                    Arc::new(move |c| kept.lock().unwrap().push(c))
                },
                limits: Limits {
                    head_timeout: Duration::from_secs(2),
                    connect_timeout: Duration::from_secs(2),
                },
                ask,
            };
            let socket = dir.path().join("asked.sock");
            let asker = caps::ConnectionAsker(Arc::new(SlowAsker(Arc::clone(&questions))));
            tokio::spawn(proxy(Some(asker)).serve(UnixListener::bind(&socket).unwrap()));
            let unasked = dir.path().join("unasked.sock");
            tokio::spawn(proxy(None).serve(UnixListener::bind(&unasked).unwrap()));
            let (tls_port, tls_seen) = upstream(PUBLIC, b"pong").await;
            let (local_port, local_seen) = upstream("127.0.0.1", b"local").await;

            let hello = client_hello("asked.test");
            let got = through(
                &socket,
                &format!("CONNECT asked.test:{tls_port} HTTP/1.1\r\n\r\n"),
                &hello,
            )
            .await;
            assert!(
                got.starts_with("HTTP/1.1 200") && got.ends_with("pong"),
                "{got:?}"
            );
            // Allowed by a human, the tunnel is still held to the name asked about.
            tls_seen.lock().unwrap().clear();
            let got = through(
                &socket,
                &format!("CONNECT asked.test:{tls_port} HTTP/1.1\r\n\r\n"),
                &client_hello("evil.test"),
            )
            .await;
            assert!(!got.contains("pong"), "{got:?}");
            assert!(tls_seen.lock().unwrap().is_empty());

            // An address the human was shown (and told is loopback) is reached.
            let got = through(
                &socket,
                &format!("CONNECT 127.0.0.1:{local_port} HTTP/1.1\r\n\r\n"),
                b"hi",
            )
            .await;
            assert!(got.ends_with("local"), "{got:?}");
            assert_eq!(local_seen.lock().unwrap().as_slice(), b"hi");

            // Allowed by what names no address (a fallback): the metadata address
            // written out stays out of reach.
            let got = through(&socket, "CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n", b"").await;
            assert!(got.starts_with("HTTP/1.1 502"), "{got:?}");
            assert!(got.contains("169.254.169.254 is"), "{got:?}");

            // Refused by the human: a 403 that says so, nothing reached.
            let got = through(
                &socket,
                &format!("CONNECT other.test:{tls_port} HTTP/1.1\r\n\r\n"),
                b"",
            )
            .await;
            assert!(got.starts_with("HTTP/1.1 403"), "{got:?}");
            assert!(
                got.contains("the test's human refused other.test"),
                "{got:?}"
            );
            assert!(tls_seen.lock().unwrap().is_empty());

            // No asker: refused, and said why.
            let asked_before = questions.lock().unwrap().len();
            let got = through(
                &unasked,
                &format!("CONNECT asked.test:{tls_port} HTTP/1.1\r\n\r\n"),
                b"",
            )
            .await;
            assert!(got.starts_with("HTTP/1.1 403"), "{got:?}");
            assert!(got.contains("nobody is asked"), "{got:?}");
            assert!(tls_seen.lock().unwrap().is_empty());
            assert_eq!(questions.lock().unwrap().len(), asked_before);

            let questions = questions.lock().unwrap().clone();
            let hosts: Vec<&str> = questions.iter().map(|q| q.host.as_str()).collect();
            assert_eq!(
                hosts,
                [
                    "asked.test",
                    "asked.test",
                    "127.0.0.1",
                    "169.254.169.254",
                    "other.test"
                ],
                "{questions:?}"
            );
            assert!(questions[0].why.contains("no rule names asked.test"));
            assert_eq!(questions[0].special, None);
            assert!(
                questions[2]
                    .special
                    .as_deref()
                    .is_some_and(|s| s.contains("loopback")),
                "{questions:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            let reports = reports.lock().unwrap();
            assert!(reports.iter().any(|c| c.host == "asked.test"
                && c.allowed
                && c.reason.contains("allowed by the test's human")));
            assert!(reports.iter().any(|c| c.host == "other.test"
                && !c.allowed
                && c.reason.contains("refused other.test")));
        });
    });
}
