//! Literal words: a shell word is accepted only if every piece of it is literal text
//! (unquoted text without glob, brace or expansion characters, single-quoted text,
//! escapes, or double-quoted text without expansions); its value is what bash would pass.

use brush_parser::ParserOptions;
use brush_parser::word::WordPiece;

/// Characters that make unquoted text expand (globs, braces, parameters, substitutions,
/// extglob) — any of them makes the word non-literal. A tilde expands only where
/// [`tilde_expands`] says.
const EXPANDING_UNQUOTED: &[char] = &['*', '?', '[', ']', '{', '}', '$', '`', '(', ')', '!'];

/// Whether bash expands an unquoted `~` that follows `before` (the value so far):
/// at the start of a word, and after `=` or `:` (bash expands those in any word that
/// looks like an assignment, arguments included). Inside a word (`HEAD~1`) it is text.
fn tilde_expands(before: &str) -> bool {
    matches!(before.chars().last(), None | Some('=' | ':'))
}

/// Characters that never have a special meaning inside an unquoted shell word.
fn is_plain(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-_./:,=+@%^".contains(c)
}

/// Why a shell word is not literal: what in it bash would expand or read specially.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotLiteral {
    /// The parser refuses the word.
    #[error("word {word:?} does not parse: {message}")]
    Unparsable {
        /// The raw word.
        word: String,
        /// The parser's message.
        message: String,
    },
    /// An unquoted character that expands (a glob, a brace, `$`, a leading `~`…).
    #[error("unquoted {character:?} in {word:?} would be expanded")]
    Expands {
        /// The character.
        character: char,
        /// The raw word.
        word: String,
    },
    /// `$` or a backquote inside double quotes.
    #[error("expansion inside double quotes in {word:?}")]
    QuotedExpansion {
        /// The raw word.
        word: String,
    },
    /// A piece (quoting, expansion, substitution) that is not plain text.
    #[error("{piece} in {word:?}")]
    Piece {
        /// What the piece is (`command substitution`).
        piece: &'static str,
        /// The raw word.
        word: String,
    },
    /// Such a piece inside double quotes.
    #[error("{piece} inside double quotes in {word:?}")]
    QuotedPiece {
        /// What the piece is.
        piece: &'static str,
        /// The raw word.
        word: String,
    },
    /// An escape the parser gave that is not `\` and one character.
    #[error("unexpected escape {sequence:?}")]
    Escape {
        /// The escape as parsed.
        sequence: String,
    },
}

/// The literal value of a raw shell word, or why it is not literal.
pub fn literal_value(raw: &str, options: &ParserOptions) -> Result<String, NotLiteral> {
    // Fast path: a word made only of characters without any shell meaning is its own
    // value (most words are like this); everything else goes through the parser.
    if !raw.is_empty() && raw.chars().all(is_plain) {
        return Ok(raw.to_owned());
    }
    let pieces = brush_parser::word::parse(raw, options).map_err(|e| NotLiteral::Unparsable {
        word: raw.to_owned(),
        message: e.to_string(),
    })?;
    let mut out = String::new();
    for piece in pieces {
        match piece.piece {
            WordPiece::Text(text) => {
                if let Some(c) = text.chars().find(|c| EXPANDING_UNQUOTED.contains(c)) {
                    return Err(NotLiteral::Expands {
                        character: c,
                        word: raw.to_owned(),
                    });
                }
                for (at, _) in text.match_indices('~') {
                    let before = format!("{out}{}", &text[..at]);
                    if tilde_expands(&before) {
                        return Err(NotLiteral::Expands {
                            character: '~',
                            word: raw.to_owned(),
                        });
                    }
                }
                out.push_str(&text);
            }
            WordPiece::SingleQuotedText(text) => out.push_str(&text),
            WordPiece::EscapeSequence(seq) => out.push_str(&unescape_unquoted(&seq)?),
            WordPiece::DoubleQuotedSequence(inner) => {
                for inner in inner {
                    match inner.piece {
                        WordPiece::Text(text) => {
                            if text.contains(['$', '`']) {
                                return Err(NotLiteral::QuotedExpansion {
                                    word: raw.to_owned(),
                                });
                            }
                            out.push_str(&text);
                        }
                        WordPiece::EscapeSequence(seq) => {
                            out.push_str(&unescape_double_quoted(&seq))
                        }
                        other => {
                            return Err(NotLiteral::QuotedPiece {
                                piece: piece_name(&other),
                                word: raw.to_owned(),
                            });
                        }
                    }
                }
            }
            other => {
                return Err(NotLiteral::Piece {
                    piece: piece_name(&other),
                    word: raw.to_owned(),
                });
            }
        }
    }
    Ok(out)
}

