//! Whether one allowlist rule is provably no looser than another
//! ([`RuleSpec::no_looser_than`]), and the first way it could allow more when it is not.

use super::RuleSpec;
use super::args::{ArgPatternError, ArgPatterns};

/// Why a rule is not provably no looser than a wider one: the first way it could allow
/// more.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Looser {
    /// The rules name different programs.
    #[error("program pattern {pattern:?} is not {wider:?}")]
    OtherProgram {
        /// This rule's program pattern.
        pattern: String,
        /// The wider rule's.
        wider: String,
    },
    /// One of the two rules' argument patterns cannot be compiled.
    #[error("argument patterns: {0}")]
    ArgPatterns(#[from] ArgPatternError),
    /// This rule takes any arguments; the wider one has patterns.
    #[error("it allows any arguments where the entry had argument patterns")]
    AnyArguments,
    /// This rule matches a prefix where the wider one matches exactly.
    #[error("argsMatch prefix where the entry was exact")]
    PrefixForExact,
    /// Fewer argument patterns than the wider rule (or not as many, against an exact one).
    #[error("{count} argument patterns where the entry had {entry}")]
    WordCount {
        /// This rule's number of patterns.
        count: usize,
        /// The wider rule's.
        entry: usize,
    },
    /// An argument pattern matching more than the wider rule's at the same place.
    #[error("argument pattern {position} ({pattern:?}) matches more than {wider:?}")]
    WiderWord {
        /// Which pattern, counted from 1.
        position: usize,
        /// This rule's pattern there.
        pattern: String,
        /// The wider rule's.
        wider: String,
    },
    /// A profile hit this rule allows and the wider one does not.
    #[error("allowFlags adds {flag:?}")]
    AddsFlag {
        /// The `allowFlags` entry.
        flag: String,
    },
}

impl RuleSpec {
    /// Whether every invocation this rule allows, `wider` allows too, provably from the
    /// two rules alone (`Err` names the first way it could allow more): the same program
    /// pattern; argument patterns that match a subset of `wider`'s — each word pattern
    /// the same as, or narrower than, the wider rule's (a literal it matches, or any word
    /// where the wider one takes any), at least as many words when `wider` is a prefix,
    /// exactly as many and exact when `wider` is exact; and no allowed flag `wider` does
    /// not allow. Examples only ever disable a rule, so they are not compared: compare
    /// with rules that are in force. Every field of the entry is here; a field this
    /// relation does not know must make its caller fail closed.
    pub fn no_looser_than(&self, wider: &RuleSpec) -> Result<(), Looser> {
        if self.pattern != wider.pattern {
            return Err(Looser::OtherProgram {
                pattern: self.pattern.clone(),
                wider: wider.pattern.clone(),
            });
        }
        let (narrow, wide) = (ArgPatterns::compile(self)?, ArgPatterns::compile(wider)?);
        if let Some(wide_words) = &wide.words {
            let Some(narrow_words) = &narrow.words else {
                return Err(Looser::AnyArguments);
            };
            if wide.exact && !narrow.exact {
                return Err(Looser::PrefixForExact);
            }
            if narrow_words.len() < wide_words.len()
                || (wide.exact && narrow_words.len() != wide_words.len())
            {
                return Err(Looser::WordCount {
                    count: narrow_words.len(),
                    entry: wide_words.len(),
                });
            }
            for (i, (n, w)) in narrow_words.iter().zip(wide_words).enumerate() {
                if !n.within(w) {
                    let word =
                        |r: &RuleSpec| r.args.as_ref().map(|a| a[i].clone()).unwrap_or_default();
                    return Err(Looser::WiderWord {
                        position: i + 1,
                        pattern: word(self),
                        wider: word(wider),
                    });
                }
            }
        }
        let wide_all = wider.allow_flags.iter().any(|f| f == "*");
        if let Some(flag) = self
            .allow_flags
            .iter()
            .find(|f| !wide_all && !wider.allow_flags.contains(f))
        {
            return Err(Looser::AddsFlag { flag: flag.clone() });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{ArgsMatch, Examples};
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
            r.no_looser_than(&base).unwrap_err().to_string()
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
