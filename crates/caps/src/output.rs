//! Bounded output capture: the head of the combined stream up to a cap, a ring of the
//! last bytes for events, and UTF-8-safe truncation markers.
//!
//! Memory use is bounded by `2 × max_output_bytes + tail_bytes` whatever the child
//! writes; bytes past the cap are counted and dropped.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::shell::{ExecOutput, ExitStatus, OutputLimits};

/// Appended to (or, for tails, prepended to) any text that lost bytes to a limit.
pub const TRUNCATION_MARKER: &str = "… (truncated)";

/// Which stream a chunk came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// Collects a child's output under [`OutputLimits`].
#[derive(Debug)]
pub struct OutputCollector {
    limits: OutputLimits,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    combined: Vec<u8>,
    stdout_lost: bool,
    stderr_lost: bool,
    tail: TailRing,
    total_bytes: u64,
    live: Option<LiveOutput>,
}

impl OutputCollector {
    /// An empty collector.
    pub fn new(limits: OutputLimits) -> Self {
        OutputCollector {
            limits,
            stdout: Vec::new(),
            stderr: Vec::new(),
            combined: Vec::new(),
            stdout_lost: false,
            stderr_lost: false,
            tail: TailRing::new(limits.tail_bytes),
            total_bytes: 0,
            live: None,
        }
    }

    /// Also copy every chunk into `live`, for whoever reports progress while the run goes.
    pub fn with_live(mut self, live: Option<LiveOutput>) -> Self {
        self.live = live;
        self
    }

    /// Record a chunk read from `stream`.
    pub fn push(&mut self, stream: Stream, chunk: &[u8]) {
        self.total_bytes += chunk.len() as u64;
        self.tail.push(chunk);
        if let Some(live) = &self.live {
            live.push(chunk);
        }
        let room = self
            .limits
            .max_output_bytes
            .saturating_sub(self.combined.len());
        let keep = room.min(chunk.len());
        let (buf, lost) = match stream {
            Stream::Stdout => (&mut self.stdout, &mut self.stdout_lost),
            Stream::Stderr => (&mut self.stderr, &mut self.stderr_lost),
        };
        if keep > 0 {
            buf.extend_from_slice(&chunk[..keep]);
            self.combined.extend_from_slice(&chunk[..keep]);
        }
        if keep < chunk.len() {
            *lost = true;
        }
    }

    /// True once the cap is reached (callers keep draining, but nothing more is kept).
    pub fn is_full(&self) -> bool {
        self.combined.len() >= self.limits.max_output_bytes
    }

    /// Total bytes seen, kept or not.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// Build the typed result.
    pub fn finish(self, status: ExitStatus, timed_out: bool, duration: Duration) -> ExecOutput {
        let truncated = self.stdout_lost || self.stderr_lost;
        let tail_truncated = self.total_bytes > self.tail.capacity as u64;
        ExecOutput {
            status,
            stdout_bytes: not_utf8(&self.stdout, self.stdout_lost),
            stderr_bytes: not_utf8(&self.stderr, self.stderr_lost),
            stdout: truncate_utf8_head(&self.stdout, self.stdout_lost),
            stderr: truncate_utf8_head(&self.stderr, self.stderr_lost),
            combined: truncate_utf8_head(&self.combined, truncated),
            tail: truncate_utf8_tail(&self.tail.contents(), tail_truncated),
            truncated,
            timed_out,
            duration,
            refused_writes: crate::RefusedWrites::NotWatched,
        }
    }
}

/// The kept bytes of a stream, when its text cannot carry them (they are not UTF-8), so
/// that a caller can still hand them over losslessly. A head cut by the cap may end inside
/// a character; that partial character alone does not count.
fn not_utf8(bytes: &[u8], cut: bool) -> Option<Vec<u8>> {
    let end = if cut {
        bytes.len() - partial_utf8_suffix_len(bytes)
    } else {
        bytes.len()
    };
    std::str::from_utf8(&bytes[..end])
        .is_err()
        .then(|| bytes.to_vec())
}

/// The last bytes a run has written so far, shared with whoever reports its progress
/// while it runs (a snapshot at any time; bounded whatever the run writes).
#[derive(Clone, Debug)]
pub struct LiveOutput(Arc<Mutex<Live>>);

#[derive(Debug)]
struct Live {
    tail: TailRing,
    bytes: u64,
    /// Where the run goes on when its output cannot be watched from here.
    elsewhere: Option<String>,
}

