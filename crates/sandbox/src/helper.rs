//! The in-sandbox helper (`warden __sandbox-helper`): runs inside bubblewrap as the last
//! step before the command. It closes every inherited descriptor above 2 (bubblewrap's
//! setup descriptors must not reach the command), applies Landlock (writes only beneath
//! the writable paths, `/tmp` and `/dev`), and executes the command — or, in the watched
//! read-only profile, forks it and observes its writes (see [`crate::watch`]).
//!
//! It runs after bubblewrap finished its mounts because a Landlock-restricted process
//! may no longer change its mount topology.

use std::ffi::CString;
use std::path::PathBuf;

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus,
};

use crate::LandlockMode;

/// The subcommand name the `warden` binary dispatches to [`main`].
pub const SUBCOMMAND: &str = "__sandbox-helper";

/// Exit code when the sandbox cannot be established (matches Warden's own errors).
const SETUP_FAILED: i32 = 125;

/// The helper's arguments:
/// `[--landlock MODE] [--rw PATH]... [--watch-writes FD] -- ARGV...`.
#[derive(Debug, PartialEq, Eq)]
pub struct HelperArgs {
    /// Landlock mode.
    pub landlock: LandlockMode,
    /// Paths writes are allowed beneath.
    pub writable: Vec<PathBuf>,
    /// Watch for refused writes and report them to this descriptor.
    pub watch_fd: Option<i32>,
    /// The command.
    pub argv: Vec<String>,
}

/// Build the helper's argument list (after the program and subcommand).
pub fn encode(
    landlock: LandlockMode,
    writable: &[PathBuf],
    watch_fd: Option<i32>,
    argv: &[String],
) -> Vec<String> {
    let mut out = vec![
        "--landlock".to_owned(),
        format!("{landlock:?}").to_lowercase(),
    ];
    for p in writable {
        out.push("--rw".into());
        out.push(p.to_string_lossy().into_owned());
    }
    if let Some(fd) = watch_fd {
        out.push("--watch-writes".into());
        out.push(fd.to_string());
    }
    out.push("--".into());
    out.extend(argv.iter().cloned());
    out
}

/// Parse the helper's arguments.
pub fn decode(args: &[String]) -> Result<HelperArgs, String> {
    let mut landlock = LandlockMode::Auto;
    let mut writable = Vec::new();
    let mut watch_fd = None;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--landlock" => {
                landlock = args.get(i + 1).ok_or("--landlock needs a value")?.parse()?;
                i += 2;
            }
            "--rw" => {
                writable.push(PathBuf::from(args.get(i + 1).ok_or("--rw needs a path")?));
                i += 2;
            }
            "--watch-writes" => {
                let fd = args.get(i + 1).ok_or("--watch-writes needs a descriptor")?;
                let fd: i32 = fd
                    .parse()
                    .ok()
                    .filter(|n| *n > 2)
                    .ok_or_else(|| format!("invalid --watch-writes descriptor {fd:?}"))?;
                watch_fd = Some(fd);
                i += 2;
            }
            "--" => {
                let argv = args[i + 1..].to_vec();
                if argv.is_empty() {
                    return Err("no command after --".into());
                }
                return Ok(HelperArgs {
                    landlock,
                    writable,
                    watch_fd,
                    argv,
                });
            }
            other => return Err(format!("unexpected helper argument {other:?}")),
        }
    }
    Err("missing -- before the command".into())
}

/// Apply Landlock for `writable`. Returns the enforcement status.
fn apply_landlock(writable: &[PathBuf], mode: LandlockMode) -> Result<RulesetStatus, String> {
    // Ask for the write rights this kernel knows (up to ABI 5, the newest this helper
    // uses): asking for more would make a hard requirement fail on an older kernel.
    let abi = ABI::from(crate::bwrap::landlock_abi().clamp(1, 5) as i32);
    let write = AccessFs::from_write(abi);
    let mut ruleset = Ruleset::default();
    ruleset = ruleset.set_compatibility(match mode {
        LandlockMode::Required => CompatLevel::HardRequirement,
        _ => CompatLevel::BestEffort,
    });
    let mut created = ruleset
        .handle_access(write)
        .map_err(|e| e.to_string())?
        .create()
        .map_err(|e| e.to_string())?;
    let mut targets: Vec<PathBuf> = writable.to_vec();
    targets.extend(["/tmp", "/dev"].map(PathBuf::from));
    for path in targets {
        // A writable path that does not exist inside cannot be written anyway.
        let Ok(fd) = PathFd::new(&path) else { continue };
        created = created
            .add_rule(PathBeneath::new(fd, AccessFs::from_all(abi) & write))
            .map_err(|e| e.to_string())?;
    }
    let status = created.restrict_self().map_err(|e| e.to_string())?;
    Ok(status.ruleset)
}

