//! One run's way out, with no path anyone could name: a connected pair of sequenced-packet
//! sockets, one end inherited by the run's forwarder (`forward.rs`) and nothing else, the
//! other kept here. For each connection the forwarder accepts it asks for one (a packet);
//! the broker makes a new socket pair, hands one end over (`SCM_RIGHTS`) and serves the
//! other with the run's proxy. So a run is known by the descriptor it inherited — never by
//! anything it sends, and never by a socket another run could reach through the
//! filesystem. The broker lives as long as the run: [`Broker::finish`] stops it and
//! gathers what its connections did.

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
    sendmsg, socketpair,
};

use super::proxy::{Connection, Proxy};

/// What a forwarder sends to ask for a connection, and the broker's answer's payload.
const ASK: &[u8] = b"c";

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

/// Answer each ask on `ours` with a new connection served by `proxy`, until the other
/// end is closed (the run ended) or `ours` is shut down ([`Broker::finish`]).
fn serve(
    ours: &OwnedFd,
    proxy: &Proxy,
    runtime: &tokio::runtime::Handle,
    tasks: &Mutex<Vec<tokio::task::JoinHandle<()>>>,
    connections: &Arc<Mutex<Vec<Connection>>>,
) {
    let mut buf = [0u8; 16];
    loop {
        match nix::sys::socket::recv(ours.as_raw_fd(), &mut buf, MsgFlags::empty()) {
            Ok(0) => return,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
        }
        // No connection this time: an answer without a descriptor, which the forwarder
        // takes as a refusal (it closes its client).
        let refuse = || {
            let _ = sendmsg::<()>(
                ours.as_raw_fd(),
                &[IoSlice::new(ASK)],
                &[],
                MsgFlags::empty(),
                None,
            );
        };
        let open = {
            let mut tasks = lock(tasks);
            tasks.retain(|t| !t.is_finished());
            tasks.len()
        };
        if open >= MAX_OPEN {
            refuse();
            lock(connections).push(Connection {
                host: String::new(),
                port: 0,
                kind: "connect",
                allowed: false,
                reason: format!(
                    "the run already has {MAX_OPEN} connections open through the proxy"
                ),
                sent: 0,
                received: 0,
            });
            continue;
        }
        let Ok((served, handed)) = std::os::unix::net::UnixStream::pair() else {
            refuse();
            continue;
        };
        let fds = [handed.as_raw_fd()];
        let sent = sendmsg::<()>(
            ours.as_raw_fd(),
            &[IoSlice::new(ASK)],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::empty(),
            None,
        );
        drop(handed);
        if sent.is_err() || served.set_nonblocking(true).is_err() {
            continue;
        }
        let proxy = proxy.clone();
        let connections = Arc::clone(connections);
        let task = runtime.spawn(async move {
            if let Ok(client) = tokio::net::UnixStream::from_std(served) {
                let connection = proxy.handle(client).await;
                (proxy.report)(connection.clone());
                lock(&connections).push(connection);
            }
        });
        lock(tasks).push(task);
    }
}

/// In the run's forwarder: ask the broker on `broker` for one connection to the proxy.
pub fn ask(broker: RawFd) -> io::Result<std::os::unix::net::UnixStream> {
    nix::sys::socket::send(broker, ASK, MsgFlags::empty())?;
    let mut buf = [0u8; 16];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let mut iov = [IoSliceMut::new(&mut buf)];
    let msg = recvmsg::<()>(
        broker,
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    if msg.bytes == 0 {
        return Err(io::Error::new(
            io::ErrorKind::ConnectionAborted,
            "the run's egress broker is gone",
        ));
    }
    let mut stream = None;
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = cmsg {
            for raw in fds {
                // SAFETY: SCM_RIGHTS just installed this descriptor in our table; it is
                // owned here from now on.
                let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                stream.get_or_insert(std::os::unix::net::UnixStream::from(owned));
            }
        }
    }
    stream.ok_or_else(|| io::Error::other("the egress broker refused a connection"))
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

    /// A run cancelled before its broker finished (the broker dropped): every connection
    /// it had open is closed at once, not left waiting for its request head.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_broker_closes_every_connection_at_once() {
        use std::io::Read;
        let (broker, theirs) = refusing_broker(Duration::from_secs(60));
        let fd = theirs.as_raw_fd();
        let mut held = tokio::task::spawn_blocking(move || ask(fd).unwrap())
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
    /// proxy's head timeout: past [`MAX_OPEN`] it is refused, and each refusal is
    /// reported; the broker's end stops the rest.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_holds_at_most_max_open_connections_at_once() {
        let (broker, theirs) = refusing_broker(Duration::from_secs(30));
        let fd = theirs.as_raw_fd();
        let held = tokio::task::spawn_blocking(move || {
            let mut held = Vec::new();
            let mut refused = 0;
            for _ in 0..MAX_OPEN + 10 {
                match ask(fd) {
                    Ok(stream) => held.push(stream),
                    Err(_) => refused += 1,
                }
            }
            (held, refused)
        })
        .await
        .unwrap();
        assert_eq!(held.0.len(), MAX_OPEN);
        assert_eq!(held.1, 10);
        drop(held);
        let (connections, _cut) = broker.finish(Duration::from_secs(5)).await;
        let refusals = connections
            .iter()
            .filter(|c| c.reason.contains("connections open"))
            .count();
        assert_eq!(refusals, 10, "{connections:?}");
        drop(theirs);
    }
}
