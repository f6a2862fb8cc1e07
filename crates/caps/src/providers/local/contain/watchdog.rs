//! The cgroup watchdog: what ends a Warden process's runs when that process itself is
//! killed (`kill -9`, the OOM killer, a crash) and so cannot end them. Inside the OS
//! sandbox bubblewrap's parent-death signal and the pid namespace do that; a command on
//! the gateway host (or in direct mode) would otherwise live on in its cgroup with no
//! timeout, no output reader and nobody to stop it.
//!
//! One small process per Warden process, started before its first run from the helper
//! binary ([`WATCHDOG_SUBCOMMAND`]), in a session of its own (a terminal's Ctrl-C does
//! not reach it) and outside every run's cgroup. It holds the read end of a pipe whose
//! only write end Warden keeps (close-on-exec: no command inherits it), and blocks on
//! it. End of file means Warden is gone — however it went — and the watchdog ends every
//! run left in Warden's `warden.<pid>.run.<n>` cgroups, exactly as Warden would (`cgroup.kill`,
//! or on v1 no new processes then every member killed), removes them, and exits. After a
//! clean exit there is nothing left and it exits at once.

use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use super::cgroup::{self, Flavor};
use crate::providers::local::spawn::{OwnedCwd, SpawnRequest, StdinKind};

/// The helper binary's subcommand that runs [`run_watchdog`].
pub const WATCHDOG_SUBCOMMAND: &str = "__warden-cgroup-watchdog";

/// Start the watchdog of this process's runs (`(flavor, warden.<pid>)` prefix pairs)
/// with `helper`; the returned descriptor must stay open for as long as this process
/// lives. The caller makes sure no thread of this process is inside a run's cgroup
/// while it spawns.
pub(crate) fn start(
    helper: &std::path::Path,
    prefixes: &[(Flavor, PathBuf)],
) -> io::Result<OwnedFd> {
    let mut argv: Vec<OsString> = vec![helper.as_os_str().to_owned(), WATCHDOG_SUBCOMMAND.into()];
    for (flavor, prefix) in prefixes {
        argv.push(flavor.name().into());
        argv.push(prefix.as_os_str().to_owned());
    }
    let request = SpawnRequest {
        program: helper.to_path_buf(),
        argv,
        env: Vec::new(),
        cwd: OwnedCwd::Path(PathBuf::from("/")),
        stdin: StdinKind::Piped,
        keep: Vec::new(),
        born_in: Default::default(),
        terminal: None,
        watches_its_parent: false,
    };
    let child = request.spawn(None)?;
    // Its stdout and stderr pipes are closed here: it has nothing to say (a write would
    // only fail).
    child
        .stdin
        .ok_or_else(|| io::Error::other("the watchdog was started without its pipe"))
}

/// The watchdog's `main` (see the module header): `args` are `flavor prefix` pairs.
/// Never returns.
pub fn run_watchdog(args: &[OsString]) -> ! {
    let prefixes: Vec<(Flavor, PathBuf)> = args
        .chunks(2)
        .filter_map(|pair| match pair {
            [flavor, prefix] => Some((Flavor::from_name(flavor.to_str()?)?, PathBuf::from(prefix))),
            _ => None,
        })
        .collect();
    if prefixes.len() * 2 != args.len() {
        std::process::exit(2);
    }
    wait_for_end_of_file();
    cgroup::end_every_run(&prefixes);
    std::process::exit(0)
}

/// Block until standard input reaches end of file (or fails).
fn wait_for_end_of_file() {
    let stdin = std::io::stdin();
    let mut buf = [0u8; 64];
    loop {
        match nix::unistd::read(&stdin, &mut buf) {
            Ok(0) => return,
            Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
        }
    }
}
