//! The approver's end of the local socket, shared by the terminal and the web approver:
//! the path and token come from the approvals file (made on first use), the socket is
//! bound with its owner and directory checks, served until stopped, and removed
//! afterwards.

use std::path::PathBuf;
use std::sync::Arc;

use approvals::ipc::{Approver, Limits, ServerConfig, bind_socket, serve};
use approvals::{OsRandom, SystemClock};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::host::HostFacts;

/// The bound socket, not yet answering.
pub struct ApproverSocket {
    facts_uid: u32,
    fs: Arc<dyn caps::Fs>,
    path: PathBuf,
    token: String,
    listener: tokio::net::UnixListener,
}

/// The socket while it answers; [`Serving::stop`] ends it.
pub struct Serving {
    fs: Arc<dyn caps::Fs>,
    path: PathBuf,
    stop: oneshot::Sender<()>,
    server: JoinHandle<()>,
}

impl ApproverSocket {
    /// Bind this host's approver socket.
    pub async fn bind(facts: &HostFacts) -> anyhow::Result<ApproverSocket> {
        let (path, token) = facts.store().ensure_token(&OsRandom)?;
        let fs = facts.fs();
        let listener = bind_socket(fs.as_ref(), &path, facts.uid).await?;
        Ok(ApproverSocket {
            facts_uid: facts.uid,
            fs,
            path,
            token,
            listener,
        })
    }

    /// Where it listens.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Answer requests with `approver` until [`Serving::stop`].
    pub fn serve(self, approver: Arc<dyn Approver>) -> Serving {
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            self.listener,
            ServerConfig {
                token: self.token,
                owner_uid: self.facts_uid,
                limits: Limits::default(),
            },
            approver,
            Arc::new(SystemClock),
            Arc::new(OsRandom),
            async {
                let _ = stopped.await;
            },
        ));
        Serving {
            fs: self.fs,
            path: self.path,
            stop,
            server,
        }
    }
}

impl Serving {
    /// Stop answering (answers already given are still delivered) and remove the socket.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.server.await;
        let _ = caps::Fs::remove(self.fs.as_ref(), &self.path);
    }
}
