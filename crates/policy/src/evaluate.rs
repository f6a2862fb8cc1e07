//! Matching an analysed command against an allowlist, and rebuilding what will actually
//! run: every program replaced by the resolved file that matched, every word quoted.

use std::path::Path;

use caps::Fs;
use serde::Serialize;

use crate::allowlist::Allowlist;
use crate::exe::{ResolveFailure, ResolvedExe, TrustedPath, resolve_executable};
use crate::profiles::{GrammarTrace, Invocation, ProfileHit};
use crate::rules::RuleSpec;
use crate::shell::{Chain, CommandInput, Miss, Segment, analyze, base_name, quote};

/// Remembers executable resolutions (name and, for relative names, cwd → result) for
/// callers that evaluate many commands against an unchanging filesystem. A stale entry
/// only affects the *decision*; the runner still executes the resolved path it was given,
/// so use a cache only where a short staleness window is acceptable.
#[derive(Debug, Default)]
pub struct ExeCache {
    /// Bare and absolute names: the result does not depend on the working directory.
    by_name:
        std::sync::Mutex<std::collections::HashMap<String, Result<ResolvedExe, ResolveFailure>>>,
    /// Relative names, keyed by working directory and name.
    relative: std::sync::Mutex<
        std::collections::HashMap<
            (std::path::PathBuf, String),
            Result<ResolvedExe, ResolveFailure>,
        >,
    >,
}

impl ExeCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    fn resolve(
        &self,
        fs: &dyn Fs,
        name: &str,
        cwd: &Path,
        trusted: &TrustedPath,
    ) -> Result<ResolvedExe, ResolveFailure> {
        if name.contains('/') && !name.starts_with('/') {
            let key = (cwd.to_path_buf(), name.to_owned());
            let mut map = self.relative.lock().unwrap_or_else(|p| p.into_inner());
            return map
                .entry(key)
                .or_insert_with(|| resolve_executable(fs, name, cwd, trusted))
                .clone();
        }
        if let Some(hit) = self
            .by_name
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
        {
            return hit.clone();
        }
        let result = resolve_executable(fs, name, cwd, trusted);
        self.by_name
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_owned(), result.clone());
        result
    }
}

/// Where and against what a command is evaluated.
#[derive(Clone, Copy, Debug)]
pub struct EvalContext<'a> {
    /// The executing host's filesystem (for executable resolution).
    pub fs: &'a dyn Fs,
    /// The working directory of the command.
    pub cwd: &'a Path,
    /// The executing host's trusted PATH.
    pub trusted_path: &'a TrustedPath,
    /// The agent's allowlist on the executing host.
    pub allowlist: &'a Allowlist,
    /// An optional resolution cache (see [`ExeCache`]).
    pub cache: Option<&'a ExeCache>,
    /// Directories an allowlisted command may not name (real paths: Warden's state on a
    /// host where commands run outside the sandbox; empty in the sandbox, which hides
    /// them): an argument that reaches one makes the segment a miss
    /// ([`crate::protected`]).
    pub protected: &'a [std::path::PathBuf],
    /// Where the run may write besides its working directory (`sandbox.writable_paths`):
    /// a path a program's grammar marks as written must lie inside one of these or the
    /// working directory.
    pub writable: &'a [std::path::PathBuf],
}

impl EvalContext<'_> {
    /// Resolve `name` as this context would run it (through the cache, if any).
    pub fn resolve(&self, name: &str) -> Result<ResolvedExe, ResolveFailure> {
        match self.cache {
            Some(cache) => cache.resolve(self.fs, name, self.cwd, self.trusted_path),
            None => resolve_executable(self.fs, name, self.cwd, self.trusted_path),
        }
    }
}

/// One segment that must satisfy the allowlist.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LeafMatch {
    /// The segment's argv.
    pub argv: Vec<String>,
    /// The program word (after wrappers).
    pub program: String,
    /// Where the program word is in `argv` (after any wrappers).
    #[serde(skip)]
    pub program_index: usize,
    /// For a multi-command tool (git, cargo…): where its subcommand is, counted from
    /// the program word.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subcommand: Option<usize>,
    /// Whether its profile says it is a multi-command tool.
    #[serde(skip)]
    pub multi_command: bool,
    /// The file it resolves to, if it does.
    pub resolved: Option<ResolvedExe>,
    /// Why it does not resolve.
    pub failure: Option<ResolveFailure>,
    /// The allowlist entry it satisfies, in one line ([`RuleSpec::describe`]).
    pub matched: Option<String>,
    /// That entry as stored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<RuleSpec>,
    /// Words its program's grammar refused, or flags, subcommands and script commands of
    /// its program's rules that it uses.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub profile: Vec<ProfileHit>,
    /// How its program's grammar read it, word by word (programs with a grammar).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grammar: Option<GrammarTrace>,
    /// Why an entry naming this program (and its arguments) does not allow it: the
    /// profile hits it does not allow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked: Option<String>,
}

