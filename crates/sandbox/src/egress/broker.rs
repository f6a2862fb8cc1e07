//! One run's way out, with no path anyone could name: a connected pair of sequenced-packet
//! sockets, one end inherited by the run's sandbox helper and nothing else, the other kept
//! here. Before the command starts, the helper listens on a loopback port of the run's
//! network namespace (`forward.rs`) and hands that listening socket over (`SCM_RIGHTS`),
//! then closes its copies; from then on Warden alone holds it, accepts every connection
//! the command makes to it, and serves each with the run's proxy. So the bytes cross one
//! relay (the proxy's), every socket the proxy serves is its own (no process in the
//! sandbox shares it), and no process in the sandbox has a channel to Warden while the
//! command runs. A run is known by the descriptor its helper inherited — never by
//! anything the command sends, and never by a socket another run could reach through the
//! filesystem. The same message may carry the run's DNS stub socket (`dns.rs`), which
//! the broker serves the same way. The one message is still not trusted: only a single
//! listening TCP socket on loopback, and then a UDP socket on `127.0.0.1:53`, are taken;
//! anything else is closed and reported. The broker lives as long as the run:
//! [`Broker::finish`] stops it and gathers what its connections and lookups did.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
    sendmsg, socketpair,
};

use super::dns::{self, Lookups};
use super::proxy::{Connection, Proxy};

/// The payload of the message that hands the listener over (the descriptor is what counts).
const HANDED: &[u8] = b"l";

/// Connections one run may have open through the proxy at once. Each holds descriptors
/// and a task in Warden's own process (the gateway's, for a gateway run): past this a
/// command is refused more, instead of exhausting what every other run needs.
pub const MAX_OPEN: usize = 256;

/// The most descriptors one `SCM_RIGHTS` message can carry (the kernel's `SCM_MAX_FD`):
/// room for all of them, so the kernel never truncates one and every descriptor a
/// message brought is seen, and closed unless it is the one taken.
const SCM_MAX_FD: usize = 253;

/// The tasks serving the run's connections; `None` once the broker finished or was
/// dropped (a task started after that is ended at once, never left behind).
type Tasks = Arc<Mutex<Option<Vec<tokio::task::JoinHandle<()>>>>>;

/// Whether the run's connections are being accepted.
#[derive(Default)]
enum Accepting {
    /// Not yet: the listener has not arrived.
    #[default]
    Waiting,
    /// By these tasks (the proxy's listener, and the DNS stub if it came).
    By(Vec<tokio::task::JoinHandle<()>>),
    /// Never again: the broker finished or was dropped (a listener arriving now is
    /// closed at once).
    Stopped,
}

impl Accepting {
    /// Stop for good, ending the accepting task if there is one.
    fn stop(&mut self) {
        if let Accepting::By(tasks) = std::mem::replace(self, Accepting::Stopped) {
            for task in tasks {
                task.abort();
            }
        }
    }
}

/// A run's broker (see the module header).
pub struct Broker {
    ours: Arc<OwnedFd>,
    serving: Option<std::thread::JoinHandle<()>>,
    /// The task accepting connections, once the listener arrived.
    accepting: Arc<Mutex<Accepting>>,
    tasks: Tasks,
    connections: Arc<Mutex<Vec<Connection>>>,
    /// The names the command looked up (`dns.rs`).
    lookups: Arc<Mutex<Lookups>>,
    /// Connections refused because [`MAX_OPEN`] were open (said once, in [`Broker::finish`]).
    over_limit: Arc<AtomicUsize>,
}

