//! Composition: the gateway of this host, built from `config.toml`, the approvals file
//! and the machine — the local runner for `host=gateway`, the configured OS sandbox for
//! `host=sandbox` (or its diagnosis when unavailable), the operator's direct-mode switch,
//! and the file tools over the authorized paths.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use approvals::{Clock, Store, SystemClock};
use caps::{Fs, LocalShell, Shell, WriteOptions};
use gateway::{DirectMode, FileTools, Gateway, PathAuthorization, SandboxRoute};
use policy::{Config, SandboxBackend};
use runner::{Gate, Runner, RunnerHost, SandboxShells, SocketApprovals};
use sandbox::{Bwrap, LandlockMode, Profile, SandboxPolicy};

use crate::host::HostFacts;

/// Longest direct-mode window an operator may open.
pub const MAX_DIRECT_TTL: Duration = Duration::from_secs(24 * 3600);

/// The direct-mode switch file.
pub fn direct_mode_path(facts: &HostFacts) -> PathBuf {
    facts.warden_home.join("direct-mode.json")
}

/// Until when direct mode is on (ms since the epoch), if it is on now. The switch file
/// turns the sandbox off, so it is believed only when it is a regular file of ours that
/// nobody else can write, naming a moment no further ahead than [`MAX_DIRECT_TTL`].
pub fn active_direct_mode(fs: &dyn Fs, path: &Path, uid: u32) -> Option<u64> {
    let meta = fs.symlink_metadata(path).ok()?;
    if meta.kind != caps::FileKind::File || meta.uid != uid || meta.mode & 0o022 != 0 {
        tracing::warn!(
            "ignoring {}: not a private file of uid {uid}",
            path.display()
        );
        return None;
    }
    let text = fs.read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let until = v["until"].as_u64()?;
    let now = SystemClock.now_ms();
    (until > now && until - now <= MAX_DIRECT_TTL.as_millis() as u64).then_some(until)
}

