//! The observer: for each notified call, the paths it names — read from the caller's
//! memory and resolved as the caller sees them — and which of them the read-only profile
//! refuses but the writable one would allow.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use nix::libc;

use super::calls::{Intent, PathArg, Watched, open_writes, watched};
use super::report::{self, MAX_REPORTED};

const PATH_MAX: usize = 4096;

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
pub(super) struct Observer {
    writable: Vec<PathBuf>,
    table: Vec<Watched>,
    refused: Vec<PathBuf>,
    unresolved: u32,
}

impl Observer {
    /// An observer that records refused writes beneath `writable`.
    pub(super) fn new(writable: &[PathBuf]) -> Self {
        Observer {
            writable: writable.to_vec(),
            table: watched(),
            refused: Vec::new(),
            unresolved: 0,
        }
    }

    /// Look at one notification. Never changes what the kernel does.
    pub(super) fn observe(&mut self, listener: RawFd, pid: u32, nr: i64, args: &[u64; 6], id: u64) {
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

    /// The report of what was observed.
    pub(super) fn report(&self) -> Vec<u8> {
        report::observed(&self.refused, self.unresolved)
    }
}

/// Is notification `id` still pending (the caller still in the call that was notified)?
fn notification_valid(listener: RawFd, id: u64) -> bool {
    let mut id = id;
    // SAFETY: the ioctl reads one u64 from a valid pointer.
    unsafe { libc::ioctl(listener, libc::SECCOMP_IOCTL_NOTIF_ID_VALID as _, &mut id) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
