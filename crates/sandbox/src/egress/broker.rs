//! One run's way out, with no path anyone could name: a connected pair of sequenced-packet
//! sockets, one end inherited by the run's forwarder (`forward.rs`) and nothing else, the
//! other kept here. The forwarder accepts each TCP connection the command makes to it in
//! the run's namespace and hands the connection itself over (`SCM_RIGHTS`); the broker
//! serves it with the run's proxy. So the bytes cross one relay (the proxy's) and no
//! socket but the command's own, and the forwarder only accepts. A run is known by the
//! descriptor it inherited — never by anything it sends, and never by a socket another run
//! could reach through the filesystem. What comes over the broker is not trusted: only a
//! single connected TCP socket is served; anything else is closed and reported. The broker
//! lives as long as the run: [`Broker::finish`] stops it and gathers what its connections
//! did.

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
    sendmsg, socketpair,
};

use super::proxy::{Connection, Proxy};

/// The payload of the message that hands a connection over (the descriptor is what counts).
const HANDED: &[u8] = b"c";

/// Connections one run may have open through the proxy at once. Each holds descriptors
/// and a task in Warden's own process (the gateway's, for a gateway run): past this a
/// command is refused more, instead of exhausting what every other run needs.
pub const MAX_OPEN: usize = 256;

/// A run's broker (see the module header).
pub struct Broker {
    ours: Arc<OwnedFd>,
    serving: Option<std::thread::JoinHandle<()>>,
    tasks: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    connections: Arc<Mutex<Vec<Connection>>>,
}

