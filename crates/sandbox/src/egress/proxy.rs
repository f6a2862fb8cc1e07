//! The proxy's connections (see the module header of `egress`). One client connection
//! carries one request: `CONNECT host:port` (a tunnel, TLS held to `host` by its
//! ClientHello) or one absolute-form plain-HTTP request (its `Host` must be the URL's
//! host; its body is forwarded by `Content-Length` and nothing after it, so a second,
//! pipelined request for another host never reaches the upstream). Every refusal is an
//! HTTP answer that says why (or, inside a tunnel, the tunnel closed) and a
//! [`Connection`] report.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener};

use super::addr;
use super::sni::{self, Hello};

/// A client connection the proxy serves: the command's own TCP connection, accepted on
/// the run's listener (`broker.rs`), or a connection to a socket path (`endpoint.rs`).
pub(crate) trait Client:
    AsyncRead + AsyncWrite + super::splice::Socket + Unpin + Send
{
}
impl<T: AsyncRead + AsyncWrite + super::splice::Socket + Unpin + Send> Client for T {}

/// The longest request head read.
pub const MAX_HEAD: usize = 8 * 1024;

/// What the run's rules say about one host and port, and what decides it: the rules a
/// run carries ([`caps::ExecOptions::connection_rules`]) or the sandbox's own.
pub use caps::{Admission, AdmitConnection as Gate};

/// Resolves names to the addresses the proxy connects to.
pub trait Resolve: Send + Sync {
    /// `host`'s addresses, with `port`.
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> std::pin::Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send + 'a>>;
}

/// This machine's resolver.
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> std::pin::Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send + 'a>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.collect()) })
    }
}

/// One connection, as reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Connection {
    /// The host asked for.
    pub host: String,
    /// The port asked for.
    pub port: u16,
    /// `connect` or `http`.
    pub kind: &'static str,
    /// Whether it reached the upstream.
    pub allowed: bool,
    /// The rule that allowed it, or why it was refused.
    pub reason: String,
    /// Bytes from the command to the upstream.
    pub sent: u64,
    /// Bytes from the upstream to the command.
    pub received: u64,
}

impl From<Connection> for caps::EgressConnection {
    fn from(c: Connection) -> Self {
        caps::EgressConnection {
            host: c.host,
            port: c.port,
            kind: c.kind.to_owned(),
            allowed: c.allowed,
            reason: c.reason,
            sent: c.sent,
            received: c.received,
        }
    }
}

/// The proxy's bounds.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// To read a request head, and a tunnel's first TLS flight.
    pub head_timeout: Duration,
    /// To connect to the upstream.
    pub connect_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            head_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// What a proxy needs: the gate, the resolver, where reports go, its bounds.
#[derive(Clone)]
pub struct Proxy {
    /// Decides each host and port.
    pub gate: Arc<dyn Gate>,
    /// Resolves names.
    pub resolver: Arc<dyn Resolve>,
    /// Told of every connection when it ends.
    pub report: Arc<dyn Fn(Connection) + Send + Sync>,
    /// Its bounds.
    pub limits: Limits,
    /// Who decides what the gate asks about (the run's caller's asker); `None`: those
    /// connections are refused.
    pub ask: Option<caps::ConnectionAsker>,
}

impl Proxy {
    /// Serve `listener` until the returned future is dropped (or accepting fails).
    pub async fn serve(self, listener: UnixListener) -> std::io::Result<()> {
        loop {
            let (client, _) = listener.accept().await?;
            let proxy = self.clone();
            tokio::spawn(async move {
                let report = proxy.handle(client).await;
                (proxy.report)(report);
            });
        }
    }

    /// One client connection, to its end.
    pub(crate) async fn handle(&self, mut client: impl Client) -> Connection {
        let mut report = Connection {
            host: String::new(),
            port: 0,
            kind: "connect",
            allowed: false,
            reason: String::new(),
            sent: 0,
            received: 0,
        };
        let head = match tokio::time::timeout(self.limits.head_timeout, read_head(&mut client))
            .await
        {
            Ok(Ok(head)) => head,
            Ok(Err(why)) => return refuse(&mut client, report, 400, why).await,
            Err(_) => {
                return refuse(&mut client, report, 408, "no request head in time".into()).await;
            }
        };
        let request = match Request::parse(&head.text) {
            Ok(r) => r,
            Err(why) => return refuse(&mut client, report, 400, why).await,
        };
        report.host.clone_from(&request.host);
        report.port = request.port;
        report.kind = if request.connect { "connect" } else { "http" };
        let (names_address, rule) = match self.gate.admit(&request.host, request.port) {
            Admission::Allow {
                rule,
                names_address,
            } => (names_address, rule),
            Admission::Refuse(why) => return refuse(&mut client, report, 403, why).await,
            Admission::Ask(why) => match self.ask(&request.host, request.port, why).await {
                Ok((rule, names_address)) => (names_address, rule),
                Err(why) => return refuse(&mut client, report, 403, why).await,
            },
        };
        let upstream = match self
            .connect(&request.host, request.port, names_address)
            .await
        {
            Ok(s) => s,
            Err(why) => return refuse(&mut client, report, 502, why).await,
        };
        report.allowed = true;
        report.reason = rule;
        if request.connect {
            self.tunnel(client, upstream, head.rest, &request.host, report)
                .await
        } else {
            forward_http(client, upstream, &request, head.rest, report).await
        }
    }

