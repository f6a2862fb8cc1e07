//! The in-sandbox helper (`warden __sandbox-helper`): runs inside bubblewrap as the last
//! step before the command. It closes every inherited descriptor above 2 (bubblewrap's
//! setup descriptors must not reach the command), applies Landlock (writes only beneath
//! `/tmp`, `/dev` and — in the writable profile — the writable paths; with an exec
//! allowlist, a second layer that lets only the listed files execute, see
//! [`crate::exec_allowlist`]), and executes the command under the `argv[0]` it was called
//! by — or, in the watched read-only profile, forks it and observes its writes (see
//! [`crate::watch`]). The helper itself was executed by bubblewrap before any of this, and
//! executes nothing but the command afterwards, so the allowlist binds the command only.
//!
//! It runs after bubblewrap finished its mounts because a Landlock-restricted process
//! may no longer change its mount topology.

use std::ffi::CString;
use std::path::PathBuf;

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope,
};

use crate::setup_failure::fail;
use crate::{LandlockMode, SandboxError};

/// The subcommand name the `warden` binary dispatches to [`main`].
pub const SUBCOMMAND: &str = "__sandbox-helper";

/// The helper's arguments:
/// `[--landlock MODE] [--rw PATH]... [--exec-allowlist enforce [--exec-allow PATH]...
/// [--exec-map DIR]...] [--seccomp-fd FD]... [--watch-writes FD [--watch-root PATH]...]
/// [--egress-fd FD] [--arg0 NAME] -- PROGRAM ARGS...`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct HelperArgs {
    /// Landlock mode.
    pub landlock: LandlockMode,
    /// Paths Landlock allows writes beneath (besides `/tmp` and `/dev`): the writable
    /// paths in the writable profile, none in the read-only ones.
    pub writable: Vec<PathBuf>,
    /// Only these files, and files beneath these directories, may be executed (real
    /// paths); `Some(empty)` lets nothing execute, `None` anything.
    pub exec_allowlist: Option<Vec<PathBuf>>,
    /// With an exec allowlist: directories whose files may be mapped as code (the
    /// libraries the listed programs need); every other mount is `noexec`.
    pub exec_libraries: Vec<PathBuf>,
    /// Seccomp programs the helper installs itself, after finishing the mount tree and
    /// dropping the capability it needed for that (bubblewrap with an exec allowlist);
    /// empty: whoever started the helper installed them.
    pub seccomp_fds: Vec<i32>,
    /// With `seccomp_fds`, when bubblewrap made the helper root of the sandbox's user
    /// namespace (for an unprivileged user): the user's own (uid, gid), which the command
    /// runs as, in a user namespace of its own.
    pub run_as: Option<(u32, u32)>,
    /// Watch for refused writes and report them to this descriptor.
    pub watch_fd: Option<i32>,
    /// Report how the command ended to this descriptor (see [`crate::exit_report`]): the
    /// helper then waits for the command instead of becoming it. Under bubblewrap only;
    /// Warden's builder reports from pid 1.
    pub status_fd: Option<i32>,
    /// `proxy` mode: the run's end of its egress broker. The helper hands the run's
    /// loopback listener over it (see [`crate::egress::forward::start_in_sandbox`]) and
    /// points the command's proxy variables at the listener; the command never holds
    /// either.
    pub egress_fd: Option<i32>,
    /// `proxy` mode under Warden's builder: the DNS stub's socket (`127.0.0.1:53` of the
    /// run's namespace), bound by pid 1 while it held the capability to; the helper
    /// hands it to the broker with the listener. Never read from the command line: under
    /// bubblewrap the helper binds it itself, before it confines itself.
    pub dns_stub_fd: Option<i32>,
    /// Refused writes beneath these paths are reported (the writable paths).
    pub watch_roots: Vec<PathBuf>,
    /// The `argv[0]` the program sees, when it differs from the file executed (a
    /// program resolved to its canonical file, e.g. `unxz` → `/usr/bin/xz`).
    pub arg0: Option<String>,
    /// The run is on a terminal (descriptors 0–2, made by Warden for the run): the
    /// helper, a new session's leader, makes it its controlling terminal, and the
    /// command is the terminal's foreground process group (so Ctrl-C and a resize reach
    /// it).
    pub terminal: bool,
    /// The program and its arguments.
    pub argv: Vec<String>,
}

