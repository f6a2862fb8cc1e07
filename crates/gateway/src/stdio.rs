//! `warden mcp`'s transport: newline-delimited JSON-RPC on the process's stdin and
//! stdout, with two things rmcp's own stdio transport does not do.
//!
//! - Every line is checked first (`mcp::protocol::classify`): a line that is not JSON is
//!   answered with `-32700`, one that is not a JSON-RPC request with `-32600`, a line
//!   longer than [`MAX_LINE_BYTES`] with `-32600` — never with silence, so a client
//!   learns what it did wrong. Those answers are written before the end of the input
//!   is reported, so none is lost when stdin closes right after the line
//!   (`printf 'not json\n' | warden mcp`).
//! - The end of the input stops the connection's work at once. An MCP client over stdio
//!   ends by closing the server's stdin (or by dying, which closes it too); rmcp would
//!   then give in-flight handlers seconds to finish, so a command of a client that is
//!   gone would run on. The transport cancels a token — the gateway's shutdown token for
//!   `warden mcp` — the moment its input ends or fails.

use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::mcp::protocol::{Frame, classify, error_response};

/// The longest line read (one JSON-RPC message); longer ones are refused and skipped.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// How long the end of the input waits for answers still being written.
const ANSWER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Write `bytes` and a newline as one message, after whatever was queued before.
fn queue<W: AsyncWrite + Send + Unpin + 'static>(
    write: &Arc<Mutex<W>>,
    mut bytes: Vec<u8>,
) -> impl Future<Output = std::io::Result<()>> + Send + 'static {
    bytes.push(b'\n');
    let write = Arc::clone(write);
    async move {
        let mut w = write.lock().await;
        w.write_all(&bytes).await?;
        w.flush().await
    }
}

/// JSON-RPC over a reader and a writer, one message per line.
pub struct StdioTransport<R, W> {
    read: BufReader<R>,
    /// The line read so far: kept across cancelled `receive` calls (rmcp polls
    /// `receive` in a `select!`), so no partial message is ever lost.
    line: Vec<u8>,
    /// Skipping the rest of a line that was too long.
    discarding: bool,
    write: Arc<Mutex<W>>,
    on_end: CancellationToken,
    /// Answers to frames that never reached the service, still being written.
    answers: TaskTracker,
}

impl<R, W> StdioTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    /// Read from `read`, write to `write`; cancel `on_end` when the input ends.
    pub fn new(read: R, write: W, on_end: CancellationToken) -> Self {
        StdioTransport {
            read: BufReader::new(read),
            line: Vec::new(),
            discarding: false,
            write: Arc::new(Mutex::new(write)),
            on_end,
            answers: TaskTracker::new(),
        }
    }

    /// Answer a frame that never reaches the service. Spawned: `receive` must not wait
    /// on the writer (it is cancelled whenever rmcp has something else to do).
    fn answer(&self, response: serde_json::Value) {
        let send = queue(&self.write, response.to_string().into_bytes());
        self.answers.spawn(async move {
            if let Err(e) = send.await {
                tracing::debug!("answering an invalid frame: {e}");
            }
        });
    }

    /// The next whole line (without its newline), `Ok(None)` at the end of the input.
    /// Cancel-safe: bytes are moved into `self.line` and consumed without an await in
    /// between.
    async fn next_line(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        loop {
            let available = self.read.fill_buf().await?;
            if available.is_empty() {
                return Ok(None);
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |i| i + 1);
            if self.discarding {
                self.discarding = newline.is_none();
                self.read.consume(take);
                continue;
            }
            if self.line.len() + take > MAX_LINE_BYTES {
                self.line.clear();
                self.discarding = newline.is_none();
                self.read.consume(take);
                self.answer(error_response(
                    serde_json::Value::Null,
                    rmcp::model::ErrorCode::INVALID_REQUEST,
                    format!(
                        "Invalid Request: a message longer than {MAX_LINE_BYTES} bytes was skipped"
                    ),
                ));
                continue;
            }
            self.line.extend_from_slice(&available[..take]);
            self.read.consume(take);
            if newline.is_some() {
                let mut line = std::mem::take(&mut self.line);
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(Some(line));
            }
        }
    }
}

impl<R, W> Transport<RoleServer> for StdioTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let bytes = serde_json::to_vec(&item).map_err(std::io::Error::other);
        let write = bytes.map(|b| queue(&self.write, b));
        async move { write?.await }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            let line = match self.next_line().await {
                Ok(Some(line)) => line,
                Ok(None) => {
                    self.on_end.cancel();
                    answered(&self.answers).await;
                    return None;
                }
                Err(e) => {
                    tracing::debug!("reading stdin: {e}");
                    self.on_end.cancel();
                    answered(&self.answers).await;
                    return None;
                }
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match classify(&line) {
                Frame::Message(message) => return Some(*message),
                Frame::Reject(response) => self.answer(response),
                Frame::Ignore(why) => tracing::debug!("ignoring {why}"),
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        answered(&self.answers).await;
        self.write.lock().await.flush().await
    }
}

/// Wait until every answer to a rejected frame has been written (or failed): the input's
/// end is reported, and the process may exit, only after them.
async fn answered(answers: &TaskTracker) {
    answers.close();
    // Bounded: a client that stopped reading its stdout must not hold the end up.
    if tokio::time::timeout(ANSWER_WAIT, answers.wait())
        .await
        .is_err()
    {
        tracing::debug!("answers to rejected frames still unwritten after {ANSWER_WAIT:?}");
    }
    answers.reopen();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bad_lines_are_answered_and_the_end_of_input_cancels() {
        let (mut client, server_in) = tokio::io::duplex(1 << 16);
        let (server_out, client_out) = tokio::io::duplex(1 << 16);
        let token = CancellationToken::new();
        let mut transport = StdioTransport::new(server_in, server_out, token.clone());
        client
            .write_all(b"not json\n\n[]\n{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"ping\"}\n")
            .await
            .unwrap();
        let message = transport.receive().await.expect("the ping");
        assert!(matches!(
            message,
            RxJsonRpcMessage::<RoleServer>::Request(_)
        ));
        let mut answers = BufReader::new(client_out).lines();
        let first: serde_json::Value =
            serde_json::from_str(&answers.next_line().await.unwrap().unwrap()).unwrap();
        let second: serde_json::Value =
            serde_json::from_str(&answers.next_line().await.unwrap().unwrap()).unwrap();
        let mut codes = [
            first["error"]["code"].clone(),
            second["error"]["code"].clone(),
        ];
        codes.sort_by_key(|c| c.as_i64());
        assert_eq!(
            codes,
            [serde_json::json!(-32700), serde_json::json!(-32600)]
        );
        assert!(!token.is_cancelled());
        drop(client);
        assert!(transport.receive().await.is_none());
        assert!(token.is_cancelled());
    }
}
