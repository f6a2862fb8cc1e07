//! The companion: a small process started with this one — the helper binary, before
//! this process has a second thread — which starts the helper's subcommands for it,
//! above all the sandbox's namespace builder, without executing a binary again, and
//! which is its cgroup watchdog.
//!
//! Why: a sandboxed run used to execute the helper binary from scratch (the dynamic
//! loader, libc's start-up — on a virtual machine that traps every `CPUID`, most of a
//! millisecond — then the helper's own), and a one-shot `warden exec` started a second
//! one as its watchdog. The companion is that watchdog, started earlier: its start-up
//! overlaps Warden's, and each run is then a fork of an already running, single-threaded
//! process. (Warden cannot fork for each run itself: by then it has threads, and the
//! child of a multi-threaded process may not run ordinary code before it executes.
//! A fork of Warden made at its start would do, but would give every process of the
//! sandbox Warden's far larger address space to copy and tear down.)
//!
//! How a run starts through it (`RunGroup::spawn_inside` decides which runs: those whose
//! program is the helper binary, whose subcommands the companion runs in-process):
//!
//! 1. Warden makes the run's cgroups and the output pipes, and sends the request with
//!    every descriptor it involves (`wire.rs`) over the socket pair made when the
//!    companion was started. One request at a time.
//! 2. The companion clones with `CLONE_PARENT` — the child is **Warden's** child, so
//!    Warden waits for it, reaps it and kills its group exactly as if it had spawned it —
//!    and `CLONE_INTO_CGROUP` for the run's v2 cgroup, and replies with the pid. A
//!    request may also ask for new namespaces at birth (the sandbox's builder does: its
//!    child is then the sandbox's pid 1, with nothing in between).
//! 3. The child, before anything else, moves into the run's v1 cgroups (writing `0`:
//!    itself, through `tasks` files Warden opened), so it and everything it starts are
//!    members before any code of the run runs; then it sets up what `posix_spawn` would
//!    (new session, default signals, empty mask, standard descriptors, the kept
//!    descriptors at 3.., nothing else open, working directory, exactly the request's
//!    environment) and runs the subcommand. A failure there exits 125 with `warden: …` on
//!    the run's stderr.
//!
//! The watchdog part is the helper-binary watchdog's (`watchdog.rs`): once told the
//! `warden.<pid>` prefixes, it ends every run they name and removes them when its
//! socket reaches end of file — when this process has gone, however it went. It lives in
//! a session of its own, with `/dev/null` for output, outside every run's cgroup. Its
//! children's parent is the thread that started it (`CLONE_PARENT`), and a child's
//! parent-death signal follows that thread: it must live as long as the process — the
//! composition root starts the companion from the main thread, before `main`.

mod child;
mod serve;
mod wire;

pub use serve::run_companion;

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use nix::libc;

use super::cgroup::Flavor;
use crate::providers::local::spawn::{OwnedCwd, SpawnRequest, SpawnedChild, StdinKind};

/// Runs one of the helper binary's subcommands (`args[0]` names it) in the calling
/// process; never returns. The composition root passes the dispatcher both of its
/// helper binaries use.
pub type Dispatch = fn(&[OsString]) -> !;

/// What a standby does with its wait (see `serve.rs`): called once, in the standby, born
/// in these namespaces, with its ids mapped and nothing of the companion's open, before
/// it waits for its run — the start every run it can be handed needs anyway (the
/// sandbox's builder makes the first of its mounts). Its run is then [`Dispatch`]ed in
/// the same process, which finds what was prepared.
pub type PrepareStandby = fn(crate::providers::local::process::NewNamespaces);

/// This process's companion, if it started one.
static COMPANION: OnceLock<Companion> = OnceLock::new();

/// Warden's side of its companion.
#[derive(Debug)]
pub(crate) struct Companion {
    /// The socket, held by one request at a time (and `None` once the companion has
    /// failed: runs then start the way they would without one).
    socket: Mutex<Option<OwnedFd>>,
    pid: i32,
    /// The standby (see `serve.rs`): asked for, ready, or used (or never made).
    standby: Mutex<StandbyState>,
}