/// Build the helper's argument list (after the program and subcommand).
pub fn encode(args: &HelperArgs) -> Vec<String> {
    let mut out = vec![
        "--landlock".to_owned(),
        format!("{:?}", args.landlock).to_lowercase(),
    ];
    for p in &args.writable {
        out.push("--rw".into());
        out.push(p.to_string_lossy().into_owned());
    }
    if let Some(paths) = &args.exec_allowlist {
        // The marker first: an allowlist whose entries all vanished still restricts.
        out.extend(["--exec-allowlist".to_owned(), "enforce".to_owned()]);
        for p in paths {
            out.push("--exec-allow".into());
            out.push(p.to_string_lossy().into_owned());
        }
        for p in &args.exec_libraries {
            out.push("--exec-map".into());
            out.push(p.to_string_lossy().into_owned());
        }
    }
    for fd in &args.seccomp_fds {
        out.push("--seccomp-fd".into());
        out.push(fd.to_string());
    }
    if let Some((uid, gid)) = args.run_as {
        out.push("--run-as".into());
        out.push(format!("{uid}:{gid}"));
    }
    if args.terminal {
        out.extend(["--terminal".to_owned(), "take".to_owned()]);
    }
    if let Some(fd) = args.status_fd {
        out.push("--status-fd".into());
        out.push(fd.to_string());
    }
    if let Some(fd) = args.egress_fd {
        out.push("--egress-fd".into());
        out.push(fd.to_string());
    }
    if let Some(fd) = args.watch_fd {
        out.push("--watch-writes".into());
        out.push(fd.to_string());
        for p in &args.watch_roots {
            out.push("--watch-root".into());
            out.push(p.to_string_lossy().into_owned());
        }
    }
    if let Some(arg0) = &args.arg0 {
        out.push("--arg0".into());
        out.push(arg0.clone());
    }
    out.push("--".into());
    out.extend(args.argv.iter().cloned());
    out
}

