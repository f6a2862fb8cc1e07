//! Composition: the gateway of this host, built from `config.toml`, the approvals file
//! and the machine — one runner (this host's facts, store and approver), the executors
//! of each route (this machine's processes for `host=gateway`; the configured OS sandbox
//! for `host=sandbox`, or its diagnosis; the operator's direct mode), and the file tools
//! over the authorized paths. Only providers are chosen here; the rules live in the
//! crates.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use approvals::{Clock, Store, SystemClock};
use caps::process::{Containment, OpenedProgram};
use caps::{LocalShell, Shell};
use gateway::{
    DirectMode, DirectSwitch, FileTools, Gateway, PathAuthorization, Routes, SandboxRoute,
};
use policy::{Config, LiveConfig, SandboxBackend};
use runner::{Executor, HostContext, RunHost, Runner, SandboxShells, SocketApprovals};

use crate::inline_approver::InlineApprovals;
use sandbox::protect::{Authorized, Guard, Protection, WardenLayout, plan_paths, warden_paths};
use sandbox::{LandlockMode, NamespaceSandbox, Profile, SandboxPolicy};

use crate::host::HostFacts;

/// Authorized paths: configured, or the workspace. Each must be a real directory.
fn authorization(config: &Config, workspace: &Path) -> anyhow::Result<PathAuthorization> {
    let writable = if config.sandbox.writable_paths.is_empty() {
        vec![workspace.to_path_buf()]
    } else {
        config.sandbox.writable_paths.clone()
    };
    for p in writable.iter().chain(&config.sandbox.readable_extra_paths) {
        let meta = std::fs::symlink_metadata(p)
            .with_context(|| format!("authorized path {} is not accessible", p.display()))?;
        anyhow::ensure!(
            meta.is_dir(),
            "authorized path {} must be a real directory (symlinks are refused)",
            p.display()
        );
    }
    Ok(PathAuthorization {
        writable_paths: writable,
        readable_extra_paths: config.sandbox.readable_extra_paths.clone(),
    })
}

/// One shell for every profile: the operator's unconfined direct mode.
fn same_shell(shell: Arc<dyn Shell>, unconfined: Option<&str>) -> SandboxShells {
    SandboxShells {
        readonly: Arc::clone(&shell),
        watched: Arc::clone(&shell),
        writable: shell,
        unconfined: unconfined.map(str::to_owned),
        read_only_unavailable: None,
        // Unconfined: the host's own network (the runner checks no plan against it).
        network: policy::PlannedNetwork::Plain(true),
    }
}

/// What commands and file tools must never reach or change (the protected set: Warden's
/// state, the approver socket, the home, the directories of Warden's programs), checked
/// against the authorized paths — and Warden's directories created — before anything
/// runs.
fn protected(
    facts: &HostFacts,
    store: &Store,
    auth: &PathAuthorization,
) -> anyhow::Result<Vec<Protection>> {
    let socket = store.load().ok().map(|s| store.socket_path(&s.file));
    let node_state = facts.warden_home.join(bridge::state::NODE_FILE);
    let programs = crate::host::own_programs();
    let layout = WardenLayout {
        state_dir: &facts.warden_home,
        socket: socket.as_deref(),
        node_state: Some(&node_state),
        home: &facts.home,
        programs: &programs,
    };
    let authorized = Authorized {
        writable: &auth.writable_paths,
        readable: &auth.readable_extra_paths,
    };
    warden_paths(&layout, authorized).map_err(anyhow::Error::from)
}

/// The sandbox policy's paths for `auth` and `protection`.
fn layout_policy(auth: &PathAuthorization, protection: &[Protection]) -> SandboxPolicy {
    let (hidden_paths, read_only_paths) = plan_paths(protection);
    SandboxPolicy {
        writable_paths: auth.writable_paths.clone(),
        readable_extra_paths: auth.readable_extra_paths.clone(),
        hidden_paths,
        read_only_paths,
        ..Default::default()
    }
}

/// Why host=sandbox commands are refused when the operator switched the backend off.
pub const SANDBOX_OFF: &str = "sandbox.backend = \"off\": the sandbox host is switched off and its commands are refused (use host=gateway, or `warden sandbox direct --ttl 10m` to run them unconfined for a while)";

