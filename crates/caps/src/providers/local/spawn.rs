//! Starting a child with `posix_spawn(3)`: a new session (`POSIX_SPAWN_SETSID`), default
//! signal dispositions, stdio wired to our pipes, every other inherited descriptor closed
//! (`posix_spawn_file_actions_addclosefrom_np`), the working directory set by path or
//! by handle (`addfchdir_np`), and — where glibc and the kernel offer it — the child born
//! straight into a cgroup (`posix_spawnattr_setcgroup_np`, `clone3` with
//! `CLONE_INTO_CGROUP`), which spares the caller a cgroup migration: moving a whole
//! process waits for an RCU grace period, several milliseconds per run.
//!
//! Why not `std::process::Command`: it can only create a session from a `pre_exec` hook,
//! which forces `fork()` instead of glibc's `vfork`-style spawn and costs about 0.4 ms per
//! command — more than the whole exec budget (`docs/benchmarks.md`). This module is the
//! one place with `unsafe` FFI in the provider; every block says why it is sound.

use std::ffi::{CString, OsString};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::libc;

/// How the child's stdin is connected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StdinKind {
    /// `/dev/null`.
    Null,
    /// A pipe whose write end is returned to the caller.
    Piped,
    /// One end of a Unix stream socket pair; the other end is returned to the caller
    /// (the companion's line to this process).
    SocketPair,
}

/// A run's terminal as its child gets it (see `super::pty`).
#[derive(Debug)]
pub(crate) struct SpawnTerminal {
    /// The command's side, given to the child as descriptors 0, 1 and 2.
    pub slave: OwnedFd,
    /// Its path, which the child opens (as descriptor 0) to make it its controlling
    /// terminal when `controlling`.
    pub path: CString,
    /// Whether the child takes it as its controlling terminal as it starts. It can: it
    /// is a new session's leader, and posix_spawn makes the session before the file
    /// actions; opening a terminal without `O_NOCTTY` then makes it the session's.
    pub controlling: bool,
}

/// Where the child starts.
#[derive(Clone, Copy)]
enum SpawnCwd<'a> {
    Path(&'a Path),
    Fd(RawFd),
}

/// Where the child starts, owned (see [`SpawnRequest`]).
#[derive(Debug)]
pub(crate) enum OwnedCwd {
    Path(std::path::PathBuf),
    Fd(OwnedFd),
}

/// Everything [`spawn`] needs, owned, so that another thread — one already inside the
/// run's cgroups — can start the child.
#[derive(Debug)]
pub(crate) struct SpawnRequest {
    pub program: std::path::PathBuf,
    pub argv: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    pub cwd: OwnedCwd,
    pub stdin: StdinKind,
    pub keep: Vec<OwnedFd>,
    /// New namespaces the child may be born in (only the companion does that; see
    /// `ProcessSpec::born_in`).
    pub born_in: crate::providers::local::process::NewNamespaces,
    /// A terminal instead of stdin, stdout and stderr (`stdin` is then ignored).
    pub terminal: Option<SpawnTerminal>,
    /// See `ProcessSpec::watches_its_parent`.
    pub watches_its_parent: bool,
}

impl SpawnRequest {
    /// Start the child (in the v2 cgroup `cgroup`, if given).
    pub(crate) fn spawn(&self, cgroup: Option<RawFd>) -> io::Result<SpawnedChild> {
        spawn(self, cgroup)
    }
}

/// A started child: its pid and our ends of its pipes (none on a terminal: its output
/// is read from the terminal).
#[derive(Debug)]
pub(crate) struct SpawnedChild {
    pub pid: libc::pid_t,
    pub stdin: Option<OwnedFd>,
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
}

fn cstring(bytes: &[u8], what: &str) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{what} contains a NUL byte"),
        )
    })
}

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(ret))
    }
}

/// Owns a `posix_spawn_file_actions_t` and destroys it on drop.
struct FileActions(libc::posix_spawn_file_actions_t);