/// Parse the helper's arguments.
pub fn decode(args: &[String]) -> Result<HelperArgs, SandboxError> {
    let mut parsed = HelperArgs::default();
    let mut i = 0;
    while i < args.len() {
        let value = |what: &str| {
            args.get(i + 1)
                .cloned()
                .ok_or_else(|| SandboxError::Helper(format!("{} needs {what}", args[i])))
        };
        match args[i].as_str() {
            "--landlock" => {
                parsed.landlock = value("a value")?.parse().map_err(SandboxError::Helper)?
            }
            "--rw" => parsed.writable.push(value("a path")?.into()),
            "--exec-allowlist" => match value("a value")?.as_str() {
                "enforce" => {
                    parsed.exec_allowlist.get_or_insert_with(Vec::new);
                }
                other => {
                    return Err(SandboxError::Helper(format!(
                        "invalid --exec-allowlist value {other:?}"
                    )));
                }
            },
            "--exec-allow" => {
                let path = PathBuf::from(value("a path")?);
                match &mut parsed.exec_allowlist {
                    Some(paths) if path.is_absolute() => paths.push(path),
                    Some(_) => {
                        return Err(SandboxError::Helper(format!(
                            "--exec-allow {path:?} is not absolute"
                        )));
                    }
                    None => {
                        return Err(SandboxError::Helper(
                            "--exec-allow before --exec-allowlist".into(),
                        ));
                    }
                }
            }
            "--exec-map" => {
                let path = PathBuf::from(value("a path")?);
                match &parsed.exec_allowlist {
                    Some(_) if path.is_absolute() => parsed.exec_libraries.push(path),
                    Some(_) => {
                        return Err(SandboxError::Helper(format!(
                            "--exec-map {path:?} is not absolute"
                        )));
                    }
                    None => {
                        return Err(SandboxError::Helper(
                            "--exec-map before --exec-allowlist".into(),
                        ));
                    }
                }
            }
            "--seccomp-fd" => {
                let fd = value("a descriptor")?;
                let fd: i32 = fd.parse().ok().filter(|n| *n > 2).ok_or_else(|| {
                    SandboxError::Helper(format!("invalid --seccomp-fd descriptor {fd:?}"))
                })?;
                parsed.seccomp_fds.push(fd);
            }
            "--run-as" => {
                let ids = value("uid:gid")?;
                let parsed_ids = ids
                    .split_once(':')
                    .and_then(|(u, g)| Some((u.parse().ok()?, g.parse().ok()?)));
                parsed.run_as = Some(parsed_ids.ok_or_else(|| {
                    SandboxError::Helper(format!("invalid --run-as ids {ids:?}"))
                })?);
            }
            "--watch-root" => parsed.watch_roots.push(value("a path")?.into()),
            "--terminal" => match value("a value")?.as_str() {
                "take" => parsed.terminal = true,
                other => {
                    return Err(SandboxError::Helper(format!(
                        "invalid --terminal value {other:?}"
                    )));
                }
            },
            "--arg0" => parsed.arg0 = Some(value("a name")?),
            "--watch-writes" => {
                parsed.watch_fd = Some(descriptor(&value("a descriptor")?, "--watch-writes")?)
            }
            "--status-fd" => {
                parsed.status_fd = Some(descriptor(&value("a descriptor")?, "--status-fd")?)
            }
            "--egress-fd" => {
                parsed.egress_fd = Some(descriptor(&value("a descriptor")?, "--egress-fd")?)
            }
            "--" => {
                parsed.argv = args[i + 1..].to_vec();
                if parsed.argv.is_empty() {
                    return Err(SandboxError::Helper("no command after --".into()));
                }
                return Ok(parsed);
            }
            other => {
                return Err(SandboxError::Helper(format!(
                    "unexpected helper argument {other:?}"
                )));
            }
        }
        i += 2;
    }
    Err(SandboxError::Helper("missing -- before the command".into()))
}

/// A descriptor number above the standard three, for `flag`.
fn descriptor(text: &str, flag: &str) -> Result<i32, SandboxError> {
    text.parse()
        .ok()
        .filter(|n| *n > 2)
        .ok_or_else(|| SandboxError::Helper(format!("invalid {flag} descriptor {text:?}")))
}

/// What to execute: the file, and the argv it sees (its `argv[0]` may differ).
struct Target {
    program: CString,
    argv: Vec<CString>,
    /// An exec allowlist applies: a refused execution says where to look.
    exec_restricted: bool,
    /// The run is on a terminal: the command becomes its foreground process group.
    terminal: bool,
}

/// Make the run's terminal (descriptor 0) this session's controlling terminal. The
/// terminal is nobody's yet: Warden made it for this run and passed it on without taking
/// it. Only a session's leader can take one: under Warden's builder the helper is (its
/// `setsid`); under bubblewrap, `--new-session` made bubblewrap's own pid 1 the leader, so
/// the helper starts a session of its own first — one more, never one less, boundary.
fn take_terminal() {
    let me = nix::unistd::getpid();
    if nix::unistd::getsid(None).ok() != Some(me)
        && let Err(e) = nix::unistd::setsid()
    {
        fail(format!("setsid for the run's terminal: {e}"));
    }
    // SAFETY: TIOCSCTTY takes an integer argument (0: never steal a terminal another
    // session holds).
    if unsafe { nix::libc::ioctl(0, nix::libc::TIOCSCTTY, 0) } != 0 {
        fail(format!(
            "cannot make the run's terminal the command's controlling terminal: {}",
            std::io::Error::last_os_error()
        ));
    }
}

