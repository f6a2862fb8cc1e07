//! The stdio transport's gateway side: run the operator's configured command (`ssh HOST
//! warden node stdio`, `podman exec -i CTR warden node stdio`, `kubectl exec -i POD --
//! warden node stdio`) and speak the Bridge over its stdin and stdout. The child dies
//! with its connection; when it exits, the connection's end reason is its exit status
//! and the end of its stderr, so `warden nodes list` says why a node is not connected.

use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bridge::{BridgeError, FrameRx, Transport, TransportKind};
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

/// Stderr kept per connection for the failure message.
const STDERR_TAIL: usize = 2048;

/// Starts stdio nodes' commands.
#[derive(Debug, Default)]
pub struct ProcessConnector;

impl bridge::Connector for ProcessConnector {
    fn connect<'a>(
        &'a self,
        command: &'a [String],
    ) -> Pin<Box<dyn Future<Output = Result<Transport, BridgeError>> + Send + 'a>> {
        Box::pin(async move {
            let shown = command.join(" ");
            let (program, args) = command
                .split_first()
                .ok_or_else(|| BridgeError::Invalid("an empty stdio command".into()))?;
            let mut child = Command::new(program)
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| BridgeError::Io(format!("cannot run `{shown}`: {e}")))?;
            let (Some(stdin), Some(stdout), Some(mut stderr)) =
                (child.stdin.take(), child.stdout.take(), child.stderr.take())
            else {
                return Err(BridgeError::Io(format!("`{shown}` has no stdio")));
            };
            let tail = Arc::new(Mutex::new(Vec::<u8>::new()));
            let keep = Arc::clone(&tail);
            let stderr_read = tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                while let Ok(n) = stderr.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    let mut t = keep.lock().unwrap_or_else(|p| p.into_inner());
                    t.extend_from_slice(&buf[..n]);
                    let excess = t.len().saturating_sub(STDERR_TAIL);
                    t.drain(..excess);
                }
            });
            let mut transport = Transport::stream(stdout, stdin, TransportKind::Stdio, None);
            transport.rx = Box::new(ChildRx {
                inner: transport.rx,
                child,
                tail,
                stderr_read: Some(stderr_read),
                shown,
            });
            Ok(transport)
        })
    }
}

/// Reads frames from the child; when the stream ends, says how the child ended. Owns
/// the child, so dropping the connection kills it.
struct ChildRx {
    inner: Box<dyn FrameRx>,
    child: Child,
    tail: Arc<Mutex<Vec<u8>>>,
    /// The task reading the child's stderr into `tail`.
    stderr_read: Option<tokio::task::JoinHandle<()>>,
    shown: String,
}

impl FrameRx for ChildRx {
    fn recv<'a>(&'a mut self) -> bridge::wire::Io<'a, Option<Vec<u8>>> {
        Box::pin(async move {
            let got = self.inner.recv().await;
            if let Ok(Some(frame)) = got {
                return Ok(Some(frame));
            }
            let status = match tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await
            {
                Ok(Ok(s)) => s.to_string(),
                _ => {
                    let _ = self.child.kill().await;
                    "its output closed".to_owned()
                }
            };
            // The child's last words may still be in the pipe when its exit is seen: let
            // the reader take them (bounded: a grandchild may hold stderr open).
            if let Some(reader) = self.stderr_read.take() {
                let _ = tokio::time::timeout(Duration::from_secs(1), reader).await;
            }
            let tail =
                String::from_utf8_lossy(&self.tail.lock().unwrap_or_else(|p| p.into_inner()))
                    .trim()
                    .to_owned();
            let detail = match got {
                Err(e) => format!("; {e}"),
                _ => String::new(),
            };
            Err(BridgeError::Io(format!(
                "`{}` ended ({status}){detail}{}",
                self.shown,
                if tail.is_empty() {
                    String::new()
                } else {
                    format!(": {tail}")
                }
            )))
        })
    }
}
