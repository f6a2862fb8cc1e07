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
    /// What runs code or writes arbitrary paths.
    #[serde(default)]
    pub(super) rule: Vec<RuleSpecToml>,
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
