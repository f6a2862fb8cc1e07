//! A TCP relay between a node and its gateway that a test can cut (both directions,
//! every connection), corrupt (flip a bit of the next chunk the node sends), or record
//! (everything the node sent on each connection).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A running relay.
pub struct Proxy {
    /// `127.0.0.1:PORT` to dial instead of the gateway.
    pub addr: String,
    streams: Arc<Mutex<Vec<TcpStream>>>,
    corrupt_next: Arc<AtomicBool>,
    /// What the node sent, per connection.
    pub recorded: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Proxy {
    /// Relay connections to `upstream`.
    pub fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let streams: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let corrupt_next = Arc::new(AtomicBool::new(false));
        let recorded: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let (s, c, r, up) = (
            Arc::clone(&streams),
            Arc::clone(&corrupt_next),
            Arc::clone(&recorded),
            upstream.to_owned(),
        );
        std::thread::spawn(move || {
            for down in listener.incoming() {
                let Ok(down) = down else { break };
                let Ok(upc) = TcpStream::connect(&up) else {
                    continue;
                };
                s.lock()
                    .unwrap()
                    .extend([down.try_clone().unwrap(), upc.try_clone().unwrap()]);
                let index = {
                    let mut rec = r.lock().unwrap();
                    rec.push(Vec::new());
                    rec.len() - 1
                };
                let (d2, u2) = (down.try_clone().unwrap(), upc.try_clone().unwrap());
                let (c, r) = (Arc::clone(&c), Arc::clone(&r));
                // node → gateway: recorded, optionally corrupted.
                std::thread::spawn(move || pump(down, upc, Some((c, r, index))));
                // gateway → node.
                std::thread::spawn(move || pump(u2, d2, None));
            }
        });
        Proxy {
            addr,
            streams,
            corrupt_next,
            recorded,
        }
    }

    /// Cut every connection now.
    pub fn cut(&self) {
        for s in self.streams.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// Flip the last bit of the next chunk the node sends.
    pub fn corrupt_next(&self) {
        self.corrupt_next.store(true, Ordering::SeqCst);
    }
}

type Recording = (Arc<AtomicBool>, Arc<Mutex<Vec<Vec<u8>>>>, usize);

fn pump(mut from: TcpStream, mut to: TcpStream, record: Option<Recording>) {
    let mut buf = [0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some((corrupt, rec, i)) = &record {
            rec.lock().unwrap()[*i].extend_from_slice(&buf[..n]);
            if corrupt.swap(false, Ordering::SeqCst) {
                buf[n - 1] ^= 1;
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}
