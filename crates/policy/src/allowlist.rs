//! Allowlist patterns: globs over the canonical absolute path of the executable that will
//! run (`*` and `?` never cross `/`; `**` does; `~` is the executing user's home), or bare
//! names that match only a bare-name invocation resolved through the trusted PATH.
//!
//! Patterns are compiled once into two `GlobSet`s. An invalid pattern is rejected when
//! written ([`validate_pattern`]) and, if one is found in a stored file, never matches.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use globset::{ErrorKind, Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use serde::Serialize;

use crate::PolicyError;
use crate::exe::{Invocation, ResolvedExe};
use crate::profiles::{ProfileHit, Profiles};
use crate::rules::{ArgPatterns, RuleSpec};
use crate::shell::base_name;

/// How patterns compare letters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaseMode {
    /// Exact (Linux: `~/TOOLS/x` must not satisfy `~/tools/*`).
    Sensitive,
    /// Folded (macOS and Windows filesystems are case-insensitive).
    Insensitive,
}

impl CaseMode {
    /// The mode for the filesystems of the platform Warden was built for.
    pub const fn for_this_platform() -> CaseMode {
        if cfg!(any(target_os = "macos", target_os = "windows")) {
            CaseMode::Insensitive
        } else {
            CaseMode::Sensitive
        }
    }
}

/// A pattern's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PatternKind {
    /// No `/`: matches the name of a bare invocation.
    BareName,
    /// Absolute (after `~` expansion): matches the canonical path.
    Path,
}

/// A pattern found invalid while loading; it never matches.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RejectedPattern {
    /// The pattern as stored.
    pub pattern: String,
    /// Why it can never match.
    pub reason: String,
}

fn invalid(pattern: &str, reason: impl Into<String>) -> PolicyError {
    PolicyError::InvalidPattern {
        pattern: pattern.to_owned(),
        reason: reason.into(),
    }
}

/// Check a pattern before it is stored; returns its kind.
pub fn validate_pattern(pattern: &str) -> Result<PatternKind, PolicyError> {
    if pattern.is_empty() {
        return Err(invalid(pattern, "empty"));
    }
    if pattern.chars().any(|c| c.is_control()) {
        return Err(invalid(pattern, "contains a control character"));
    }
    if pattern.trim() != pattern {
        return Err(invalid(pattern, "leading or trailing whitespace"));
    }
    let kind = if pattern.starts_with('/') || pattern.starts_with("~/") {
        PatternKind::Path
    } else if pattern.starts_with('~') {
        return Err(invalid(
            pattern,
            "only `~/` (the executing user's home) is supported",
        ));
    } else if pattern.contains('/') {
        return Err(invalid(
            pattern,
            "relative paths are not allowed: use an absolute path, `~/...`, or a bare program name",
        ));
    } else {
        PatternKind::BareName
    };
    if kind == PatternKind::Path && pattern.split('/').any(|c| c == "..") {
        return Err(invalid(
            pattern,
            "`..` is not allowed; patterns match canonical paths",
        ));
    }
    build_glob(pattern, Path::new("/home/validate"), CaseMode::Sensitive)
        .map_err(|e| invalid(pattern, e.to_string()))?;
    Ok(kind)
}

fn build_glob(pattern: &str, home: &Path, case: CaseMode) -> Result<Glob, ErrorKind> {
    GlobBuilder::new(&expand_home(pattern, home))
        .literal_separator(true)
        .backslash_escape(true)
        .case_insensitive(case == CaseMode::Insensitive)
        .build()
        .map_err(|e| e.kind().clone())
}

/// Rules with one literal path, indexed by the literal first argument word each needs
/// (`status` of `git status …`), so that a thousand rules for one program cost a hash
/// lookup, not a scan.
#[derive(Clone, Debug, Default)]
struct LiteralGroup {
    by_first: HashMap<String, Vec<usize>>,
    rest: Vec<usize>,
}

/// Patterns of one kind: exact strings in a hash map (the common case: "allow always"
/// stores exact paths), real globs in a `GlobSet`. Indices refer to stored order.
#[derive(Clone, Debug)]
struct KindMatcher {
    literals: HashMap<String, LiteralGroup>,
    globs: GlobSet,
    glob_index: Vec<usize>,
    case: CaseMode,
}

