//! The sandbox crate's error: what failed while a sandbox was probed, built, entered or
//! checked. Each variant names the part of the sandbox that failed; its text is the
//! diagnosis a user (or a test, or the docs) reads, so a variant's `Display` is exactly the
//! message that part always printed.

use std::path::PathBuf;

use crate::bpf::SeccompError;

/// Why a sandbox step could not be done.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// One step of building the sandbox's mount tree (`step`, e.g. `make read-only`)
    /// failed on `path` with `errno`.
    #[error("{step} {}: {errno}", path.display())]
    Mount {
        /// What was being done, as the message says it.
        step: &'static str,
        /// Where (inside the new root, or on the host for a source).
        path: PathBuf,
        /// The kernel's answer.
        errno: rustix::io::Errno,
    },
    /// A file Warden checked before the sandbox started is another file now: nothing ran.
    #[error("{} changed between its check and the sandbox's start; nothing was run", path.display())]
    Changed {
        /// The path the checked descriptor had.
        path: PathBuf,
    },
    /// The mount tree could not be built for another reason (a bound descriptor that
    /// cannot be looked at, a path that cannot be created or entered).
    #[error("{0}")]
    Tree(String),
    /// A system call confining a process failed (`step`: which; e.g. `capset`).
    #[error("{step}: {errno}")]
    Syscall {
        /// What was being done, as the message says it.
        step: &'static str,
        /// The kernel's answer.
        errno: nix::errno::Errno,
    },
    /// Confining a process failed for another reason (its namespaces, id maps, a
    /// seccomp program handed over by descriptor).
    #[error("{0}")]
    Confine(String),
    /// The builder's command line (bubblewrap's arguments) cannot be turned into a spec.
    #[error("{0}")]
    Spec(String),
    /// The helper's arguments are not what Warden writes.
    #[error("{0}")]
    Helper(String),
    /// This machine cannot build the sandbox (a probe's diagnosis).
    #[error("{0}")]
    Probe(String),
    /// Landlock (a write ruleset or the exec allowlist) cannot be enforced here.
    #[error("{0}")]
    Landlock(String),
    /// The write watch cannot run, or its listener did not arrive.
    #[error("{0}")]
    Watch(String),
    /// The container runtime, or the container, cannot give what the backend needs.
    #[error("{0}")]
    Container(String),
    /// A seccomp program could not be built.
    #[error(transparent)]
    Seccomp(#[from] SeccompError),
}

impl SandboxError {
    /// A step of building the mount tree failed (see [`SandboxError::Mount`]).
    pub(crate) fn mount(
        step: &'static str,
        path: impl Into<PathBuf>,
        errno: rustix::io::Errno,
    ) -> SandboxError {
        SandboxError::Mount {
            step,
            path: path.into(),
            errno,
        }
    }

    /// A confining system call failed with the last errno (see [`SandboxError::Syscall`]).
    pub(crate) fn last_errno(step: &'static str) -> SandboxError {
        SandboxError::Syscall {
            step,
            errno: nix::errno::Errno::last(),
        }
    }

    /// Landlock refused, as the `landlock` crate says it (see [`SandboxError::Landlock`]).
    pub(crate) fn landlock(e: impl std::fmt::Display) -> SandboxError {
        SandboxError::Landlock(e.to_string())
    }
}