impl LeafMatch {
    fn unresolved(
        argv: Vec<String>,
        program: String,
        program_index: usize,
        failure: ResolveFailure,
    ) -> LeafMatch {
        LeafMatch {
            argv,
            program,
            program_index,
            subcommand: None,
            multi_command: false,
            resolved: None,
            failure: Some(failure),
            matched: None,
            rule: None,
            profile: Vec::new(),
            grammar: None,
            blocked: None,
        }
    }
}

/// The command to execute instead of the original, for an allowlist-satisfied command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "lowercase")]
pub enum Rebuilt {
    /// A single simple command: executed as an argv, no shell involved.
    Argv(Vec<String>),
    /// A list: executed by `/bin/sh -c`, every word quoted, every program absolute.
    Script(String),
}

/// The result of evaluating one command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Evaluation {
    /// The analysed command, or why it is not a plain list of literal simple commands.
    /// In JSON: `{"chain": ...}` or `{"miss": ...}`.
    #[serde(serialize_with = "serialize_analysis")]
    pub analysis: Result<Chain, Miss>,
    /// Every segment that must match, with its resolution and matching pattern.
    pub leaves: Vec<LeafMatch>,
    /// True when the analysis succeeded and every leaf matched.
    pub satisfied: bool,
    /// What runs if the command runs because the allowlist is satisfied.
    pub rebuilt: Option<Rebuilt>,
    /// A word that was looked through as a wrapper or a shell but is not the file its bare
    /// name resolves to on the trusted PATH (`./nice`, `/tmp/x/bash -c ...`): it is a
    /// program in its own right, which no allowlist entry vouched for, so nothing is
    /// satisfied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impostor: Option<String>,
}

impl Evaluation {
    /// Why an entry that names a program does not allow the command: the first profile
    /// hit no entry allows (`git -c alias.*: runs arbitrary commands (entry … does not
    /// allow it)`).
    pub fn blocked(&self) -> Option<&str> {
        self.leaves.iter().find_map(|l| l.blocked.as_deref())
    }
}

fn serialize_analysis<S: serde::Serializer>(
    analysis: &Result<Chain, Miss>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = serializer.serialize_map(Some(1))?;
    match analysis {
        Ok(chain) => map.serialize_entry("chain", chain)?,
        Err(miss) => map.serialize_entry("miss", miss)?,
    }
    map.end()
}