/// Turn direct mode on for `ttl` (or off with `None`).
pub fn set_direct_mode(facts: &HostFacts, ttl: Option<Duration>) -> anyhow::Result<Option<u64>> {
    let fs = facts.fs();
    let path = direct_mode_path(facts);
    match ttl {
        None => {
            match fs.remove(&path) {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
            Ok(None)
        }
        Some(ttl) => {
            anyhow::ensure!(
                !ttl.is_zero() && ttl <= MAX_DIRECT_TTL,
                "the TTL must be between 1 second and 24 hours"
            );
            let until = SystemClock.now_ms() + ttl.as_millis() as u64;
            fs.create_dir_all(&facts.warden_home, 0o700)?;
            let body = serde_json::json!({ "until": until, "ttlSeconds": ttl.as_secs() });
            fs.write_atomic(&path, body.to_string().as_bytes(), WriteOptions::private())?;
            Ok(Some(until))
        }
    }
}

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

fn runner_host(
    facts: &HostFacts,
    config: &Config,
    store: &Store,
    workspace: &Path,
    label: &str,
    shell: Arc<dyn Shell>,
    gate: Gate,
) -> RunnerHost {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    RunnerHost {
        label: label.into(),
        fs: facts.fs(),
        shell,
        store: store.clone(),
        config: config.clone(),
        host_env: facts.env.clone(),
        trusted_path: facts.trusted_path.clone(),
        default_cwd: workspace.to_path_buf(),
        approvals: Arc::new(SocketApprovals::new(
            store.clone(),
            Arc::clone(&clock),
            approvals::ipc::DEFAULT_APPROVAL_TIMEOUT,
        )),
        clock,
        gate,
    }
}

/// One shell for every profile: a backend whose profiles do not differ (container, off)
/// or that cannot watch writes (macOS, for the watched one).
fn same_shell(shell: Arc<dyn Shell>, unconfined: Option<&str>) -> SandboxShells {
    SandboxShells {
        readonly: Arc::clone(&shell),
        watched: Arc::clone(&shell),
        writable: shell,
        unconfined: unconfined.map(str::to_owned),
    }
}

/// What a sandboxed command must not see or change besides the emptied `/home`, `/root`,
/// `/run`: Warden's state (config, approvals file, direct-mode switch, tokens), the
/// approver socket's directory when configured elsewhere, and the user's home wherever it
/// is (service accounts often live under `/var/lib`). The state and socket directories
/// are created if missing, so no command can create them first; a layout a command could
/// redirect is refused with the fix.
pub fn protected_paths(
    facts: &HostFacts,
    store: &Store,
    writable: &[PathBuf],
) -> Result<Vec<sandbox::protect::Protection>, String> {
    use sandbox::protect::{ProtectedPath, protect};
    let mut paths = vec![ProtectedPath::warden_dir(
        facts.warden_home.clone(),
        "state directory",
    )];
    if let Ok(snapshot) = store.load()
        && let Some(dir) = store.socket_path(&snapshot.file).parent()
        && !dir.starts_with(&facts.warden_home)
    {
        paths.push(ProtectedPath::warden_dir(
            dir.to_path_buf(),
            "approver socket dir",
        ));
    }
    let home = std::fs::canonicalize(&facts.home).unwrap_or_else(|_| facts.home.clone());
    if hideable(&home) {
        paths.push(ProtectedPath::hidden_if_present(home, "home directory"));
    }
    protect(&paths, writable).map_err(|e| e.0)
}

/// Whether hiding `dir` leaves the system usable: not `/`, not a top-level directory,
/// nothing programs are loaded from.
fn hideable(dir: &Path) -> bool {
    const SYSTEM: &[&str] = &[
        "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/sys",
        "/dev", "/opt", "/nix",
    ];
    dir.components().count() > 2 && !SYSTEM.iter().any(|s| dir.starts_with(s))
}

/// Why host=sandbox commands are refused when the operator switched the backend off.
pub const SANDBOX_OFF: &str = "sandbox.backend = \"off\": the sandbox host is switched off and its commands are refused (use host=gateway, or `warden sandbox direct --ttl 10m` to run them unconfined for a while)";

/// The sandbox route for the configured backend, or its diagnosis.
fn sandbox_route(
    facts: &HostFacts,
    config: &Config,
    store: &Store,
    workspace: &Path,
    auth: &PathAuthorization,
    hidden: Vec<PathBuf>,
) -> SandboxRoute {
    let policy = SandboxPolicy {
        writable_paths: auth.writable_paths.clone(),
        readable_extra_paths: auth.readable_extra_paths.clone(),
        hidden_paths: hidden,
        network: config.sandbox.network,
        // config.toml accepts only auto|required|off; anything else would have been
        // refused when it was loaded, and an unknown value must never weaken the sandbox.
        landlock: config
            .sandbox
            .landlock
            .parse()
            .unwrap_or(LandlockMode::Required),
    };
    let shells: Result<SandboxShells, String> = match config.sandbox.backend {
        SandboxBackend::Bwrap => sandbox_bwrap(policy),
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
                    }
                })
                .map_err(|e| e.0)
        }
        SandboxBackend::Container => {
            let container = sandbox::container::ContainerConfig {
                engine: config.sandbox.container_engine.clone(),
                container: config.sandbox.container_name.clone().unwrap_or_default(),
                engine_dirs: sandbox::container::TRUSTED_ENGINE_DIRS
                    .iter()
                    .map(PathBuf::from)
                    .collect(),
            };
            sandbox::container::ContainerShell::new(container)
                .map(|c| same_shell(Arc::new(c), None))
                .map_err(|e| e.0)
        }
        // The sandbox host is switched off: its commands are refused, never run unconfined
        // (only a time-limited `warden sandbox direct` does that).
        SandboxBackend::Off => Err(SANDBOX_OFF.to_owned()),
    };
    match shells {
        Err(why) => SandboxRoute::Unavailable(why),
        Ok(shells) => {
            let label = "sandbox";
            let writable = Arc::clone(&shells.writable);
            let gate = Gate::Sandbox(shells);
            SandboxRoute::Available(Box::new(Runner::new(runner_host(
                facts, config, store, workspace, label, writable, gate,
            ))))
        }
    }
}

fn sandbox_bwrap(policy: SandboxPolicy) -> Result<SandboxShells, String> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot locate the warden binary for the sandbox helper: {e}"))?;
    // The dedicated helper binary when installed next to `warden`; else `warden` itself.
    let small = exe.with_file_name("warden-sandbox-helper");
    let helper = if small.is_file() { small } else { exe };
    let dirs: Vec<PathBuf> = sandbox::bwrap::TRUSTED_BWRAP_DIRS
        .iter()
        .map(PathBuf::from)
        .collect();
    let bwrap = Arc::new(Bwrap::new(policy, helper, &dirs).map_err(|e| e.0)?);
    // bubblewrap present is not enough: the kernel must let it build its namespaces.
    sandbox::probe::namespaces_work(bwrap.bwrap_path())?;
    Ok(SandboxShells {
        readonly: Arc::new(bwrap.shell(Profile::ReadOnly)),
        watched: Arc::new(bwrap.watched_shell()),
        writable: Arc::new(bwrap.shell(Profile::Writable)),
        unconfined: None,
    })
}

