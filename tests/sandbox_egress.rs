//! `sandbox.network = "proxy"` for real (both builders: `cargo xtask ci` runs this file's
//! parent again with bubblewrap): the run has a network namespace of its own with only
//! loopback; `curl`, told nothing but the proxy variables the helper sets, reaches what
//! the gate allows — plain HTTP, and HTTPS through a `CONNECT` tunnel to a name the proxy
//! resolves itself — and nothing else; a program that ignores the proxy variables gets
//! nowhere; every connection is on the run's output with its verdict and bytes.

use super::*;
use sandbox::egress::proxy::{Admission, Gate, Limits, Resolve};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};

/// Allows exactly the listed (host, port) pairs; an address pair names its address.
struct ListGate(Vec<(String, u16)>);

impl Gate for ListGate {
    fn admit(&self, host: &str, port: u16) -> Admission {
        if self.0.iter().any(|(h, p)| h == host && *p == port) {
            Admission::Allow {
                rule: format!("test allows {host}:{port}"),
                names_address: host.parse::<std::net::IpAddr>().is_ok(),
            }
        } else {
            Admission::Refuse(format!("the test allows no {host}:{port}"))
        }
    }
}

/// Resolves `example.test` (and nothing else) to `to`.
struct TestResolver(std::net::IpAddr);

impl Resolve for TestResolver {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> std::pin::Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send + 'a>> {
        Box::pin(async move {
            match host {
                "example.test" => Ok(vec![SocketAddr::new(self.0, port)]),
                _ => Err(std::io::Error::other("no such name in the test")),
            }
        })
    }
}

fn proxied(lab: &Lab, gate: ListGate, resolver: TestResolver) -> Arc<NamespaceSandbox> {
    Arc::new(
        lab.namespace_sandbox(sandbox::Network::Proxy)
            .with_egress(sandbox::Egress {
                gate: Arc::new(gate),
                resolver: Arc::new(resolver),
                limits: Limits {
                    head_timeout: Duration::from_secs(5),
                    connect_timeout: Duration::from_secs(5),
                },
            }),
    )
}

/// An HTTP server on `at` answering every request with `body`.
fn serve_http(at: &str, body: &'static str) -> SocketAddr {
    let listener = TcpListener::bind(at).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}

fn curl_present() -> bool {
    let found = Path::new("/usr/bin/curl").exists();
    if !found {
        eprintln!(
            "SKIPPED: /usr/bin/curl is missing (.ci/run installs it): the proxy-mode tests drive a real client"
        );
    }
    found
}

async fn sh(sandbox: &Arc<NamespaceSandbox>, lab: &Lab, script: &str) -> ExecOutput {
    sandbox
        .shell(Profile::Writable)
        .exec(
            &["/bin/sh".into(), "-c".into(), script.into()],
            &lab.options(&[]),
        )
        .await
        .unwrap()
}

#[tokio::test]
async fn a_proxy_run_reaches_only_what_its_gate_allows_and_reports_every_connection() {
    if !bwrap_usable() || !curl_present() {
        return;
    }
    let lab = lab();
    let allowed = serve_http("127.0.0.1:0", "hello through the proxy");
    let other = serve_http("127.0.0.1:0", "must not be reached");
    let sandbox = proxied(
        &lab,
        ListGate(vec![("127.0.0.1".into(), allowed.port())]),
        TestResolver(std::net::Ipv4Addr::LOCALHOST.into()),
    );
    // Only the proxy variables lead out; the command is told nothing else.
    let out = sh(
        &sandbox,
        &lab,
        &format!(
            "env | grep -i _proxy= | sort; curl -sS --max-time 20 http://{allowed}/a; echo; \
             curl -sS --max-time 20 -o /dev/null -w 'other=%{{http_code}}\\n' http://{other}/b; \
             curl -sS --max-time 5 --noproxy '*' http://{allowed}/c || echo direct=refused"
        ),
    )
    .await;
    assert!(out.stdout.contains("hello through the proxy"), "{out:?}");
    assert!(out.stdout.contains("other=403"), "{out:?}");
    assert!(out.stdout.contains("direct=refused"), "{out:?}");
    assert!(!out.stdout.contains("must not be reached"), "{out:?}");
    assert!(
        out.stdout.contains("HTTPS_PROXY=http://127.0.0.1:"),
        "{out:?}"
    );
    assert!(!out.stdout.to_lowercase().contains("no_proxy"), "{out:?}");
    // Two connections reached the proxy (the direct one never left the namespace), each
    // reported with its verdict; the allowed one with its bytes.
    assert_eq!(out.egress.len(), 2, "{:?}", out.egress);
    let reached = out
        .egress
        .iter()
        .find(|c| c.port == allowed.port())
        .expect("the allowed connection is reported");
    assert!(reached.allowed && reached.kind == "http", "{reached:?}");
    assert!(reached.sent > 0 && reached.received > 0, "{reached:?}");
    let refused = out
        .egress
        .iter()
        .find(|c| c.port == other.port())
        .expect("the refused connection is reported");
    assert!(!refused.allowed, "{refused:?}");
    assert!(refused.reason.contains("allows no"), "{refused:?}");
}