impl KindMatcher {
    fn build(entries: Vec<(usize, String, Glob, Option<String>)>, case: CaseMode) -> KindMatcher {
        let mut literals: HashMap<String, LiteralGroup> = HashMap::new();
        let mut builder = GlobSetBuilder::new();
        let mut glob_index = Vec::new();
        for (index, expanded, glob, first) in entries {
            if expanded.contains(['*', '?', '[', ']', '{', '}', '\\']) {
                builder.add(glob);
                glob_index.push(index);
            } else {
                let group = literals
                    .entry(fold(&expanded, case).into_owned())
                    .or_default();
                match first {
                    Some(word) => group.by_first.entry(word).or_default().push(index),
                    None => group.rest.push(index),
                }
            }
        }
        KindMatcher {
            literals,
            // Each glob compiled on its own, so building the set cannot fail; if it
            // somehow did, an empty set (matches nothing) is the fail-closed answer.
            globs: builder.build().unwrap_or_else(|_| GlobSet::empty()),
            glob_index,
            case,
        }
    }

    /// The stored indices of the patterns that match `text` and might match a command
    /// whose first argument is `first` (`None`: whatever the arguments).
    fn candidates(&self, text: &str, first: Option<Option<&str>>, out: &mut Vec<usize>) {
        if let Some(group) = self.literals.get(fold(text, self.case).as_ref()) {
            out.extend_from_slice(&group.rest);
            match first {
                None => group
                    .by_first
                    .values()
                    .for_each(|l| out.extend_from_slice(l)),
                Some(word) => {
                    if let Some(list) = word.and_then(|f| group.by_first.get(f)) {
                        out.extend_from_slice(list);
                    }
                }
            }
        }
        if !self.glob_index.is_empty() && self.globs.is_match(text) {
            out.extend(
                self.globs
                    .matches(text)
                    .into_iter()
                    .map(|i| self.glob_index[i]),
            );
        }
    }
}

fn fold(text: &str, case: CaseMode) -> std::borrow::Cow<'_, str> {
    match case {
        CaseMode::Sensitive => std::borrow::Cow::Borrowed(text),
        CaseMode::Insensitive => std::borrow::Cow::Owned(text.to_lowercase()),
    }
}

/// A usable rule: what was stored, and its compiled argument patterns.
#[derive(Clone, Debug)]
struct Compiled {
    spec: RuleSpec,
    args: ArgPatterns,
}

/// A compiled allowlist, with the profiles that narrow what its entries allow.
#[derive(Clone, Debug)]
pub struct Allowlist {
    rules: Vec<Compiled>,
    paths: KindMatcher,
    bare: KindMatcher,
    rejected: Vec<RejectedPattern>,
    profiles: Arc<Profiles>,
}

impl Default for Allowlist {
    fn default() -> Self {
        Allowlist::compile(&[], Path::new("/"), CaseMode::Sensitive)
    }
}

/// `~` replaced by the home directory — escaped, so glob characters in the home's own
/// name match only themselves.
fn expand_home(pattern: &str, home: &Path) -> String {
    match pattern.strip_prefix('~') {
        Some(rest) => format!(
            "{}{rest}",
            escape_glob(home.to_string_lossy().trim_end_matches('/'))
        ),
        None => pattern.to_owned(),
    }
}

/// How one command segment fares against the allowlist.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleMatch {
    /// The first entry (stored order) that allows the segment.
    pub rule: Option<RuleSpec>,
    /// The profile hits of the segment.
    pub hits: Vec<ProfileHit>,
    /// An entry that names the program and its arguments but does not allow the hits,
    /// when no entry allows the segment.
    pub blocked: Option<RuleSpec>,
}

impl Allowlist {
    /// Compile stored patterns (entries without argument rules) with the shipped
    /// profiles. Invalid ones are set aside (see [`Allowlist::rejected`]).
    pub fn compile(patterns: &[String], home: &Path, case: CaseMode) -> Allowlist {
        let rules: Vec<RuleSpec> = patterns.iter().map(RuleSpec::program).collect();
        Allowlist::compile_rules(&rules, home, case, Profiles::shipped())
    }