/// The sandbox route for the configured backend, or its diagnosis.
fn sandbox_route(
    config: &Config,
    layout: SandboxPolicy,
    containment: Containment,
    probe_cache: &Path,
) -> SandboxRoute {
    let policy = SandboxPolicy {
        network: crate::egress_gate::sandbox_network(config),
        // config.toml accepts only auto|required|off; anything else would have been
        // refused when it was loaded, and an unknown value must never weaken the sandbox.
        landlock: config
            .sandbox
            .landlock
            .parse()
            .unwrap_or(LandlockMode::Required),
        ..layout
    };
    let shells: Result<SandboxShells, String> = match config.sandbox.backend {
        SandboxBackend::Bwrap => sandbox_bwrap(config, policy, containment, probe_cache),
        // Nothing on macOS stands between a command and the network but the profile:
        // refused, never run with more network than asked.
        SandboxBackend::Macos if policy.network == sandbox::Network::Proxy => Err(
            "sandbox.network = \"proxy\" is not available with the macos backend yet: use network = false".to_owned(),
        ),
        SandboxBackend::Macos => {
            sandbox::seatbelt::SeatbeltShell::new(policy.clone(), Profile::ReadOnly)
                .and_then(|ro| {
                    Ok((
                        ro,
                        sandbox::seatbelt::SeatbeltShell::new(policy, Profile::Writable)?,
                    ))
                })
                .map(|(ro, rw)| {
                    let ro: Arc<dyn Shell> = Arc::new(ro);
                    SandboxShells {
                        readonly: Arc::clone(&ro),
                        watched: ro,
                        writable: Arc::new(rw),
                        unconfined: None,
                        read_only_unavailable: None,
                        network: crate::egress_gate::planned_network(config),
                    }
                })
                .map_err(|e| e.0)
        }
        SandboxBackend::Container => sandbox_container(config, &policy),
        // The sandbox host is switched off: its commands are refused, never run unconfined
        // (only a time-limited `warden sandbox direct` does that).
        SandboxBackend::Off => Err(SANDBOX_OFF.to_owned()),
    };
    match shells {
        Err(why) => SandboxRoute::Unavailable(why),
        Ok(shells) => SandboxRoute::Available(Executor::Sandbox(shells)),
    }
}

/// The configured container, checked for `policy`. Where it cannot run commands
/// read-only, no read-only shell exists: the runner refuses `readonly` and `approval`
/// with the reason instead of running them writable.
fn sandbox_container(config: &Config, policy: &SandboxPolicy) -> Result<SandboxShells, String> {
    let mut container = sandbox::container::Container::connect(container_config(config), policy)
        .map_err(|e| e.0)?;
    if policy.network == sandbox::Network::Proxy {
        // Each run's listener is made inside the container by the helper binary.
        let helper = crate::host::helper_binary().map_err(|e| format!("{e:#}"))?;
        container = container.with_egress(sandbox::container::ContainerEgress {
            egress: crate::egress_gate::egress(config),
            helper,
        });
    }
    // Without a read-only view the read-only shell refuses whatever reaches it; the
    // runner refuses these modes before that, with the reason.
    let readonly: Arc<dyn Shell> = Arc::new(container.shell(Profile::ReadOnly));
    Ok(SandboxShells {
        watched: Arc::clone(&readonly),
        readonly,
        writable: Arc::new(container.shell(Profile::Writable)),
        unconfined: None,
        read_only_unavailable: container.read_only().err().map(|e| e.to_string()),
        network: crate::egress_gate::planned_network(config),
    })
}

/// `[sandbox] container.*` as the container backend takes it.
pub fn container_config(config: &Config) -> sandbox::container::ContainerConfig {
    sandbox::container::ContainerConfig {
        engine: config.sandbox.container_engine.clone(),
        container: config.sandbox.container_name.clone().unwrap_or_default(),
        engine_dirs: sandbox::container::TRUSTED_ENGINE_DIRS
            .iter()
            .map(PathBuf::from)
            .collect(),
    }
}

