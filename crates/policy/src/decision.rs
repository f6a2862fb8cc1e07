//! The decision table (product spec §5) and the askFallback rule, as pure functions.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::modes::{Ask, AskFallback, Security};
use crate::resolve::ResolvedPolicy;

/// Defines a reason enum whose serde name and `Display` are one and the same spelling.
macro_rules! reason_enum {
    ($(#[$meta:meta])* $ty:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $ty {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant,)*
        }

        impl $ty {
            /// Every variant, for tests and documentation.
            pub const ALL: &'static [$ty] = &[$($ty::$variant),*];

            /// The reason as written in results, events and JSON.
            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $text),* }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

reason_enum! {
    /// Why a command may run.
    AllowReason {
        /// `security=full`.
        SecurityFull => "security-full",
        /// Every segment matched the allowlist.
        AllowlistMatch => "allowlist-match",
        /// A human allowed it once.
        ApprovedOnce => "approved-once",
        /// A human allowed it always.
        ApprovedAlways => "approved-always",
        /// No approver answered and `askFallback=full`.
        FallbackFull => "fallback-full",
        /// No approver answered, `askFallback=allowlist`, and the allowlist is satisfied.
        FallbackAllowlist => "fallback-allowlist",
        /// `host=sandbox`: the OS sandbox confines it and the permission mode gates writes.
        Sandboxed => "sandboxed",
        /// `host=sandbox` served without an OS sandbox by the operator's explicit,
        /// time-limited direct mode.
        Unconfined => "unconfined",
        /// `host=node`: the gateway sent it to a node, which decides against its own
        /// file (a report says this only until, or unless, the node's decision arrives).
        SentToNode => "sent-to-node",
    }
}

reason_enum! {
    /// Why a human must be asked.
    AskReason {
        /// `ask=always`.
        AskAlways => "ask-always",
        /// The allowlist did not match and `ask=on-miss`.
        AllowlistMiss => "allowlist-miss",
    }
}

reason_enum! {
    /// Why a command is denied (machine-readable; the spellings of product spec §5).
    DenyReason {
        /// `security=deny`.
        SecurityDeny => "security=deny",
        /// The allowlist did not match and nobody is asked.
        AllowlistMiss => "allowlist-miss",
        /// The human said no.
        ApprovalDenied => "approval-denied",
        /// No approver was reachable and the fallback denies.
        NoApprover => "no-approver",
        /// The approver did not answer in time and the fallback denies.
        ApprovalTimeout => "approval-timeout",
        /// A write permission (a sandboxed command's writable retry, a file tool's write)
        /// was not granted.
        Rejected => "rejected",
        /// `host=sandbox`, but no sandbox backend can serve it.
        SandboxUnavailable => "sandbox-unavailable",
        /// `host=node`, but no node can serve it.
        NoNode => "no-node",
        /// The runner the command reached cannot run it (a runner without the sandbox the
        /// decision requires).
        HostUnavailable => "host-unavailable",
        /// The agent already has as many runs in progress as it may (nothing was asked or
        /// run).
        RunLimit => "run-limit",
        /// `audit.required`, and the request could not be put on the record (nothing was
        /// asked or run).
        AuditUnavailable => "audit-unavailable",
    }
}

impl DenyReason {
    /// True when a human had to be asked and nobody answered (the fallback denied): the
    /// caller may start an approver and try again.
    pub fn is_unanswered(self) -> bool {
        matches!(self, DenyReason::NoApprover | DenyReason::ApprovalTimeout)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_one_spelling_in_json_and_text() {
        fn check<
            T: Serialize + fmt::Display + for<'de> Deserialize<'de> + PartialEq + fmt::Debug,
        >(
            all: &[T],
        ) {
            for r in all {
                let json = serde_json::to_value(r).unwrap();
                assert_eq!(json.as_str().unwrap(), r.to_string(), "{r:?}");
                let back: T = serde_json::from_value(json).unwrap();
                assert_eq!(&back, r);
            }
        }
        check(AllowReason::ALL);
        check(AskReason::ALL);
        check(DenyReason::ALL);
        assert_eq!(DenyReason::SecurityDeny.to_string(), "security=deny");
    }
}
