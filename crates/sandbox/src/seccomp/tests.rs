//! The seccomp programs' tests: each answers as seccompiler's program for the same rules,
//! over generated calls, and the merged program as the separate ones installed apart.

use super::*;
use crate::bpf::{JA as JMP_JA, RET_A, RET_K};
use nix::libc::sock_filter;
use proptest::prelude::*;

/// A classic BPF interpreter for seccomp programs (the instructions seccompiler
/// writes): the answer for syscall `nr` with `args` on this architecture.
fn run(program: &[sock_filter], nr: i64, args: [u64; 6]) -> u32 {
    run_on(program, audit_arch(), nr, args)
}

/// [`run`] for a call made as architecture `arch`.
fn run_on(program: &[sock_filter], arch: u32, nr: i64, args: [u64; 6]) -> u32 {
    let mut data = Vec::new();
    data.extend_from_slice(&(nr as i32).to_ne_bytes());
    data.extend_from_slice(&arch.to_ne_bytes());
    data.extend_from_slice(&0u64.to_ne_bytes());
    for a in args {
        data.extend_from_slice(&a.to_ne_bytes());
    }
    let (mut a, mut pc) = (0u32, 0usize);
    loop {
        let i = program[pc];
        pc += 1;
        match i.code {
            // LD W ABS
            0x20 => {
                let k = i.k as usize;
                a = u32::from_ne_bytes([data[k], data[k + 1], data[k + 2], data[k + 3]]);
            }
            // ALU AND K
            0x54 => a &= i.k,
            JMP_JA => pc += i.k as usize,
            // JEQ, JGT, JGE, JSET (K)
            0x15 | 0x25 | 0x35 | 0x45 => {
                let taken = match i.code {
                    0x15 => a == i.k,
                    0x25 => a > i.k,
                    0x35 => a >= i.k,
                    _ => a & i.k != 0,
                };
                pc += if taken { i.jt } else { i.jf } as usize;
            }
            RET_K => return i.k,
            other => panic!("instruction {other:#x} not interpreted"),
        }
    }
}

fn audit_arch() -> u32 {
    crate::bpf::audit_arch().unwrap()
}

/// What the kernel answers with `programs` installed in that order: every filter
/// runs, the most severe action wins, and the latest filter's among equals.
fn kernel(programs: &[Vec<sock_filter>], nr: i64, args: [u64; 6]) -> u32 {
    let mut answer = nix::libc::SECCOMP_RET_ALLOW;
    for p in programs.iter().rev() {
        let this = run(p, nr, args);
        let action = |r: u32| (r & 0xffff_0000) as i32;
        if action(this) < action(answer) {
            answer = this;
        }
    }
    answer
}

/// The programs in the order Warden's builder installs them: the watch's
/// notifications first (see `builder::command`), then the error programs.
fn sandbox_programs(network: crate::Network, watched: bool) -> Vec<Vec<sock_filter>> {
    let mut programs = Vec::new();
    if watched {
        programs.push(to_raw(&crate::watch::program().unwrap()));
    }
    programs.push(to_raw(&eperm_program(network).unwrap()));
    programs.push(to_raw(&enosys_program().unwrap()));
    programs
}

/// Argument values that the programs' conditions look at, and others.
fn interesting() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(nix::libc::AF_UNIX as u64),
        Just(nix::libc::AF_INET as u64),
        Just(nix::libc::AF_INET6 as u64),
        Just(nix::libc::AF_NETLINK as u64),
        Just(nix::libc::AF_PACKET as u64),
        Just(TIOCSTI),
        Just(TIOCLINUX),
        Just(CLONE_NEWUSER),
        Just(nix::libc::O_WRONLY as u64),
        Just(nix::libc::O_RDWR as u64),
        Just((nix::libc::O_CREAT | nix::libc::O_CLOEXEC) as u64),
        Just(nix::libc::O_TRUNC as u64),
        Just(0o4755),
        Just(0o2755),
        Just(0o0755),
        Just(0o20_200_000),
        any::<u64>(),
    ]
}

/// Each bit set in `mask`, as a mask of its own.
fn bits(mask: u32) -> impl Iterator<Item = u64> {
    (0..32)
        .map(|i| 1u64 << i)
        .filter(move |b| u64::from(mask) & b != 0)
}

