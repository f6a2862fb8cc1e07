//! The WebSocket transport: the node dials the gateway (so nodes behind NAT work), over
//! TLS whose certificate is pinned by fingerprint ([`crate::tls`]), or plain only to a
//! loopback address. Each Bridge frame is one binary WebSocket message, capped at
//! [`MAX_FRAME`]; text messages are a protocol violation.

use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::wire::{FrameRx, FrameTx, MAX_FRAME, Transport, TransportKind};
use crate::{BridgeError, tls};

/// The path nodes connect to.
pub const BRIDGE_PATH: &str = "/bridge";

/// Anything a WebSocket can run over.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for T {}

fn config() -> WebSocketConfig {
    // A small read buffer: a gateway holds one per node, and most frames are heartbeats
    // and short results (tungstenite's default is 128 KiB, per connection).
    WebSocketConfig::default()
        .read_buffer_size(8 * 1024)
        .max_message_size(Some(MAX_FRAME))
        .max_frame_size(Some(MAX_FRAME))
}

/// A gateway address as a node is given it: `wss://HOST:PORT` (TLS, a pinned
/// fingerprint required) or `ws://LOOPBACK:PORT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatewayUrl {
    /// TLS or not.
    pub tls: bool,
    /// Host (name or IP) as written.
    pub host: String,
    /// Port.
    pub port: u16,
}

impl GatewayUrl {
    /// Parse and check `url`: plain `ws://` only to a loopback address, since a plain
    /// connection elsewhere could be read and changed on the way.
    pub fn parse(url: &str) -> Result<GatewayUrl, BridgeError> {
        let bad = |why: &str| BridgeError::Invalid(format!("gateway URL {url:?}: {why}"));
        let (tls, rest) = if let Some(rest) = url.strip_prefix("wss://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("ws://") {
            (false, rest)
        } else {
            return Err(bad(
                "use wss://HOST:PORT (or ws://127.0.0.1:PORT on this machine)",
            ));
        };
        let rest = rest.trim_end_matches('/');
        let rest = rest.strip_suffix(BRIDGE_PATH).unwrap_or(rest);
        let (host, port) = match rest.rsplit_once(':') {
            Some((h, p)) => (h, p),
            None => return Err(bad("a port is required")),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port: u16 = port.parse().map_err(|_| bad("the port is not a number"))?;
        if host.is_empty() || host.contains(['/', '@', '?', '#']) {
            return Err(bad("the host is not valid"));
        }
        if !tls && !is_loopback(host) {
            return Err(bad(
                "plain ws:// is only allowed to a loopback address; use wss:// with --fingerprint",
            ));
        }
        Ok(GatewayUrl {
            tls,
            host: host.to_owned(),
            port,
        })
    }

    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl std::fmt::Display for GatewayUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { "wss" } else { "ws" };
        write!(f, "{scheme}://{}{BRIDGE_PATH}", self.authority())
    }
}

/// True for `localhost` and loopback IPs.
pub fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The addresses to dial for `url`: for plain `ws://`, every address the name resolves
/// to must be loopback (a `localhost` the resolver maps elsewhere would carry the
/// Bridge in plain text off the machine), and only those are dialled — the name is not
/// looked up again.
async fn addresses(url: &GatewayUrl) -> Result<Vec<std::net::SocketAddr>, BridgeError> {
    let resolved: Vec<std::net::SocketAddr> = tokio::net::lookup_host(url.authority())
        .await
        .map_err(|e| BridgeError::Io(format!("cannot resolve the gateway at {url}: {e}")))?
        .collect();
    if resolved.is_empty() {
        return Err(BridgeError::Io(format!("{url} resolves to no address")));
    }
    if !url.tls
        && let Some(far) = resolved.iter().find(|a| !a.ip().is_loopback())
    {
        return Err(BridgeError::Invalid(format!(
            "{url}: {} resolves to {}, which is not a loopback address; plain ws:// is only allowed to loopback (use wss:// with --fingerprint)",
            url.host,
            far.ip()
        )));
    }
    Ok(resolved)
}

/// Dial the gateway at `url`, pinning `fingerprint` for TLS.
pub async fn connect(
    url: &GatewayUrl,
    fingerprint: Option<&str>,
) -> Result<Transport, BridgeError> {
    let addrs = addresses(url).await?;
    let tcp = TcpStream::connect(&addrs[..])
        .await
        .map_err(|e| BridgeError::Io(format!("cannot reach the gateway at {url}: {e}")))?;
    if !url.tls && !tcp.peer_addr().is_ok_and(|a| a.ip().is_loopback()) {
        return Err(BridgeError::Invalid(format!(
            "{url}: the connection did not go to a loopback address; plain ws:// is only allowed to loopback"
        )));
    }
    let _ = tcp.set_nodelay(true);
    let remote = tcp.peer_addr().ok().map(|a| a.ip().to_string());
    let request = url.to_string();
    if url.tls {
        let Some(fingerprint) = fingerprint else {
            return Err(BridgeError::Invalid(format!(
                "{url} uses TLS: give the gateway certificate's fingerprint (--fingerprint sha256:...) to pin it"
            )));
        };
        let stream = tls::connect(tcp, fingerprint).await?;
        client(stream, &request, remote).await
    } else {
        client(tcp, &request, remote).await
    }
}

