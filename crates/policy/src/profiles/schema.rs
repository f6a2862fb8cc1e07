//! The profiles TOML schema (documented in `docs/configuration.md`). Unknown keys are
//! errors, so a misspelt rule can never silently check nothing.

use serde::Deserialize;

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Document {
    #[serde(default)]
    pub(super) program: Vec<ProgramSpec>,
}

/// Which built-in reader looks into the program text a command carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Script {
    /// sed scripts: the `e` and `w`/`W` commands, `s///e` and `s///w`.
    Sed,
    /// awk programs: `system()`, pipes, output redirection, `@load`/`@include`.
    Awk,
}

/// `[[program]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct ProgramSpec {
    /// Base names of the files this profile applies to.
    pub(super) names: Vec<String>,
    /// The first operand is a subcommand (git, cargo, kubectl…).
    #[serde(default)]
    pub(super) subcommands: bool,
    /// Long options may be abbreviated to any unambiguous prefix.
    #[serde(default)]
    pub(super) abbreviations: bool,
    /// Options are whole words after one dash (`find -exec`), never letter clusters.
    #[serde(default)]
    pub(super) single_dash_long: bool,
    /// A first word without a dash is a cluster of option letters (`tar xzf`).
    #[serde(default)]
    pub(super) old_style: bool,
    /// Short option letters that take a value (stuck, or the next word).
    #[serde(default)]
    pub(super) short_values: String,
    /// Short option letters whose value, if any, is stuck to them (`sed -i.bak`).
    #[serde(default)]
    pub(super) short_optional_values: String,
    /// Long options that take the next word as their value.
    #[serde(default)]
    pub(super) long_values: Vec<String>,
    /// A built-in reader for the program text.
    #[serde(default)]
    pub(super) script: Option<Script>,
    /// What runs code or writes arbitrary paths (for programs without a grammar, and
    /// refusals added on top of one).
    #[serde(default)]
    pub(super) rule: Vec<RuleSpecToml>,
    /// What the program accepts that is known not to run other code or write outside
    /// the run's writable paths: with one, a bare entry allows only what it accepts.
    #[serde(default)]
    pub(super) grammar: Option<ContextSpec>,
}

/// How a program reads its options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Style {
    /// getopt_long: clustered short letters, `--long=value` and `--long value`.
    #[default]
    Gnu,
    /// Whole words after one dash (`find -name`, `vim -es`), never letter clusters.
    SingleDash,
}

/// What `--` does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum DoubleDash {
    /// Every later word is an operand.
    #[default]
    EndsOptions,
    /// Skipped; later words are still read as options (`find -- . -exec`).
    Ignored,
}

