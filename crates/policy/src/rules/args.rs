//! A rule's argument patterns (`args` and `argsMatch`), compiled, and what makes them
//! unusable.

use super::{ArgsMatch, RuleSpec};
use crate::shell::MAX_ARGV;
use crate::word_pattern::{PatternError, WordPattern};

/// A rule's `args` that cannot be compiled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArgPatternError {
    /// More patterns than a command can have words.
    #[error("more than {limit} argument patterns")]
    TooMany {
        /// The most a rule may have.
        limit: usize,
    },
    /// One of the patterns.
    #[error(transparent)]
    Word(#[from] PatternError),
}

/// A rule's compiled argument patterns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ArgPatterns {
    pub(super) words: Option<Vec<WordPattern>>,
    pub(super) exact: bool,
}

impl ArgPatterns {
    pub(crate) fn compile(rule: &RuleSpec) -> Result<ArgPatterns, ArgPatternError> {
        let words = match &rule.args {
            None => None,
            Some(args) => {
                if args.len() > MAX_ARGV {
                    return Err(ArgPatternError::TooMany { limit: MAX_ARGV });
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
}
