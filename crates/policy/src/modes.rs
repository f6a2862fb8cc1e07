//! The policy vocabulary: hosts, security modes, ask modes, fallbacks, and the
//! "stricter of two" order every ceiling uses.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where a command runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Host {
    /// The OS sandbox on the gateway machine.
    Sandbox,
    /// The gateway machine directly.
    Gateway,
    /// A paired node reached over the Bridge.
    Node,
}

/// Which commands may run. Ordered from strictest: `Deny < Allowlist < Full`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Security {
    /// Nothing runs.
    Deny,
    /// Only commands that satisfy the allowlist run.
    Allowlist,
    /// Everything runs ("elevated").
    Full,
}

/// When a human is asked. Ordered from least asking: `Off < OnMiss < Always`; more asking
/// is stricter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ask {
    /// Never ask.
    Off,
    /// Ask when the allowlist does not match.
    OnMiss,
    /// Ask every time.
    Always,
}

/// What happens when a human must be asked but no approver answers. Ordered like
/// [`Security`]: `Deny < Allowlist < Full`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AskFallback {
    /// Deny.
    Deny,
    /// Run only if the allowlist is satisfied.
    Allowlist,
    /// Run.
    Full,
}

/// How commands are gated on the sandbox host (product spec §6.1). Ordered from
/// strictest: `Readonly < Approval < Unrestricted`.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum PermissionMode {
    /// Read-only sandbox; write tools refused.
    Readonly,
    /// Read-only first; on a permission denial ask, and retry once writable if approved.
    #[default]
    Approval,
    /// No permission gate (the sandbox still applies).
    Unrestricted,
}

/// What the sandbox does when it cannot enforce a configured exec allowlist
/// (`sandbox.exec_allowlist_mode`): refuse the command, or run it without the allowlist
/// and say so.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExecAllowlistMode {
    /// Refuse host=sandbox commands where the allowlist cannot be enforced.
    #[default]
    Required,
    /// Run them without it where it cannot be enforced (`doctor` and `explain` say so).
    BestEffort,
}

impl Security {
    /// The stricter of two security modes (the lower one).
    pub fn stricter(self, other: Security) -> Security {
        self.min(other)
    }
}

impl Ask {
    /// The stricter of two ask modes (the one that asks more).
    pub fn stricter(self, other: Ask) -> Ask {
        self.max(other)
    }
}

impl PermissionMode {
    /// The stricter of two permission modes (the lower one).
    pub fn stricter(self, other: PermissionMode) -> PermissionMode {
        self.min(other)
    }
}

impl AskFallback {
    /// The stricter of two fallbacks (the lower one).
    pub fn stricter(self, other: AskFallback) -> AskFallback {
        self.min(other)
    }
}

/// A text value that is none of a setting's spellings (a mode here, a sandbox backend or
/// builder in the config).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {value:?}: expected {expected}")]
pub struct InvalidChoice {
    /// The setting (`host`, `sandbox backend`).
    pub what: &'static str,
    /// The value as given.
    pub value: String,
    /// The accepted spellings, as a phrase (`one of sandbox, gateway, node`).
    pub expected: String,
}

/// Text forms, shared by config files, slash commands, CLI flags and JSON.
macro_rules! text_enum {
    ($ty:ident, $what:literal, [$($variant:ident => $text:literal),* $(,)?]) => {
        impl $ty {
            /// Every accepted spelling, for error messages.
            pub const VALUES: &'static [&'static str] = &[$($text),*];

            /// The canonical spelling.
            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $text),* }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = InvalidChoice;
            fn from_str(s: &str) -> Result<Self, InvalidChoice> {
                match s {
                    $($text => Ok($ty::$variant),)*
                    _ => Err(InvalidChoice {
                        what: $what,
                        value: s.to_owned(),
                        expected: format!("one of {}", Self::VALUES.join(", ")),
                    }),
                }
            }
        }
    };
}

text_enum!(Host, "host", [Sandbox => "sandbox", Gateway => "gateway", Node => "node"]);
text_enum!(Security, "security", [Deny => "deny", Allowlist => "allowlist", Full => "full"]);
text_enum!(Ask, "ask", [Off => "off", OnMiss => "on-miss", Always => "always"]);
text_enum!(AskFallback, "askFallback", [Deny => "deny", Allowlist => "allowlist", Full => "full"]);
text_enum!(PermissionMode, "permission mode", [Readonly => "readonly", Approval => "approval", Unrestricted => "unrestricted"]);
text_enum!(ExecAllowlistMode, "exec allowlist mode", [Required => "required", BestEffort => "best-effort"]);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn security() -> impl Strategy<Value = Security> {
        prop_oneof![
            Just(Security::Deny),
            Just(Security::Allowlist),
            Just(Security::Full)
        ]
    }
    fn ask() -> impl Strategy<Value = Ask> {
        prop_oneof![Just(Ask::Off), Just(Ask::OnMiss), Just(Ask::Always)]
    }

    proptest! {
        #[test]
        fn stricter_is_commutative_associative_and_never_looser(a in security(), b in security(), c in security()) {
            prop_assert_eq!(a.stricter(b), b.stricter(a));
            prop_assert_eq!(a.stricter(b).stricter(c), a.stricter(b.stricter(c)));
            prop_assert!(a.stricter(b) <= a && a.stricter(b) <= b);
            prop_assert_eq!(a.stricter(a), a);
        }

        #[test]
        fn stricter_ask_asks_at_least_as_much(a in ask(), b in ask(), c in ask()) {
            prop_assert_eq!(a.stricter(b), b.stricter(a));
            prop_assert_eq!(a.stricter(b).stricter(c), a.stricter(b.stricter(c)));
            prop_assert!(a.stricter(b) >= a && a.stricter(b) >= b);
        }
    }

    #[test]
    fn text_round_trips_and_bad_values_name_the_choices() {
        for v in Ask::VALUES {
            assert_eq!(v.parse::<Ask>().unwrap().as_str(), *v);
        }
        let err = "sometimes".parse::<Ask>().unwrap_err().to_string();
        assert!(err.contains("off, on-miss, always"), "{err}");
        assert_eq!(serde_json::to_string(&Ask::OnMiss).unwrap(), "\"on-miss\"");
    }
}
