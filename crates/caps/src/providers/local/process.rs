//! The process supervisor behind every real run: spawn in a new session, read stdout
//! and stderr concurrently into a bounded collector, enforce the timeout, and kill the
//! whole tree so nothing outlives the run.
//!
//! Exit is observed through a pidfd, which becomes readable when the child exits but
//! does not reap it. While the child is an unreaped zombie its pid (= its process group
//! and session id) cannot be reused, so `killpg` after exit hits only our own leftovers.
//!
//! Process group and session kill reach what stayed in them; the run's containment unit
//! (`contain/`: a cgroup, or a subreaper) reaches everything else — a descendant that
//! called `setsid()`, a double-forked daemon — and ends it when the run ends, whether by
//! exit, timeout or cancellation.

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::libc;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::io::AsyncWriteExt;
use tokio::io::unix::AsyncFd;

use super::contain::{Containment, Removal, Unit};
use super::spawn::{OwnedCwd, SpawnRequest, StdinKind};
use crate::output::{OutputCollector, Stream};
use crate::shell::{ExecOptions, ExecOutput, ExitStatus, OutputLimits, ResourceLimits, Stdin};
use crate::{CapsError, Result};

/// Time a process tree gets between SIGTERM and SIGKILL after a timeout: enough for a
/// well-behaved program to flush, short enough that a timeout means a prompt answer.
pub const KILL_GRACE: Duration = Duration::from_millis(500);

/// After the child exited and its group was killed, how long we still wait for the
/// pipes to reach end-of-file. Only a descendant that escaped the group (via `setsid`)
/// can keep them open; we stop waiting for it rather than hang.
pub const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(200);

/// Read size for the output pipes: twice the default pipe capacity, so one read empties
/// a full pipe.
const READ_CHUNK: usize = 128 * 1024;

/// How long an exit report already written is read for once the process has exited (see
/// `wait_for_end`): what is in the pipe is there at once; only a writer that escaped
/// every containment could make this wait.
const REPORT_AFTER_EXIT: Duration = Duration::from_millis(100);

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
    /// Descriptors the child keeps open under the same numbers (e.g. a seccomp program
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
        }
    }
}

/// Spawn `spec` and supervise it to completion under `timeout` and `limits`.
///
/// Dropping the returned future kills the process tree.
pub async fn supervise(
    spec: ProcessSpec,
    timeout: Duration,
    limits: OutputLimits,
) -> Result<ExecOutput> {
    supervise_live(spec, timeout, limits, None).await
}

