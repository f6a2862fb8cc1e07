//! Reading a command line against a program's grammar, the way the program reads it:
//! clustered short options (`-avz`), `--opt=value` and `--opt value`, `--` and the
//! operand after which a program stops reading options, `-NUMBER`, old-style `tar xzf`,
//! single-dash long options (`find -name`), subcommands. Every word is either accepted
//! (and says as what) or refused (and says why); an invocation with no refusal is
//! provably plain.
//!
//! An abbreviated long option is recognised and refused: the program may know an option
//! of exactly that name which the grammar does not list, and an exact name wins over an
//! abbreviation, so only a name written in full is known to mean what the grammar says.
//! After an option the grammar does not know, reading goes on as if it took no value;
//! after a subcommand it does not know, nothing more is read (the rest is that
//! subcommand's, which the refusal names).

use std::borrow::Cow;
use std::path::PathBuf;

use serde::Serialize;

use super::grammar::{Context, Grammar, Kind};
use super::schema::{DoubleDash, Script, Style};
use super::writes::{Invocation, Written, check_write};
use super::{awk, sed};

/// What happened to one word of the command line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WordVerdict {
    /// Its index in the command's argv (0 is the program).
    pub index: usize,
    /// How it was accepted (`option`, `value`, `subcommand`, `operand (written)`), or
    /// why it was refused.
    pub verdict: Cow<'static, str>,
    /// Whether it was accepted.
    pub accepted: bool,
}

/// A word the grammar did not accept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) index: usize,
    /// What an entry's `allowFlags` names to allow it (`--output`, `-c core.pager`).
    pub(crate) name: String,
    pub(crate) reason: String,
}

/// The whole reading.
#[derive(Clone, Debug, Default)]
pub(crate) struct Reading {
    pub(crate) words: Vec<WordVerdict>,
    pub(crate) refusals: Vec<Refusal>,
    /// Where the (first) subcommand is.
    pub(crate) subcommand: Option<usize>,
}

struct Reader<'a> {
    /// The grammar's own name of each option accepted (for `write-mode`).
    seen: Vec<&'a str>,
    label: &'a str,
    grammar: &'a Grammar,
    script: Option<Script>,
    argv: &'a [String],
    inv: &'a Invocation<'a>,
    reading: Reading,
    /// Values and operands written only in write mode: (index, option or `operand`, the
    /// path).
    maybe_writes: Vec<(usize, String, String)>,
    /// Paths written (index, option or `operand`, the path, how), checked once the whole
    /// command line is read: a directory the program works in changes where a relative
    /// one lands, wherever it stands.
    writes: Vec<(usize, String, String, Written)>,
    write_mode: bool,
    /// Script texts given by option (`sed -e`), which makes no operand a script.
    scripts: Vec<(usize, String)>,
}

/// Read `argv` (argv[0] is the program) against `grammar`.
pub(crate) fn read(
    label: &str,
    grammar: &Grammar,
    script: Option<Script>,
    argv: &[String],
    inv: &Invocation<'_>,
) -> Reading {
    let mut r = Reader {
        label,
        grammar,
        script,
        argv,
        inv,
        reading: Reading {
            words: Vec::with_capacity(argv.len()),
            ..Reading::default()
        },
        maybe_writes: Vec::new(),
        writes: Vec::new(),
        write_mode: false,
        scripts: Vec::new(),
        seen: Vec::new(),
    };
    r.walk();
    r.reading
}

/// How many directories a command line may have its program work in (stacked `-C`s
/// multiply) before Warden stops following them and refuses it.
const MAX_WORKING_DIRECTORIES: usize = 32;

/// `-c` for a letter, without allocating.
fn short_name(c: char, buf: &mut [u8; 8]) -> &str {
    buf[0] = b'-';
    let len = c.encode_utf8(&mut buf[1..]).len();
    std::str::from_utf8(&buf[..=len]).unwrap_or("-")
}

mod values;

impl<'a> Reader<'a> {
    fn accept(&mut self, index: usize, verdict: impl Into<Cow<'static, str>>) {
        self.reading.words.push(WordVerdict {
            index,
            verdict: verdict.into(),
            accepted: true,
        });
    }

    fn refuse(&mut self, index: usize, name: impl Into<String>, reason: impl Into<String>) {
        let (name, reason) = (name.into(), reason.into());
        self.reading.words.push(WordVerdict {
            index,
            verdict: format!("refused: {reason}").into(),
            accepted: false,
        });
        if !self.reading.refusals.iter().any(|r| r.name == name) {
            self.reading.refusals.push(Refusal {
                index,
                name,
                reason,
            });
        }
    }

