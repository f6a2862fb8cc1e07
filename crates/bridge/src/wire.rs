//! Frames over a transport. A frame is one message's bytes, at most [`MAX_FRAME`]:
//! on a byte stream (a command's stdio, SSH, `podman exec -i`, `kubectl exec -i`) each
//! frame is preceded by its length as 4 big-endian bytes; on a WebSocket each frame is
//! one binary message. A length over the cap is refused before any of the body is read,
//! so a hostile peer cannot make either side buffer more than one frame.

use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::BridgeError;

/// Largest frame either side accepts: a run's output is capped at 200,000 bytes of
/// combined output plus its stdout and stderr shares and a 20,000-byte tail; JSON escaping
/// can grow text up to six times, so 4 MiB holds the largest honest result.
pub const MAX_FRAME: usize = 4 * 1024 * 1024;

/// How a connection is carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    /// A WebSocket the node dialled (TLS with a pinned certificate, or plain on loopback).
    WebSocket,
    /// A command's standard input and output (SSH, container exec...).
    Stdio,
}

impl std::fmt::Display for TransportKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TransportKind::WebSocket => "websocket",
            TransportKind::Stdio => "stdio",
        })
    }
}

/// A boxed future of the transports' methods.
pub type Io<'a, T> = Pin<Box<dyn Future<Output = Result<T, BridgeError>> + Send + 'a>>;

/// The sending half of a transport.
pub trait FrameTx: Send {
    /// Send one frame.
    fn send<'a>(&'a mut self, frame: Vec<u8>) -> Io<'a, ()>;
    /// Send several frames, flushing once (a run's events and result often leave
    /// together: one write instead of three).
    fn send_all<'a>(&'a mut self, frames: Vec<Vec<u8>>) -> Io<'a, ()> {
        Box::pin(async move {
            for frame in frames {
                self.send(frame).await?;
            }
            Ok(())
        })
    }
    /// Close the sending direction (best effort).
    fn close<'a>(&'a mut self) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;
}

/// The receiving half of a transport.
pub trait FrameRx: Send {
    /// The next frame, or `None` when the peer closed the connection cleanly.
    fn recv<'a>(&'a mut self) -> Io<'a, Option<Vec<u8>>>;
}

/// A connection's two halves and what is known about its far end.
pub struct Transport {
    /// Sends frames.
    pub tx: Box<dyn FrameTx>,
    /// Receives frames.
    pub rx: Box<dyn FrameRx>,
    /// How it is carried.
    pub kind: TransportKind,
    /// The far end's address (IP for a WebSocket), if known.
    pub remote: Option<String>,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("kind", &self.kind)
            .field("remote", &self.remote)
            .finish()
    }
}

impl Transport {
    /// Length-prefixed frames over a byte stream's two halves.
    pub fn stream<R, W>(read: R, write: W, kind: TransportKind, remote: Option<String>) -> Self
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        Transport {
            tx: Box::new(StreamTx { write }),
            rx: Box::new(StreamRx { read }),
            kind,
            remote,
        }
    }
}

struct StreamTx<W> {
    write: W,
}

fn too_large(len: usize) -> BridgeError {
    BridgeError::Protocol(format!(
        "refusing to send a {len}-byte frame (the limit is {MAX_FRAME})"
    ))
}

impl<W: AsyncWrite + Unpin + Send> FrameTx for StreamTx<W> {
    fn send<'a>(&'a mut self, frame: Vec<u8>) -> Io<'a, ()> {
        self.send_all(vec![frame])
    }

    fn send_all<'a>(&'a mut self, frames: Vec<Vec<u8>>) -> Io<'a, ()> {
        Box::pin(async move {
            // One buffer, one write: the stream may be an unbuffered pipe.
            let mut out = Vec::with_capacity(frames.iter().map(|f| f.len() + 4).sum());
            for frame in &frames {
                if frame.len() > MAX_FRAME {
                    return Err(too_large(frame.len()));
                }
                out.extend_from_slice(&(frame.len() as u32).to_be_bytes());
                out.extend_from_slice(frame);
            }
            self.write.write_all(&out).await.map_err(BridgeError::io)?;
            self.write.flush().await.map_err(BridgeError::io)
        })
    }

    fn close<'a>(&'a mut self) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>> {
        Box::pin(async move {
            let _ = self.write.shutdown().await;
        })
    }
}

struct StreamRx<R> {
    read: R,
}

impl<R: AsyncRead + Unpin + Send> FrameRx for StreamRx<R> {
    fn recv<'a>(&'a mut self) -> Io<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            let mut len = [0u8; 4];
            // A clean end between frames is a close; inside a frame it is a broken stream.
            match self
                .read
                .read(&mut len[..1])
                .await
                .map_err(BridgeError::io)?
            {
                0 => return Ok(None),
                _ => self
                    .read
                    .read_exact(&mut len[1..])
                    .await
                    .map_err(BridgeError::io)?,
            };
            let len = u32::from_be_bytes(len) as usize;
            if len > MAX_FRAME {
                return Err(BridgeError::Protocol(format!(
                    "a {len}-byte frame exceeds the {MAX_FRAME}-byte limit"
                )));
            }
            let mut frame = vec![0u8; len];
            self.read
                .read_exact(&mut frame)
                .await
                .map_err(BridgeError::io)?;
            Ok(Some(frame))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_round_trip_and_oversized_lengths_are_refused_unread() {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (ar, aw) = tokio::io::split(a);
        let (br, bw) = tokio::io::split(b);
        let mut left = Transport::stream(ar, aw, TransportKind::Stdio, None);
        let mut right = Transport::stream(br, bw, TransportKind::Stdio, None);
        left.tx.send(b"hello".to_vec()).await.unwrap();
        left.tx.send(Vec::new()).await.unwrap();
        assert_eq!(right.rx.recv().await.unwrap().unwrap(), b"hello");
        assert_eq!(right.rx.recv().await.unwrap().unwrap(), b"");
        assert!(left.tx.send(vec![0; MAX_FRAME + 1]).await.is_err());

        // A peer announcing a huge frame is refused on the length alone.
        let (a, b) = tokio::io::duplex(1024);
        let (_ar, mut aw) = tokio::io::split(a);
        let (br, bw) = tokio::io::split(b);
        let mut right = Transport::stream(br, bw, TransportKind::Stdio, None);
        aw.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
        let err = right.rx.recv().await.unwrap_err();
        assert!(err.to_string().contains("exceeds"), "{err}");
        drop(aw);
    }
}