/// [`supervise`], also copying the output into `live` as it arrives.
pub async fn supervise_live(
    spec: ProcessSpec,
    timeout: Duration,
    limits: OutputLimits,
    live: Option<crate::LiveOutput>,
) -> Result<ExecOutput> {
    if timeout.is_zero() {
        return Err(CapsError::invalid("timeout must be greater than zero"));
    }
    let started = Instant::now();
    let ProcessSpec {
        program,
        argv,
        env,
        cwd,
        stdin,
        keep_fds,
        display_name,
        containment,
        resources,
        born_in,
        exit_report,
    } = spec;
    if argv.is_empty() {
        return Err(CapsError::invalid("argv must not be empty"));
    }
    let (stdin_kind, stdin_bytes) = match stdin {
        Stdin::Null => (StdinKind::Null, None),
        Stdin::Bytes(bytes) => (StdinKind::Piped, Some(bytes)),
    };
    let mut unit = containment
        .unit(resources)
        .map_err(|source| CapsError::Io {
            op: "contain the run of",
            path: PathBuf::from(&display_name),
            source,
        })?;
    let (program, argv) = unit.wrap(program, argv);
    let request = SpawnRequest {
        program,
        argv,
        env,
        cwd: match cwd {
            WorkingDir::Path(p) => OwnedCwd::Path(p),
            WorkingDir::Handle(fd) => OwnedCwd::Fd(fd),
        },
        stdin: stdin_kind,
        keep: keep_fds,
        born_in,
    };
    let child = unit
        .spawn(request)
        .map_err(|e| spawn_error(&display_name, e))?;
    let pid = child.pid;
    let mut guard = TreeGuard::new(Pid::from_raw(pid), unit);
    let (wake_r, wake_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| CapsError::from_io("pipe", &display_name, e.into()))?;
    guard.reader_wake = Some(wake_w);
    let (stdout, stderr) = (child.stdout, child.stderr);
    let mut reader =
        tokio::task::spawn_blocking(move || read_output(stdout, stderr, wake_r, limits, live));
    let writer = write_stdin(child.stdin, stdin_bytes);
    let exited = wait_for_end(child.pid, exit_report);
    tokio::pin!(writer);
    tokio::pin!(exited);
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut writer_done = false;
    let mut timed_out = false;
    let mut kill_at: Option<tokio::time::Instant> = None;

    let reported = loop {
        let escalate = async {
            match kill_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = &mut writer, if !writer_done => writer_done = true,
            result = &mut exited => {
                break result.map_err(|e| CapsError::from_io("wait", &display_name, e))?;
            }
            _ = &mut deadline, if !timed_out => {
                timed_out = true;
                guard.signal(Signal::SIGTERM);
                kill_at = Some(tokio::time::Instant::now() + KILL_GRACE);
            }
            _ = escalate => {
                guard.kill_all();
                kill_at = None;
            }
        }
    };

    guard.kill_all();
    if timed_out {
        guard.sweep_session();
    }
    let status = match reported {
        // The leader said how its command ended and is on its way out: it is reaped in
        // the background, not waited for.
        Some(status) => {
            guard.reap_in_background();
            status
        }
        None => guard
            .reap()
            .map_err(|e| CapsError::from_io("wait", &display_name, e))?,
    };
    let collector = match tokio::time::timeout(DRAIN_AFTER_EXIT, &mut reader).await {
        Ok(joined) => joined,
        Err(_) => {
            // Only a descendant that escaped every containment can still hold the pipes.
            guard.wake_reader();
            reader.await
        }
    }
    .map_err(|e| CapsError::from_io("read output", &display_name, std::io::Error::other(e)))?;
    let note = guard.finish_unit().await;
    let mut output = collector.finish(status, timed_out, started.elapsed());
    if let Some(note) = note {
        for text in [&mut output.stderr, &mut output.combined] {
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&note);
            text.push('\n');
        }
    }
    Ok(output)
}

/// Map an exec failure to the typed errors the CLI turns into 127 / 126.
fn spawn_error(program: &str, e: std::io::Error) -> CapsError {
    let program = program.to_owned();
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) => CapsError::ProgramNotFound { program },
        Some(libc::EACCES) | Some(libc::EPERM) => CapsError::NotExecutable {
            program,
            reason: "permission denied".into(),
        },
        Some(libc::ENOEXEC) => CapsError::NotExecutable {
            program,
            reason: "not an executable format".into(),
        },
        Some(libc::EISDIR) => CapsError::NotExecutable {
            program,
            reason: "is a directory".into(),
        },
        _ if e.kind() == std::io::ErrorKind::InvalidInput => CapsError::invalid(e.to_string()),
        _ => CapsError::Io {
            op: "spawn",
            path: PathBuf::from(program),
            source: e,
        },
    }
}

/// Read stdout and stderr until both reach end-of-file (or `wake` becomes readable),
/// on a blocking thread: a tight `poll`+`read` loop moves bulk output several times
/// faster than readiness-driven async reads, and keeps memory bounded by the collector.
fn read_output(
    stdout: OwnedFd,
    stderr: OwnedFd,
    wake: OwnedFd,
    limits: OutputLimits,
    live: Option<crate::LiveOutput>,
) -> OutputCollector {
    let mut collector = OutputCollector::new(limits).with_live(live);
    let mut buf = vec![0u8; READ_CHUNK];
    let mut open = [Some(stdout), Some(stderr)];
    while open.iter().any(Option::is_some) {
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(3);
        let mut which: Vec<usize> = Vec::with_capacity(2);
        for (i, fd) in open.iter().enumerate() {
            if let Some(fd) = fd {
                fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
                which.push(i);
            }
        }
        fds.push(PollFd::new(wake.as_fd(), PollFlags::POLLIN));
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => break,
        }
        if fds
            .last()
            .and_then(PollFd::revents)
            .is_some_and(|r| !r.is_empty())
        {
            break;
        }
        let ready: Vec<usize> = fds[..which.len()]
            .iter()
            .zip(&which)
            .filter(|(fd, _)| fd.revents().is_some_and(|r| !r.is_empty()))
            .map(|(_, i)| *i)
            .collect();
        drop(fds);
        for i in ready {
            let Some(fd) = &open[i] else { continue };
            match nix::unistd::read(fd, &mut buf) {
                Ok(0) => open[i] = None,
                Ok(n) => collector.push(
                    if i == 0 {
                        Stream::Stdout
                    } else {
                        Stream::Stderr
                    },
                    &buf[..n],
                ),
                Err(nix::errno::Errno::EINTR) | Err(nix::errno::Errno::EAGAIN) => {}
                // A read error on a pipe means it is gone; what we have is what there is.
                Err(_) => open[i] = None,
            }
        }
    }
    collector
}

