//! The Linux namespace sandbox: a trusted `bwrap` (for the bubblewrap builder), and a
//! [`NamespaceSandbox`] checked when it is built — who builds its namespaces, the
//! helper, the policy, the seccomp programs, Landlock's ABI. Its command line for one run
//! is `command_line.rs`.

use std::path::{Path, PathBuf};

use caps::process::OpenedProgram;

use crate::{LandlockMode, SandboxError, SandboxPolicy, Unavailable, seccomp};

mod command_line;

pub use command_line::Launch;

/// Where bubblewrap may come from: system directories only, never a workspace or PATH.
pub const TRUSTED_BWRAP_DIRS: &[&str] = crate::trusted::TRUSTED_SYSTEM_DIRS;

/// Find a trustworthy `bwrap` in `dirs` (see [`crate::trusted::system_binary`]).
pub fn find_bwrap(dirs: &[PathBuf]) -> Result<PathBuf, Unavailable> {
    let problems = match crate::trusted::system_binary("bwrap", dirs) {
        Ok(path) => return Ok(path),
        Err(problems) => problems,
    };
    let searched: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    Err(Unavailable(if problems.is_empty() {
        format!(
            "bubblewrap (bwrap) was not found in the trusted directories {} — install it (Debian: apt-get install bubblewrap)",
            searched.join(", ")
        )
    } else {
        problems.join("; ")
    }))
}

/// The namespaces [`NamespaceSandbox::born_in`] asks for with Warden's builder and the network off
/// (the default): what a one-shot `warden exec` has its companion keep a process ready
/// in (`caps::process::prepare_companion`).
pub const DEFAULT_BORN_IN: caps::process::NewNamespaces = caps::process::NewNamespaces {
    user: true,
    mount: true,
    pid: true,
    ipc: true,
    uts: true,
    net: true,
};

/// Who builds a run's namespaces and mounts from the command line [`NamespaceSandbox`] writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Builder {
    /// bubblewrap (this trusted binary), which then executes the helper.
    Bubblewrap(PathBuf),
    /// The helper binary itself (`crate::builder`): one process start fewer, and the
    /// mount plan applied with the new mount API.
    Warden,
}

/// A configured Linux sandbox (built by bubblewrap, or by Warden's own builder).
#[derive(Debug)]
pub struct NamespaceSandbox {
    builder: Builder,
    /// The helper binary, opened once and executed through its descriptor.
    helper: OpenedProgram,
    policy: SandboxPolicy,
    landlock_abi: i64,
    seccomp_eperm: Vec<u8>,
    seccomp_enosys: Vec<u8>,
    /// What holds each run (bubblewrap and everything in its pid namespace) and bounds
    /// its processes and memory.
    containment: caps::process::Containment,
    /// How `proxy` mode's connections are decided (`None`: a proxy run is refused).
    egress: Option<crate::Egress>,
}

/// Landlock required by `policy` on a kernel (ABI `abi`) without it: refused up front.
fn refuse_missing_landlock(policy: &SandboxPolicy, abi: i64) -> Result<(), Unavailable> {
    if policy.landlock == LandlockMode::Required && abi < 1 {
        return Err(Unavailable(
            "Landlock is required (sandbox.landlock = \"required\") but this kernel does not support it".into(),
        ));
    }
    Ok(())
}

impl NamespaceSandbox {
    /// A sandbox with `policy`, using `helper` (the `warden` binary, opened) inside. Fails
    /// closed with a diagnosis if bubblewrap is missing or untrusted, or Landlock is
    /// required and unsupported.
    pub fn new(
        policy: SandboxPolicy,
        helper: OpenedProgram,
        bwrap_dirs: &[PathBuf],
    ) -> Result<NamespaceSandbox, Unavailable> {
        NamespaceSandbox::for_landlock_abi(policy, helper, bwrap_dirs, crate::landlock::abi())
    }

    /// [`NamespaceSandbox::new`] on a kernel that offers Landlock ABI `abi` (0: none). Tests use it
    /// to see the fail-closed side on any kernel: a kernel without Landlock cannot be had
    /// on demand. A lower `abi` than the kernel's only ever makes the sandbox refuse more
    /// (required Landlock, exec allowlists) or leave out its `auto` layer.
    pub fn for_landlock_abi(
        policy: SandboxPolicy,
        helper: OpenedProgram,
        bwrap_dirs: &[PathBuf],
        abi: i64,
    ) -> Result<NamespaceSandbox, Unavailable> {
        refuse_missing_landlock(&policy, abi)?;
        let bwrap = find_bwrap(bwrap_dirs)?;
        NamespaceSandbox::with_builder(policy, helper, Builder::Bubblewrap(bwrap), abi)
    }

