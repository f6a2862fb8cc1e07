//! The stdio transport's input side: the end of the client's input stops the
//! connection's work at once. An MCP client over stdio ends by closing the server's
//! stdin (or by dying, which closes it too); rmcp would then give in-flight handlers
//! seconds to finish, so a command of a client that is gone would run on. Wrapping stdin
//! in [`EndOfInput`] cancels a token — the gateway's shutdown token for `warden mcp` —
//! the moment the input ends or fails.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::sync::CancellationToken;

/// A reader that cancels `on_end` when its input reaches end-of-file or fails.
#[derive(Debug)]
pub struct EndOfInput<R> {
    inner: R,
    on_end: CancellationToken,
}

impl<R> EndOfInput<R> {
    /// Read from `inner`; cancel `on_end` when it ends.
    pub fn new(inner: R, on_end: CancellationToken) -> Self {
        EndOfInput { inner, on_end }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for EndOfInput<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let wanted = buf.remaining() > 0;
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        match &polled {
            Poll::Ready(Ok(())) if wanted && buf.filled().len() == before => self.on_end.cancel(),
            Poll::Ready(Err(_)) => self.on_end.cancel(),
            _ => {}
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn the_end_of_input_cancels_and_data_before_it_does_not() {
        let (mut client, server) = tokio::io::duplex(64);
        let token = CancellationToken::new();
        let mut reader = EndOfInput::new(server, token.clone());
        client.write_all(b"{}\n").await.unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(reader.read(&mut buf).await.unwrap(), 3);
        assert!(!token.is_cancelled());
        drop(client);
        assert_eq!(reader.read(&mut buf).await.unwrap(), 0);
        assert!(token.is_cancelled());
    }
}