#[tokio::test]
async fn a_proxy_run_without_a_gate_is_refused_before_anything_runs() {
    if !bwrap_usable() {
        return;
    }
    let lab = lab();
    let marker = lab.ws().join("ran");
    let sandbox = Arc::new(lab.namespace_sandbox(sandbox::Network::Proxy));
    let err = sandbox
        .shell(Profile::Writable)
        .exec(
            &[
                "/bin/sh".into(),
                "-c".into(),
                format!("touch {}", marker.display()),
            ],
            &lab.options(&[]),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no egress rules"), "{err}");
    assert!(!marker.exists(), "the command ran");
}

/// HTTPS by name: the proxy resolves `example.test` itself (to a non-special address on
/// the loopback of a network namespace this test makes) and tunnels TLS whose server
/// name is the one allowed; a name the gate does not allow gets a refusal, and nothing
/// is resolved for it.
#[test]
fn https_through_a_connect_tunnel_reaches_an_allowed_name() {
    if !bwrap_usable() || !curl_present() {
        return;
    }
    let Ok(openssl) = which("openssl") else {
        eprintln!(
            "SKIPPED: openssl is missing (.ci/run installs it): it serves the test's TLS upstream"
        );
        return;
    };
    std::thread::spawn(move || {
        // A network namespace for this thread only (and what it starts): the upstream
        // lives on 198.51.100.7, an address the proxy may connect to by name.
        // SAFETY: unshare with a plain flag, for this thread only.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            let e = std::io::Error::last_os_error();
            eprintln!("SKIPPED: no network namespace can be made here ({e}): run as root");
            return;
        }
        for args in [
            vec!["link", "set", "lo", "up"],
            vec!["addr", "add", "198.51.100.7/32", "dev", "lo"],
        ] {
            let ok = Command::new("ip")
                .args(&args)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "ip {args:?} failed in the test's namespace");
        }
        let lab = lab();
        let certs = tempfile::tempdir().unwrap();
        let (cert, key) = (certs.path().join("cert.pem"), certs.path().join("key.pem"));
        let made = Command::new(&openssl)
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"])
            .args(["-nodes", "-days", "1", "-subj", "/CN=example.test"])
            .args(["-addext", "subjectAltName=DNS:example.test"])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert)
            .output()
            .unwrap();
        assert!(made.status.success(), "{made:?}");
        // The CA file must be readable inside: the workspace is.
        let ca = lab.ws().join("ca.pem");
        std::fs::copy(&cert, &ca).unwrap();
        let mut server = Command::new(&openssl)
            .args(["s_server", "-quiet", "-www", "-accept", "198.51.100.7:8443"])
            .arg("-cert")
            .arg(&cert)
            .arg("-key")
            .arg(&key)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let listening = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            std::net::TcpStream::connect("198.51.100.7:8443").is_ok()
        });
        assert!(listening, "openssl s_server did not start");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let out = runtime.block_on(async {
            let sandbox = proxied(
                &lab,
                ListGate(vec![("example.test".into(), 8443)]),
                TestResolver("198.51.100.7".parse().unwrap()),
            );
            sh(
                &sandbox,
                &lab,
                &format!(
                    "curl -sS --max-time 20 --cacert {ca} https://example.test:8443/ | head -c 200; echo; \
                     curl -sS --max-time 20 --cacert {ca} https://other.test:8443/ || echo other=refused",
                    ca = ca.display()
                ),
            )
            .await
        });
        let _ = server.kill();
        let _ = server.wait();
        assert!(out.stdout.contains("s_server"), "{out:?}");
        assert!(out.stdout.contains("other=refused"), "{out:?}");
        let tunnel = out
            .egress
            .iter()
            .find(|c| c.host == "example.test")
            .expect("the tunnel is reported");
        assert!(tunnel.allowed && tunnel.kind == "connect", "{tunnel:?}");
        assert!(tunnel.received > 0, "{tunnel:?}");
        let other = out
            .egress
            .iter()
            .find(|c| c.host == "other.test")
            .expect("the refusal is reported");
        assert!(!other.allowed, "{other:?}");
    })
    .join()
    .unwrap();
}

