//! The runner of one host: the pipeline's steps as methods — [`Runner::decide`]
//! (`decide.rs`), [`Runner::execute`] (`execute.rs`), asking a human (`ask.rs`) — over one
//! shared [`Host`].

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::events::EventSink;
use crate::execute::Executor;
use crate::host::Host;
use crate::report::RunReport;
use crate::request::ExecRequest;

/// Runs commands on one host. Cheap to clone: the host is shared.
#[derive(Clone, Debug)]
pub struct Runner {
    pub(crate) host: Arc<Host>,
}

impl Runner {
    /// The runner of `host`.
    pub fn new(host: Host) -> Self {
        Runner {
            host: Arc::new(host),
        }
    }

    /// This host's config (the gateway resolves what it asks a node for from it).
    pub fn config(&self) -> &policy::Config {
        &self.host.config
    }

    /// The whole pipeline for one request on `executor`: decide, then execute. A node runs
    /// exactly this against its own approvals file; the gateway decides first to route.
    pub async fn run(
        &self,
        request: ExecRequest,
        executor: &Executor,
        events: &dyn EventSink,
        cancel: &CancellationToken,
    ) -> RunReport {
        let decided = self.decide(request);
        self.execute(decided, executor, events, cancel).await
    }
}
