//! bubblewrap's command line for one run (also what Warden's own builder reads):
//! namespaces and capabilities, the seccomp programs and every bind as a descriptor
//! opened and checked now (so bubblewrap looks no path up again), the mount plan in
//! order, git's protections in a writable profile, and the helper with its arguments.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use caps::CapsError;

use super::{Builder, NamespaceSandbox};
use crate::mounts::{Mount, MountPlan};
use crate::{LandlockMode, Profile, git, helper};

impl NamespaceSandbox {
    /// How to launch `argv` in this sandbox. `report`, if given, is the write end of the
    /// pipe the helper's write watch reports to; `status`, the write end of the pipe the
    /// command's exit status is reported on (`--json-status-fd`: Warden's builder reports
    /// it before the sandbox is torn down). From the run's `options`: its exec allowlist,
    /// if any, the only programs the command may execute (refused when this kernel cannot
    /// enforce it), and whether it runs on a terminal (which the helper then takes).
    /// `egress`, in `proxy` mode, is the run's end of its egress broker
    /// ([`crate::egress::broker`]), over which the helper hands the run's listener.
    #[allow(clippy::too_many_arguments)]
    pub fn command_line(
        &self,
        profile: Profile,
        cwd: &Path,
        argv: &[String],
        arg0: Option<&str>,
        report: Option<OwnedFd>,
        status: Option<OwnedFd>,
        egress: Option<OwnedFd>,
        options: &caps::ExecOptions,
    ) -> Result<Launch, CapsError> {
        // Checked before anything is prepared: a run that asked for an allowlist never
        // runs without one.
        let exec_allowlist = match options.exec_allowlist.as_ref() {
            None => None,
            Some(list) => {
                self.exec_allowlist_support().map_err(|why| {
                    CapsError::denied(
                        argv.first().map(String::as_str).unwrap_or_default(),
                        format!("the exec allowlist cannot be enforced: {why}; nothing was run"),
                    )
                })?;
                // Resolved now, on the host, so the helper is handed the files as they are
                // when the run starts (`/bin/sh` → `/usr/bin/dash`).
                Some(crate::exec_allowlist::resolve(&list.paths))
            }
        };
        let mut args: Vec<String> = Vec::new();
        let mut keep: Vec<OwnedFd> = Vec::new();
        let push = |args: &mut Vec<String>, items: &[&str]| {
            args.extend(items.iter().map(|s| s.to_string()))
        };
        push(
            &mut args,
            &[
                "--die-with-parent",
                "--new-session",
                "--unshare-user",
                "--unshare-pid",
                "--unshare-ipc",
                "--unshare-uts",
            ],
        );
        if self.policy.network.own_namespace() {
            push(&mut args, &["--unshare-net"]);
        }
        // Unprivileged bubblewrap already leaves the command no capabilities; as root it
        // keeps them unless told otherwise. The same goes for files only root may read:
        // the sandbox user is mapped to the caller, so as root it would still own them.
        let as_root = nix::unistd::geteuid().is_root();
        if as_root {
            push(&mut args, &["--cap-drop", "ALL"]);
        }
        // An exec allowlist's `noexec` layer needs the finished mount tree, which
        // bubblewrap cannot mark, and `proxy` mode's DNS stub a privileged port:
        // bubblewrap leaves the helper the capability to do either (in the sandbox's
        // user namespace only), and the helper drops it and installs the seccomp
        // programs itself before anything else runs (`confine.rs`).
        let proxy = egress.is_some();
        let finish_in_helper =
            (exec_allowlist.is_some() || proxy) && matches!(self.builder, Builder::Bubblewrap(_));
        // An unprivileged bubblewrap would put the command in a second user namespace of
        // its own, where no capability reaches the mount tree: root of the first instead,
        // and the helper moves to the user's ids itself (`--run-as`).
        let run_as = (finish_in_helper && !as_root).then(|| {
            (
                nix::unistd::getuid().as_raw(),
                nix::unistd::getgid().as_raw(),
            )
        });
        if finish_in_helper {
            // CAP_SYS_ADMIN for the mounts, CAP_NET_BIND_SERVICE for the DNS stub's port,
            // CAP_SETPCAP to empty the bounding set, and CAP_SETFCAP, without which the
            // kernel refuses the next user namespace a map of its parent's root
            // (`--run-as`). All dropped before the command.
            if exec_allowlist.is_some() {
                push(&mut args, &["--cap-add", "CAP_SYS_ADMIN"]);
            }
            if proxy {
                push(&mut args, &["--cap-add", "CAP_NET_BIND_SERVICE"]);
            }
            push(
                &mut args,
                &["--cap-add", "CAP_SETPCAP", "--cap-add", "CAP_SETFCAP"],
            );
        }
        if run_as.is_some() {
            push(&mut args, &["--uid", "0", "--gid", "0"]);
        }
        // The first mounts, always these: a standby made them ahead of its run
        // (`crate::builder::standby`).
        push(&mut args, &crate::builder::standby::PRELUDE_ARGS);
        // seccomp programs first: descriptors 3 and 4 in bubblewrap.
        keep.push(memfd_with("warden-seccomp-eperm", &self.seccomp_eperm)?);
        keep.push(memfd_with("warden-seccomp-enosys", &self.seccomp_enosys)?);
        let seccomp_fds = if finish_in_helper {
            vec![3, 4]
        } else {
            push(
                &mut args,
                &["--add-seccomp-fd", "3", "--add-seccomp-fd", "4"],
            );
            Vec::new()
        };
        let plan = MountPlan::new(&self.policy, profile == Profile::Writable, as_root);
        self.check_cwd_visible(&plan, cwd)?;
        // Nothing to hide is fine — unless the command could create the path, and so plant
        // what Warden would read there.
        for mount in plan.mounts() {
            if let Mount::Hide(hidden) = mount
                && std::fs::symlink_metadata(hidden).is_err()
                && plan.writable(hidden)
            {
                return Err(CapsError::denied(
                    hidden,
                    "this protected path does not exist and lies in a writable path, where a command could create it: create it (mkdir -m 700) or move it out of the writable paths",
                ));
            }
        }
        for mount in plan.mounts() {
            let path = mount.path().to_string_lossy().into_owned();
            match mount {
                Mount::Empty(_) => args.extend(["--tmpfs".to_owned(), path]),
                Mount::Bind {
                    path: dir,
                    writable,
                } => {
                    // Bound from a descriptor opened and checked now: no path is looked
                    // up again by bubblewrap.
                    let fd = open_dir(dir)?;
                    let n = 3 + keep.len();
                    keep.push(fd);
                    let flag = if *writable {
                        "--bind-fd"
                    } else {
                        "--ro-bind-fd"
                    };
                    args.extend([flag.to_owned(), n.to_string(), path]);
                }
                Mount::Lock(dir) => {
                    // Warden's programs, bound read-only onto themselves from a checked
                    // descriptor: nothing in them can be changed, added or removed.
                    let fd = open_dir(dir)?;
                    let n = 3 + keep.len();
                    keep.push(fd);
                    args.extend(["--ro-bind-fd".to_owned(), n.to_string(), path]);
                }
                Mount::Pin(dir) => {
                    // The same directory bound onto itself, writable as it was: now a
                    // mount point, which the kernel will not let anyone rename or remove.
                    let fd = open_dir(dir)?;
                    let n = 3 + keep.len();
                    keep.push(fd);
                    args.extend(["--bind-fd".to_owned(), n.to_string(), path]);
                }
                Mount::Hide(hidden) => match std::fs::symlink_metadata(hidden) {
                    Ok(m) if m.is_dir() => args.extend([
                        "--tmpfs".to_owned(),
                        path.clone(),
                        "--remount-ro".to_owned(),
                        path,
                    ]),
                    Ok(_) => args.extend(["--ro-bind".to_owned(), "/dev/null".to_owned(), path]),
                    Err(_) => {} // checked above: absent and out of a command's reach
                },
            }
        }
        // `proxy` mode: names are answered by the run's DNS stub (`crate::egress::dns`),
        // and only by it: the file `/etc/resolv.conf` leads to (often a link into
        // `/run`) says so, where the sandbox shows it. Where it shows none (no file, or a
        // link into a hidden directory), the C libraries' resolvers ask 127.0.0.1 — the
        // stub — and there is nothing to put there.
        if proxy && let Some(door) = resolver_door_inside(&plan) {
            return Err(CapsError::denied(
                argv.first().map(String::as_str).unwrap_or_default(),
                format!(
                    "sandbox.network = \"proxy\" but {} is visible inside the sandbox, through which the host's resolver looks up any name (a way for data to leave): take it out of sandbox.readable_extra_paths / writable_paths; nothing was run",
                    door.display()
                ),
            ));
        }
        if proxy && let Some(at) = resolv_conf_inside(&plan) {
            let n = 3 + keep.len();
            keep.push(memfd_with(
                "warden-resolv-conf",
                crate::egress::dns::RESOLV_CONF.as_bytes(),
            )?);
            args.extend([
                "--ro-bind-data".to_owned(),
                n.to_string(),
                at.to_string_lossy().into_owned(),
            ]);
        }
        // Even in a writable workspace, git must not run_as a way to plant code that runs
        // later outside the sandbox (see `git.rs`).
        let mut git_guards = Vec::new();
        if profile == Profile::Writable {
            for path in &self.policy.writable_paths {
                let (git_args, guard) = git::protect(path, &self.policy.writable_paths);
                args.extend(git_args);
                git_guards.push(guard);
            }
        }
        let watch_fd = report.map(|fd| {
            keep.push(fd);
            (2 + keep.len()) as i32
        });
        let egress_fd = egress.map(|fd| {
            keep.push(fd);
            (2 + keep.len()) as i32
        });
        let mut status_fd = None;
        if let Some(fd) = status {
            // bubblewrap's own line says 128 + S for a signal; the helper, waiting for the
            // command, says which (see `crate::exit_report`) on the same pipe, first.
            if matches!(self.builder, Builder::Bubblewrap(_)) {
                let theirs = fd
                    .try_clone()
                    .map_err(|e| CapsError::from_io("dup", "the status pipe", e))?;
                keep.push(theirs);
                status_fd = Some((2 + keep.len()) as i32);
            }
            keep.push(fd);
            args.extend(["--json-status-fd".to_owned(), (2 + keep.len()).to_string()]);
        }
        // The helper is the opened file, wherever its path is and whatever lies there now:
        // bubblewrap executes it as `/proc/self/fd/N` of its own child (in the sandbox's
        // pid namespace, where Warden's `/proc/PID/fd` cannot be named); Warden's builder
        // is the helper and executes nothing before the command.
        let helper = match &self.builder {
            Builder::Bubblewrap(_) => {
                let file = self
                    .helper
                    .file()
                    .try_clone_to_owned()
                    .map_err(|e| CapsError::from_io("dup", self.helper.real_path(), e))?;
                keep.push(file);
                format!("/proc/self/fd/{}", 2 + keep.len())
            }
            Builder::Warden => self.helper.exec_path().to_string_lossy().into_owned(),
        };
        args.extend([
            "--chdir".to_owned(),
            cwd.to_string_lossy().into_owned(),
            "--".to_owned(),
            helper,
            helper::SUBCOMMAND.to_owned(),
        ]);
        let landlock = if self.landlock_abi < 1 && self.policy.landlock == LandlockMode::Auto {
            LandlockMode::Off
        } else {
            self.policy.landlock
        };
        // Landlock allows writes beneath the writable paths only when they are meant to
        // be writable; in the read-only profiles it is a second wall behind the mounts.
        let writable = profile == Profile::Writable;
        let (exec_allowlist, exec_libraries) = match exec_allowlist {
            Some(resolved) => (Some(resolved.executable), resolved.libraries),
            None => (None, Vec::new()),
        };
        args.extend(helper::encode(&helper::HelperArgs {
            landlock,
            writable: if writable {
                self.policy.writable_paths.clone()
            } else {
                Vec::new()
            },
            exec_allowlist,
            exec_libraries,
            seccomp_fds,
            run_as,
            watch_fd,
            status_fd,
            egress_fd,
            dns_stub_fd: None,
            watch_roots: self.policy.writable_paths.clone(),
            arg0: arg0.map(str::to_owned),
            terminal: options.terminal.is_some(),
            argv: argv.to_vec(),
        }));
        Ok(Launch {
            args,
            fds: keep,
            git_guards,
        })
    }

