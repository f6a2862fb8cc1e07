//! Output built elsewhere — a node's result, which cannot be trusted to have kept to the
//! limits — held to them again, the way [`super::OutputCollector`] keeps them.

use super::ends::shares;
use super::text::middle_cut_text;
use super::truncate_utf8_tail;
use crate::exec_output::{ExecOutput, OutputLimits, StreamSize};

/// Room past a share before a text is cut again: the marker a cut stream carries and the
/// notes a host appends after its run (a repository check, a containment note). A node
/// that kept to the limits is never cut twice; one that did not gets at most this much
/// more than the cap per text.
const SLACK: usize = 4096;

impl ExecOutput {
    /// This output held to `limits` again, whoever built it. When the two streams are
    /// longer than the cap, the cap is shared as the collector shares it and each stream
    /// that does not fit keeps its beginning and its end, with the dropped middle marked
    /// — text and raw bytes alike; the combined stream keeps its two ends within the cap
    /// too, and the tail its last `tail_bytes`. Each stream's size says at least what is
    /// kept; `truncated` is set when anything was cut, and never cleared: a sender may
    /// say it lost output, not that it did not.
    pub fn within(mut self, limits: OutputLimits) -> ExecOutput {
        let cap = limits.max_output_bytes;
        // A stream's raw bytes, when there, are its measure (see `hold_stream`).
        let length = |text: &String, bytes: &Option<Vec<u8>>| {
            bytes.as_ref().map_or(text.len(), Vec::len) as u64
        };
        let (out_len, err_len) = (
            length(&self.stdout, &self.stdout_bytes),
            length(&self.stderr, &self.stderr_bytes),
        );
        let (out_share, err_share) = shares(cap, out_len, err_len);
        let mut cut = false;
        for (text, bytes, size, share) in [
            (
                &mut self.stdout,
                &mut self.stdout_bytes,
                &mut self.stdout_size,
                out_share,
            ),
            (
                &mut self.stderr,
                &mut self.stderr_bytes,
                &mut self.stderr_size,
                err_share,
            ),
        ] {
            cut |= hold_stream(text, bytes, size, share);
        }
        // The combined text is lossy where the streams are not UTF-8: up to three bytes
        // shown for each one written.
        let lossy = self.stdout_bytes.is_some() || self.stderr_bytes.is_some();
        let combined_limit = if lossy {
            3 * (cap + SLACK)
        } else {
            cap + SLACK
        };
        if self.combined.len() > combined_limit {
            self.combined = cut_text(&self.combined, cap).0;
            cut = true;
        }
        if self.tail.len() > limits.tail_bytes {
            let bytes = self.tail.as_bytes();
            self.tail = truncate_utf8_tail(&bytes[bytes.len() - limits.tail_bytes..], true);
            cut = true;
        }
        self.truncated |= cut;
        self
    }
}

/// One stream held to `share` bytes (with [`SLACK`]); true if it was cut. Its size is
/// made consistent with what is kept either way. When the stream's raw bytes are there,
/// they are what is measured and cut — the text is their lossy form, up to three times as
/// long (a replacement character for each invalid byte) — and the text is made again
/// from the kept bytes.
fn hold_stream(
    text: &mut String,
    bytes: &mut Option<Vec<u8>>,
    size: &mut StreamSize,
    share: usize,
) -> bool {
    let length = bytes.as_ref().map_or(text.len(), Vec::len);
    if size.kept() == 0 && length > 0 {
        // No size was given (a sender from before sizes): the text is all there is.
        *size = StreamSize::whole(length as u64);
    }
    let text_limit = match bytes {
        Some(_) => 3 * (share + SLACK),
        None => share + SLACK,
    };
    let cut = length > share + SLACK || text.len() > text_limit;
    if cut {
        let written = (length as u64).max(size.written);
        match bytes {
            Some(b) => {
                let (first, last) = (share - share / 2, share / 2);
                if b.len() > share {
                    let end = b.split_off(b.len() - last);
                    b.truncate(first);
                    b.extend_from_slice(&end);
                }
                let first = first.min(b.len());
                *text = middle_cut_text(b, first, written);
                *size = StreamSize {
                    written,
                    kept_first: first as u64,
                    kept_last: (b.len() - first) as u64,
                };
            }
            None => {
                let (kept_text, first, last) = cut_text(text, share);
                *text = kept_text;
                *size = StreamSize {
                    written,
                    kept_first: first as u64,
                    kept_last: last as u64,
                };
            }
        }
    }
    // A size may not claim fewer bytes written than it keeps.
    size.written = size.written.max(size.kept());
    cut
}

