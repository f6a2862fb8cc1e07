//! The decision table (product spec §5) and the askFallback rule, as pure functions.

use std::fmt;

use serde::Serialize;

use crate::modes::{Ask, AskFallback, Security};
use crate::resolve::ResolvedPolicy;

/// Why a command may run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AllowReason {
    /// `security=full`.
    SecurityFull,
    /// Every segment matched the allowlist.
    AllowlistMatch,
    /// A human allowed it once.
    ApprovedOnce,
    /// A human allowed it always.
    ApprovedAlways,
    /// No approver answered and `askFallback=full`.
    FallbackFull,
    /// No approver answered, `askFallback=allowlist`, and the allowlist is satisfied.
    FallbackAllowlist,
    /// `host=sandbox`: the OS sandbox confines it and the permission mode gates writes.
    Sandboxed,
    /// `host=sandbox` served without an OS sandbox by the operator's explicit,
    /// time-limited direct mode.
    Unconfined,
}

/// Why a human must be asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AskReason {
    /// `ask=always`.
    AskAlways,
    /// The allowlist did not match and `ask=on-miss`.
    AllowlistMiss,
}

/// Why a command is denied (machine-readable).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DenyReason {
    /// `security=deny`.
    SecurityDeny,
    /// The allowlist did not match and nobody is asked.
    AllowlistMiss,
    /// The human said no.
    ApprovalDenied,
    /// No approver was reachable and the fallback denies.
    NoApprover,
    /// The approver did not answer in time and the fallback denies.
    ApprovalTimeout,
    /// The host the command was routed to cannot run it (no sandbox backend, no paired
    /// node, a runner without the sandbox the decision requires).
    HostUnavailable,
}

impl DenyReason {
    /// The reason as written in events and results.
    pub fn as_str(self) -> &'static str {
        match self {
            DenyReason::SecurityDeny => "security=deny",
            DenyReason::AllowlistMiss => "allowlist-miss",
            DenyReason::ApprovalDenied => "approval-denied",
            DenyReason::NoApprover => "no-approver",
            DenyReason::ApprovalTimeout => "approval-timeout",
            DenyReason::HostUnavailable => "host-unavailable",
        }
    }
}

impl fmt::Display for DenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome for one command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "lowercase")]
pub enum Decision {
    /// Run it.
    Allow {
        /// Why.
        reason: AllowReason,
        /// The rule that allowed it (`security=full (agent)`, the matched pattern...).
        rule: String,
    },
    /// Ask a human first.
    Ask {
        /// Why.
        reason: AskReason,
        /// The rule that requires asking.
        rule: String,
    },
    /// Do not run it.
    Deny {
        /// Why.
        reason: DenyReason,
        /// The rule that denied it.
        rule: String,
    },
}

impl Decision {
    /// True for `Allow`.
    pub fn is_allow(&self) -> bool {
        matches!(self, Decision::Allow { .. })
    }
}

/// What the approver said.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApproverAnswer {
    /// Run this once.
    AllowOnce,
    /// Run this and store its patterns.
    AllowAlways,
    /// Do not run.
    Deny,
    /// No approver was reachable (no socket, refused, died mid-prompt).
    NoApprover,
    /// The approver did not answer within the approval timeout.
    Timeout,
}

/// The decision table, before any human is involved. `matched_rule` names the pattern(s)
/// that satisfied the allowlist, when it was satisfied.
pub fn decide(policy: &ResolvedPolicy, allowlist_satisfied: bool, matched_rule: &str) -> Decision {
    let security = &policy.security;
    let ask = &policy.ask;
    if security.value == Security::Deny {
        return Decision::Deny {
            reason: DenyReason::SecurityDeny,
            rule: format!("security=deny ({})", security.source),
        };
    }
    if ask.value == Ask::Always {
        return Decision::Ask {
            reason: AskReason::AskAlways,
            rule: format!("ask=always ({})", ask.source),
        };
    }
    if security.value == Security::Allowlist && !allowlist_satisfied {
        return if ask.value == Ask::OnMiss {
            Decision::Ask {
                reason: AskReason::AllowlistMiss,
                rule: format!(
                    "security=allowlist ({}), ask=on-miss ({})",
                    security.source, ask.source
                ),
            }
        } else {
            Decision::Deny {
                reason: DenyReason::AllowlistMiss,
                rule: format!(
                    "security=allowlist ({}), ask=off ({})",
                    security.source, ask.source
                ),
            }
        };
    }
    if security.value == Security::Full {
        Decision::Allow {
            reason: AllowReason::SecurityFull,
            rule: format!("security=full ({})", security.source),
        }
    } else {
        Decision::Allow {
            reason: AllowReason::AllowlistMatch,
            rule: format!("allowlist: {matched_rule}"),
        }
    }
}

/// The final decision once the approver answered (or did not).
pub fn after_ask(
    policy: &ResolvedPolicy,
    answer: ApproverAnswer,
    allowlist_satisfied: bool,
) -> Decision {
    let fallback = &policy.ask_fallback;
    match answer {
        ApproverAnswer::AllowOnce => Decision::Allow {
            reason: AllowReason::ApprovedOnce,
            rule: "approved once by the approver".into(),
        },
        ApproverAnswer::AllowAlways => Decision::Allow {
            reason: AllowReason::ApprovedAlways,
            rule: "approved always by the approver".into(),
        },
        ApproverAnswer::Deny => Decision::Deny {
            reason: DenyReason::ApprovalDenied,
            rule: "denied by the approver".into(),
        },
        ApproverAnswer::NoApprover | ApproverAnswer::Timeout => {
            let denied = if answer == ApproverAnswer::Timeout {
                DenyReason::ApprovalTimeout
            } else {
                DenyReason::NoApprover
            };
            match fallback.value {
                AskFallback::Full => Decision::Allow {
                    reason: AllowReason::FallbackFull,
                    rule: format!("askFallback=full ({})", fallback.source),
                },
                AskFallback::Allowlist if allowlist_satisfied => Decision::Allow {
                    reason: AllowReason::FallbackAllowlist,
                    rule: format!(
                        "askFallback=allowlist ({}), allowlist satisfied",
                        fallback.source
                    ),
                },
                AskFallback::Allowlist => Decision::Deny {
                    reason: denied,
                    rule: format!(
                        "askFallback=allowlist ({}), allowlist not satisfied",
                        fallback.source
                    ),
                },
                AskFallback::Deny => Decision::Deny {
                    reason: denied,
                    rule: format!("askFallback=deny ({})", fallback.source),
                },
            }
        }
    }
}
