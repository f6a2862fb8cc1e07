//! Command analysis: an argv, or a shell string parsed with a real bash parser, becomes a
//! chain of simple-command segments joined by `&&`, `||`, `;` and `|` — or a *miss*.
//!
//! The accepted syntax is a positive list: simple commands whose words are all literal
//! (quoting allowed), joined by those four operators. Anything else — expansions,
//! substitutions, redirections, assignments, subshells, groups, functions, control flow,
//! background jobs, heredocs, `!`, `time`, parse errors — makes the whole command a miss,
//! which can only lead to asking or denying, never to running something unchecked.
//!
//! Every input is bounded before the parser sees it ([`bounds`], [`compound`]): size,
//! nesting depth, and everything the parser would recurse on, so no string crashes or
//! stalls the analysis (security invariant 9).

mod bounds;
mod compound;
mod words;
mod wrappers;

use brush_parser::ParserOptions;
use brush_parser::ast::{self, AndOr, Command, CommandPrefixOrSuffixItem, SeparatorOperator};
use serde::Serialize;

pub use bounds::MAX_NESTING_DEPTH;
pub use words::{NotLiteral, literal_value, quote};
pub use wrappers::{
    CODE_RUNNERS, PRIVILEGE_WRAPPERS, SHELLS, TRANSPARENT_WRAPPERS, UNSAFE_BUILTINS, base_name,
    is_never_stored,
};

/// How deep `sh -c 'sh -c ...'` payloads are followed before the command is a miss. This
/// also bounds Warden's own recursion over an analysis ([`Chain::leaves`], rebuilding):
/// the only nesting a [`Chain`] has is a payload inside a segment.
pub const MAX_SHELL_NESTING: usize = 3;

/// Shell strings longer than this are a miss without parsing (bounded work per request):
/// no command typed or generated for one tool call is near it, and the slowest string
/// this size that reaches the parser (32,000 one-word lines) takes about 80 ms to analyse
/// in a release build.
pub const MAX_SCRIPT_BYTES: usize = 64 * 1024;

/// Argv longer than this is a miss.
pub const MAX_ARGV: usize = 4096;

/// The operator between two segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// `&&`
    And,
    /// `||`
    Or,
    /// `;` (or a newline)
    Seq,
    /// `|`
    Pipe,
}

impl Op {
    /// The operator as written in a rebuilt command.
    pub fn as_shell(self) -> &'static str {
        match self {
            Op::And => " && ",
            Op::Or => " || ",
            Op::Seq => "; ",
            Op::Pipe => " | ",
        }
    }
}

/// One simple command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Segment {
    /// The argv exactly as the shell would pass it (quotes removed, escapes applied).
    pub argv: Vec<String>,
    /// Indices of transparent wrappers looked through (`nice`, `timeout`...).
    pub wrappers: Vec<usize>,
    /// Index of the program that does the work.
    pub program: usize,
    /// For `sh -c PAYLOAD`: the payload's own analysis (the shell is then the program
    /// that runs, but the payload's segments are what must satisfy the allowlist).
    pub nested: Option<Chain>,
}

impl Segment {
    /// The program word as written.
    pub fn program_word(&self) -> &str {
        &self.argv[self.program]
    }
}

/// Segments and the operators between them (`ops.len() == segments.len() - 1`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Chain {
    /// The simple commands, in order.
    pub segments: Vec<Segment>,
    /// The operators joining them.
    pub ops: Vec<Op>,
}

impl Chain {
    /// Every segment that must satisfy the allowlist: nested payloads replace their
    /// shell segment.
    pub fn leaves(&self) -> Vec<&Segment> {
        self.leaves_with_stdin()
            .into_iter()
            .map(|(s, _)| s)
            .collect()
    }

    /// [`Chain::leaves`], each with whether the command line pipes into its standard
    /// input (a segment after `|`, or the first of a payload whose shell is piped into;
    /// redirections are never part of an analysed chain).
    pub fn leaves_with_stdin(&self) -> Vec<(&Segment, bool)> {
        let mut out = Vec::new();
        self.collect_leaves(false, &mut out);
        out
    }

    fn collect_leaves<'a>(&'a self, piped_in: bool, out: &mut Vec<(&'a Segment, bool)>) {
        for (k, s) in self.segments.iter().enumerate() {
            let piped = match k {
                0 => piped_in,
                _ => self.ops.get(k - 1) == Some(&Op::Pipe),
            };
            match &s.nested {
                Some(inner) => inner.collect_leaves(piped, out),
                None => out.push((s, piped)),
            }
        }
    }
}

/// Why a command cannot satisfy an allowlist.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Miss {
    /// Machine-readable class.
    pub reason: MissReason,
    /// Human-readable detail.
    pub detail: String,
}

