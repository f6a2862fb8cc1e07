//! The pre-scan: one linear pass over a shell string, before any parser sees it, that
//! bounds the work of the analysis — nesting depth, expansions that recurse inside the
//! parser, and a few inputs known to crash brush-parser.
//!
//! Why this exists: brush-parser is recursive (its tokenizer recurses once per `$(`,
//! `${` and `$[`, its PEG grammar once per compound command) and its PEG grammar has no
//! memoisation, so some nested inputs take exponential time (`( ( ( (` unbalanced, or
//! `case` items without `;;`). A few hundred nested `{` overflowed a 2 MiB server thread
//! and aborted the process. The analysis therefore keeps every nested input away from the
//! recursive parts of the parser:
//!
//! 1. This pre-scan mirrors brush's tokenizer closely enough to know what is quoted. It
//!    refuses anything nested deeper than [`MAX_NESTING_DEPTH`] (brackets, quotes,
//!    substitutions, compound commands) with a [`MissReason::DepthLimit`] naming the limit,
//!    and refuses every `$(`, `${`, `$[`, `` ` `` and unquoted `~` outside single quotes,
//!    and every here-document, before tokenizing. None of these can be part of an
//!    allowlisted command (words must be literal, redirections are refused), so the only
//!    cost is that such a miss names a different reason than the parser would.
//! 2. Whatever its quote tracking concludes, it also bounds what brush could recurse on
//!    without regard to quoting (`recursion_bound`: every `(`, `[` and `${` of a string
//!    that has an expansion at all), so a mistake in the mirror can cost at most
//!    [`MAX_NESTING_DEPTH`] levels of recursion. A string with more is a
//!    [`MissReason::DepthLimit`] miss too, even if all of it is quoted.
//! 3. After brush's own tokenizer ran, `compound::check_tokens` refuses subshells, groups,
//!    loops, conditionals, functions and `[[ ]]` on the exact token stream, so the PEG
//!    parser only ever parses flat lists.
//!
//! The result is that the parser's recursion depth no longer depends on the input beyond
//! the bound in 2, whose worst case fits in half a server thread's stack in a debug build
//! (`what_the_backstop_lets_through_fits_on_a_server_thread`), so the analysis runs in
//! place on the caller's thread. A dedicated thread with a large stack was considered and
//! rejected: `decide` runs for every request and must stay well under a process spawn,
//! and a bounded input needs no extra stack.

use std::iter::Peekable;
use std::str::Chars;

use super::{Miss, MissReason, miss};

/// Deepest nesting (brackets, quotes, substitutions, compound commands) the analysis
/// looks at; anything deeper is a miss. No command that could ever be allowlisted nests
/// more than a level or two (an argument in quotes). The limit also caps what can reach
/// brush's recursive tokenizer and word parser if the quote tracking below were wrong
/// (`recursion_bound`): 64 levels of that need under 512 KiB of stack in an unoptimised
/// build, a quarter of a 2 MiB server thread, where 124 levels of nested `${` overflowed a
/// whole one (an optimised build took 1,517). The nested groups of the original report
/// overflowed it at 121 levels unoptimised, 377 optimised.
pub const MAX_NESTING_DEPTH: usize = 64;

/// `(`-openers that start a nested tokenizer level in brush: `$(` (and `$((`), `${`, `$[`.
const EXPANSION_OPENERS: [u8; 3] = [b'(', b'{', b'['];

/// A file descriptor number of this many digits may not fit in `u32`, which brush's
/// redirection parser `unwrap`s (`99999999999>x` panicked it).
const MAX_FD_DIGITS: usize = 9;

/// What a nesting level is. Quoting frames and the expansion frames mirror brush's
/// tokenizer exactly (they decide what the tokenizer treats as quoted); `Paren` and
/// `Keyword` frames at the top level only count depth for the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Frame {
    /// `(` at the top level: subshell, arithmetic command, function parentheses.
    Paren,
    /// A compound command opened by a reserved word, closed by the given one.
    Keyword(&'static str),
    /// `$(` ... `)`: the tokenizer reads a nested command until the matching `)`.
    CmdSub,
    /// `(` inside `$(`: the tokenizer counts it to find the matching `)`.
    CmdSubParen,
    /// `${` ... `}`: the tokenizer reads until the first unquoted `}`.
    Param,
    /// `$[` ... `]` (legacy arithmetic).
    Bracket,
    /// `'...'`
    Single,
    /// `$'...'`: backslash escapes.
    AnsiC,
    /// `"..."`: backslash escapes, `$` and `` ` `` still expand.
    Double,
    /// `` `...` ``: opaque up to the next unescaped backquote.
    Backtick,
}

