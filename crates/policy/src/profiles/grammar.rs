//! A program's grammar, compiled: what it accepts that is known not to run other code
//! or write outside the run's writable paths. Whatever a grammar does not accept is
//! refused — an unknown option, subcommand, configuration key or operand is a miss — so
//! a bare allowlist entry for a program with a grammar allows only invocations that are
//! provably plain ([`super::check`] reads a command line against it).
//!
//! Options are written in a small notation (documented in `docs/configuration.md`):
//! `"-n --max-count=value"` is one option with two names taking a value;
//! `"--color[=value]"` takes an optional value stuck to it; `"--[no-]follow"` is
//! `--follow` and `--no-follow`; `"-fprintf=write,value"` takes two values.

use std::collections::HashMap;

use super::schema::{ContextSpec, DoubleDash, Style};
use super::writes::Written;
use crate::profile_error::{GrammarError, GrammarProblem, UnknownKind};
use crate::word_pattern::WordPattern;

/// What a value or an operand is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Any text: a pattern, a number, a revision, a path read.
    Value,
    /// A path the program writes (`write`), a directory it works and writes in
    /// (`workdir`; `git-workdir`, which may be a bare repository), or a repository's Git
    /// directory (`git-dir`): see [`Written`].
    Written(Written),
    /// A path written only when a `write-mode` option is given (`tar -f`, `sed -i`
    /// operands); a `host:path` (a remote archive, reached through a remote shell) never.
    MaybeWrite,
    /// git's `key=value` configuration: the key must be one of `config-keys`.
    Config,
    /// ssh's `Key=Value` / `Key Value` option: the key must be one of `config-keys`.
    SshOption,
    /// A sed script or an awk program, read by the built-in reader.
    Script,
    /// A make target or an operand that must not be a `NAME=value` assignment.
    Target,
    /// A file name that must not start with `!` (ed reads `!cmd` as a command's output).
    File,
    /// The name of a member an archive will hold (`git archive --prefix`,
    /// `--add-virtual-file=NAME:CONTENT`): relative, without `..`, and with no `.git`
    /// component — extracted, it would land in a Git directory.
    Member,
    /// A command and its arguments up to `;` or `+` (`find -exec`): only ever refused.
    Command,
    /// One of these words exactly.
    OneOf(Vec<String>),
}

impl Kind {
    fn parse(text: &str) -> Result<Kind, UnknownKind> {
        Ok(match text {
            "value" | "path" | "pattern" | "number" => Kind::Value,
            "write" => Kind::Written(Written::File),
            "workdir" => Kind::Written(Written::Dir),
            "git-workdir" => Kind::Written(Written::GitWorkdir),
            "git-dir" => Kind::Written(Written::GitDir),
            "maybe-write" => Kind::MaybeWrite,
            "config" => Kind::Config,
            "ssh-option" => Kind::SshOption,
            "script" => Kind::Script,
            "target" => Kind::Target,
            "file" => Kind::File,
            "member" => Kind::Member,
            "command" => Kind::Command,
            other => match other.strip_prefix("one-of:") {
                Some(list) if !list.is_empty() => {
                    Kind::OneOf(list.split('|').map(str::to_owned).collect())
                }
                _ => {
                    return Err(UnknownKind {
                        kind: other.to_owned(),
                    });
                }
            },
        })
    }
}

/// One option of a context.
#[derive(Clone, Debug)]
pub(crate) struct OptionSpec {
    /// What a refusal is called: its first long name (`--exec`), else its first name.
    pub(crate) name: String,
    /// The kinds of the values it takes, in order (empty: a flag).
    pub(crate) values: Vec<Kind>,
    /// Its one value is optional and only ever stuck to it (`--color=auto`, `-i.bak`).
    pub(crate) optional: bool,
    /// Known and refused, with why.
    pub(crate) refused: Option<String>,
}

/// Options, operands and subcommands accepted at one place of a command line.
#[derive(Clone, Debug, Default)]
pub(crate) struct Context {
    /// The subcommand path (`stash list`); empty for the program itself.
    pub(crate) path: String,
    pub(crate) options: Vec<OptionSpec>,
    pub(crate) by_name: HashMap<String, usize>,
    /// Positional kinds; `repeat` is the index of the one that repeats.
    pub(crate) operands: Vec<Kind>,
    pub(crate) repeat: Option<usize>,
    pub(crate) operands_refused: Option<String>,
    pub(crate) numbers: bool,
    pub(crate) subcommands: HashMap<String, Context>,
    pub(crate) subcommand_optional: bool,
    pub(crate) refused_subcommands: HashMap<String, String>,
}

impl Context {
    /// The option called `name` here.
    pub(crate) fn option(&self, name: &str) -> Option<&OptionSpec> {
        self.by_name.get(name).map(|&i| &self.options[i])
    }

    /// The one option whose name `prefix` abbreviates, if exactly one does.
    pub(crate) fn abbreviates(&self, prefix: &str) -> Option<&str> {
        let mut found = self
            .by_name
            .keys()
            .filter(|n| n.starts_with(prefix) && n.len() > prefix.len());
        match (found.next(), found.next()) {
            (Some(one), None) => Some(one.as_str()),
            _ => None,
        }
    }