    /// Ask the run's asker about `host`:`port`, which no rule names (`why`); the client
    /// connection waits meanwhile. What allowed it and whether that names the address,
    /// or why not.
    async fn ask(&self, host: &str, port: u16, why: String) -> Result<(String, bool), String> {
        let Some(asker) = &self.ask else {
            return Err(format!(
                "{why}, and nobody is asked about this run's connections"
            ));
        };
        let question = caps::ConnectionQuestion {
            host: host.to_owned(),
            port,
            why,
            special: host
                .parse::<IpAddr>()
                .ok()
                .and_then(addr::special)
                .map(str::to_owned),
        };
        match asker.0.ask(&question).await {
            caps::ConnectionAnswer::Allow {
                reason,
                names_address,
            } => Ok((reason, names_address)),
            caps::ConnectionAnswer::Refuse(why) => Err(why),
        }
    }

    /// Connect to `host`'s addresses as this proxy resolves them, never to a special
    /// one unless the rule names that address.
    async fn connect(
        &self,
        host: &str,
        port: u16,
        names_address: bool,
    ) -> Result<TcpStream, String> {
        let addresses: Vec<SocketAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => self
                .resolver
                .resolve(host, port)
                .await
                .map_err(|e| format!("{host} does not resolve: {e}"))?,
        };
        let mut refused = Vec::new();
        // A special address is reached only when the host is that address and the rule
        // names it; a name never reaches one, whatever it resolves to.
        let named = names_address && host.parse::<IpAddr>().is_ok();
        for address in addresses {
            if let Some(why) = addr::special(address.ip())
                && !named
            {
                refused.push(format!("{} is {why}", address.ip()));
                continue;
            }
            match tokio::time::timeout(self.limits.connect_timeout, TcpStream::connect(address))
                .await
            {
                Ok(Ok(stream)) => return Ok(stream),
                Ok(Err(e)) => refused.push(format!("{address}: {e}")),
                Err(_) => refused.push(format!("{address}: no answer in time")),
            }
        }
        Err(if refused.is_empty() {
            format!("{host} has no address")
        } else {
            format!(
                "{host}:{port} is not reached: {} (a rule must name a special address itself)",
                refused.join("; ")
            )
        })
    }

    /// A CONNECT tunnel: answered, its first flight read and held to `host`, then
    /// spliced.
    async fn tunnel(
        &self,
        mut client: impl Client,
        mut upstream: TcpStream,
        mut first: Vec<u8>,
        host: &str,
        mut report: Connection,
    ) -> Connection {
        if client
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await
            .is_err()
        {
            return report;
        }
        let hello = tokio::time::timeout(self.limits.head_timeout, async {
            loop {
                match sni::read_hello(&first) {
                    Hello::Incomplete if first.len() < sni::MAX_HELLO => {}
                    other => return other,
                }
                let mut buf = [0u8; 4096];
                match client.read(&mut buf).await {
                    Ok(0) | Err(_) => return Hello::Incomplete,
                    Ok(n) => first.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await
        .unwrap_or(Hello::Incomplete);
        let names_host = host.parse::<IpAddr>().is_err();
        let refusal = match hello {
            Hello::Sni(name) if name != host => Some(format!(
                "TLS asked for {name:?} through a tunnel allowed for {host:?} (domain fronting)"
            )),
            Hello::NoSni if names_host => Some(format!(
                "TLS without a server name through a tunnel allowed for {host:?}"
            )),
            Hello::Sni(_) | Hello::NoSni => None,
            Hello::Encrypted => Some(format!(
                "an Encrypted ClientHello hides which server it asks for, through a tunnel allowed for {host:?} (refused: it could front another)"
            )),
            // A tunnel to a name carries TLS only: plain HTTP inside it would carry a
            // `Host` no one checks (another virtual host behind the same address); it
            // goes as a proxied request instead. A rule naming an address allows that
            // address, whatever is spoken to it.
            Hello::NotTls if names_host => Some(format!(
                "a tunnel to {host:?} carries only TLS; send plain HTTP as a proxied request (http_proxy)"
            )),
            Hello::NotTls => None,
            Hello::Malformed(why) => Some(format!("not a well-formed TLS ClientHello: {why}")),
            Hello::Incomplete if !first.is_empty() => {
                Some("the first TLS flight did not arrive whole in time".into())
            }
            Hello::Incomplete if names_host => Some(format!(
                "no TLS hello through a tunnel allowed for {host:?}"
            )),
            Hello::Incomplete => None,
        };
        if let Some(why) = refusal {
            report.allowed = false;
            report.reason = why;
            return report;
        }
        if upstream.write_all(&first).await.is_err() {
            return report;
        }
        report.sent += first.len() as u64;
        let (sent, received) = splice(client, upstream).await;
        report.sent += sent;
        report.received += received;
        report
    }
}

/// Answer `status` with `why`, and report the refusal.
async fn refuse(
    client: &mut impl Client,
    mut report: Connection,
    status: u16,
    why: String,
) -> Connection {
    let text = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        411 => "Length Required",
        _ => "Bad Gateway",
    };
    let body = format!("warden egress: {why}\n");
    let answer = format!(
        "HTTP/1.1 {status} {text}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\nX-Warden-Egress: refused\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(answer.as_bytes()).await;
    let _ = client.shutdown().await;
    report.allowed = false;
    report.reason = why;
    report
}

/// A request head and the bytes read after it.
struct Head {
    text: String,
    rest: Vec<u8>,
}

async fn read_head(client: &mut impl Client) -> Result<Head, String> {
    let mut buf = Vec::with_capacity(1024);
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let text = std::str::from_utf8(&buf[..end + 4])
                .map_err(|_| "a request head that is not text".to_owned())?
                .to_owned();
            return Ok(Head {
                text,
                rest: buf[end + 4..].to_vec(),
            });
        }
        if buf.len() >= MAX_HEAD {
            return Err(format!("a request head over {MAX_HEAD} bytes"));
        }
        let mut chunk = [0u8; 2048];
        let n = client
            .read(&mut chunk)
            .await
            .map_err(|e| format!("reading the request: {e}"))?;
        if n == 0 {
            return Err("the connection closed before a whole request head".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A request as the proxy needs it.
struct Request {
    connect: bool,
    host: String,
    port: u16,
    /// For plain HTTP: the head to send upstream (origin-form, `Proxy-*` dropped,
    /// `Connection: close`), and the body's length.
    upstream_head: String,
    body: u64,
}

impl Request {
    fn parse(head: &str) -> Result<Request, String> {
        let mut lines = head.split("\r\n");
        let line = lines.next().unwrap_or_default();
        let mut parts = line.split(' ');
        let (Some(method), Some(target), Some(version), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(format!("{line:?} is not an HTTP request line"));
        };
        if version != "HTTP/1.1" && version != "HTTP/1.0" {
            return Err(format!("{version:?} is not HTTP/1.x"));
        }
        let headers: Vec<(String, &str)> = lines
            .filter(|l| !l.is_empty())
            .map(|l| {
                l.split_once(':')
                    .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim()))
                    .ok_or_else(|| format!("{l:?} is not a header"))
            })
            .collect::<Result<_, _>>()?;
        if method == "CONNECT" {
            let (host, port) = authority(target, None)?;
            return Ok(Request {
                connect: true,
                host,
                port,
                upstream_head: String::new(),
                body: 0,
            });
        }
        let Some(rest) = target.strip_prefix("http://") else {
            return Err(if target.starts_with("https://") {
                "https:// is reached through CONNECT, not as a plain request".into()
            } else {
                format!("{target:?}: a proxy request names its URL (http://host/path)")
            });
        };
        let (authority_text, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = authority(authority_text, Some(80))?;
        let hosts: Vec<&str> = headers
            .iter()
            .filter(|(k, _)| k == "host")
            .map(|(_, v)| *v)
            .collect();
        match hosts.as_slice() {
            [one] if authority(one, Some(80)).is_ok_and(|h| h == (host.clone(), port)) => {}
            [one] => {
                return Err(format!(
                    "Host {one:?} is not the URL's host {host:?}: one request reaches one host"
                ));
            }
            _ => return Err("a request names its Host exactly once".into()),
        }
        if headers.iter().any(|(k, _)| k == "transfer-encoding") {
            return Err("a chunked request body through the proxy: send a Content-Length".into());
        }
        let lengths: Vec<&str> = headers
            .iter()
            .filter(|(k, _)| k == "content-length")
            .map(|(_, v)| *v)
            .collect();
        let body = match lengths.as_slice() {
            [] => 0,
            [one] => one
                .parse::<u64>()
                .map_err(|_| format!("Content-Length {one:?} is not a number"))?,
            _ => return Err("a request has one Content-Length".into()),
        };
        let mut upstream_head = format!("{method} {path} {version}\r\n");
        for (name, value) in &headers {
            if name.starts_with("proxy-") || name == "connection" || name == "keep-alive" {
                continue;
            }
            upstream_head.push_str(&format!("{name}: {value}\r\n"));
        }
        upstream_head.push_str("connection: close\r\n\r\n");
        Ok(Request {
            connect: false,
            host,
            port,
            upstream_head,
            body,
        })
    }
}

/// `host[:port]` (brackets around an IPv6 address), lower-cased; `default` when no port
/// is written (CONNECT must write one).
fn authority(text: &str, default: Option<u16>) -> Result<(String, u16), String> {
    let bad = || format!("{text:?} is not host:port");
    let (host, port) = if let Some(v6) = text.strip_prefix('[') {
        let (ip, after) = v6.split_once(']').ok_or_else(bad)?;
        (ip, after.strip_prefix(':'))
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }
    };
    let port = match (port, default) {
        (Some(p), _) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(bad)?,
        (None, Some(d)) => d,
        (None, None) => return Err(bad()),
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host.is_empty() || host.contains(['/', '@', ' ', '\0']) {
        return Err(bad());
    }
    Ok((host, port))
}

/// One plain-HTTP request: its head rewritten, its body by length, then the answer.
async fn forward_http(
    mut client: impl Client,
    mut upstream: TcpStream,
    request: &Request,
    rest: Vec<u8>,
    mut report: Connection,
) -> Connection {
    let already = (rest.len() as u64).min(request.body);
    let mut out = request.upstream_head.clone().into_bytes();
    out.extend_from_slice(&rest[..already as usize]);
    if upstream.write_all(&out).await.is_err() {
        return report;
    }
    // What reached the upstream: the head as forwarded, and the body so far.
    report.sent += out.len() as u64;
    // The rest of the body, and nothing after it.
    let mut body = (&mut client).take(request.body - already);
    match tokio::io::copy(&mut body, &mut upstream).await {
        Ok(n) => report.sent += n,
        Err(_) => return report,
    }
    let _ = upstream.shutdown().await;
    report.received += super::splice::relay(&upstream, &client).await;
    report
}

/// Copy both ways until both ends close; the bytes each way.
async fn splice(client: impl Client, upstream: TcpStream) -> (u64, u64) {
    tokio::join!(
        super::splice::relay(&client, &upstream),
        super::splice::relay(&upstream, &client),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_read_strictly() {
        let r =
            Request::parse("CONNECT Files.Example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert!(r.connect && r.host == "files.example.com" && r.port == 443);
        let r = Request::parse(
            "GET http://example.com/simple/ HTTP/1.1\r\nHost: example.com\r\nProxy-Authorization: x\r\nConnection: keep-alive\r\n\r\n",
        )
        .unwrap();
        assert_eq!((r.host.as_str(), r.port), ("example.com", 80));
        assert!(r.upstream_head.starts_with("GET /simple/ HTTP/1.1\r\n"));
        assert!(!r.upstream_head.contains("proxy-authorization"));
        assert!(r.upstream_head.ends_with("connection: close\r\n\r\n"));
        for (head, says) in [
            ("CONNECT example.com HTTP/1.1\r\n\r\n", "host:port"),
            (
                "GET http://a.example/ HTTP/1.1\r\nHost: b.example\r\n\r\n",
                "one request reaches one host",
            ),
            ("GET http://a.example/ HTTP/1.1\r\n\r\n", "exactly once"),
            (
                "GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\nHost: a.example\r\n\r\n",
                "exactly once",
            ),
            (
                "GET https://a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n",
                "CONNECT",
            ),
            (
                "GET /path HTTP/1.1\r\nHost: a.example\r\n\r\n",
                "names its URL",
            ),
            (
                "POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n",
                "chunked",
            ),
            (
                "POST http://a.example/ HTTP/1.1\r\nHost: a.example\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                "one Content-Length",
            ),
            (
                "GET http://u@a.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n",
                "host:port",
            ),
            ("GET  http://a.example/ HTTP/1.1\r\n\r\n", "request line"),
        ] {
            let err = Request::parse(head).err().unwrap_or_default();
            assert!(err.contains(says), "{head:?}: {err}");
        }
    }
}