/// Where this process's standby is.
#[derive(Debug, Default)]
enum StandbyState {
    /// None asked for, or used, or it could not be made.
    #[default]
    None,
    /// Asked for in these namespaces: the companion's answer is the next thing it says.
    Asked(u64),
    /// Ready: its pid, this side of its socket, its namespaces.
    Ready {
        pid: i32,
        socket: OwnedFd,
        namespaces: u64,
    },
}

/// The helper binary's subcommand that runs [`run_companion`].
pub const COMPANION_SUBCOMMAND: &str = "__warden-companion";

/// Start this process's companion: `helper` (a binary that dispatches
/// [`COMPANION_SUBCOMMAND`] to [`run_companion`]) in a session of its own. Call it from
/// the thread that lives as long as the process — the companion's children are that
/// thread's, and their parent-death signals follow it (see the module header) — and
/// early, before any run: its start-up then overlaps the caller's. A second call does
/// nothing. Without a companion, runs start the helper binary.
pub fn start_companion(helper: &std::path::Path) -> io::Result<()> {
    if COMPANION.get().is_some() {
        return Ok(());
    }
    let request = SpawnRequest {
        program: helper.to_path_buf(),
        // Named after its Warden (`warden.<pid>`, as that Warden's cgroups are), so that
        // `ps` says whose it is.
        argv: vec![
            helper.as_os_str().to_owned(),
            COMPANION_SUBCOMMAND.into(),
            format!("warden.{}", std::process::id()).into(),
        ],
        env: Vec::new(),
        cwd: OwnedCwd::Path(PathBuf::from("/")),
        stdin: StdinKind::SocketPair,
        keep: Vec::new(),
        born_in: Default::default(),
        terminal: None,
        watches_its_parent: false,
    };
    let child = request.spawn(None)?;
    // Its stdout and stderr pipes are closed here: it has nothing to say.
    let socket = child
        .stdin
        .ok_or_else(|| io::Error::other("the companion was started without its socket"))?;
    let _ = COMPANION.set(Companion {
        socket: Mutex::new(Some(socket)),
        pid: child.pid,
        standby: Mutex::new(StandbyState::None),
    });
    Ok(())
}

/// This process's companion, if it has one.
pub(crate) fn get() -> Option<&'static Companion> {
    COMPANION.get()
}

impl Companion {
    /// Tell the companion the `warden.<pid>` prefixes whose runs it clears once this
    /// process is gone. Whether it could be told.
    pub(crate) fn watch(&self, prefixes: &[(Flavor, PathBuf)]) -> bool {
        let message = wire::Message::Watch(
            prefixes
                .iter()
                .map(|(f, p)| (f.name().to_owned(), p.clone()))
                .collect(),
        );
        self.with_socket(|socket| wire::send(socket, &message, &[]))
            .is_some_and(|r| r.is_ok())
    }