    /// Whether this context expects a subcommand as its first operand.
    pub(crate) fn has_subcommands(&self) -> bool {
        !self.subcommands.is_empty() || !self.refused_subcommands.is_empty()
    }
}

/// A program's whole grammar.
#[derive(Clone, Debug)]
pub(crate) struct Grammar {
    pub(crate) style: Style,
    pub(crate) old_style: bool,
    pub(crate) double_dash: DoubleDash,
    pub(crate) options_end_at_operand: Option<usize>,
    pub(crate) plus_commands: bool,
    pub(crate) stdin_commands: bool,
    /// Lowercased globs.
    pub(crate) config_keys: Vec<WordPattern>,
    pub(crate) write_mode: Vec<String>,
    pub(crate) top: Context,
}

/// The error of `problem` at `at` (the program, then the subcommand path).
fn error(at: &str, problem: GrammarProblem) -> GrammarError {
    GrammarError {
        at: at.to_owned(),
        problem,
    }
}

/// Compile `spec` (the `[program.grammar]` table of the program `label`).
pub(crate) fn compile(label: &str, spec: &ContextSpec) -> Result<Grammar, GrammarError> {
    let config_keys = spec
        .config_keys
        .iter()
        .map(|k| {
            WordPattern::compile(&k.to_lowercase())
                .map_err(|e| error(label, GrammarProblem::ConfigKey(e)))
        })
        .collect::<Result<_, _>>()?;
    let mut write_mode = Vec::new();
    for w in &spec.write_mode {
        write_mode.extend(expand_names(label, w)?);
    }
    let top = compile_context(label, "", spec, &spec.sets, true)?;
    // Kept as the options' own names, which is how a reading records what it saw.
    for w in &mut write_mode {
        match canonical_anywhere(&top, w) {
            Some(name) => *w = name,
            None => {
                return Err(error(label, GrammarProblem::UnknownWriteMode(w.clone())));
            }
        }
    }
    Ok(Grammar {
        style: spec.style.unwrap_or_default(),
        old_style: spec.old_style.unwrap_or(false),
        double_dash: spec.double_dash.unwrap_or_default(),
        options_end_at_operand: spec.options_end_at_operand,
        plus_commands: spec.plus_commands.unwrap_or(false),
        stdin_commands: spec.stdin_commands.unwrap_or(false),
        config_keys,
        write_mode,
        top,
    })
}

/// The own name of the option called `name` in `context` or any of its subcommands.
fn canonical_anywhere(context: &Context, name: &str) -> Option<String> {
    context.option(name).map(|o| o.name.clone()).or_else(|| {
        context
            .subcommands
            .values()
            .find_map(|c| canonical_anywhere(c, name))
    })
}

/// `--[no-]x` → `--x`, `--no-x`; other names as they are, each checked to be an option.
fn expand_names(label: &str, names: &str) -> Result<Vec<String>, GrammarError> {
    let mut out = Vec::new();
    for n in names.split_whitespace() {
        let expanded = match n.split_once("[no-]") {
            Some((dashes, rest)) => vec![format!("{dashes}{rest}"), format!("{dashes}no-{rest}")],
            None => vec![n.to_owned()],
        };
        for e in expanded {
            if !(e.starts_with('-') && e.len() > 1 && e != "--") {
                return Err(error(label, GrammarProblem::NotAnOption(e)));
            }
            out.push(e);
        }
    }
    if out.is_empty() {
        return Err(error(label, GrammarProblem::NoOptionNamed));
    }
    Ok(out)
}