fn piece_name(piece: &WordPiece) -> &'static str {
    match piece {
        WordPiece::Text(_) => "text",
        WordPiece::SingleQuotedText(_) => "single-quoted text",
        WordPiece::AnsiCQuotedText(_) => "ANSI-C quoting ($'...')",
        WordPiece::DoubleQuotedSequence(_) => "double-quoted text",
        WordPiece::GettextDoubleQuotedSequence(_) => "locale quoting ($\"...\")",
        WordPiece::TildeExpansion(_) => "tilde expansion",
        WordPiece::ParameterExpansion(_) => "parameter expansion",
        WordPiece::CommandSubstitution(_) | WordPiece::BackquotedCommandSubstitution(_) => {
            "command substitution"
        }
        WordPiece::EscapeSequence(_) => "escape",
        WordPiece::ArithmeticExpression(_) => "arithmetic expansion",
    }
}

/// `\x` outside quotes is `x`; a backslash-newline disappears.
fn unescape_unquoted(seq: &str) -> Result<String, NotLiteral> {
    let mut chars = seq.chars();
    match (chars.next(), chars.as_str()) {
        (Some('\\'), "\n") => Ok(String::new()),
        (Some('\\'), rest) if rest.chars().count() == 1 => Ok(rest.to_owned()),
        _ => Err(NotLiteral::Escape {
            sequence: seq.to_owned(),
        }),
    }
}

/// Inside double quotes a backslash only escapes `$`, `` ` ``, `"`, `\` and newline;
/// before anything else it stays.
fn unescape_double_quoted(seq: &str) -> String {
    let mut chars = seq.chars();
    match (chars.next(), chars.as_str()) {
        (Some('\\'), "\n") => String::new(),
        (Some('\\'), rest) if matches!(rest, "$" | "`" | "\"" | "\\") => rest.to_owned(),
        _ => seq.to_owned(),
    }
}

/// Quote `word` for a POSIX shell so that it is passed through unchanged: single quotes,
/// with each `'` written as `'\''`.
pub fn quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:,=@%".contains(c))
    {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> ParserOptions {
        super::super::parser_options()
    }

    #[test]
    fn literal_words_decode_like_bash() {
        let cases = [
            ("plain", "plain"),
            ("'single $quoted'", "single $quoted"),
            ("\"double quoted\"", "double quoted"),
            (r#""a\"b\\c\$d\x""#, r#"a"b\c$d\x"#),
            (r"esc\ aped", "esc aped"),
            ("''", ""),
            ("mix'ed'\"up\"", "mixedup"),
            ("héllo", "héllo"),
            ("a=b", "a=b"),
            ("src/main.rs", "src/main.rs"),
            ("-n", "-n"),
            ("--flag=1", "--flag=1"),
        ];
        for (raw, want) in cases {
            assert_eq!(literal_value(raw, &opts()).as_deref(), Ok(want), "{raw}");
        }
    }

    #[test]
    fn expanding_words_are_refused() {
        for raw in [
            "$HOME",
            "\"$HOME\"",
            "$(id)",
            "`id`",
            "*.rs",
            "a?",
            "[ab]",
            "{a,b}",
            "~/x",
            "~",
            "a=~/x",
            "PATH=/bin:~/bin",
            "--x=a:~",
            "$'\\n'",
            "$((1+1))",
            "\"`id`\"",
        ] {
            assert!(literal_value(raw, &opts()).is_err(), "{raw}");
        }
    }

    #[test]
    fn a_tilde_inside_a_word_is_text() {
        for raw in ["HEAD~1", "HEAD~3..HEAD", "main~2^", "'~'", "a\\~"] {
            assert!(literal_value(raw, &opts()).is_ok(), "{raw}");
        }
        assert_eq!(literal_value("HEAD~1", &opts()).unwrap(), "HEAD~1");
    }

    #[test]
    fn quoting_round_trips_through_the_parser() {
        for word in [
            "simple",
            "with space",
            "it's",
            "",
            "$HOME",
            "a'b'c",
            "\\",
            "\n",
            "*",
            "-n",
        ] {
            assert_eq!(
                literal_value(&quote(word), &opts()).as_deref(),
                Ok(word),
                "{word:?}"
            );
        }
    }
}