async fn write_stdin(stdin: Option<OwnedFd>, bytes: Option<Vec<u8>>) {
    let (Some(fd), Some(bytes)) = (stdin, bytes) else {
        return;
    };
    let Ok(mut sender) = tokio::net::unix::pipe::Sender::from_owned_fd(fd) else {
        return;
    };
    // A child that exits without reading all its input is not an error.
    let _ = sender.write_all(&bytes).await;
}

/// Resolves when process `pid` has exited — or, with an exit report (see
/// [`ProcessSpec::exit_report`]), when it reported its status, whichever comes first:
/// `Some(status)` when the report decided.
async fn wait_for_end(
    pid: libc::pid_t,
    report: Option<OwnedFd>,
) -> std::io::Result<Option<ExitStatus>> {
    let exited = wait_for_exit(pid);
    tokio::pin!(exited);
    if let Some(report) = report {
        let reported = reported_exit(report);
        tokio::pin!(reported);
        tokio::select! {
            result = &mut exited => {
                result?;
                // Both may be ready at once (the process wrote its report and exited):
                // a report already written still says how the command ended — bubblewrap's
                // exit code cannot tell a signal from 128 + N. Every writer is gone with
                // the process, so this is a read of what is there, bounded all the same.
                return Ok(tokio::time::timeout(REPORT_AFTER_EXIT, reported)
                    .await
                    .ok()
                    .flatten());
            }
            code = &mut reported => {
                if let Some(code) = code {
                    return Ok(Some(code));
                }
            }
        }
    }
    exited.await.map(|()| None)
}

/// The exit status reported on `fd` (`{ "exit-code": N }`, after any other lines), or
/// `None` if the pipe closes without one (or cannot be read).
async fn reported_exit(fd: OwnedFd) -> Option<ExitStatus> {
    let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(fd).ok()?;
    let mut text = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        use tokio::io::AsyncReadExt as _;
        let n = pipe.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        text.extend_from_slice(&buf[..n]);
        if let Some(status) = exit_status_in(&text) {
            return Some(status);
        }
        if text.len() > 64 * 1024 {
            return None;
        }
    }
}

/// The status in the first complete `{ "exit-code": N }` line in `text`: a signal when
/// the line also says `"signal": S` and N is 128 + S (what a shell would report for it),
/// else the code. bubblewrap's own lines say only the code, 128 + S for a signal too.
fn exit_status_in(text: &[u8]) -> Option<ExitStatus> {
    let text = std::str::from_utf8(text).ok()?;
    let complete = &text[..text.rfind('\n')? + 1];
    complete.lines().find_map(|line| {
        let code = number_after(line, "\"exit-code\"")?;
        Some(match number_after(line, "\"signal\"") {
            Some(signal) if signal > 0 && code == 128 + signal => ExitStatus::Signal(signal),
            _ => ExitStatus::Code(code),
        })
    })
}

/// The integer after `key` and a colon in `line`.
fn number_after(line: &str, key: &str) -> Option<i32> {
    let rest = line.split_once(key)?.1.trim_start();
    let value = rest.strip_prefix(':')?.trim_start();
    let digits: String = value
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    digits.parse().ok()
}