impl FileActions {
    fn new() -> io::Result<Self> {
        let mut raw = MaybeUninit::<libc::posix_spawn_file_actions_t>::uninit();
        // SAFETY: init writes a valid object into the uninitialised storage; we only
        // assume it initialised after init reported success.
        unsafe {
            check(libc::posix_spawn_file_actions_init(raw.as_mut_ptr()))?;
            Ok(FileActions(raw.assume_init()))
        }
    }
    fn dup2(&mut self, fd: RawFd, target: RawFd) -> io::Result<()> {
        // SAFETY: self.0 was initialised by posix_spawn_file_actions_init.
        check(unsafe { libc::posix_spawn_file_actions_adddup2(&mut self.0, fd, target) })
    }
    fn open(&mut self, target: RawFd, path: &CString, flags: libc::c_int) -> io::Result<()> {
        // SAFETY: initialised object; glibc copies the path string.
        check(unsafe {
            libc::posix_spawn_file_actions_addopen(&mut self.0, target, path.as_ptr(), flags, 0)
        })
    }
    fn chdir(&mut self, path: &CString) -> io::Result<()> {
        // SAFETY: initialised object; glibc copies the path string.
        check(unsafe { libc::posix_spawn_file_actions_addchdir_np(&mut self.0, path.as_ptr()) })
    }
    fn fchdir(&mut self, fd: RawFd) -> io::Result<()> {
        // SAFETY: initialised object.
        check(unsafe { libc::posix_spawn_file_actions_addfchdir_np(&mut self.0, fd) })
    }
    #[cfg(target_env = "gnu")]
    fn close_from(&mut self, from: RawFd) -> io::Result<()> {
        // SAFETY: initialised object.
        check(unsafe { libc::posix_spawn_file_actions_addclosefrom_np(&mut self.0, from) })
    }
    /// Other C libraries (musl) have no such action, and a child that inherited what it
    /// should not would fail open: nothing is spawned. Only the small helper is built for
    /// musl (`cargo xtask musl-helper`), and it never spawns through here.
    #[cfg(not(target_env = "gnu"))]
    fn close_from(&mut self, from: RawFd) -> io::Result<()> {
        let _ = (&self.0, from);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this C library cannot close inherited descriptors at spawn (glibc's posix_spawn_file_actions_addclosefrom_np): nothing is started",
        ))
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialised in new(), destroyed exactly once here.
        unsafe {
            libc::posix_spawn_file_actions_destroy(&mut self.0);
        }
    }
}

/// glibc's `POSIX_SPAWN_SETCGROUP` (glibc 2.35+; not in the `libc` crate).
const POSIX_SPAWN_SETCGROUP: libc::c_short = 0x100;

type SetCgroup = unsafe extern "C" fn(*mut libc::posix_spawnattr_t, libc::c_int) -> libc::c_int;

/// glibc's `posix_spawnattr_setcgroup_np`, looked up at run time so the binary still
/// starts on an older glibc (where the caller migrates instead).
fn setcgroup_fn() -> Option<SetCgroup> {
    static FOUND: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let address = *FOUND.get_or_init(|| {
        // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only reads the
        // loaded objects' symbol tables.
        let symbol =
            unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"posix_spawnattr_setcgroup_np".as_ptr()) };
        (!symbol.is_null()).then_some(symbol as usize)
    });
    // SAFETY: the symbol is glibc's posix_spawnattr_setcgroup_np, whose C signature is
    // `int (posix_spawnattr_t *, int)`, exactly `SetCgroup`.
    address.map(|a| unsafe { std::mem::transmute::<usize, SetCgroup>(a) })
}

/// Whether a child can be spawned straight into a cgroup here (glibc side; the kernel's
/// answer comes from the spawn itself).
pub(crate) fn can_spawn_into_cgroup() -> bool {
    setcgroup_fn().is_some()
}

/// Owns a `posix_spawnattr_t` and destroys it on drop.
struct Attr(libc::posix_spawnattr_t);

impl Attr {
    /// New session, empty signal mask, every signal back to its default action (Rust
    /// ignores SIGPIPE in this process, and an ignored disposition survives exec).
    fn new_session(cgroup: Option<RawFd>) -> io::Result<Self> {
        let mut raw = MaybeUninit::<libc::posix_spawnattr_t>::uninit();
        // SAFETY: init writes a valid object; assumed initialised only after success.
        let mut attr = unsafe {
            check(libc::posix_spawnattr_init(raw.as_mut_ptr()))?;
            Attr(raw.assume_init())
        };
        let mut empty = MaybeUninit::<libc::sigset_t>::uninit();
        let mut all = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigemptyset/sigfillset initialise the sets before they are read; the
        // attr object is initialised; the flag values are the documented constants.
        unsafe {
            libc::sigemptyset(empty.as_mut_ptr());
            libc::sigfillset(all.as_mut_ptr());
            check(libc::posix_spawnattr_setsigmask(
                &mut attr.0,
                empty.as_ptr(),
            ))?;
            check(libc::posix_spawnattr_setsigdefault(
                &mut attr.0,
                all.as_ptr(),
            ))?;
            let mut flags = libc::POSIX_SPAWN_SETSID
                | libc::POSIX_SPAWN_SETSIGMASK as libc::c_short
                | libc::POSIX_SPAWN_SETSIGDEF as libc::c_short;
            if let Some(fd) = cgroup {
                let set = setcgroup_fn().ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::Unsupported,
                        "this glibc cannot spawn into a cgroup",
                    )
                })?;
                check(set(&mut attr.0, fd))?;
                flags |= POSIX_SPAWN_SETCGROUP;
            }
            check(libc::posix_spawnattr_setflags(&mut attr.0, flags))?;
        }
        Ok(attr)
    }
}

impl Drop for Attr {
    fn drop(&mut self) {
        // SAFETY: initialised in new_session(), destroyed exactly once here.
        unsafe {
            libc::posix_spawnattr_destroy(&mut self.0);
        }
    }
}

/// A close-on-exec pipe: (read end, write end).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)
}

