//! Profiles of programs whose arguments can run code or write files. A profile is
//! either a **grammar** ([`grammar`], read by [`check`]): what the program accepts that
//! is known not to run other code or write outside the run's writable paths — anything
//! else is refused — or, for programs without one, a list of **rules**: the options,
//! subcommands and script commands known to execute other programs. A command that
//! matches an allowlist entry but is refused by its grammar or uses a listed rule is a
//! miss — with a reason naming the first word not accepted — unless the entry allows it
//! by name (`allowFlags`).
//!
//! The data is TOML: `profiles.toml` ships inside the binary, and an operator's
//! `$WARDEN_HOME/profiles.toml` extends it (read through `caps::Fs` by
//! [`Profiles::load`]; it can add rules and programs, never remove shipped ones). The
//! binary carries the shipped file as `profiles.json`, generated from the TOML and kept
//! equal to it by `tests/shipped_profiles.rs` (which also runs every shipped example
//! through what the binary loads): every `warden` call reads the shipped profiles, and
//! from JSON, without re-running the examples, that takes ~0.25 ms instead of ~0.85 ms
//! (cold, in a fresh process).
//! Options are matched the way the programs parse them ([`scan`]): combined short
//! flags, `--opt=value` and `--opt value`, abbreviated long options, options before a
//! subcommand; sed scripts and awk programs are read by [`sed`] and [`awk`].

mod awk;
mod check;
mod compile;
mod grammar;
mod hits;
mod scan;
mod schema;
mod sed;
mod writes;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use caps::Fs;
use serde::Serialize;

use crate::PolicyError;
pub use crate::profile_error::{
    GrammarError, GrammarProblem, ProfileError, ProgramProblem, UnknownKind,
};
use crate::word_pattern::{WordPattern, escape_word};
pub use check::WordVerdict;
use compile::{check_examples, compile_program, merge};
use hits::hits_of;
use scan::{Token, walk};
pub(crate) use schema::Script;
use schema::Where;
pub use writes::{EXAMPLE_CWD, Invocation};

/// The shipped profiles as written (the source of truth).
pub const SHIPPED: &str = include_str!("../../profiles.toml");

/// [`SHIPPED`] as JSON, which is what a process parses (see the module header). To
/// regenerate after editing `profiles.toml`:
/// `WARDEN_UPDATE_PROFILES=1 cargo test -p warden-policy --test shipped_profiles`.
const SHIPPED_JSON: &str = include_str!("../../profiles.json");

/// Every name a shipped profile is known by, sorted, one per line: generated with
/// `profiles.json` and kept equal to it by the same test. A name not in it has no shipped
/// profile, which this answers without parsing them.
const SHIPPED_NAMES: &str = include_str!("../../profiles.names");

/// Whether a shipped profile is known by `name`.
fn shipped_knows(name: &str) -> bool {
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    NAMES
        .get_or_init(|| SHIPPED_NAMES.lines().collect())
        .binary_search(&name)
        .is_ok()
}

/// The file name of the operator's extension in `$WARDEN_HOME`.
pub const USER_FILE: &str = "profiles.toml";

/// Whether loading a document runs its rules' examples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Examples {
    /// An operator's file: a rule whose examples fail is refused.
    Check,
    /// The shipped file: a unit test runs its examples once, not every process.
    Trusted,
}

/// A flag, subcommand or script command of a profile that a command uses.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct ProfileHit {
    /// The program's name as the profile knows it (`git`).
    pub program: String,
    /// The rule's name (`-c alias.*`); `allowFlags` names it.
    pub name: String,
    /// What it does (`runs arbitrary commands`).
    pub reason: String,
    /// The word of the command that triggered it.
    pub word: String,
}

/// What [`Profiles::examine`] found.
#[derive(Clone, Debug, Default)]
pub struct Examined {
    /// Words the grammar refused and rules the command uses.
    pub hits: Vec<ProfileHit>,
    /// How the grammar read it, if the program has one.
    pub trace: Option<GrammarTrace>,
    /// For a multi-command tool, where its subcommand is.
    pub subcommand: Option<usize>,
    /// Whether it is a multi-command tool.
    pub multi_command: bool,
}

/// How a program's grammar read a command line: every word accepted (as what) or
/// refused (why). What `policy explain` shows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GrammarTrace {
    /// The grammar's program (`git`).
    pub grammar: String,
    /// Word by word.
    pub words: Vec<WordVerdict>,
}

impl ProfileHit {
    /// `git -c alias.*`.
    pub fn label(&self) -> String {
        format!("{} {}", self.program, self.name)
    }

