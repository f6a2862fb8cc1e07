//! Bounded output capture: what a run keeps of what it writes.
//!
//! Within the cap (`max_output_bytes`, 200,000 bytes by default) a run keeps, of each
//! stream, its beginning and its end, so that an agent sees both how a command started
//! and how it ended (where compilers and test runners print errors and summaries):
//!
//! - When stdout and stderr together fit the cap, both are kept whole.
//! - Otherwise the cap is shared ([`ends::shares`]): stderr is given at least a quarter
//!   of the cap (or all it wrote, if less), stdout up to the rest, stderr what stdout
//!   leaves. Neither stream can starve the other: stderr's end is always there when the
//!   command wrote any.
//! - A stream that does not fit its share keeps its first half-share and its last
//!   half-share of bytes; the text has a line in between that says how many bytes were
//!   dropped there ([`dropped_marker`]). The exact counts are in
//!   [`crate::StreamSize`].
//! - The combined stream (arrival order) keeps its first and last half-cap the same way.
//! - The event tail is the combined stream's real end: its last `tail_bytes`.
//!
//! Memory is bounded by `3 × max_output_bytes` (and `tail_bytes`, when larger than half
//! the cap) whatever the child writes: per stream and for the combined stream, a head
//! buffer and a ring of half the cap each; the event tail is read from the combined
//! stream's ring. Each chunk is copied once into its stream's buffers and once into the
//! combined stream's.
//!
//! The parts: `ends.rs` (a stream's two ends while it is written, and the shares),
//! `text.rs` (kept bytes as text, and the markers), `within.rs` (holding output built
//! elsewhere to the limits again), `live.rs` (a running command's output as it arrives, for
//! progress reports and background runs read from a cursor).

mod ends;
mod live;
mod text;
mod within;

use std::time::Duration;

use crate::exec_output::{ExecOutput, ExitStatus, OutputLimits, StreamSize};
use ends::{Ends, Kept};
pub use live::{CursorPastEnd, LiveOutput, OutputSince};
pub use text::{
    DROPPED_MARKER_PREFIX, TRUNCATION_MARKER, dropped_marker, truncate_utf8_head,
    truncate_utf8_tail,
};

/// Which stream a chunk came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// Collects a child's output under [`OutputLimits`] (see the module's header for what
/// is kept).
#[derive(Debug)]
pub struct OutputCollector {
    limits: OutputLimits,
    stdout: Ends,
    stderr: Ends,
    /// Also the source of the event tail (its last `tail_bytes`).
    combined: Ends,
    live: Option<LiveOutput>,
}

impl OutputCollector {
    /// An empty collector.
    pub fn new(limits: OutputLimits) -> Self {
        let cap = limits.max_output_bytes;
        OutputCollector {
            limits,
            stdout: Ends::new(cap),
            stderr: Ends::new(cap),
            combined: Ends::with_end(cap, limits.tail_bytes),
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
        if let Some(live) = &self.live {
            live.push(chunk);
        }
        match stream {
            Stream::Stdout => self.stdout.push(chunk),
            Stream::Stderr => self.stderr.push(chunk),
        }
        self.combined.push(chunk);
    }

    /// Total bytes seen, kept or not.
    pub fn total_bytes(&self) -> u64 {
        self.combined.written()
    }

    /// Build the typed result.
    pub fn finish(self, status: ExitStatus, timed_out: bool, duration: Duration) -> ExecOutput {
        let cap = self.limits.max_output_bytes;
        let (out_share, err_share) =
            ends::shares(cap, self.stdout.written(), self.stderr.written());
        let stdout = self.stdout.keep(out_share);
        let stderr = self.stderr.keep(err_share);
        let combined = self.combined.keep(cap);
        let written = self.combined.written();
        let tail_cut = written > self.limits.tail_bytes as u64;
        let tail = self
            .combined
            .last((self.limits.tail_bytes as u64).min(written) as usize);
        ExecOutput {
            status,
            stdout: kept_text(&stdout),
            stderr: kept_text(&stderr),
            stdout_size: size_of(&stdout),
            stderr_size: size_of(&stderr),
            truncated: stdout.is_cut() || stderr.is_cut(),
            stdout_bytes: lossy_bytes(stdout),
            stderr_bytes: lossy_bytes(stderr),
            combined: kept_text(&combined),
            tail: truncate_utf8_tail(&tail, tail_cut),
            timed_out,
            duration,
            refused_writes: crate::exec_output::RefusedWrites::NotWatched,
            egress: Vec::new(),
        }
    }
}

/// A stream's kept bytes as text, with the dropped middle marked.
fn kept_text(kept: &Kept) -> String {
    text::middle_cut_text(&kept.bytes, kept.first, kept.written)
}

/// What a stream wrote and kept.
fn size_of(kept: &Kept) -> StreamSize {
    StreamSize {
        written: kept.written,
        kept_first: kept.first.min(kept.bytes.len()) as u64,
        kept_last: kept.last() as u64,
    }
}

impl ExecOutput {
    /// Standard output as bytes to pass on (where `warden exec` writes the command's
    /// stdout): the exact kept bytes when they are not UTF-8 — the marker line between
    /// the two ends when the middle was dropped — else the text.
    pub fn stdout_raw(&self) -> Vec<u8> {
        raw(
            &self.stdout,
            self.stdout_bytes.as_deref(),
            &self.stdout_size,
        )
    }

