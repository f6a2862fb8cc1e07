//! The OS sandbox: `caps::Shell` providers that run every command confined.
//!
//! - [`namespace`]: the Linux namespace sandbox, built by bubblewrap or by Warden's own
//!   builder ([`builder`]) — new user, pid, ipc, uts (and, unless allowed, net) namespaces, a read-only root with user data hidden, writable binds only for
//!   authorized paths, a private `/tmp`, no capabilities (even as root), seccomp filters,
//!   and Landlock applied by a small helper right before the command executes (also the
//!   optional exec allowlist, [`exec_allowlist`]).
//! - [`container`]: exec into a long-running container through a Docker-compatible CLI.
//! - [`seatbelt`]: the macOS `sandbox-exec` profile (generated and tested everywhere,
//!   run only on macOS).
//! - [`probe`]: what this machine can do (`warden doctor`), and the diagnosis every
//!   refusal carries.
//!
//! Fail closed: when the configured backend is unavailable, constructing it fails with a
//! diagnosis, and the gateway refuses sandboxed execs with it. There is no fallback to
//! running unsandboxed.

// The sandbox is provider code: it starts real processes and inspects real files.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod bpf;
pub mod builder;
pub(crate) mod confine;
pub mod container;
pub mod egress;
mod error;
pub mod exec_allowlist;
pub(crate) mod exit_report;
pub mod git;
pub mod helper;
pub mod landlock;
mod mount_api;
pub mod mounts;
pub mod namespace;
pub mod probe;
pub mod probe_cache;
pub mod protect;
pub mod seatbelt;
pub mod seccomp;
mod setup_failure;
pub mod subcommands;
pub mod trusted;
pub mod watch;

use std::path::PathBuf;

use serde::Serialize;

/// Whether Landlock must be used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LandlockMode {
    /// Use it where the kernel supports it.
    #[default]
    Auto,
    /// Refuse to run without it.
    Required,
    /// Never use it.
    Off,
}

// A parse error in text, as every `FromStr` of a setting is: the helper wraps it as a
// `SandboxError::Helper` where it reads its own arguments.
impl std::str::FromStr for LandlockMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(LandlockMode::Auto),
            "required" => Ok(LandlockMode::Required),
            "off" => Ok(LandlockMode::Off),
            _ => Err(format!(
                "invalid landlock mode {s:?}: expected one of auto, required, off"
            )),
        }
    }
}

/// What the sandbox lets a command see and touch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SandboxPolicy {
    /// Read and write (absolute, real directories).
    pub writable_paths: Vec<PathBuf>,
    /// Read only (absolute, real directories).
    pub readable_extra_paths: Vec<PathBuf>,
    /// Never visible inside (Warden's state directory, approvals file, token, socket).
    pub hidden_paths: Vec<PathBuf>,
    /// Visible, never changed: bound read-only onto themselves where they would be
    /// writable (the directories of the programs Warden executes; see
    /// [`protect`](crate::protect)).
    pub read_only_paths: Vec<PathBuf>,
    /// Network access (off by default: a new, empty network namespace and no sockets
    /// beyond `AF_UNIX`).
    pub network: Network,
    /// Landlock as a second filesystem layer.
    pub landlock: LandlockMode,
}

/// What network a sandboxed command has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// None: a new network namespace with only loopback, and no sockets beyond `AF_UNIX`.
    #[default]
    Off,
    /// The host's own network.
    On,
    /// A new network namespace with only loopback, where the only way out is Warden's
    /// egress proxy ([`egress`]): a listener on loopback, named by `HTTP_PROXY` and
    /// friends and held by the proxy outside, which decides each connection by the run's
    /// rules.
    Proxy,
}

impl Network {
    /// Whether the run gets a network namespace of its own (everything but `On`).
    pub fn own_namespace(self) -> bool {
        self != Network::On
    }

    /// Whether the command may make IP sockets (everything but `Off`; in `Proxy` they
    /// reach only the namespace's loopback).
    pub fn ip_sockets(self) -> bool {
        self != Network::Off
    }
}

/// Which writes a run may make.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// Authorized paths are mounted read-only (only the private `/tmp` is writable).
    ReadOnly,
    /// Authorized writable paths are writable.
    Writable,
}

/// Why a sandbox cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no sandbox backend is available: {0}")]
pub struct Unavailable(pub String);

/// The message the kernel's `EROFS` prints: how a write blocked by a read-only bind mount
/// reaches us through the command's own error output.
pub const EROFS_MESSAGE: &str = "Read-only file system";

/// What a read-only run's result says about refused writes, for approval mode: the
/// kernel's own report when a watch saw everything (`watched`), else — a backend or
/// kernel that cannot watch — the `EROFS` message in a failed command's output, with the
/// paths unknown.
pub fn classify_refused_writes(
    output: &caps::ExecOutput,
    watched: Option<Vec<PathBuf>>,
) -> caps::RefusedWrites {
    match watched {
        Some(paths) if paths.is_empty() => caps::RefusedWrites::None,
        Some(paths) => caps::RefusedWrites::Refused(paths),
        None if !output.status.success()
            && !output.timed_out
            && output.combined.contains(EROFS_MESSAGE) =>
        {
            caps::RefusedWrites::Refused(Vec::new())
        }
        None => caps::RefusedWrites::None,
    }
}

pub use egress::Egress;
/// Why a sandbox step failed: a mount step (its path and errno), a confining system call,
/// a probe, the container runtime, a command line that cannot be parsed, the helper's
/// arguments, Landlock, the write watch or a seccomp program. Its text is the diagnosis.
pub use error::SandboxError;
pub use namespace::{Builder, NamespaceSandbox, SandboxShell};

/// Add Warden's `note` to what the run wrote on stderr (and so to its combined output).
pub(crate) fn say(output: &mut caps::ExecOutput, note: &str) {
    for text in [&mut output.stderr, &mut output.combined] {
        text.push_str(note);
        text.push('\n');
    }
}
