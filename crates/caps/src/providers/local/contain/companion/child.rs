//! A child of the companion, between its clone and the subcommand it runs: it joins the
//! run's v1 cgroups first, then is set up as `posix_spawn` would set up a child.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

use nix::libc;

use super::{Dispatch, PrepareStandby, wire};

/// What a standby calls itself (`/proc/PID/comm`): its command line is still the
/// companion's.
pub const STANDBY_NAME: &std::ffi::CStr = c"warden-pid1";

/// The descriptors a child of the companion starts from.
pub(super) struct Child {
    stdout: OwnedFd,
    stderr: OwnedFd,
    stdin: Option<OwnedFd>,
    cwd_fd: Option<OwnedFd>,
    v1: Vec<OwnedFd>,
    keep: Vec<OwnedFd>,
    /// The companion's uid and gid (the child's, outside a new user namespace).
    ids: (u32, u32),
}

impl Child {
    /// The descriptors that came with `spawn`, in [`wire::Spawn`]'s order, and the v2
    /// cgroup's (for the clone; the child itself does not need it).
    pub(super) fn take(
        spawn: &wire::Spawn,
        fds: Vec<OwnedFd>,
        ids: (u32, u32),
    ) -> Result<(Child, Option<OwnedFd>), i32> {
        let mut fds = fds.into_iter();
        let mut next = || fds.next().ok_or(libc::EINVAL);
        let stdout = next()?;
        let stderr = next()?;
        let stdin = if spawn.stdin_piped {
            Some(next()?)
        } else {
            None
        };
        let cwd_fd = if spawn.cwd == wire::Cwd::Fd {
            Some(next()?)
        } else {
            None
        };
        let v2 = if spawn.v2 { Some(next()?) } else { None };
        let v1: Vec<OwnedFd> = (0..spawn.v1).map(|_| next()).collect::<Result<_, _>>()?;
        let keep: Vec<OwnedFd> = (0..spawn.keep).map(|_| next()).collect::<Result<_, _>>()?;
        let child = Child {
            stdout,
            stderr,
            stdin,
            cwd_fd,
            v1,
            keep,
            ids,
        };
        Ok((child, v2))
    }