    /// Start `request` (a helper subcommand) in the run's cgroups: born in the v2 cgroup
    /// `v2`, joining the v1 cgroups first thing through their `tasks` files `v1` (opened
    /// here: the kernel checks a v1 move against the credentials of whoever opened the
    /// file, which stay this process's even in a child born in a new user namespace). `None`: the companion
    /// cannot serve it (gone, or the request carries too many descriptors) and the
    /// caller starts it itself.
    pub(crate) fn spawn(
        &self,
        request: &SpawnRequest,
        v2: Option<BorrowedFd<'_>>,
        v2_optional: bool,
        v1: &[OwnedFd],
    ) -> Option<io::Result<Started>> {
        let nul = |s: &std::ffi::OsStr| s.as_bytes().contains(&0);
        if request.argv.iter().any(|a| nul(a))
            || request
                .env
                .iter()
                .any(|(k, v)| nul(k) || nul(v) || k.as_bytes().contains(&b'='))
        {
            return Some(Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an argument or environment entry contains a NUL byte",
            )));
        }
        // On a terminal, the child's three standard descriptors are the terminal's
        // command side. Only a terminal the child does not take as its controlling one
        // (a sandbox, whose helper takes it inside) can come this way: the companion's
        // child-side start has no step that would.
        let (pipes, stdin) = match &request.terminal {
            Some(tty) if tty.controlling => return None,
            Some(_) => (None, None),
            None => {
                let stdin = match request.stdin {
                    StdinKind::Piped => Some(pipe().ok()?),
                    StdinKind::Null => None,
                    StdinKind::SocketPair => return None,
                };
                (Some((pipe().ok()?, pipe().ok()?)), stdin)
            }
        };
        let mut fds: Vec<RawFd> = match (&pipes, &request.terminal) {
            (Some(((_, out_w), (_, err_w))), _) => vec![out_w.as_raw_fd(), err_w.as_raw_fd()],
            (None, Some(tty)) => vec![tty.slave.as_raw_fd(); 3],
            (None, None) => return None,
        };
        if let Some((r, _)) = &stdin {
            fds.push(r.as_raw_fd());
        }
        let cwd = match &request.cwd {
            OwnedCwd::Path(p) => wire::Cwd::Path(p.clone()),
            OwnedCwd::Fd(fd) => {
                fds.push(fd.as_raw_fd());
                wire::Cwd::Fd
            }
        };
        if let Some(v2) = v2 {
            fds.push(v2.as_raw_fd());
        }
        fds.extend(v1.iter().map(AsRawFd::as_raw_fd));
        fds.extend(request.keep.iter().map(AsRawFd::as_raw_fd));
        if fds.len() > wire::MAX_FDS {
            return None;
        }
        let spawn = wire::Spawn {
            argv: request.argv.clone(),
            env: request.env.clone(),
            cwd,
            stdin_piped: stdin.is_some() || request.terminal.is_some(),
            v2: v2.is_some(),
            v1: v1.len() as u32,
            keep: request.keep.len() as u32,
            namespaces: request.born_in.clone_flags(),
            v2_optional,
        };
        let (pid, outside_v2) = match self.hand_to_standby(&spawn, &fds) {
            Some(pid) => {
                if let Some(keep) = KEEP_STANDBY.get() {
                    self.prepare(*keep);
                }
                (pid, v2.is_some())
            }
            None => {
                let message = wire::Message::Spawn(spawn);
                let reply = self.with_socket(|socket| {
                    wire::send(socket, &message, &fds)?;
                    wire::receive_reply(socket)
                })?;
                match reply {
                    Ok(pid) => (pid, false),
                    Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return None,
                    Err(e) => return Some(Err(e)),
                }
            }
        };
        // The child has its own copies; ours of its ends go now, as posix_spawn's would.
        let (stdout, stderr) = match pipes {
            Some(((out_r, _), (err_r, _))) => (Some(out_r), Some(err_r)),
            None => (None, None),
        };
        Some(Ok(Started {
            child: SpawnedChild {
                pid,
                stdin: stdin.map(|(_, w)| w),
                stdout,
                stderr,
            },
            outside_v2,
        }))
    }

    /// Send `spawn` straight to the standby if one fits — without the v2 cgroup, which it
    /// was born before — and say its pid; `None`: the companion
    /// starts the run instead.
    fn hand_to_standby(&self, spawn: &wire::Spawn, fds: &[RawFd]) -> Option<i32> {
        let (pid, socket) = self.take_standby(spawn)?;
        let mut standby_fds = fds.to_vec();
        let mut forwarded = spawn.clone();
        if forwarded.v2 {
            standby_fds.remove(forwarded.v2_index());
            forwarded.v2 = false;
        }
        wire::send(
            socket.as_fd(),
            &wire::Message::Spawn(forwarded),
            &standby_fds,
        )
        .ok()
        .map(|()| pid)
    }

    /// Have a process made ready in `namespaces` for the next request that asks for
    /// exactly them (see `serve.rs`). Whether the companion could be asked.
    pub fn prepare(&self, namespaces: crate::providers::local::process::NewNamespaces) -> bool {
        let namespaces = namespaces.clone_flags();
        let mut standby = self.standby.lock().unwrap_or_else(|p| p.into_inner());
        if !matches!(*standby, StandbyState::None) {
            return true;
        }
        let message = wire::Message::Prepare { namespaces };
        let asked = self
            .with_socket(|socket| wire::send(socket, &message, &[]))
            .is_some_and(|r| r.is_ok());
        if asked {
            *standby = StandbyState::Asked(namespaces);
        }
        asked
    }

    /// The standby for `spawn`, if there is one that fits — its namespaces, and outside the
    /// v2 cgroup allowed — taken (used once). Reads the companion's answer first if it is
    /// still due: before anything else the companion says.
    fn take_standby(&self, spawn: &wire::Spawn) -> Option<(i32, OwnedFd)> {
        let mut standby = self.standby.lock().unwrap_or_else(|p| p.into_inner());
        self.settle(&mut standby);
        let fits = matches!(&*standby, StandbyState::Ready { namespaces, .. }
            if *namespaces == spawn.namespaces && (!spawn.v2 || spawn.v2_optional));
        if !fits {
            return None;
        }
        match std::mem::take(&mut *standby) {
            StandbyState::Ready { pid, socket, .. } => Some((pid, socket)),
            _ => None,
        }
    }

    /// Read the answer to `Prepare` if it is due (the caller holds the standby's lock).
    fn settle(&self, standby: &mut StandbyState) {
        let StandbyState::Asked(namespaces) = *standby else {
            return;
        };
        *standby = match self.with_socket(wire::receive_standby) {
            Some(Ok((pid, socket))) => StandbyState::Ready {
                pid,
                socket,
                namespaces,
            },
            Some(Err(e)) => {
                tracing::debug!("the companion made no standby: {e}");
                StandbyState::None
            }
            None => StandbyState::None,
        };
    }

    /// Hand the companion cgroup directories to remove once the kernel lets them go
    /// (children first). Whether it took them.
    pub(crate) fn remove(&self, dirs: &[PathBuf]) -> bool {
        let mut standby = self.standby.lock().unwrap_or_else(|p| p.into_inner());
        self.settle(&mut standby);
        drop(standby);
        let message = wire::Message::Remove(dirs.to_vec());
        self.with_socket(|socket| wire::send(socket, &message, &[]))
            .is_some_and(|r| r.is_ok())
    }

    /// Run `f` on the socket; `None` if the companion is gone (it is then forgotten, and
    /// an error that says it went is logged once).
    fn with_socket<T>(
        &self,
        f: impl FnOnce(BorrowedFd<'_>) -> io::Result<T>,
    ) -> Option<io::Result<T>> {
        let mut guard = self.socket.lock().unwrap_or_else(|p| p.into_inner());
        let socket = guard.as_ref()?;
        let result = f(socket.as_fd());
        if let Err(e) = &result
            && is_gone(e)
        {
            tracing::warn!(
                "the companion process ({}) is gone ({e}); runs start without it",
                self.pid
            );
            *guard = None;
            return None;
        }
        Some(result)
    }
}

