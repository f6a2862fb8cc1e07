//! One host as the runner sees it: its files (executable resolution), its own
//! environment and trusted PATH, its default working directory, its approvals store and
//! config, how to reach a human, and the time. Built once per process and shared by every
//! route; the same type describes the gateway machine and a node.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use approvals::{Clock, Store, SystemClock};
use audit::{AuditSink, NoAudit};
use caps::Fs;
use policy::{LiveConfig, TrustedPath};

use crate::approver::{Approvals, NoApprover};

/// A host's facts and providers (see the module header). Build with [`HostContext::builder`].
pub struct HostContext {
    pub(crate) fs: Arc<dyn Fs>,
    pub(crate) store: Store,
    pub(crate) config: LiveConfig,
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) trusted_path: TrustedPath,
    pub(crate) default_cwd: PathBuf,
    pub(crate) approvals: Arc<dyn Approvals>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) protected: Vec<PathBuf>,
    pub(crate) audit: Arc<dyn AuditSink>,
}

impl std::fmt::Debug for HostContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostContext")
            .field("store", &self.store)
            .field("default_cwd", &self.default_cwd)
            .finish()
    }
}

/// Builds a [`HostContext`]: the files, the approvals store and the config are required; the
/// rest defaults to an empty environment, `/usr/bin:/bin`, `/`, no approver, the system
/// clock and no record.
pub struct HostContextBuilder {
    host: HostContext,
}

impl HostContext {
    /// Start describing a host whose files are `fs`, whose approvals file is `store` and
    /// whose config is `config` (a [`Config`](policy::Config) that never changes, or a [`LiveConfig`]
    /// following `config.toml`).
    pub fn builder(
        fs: Arc<dyn Fs>,
        store: Store,
        config: impl Into<LiveConfig>,
    ) -> HostContextBuilder {
        HostContextBuilder {
            host: HostContext {
                fs,
                store,
                config: config.into(),
                env: BTreeMap::new(),
                trusted_path: TrustedPath::parse("/usr/bin:/bin"),
                default_cwd: PathBuf::from("/"),
                approvals: Arc::new(NoApprover),
                clock: Arc::new(SystemClock),
                protected: Vec::new(),
                audit: Arc::new(NoAudit),
            },
        }
    }
}

impl HostContextBuilder {
    /// The host's own environment (only allowlisted names reach commands).
    pub fn env(mut self, env: BTreeMap<String, String>) -> Self {
        self.host.env = env;
        self
    }

    /// Where bare program names are looked up (and the `PATH` commands get).
    pub fn trusted_path(mut self, trusted_path: TrustedPath) -> Self {
        self.host.trusted_path = trusted_path;
        self
    }

    /// The working directory of requests that name none (relative ones start here).
    pub fn default_cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.host.default_cwd = cwd.into();
        self
    }

    /// Directories of Warden's own files (real paths, every place they show) that an
    /// allowlisted command run outside the sandbox may not name (`policy::protected`).
    pub fn protected(mut self, dirs: Vec<PathBuf>) -> Self {
        self.host.protected = dirs;
        self
    }

    /// How to reach a human.
    pub fn approvals(mut self, approvals: Arc<dyn Approvals>) -> Self {
        self.host.approvals = approvals;
        self
    }

    /// The clock (usage records, IPC timestamps).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.host.clock = clock;
        self
    }

    /// Where decisions, answers and runs are recorded (default: nowhere).
    pub fn audit(mut self, audit: Arc<dyn AuditSink>) -> Self {
        self.host.audit = audit;
        self
    }

    /// The host.
    pub fn build(self) -> HostContext {
        self.host
    }
}
