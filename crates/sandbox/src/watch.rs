//! Watching for refused writes: how approval mode learns from the kernel — not from the
//! command's output text — that a read-only run was refused a write that the writable
//! profile would allow.
//!
//! In the watched read-only profile the helper forks. The child installs a seccomp filter
//! that turns every write-intent file syscall into a user notification (`open`/`openat`/
//! `creat` with a write access mode, `O_CREAT` or `O_TRUNC`; `openat2`; `mkdir`, `mknod`,
//! `unlink`, `rmdir`, `rename`, `link`, `symlink`, `truncate`, `chmod`, `chown`, `utimes`
//! and their `*at` forms), hands the listener to the parent and executes the command. The
//! parent stays behind as an observer: for each notification it reads the path from the
//! caller's memory, resolves it against the caller's working directory or directory
//! descriptor, and records it if it lies beneath a writable path — which the read-only
//! profile mounts read-only, so the kernel refuses the call with `EROFS`. It always
//! answers `CONTINUE`: the kernel then performs the syscall exactly as it would without
//! the watch.
//!
//! The watch decides nothing and enforces nothing; the read-only mount does. That is why
//! the kernel's warning about `CONTINUE` (the caller's memory can change after it was
//! read) costs at most a needless prompt here, never a write.
//!
//! When the child exits, the observer writes a small JSON-lines report to a pipe that the
//! sandbox shell reads, and exits with the child's status (re-raising a fatal signal).
//! Where the kernel has no user notification (before Linux 5.5), or a path could not be
//! read, the report says so and the runner falls back to the `EROFS` message text.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use nix::libc;
use seccompiler::{BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompRule};
use serde::{Deserialize, Serialize};

use crate::seccomp::{SeccompError, compile, cond, rule};

/// At most this many refused paths are reported (the first ones, without duplicates).
pub const MAX_REPORTED: usize = 16;

/// The report must fit a pipe buffer: the sandbox shell reads it only after the run.
const MAX_REPORT_BYTES: usize = 32 * 1024;

const PATH_MAX: usize = 4096;

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Line {
    /// The filter is installed; every write-intent syscall is observed.
    Active,
    /// The filter could not be installed (why).
    Unavailable(String),
    /// A write beneath a writable path, refused by the read-only profile.
    Refused(String),
    /// Observed calls whose path could not be read or resolved.
    Unresolved(u32),
}

/// Where a syscall's path argument is.
#[derive(Clone, Copy, Debug)]
enum PathArg {
    /// Relative to the working directory (argument index).
    Cwd(usize),
    /// Relative to a directory descriptor (descriptor index, path index).
    At(usize, usize),
    /// The file an open descriptor refers to (argument index).
    Fd(usize),
}

/// Whether the call writes.
#[derive(Clone, Copy, Debug)]
enum Intent {
    /// Always a write (`mkdir`, `unlink`, ...).
    Always,
    /// An open whose flags are in this argument.
    OpenFlags(usize),
    /// `openat2`: the flags are the first field of the `open_how` this argument points at.
    OpenHow(usize),
}

#[derive(Clone, Copy, Debug)]
struct Watched {
    nr: i64,
    paths: &'static [PathArg],
    intent: Intent,
}

const fn w(nr: i64, paths: &'static [PathArg], intent: Intent) -> Watched {
    Watched { nr, paths, intent }
}

