//! Inside the run's network namespace: a TCP listener on loopback (what `HTTP_PROXY` and
//! `HTTPS_PROXY` name for the command) whose every connection is carried to the run's
//! proxy — over a connection its broker hands out (`broker.rs`), or a socket path. Plain
//! threads and blocking splices (`splice.rs`): it runs beside the command in the sandbox,
//! where there is no runtime, and ends with it.

use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

/// Carry each connection `listener` accepts to a connection `open` makes to the proxy,
/// for ever (or until accepting fails). A client `open` finds no connection for is
/// closed.
pub fn forward(
    listener: TcpListener,
    open: impl Fn() -> std::io::Result<UnixStream> + Send + Sync + 'static,
) -> std::io::Error {
    let open = Arc::new(open);
    loop {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(e) => return e,
        };
        let open = Arc::clone(&open);
        std::thread::spawn(move || {
            if let Ok(upstream) = open() {
                carry(client, upstream);
            }
        });
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
/// namespace, fork the forwarder that carries each connection there to a connection the
/// run's broker (descriptor `broker`) hands out, and name it in the proxy variables. The
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
            // One request and its answer at a time on the broker's socket.
            let asking = std::sync::Mutex::new(());
            let _ = forward(listener, move || {
                let _one = asking.lock().unwrap_or_else(|p| p.into_inner());
                super::broker::ask(broker)
            });
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

/// Move both ways until each side is done, passing each end-of-stream on (by splice:
/// see `splice.rs`).
fn carry(client: TcpStream, upstream: UnixStream) {
    let (Ok(client_read), Ok(upstream_write)) = (client.try_clone(), upstream.try_clone()) else {
        return;
    };
    let outward = std::thread::spawn(move || {
        super::splice::blocking(&client_read, &upstream_write);
        let _ = upstream_write.shutdown(Shutdown::Write);
    });
    super::splice::blocking(&upstream, &client);
    let _ = client.shutdown(Shutdown::Write);
    let _ = outward.join();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixListener;

    #[test]
    fn a_tcp_connection_reaches_the_socket_and_both_ends_of_stream_pass() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("egress.sock");
        let upstream = UnixListener::bind(&socket).unwrap();
        // An upstream that answers everything it read, once the client is done writing.
        std::thread::spawn(move || {
            let (mut s, _) = upstream.accept().unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            s.write_all(b"got:").unwrap();
            s.write_all(&got).unwrap();
        });
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || forward(listener, move || UnixStream::connect(&socket)));
        let mut client = TcpStream::connect(addr).unwrap();
        client.write_all(b"CONNECT x:443 HTTP/1.1\r\n\r\n").unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).unwrap();
        assert_eq!(answer, "got:CONNECT x:443 HTTP/1.1\r\n\r\n");
    }
}
