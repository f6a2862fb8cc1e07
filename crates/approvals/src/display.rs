//! What the human sees is what runs: text from the agent is shown with every control
//! character, bidirectional override and zero-width character escaped visibly, so a
//! prompt cannot hide or reorder what will execute.

use std::fmt::Write as _;

use crate::ipc::protocol::Prompt;

/// True for characters that could hide or reorder text on a terminal.
fn is_deceptive(c: char) -> bool {
    matches!(c,
        '\u{200B}'..='\u{200F}'   // zero-width space/joiners, LRM, RLM
        | '\u{202A}'..='\u{202E}' // bidi embeddings and overrides
        | '\u{2060}'..='\u{2064}' // word joiner, invisible operators
        | '\u{2066}'..='\u{2069}' // bidi isolates
        | '\u{061C}'              // Arabic letter mark
        | '\u{180E}'              // Mongolian vowel separator
        | '\u{FEFF}'              // zero-width no-break space / BOM
        | '\u{00AD}'              // soft hyphen
    )
}

/// Escape `text` for display: `\\` for a backslash, `\n`, `\t`, `\r`, `\xNN` for other
/// control characters, and `\u{XXXX}` for deceptive Unicode. Everything else is shown as
/// is.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if ('\u{80}'..='\u{9f}').contains(&c) || is_deceptive(c) => {
                let _ = write!(out, "\\u{{{:04x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// An argv as a bracketed list of escaped, quoted words.
pub fn argv_line(argv: &[String]) -> String {
    let words: Vec<String> = argv
        .iter()
        .map(|a| format!("\"{}\"", escape(a).replace('"', "\\\"")))
        .collect();
    format!("[{}]", words.join(", "))
}

/// The full, escaped text of a prompt as shown to the human.
pub fn render_prompt(prompt: &Prompt, store_patterns: &[String]) -> String {
    let p = &prompt.plan;
    let mut out = String::new();
    let _ = writeln!(out, "── approval request {} ──", escape(&prompt.id));
    let _ = writeln!(
        out,
        "agent:    {}   session: {}",
        escape(&p.agent),
        escape(&p.session)
    );
    let _ = writeln!(
        out,
        "host:     {}   security: {}   ask: {}   ({})",
        escape(&p.host),
        escape(&prompt.security),
        escape(&prompt.ask),
        escape(&prompt.reason)
    );
    let _ = writeln!(out, "command:  {}", escape(&prompt.command));
    if !p.program.is_empty() {
        let _ = writeln!(out, "program:  {}", escape(&p.program));
    }
    let _ = writeln!(out, "argv:     {}", argv_line(&p.argv));
    let _ = writeln!(out, "cwd:      {}", escape(&p.cwd));
    let env: Vec<String> = p
        .env
        .iter()
        .map(|(k, v)| format!("{}={}", escape(k), escape(v)))
        .collect();
    let _ = writeln!(out, "env:      {}", env.join(" "));
    if prompt.is_write_permission() {
        let _ = writeln!(
            out,
            "always:   stores nothing (a write permission is for this one request)"
        );
    } else if store_patterns.is_empty() {
        let _ = writeln!(
            out,
            "always:   stores nothing (shells, interpreters and wrappers are never stored)"
        );
    } else {
        let _ = writeln!(
            out,
            "always:   would store {}",
            store_patterns
                .iter()
                .map(|s| escape(s))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let _ = writeln!(out, "digest:   {}", escape(&prompt.plan_digest));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_characters_become_visible() {
        assert_eq!(escape("rm -rf /\n"), "rm -rf /\\n");
        assert_eq!(escape("a\u{1b}[2Jb"), "a\\x1b[2Jb");
        assert_eq!(escape("ls \u{202e}txt.exe"), "ls \\u{202e}txt.exe");
        assert_eq!(escape("l\u{200b}s"), "l\\u{200b}s");
        assert_eq!(escape("x\u{7f}\u{85}"), "x\\x7f\\u{0085}");
        assert_eq!(escape("back\\slash"), "back\\\\slash");
        assert_eq!(escape("héllo 日本"), "héllo 日本");
    }

    #[test]
    fn escaping_is_unambiguous() {
        // A literal backslash-n and a newline must not look the same.
        assert_ne!(escape("\\n"), escape("\n"));
        assert_eq!(
            argv_line(&["a\"b".into(), "c d".into()]),
            "[\"a\\\"b\", \"c d\"]"
        );
    }
}
