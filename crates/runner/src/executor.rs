//! Where a decided request runs: an [`Executor`] — the plan run as it is on this host's
//! shell (the gateway host, a node), or confined by a sandbox's profiles — and how it
//! serves `host = sandbox` ([`Executor::confinement`], which the decision is made with).

use std::sync::Arc;

use caps::Shell;
use policy::Confinement;

use crate::report::RunHost;

/// Where a decided request runs.
#[derive(Clone)]
pub enum Executor {
    /// The approved plan runs as plain processes of this host, with this shell (the
    /// gateway host, a node): policy — security, ask, the allowlist — is the boundary, not
    /// a sandbox. (The operator's direct mode is not this: it serves `host = sandbox`
    /// unconfined, as a `Sandbox` executor whose `unconfined` says so.)
    Plain {
        /// The processes of this host.
        shell: Arc<dyn Shell>,
        /// Its name in reports and events.
        host: RunHost,
    },
    /// An OS sandbox confines every command; the permission mode gates writes.
    Sandbox(SandboxShells),
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Executor::Plain { host, .. } => write!(f, "Executor::Plain({host})"),
            Executor::Sandbox(s) => write!(f, "Executor::Sandbox(unconfined: {:?})", s.unconfined),
        }
    }
}

/// The sandbox profiles a sandboxed host runs commands with.
#[derive(Clone)]
pub struct SandboxShells {
    /// Authorized paths read-only.
    pub readonly: Arc<dyn Shell>,
    /// Read-only, classifying refused writes ([`ExecOutput::refused_writes`]); approval
    /// mode's first run.
    pub watched: Arc<dyn Shell>,
    /// Authorized writable paths writable.
    pub writable: Arc<dyn Shell>,
    /// Why these shells do not confine at all (the operator's direct mode), said in every
    /// decision; `None` for a real sandbox.
    pub unconfined: Option<String>,
    /// Why this sandbox cannot run a command read-only (a container that cannot make a
    /// read-only view): `readonly` and `approval` are then refused before anything runs,
    /// never served by the writable profile. `None` when `readonly` and `watched` are
    /// read-only.
    pub read_only_unavailable: Option<String>,
    /// What network these shells give a run (`sandbox.network` when they were built); a
    /// plan for another mode is refused. A proxied run's egress rules come with its plan.
    pub network: policy::PlannedNetwork,
}

impl Executor {
    /// How this executor serves `host = sandbox`: decide with this, so the decision and
    /// the plan say what will really confine the run.
    pub fn confinement(&self) -> Confinement<'_> {
        match self {
            Executor::Sandbox(SandboxShells {
                unconfined: Some(why),
                ..
            }) => Confinement::Unconfined(why),
            _ => Confinement::Sandbox,
        }
    }

    /// The host name of runs here.
    pub(crate) fn run_host(&self) -> RunHost {
        match self {
            Executor::Plain { host, .. } => host.clone(),
            Executor::Sandbox(s) if s.unconfined.is_some() => RunHost::Direct,
            Executor::Sandbox(_) => RunHost::Sandbox,
        }
    }
}