/// A process the companion started.
#[derive(Debug)]
pub(crate) struct Started {
    pub child: SpawnedChild,
    /// It is not in the request's v2 cgroup (a standby made before the run served it).
    pub outside_v2: bool,
}

/// Ask this process's companion, if it has one, to keep a process ready in
/// `namespaces` for the next run that asks for exactly them (a sandboxed run with
/// Warden's builder: `sandbox`'s `NamespaceSandbox::born_in`). A one-shot caller asks right after
/// starting the companion, so that the namespaces are made while it decides.
pub fn prepare_companion(namespaces: crate::providers::local::process::NewNamespaces) {
    if let Some(companion) = get() {
        companion.prepare(namespaces);
    }
}

/// The namespaces a long-lived process keeps a standby in (see
/// [`keep_companion_standby`]): after each run a standby served, the next is asked for.
static KEEP_STANDBY: OnceLock<crate::providers::local::process::NewNamespaces> = OnceLock::new();

/// Like [`prepare_companion`], for a server: keep a process ready in `namespaces` for
/// every run, not only the first — each run a standby serves asks for the next, made
/// while the companion has nothing else to do (off every run's critical path).
pub fn keep_companion_standby(namespaces: crate::providers::local::process::NewNamespaces) {
    let _ = KEEP_STANDBY.set(namespaces);
    prepare_companion(namespaces);
}

/// Whether `e` says the other end of the socket has gone.
fn is_gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::BrokenPipe
        || matches!(
            e.raw_os_error(),
            Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN)
        )
}

/// A close-on-exec pipe: (read end, write end).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)
}
