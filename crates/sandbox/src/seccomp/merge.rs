//! Several seccomp programs as one install ([`merge`]), and a program in the kernel's
//! `struct sock_filter` form ([`to_raw`], [`to_bytes`] for bubblewrap's `--add-seccomp-fd`).

use seccompiler::BpfProgram;

use crate::bpf::{JA as JMP_JA, MAX_INSNS, RET_A, RET_K, SeccompError};

/// One program that decides as `programs` installed one after another would, in a single
/// install — installing a filter costs tens of microseconds before its first
/// instruction runs, each time. `programs` are in the order they would be installed; the
/// kernel runs every installed filter (the latest first) and takes the most severe
/// answer, the latest filter's among equally severe ones. Concatenated latest first,
/// with each `RET ALLOW` but the last turned into a jump to the next program, the first
/// answer other than "allow" is taken — the same answer, as long as no later program
/// could give a more severe one for the same call: the caller orders them so (a
/// notification program installed before the error programs, which then run first).
/// A program that returns its accumulator is refused (its answer
/// is not known here).
pub fn merge(
    programs: &[Vec<nix::libc::sock_filter>],
) -> Result<Vec<nix::libc::sock_filter>, SeccompError> {
    let mut merged = Vec::new();
    let last = programs.len().saturating_sub(1);
    for (n, program) in programs.iter().rev().enumerate() {
        for (i, insn) in program.iter().enumerate() {
            if insn.code == RET_A {
                return Err(SeccompError("a program returns its accumulator".into()));
            }
            let mut insn = *insn;
            if n < last && insn.code == RET_K && insn.k == nix::libc::SECCOMP_RET_ALLOW {
                insn = nix::libc::sock_filter {
                    code: JMP_JA,
                    jt: 0,
                    jf: 0,
                    k: (program.len() - i - 1) as u32,
                };
            }
            merged.push(insn);
        }
    }
    if merged.is_empty() || merged.len() > MAX_INSNS {
        return Err(SeccompError(format!(
            "the merged program has {} instructions",
            merged.len()
        )));
    }
    Ok(merged)
}

/// A seccompiler program as the kernel's `struct sock_filter` array.
pub fn to_raw(program: &BpfProgram) -> Vec<nix::libc::sock_filter> {
    program
        .iter()
        .map(|i| nix::libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect()
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