    fn walk(&mut self) {
        let argv = self.argv;
        let grammar = self.grammar;
        let mut context: &'a Context = &grammar.top;
        // Operands of the current context, and of the whole line.
        let mut operands: Vec<usize> = Vec::new();
        let mut all_operands = 0usize;
        let mut options_done = false;
        let mut i = 1;
        if grammar.old_style
            && let Some(first) = argv.get(1)
            && !first.starts_with('-')
            && !first.is_empty()
        {
            // `tar xzf ARCHIVE`: letters of the first word, their values the next words.
            let mut next = 2;
            let mut buf = [0u8; 8];
            for c in first.chars() {
                let name = short_name(c, &mut buf);
                match context.option(name) {
                    Some(option) => next = self.option_values(option, name, 1, None, next),
                    None => self.unknown_option(1, name, context),
                }
            }
            i = next;
        }
        while i < argv.len() {
            let word = &argv[i];
            if !options_done && word == "--" {
                self.accept(i, "end of options");
                if grammar.double_dash == DoubleDash::EndsOptions {
                    options_done = true;
                }
                i += 1;
                continue;
            }
            if !options_done && grammar.plus_commands && word.starts_with('+') {
                if word.len() > 1 && word[1..].bytes().all(|b| b.is_ascii_digit()) {
                    self.accept(i, "a line number");
                } else {
                    self.refuse(i, "+cmd", "a command for the program to run at start");
                }
                i += 1;
                continue;
            }
            let optionish = !options_done && word.len() > 1 && word.starts_with('-');
            if !optionish {
                if operands.is_empty() && context.has_subcommands() {
                    if let Some(sub) = context.subcommands.get(word.as_str()) {
                        self.reading.subcommand.get_or_insert(i);
                        self.accept(i, "subcommand");
                        context = sub;
                        i += 1;
                        continue;
                    }
                    let path = if context.path.is_empty() {
                        word.clone()
                    } else {
                        format!("{} {word}", context.path)
                    };
                    // Nothing after a subcommand that is not accepted is read: it is
                    // that subcommand's, which the refusal names.
                    if let Some(reason) = context.refused_subcommands.get(word.as_str()) {
                        self.reading.subcommand.get_or_insert(i);
                        self.refuse(i, path, reason.clone());
                        self.finish();
                        return;
                    }
                    if !context.subcommand_optional {
                        self.reading.subcommand.get_or_insert(i);
                        let reason =
                            format!("a subcommand the {} grammar does not know", self.label);
                        self.refuse(i, path, reason);
                        self.finish();
                        return;
                    }
                }
                operands.push(i);
                all_operands += 1;
                if grammar
                    .options_end_at_operand
                    .is_some_and(|n| all_operands >= n)
                {
                    options_done = true;
                }
                i += 1;
                continue;
            }
            if context.numbers && word[1..].bytes().all(|b| b.is_ascii_digit()) {
                self.accept(i, "a count");
                i += 1;
                continue;
            }
            i = match (word.strip_prefix("--"), grammar.style) {
                (Some(_), _) | (None, Style::SingleDash) => self.whole_option(context, i),
                (None, Style::Gnu) => self.cluster(context, i),
            };
        }
        if self.write_mode_seen() {
            self.write_mode = true;
        }
        self.operands(context, &operands);
        self.finish();
    }

    fn write_mode_seen(&self) -> bool {
        self.grammar
            .write_mode
            .iter()
            .any(|m| self.seen.contains(&m.as_str()))
    }

    /// `--name`, `--name=value`, or (single-dash style) `-name`.
    fn whole_option(&mut self, context: &'a Context, i: usize) -> usize {
        let word: &'a str = &self.argv[i];
        let (name, inline) = match word.split_once('=') {
            Some((n, v)) if word.starts_with("--") => (n, Some(v)),
            _ => (word, None),
        };
        match context.option(name) {
            Some(option) => self.option_values(option, name, i, inline, i + 1),
            None => {
                self.unknown_option(i, name, context);
                i + 1
            }
        }
    }

    /// `-abc`, `-ovalue`, `-o value`.
    fn cluster(&mut self, context: &'a Context, i: usize) -> usize {
        let word: &'a str = &self.argv[i];
        let mut buf = [0u8; 8];
        for (at, c) in word.char_indices().skip(1) {
            let name = short_name(c, &mut buf);
            let rest = &word[at + c.len_utf8()..];
            let Some(option) = context.option(name) else {
                self.unknown_option(i, name, context);
                return i + 1;
            };
            if option.values.is_empty() {
                if option.refused.is_some() {
                    return self.option_values(option, name, i, None, i + 1);
                }
                self.seen.push(&option.name);
                self.accept(i, "option");
                continue;
            }
            let stuck = (!rest.is_empty()).then_some(rest);
            return self.option_values(option, name, i, stuck, i + 1);
        }
        i + 1
    }

    fn unknown_option(&mut self, i: usize, name: &str, context: &Context) {
        let reason = match context.abbreviates(name) {
            Some(full) if name.starts_with("--") => format!(
                "an abbreviation of {full}: write it in full (the program may know another option of exactly this name)"
            ),
            _ => format!("an option the {} grammar does not know", self.here(context)),
        };
        self.refuse(i, name, reason);
    }

