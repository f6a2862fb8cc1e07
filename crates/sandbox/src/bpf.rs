//! Compact seccomp programs: the sandbox's rule tables compiled to classic BPF with as
//! few instructions as the rules need. A filter's install costs the kernel time in
//! proportion to its length (it is translated and JIT-compiled each time, here ~0.5 µs an
//! instruction on top of a fixed ~40 µs), and every system call of the command runs it:
//! seccompiler writes each argument condition as a chain of its own (the write watch's
//! open-flag test alone is ~30 instructions per syscall), where one load and a mask or two
//! do. The rule tables stay the source of truth; the tests check, on every syscall number
//! and generated arguments, that these programs answer exactly as seccompiler's compilation
//! of the same rules does (`seccomp::tests`).
//!
//! Layout: the architecture check (any other architecture is killed, as seccompiler
//! does); on x86-64 the x32 ABI's calls killed too — they carry the same architecture
//! value and their own numbers (`__X32_SYSCALL_BIT` set), so a rule for `unshare` would
//! not see x32's `unshare` where the kernel has that ABI (seccompiler's programs let
//! them through); one `JEQ` per listed syscall to its check, `ALLOW`, the checks, and one
//! return of the rule's action. Arguments are compared on their low 32 bits, as the rules
//! ask.

use seccompiler::{BpfProgram, sock_filter};

/// The filter could not be built (unknown architecture or syscall, or a program this
/// layout cannot hold).
#[derive(Debug, thiserror::Error)]
#[error("cannot build the seccomp filter: {0}")]
pub struct SeccompError(pub(crate) String);

/// What makes a listed syscall get the program's action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    /// Every call.
    Always,
    /// The argument's low 32 bits are one of these.
    In { arg: u8, values: Vec<u32> },
    /// The argument's low 32 bits are none of these.
    NotIn { arg: u8, values: Vec<u32> },
    /// The argument has any of these bits set (in its low 32 bits).
    AnyBit { arg: u8, mask: u32 },
    /// Both arguments have any of their bits set: `first.0` any of `first.1`, and
    /// `second.0` any of `second.1` (an `open` that creates, with a set-id mode).
    AnyBitBoth { first: (u8, u32), second: (u8, u32) },
    /// The argument holds `open(2)` flags that ask for a write: access mode `O_WRONLY`
    /// or `O_RDWR`, or `O_CREAT`, or `O_TRUNC`.
    OpenWrites { arg: u8 },
}

/// Classic BPF opcodes (`linux/filter.h`): `BPF_LD|BPF_W|BPF_ABS`, `BPF_ALU|BPF_AND|BPF_K`,
/// `BPF_JMP|BPF_JEQ|BPF_K`, `BPF_JMP|BPF_JSET|BPF_K`, `BPF_JMP|BPF_JA`, `BPF_RET|BPF_K`,
/// `BPF_RET|BPF_A` (shared with `seccomp::merge`).
const LD_ABS: u16 = 0x20;
const AND_K: u16 = 0x54;
const JEQ_K: u16 = 0x15;
const JSET_K: u16 = 0x45;
const JGE_K: u16 = 0x35;
pub(crate) const JA: u16 = 0x05;
pub(crate) const RET_K: u16 = 0x06;
pub(crate) const RET_A: u16 = 0x16;
/// The kernel's limit on one program's length (`BPF_MAXINSNS`).
pub(crate) const MAX_INSNS: usize = 4096;

/// The x32 ABI's mark on its syscall numbers (`__X32_SYSCALL_BIT`).
pub(crate) const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// `seccomp_data` offsets: the syscall number, the architecture, an argument's low word
/// (little-endian: first).
const NR: u32 = 0;
const ARCH: u32 = 4;

fn arg_low(arg: u8) -> u32 {
    16 + 8 * u32::from(arg)
}

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// This architecture's `AUDIT_ARCH_*` value.
pub(crate) fn audit_arch() -> Result<u32, SeccompError> {
    match std::env::consts::ARCH {
        "x86_64" => Ok(0xc000_003e),
        "aarch64" => Ok(0xc000_00b7),
        "riscv64" => Ok(0xc000_00f3),
        other => Err(SeccompError(format!("no seccomp programs for {other}"))),
    }
}

/// Where a jump goes, resolved once the program is laid out.
enum Target {
    Allow,
    Action,
    Check(usize),
}

/// A jump's branch (true, else false) and where it goes.
type Branch = Option<(bool, Target)>;

/// One instruction of a check, with its branches to resolve.
type CheckInsn = (sock_filter, Branch, Branch);

