//! The seccomp programs applied to every sandboxed command (by bubblewrap, right before
//! it executes the command): dangerous syscalls fail with EPERM, `clone3` with ENOSYS
//! (so libc falls back to `clone`, whose flags a filter can inspect), and — when the
//! network is off — sockets of every family but `AF_UNIX`.
//!
//! The rules are tables here, compiled by `bpf.rs` into compact programs — a quarter of
//! the length seccompiler writes for the same rules, which the tests check these answer
//! exactly like — and serialised as the raw `struct sock_filter` array that bubblewrap's
//! `--add-seccomp-fd` expects. Warden's own builder installs them, and the write watch's
//! notifications, as one program ([`merge`]): every install costs tens of microseconds,
//! and more the longer the program, before its first instruction runs. (seccompiler still
//! compiles the exec allowlist's memfd filter, and is the tests' reference.)
//!
//! Here: the rule tables and their programs; `merge.rs`: one install of several, and
//! the raw form the kernel and bubblewrap take.

use std::collections::BTreeMap;

use seccompiler::BpfProgram;
use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch,
};

use crate::bpf::{self, Check};

mod merge;
#[cfg(test)]
mod tests;

pub use merge::{merge, to_bytes, to_raw};

/// `ioctl` requests that push input into a terminal or reconfigure the console.
const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;
const CLONE_NEWUSER: u64 = 0x1000_0000;
/// The set-user-id and set-group-id bits of a file mode (`S_ISUID | S_ISGID`).
const SET_ID_BITS: u32 = 0o6000;
/// `open(2)` flags that create a file: `O_CREAT`, and `__O_TMPFILE` (an unnamed file
/// that `linkat` can give a name later).
const CREATES: u32 = (nix::libc::O_CREAT | 0o20_000_000) as u32;
/// `fchmodat2(2)` (Linux 6.6; the same number on every architecture Warden builds for).
const SYS_FCHMODAT2: i64 = 452;

/// Syscalls denied outright (EPERM).
pub const DENIED_SYSCALLS: &[&str] = &[
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "mount",
    "umount2",
    "pivot_root",
    "ptrace",
    "process_vm_writev",
    "process_vm_readv",
    "keyctl",
    "add_key",
    "request_key",
    "perf_event_open",
    "bpf",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "kexec_load",
    "init_module",
    "finit_module",
    "delete_module",
    "setns",
];

pub use crate::bpf::SeccompError;

fn arch() -> Result<TargetArch, SeccompError> {
    TargetArch::try_from(std::env::consts::ARCH).map_err(|e| SeccompError(e.to_string()))
}

fn nr(name: &str) -> Result<i64, SeccompError> {
    syscall_number(name).ok_or_else(|| SeccompError(format!("unknown syscall {name}")))
}

/// Syscall numbers of the names used here, from libc for the target architecture.
fn syscall_number(name: &str) -> Option<i64> {
    use nix::libc;
    let n = match name {
        "ioctl" => libc::SYS_ioctl,
        "socket" => libc::SYS_socket,
        "clone" => libc::SYS_clone,
        "ptrace" => libc::SYS_ptrace,
        "unshare" => libc::SYS_unshare,
        "mount" => libc::SYS_mount,
        "umount2" => libc::SYS_umount2,
        "pivot_root" => libc::SYS_pivot_root,
        "process_vm_readv" => libc::SYS_process_vm_readv,
        "process_vm_writev" => libc::SYS_process_vm_writev,
        "keyctl" => libc::SYS_keyctl,
        "add_key" => libc::SYS_add_key,
        "request_key" => libc::SYS_request_key,
        "perf_event_open" => libc::SYS_perf_event_open,
        "bpf" => libc::SYS_bpf,
        "userfaultfd" => libc::SYS_userfaultfd,
        "io_uring_setup" => libc::SYS_io_uring_setup,
        "io_uring_enter" => libc::SYS_io_uring_enter,
        "io_uring_register" => libc::SYS_io_uring_register,
        "open_tree" => libc::SYS_open_tree,
        "move_mount" => libc::SYS_move_mount,
        "fsopen" => libc::SYS_fsopen,
        "fsconfig" => libc::SYS_fsconfig,
        "fsmount" => libc::SYS_fsmount,
        "fspick" => libc::SYS_fspick,
        "clone3" => libc::SYS_clone3,
        "mount_setattr" => libc::SYS_mount_setattr,
        "kexec_load" => libc::SYS_kexec_load,
        "init_module" => libc::SYS_init_module,
        "finit_module" => libc::SYS_finit_module,
        "delete_module" => libc::SYS_delete_module,
        "setns" => libc::SYS_setns,
        "fchmod" => libc::SYS_fchmod,
        "fchmodat" => libc::SYS_fchmodat,
        "fchmodat2" => SYS_FCHMODAT2,
        "openat" => libc::SYS_openat,
        "openat2" => libc::SYS_openat2,
        "mknodat" => libc::SYS_mknodat,
        #[cfg(target_arch = "x86_64")]
        "chmod" => libc::SYS_chmod,
        #[cfg(target_arch = "x86_64")]
        "open" => libc::SYS_open,
        #[cfg(target_arch = "x86_64")]
        "creat" => libc::SYS_creat,
        #[cfg(target_arch = "x86_64")]
        "mknod" => libc::SYS_mknod,
        _ => return None,
    };
    Some(n)
}

