//! "Allow always": which rules to store after a human approved a command permanently.
//! Only the resolved files of the commands that do the work are stored — never a shell,
//! an interpreter or a wrapper, because allowing one of those allows everything.
//!
//! The human is offered the choice of scope, narrowest first, with the narrowest
//! *useful* one preselected: a multi-command tool (git, cargo, kubectl…) with its
//! subcommand (`git status …`), a single-purpose tool alone (`rg`), and a command that
//! uses a flag its profile lists (`find … -exec …`) exactly as written, with just those
//! flags allowed. Every word of a stored rule is escaped so it matches only itself.

use serde::Serialize;

use crate::allowlist::escape_glob;
use crate::evaluate::{Evaluation, LeafMatch};
use crate::rules::{ArgsMatch, RuleSpec};
use crate::shell::{base_name, is_never_stored};
use crate::word_pattern::escape_word;

/// A program that was not stored, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The program as written.
    pub program: String,
    /// Why it was not stored.
    pub reason: String,
}

/// How much of a command a stored rule covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scope {
    /// Exactly these arguments.
    Exact,
    /// The program with its subcommand (for multi-command tools), else as for
    /// [`Scope::Exact`] or [`Scope::Program`] — the narrowest useful rule.
    Subcommand,
    /// The program with any arguments (flags its profile lists still ask).
    Program,
}

impl Scope {
    /// As written in prompts.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Exact => "exact",
            Scope::Subcommand => "subcommand",
            Scope::Program => "program",
        }
    }
}

/// One choice the approver may take: the rules stored for every program of the command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AlwaysOption {
    /// Its scope.
    pub scope: Scope,
    /// What is stored.
    pub rules: Vec<RuleSpec>,
}

impl AlwaysOption {
    /// One option storing each of `patterns` alone (any arguments): what a prompt of an
    /// earlier version offered.
    pub fn programs<S: AsRef<str>>(patterns: &[S]) -> Vec<AlwaysOption> {
        if patterns.is_empty() {
            return Vec::new();
        }
        vec![AlwaysOption {
            scope: Scope::Program,
            rules: patterns
                .iter()
                .map(|p| RuleSpec::program(p.as_ref()))
                .collect(),
        }]
    }
}

/// The choices, and what was left out. `options` may be empty: then nothing is stored
/// and `skipped` says why.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AllowAlways {
    /// Narrowest first.
    pub options: Vec<AlwaysOption>,
    /// The index of the preselected option.
    pub default: usize,
    /// Programs that could not be stored.
    pub skipped: Vec<Skipped>,
}

impl AllowAlways {
    /// The preselected option's rules (empty when nothing can be stored).
    pub fn default_rules(&self) -> &[RuleSpec] {
        self.options
            .get(self.default)
            .map_or(&[], |o| o.rules.as_slice())
    }
}

/// The rule for `leaf` at `scope`.
fn rule_for(leaf: &LeafMatch, path: &str, scope: Scope) -> RuleSpec {
    let command = &leaf.argv[leaf.program_index..];
    let words =
        |upto: usize| -> Vec<String> { command[1..upto].iter().map(|w| escape_word(w)).collect() };
    let mut hits: Vec<String> = leaf.profile.iter().map(|h| h.name.clone()).collect();
    hits.sort();
    hits.dedup();
    let exact = RuleSpec {
        pattern: path.to_owned(),
        args: Some(words(command.len())),
        args_match: ArgsMatch::Exact,
        allow_flags: hits,
        ..RuleSpec::default()
    };
    match scope {
        Scope::Exact => exact,
        Scope::Program => RuleSpec::program(path),
        // A command using a listed flag is stored as written: a wider rule would not
        // cover it (the flag would still ask), and allowing the flag more widely is a
        // decision for the operator, not a side effect of one approval.
        Scope::Subcommand if !leaf.profile.is_empty() => exact,
        Scope::Subcommand => match leaf.subcommand {
            Some(i) => RuleSpec {
                pattern: path.to_owned(),
                args: Some(words(i + 1)),
                ..RuleSpec::default()
            },
            None if leaf.multi_command => exact,
            None => RuleSpec::program(path),
        },
    }
}

/// Derive what "allow always" may store for an evaluated command.
pub fn derive_allow_always(evaluation: &Evaluation) -> AllowAlways {
    let mut result = AllowAlways::default();
    if let Err(miss) = &evaluation.analysis {
        result.skipped.push(Skipped {
            program: String::new(),
            reason: format!(
                "the command is not a plain list of simple commands ({}); nothing can be stored",
                miss.detail
            ),
        });
        return result;
    }
    let mut stored: Vec<(&LeafMatch, String)> = Vec::new();
    for leaf in &evaluation.leaves {
        let Some(exe) = &leaf.resolved else {
            result.skipped.push(Skipped {
                program: leaf.program.clone(),
                reason: "does not resolve to an executable file".into(),
            });
            continue;
        };
        let resolved_name = exe.path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if is_never_stored(base_name(&leaf.program)) || is_never_stored(resolved_name) {
            result.skipped.push(Skipped {
                program: leaf.program.clone(),
                reason: "shells, interpreters and wrappers are never stored".into(),
            });
            continue;
        }
        stored.push((leaf, escape_glob(&exe.path.to_string_lossy())));
    }
    if stored.is_empty() {
        return result;
    }
    for scope in [Scope::Exact, Scope::Subcommand, Scope::Program] {
        let mut rules: Vec<RuleSpec> = Vec::new();
        for (leaf, path) in &stored {
            let rule = rule_for(leaf, path, scope);
            if !rules.iter().any(|r| r.same_rule(&rule)) {
                rules.push(rule);
            }
        }
        match result.options.iter().position(|o| o.rules == rules) {
            Some(i) if scope == Scope::Subcommand => result.default = i,
            Some(_) => {}
            None => {
                if scope == Scope::Subcommand {
                    result.default = result.options.len();
                }
                result.options.push(AlwaysOption { scope, rules });
            }
        }
    }
    result
}