/// The watched syscalls of this architecture.
fn watched() -> Vec<Watched> {
    use Intent::*;
    use PathArg::*;
    #[allow(unused_mut)]
    let mut table = vec![
        w(libc::SYS_openat, &[At(0, 1)], OpenFlags(2)),
        w(libc::SYS_openat2, &[At(0, 1)], OpenHow(2)),
        w(libc::SYS_mkdirat, &[At(0, 1)], Always),
        w(libc::SYS_mknodat, &[At(0, 1)], Always),
        w(libc::SYS_unlinkat, &[At(0, 1)], Always),
        w(libc::SYS_renameat2, &[At(0, 1), At(2, 3)], Always),
        w(libc::SYS_linkat, &[At(2, 3)], Always),
        w(libc::SYS_symlinkat, &[At(1, 2)], Always),
        w(libc::SYS_fchmodat, &[At(0, 1)], Always),
        // fchmodat2 (Linux 6.6) has the same number on every architecture; not every libc
        // release names it.
        w(452, &[At(0, 1)], Always),
        w(libc::SYS_fchownat, &[At(0, 1)], Always),
        w(libc::SYS_utimensat, &[At(0, 1)], Always),
        w(libc::SYS_truncate, &[Cwd(0)], Always),
        w(libc::SYS_fchmod, &[Fd(0)], Always),
        w(libc::SYS_fchown, &[Fd(0)], Always),
        w(libc::SYS_setxattr, &[Cwd(0)], Always),
        w(libc::SYS_lsetxattr, &[Cwd(0)], Always),
        w(libc::SYS_fsetxattr, &[Fd(0)], Always),
        w(libc::SYS_removexattr, &[Cwd(0)], Always),
        w(libc::SYS_lremovexattr, &[Cwd(0)], Always),
        w(libc::SYS_fremovexattr, &[Fd(0)], Always),
    ];
    // The legacy forms exist only on some architectures.
    #[cfg(target_arch = "x86_64")]
    table.extend([
        w(libc::SYS_open, &[Cwd(0)], OpenFlags(1)),
        w(libc::SYS_creat, &[Cwd(0)], Always),
        w(libc::SYS_mkdir, &[Cwd(0)], Always),
        w(libc::SYS_mknod, &[Cwd(0)], Always),
        w(libc::SYS_unlink, &[Cwd(0)], Always),
        w(libc::SYS_rmdir, &[Cwd(0)], Always),
        w(libc::SYS_rename, &[Cwd(0), Cwd(1)], Always),
        w(libc::SYS_renameat, &[At(0, 1), At(2, 3)], Always),
        w(libc::SYS_link, &[Cwd(1)], Always),
        w(libc::SYS_symlink, &[Cwd(1)], Always),
        w(libc::SYS_chmod, &[Cwd(0)], Always),
        w(libc::SYS_chown, &[Cwd(0)], Always),
        w(libc::SYS_lchown, &[Cwd(0)], Always),
        w(libc::SYS_utime, &[Cwd(0)], Always),
        w(libc::SYS_utimes, &[Cwd(0)], Always),
        w(libc::SYS_futimesat, &[At(0, 1)], Always),
    ]);
    table
}

/// True if open flags ask for a write (or may create or truncate).
fn open_writes(flags: u64) -> bool {
    let flags = flags as libc::c_int;
    let mode = flags & libc::O_ACCMODE;
    mode == libc::O_WRONLY
        || mode == libc::O_RDWR
        || flags & libc::O_CREAT != 0
        || flags & libc::O_TRUNC != 0
}

/// seccompiler has no user-notification action. The program is compiled with this
/// `SECCOMP_RET_TRACE` value as the match action, and exactly those return instructions
/// are then rewritten to `SECCOMP_RET_USER_NOTIF`.
const SENTINEL: u32 = 0x5741;
const SECCOMP_RET_TRACE: u32 = 0x7ff0_0000;
const BPF_RET_K: u16 = 0x06;

/// The notification filter: write-intent syscalls notify, everything else is allowed.
pub fn program() -> Result<BpfProgram, SeccompError> {
    let mut rules = std::collections::BTreeMap::new();
    for call in watched() {
        let conditions: Vec<SeccompRule> = match call.intent {
            Intent::OpenFlags(arg) => {
                let arg = arg as u8;
                let masked = |mask: i32, value: i32| {
                    rule(vec![cond(
                        arg,
                        SeccompCmpArgLen::Dword,
                        SeccompCmpOp::MaskedEq(mask as u64),
                        value as u64,
                    )?])
                };
                vec![
                    masked(libc::O_ACCMODE, libc::O_WRONLY)?,
                    masked(libc::O_ACCMODE, libc::O_RDWR)?,
                    masked(libc::O_CREAT, libc::O_CREAT)?,
                    masked(libc::O_TRUNC, libc::O_TRUNC)?,
                ]
            }
            // openat2's flags live in memory; every call notifies and the observer reads them.
            Intent::OpenHow(_) | Intent::Always => Vec::new(),
        };
        rules.insert(call.nr, conditions);
    }
    let mut program = compile(rules, SeccompAction::Trace(SENTINEL))?;
    let sentinel = SECCOMP_RET_TRACE | SENTINEL;
    let mut patched = 0;
    for insn in &mut program {
        if insn.code == BPF_RET_K && insn.k == sentinel {
            insn.k = libc::SECCOMP_RET_USER_NOTIF;
            patched += 1;
        }
    }
    if patched == 0 {
        return Err(SeccompError(
            "the write-watch filter has no notify instruction".into(),
        ));
    }
    Ok(program)
}