pub(crate) fn cond(
    arg: u8,
    len: SeccompCmpArgLen,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, SeccompError> {
    SeccompCondition::new(arg, len, op, value).map_err(|e| SeccompError(e.to_string()))
}

pub(crate) fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, SeccompError> {
    SeccompRule::new(conditions).map_err(|e| SeccompError(e.to_string()))
}

pub(crate) fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    action: SeccompAction,
) -> Result<BpfProgram, SeccompError> {
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, action, arch()?)
        .map_err(|e| SeccompError(e.to_string()))?;
    BpfProgram::try_from(filter).map_err(|e| SeccompError(e.to_string()))
}

/// Where each call that can give a file a mode takes it, and how: `(name, mode argument,
/// the flags argument that must ask to create the file)`. A set-user-id or set-group-id
/// bit given through any of them is refused: Warden running as root maps the sandbox's
/// user to root, so a file a command marked so would run as root on the host for anyone.
/// (`openat2` carries its mode in memory a filter cannot read: it answers ENOSYS, see
/// [`enosys_rules`], and programs fall back to `openat`.)
fn mode_setting_calls() -> Vec<(&'static str, u8, Option<u8>)> {
    let mut calls = vec![
        ("fchmod", 1, None),
        ("fchmodat", 2, None),
        ("fchmodat2", 2, None),
        ("openat", 3, Some(2)),
        ("mknodat", 2, None),
    ];
    if cfg!(target_arch = "x86_64") {
        calls.extend([
            ("chmod", 1, None),
            ("open", 2, Some(1)),
            ("creat", 1, None),
            ("mknod", 1, None),
        ]);
    }
    calls
}

/// The EPERM program's rules: denied syscalls, terminal-injection ioctls (compared on the
/// low 32 bits, which is all the kernel looks at), user-namespace creation through
/// `clone` and `unshare`, set-id bits in a file mode ([`mode_setting_calls`]), and
/// sockets of other families than `network` allows.
pub(crate) fn eperm_rules(network: crate::Network) -> Result<Vec<(i64, Check)>, SeccompError> {
    let mut rules = Vec::new();
    for name in DENIED_SYSCALLS {
        rules.push((nr(name)?, Check::Always));
    }
    rules.push((
        nr("ioctl")?,
        Check::In {
            arg: 1,
            values: vec![TIOCSTI as u32, TIOCLINUX as u32],
        },
    ));
    let newuser = Check::AnyBit {
        arg: 0,
        mask: CLONE_NEWUSER as u32,
    };
    rules.push((nr("clone")?, newuser.clone()));
    rules.push((nr("unshare")?, newuser));
    for (name, mode, creating) in mode_setting_calls() {
        let check = match creating {
            None => Check::AnyBit {
                arg: mode,
                mask: SET_ID_BITS,
            },
            Some(flags) => Check::AnyBitBoth {
                first: (flags, CREATES),
                second: (mode, SET_ID_BITS),
            },
        };
        rules.push((nr(name)?, check));
    }
    // Sockets of the families a run may use, and no other: none but `AF_UNIX` with the
    // network off; in proxy mode also IPv4 and IPv6 (which reach only the namespace's
    // loopback, where the run's egress listener is) — never netlink, packet or any other family,
    // so a flaw elsewhere does not open another way out.
    let families: Option<Vec<u32>> = match network {
        crate::Network::Off => Some(vec![nix::libc::AF_UNIX as u32]),
        crate::Network::Proxy => Some(vec![
            nix::libc::AF_UNIX as u32,
            nix::libc::AF_INET as u32,
            nix::libc::AF_INET6 as u32,
        ]),
        crate::Network::On => None,
    };
    if let Some(values) = families {
        rules.push((nr("socket")?, Check::NotIn { arg: 0, values }));
    }
    Ok(rules)
}

/// The EPERM program (see [`eperm_rules`]).
pub fn eperm_program(network: crate::Network) -> Result<BpfProgram, SeccompError> {
    bpf::compile(
        &eperm_rules(network)?,
        nix::libc::SECCOMP_RET_ERRNO | nix::libc::EPERM as u32,
    )
}

/// The ENOSYS program's rules: `clone3` and `openat2`, whose flags (and mode) live in
/// memory a filter cannot read; libc and programs fall back to `clone` and `openat`.
pub(crate) fn enosys_rules() -> Result<Vec<(i64, Check)>, SeccompError> {
    Ok(vec![
        (nr("clone3")?, Check::Always),
        (nr("openat2")?, Check::Always),
    ])
}

/// The ENOSYS program (see [`enosys_rules`]).
pub fn enosys_program() -> Result<BpfProgram, SeccompError> {
    bpf::compile(
        &enosys_rules()?,
        nix::libc::SECCOMP_RET_ERRNO | nix::libc::ENOSYS as u32,
    )
}