    /// A sandbox with `policy` whose namespaces Warden's own builder makes, in the
    /// `helper` binary (see [`crate::builder`]); bubblewrap is not needed. The same
    /// fail-closed checks as [`NamespaceSandbox::new`].
    pub fn built_by_warden(
        policy: SandboxPolicy,
        helper: OpenedProgram,
    ) -> Result<NamespaceSandbox, Unavailable> {
        NamespaceSandbox::with_builder(policy, helper, Builder::Warden, crate::landlock::abi())
    }

    fn with_builder(
        policy: SandboxPolicy,
        helper: OpenedProgram,
        builder: Builder,
        abi: i64,
    ) -> Result<NamespaceSandbox, Unavailable> {
        refuse_missing_landlock(&policy, abi)?;
        for p in policy
            .writable_paths
            .iter()
            .chain(&policy.readable_extra_paths)
        {
            if !p.is_absolute() {
                return Err(Unavailable(format!(
                    "authorized path {} is not absolute",
                    p.display()
                )));
            }
        }
        let seccomp_eperm =
            seccomp::eperm_program(policy.network).map_err(|e| Unavailable(e.to_string()))?;
        let seccomp_enosys = seccomp::enosys_program().map_err(|e| Unavailable(e.to_string()))?;
        Ok(NamespaceSandbox {
            builder,
            helper,
            policy,
            landlock_abi: abi,
            seccomp_eperm: seccomp::to_bytes(&seccomp_eperm),
            seccomp_enosys: seccomp::to_bytes(&seccomp_enosys),
            containment: caps::process::Containment::session_only(),
            egress: None,
        })
    }

    /// The same sandbox deciding its runs' connections with `egress` — what
    /// `sandbox.network = "proxy"` needs (without it, such runs are refused).
    pub fn with_egress(mut self, egress: crate::Egress) -> NamespaceSandbox {
        self.egress = Some(egress);
        self
    }

    /// How `proxy` mode's connections are decided, if set.
    pub fn egress(&self) -> Option<&crate::Egress> {
        self.egress.as_ref()
    }

    /// The same sandbox with each run held by `containment` — a cgroup that bounds the
    /// processes and memory of bubblewrap and everything in its pid namespace. Without
    /// it, runs are held by their pid namespace only and unlimited.
    pub fn with_containment(mut self, containment: caps::process::Containment) -> NamespaceSandbox {
        self.containment = containment;
        self
    }

    /// What holds each run.
    pub fn containment(&self) -> &caps::process::Containment {
        &self.containment
    }

    /// The bubblewrap binary in use (`None`: Warden's own builder).
    pub fn bwrap_path(&self) -> Option<&Path> {
        match &self.builder {
            Builder::Bubblewrap(path) => Some(path),
            Builder::Warden => None,
        }
    }

    /// Who builds the namespaces.
    pub fn builder(&self) -> &Builder {
        &self.builder
    }

    /// The program started for a run and the arguments before [`Launch::args`].
    pub fn launcher(&self) -> (&Path, Vec<String>) {
        match &self.builder {
            Builder::Bubblewrap(path) => (path, Vec::new()),
            Builder::Warden => (
                self.helper.exec_path(),
                vec![crate::builder::SUBCOMMAND.to_owned()],
            ),
        }
    }

    /// The namespaces a run's process may be born in (`caps::process::ProcessSpec::born_in`):
    /// with Warden's own builder, all the sandbox's — user, mount, pid, ipc, uts, and the
    /// network unless it is allowed — so that a starter that can make them at birth (the
    /// companion) starts the sandbox's pid 1 directly, with no launcher; the builder checks
    /// it got every one its command line asks for. bubblewrap makes its own.
    pub fn born_in(&self) -> caps::process::NewNamespaces {
        match self.builder {
            Builder::Warden => caps::process::NewNamespaces {
                net: self.policy.network.own_namespace(),
                ..DEFAULT_BORN_IN
            },
            Builder::Bubblewrap(_) => caps::process::NewNamespaces::default(),
        }
    }

    /// The helper binary (opened: [`OpenedProgram::exec_path`] runs it).
    pub fn helper(&self) -> &OpenedProgram {
        &self.helper
    }

    /// The Landlock ABI the kernel offers (recorded for diagnostics; 0 when absent).
    pub fn landlock_abi(&self) -> i64 {
        self.landlock_abi
    }

    /// The policy.
    pub fn policy(&self) -> &SandboxPolicy {
        &self.policy
    }

    /// Whether runs here can be given an exec allowlist (see [`crate::exec_allowlist`]).
    pub fn exec_allowlist_support(&self) -> Result<(), SandboxError> {
        crate::exec_allowlist::kernel_support(self.landlock_abi)
    }
}