/// In a process the helper forked to run the command (its session's leader waits for
/// it): a process group of its own, made the terminal's foreground group, so that the
/// terminal's signals (Ctrl-C, a resize) go to the command and not to the waiting helper.
fn become_foreground() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    use nix::unistd::{Pid, getpid, getsid, setpgid, tcsetpgrp};
    if getsid(None).ok() == Some(getpid()) {
        // The session's leader itself: its group is the foreground one already.
        return;
    }
    let _ = setpgid(Pid::from_raw(0), Pid::from_raw(0));
    // A background group that sets the foreground group is stopped by SIGTTOU unless it
    // ignores it; the default comes back before the command starts.
    // SAFETY: setting a signal to be ignored, then back to its default; no handler.
    unsafe {
        let _ = signal(Signal::SIGTTOU, SigHandler::SigIgn);
        let _ = tcsetpgrp(std::io::stdin(), getpid());
        let _ = signal(Signal::SIGTTOU, SigHandler::SigDfl);
    }
}

/// Apply Landlock for `writable`. Returns the enforcement status.
fn apply_landlock(writable: &[PathBuf], mode: LandlockMode) -> Result<RulesetStatus, SandboxError> {
    // Ask for the write rights this kernel knows (up to ABI 5, the newest file-system
    // rights this helper uses): asking for more would make a hard requirement fail on an
    // older kernel.
    let kernel_abi = crate::landlock::abi();
    let abi = ABI::from(kernel_abi.clamp(1, 5) as i32);
    let write = AccessFs::from_write(abi);
    let mut ruleset = Ruleset::default();
    ruleset = ruleset.set_compatibility(match mode {
        LandlockMode::Required => CompatLevel::HardRequirement,
        _ => CompatLevel::BestEffort,
    });
    let mut ruleset = ruleset
        .handle_access(write)
        .map_err(SandboxError::landlock)?;
    // From ABI 6 the kernel also scopes IPC: no connecting to abstract Unix sockets and no
    // signals beyond the sandbox. With the network on there is no new network namespace,
    // so this is what keeps the host's abstract sockets (X11, D-Bus, ...) out of reach.
    if kernel_abi >= 6 {
        ruleset = ruleset
            .scope(Scope::AbstractUnixSocket | Scope::Signal)
            .map_err(SandboxError::landlock)?;
    }
    let mut created = ruleset.create().map_err(SandboxError::landlock)?;
    let mut targets: Vec<PathBuf> = writable.to_vec();
    targets.extend(["/tmp", "/dev"].map(PathBuf::from));
    for path in targets {
        // A writable path that does not exist inside cannot be written anyway.
        let Ok(fd) = PathFd::new(&path) else { continue };
        created = created
            .add_rule(PathBeneath::new(fd, AccessFs::from_all(abi) & write))
            .map_err(SandboxError::landlock)?;
    }
    let status = created.restrict_self().map_err(SandboxError::landlock)?;
    Ok(status.ruleset)
}

/// The helper's `main`: never returns.
pub fn main(args: &[String]) -> ! {
    match decode(args) {
        Ok(parsed) => run(parsed),
        Err(e) => fail(e),
    }
}