async fn client<S: Stream>(
    stream: S,
    request: &str,
    remote: Option<String>,
) -> Result<Transport, BridgeError> {
    let (ws, _response) =
        tokio_tungstenite::client_async_with_config(request, stream, Some(config()))
            .await
            .map_err(|e| {
                BridgeError::Io(format!("WebSocket handshake with {request} failed: {e}"))
            })?;
    Ok(split(ws, remote))
}

/// Accept a node's WebSocket on an accepted (and, for TLS, already wrapped) stream.
pub async fn accept<S: Stream>(
    stream: S,
    remote: Option<String>,
) -> Result<Transport, BridgeError> {
    let ws = tokio_tungstenite::accept_async_with_config(stream, Some(config()))
        .await
        .map_err(|e| BridgeError::Io(format!("WebSocket handshake failed: {e}")))?;
    Ok(split(ws, remote))
}

fn split<S: Stream>(ws: WebSocketStream<S>, remote: Option<String>) -> Transport {
    let (sink, stream) = ws.split();
    Transport {
        tx: Box::new(WsTx { sink }),
        rx: Box::new(WsRx { stream }),
        kind: TransportKind::WebSocket,
        remote,
    }
}

struct WsTx<S> {
    sink: SplitSink<WebSocketStream<S>, Message>,
}

impl<S: Stream> FrameTx for WsTx<S> {
    fn send<'a>(&'a mut self, frame: Vec<u8>) -> crate::wire::Io<'a, ()> {
        Box::pin(async move {
            if frame.len() > MAX_FRAME {
                return Err(BridgeError::Protocol(format!(
                    "refusing to send a {}-byte frame (the limit is {MAX_FRAME})",
                    frame.len()
                )));
            }
            self.sink
                .send(Message::Binary(frame.into()))
                .await
                .map_err(BridgeError::io)
        })
    }

    fn send_all<'a>(&'a mut self, frames: Vec<Vec<u8>>) -> crate::wire::Io<'a, ()> {
        Box::pin(async move {
            for frame in frames {
                if frame.len() > MAX_FRAME {
                    return Err(BridgeError::Protocol(format!(
                        "refusing to send a {}-byte frame (the limit is {MAX_FRAME})",
                        frame.len()
                    )));
                }
                self.sink
                    .feed(Message::Binary(frame.into()))
                    .await
                    .map_err(BridgeError::io)?;
            }
            self.sink.flush().await.map_err(BridgeError::io)
        })
    }

    fn close<'a>(&'a mut self) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            let _ = self.sink.close().await;
        })
    }
}

struct WsRx<S> {
    stream: SplitStream<WebSocketStream<S>>,
}

impl<S: Stream> FrameRx for WsRx<S> {
    fn recv<'a>(&'a mut self) -> crate::wire::Io<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            loop {
                match self.stream.next().await {
                    None | Some(Ok(Message::Close(_))) => return Ok(None),
                    Some(Ok(Message::Binary(bytes))) => return Ok(Some(bytes.to_vec())),
                    Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
                    Some(Ok(Message::Text(_))) => {
                        return Err(BridgeError::Protocol(
                            "a text message on the Bridge (frames are binary)".into(),
                        ));
                    }
                    Some(Err(e)) => return Err(BridgeError::io(e)),
                }
            }
        })
    }
}

/// Accept nodes on `listener` forever, handing each authenticated-to-be transport to
/// `handle`; TLS when `acceptor` is given. A failed handshake drops that connection only.
pub async fn serve<F, Fut>(
    listener: tokio::net::TcpListener,
    acceptor: Option<Arc<tokio_rustls::TlsAcceptor>>,
    handle: F,
) where
    F: Fn(Transport) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let handle = Arc::new(handle);
    loop {
        let (tcp, addr) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("bridge listener: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let handle = Arc::clone(&handle);
        tokio::spawn(async move {
            let remote = Some(addr.ip().to_string());
            // A peer that never finishes its handshakes must not hold a task forever.
            let transport = tokio::time::timeout(std::time::Duration::from_secs(10), async {
                match acceptor {
                    Some(acceptor) => {
                        let tls = acceptor.accept(tcp).await.map_err(BridgeError::io)?;
                        accept(tls, remote).await
                    }
                    None => accept(tcp, remote).await,
                }
            })
            .await;
            match transport {
                Ok(Ok(t)) => handle(t).await,
                Ok(Err(e)) => tracing::info!("bridge: connection from {addr} refused: {e}"),
                Err(_) => {
                    tracing::info!("bridge: connection from {addr} timed out in its handshake")
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_plain_only_to_loopback() {
        let u = GatewayUrl::parse("wss://gw.example:7879").unwrap();
        assert!(u.tls && u.port == 7879 && u.host == "gw.example");
        assert_eq!(u.to_string(), "wss://gw.example:7879/bridge");
        assert!(GatewayUrl::parse("ws://127.0.0.1:7879/bridge").is_ok());
        assert!(GatewayUrl::parse("ws://[::1]:7879").is_ok());
        assert!(GatewayUrl::parse("ws://localhost:1").is_ok());
        let e = GatewayUrl::parse("ws://10.0.0.5:7879")
            .unwrap_err()
            .to_string();
        assert!(e.contains("loopback"), "{e}");
        assert!(GatewayUrl::parse("http://127.0.0.1:1").is_err());
        assert!(GatewayUrl::parse("wss://host").is_err());
        assert!(GatewayUrl::parse("wss://u@host:1").is_err());
    }
}