/// `[program.grammar]` and each `[program.grammar.subcommand.NAME]`: a context of
/// options, operands and subcommands. The fields marked *grammar* belong to the whole
/// program and are refused inside a subcommand.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct ContextSpec {
    /// *grammar*: how options are written.
    #[serde(default)]
    pub(crate) style: Option<Style>,
    /// *grammar*: a first word without a dash is a cluster of option letters (`tar xzf`).
    #[serde(default)]
    pub(crate) old_style: Option<bool>,
    /// *grammar*: what `--` does.
    #[serde(default)]
    pub(crate) double_dash: Option<DoubleDash>,
    /// *grammar*: options end at this operand (1: `xargs CMD -x` gives `-x` to CMD;
    /// 2: ssh reads options after the destination, then the remote command).
    #[serde(default)]
    pub(crate) options_end_at_operand: Option<usize>,
    /// *grammar*: words starting with `+` are commands to the program (vim, less);
    /// only `+NUMBER` (a line) is accepted.
    #[serde(default)]
    pub(crate) plus_commands: Option<bool>,
    /// *grammar*: the program reads commands from its standard input (editors, pagers,
    /// shells, debuggers): refused when the command line pipes into it.
    #[serde(default)]
    pub(crate) stdin_commands: Option<bool>,
    /// *grammar*: configuration keys (`config` and `ssh-option` values) known not to run
    /// programs: globs, matched case-insensitively.
    #[serde(default)]
    pub(crate) config_keys: Vec<String>,
    /// *grammar*: options that make `maybe-write` values and operands written (`tar -c`,
    /// `sed -i`).
    #[serde(default)]
    pub(crate) write_mode: Vec<String>,
    /// *grammar*: named option lists that contexts include with `use`.
    #[serde(default)]
    pub(crate) sets: std::collections::BTreeMap<String, Vec<String>>,
    /// *grammar*: invocations that must be accepted and refused, checked at load.
    #[serde(default)]
    pub(crate) examples: Option<GrammarExamples>,
    /// Options accepted here: `"-n --max-count=value"` (see docs/configuration.md).
    #[serde(default)]
    pub(crate) options: Vec<String>,
    /// Option sets (from `sets`) accepted here too.
    #[serde(default, rename = "use")]
    pub(crate) use_sets: Vec<String>,
    /// Options known and refused, with why (only for clearer messages: whatever is not
    /// accepted is refused anyway).
    #[serde(default)]
    pub(crate) refuse: Vec<RefuseSpec>,
    /// Kinds of the operands, in order; one may end in `...` (repeated).
    #[serde(default)]
    pub(crate) operands: Vec<String>,
    /// Why operands beyond `operands` are refused (default: the grammar does not accept
    /// them).
    #[serde(default)]
    pub(crate) operands_refused: Option<String>,
    /// `-NUMBER` is accepted (`git log -5`).
    #[serde(default)]
    pub(crate) numbers: bool,
    /// Subcommands: the first operand names one.
    #[serde(default)]
    pub(crate) subcommand: std::collections::BTreeMap<String, ContextSpec>,
    /// A first operand that names no subcommand is an operand (`git config user.name`).
    #[serde(default)]
    pub(crate) subcommand_optional: bool,
}

/// `{ options = "-exec -execdir=command", reason = "…" }` or `{ names = "run", reason }`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RefuseSpec {
    #[serde(default)]
    pub(crate) options: Option<String>,
    #[serde(default)]
    pub(crate) names: Option<String>,
    pub(crate) reason: String,
}

/// `examples = { accept = [[…]], refuse = [[…]] }`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GrammarExamples {
    #[serde(default)]
    pub(crate) accept: Vec<Vec<String>>,
    #[serde(default)]
    pub(crate) refuse: Vec<Vec<String>>,
}

/// Where a rule's flags count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Where {
    /// Anywhere in the command.
    #[default]
    Anywhere,
    /// Before the subcommand (git's own options).
    Global,
    /// After the subcommand.
    Subcommand,
}

/// `[[program.rule]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RuleSpecToml {
    /// What a hit is called (`-c alias.*`); entries allow it by this name.
    pub(super) name: String,
    /// What it does.
    pub(super) reason: String,
    /// Options (`-x`, `--long`, `-long`).
    #[serde(default)]
    pub(super) flags: Vec<String>,
    /// Globs over the option's value (case-insensitive); empty: any use of the option.
    #[serde(default)]
    pub(super) values: Vec<String>,
    /// The value counts only when written as `--opt=value` (`git --exec-path` alone
    /// just prints).
    #[serde(default)]
    pub(super) equals_only: bool,
    /// Globs over words (operands) that are a hit by themselves (`run` of `bisect
    /// run`, make's `VAR=value`, vim's `+cmd`).
    #[serde(default)]
    pub(super) words: Vec<String>,
    /// Only under these subcommands; with no flags or words, the subcommand itself.
    #[serde(default)]
    pub(super) subcommands: Vec<String>,
    /// Not a hit when one of these words follows the subcommand (`git config --get`).
    #[serde(default)]
    pub(super) unless: Vec<String>,
    /// Every invocation is a hit (interpreters).
    #[serde(default)]
    pub(super) any: bool,
    /// Where the flags count.
    #[serde(default, rename = "where")]
    pub(super) place: Where,
    /// Commands that must and must not hit this rule, checked at load.
    #[serde(default)]
    pub(super) examples: RuleExamples,
}

/// `examples = { hit = [[…]], miss = [[…]] }`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RuleExamples {
    #[serde(default)]
    pub(super) hit: Vec<Vec<String>>,
    #[serde(default)]
    pub(super) miss: Vec<Vec<String>>,
}
