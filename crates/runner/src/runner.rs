//! The runner of one host: the pipeline's steps as methods — [`Runner::decide`]
//! (`decide.rs`), [`Runner::execute`] (`execute.rs`), asking a human (`ask.rs`) — over one
//! shared [`HostContext`].

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::events::EventSink;
use crate::executor::Executor;
use crate::host::HostContext;
use crate::report::RunReport;
use crate::request::ExecRequest;

/// Runs commands on one host. Cheap to clone: the host is shared.
#[derive(Clone, Debug)]
pub struct Runner {
    pub(crate) host: Arc<HostContext>,
}

impl Runner {
    /// The runner of `host`.
    pub fn new(host: HostContext) -> Self {
        Runner {
            host: Arc::new(host),
        }
    }

    /// This host's config as it is now (`config.toml` is read again if it follows the
    /// file). A request is routed, decided and run under the one snapshot its caller takes
    /// here: an edit made meanwhile is for the next request.
    pub fn config(&self) -> Arc<policy::Config> {
        self.host.config.current()
    }

    /// What stands on this host that every result should say (see
    /// [`RunReport::notices`]): the config edit not in force, the record not written.
    pub fn notices(&self) -> Vec<String> {
        let mut notices: Vec<String> = self.host.config.notice().into_iter().collect();
        if let Some(problem) = self.host.audit.problem() {
            notices.push(format!(
                "the record (audit log) cannot be written ({problem}): runs go on, but are not on the record until it can be; `warden doctor` says more"
            ));
        }
        notices
    }

    /// Whether `agent` has a policy of its own here: an `[[agents.list]]` entry in the
    /// config, or an entry in this host's approvals file. Without one it gets the global
    /// settings and the file's defaults — rarely what an operator meant for a new client.
    pub fn has_own_policy(&self, agent: &str) -> bool {
        self.host
            .config
            .in_force()
            .agents
            .iter()
            .any(|a| a.id == agent)
            || self
                .host
                .store
                .load()
                .is_ok_and(|snapshot| snapshot.file.agents.contains_key(agent))
    }

    /// Where `request` runs under `config` (its `host` alone, nothing else resolved): how
    /// it is routed.
    pub fn host_of(&self, config: &policy::Config, request: &ExecRequest) -> policy::Host {
        policy::resolve_host(
            &request.params,
            &request.session_overrides,
            config,
            Some(&request.agent),
        )
        .value
    }

    /// What `request` asks for before any host file caps it — where it goes, its node,
    /// timeout, security and ask — from its parameters, its session and `config` alone (no file is read, no command analysed). A request is routed by its
    /// `host`; one for a node is decided there, against the node's own file, and never
    /// here ([`decide`](Runner::decide) is for the hosts this runner serves).
    pub fn requested(
        &self,
        config: &policy::Config,
        request: &ExecRequest,
    ) -> policy::ResolvedPolicy {
        policy::resolve(
            &request.params,
            &request.session_overrides,
            config,
            Some(&request.agent),
            &policy::HostCeiling::NONE,
        )
    }

    /// The whole pipeline for one request on `executor`: decide (as `executor` serves the
    /// sandbox host), then execute. A node runs exactly this against its own approvals
    /// file.
    pub async fn run(
        &self,
        request: ExecRequest,
        executor: &Executor,
        events: &dyn EventSink,
        cancel: &CancellationToken,
    ) -> RunReport {
        let decided = self.decide(&self.config(), request, executor.confinement());
        self.execute(decided, executor, events, cancel).await
    }
}
