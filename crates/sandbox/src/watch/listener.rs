//! The listener: installing the notification filter in the child, which yields the
//! listener descriptor, and passing that descriptor to the observer over a socketpair.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::libc;
use seccompiler::BpfProgram;

use crate::SandboxError;

/// Install the notification filter on the calling thread; returns the listener.
pub(super) fn install(program: &BpfProgram) -> Result<OwnedFd, SandboxError> {
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
        len: u16::try_from(filter.len())
            .map_err(|_| SandboxError::Watch("filter too long".to_string()))?,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: plain prctl; and seccomp reads `prog`, which points at `filter`, both alive
    // for the duration of the call.
    let fd = unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(SandboxError::Watch(format!(
                "no_new_privs: {}",
                std::io::Error::last_os_error()
            )));
        }
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &prog as *const libc::sock_fprog,
        )
    };
    if fd < 0 {
        return Err(SandboxError::Watch(format!(
            "seccomp user notification is not available: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: the kernel just returned this new descriptor to us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Hand the listener (or why there is none) to the observer, in the child.
pub(crate) fn send_listener(socket: RawFd, listener: Result<OwnedFd, SandboxError>) {
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
                &[IoSlice::new(why.to_string().as_bytes())],
                &[],
                MsgFlags::empty(),
                None,
            );
        }
    }
}

/// Take the listener (or the reason there is none) from the child, in the observer.
pub(super) fn receive_listener(socket: RawFd) -> Result<OwnedFd, SandboxError> {
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
    .map_err(|e| SandboxError::Watch(format!("receiving the listener: {e}")))?;
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
    fd.ok_or_else(|| SandboxError::Watch(String::from_utf8_lossy(&buf[..n]).into_owned()))
}