impl Broker {
    /// Serve `proxy` to whoever holds the returned descriptor (give it to the run's
    /// helper only), each connection handled on `runtime`.
    pub fn start(proxy: Proxy, runtime: tokio::runtime::Handle) -> io::Result<(Broker, OwnedFd)> {
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )?;
        let mut broker = Broker {
            ours: Arc::new(ours),
            serving: None,
            accepting: Arc::default(),
            tasks: Arc::new(Mutex::new(Some(Vec::new()))),
            connections: Arc::default(),
            lookups: Arc::default(),
            over_limit: Arc::default(),
        };
        let serving = {
            let ours = Arc::clone(&broker.ours);
            let (accepting, tasks, connections, lookups, over_limit) = (
                Arc::clone(&broker.accepting),
                Arc::clone(&broker.tasks),
                Arc::clone(&broker.connections),
                Arc::clone(&broker.lookups),
                Arc::clone(&broker.over_limit),
            );
            std::thread::Builder::new()
                .name("warden-egress".into())
                .spawn(move || {
                    let (listener, stub) = match receive(&ours) {
                        Received::Ended => return,
                        Received::Refused(why) => {
                            lock(&connections).push(refusal(why));
                            return;
                        }
                        Received::Listener(listener, stub) => (listener, stub),
                    };
                    let mut accepting = lock(&accepting);
                    // Stopped while the listener was on its way: it is closed here.
                    if matches!(*accepting, Accepting::Waiting) {
                        let mut serving = Vec::new();
                        if let Some(stub) = stub {
                            serving.push(runtime.spawn(dns::serve(
                                stub,
                                Arc::clone(&proxy.gate),
                                Arc::clone(&proxy.resolver),
                                lookups,
                            )));
                        }
                        serving.push(runtime.spawn(accept(
                            listener,
                            proxy,
                            Arc::clone(&tasks),
                            connections,
                            over_limit,
                        )));
                        *accepting = Accepting::By(serving);
                    }
                })?
        };
        broker.serving = Some(serving);
        Ok((broker, theirs))
    }

    /// Stop accepting, give the connections still open up to `grace` to end (the run's
    /// processes are gone, so their side is closed), close the rest, and say what every
    /// connection did — in the order they ended — and how many were cut short, then the
    /// names the command looked up.
    pub async fn finish(mut self, grace: Duration) -> (Vec<Connection>, usize) {
        let _ = nix::sys::socket::shutdown(self.ours.as_raw_fd(), nix::sys::socket::Shutdown::Both);
        if let Some(serving) = self.serving.take() {
            let _ = tokio::task::spawn_blocking(move || serving.join()).await;
        }
        lock(&self.accepting).stop();
        let tasks = lock(&self.tasks).take().unwrap_or_default();
        let deadline = tokio::time::Instant::now() + grace;
        let mut cut = 0;
        for mut task in tasks {
            if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                task.abort();
                cut += 1;
            }
        }
        let mut connections = std::mem::take(&mut *lock(&self.connections));
        let over = self.over_limit.swap(0, Ordering::Relaxed);
        if over > 0 {
            connections.push(refusal(format!(
                "{over} connection(s) refused: the run already had {MAX_OPEN} open through the proxy"
            )));
        }
        connections.extend(std::mem::take(&mut *lock(&self.lookups)).into_report());
        (connections, cut)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        // A run cancelled before `finish`: nothing more is accepted, and nothing it
        // opened outlives it.
        let _ = nix::sys::socket::shutdown(self.ours.as_raw_fd(), nix::sys::socket::Shutdown::Both);
        lock(&self.accepting).stop();
        for task in lock(&self.tasks).take().unwrap_or_default() {
            task.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A report of something refused before any request was read.
fn refusal(why: String) -> Connection {
    Connection {
        host: String::new(),
        port: 0,
        kind: "connect",
        allowed: false,
        reason: why,
        sent: 0,
        received: 0,
    }
}

/// Accept each connection the command makes to `listener` and serve it with `proxy`,
/// at most [`MAX_OPEN`] at once (one more is closed at once and counted), until aborted.
async fn accept(
    listener: std::net::TcpListener,
    proxy: Proxy,
    tasks: Tasks,
    connections: Arc<Mutex<Vec<Connection>>>,
    over_limit: Arc<AtomicUsize>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        lock(&connections).push(refusal(
            "the run's egress listener could not be served".into(),
        ));
        return;
    };
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            // Out of descriptors, or a client that gave up: try again shortly, without
            // spinning.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let open = match lock(&tasks).as_mut() {
            Some(tasks) => {
                tasks.retain(|t| !t.is_finished());
                tasks.len()
            }
            None => return,
        };
        if open >= MAX_OPEN {
            // Closing it is the refusal the command sees.
            drop(client);
            over_limit.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let proxy = proxy.clone();
        let connections = Arc::clone(&connections);
        let task = tokio::spawn(async move {
            let connection = proxy.handle(client).await;
            (proxy.report)(connection.clone());
            lock(&connections).push(connection);
        });
        match lock(&tasks).as_mut() {
            Some(tasks) => tasks.push(task),
            None => task.abort(),
        }
    }
}

