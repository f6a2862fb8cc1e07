//! How a runner reaches a human: the [`Approvals`] trait, and the production
//! implementation that connects to the approver socket named in this host's approvals
//! file, on demand, for every prompt.

use std::sync::Arc;
use std::time::Duration;

use approvals::ipc::protocol::Request;
use approvals::ipc::{AskOutcome, ClientConfig, DEFAULT_CONNECT_TIMEOUT, ask};
use approvals::{ApprovalsFile, Clock, Store};

/// Asks a human.
#[async_trait::async_trait]
pub trait Approvals: Send + Sync {
    /// Ask; never takes much longer than the approval timeout. `host_file` is this
    /// host's approvals file as the request read it (where the approver's socket and
    /// token are); `None` when the asker has not read it (it is read now).
    async fn ask(&self, request: &Request, host_file: Option<&ApprovalsFile>) -> AskOutcome;

    /// Who answers, as the record names them ("the approver on this host's socket").
    fn who(&self) -> &'static str {
        "the approver on this host's socket"
    }
}

/// The approver UI on this host's socket.
pub struct SocketApprovals {
    store: Store,
    clock: Arc<dyn Clock>,
    approval_timeout: Duration,
}

impl SocketApprovals {
    /// Ask through the socket and token in `store`'s file.
    pub fn new(store: Store, clock: Arc<dyn Clock>, approval_timeout: Duration) -> Self {
        SocketApprovals {
            store,
            clock,
            approval_timeout,
        }
    }
}

#[async_trait::async_trait]
impl Approvals for SocketApprovals {
    async fn ask(&self, request: &Request, host_file: Option<&ApprovalsFile>) -> AskOutcome {
        let loaded;
        let file = match host_file {
            Some(file) => file,
            None => match self.store.load() {
                Ok(s) => {
                    loaded = s.file;
                    &loaded
                }
                Err(e) => return AskOutcome::NoApprover(format!("approvals file unusable: {e}")),
            },
        };
        let Some(token) = file.token() else {
            return AskOutcome::NoApprover(
                "no approver has ever been set up on this host (run `warden approvals ui`)".into(),
            );
        };
        let socket_path = self.store.socket_path(file);
        let owner_uid = self.store.config().owner_uid;
        // A socket outside a private directory could be anyone's: send it nothing.
        if let Some(dir) = socket_path.parent()
            && let Some(why) =
                approvals::socket_location::private_dir_problem(self.store.fs(), dir, owner_uid)
        {
            return AskOutcome::NoApprover(format!("{why}; the request was not sent"));
        }
        let config = ClientConfig {
            socket_path,
            token: token.to_owned(),
            approver_uid: owner_uid,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            approval_timeout: self.approval_timeout,
        };
        ask(&config, self.clock.as_ref(), request).await
    }
}

/// No approver at all (every ask ends in askFallback).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoApprover;

#[async_trait::async_trait]
impl Approvals for NoApprover {
    async fn ask(&self, _request: &Request, _host_file: Option<&ApprovalsFile>) -> AskOutcome {
        AskOutcome::NoApprover("no approver is configured".into())
    }
}