/// What a run's report says.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WatchReport {
    /// The filter was installed.
    pub active: bool,
    /// Why it was not, if it was not.
    pub unavailable: Option<String>,
    /// Refused writes beneath writable paths (at most [`MAX_REPORTED`]).
    pub refused: Vec<PathBuf>,
    /// Observed calls whose path could not be read.
    pub unresolved: u32,
}

impl WatchReport {
    /// The refused writes if the watch saw everything; `None` when it could not (not
    /// installed, or some path unreadable and nothing refused) — the caller falls back.
    pub fn refused_writes(&self) -> Option<Vec<PathBuf>> {
        if !self.active || (self.refused.is_empty() && self.unresolved > 0) {
            None
        } else {
            Some(self.refused.clone())
        }
    }
}

/// Parse a report. Lines that do not parse are ignored (a report is written by the
/// helper only; nothing in it grants anything).
pub fn parse_report(bytes: &[u8]) -> WatchReport {
    let mut report = WatchReport::default();
    for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        match serde_json::from_slice::<Line>(line) {
            Ok(Line::Active) => report.active = true,
            Ok(Line::Unavailable(why)) => report.unavailable = Some(why),
            Ok(Line::Refused(p)) if report.refused.len() < MAX_REPORTED => {
                report.refused.push(PathBuf::from(p))
            }
            Ok(Line::Unresolved(n)) => report.unresolved = report.unresolved.saturating_add(n),
            _ => {}
        }
    }
    report
}

/// Read everything the helper wrote. Called after the run ended, so every writer is gone;
/// the read is non-blocking anyway so that a straggler cannot hold the caller.
pub fn read_report(fd: OwnedFd) -> WatchReport {
    let _ = rustix::fs::fcntl_setfl(&fd, rustix::fs::OFlags::NONBLOCK);
    let mut bytes = Vec::new();
    let mut buf = [0u8; 8192];
    while bytes.len() < MAX_REPORT_BYTES * 2 {
        match rustix::io::read(&fd, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
        }
    }
    parse_report(&bytes)
}

/// Is a write to `path` one the read-only profile refuses but the writable one allows?
/// `.git/hooks` and `.git/config` stay read-only in both, so they do not count.
pub fn refusable(path: &Path, writable: &[PathBuf]) -> bool {
    writable.iter().any(|root| {
        path.starts_with(root)
            && !path.starts_with(root.join(".git/hooks"))
            && path != root.join(".git/config")
    })
}

/// The path as the kernel will resolve it: symlinks in the parent followed, the last
/// component as named (a write to a symlink's name acts on the link or its target, and
/// the read-only mount refuses both where it applies).
fn normalize(path: &Path) -> PathBuf {
    // A `/proc/<pid>/fd/N` (or `cwd`, `root`) path names the file the link points at.
    if let Some(target) = path
        .starts_with("/proc")
        .then(|| std::fs::canonicalize(path).ok())
        .flatten()
    {
        return target;
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => std::fs::canonicalize(parent)
            .map(|p| p.join(name))
            .unwrap_or_else(|_| path.to_path_buf()),
        _ => std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
    }
}

/// A NUL-terminated string at `addr` in the process's memory, read page by page (so that
/// a string ending just before an unmapped page is still read).
fn read_c_string(mem: &File, addr: u64) -> Option<Vec<u8>> {
    if addr == 0 {
        return None;
    }
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < PATH_MAX {
        let page_left = 4096 - (at % 4096) as usize;
        let mut buf = vec![0u8; page_left.min(PATH_MAX - out.len())];
        let n = mem.read_at(&mut buf, at).ok()?;
        if n == 0 {
            return None;
        }
        if let Some(end) = buf[..n].iter().position(|&b| b == 0) {
            out.extend_from_slice(&buf[..end]);
            return Some(out);
        }
        out.extend_from_slice(&buf[..n]);
        at += n as u64;
    }
    None
}