/// seccompiler's compilation of `rules` with `action` — how these programs were built
/// before `bpf.rs`, and what the compact programs are checked against. seccompiler
/// has no user-notification action: the program is compiled with a `TRACE` sentinel
/// as its match action, and exactly those returns are rewritten to `action`.
fn reference(rules: &[(i64, Check)], action: u32) -> Vec<sock_filter> {
    const SENTINEL: u32 = 0x5741;
    let dword = || SeccompCmpArgLen::Dword;
    let mut map: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (nr, check) in rules {
        let one =
            |arg: u8, len, op, value: u64| rule(vec![cond(arg, len, op, value).unwrap()]).unwrap();
        let conditions = match check {
            Check::Always => Vec::new(),
            Check::In { arg, values } => values
                .iter()
                .map(|v| one(*arg, dword(), SeccompCmpOp::Eq, u64::from(*v)))
                .collect(),
            // None of them: one rule whose conditions (ANDed) each say "not this one".
            Check::NotIn { arg, values } => vec![
                rule(
                    values
                        .iter()
                        .map(|v| cond(*arg, dword(), SeccompCmpOp::Ne, u64::from(*v)).unwrap())
                        .collect(),
                )
                .unwrap(),
            ],
            // Any of several bits: one rule per bit (seccompiler's rules are ORed,
            // the conditions of one rule ANDed).
            Check::AnyBit { arg, mask } => bits(*mask)
                .map(|m| one(*arg, dword(), SeccompCmpOp::MaskedEq(m), m))
                .collect(),
            Check::AnyBitBoth {
                first: (first, first_mask),
                second: (second, second_mask),
            } => bits(*first_mask)
                .flat_map(|a| bits(*second_mask).map(move |b| (a, b)))
                .map(|(a, b)| {
                    rule(vec![
                        cond(*first, dword(), SeccompCmpOp::MaskedEq(a), a).unwrap(),
                        cond(*second, dword(), SeccompCmpOp::MaskedEq(b), b).unwrap(),
                    ])
                    .unwrap()
                })
                .collect(),
            Check::OpenWrites { arg } => {
                let masked = |mask: i32, value: i32| {
                    one(
                        *arg,
                        dword(),
                        SeccompCmpOp::MaskedEq(mask as u64),
                        value as u64,
                    )
                };
                use nix::libc::{O_ACCMODE, O_CREAT, O_RDWR, O_TRUNC, O_WRONLY};
                vec![
                    masked(O_ACCMODE, O_WRONLY),
                    masked(O_ACCMODE, O_RDWR),
                    masked(O_CREAT, O_CREAT),
                    masked(O_TRUNC, O_TRUNC),
                ]
            }
        };
        map.insert(*nr, conditions);
    }
    let mut program = to_raw(&compile(map, SeccompAction::Trace(SENTINEL)).unwrap());
    for i in &mut program {
        if i.code == RET_K && i.k == 0x7ff0_0000 | SENTINEL {
            i.k = action;
        }
    }
    program
}

/// Every program the sandbox installs: its compact form and seccompiler's.
fn both_forms() -> Vec<(&'static str, Vec<sock_filter>, Vec<sock_filter>)> {
    use nix::libc;
    let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    vec![
        (
            "eperm, proxy",
            to_raw(&eperm_program(crate::Network::Proxy).unwrap()),
            reference(&eperm_rules(crate::Network::Proxy).unwrap(), eperm),
        ),
        (
            "eperm, no network",
            to_raw(&eperm_program(crate::Network::Off).unwrap()),
            reference(&eperm_rules(crate::Network::Off).unwrap(), eperm),
        ),
        (
            "eperm, network",
            to_raw(&eperm_program(crate::Network::On).unwrap()),
            reference(&eperm_rules(crate::Network::On).unwrap(), eperm),
        ),
        (
            "enosys",
            to_raw(&enosys_program().unwrap()),
            reference(&enosys_rules().unwrap(), enosys),
        ),
        (
            "watch",
            to_raw(&crate::watch::program().unwrap()),
            reference(&crate::watch::calls::rules(), libc::SECCOMP_RET_USER_NOTIF),
        ),
    ]
}