    /// Standard error as bytes to pass on, as [`ExecOutput::stdout_raw`].
    pub fn stderr_raw(&self) -> Vec<u8> {
        raw(
            &self.stderr,
            self.stderr_bytes.as_deref(),
            &self.stderr_size,
        )
    }
}

fn raw(text: &str, bytes: Option<&[u8]>, size: &StreamSize) -> Vec<u8> {
    let Some(bytes) = bytes else {
        return text.as_bytes().to_vec();
    };
    if !size.is_cut() || size.kept_first as usize > bytes.len() {
        return bytes.to_vec();
    }
    let (head, tail) = bytes.split_at(size.kept_first as usize);
    let mut out = head.to_vec();
    if !out.is_empty() && !out.ends_with(b"\n") {
        out.push(b'\n');
    }
    out.extend_from_slice(dropped_marker(size.kept_first, size.kept_last, size.written).as_bytes());
    out.push(b'\n');
    out.extend_from_slice(tail);
    out
}

/// The kept bytes of a stream, when its text cannot carry them (they are not UTF-8), so
/// that a caller can still hand them over losslessly. A character split by the cut alone
/// does not count.
fn lossy_bytes(kept: Kept) -> Option<Vec<u8>> {
    text::is_lossy(&kept.bytes, kept.first, kept.written).then_some(kept.bytes)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Limits for a test.
    pub(in crate::output) fn limits(max: usize, tail: usize) -> OutputLimits {
        OutputLimits {
            max_output_bytes: max,
            tail_bytes: tail,
        }
    }

    fn finish(c: OutputCollector) -> ExecOutput {
        c.finish(ExitStatus::Code(0), false, Duration::ZERO)
    }

    #[test]
    fn keeps_everything_under_the_cap() {
        let mut c = OutputCollector::new(limits(100, 10));
        c.push(Stream::Stdout, b"out ");
        c.push(Stream::Stderr, b"err ");
        c.push(Stream::Stdout, b"more");
        let out = finish(c);
        assert_eq!(out.stdout, "out more");
        assert_eq!(out.stderr, "err ");
        assert_eq!(out.combined, "out err more");
        assert_eq!(out.stdout_size, StreamSize::whole(8));
        assert_eq!(out.stderr_size, StreamSize::whole(4));
        // 12 bytes seen, 10 kept in the tail: the tail says it lost its beginning.
        assert_eq!(out.tail, format!("{TRUNCATION_MARKER}\nt err more"));
        assert!(!out.truncated);
    }

    #[test]
    fn a_cut_stream_keeps_its_beginning_and_its_end() {
        let mut c = OutputCollector::new(limits(8, 4));
        c.push(Stream::Stdout, b"abcdefghijklmnop");
        let out = finish(c);
        assert!(out.truncated);
        assert_eq!(
            out.stdout,
            format!("abcd\n{}\nmnop", dropped_marker(4, 4, 16))
        );
        assert_eq!(
            out.stdout_size,
            StreamSize {
                written: 16,
                kept_first: 4,
                kept_last: 4
            }
        );
        assert_eq!(out.combined, out.stdout);
        assert_eq!(out.tail, format!("{TRUNCATION_MARKER}\nmnop"));
    }

    #[test]
    fn a_stdout_flood_leaves_stderr_whole_and_the_end_of_stdout() {
        // A build: progress on stdout, the error at the very end on stderr.
        let mut c = OutputCollector::new(limits(1000, 100));
        for i in 0..500 {
            c.push(Stream::Stdout, format!("compiling {i}\n").as_bytes());
        }
        c.push(Stream::Stderr, b"error: it broke\n");
        c.push(Stream::Stdout, b"build failed\n");
        let out = finish(c);
        assert_eq!(out.stderr, "error: it broke\n");
        assert!(out.stdout.starts_with("compiling 0\n"));
        assert!(out.stdout.ends_with("build failed\n"), "{}", out.stdout);
        assert_eq!(out.stdout_size.kept() + out.stderr_size.kept(), 1000);
        assert!(out.combined.ends_with("build failed\n"));
        assert!(out.tail.ends_with("error: it broke\nbuild failed\n"));
    }

    #[test]
    fn floods_on_both_streams_share_the_cap_three_to_one() {
        let mut c = OutputCollector::new(limits(1000, 100));
        c.push(Stream::Stdout, &[b'o'; 5000]);
        c.push(Stream::Stderr, &[b'e'; 5000]);
        let out = finish(c);
        assert_eq!(out.stdout_size.kept(), 750);
        assert_eq!(out.stderr_size.kept(), 250);
        assert!(out.stderr_size.is_cut() && out.stdout_size.is_cut());
    }

    #[test]
    fn bytes_that_are_not_utf8_are_kept_exactly_head_then_tail() {
        let mut c = OutputCollector::new(limits(6, 4));
        c.push(Stream::Stdout, &[0xff, 1, 2, 3, 4, 5, 6, 7, 0xfe]);
        let out = finish(c);
        assert_eq!(out.stdout_bytes, Some(vec![0xff, 1, 2, 6, 7, 0xfe]));
        assert_eq!(out.stdout_size.kept_first, 3);
        assert!(out.stdout.contains('\u{fffd}'));
        let mut passed_on = vec![0xff, 1, 2, b'\n'];
        passed_on.extend_from_slice(dropped_marker(3, 3, 9).as_bytes());
        passed_on.extend_from_slice(&[b'\n', 6, 7, 0xfe]);
        assert_eq!(out.stdout_raw(), passed_on);
        // A character split by the cut is not a reason for bytes.
        let mut c = OutputCollector::new(limits(4, 4));
        c.push(Stream::Stdout, "aé—xyzé".as_bytes());
        let out = finish(c);
        assert_eq!(out.stdout_bytes, None, "{:?}", out.stdout);
        assert!(!out.stdout.contains('\u{fffd}'));
    }

    proptest! {
        #[test]
        fn memory_is_bounded_and_each_stream_keeps_its_ends(
            chunks in proptest::collection::vec((any::<bool>(), proptest::collection::vec(any::<u8>(), 0..300)), 0..40),
            max in 0usize..500, tail in 0usize..100,
        ) {
            let mut c = OutputCollector::new(limits(max, tail));
            let (mut all, mut out, mut err) = (Vec::new(), Vec::new(), Vec::new());
            for (is_err, chunk) in &chunks {
                c.push(if *is_err { Stream::Stderr } else { Stream::Stdout }, chunk);
                all.extend_from_slice(chunk);
                if *is_err { err.extend_from_slice(chunk) } else { out.extend_from_slice(chunk) }
            }
            let expected_tail = &all[all.len().saturating_sub(tail)..];
            prop_assert_eq!(c.combined.last(expected_tail.len()), expected_tail.to_vec());
            prop_assert_eq!(c.total_bytes(), all.len() as u64);
            let result = finish(c);
            prop_assert_eq!(result.truncated, all.len() > max);
            prop_assert!(result.stdout_size.kept() + result.stderr_size.kept() <= max as u64);
            for (size, written) in [(result.stdout_size, &out), (result.stderr_size, &err)] {
                prop_assert_eq!(size.written, written.len() as u64);
                if size.is_cut() {
                    // Both ends kept: the first and last bytes of the stream.
                    prop_assert_eq!(size.kept_first, size.kept() - size.kept() / 2);
                } else {
                    prop_assert_eq!(size.kept(), written.len() as u64);
                }
            }
            if !err.is_empty() && max >= 4 {
                prop_assert!(result.stderr_size.kept() > 0, "stderr never starves");
            }
        }
    }
}
