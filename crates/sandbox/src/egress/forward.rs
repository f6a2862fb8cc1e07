//! Inside the run's network namespace: a TCP listener on loopback (what `HTTP_PROXY` and
//! `HTTPS_PROXY` name for the command) whose every connection is carried to the run's
//! egress socket, bound into the sandbox. Plain threads and blocking copies: it runs
//! beside the command in the sandbox, where there is no runtime, and ends with it.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// Carry each connection `listener` accepts to the Unix socket `to`, for ever (or until
/// accepting fails).
pub fn forward(listener: TcpListener, to: &Path) -> std::io::Error {
    loop {
        let client = match listener.accept() {
            Ok((client, _)) => client,
            Err(e) => return e,
        };
        let to: PathBuf = to.to_path_buf();
        std::thread::spawn(move || {
            if let Ok(upstream) = UnixStream::connect(&to) {
                carry(client, upstream);
            }
        });
    }
}

/// Copy both ways until each side is done, passing each end-of-stream on.
fn carry(client: TcpStream, upstream: UnixStream) {
    let (Ok(client_read), Ok(upstream_write)) = (client.try_clone(), upstream.try_clone()) else {
        return;
    };
    let outward = std::thread::spawn(move || {
        copy(client_read, &upstream_write);
        let _ = upstream_write.shutdown(Shutdown::Write);
    });
    copy(&upstream, &client);
    let _ = client.shutdown(Shutdown::Write);
    let _ = outward.join();
}

fn copy(mut from: impl Read, mut to: impl Write) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        std::thread::spawn(move || forward(listener, &socket));
        let mut client = TcpStream::connect(addr).unwrap();
        client.write_all(b"CONNECT x:443 HTTP/1.1\r\n\r\n").unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).unwrap();
        assert_eq!(answer, "got:CONNECT x:443 HTTP/1.1\r\n\r\n");
    }
}