/// What the one message on the broker's socket brought.
enum Received {
    /// The helper's end closed (or ours shut down) before anything was handed over.
    Ended,
    /// Something that is not one listening TCP socket on loopback (and, if anything
    /// follows, the stub's socket): all closed, and why.
    Refused(String),
    /// The run's listener, ready for the runtime (non-blocking), and its DNS stub's
    /// socket if it came.
    Listener(std::net::TcpListener, Option<std::net::UdpSocket>),
}

/// Wait for the helper's one message and take what it handed over.
fn receive(ours: &OwnedFd) -> Received {
    let mut buf = [0u8; 16];
    let mut space = nix::cmsg_space!([RawFd; SCM_MAX_FD]);
    let mut iov = [IoSliceMut::new(&mut buf)];
    let msg = loop {
        match recvmsg::<()>(
            ours.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(msg) => break msg,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return Received::Ended,
        }
    };
    let Ok(cmsgs) = msg.cmsgs() else {
        // Truncated control data (it cannot be, with room for every descriptor a message
        // can carry): nothing in it is taken.
        return Received::Refused("the run's helper sent unreadable control data".into());
    };
    let mut handed = Vec::new();
    for cmsg in cmsgs {
        if let ControlMessageOwned::ScmRights(fds) = cmsg {
            for raw in fds {
                // SAFETY: SCM_RIGHTS just installed this descriptor in our table; it is
                // owned here from now on (and closed when dropped).
                handed.push(unsafe { OwnedFd::from_raw_fd(raw) });
            }
        }
    }
    if msg.bytes == 0 && handed.is_empty() {
        return Received::Ended;
    }
    if !(1..=2).contains(&handed.len()) {
        return Received::Refused(format!(
            "the run's helper handed over {} descriptors, not its listener and DNS stub (all closed)",
            handed.len()
        ));
    }
    let stub = match handed.len() {
        2 => match stub_socket(handed.remove(1)) {
            Ok(stub) => Some(stub),
            Err(why) => {
                return Received::Refused(format!(
                    "the run's helper handed over {why}, not a DNS stub on 127.0.0.1:53 (all closed)"
                ));
            }
        },
        _ => None,
    };
    match loopback_listener(handed.remove(0)) {
        Ok(listener) => Received::Listener(listener, stub),
        Err(why) => Received::Refused(format!(
            "the run's helper handed over {why}, not a listener on loopback (all closed)"
        )),
    }
}

/// `fd` as the DNS stub's socket if it is a UDP socket bound to `127.0.0.1:53` (the
/// address the sandbox's resolver configuration names), or what it is instead.
fn stub_socket(fd: OwnedFd) -> Result<std::net::UdpSocket, String> {
    use rustix::net::{AddressFamily, SocketType, ipproto, sockopt};
    let kind = sockopt::socket_type(&fd).map_err(|_| "something that is not a socket")?;
    let family = sockopt::socket_domain(&fd).map_err(|e| format!("a socket ({e})"))?;
    let protocol = sockopt::socket_protocol(&fd).map_err(|e| format!("a socket ({e})"))?;
    if kind != SocketType::DGRAM || family != AddressFamily::INET || protocol != Some(ipproto::UDP)
    {
        return Err(format!(
            "a socket of family {} and type {} that is not IPv4 UDP",
            family.as_raw(),
            kind.as_raw()
        ));
    }
    let socket = std::net::UdpSocket::from(fd);
    match socket.local_addr() {
        Ok(at) if at == SocketAddr::from(dns::STUB) => Ok(socket),
        Ok(at) => Err(format!("a UDP socket on {at}")),
        Err(e) => Err(format!("a UDP socket without an address ({e})")),
    }
}