/// Classes of misses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MissReason {
    /// The shell string does not parse.
    ParseError,
    /// Syntax outside the positive list (redirection, subshell, control flow, `&`...).
    UnsupportedSyntax,
    /// A word with an expansion, substitution or glob.
    NonLiteralWord,
    /// `sudo`, `doas` and the like.
    PrivilegeWrapper,
    /// A wrapper used with options that change what runs (`env -i`, `env A=b`).
    WrapperModifier,
    /// A builtin that changes the shell or runs code (`eval`, `exec`, `source`...).
    UnsafeBuiltin,
    /// `sh -c` nested deeper than [`MAX_SHELL_NESTING`].
    NestingTooDeep,
    /// Empty command.
    Empty,
    /// Too large to analyse ([`MAX_SCRIPT_BYTES`], [`MAX_ARGV`]).
    TooLarge,
    /// Nested deeper than [`MAX_NESTING_DEPTH`] (brackets, quotes, substitutions,
    /// compound commands).
    DepthLimit,
}

fn miss(reason: MissReason, detail: impl Into<String>) -> Miss {
    Miss {
        reason,
        detail: detail.into(),
    }
}

/// What to analyse.
#[derive(Clone, Copy, Debug)]
pub enum CommandInput<'a> {
    /// An argv (no shell involved).
    Argv(&'a [String]),
    /// A shell string.
    Shell(&'a str),
}

/// Parser settings matching `bash -c` (extglob off, as in a non-interactive bash).
pub(crate) fn parser_options() -> ParserOptions {
    ParserOptions {
        enable_extended_globbing: false,
        posix_mode: false,
        sh_mode: false,
        tilde_expansion_at_word_start: true,
        tilde_expansion_after_colon: false,
        ..ParserOptions::default()
    }
}

/// The detail of the miss a panic inside the parser becomes.
pub const PARSER_PANIC: &str = "the shell parser failed on this command";

/// Analyse a command.
pub fn analyze(input: CommandInput<'_>) -> Result<Chain, Miss> {
    guard(|| match input {
        CommandInput::Argv(argv) => analyze_argv(argv, 0),
        CommandInput::Shell(script) => analyze_script(script, 0),
    })
}

/// Run `f`, turning a panic into a miss. brush-parser `unwrap`s in places (numbers that do
/// not fit); the pre-scan keeps the known cases away from it, and one it does not know is
/// a parse failure of this command, not of the server. (brush's caches are not poisoned
/// by it: they are not locked while parsing, `a_caught_parser_panic_leaves_it_usable`.)
fn guard<T>(f: impl FnOnce() -> Result<T, Miss> + std::panic::UnwindSafe) -> Result<T, Miss> {
    std::panic::catch_unwind(f).unwrap_or_else(|_| Err(miss(MissReason::ParseError, PARSER_PANIC)))
}

fn analyze_argv(argv: &[String], depth: usize) -> Result<Chain, Miss> {
    if argv.is_empty() || argv[0].is_empty() {
        return Err(miss(MissReason::Empty, "empty command"));
    }
    if argv.len() > MAX_ARGV {
        return Err(miss(
            MissReason::TooLarge,
            format!("more than {MAX_ARGV} arguments"),
        ));
    }
    Ok(Chain {
        segments: vec![segment(argv.to_vec(), depth)?],
        ops: Vec::new(),
    })
}

fn analyze_script(script: &str, depth: usize) -> Result<Chain, Miss> {
    if script.len() > MAX_SCRIPT_BYTES {
        return Err(miss(
            MissReason::TooLarge,
            format!("script longer than {MAX_SCRIPT_BYTES} bytes"),
        ));
    }
    if script.contains('\0') {
        return Err(miss(MissReason::ParseError, "NUL byte in script"));
    }
    bounds::prescan(script)?;
    chain_of(&parse_prescanned(script)?, depth)
}

/// Tokenize and parse a pre-scanned `script` with brush-parser: compound syntax is
/// refused between tokenizing and parsing (see [`bounds`] for why).
fn parse_prescanned(script: &str) -> Result<ast::Program, Miss> {
    let options = parser_options();
    let tokens = brush_parser::uncached_tokenize_str(script, &options.tokenizer_options())
        .map_err(|e| miss(MissReason::ParseError, e.to_string()))?;
    compound::check_tokens(&tokens)?;
    brush_parser::parse_tokens(&tokens, &options)
        .map_err(|e| miss(MissReason::ParseError, e.to_string()))
}

/// The chain of simple commands a parsed program is, or why it is not one.
fn chain_of(program: &ast::Program, depth: usize) -> Result<Chain, Miss> {
    let mut chain = Chain {
        segments: Vec::new(),
        ops: Vec::new(),
    };
    for complete in &program.complete_commands {
        for item in &complete.0 {
            if matches!(item.1, SeparatorOperator::Async) {
                return Err(miss(MissReason::UnsupportedSyntax, "background job (&)"));
            }
            if !chain.segments.is_empty() {
                chain.ops.push(Op::Seq);
            }
            and_or(&item.0, depth, &mut chain)?;
        }
    }
    if chain.segments.is_empty() {
        return Err(miss(MissReason::Empty, "empty command"));
    }
    Ok(chain)
}

fn and_or(list: &ast::AndOrList, depth: usize, chain: &mut Chain) -> Result<(), Miss> {
    pipeline(&list.first, depth, chain)?;
    for next in &list.additional {
        let (op, p) = match next {
            AndOr::And(p) => (Op::And, p),
            AndOr::Or(p) => (Op::Or, p),
        };
        chain.ops.push(op);
        pipeline(p, depth, chain)?;
    }
    Ok(())
}

fn pipeline(p: &ast::Pipeline, depth: usize, chain: &mut Chain) -> Result<(), Miss> {
    if p.bang {
        return Err(miss(MissReason::UnsupportedSyntax, "negated pipeline (!)"));
    }
    if p.timed.is_some() {
        return Err(miss(MissReason::UnsupportedSyntax, "time keyword"));
    }
    for (i, command) in p.seq.iter().enumerate() {
        if i > 0 {
            chain.ops.push(Op::Pipe);
        }
        let simple = match command {
            Command::Simple(simple) => simple,
            Command::Compound(..) => {
                return Err(miss(
                    MissReason::UnsupportedSyntax,
                    "compound command (subshell, group, loop or conditional)",
                ));
            }
            Command::Function(_) => {
                return Err(miss(MissReason::UnsupportedSyntax, "function definition"));
            }
            Command::ExtendedTest(..) => {
                return Err(miss(MissReason::UnsupportedSyntax, "[[ ]] test"));
            }
        };
        chain.segments.push(simple_command(simple, depth)?);
    }
    Ok(())
}

fn simple_command(cmd: &ast::SimpleCommand, depth: usize) -> Result<Segment, Miss> {
    if let Some(item) = cmd.prefix.as_ref().and_then(|p| p.0.first()) {
        return Err(miss(
            MissReason::UnsupportedSyntax,
            format!("{} before the command", item_name(item)),
        ));
    }
    let name = cmd
        .word_or_name
        .as_ref()
        .ok_or_else(|| miss(MissReason::UnsupportedSyntax, "no command word"))?;
    let options = parser_options();
    let mut argv = vec![literal(&name.value, &options)?];
    if let Some(suffix) = &cmd.suffix {
        for item in &suffix.0 {
            match item {
                // `make CC=gcc`, `dd if=a of=b`: after the command name, an assignment is
                // just an argument (bash passes it unchanged).
                CommandPrefixOrSuffixItem::Word(w)
                | CommandPrefixOrSuffixItem::AssignmentWord(_, w) => {
                    argv.push(literal(&w.value, &options)?)
                }
                other => {
                    return Err(miss(
                        MissReason::UnsupportedSyntax,
                        item_name(other).to_string(),
                    ));
                }
            }
        }
    }
    segment(argv, depth)
}

fn item_name(item: &CommandPrefixOrSuffixItem) -> &'static str {
    match item {
        CommandPrefixOrSuffixItem::IoRedirect(_) => "redirection",
        CommandPrefixOrSuffixItem::Word(_) => "word",
        CommandPrefixOrSuffixItem::AssignmentWord(..) => "variable assignment",
        CommandPrefixOrSuffixItem::ProcessSubstitution(..) => "process substitution",
    }
}