/// The helper's work on decoded arguments (see [`main`]; the namespace builder calls it
/// with what it decoded itself): never returns.
pub fn run(parsed: HelperArgs) -> ! {
    // Rust's runtime ignores SIGPIPE before `main` (in `warden __sandbox-helper`; the
    // small helper binary skips that start-up, but this must not rely on either), and
    // an ignored signal stays ignored across exec: the command (and every shell
    // pipeline in it) would get EPIPE instead of the usual quiet end — `yes | head -1`
    // would complain "Broken pipe". Warden started the sandbox with every signal at its
    // default; give the command that.
    // SAFETY: restoring a signal's default action; no handler is installed.
    let _ = unsafe {
        nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGPIPE,
            nix::sys::signal::SigHandler::SigDfl,
        )
    };
    if parsed.terminal {
        take_terminal();
    }
    // The DNS stub's port is a privileged one: bound now, while the helper (root of the
    // sandbox's user namespace under bubblewrap, which left it that capability for this)
    // still may — or bound already by the builder's pid 1.
    let stub = parsed.egress_fd.map(|_| match parsed.dns_stub_fd {
        // SAFETY: pid 1 bound this descriptor for this helper and passed it down by fork;
        // nothing else owns it.
        Some(fd) => unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) },
        None => crate::egress::dns::bind_stub_socket()
            .unwrap_or_else(|e| fail(format!("the DNS stub cannot listen on 127.0.0.1:53: {e}"))),
    });
    if !parsed.seccomp_fds.is_empty() {
        finish_confinement(&parsed);
    }
    // Confined as the command will be, and before Landlock (which it does not need):
    // the egress listener, handed to the broker, then the proxy variables that name it.
    // The broker's descriptor and the listener are closed here with everything else not
    // kept, so the command has neither.
    if let Some(broker) = parsed.egress_fd {
        crate::egress::forward::start_in_sandbox(broker, stub);
    }
    // Nothing bubblewrap (or anyone) left open may reach the command. The watch report
    // and status descriptors stay open for the process that waits for the command (and
    // are close-on-exec for the command).
    let mut keep: Vec<u32> = [parsed.watch_fd, parsed.status_fd]
        .into_iter()
        .flatten()
        .map(|fd| fd as u32)
        .collect();
    keep.sort_unstable();
    let mut from = 3;
    for fd in keep {
        close_from_to(from, fd.saturating_sub(1));
        set_cloexec(fd as i32);
        from = fd + 1;
    }
    close_from_to(from, u32::MAX);
    if parsed.landlock != LandlockMode::Off {
        match apply_landlock(&parsed.writable, parsed.landlock) {
            Ok(RulesetStatus::FullyEnforced) | Ok(RulesetStatus::PartiallyEnforced) => {}
            Ok(RulesetStatus::NotEnforced) if parsed.landlock == LandlockMode::Auto => {}
            Ok(RulesetStatus::NotEnforced) => {
                fail("Landlock is required but the kernel does not enforce it")
            }
            Err(e) if parsed.landlock == LandlockMode::Auto => {
                let _ = e;
            }
            Err(e) => fail(format!(
                "Landlock is required but could not be applied: {e}"
            )),
        }
    }
    // Last, so that nothing the helper does is bound by it — only the command and its
    // descendants. Whoever asked for an allowlist made sure the kernel can enforce it; if
    // it cannot after all, nothing runs.
    if let Some(paths) = &parsed.exec_allowlist
        && let Err(e) = crate::exec_allowlist::restrict(paths)
    {
        fail(format!(
            "the exec allowlist (sandbox.exec_allowlist) could not be enforced: {e}"
        ))
    }
    let to_c = |s: &str| {
        CString::new(s.as_bytes()).unwrap_or_else(|_| fail("argument contains a NUL byte"))
    };
    let mut argv: Vec<CString> = parsed.argv.iter().map(|a| to_c(a)).collect();
    let program = argv[0].clone();
    if let Some(arg0) = &parsed.arg0 {
        argv[0] = to_c(arg0);
    }
    let target = Target {
        program,
        argv,
        exec_restricted: parsed.exec_allowlist.is_some(),
        terminal: parsed.terminal,
    };
    match (parsed.watch_fd, parsed.status_fd) {
        (Some(fd), status) => crate::watch::run(fd, status, &parsed.watch_roots, &target),
        (None, Some(status)) => crate::exit_report::wait_and_report(status, &target),
        (None, None) => exec_command(&target),
    }
}