    /// The standby's life until it is handed a run (see `serve.rs`): it dies with Warden,
    /// maps its ids in its new user namespace, keeps nothing of the companion's open but
    /// its own socket (and `/dev/null` as descriptor 0), starts its session and resets its
    /// signals as its run's child would, does what `prepare` does ahead of its run, and
    /// waits. Handed a request, it becomes that run's child; if the socket
    /// closes instead, it exits.
    pub(super) fn wait_as_standby(
        socket: OwnedFd,
        ids: (u32, u32),
        namespaces: u64,
        dispatch: Dispatch,
        prepare: PrepareStandby,
    ) -> ! {
        // SAFETY: plain prctl calls: integers, and a NUL-terminated name of 16 bytes at
        // most (what `ps` shows: the sandbox's pid 1 to be, not another companion).
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            libc::prctl(libc::PR_SET_NAME, STANDBY_NAME.as_ptr(), 0, 0, 0);
        }
        let mapped = namespaces & libc::CLONE_NEWUSER as u64 == 0 || map_ids(ids).is_ok();
        // SAFETY: open of a constant path, dup2 onto 0 (the companion's own socket to
        // Warden, which this process must not hold), and close_range of everything
        // above 2 but this socket.
        unsafe {
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if null < 0 || libc::dup2(null, 0) < 0 {
                libc::_exit(125);
            }
            let mine = socket.as_raw_fd() as u32;
            if mine > 3 {
                libc::syscall(libc::SYS_close_range, 3u32, mine - 1, 0u32);
            }
            libc::syscall(libc::SYS_close_range, mine + 1, u32::MAX, 0u32);
        }
        // Its session and signals as its run's child starts with them, now rather than on
        // the run's way (nothing here changes them again).
        if !mapped || nix::unistd::setsid().is_err() {
            // SAFETY: ends this process at once; the companion finds it gone.
            unsafe { libc::_exit(125) }
        }
        reset_signals();
        // Nothing path-bound may follow this: what `prepare` does may change what paths
        // lead to (the sandbox's builder moves this process's root).
        prepare(crate::providers::local::process::NewNamespaces::from_clone_flags(namespaces));
        match wire::receive(socket.as_fd()) {
            Ok(Some((wire::Message::Spawn(spawn), fds))) => {
                drop(socket);
                match Child::take(&spawn, fds, ids) {
                    Ok((child, _)) => child.run(&spawn, dispatch, true),
                    // SAFETY: ends this process at once.
                    Err(_) => unsafe { libc::_exit(125) },
                }
            }
            // SAFETY: ends this process at once.
            _ => unsafe { libc::_exit(0) },
        }
    }

    /// Report a setup failure on the run's stderr and exit 125 (Warden failed): the
    /// subcommand never runs.
    fn fail(&self, what: &str, e: impl std::fmt::Display) -> ! {
        let _ = nix::unistd::write(&self.stderr, format!("warden: {what}: {e}\n").as_bytes());
        // SAFETY: ends this child at once.
        unsafe { libc::_exit(125) }
    }

    /// Join the run, set the process up as `posix_spawn` would, and run the subcommand
    /// (`standby`: this is a standby, whose new user namespace's ids are mapped already,
    /// which leads a session of its own and has its signals reset already, and whose
    /// descriptor 0 is `/dev/null`, opened before its root may have moved).
    pub(super) fn run(self, spawn: &wire::Spawn, dispatch: Dispatch, standby: bool) -> ! {
        // The v1 cgroups first: from here on everything this process does, and every
        // process it starts, belongs to the run. `0` moves the calling thread alone,
        // which the kernel does without its global lock (see `cgroup::move_into`).
        for tasks in &self.v1 {
            if let Err(e) = rustix::io::write(tasks, b"0") {
                self.fail("cannot join the run's cgroup", e);
            }
        }
        if !standby
            && spawn.namespaces & libc::CLONE_NEWUSER as u64 != 0
            && let Err(e) = map_ids(self.ids)
        {
            self.fail("cannot map the new user namespace's ids", e);
        }
        if !standby {
            if let Err(e) = nix::unistd::setsid() {
                self.fail("setsid", e);
            }
            reset_signals();
        }
        self.place_descriptors(spawn.keep as i32, standby);
        let chdir = match (&spawn.cwd, &self.cwd_fd) {
            (wire::Cwd::Fd, Some(fd)) => nix::unistd::fchdir(fd),
            (wire::Cwd::Path(p), _) => nix::unistd::chdir(p.as_path()),
            (wire::Cwd::Fd, None) => Err(nix::errno::Errno::EBADF),
        };
        if let Err(e) = chdir {
            self.fail("cannot enter the working directory", e);
        }
        // Everything but 0, 1, 2 and the kept descriptors (3..): the socket, the
        // cgroups, the originals of what was just placed.
        // SAFETY: close_range on plain integers; nothing above the kept range is used
        // from here on (`self.stderr`'s copy is descriptor 2 now).
        unsafe { libc::syscall(libc::SYS_close_range, 3 + spawn.keep, u32::MAX, 0u32) };
        std::mem::forget(self);
        set_environment(&spawn.env);
        let args = &spawn.argv[1..];
        // A panic must not unwind into the companion's loop in this process.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dispatch(args)));
        // SAFETY: ends this child at once.
        unsafe { libc::_exit(125) }
    }

    /// Standard descriptors and the kept ones at 3.., each moved above that range first
    /// so that no `dup2` overwrites a source still to be copied.
    fn place_descriptors(&self, keep: i32, standby: bool) {
        let above = 3 + keep;
        let high = |fd: RawFd| {
            // SAFETY: F_DUPFD_CLOEXEC on a descriptor this process holds.
            let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, above) };
            if new < 0 {
                self.fail("dup", io::Error::last_os_error());
            }
            new
        };
        let stdin = match &self.stdin {
            Some(fd) => high(fd.as_raw_fd()),
            // A standby's own `/dev/null` (see `wait_as_standby`).
            None if standby => high(0),
            None => {
                // SAFETY: open of a constant path.
                let null =
                    unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
                if null < 0 {
                    self.fail("open /dev/null", io::Error::last_os_error());
                }
                high(null)
            }
        };
        let sources: Vec<RawFd> = [
            stdin,
            high(self.stdout.as_raw_fd()),
            high(self.stderr.as_raw_fd()),
        ]
        .into_iter()
        .chain(self.keep.iter().map(|fd| high(fd.as_raw_fd())))
        .collect();
        for (target, source) in sources.into_iter().enumerate() {
            // SAFETY: dup2 onto the numbers the child is to have; dup2 clears
            // close-on-exec on the copy, so it is inherited.
            if unsafe { libc::dup2(source, target as RawFd) } < 0 {
                self.fail("dup2", io::Error::last_os_error());
            }
        }
    }
}

/// In a new user namespace: the caller's uid and gid mapped to themselves, and
/// `setgroups` denied (which an unprivileged gid map requires) — bubblewrap's default,
/// and what Warden's sandbox runs as. Written from inside (`/proc` is still the host's
/// here, so `self` is this process).
fn map_ids((uid, gid): (u32, u32)) -> io::Result<()> {
    let write = |file: &str, text: String| {
        std::fs::write(file, text).map_err(|e| io::Error::new(e.kind(), format!("{file}: {e}")))
    };
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))
}

/// Every signal back to its default action and none blocked, as `posix_spawn` with
/// `SETSIGDEF` and `SETSIGMASK` leaves a child.
fn reset_signals() {
    // SAFETY: sigemptyset initialises the set before sigprocmask reads it; sigaction
    // with SIG_DFL installs no handler. Signals that cannot be changed (SIGKILL,
    // SIGSTOP, those libc reserves) just fail.
    unsafe {
        let mut none = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(none.as_mut_ptr());
        libc::sigprocmask(libc::SIG_SETMASK, none.as_ptr(), std::ptr::null_mut());
        for signal in 1..=64 {
            libc::signal(signal, libc::SIG_DFL);
        }
    }
}

/// Exactly `env` as this process's environment (the subcommand, and what it executes,
/// see only the request's).
fn set_environment(env: &[(OsString, OsString)]) {
    let old: Vec<OsString> = std::env::vars_os().map(|(k, _)| k).collect();
    for key in old {
        // SAFETY: this child of the companion has one thread.
        unsafe { std::env::remove_var(&key) };
    }
    for (key, value) in env {
        // The caller refused these before sending (as posix_spawn's caller would).
        if key.is_empty()
            || key.as_bytes().contains(&b'=')
            || key.as_bytes().contains(&0)
            || value.as_bytes().contains(&0)
        {
            continue;
        }
        // SAFETY: as above.
        unsafe { std::env::set_var(key, value) };
    }
}