#[test]
fn the_compact_programs_are_much_shorter_and_kill_other_architectures() {
    for (what, compact, reference) in both_forms() {
        assert!(
            compact.len() <= reference.len(),
            "{what}: {} against {}",
            compact.len(),
            reference.len()
        );
        // i386 (the same machine's 32-bit calls) gets no answer but death, as before.
        assert_eq!(
            run_on(&compact, 0x4000_0003, nix::libc::SYS_getpid, [0; 6]),
            nix::libc::SECCOMP_RET_KILL_PROCESS,
            "{what}"
        );
    }
    let total: usize = both_forms().iter().map(|(_, c, _)| c.len()).sum();
    let before: usize = both_forms().iter().map(|(_, _, r)| r.len()).sum();
    assert!(total * 2 < before, "{total} instructions against {before}");
}

#[test]
#[cfg(target_arch = "x86_64")]
fn x32_calls_are_killed_by_every_program_and_the_merged_one() {
    // The x32 ABI shares x86-64's architecture value and numbers its calls with
    // `__X32_SYSCALL_BIT` set: where the kernel has it, x32's `unshare` or `open` must
    // not slip past the rules for x86-64's (seccompiler's programs let them through).
    let mut programs: Vec<(&str, Vec<sock_filter>)> = both_forms()
        .into_iter()
        .map(|(what, compact, _)| (what, compact))
        .collect();
    let installed = vec![
        to_raw(&eperm_program(crate::Network::Off).unwrap()),
        to_raw(&enosys_program().unwrap()),
        to_raw(&crate::watch::program().unwrap()),
    ];
    programs.push(("merged", merge(&installed).unwrap()));
    let listed: Vec<i64> = eperm_rules(crate::Network::Off)
        .unwrap()
        .into_iter()
        .chain(enosys_rules().unwrap())
        .chain(crate::watch::calls::rules())
        .map(|(nr, _)| nr)
        .collect();
    for (what, program) in &programs {
        for nr in listed
            .iter()
            .copied()
            .chain([nix::libc::SYS_getpid, 0, 511])
        {
            for args in [[0u64; 6], [CLONE_NEWUSER, 1, 1, 0, 0, 0], [u64::MAX; 6]] {
                let x32 = nr | i64::from(crate::bpf::X32_SYSCALL_BIT);
                assert_eq!(
                    run(program, x32, args),
                    nix::libc::SECCOMP_RET_KILL_PROCESS,
                    "{what}: x32 call {x32:#x} {args:?}"
                );
            }
        }
    }
}

/// The values [`interesting`] draws from, without the random one.
const VALUES: &[u64] = &[
    0,
    nix::libc::AF_UNIX as u64,
    nix::libc::AF_INET as u64,
    TIOCSTI,
    TIOCLINUX,
    CLONE_NEWUSER,
    nix::libc::O_WRONLY as u64,
    nix::libc::O_RDWR as u64,
    (nix::libc::O_CREAT | nix::libc::O_CLOEXEC) as u64,
    nix::libc::O_TRUNC as u64,
    0o4755,
    0o2755,
    0o0755,
    0o20_200_002,
    3,
    0xffff_ffff_0000_0000,
    u64::MAX,
];

#[test]
fn on_every_syscall_each_argument_the_programs_look_at_gets_the_same_answer() {
    for (what, compact, reference) in both_forms() {
        for nr in 0..460 {
            for position in 0..6 {
                for value in VALUES {
                    let mut args = [0u64; 6];
                    args[position] = *value;
                    assert_eq!(
                        run(&compact, nr, args),
                        run(&reference, nr, args),
                        "{what}: syscall {nr}, args {args:?}"
                    );
                }
            }
        }
    }
}

proptest! {
    #[test]
    fn the_compact_programs_answer_as_seccompiler_compiled_them(
        nr in 0i64..460,
        args in proptest::array::uniform6(interesting()),
    ) {
        for (what, compact, reference) in both_forms() {
            prop_assert_eq!(run(&compact, nr, args), run(&reference, nr, args), "{}", what);
        }
    }

    #[test]
    fn the_merged_program_answers_as_the_installed_ones_would(
        nr in 0i64..460,
        args in proptest::array::uniform6(interesting()),
        network in prop_oneof![
            Just(crate::Network::Off),
            Just(crate::Network::On),
            Just(crate::Network::Proxy),
        ],
        watched: bool,
    ) {
        let programs = sandbox_programs(network, watched);
        let merged = merge(&programs).unwrap();
        prop_assert_eq!(run(&merged, nr, args), kernel(&programs, nr, args));
    }
}