/// Resolve one path argument of a notified call to an absolute path, as the caller sees
/// it: `/proc/self` is the caller's, not the observer's.
fn resolve(pid: u32, mem: &File, args: &[u64; 6], at: PathArg) -> Option<PathBuf> {
    let (dirfd, addr) = match at {
        PathArg::Cwd(p) => (None, args[p]),
        PathArg::At(d, p) => (Some(args[d] as i32), args[p]),
        PathArg::Fd(d) => (Some(args[d] as i32), 0),
    };
    // A NULL path (utimensat, the descriptor forms) acts on the descriptor itself.
    let raw = if addr == 0 {
        Vec::new()
    } else {
        read_c_string(mem, addr)?
    };
    let raw = Path::new(OsStr::from_bytes(&raw));
    let path = if raw.is_absolute() {
        callers_proc(raw, pid)
    } else {
        let base = match dirfd {
            Some(fd) if fd != libc::AT_FDCWD => format!("/proc/{pid}/fd/{fd}"),
            _ => format!("/proc/{pid}/cwd"),
        };
        let base = std::fs::read_link(base).ok()?;
        if raw.as_os_str().is_empty() {
            base
        } else {
            base.join(raw)
        }
    };
    Some(normalize(&path))
}

/// `/proc/self/...` and `/proc/thread-self/...` rewritten to the caller's entries.
fn callers_proc(path: &Path, pid: u32) -> PathBuf {
    if let Ok(rest) = path.strip_prefix("/proc/self") {
        return Path::new(&format!("/proc/{pid}")).join(rest);
    }
    if let Ok(rest) = path.strip_prefix("/proc/thread-self") {
        return Path::new(&format!("/proc/{pid}/task/{pid}")).join(rest);
    }
    path.to_path_buf()
}

/// The observer's state.
struct Observer {
    writable: Vec<PathBuf>,
    table: Vec<Watched>,
    refused: Vec<PathBuf>,
    unresolved: u32,
}

impl Observer {
    /// Look at one notification. Never changes what the kernel does.
    fn observe(&mut self, listener: RawFd, pid: u32, nr: i64, args: &[u64; 6], id: u64) {
        let Some(call) = self.table.iter().find(|c| c.nr == nr).copied() else {
            return;
        };
        let Ok(mem) = File::open(format!("/proc/{pid}/mem")) else {
            self.unresolved = self.unresolved.saturating_add(1);
            return;
        };
        let flags = match call.intent {
            Intent::Always => None,
            Intent::OpenFlags(i) => Some(args[i]),
            Intent::OpenHow(i) => {
                let mut how = [0u8; 8];
                match mem.read_at(&mut how, args[i]) {
                    Ok(8) => Some(u64::from_ne_bytes(how)),
                    _ => {
                        self.unresolved = self.unresolved.saturating_add(1);
                        return;
                    }
                }
            }
        };
        if flags.is_some_and(|f| !open_writes(f)) {
            return;
        }
        let mut found = Vec::new();
        for at in call.paths {
            match resolve(pid, &mem, args, *at) {
                Some(p) => found.push(p),
                None => {
                    self.unresolved = self.unresolved.saturating_add(1);
                    return;
                }
            }
        }
        // The memory read is only meaningful if the call is still the one notified.
        if !notification_valid(listener, id) {
            return;
        }
        for path in found {
            // Creating with O_CREAT alone opens an existing file for reading: no write.
            let create_only = flags.is_some_and(|f| {
                let f = f as libc::c_int;
                f & libc::O_ACCMODE == libc::O_RDONLY && f & libc::O_TRUNC == 0
            });
            if create_only && path.exists() {
                continue;
            }
            if refusable(&path, &self.writable)
                && !self.refused.contains(&path)
                && self.refused.len() < MAX_REPORTED
            {
                self.refused.push(path);
            }
        }
    }

