//! Allowlist rules that see arguments: an entry's path pattern plus, optionally, patterns
//! for the words after the program (`args`, a prefix unless `argsMatch = "exact"`), the
//! profile hits it explicitly allows (`allowFlags`), and examples that must (not) match,
//! checked when the rule is loaded or written.
//!
//! Argument words are matched with a small glob: `*` is any run of characters (`/`
//! included: arguments are not paths), `?` one character, `\` makes the next character
//! literal. A rule stored by "allow always" escapes every word, so it matches only that
//! word.

use serde::{Deserialize, Serialize};

mod args;
mod looser;

use crate::PolicyError;
use crate::profiles::Profiles;
use crate::shell::base_name;
pub use args::ArgPatternError;
pub(crate) use args::ArgPatterns;
pub use looser::Looser;

/// How an entry's `args` compare with the command's arguments.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ArgsMatch {
    /// The arguments start with `args` (more may follow).
    #[default]
    Prefix,
    /// The arguments are exactly `args`.
    Exact,
}

impl ArgsMatch {
    fn is_prefix(&self) -> bool {
        *self == ArgsMatch::Prefix
    }
}

/// Commands a rule must and must not accept, checked at load time (as in Codex's
/// execpolicy): each is a whole argv whose first word names the program.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Examples {
    /// Commands the rule must accept.
    #[serde(default, rename = "match", skip_serializing_if = "Vec::is_empty")]
    pub matches: Vec<Vec<String>>,
    /// Commands the rule must refuse.
    #[serde(default, rename = "notMatch", skip_serializing_if = "Vec::is_empty")]
    pub not_matches: Vec<Vec<String>>,
    /// Fields this version does not know (kept when the approvals file is rewritten).
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Examples {
    fn is_empty(&self) -> bool {
        self.matches.is_empty() && self.not_matches.is_empty() && self.extra.is_empty()
    }
}

/// One allowlist entry as the policy reads it (and as approval prompts carry it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RuleSpec {
    /// The path glob or bare name (unchanged from version 1).
    pub pattern: String,
    /// Patterns for the words after the program; `None`: any arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    /// Prefix (default) or exact.
    #[serde(default, skip_serializing_if = "ArgsMatch::is_prefix")]
    pub args_match: ArgsMatch,
    /// Profile hits (`-c alias.*`, `-exec`; `*` for all) this entry explicitly allows.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_flags: Vec<String>,
    /// Load-time examples.
    #[serde(default, skip_serializing_if = "Examples::is_empty")]
    pub examples: Examples,
}

impl RuleSpec {
    /// An entry that names a program and nothing else (version 1's meaning).
    pub fn program(pattern: impl Into<String>) -> RuleSpec {
        RuleSpec {
            pattern: pattern.into(),
            ..RuleSpec::default()
        }
    }

    /// Whether two entries are the same rule (examples aside).
    pub fn same_rule(&self, other: &RuleSpec) -> bool {
        self.pattern == other.pattern
            && self.args == other.args
            && (self.args.is_none() || self.args_match == other.args_match)
            && self.allow_flags == other.allow_flags
    }

    /// The rule in one line: `PATTERN` (any arguments), `PATTERN status …` (a prefix),
    /// `PATTERN status -s` with `(exactly)`, plus what it allows of the profiles.
    pub fn describe(&self) -> String {
        let mut text = self.pattern.clone();
        match &self.args {
            None => {}
            Some(args) => {
                for a in args {
                    text.push(' ');
                    text.push_str(&crate::shell::quote(a));
                }
                match self.args_match {
                    ArgsMatch::Prefix => text.push_str(" …"),
                    ArgsMatch::Exact => text.push_str(" (exactly)"),
                }
            }
        }
        if !self.allow_flags.is_empty() {
            text.push_str(&format!(" [allows {}]", self.allow_flags.join(", ")));
        }
        text
    }

    /// Check everything but the path pattern: argument patterns, allowed flags, and the
    /// examples against `profiles`.
    pub fn validate(&self, profiles: &Profiles) -> Result<(), PolicyError> {
        let args = ArgPatterns::compile(self).map_err(|e| self.invalid(e.to_string()))?;
        for flag in &self.allow_flags {
            if flag.is_empty() || flag.chars().any(char::is_control) {
                return Err(self.invalid(format!("allowFlags entry {flag:?} is not a name")));
            }
        }
        for (argv, want) in self
            .examples
            .matches
            .iter()
            .map(|a| (a, true))
            .chain(self.examples.not_matches.iter().map(|a| (a, false)))
        {
            let Some(program) = argv.first() else {
                return Err(self.invalid("an example is an empty command"));
            };
            let why_not = match args.matches(&argv[1..]) {
                false => Some("its arguments do not match".to_owned()),
                true => {
                    let inv = crate::profiles::Invocation::example();
                    let hits = profiles.hits(base_name(program), argv, &inv);
                    hits.iter()
                        .find(|h| !h.allowed_by(&self.allow_flags))
                        .map(|h| format!("{} is not allowed", h.label()))
                }
            };
            match (want, why_not) {
                (true, Some(why)) => {
                    return Err(
                        self.invalid(format!("example {argv:?} must match but does not: {why}"))
                    );
                }
                (false, None) => {
                    return Err(self.invalid(format!("example {argv:?} must not match but does")));
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn invalid(&self, reason: impl Into<String>) -> PolicyError {
        PolicyError::InvalidPattern {
            pattern: self.describe(),
            reason: reason.into(),
        }
    }
}
