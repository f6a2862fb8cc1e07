//! Facts about this host and its user, read once from the process environment: where
//! Warden's state lives, whose it is, the trusted PATH, and the variables forwarded to
//! commands. Everything downstream receives these as values.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use approvals::{Store, StoreConfig};
use caps::LocalFs;
use caps::process::{Containment, OpenedProgram};
use policy::{CaseMode, Config, LiveConfig, Reload, RunLimits, TrustedPath};

/// Fallback search path when Warden's own PATH is unset.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What Warden knows about where it runs.
#[derive(Clone, Debug)]
pub struct HostFacts {
    /// `$WARDEN_HOME`, default `~/.warden`.
    pub warden_home: PathBuf,
    /// The user's home directory.
    pub home: PathBuf,
    /// The effective uid that owns Warden's state.
    pub uid: u32,
    /// The working directory Warden was started in.
    pub cwd: PathBuf,
    /// The trusted PATH (absolute entries of Warden's own PATH).
    pub trusted_path: TrustedPath,
    /// Warden's own environment (commands get only an allowlisted part of it).
    pub env: BTreeMap<String, String>,
    /// How runs are contained here, decided once (see [`HostFacts::containment`]).
    containment: Arc<std::sync::OnceLock<Containment>>,
    /// Which Warden this is, as the record names it (`gateway`, `mcp`, `exec`, …).
    pub origin: &'static str,
    /// The record, opened once per process and shared by every runner in it.
    audit: Arc<std::sync::OnceLock<Arc<dyn audit::AuditSink>>>,
}

impl HostFacts {
    /// Read the process environment.
    pub fn read() -> anyhow::Result<HostFacts> {
        let env: BTreeMap<String, String> = std::env::vars().collect();
        let home = match env.get("HOME").filter(|h| h.starts_with('/')) {
            Some(h) => PathBuf::from(h),
            None => {
                bail!("HOME is not set to an absolute path; Warden needs it for ~ and its state")
            }
        };
        let warden_home = match env.get("WARDEN_HOME").filter(|h| !h.is_empty()) {
            Some(h) if Path::new(h).is_absolute() => PathBuf::from(h),
            Some(h) => bail!("WARDEN_HOME must be an absolute path, got {h:?}"),
            None => home.join(".warden"),
        };
        let cwd = std::env::current_dir().context("cannot determine the working directory")?;
        let path = env.get("PATH").map(String::as_str).unwrap_or(DEFAULT_PATH);
        let mut trusted_path = TrustedPath::parse(path);
        if trusted_path.dirs().is_empty() {
            trusted_path = TrustedPath::parse(DEFAULT_PATH);
        }
        Ok(HostFacts {
            warden_home,
            home,
            uid: nix::unistd::geteuid().as_raw(),
            cwd,
            trusted_path,
            env,
            containment: Arc::default(),
            origin: {
                let args: Vec<String> = std::env::args().skip(1).take(2).collect();
                origin(
                    args.first().map(String::as_str),
                    args.get(1).map(String::as_str),
                )
            },
            audit: Arc::default(),
        })
    }

    /// The record this process writes to (`[audit]` in `config`; the first call decides
    /// for the whole process).
    pub fn audit(&self, config: &Config) -> Arc<dyn audit::AuditSink> {
        Arc::clone(self.audit.get_or_init(|| {
            if !config.audit.enabled {
                return Arc::new(audit::NoAudit);
            }
            let log: Arc<dyn audit::AuditSink> = Arc::new(audit::AuditLog::new(
                self.fs(),
                self.audit_dir(),
                self.origin,
                audit::Settings {
                    required: config.audit.required,
                    max_file_bytes: config.audit.max_file_size,
                },
            ));
            let _ = PROCESS_RECORD.set(Arc::clone(&log));
            log
        }))
    }

    /// Put a change of policy made by this command on the record: `file` (a name in the
    /// state directory) and what changed, in words — never a secret. A record that cannot
    /// be written is said on stderr: the change itself is made.
    pub fn record_policy(&self, file: &str, change: String) {
        let entry = audit::Entry::new(audit::Kind::Policy)
            .file(self.warden_home.join(file).to_string_lossy())
            .change(change);
        if let Err(e) = self.audit_sink().record(entry) {
            eprintln!("warden: warning: this change is not on the record: {e}");
        }
    }

    /// Where the record is kept: `$WARDEN_HOME/audit`.
    pub fn audit_dir(&self) -> PathBuf {
        self.warden_home.join("audit")
    }

