//! One word of an allowlist rule's `args`, as a small glob: `*` is any run of characters
//! (`/` included: arguments are not paths), `?` one character, `\` makes the next
//! character literal. A leaf: the rules (`rules.rs`) and the grammars (`profiles/`) both
//! match words with it.

/// Escape `*`, `?` and `\` so that an argument pattern matches only `word`.
pub fn escape_word(word: &str) -> String {
    let mut out = String::with_capacity(word.len());
    for c in word.chars() {
        if matches!(c, '*' | '?' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// An argument pattern that cannot be compiled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// The pattern's last character escapes nothing.
    #[error("argument pattern {pattern:?} ends with a lone `\\`")]
    LoneBackslash {
        /// The pattern as written.
        pattern: String,
    },
}

/// One compiled argument pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum WordPattern {
    /// `*`: any word.
    Any,
    /// No wildcard: this exact word.
    Literal(String),
    /// A glob, as characters with wildcards marked.
    Glob(Vec<GlobChar>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GlobChar {
    Star,
    One,
    Char(char),
}

impl WordPattern {
    pub(crate) fn compile(text: &str) -> Result<WordPattern, PatternError> {
        if text == "*" {
            return Ok(WordPattern::Any);
        }
        let mut chars = Vec::new();
        let mut wild = false;
        let mut it = text.chars();
        while let Some(c) = it.next() {
            chars.push(match c {
                '\\' => GlobChar::Char(it.next().ok_or_else(|| PatternError::LoneBackslash {
                    pattern: text.to_owned(),
                })?),
                '*' => {
                    wild = true;
                    GlobChar::Star
                }
                '?' => {
                    wild = true;
                    GlobChar::One
                }
                c => GlobChar::Char(c),
            });
        }
        if wild {
            Ok(WordPattern::Glob(chars))
        } else {
            Ok(WordPattern::Literal(
                chars
                    .into_iter()
                    .map(|g| match g {
                        GlobChar::Char(c) => c,
                        _ => '?',
                    })
                    .collect(),
            ))
        }
    }

    pub(crate) fn matches(&self, word: &str) -> bool {
        match self {
            WordPattern::Any => true,
            WordPattern::Literal(l) => l == word,
            WordPattern::Glob(g) => glob_match(g, word),
        }
    }

    /// Whether every word this pattern matches, `wider` matches too (decided on the
    /// patterns: the same pattern, a literal the wider one matches, or anything where
    /// the wider one is `*`; any other pair is taken as wider, to be safe).
    pub(crate) fn within(&self, wider: &WordPattern) -> bool {
        match (self, wider) {
            (_, WordPattern::Any) => true,
            (WordPattern::Literal(word), wide) => wide.matches(word),
            (narrow, wide) => narrow == wide,
        }
    }

    /// The first word's literal text, for indexing rules by it.
    pub(crate) fn literal(&self) -> Option<&str> {
        match self {
            WordPattern::Literal(l) => Some(l),
            _ => None,
        }
    }
}

/// Wildcard match with one backtracking point per star (linear in practice, never
/// exponential).
fn glob_match(pattern: &[GlobChar], word: &str) -> bool {
    let text: Vec<char> = word.chars().collect();
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(GlobChar::Star) => {
                star = Some((p, t));
                p += 1;
            }
            Some(GlobChar::One) => {
                p += 1;
                t += 1;
            }
            Some(GlobChar::Char(c)) if *c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|g| *g == GlobChar::Star)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_words_match_only_themselves() {
        for w in ["*.rs", "a?b", "back\\slash", "plain", "", "**"] {
            let p = WordPattern::compile(&escape_word(w)).unwrap();
            assert!(p.matches(w), "{w:?}");
            assert!(!p.matches(&format!("{w}x")), "{w:?}");
        }
        assert_eq!(
            WordPattern::compile("trailing\\").unwrap_err().to_string(),
            "argument pattern \"trailing\\\\\" ends with a lone `\\`"
        );
    }

    #[test]
    fn stars_backtrack_correctly() {
        let p = WordPattern::compile(&"*a".repeat(30)).unwrap();
        assert!(!p.matches(&"a".repeat(29)));
        assert!(p.matches(&"a".repeat(30)));
        assert!(WordPattern::compile("*.rs").unwrap().matches("src/x.rs"));
        assert!(!WordPattern::compile("*.rs").unwrap().matches("x.rsx"));
        assert!(WordPattern::compile("a*b*c").unwrap().matches("aXbYbZc"));
    }
}
