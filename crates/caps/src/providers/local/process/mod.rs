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

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::libc;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::io::AsyncWriteExt;

use crate::input::{Control, Controls};
use crate::output::{OutputCollector, Stream};
use crate::providers::local::pty;
use crate::providers::local::spawn::{OwnedCwd, SpawnRequest, SpawnTerminal, StdinKind};
use crate::shell::{ExecOutput, OutputLimits, Stdin};
use crate::{CapsError, Result};

mod exit;
mod spec;
mod tree;

use exit::wait_for_end;
pub use spec::{NewNamespaces, ProcessSpec, SignalRoute, TerminalOwner, WorkingDir};
use tree::TreeGuard;

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

/// The read buffer's first size, made when the first output arrives: a run that says
/// little (or nothing, idling for hours in the background) costs little; the first read
/// that fills it grows it to [`READ_CHUNK`] for bulk output.
const FIRST_READ_CHUNK: usize = 8 * 1024;

/// How long an exit report already written is read for once the process has exited (see
/// `wait_for_end`): what is in the pipe is there at once; only a writer that escaped
/// every containment could make this wait.
const REPORT_AFTER_EXIT: Duration = Duration::from_millis(100);

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
        terminal,
        terminal_owner,
        launches_command,
        watches_its_parent,
        signal_route,
    } = spec;
    if argv.is_empty() {
        return Err(CapsError::invalid("argv must not be empty"));
    }
    let (stdin_kind, mut feed) = match stdin {
        Stdin::Null => (StdinKind::Null, None),
        Stdin::Bytes(bytes) => (StdinKind::Piped, Some(Feed::Bytes(bytes))),
        Stdin::Stream(stream) => match stream.take() {
            Some(chunks) => (StdinKind::Piped, Some(Feed::Stream(chunks))),
            // Already fed another run: this one reads nothing.
            None => (StdinKind::Null, None),
        },
    };
    let mut controls = match &mut feed {
        Some(Feed::Stream(chunks)) => chunks.take_controls(),
        _ => None,
    };
    let (master, spawn_terminal) = match terminal {
        Some(size) => {
            let made = pty::open(size)
                .map_err(|e| CapsError::from_io("make a terminal for", &display_name, e))?;
            let tty = SpawnTerminal {
                slave: made.slave,
                path: made.path,
                controlling: terminal_owner == TerminalOwner::Started,
            };
            (Some(made.master), Some(tty))
        }
        None => (None, None),
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
        // Moved: once the child has it, the command side's only holders are the run's
        // processes, so the terminal reports its end when they are gone.
        terminal: spawn_terminal,
        watches_its_parent,
    };
    let child = unit
        .spawn(request)
        .map_err(|e| spawn_error(&display_name, e))?;
    let pid = child.pid;
    let mut guard = TreeGuard::new(Pid::from_raw(pid), unit);
    guard.spare_leader_from_signals = launches_command;
    let (wake_r, wake_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| CapsError::from_io("pipe", &display_name, e.into()))?;
    guard.reader_wake = Some(wake_w);
    let sources = match &master {
        Some(master) => {
            let copy = master
                .try_clone()
                .map_err(|e| CapsError::from_io("dup", &display_name, e))?;
            vec![(Stream::Stdout, copy)]
        }
        None => [
            (Stream::Stdout, child.stdout),
            (Stream::Stderr, child.stderr),
        ]
        .into_iter()
        .filter_map(|(stream, fd)| Some((stream, fd?)))
        .collect(),
    };
    let mut reader =
        tokio::task::spawn_blocking(move || read_output(sources, wake_r, limits, live));
    let input_to = match &master {
        Some(master) => master.try_clone().ok().map(InputTarget::Terminal),
        None => child.stdin.map(InputTarget::Pipe),
    };
    let writer = write_stdin(input_to, feed);
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
            control = next_control(&mut controls) => match control {
                Some(Control::Signal(number)) => match (&signal_route, Signal::try_from(number)) {
                    (Some(route), Ok(_)) => (route.0)(number),
                    (None, Ok(signal)) => guard.signal_run(signal),
                    (_, Err(_)) => tracing::debug!("not a signal: {number}"),
                },
                Some(Control::Resize(size)) => {
                    if let Some(master) = &master
                        && let Err(e) = pty::resize(master, size)
                    {
                        tracing::debug!("resizing the terminal of {display_name}: {e}");
                    }
                }
                None => controls = None,
            },
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