    /// The real filesystem.
    pub fn fs(&self) -> Arc<LocalFs> {
        // "/" is absolute, so this cannot fail.
        Arc::new(LocalFs::new("/").unwrap_or_else(|_| unreachable!()))
    }

    /// This host's approvals store, checking entries against the shipped profiles and
    /// `$WARDEN_HOME/profiles.toml` (a file that cannot be used makes the host deny
    /// everything, naming the problem).
    pub fn store(&self) -> Store {
        let fs = self.fs();
        let profiles = policy::Profiles::load(
            fs.as_ref(),
            &self.warden_home.join(policy::profiles::USER_FILE),
        )
        .map_err(|e| format!("{e}; this host denies every command until it is fixed"));
        Store::new(
            fs,
            StoreConfig {
                path: self.warden_home.join("exec-approvals.json"),
                owner_uid: self.uid,
                home: self.home.clone(),
                case: CaseMode::for_this_platform(),
            },
        )
        .with_profiles(profiles)
        .with_audit(self.audit_sink())
    }

    /// The record, as [`HostFacts::audit`] opened it, or opened now with this host's
    /// config (an unreadable config: the default settings — a record is kept).
    fn audit_sink(&self) -> Arc<dyn audit::AuditSink> {
        if let Some(sink) = self.audit.get() {
            return Arc::clone(sink);
        }
        let config = self.config().unwrap_or_default();
        self.audit(&config)
    }

    /// `$WARDEN_HOME/config.toml` (missing means defaults), with the default run limits
    /// of this machine.
    pub fn config(&self) -> anyhow::Result<Config> {
        let fs = self.fs();
        let mut config =
            Config::load(fs.as_ref(), &policy::config::config_path(&self.warden_home))?;
        if let Some(total) = total_memory() {
            config.default_limits = RunLimits::for_host(total);
        }
        Ok(config)
    }

    /// `config` (as [`HostFacts::config`] read it at start) following `config.toml` from
    /// now on: each edit is in force for the next request, given this machine's default
    /// run limits; an edit that does not parse keeps `config` (or the last good one) and
    /// is said in the log (stderr) and on the record until it is fixed.
    pub fn live_config(&self, config: Config) -> LiveConfig {
        let path = policy::config::config_path(&self.warden_home);
        let memory = total_memory();
        let facts = self.clone();
        LiveConfig::watching(
            self.fs(),
            path,
            config,
            Box::new(move |config| {
                if let Some(total) = memory {
                    config.default_limits = RunLimits::for_host(total);
                }
            }),
        )
        .on_reload(Box::new(move |reload| facts.said_reload(reload)))
    }

    /// What a reload of `config.toml` did, said in the log and put on the record.
    fn said_reload(&self, reload: &Reload) {
        let change = match reload {
            Reload::Applied {
                changed,
                at_restart,
            } => {
                let what = if changed.is_empty() {
                    "the edit is fixed; the file as it is now is in force".to_owned()
                } else {
                    format!("in force for new requests; changed: {}", changed.join(", "))
                };
                tracing::info!("config.toml reloaded: {what}");
                if !at_restart.is_empty() {
                    tracing::warn!(
                        "config.toml: {} changed, which is read only when this process starts: restart it to apply",
                        at_restart.join(", ")
                    );
                }
                let later = if at_restart.is_empty() {
                    String::new()
                } else {
                    format!("; {} at the next restart", at_restart.join(", "))
                };
                format!("reloaded: {what}{later}")
            }
            Reload::Refused { problem } => {
                tracing::warn!(
                    "config.toml: the edit is not in force ({problem}); the last good configuration is used until the file is fixed"
                );
                format!("edit refused, the last good configuration stays in force: {problem}")
            }
        };
        self.record_policy(policy::config::CONFIG_FILE, change);
    }

    /// A config read elsewhere (`text`; none: no file, the defaults), with the default
    /// run limits of this machine, as [`HostFacts::config`] would give it.
    pub fn parse_config(&self, text: Option<&str>) -> anyhow::Result<Config> {
        let path = policy::config::config_path(&self.warden_home);
        let mut config = match text {
            Some(text) => Config::parse(text, &path)?,
            None => Config::default(),
        };
        if let Some(total) = total_memory() {
            config.default_limits = RunLimits::for_host(total);
        }
        Ok(config)
    }

