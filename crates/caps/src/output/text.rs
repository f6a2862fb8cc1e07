//! Kept bytes as text: UTF-8-safe cuts and the markers that say what was dropped.
//!
//! A cut never splits a character: a head drops a trailing partial sequence, a tail its
//! leading continuation bytes. Bytes that are not UTF-8 for any other reason are shown
//! lossily (the exact bytes travel beside the text, see `ExecOutput::stdout_bytes`).

/// Put where a text lost its end (a head) or its beginning (a tail) to a limit. A text
/// that lost its middle says more, in a line starting with [`DROPPED_MARKER_PREFIX`].
pub const TRUNCATION_MARKER: &str = "… (truncated)";

/// How the line that replaces a stream's dropped middle begins (see [`dropped_marker`]).
pub const DROPPED_MARKER_PREFIX: &str = "… (truncated: ";

/// The line that stands where `written - first - last` bytes of a stream were dropped,
/// between its first `first` and its last `last` bytes. Numbers are plain digits so that
/// a reader can parse them.
pub fn dropped_marker(first: u64, last: u64, written: u64) -> String {
    let dropped = written.saturating_sub(first + last);
    format!(
        "{DROPPED_MARKER_PREFIX}{dropped} bytes dropped here; kept the first {first} and the last {last} of {written} bytes) …"
    )
}

/// Text for a byte head that may have been cut: when `cut`, drop a trailing partial
/// UTF-8 sequence and append [`TRUNCATION_MARKER`] on its own line.
pub fn truncate_utf8_head(bytes: &[u8], cut: bool) -> String {
    if !cut {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let mut text = head_text(bytes);
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(TRUNCATION_MARKER);
    text
}

/// Text for a byte tail that may have lost its beginning: when `cut`, drop leading UTF-8
/// continuation bytes and prefix [`TRUNCATION_MARKER`] on its own line.
pub fn truncate_utf8_tail(bytes: &[u8], cut: bool) -> String {
    if !cut {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    format!("{TRUNCATION_MARKER}\n{}", tail_text(bytes))
}

/// Text for a stream kept as its first `first` bytes and its last `bytes.len() - first`
/// bytes of `written`: the two parts with the [`dropped_marker`] line between them, or
/// the text of `bytes` when nothing was dropped.
pub fn middle_cut_text(bytes: &[u8], first: usize, written: u64) -> String {
    if bytes.len() as u64 >= written {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let (head, tail) = bytes.split_at(first);
    let mut text = head_text(head);
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&dropped_marker(first as u64, tail.len() as u64, written));
    text.push('\n');
    text.push_str(&tail_text(tail));
    text
}

/// Whether the kept bytes of a stream cannot be carried by its text: not UTF-8, apart
/// from a character split by a cut (which the text drops, as [`middle_cut_text`] does).
pub fn is_lossy(bytes: &[u8], first: usize, written: u64) -> bool {
    if bytes.len() as u64 >= written {
        return std::str::from_utf8(bytes).is_err();
    }
    let (head, tail) = bytes.split_at(first);
    let head = &head[..head.len() - partial_utf8_suffix_len(head)];
    let tail = &tail[leading_continuations(tail)..];
    std::str::from_utf8(head).is_err() || std::str::from_utf8(tail).is_err()
}

/// A head's text without a trailing partial character.
fn head_text(bytes: &[u8]) -> String {
    let end = bytes.len() - partial_utf8_suffix_len(bytes);
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// A tail's text without the continuation bytes of a character that began before it.
fn tail_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[leading_continuations(bytes)..]).into_owned()
}

/// Leading continuation bytes (at most 3: a character has at most three).
fn leading_continuations(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .take(3)
        .take_while(|b| is_continuation(**b))
        .count()
}

fn is_continuation(b: u8) -> bool {
    b & 0b1100_0000 == 0b1000_0000
}

/// Length of an incomplete multi-byte sequence at the end of `bytes` (0 if it ends on a
/// character boundary).
pub(super) fn partial_utf8_suffix_len(bytes: &[u8]) -> usize {
    // Look back at most 3 bytes for the lead byte of the last sequence.
    for back in 1..=bytes.len().min(4) {
        let b = bytes[bytes.len() - back];
        if is_continuation(b) {
            continue;
        }
        let needed = match b {
            0x00..=0x7f => 1,
            0xc0..=0xdf => 2,
            0xe0..=0xef => 3,
            0xf0..=0xf7 => 4,
            _ => return 0, // invalid lead byte: nothing to repair, lossy decoding marks it
        };
        return if back < needed { back } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn four_byte_characters_are_not_split() {
        let text = "🦀🦀";
        for cap in 0..8 {
            let got = truncate_utf8_head(&text.as_bytes()[..cap], true);
            assert!(!got.contains('\u{fffd}'), "cap {cap}: {got:?}");
        }
    }

    #[test]
    fn a_middle_cut_says_what_was_dropped_between_the_ends() {
        let text = middle_cut_text(b"abcxyz", 3, 100);
        assert_eq!(
            text,
            "abc\n… (truncated: 94 bytes dropped here; kept the first 3 and the last 3 of 100 bytes) …\nxyz"
        );
        assert_eq!(middle_cut_text(b"all of it", 3, 9), "all of it");
    }

    #[test]
    fn a_character_split_at_either_end_of_the_cut_is_dropped_not_replaced() {
        // "é" is 0xC3 0xA9: the head ends on its lead byte, the tail starts on its second.
        let bytes = [b'a', 0xc3, 0xa9, b'z'];
        let text = middle_cut_text(&bytes, 2, 10);
        assert!(text.starts_with("a\n"), "{text:?}");
        assert!(text.ends_with("\nz"), "{text:?}");
        assert!(!text.contains('\u{fffd}'));
        assert!(!is_lossy(&bytes, 2, 10), "a split character is not lossy");
        assert!(is_lossy(&[b'a', 0xff, b'z'], 1, 10));
    }

    proptest! {
        #[test]
        fn truncated_text_is_always_valid_utf8_without_replacement(s in "\\PC{0,40}", cut in 0usize..200) {
            prop_assume!(!s.contains(char::REPLACEMENT_CHARACTER));
            let bytes = s.as_bytes();
            let cut = cut.min(bytes.len());
            let head = truncate_utf8_head(&bytes[..cut], true);
            prop_assert!(!head.contains(char::REPLACEMENT_CHARACTER), "{:?}", head);
            prop_assert!(head.ends_with(TRUNCATION_MARKER));
            let tail = truncate_utf8_tail(&bytes[cut..], true);
            prop_assert!(!tail.contains(char::REPLACEMENT_CHARACTER), "{:?}", tail);
            // Any two cut points: the middle-cut text never shows a replacement either.
            let (first, last) = (cut / 2, (bytes.len() - cut) / 2);
            let mut kept = bytes[..first].to_vec();
            kept.extend_from_slice(&bytes[bytes.len() - last..]);
            let text = middle_cut_text(&kept, first, bytes.len() as u64 + 1);
            prop_assert!(!text.contains(char::REPLACEMENT_CHARACTER), "{:?}", text);
            prop_assert!(!is_lossy(&kept, first, bytes.len() as u64 + 1));
        }
    }
}