fn which(name: &str) -> Result<PathBuf, ()> {
    ["/usr/bin", "/bin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
        .ok_or(())
}

/// The whole path a user takes: `config.toml` says `network = "proxy"` and names what
/// may be reached; `warden exec` (through its companion and without) runs curl in the
/// sandbox, which reaches that and nothing else, and says each connection on stderr;
/// `--json` carries them in `egress`. The plan the run was decided with names the rules.
#[test]
fn warden_exec_in_proxy_mode_reaches_what_config_allows_and_says_so() {
    if !bwrap_usable() || !curl_present() {
        return;
    }
    let allowed = serve_http("127.0.0.1:0", "hello from config");
    let other = serve_http("127.0.0.1:0", "must not be reached");
    let home = warden_home();
    let ws = tempfile::tempdir().unwrap();
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    configure(
        home.path(),
        &format!(
            "[sandbox]\nnetwork = \"proxy\"\n\n[sandbox.egress]\nallow = [\"127.0.0.1:{}\"]\ndeny = [\"*.example.com\"]\n",
            allowed.port()
        ),
        r#"{"version":1}"#,
    );
    for companion in ["on", "off"] {
        let out = warden_in(home.path())
            .env("WARDEN_COMPANION", companion)
            .args([
                "exec",
                "--shell",
                &format!(
                    "curl -sS --max-time 20 http://{allowed}/; echo; \
                     curl -sS --max-time 20 -o /dev/null -w 'other=%{{http_code}}\\n' http://{other}/"
                ),
            ])
            .current_dir(&ws_path)
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            out.status.success(),
            "companion {companion}: {stdout}\n{stderr}"
        );
        assert!(stdout.contains("hello from config"), "{stdout}\n{stderr}");
        assert!(stdout.contains("other=403"), "{stdout}\n{stderr}");
        assert!(
            stderr.contains(&format!(
                "warden: network: 127.0.0.1:{} http allowed ([sandbox.egress] allow 127.0.0.1:{})",
                allowed.port(),
                allowed.port()
            )),
            "{stderr}"
        );
        assert!(
            stderr.contains(&format!(
                "warden: network: 127.0.0.1:{} http refused: no [sandbox.egress] allow rule names 127.0.0.1 on port {}",
                other.port(),
                other.port()
            )),
            "{stderr}"
        );
    }
    let out = warden_in(home.path())
        .args(["exec", "--json", "--", "curl", "-sS", "--max-time", "20"])
        .arg(format!("http://{allowed}/"))
        .current_dir(&ws_path)
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["egress"][0]["allowed"], true, "{json}");
    assert_eq!(json["egress"][0]["port"], allowed.port(), "{json}");
    // `policy explain` shows the run's network policy as it will be in force.
    let explained = warden_in(home.path())
        .args(["policy", "explain", "--json", "--", "curl", "http://x/"])
        .current_dir(&ws_path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&explained.stdout);
    assert!(text.contains("\"proxy\""), "{text}");
    assert!(
        text.contains(&format!("127.0.0.1:{}", allowed.port())) && text.contains("*.example.com"),
        "{text}"
    );
}