/// Compile `rules` (one per syscall number) to a program that returns `action` where a
/// rule's check holds and `SECCOMP_RET_ALLOW` everywhere else.
pub(crate) fn compile(rules: &[(i64, Check)], action: u32) -> Result<BpfProgram, SeccompError> {
    let mut seen = std::collections::BTreeSet::new();
    if let Some((nr, _)) = rules.iter().find(|(nr, _)| !seen.insert(*nr)) {
        return Err(SeccompError(format!("syscall {nr} is listed twice")));
    }
    let mut out = vec![
        insn(LD_ABS, 0, 0, ARCH),
        insn(JEQ_K, 1, 0, audit_arch()?),
        insn(RET_K, 0, 0, nix::libc::SECCOMP_RET_KILL_PROCESS),
        insn(LD_ABS, 0, 0, NR),
    ];
    if std::env::consts::ARCH == "x86_64" {
        out.push(insn(JGE_K, 0, 1, X32_SYSCALL_BIT));
        out.push(insn(RET_K, 0, 0, nix::libc::SECCOMP_RET_KILL_PROCESS));
    }
    // (instruction, true branch?, target) for every jump, fixed up at the end.
    let mut jumps: Vec<(usize, bool, Target)> = Vec::new();
    let mut checks: Vec<Body> = Vec::new();
    for (nr, check) in rules {
        let nr = u32::try_from(*nr).map_err(|_| SeccompError(format!("syscall {nr}")))?;
        let i = out.len();
        out.push(insn(JEQ_K, 0, 0, nr));
        match check {
            Check::Always => jumps.push((i, true, Target::Action)),
            other => {
                jumps.push((i, true, Target::Check(checks.len())));
                checks.push(check_body(other));
            }
        }
    }
    out.push(insn(RET_K, 0, 0, nix::libc::SECCOMP_RET_ALLOW));
    let mut starts = Vec::new();
    for body in checks {
        starts.push(out.len());
        for (ins, t, f) in body {
            let i = out.len();
            out.push(ins);
            for (branch, target) in [t, f].into_iter().flatten() {
                jumps.push((i, branch, target));
            }
        }
    }
    let action_at = out.len();
    out.push(insn(RET_K, 0, 0, action));
    let allow_at = out.len();
    out.push(insn(RET_K, 0, 0, nix::libc::SECCOMP_RET_ALLOW));
    for (i, branch, target) in jumps {
        let to = match target {
            Target::Allow => allow_at,
            Target::Action => action_at,
            Target::Check(n) => starts[n],
        };
        let offset = u8::try_from(to - i - 1)
            .map_err(|_| SeccompError("a jump is too long for the program's layout".into()))?;
        if out[i].code == JA {
            out[i].k = u32::from(offset);
        } else if branch {
            out[i].jt = offset;
        } else {
            out[i].jf = offset;
        }
    }
    if out.len() > MAX_INSNS {
        return Err(SeccompError("the program is too long".into()));
    }
    Ok(out)
}

/// The instructions of one check, with where each one's branches go (`None`: to the next
/// instruction).
type Body = Vec<CheckInsn>;

fn check_body(check: &Check) -> Body {
    let plain = |code, k| (insn(code, 0, 0, k), None, None);
    match check {
        Check::Always => Vec::new(),
        Check::In { arg, values } => {
            let mut body = vec![plain(LD_ABS, arg_low(*arg))];
            for v in values {
                body.push((insn(JEQ_K, 0, 0, *v), Some((true, Target::Action)), None));
            }
            body.push((insn(JA, 0, 0, 0), Some((true, Target::Allow)), None));
            body
        }
        Check::NotIn { arg, values } => {
            let mut body = vec![plain(LD_ABS, arg_low(*arg))];
            for v in values {
                body.push((insn(JEQ_K, 0, 0, *v), Some((true, Target::Allow)), None));
            }
            body.push((insn(JA, 0, 0, 0), Some((true, Target::Action)), None));
            body
        }
        Check::AnyBit { arg, mask } => vec![
            plain(LD_ABS, arg_low(*arg)),
            (
                insn(JSET_K, 0, 0, *mask),
                Some((true, Target::Action)),
                Some((false, Target::Allow)),
            ),
        ],
        Check::AnyBitBoth {
            first: (first, first_mask),
            second: (second, second_mask),
        } => vec![
            plain(LD_ABS, arg_low(*first)),
            (
                insn(JSET_K, 0, 0, *first_mask),
                None,
                Some((false, Target::Allow)),
            ),
            plain(LD_ABS, arg_low(*second)),
            (
                insn(JSET_K, 0, 0, *second_mask),
                Some((true, Target::Action)),
                Some((false, Target::Allow)),
            ),
        ],
        Check::OpenWrites { arg } => {
            let mode = nix::libc::O_ACCMODE as u32;
            let wronly = nix::libc::O_WRONLY as u32;
            let rdwr = nix::libc::O_RDWR as u32;
            let creat_trunc = (nix::libc::O_CREAT | nix::libc::O_TRUNC) as u32;
            vec![
                plain(LD_ABS, arg_low(*arg)),
                plain(AND_K, mode),
                (
                    insn(JEQ_K, 0, 0, wronly),
                    Some((true, Target::Action)),
                    None,
                ),
                (insn(JEQ_K, 0, 0, rdwr), Some((true, Target::Action)), None),
                plain(LD_ABS, arg_low(*arg)),
                (
                    insn(JSET_K, 0, 0, creat_trunc),
                    Some((true, Target::Action)),
                    Some((false, Target::Allow)),
                ),
            ]
        }
    }
}
