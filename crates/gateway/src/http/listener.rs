//! The gateway's accept loop: every TCP connection takes a slot in [`Connections`] (a
//! total and a per-peer cap; at the cap an idle connection makes room) and is served by
//! hyper's HTTP/1 with a bounded read buffer, a header-read timeout — counted from the
//! connection's opening for its first request and from the first byte of each later one
//! (hyper's own counts from when it starts waiting, which would close idle keep-alive
//! connections after the header timeout and race clients reusing them) — and an idle
//! timeout between requests. `axum::serve` has none of these; the router it would serve
//! is the same.
//!
//! On shutdown the loop stops accepting, in-flight runs are cancelled (so no response
//! waits on a command), each connection finishes its current response and closes, and
//! connections still open after a grace period are dropped.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use nix::sys::socket::{MsgFlags, Shutdown, recv, shutdown};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower_service::Service as _;

use super::connections::{Connection, Connections, RequestOnConnection, Waiting};
use super::limits::HttpLimits;

/// Largest read buffer per connection (so the most a request's headers may take): with
/// the connection cap, this bounds what half-sent requests can hold.
const MAX_READ_BUFFER: usize = 64 * 1024;
/// How long shutdown waits for connections to finish their responses.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// What a connection that finds every slot busy is told before it is closed.
const ALL_BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-type: text/plain\r\ncontent-length: 69\r\n\r\nevery connection slot of the gateway is serving a request; try again\n";

/// The connection a request arrived on (in the request's extensions), so that the
/// credential check can mark it authenticated.
#[derive(Clone)]
pub struct OnConnection(pub Arc<Connection>);

/// Accept on `listener` and serve `router` until `shutdown` resolves; then cancel
/// `runs` and close the connections.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    connections: Arc<Connections>,
    limits: HttpLimits,
    shutdown: impl Future<Output = ()>,
    runs: CancellationToken,
) -> std::io::Result<()> {
    let tracker = TaskTracker::new();
    let closing = CancellationToken::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((tcp, peer)) => {
                let tcp = Arc::new(tcp);
                match connections.admit(peer.ip(), bytes_waiting(&tcp)) {
                    Ok(conn) => {
                        if let Err(e) = tcp.set_nodelay(true) {
                            // A response streamed as SSE goes out in several small writes;
                            // with Nagle each waits for the ACK of the one before.
                            tracing::debug!("TCP_NODELAY: {e}");
                        }
                        tracker.spawn(serve_connection(
                            tcp,
                            Arc::new(conn),
                            router.clone(),
                            limits,
                            closing.clone(),
                        ));
                    }
                    Err(_) => {
                        tracing::debug!("every connection slot is busy: closing one from {peer}");
                        // Best effort, never waiting: the socket is closed right after.
                        let _ = tcp.try_write(ALL_BUSY);
                    }
                }
            }
            Err(e) if is_connection_error(&e) => {}
            Err(e) => {
                // Out of descriptors or memory: give the running connections a moment
                // instead of spinning on the same error.
                tracing::warn!("accepting a connection: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    drop(listener);
    runs.cancel();
    closing.cancel();
    tracker.close();
    if tokio::time::timeout(SHUTDOWN_GRACE, tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after {SHUTDOWN_GRACE:?} of shutdown are dropped");
    }
    Ok(())
}

/// Asks the kernel whether bytes wait unread in `tcp` (a peek that neither blocks nor
/// touches tokio's readiness, so the connection's own task is not disturbed).
fn bytes_waiting(tcp: &Arc<TcpStream>) -> super::connections::BytesWaiting {
    use std::os::fd::AsRawFd;
    let tcp = Arc::downgrade(tcp);
    Box::new(move || {
        let Some(tcp) = tcp.upgrade() else {
            return false;
        };
        let flags = MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT;
        matches!(recv(tcp.as_raw_fd(), &mut [0u8; 1], flags), Ok(1))
    })
}

/// Errors of one connection (not of the listener) that `accept` may report.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

/// Serve one connection until it ends, its slot is taken, it sits idle past the timeout,
/// or the gateway shuts down.
async fn serve_connection(
    tcp: Arc<TcpStream>,
    conn: Arc<Connection>,
    router: Router,
    limits: HttpLimits,
    closing: CancellationToken,
) {
    let on_connection = Arc::clone(&conn);
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        let counted = on_connection.request();
        request
            .extensions_mut()
            .insert(OnConnection(Arc::clone(&on_connection)));
        let mut router = router.clone();
        async move {
            let response = match router.call(request.map(Body::new)).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            Ok::<_, Infallible>(response.map(|body| {
                Body::new(Counted {
                    body,
                    _request: counted,
                })
            }))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .header_read_timeout(None)
        .max_buf_size(MAX_READ_BUFFER);
    let io = Heard {
        inner: tcp,
        conn: Arc::clone(&conn),
        first: true,
    };
    let connection = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    let (header_timeout, idle_timeout) =
        (limits.header_read_timeout, limits.connection_idle_timeout);
    let mut check = tokio::time::Instant::now();
    let mut ending = false;
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!("HTTP connection ended: {e}");
                }
                return;
            }
            // Its slot went to a newcomer: close at once.
            () = conn.closed().cancelled() => return,
            () = closing.cancelled(), if !ending => {
                ending = true;
                connection.as_mut().graceful_shutdown();
            }
            // A request began or ended, or a new one's headers began: the next deadline
            // is the new state's, worked out now.
            () = conn.waiting_changed() => check = tokio::time::Instant::now(),
            () = tokio::time::sleep_until(check) => {
                let now = std::time::Instant::now();
                let due = match conn.waiting() {
                    // Headers late (or a connection that never sent any): nothing to
                    // answer, close.
                    Waiting::Head(since) if now.duration_since(since) >= header_timeout => return,
                    Waiting::Head(since) => since + header_timeout,
                    // Asked to close once already and still open: drop it.
                    Waiting::Idle(_) if ending => return,
                    Waiting::Idle(since) if now.duration_since(since) >= idle_timeout => {
                        ending = true;
                        connection.as_mut().graceful_shutdown();
                        now + Duration::from_secs(1)
                    }
                    Waiting::Idle(since) => since + idle_timeout,
                    // A request in progress may take as long as it takes; look again
                    // when a new one could have begun.
                    Waiting::Busy => now + header_timeout.min(idle_timeout),
                };
                check = tokio::time::Instant::from_std(due);
            }
        }
    }
}

