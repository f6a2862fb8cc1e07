//! The decision table of product spec §5 as data: every combination of security × ask ×
//! allowlist hit/miss × approver answer × askFallback, checked through the same
//! functions `explain` and the runner use, against an independent restatement.

// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;

use caps::MemoryFs;
use policy::{
    Allowlist, ApproverAnswer, Ask, AskFallback, CaseMode, CommandInput, Config, Decision,
    DenyReason, ExecParams, Host, HostCeiling, Security, after_ask, decide,
};
use support::{Setup, explain_request};

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Run,
    Deny(DenyReason),
}

/// Product spec §5, restated independently of the implementation.
fn oracle(
    sec: Security,
    ask: Ask,
    hit: bool,
    answer: ApproverAnswer,
    fallback: AskFallback,
) -> Outcome {
    if sec == Security::Deny {
        return Outcome::Deny(DenyReason::SecurityDeny);
    }
    let must_ask = ask == Ask::Always || (sec == Security::Allowlist && !hit && ask == Ask::OnMiss);
    if !must_ask {
        return if sec == Security::Allowlist && !hit {
            Outcome::Deny(DenyReason::AllowlistMiss)
        } else {
            Outcome::Run
        };
    }
    let absent = match answer {
        ApproverAnswer::AllowOnce | ApproverAnswer::AllowAlways => return Outcome::Run,
        ApproverAnswer::Deny => return Outcome::Deny(DenyReason::ApprovalDenied),
        ApproverAnswer::NoApprover => DenyReason::NoApprover,
        ApproverAnswer::Timeout => DenyReason::ApprovalTimeout,
    };
    match fallback {
        AskFallback::Full => Outcome::Run,
        AskFallback::Allowlist if hit => Outcome::Run,
        _ => Outcome::Deny(absent),
    }
}

/// A world where `/usr/bin/hit` is allowlisted and `/usr/bin/miss` is not.
fn world() -> std::sync::Arc<MemoryFs> {
    caps::testkit::MemoryWorld::new(1000)
        .programs(&["/usr/bin/hit", "/usr/bin/miss"])
        .build()
}

#[test]
fn every_combination_matches_the_table() {
    let fs = world();
    let allowlist = Allowlist::compile(
        &["/usr/bin/hit".into()],
        Path::new("/home/u"),
        CaseMode::Sensitive,
    );
    let config = Config::default();
    let mut checked = 0;
    for sec in [Security::Deny, Security::Allowlist, Security::Full] {
        for ask in [Ask::Off, Ask::OnMiss, Ask::Always] {
            for hit in [true, false] {
                for fallback in [AskFallback::Deny, AskFallback::Allowlist, AskFallback::Full] {
                    for answer in [
                        ApproverAnswer::AllowOnce,
                        ApproverAnswer::AllowAlways,
                        ApproverAnswer::Deny,
                        ApproverAnswer::NoApprover,
                        ApproverAnswer::Timeout,
                    ] {
                        // The host file allows everything; the request sets the modes.
                        let ceiling = HostCeiling {
                            security: Security::Full,
                            ask: Ask::Off,
                            ask_fallback: fallback,
                        };
                        // The table governs the gateway (and node) hosts.
                        let params = ExecParams {
                            host: Some(Host::Gateway),
                            security: Some(sec),
                            ask: Some(ask),
                            ..Default::default()
                        };
                        let setup = Setup {
                            fs: &fs,
                            allowlist: &allowlist,
                            cwd: "/",
                            config: &config,
                            ceiling: &ceiling,
                        };
                        let cmd = if hit { "hit --flag" } else { "miss --flag" };
                        let explained = explain_request(&setup, &params, CommandInput::Shell(cmd));
                        assert_eq!(explained.evaluation.satisfied, hit);
                        let first = decide(&explained.policy, hit, "");
                        assert_eq!(
                            std::mem::discriminant(&first),
                            std::mem::discriminant(&explained.decision),
                            "explain and decide disagree"
                        );
                        let last = match first {
                            Decision::Ask { .. } => after_ask(&explained.policy, answer, hit),
                            other => other,
                        };
                        let got = match last {
                            Decision::Allow { .. } => Outcome::Run,
                            Decision::Deny { reason, ref rule } => {
                                assert!(!rule.is_empty(), "a denial names its rule");
                                Outcome::Deny(reason)
                            }
                            Decision::Ask { .. } => panic!("asked twice"),
                        };
                        assert_eq!(
                            got,
                            oracle(sec, ask, hit, answer, fallback),
                            "{sec:?} {ask:?} hit={hit} {answer:?} fallback={fallback:?}"
                        );
                        checked += 1;
                    }
                }
            }
        }
    }
    assert_eq!(checked, 3 * 3 * 2 * 3 * 5);
}

#[test]
fn denials_name_the_rule_and_its_source() {
    let fs = world();
    let setup = Setup {
        fs: &fs,
        allowlist: &Allowlist::default(),
        cwd: "/",
        config: &Config::default(),
        ceiling: &HostCeiling::DENY_ALL,
    };
    let params = ExecParams {
        host: Some(Host::Gateway),
        security: Some(Security::Full),
        ..Default::default()
    };
    let e = explain_request(&setup, &params, CommandInput::Shell("hit"));
    match e.decision {
        Decision::Deny { reason, rule } => {
            assert_eq!(reason, DenyReason::SecurityDeny);
            assert_eq!(rule, "security=deny (host file)");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn on_the_sandbox_host_the_sandbox_decides_not_the_allowlist() {
    let fs = world();
    let config = Config::parse(
        "[sandbox]\npermission_mode = \"readonly\"\n",
        Path::new("config.toml"),
    )
    .unwrap();
    let setup = Setup {
        fs: &fs,
        allowlist: &Allowlist::default(),
        cwd: "/",
        config: &config,
        ceiling: &HostCeiling::DENY_ALL,
    };
    let e = explain_request(
        &setup,
        &ExecParams::default(),
        CommandInput::Shell("miss --flag"),
    );
    match e.decision {
        Decision::Allow { reason, rule } => {
            assert_eq!(reason, policy::AllowReason::Sandboxed);
            assert_eq!(rule, "host=sandbox, permission_mode=readonly (global)");
        }
        other => panic!("{other:?}"),
    }
    assert!(e.allow_always.is_none());
}