fn sandbox_bwrap(
    config: &Config,
    policy: SandboxPolicy,
    containment: Containment,
    probe_cache: &Path,
) -> Result<SandboxShells, String> {
    let builder = config.sandbox.builder;
    let helper = crate::host::helper_binary().map_err(|e| format!("{e:#}"))?;
    let bubblewrap =
        |policy: SandboxPolicy, helper: OpenedProgram| -> Result<NamespaceSandbox, String> {
            let dirs: Vec<PathBuf> = sandbox::namespace::TRUSTED_BWRAP_DIRS
                .iter()
                .map(PathBuf::from)
                .collect();
            let bwrap = NamespaceSandbox::new(policy, helper, &dirs).map_err(|e| e.0)?;
            // bubblewrap present is not enough: the kernel must let it build its namespaces
            // (a success is remembered under a key of the kernel, its settings and
            // bubblewrap).
            if let Some(path) = bwrap.bwrap_path() {
                sandbox::probe_cache::namespaces_work_cached(path, probe_cache)
                    .map_err(|e| e.to_string())?;
            }
            Ok(bwrap)
        };
    // The same question of Warden's own builder, remembered the same way.
    let warden =
        |policy: SandboxPolicy, helper: OpenedProgram| -> Result<NamespaceSandbox, String> {
            let bwrap = NamespaceSandbox::built_by_warden(policy, helper).map_err(|e| e.0)?;
            sandbox::probe_cache::builder_works_cached(bwrap.helper(), probe_cache)
                .map_err(|e| e.to_string())?;
            Ok(bwrap)
        };
    let bwrap = match builder {
        policy::NamespaceBuilder::Bubblewrap => bubblewrap(policy, helper)?,
        policy::NamespaceBuilder::Warden => warden(policy, helper)?,
        // Both build the same sandbox: falling back loses start-up time, no isolation.
        policy::NamespaceBuilder::Auto => match warden(policy.clone(), helper.clone()) {
            Ok(bwrap) => bwrap,
            Err(own) => bubblewrap(policy, helper).map_err(|bw| {
                format!("{bw}; Warden's own namespace builder cannot run either: {own}")
            })?,
        },
    };
    let mut bwrap = bwrap.with_containment(containment);
    if bwrap.policy().network == sandbox::Network::Proxy {
        bwrap = bwrap.with_egress(crate::egress_gate::egress(config));
    }
    let bwrap = Arc::new(bwrap);
    Ok(SandboxShells {
        readonly: Arc::new(bwrap.shell(Profile::ReadOnly)),
        watched: Arc::new(bwrap.watched_shell()),
        writable: Arc::new(bwrap.shell(Profile::Writable)),
        unconfined: None,
        read_only_unavailable: None,
        network: crate::egress_gate::planned_network(config),
    })
}

/// One protected path as `warden doctor` reports it: where it really is, and the
/// ancestors a writable sandbox run pins so that nothing can rename them.
pub struct ProtectionReport {
    /// The path, where it lies and shows.
    pub protection: Protection,
    /// Its pinned ancestors (empty outside the writable paths).
    pub pinned: Vec<PathBuf>,
    /// Where a writable run binds it read-only (Warden's programs inside a writable path).
    pub locked: Vec<PathBuf>,
}

impl HostFacts {
    /// Warden's own directories on this host — the state directory and the approver
    /// socket's — at every place they show (real paths and mount-table aliases): what an
    /// allowlisted command run outside the sandbox may not name (`policy::protected`).
    pub fn own_directories(&self, store: &Store) -> Vec<PathBuf> {
        let socket = store.load().ok().map(|s| store.socket_path(&s.file));
        let mut dirs = vec![sandbox::protect::ProtectedPath::warden_dir(
            self.warden_home.clone(),
            "state directory",
        )];
        if let Some(dir) = socket.as_deref().and_then(Path::parent)
            && !dir.starts_with(&self.warden_home)
        {
            dirs.push(sandbox::protect::ProtectedPath::warden_dir(
                dir.to_path_buf(),
                "approver socket dir",
            ));
        }
        let table = caps::mounts::read_mount_table().unwrap_or_default();
        let none = Authorized {
            writable: &[],
            readable: &[],
        };
        match sandbox::protect::protect(&dirs, none, &table) {
            Ok(found) => plan_paths(&found).0,
            // Where they cannot be resolved, their paths as named still count.
            Err(_) => dirs.into_iter().map(|d| d.path).collect(),
        }
    }

    /// The direct-mode switch of this host.
    pub fn direct_switch(&self) -> DirectSwitch {
        DirectSwitch::new(
            self.fs(),
            self.warden_home.clone(),
            self.uid,
            Arc::new(SystemClock),
        )
    }

