//! Relaying bytes between two sockets without copying them through user space: each
//! direction moves pages from its source into a pipe and from the pipe into its
//! destination with `splice(2)`. A proxied download crosses one relay, the proxy's (the
//! command's own connection, accepted on the run's listener, to the upstream); with read and
//! write it would copy every byte twice more. [`relay`] serves the proxy's tasks
//! (readiness from Tokio, `SPLICE_F_NONBLOCK` calls). A pair of descriptors splice cannot
//! join (`EINVAL`) falls back to copying, the same bytes either way.

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use rustix::pipe::{PipeFlags, SpliceFlags, splice};
use tokio::io::Interest;

/// Bytes asked of one splice: the pipe's size once raised (else the kernel's 64 KiB).
const CHUNK: usize = 1 << 20;

/// A pipe for one direction, as large as an unprivileged process may make it.
fn pipe(flags: PipeFlags) -> io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = rustix::pipe::pipe_with(flags | PipeFlags::CLOEXEC)?;
    // Larger transfers per call; refused above /proc/sys/fs/pipe-max-size, which only
    // costs calls.
    let _ = rustix::pipe::fcntl_setpipe_size(&write, CHUNK);
    Ok((read, write))
}

/// A Tokio socket [`relay`] can wait on and splice from or to.
pub trait Socket: AsFd {
    /// Wait until `interest` may be ready.
    fn ready_for(&self, interest: Interest) -> impl Future<Output = io::Result<()>> + Send;
    /// Try `f` now, clearing readiness if it would block.
    fn attempt<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
}

macro_rules! socket {
    ($t:ty) => {
        impl Socket for $t {
            async fn ready_for(&self, interest: Interest) -> io::Result<()> {
                self.ready(interest).await.map(|_| ())
            }
            fn attempt<R>(
                &self,
                interest: Interest,
                f: impl FnOnce() -> io::Result<R>,
            ) -> io::Result<R> {
                self.try_io(interest, f)
            }
        }
    };
}
socket!(tokio::net::TcpStream);
socket!(tokio::net::UnixStream);

/// Move everything `from` sends to `to` until `from` ends, then end `to`'s sending side;
/// the bytes moved (also when either side fails part way).
pub async fn relay(from: &impl Socket, to: &impl Socket) -> u64 {
    match spliced(from, to).await {
        Ok(moved) => moved,
        Err(Unsupported) => copied(from, to).await,
    }
}

/// Why a relay could not splice at all (its first call was refused): copy instead.
struct Unsupported;

/// [`relay`] by splice.
async fn spliced(from: &impl Socket, to: &impl Socket) -> Result<u64, Unsupported> {
    let Ok((pipe_read, pipe_write)) = pipe(PipeFlags::NONBLOCK) else {
        return Err(Unsupported);
    };
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    let mut moved = 0u64;
    let ended = loop {
        // The pipe is empty here: fill it from the source.
        let filled = loop {
            if from.ready_for(Interest::READABLE).await.is_err() {
                break Err(());
            }
            match from.attempt(Interest::READABLE, || {
                splice(from, None, &pipe_write, None, CHUNK, flags).map_err(io::Error::from)
            }) {
                Ok(n) => break Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) if e.raw_os_error() == Some(nix::libc::EINVAL) && moved == 0 => {
                    return Err(Unsupported);
                }
                Err(_) => break Err(()),
            }
        };
        let n = match filled {
            Ok(0) | Err(()) => break true,
            Ok(n) => n,
        };
        // Drain it into the destination.
        let mut left = n;
        while left > 0 {
            if to.ready_for(Interest::WRITABLE).await.is_err() {
                return Ok(moved + (n - left) as u64);
            }
            match to.attempt(Interest::WRITABLE, || {
                splice(&pipe_read, None, to, None, left, flags).map_err(io::Error::from)
            }) {
                Ok(m) => left -= m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return Ok(moved + (n - left) as u64),
            }
        }
        moved += n as u64;
    };
    if ended {
        end_sending(to);
    }
    Ok(moved)
}

/// [`relay`] by reading and writing, where splice cannot join the two.
async fn copied(from: &impl Socket, to: &impl Socket) -> u64 {
    let mut buf = vec![0u8; 64 * 1024];
    let mut moved = 0u64;
    loop {
        if from.ready_for(Interest::READABLE).await.is_err() {
            break;
        }
        let n = match from.attempt(Interest::READABLE, || {
            nix::unistd::read(from, &mut buf).map_err(io::Error::from)
        }) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(_) => break,
        };
        let mut written = 0;
        while written < n {
            if to.ready_for(Interest::WRITABLE).await.is_err() {
                return moved + written as u64;
            }
            match to.attempt(Interest::WRITABLE, || {
                nix::unistd::write(to, &buf[written..n]).map_err(io::Error::from)
            }) {
                Ok(m) => written += m,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return moved + written as u64,
            }
        }
        moved += n as u64;
    }
    end_sending(to);
    moved
}

/// Pass the end of the stream on: `to` sends nothing more.
fn end_sending(to: &impl AsFd) {
    let _ = nix::sys::socket::shutdown(
        std::os::fd::AsRawFd::as_raw_fd(&to.as_fd()),
        nix::sys::socket::Shutdown::Write,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_relay_moves_every_byte_in_order_and_passes_the_end_on() {
        let (a, mut a_peer) = tokio::net::UnixStream::pair().unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tcp = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (mut tcp_peer, _) = listener.accept().await.unwrap();
        let data: Vec<u8> = (0..5_000_000u32).map(|i| (i % 251) as u8).collect();
        let sent = data.clone();
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            a_peer.write_all(&sent).await.unwrap();
            a_peer.shutdown().await.unwrap();
            a_peer
        });
        let reader = tokio::spawn(async move {
            use tokio::io::AsyncReadExt;
            let mut got = Vec::new();
            tcp_peer.read_to_end(&mut got).await.unwrap();
            got
        });
        let moved = relay(&a, &tcp).await;
        assert_eq!(moved, data.len() as u64);
        let _peer = writer.await.unwrap();
        assert_eq!(reader.await.unwrap(), data, "the end reached the reader");
    }
}
