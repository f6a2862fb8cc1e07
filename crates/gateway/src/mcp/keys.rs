//! Named keys for the `process` tool's `write`: what a key sends to a program, as a
//! terminal in its usual (xterm, normal cursor mode) settings sends it. Names are
//! case-insensitive: `Enter`, `Tab`, `Escape`, `Backspace`, `Space`, arrows (`Up`,
//! `Down`, `Left`, `Right`), `Home`, `End`, `PageUp`, `PageDown`, `Insert`, `Delete`,
//! `F1`–`F12`, and a control key as `C-c` or `Ctrl-C` (`C-a`…`C-z`, `C-@`, `C-[`, `C-\`,
//! `C-]`, `C-^`, `C-_`, `C-Space`).

/// Most keys one `write` takes.
pub const MAX_KEYS: usize = 256;

/// The bytes key `name` sends, or `None` if no key has that name.
pub fn key_bytes(name: &str) -> Option<Vec<u8>> {
    let lower = name.trim().to_ascii_lowercase();
    if let Some(key) = lower
        .strip_prefix("c-")
        .or_else(|| lower.strip_prefix("ctrl-"))
        .or_else(|| lower.strip_prefix("ctrl+"))
    {
        return control(key).map(|b| vec![b]);
    }
    let fixed: &[u8] = match lower.as_str() {
        "enter" | "return" => b"\r",
        "tab" => b"\t",
        "escape" | "esc" => b"\x1b",
        "backspace" | "bs" => b"\x7f",
        "space" => b" ",
        "up" => b"\x1b[A",
        "down" => b"\x1b[B",
        "right" => b"\x1b[C",
        "left" => b"\x1b[D",
        "home" => b"\x1b[H",
        "end" => b"\x1b[F",
        "pageup" | "pgup" => b"\x1b[5~",
        "pagedown" | "pgdn" => b"\x1b[6~",
        "insert" | "ins" => b"\x1b[2~",
        "delete" | "del" => b"\x1b[3~",
        "f1" => b"\x1bOP",
        "f2" => b"\x1bOQ",
        "f3" => b"\x1bOR",
        "f4" => b"\x1bOS",
        "f5" => b"\x1b[15~",
        "f6" => b"\x1b[17~",
        "f7" => b"\x1b[18~",
        "f8" => b"\x1b[19~",
        "f9" => b"\x1b[20~",
        "f10" => b"\x1b[21~",
        "f11" => b"\x1b[23~",
        "f12" => b"\x1b[24~",
        _ => return None,
    };
    Some(fixed.to_vec())
}

/// The byte Ctrl plus `key` sends.
fn control(key: &str) -> Option<u8> {
    if key == "space" {
        return Some(0);
    }
    let mut chars = key.chars();
    let (Some(c), None) = (chars.next(), chars.next()) else {
        return None;
    };
    match c {
        'a'..='z' => Some(c as u8 - b'a' + 1),
        '@' => Some(0),
        '[' => Some(0x1b),
        '\\' => Some(0x1c),
        ']' => Some(0x1d),
        '^' => Some(0x1e),
        '_' => Some(0x1f),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_send_what_a_terminal_sends() {
        assert_eq!(key_bytes("Enter"), Some(b"\r".to_vec()));
        assert_eq!(key_bytes("C-c"), Some(vec![3]));
        assert_eq!(key_bytes("Ctrl-C"), Some(vec![3]));
        assert_eq!(key_bytes("ctrl+d"), Some(vec![4]));
        assert_eq!(key_bytes("C-\\"), Some(vec![0x1c]));
        assert_eq!(key_bytes("C-Space"), Some(vec![0]));
        assert_eq!(key_bytes("up"), Some(b"\x1b[A".to_vec()));
        assert_eq!(key_bytes("F12"), Some(b"\x1b[24~".to_vec()));
    }

    #[test]
    fn unknown_names_are_none() {
        for name in ["", "C-", "C-cc", "C-1", "Ctrl", "F13", "Enterr", "é"] {
            assert_eq!(key_bytes(name), None, "{name:?}");
        }
    }
}