    /// Compile stored entries against `profiles`. Invalid ones (pattern, argument
    /// patterns, or examples that do not hold) are set aside and never match.
    pub fn compile_rules(
        rules: &[RuleSpec],
        home: &Path,
        case: CaseMode,
        profiles: Arc<Profiles>,
    ) -> Allowlist {
        let (mut paths, mut bare, mut usable, mut rejected) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for rule in rules {
            let pattern = &rule.pattern;
            let compiled = validate_pattern(pattern)
                .and_then(|kind| rule.validate(&profiles).map(|()| kind))
                .map_err(|e| match e {
                    PolicyError::InvalidPattern { reason, .. } => reason,
                    other => other.to_string(),
                })
                .and_then(|kind| {
                    build_glob(pattern, home, case)
                        .map(|g| (kind, g))
                        .map_err(|e| e.to_string())
                })
                .and_then(|(kind, glob)| {
                    ArgPatterns::compile(rule)
                        .map(|args| (kind, glob, args))
                        .map_err(|e| e.to_string())
                });
            match compiled {
                Ok((kind, glob, args)) => {
                    let first = args.first_literal().map(str::to_owned);
                    let entry = (usable.len(), expand_home(pattern, home), glob, first);
                    match kind {
                        PatternKind::Path => paths.push(entry),
                        PatternKind::BareName => bare.push(entry),
                    }
                    usable.push(Compiled {
                        spec: rule.clone(),
                        args,
                    });
                }
                Err(reason) => rejected.push(RejectedPattern {
                    pattern: rule.describe(),
                    reason,
                }),
            }
        }
        Allowlist {
            rules: usable,
            paths: KindMatcher::build(paths, case),
            bare: KindMatcher::build(bare, case),
            rejected,
            profiles,
        }
    }

    /// Patterns that were stored but can never match.
    pub fn rejected(&self) -> &[RejectedPattern] {
        &self.rejected
    }

    /// Number of usable patterns.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// True if no usable pattern exists.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The profiles these entries are checked against.
    pub fn profiles(&self) -> &Arc<Profiles> {
        &self.profiles
    }

    fn candidates(&self, exe: &ResolvedExe, first: Option<Option<&str>>) -> Vec<usize> {
        let mut out = Vec::new();
        if let Some(p) = exe.path.to_str() {
            self.paths.candidates(p, first, &mut out);
        }
        if exe.how == Invocation::Bare {
            self.bare.candidates(&exe.invoked, first, &mut out);
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The first stored pattern that `exe` satisfies, whatever the arguments: path
    /// patterns against the canonical path, bare names against the name of a bare
    /// invocation.
    pub fn find_match(&self, exe: &ResolvedExe) -> Option<&str> {
        let index = *self.candidates(exe, None).first()?;
        Some(&self.rules[index].spec.pattern)
    }

    /// Match one segment: `exe` is the resolved program, `argv` its words (argv[0] as
    /// invoked). The first entry whose path and arguments match and which allows every
    /// profile hit wins.
    pub fn match_command(
        &self,
        exe: &ResolvedExe,
        argv: &[String],
        inv: &crate::profiles::Invocation<'_>,
    ) -> RuleMatch {
        self.match_with_hits(exe, argv, self.hits(exe, argv, inv))
    }

    /// [`Allowlist::match_command`] with the profile hits already found
    /// ([`Profiles::examine`]).
    pub fn match_with_hits(
        &self,
        exe: &ResolvedExe,
        argv: &[String],
        hits: Vec<ProfileHit>,
    ) -> RuleMatch {
        let args = argv.get(1..).unwrap_or_default();
        let candidates = self.candidates(exe, Some(args.first().map(String::as_str)));
        // The hits are wanted even when no entry names the program: "allow always"
        // stores a command that uses one exactly as written.
        let mut result = RuleMatch {
            hits,
            ..RuleMatch::default()
        };
        for index in candidates {
            let rule = &self.rules[index];
            if !rule.args.matches(args) {
                continue;
            }
            if result
                .hits
                .iter()
                .all(|h| h.allowed_by(&rule.spec.allow_flags))
            {
                result.rule = Some(rule.spec.clone());
                result.blocked = None;
                return result;
            }
            if result.blocked.is_none() {
                result.blocked = Some(rule.spec.clone());
            }
        }
        result
    }

    /// The profile hits of a segment, by both the name it was called by and the name of
    /// the file it resolved to (`awk` → `mawk`, `vi` → `vim.basic`).
    pub fn hits(
        &self,
        exe: &ResolvedExe,
        argv: &[String],
        inv: &crate::profiles::Invocation<'_>,
    ) -> Vec<ProfileHit> {
        let invoked = base_name(argv.first().map_or("", String::as_str));
        let resolved = exe.path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        self.profiles.examine(&[invoked, resolved], argv, inv).hits
    }
}

/// Escape glob metacharacters so a path pattern matches exactly that path.
pub fn escape_glob(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests;