fn fail(message: &str) -> ! {
    let _ = nix::unistd::write(
        std::io::stderr(),
        format!("warden sandbox: {message}\n").as_bytes(),
    );
    std::process::exit(SETUP_FAILED)
}

/// The helper's `main`: never returns.
pub fn main(args: &[String]) -> ! {
    let parsed = match decode(args) {
        Ok(p) => p,
        Err(e) => fail(&e),
    };
    // Nothing bubblewrap (or anyone) left open may reach the command. The watch report
    // descriptor stays open for the observer (and is close-on-exec for the command).
    match parsed.watch_fd {
        Some(fd) => {
            close_from_to(3, fd as u32 - 1);
            close_from_to(fd as u32 + 1, u32::MAX);
        }
        None => close_from_to(3, u32::MAX),
    }
    if parsed.landlock != LandlockMode::Off {
        match apply_landlock(&parsed.writable, parsed.landlock) {
            Ok(RulesetStatus::FullyEnforced) | Ok(RulesetStatus::PartiallyEnforced) => {}
            Ok(RulesetStatus::NotEnforced) if parsed.landlock == LandlockMode::Auto => {}
            Ok(RulesetStatus::NotEnforced) => {
                fail("Landlock is required but the kernel does not enforce it")
            }
            Err(e) if parsed.landlock == LandlockMode::Auto => {
                let _ = e;
            }
            Err(e) => fail(&format!(
                "Landlock is required but could not be applied: {e}"
            )),
        }
    }
    let argv: Vec<CString> = match parsed
        .argv
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect()
    {
        Ok(a) => a,
        Err(_) => fail("argument contains a NUL byte"),
    };
    match parsed.watch_fd {
        Some(fd) => crate::watch::run(fd, &parsed.writable, &argv, exec_command),
        None => exec_command(&argv),
    }
}

/// Close descriptors `first..=last` (`last < first` closes nothing).
fn close_from_to(first: u32, last: u32) {
    if last < first {
        return;
    }
    // SAFETY: close_range takes plain integers; closing descriptors this helper does not
    // use is the point.
    let closed = unsafe { nix::libc::syscall(nix::libc::SYS_close_range, first, last, 0u32) };
    if closed != 0 {
        for fd in first..last.min(1024).saturating_add(1) {
            let _ = nix::unistd::close(fd as i32);
        }
    }
}

/// Execute the command (PATH lookup as execvp does); on failure report and exit 126/127.
fn exec_command(argv: &[CString]) -> ! {
    let err = nix::unistd::execvp(&argv[0], argv).unwrap_err();
    let code = if err == nix::errno::Errno::ENOENT {
        127
    } else {
        126
    };
    let _ = nix::unistd::write(
        std::io::stderr(),
        format!(
            "warden sandbox: cannot execute {}: {err}\n",
            argv[0].to_string_lossy()
        )
        .as_bytes(),
    );
    std::process::exit(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_round_trip() {
        let argv = vec!["sh".to_string(), "-c".into(), "echo -- --rw x".into()];
        let encoded = encode(
            LandlockMode::Required,
            &[PathBuf::from("/w s")],
            Some(7),
            &argv,
        );
        let decoded = decode(&encoded).unwrap();
        assert_eq!(
            decoded,
            HelperArgs {
                landlock: LandlockMode::Required,
                writable: vec![PathBuf::from("/w s")],
                watch_fd: Some(7),
                argv
            }
        );
        assert!(decode(&["--watch-writes".into(), "1".into(), "--".into(), "x".into()]).is_err());
        assert!(decode(&["--rw".into()]).is_err());
        assert!(decode(&["--".into()]).is_err());
        assert!(decode(&["--bogus".into(), "--".into(), "x".into()]).is_err());
    }
}
