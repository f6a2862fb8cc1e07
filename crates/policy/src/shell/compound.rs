//! Compound syntax is refused on brush's own token stream, before its PEG grammar runs:
//! subshells, arithmetic commands, functions, process substitutions, groups, loops,
//! conditionals, `case`, `coproc`, `[[ ]]` and here-documents. None of them can be
//! allowlisted, and they are where the grammar recurses and backtracks (nested `(` and
//! `case` items without `;;` take exponential time; a few hundred nested groups overflow
//! a server thread). With them gone the parser only sees flat lists of simple commands.
//!
//! This check works on tokens, so it agrees with the parser about quoting by
//! construction. A reserved word only opens a compound command where a command starts;
//! [`check_tokens`] treats more positions as command starts than the grammar does (after
//! any operator, after `!`, `time`, assignments and the other reserved words), never
//! fewer: an argument that happens to be `if` is still an argument.

use brush_parser::Token;

use super::{Miss, MissReason, miss};

/// Reserved words that open a compound command (bash's and brush's lists).
const OPENERS: &[(&str, &str)] = &[
    ("{", "group { ... }"),
    ("if", "compound command (if)"),
    ("case", "compound command (case)"),
    ("for", "loop (for)"),
    ("select", "loop (select)"),
    ("while", "loop (while)"),
    ("until", "loop (until)"),
    ("[[", "[[ ]] test"),
    ("function", "function definition"),
    ("coproc", "coprocess (coproc)"),
];

/// Words after which the next word may still start a command: the other reserved words
/// (brush refuses them as command names), and the pipeline prefixes `!` and `time [-p]`.
const KEEP_COMMAND_POSITION: &[&str] = &[
    "!", "time", "}", "then", "do", "done", "else", "elif", "fi", "esac", "in", "]]",
];

fn unsupported(detail: &str) -> Miss {
    miss(MissReason::UnsupportedSyntax, detail)
}

/// What a `(` at `tokens[i]` opens.
fn paren(tokens: &[Token], i: usize) -> &'static str {
    let op = |t: Option<&Token>, want: &str| matches!(t, Some(Token::Operator(o, _)) if o == want);
    let before = i.checked_sub(1).and_then(|j| tokens.get(j));
    let after = tokens.get(i + 1);
    if op(before, "<") || op(before, ">") {
        "process substitution <(...)"
    } else if op(after, "(") {
        "arithmetic command ((...))"
    } else if op(after, ")") {
        "function definition"
    } else if matches!(before, Some(Token::Word(w, _)) if w.ends_with('=')) {
        "array assignment"
    } else {
        "subshell (...)"
    }
}

/// Refuse compound syntax in `tokens` (see the module documentation).
pub(crate) fn check_tokens(tokens: &[Token]) -> Result<(), Miss> {
    let mut command_position = true;
    let mut after_time = false;
    // The word after a redirection operator is its target (a file name), whatever it
    // spells; where a command starts is unchanged by it.
    let mut redirect_target = false;
    for (i, token) in tokens.iter().enumerate() {
        match token {
            Token::Operator(op, _) => {
                if op == "(" {
                    return Err(unsupported(paren(tokens, i)));
                }
                if op.starts_with("<<") {
                    return Err(unsupported("here-document or here-string (<<)"));
                }
                redirect_target = op.contains(['<', '>']);
                if !redirect_target {
                    command_position = true;
                    after_time = false;
                }
            }
            Token::Word(word, _) => {
                if std::mem::take(&mut redirect_target) || !command_position {
                    continue;
                }
                if let Some((_, what)) = OPENERS.iter().find(|(w, _)| w == word) {
                    return Err(unsupported(what));
                }
                // After `time` comes an optional `-p`; after an assignment (a superset:
                // any word with `=`) or another prefix, still the command's start.
                let keeps = KEEP_COMMAND_POSITION.contains(&word.as_str())
                    || (after_time && word == "-p")
                    || word.contains('=');
                after_time = word == "time";
                command_position = keeps;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // A test helper: the cases compare the refusal's text, so text is what it returns.
    fn check(script: &str) -> Result<(), String> {
        let options = super::super::parser_options();
        let tokens = brush_parser::uncached_tokenize_str(script, &options.tokenizer_options())
            .map_err(|e| format!("tokenize: {e}"))?;
        check_tokens(&tokens).map_err(|m| m.detail)
    }

    #[test]
    fn compound_syntax_where_a_command_starts_is_refused() {
        let cases = [
            ("(ls)", "subshell"),
            ("ls && (ls)", "subshell"),
            ("((1+1))", "arithmetic command"),
            ("f() { ls; }", "function definition"),
            ("diff <(ls) >(ls)", "process substitution"),
            ("a=(1 2)", "array assignment"),
            ("{ ls; }", "group"),
            ("ls; { ls; }", "group"),
            ("if true; then ls; fi", "if"),
            ("ls | while read a; do ls; done", "while"),
            ("for a in b; do ls; done", "for"),
            ("case x in x) ls;; esac", "case"),
            ("[[ -f x ]]", "[[ ]]"),
            ("function f { ls; }", "function definition"),
            ("coproc ls", "coproc"),
            ("! if true; then ls; fi", "if"),
            ("time -p { ls; }", "group"),
            ("A=1 B=2 if true; then ls; fi", "if"),
            ("> out { ls; }", "group"),
            ("ls\nuntil true; do ls; done", "until"),
            ("cat <<EOF\nx\nEOF", "here-document"),
        ];
        for (script, what) in cases {
            let got = check(script).unwrap_err();
            assert!(got.contains(what), "{script:?}: {got}");
        }
    }

    #[test]
    fn reserved_words_as_arguments_or_quoted_are_words() {
        for script in [
            "echo if then fi { } done case esac [[ ]] function coproc",
            "grep -e while -e for x",
            "ls > if",
            "ls 2>&1 for",
            "'if' true",
            "\"{\" ls",
            "\\{ ls",
            "{ls,cat} x",
            "echo ')'",
            "ls )",
            "time ls",
            "! ls",
        ] {
            assert_eq!(check(script), Ok(()), "{script:?}");
        }
    }
}
