//! Inside the run's network namespace: a TCP listener on loopback (what `HTTP_PROXY` and
//! `HTTPS_PROXY` name for the command) whose every connection is handed, as it is, to the
//! run's broker outside (`broker.rs`), which serves it with the run's proxy. The forwarder
//! only accepts and hands over — no bytes pass through it, so a fault here is not a way
//! around the proxy's checks. One thread: it runs beside the command in the sandbox, where
//! there is no runtime, and ends with it.

use std::net::TcpListener;
use std::os::fd::RawFd;

/// Hand each connection `listener` accepts to the broker on `broker`, until accepting
/// fails or the broker is gone (the run is ending). A connection the broker cannot take
/// is closed.
pub fn forward(listener: TcpListener, broker: RawFd) -> std::io::Error {
    use std::io::ErrorKind;
    loop {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            // A client that gave up before it was accepted, or a signal: not the end.
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ConnectionAborted | ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(e) => return e,
        };
        if let Err(e) = super::broker::hand(broker, &client)
            && matches!(
                e.kind(),
                ErrorKind::BrokenPipe | ErrorKind::ConnectionReset | ErrorKind::ConnectionRefused
            )
        {
            return e;
        }
        // Our copy closes here; the broker's is the connection now.
    }
}

/// The proxy variables a `proxy` run's command gets, each naming its forwarder: the
/// upper- and lower-case spellings programs read (curl, git, pip, npm, Go, Python's
/// `urllib`, Node's undici), and npm's own.
pub const PROXY_VARIABLES: &[&str] = &[
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "npm_config_proxy",
    "npm_config_https_proxy",
];

/// Variables that would send a program around the proxy, removed (nothing is reachable
/// around it; a program that tried would only fail more obscurely).
pub const BYPASS_VARIABLES: &[&str] = &["NO_PROXY", "no_proxy", "npm_config_noproxy"];

/// In the sandbox's helper, before the command starts (one thread, confined as the
/// command will be): listen on an unused loopback port of the run's own network
/// namespace, fork the forwarder that hands each connection there to the run's broker
/// (descriptor `broker`), and name it in the proxy variables. The
/// forwarder keeps nothing else open, not even standard output (it must not hold the
/// run's output open), and dies with its parent. Any failure ends the run before the
/// command starts.
pub(crate) fn start_in_sandbox(broker: i32) {
    use crate::setup_failure::fail;
    use std::os::fd::AsRawFd;
    let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).unwrap_or_else(|e| {
        fail(format!(
            "the egress forwarder cannot listen on loopback: {e}"
        ))
    });
    let port = listener
        .local_addr()
        .unwrap_or_else(|e| fail(format!("the egress forwarder's port: {e}")))
        .port();
    // SAFETY: the helper is single-threaded here; the child starts its threads only
    // after the fork, and never returns into the helper.
    match unsafe { nix::unistd::fork() } {
        Err(e) => fail(format!("fork for the egress forwarder: {e}")),
        Ok(nix::unistd::ForkResult::Child) => {
            // SAFETY: plain prctl; closing the standard descriptors and every other one
            // but the listener and the broker, which this process never uses again.
            unsafe {
                nix::libc::prctl(nix::libc::PR_SET_PDEATHSIG, nix::libc::SIGKILL, 0, 0, 0);
                nix::libc::prctl(nix::libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
            }
            let mut keep = [listener.as_raw_fd(), broker];
            keep.sort_unstable();
            let mut from = 0u32;
            for fd in keep {
                close_range(from, (fd as u32).saturating_sub(1));
                from = fd as u32 + 1;
            }
            close_range(from, u32::MAX);
            let _ = forward(listener, broker);
            // SAFETY: _exit ends the process at once: nothing is left to flush.
            unsafe { nix::libc::_exit(0) }
        }
        Ok(nix::unistd::ForkResult::Parent { .. }) => {
            drop(listener);
            let url = format!("http://127.0.0.1:{port}");
            // SAFETY: the helper is single-threaded; nothing reads the environment
            // concurrently.
            unsafe {
                for name in PROXY_VARIABLES {
                    std::env::set_var(name, &url);
                }
                for name in BYPASS_VARIABLES {
                    std::env::remove_var(name);
                }
            }
        }
    }
}

/// Close descriptors `first..=last` (`last < first` closes nothing).
fn close_range(first: u32, last: u32) {
    if last < first {
        return;
    }
    // SAFETY: close_range takes plain integers; the forwarder uses nothing in the range.
    unsafe { nix::libc::syscall(nix::libc::SYS_close_range, first, last, 0u32) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::broker::Broker;
    use crate::egress::proxy::{Admission, Gate, Limits, Proxy, SystemResolver};
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;
    use std::sync::Arc;
    use std::time::Duration;

    struct RefuseAll;
    impl Gate for RefuseAll {
        fn admit(&self, host: &str, port: u16) -> Admission {
            Admission::Refuse(format!("{host}:{port} is not for tests"))
        }
    }

    /// A connection to the forwarder reaches the run's proxy itself: the proxy's answer
    /// comes back on it, and the connection closes with the proxy's end.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_to_the_forwarder_is_served_by_the_runs_proxy() {
        let proxy = Proxy {
            gate: Arc::new(RefuseAll),
            resolver: Arc::new(SystemResolver),
            report: Arc::new(|_| {}),
            limits: Limits {
                head_timeout: Duration::from_secs(5),
                connect_timeout: Duration::from_secs(1),
            },
            ask: None,
        };
        let (broker, theirs) = Broker::start(proxy, tokio::runtime::Handle::current()).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let fd = theirs.as_raw_fd();
        std::thread::spawn(move || forward(listener, fd));
        let answer = tokio::task::spawn_blocking(move || {
            let mut client = std::net::TcpStream::connect(addr).unwrap();
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
        assert!(
            answer.contains("example.test:443 is not for tests"),
            "{answer}"
        );
        let (connections, cut) = broker.finish(Duration::from_secs(5)).await;
        assert_eq!(cut, 0);
        assert_eq!(connections.len(), 1, "{connections:?}");
        assert_eq!(connections[0].host, "example.test");
        // The forwarder's thread stays in accept (nothing connects again); it would
        // hand a connection to a closed broker and end.
        drop(theirs);
    }
}
