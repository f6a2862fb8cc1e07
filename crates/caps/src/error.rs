//! `CapsError`: the typed failures of the capability seam.
//!
//! A denial (a path that would leave the provider's world) is its own variant so that
//! callers can never mistake an escape attempt for an ordinary I/O failure, and
//! "program not found" / "not executable" are distinct so the CLI can map them to the
//! conventional exit codes 127 and 126.

use std::io;
use std::path::PathBuf;

/// Every way a capability call can fail.
#[derive(Debug, thiserror::Error)]
pub enum CapsError {
    /// The request would reach outside what this provider may touch (a `..` escape, an
    /// absolute path in a bounded world, a symlink leaving the root, a NUL byte).
    /// Nothing outside the world was touched.
    #[error("access denied: {path}: {reason}")]
    Denied {
        /// The path as the caller gave it.
        path: PathBuf,
        /// Why it was refused, for humans.
        reason: String,
    },
    /// The file or directory does not exist.
    #[error("not found: {path}")]
    NotFound {
        /// The path as the caller gave it.
        path: PathBuf,
    },
    /// The file already exists and the operation required it not to.
    #[error("already exists: {path}")]
    AlreadyExists {
        /// The path as the caller gave it.
        path: PathBuf,
    },
    /// The program to execute could not be found (exit code 127 at the CLI).
    #[error("program not found: {program}")]
    ProgramNotFound {
        /// The program as the caller named it.
        program: String,
    },
    /// The program exists but cannot be executed (exit code 126 at the CLI).
    #[error("program not executable: {program}: {reason}")]
    NotExecutable {
        /// The program as the caller named it.
        program: String,
        /// Why it could not be executed.
        reason: String,
    },
    /// The provider has no such capability (for example the memory world has no processes).
    #[error("unsupported: {what}")]
    Unsupported {
        /// What was asked for.
        what: String,
    },
    /// The request itself is malformed (empty argv, NUL in an argument, zero timeout...).
    #[error("invalid request: {reason}")]
    InvalidInput {
        /// What is wrong with it.
        reason: String,
    },
    /// An operating-system error other than the cases above.
    #[error("{op} {path}: {source}")]
    Io {
        /// The operation that failed (`read`, `rename`, `spawn`...).
        op: &'static str,
        /// The path or program involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
}

impl CapsError {
    /// The shell-convention exit code for a command that could not be started: 127 not
    /// found, 126 not executable, 125 for any other failure of the capability layer.
    pub fn exit_code(&self) -> i32 {
        match self {
            CapsError::ProgramNotFound { .. } => 127,
            CapsError::NotExecutable { .. } => 126,
            _ => 125,
        }
    }

    /// Map an `io::Error` from operation `op` on `path` to the most specific variant.
    pub fn from_io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        let path = path.into();
        match source.kind() {
            io::ErrorKind::NotFound => CapsError::NotFound { path },
            io::ErrorKind::AlreadyExists => CapsError::AlreadyExists { path },
            _ => CapsError::Io { op, path, source },
        }
    }

    /// A denial for `path` with a human-readable reason.
    pub fn denied(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        CapsError::Denied {
            path: path.into(),
            reason: reason.into(),
        }
    }

    /// An invalid-input error.
    pub fn invalid(reason: impl Into<String>) -> Self {
        CapsError::InvalidInput {
            reason: reason.into(),
        }
    }

    /// True for [`CapsError::Denied`].
    pub fn is_denied(&self) -> bool {
        matches!(self, CapsError::Denied { .. })
    }

    /// True for [`CapsError::NotFound`].
    pub fn is_not_found(&self) -> bool {
        matches!(self, CapsError::NotFound { .. })
    }
}