    fn report(&self) -> Vec<u8> {
        let mut out = line(&Line::Active);
        for path in &self.refused {
            let next = line(&Line::Refused(path.to_string_lossy().into_owned()));
            if out.len() + next.len() > MAX_REPORT_BYTES - 64 {
                break;
            }
            out.extend(next);
        }
        if self.unresolved > 0 {
            out.extend(line(&Line::Unresolved(self.unresolved)));
        }
        out
    }
}

fn line(l: &Line) -> Vec<u8> {
    let mut v = serde_json::to_vec(l).unwrap_or_default();
    v.push(b'\n');
    v
}

fn notification_valid(listener: RawFd, id: u64) -> bool {
    let mut id = id;
    // SAFETY: the ioctl reads one u64 from a valid pointer.
    unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_ID_VALID as _, &mut id) == 0 }
}

/// Write all of `bytes` to the (non-blocking) report descriptor, giving up on any error.
fn write_all(fd: RawFd, bytes: &[u8]) {
    let mut done = 0;
    while done < bytes.len() {
        // SAFETY: writing from a valid slice to a descriptor this process owns.
        let n = unsafe { libc::write(fd, bytes[done..].as_ptr().cast(), bytes.len() - done) };
        if n <= 0 {
            return;
        }
        done += n as usize;
    }
}