#[test]
fn the_merge_keeps_every_deny_and_notification() {
    use nix::libc;
    let programs = sandbox_programs(crate::Network::Off, true);
    let merged = merge(&programs).unwrap();
    let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
    assert_eq!(run(&merged, libc::SYS_mount, [0; 6]), eperm);
    assert_eq!(run(&merged, libc::SYS_clone3, [0; 6]), enosys);
    let inet = [libc::AF_INET as u64, 0, 0, 0, 0, 0];
    assert_eq!(run(&merged, libc::SYS_socket, inet), eperm);
    let write_open = [0, 0, libc::O_WRONLY as u64, 0, 0, 0];
    assert_eq!(
        run(&merged, libc::SYS_openat, write_open),
        libc::SECCOMP_RET_USER_NOTIF
    );
    assert_eq!(
        run(&merged, libc::SYS_getpid, [0; 6]),
        libc::SECCOMP_RET_ALLOW
    );
    // Set-id bits, through a create or a mode change; the same calls without them go
    // on (to the watch, which notifies for a write).
    let creat = libc::O_CREAT as u64 | libc::O_WRONLY as u64;
    for (nr, args) in [
        (libc::SYS_openat, [0, 0, creat, 0o4755, 0, 0]),
        (libc::SYS_openat, [0, 0, 0o20_200_002, 0o2700, 0, 0]),
        (libc::SYS_fchmodat, [0, 0, 0o4755, 0, 0, 0]),
        (libc::SYS_fchmod, [3, 0o2755, 0, 0, 0, 0]),
        (SYS_FCHMODAT2, [0, 0, 0o6755, 0, 0, 0]),
        (libc::SYS_mknodat, [0, 0, 0o104_755, 0, 0, 0]),
    ] {
        assert_eq!(run(&merged, nr, args), eperm, "{nr} {args:?}");
        let mut plain = args;
        for a in plain.iter_mut().skip(1) {
            *a &= !0o6000;
        }
        assert_ne!(run(&merged, nr, plain), eperm, "{nr} {plain:?}");
    }
    // A read-only open whose mode argument happens to hold the bits creates nothing.
    let read = [0, 0, libc::O_RDONLY as u64, 0o4755, 0, 0];
    assert_eq!(
        run(&merged, libc::SYS_openat, read),
        libc::SECCOMP_RET_ALLOW
    );
    assert_eq!(run(&merged, libc::SYS_openat2, [0; 6]), enosys);
    // A program that answers with its accumulator cannot be merged.
    let odd = vec![sock_filter {
        code: RET_A,
        jt: 0,
        jf: 0,
        k: 0,
    }];
    assert!(merge(&[odd]).is_err());
    assert!(merge(&[]).is_err());
}

#[test]
fn each_network_mode_allows_exactly_its_socket_families() {
    use nix::libc;
    let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let families = [
        libc::AF_UNIX,
        libc::AF_INET,
        libc::AF_INET6,
        libc::AF_NETLINK,
        libc::AF_PACKET,
        libc::AF_VSOCK,
    ];
    for (network, allowed) in [
        (crate::Network::Off, &[libc::AF_UNIX][..]),
        (
            crate::Network::Proxy,
            &[libc::AF_UNIX, libc::AF_INET, libc::AF_INET6][..],
        ),
        (crate::Network::On, &families[..]),
    ] {
        let program = to_raw(&eperm_program(network).unwrap());
        for family in families {
            let answer = run(&program, libc::SYS_socket, [family as u64, 1, 0, 0, 0, 0]);
            let expected = if allowed.contains(&family) {
                libc::SECCOMP_RET_ALLOW
            } else {
                eperm
            };
            assert_eq!(answer, expected, "{network:?}: family {family}");
        }
    }
}

#[test]
fn programs_build_for_this_architecture() {
    for network in [
        crate::Network::Off,
        crate::Network::On,
        crate::Network::Proxy,
    ] {
        let p = eperm_program(network).unwrap();
        assert!(!p.is_empty());
        assert_eq!(to_bytes(&p).len(), p.len() * 8);
    }
    assert!(!enosys_program().unwrap().is_empty());
    // The network filter adds instructions.
    assert!(
        eperm_program(crate::Network::Off).unwrap().len()
            > eperm_program(crate::Network::On).unwrap().len()
    );
}
