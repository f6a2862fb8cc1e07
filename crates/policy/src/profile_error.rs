//! What makes a profiles document unusable: a grammar that does not compile
//! ([`GrammarError`], at the program and subcommand where it is wrong), a program or rule
//! that is malformed or whose examples fail ([`ProfileError`]). A leaf outside
//! `profiles/`, so that [`crate::PolicyError`] can carry it without `error` and
//! `profiles` using each other.

use crate::word_pattern::PatternError;

/// A kind name (`value`, `write`, `one-of:a|b`…) that is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown kind {kind:?} (value, path, pattern, number, write, workdir, maybe-write, config, ssh-option, script, target, file, command, one-of:a|b)"
)]
pub struct UnknownKind {
    /// The kind as written.
    pub kind: String,
}

/// A `[program.grammar]` table that cannot be compiled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{at}: {problem}")]
pub struct GrammarError {
    /// The program, then the subcommand path if the problem is in one (`git stash`).
    pub at: String,
    /// What is wrong there.
    pub problem: GrammarProblem,
}

/// What is wrong in a grammar.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GrammarProblem {
    /// A `config-keys` glob.
    #[error("{0}")]
    ConfigKey(PatternError),
    /// A name in an option entry that is not an option.
    #[error("{0:?} is not an option (`-x`, `--long`, `-long`)")]
    NotAnOption(String),
    /// An option entry without a name.
    #[error("an option entry names no option")]
    NoOptionNamed,
    /// `write-mode` names an option no context has.
    #[error("write-mode names {0:?}, which no context accepts")]
    UnknownWriteMode(String),
    /// `--opt[=kind` without its `]`.
    #[error("{option:?}: an optional value is written `--opt[=kind]`")]
    OptionalValueSyntax {
        /// The option entry.
        option: String,
    },
    /// An option entry's value kind.
    #[error("{option:?}: {kind}")]
    OptionKind {
        /// The option entry.
        option: String,
        /// The kind that is not one.
        kind: UnknownKind,
    },
    /// An optional value declared as several.
    #[error("{option:?}: an optional value is one value")]
    OptionalValueCount {
        /// The option entry.
        option: String,
    },
    /// Grammar-wide keys inside a subcommand's table.
    #[error(
        "style, old-style, double-dash, options-end-at-operand, plus-commands, stdin-commands, config-keys, write-mode, sets and examples belong to [program.grammar], not to a subcommand"
    )]
    GrammarKeyInSubcommand,
    /// One option name given two different meanings.
    #[error("the option {0:?} is listed twice, differently")]
    ListedTwice(String),
    /// A `refuse` entry without a reason.
    #[error("every `refuse` entry needs a `reason`")]
    RefuseWithoutReason,
    /// A `refuse` entry naming both or neither of options and subcommands.
    #[error("a `refuse` entry names `options` or `names` (subcommands), one of them")]
    RefuseNamesOneOf,
    /// `use` names a set `sets` does not define.
    #[error("`use` names {0:?}, which `sets` does not define")]
    UnknownSet(String),
    /// Two operand kinds marked `...`.
    #[error("only one operand kind may repeat (`...`)")]
    TwoRepeats,
    /// An operand's kind.
    #[error("operands: {0}")]
    OperandKind(UnknownKind),
    /// A subcommand table whose key names no subcommand.
    #[error("a subcommand table has no name")]
    UnnamedSubcommand,
}

/// A profiles document that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    /// The file could not be read.
    #[error("cannot read it: {message}")]
    Unreadable {
        /// Why.
        message: String,
    },
    /// Not valid TOML (or, for the shipped profiles, JSON) of the profiles schema.
    #[error("{message}")]
    Syntax {
        /// The parser's message.
        message: String,
    },
    /// A `[[program]]` without usable names.
    #[error("a [[program]] needs `names`: base names without `/` (got {names:?})")]
    NoNames {
        /// The names as given.
        names: Vec<String>,
    },
    /// A program's grammar.
    #[error(transparent)]
    Grammar(#[from] GrammarError),
    /// Something else about one program.
    #[error("{program}: {problem}")]
    Program {
        /// The program's first name.
        program: String,
        /// What is wrong.
        problem: ProgramProblem,
    },
}

/// What is wrong with one program's rules or examples.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProgramProblem {
    /// A `long-values` or rule `flags` entry that is not an option.
    #[error("{0:?} is not an option (`-x`, `--long`, `-long`)")]
    NotAnOption(String),
    /// A rule that would match nothing.
    #[error(
        "rule {rule:?} names no flag, word or subcommand (use `any = true` for every invocation)"
    )]
    RuleMatchesNothing {
        /// The rule's name.
        rule: String,
    },
    /// A rule without a name or a reason.
    #[error("every rule needs a `name` and a `reason`")]
    RuleUnnamed,
    /// A rule with `values` for no flag.
    #[error("rule {rule:?} has `values` but no `flags`")]
    ValuesWithoutFlags {
        /// The rule's name.
        rule: String,
    },
    /// A rule's `values` or `words` pattern.
    #[error("rule {rule:?}: {error}")]
    RulePattern {
        /// The rule's name.
        rule: String,
        /// The pattern's problem.
        error: PatternError,
    },
    /// A grammar example that is an empty command.
    #[error("a grammar example is empty")]
    EmptyGrammarExample,
    /// An `accept` example the grammar refuses.
    #[error("grammar example {example:?} must be accepted but {word:?} is refused: {reason}")]
    NotAccepted {
        /// The example.
        example: Vec<String>,
        /// The first word refused.
        word: String,
        /// Why.
        reason: String,
    },
    /// A `refuse` example the grammar accepts.
    #[error("grammar example {example:?} must be refused but is accepted")]
    NotRefused {
        /// The example.
        example: Vec<String>,
    },
    /// A rule example that is an empty command.
    #[error("rule {rule:?} has an empty example")]
    EmptyRuleExample {
        /// The rule's name.
        rule: String,
    },
    /// A `hit` example the rule does not hit.
    #[error("rule {rule:?}: example {example:?} must hit it but does not")]
    NoHit {
        /// The rule's name.
        rule: String,
        /// The example.
        example: Vec<String>,
    },
    /// A `miss` example the rule hits.
    #[error("rule {rule:?}: example {example:?} must not hit it but does")]
    UnwantedHit {
        /// The rule's name.
        rule: String,
        /// The example.
        example: Vec<String>,
    },
}