/// Keep `fd` from the command: close it on exec.
fn set_cloexec(fd: i32) {
    // SAFETY: fcntl on a descriptor number; failure leaves it as it was.
    unsafe { nix::libc::fcntl(fd, nix::libc::F_SETFD, nix::libc::FD_CLOEXEC) };
}

/// Under bubblewrap with an exec allowlist (see `NamespaceSandbox::command_line`): the `noexec`
/// layer on the finished mount tree, with the capability bubblewrap left for it; then
/// every privilege dropped and the seccomp programs installed, as Warden's builder does
/// in the command's process. Any failure ends the run before the command starts.
fn finish_confinement(parsed: &HelperArgs) {
    if let Some(executable) = &parsed.exec_allowlist {
        let allowed: Vec<PathBuf> = executable
            .iter()
            .chain(&parsed.exec_libraries)
            .cloned()
            .collect();
        let root = rustix::fs::open(
            "/",
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .unwrap_or_else(|e| fail(format!("open /: {e}")));
        crate::exec_allowlist::keep_executable_only(std::os::fd::AsFd::as_fd(&root), &allowed)
            .unwrap_or_else(|e| {
                fail(format!(
                    "the exec allowlist (sandbox.exec_allowlist) could not be enforced: {e}"
                ))
            });
    }
    if let Some(ids) = parsed.run_as {
        crate::confine::run_as_user(ids).unwrap_or_else(|e| fail(e));
    }
    crate::confine::drop_privileges().unwrap_or_else(|e| fail(e));
    let programs: Vec<_> = parsed
        .seccomp_fds
        .iter()
        .map(|fd| crate::confine::read_program(*fd).unwrap_or_else(|e| fail(e)))
        .collect();
    crate::confine::install_merged(&programs, false).unwrap_or_else(|e| fail(e));
}

/// Close descriptors `first..=last` (`last < first` closes nothing).
fn close_from_to(first: u32, last: u32) {
    if last < first {
        return;
    }
    // SAFETY: close_range takes plain integers; closing descriptors this helper does not
    // use is the point.
    let closed = unsafe { nix::libc::syscall(nix::libc::SYS_close_range, first, last, 0u32) };
    if closed != 0 {
        for fd in first..last.min(1024).saturating_add(1) {
            let _ = nix::unistd::close(fd as i32);
        }
    }
}

impl crate::watch::Exec for Target {
    fn exec(&self) -> ! {
        exec_command(self)
    }
}

/// Execute the command as the `caps::Shell` contract says: a name with a `/` as given, a
/// bare name looked up in the command's `PATH`, absolute entries only (no `PATH`, no
/// lookup); on failure report and exit 126/127.
fn exec_command(target: &Target) -> ! {
    if target.terminal {
        become_foreground();
    }
    let name = target.program.to_string_lossy().into_owned();
    let program = if name.contains('/') {
        Some(PathBuf::from(&name))
    } else {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .filter(|dir| dir.is_absolute())
                .map(|dir| dir.join(&name))
                .find(|candidate| {
                    candidate.is_file()
                        && nix::unistd::access(candidate, nix::unistd::AccessFlags::X_OK).is_ok()
                })
        })
    };
    let err = match program.map(|p| CString::new(p.into_os_string().into_encoded_bytes())) {
        Some(Ok(path)) => nix::unistd::execv(&path, &target.argv).unwrap_err(),
        _ => nix::errno::Errno::ENOENT,
    };
    let code = if err == nix::errno::Errno::ENOENT {
        127
    } else {
        126
    };
    // Landlock refuses with EACCES; say which rule a plain "Permission denied" comes from.
    let why = if err == nix::errno::Errno::EACCES && target.exec_restricted {
        " (only files in sandbox.exec_allowlist may be executed)"
    } else {
        ""
    };
    let _ = nix::unistd::write(
        std::io::stderr(),
        format!("warden sandbox: cannot execute {name}: {err}{why}\n").as_bytes(),
    );
    std::process::exit(code)
}

#[cfg(test)]
mod tests;