/// A connection's socket that tells its slot when the first bytes arrive (see
/// `connections.rs`: a connection that has sent nothing is the first to make room).
/// Shared with the slot's peek, so it is read and written through `&TcpStream`.
struct Heard {
    inner: Arc<TcpStream>,
    conn: Arc<Connection>,
    /// Until the first bytes arrived.
    first: bool,
}

impl tokio::io::AsyncRead for Heard {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = loop {
            std::task::ready!(self.inner.poll_read_ready(cx))?;
            // A spurious readiness is cleared by the WouldBlock; then wait again.
            match self.inner.try_read(buf.initialize_unfilled()) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        };
        buf.advance(n);
        if n > 0 {
            let first = std::mem::replace(&mut self.first, false);
            self.conn.bytes_arrived(first);
        }
        Poll::Ready(Ok(()))
    }
}

impl tokio::io::AsyncWrite for Heard {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        loop {
            std::task::ready!(self.inner.poll_write_ready(cx))?;
            match self.inner.try_write(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                written => return Poll::Ready(written),
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        loop {
            std::task::ready!(self.inner.poll_write_ready(cx))?;
            match self.inner.try_write_vectored(bufs) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                written => return Poll::Ready(written),
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        // TCP writes go straight to the kernel: nothing is buffered here.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        use std::os::fd::AsRawFd;
        Poll::Ready(
            shutdown(self.inner.as_raw_fd(), Shutdown::Write)
                .or_else(|e| {
                    if e == nix::errno::Errno::ENOTCONN {
                        Ok(())
                    } else {
                        Err(e)
                    }
                })
                .map_err(std::io::Error::from),
        )
    }
}

/// A response body that keeps its request counted on the connection until the body is
/// finished or dropped.
struct Counted {
    body: Body,
    _request: RequestOnConnection,
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
