//! The Linux backend: every command runs in new namespaces built by bubblewrap or by
//! Warden's own builder (`crate::builder`), from one command line.
//!
//! Layout inside: the host root read-only, fresh `/proc` and a minimal `/dev`, then the
//! mount plan of `mounts.rs` (homes, `/run` and `/tmp` emptied; authorized paths bound
//! back in — read-only, or writable in the writable profile — from descriptors opened and
//! checked before launch, so no path is looked up again; Warden's state and, as root,
//! credential stores hidden; all ordered parents first); repositories in a writable
//! path kept from becoming a way out (`git.rs`: hooks and config read-only). New user,
//! pid, ipc, uts and (unless allowed) net namespaces, a new session, death with the
//! parent, every capability dropped — also when Warden runs as root — and two seccomp
//! programs. The helper then applies Landlock and executes the
//! command.
//!
//! Named for what it is, not for bubblewrap: [`NamespaceSandbox`] is the same sandbox
//! whichever [`Builder`] makes it (only `find_bwrap` and `TRUSTED_BWRAP_DIRS` are
//! bubblewrap's own). `sandbox.rs` owns the sandbox (a trusted bwrap, the checks when it
//! is built) and `sandbox/command_line.rs` the command line it builds for one run; `shell.rs` runs commands with it (the
//! `caps::Shell`, the write-watch report, git's post-run checks).

mod sandbox;
mod shell;

pub use sandbox::{
    Builder, DEFAULT_BORN_IN, Launch, NamespaceSandbox, TRUSTED_BWRAP_DIRS, find_bwrap,
};
pub use shell::SandboxShell;
