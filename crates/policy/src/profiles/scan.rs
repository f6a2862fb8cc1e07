//! Reading a command line the way its program does: options before a subcommand (with
//! their values), combined short flags (`-avze CMD`), `--opt=value` and `--opt value`,
//! abbreviated long options, old-style `tar xf`, single-dash long options (`find -exec`).
//! Everything after the subcommand is read without knowing which of the subcommand's
//! options take values, so a value that looks like a flag is read as one: that can only
//! make a hit more likely, never hide one.

use super::schema::Script;
use super::{Program, awk, sed};

/// Where a word stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// A single-purpose tool: one phase.
    Only,
    /// A multi-command tool's own options, before the subcommand.
    Global,
    /// After the subcommand.
    AfterSubcommand,
}

/// One element of a command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Token {
    /// An option as written (`-c`, `--output`, `--out`, `-exec`) and its value.
    Option {
        phase: Phase,
        index: usize,
        name: String,
        value: Option<String>,
    },
    /// A word that is not an option.
    Operand { phase: Phase, index: usize },
    /// A multi-command tool's subcommand.
    Subcommand { index: usize },
}

impl Program {
    fn long_takes_value(&self, name: &str) -> bool {
        self.long_values.iter().any(|l| {
            l == name
                || (self.abbreviations
                    && name.len() >= 3
                    && l.starts_with(name)
                    && name.starts_with("--"))
        })
    }
}

/// The tokens of `argv` (argv[0] is the program and is skipped).
pub(crate) fn walk<'a>(
    program: &'a Program,
    argv: &'a [String],
) -> impl Iterator<Item = Token> + 'a {
    let mut out = Vec::new();
    let mut phase = if program.subcommands {
        Phase::Global
    } else {
        Phase::Only
    };
    let mut i = 1;
    if program.old_style
        && let Some(first) = argv.get(1)
        && !first.starts_with('-')
        && !first.is_empty()
    {
        // `tar xIf PROG archive`: letters of the first word, values from the next words
        // in order.
        let mut next = 2;
        for c in first.chars() {
            let value = if program.short_values.contains(c) {
                let v = argv.get(next).cloned();
                next += 1;
                v
            } else {
                None
            };
            out.push(Token::Option {
                phase,
                index: 1,
                name: format!("-{c}"),
                value,
            });
        }
        i = next;
    }
    while i < argv.len() {
        let word = &argv[i];
        let optionish = word.len() > 1
            && (word.starts_with('-') || (phase == Phase::Global && word.starts_with('+')));
        if word == "--" {
            // Not honoured as the end of options: `find -- . -exec` still executes, so
            // every later word is still read as a possible flag (cautious).
            i += 1;
            continue;
        }
        if !optionish {
            if phase == Phase::Global {
                out.push(Token::Subcommand { index: i });
                phase = Phase::AfterSubcommand;
            } else {
                out.push(Token::Operand { phase, index: i });
            }
            i += 1;
            continue;
        }
        let knows_values = phase != Phase::AfterSubcommand;
        if let Some(long) = word.strip_prefix("--") {
            let (name, value) = match long.split_once('=') {
                Some((n, v)) => (format!("--{n}"), Some(v.to_owned())),
                None => (word.clone(), None),
            };
            let takes_next = value.is_none() && program.long_takes_value(&name);
            let value = if takes_next {
                argv.get(i + 1).cloned()
            } else {
                value
            };
            out.push(Token::Option {
                phase,
                index: i,
                name,
                value,
            });
            i += if takes_next && knows_values { 2 } else { 1 };
            continue;
        }
        if program.single_dash_long || word.starts_with('+') {
            out.push(Token::Option {
                phase,
                index: i,
                name: word.clone(),
                value: argv.get(i + 1).cloned(),
            });
            i += 1;
            continue;
        }
        // A cluster of short letters: each is a flag until one takes a value, which is
        // the rest of the word or, if nothing is left, the next word.
        let letters: Vec<char> = word[1..].chars().collect();
        let mut consumed_next = false;
        for (k, &c) in letters.iter().enumerate() {
            let rest: String = letters[k + 1..].iter().collect();
            let name = format!("-{c}");
            if !knows_values {
                // A subcommand's own options are unknown: every letter counts as a flag,
                // and each is offered the value it would have if it took one.
                let value = if rest.is_empty() {
                    argv.get(i + 1).cloned()
                } else {
                    Some(rest)
                };
                out.push(Token::Option {
                    phase,
                    index: i,
                    name,
                    value,
                });
                continue;
            }
            if program.short_values.contains(c) {
                let value = if rest.is_empty() {
                    consumed_next = true;
                    argv.get(i + 1).cloned()
                } else {
                    Some(rest)
                };
                out.push(Token::Option {
                    phase,
                    index: i,
                    name,
                    value,
                });
                break;
            }
            if program.short_optional.contains(c) {
                out.push(Token::Option {
                    phase,
                    index: i,
                    name,
                    value: (!rest.is_empty()).then_some(rest),
                });
                break;
            }
            out.push(Token::Option {
                phase,
                index: i,
                name,
                value: None,
            });
        }
        i += if consumed_next && knows_values { 2 } else { 1 };
    }
    out.into_iter()
}

/// The program texts a sed or awk command carries, and whether a text comes from a file
/// Warden cannot read.
fn script_texts(program: &Program, script: Script, argv: &[String]) -> Vec<String> {
    let (inline, files): (&[&str], &[&str]) = match script {
        Script::Sed => (&["-e", "--expression"], &["-f", "--file"]),
        Script::Awk => (
            &["-e", "--source"],
            &["-f", "--file", "-E", "--exec", "-i", "--include"],
        ),
    };
    let names = |list: &[&str], name: &str| {
        list.iter().any(|f| {
            *f == name
                || (program.abbreviations
                    && name.len() >= 3
                    && name.starts_with("--")
                    && f.starts_with(name))
        })
    };
    let mut texts = Vec::new();
    let mut from_file = false;
    let mut first_operand = None;
    for t in walk(program, argv) {
        match t {
            Token::Option { name, value, .. } if names(inline, &name) => {
                texts.extend(value);
            }
            Token::Option { name, .. } if names(files, &name) => from_file = true,
            Token::Operand { index, .. } if first_operand.is_none() => first_operand = Some(index),
            _ => {}
        }
    }
    // Without -e or -f the first operand is the program.
    if texts.is_empty()
        && !from_file
        && let Some(i) = first_operand
    {
        texts.push(argv[i].clone());
    }
    texts
}

/// Hits found inside the sed scripts or awk programs of `argv`: (name, reason, text).
pub(crate) fn script_hits(
    program: &Program,
    script: Script,
    argv: &[String],
) -> Vec<(String, String, String)> {
    let mut hits = Vec::new();
    for text in script_texts(program, script, argv) {
        let found = match script {
            Script::Sed => sed::hits(&text),
            Script::Awk => awk::hits(&text),
        };
        for (name, reason) in found {
            hits.push((name.to_owned(), reason.to_owned(), text.clone()));
        }
    }
    hits
}
