//! The egress rows (`sandbox.network = "proxy"`): `egress-throughput` (a 100 MiB download
//! by curl in the sandbox from a loopback server, through Warden's proxy, against the same
//! download with the network on: the time ratio is the inverse of the throughput ratio,
//! so ≥ 0.9× throughput is ≤ 1.11× time) and `egress-connect` (200 sequential requests,
//! each on a connection of its own, through the proxy against the network on: the
//! difference per connection, ≤ 1 ms). Both sandboxes are built by the same builder with
//! the same policy but the network; the upstream is named by an address rule (a name
//! would be resolved by the proxy — to a loopback address it refuses for names).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use caps::{ExecOptions, Shell};
use sandbox::egress::proxy::{Admission, Gate, Limits, SystemResolver};

use crate::harness::{RatioSpec, Report, compare};

/// The rows [`run`] measures.
pub const ROWS: &[&str] = &["egress-throughput", "egress-connect"];

/// The download's size.
const DOWNLOAD: usize = 100 << 20;

/// The sequential requests of `egress-connect`.
const CONNECTIONS: usize = 200;

/// Allows exactly one address and port.
struct OneAddress(SocketAddr);

impl Gate for OneAddress {
    fn admit(&self, host: &str, port: u16) -> Admission {
        if host == self.0.ip().to_string() && port == self.0.port() {
            Admission::Allow {
                rule: format!("bench allows {}", self.0),
                names_address: true,
            }
        } else {
            Admission::Refuse("not the bench's upstream".into())
        }
    }
}

/// A loopback HTTP server: `/big` is [`DOWNLOAD`] bytes, anything else two; every
/// answer closes its connection.
fn serve() -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        let chunk = vec![b'x'; 1 << 20];
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let chunk = chunk.clone();
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let big = head.starts_with(b"GET /big ") || head.windows(5).any(|w| w == b"/big ");
                let len = if big { DOWNLOAD } else { 2 };
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
                );
                if big {
                    for _ in 0..DOWNLOAD / chunk.len() {
                        if s.write_all(&chunk).is_err() {
                            return;
                        }
                    }
                } else {
                    let _ = s.write_all(b"ok");
                }
            });
        }
    });
    Ok(addr)
}

/// Run the egress rows that `wanted` selects.
pub async fn run(
    report: &mut Report,
    quick: bool,
    wanted: &dyn Fn(&str) -> bool,
) -> anyhow::Result<()> {
    if crate::sandbox_bench::find_bwrap().is_none() || !Path::new("/usr/bin/curl").exists() {
        for id in ROWS.iter().filter(|id| wanted(id)) {
            println!("{id}: SKIPPED (needs bubblewrap's namespaces and /usr/bin/curl)");
        }
        return Ok(());
    }
    let helper = std::env::current_exe()?.with_file_name("warden-sandbox-helper");
    if !helper.exists() {
        bail!(
            "{} was not found next to the bench binary",
            helper.display()
        );
    }
    let helper = caps::process::OpenedProgram::open(&helper)?;
    let dirs = crate::sandbox_bench::Dirs::new("eg")?;
    let upstream = serve()?;
    let build = |network: sandbox::Network| -> anyhow::Result<Arc<sandbox::NamespaceSandbox>> {
        let policy = sandbox::SandboxPolicy {
            writable_paths: vec![dirs.workspace.clone()],
            readable_extra_paths: Vec::new(),
            hidden_paths: vec![dirs.home.clone()],
            read_only_paths: Vec::new(),
            network,
            landlock: sandbox::LandlockMode::Auto,
        };
        let sb = match sandbox::probe::builder_works(helper.exec_path()) {
            Ok(()) => sandbox::NamespaceSandbox::built_by_warden(policy, helper.clone()),
            Err(_) => sandbox::NamespaceSandbox::new(
                policy,
                helper.clone(),
                &sandbox::namespace::TRUSTED_BWRAP_DIRS
                    .iter()
                    .map(PathBuf::from)
                    .collect::<Vec<_>>(),
            ),
        }
        .map_err(|e| anyhow::anyhow!(e.0))?;
        Ok(Arc::new(sb.with_egress(sandbox::Egress {
            gate: Arc::new(OneAddress(upstream)),
            resolver: Arc::new(SystemResolver),
            limits: Limits::default(),
        })))
    };
    let open = build(sandbox::Network::On)?;
    let proxied = build(sandbox::Network::Proxy)?;
    let options = ExecOptions::new(dirs.workspace.clone(), Duration::from_secs(120))
        .with_env("PATH", "/usr/bin:/bin");
    let curl = |sb: &Arc<sandbox::NamespaceSandbox>, script: String| {
        let (shell, options) = (sb.shell(sandbox::Profile::ReadOnly), options.clone());
        async move {
            let out = shell
                .exec(&["/bin/sh".into(), "-c".into(), script], &options)
                .await?;
            if !out.status.success() || out.egress.iter().any(|c| !c.allowed) {
                bail!(
                    "curl failed in the sandbox: {} {:?}",
                    out.stderr,
                    out.egress
                );
            }
            Ok(())
        }
    };
    // One script in each sandbox, interleaved: (network on, through the proxy) medians.
    let (warmup, iterations) = if quick { (1, 3) } else { (3, 15) };
    let measure = |script: String| {
        let (curl, open, proxied) = (&curl, &open, &proxied);
        async move {
            compare(
                warmup,
                iterations,
                || curl(open, script.clone()),
                || curl(proxied, script.clone()),
            )
            .await
        }
    };
    if wanted("egress-throughput") {
        let (base, warden) =
            measure(format!("curl -sS -o /dev/null http://{upstream}/big")).await?;
        report.ratio(
            RatioSpec {
                id: "egress-throughput",
                what: "a 100 MiB download by curl in the sandbox from a loopback server, through Warden's egress proxy (time; ≥ 0.9× throughput is ≤ 1.11× time)",
                baseline: "the same download in the same sandbox with the network on",
                unit: "ms",
                max_ratio: 1.11,
                iterations,
            },
            base,
            warden,
        );
    }
    if wanted("egress-connect") {
        let (base, warden) = measure(format!(
            "curl -sS 'http://{upstream}/[1-{CONNECTIONS}]' > /dev/null"
        ))
        .await?;
        let per_connection = (warden - base) / CONNECTIONS as f64;
        report.value(
            "egress-connect",
            &format!(
                "setup cost of one connection through Warden's egress proxy over a direct one ({CONNECTIONS} sequential requests by curl in the sandbox, each on its own connection; direct {base:.1} ms, proxied {warden:.1} ms)"
            ),
            per_connection,
            "ms",
            1.0,
            iterations,
        );
    }
    Ok(())
}