/// The kind of tokenizer level the scan is in: what ends it and whether `#` can start a
/// comment there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Level {
    Top,
    CmdSub,
    Param,
    Bracket,
}

/// Reserved words that open a compound command, with the word that closes it.
const OPENERS: &[(&str, &str)] = &[
    ("{", "}"),
    ("if", "fi"),
    ("case", "esac"),
    ("for", "done"),
    ("select", "done"),
    ("while", "done"),
    ("until", "done"),
];

/// Reserved words after which a command may start (so the next word may be a keyword).
const LEADING: &[&str] = &["then", "do", "else", "elif", "!", "time"];

/// The scan's state for the token being read at the current level.
#[derive(Default)]
struct Token {
    /// Something has been appended (a `#` no longer starts a comment).
    started: bool,
    /// The last character appended (brush opens `$'...'` when the token ends in `$`).
    last: Option<char>,
    /// Only unquoted, unescaped characters so far: it could be a reserved word.
    plain: bool,
    /// The plain characters (reserved words are short; longer words are not kept).
    text: String,
    /// Every character so far is an ASCII digit, and how many there are.
    digits_only: bool,
    len: usize,
}

impl Token {
    fn fresh() -> Token {
        Token {
            plain: true,
            digits_only: true,
            ..Token::default()
        }
    }

    fn push_plain(&mut self, c: char) {
        self.started = true;
        self.last = Some(c);
        self.len += 1;
        self.digits_only &= c.is_ascii_digit();
        if self.plain && self.text.len() < 8 {
            self.text.push(c);
        } else {
            self.plain = false;
        }
    }

    fn push_other(&mut self, last: char) {
        self.started = true;
        self.last = Some(last);
        self.plain = false;
        self.digits_only = false;
    }

    /// The reserved word this token could be ("" if none).
    fn word(&self) -> &str {
        if self.plain { &self.text } else { "" }
    }
}

struct Scan {
    stack: Vec<Frame>,
    token: Token,
    /// The next word at the top level is where a command starts.
    command_position: bool,
    /// The first construct that makes the command a miss, if any.
    refused: Option<Miss>,
}

impl Scan {
    /// The innermost tokenizer level (quotes are states of a level, not levels).
    fn level(&self) -> Level {
        for frame in self.stack.iter().rev() {
            match frame {
                Frame::CmdSub | Frame::CmdSubParen => return Level::CmdSub,
                Frame::Param => return Level::Param,
                Frame::Bracket => return Level::Bracket,
                _ => {}
            }
        }
        Level::Top
    }

    fn push(&mut self, frame: Frame) -> Result<(), Miss> {
        self.stack.push(frame);
        if self.stack.len() > MAX_NESTING_DEPTH {
            return Err(miss(
                MissReason::DepthLimit,
                format!(
                    "nesting deeper than {MAX_NESTING_DEPTH} levels (brackets, quotes, \
                     substitutions or compound commands)"
                ),
            ));
        }
        Ok(())
    }

    fn refuse(&mut self, reason: MissReason, detail: &str) {
        if self.refused.is_none() {
            self.refused = Some(miss(reason, detail));
        }
    }

    /// The current token ended (blank, operator, end of a level or of the input). At the
    /// top level, a plain word where a command starts may open or close a compound
    /// command, which the depth counts.
    fn end_token(&mut self) -> Result<(), Miss> {
        let token = std::mem::replace(&mut self.token, Token::fresh());
        if !token.started || self.level() != Level::Top || !self.command_position {
            return Ok(());
        }
        let word = token.word();
        if let Some(&(_, closer)) = OPENERS.iter().find(|(open, _)| *open == word) {
            self.push(Frame::Keyword(closer))?;
        } else if OPENERS.iter().any(|(_, close)| *close == word) {
            if matches!(self.stack.last(), Some(Frame::Keyword(close)) if *close == word) {
                self.stack.pop();
            }
        } else if !LEADING.contains(&word) {
            self.command_position = false;
        }
        Ok(())
    }