/// Duplicate `fd` to a close-on-exec descriptor numbered at least `min`.
fn dup_at_least(fd: RawFd, min: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC takes an int argument and returns a new descriptor we own.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, min) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `new` is a fresh descriptor returned by fcntl and owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// Spawn `request.program` with exactly its `argv` and `env`. `keep` descriptors appear in
/// the child as 3, 4, ... in order; everything else above 2 is closed in the child. With
/// `cgroup` (a cgroup v2 directory's descriptor) the child starts as a member of it.
fn spawn(request: &SpawnRequest, cgroup: Option<RawFd>) -> io::Result<SpawnedChild> {
    let SpawnRequest {
        program,
        argv,
        env,
        cwd,
        stdin,
        keep,
        born_in: _,
        terminal,
        watches_its_parent: _,
    } = request;
    let (stdin, terminal) = (*stdin, terminal.as_ref());
    let cwd = match cwd {
        OwnedCwd::Path(p) => SpawnCwd::Path(p),
        OwnedCwd::Fd(fd) => SpawnCwd::Fd(fd.as_raw_fd()),
    };
    let program_c = cstring(program.as_os_str().as_bytes(), "program path")?;
    let argv_c = argv
        .iter()
        .map(|a| cstring(a.as_bytes(), "argument"))
        .collect::<io::Result<Vec<_>>>()?;
    let env_c = env
        .iter()
        .map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            cstring(&kv, "environment entry")
        })
        .collect::<io::Result<Vec<_>>>()?;
    let mut argv_p: Vec<*mut libc::c_char> = argv_c.iter().map(|c| c.as_ptr().cast_mut()).collect();
    argv_p.push(std::ptr::null_mut());
    let mut env_p: Vec<*mut libc::c_char> = env_c.iter().map(|c| c.as_ptr().cast_mut()).collect();
    env_p.push(std::ptr::null_mut());

    let pipes = match terminal {
        Some(_) => None,
        None => Some((pipe()?, pipe()?)),
    };
    let stdin_pipe = match stdin {
        _ if terminal.is_some() => None,
        StdinKind::Piped => Some(pipe()?),
        StdinKind::SocketPair => {
            use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
            let (ours, theirs) = socketpair(
                AddressFamily::Unix,
                SockType::Stream,
                None,
                SockFlag::SOCK_CLOEXEC,
            )
            .map_err(io::Error::from)?;
            Some((theirs, ours))
        }
        StdinKind::Null => None,
    };
    // Kept descriptors go to 3.. in the child; move our copies above that range first so
    // no dup2 clobbers a source that is still to be copied.
    let first_free = 3 + keep.len() as RawFd;
    let keep_high = keep
        .iter()
        .map(|fd| dup_at_least(fd.as_raw_fd(), first_free))
        .collect::<io::Result<Vec<_>>>()?;
    let cwd_c = match cwd {
        SpawnCwd::Path(p) => Some(cstring(p.as_os_str().as_bytes(), "working directory")?),
        SpawnCwd::Fd(_) => None,
    };

    let mut actions = FileActions::new()?;
    match (&cwd, &cwd_c) {
        (SpawnCwd::Fd(fd), _) => actions.fchdir(*fd)?,
        (SpawnCwd::Path(_), Some(c)) => actions.chdir(c)?,
        (SpawnCwd::Path(_), None) => {}
    }
    match (terminal, &pipes) {
        (Some(tty), _) => {
            if tty.controlling {
                actions.open(0, &tty.path, libc::O_RDWR)?;
            } else {
                actions.dup2(tty.slave.as_raw_fd(), 0)?;
            }
            actions.dup2(0, 1)?;
            actions.dup2(0, 2)?;
        }
        (None, Some(((_, out_w), (_, err_w)))) => {
            match &stdin_pipe {
                Some((r, _)) => actions.dup2(r.as_raw_fd(), 0)?,
                None => actions.open(0, &cstring(b"/dev/null", "path")?, libc::O_RDONLY)?,
            }
            actions.dup2(out_w.as_raw_fd(), 1)?;
            actions.dup2(err_w.as_raw_fd(), 2)?;
        }
        (None, None) => unreachable!("pipes are made for every run without a terminal"),
    }
    for (i, fd) in keep_high.iter().enumerate() {
        actions.dup2(fd.as_raw_fd(), 3 + i as RawFd)?;
    }
    actions.close_from(first_free)?;
    let attr = Attr::new_session(cgroup)?;

    let mut pid: libc::pid_t = 0;
    // SAFETY: every pointer is valid for the duration of the call: program_c, argv_c and
    // env_c outlive it, argv_p/env_p are NULL-terminated arrays of pointers into them,
    // and actions/attr are initialised objects. posix_spawn does not retain them.
    let ret = unsafe {
        libc::posix_spawn(
            &mut pid,
            program_c.as_ptr(),
            &actions.0,
            &attr.0,
            argv_p.as_ptr(),
            env_p.as_ptr(),
        )
    };
    check(ret)?;
    let (stdout, stderr) = match pipes {
        // Our copies of the child's ends go: the reader sees end-of-file with the child.
        Some(((out_r, _), (err_r, _))) => (Some(out_r), Some(err_r)),
        None => (None, None),
    };
    Ok(SpawnedChild {
        pid,
        stdin: stdin_pipe.map(|(_, w)| w),
        stdout,
        stderr,
    })
}
