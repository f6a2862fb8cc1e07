//! What a sandboxed command's process does to itself before the command runs, whoever
//! built its sandbox: drop every privilege (no new privileges, no capability in any
//! set) and install the seccomp programs as one filter. Warden's builder does it in the
//! command's process; under bubblewrap the helper does it when bubblewrap left it a
//! capability to finish the mount tree with (an exec allowlist's `noexec` layer).

use std::os::fd::BorrowedFd;

use nix::libc;

use crate::SandboxError;

/// In a user namespace just made: `inside` (uid, gid) mapped to the parent namespace's
/// `outside`, one id each, as bubblewrap maps them (`setgroups` denied, which an
/// unprivileged gid map requires).
pub(crate) fn map_ids(inside: (u32, u32), outside: (u32, u32)) -> Result<(), SandboxError> {
    let write = |file: &str, text: String| {
        std::fs::write(file, text)
            .map_err(|e| SandboxError::Confine(format!("cannot write {file}: {e}")))
    };
    write("/proc/self/setgroups", "deny".into())?;
    write(
        "/proc/self/uid_map",
        format!("{} {} 1\n", inside.0, outside.0),
    )?;
    write(
        "/proc/self/gid_map",
        format!("{} {} 1\n", inside.1, outside.1),
    )
}

/// Leave the user namespace bubblewrap made the sandbox root of (`--uid 0`, so that the
/// helper's capability covered the mount tree) for a new one in which the caller's own
/// ids (`ids`, the user outside) are mapped to root's there, as bubblewrap itself does
/// for an unprivileged user: the command runs as that user, its capabilities only ever
/// of a namespace that owns nothing.
pub(crate) fn run_as_user(ids: (u32, u32)) -> Result<(), SandboxError> {
    // SAFETY: unshare with a plain flag; the helper has one thread.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER) } != 0 {
        return Err(SandboxError::last_errno("a user namespace for the command"));
    }
    map_ids(ids, (0, 0))
}

/// Install `programs` (in installation order) as one filter; with `listener`, ask for
/// its notification listener and return it.
pub(crate) fn install_merged(
    programs: &[Vec<libc::sock_filter>],
    listener: bool,
) -> Result<Option<std::os::fd::OwnedFd>, SandboxError> {
    let merged = crate::seccomp::merge(programs)?;
    let program = libc::sock_fprog {
        len: merged.len() as u16,
        filter: merged.as_ptr() as *mut libc::sock_filter,
    };
    let flags = if listener {
        libc::SECCOMP_FILTER_FLAG_NEW_LISTENER
    } else {
        0
    };
    // SAFETY: a valid program that outlives the call; no_new_privs is set.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            flags,
            &program as *const libc::sock_fprog,
        )
    };
    if r < 0 {
        return Err(SandboxError::last_errno("install the seccomp program"));
    }
    // SAFETY: with NEW_LISTENER the kernel returned a new descriptor we now own.
    Ok(listener.then(|| unsafe {
        <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(r as i32)
    }))
}

/// Every capability the kernel knows (until it says there are no more) out of the
/// bounding set: what no program this process executes can gain. It leaves the
/// capabilities the process holds now, so a sandbox's standby pid 1 empties it while it
/// waits, before the mounts its run still needs (`crate::builder::standby`).
pub(crate) fn empty_bounding_set() -> Result<(), SandboxError> {
    for cap in 0..64 {
        // SAFETY: plain prctl calls with integer arguments.
        match unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) } {
            0 => continue,
            1 => {}
            _ if nix::errno::Errno::last() == nix::errno::Errno::EINVAL && cap > 0 => break,
            _ => return Err(SandboxError::last_errno("bounding set")),
        }
        // Dropping needs CAP_SETPCAP, which a process that already dropped everything (the
        // command's, after pid 1) no longer has: only what is still there is dropped.
        // SAFETY: as above.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            return Err(SandboxError::last_errno("bounding set"));
        }
    }
    Ok(())
}

/// No new privileges, and no capability in any set (idempotent: the command's process
/// checks again what pid 1 already dropped).
pub(crate) fn drop_privileges() -> Result<(), SandboxError> {
    // SAFETY: plain prctl calls with integer arguments.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(SandboxError::last_errno("no_new_privs"));
        }
        if libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        ) != 0
        {
            return Err(SandboxError::last_errno("ambient capabilities"));
        }
    }
    empty_bounding_set()?;
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset with a v3 header and the two data words it reads.
    let r = unsafe { libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) };
    if r != 0 {
        return Err(SandboxError::last_errno("capset"));
    }
    Ok(())
}

/// The classic BPF program in descriptor `fd` (an array of `sock_filter`, as
/// bubblewrap's `--add-seccomp-fd` reads it).
pub(crate) fn read_program(fd: i32) -> Result<Vec<libc::sock_filter>, SandboxError> {
    // SAFETY: the descriptor was handed to this process for this; borrowed only here.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    let mut offset = 0u64;
    loop {
        let n = rustix::io::pread(borrowed, &mut buf, offset)
            .map_err(|e| SandboxError::Confine(format!("read seccomp program {fd}: {e}")))?;
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&buf[..n]);
        offset += n as u64;
    }
    let size = std::mem::size_of::<libc::sock_filter>();
    if bytes.is_empty() || bytes.len() % size != 0 || bytes.len() / size > u16::MAX as usize {
        return Err(SandboxError::Confine(format!(
            "seccomp program {fd} is malformed ({} bytes)",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(size)
        .map(|c| libc::sock_filter {
            code: u16::from_ne_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect())
}