/// `fd` as a TCP listener if it is one listening TCP socket bound to a loopback address,
/// or what it is instead.
fn loopback_listener(fd: OwnedFd) -> Result<std::net::TcpListener, String> {
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
    if !sockopt::socket_acceptconn(&fd).unwrap_or(false) {
        return Err("a TCP socket that is not listening".into());
    }
    let listener = std::net::TcpListener::from(fd);
    match listener.local_addr() {
        Ok(at) if at.ip().is_loopback() => {}
        Ok(at) => return Err(format!("a TCP listener on {at}")),
        Err(e) => return Err(format!("a TCP listener without an address ({e})")),
    }
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("a TCP listener that cannot be made non-blocking ({e})"))?;
    Ok(listener)
}

/// In the run's helper, before the command starts: hand `listener` (listening on a
/// loopback port of the run's namespace) and the DNS stub's socket (`127.0.0.1:53` there)
/// to the broker on `broker`. The helper closes its own copies after.
pub fn hand(broker: RawFd, listener: impl AsFd, stub: Option<BorrowedFd<'_>>) -> io::Result<()> {
    let mut fds = vec![listener.as_fd().as_raw_fd()];
    fds.extend(stub.map(|s| s.as_raw_fd()));
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
    use std::io::{Read, Write};

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

    /// What the helper does: listen on loopback, hand the listener over, close its copy.
    fn listening(broker: &OwnedFd) -> std::net::SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        hand(broker.as_raw_fd(), &listener, None).unwrap();
        listener.local_addr().unwrap()
    }

    /// Send `fds` in one message, as a broken or subverted helper might.
    fn send_fds(broker: &OwnedFd, fds: &[RawFd]) {
        sendmsg::<()>(
            broker.as_raw_fd(),
            &[IoSlice::new(HANDED)],
            &[ControlMessage::ScmRights(fds)],
            MsgFlags::MSG_NOSIGNAL,
            None,
        )
        .unwrap();
    }

    /// The command's connection to the listener is served by the run's proxy (its answer
    /// comes back), with no process in between.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_to_the_handed_over_listener_is_served_by_the_proxy() {
        let (broker, theirs) = refusing_broker(Duration::from_secs(5));
        let at = listening(&theirs);
        drop(theirs);
        let answer = tokio::task::spawn_blocking(move || {
            let mut client = std::net::TcpStream::connect(at).unwrap();
            client
                .write_all(b"CONNECT example.test:443 HTTP/1.1\r\n\r\n")
                .unwrap();
            let mut answer = String::new();
            client.read_to_string(&mut answer).unwrap();
            answer
        })
        .await
        .unwrap();
        assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
        let (connections, cut) = broker.finish(Duration::from_secs(5)).await;
        assert_eq!(cut, 0);
        assert_eq!(connections.len(), 1, "{connections:?}");
        assert_eq!(connections[0].host, "example.test");
    }

    /// A run cancelled before its broker finished (the broker dropped): every connection
    /// it had open is closed at once, not left waiting for its request head, and nothing
    /// more is accepted.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_broker_closes_every_connection_at_once() {
        let (broker, theirs) = refusing_broker(Duration::from_secs(60));
        let at = listening(&theirs);
        let mut held = std::net::TcpStream::connect(at).unwrap();
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
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            std::net::TcpStream::connect(at).is_err(),
            "the listener outlived its dropped broker"
        );
        drop(theirs);
    }

    /// A command that opens connections and never sends a byte holds them until the
    /// proxy's head timeout: past [`MAX_OPEN`] each is closed at once, and the refusals
    /// are said once, with their number.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_holds_at_most_max_open_connections_at_once() {
        let (broker, theirs) = refusing_broker(Duration::from_secs(30));
        let at = listening(&theirs);
        let mut held = Vec::new();
        for _ in 0..MAX_OPEN + 10 {
            held.push(std::net::TcpStream::connect(at).unwrap());
            // In order: each is accepted (or refused) before the next.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let closed: Vec<bool> = held
            .iter()
            .map(|s| {
                s.set_nonblocking(true).unwrap();
                matches!((&*s).read(&mut [0u8; 1]), Ok(0))
            })
            .collect();
        assert_eq!(closed.iter().filter(|c| **c).count(), 10, "{closed:?}");
        assert!(
            closed[..MAX_OPEN].iter().all(|c| !c),
            "a connection under the bound was closed"
        );
        let (connections, _cut) = broker.finish(Duration::from_secs(5)).await;
        let said: Vec<&str> = connections
            .iter()
            .filter(|c| c.reason.contains("open through the proxy"))
            .map(|c| c.reason.as_str())
            .collect();
        assert_eq!(
            said,
            [format!(
                "10 connection(s) refused: the run already had {MAX_OPEN} open through the proxy"
            )],
        );
        drop(theirs);
    }

    /// The one message is not trusted: anything but a single listening TCP socket on
    /// loopback — a Unix socket (a way to some other service), a pipe, a file, a
    /// connected TCP socket, a listener on every address, several descriptors, the
    /// kernel's most in one message — is closed unserved and reported, and nothing after
    /// it is taken.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_one_listening_loopback_tcp_socket_is_taken() {
        let (unix, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
        let (pipe_read, _pipe_write) = nix::unistd::pipe().unwrap();
        let file = std::fs::File::open("/etc/hostname").unwrap();
        let loopback = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let connected = std::net::TcpStream::connect(loopback.local_addr().unwrap()).unwrap();
        let everywhere = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        let second = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let udp_elsewhere = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let many: Vec<RawFd> = vec![loopback.as_raw_fd(); SCM_MAX_FD];
        let cases: Vec<(Vec<RawFd>, &str)> = vec![
            (vec![unix.as_raw_fd()], "a Unix stream socket"),
            (
                vec![pipe_read.as_raw_fd()],
                "something that is not a socket",
            ),
            (vec![file.as_raw_fd()], "something that is not a socket"),
            (
                vec![connected.as_raw_fd()],
                "a TCP socket that is not listening",
            ),
            (vec![everywhere.as_raw_fd()], "a TCP listener on 0.0.0.0"),
            (
                vec![loopback.as_raw_fd(), second.as_raw_fd()],
                "that is not IPv4 UDP, not a DNS stub",
            ),
            (
                vec![loopback.as_raw_fd(), udp_elsewhere.as_raw_fd()],
                "a UDP socket on 127.0.0.1:",
            ),
            (
                vec![
                    loopback.as_raw_fd(),
                    udp_elsewhere.as_raw_fd(),
                    second.as_raw_fd(),
                ],
                "3 descriptors",
            ),
            (many, "253 descriptors"),
        ];
        for (fds, expected) in cases {
            let (broker, theirs) = refusing_broker(Duration::from_secs(5));
            send_fds(&theirs, &fds);
            // A listener after the refusal is not taken either.
            hand(theirs.as_raw_fd(), &second, None).unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            let (connections, _) = broker.finish(Duration::from_secs(1)).await;
            assert_eq!(connections.len(), 1, "{expected}: {connections:?}");
            assert!(
                connections[0].reason.contains(expected) && !connections[0].allowed,
                "{expected}: {connections:?}"
            );
        }
        // Nothing was accepted from the loopback listener it was sent (it stays ours).
        loopback.set_nonblocking(true).unwrap();
        assert!(loopback.accept().is_ok(), "the refused listener was served");
    }
}
