//! What a program's profile finds in a command line: the refusals of its grammar's
//! reading, then the rules it uses ([`hits_of`]).

use super::check;
use super::scan::{self, Phase, Token, walk};
use super::schema::Where;
use super::writes::Invocation;
use super::{ProfileHit, Program};
use crate::word_pattern::WordPattern;

/// Case-insensitive glob over an option's value (git keys and ssh options ignore case).
fn value_matches(patterns: &[WordPattern], value: &str) -> bool {
    let value = value.to_lowercase();
    patterns.iter().any(|p| p.matches(&value))
}

/// Whether option `name` as written (`--out`, `-c`, `-exec`) names `flag`.
fn names_flag(program: &Program, name: &str, flag: &str) -> bool {
    if name == flag {
        return true;
    }
    match (name.strip_prefix("--"), flag.strip_prefix("--")) {
        // GNU getopt_long and git accept any unambiguous prefix; an ambiguous one is
        // refused by the program, so counting it is only ever cautious.
        // Even one letter: `sed --e=CMD` is `--expression`, `gawk --e FILE` `--exec`.
        (Some(n), Some(f)) => program.abbreviations && !n.is_empty() && f.starts_with(n),
        (None, None) if flag.len() > 2 && program.single_dash_long => {
            // `-exec`, `-execdir`; zip's `-TT` inside a cluster such as `-rTT`.
            name.len() > 1 && name[1..].contains(&flag[1..])
        }
        _ => false,
    }
}

pub(super) fn program_hits(
    program: &Program,
    argv: &[String],
    inv: &Invocation<'_>,
) -> Vec<ProfileHit> {
    let reading = program
        .grammar
        .as_ref()
        .map(|g| check::read(&program.label, g, program.script, argv, inv));
    hits_of(program, argv, reading.as_ref())
}

/// The hits of `argv` for `program`: the refusals of its grammar's `reading`, then its
/// rules.
pub(super) fn hits_of(
    program: &Program,
    argv: &[String],
    reading: Option<&check::Reading>,
) -> Vec<ProfileHit> {
    let mut hits: Vec<ProfileHit> = Vec::new();
    if let Some(reading) = reading {
        for r in &reading.refusals {
            hits.push(ProfileHit {
                program: program.label.clone(),
                name: r.name.clone(),
                reason: r.reason.clone(),
                word: argv.get(r.index).cloned().unwrap_or_default(),
            });
        }
    }
    let mut add = |rule_name: &str, reason: &str, word: &str| {
        if !hits.iter().any(|h| h.name == rule_name) {
            hits.push(ProfileHit {
                program: program.label.clone(),
                name: rule_name.to_owned(),
                reason: reason.to_owned(),
                word: word.to_owned(),
            });
        }
    };
    // A grammar reads its scripts itself.
    if let Some(script) = program.script.filter(|_| program.grammar.is_none()) {
        for (name, reason, word) in scan::script_hits(program, script, argv) {
            add(&name, &reason, &word);
        }
    }
    if program.rules.is_empty() {
        // A grammar alone (most programs with one): nothing more to look for.
        return hits;
    }
    let tokens: Vec<Token> = walk(program, argv).collect();
    let subcommand = tokens.iter().find_map(|t| match t {
        Token::Subcommand { index } => Some(argv[*index].as_str()),
        _ => None,
    });
    let after_sub: Vec<&str> = match tokens.iter().find_map(|t| match t {
        Token::Subcommand { index } => Some(*index),
        _ => None,
    }) {
        Some(i) => argv[i + 1..].iter().map(String::as_str).collect(),
        None if program.subcommands => Vec::new(),
        None => argv.iter().skip(1).map(String::as_str).collect(),
    };
    for rule in &program.rules {
        let in_scope = rule.subcommands.is_empty()
            || subcommand.is_some_and(|s| rule.subcommands.iter().any(|r| r == s));
        if !in_scope || after_sub.iter().any(|w| rule.unless.iter().any(|u| u == w)) {
            continue;
        }
        if rule.any {
            add(
                &rule.name,
                &rule.reason,
                argv.first().map_or("", String::as_str),
            );
            continue;
        }
        if rule.flags.is_empty() && rule.words.is_empty() {
            // A rule about the subcommand itself.
            if let Some(s) = subcommand {
                add(&rule.name, &rule.reason, s);
            }
            continue;
        }
        for token in &tokens {
            let (phase, word_index) = match token {
                Token::Option { phase, index, .. } | Token::Operand { phase, index } => {
                    (*phase, *index)
                }
                Token::Subcommand { .. } => continue,
            };
            let place_ok = match (rule.place, phase) {
                (Where::Anywhere, _) => true,
                (Where::Global, Phase::Global) => true,
                (Where::Subcommand, Phase::AfterSubcommand) => true,
                // Single-purpose tools have one phase: every rule applies.
                (_, Phase::Only) => true,
                _ => false,
            };
            if !place_ok {
                continue;
            }
            let word = &argv[word_index];
            match token {
                Token::Option { name, value, .. } => {
                    let named = rule.flags.iter().any(|f| names_flag(program, name, f));
                    if !named {
                        continue;
                    }
                    let value = match (rule.equals_only, value) {
                        (true, _) => word.split_once('=').map(|(_, v)| v),
                        (false, v) => v.as_deref(),
                    };
                    let hit = if rule.values.is_empty() && !rule.equals_only {
                        true
                    } else {
                        value.is_some_and(|v| {
                            rule.values.is_empty() || value_matches(&rule.values, v)
                        })
                    };
                    if hit {
                        add(&rule.name, &rule.reason, word);
                    }
                }
                _ => {
                    if rule.words.iter().any(|p| p.matches(word)) {
                        add(&rule.name, &rule.reason, word);
                    }
                }
            }
        }
    }
    hits
}