/// `text` within `share` bytes: its first `⌈share / 2⌉` and last `⌊share / 2⌋` bytes (on
/// character boundaries), with the dropped middle marked; the lengths of the two ends.
fn cut_text(text: &str, share: usize) -> (String, usize, usize) {
    if text.len() <= share {
        return (text.to_owned(), text.len(), 0);
    }
    let mut first = share - share / 2;
    while !text.is_char_boundary(first) {
        first -= 1;
    }
    let mut start = text.len() - share / 2;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let mut kept = text.as_bytes()[..first].to_vec();
    kept.extend_from_slice(&text.as_bytes()[start..]);
    let last = kept.len() - first;
    (
        middle_cut_text(&kept, first, text.len() as u64),
        first,
        last,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec_output::{ExitStatus, RefusedWrites};
    use std::time::Duration;

    use crate::output::TRUNCATION_MARKER;
    use crate::output::tests::limits;

    fn output(stdout: String, stderr: String) -> ExecOutput {
        ExecOutput {
            status: ExitStatus::Code(0),
            stdout_size: StreamSize::whole(stdout.len() as u64),
            stderr_size: StreamSize::whole(stderr.len() as u64),
            combined: format!("{stdout}{stderr}"),
            tail: String::new(),
            stdout,
            stderr,
            stdout_bytes: None,
            stderr_bytes: None,
            truncated: false,
            timed_out: false,
            duration: Duration::ZERO,
            refused_writes: RefusedWrites::NotWatched,
            egress: Vec::new(),
        }
    }

    #[test]
    fn a_flood_from_elsewhere_keeps_both_ends_of_both_streams() {
        let stdout = format!("start{}end-of-stdout", "é".repeat(50_000));
        let stderr = format!("error:{}final error", "x".repeat(50_000));
        let mut sent = output(stdout.clone(), stderr);
        sent.tail = "t".repeat(100);
        let out = sent.within(limits(10_000, 20));
        assert!(out.truncated);
        assert!(out.stdout.starts_with("start"), "{}", &out.stdout[..40]);
        assert!(out.stdout.ends_with("end-of-stdout"));
        assert!(out.stdout.contains("bytes dropped here"));
        assert!(!out.stdout.contains('\u{fffd}'), "no character split");
        assert!(out.stderr.starts_with("error:") && out.stderr.ends_with("final error"));
        // stderr got its quarter, stdout the rest.
        assert_eq!(out.stderr_size.kept(), 2_500);
        assert!(out.stdout.len() < 7_500 + 200);
        let kept = out.stdout_size.kept();
        assert!(
            (7_497..=7_500).contains(&kept),
            "characters are not split: {kept}"
        );
        assert!(out.stdout_size.written >= stdout.len() as u64);
        assert!(out.combined.len() < 10_000 + 200);
        assert_eq!(out.tail, format!("{TRUNCATION_MARKER}\n{}", "t".repeat(20)));
    }

    #[test]
    fn bytes_that_are_not_utf8_are_measured_as_bytes_and_cut_as_bytes() {
        let bytes = b"ab\xff\n".repeat(50_000);
        let mut sent = output(String::from_utf8_lossy(&bytes).into_owned(), String::new());
        sent.stdout_bytes = Some(bytes.clone());
        sent.stdout_size = StreamSize::whole(bytes.len() as u64);
        // At the cap as bytes, though its lossy text is half as long again: left alone.
        let same = sent.clone().within(limits(200_000, 100_000));
        assert_eq!(same.stdout, sent.stdout);
        assert!(!same.truncated);
        // Past the cap: the bytes keep their two ends, and the text is made from them.
        let out = sent.within(limits(10_000, 100));
        let kept = out.stdout_bytes.as_ref().unwrap();
        assert_eq!(kept.len(), 10_000);
        assert_eq!(&kept[..5_000], &bytes[..5_000]);
        assert_eq!(&kept[5_000..], &bytes[bytes.len() - 5_000..]);
        assert_eq!(out.stdout_size.written, 200_000);
        assert!(
            out.stdout
                .contains("… (truncated: 190000 bytes dropped here")
        );
    }

    #[test]
    fn output_within_the_limits_is_left_alone_and_a_senders_cut_stays() {
        let mut small = output("ok\n".into(), "warning\n".into());
        small.truncated = true;
        // A node's marker and notes fit the slack: not cut twice.
        small.stdout.push_str(&"n".repeat(SLACK - 10));
        let same = small.clone().within(limits(10, 100));
        assert_eq!(same, small);
    }

    #[test]
    fn a_size_never_claims_less_written_than_kept() {
        let mut lying = output("abcdef".into(), String::new());
        lying.stdout_size = StreamSize {
            written: 1,
            kept_first: 6,
            kept_last: 0,
        };
        let out = lying.within(limits(100, 100));
        assert_eq!(out.stdout_size.written, 6);
        assert!(!out.stdout_size.is_cut());
    }
}