    /// A working directory the sandbox hides (under the run's `plan`: which paths are
    /// visible does not depend on the profile) cannot be entered inside: say so plainly
    /// instead of letting bubblewrap fail with "Can't chdir".
    fn check_cwd_visible(&self, plan: &MountPlan, cwd: &Path) -> Result<(), CapsError> {
        let bound: Vec<&PathBuf> = self
            .policy
            .writable_paths
            .iter()
            .chain(&self.policy.readable_extra_paths)
            .collect();
        if plan.visible(cwd) {
            return Ok(());
        }
        let authorized: Vec<String> = bound.iter().map(|p| p.display().to_string()).collect();
        Err(CapsError::invalid(format!(
            "working directory {} is hidden inside the sandbox; run from an authorized path ({}) or add it to sandbox.writable_paths or sandbox.readable_extra_paths",
            cwd.display(),
            authorized.join(", ")
        )))
    }
}

/// Where a program reaches the host's own resolver over a Unix socket (systemd-resolved,
/// nscd, D-Bus — which resolved answers on too —, Avahi): hidden with `/run` by default.
const RESOLVER_DOORS: &[&str] = &[
    "/run/systemd/resolve",
    "/run/nscd",
    "/run/dbus",
    "/run/avahi-daemon",
];

/// The first of [`RESOLVER_DOORS`] that exists here and that the sandbox shows.
fn resolver_door_inside(plan: &MountPlan) -> Option<PathBuf> {
    RESOLVER_DOORS
        .iter()
        .map(PathBuf::from)
        .find(|door| std::fs::symlink_metadata(door).is_ok() && plan.visible(door))
}