impl Broker {
    /// Serve `proxy` to whoever holds the returned descriptor (give it to the run's
    /// forwarder only), each connection handled on `runtime`.
    pub fn start(proxy: Proxy, runtime: tokio::runtime::Handle) -> io::Result<(Broker, OwnedFd)> {
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )?;
        let ours = Arc::new(ours);
        let tasks: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
        let connections: Arc<Mutex<Vec<Connection>>> = Arc::default();
        let serving = {
            let (ours, tasks, connections) = (
                Arc::clone(&ours),
                Arc::clone(&tasks),
                Arc::clone(&connections),
            );
            std::thread::Builder::new()
                .name("warden-egress".into())
                .spawn(move || serve(&ours, &proxy, &runtime, &tasks, &connections))?
        };
        Ok((
            Broker {
                ours,
                serving: Some(serving),
                tasks,
                connections,
            },
            theirs,
        ))
    }

    /// Stop handing out connections, give the ones still open up to `grace` to end (the
    /// run's processes are gone, so their side is closed), close the rest, and say what
    /// every connection did — in the order they ended — and how many were cut short.
    pub async fn finish(mut self, grace: Duration) -> (Vec<Connection>, usize) {
        let _ = nix::sys::socket::shutdown(self.ours.as_raw_fd(), nix::sys::socket::Shutdown::Both);
        if let Some(serving) = self.serving.take() {
            let _ = tokio::task::spawn_blocking(move || serving.join()).await;
        }
        let tasks = std::mem::take(&mut *lock(&self.tasks));
        let deadline = tokio::time::Instant::now() + grace;
        let mut cut = 0;
        for mut task in tasks {
            if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                task.abort();
                cut += 1;
            }
        }
        (std::mem::take(&mut *lock(&self.connections)), cut)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        // A run cancelled before `finish`: nothing more is handed out, and nothing it
        // opened outlives it.
        let _ = nix::sys::socket::shutdown(self.ours.as_raw_fd(), nix::sys::socket::Shutdown::Both);
        for task in lock(&self.tasks).drain(..) {
            task.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Serve each connection handed over on `ours` with `proxy`, until the other end is
/// closed (the run ended) or `ours` is shut down ([`Broker::finish`]).
fn serve(
    ours: &OwnedFd,
    proxy: &Proxy,
    runtime: &tokio::runtime::Handle,
    tasks: &Mutex<Vec<tokio::task::JoinHandle<()>>>,
    connections: &Arc<Mutex<Vec<Connection>>>,
) {
    let refused = |why: String| {
        lock(connections).push(Connection {
            host: String::new(),
            port: 0,
            kind: "connect",
            allowed: false,
            reason: why,
            sent: 0,
            received: 0,
        });
    };
    loop {
        let handed = match receive(ours) {
            Received::Ended => return,
            Received::Nothing => continue,
            Received::Refused(why) => {
                refused(why);
                continue;
            }
            Received::Connection(stream) => stream,
        };
        let open = {
            let mut tasks = lock(tasks);
            tasks.retain(|t| !t.is_finished());
            tasks.len()
        };
        if open >= MAX_OPEN {
            // Closing it is the refusal the command sees.
            drop(handed);
            refused(format!(
                "the run already has {MAX_OPEN} connections open through the proxy"
            ));
            continue;
        }
        let proxy = proxy.clone();
        let connections = Arc::clone(connections);
        // Registered with the runtime inside it (`from_std` needs its reactor).
        let task = runtime.spawn(async move {
            if let Ok(client) = tokio::net::TcpStream::from_std(handed) {
                let connection = proxy.handle(client).await;
                (proxy.report)(connection.clone());
                lock(&connections).push(connection);
            }
        });
        lock(tasks).push(task);
    }
}

/// What one message on the broker's socket brought.
enum Received {
    /// The forwarder's end is closed, or ours shut down.
    Ended,
    /// A message with no descriptor (or an interrupted wait): nothing to serve.
    Nothing,
    /// Something that is not one connected TCP socket: closed, and why.
    Refused(String),
    /// The command's connection, ready for the runtime (non-blocking).
    Connection(std::net::TcpStream),
}

/// Descriptors one message may carry before it is refused outright: room to see that a
/// message carried more than one (each is closed), not to serve them.
const MAX_HANDED: usize = 4;

/// Take one message off `ours` and whatever it handed over.
fn receive(ours: &OwnedFd) -> Received {
    let mut buf = [0u8; 16];
    let mut space = nix::cmsg_space!([RawFd; MAX_HANDED]);
    let mut iov = [IoSliceMut::new(&mut buf)];
    let msg = match recvmsg::<()>(
        ours.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    ) {
        Ok(msg) => msg,
        Err(nix::errno::Errno::EINTR) => return Received::Nothing,
        Err(_) => return Received::Ended,
    };
    if msg.bytes == 0 {
        return Received::Ended;
    }
    let truncated = msg.flags.contains(MsgFlags::MSG_CTRUNC);
    let mut handed = Vec::new();
    if let Ok(cmsgs) = msg.cmsgs() {
        for cmsg in cmsgs {
            if let ControlMessageOwned::ScmRights(fds) = cmsg {
                for raw in fds {
                    // SAFETY: SCM_RIGHTS just installed this descriptor in our table; it
                    // is owned here from now on (and closed when dropped).
                    handed.push(unsafe { OwnedFd::from_raw_fd(raw) });
                }
            }
        }
    }
    match (handed.len(), truncated) {
        (0, false) => Received::Nothing,
        (1, false) => match connected_tcp(handed.remove(0)) {
            Ok(stream) => Received::Connection(stream),
            Err(why) => Received::Refused(format!(
                "the run's forwarder handed over {why}, not a connection (closed)"
            )),
        },
        (n, _) => Received::Refused(format!(
            "the run's forwarder handed over {n} descriptors at once{} (all closed)",
            if truncated { " and more" } else { "" }
        )),
    }
}

/// `fd` as a TCP stream if it is one connected TCP socket, or what it is instead.
fn connected_tcp(fd: OwnedFd) -> Result<std::net::TcpStream, String> {
    use rustix::net::{AddressFamily, SocketType, ipproto, sockopt};
    let kind = sockopt::socket_type(&fd).map_err(|_| "something that is not a socket")?;
    let family = sockopt::socket_domain(&fd).map_err(|e| format!("a socket ({e})"))?;
    let protocol = sockopt::socket_protocol(&fd).map_err(|e| format!("a socket ({e})"))?;
    if kind != SocketType::STREAM
        || !(family == AddressFamily::INET || family == AddressFamily::INET6)
        || protocol != Some(ipproto::TCP)
    {
        let family = match family {
            AddressFamily::UNIX => "a Unix".to_owned(),
            AddressFamily::INET => "an IPv4".to_owned(),
            AddressFamily::INET6 => "an IPv6".to_owned(),
            other => format!("a family {}", other.as_raw()),
        };
        let kind = match kind {
            SocketType::STREAM if protocol.is_some_and(|p| p != ipproto::TCP) => "stream (not TCP)",
            SocketType::STREAM => "stream",
            SocketType::DGRAM => "datagram",
            SocketType::SEQPACKET => "sequenced-packet",
            SocketType::RAW => "raw",
            _ => "other",
        };
        return Err(format!("{family} {kind} socket"));
    }
    rustix::net::getpeername(&fd).map_err(|_| "a TCP socket that is not connected")?;
    let stream = std::net::TcpStream::from(fd);
    stream
        .set_nonblocking(true)
        .map_err(|e| format!("a TCP socket that cannot be made non-blocking ({e})"))?;
    Ok(stream)
}

/// In the run's forwarder: hand `client` (a connection it accepted) to the broker on
/// `broker`. The forwarder closes its own copy after.
pub fn hand(broker: RawFd, client: &std::net::TcpStream) -> io::Result<()> {
    let fds = [client.as_raw_fd()];
    sendmsg::<()>(
        broker,
        &[IoSlice::new(HANDED)],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::proxy::{Admission, Gate, Limits, SystemResolver};

    struct RefuseAll;
    impl Gate for RefuseAll {
        fn admit(&self, _: &str, _: u16) -> Admission {
            Admission::Refuse("test".into())
        }
    }

    /// A broker whose proxy refuses everything, after waiting up to `head_timeout` for a
    /// connection's request head.
    fn refusing_broker(head_timeout: Duration) -> (Broker, OwnedFd) {
        let proxy = Proxy {
            gate: Arc::new(RefuseAll),
            resolver: Arc::new(SystemResolver),
            report: Arc::new(|_| {}),
            limits: Limits {
                head_timeout,
                connect_timeout: Duration::from_secs(1),
            },
            ask: None,
        };
        Broker::start(proxy, tokio::runtime::Handle::current()).unwrap()
    }

    /// A connected loopback TCP pair: (the command's end, the end its forwarder accepted).
    fn tcp_pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        (client, accepted)
    }

    /// What the forwarder does with one connection: hand it over, close its copy.
    fn forwarded(broker: RawFd) -> std::net::TcpStream {
        let (client, accepted) = tcp_pair();
        hand(broker, &accepted).unwrap();
        client
    }

    /// Send `fds` in one message, as a forwarder taken over by the command might.
    fn send_fds(broker: RawFd, fds: &[RawFd]) {
        sendmsg::<()>(
            broker,
            &[IoSlice::new(HANDED)],
            &[ControlMessage::ScmRights(fds)],
            MsgFlags::MSG_NOSIGNAL,
            None,
        )
        .unwrap();
    }

    /// A run cancelled before its broker finished (the broker dropped): every connection
    /// it had open is closed at once, not left waiting for its request head.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_broker_closes_every_connection_at_once() {
        use std::io::Read;
        let (broker, theirs) = refusing_broker(Duration::from_secs(60));
        let fd = theirs.as_raw_fd();
        let mut held = tokio::task::spawn_blocking(move || forwarded(fd))
            .await
            .unwrap();
        // The proxy waits for this connection's head (a minute)...
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(broker);
        // ... until the broker is dropped: then its end is closed.
        let read = tokio::task::spawn_blocking(move || {
            held.set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut buf = [0u8; 16];
            held.read(&mut buf)
        })
        .await
        .unwrap();
        assert_eq!(
            read.unwrap(),
            0,
            "the connection outlived its dropped broker"
        );
        drop(theirs);
    }

    /// A command that opens connections and never sends a byte holds them until the
    /// proxy's head timeout: past [`MAX_OPEN`] each is closed at once, and each refusal
    /// is reported; the broker's end stops the rest.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_holds_at_most_max_open_connections_at_once() {
        use std::io::Read;
        let (broker, theirs) = refusing_broker(Duration::from_secs(30));
        let fd = theirs.as_raw_fd();
        let held = tokio::task::spawn_blocking(move || {
            (0..MAX_OPEN + 10)
                .map(|_| forwarded(fd))
                .collect::<Vec<_>>()
        })
        .await
        .unwrap();
        // The last ten were closed by the broker; the first ones wait for their heads.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let closed: Vec<bool> = held
            .iter()
            .map(|s| {
                s.set_nonblocking(true).unwrap();
                matches!((&*s).read(&mut [0u8; 1]), Ok(0))
            })
            .collect();
        assert!(
            closed[..MAX_OPEN].iter().all(|c| !c),
            "a connection under the bound was closed"
        );
        assert!(
            closed[MAX_OPEN..].iter().all(|c| *c),
            "a connection over the bound was served"
        );
        let (connections, _cut) = broker.finish(Duration::from_secs(5)).await;
        let refusals = connections
            .iter()
            .filter(|c| c.reason.contains("connections open"))
            .count();
        assert_eq!(refusals, 10, "{connections:?}");
        drop(theirs);
    }

    /// The forwarder runs beside the command: what it hands over is not trusted. Anything
    /// but one connected TCP socket — a Unix socket (a way to another service), a pipe, a
    /// file, a listening socket, two connections in one message — is closed unserved and
    /// reported, and a real connection after them is served as before.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_one_connected_tcp_socket_is_served() {
        use std::io::{Read, Write};
        let (broker, theirs) = refusing_broker(Duration::from_secs(30));
        let fd = theirs.as_raw_fd();
        let served = tokio::task::spawn_blocking(move || {
            let (unix, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
            send_fds(fd, &[unix.as_raw_fd()]);
            let (pipe_read, _pipe_write) = nix::unistd::pipe().unwrap();
            send_fds(fd, &[pipe_read.as_raw_fd()]);
            let file = std::fs::File::open("/etc/hostname").unwrap();
            send_fds(fd, &[file.as_raw_fd()]);
            let listening = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            send_fds(fd, &[listening.as_raw_fd()]);
            let (mut first, a) = tcp_pair();
            let (_second, b) = tcp_pair();
            send_fds(fd, &[a.as_raw_fd(), b.as_raw_fd()]);
            drop((a, b));
            // Neither of the two was served: the proxy would have answered this.
            first
                .write_all(b"GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            first
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut answer = String::new();
            let _ = first.read_to_string(&mut answer);
            assert_eq!(
                answer, "",
                "a connection handed over beside another was served"
            );
            // A real one still is: the refusing proxy answers it.
            let mut real = forwarded(fd);
            real.write_all(b"GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            real.set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let mut answer = String::new();
            let _ = real.read_to_string(&mut answer);
            answer
        })
        .await
        .unwrap();
        assert!(served.starts_with("HTTP/1.1 403 "), "{served}");
        let (connections, _cut) = broker.finish(Duration::from_secs(5)).await;
        let reasons: Vec<&str> = connections.iter().map(|c| c.reason.as_str()).collect();
        for expected in [
            "a Unix stream socket",
            "something that is not a socket",
            "a TCP socket that is not connected",
            "2 descriptors at once",
        ] {
            assert!(
                reasons.iter().any(|r| r.contains(expected)),
                "no refusal says {expected:?}: {reasons:?}"
            );
        }
        assert_eq!(
            reasons
                .iter()
                .filter(|r| r.contains("not a socket"))
                .count(),
            2,
            "the pipe and the file: {reasons:?}"
        );
        assert!(connections.iter().all(|c| !c.allowed));
        drop(theirs);
    }
}