    /// How this host holds each run together (see `caps::process::Containment`): a
    /// cgroup per run where Warden may make one, else a subreaper run through the
    /// sandbox helper. `WARDEN_CONTAINMENT=subreaper` forces the fallback (to diagnose
    /// or test it); no setting weakens containment further. Decided once per process:
    /// every caller shares it (and the run cgroups it prepares).
    pub fn containment(&self) -> anyhow::Result<Containment> {
        if let Some(c) = self.containment.get() {
            return Ok(c.clone());
        }
        let helper = helper_binary()?.exec_path().to_path_buf();
        let chosen = match self.env.get("WARDEN_CONTAINMENT").map(String::as_str) {
            None | Some("") | Some("auto") => Containment::detect(Some(helper)),
            Some("subreaper") => Containment::subreaper(helper),
            Some(other) => bail!(
                "WARDEN_CONTAINMENT={other:?} is not understood: use \"auto\" (the default: a cgroup per run, else a subreaper) or \"subreaper\""
            ),
        };
        Ok(self.containment.get_or_init(|| chosen).clone())
    }

    /// A path given on the command line, made absolute against the start directory.
    pub fn absolute(&self, path: &Path) -> PathBuf {
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.cwd.join(path)
        }
    }
}

/// The record this process writes, for [`flush_record`].
static PROCESS_RECORD: std::sync::OnceLock<Arc<dyn audit::AuditSink>> = std::sync::OnceLock::new();

/// Write every record this process handed over before it exits (records that need not
/// wait for the disk are written by a thread of their own, batched).
pub fn flush_record() {
    if let Some(record) = PROCESS_RECORD.get() {
        record.flush();
    }
}

/// The record's name for the Warden started as `warden COMMAND SUBCOMMAND …`.
fn origin(command: Option<&str>, subcommand: Option<&str>) -> &'static str {
    match (command, subcommand) {
        (Some("gateway"), Some("run")) => "gateway",
        (Some("mcp"), _) => "mcp",
        (Some("exec"), _) => "exec",
        (Some("node"), _) => "node",
        (Some("approvals"), Some("ui")) => "approver",
        _ => "cli",
    }
}

/// The machine's memory (`MemTotal` of `/proc/meminfo`), if it can be read: read once
/// per process (a `warden exec` asks three times on its way to the run).
fn total_memory() -> Option<u64> {
    static TOTAL: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *TOTAL.get_or_init(|| {
        let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
        let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        kib.checked_mul(1024)
    })
}

/// The binary that runs inside the sandbox and as the subreaper, watchdog, companion and
/// namespace builder: the dedicated `warden-sandbox-helper` when installed next to
/// `warden`, else `warden` itself — opened once, and executed through that descriptor
/// ever after (`caps::process::OpenedProgram`): a file put in its place later is never
/// run.
pub fn helper_binary() -> anyhow::Result<OpenedProgram> {
    if let Some(small) = small_helper() {
        return Ok(small);
    }
    this_program()
}

/// This binary, opened once (`/proc/self/exe`).
pub fn this_program() -> anyhow::Result<OpenedProgram> {
    static THIS: std::sync::OnceLock<Result<OpenedProgram, String>> = std::sync::OnceLock::new();
    THIS.get_or_init(|| OpenedProgram::this_program().map_err(|e| e.to_string()))
        .clone()
        .map_err(|e| anyhow::anyhow!("cannot open the warden binary for the sandbox helper: {e}"))
}

/// The programs Warden executes outside any sandbox: this binary and the helper. Their
/// directories are part of the protected set (`sandbox::protect`).
pub fn own_programs() -> Vec<PathBuf> {
    let mut programs: Vec<PathBuf> = this_program()
        .map(|p| p.real_path().to_path_buf())
        .into_iter()
        .collect();
    if let Some(small) = small_helper() {
        programs.push(small.real_path().to_path_buf());
    }
    programs
}

/// The small helper binary's file name.
const SMALL_HELPER: &str = "warden-sandbox-helper";

/// The small helper binary next to `warden`, if it is installed, opened (looked up once:
/// the constructor that starts `warden exec`'s companion asks first).
pub fn small_helper() -> Option<OpenedProgram> {
    static SMALL: std::sync::OnceLock<Option<OpenedProgram>> = std::sync::OnceLock::new();
    SMALL
        .get_or_init(|| {
            let small = std::env::current_exe().ok()?.with_file_name(SMALL_HELPER);
            OpenedProgram::open(&small).ok()
        })
        .clone()
}
