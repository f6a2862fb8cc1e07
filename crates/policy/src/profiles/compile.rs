//! Compiling a `[[program]]` of a profiles document: its names, rules and grammar
//! checked and built into a [`Program`], an operator's program merged into a shipped one
//! of the same name, and every rule's and grammar's examples run.

use super::grammar;
use super::hits::program_hits;
use super::schema::{ProgramSpec, RuleSpecToml};
use super::writes::Invocation;
use super::{Program, Rule};
use crate::profile_error::{ProfileError, ProgramProblem};
use crate::word_pattern::WordPattern;

pub(super) fn merge(into: &mut Program, from: Program) {
    for n in from.names {
        if !into.names.contains(&n) {
            into.names.push(n);
        }
    }
    into.subcommands |= from.subcommands;
    into.abbreviations |= from.abbreviations;
    into.single_dash_long |= from.single_dash_long;
    into.old_style |= from.old_style;
    into.short_values.push_str(&from.short_values);
    into.short_optional.push_str(&from.short_optional);
    into.long_values.extend(from.long_values);
    into.script = into.script.or(from.script);
    into.rules.extend(from.rules);
    match (&mut into.grammar, from.grammar) {
        (Some(existing), Some(added)) => grammar::merge(existing, added),
        (slot @ None, added) => *slot = added,
        (Some(_), None) => {}
    }
}

/// The error of `problem` in the program `label`.
fn program_error(label: &str, problem: ProgramProblem) -> ProfileError {
    ProfileError::Program {
        program: label.to_owned(),
        problem,
    }
}

pub(super) fn compile_program(spec: &ProgramSpec) -> Result<Program, ProfileError> {
    if spec.names.is_empty() || spec.names.iter().any(|n| n.is_empty() || n.contains('/')) {
        return Err(ProfileError::NoNames {
            names: spec.names.clone(),
        });
    }
    let label = spec.names[0].clone();
    let check_flag = |f: &str| -> Result<(), ProfileError> {
        if !f.starts_with('-') || f == "-" || f == "--" || f.contains('=') {
            return Err(program_error(
                &label,
                ProgramProblem::NotAnOption(f.to_owned()),
            ));
        }
        Ok(())
    };
    for f in &spec.long_values {
        check_flag(f)?;
    }
    let mut rules = Vec::new();
    for r in &spec.rule {
        rules.push(compile_rule(&label, r, &check_flag)?);
    }
    let mut short_values = spec.short_values.clone();
    let mut long_values = spec.long_values.clone();
    // An option a rule inspects the value of takes a value.
    for r in &rules {
        if r.values.is_empty() || r.equals_only {
            continue;
        }
        for f in &r.flags {
            match f.strip_prefix("--") {
                Some(_) => long_values.push(f.clone()),
                None if f.len() == 2 => short_values.push_str(&f[1..]),
                None => {}
            }
        }
    }
    let grammar = spec
        .grammar
        .as_ref()
        .map(|g| grammar::compile(&label, g))
        .transpose()?;
    let subcommands = spec.subcommands || grammar.as_ref().is_some_and(|g| g.top.has_subcommands());
    Ok(Program {
        label,
        names: spec.names.clone(),
        subcommands,
        grammar,
        abbreviations: spec.abbreviations,
        single_dash_long: spec.single_dash_long,
        old_style: spec.old_style,
        short_values,
        short_optional: spec.short_optional_values.clone(),
        long_values,
        script: spec.script,
        rules,
    })
}

fn compile_rule(
    label: &str,
    r: &RuleSpecToml,
    check_flag: &dyn Fn(&str) -> Result<(), ProfileError>,
) -> Result<Rule, ProfileError> {
    for f in &r.flags {
        check_flag(f)?;
    }
    let err = |problem| program_error(label, problem);
    let rule = || r.name.clone();
    if r.flags.is_empty() && r.words.is_empty() && r.subcommands.is_empty() && !r.any {
        return Err(err(ProgramProblem::RuleMatchesNothing { rule: rule() }));
    }
    if r.name.trim().is_empty() || r.reason.trim().is_empty() {
        return Err(err(ProgramProblem::RuleUnnamed));
    }
    if !r.values.is_empty() && r.flags.is_empty() {
        return Err(err(ProgramProblem::ValuesWithoutFlags { rule: rule() }));
    }
    let compile = |list: &[String], lower: bool| -> Result<Vec<WordPattern>, ProfileError> {
        list.iter()
            .map(|p| {
                let p = if lower { p.to_lowercase() } else { p.clone() };
                WordPattern::compile(&p).map_err(|error| {
                    err(ProgramProblem::RulePattern {
                        rule: rule(),
                        error,
                    })
                })
            })
            .collect()
    };
    Ok(Rule {
        name: r.name.clone(),
        reason: r.reason.clone(),
        flags: r.flags.clone(),
        values: compile(&r.values, true)?,
        equals_only: r.equals_only,
        words: compile(&r.words, false)?,
        subcommands: r.subcommands.clone(),
        unless: r.unless.clone(),
        any: r.any,
        place: r.place,
    })
}

/// Shipped and user rules carry examples: each `hit` must trigger the rule, each
/// `miss` must not; a grammar's `accept` examples must be accepted whole and its
/// `refuse` ones refused (read in [`EXAMPLE_CWD`], which alone is writable).
pub(super) fn check_examples(program: &Program, spec: &ProgramSpec) -> Result<(), ProfileError> {
    let inv = Invocation::example();
    let err = |problem| program_error(&program.label, problem);
    if let Some(examples) = spec.grammar.as_ref().and_then(|g| g.examples.as_ref()) {
        for (argv, want) in examples
            .accept
            .iter()
            .map(|a| (a, true))
            .chain(examples.refuse.iter().map(|a| (a, false)))
        {
            if argv.is_empty() {
                return Err(err(ProgramProblem::EmptyGrammarExample));
            }
            let hits = program_hits(program, argv, &inv);
            match (want, hits.first()) {
                (true, Some(h)) => {
                    return Err(err(ProgramProblem::NotAccepted {
                        example: argv.clone(),
                        word: h.word.clone(),
                        reason: h.reason.clone(),
                    }));
                }
                (false, None) => {
                    return Err(err(ProgramProblem::NotRefused {
                        example: argv.clone(),
                    }));
                }
                _ => {}
            }
        }
    }
    for r in &spec.rule {
        for (argv, want) in r
            .examples
            .hit
            .iter()
            .map(|a| (a, true))
            .chain(r.examples.miss.iter().map(|a| (a, false)))
        {
            if argv.is_empty() {
                return Err(err(ProgramProblem::EmptyRuleExample {
                    rule: r.name.clone(),
                }));
            }
            let got = program_hits(program, argv, &inv)
                .iter()
                .any(|h| h.name == r.name);
            if got != want {
                let (rule, example) = (r.name.clone(), argv.clone());
                return Err(err(if want {
                    ProgramProblem::NoHit { rule, example }
                } else {
                    ProgramProblem::UnwantedHit { rule, example }
                }));
            }
        }
    }
    Ok(())
}