/// Read the output sources (stdout and stderr, or the terminal) until each reaches
/// end-of-file (or `wake` becomes readable), on a blocking thread: a tight `poll`+`read`
/// loop moves bulk output several times faster than readiness-driven async reads, and
/// keeps memory bounded by the collector. A terminal reports its end as an error (EIO)
/// once the run's processes are gone; every error ends a source.
fn read_output(
    sources: Vec<(Stream, OwnedFd)>,
    wake: OwnedFd,
    limits: OutputLimits,
    live: Option<crate::LiveOutput>,
) -> OutputCollector {
    let mut collector = OutputCollector::new(limits).with_live(live);
    let mut buf: Vec<u8> = Vec::new();
    let streams: Vec<Stream> = sources.iter().map(|(stream, _)| *stream).collect();
    let mut open: Vec<Option<OwnedFd>> = sources.into_iter().map(|(_, fd)| Some(fd)).collect();
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
            if buf.is_empty() {
                buf = vec![0u8; FIRST_READ_CHUNK];
            }
            match nix::unistd::read(fd, &mut buf) {
                Ok(0) => open[i] = None,
                Ok(n) => {
                    collector.push(streams[i], &buf[..n]);
                    if n == buf.len() && buf.len() < READ_CHUNK {
                        buf = vec![0u8; READ_CHUNK];
                    }
                }
                Err(nix::errno::Errno::EINTR) | Err(nix::errno::Errno::EAGAIN) => {}
                // A read error on a pipe means it is gone; what we have is what there is.
                Err(_) => open[i] = None,
            }
        }
    }
    collector
}

/// Where a child's standard input is written.
enum InputTarget {
    /// Its stdin pipe; dropping it is the end-of-file.
    Pipe(OwnedFd),
    /// Its terminal (non-blocking): input is typed; "end of input" is the terminal's
    /// end-of-file key, Ctrl-D, which a program reading a line at its start takes as
    /// such.
    Terminal(OwnedFd),
}

/// The terminal's end-of-file character in its default (canonical) mode.
const TERMINAL_EOF: u8 = 0x04;

/// What goes to a child's standard input.
enum Feed {
    /// These bytes, then end-of-file.
    Bytes(Vec<u8>),
    /// What the run's driver sends while it runs, until it closes it.
    Stream(crate::input::InputChunks),
}

async fn write_stdin(target: Option<InputTarget>, feed: Option<Feed>) {
    let (Some(target), Some(feed)) = (target, feed) else {
        return;
    };
    let mut writer = match target {
        InputTarget::Pipe(fd) => match tokio::net::unix::pipe::Sender::from_owned_fd(fd) {
            Ok(sender) => InputWriter::Pipe(sender),
            Err(_) => return,
        },
        // SAFETY: `register` needs the descriptor to stay open while registered: the
        // AsyncFd owns it (an OwnedFd of its own, not shared) and closes it only on drop,
        // after deregistering.
        InputTarget::Terminal(fd) => match unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::WRITABLE)
        } {
            Ok(fd) => InputWriter::Terminal(fd),
            Err(_) => return,
        },
    };
    // A child that exits without reading all its input is not an error.
    let bytes_then_end = match feed {
        Feed::Bytes(bytes) => writer.write_all(&bytes).await.is_ok(),
        Feed::Stream(mut chunks) => loop {
            match chunks.next().await {
                Some(bytes) => {
                    if writer.write_all(&bytes).await.is_err() {
                        // Nobody reads any more (the command closed its input or ended).
                        break false;
                    }
                }
                None => break true,
            }
        },
    };
    if bytes_then_end && let InputWriter::Terminal(_) = writer {
        let _ = writer.write_all(&[TERMINAL_EOF]).await;
    }
    // Dropping a pipe's sender is the end-of-file; a terminal stays open.
}

/// [`write_stdin`]'s open target.
enum InputWriter {
    Pipe(tokio::net::unix::pipe::Sender),
    Terminal(tokio::io::unix::AsyncFd<OwnedFd>),
}

impl InputWriter {
    async fn write_all(&mut self, mut bytes: &[u8]) -> std::io::Result<()> {
        match self {
            InputWriter::Pipe(sender) => sender.write_all(bytes).await,
            InputWriter::Terminal(fd) => {
                while !bytes.is_empty() {
                    let mut ready = fd.writable().await?;
                    match ready.try_io(|fd| {
                        nix::unistd::write(fd.get_ref(), bytes).map_err(std::io::Error::from)
                    }) {
                        Ok(Ok(n)) => bytes = &bytes[n..],
                        Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Ok(Err(e)) => return Err(e),
                        Err(_would_block) => {}
                    }
                }
                Ok(())
            }
        }
    }
}

/// The run's next control, or never when it has none (any more).
async fn next_control(controls: &mut Option<Controls>) -> Option<Control> {
    match controls {
        Some(controls) => controls.next().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell::ExitStatus;
    use exit::exit_status_in;
    use tree::stat_session;

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
