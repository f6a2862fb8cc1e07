//! The watch's report: the JSON lines the observer writes to the report pipe once the
//! command has exited, and how the sandbox shell reads them back into a [`WatchReport`].

use std::os::fd::{OwnedFd, RawFd};
use std::path::PathBuf;

use nix::libc;
use serde::{Deserialize, Serialize};

/// At most this many refused paths are reported (the first ones, without duplicates).
pub const MAX_REPORTED: usize = 16;

/// The report must fit a pipe buffer: the sandbox shell reads it only after the run.
const MAX_REPORT_BYTES: usize = 32 * 1024;

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

/// The report of a watch that was installed: active, the refused writes (as many as fit),
/// and how many observed calls could not be resolved.
pub(super) fn observed(refused: &[PathBuf], unresolved: u32) -> Vec<u8> {
    let mut out = line(&Line::Active);
    for path in refused {
        let next = line(&Line::Refused(path.to_string_lossy().into_owned()));
        if out.len() + next.len() > MAX_REPORT_BYTES - 64 {
            break;
        }
        out.extend(next);
    }
    if unresolved > 0 {
        out.extend(line(&Line::Unresolved(unresolved)));
    }
    out
}

/// The report of a watch that could not be installed, and why.
pub(super) fn unavailable(why: String) -> Vec<u8> {
    line(&Line::Unavailable(why))
}

fn line(l: &Line) -> Vec<u8> {
    let mut v = serde_json::to_vec(l).unwrap_or_default();
    v.push(b'\n');
    v
}

/// Write all of `bytes` to the (non-blocking) report descriptor, giving up on any error.
pub(super) fn write_all(fd: RawFd, bytes: &[u8]) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_round_trip_and_fall_back_when_incomplete() {
        let r = parse_report(&observed(
            &[PathBuf::from("/ws/a\nb"), PathBuf::from("/ws/c")],
            0,
        ));
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
