//! A running command's output as it arrives: the last `capacity` bytes of the combined
//! stream (stdout and stderr in arrival order), shared with whoever watches the run.
//! Progress reports take a snapshot of its end; a background run's reader takes what
//! came after its cursor (an absolute byte offset in the stream) and can wait for more.
//! Memory is bounded by the capacity whatever the command writes, and grows only as
//! output arrives (an idle run holds nothing).

use std::sync::{Arc, Mutex};

use super::ends::TailRing;
use super::text::truncate_utf8_tail;

/// The last bytes a run has written so far, shared with whoever reports its progress
/// or reads it from a cursor while it runs (bounded whatever the run writes).
#[derive(Clone, Debug)]
pub struct LiveOutput(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    state: Mutex<Live>,
    /// Woken on every chunk, for readers waiting for more.
    more: tokio::sync::Notify,
}

#[derive(Debug)]
struct Live {
    tail: TailRing,
    bytes: u64,
    /// Where the run goes on when its output cannot be watched from here.
    elsewhere: Option<String>,
}

/// What a read from a cursor found ([`LiveOutput::since`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputSince {
    /// The offset of the first byte of `text` in the run's output.
    pub from: u64,
    /// The cursor to read from next time (the offset just past `text`).
    pub next: u64,
    /// Bytes between the cursor asked for and `from` that are no longer kept (the
    /// buffer holds only the last `capacity` bytes).
    pub dropped: u64,
    /// The bytes read, as UTF-8 text (invalid sequences replaced). A character cut by
    /// the end of what has arrived is left for the next read.
    pub text: String,
    /// Bytes the run has written so far.
    pub written: u64,
}

/// A cursor beyond what the run has written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cursor {cursor} is past the end of the output ({written} bytes written so far)")]
pub struct CursorPastEnd {
    /// The cursor asked for.
    pub cursor: u64,
    /// Bytes written so far.
    pub written: u64,
}

impl LiveOutput {
    /// Keep the last `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        LiveOutput(Arc::new(Shared {
            state: Mutex::new(Live {
                tail: TailRing::new(capacity),
                bytes: 0,
                elsewhere: None,
            }),
            more: tokio::sync::Notify::new(),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Live> {
        self.0.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn push(&self, chunk: &[u8]) {
        {
            let mut inner = self.lock();
            inner.tail.push(chunk);
            inner.bytes += chunk.len() as u64;
        }
        self.0.more.notify_waiters();
    }

    /// The kept tail as text (marked when earlier bytes were dropped) and the number of
    /// bytes written so far.
    pub fn snapshot(&self) -> (String, u64) {
        let inner = self.lock();
        let cut = inner.bytes > inner.tail.capacity as u64;
        (truncate_utf8_tail(&inner.tail.contents(), cut), inner.bytes)
    }

    /// Add output produced elsewhere — a run on a node, whose output crosses the Bridge
    /// as it is written — to what this run's readers see.
    pub fn relay(&self, chunk: &[u8]) {
        if !chunk.is_empty() {
            self.push(chunk);
        }
    }

    /// The raw bytes after `cursor`, at most `max` of them, and the offset of the first
    /// (past `cursor` when older bytes are no longer kept; `cursor` itself when it is past
    /// the end, with nothing). For a forwarder that passes a run's output on exactly as it
    /// arrives (a node streaming to its gateway), where [`LiveOutput::since`] gives text.
    pub fn bytes_since(&self, cursor: u64, max: usize) -> (u64, Vec<u8>) {
        let inner = self.lock();
        let written = inner.bytes;
        if cursor >= written {
            return (cursor, Vec::new());
        }
        let kept = inner.tail.contents();
        let oldest = written - kept.len() as u64;
        let from = cursor.max(oldest);
        let start = (from - oldest) as usize;
        let end = kept.len().min(start.saturating_add(max));
        (from, kept[start..end].to_vec())
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.lock().bytes
    }

    /// What came after `cursor`, at most `max` bytes of it. A cursor older than what is
    /// kept reads from the oldest kept byte and says how much was dropped.
    pub fn since(&self, cursor: u64, max: usize) -> Result<OutputSince, CursorPastEnd> {
        let inner = self.lock();
        let written = inner.bytes;
        if cursor > written {
            return Err(CursorPastEnd { cursor, written });
        }
        let kept = inner.tail.contents();
        let oldest = written - kept.len() as u64;
        let from = cursor.max(oldest);
        let start = (from - oldest) as usize;
        let end = kept.len().min(start.saturating_add(max));
        let mut bytes = &kept[start..end];
        // A character whose last bytes have not arrived (or lie past `max`) waits for
        // the next read, unless it could never complete (more than 3 bytes short).
        if let Err(e) = std::str::from_utf8(bytes)
            && e.error_len().is_none()
            && bytes.len() - e.valid_up_to() < 4
            && e.valid_up_to() > 0
        {
            bytes = &bytes[..e.valid_up_to()];
        }
        Ok(OutputSince {
            from,
            next: from + bytes.len() as u64,
            dropped: from - cursor,
            text: String::from_utf8_lossy(bytes).into_owned(),
            written,
        })
    }

    /// Resolves once more than `cursor` bytes have been written (at once if they
    /// already have). Bound it with a timeout: a run that writes nothing more never
    /// resolves it.
    pub async fn more_than(&self, cursor: u64) {
        loop {
            let more = self.0.more.notified();
            tokio::pin!(more);
            // Registered before the check, so a chunk between the two still wakes it.
            more.as_mut().enable();
            if self.written() > cursor {
                return;
            }
            more.await;
        }
    }

    /// Say that the run goes on at `place` (a remote node), whose output arrives only
    /// with its result: a progress report then says so rather than "no output yet".
    pub fn runs_elsewhere(&self, place: impl Into<String>) {
        self.lock().elsewhere = Some(place.into());
    }

    /// Where the run goes on, if [`LiveOutput::runs_elsewhere`] said.
    pub fn elsewhere(&self) -> Option<String> {
        self.lock().elsewhere.clone()
    }
}

impl PartialEq for LiveOutput {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for LiveOutput {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_from_a_cursor_and_says_what_was_dropped() {
        let live = LiveOutput::new(8);
        live.push(b"abcdef");
        let read = live.since(0, 100).unwrap();
        assert_eq!((read.text.as_str(), read.from, read.next), ("abcdef", 0, 6));
        assert_eq!(read.dropped, 0);
        live.push(b"ghijkl");
        // 12 written, the last 8 kept: a reader at 6 lost nothing, one at 2 lost 2.
        let read = live.since(6, 100).unwrap();
        assert_eq!(
            (read.text.as_str(), read.next, read.dropped),
            ("ghijkl", 12, 0)
        );
        let read = live.since(2, 100).unwrap();
        assert_eq!(
            (read.text.as_str(), read.from, read.dropped),
            ("efghijkl", 4, 2)
        );
        // At most `max` bytes, then the rest from `next`.
        let read = live.since(4, 3).unwrap();
        assert_eq!((read.text.as_str(), read.next), ("efg", 7));
        assert_eq!(live.since(12, 100).unwrap().text, "");
        assert_eq!(
            live.since(13, 100),
            Err(CursorPastEnd {
                cursor: 13,
                written: 12
            })
        );
        assert_eq!(live.since(u64::MAX, 1).unwrap_err().written, 12);
    }