fn literal(raw: &str, options: &ParserOptions) -> Result<String, Miss> {
    literal_value(raw, options).map_err(|why| miss(MissReason::NonLiteralWord, why.to_string()))
}

/// Classify one argv: wrappers looked through, privilege wrappers and unsafe builtins
/// refused, shell payloads analysed.
fn segment(argv: Vec<String>, depth: usize) -> Result<Segment, Miss> {
    let mut wrappers = Vec::new();
    let mut i = 0;
    loop {
        let name = base_name(&argv[i]);
        if PRIVILEGE_WRAPPERS.contains(&name) {
            return Err(miss(
                MissReason::PrivilegeWrapper,
                format!("{name} runs commands with other privileges"),
            ));
        }
        if UNSAFE_BUILTINS.contains(&argv[i].as_str()) {
            return Err(miss(
                MissReason::UnsafeBuiltin,
                format!("shell builtin {:?}", argv[i]),
            ));
        }
        if !TRANSPARENT_WRAPPERS.contains(&name) {
            break;
        }
        match wrappers::look_through(&argv, i) {
            wrappers::Through::Program(next) => {
                wrappers.push(i);
                i = next;
            }
            wrappers::Through::Itself => break,
            wrappers::Through::Miss(why) => return Err(miss(MissReason::WrapperModifier, why)),
        }
    }
    let nested = if SHELLS.contains(&base_name(&argv[i]))
        && argv.get(i + 1).map(String::as_str) == Some("-c")
    {
        let payload = argv
            .get(i + 2)
            .ok_or_else(|| miss(MissReason::UnsupportedSyntax, "shell -c without a command"))?;
        if depth + 1 > MAX_SHELL_NESTING {
            return Err(miss(
                MissReason::NestingTooDeep,
                format!("more than {MAX_SHELL_NESTING} nested shells"),
            ));
        }
        Some(analyze_script(payload, depth + 1)?)
    } else {
        None
    };
    Ok(Segment {
        argv,
        wrappers,
        program: i,
        nested,
    })
}

#[cfg(test)]
mod tests;
