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

use crate::PolicyError;
use crate::profiles::Profiles;
use crate::shell::{MAX_ARGV, base_name};
use crate::word_pattern::WordPattern;

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

    /// Whether every invocation this rule allows, `wider` allows too, provably from the
    /// two rules alone (`Err` names the first way it could allow more): the same program
    /// pattern; argument patterns that match a subset of `wider`'s — each word pattern
    /// the same as, or narrower than, the wider rule's (a literal it matches, or any word
    /// where the wider one takes any), at least as many words when `wider` is a prefix,
    /// exactly as many and exact when `wider` is exact; and no allowed flag `wider` does
    /// not allow. Examples only ever disable a rule, so they are not compared: compare
    /// with rules that are in force. Every field of the entry is here; a field this
    /// relation does not know must make its caller fail closed.
    pub fn no_looser_than(&self, wider: &RuleSpec) -> Result<(), String> {
        if self.pattern != wider.pattern {
            return Err(format!(
                "program pattern {:?} is not {:?}",
                self.pattern, wider.pattern
            ));
        }
        let (narrow, wide) = (
            ArgPatterns::compile(self).map_err(|e| format!("argument patterns: {e}"))?,
            ArgPatterns::compile(wider).map_err(|e| format!("argument patterns: {e}"))?,
        );
        if let Some(wide_words) = &wide.words {
            let Some(narrow_words) = &narrow.words else {
                return Err("it allows any arguments where the entry had argument patterns".into());
            };
            if wide.exact && !narrow.exact {
                return Err("argsMatch prefix where the entry was exact".into());
            }
            if narrow_words.len() < wide_words.len()
                || (wide.exact && narrow_words.len() != wide_words.len())
            {
                return Err(format!(
                    "{} argument patterns where the entry had {}",
                    narrow_words.len(),
                    wide_words.len()
                ));
            }
            for (i, (n, w)) in narrow_words.iter().zip(wide_words).enumerate() {
                if !n.within(w) {
                    return Err(format!(
                        "argument pattern {} ({:?}) matches more than {:?}",
                        i + 1,
                        self.args.as_ref().map(|a| a[i].as_str()).unwrap_or(""),
                        wider.args.as_ref().map(|a| a[i].as_str()).unwrap_or("")
                    ));
                }
            }
        }
        let wide_all = wider.allow_flags.iter().any(|f| f == "*");
        if let Some(flag) = self
            .allow_flags
            .iter()
            .find(|f| !wide_all && !wider.allow_flags.contains(f))
        {
            return Err(format!("allowFlags adds {flag:?}"));
        }
        Ok(())
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
        let args = ArgPatterns::compile(self).map_err(|reason| self.invalid(reason))?;
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

/// A rule's compiled argument patterns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ArgPatterns {
    words: Option<Vec<WordPattern>>,
    exact: bool,
}

impl ArgPatterns {
    pub(crate) fn compile(rule: &RuleSpec) -> Result<ArgPatterns, String> {
        let words = match &rule.args {
            None => None,
            Some(args) => {
                if args.len() > MAX_ARGV {
                    return Err(format!("more than {MAX_ARGV} argument patterns"));
                }
                Some(
                    args.iter()
                        .map(|a| WordPattern::compile(a))
                        .collect::<Result<Vec<_>, _>>()?,
                )
            }
        };
        Ok(ArgPatterns {
            words,
            exact: rule.args_match == ArgsMatch::Exact,
        })
    }

    /// Whether `args` (the words after the program) satisfy the patterns.
    pub(crate) fn matches(&self, args: &[String]) -> bool {
        let Some(words) = &self.words else {
            return true;
        };
        if args.len() < words.len() || (self.exact && args.len() != words.len()) {
            return false;
        }
        words.iter().zip(args).all(|(p, a)| p.matches(a))
    }

