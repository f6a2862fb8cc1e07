//! A pseudo-terminal made for one run: the controlling side (the "master") stays with
//! Warden's supervisor, which reads the terminal's output from it, writes the input to
//! it and resizes it; the other side (the "slave") goes to the command as its standard
//! input, output and error. Nothing of Warden's own terminal is involved.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};

use nix::fcntl::OFlag;
use nix::libc;
use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt};

use crate::TerminalSize;

/// Both sides of a run's terminal.
#[derive(Debug)]
pub(crate) struct Pty {
    /// The controlling side, close-on-exec and non-blocking.
    pub master: OwnedFd,
    /// The command's side, opened without becoming anyone's controlling terminal.
    pub slave: OwnedFd,
    /// The command's side's path (`/dev/pts/N`), for a child that opens it to make it
    /// its controlling terminal.
    pub path: CString,
}

/// A new terminal of `size`.
pub(crate) fn open(size: TerminalSize) -> io::Result<Pty> {
    let master = posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let path = ptsname_r(&master)?;
    // SAFETY: the descriptor was returned by posix_openpt and is owned by `master`, which
    // gives it up here.
    let master = unsafe { OwnedFd::from_raw_fd(master.into_raw_fd()) };
    let slave = nix::fcntl::open(
        path.as_str(),
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    resize(&master, size)?;
    let flags = nix::fcntl::fcntl(&master, nix::fcntl::FcntlArg::F_GETFL)?;
    nix::fcntl::fcntl(
        &master,
        nix::fcntl::FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK),
    )?;
    let path = CString::new(path).map_err(|_| io::Error::other("terminal path with a NUL"))?;
    Ok(Pty {
        master,
        slave,
        path,
    })
}

/// Set the terminal's size; the kernel tells its foreground programs (`SIGWINCH`).
pub(crate) fn resize(master: &OwnedFd, size: TerminalSize) -> io::Result<()> {
    let winsize = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one initialised winsize that outlives the call.
    let ret = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &winsize) };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_has_its_size_and_passes_bytes_both_ways() {
        let pty = open(TerminalSize {
            rows: 30,
            cols: 100,
        })
        .expect("a pty");
        let mut got = libc::winsize {
            ws_row: 0,
            ws_col: 0,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        assert_eq!(
            // SAFETY: TIOCGWINSZ writes one winsize into storage that outlives the call.
            unsafe { libc::ioctl(pty.slave.as_raw_fd(), libc::TIOCGWINSZ, &mut got) },
            0
        );
        assert_eq!((got.ws_row, got.ws_col), (30, 100));
        assert!(pty.path.to_bytes().starts_with(b"/dev/pts/"));
        nix::unistd::write(&pty.slave, b"out").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut buf = [0u8; 16];
        let n = nix::unistd::read(&pty.master, &mut buf).unwrap();
        assert_eq!(&buf[..n], b"out");
    }
}