    /// What the sandbox keeps out of reach for `workspace` (default: the current
    /// directory), or why this layout is refused.
    pub fn protection(&self, workspace: Option<&Path>) -> anyhow::Result<Vec<ProtectionReport>> {
        let config = self.config()?;
        let workspace = std::fs::canonicalize(self.absolute(workspace.unwrap_or(&self.cwd)))?;
        let auth = authorization(&config, &workspace)?;
        let protection = protected(self, &self.store(), &auth)?;
        let policy = layout_policy(&auth, &protection);
        let plan = sandbox::mounts::MountPlan::new(&policy, true, false);
        Ok(protection
            .into_iter()
            .map(|protection| ProtectionReport {
                pinned: plan
                    .pinned()
                    .filter(|pin| protection.places().any(|p| p.starts_with(pin)))
                    .map(Path::to_path_buf)
                    .collect(),
                locked: plan
                    .locked()
                    .filter(|lock| protection.places().any(|p| p == *lock))
                    .map(Path::to_path_buf)
                    .collect(),
                protection,
            })
            .collect())
    }

    /// `warden doctor`'s checks of the container backend, against the paths commands in
    /// the current directory would be authorized for.
    pub fn container_checks(&self) -> anyhow::Result<Vec<sandbox::probe::Check>> {
        let config = self.config()?;
        let workspace = std::fs::canonicalize(&self.cwd)?;
        let auth = authorization(&config, &workspace)?;
        let protection = protected(self, &self.store(), &auth)?;
        let policy = SandboxPolicy {
            network: crate::egress_gate::sandbox_network(&config),
            ..layout_policy(&auth, &protection)
        };
        Ok(sandbox::container::diagnose(
            &container_config(&config),
            &policy,
        ))
    }

    /// The sandbox's layout for `workspace` (default: the current directory): the
    /// authorized paths and what is hidden, as a run sees them.
    pub fn sandbox_layout(&self, workspace: Option<&Path>) -> anyhow::Result<SandboxPolicy> {
        let config = self.config()?;
        let workspace = std::fs::canonicalize(self.absolute(workspace.unwrap_or(&self.cwd)))?;
        self.layout_for(&config, &self.store(), &workspace)
    }

    /// The sandbox's layout under `config` for `workspace` (its authorized paths checked,
    /// the protected set worked out for them), as a live edit of `[sandbox]` needs it.
    fn layout_for(
        &self,
        config: &Config,
        store: &Store,
        workspace: &Path,
    ) -> anyhow::Result<SandboxPolicy> {
        let auth = authorization(config, workspace)?;
        let protection = protected(self, store, &auth)?;
        Ok(layout_policy(&auth, &protection))
    }

    /// `workspace` (default: the current directory), absolute and resolved.
    pub fn workspace(&self, workspace: Option<&Path>) -> anyhow::Result<PathBuf> {
        let workspace = self.absolute(workspace.unwrap_or(&self.cwd));
        std::fs::canonicalize(&workspace)
            .with_context(|| format!("workspace {} is not accessible", workspace.display()))
    }

    /// The runner's view of this host — its files, `store`, `config`, environment, trusted
    /// PATH and approver socket — starting requests without a cwd in `workspace`. The
    /// gateway and a node are built on the same one.
    pub fn runner_host(
        &self,
        store: &Store,
        config: LiveConfig,
        workspace: &Path,
        protected: Vec<PathBuf>,
    ) -> HostContext {
        self.runner_host_asking(store, config, workspace, protected, false)
    }

    /// [`HostFacts::runner_host`]; with `here`, a question nobody else can answer is
    /// asked at this terminal, if there is one (`warden exec`).
    fn runner_host_asking(
        &self,
        store: &Store,
        config: LiveConfig,
        workspace: &Path,
        protected: Vec<PathBuf>,
        here: bool,
    ) -> HostContext {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let timeout = approvals::ipc::DEFAULT_APPROVAL_TIMEOUT;
        let socket = SocketApprovals::new(store.clone(), Arc::clone(&clock), timeout);
        let approvals: Arc<dyn runner::Approvals> = if here && InlineApprovals::possible() {
            Arc::new(InlineApprovals::new(socket, timeout))
        } else {
            Arc::new(socket)
        };
        let audit = self.audit(&config.in_force());
        HostContext::builder(self.fs(), store.clone(), config)
            .audit(audit)
            .protected(protected)
            .env(self.env.clone())
            .trusted_path(self.trusted_path.clone())
            .default_cwd(workspace)
            .approvals(approvals)
            .clock(clock)
            .build()
    }

