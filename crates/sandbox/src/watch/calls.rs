//! The watched calls: the table of write-intent file syscalls of this architecture (where
//! each one's path arguments are, and when it writes), and the seccomp user-notification
//! program built from it.

use nix::libc;
use seccompiler::BpfProgram;

use crate::bpf::Check;
use crate::seccomp::SeccompError;

/// Where a syscall's path argument is.
#[derive(Clone, Copy, Debug)]
pub(super) enum PathArg {
    /// Relative to the working directory (argument index).
    Cwd(usize),
    /// Relative to a directory descriptor (descriptor index, path index).
    At(usize, usize),
    /// The file an open descriptor refers to (argument index).
    Fd(usize),
}

/// Whether the call writes.
#[derive(Clone, Copy, Debug)]
pub(super) enum Intent {
    /// Always a write (`mkdir`, `unlink`, ...).
    Always,
    /// An open whose flags are in this argument.
    OpenFlags(usize),
    /// `openat2`: the flags are the first field of the `open_how` this argument points at.
    OpenHow(usize),
}

/// One watched syscall: its number, where its paths are, and when it writes.
#[derive(Clone, Copy, Debug)]
pub(super) struct Watched {
    pub(super) nr: i64,
    pub(super) paths: &'static [PathArg],
    pub(super) intent: Intent,
}

const fn w(nr: i64, paths: &'static [PathArg], intent: Intent) -> Watched {
    Watched { nr, paths, intent }
}

/// The watched syscalls of this architecture.
pub(super) fn watched() -> Vec<Watched> {
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
pub(super) fn open_writes(flags: u64) -> bool {
    let flags = flags as libc::c_int;
    let mode = flags & libc::O_ACCMODE;
    mode == libc::O_WRONLY
        || mode == libc::O_RDWR
        || flags & libc::O_CREAT != 0
        || flags & libc::O_TRUNC != 0
}

/// The watch's rules: each watched call notifies — an open only when its flags ask for a
/// write.
pub(crate) fn rules() -> Vec<(i64, Check)> {
    watched()
        .into_iter()
        .map(|call| {
            let check = match call.intent {
                Intent::OpenFlags(arg) => Check::OpenWrites { arg: arg as u8 },
                // openat2's flags live in memory; every call notifies and the observer
                // reads them.
                Intent::OpenHow(_) | Intent::Always => Check::Always,
            };
            (call.nr, check)
        })
        .collect()
}

/// The notification filter: write-intent syscalls notify, everything else is allowed.
pub fn program() -> Result<BpfProgram, SeccompError> {
    crate::bpf::compile(&rules(), libc::SECCOMP_RET_USER_NOTIF)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