/// One protected path as `warden doctor` reports it: where it really is, and the
/// ancestors a writable sandbox run pins so that nothing can rename them.
pub struct ProtectionReport {
    /// The path and where it lies.
    pub protection: sandbox::protect::Protection,
    /// Its pinned ancestors (empty outside the writable paths).
    pub pinned: Vec<PathBuf>,
}

impl HostFacts {
    /// What the sandbox keeps out of reach for `workspace` (default: the current
    /// directory), or why this layout is refused.
    pub fn protection(&self, workspace: Option<&Path>) -> anyhow::Result<Vec<ProtectionReport>> {
        let config = self.config()?;
        let workspace = std::fs::canonicalize(self.absolute(workspace.unwrap_or(&self.cwd)))?;
        let auth = authorization(&config, &workspace)?;
        let protection = protected_paths(self, &self.store(), &auth.writable_paths)
            .map_err(|why| anyhow::anyhow!("{why}"))?;
        let policy = SandboxPolicy {
            writable_paths: auth.writable_paths,
            readable_extra_paths: auth.readable_extra_paths,
            hidden_paths: protection.iter().map(|p| p.real.clone()).collect(),
            ..Default::default()
        };
        let plan = sandbox::mounts::MountPlan::new(&policy, true, false);
        Ok(protection
            .into_iter()
            .map(|protection| ProtectionReport {
                pinned: plan
                    .pinned()
                    .filter(|pin| protection.real.starts_with(pin))
                    .map(Path::to_path_buf)
                    .collect(),
                protection,
            })
            .collect())
    }

    /// The gateway of this host, with `workspace` (default: the current directory) as the
    /// default working directory and file-tools root.
    pub fn gateway(&self, workspace: Option<&Path>) -> anyhow::Result<Gateway> {
        let config = self.config()?;
        let store = self.store();
        let workspace = self.absolute(workspace.unwrap_or(&self.cwd));
        let workspace = std::fs::canonicalize(&workspace)
            .with_context(|| format!("workspace {} is not accessible", workspace.display()))?;
        let auth = authorization(&config, &workspace)?;
        // What commands and file tools must never reach, checked (and the directories
        // created) before anything runs; a layout a command could redirect is refused.
        let protection = protected_paths(self, &store, &auth.writable_paths)
            .map_err(|why| anyhow::anyhow!("{why}"))?;
        let local: Arc<dyn Shell> = Arc::new(LocalShell::new());
        let gateway_runner = Runner::new(runner_host(
            self,
            &config,
            &store,
            &workspace,
            "gateway",
            Arc::clone(&local),
            Gate::Policy,
        ));
        // Probing the sandbox backend starts processes: only when a command needs it.
        let sandbox = {
            let (facts, config, store) = (self.clone(), config.clone(), store.clone());
            let (workspace, auth) = (workspace.clone(), auth.clone());
            let hidden: Vec<PathBuf> = protection.iter().map(|p| p.real.clone()).collect();
            SandboxRoute::deferred(move || {
                sandbox_route(&facts, &config, &store, &workspace, &auth, hidden)
            })
        };
        // The file tools work inside the home (a workspace often is there): they are kept
        // from Warden's own directories only.
        let files = FileTools::open(
            &auth,
            protection
                .iter()
                .filter(|p| p.warden_owned)
                .map(|p| p.real.clone())
                .collect(),
        )?;
        let direct_runner = Runner::new(runner_host(
            self,
            &config,
            &store,
            &workspace,
            "direct",
            Arc::clone(&local),
            Gate::Sandbox(same_shell(
                local,
                Some("direct mode, switched on by the operator"),
            )),
        ));
        let fs = self.fs();
        let switch = direct_mode_path(self);
        let uid = self.uid;
        let direct = DirectMode {
            runner: Box::new(direct_runner),
            active: Box::new(move || active_direct_mode(fs.as_ref(), &switch, uid).is_some()),
        };
        Ok(Gateway::new(gateway_runner, sandbox, Some(files)).with_direct_mode(direct))
    }
}