/// The file `/etc/resolv.conf` is, every link followed, if the sandbox shows it.
fn resolv_conf_inside(plan: &MountPlan) -> Option<PathBuf> {
    let file = std::fs::canonicalize("/etc/resolv.conf").ok()?;
    plan.visible(&file).then_some(file)
}

/// An in-memory file holding `bytes`, read from the start (a seccomp program for
/// bubblewrap).
fn memfd_with(name: &str, bytes: &[u8]) -> Result<OwnedFd, CapsError> {
    let fd = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)
        .map_err(|e| CapsError::from_io("memfd_create", name, e.into()))?;
    let mut written = 0;
    while written < bytes.len() {
        written += rustix::io::write(&fd, &bytes[written..])
            .map_err(|e| CapsError::from_io("write seccomp program", name, e.into()))?;
    }
    rustix::fs::seek(&fd, rustix::fs::SeekFrom::Start(0))
        .map_err(|e| CapsError::from_io("seek", name, e.into()))?;
    Ok(fd)
}

/// Open an authorized directory for binding: a real directory (not a symlink), by handle,
/// so that swapping the path for a symlink after the check changes nothing.
fn open_dir(path: &Path) -> Result<OwnedFd, CapsError> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        CapsError::denied(
            path,
            format!("authorized path is not a real directory (symlinks are refused): {e}"),
        )
    })?;
    Ok(fd)
}

/// How to launch one command: bubblewrap's arguments (after the program), the
/// descriptors they refer to in the order they must appear in the child (3, 4, ...), and
/// the repository checks to run afterwards.
#[derive(Debug)]
pub struct Launch {
    /// bubblewrap's arguments.
    pub args: Vec<String>,
    /// Descriptors the child gets as 3, 4, ...
    pub fds: Vec<OwnedFd>,
    /// Checks after a writable run (see [`crate::git`]).
    pub git_guards: Vec<git::Guard>,
}
