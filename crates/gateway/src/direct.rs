//! The operator's direct-mode switch: `host = sandbox` may run without an OS sandbox for
//! a limited time, recorded as a deadline in `$WARDEN_HOME/direct-mode.json`. Once the
//! deadline passes, commands are sandboxed again without anyone having to remember.
//!
//! The file turns the sandbox off, so it is believed only when it is a regular file of
//! ours that nobody else can write, naming a moment no further ahead than
//! [`MAX_DIRECT_TTL`]. (It lives in the state directory, which no command or file tool can
//! reach — see the sandbox's protected paths.)

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use approvals::Clock;
use caps::{FileKind, Fs, WriteOptions};

/// Longest direct-mode window an operator may open.
pub const MAX_DIRECT_TTL: Duration = Duration::from_secs(24 * 3600);

/// The switch file's name in the state directory.
pub const DIRECT_MODE_FILE: &str = "direct-mode.json";

/// The switch of one state directory.
#[derive(Clone)]
pub struct DirectSwitch {
    fs: Arc<dyn Fs>,
    path: PathBuf,
    owner_uid: u32,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for DirectSwitch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectSwitch")
            .field("path", &self.path)
            .finish()
    }
}

/// Why the switch could not be changed.
#[derive(Debug, thiserror::Error)]
pub enum DirectModeError {
    /// A TTL of zero or above [`MAX_DIRECT_TTL`].
    #[error("the TTL must be between 1 second and 24 hours")]
    BadTtl,
    /// The file could not be written or removed.
    #[error("{0}")]
    Io(#[from] caps::CapsError),
}

impl DirectSwitch {
    /// The switch in `state_dir`, owned by `owner_uid`.
    pub fn new(
        fs: Arc<dyn Fs>,
        state_dir: impl Into<PathBuf>,
        owner_uid: u32,
        clock: Arc<dyn Clock>,
    ) -> Self {
        DirectSwitch {
            fs,
            path: state_dir.into().join(DIRECT_MODE_FILE),
            owner_uid,
            clock,
        }
    }

    /// Until when direct mode is on (ms since the epoch), if it is on now.
    pub fn active_until(&self) -> Option<u64> {
        let meta = self.fs.symlink_metadata(&self.path).ok()?;
        if meta.kind != FileKind::File || meta.uid != self.owner_uid || meta.mode & 0o022 != 0 {
            tracing::warn!(
                "ignoring {}: not a private file of uid {}",
                self.path.display(),
                self.owner_uid
            );
            return None;
        }
        let text = self.fs.read_to_string(&self.path).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        let until = v["until"].as_u64()?;
        let now = self.clock.now_ms();
        (until > now && until - now <= MAX_DIRECT_TTL.as_millis() as u64).then_some(until)
    }

    /// Turn direct mode on for `ttl` (returns the deadline), or off with `None`.
    pub fn set(&self, ttl: Option<Duration>) -> Result<Option<u64>, DirectModeError> {
        let Some(ttl) = ttl else {
            match self.fs.remove(&self.path) {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
            return Ok(None);
        };
        if ttl.is_zero() || ttl > MAX_DIRECT_TTL {
            return Err(DirectModeError::BadTtl);
        }
        let until = self.clock.now_ms() + ttl.as_millis() as u64;
        if let Some(dir) = self.path.parent() {
            self.fs.create_dir_all(dir, 0o700)?;
        }
        let body = serde_json::json!({ "until": until, "ttlSeconds": ttl.as_secs() });
        self.fs.write_atomic(
            &self.path,
            body.to_string().as_bytes(),
            WriteOptions::private(),
        )?;
        Ok(Some(until))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use caps::MemoryFs;

    struct At(u64);
    impl Clock for At {
        fn now_ms(&self) -> u64 {
            self.0
        }
    }

    #[test]
    fn the_switch_is_believed_only_when_private_and_within_its_bound() {
        let fs = Arc::new(MemoryFs::with_uid(1000));
        let switch = DirectSwitch::new(fs.clone(), "/state", 1000, Arc::new(At(1_000)));
        assert_eq!(switch.active_until(), None);
        assert_eq!(
            switch.set(Some(Duration::from_secs(60))).unwrap(),
            Some(61_000)
        );
        assert_eq!(switch.active_until(), Some(61_000));
        let later = DirectSwitch::new(fs.clone(), "/state", 1000, Arc::new(At(61_000)));
        assert_eq!(later.active_until(), None, "expired");
        // Planted by someone else, or too far ahead: ignored.
        let other_owner = DirectSwitch::new(fs.clone(), "/state", 0, Arc::new(At(1_000)));
        assert_eq!(other_owner.active_until(), None);
        fs.write_atomic(
            std::path::Path::new("/state/direct-mode.json"),
            br#"{"until": 999999999999999}"#,
            WriteOptions::private(),
        )
        .unwrap();
        assert_eq!(switch.active_until(), None);
        assert!(matches!(
            switch.set(Some(Duration::from_secs(25 * 3600))),
            Err(DirectModeError::BadTtl)
        ));
        switch.set(None).unwrap();
        assert_eq!(switch.active_until(), None);
    }
}
