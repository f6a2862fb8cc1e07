//! What starts one supervised process: its program, argv, environment, working
//! directory, descriptors and the namespaces it is born in.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use crate::providers::local::contain::Containment;
use crate::shell::{ExecOptions, ResourceLimits, Stdin};

/// Where the child starts.
#[derive(Debug)]
pub enum WorkingDir {
    /// A path, resolved by the kernel at spawn time.
    Path(PathBuf),
    /// An open directory handle; the child `fchdir`s to it (no path is re-resolved).
    Handle(OwnedFd),
}

/// Everything needed to start one supervised process.
#[derive(Debug)]
pub struct ProcessSpec {
    /// The file to execute (absolute, or relative to the working directory).
    pub program: PathBuf,
    /// The full argv, including `argv[0]`.
    pub argv: Vec<OsString>,
    /// The complete environment.
    pub env: Vec<(OsString, OsString)>,
    /// Working directory.
    pub cwd: WorkingDir,
    /// Standard input.
    pub stdin: Stdin,
    /// Descriptors the child keeps open, as 3, 4, … in this order (e.g. a seccomp program
    /// for bubblewrap's `--seccomp FD`). Everything else is close-on-exec.
    pub keep_fds: Vec<OwnedFd>,
    /// The name used in error messages.
    pub display_name: String,
    /// What holds the run's processes together.
    pub containment: Containment,
    /// The run's process and memory limits (enforced where the containment can).
    pub resources: ResourceLimits,
    /// New namespaces the process may be born in. Only this process's companion
    /// (`caps::process::start_companion`) can start a process that way; otherwise it
    /// starts in this process's namespaces. So a program given this must work either
    /// way, and check what it got: the sandbox's builder does — born as pid 1 of a new
    /// pid namespace, it verifies every namespace it needs is new; started otherwise, it
    /// makes them itself.
    pub born_in: NewNamespaces,
    /// The read end of a pipe on which the process reports its exit status before it
    /// exits, as bubblewrap's `--json-status-fd` does (a line `{ "exit-code": N }`, with
    /// `"signal": S` when Warden's sandbox knows a signal ended the command). The run
    /// then ends when the report comes — the sandbox's pid 1 sends it before its
    /// namespaces are torn down — not when the process is gone (it is reaped later). A
    /// pipe that closes without one changes nothing: the run ends with the process.
    pub exit_report: Option<OwnedFd>,
    /// Run on a pseudo-terminal of this size (see [`ExecOptions::terminal`]): the
    /// supervisor makes it, keeps its controlling side and gives the process the other
    /// as descriptors 0, 1 and 2.
    pub terminal: Option<crate::TerminalSize>,
    /// Which process makes [`ProcessSpec::terminal`] its controlling terminal.
    pub terminal_owner: TerminalOwner,
    /// The started process only launches the command inside something (a sandbox): a
    /// signal for the run (`InputSender::signal`) goes to the processes in there, not to
    /// it, nor to a pid namespace's init. Without a cgroup to list them by, such a run
    /// takes no signals.
    pub launches_command: bool,
    /// The started process asks for a parent-death signal (the sandbox's
    /// `--die-with-parent`), which follows the *thread* that started it: a thread
    /// started for the spawn (a spare spawner) then lives as long as the run. Without
    /// it, that thread ends at once, and a long-lived run costs no thread.
    pub watches_its_parent: bool,
    /// Where a signal for the run goes instead of the started process's tree: the run
    /// lives somewhere this process cannot signal (the container backend's command,
    /// inside the container, behind the engine's client).
    pub signal_route: Option<SignalRoute>,
}

/// Delivers a signal to a run that the supervisor cannot reach itself
/// ([`ProcessSpec::signal_route`]); called from the supervisor's task, it must not block.
#[derive(Clone)]
pub struct SignalRoute(pub std::sync::Arc<dyn Fn(i32) + Send + Sync>);

impl std::fmt::Debug for SignalRoute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SignalRoute")
    }
}

/// Which process makes a run's terminal its controlling terminal: the one a terminal
/// belongs to gets the keys' signals (Ctrl-C, Ctrl-Z...) for its foreground programs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TerminalOwner {
    /// The started process, as it starts (it is a session leader).
    #[default]
    Started,
    /// A process inside what was started, which takes it itself (the sandbox's helper,
    /// after the sandbox made its own session): the started process only passes the
    /// terminal on.
    Inside,
}

/// New namespaces to be born in (see [`ProcessSpec::born_in`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NewNamespaces {
    /// A user namespace (the others are owned by it), in which the process's uid and gid
    /// map to themselves, with `setgroups` denied (bubblewrap's default).
    pub user: bool,
    /// A mount namespace.
    pub mount: bool,
    /// A pid namespace: the process is its pid 1.
    pub pid: bool,
    /// An IPC namespace.
    pub ipc: bool,
    /// A UTS namespace.
    pub uts: bool,
    /// A network namespace.
    pub net: bool,
}

impl NewNamespaces {
    /// The `CLONE_NEW*` flags.
    pub fn clone_flags(self) -> u64 {
        use nix::libc;
        [
            (self.user, libc::CLONE_NEWUSER),
            (self.mount, libc::CLONE_NEWNS),
            (self.pid, libc::CLONE_NEWPID),
            (self.ipc, libc::CLONE_NEWIPC),
            (self.uts, libc::CLONE_NEWUTS),
            (self.net, libc::CLONE_NEWNET),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .fold(0, |flags, (_, flag)| flags | flag as u64)
    }

    /// Whether none is asked for.
    pub fn is_empty(self) -> bool {
        self.clone_flags() == 0
    }

    /// The namespaces `flags` (`CLONE_NEW*` bits) ask for; other bits are ignored.
    pub fn from_clone_flags(flags: u64) -> NewNamespaces {
        use nix::libc;
        let has = |flag: nix::libc::c_int| flags & flag as u64 != 0;
        NewNamespaces {
            user: has(libc::CLONE_NEWUSER),
            mount: has(libc::CLONE_NEWNS),
            pid: has(libc::CLONE_NEWPID),
            ipc: has(libc::CLONE_NEWIPC),
            uts: has(libc::CLONE_NEWUTS),
            net: has(libc::CLONE_NEWNET),
        }
    }
}

impl ProcessSpec {
    /// The spec for running `argv` (`argv[0]` included) of `program` with a request's
    /// environment and stdin; no descriptors kept. Wrapping providers (the OS sandbox)
    /// add theirs with struct update syntax.
    pub fn for_request(
        program: PathBuf,
        argv: Vec<OsString>,
        cwd: WorkingDir,
        options: &ExecOptions,
        display_name: &str,
    ) -> ProcessSpec {
        ProcessSpec {
            program,
            argv,
            env: options
                .env
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v)))
                .collect(),
            cwd,
            stdin: options.stdin.clone(),
            keep_fds: Vec::new(),
            display_name: display_name.to_owned(),
            containment: Containment::session_only(),
            resources: options.resources,
            born_in: NewNamespaces::default(),
            exit_report: None,
            terminal: options.terminal,
            terminal_owner: TerminalOwner::Started,
            launches_command: false,
            watches_its_parent: false,
            signal_route: None,
        }
    }
}