    /// Check every written path from every directory the program may read it from: the
    /// run's working directory and each directory it is told to work in (`git -C`,
    /// `tar -C`), stacked in order (`git -C a -C b` works in `a/b`) — all of them for
    /// every path, whatever the order of the words, so a program that opens a path
    /// before or after changing directory is covered either way. A working directory is
    /// itself checked from the others.
    fn check_writes(&mut self, writes: Vec<(usize, String, String, Written)>) {
        let changes_directory = |how: Written| matches!(how, Written::Dir | Written::GitWorkdir);
        // The bases of every path but a working directory's own (which is checked from
        // the others): the same for all of them, worked out once.
        let bases_without = |skip: Option<usize>| -> Option<Vec<PathBuf>> {
            let mut bases: Vec<PathBuf> = vec![self.inv.cwd.to_path_buf()];
            for (k, (_, _, value, how)) in writes.iter().enumerate() {
                if Some(k) == skip || !changes_directory(*how) {
                    continue;
                }
                let stacked: Vec<PathBuf> = bases.iter().map(|b| b.join(value)).collect();
                for base in stacked {
                    if !bases.contains(&base) {
                        bases.push(base);
                    }
                }
                if bases.len() > MAX_WORKING_DIRECTORIES {
                    return None;
                }
            }
            Some(bases)
        };
        let every_base = bases_without(None);
        let mut refusals = Vec::new();
        for (k, (index, name, value, how)) in writes.iter().enumerate() {
            let own;
            let bases = if changes_directory(*how) {
                own = bases_without(Some(k));
                &own
            } else {
                &every_base
            };
            let Some(bases) = bases else {
                refusals.push((
                    *index,
                    name.clone(),
                    "works in more directories than Warden follows for the paths it writes"
                        .to_owned(),
                ));
                continue;
            };
            if let Some(why) = bases
                .iter()
                .find_map(|base| check_write(value, *how, self.inv, base).err())
            {
                refusals.push((*index, name.clone(), why));
            }
        }
        for (index, name, why) in refusals {
            self.refuse(index, name, why);
        }
    }

    fn here(&self, context: &Context) -> String {
        if context.path.is_empty() {
            self.label.to_owned()
        } else {
            format!("{} {}", self.label, context.path)
        }
    }

    fn finish(&mut self) {
        let mut writes = std::mem::take(&mut self.writes);
        if self.write_mode {
            let maybe = std::mem::take(&mut self.maybe_writes);
            writes.extend(maybe.into_iter().map(|(i, n, v)| (i, n, v, Written::File)));
        }
        self.check_writes(writes);
        if let Some(script) = self.script {
            for (index, text) in std::mem::take(&mut self.scripts) {
                let found = match script {
                    Script::Sed => sed::hits(&text),
                    Script::Awk => awk::hits(&text),
                };
                for (name, reason) in found {
                    self.refuse(index, name, reason);
                }
            }
        }
        if self.grammar.stdin_commands && self.inv.stdin_piped {
            self.refuse(
                0,
                "stdin",
                "reads commands from its standard input, which this command line pipes into it",
            );
        }
        // A word refused (an option whose value is not accepted) is not also accepted.
        let refused: Vec<usize> = self
            .reading
            .words
            .iter()
            .filter(|w| !w.accepted)
            .map(|w| w.index)
            .collect();
        if !refused.is_empty() {
            self.reading
                .words
                .retain(|w| !w.accepted || !refused.contains(&w.index));
        }
        self.reading.words.sort_by_key(|w| w.index);
    }
}

/// The kind (its index in `kinds`) of each of `n` operands: those before the repeated
/// kind from the front, those after it from the back, the repeated kind in between.
/// `None`: no kind (too many operands).
fn assign(kinds: &[Kind], repeat: Option<usize>, n: usize) -> Vec<Option<usize>> {
    let Some(r) = repeat else {
        return (0..n).map(|k| (k < kinds.len()).then_some(k)).collect();
    };
    let back = kinds.len() - r - 1;
    let mut out: Vec<Option<usize>> = vec![Some(r); n];
    for (k, slot) in out.iter_mut().enumerate().take(r) {
        *slot = Some(k);
    }
    let room = n.saturating_sub(r);
    for k in 0..back.min(room) {
        out[n - 1 - k] = Some(kinds.len() - 1 - k);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operands_take_kinds_from_both_ends() {
        let kinds = [Kind::Value, Kind::Written(Written::File)];
        assert_eq!(assign(&kinds, Some(0), 3), vec![Some(0), Some(0), Some(1)]);
        assert_eq!(assign(&kinds, None, 3), vec![Some(0), Some(1), None]);
        assert_eq!(
            assign(&[Kind::Written(Written::File), Kind::Value], Some(1), 1),
            vec![Some(0)]
        );
        assert_eq!(
            assign(
                &[
                    Kind::Written(Written::File),
                    Kind::Value,
                    Kind::Written(Written::File)
                ],
                Some(1),
                4
            ),
            vec![Some(0), Some(1), Some(1), Some(2)]
        );
    }
}