    /// `$` followed by `open` (`(`, `{` or `[`, already consumed) and then `next`: a nested
    /// tokenizer level. Returns whether `next` belongs to it (`$((`).
    fn expansion(&mut self, open: char, next: Option<char>) -> Result<bool, Miss> {
        let (frames, what): (&[Frame], &str) = match (open, next) {
            ('(', Some('(')) => (
                &[Frame::CmdSub, Frame::CmdSubParen],
                "arithmetic expansion $((...))",
            ),
            ('(', _) => (&[Frame::CmdSub], "command substitution $(...)"),
            ('{', _) => (&[Frame::Param], "parameter expansion ${...}"),
            _ => (&[Frame::Bracket], "arithmetic expansion $[...]"),
        };
        self.refuse(MissReason::NonLiteralWord, what);
        for frame in frames {
            self.push(*frame)?;
        }
        self.token = Token::fresh();
        Ok(frames.len() == 2)
    }

    /// A level closed at `closing`: what it read is part of the enclosing token.
    fn close(&mut self, closing: char) {
        self.stack.pop();
        self.token.push_other(closing);
    }
}

/// After an unquoted or double-quoted `$`: a nested tokenizer level if `(`, `{` or `[`
/// follows. brush's tokenizer only looks at the very next character, but it also removes
/// line continuations from the token, so `"$\⏎(...)"` reaches its word parser as `"$(...)"`
/// and is parsed (recursively) there: that is refused too.
fn dollar(scan: &mut Scan, chars: &mut Peekable<Chars<'_>>) -> Result<(), Miss> {
    if let Some(open) = chars.next_if(|n| EXPANSION_OPENERS.contains(&(*n as u8))) {
        if scan.expansion(open, chars.peek().copied())? {
            chars.next();
        }
        return Ok(());
    }
    let mut ahead = chars.clone();
    loop {
        let mut pair = ahead.clone();
        if pair.next() == Some('\\') && pair.next() == Some('\n') {
            ahead = pair;
        } else {
            break;
        }
    }
    if ahead
        .peek()
        .is_some_and(|n| EXPANSION_OPENERS.contains(&(*n as u8)))
    {
        scan.refuse(
            MissReason::NonLiteralWord,
            "expansion split by a line continuation ($\\ newline)",
        );
    }
    Ok(())
}

