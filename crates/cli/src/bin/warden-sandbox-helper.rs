//! `warden-sandbox-helper`: the in-sandbox helper as a small binary of its own. It does
//! exactly what `warden __sandbox-helper` does (close inherited descriptors, apply
//! Landlock, execute the command) but starts in a fraction of the time, because it does
//! not carry the whole `warden` binary. The composition root uses it when it sits next
//! to `warden`, and falls back to the subcommand otherwise. It is also the per-run child
//! subreaper on hosts where no cgroup can be made (`caps::process::run_reaper`) and the
//! cgroup watchdog (`caps::process::run_watchdog`).
//!
//! It starts at the C entry point instead of Rust's `main`: std's start-up looks up the
//! main thread's stack guard (reading `/proc/self/maps`) and ignores SIGPIPE (which the
//! helper and the reaper then restore for the command) — about 0.1 ms of every start
//! measured here, and this binary starts once per sandboxed run. The one part of it that
//! matters is done below: standard descriptors found closed are opened on `/dev/null`,
//! so that no file the helper opens can take their place. Without std's start-up a
//! stack overflow is a plain SIGSEGV, and a panic aborts after printing its message.
#![no_main]

use nix::libc;

/// Open `/dev/null` on each of descriptors 0–2 that is closed (as std's start-up does).
fn open_closed_standard_descriptors() {
    for fd in 0..=2 {
        // SAFETY: F_GETFD only reads the descriptor's flags.
        let closed = unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1
            && nix::errno::Errno::last() == nix::errno::Errno::EBADF;
        if closed {
            // SAFETY: a constant NUL-terminated path; open returns the lowest free
            // descriptor, which is `fd`, since the ones below it are open.
            let opened = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
            if opened != fd {
                std::process::exit(125);
            }
        }
    }
}

/// The entry point (see the module header). The arguments are read from `argv`: std's
/// record of them is filled by glibc's start-up alone, and this binary is also built for
/// musl (statically, where a start costs half as much: `cargo xtask musl-helper`).
///
/// # Safety
///
/// Called once, by the C start-up, with its `argc` and `argv` (`argc` NUL-terminated
/// strings).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn main(argc: libc::c_int, argv: *const *const libc::c_char) -> libc::c_int {
    open_closed_standard_descriptors();
    let raw: Vec<std::ffi::OsString> = (0..usize::try_from(argc).unwrap_or(0))
        .map(|i| {
            use std::os::unix::ffi::OsStrExt as _;
            // SAFETY: argv holds argc NUL-terminated strings (the C start-up's contract).
            let arg = unsafe { std::ffi::CStr::from_ptr(*argv.add(i)) };
            std::ffi::OsStr::from_bytes(arg.to_bytes()).to_owned()
        })
        .collect();
    let raw = raw.get(1..).unwrap_or_default();
    if raw
        .first()
        .is_some_and(|a| sandbox::subcommands::is_subcommand(a))
    {
        sandbox::subcommands::run(raw);
    }
    // Without a subcommand: the in-sandbox helper's own argument list, which Warden
    // writes in UTF-8; anything else is refused, never rewritten.
    let args: Vec<String> = match raw.iter().map(|a| a.clone().into_string()).collect() {
        Ok(args) => args,
        Err(bad) => {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "warden sandbox: an argument is not UTF-8: {bad:?}"
            );
            std::process::exit(125);
        }
    };
    sandbox::helper::main(&args);
}