/// Analyse `input` and match it against `ctx.allowlist`.
pub fn evaluate(input: CommandInput<'_>, ctx: &EvalContext<'_>) -> Evaluation {
    let analysis = analyze(input);
    let Ok(chain) = &analysis else {
        return Evaluation {
            analysis,
            leaves: Vec::new(),
            satisfied: false,
            rebuilt: None,
            impostor: None,
        };
    };
    let leaves: Vec<LeafMatch> = chain
        .leaves_with_stdin()
        .into_iter()
        .map(|(segment, stdin_piped)| {
            let program = segment.program_word().to_owned();
            match ctx.resolve(&program) {
                Ok(exe) => {
                    let command = &segment.argv[segment.program..];
                    let inv = Invocation {
                        fs: Some(ctx.fs),
                        cwd: ctx.cwd,
                        writable: ctx.writable,
                        protected: ctx.protected,
                        stdin_piped,
                    };
                    let resolved_name = exe.path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                    let invoked = base_name(&program);
                    // One reading per program: what its grammar refuses, how it read
                    // each word, where the subcommand is.
                    let examined = ctx
                        .allowlist
                        .profiles()
                        .examine(&[invoked, resolved_name], command, &inv);
                    let m = ctx.allowlist.match_with_hits(&exe, command, examined.hits);
                    let multi_command = examined.multi_command;
                    let subcommand = examined.subcommand;
                    let grammar = examined.trace;
                    // An entry allows the program, not a way into Warden's own files.
                    let reaching = m.rule.as_ref().and_then(|_| {
                        crate::protected::reaches_protected(
                            ctx.fs,
                            command.get(1..).unwrap_or_default(),
                            ctx.cwd,
                            ctx.protected,
                        )
                    });
                    let mut m = m;
                    let blocked = if let Some((word, dir)) = &reaching {
                        m.rule.take().map(|entry| {
                            format!(
                                "{word:?} reaches {}, where Warden keeps its own files (entry {} allows the program, not that)",
                                dir.display(),
                                entry.describe()
                            )
                        })
                    } else {
                        m.blocked.as_ref().map(|entry| {
                        let refused: Vec<String> = m
                            .hits
                            .iter()
                            .filter(|h| !h.allowed_by(&entry.allow_flags))
                            .map(ToString::to_string)
                            .collect();
                        format!(
                            "{} (entry {} does not allow it)",
                            refused.join("; "),
                            entry.describe()
                        )
                        })
                    };
                    LeafMatch {
                        argv: segment.argv.clone(),
                        program_index: segment.program,
                        subcommand,
                        multi_command,
                        matched: m.rule.as_ref().map(RuleSpec::describe),
                        rule: m.rule,
                        profile: m.hits,
                        grammar,
                        blocked,
                        program,
                        resolved: Some(exe),
                        failure: None,
                    }
                }
                Err(failure) => {
                    LeafMatch::unresolved(segment.argv.clone(), program, segment.program, failure)
                }
            }
        })
        .collect();
    let impostor = impostor(chain, ctx);
    let satisfied =
        !leaves.is_empty() && leaves.iter().all(|l| l.matched.is_some()) && impostor.is_none();
    let rebuilt = if satisfied {
        rebuild(chain, input, ctx)
    } else {
        None
    };
    Evaluation {
        // A satisfied command that cannot be rebuilt (a wrapper vanished between the two
        // lookups) must not run: treat it as not satisfied.
        satisfied: satisfied && rebuilt.is_some(),
        analysis,
        leaves,
        rebuilt,
        impostor,
    }
}

/// The first looked-through word (a wrapper, or a shell whose payload was analysed) that
/// is not the trusted PATH's file of that name. Only the system's `nice` or `bash` may be
/// looked through; any other file so named would run unmatched.
fn impostor(chain: &Chain, ctx: &EvalContext<'_>) -> Option<String> {
    chain.segments.iter().find_map(|segment| {
        let shell = segment.nested.as_ref().map(|_| segment.program);
        let own = segment.wrappers.iter().copied().chain(shell).find(|&i| {
            let word = &segment.argv[i];
            let genuine = match (ctx.resolve(word), ctx.resolve(base_name(word))) {
                (Ok(as_written), Ok(system)) => as_written.path == system.path,
                _ => false,
            };
            !genuine
        });
        own.map(|i| segment.argv[i].clone()).or_else(|| {
            segment
                .nested
                .as_ref()
                .and_then(|inner| impostor(inner, ctx))
        })
    })
}

fn resolve_path(word: &str, ctx: &EvalContext<'_>) -> Option<String> {
    ctx.resolve(word)
        .ok()
        .map(|e| e.path.to_string_lossy().into_owned())
}

/// The segment's argv with every wrapper and the program replaced by absolute paths, and
/// a nested shell payload replaced by its own rebuilt text.
fn rebuild_segment(segment: &Segment, ctx: &EvalContext<'_>) -> Option<Vec<String>> {
    let mut argv = segment.argv.clone();
    for &i in segment
        .wrappers
        .iter()
        .chain(std::iter::once(&segment.program))
    {
        argv[i] = resolve_path(&segment.argv[i], ctx)?;
    }
    if let Some(inner) = &segment.nested {
        argv[segment.program + 2] = rebuild_script(inner, ctx)?;
    }
    Some(argv)
}

fn rebuild_script(chain: &Chain, ctx: &EvalContext<'_>) -> Option<String> {
    let mut out = String::new();
    for (i, segment) in chain.segments.iter().enumerate() {
        if i > 0 {
            out.push_str(chain.ops[i - 1].as_shell());
        }
        let argv = rebuild_segment(segment, ctx)?;
        out.push_str(&argv.iter().map(|w| quote(w)).collect::<Vec<_>>().join(" "));
    }
    Some(out)
}

fn rebuild(chain: &Chain, input: CommandInput<'_>, ctx: &EvalContext<'_>) -> Option<Rebuilt> {
    match (input, chain.segments.as_slice()) {
        (CommandInput::Argv(_), [segment]) | (CommandInput::Shell(_), [segment]) => {
            rebuild_segment(segment, ctx).map(Rebuilt::Argv)
        }
        _ => rebuild_script(chain, ctx).map(Rebuilt::Script),
    }
}