    /// The literal first word every match must have, if there is one.
    pub(crate) fn first_literal(&self) -> Option<&str> {
        self.words.as_ref()?.first()?.literal()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(args: &[&str], exact: bool) -> ArgPatterns {
        ArgPatterns::compile(&RuleSpec {
            pattern: "git".into(),
            args: Some(args.iter().map(|s| s.to_string()).collect()),
            args_match: if exact {
                ArgsMatch::Exact
            } else {
                ArgsMatch::Prefix
            },
            ..RuleSpec::default()
        })
        .unwrap()
    }

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn prefix_exact_and_wildcards() {
        let status = rule(&["status"], false);
        assert!(status.matches(&words(&["status"])));
        assert!(status.matches(&words(&["status", "-s"])));
        assert!(!status.matches(&words(&["push"])));
        assert!(!status.matches(&words(&[])));
        let log_any = rule(&["log", "*"], false);
        assert!(!log_any.matches(&words(&["log"])));
        assert!(log_any.matches(&words(&["log", "--oneline", "-5"])));
        let exact = rule(&["status", "-s"], true);
        assert!(exact.matches(&words(&["status", "-s"])));
        assert!(!exact.matches(&words(&["status", "-s", "x"])));
        let glob = rule(&["--format=*", "a?c", "x\\*"], true);
        assert!(glob.matches(&words(&["--format=%H/%s", "abc", "x*"])));
        assert!(!glob.matches(&words(&["--format=%H", "abc", "xy"])));
        assert!(!glob.matches(&words(&["--form", "abc", "x*"])));
        // No pattern at all: version 1's meaning.
        assert!(
            ArgPatterns::compile(&RuleSpec::program("git"))
                .unwrap()
                .matches(&words(&["anything"]))
        );
    }

    mod no_looser {
        use super::*;
        use proptest::prelude::*;

        fn word() -> impl Strategy<Value = String> {
            prop::sample::select(vec![
                "status",
                "log",
                "*",
                "-*",
                "--oneline",
                "a?c",
                "abc",
                "x\\*",
            ])
            .prop_map(str::to_owned)
        }

        fn rule() -> impl Strategy<Value = RuleSpec> {
            (
                prop::option::of(prop::collection::vec(word(), 0..3)),
                any::<bool>(),
                prop::collection::vec(
                    prop::sample::select(vec!["-c alias.*", "-exec", "*"]).prop_map(str::to_owned),
                    0..2,
                ),
            )
                .prop_map(|(args, exact, allow_flags)| RuleSpec {
                    pattern: "/usr/bin/git".into(),
                    args_match: if exact && args.is_some() {
                        ArgsMatch::Exact
                    } else {
                        ArgsMatch::Prefix
                    },
                    args,
                    allow_flags,
                    examples: Examples::default(),
                })
        }

        fn command() -> impl Strategy<Value = Vec<String>> {
            prop::collection::vec(
                prop::sample::select(vec![
                    "status",
                    "log",
                    "--oneline",
                    "-s",
                    "abc",
                    "x*",
                    "push",
                ])
                .prop_map(str::to_owned),
                0..4,
            )
        }

        /// Whether `rule` allows `args` with the profile hits named by `hits`.
        fn allows(rule: &RuleSpec, args: &[String], hits: &[&str]) -> bool {
            ArgPatterns::compile(rule).unwrap().matches(args)
                && hits
                    .iter()
                    .all(|h| rule.allow_flags.iter().any(|f| f == "*" || f == h))
        }

        proptest! {
            #[test]
            fn a_rule_no_looser_than_another_allows_nothing_the_other_does_not(
                narrow in rule(),
                wide in rule(),
                args in command(),
                hits in prop::collection::vec(prop::sample::select(vec!["-c alias.*", "-exec"]), 0..2),
            ) {
                if narrow.no_looser_than(&wide).is_ok() {
                    prop_assert!(
                        !allows(&narrow, &args, &hits) || allows(&wide, &args, &hits),
                        "{} allows {:?} with {:?}, {} does not",
                        narrow.describe(), args, hits, wide.describe()
                    );
                }
            }

            #[test]
            fn every_rule_is_no_looser_than_itself(r in rule()) {
                prop_assert!(r.no_looser_than(&r).is_ok());
            }
        }

        #[test]
        fn each_widening_is_named() {
            let base = RuleSpec {
                pattern: "/usr/bin/git".into(),
                args: Some(vec!["status".into()]),
                args_match: ArgsMatch::Exact,
                allow_flags: vec!["-c alias.*".into()],
                examples: Examples::default(),
            };
            let widened = |f: &dyn Fn(&mut RuleSpec)| {
                let mut r = base.clone();
                f(&mut r);
                r.no_looser_than(&base).unwrap_err()
            };
            assert!(widened(&|r| r.args = None).contains("any arguments"));
            assert!(widened(&|r| r.args_match = ArgsMatch::Prefix).contains("prefix"));
            assert!(widened(&|r| r.args = Some(vec!["*".into()])).contains("matches more"));
            assert!(widened(&|r| r.allow_flags.push("-exec".into())).contains("allowFlags"));
            assert!(widened(&|r| r.pattern = "/usr/bin/*".into()).contains("pattern"));
            // Narrower: more words under a prefix, a literal under a glob, fewer flags.
            let prefix = RuleSpec {
                args: Some(vec!["log".into(), "*".into()]),
                args_match: ArgsMatch::Prefix,
                ..base.clone()
            };
            let narrower = RuleSpec {
                args: Some(vec!["log".into(), "--oneline".into(), "-5".into()]),
                args_match: ArgsMatch::Exact,
                allow_flags: Vec::new(),
                ..base.clone()
            };
            assert_eq!(narrower.no_looser_than(&prefix), Ok(()));
        }
    }
}