    /// Whether an entry allowing `allow_flags` (names or globs over names: `*` for all,
    /// `-c alias.*`) allows this hit.
    pub fn allowed_by(&self, allow_flags: &[String]) -> bool {
        allow_flags.iter().any(|f| {
            f == "*"
                || *f == self.name
                || WordPattern::compile(f).is_ok_and(|p| p.matches(&self.name))
        })
    }
}

impl std::fmt::Display for ProfileHit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.label(), self.reason)
    }
}

/// A compiled rule.
#[derive(Clone, Debug)]
struct Rule {
    name: String,
    reason: String,
    flags: Vec<String>,
    values: Vec<WordPattern>,
    equals_only: bool,
    words: Vec<WordPattern>,
    subcommands: Vec<String>,
    unless: Vec<String>,
    any: bool,
    place: Where,
}

/// A compiled program profile.
#[derive(Clone, Debug)]
pub(crate) struct Program {
    pub(crate) label: String,
    pub(crate) names: Vec<String>,
    pub(crate) subcommands: bool,
    pub(crate) abbreviations: bool,
    pub(crate) single_dash_long: bool,
    pub(crate) old_style: bool,
    pub(crate) short_values: String,
    pub(crate) short_optional: String,
    pub(crate) long_values: Vec<String>,
    pub(crate) script: Option<Script>,
    rules: Vec<Rule>,
    grammar: Option<grammar::Grammar>,
}

/// All profiles, indexed by program name. The shipped ones alone are parsed only when
/// first consulted: most commands never are — a sandboxed one with no allowlist entry to
/// match — and every `warden` process would otherwise parse them at its start.
#[derive(Clone, Debug)]
pub struct Profiles {
    /// `None`: exactly the shipped profiles ([`shipped_table`]).
    table: Option<Table>,
}

/// Compiled programs, indexed by name.
#[derive(Clone, Debug, Default)]
struct Table {
    programs: Vec<Program>,
    by_name: HashMap<String, usize>,
}

/// The shipped profiles, parsed once per process, when first needed.
fn shipped_table() -> &'static Table {
    static SHIPPED_TABLE: OnceLock<Table> = OnceLock::new();
    SHIPPED_TABLE.get_or_init(|| {
        // Tests parse and check the shipped file, so this cannot fail in a released
        // binary; if it somehow did, every profiled program would be left unchecked —
        // so fail loudly instead.
        let mut table = Table::default();
        let parsed = serde_json::from_str(SHIPPED_JSON)
            .map_err(|e| ProfileError::Syntax {
                message: e.to_string(),
            })
            .and_then(|doc| table.add(doc, Examples::Trusted));
        match parsed {
            Ok(()) => table,
            Err(e) => panic!("the shipped profiles are invalid: {e}"),
        }
    })
}

/// `python3.11` → `python`, `vim.basic` → `vim`: the names a versioned or
/// variant file may be known by.
fn name_variants(name: &str) -> [&str; 3] {
    let trimmed = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    let stem = name.split('.').next().unwrap_or(name);
    [name, trimmed, stem]
}

impl Profiles {
    /// The shipped profiles (parsed once per process, when first consulted).
    pub fn shipped() -> Arc<Profiles> {
        static SHIPPED_PROFILES: OnceLock<Arc<Profiles>> = OnceLock::new();
        Arc::clone(SHIPPED_PROFILES.get_or_init(|| Arc::new(Profiles { table: None })))
    }

    /// Parse a profiles document on its own.
    pub fn parse(text: &str, source: &str) -> Result<Profiles, PolicyError> {
        let mut table = Table::default();
        table.extend_with(text, source)?;
        Ok(Profiles { table: Some(table) })
    }

    /// What is consulted.
    fn table(&self) -> &Table {
        self.table.as_ref().unwrap_or_else(|| shipped_table())
    }

    /// The shipped profiles extended with the operator's `path`, if it exists. A file that
    /// exists but cannot be read or used is an error (the caller fails closed).
    pub fn load(fs: &dyn Fs, path: &Path) -> Result<Arc<Profiles>, PolicyError> {
        let text = match fs.read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.is_not_found() => return Ok(Profiles::shipped()),
            Err(e) => {
                return Err(PolicyError::Profiles {
                    file: path.display().to_string(),
                    error: ProfileError::Unreadable {
                        message: e.to_string(),
                    },
                });
            }
        };
        let mut table = shipped_table().clone();
        table.extend_with(&text, &path.display().to_string())?;
        Ok(Arc::new(Profiles { table: Some(table) }))
    }

    fn program(&self, name: &str) -> Option<&Program> {
        // Most commands name no profiled program: for the shipped profiles alone, that
        // is known without parsing them.
        if self.table.is_none() && !name_variants(name).iter().any(|n| shipped_knows(n)) {
            return None;
        }
        self.table().program(name)
    }

    /// Every name a profile is known by (sorted).
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.table().by_name.keys().cloned().collect();
        names.sort();
        names
    }
}