    #[test]
    fn a_character_not_yet_whole_waits_for_the_next_read() {
        let live = LiveOutput::new(100);
        let euro = "€".as_bytes();
        live.push(b"a");
        live.push(&euro[..2]);
        let read = live.since(0, 100).unwrap();
        assert_eq!((read.text.as_str(), read.next), ("a", 1));
        live.push(&euro[2..]);
        let read = live.since(read.next, 100).unwrap();
        assert_eq!((read.text.as_str(), read.next), ("€", 4));
        // Bytes that can never be a character are replaced, not held back forever.
        live.push(b"\xff");
        assert_eq!(live.since(4, 100).unwrap().text, "\u{fffd}");
    }

    #[tokio::test]
    async fn a_waiting_reader_wakes_on_output() {
        let live = LiveOutput::new(100);
        let writer = live.clone();
        let waiting = tokio::spawn(async move { live.more_than(0).await });
        tokio::task::yield_now().await;
        writer.push(b"x");
        tokio::time::timeout(std::time::Duration::from_secs(10), waiting)
            .await
            .expect("woken by the write")
            .unwrap();
        // Already past the cursor: resolves at once.
        writer.more_than(0).await;
    }

    proptest! {
        #[test]
        fn reading_in_steps_gives_back_the_kept_stream(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..20),
            capacity in 1usize..64,
            step in 1usize..50,
        ) {
            let live = LiveOutput::new(capacity);
            let mut all = Vec::new();
            for chunk in &chunks {
                live.push(chunk);
                all.extend_from_slice(chunk);
            }
            let mut cursor = 0u64;
            let mut dropped = 0u64;
            loop {
                let read = live.since(cursor, step).unwrap();
                prop_assert!(read.next >= cursor);
                prop_assert!(read.text.len() <= step.max(3) * 3);
                dropped += read.dropped;
                if read.next == cursor { break; }
                cursor = read.next;
            }
            // Everything is accounted for: read, dropped, or (at most 3 bytes of an
            // unfinished character) still waiting at the end.
            prop_assert!(all.len() as u64 - cursor <= 3);
            prop_assert_eq!(dropped, all.len().saturating_sub(capacity) as u64);
        }
    }
}
