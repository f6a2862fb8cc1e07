//! The seccomp programs applied to every sandboxed command (by bubblewrap, right before
//! it executes the command): dangerous syscalls fail with EPERM, `clone3` with ENOSYS
//! (so libc falls back to `clone`, whose flags a filter can inspect), and — when the
//! network is off — sockets of every family but `AF_UNIX`.
//!
//! Built with seccompiler and serialised as the raw `struct sock_filter` array that
//! bubblewrap's `--add-seccomp-fd` expects.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// `ioctl` requests that push input into a terminal or reconfigure the console.
const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541C;
const CLONE_NEWUSER: u64 = 0x1000_0000;

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

/// The filter could not be built (unknown architecture or syscall).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the seccomp filter: {0}")]
pub struct SeccompError(pub(crate) String);

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

/// The EPERM program: denied syscalls, terminal-injection ioctls (compared on the low 32
/// bits, which is all the kernel looks at), user-namespace creation through `clone` and
/// `unshare`, and non-`AF_UNIX` sockets when `network` is off.
pub fn eperm_program(network: bool) -> Result<BpfProgram, SeccompError> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for name in DENIED_SYSCALLS {
        rules.insert(nr(name)?, Vec::new());
    }
    rules.insert(
        nr("ioctl")?,
        vec![
            rule(vec![cond(
                1,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                TIOCSTI,
            )?])?,
            rule(vec![cond(
                1,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                TIOCLINUX,
            )?])?,
        ],
    );
    let newuser = rule(vec![cond(
        0,
        SeccompCmpArgLen::Qword,
        SeccompCmpOp::MaskedEq(CLONE_NEWUSER),
        CLONE_NEWUSER,
    )?])?;
    rules.insert(nr("clone")?, vec![newuser.clone()]);
    rules.insert(nr("unshare")?, vec![newuser]);
    if !network {
        rules.insert(
            nr("socket")?,
            vec![rule(vec![cond(
                0,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Ne,
                nix::libc::AF_UNIX as u64,
            )?])?],
        );
    }
    compile(rules, SeccompAction::Errno(nix::libc::EPERM as u32))
}

/// The ENOSYS program: `clone3`, whose flags live in memory a filter cannot read.
pub fn enosys_program() -> Result<BpfProgram, SeccompError> {
    let mut rules = BTreeMap::new();
    rules.insert(nr("clone3")?, Vec::new());
    compile(rules, SeccompAction::Errno(nix::libc::ENOSYS as u32))
}

/// The raw bytes of a program (`struct sock_filter` array, native endianness).
pub fn to_bytes(program: &BpfProgram) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for insn in program {
        out.extend_from_slice(&insn.code.to_ne_bytes());
        out.push(insn.jt);
        out.push(insn.jf);
        out.extend_from_slice(&insn.k.to_ne_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_build_for_this_architecture() {
        for network in [false, true] {
            let p = eperm_program(network).unwrap();
            assert!(!p.is_empty());
            assert_eq!(to_bytes(&p).len(), p.len() * 8);
        }
        assert!(!enosys_program().unwrap().is_empty());
        // The network filter adds instructions.
        assert!(eperm_program(false).unwrap().len() > eperm_program(true).unwrap().len());
    }
}