/// `"-n --max-count=value"` → the names and the option.
fn parse_option(
    label: &str,
    text: &str,
    refused: Option<&str>,
) -> Result<(Vec<String>, OptionSpec), GrammarError> {
    let option = || text.to_owned();
    let (names, kinds, optional) = match text.split_once("[=") {
        Some((names, rest)) => {
            let kind = rest.strip_suffix(']').ok_or_else(|| {
                error(
                    label,
                    GrammarProblem::OptionalValueSyntax { option: option() },
                )
            })?;
            (names, Some(kind), true)
        }
        None => match text.rsplit_once('=') {
            Some((names, kind)) => (names, Some(kind), false),
            None => (text, None, false),
        },
    };
    let names = expand_names(label, names)?;
    let values = match kinds {
        None => Vec::new(),
        Some(k) => k
            .split(',')
            .map(|k| {
                Kind::parse(k.trim()).map_err(|kind| {
                    error(
                        label,
                        GrammarProblem::OptionKind {
                            option: option(),
                            kind,
                        },
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?,
    };
    if optional && values.len() != 1 {
        return Err(error(
            label,
            GrammarProblem::OptionalValueCount { option: option() },
        ));
    }
    let option = OptionSpec {
        name: names
            .iter()
            .find(|n| n.starts_with("--"))
            .unwrap_or(&names[0])
            .clone(),
        values,
        optional,
        refused: refused.map(str::to_owned),
    };
    Ok((names, option))
}

fn compile_context(
    label: &str,
    path: &str,
    spec: &ContextSpec,
    sets: &std::collections::BTreeMap<String, Vec<String>>,
    top: bool,
) -> Result<Context, GrammarError> {
    let here = if path.is_empty() {
        label.to_owned()
    } else {
        format!("{label} {path}")
    };
    if !top {
        let grammar_only = spec.style.is_some()
            || spec.old_style.is_some()
            || spec.double_dash.is_some()
            || spec.options_end_at_operand.is_some()
            || spec.plus_commands.is_some()
            || spec.stdin_commands.is_some()
            || !spec.config_keys.is_empty()
            || !spec.write_mode.is_empty()
            || !spec.sets.is_empty()
            || spec.examples.is_some();
        if grammar_only {
            return Err(error(&here, GrammarProblem::GrammarKeyInSubcommand));
        }
    }
    let mut context = Context {
        path: path.to_owned(),
        numbers: spec.numbers,
        subcommand_optional: spec.subcommand_optional,
        operands_refused: spec.operands_refused.clone(),
        ..Context::default()
    };
    // `from_set`: a name already known here is this context's own meaning of it
    // (format-patch's `-v` is a count, not the common `--verbose`).
    let add = |context: &mut Context,
               text: &str,
               refused: Option<&str>,
               from_set: bool|
     -> Result<(), GrammarError> {
        let (names, option) = parse_option(&here, text, refused)?;
        let index = context.options.len();
        for n in names {
            if let Some(&earlier) = context.by_name.get(&n) {
                let e = &context.options[earlier];
                let same = e.values == option.values
                    && e.optional == option.optional
                    && e.refused == option.refused;
                if !same && !from_set {
                    return Err(error(&here, GrammarProblem::ListedTwice(n)));
                }
                continue;
            }
            context.by_name.insert(n.clone(), index);
        }
        context.options.push(option);
        Ok(())
    };
    for text in &spec.options {
        add(&mut context, text, None, false)?;
    }
    for r in &spec.refuse {
        if r.reason.trim().is_empty() {
            return Err(error(&here, GrammarProblem::RefuseWithoutReason));
        }
        match (&r.options, &r.names) {
            (Some(options), None) => add(&mut context, options, Some(&r.reason), false)?,
            (None, Some(names)) => {
                for n in names.split_whitespace() {
                    context
                        .refused_subcommands
                        .insert(n.to_owned(), r.reason.clone());
                }
            }
            _ => {
                return Err(error(&here, GrammarProblem::RefuseNamesOneOf));
            }
        }
    }
    for set in &spec.use_sets {
        let list = sets
            .get(set)
            .ok_or_else(|| error(&here, GrammarProblem::UnknownSet(set.clone())))?;
        for text in list {
            add(&mut context, text, None, true)?;
        }
    }
    for (i, k) in spec.operands.iter().enumerate() {
        let (kind, repeats) = match k.strip_suffix("...") {
            Some(k) => (k, true),
            None => (k.as_str(), false),
        };
        if repeats {
            if context.repeat.is_some() {
                return Err(error(&here, GrammarProblem::TwoRepeats));
            }
            context.repeat = Some(i);
        }
        context
            .operands
            .push(Kind::parse(kind).map_err(|e| error(&here, GrammarProblem::OperandKind(e)))?);
    }
    for (names, sub) in &spec.subcommand {
        let mut compiled = None;
        for name in names.split_whitespace() {
            let sub_path = if path.is_empty() {
                name.to_owned()
            } else {
                format!("{path} {name}")
            };
            let c = compile_context(label, &sub_path, sub, sets, false)?;
            compiled.get_or_insert_with(|| c.clone());
            context.subcommands.insert(name.to_owned(), c);
        }
        if compiled.is_none() {
            return Err(error(&here, GrammarProblem::UnnamedSubcommand));
        }
    }
    Ok(context)
}

/// An operator's grammar for a program that already has one adds to it: more options,
/// operands and subcommands are accepted (the operator's file is theirs to trust).
pub(crate) fn merge(into: &mut Grammar, from: Grammar) {
    into.config_keys.extend(from.config_keys);
    into.write_mode.extend(from.write_mode);
    merge_context(&mut into.top, from.top);
}

fn merge_context(into: &mut Context, from: Context) {
    for (name, &index) in &from.by_name {
        if !into.by_name.contains_key(name) {
            into.options.push(from.options[index].clone());
            into.by_name.insert(name.clone(), into.options.len() - 1);
        }
    }
    if into.operands.is_empty() {
        into.operands = from.operands;
        into.repeat = from.repeat;
    }
    into.numbers |= from.numbers;
    into.subcommand_optional |= from.subcommand_optional;
    into.refused_subcommands.extend(from.refused_subcommands);
    for (name, sub) in from.subcommands {
        match into.subcommands.get_mut(&name) {
            Some(existing) => merge_context(existing, sub),
            None => {
                into.subcommands.insert(name, sub);
            }
        }
    }
}