impl Table {
    /// Add the programs and rules of `text`: a program naming a known one adds to it.
    fn extend_with(&mut self, text: &str, source: &str) -> Result<(), PolicyError> {
        let err = |error: ProfileError| PolicyError::Profiles {
            file: source.to_owned(),
            error,
        };
        let doc: schema::Document = toml::from_str(text).map_err(|e| {
            err(ProfileError::Syntax {
                message: e.to_string(),
            })
        })?;
        self.add(doc, Examples::Check).map_err(err)
    }

    /// Add the programs and rules of a parsed document, checking every rule's examples
    /// unless they are [`Examples::Trusted`].
    fn add(&mut self, doc: schema::Document, examples: Examples) -> Result<(), ProfileError> {
        for spec in doc.program {
            let program = compile_program(&spec)?;
            let known = program
                .names
                .iter()
                .find_map(|n| self.by_name.get(n).copied());
            let index = match known {
                Some(i) => {
                    merge(&mut self.programs[i], program);
                    i
                }
                None => {
                    self.programs.push(program);
                    self.programs.len() - 1
                }
            };
            for n in self.programs[index].names.clone() {
                self.by_name.insert(n, index);
            }
            if examples == Examples::Check {
                check_examples(&self.programs[index], &spec)?;
            }
        }
        Ok(())
    }

    fn program(&self, name: &str) -> Option<&Program> {
        name_variants(name)
            .iter()
            .find_map(|n| self.by_name.get(*n))
            .map(|&i| &self.programs[i])
    }
}

impl Profiles {
    /// Every profile hit of `argv` (argv[0] is the program as invoked) for the program
    /// known as `name` (a base name: the invoked word's or the resolved file's), read as
    /// run where `inv` says: the words its grammar refuses, or the rules it uses.
    pub fn hits(&self, name: &str, argv: &[String], inv: &Invocation<'_>) -> Vec<ProfileHit> {
        self.examine(&[name], argv, inv).hits
    }

    /// How the grammar of the program known as `name` reads `argv`, if it has one.
    pub fn trace(&self, name: &str, argv: &[String], inv: &Invocation<'_>) -> Option<GrammarTrace> {
        self.examine(&[name], argv, inv).trace
    }

    /// Everything the profiles say about `argv` for a program known by any of `names`
    /// (the invoked word's base name and the resolved file's): each distinct program's
    /// grammar reads the command line once.
    pub fn examine(&self, names: &[&str], argv: &[String], inv: &Invocation<'_>) -> Examined {
        let mut out = Examined::default();
        let mut seen: Vec<*const Program> = Vec::new();
        for (k, name) in names.iter().enumerate() {
            if names[..k].contains(name) {
                continue;
            }
            let Some(program) = self.program(name) else {
                continue;
            };
            if seen.contains(&std::ptr::from_ref(program)) {
                continue;
            }
            seen.push(std::ptr::from_ref(program));
            let reading = program
                .grammar
                .as_ref()
                .map(|g| check::read(&program.label, g, program.script, argv, inv));
            for mut h in hits_of(program, argv, reading.as_ref()) {
                if !out.hits.iter().any(|x| x.name == h.name) {
                    // Named as the command names it (`mawk system()`).
                    h.program = (*name).to_owned();
                    out.hits.push(h);
                }
            }
            if program.subcommands {
                out.multi_command = true;
                if out.subcommand.is_none() {
                    out.subcommand = match &reading {
                        Some(r) => r.subcommand,
                        None => walk(program, argv).find_map(|t| match t {
                            Token::Subcommand { index } => Some(index),
                            _ => None,
                        }),
                    };
                }
            }
            if out.trace.is_none()
                && let Some(r) = reading
            {
                out.trace = Some(GrammarTrace {
                    grammar: program.label.clone(),
                    words: r.words,
                });
            }
        }
        out
    }

    /// For a multi-command tool (git, cargo, kubectl…): the index in `argv` of the
    /// subcommand, after the tool's own options. `None` for single-purpose tools.
    pub fn subcommand_index(&self, name: &str, argv: &[String]) -> Option<usize> {
        self.examine(&[name], argv, &Invocation::example())
            .subcommand
    }

    /// Whether `name` is a multi-command tool.
    pub fn is_multi_command(&self, name: &str) -> bool {
        self.program(name).is_some_and(|p| p.subcommands)
    }
}

/// The argument words "allow always" stores for a multi-command tool: everything up to
/// and including the subcommand, each escaped so it matches only itself.
pub fn subcommand_prefix(argv: &[String], index: usize) -> Vec<String> {
    argv[1..=index].iter().map(|w| escape_word(w)).collect()
}

#[cfg(test)]
mod tests;