/// Resolves when process `pid` has exited, without reaping it.
async fn wait_for_exit(pid: libc::pid_t) -> std::io::Result<()> {
    let pid =
        rustix::process::Pid::from_raw(pid).ok_or_else(|| std::io::Error::other("invalid pid"))?;
    match rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::NONBLOCK) {
        Ok(pidfd) => {
            // SAFETY: `pidfd` is an `OwnedFd` moved into the `AsyncFd`, so the descriptor
            // is valid and stays open for as long as the registration exists.
            let pidfd =
                unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) }
                    .map_err(|e| e.into_parts().1)?;
            // A pidfd polls readable once the process has exited and stays readable, so
            // one readiness event is the whole answer.
            let _ready = pidfd.readable().await?;
            Ok(())
        }
        // Kernels before 5.3, or container seccomp profiles that refuse pidfd_open: wait
        // on a blocking thread with WNOWAIT, which also leaves the zombie unreaped.
        Err(e) if e == rustix::io::Errno::NOSYS || e == rustix::io::Errno::PERM => {
            tokio::task::spawn_blocking(move || {
                use rustix::process::{WaitId, WaitIdOptions, waitid};
                waitid(
                    WaitId::Pid(pid),
                    WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
                )
                .map(|_| ())
                .map_err(std::io::Error::from)
            })
            .await
            .map_err(std::io::Error::other)?
        }
        Err(e) => Err(e.into()),
    }
}

/// Owns the run's process tree until it is reaped: kills the group on timeout, and when
/// the supervising future is dropped early kills the group, the session and the
/// containment unit, releases the output reader, and reaps the child on a helper thread
/// so no zombie is left.
struct TreeGuard {
    leader: Pid,
    unit: Option<Unit>,
    reaped: bool,
    /// The leader reported its end and is still exiting: reaped after the unit is
    /// finished, on that thread, without the run waiting for it.
    reap_later: bool,
    reader_wake: Option<OwnedFd>,
}

impl TreeGuard {
    fn new(leader: Pid, unit: Unit) -> Self {
        TreeGuard {
            leader,
            unit: Some(unit),
            reaped: false,
            reap_later: false,
            reader_wake: None,
        }
    }

    fn signal(&self, signal: Signal) {
        // ESRCH (nothing left in the group) is the normal case after a clean exit.
        let _ = killpg(self.leader, signal);
    }

    /// End every process of the run: the unit (which also reaches what left the group),
    /// then the group. A reaper leader ends its run itself when asked and must not be
    /// killed before it has.
    fn kill_all(&self) {
        if let Some(unit) = &self.unit {
            unit.kill();
            if matches!(unit, Unit::Reaper { .. }) {
                return;
            }
        }
        self.signal(Signal::SIGKILL);
    }