impl LiveOutput {
    /// Keep the last `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        LiveOutput(Arc::new(Mutex::new(Live {
            tail: TailRing::new(capacity),
            bytes: 0,
            elsewhere: None,
        })))
    }

    fn push(&self, chunk: &[u8]) {
        let mut inner = self.0.lock().unwrap_or_else(|p| p.into_inner());
        inner.tail.push(chunk);
        inner.bytes += chunk.len() as u64;
    }

    /// The kept tail as text (marked when earlier bytes were dropped) and the number of
    /// bytes written so far.
    pub fn snapshot(&self) -> (String, u64) {
        let inner = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let cut = inner.bytes > inner.tail.capacity as u64;
        (truncate_utf8_tail(&inner.tail.contents(), cut), inner.bytes)
    }

    /// Say that the run goes on at `place` (a remote node), whose output arrives only
    /// with its result: a progress report then says so rather than "no output yet".
    pub fn runs_elsewhere(&self, place: impl Into<String>) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).elsewhere = Some(place.into());
    }

    /// Where the run goes on, if [`LiveOutput::runs_elsewhere`] said.
    pub fn elsewhere(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elsewhere
            .clone()
    }
}

impl PartialEq for LiveOutput {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for LiveOutput {}

impl ExecOutput {
    /// This output held to `limits` again, whoever built it: the result of a run on
    /// another host (a node), which cannot be trusted to have kept to them. Each text is
    /// cut at the cap — stdout first, stderr and the combined stream within what is left
    /// of it — with the usual marker; the tail keeps its last `tail_bytes`; the raw bytes
    /// of a non-UTF-8 stream go with its text. `truncated` is set when anything was cut,
    /// and never cleared: a sender may say it lost output, not that it did not.
    pub fn within(mut self, limits: OutputLimits) -> ExecOutput {
        let max = limits.max_output_bytes;
        let mut cut = false;
        let mut head = |text: &mut String, bytes: &mut Option<Vec<u8>>, room: usize| {
            if text.len() > room {
                *text = truncate_utf8_head(&text.as_bytes()[..room], true);
                cut = true;
            }
            if let Some(b) = bytes
                && b.len() > room
            {
                b.truncate(room);
                cut = true;
            }
        };
        head(&mut self.stdout, &mut self.stdout_bytes, max);
        let left = max.saturating_sub(self.stdout.len().min(max));
        head(&mut self.stderr, &mut self.stderr_bytes, left);
        head(&mut self.combined, &mut None, max);
        if self.tail.len() > limits.tail_bytes {
            let bytes = self.tail.as_bytes();
            self.tail = truncate_utf8_tail(&bytes[bytes.len() - limits.tail_bytes..], true);
            cut = true;
        }
        self.truncated |= cut;
        self
    }
}

/// Text for a byte head that may have been cut: when `cut`, drop a trailing partial
/// UTF-8 sequence and append [`TRUNCATION_MARKER`] on its own line.
pub fn truncate_utf8_head(bytes: &[u8], cut: bool) -> String {
    if !cut {
        return String::from_utf8_lossy(bytes).into_owned();
    }
    let end = bytes.len() - partial_utf8_suffix_len(bytes);
    let mut text = String::from_utf8_lossy(&bytes[..end]).into_owned();
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
    let start = bytes
        .iter()
        .take(3)
        .take_while(|b| is_continuation(**b))
        .count();
    format!(
        "{TRUNCATION_MARKER}\n{}",
        String::from_utf8_lossy(&bytes[start..])
    )
}

fn is_continuation(b: u8) -> bool {
    b & 0b1100_0000 == 0b1000_0000
}

/// Length of an incomplete multi-byte sequence at the end of `bytes` (0 if it ends on a
/// character boundary).
fn partial_utf8_suffix_len(bytes: &[u8]) -> usize {
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

/// A fixed-capacity ring holding the last `capacity` bytes pushed.
#[derive(Debug)]
struct TailRing {
    capacity: usize,
    buf: Vec<u8>,
    /// Next write position once `buf` is full.
    next: usize,
}

impl TailRing {
    fn new(capacity: usize) -> Self {
        TailRing {
            capacity,
            buf: Vec::new(),
            next: 0,
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        if self.capacity == 0 {
            return;
        }
        // Only the last `capacity` bytes of a chunk can survive.
        let chunk = &chunk[chunk.len().saturating_sub(self.capacity)..];
        let mut rest = chunk;
        while !rest.is_empty() {
            if self.buf.len() < self.capacity {
                let n = (self.capacity - self.buf.len()).min(rest.len());
                self.buf.extend_from_slice(&rest[..n]);
                rest = &rest[n..];
            } else {
                let n = (self.capacity - self.next).min(rest.len());
                self.buf[self.next..self.next + n].copy_from_slice(&rest[..n]);
                self.next = (self.next + n) % self.capacity;
                rest = &rest[n..];
            }
        }
    }

    fn contents(&self) -> Vec<u8> {
        if self.buf.len() < self.capacity {
            return self.buf.clone();
        }
        let mut out = Vec::with_capacity(self.capacity);
        out.extend_from_slice(&self.buf[self.next..]);
        out.extend_from_slice(&self.buf[..self.next]);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn limits(max: usize, tail: usize) -> OutputLimits {
        OutputLimits {
            max_output_bytes: max,
            tail_bytes: tail,
        }
    }

    #[test]
    fn keeps_everything_under_the_cap() {
        let mut c = OutputCollector::new(limits(100, 10));
        c.push(Stream::Stdout, b"out ");
        c.push(Stream::Stderr, b"err ");
        c.push(Stream::Stdout, b"more");
        let out = c.finish(ExitStatus::Code(0), false, Duration::ZERO);
        assert_eq!(out.stdout, "out more");
        assert_eq!(out.stderr, "err ");
        assert_eq!(out.combined, "out err more");
        // 12 bytes seen, 10 kept in the tail: the tail says it lost its beginning.
        assert_eq!(out.tail, format!("{TRUNCATION_MARKER}\nt err more"));
        assert!(!out.truncated);
    }

    #[test]
    fn cap_keeps_the_head_and_marks_it() {
        let mut c = OutputCollector::new(limits(5, 4));
        c.push(Stream::Stdout, b"abcdefgh");
        let out = c.finish(ExitStatus::Code(0), false, Duration::ZERO);
        assert!(out.truncated);
        assert_eq!(out.combined, format!("abcde\n{TRUNCATION_MARKER}"));
        assert_eq!(out.stdout, format!("abcde\n{TRUNCATION_MARKER}"));
        assert_eq!(out.tail, format!("{TRUNCATION_MARKER}\nefgh"));
    }

    #[test]
    fn truncation_never_splits_a_character() {
        // "é" is two bytes; a cap of 3 falls inside the second one.
        let mut c = OutputCollector::new(limits(3, 3));
        c.push(Stream::Stdout, "aéé".as_bytes());
        let out = c.finish(ExitStatus::Code(0), false, Duration::ZERO);
        assert_eq!(out.combined, format!("aé\n{TRUNCATION_MARKER}"));
        // The tail's first byte is a continuation byte of the first "é": dropped.
        assert_eq!(out.tail, format!("{TRUNCATION_MARKER}\né"));
    }

    #[test]
    fn output_from_elsewhere_is_held_to_the_limits_and_says_so() {
        let big = |n: usize| "é".repeat(n);
        let out = ExecOutput {
            status: ExitStatus::Code(0),
            stdout: big(100),
            stderr: big(100),
            stdout_bytes: Some(vec![0xff; 500]),
            stderr_bytes: None,
            combined: big(200),
            tail: big(100),
            truncated: false,
            timed_out: false,
            duration: Duration::ZERO,
            refused_writes: crate::RefusedWrites::NotWatched,
        }
        .within(limits(101, 11));
        assert!(out.truncated);
        // 101 bytes is 50 characters and half of one: the half is dropped.
        assert_eq!(
            out.stdout,
            format!(
                "{}
{TRUNCATION_MARKER}",
                big(50)
            )
        );
        assert_eq!(out.stderr, TRUNCATION_MARKER, "nothing left after stdout");
        assert_eq!(out.stdout_bytes.as_deref().map(<[u8]>::len), Some(101));
        assert!(out.combined.starts_with(&big(50)));
        assert_eq!(
            out.tail,
            format!(
                "{TRUNCATION_MARKER}
{}",
                big(5)
            )
        );
        // Within its limits it is left alone, and a sender's "truncated" stays.
        let small = ExecOutput {
            stdout: "ok\n".into(),
            combined: "ok\n".into(),
            tail: "ok\n".into(),
            truncated: true,
            ..out.clone()
        };
        let same = small.clone().within(limits(1000, 1000));
        assert_eq!(same, small);
    }

    #[test]
    fn four_byte_characters_are_not_split() {
        let text = "🦀🦀";
        for cap in 0..8 {
            let got = truncate_utf8_head(&text.as_bytes()[..cap], true);
            assert!(!got.contains('\u{fffd}'), "cap {cap}: {got:?}");
        }
    }

    proptest! {
        #[test]
        fn memory_is_bounded_and_head_is_a_prefix(
            chunks in proptest::collection::vec((any::<bool>(), proptest::collection::vec(any::<u8>(), 0..300)), 0..40),
            max in 0usize..500, tail in 0usize..100,
        ) {
            let mut c = OutputCollector::new(limits(max, tail));
            let mut all = Vec::new();
            for (is_err, chunk) in &chunks {
                c.push(if *is_err { Stream::Stderr } else { Stream::Stdout }, chunk);
                all.extend_from_slice(chunk);
                prop_assert!(c.combined.len() <= max);
                prop_assert!(c.tail.buf.len() <= tail);
            }
            prop_assert_eq!(&c.combined[..], &all[..all.len().min(max)]);
            let expected_tail = &all[all.len().saturating_sub(tail)..];
            prop_assert_eq!(c.tail.contents(), expected_tail.to_vec());
            let out = c.finish(ExitStatus::Code(0), false, Duration::ZERO);
            prop_assert_eq!(out.truncated, all.len() > max);
        }

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
        }
    }
}
