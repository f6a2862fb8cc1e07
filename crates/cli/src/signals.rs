//! The signals Warden watches to stop (SIGINT, SIGTERM, SIGHUP) — except one it was
//! started with ignored, which stays ignored, as for any program: `nohup warden …`
//! survives a hang-up, and a script's background job (which the shell starts with SIGINT
//! ignored) an interrupt. Watching such a signal would install a handler in place of the
//! ignore, so it is not watched at all.

use std::sync::OnceLock;

use tokio::signal::unix::{Signal, SignalKind, signal};

/// The signals this process was started with ignored (the `SigIgn` mask of
/// `/proc/self/status`; bit n-1 is signal n), read once, before any handler is
/// installed. None, where it cannot be read.
fn ignored_at_start() -> u64 {
    static IGNORED: OnceLock<u64> = OnceLock::new();
    *IGNORED.get_or_init(|| {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                let hex = status.lines().find_map(|l| l.strip_prefix("SigIgn:"))?;
                u64::from_str_radix(hex.trim(), 16).ok()
            })
            .unwrap_or(0)
    })
}

/// One stop signal, watched unless it was ignored at start.
pub struct Watched(Option<Signal>);

impl Watched {
    /// Watch `kind` (signal number `number`), unless this process was started with it
    /// ignored.
    pub fn new(kind: SignalKind, number: i32) -> std::io::Result<Watched> {
        Ok(Watched(if ignored_at_start() & (1 << (number - 1)) == 0 {
            Some(signal(kind)?)
        } else {
            None
        }))
    }

    /// Not watched at all (a signal that could not be).
    pub fn none() -> Watched {
        Watched(None)
    }

    /// SIGINT.
    pub fn interrupt() -> std::io::Result<Watched> {
        Watched::new(SignalKind::interrupt(), nix::libc::SIGINT)
    }

    /// SIGTERM.
    pub fn terminate() -> std::io::Result<Watched> {
        Watched::new(SignalKind::terminate(), nix::libc::SIGTERM)
    }

    /// SIGHUP.
    pub fn hangup() -> std::io::Result<Watched> {
        Watched::new(SignalKind::hangup(), nix::libc::SIGHUP)
    }

    /// The next delivery; never, for a signal that is not watched.
    pub async fn recv(&mut self) {
        match &mut self.0 {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
}