/// Install the notification filter on the calling thread; returns the listener.
fn install(program: &BpfProgram) -> Result<OwnedFd, String> {
    let filter: Vec<libc::sock_filter> = program
        .iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect();
    let prog = libc::sock_fprog {
        len: u16::try_from(filter.len()).map_err(|_| "filter too long".to_string())?,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: plain prctl; and seccomp reads `prog`, which points at `filter`, both alive
    // for the duration of the call.
    let fd = unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(format!("no_new_privs: {}", std::io::Error::last_os_error()));
        }
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &prog as *const libc::sock_fprog,
        )
    };
    if fd < 0 {
        return Err(format!(
            "seccomp user notification is not available: {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: the kernel just returned this new descriptor to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

fn send_listener(socket: RawFd, listener: Result<OwnedFd, String>) {
    use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
    use std::io::IoSlice;
    match listener {
        Ok(fd) => {
            let fds = [fd.as_raw_fd()];
            let _ = sendmsg::<()>(
                socket,
                &[IoSlice::new(b"ok")],
                &[ControlMessage::ScmRights(&fds)],
                MsgFlags::empty(),
                None,
            );
        }
        Err(why) => {
            let _ = sendmsg::<()>(
                socket,
                &[IoSlice::new(why.as_bytes())],
                &[],
                MsgFlags::empty(),
                None,
            );
        }
    }
}

fn receive_listener(socket: RawFd) -> Result<OwnedFd, String> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    use std::io::IoSliceMut;
    let mut buf = [0u8; 512];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let mut iov = [IoSliceMut::new(&mut buf)];
    let msg = recvmsg::<()>(
        socket,
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(|e| format!("receiving the listener: {e}"))?;
    let mut fd = None;
    if let Ok(cmsgs) = msg.cmsgs() {
        for cmsg in cmsgs {
            if let ControlMessageOwned::ScmRights(fds) = cmsg {
                for raw in fds {
                    // SAFETY: SCM_RIGHTS just installed this descriptor in our table.
                    let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                    fd.get_or_insert(owned);
                }
            }
        }
    }
    let n = msg.bytes;
    fd.ok_or_else(|| String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// Run `target` watched, report to `report_fd`, and exit with its status. Never returns.
/// `exec` executes the command (in the child) and never returns.
pub fn run(
    report_fd: RawFd,
    writable: &[PathBuf],
    target: &crate::helper::Target,
    exec: fn(&crate::helper::Target) -> !,
) -> ! {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
    use nix::sys::wait::{WaitStatus, waitpid};
    use nix::unistd::{ForkResult, fork};

    // The command must not inherit the report, and writing it must never block: the
    // reader only reads after the run, and a report always fits the pipe.
    // SAFETY: fcntl on a descriptor number; failure leaves it as it was.
    unsafe {
        libc::fcntl(report_fd, libc::F_SETFD, libc::FD_CLOEXEC);
        let flags = libc::fcntl(report_fd, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(report_fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
    }
    let program = program().map_err(|e| e.to_string());
    let pair = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    );
    if let Err(why) = available() {
        write_all(report_fd, &line(&Line::Unavailable(why)));
        exec(target)
    }
    let (Ok(program), Ok((parent_end, child_end))) = (program, pair) else {
        write_all(
            report_fd,
            &line(&Line::Unavailable("cannot set up the write watch".into())),
        );
        exec(target)
    };
    // SAFETY: the helper is single-threaded here (it has started no threads), so the
    // child may run arbitrary code before it executes the command.
    match unsafe { fork() } {
        Err(e) => {
            write_all(report_fd, &line(&Line::Unavailable(format!("fork: {e}"))));
            exec(target)
        }
        Ok(ForkResult::Child) => {
            drop(parent_end);
            send_listener(child_end.as_raw_fd(), install(&program));
            drop(child_end);
            exec(target)
        }
        Ok(ForkResult::Parent { child }) => {
            drop(child_end);
            // The command runs as the same user: keep it out of our /proc entries (our
            // descriptors include the report pipe).
            // SAFETY: plain prctl.
            unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
            let listener = receive_listener(parent_end.as_raw_fd());
            drop(parent_end);
            let mut observer = Observer {
                writable: writable.to_vec(),
                table: watched(),
                refused: Vec::new(),
                unresolved: 0,
            };
            let (status, report) = match listener {
                Ok(listener) => {
                    let status = serve(&listener, child, &mut observer);
                    (status, observer.report())
                }
                Err(why) => (waitpid(child, None), line(&Line::Unavailable(why))),
            };
            write_all(report_fd, &report);
            match status {
                Ok(WaitStatus::Exited(_, code)) => std::process::exit(code),
                Ok(WaitStatus::Signaled(_, signal, _)) => reraise(signal),
                _ => std::process::exit(125),
            }
        }
    }
}

/// Answer notifications until the child exits; return its status. The listener is
/// served until then whatever happens: an unserved notification would hang the command.
fn serve(
    listener: &OwnedFd,
    child: nix::unistd::Pid,
    observer: &mut Observer,
) -> nix::Result<nix::sys::wait::WaitStatus> {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    // Wake on the child's exit where pidfds exist; otherwise poll for it now and then.
    let pidfd = rustix::process::Pid::from_raw(child.as_raw()).and_then(|pid| {
        rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
    });
    let mut listening = true;
    loop {
        let mut fds = [
            libc::pollfd {
                fd: pidfd.as_ref().map_or(-1, |p| p.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if listening { listener.as_raw_fd() } else { -1 },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let timeout = if pidfd.is_some() { -1 } else { 50 };
        // SAFETY: polling two pollfd structs in a live array.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return waitpid(child, None);
        }
        if fds[1].revents & libc::POLLIN != 0 {
            answer_one(listener.as_raw_fd(), observer);
        } else if fds[1].revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            // Every process using the filter is gone.
            listening = false;
        }
        if pidfd.is_none() || fds[0].revents & libc::POLLIN != 0 {
            match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => {}
                other => return other,
            }
        }
    }
}

/// Whether this kernel can run the watch: `CONTINUE` answers need Linux 5.5. Without
/// them the watch is not installed at all (and the runner falls back to the text).
pub fn available() -> Result<(), String> {
    let uname = rustix::system::uname();
    let release = uname.release().to_string_lossy();
    if release_at_least(&release, (5, 5)) {
        Ok(())
    } else {
        Err(format!(
            "the write watch needs Linux 5.5 or later (seccomp CONTINUE answers); this kernel is {release}"
        ))
    }
}

/// Compare a kernel release string (`6.1.0-18-amd64`) with `(major, minor)`.
fn release_at_least(release: &str, want: (u32, u32)) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= want
}

/// Receive one notification, observe it, and let the kernel carry on.
fn answer_one(listener: RawFd, observer: &mut Observer) {
    // SAFETY: the kernel requires a zeroed struct; it fills it in.
    let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: RECV writes one seccomp_notif into `req`.
    if unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_RECV as _, &mut req) } != 0 {
        // The caller died or a signal interrupted it; nothing to answer.
        return;
    }
    observer.observe(
        listener,
        req.pid,
        req.data.nr as i64,
        &req.data.args,
        req.id,
    );
    let mut resp = libc::seccomp_notif_resp {
        id: req.id,
        val: 0,
        error: 0,
        flags: libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
    };
    // SAFETY: SEND reads one seccomp_notif_resp from a valid pointer. ENOENT (the caller
    // was interrupted meanwhile) needs no handling.
    unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_SEND as _, &mut resp) };
}

/// Die of `signal` as the command did, so the sandbox reports the same status.
fn reraise(signal: nix::sys::signal::Signal) -> ! {
    use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, raise, signal as set, sigprocmask};
    // SAFETY: restoring the default disposition of one signal.
    let _ = unsafe { set(signal, SigHandler::SigDfl) };
    let mut only = SigSet::empty();
    only.add(signal);
    let _ = sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&only), None);
    let _ = raise(signal);
    std::process::exit(128 + signal as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_notifies_and_nothing_else_changed() {
        let p = program().unwrap();
        let notify = p
            .iter()
            .filter(|i| i.code == BPF_RET_K && i.k == libc::SECCOMP_RET_USER_NOTIF)
            .count();
        assert!(notify >= 1);
        assert!(
            !p.iter()
                .any(|i| i.code == BPF_RET_K && i.k == (SECCOMP_RET_TRACE | SENTINEL))
        );
    }

    #[test]
    fn kernel_releases_compare_by_major_and_minor() {
        assert!(release_at_least("6.18.0-1-amd64", (5, 5)));
        assert!(release_at_least("5.5.0", (5, 5)));
        assert!(release_at_least("5.10.0-rc1+", (5, 5)));
        assert!(!release_at_least("5.4.0-150-generic", (5, 5)));
        assert!(!release_at_least("4.19.0", (5, 5)));
        assert!(!release_at_least("", (5, 5)));
    }

    #[test]
    fn open_flags_that_write() {
        assert!(!open_writes(libc::O_RDONLY as u64));
        assert!(!open_writes(
            (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_DIRECTORY) as u64
        ));
        assert!(open_writes(libc::O_WRONLY as u64));
        assert!(open_writes(libc::O_RDWR as u64));
        assert!(open_writes((libc::O_RDONLY | libc::O_CREAT) as u64));
        assert!(open_writes((libc::O_RDONLY | libc::O_TRUNC) as u64));
    }

    #[test]
    fn only_writes_a_writable_profile_would_allow_count() {
        let w = vec![PathBuf::from("/ws")];
        assert!(refusable(Path::new("/ws/a"), &w));
        assert!(refusable(Path::new("/ws/.git/index"), &w));
        assert!(!refusable(Path::new("/ws/.git/hooks/pre-commit"), &w));
        assert!(!refusable(Path::new("/ws/.git/config"), &w));
        assert!(!refusable(Path::new("/wsx/a"), &w));
        assert!(!refusable(Path::new("/etc/passwd"), &w));
    }

    #[test]
    fn reports_round_trip_and_fall_back_when_incomplete() {
        let o = Observer {
            writable: vec![],
            table: watched(),
            refused: vec![PathBuf::from("/ws/a\nb"), PathBuf::from("/ws/c")],
            unresolved: 0,
        };
        let r = parse_report(&o.report());
        assert!(r.active);
        assert_eq!(
            r.refused_writes(),
            Some(vec![PathBuf::from("/ws/a\nb"), PathBuf::from("/ws/c")])
        );
        let empty_unresolved = parse_report(b"\"active\"\n{\"unresolved\":2}\n");
        assert_eq!(empty_unresolved.refused_writes(), None);
        let inactive = parse_report(b"{\"unavailable\":\"old kernel\"}\n");
        assert_eq!(inactive.refused_writes(), None);
        assert_eq!(inactive.unavailable.as_deref(), Some("old kernel"));
        assert_eq!(parse_report(b"\"active\"\n").refused_writes(), Some(vec![]));
        // Junk is ignored, not trusted.
        assert_eq!(
            parse_report(b"garbage\n{\"refused\":1}\n").refused_writes(),
            None
        );
    }
}