/// Check `script` (at most `MAX_SCRIPT_BYTES`, no NUL) before it is tokenized: a miss if
/// it nests deeper than [`MAX_NESTING_DEPTH`] or holds a construct that must not reach
/// the parser (see the module documentation).
pub(crate) fn prescan(script: &str) -> Result<(), Miss> {
    let mut scan = Scan {
        stack: Vec::new(),
        token: Token::fresh(),
        command_position: true,
        refused: None,
    };
    let mut chars = script.chars().peekable();
    let mut prev: Option<char> = None;
    while let Some(c) = chars.next() {
        let before = prev.replace(c);
        // Inside quotes: only what ends them (and, in double quotes, expansions) counts.
        match scan.stack.last().copied() {
            Some(Frame::Single) => {
                if c == '\'' {
                    scan.close(c);
                }
                continue;
            }
            Some(Frame::AnsiC | Frame::Backtick) => {
                match c {
                    '\\' => {
                        chars.next();
                    }
                    '\'' if scan.stack.last() == Some(&Frame::AnsiC) => scan.close(c),
                    '`' if scan.stack.last() == Some(&Frame::Backtick) => scan.close(c),
                    _ => {}
                }
                continue;
            }
            Some(Frame::Double) => {
                match c {
                    // An escaped character or a line continuation: nothing opens.
                    '\\' => {
                        chars.next();
                    }
                    '"' => scan.close(c),
                    '$' => dollar(&mut scan, &mut chars)?,
                    '`' => {
                        scan.refuse(MissReason::NonLiteralWord, "command substitution `...`");
                        scan.push(Frame::Backtick)?;
                    }
                    _ => {}
                }
                continue;
            }
            _ => {}
        }
        // Unquoted: the top level, or inside `$(`, `${`, `$[`.
        let level = scan.level();
        let terminator = match level {
            Level::Top => None,
            Level::CmdSub => Some(')'),
            Level::Param => Some('}'),
            Level::Bracket => Some(']'),
        };
        if terminator == Some(c) {
            scan.end_token()?;
            let closed = scan.stack.last().copied();
            scan.close(c);
            if closed == Some(Frame::CmdSubParen) {
                // The `)` of a parenthesis inside `$(`: still inside it, a new token.
                scan.token = Token::fresh();
            }
            continue;
        }
        match c {
            '\\' => match chars.next() {
                // A line continuation disappears: the word goes on.
                Some('\n') | None => {}
                Some(escaped) => scan.token.push_other(escaped),
            },
            '\'' => {
                let frame = if scan.token.last == Some('$') {
                    Frame::AnsiC
                } else {
                    Frame::Single
                };
                scan.push(frame)?;
                scan.token.push_other(c);
            }
            '"' => {
                scan.push(Frame::Double)?;
                scan.token.push_other(c);
            }
            '`' => {
                scan.refuse(MissReason::NonLiteralWord, "command substitution `...`");
                scan.push(Frame::Backtick)?;
                scan.token.push_other(c);
            }
            '$' => {
                scan.token.push_other(c);
                dollar(&mut scan, &mut chars)?;
            }
            '~' => {
                // bash expands a tilde that starts a word, or follows `=` or `:` (in a
                // word that looks like an assignment); one inside a word (`HEAD~1`) is
                // text. Brush also panics on `~+99999999999999999999` (it unwraps the
                // number), which only a tilde prefix reaches.
                if !scan.token.started || matches!(before, Some('=' | ':')) {
                    scan.refuse(MissReason::NonLiteralWord, "unquoted ~ would be expanded");
                }
                scan.token.push_other(c);
            }
            ' ' | '\t' => {
                if scan.token.started || level == Level::Top || level == Level::Param {
                    scan.end_token()?;
                } else {
                    // Inside `$(` and `$[` brush keeps a blank that starts a token, so a
                    // `#` after it is not a comment there.
                    scan.token.push_other(c);
                }
            }
            '&' | '(' | ')' | ';' | '\n' | '|' | '<' | '>' => {
                let fd_digits = if scan.token.started && scan.token.digits_only {
                    scan.token.len
                } else {
                    0
                };
                scan.end_token()?;
                match c {
                    '(' if level == Level::CmdSub => scan.push(Frame::CmdSubParen)?,
                    '(' if level == Level::Top => scan.push(Frame::Paren)?,
                    ')' if scan.stack.last() == Some(&Frame::Paren) => {
                        scan.stack.pop();
                    }
                    '<' | '>' => {
                        if fd_digits > MAX_FD_DIGITS {
                            scan.refuse(
                                MissReason::UnsupportedSyntax,
                                "redirection of an out-of-range file descriptor",
                            );
                        }
                        if c == '<' && chars.peek() == Some(&'<') {
                            // A here-document body is read raw by the tokenizer: the scan
                            // cannot tell what is quoted after it, so it stops here.
                            scan.refuse(
                                MissReason::UnsupportedSyntax,
                                "here-document or here-string (<<)",
                            );
                            break;
                        }
                    }
                    _ => {}
                }
                if level == Level::Top {
                    scan.command_position = true;
                }
            }
            '#' if !scan.token.started && level != Level::Param => {
                // A comment, up to (not including) the end of the line.
                while chars.next_if(|&n| n != '\n').is_some() {}
            }
            _ => scan.token.push_plain(c),
        }
    }
    scan.end_token()?;
    if let Some(refused) = scan.refused {
        return Err(refused);
    }
    // The backstop for the quote tracking above: however the scan read the quoting, the
    // parser cannot recurse more often than this counts (see `recursion_bound`).
    if recursion_bound(script) > MAX_NESTING_DEPTH {
        return Err(miss(
            MissReason::DepthLimit,
            format!(
                "more than {MAX_NESTING_DEPTH} `(`, `[` and `${{` in a command with `$(`, `${{` \
                 or `$[` (each can open a nested level)"
            ),
        ));
    }
    Ok(())
}

/// An upper bound of the recursion brush can do on `script`, counted without regard to
/// quoting: its tokenizer recurses only at `$(`, `${` and `$[`, and its word parser only
/// inside those, on nested expansions and on every `(` and `[`. So every `(`, `[` and `${`
/// counts one (`$(` and `$[` through their bracket), and nothing counts without an
/// expansion: flat words are parsed flat. Line continuations are removed first, as the
/// tokenizer removes them from the tokens the word parser reads.
fn recursion_bound(script: &str) -> usize {
    let joined: String;
    let text = if script.contains("\\\n") {
        joined = script.replace("\\\n", "");
        joined.as_str()
    } else {
        script
    };
    let bytes = text.as_bytes();
    let expands = |w: &[u8]| w[0] == b'$' && EXPANSION_OPENERS.contains(&w[1]);
    if !bytes.windows(2).any(expands) {
        return 0;
    }
    let braces = bytes.windows(2).filter(|w| w == b"${").count();
    braces + bytes.iter().filter(|&&b| b == b'(' || b == b'[').count()
}

#[cfg(test)]
mod tests;