    /// Kill every process still in the run's session, including members of process
    /// groups the child created (shells with job control do that).
    fn sweep_session(&self) {
        // A reaper leader is spared: killing it before it has ended its run would hand
        // the run's orphans to init.
        let spare = matches!(self.unit, Some(Unit::Reaper { .. })).then_some(self.leader.as_raw());
        for pid in session_members(self.leader.as_raw()) {
            if Some(pid) != spare {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }

    /// Collect the exit status of the (already exited) leader.
    fn reap(&mut self) -> std::io::Result<ExitStatus> {
        loop {
            match waitpid(self.leader, None) {
                Ok(status) => {
                    self.reaped = true;
                    return Ok(match status {
                        WaitStatus::Exited(_, code) => ExitStatus::Code(code),
                        WaitStatus::Signaled(_, sig, _) => ExitStatus::Signal(sig as i32),
                        // Stop/continue reports are not requested (no WUNTRACED).
                        _ => continue,
                    });
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The leader reported its end and is exiting: reap it on a thread of its own (so
    /// that no zombie is left) instead of waiting for it here.
    fn reap_in_background(&mut self) {
        self.reaped = true;
        self.reap_later = true;
    }

    /// Wait for the unit to be empty and remove it (off the async threads); what the
    /// kernel enforced, if anything. A leader left to reap is reaped after that, on the
    /// same thread, once the answer has gone back.
    async fn finish_unit(&mut self) -> Option<String> {
        if std::mem::take(&mut self.reap_later) {
            let leader = self.leader;
            // Not waited for: the answer does not depend on it.
            tokio::task::spawn_blocking(move || {
                while let Err(nix::errno::Errno::EINTR) = waitpid(leader, None) {}
            });
        }
        let mut unit = self.unit.take()?;
        // Usually nothing is left to wait for: then no hand-over to another thread.
        if let Some(note) = unit.finish_without_waiting(Removal::Background) {
            return note;
        }
        tokio::task::spawn_blocking(move || unit.finish(Removal::Background))
            .await
            .ok()
            .flatten()
    }

    /// Tell the output reader to stop waiting for end-of-file.
    fn wake_reader(&mut self) {
        if let Some(fd) = self.reader_wake.take() {
            let _ = nix::unistd::write(&fd, b"x");
        }
    }
}

impl Drop for TreeGuard {
    fn drop(&mut self) {
        self.wake_reader();
        if self.reap_later {
            // It reported its end, but the run stopped before it was finished.
            let leader = self.leader;
            std::thread::spawn(
                move || while let Err(nix::errno::Errno::EINTR) = waitpid(leader, None) {},
            );
        }
        if self.reaped {
            return;
        }
        let reaper = matches!(self.unit, Some(Unit::Reaper { .. }));
        self.kill_all();
        self.sweep_session();
        let leader = self.leader;
        let mut unit = self.unit.take();
        // SIGKILL cannot be ignored, so these waits are short; they must not block the
        // async runtime that is dropping us.
        std::thread::spawn(move || {
            if reaper {
                // The reaper ends its run and exits by itself; if it does not, kill it.
                let deadline = Instant::now() + Duration::from_secs(2);
                loop {
                    match waitpid(leader, Some(nix::sys::wait::WaitPidFlag::WNOHANG)) {
                        Ok(WaitStatus::StillAlive) if Instant::now() < deadline => {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Ok(WaitStatus::StillAlive) => {
                            let _ = killpg(leader, Signal::SIGKILL);
                            while let Err(nix::errno::Errno::EINTR) = waitpid(leader, None) {}
                            break;
                        }
                        _ => break,
                    }
                }
            } else {
                while let Err(nix::errno::Errno::EINTR) = waitpid(leader, None) {}
            }
            if let Some(unit) = unit.as_mut() {
                unit.finish(Removal::Wait);
            }
        });
    }
}

/// Pids whose session id is `sid`, read from `/proc/*/stat`.
fn session_members(sid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut members = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        if stat_session(&stat) == Some(sid) {
            members.push(pid);
        }
    }
    members
}

/// The session field of a `/proc/PID/stat` line. The command name (field 2) may contain
/// spaces and parentheses, so parse from the last `)`.
fn stat_session(stat: &str) -> Option<i32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields after the name: state, ppid, pgrp, session.
    rest.split_whitespace().nth(3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exit_report_is_read_from_complete_lines_only() {
        let code = |t: &[u8]| exit_status_in(t);
        assert_eq!(code(b"{ \"exit-code\": 3 }\n"), Some(ExitStatus::Code(3)));
        // bubblewrap's first line, then the status.
        let both =
            b"{ \"child-pid\": 12, \"pid-namespace\": 4026531836 }\n{ \"exit-code\": 141 }\n";
        assert_eq!(code(both), Some(ExitStatus::Code(141)));
        assert_eq!(code(b"{ \"child-pid\": 12 }\n"), None);
        // Not yet a whole line: wait for the rest.
        assert_eq!(code(b"{ \"exit-code\": 1"), None);
        assert_eq!(code(b"{ \"exit-code\": x }\n"), None);
        assert_eq!(code(b"\xff\n"), None);
        // Warden's sandbox says when a signal ended the command; the first report wins.
        let signalled = b"{ \"exit-code\": 137, \"signal\": 9 }\n{ \"exit-code\": 137 }\n";
        assert_eq!(code(signalled), Some(ExitStatus::Signal(9)));
        // A signal that does not match the code is not believed.
        assert_eq!(
            code(b"{ \"exit-code\": 0, \"signal\": 9 }\n"),
            Some(ExitStatus::Code(0))
        );
    }

    #[test]
    fn stat_session_handles_hostile_command_names() {
        let line = "1234 (a) b) (c) S 1 1234 1234 0 -1 4194560";
        assert_eq!(stat_session(line), Some(1234));
        assert_eq!(stat_session("garbage"), None);
    }
}