    /// The gateway of this host, with `workspace` (default: the current directory) as the
    /// default working directory and file-tools root.
    pub fn gateway(&self, workspace: Option<&Path>) -> anyhow::Result<Gateway> {
        self.gateway_with_nodes(workspace, None)
    }

    /// [`HostFacts::gateway`], serving `host = node` through `nodes`.
    pub fn gateway_with_nodes(
        &self,
        workspace: Option<&Path>,
        nodes: Option<Arc<bridge::Hub>>,
    ) -> anyhow::Result<Gateway> {
        self.gateway_serving(workspace, nodes, false)
    }

    /// [`HostFacts::gateway`] for `warden exec`: a question nobody else can answer is
    /// asked at this terminal, if stdin and stderr are one.
    pub fn gateway_asking_here(&self) -> anyhow::Result<Gateway> {
        self.gateway_serving(None, None, true)
    }

    fn gateway_serving(
        &self,
        workspace: Option<&Path>,
        nodes: Option<Arc<bridge::Hub>>,
        ask_here: bool,
    ) -> anyhow::Result<Gateway> {
        let config = self.config()?;
        let store = self.store();
        let workspace = self.workspace(workspace)?;
        let auth = authorization(&config, &workspace)?;
        let protection = protected(self, &store, &auth)?;
        let places = |keep: fn(&Protection) -> bool| -> Vec<PathBuf> {
            protection
                .iter()
                .filter(|p| keep(p))
                .flat_map(|p| p.places().map(Path::to_path_buf))
                .collect()
        };
        let host = self.runner_host_asking(
            &store,
            self.live_config(config.clone()),
            &workspace,
            places(|p| p.warden_owned),
            ask_here,
        );
        let containment = self.containment()?;
        let local: Arc<dyn Shell> = Arc::new(LocalShell::contained(containment.clone()));
        // Probing the sandbox backend starts processes: only when a command needs it, and
        // again when a live edit changes `[sandbox]` (its paths give a new layout).
        let sandbox = {
            let started = (config.sandbox.clone(), layout_policy(&auth, &protection));
            let (facts, store, workspace) = (self.clone(), store.clone(), workspace.clone());
            // In Warden's protected state directory: no command can plant an answer.
            let probe_cache = self.warden_home.join("cache").join("sandbox-probe");
            SandboxRoute::following(move |config: &Config| {
                let layout = if config.sandbox == started.0 {
                    started.1.clone()
                } else {
                    match facts.layout_for(config, &store, &workspace) {
                        Ok(layout) => layout,
                        Err(e) => {
                            return SandboxRoute::Unavailable(format!(
                                "the sandbox's paths in config.toml cannot be used: {e:#}"
                            ));
                        }
                    }
                };
                sandbox_route(config, layout, containment.clone(), &probe_cache)
            })
        };
        let routes = Routes {
            gateway: Executor::Plain {
                shell: Arc::clone(&local),
                host: RunHost::Gateway,
            },
            sandbox,
            direct: Some(DirectMode {
                executor: Executor::Sandbox(same_shell(
                    local,
                    Some("direct mode, switched on by the operator"),
                )),
                switch: self.direct_switch(),
            }),
            node: nodes,
        };
        // The file tools work inside the home (a workspace often is there): they are kept
        // from Warden's own directories (wherever they show), and write nothing into the
        // directories of Warden's programs.
        let files = FileTools::open(
            &auth,
            places(|p| p.warden_owned),
            places(|p| p.guard == Guard::ReadOnly),
            &|root, guard| Ok(Arc::new(caps::BoundedFs::open(root)?.with_guard(guard))),
        )?;
        let settings = &config.gateway;
        Ok(Gateway::new(Runner::new(host), routes, Some(files))
            .with_limits(
                settings
                    .max_runs_per_agent
                    .unwrap_or(gateway::DEFAULT_RUNS_PER_AGENT),
                settings
                    .max_sessions_per_credential
                    .unwrap_or(gateway::http::DEFAULT_SESSIONS_PER_CREDENTIAL),
            )
            .with_runs_kept_after_session(settings.keep_runs_after_session.unwrap_or_default()))
    }
}
