//! What a stream keeps while it is written: its first bytes and its last bytes, each in a
//! buffer of fixed size, and how many bytes it had in all; and how the cap is shared
//! between stdout and stderr when the run ends ([`shares`]).

/// The two streams' shares of a cap of `cap` bytes, given what each wrote: everything
/// when both fit; otherwise stderr is given at least `min(stderr, cap / 4)`, stdout up to
/// the rest, and stderr whatever stdout leaves. So neither stream can starve the other:
/// a flood on stdout leaves stderr a quarter of the cap, a flood on stderr leaves stdout
/// three quarters, and a quiet stream's room goes to the other.
pub fn shares(cap: usize, stdout: u64, stderr: u64) -> (usize, usize) {
    let cap64 = cap as u64;
    if stdout + stderr <= cap64 {
        return (stdout as usize, stderr as usize);
    }
    let stderr_floor = stderr.min(cap64 / 4);
    let out = stdout.min(cap64 - stderr_floor);
    let err = stderr.min(cap64 - out);
    (out as usize, err as usize)
}

/// One stream's first bytes and last bytes. Memory is bounded by `capacity` whatever is
/// written, and any share up to `capacity` can be taken from it at the end ([`Ends::keep`]).
#[derive(Debug)]
pub struct Ends {
    /// The first `⌈capacity / 2⌉` bytes.
    head: Vec<u8>,
    head_capacity: usize,
    /// The last `⌊capacity / 2⌋` bytes of what did not go into `head`.
    tail: TailRing,
    written: u64,
}

/// The bytes a stream kept: its first `first` bytes, then (when some were dropped) its
/// last `bytes.len() - first` bytes.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Kept {
    /// The kept bytes, head then tail.
    pub bytes: Vec<u8>,
    /// How many of them are the stream's beginning.
    pub first: usize,
    /// How many bytes the stream had in all.
    pub written: u64,
}

impl Kept {
    /// True if bytes were dropped.
    pub fn is_cut(&self) -> bool {
        (self.bytes.len() as u64) < self.written
    }

    /// How many of the kept bytes are the stream's end (0 when nothing was dropped).
    pub fn last(&self) -> usize {
        if self.is_cut() {
            self.bytes.len() - self.first
        } else {
            0
        }
    }
}

impl Ends {
    /// Room for a share of up to `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        Ends::with_end(capacity, capacity / 2)
    }

    /// Room for a share of up to `capacity` bytes, and for the stream's last `end` bytes
    /// (at least `⌊capacity / 2⌋`; see [`Ends::last`]).
    pub fn with_end(capacity: usize, end: usize) -> Self {
        Ends {
            head: Vec::new(),
            head_capacity: capacity - capacity / 2,
            tail: TailRing::new(end.max(capacity / 2)),
            written: 0,
        }
    }

    /// Record bytes written to the stream.
    pub fn push(&mut self, chunk: &[u8]) {
        self.written += chunk.len() as u64;
        let into_head = (self.head_capacity - self.head.len()).min(chunk.len());
        self.head.extend_from_slice(&chunk[..into_head]);
        self.tail.push(&chunk[into_head..]);
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// The stream within `share` bytes (at most the capacity): all of it if it fits,
    /// else its first `⌈share / 2⌉` and its last `⌊share / 2⌋` bytes.
    pub fn keep(&self, share: usize) -> Kept {
        let written = self.written;
        if written <= share as u64 {
            // Nothing was dropped between head and tail: the stream is the two together.
            let mut bytes = self.head.clone();
            bytes.extend_from_slice(&self.tail.contents());
            return Kept {
                first: bytes.len(),
                bytes,
                written,
            };
        }
        let first = share - share / 2;
        let mut bytes = self.head[..first.min(self.head.len())].to_vec();
        bytes.extend_from_slice(&self.last(share / 2));
        Kept {
            bytes,
            first,
            written,
        }
    }

    /// The stream's last `n` bytes (`n` at most the end it was made for, and at most what
    /// was written).
    pub fn last(&self, n: usize) -> Vec<u8> {
        let ring = self.tail.contents();
        if ring.len() >= n {
            return ring[ring.len() - n..].to_vec();
        }
        // The ring never dropped anything (it would be full, and hold `n`): the stream is
        // the head followed by the ring, and its end reaches back into the head.
        let from_head = n - ring.len();
        let mut out = self.head[self.head.len() - from_head..].to_vec();
        out.extend_from_slice(&ring);
        out
    }
}

/// A fixed-capacity ring holding the last `capacity` bytes pushed.
#[derive(Debug)]
pub struct TailRing {
    pub(super) capacity: usize,
    pub(super) buf: Vec<u8>,
    /// Next write position once `buf` is full.
    next: usize,
}

impl TailRing {
    /// An empty ring.
    pub fn new(capacity: usize) -> Self {
        TailRing {
            capacity,
            buf: Vec::new(),
            next: 0,
        }
    }

    /// Append bytes, forgetting the oldest past the capacity.
    pub fn push(&mut self, chunk: &[u8]) {
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

    /// The kept bytes, oldest first.
    pub fn contents(&self) -> Vec<u8> {
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

    #[test]
    fn shares_never_starve_a_stream() {
        // Both fit.
        assert_eq!(shares(100, 60, 40), (60, 40));
        // A stdout flood leaves a short stderr all of itself.
        assert_eq!(shares(100, 10_000, 7), (93, 7));
        // A stdout flood leaves a long stderr a quarter.
        assert_eq!(shares(100, 10_000, 10_000), (75, 25));
        // A stderr flood: stdout keeps what it wrote, stderr the rest.
        assert_eq!(shares(100, 30, 10_000), (30, 70));
        assert_eq!(shares(0, 5, 5), (0, 0));
    }

    proptest! {
        #[test]
        fn shares_fill_the_cap_and_give_stderr_its_floor(cap in 0usize..1000, out in 0u64..3000, err in 0u64..3000) {
            let (o, e) = shares(cap, out, err);
            prop_assert!(o as u64 <= out && e as u64 <= err);
            prop_assert_eq!((o + e) as u64, (out + err).min(cap as u64));
            prop_assert!(e as u64 >= err.min(cap as u64 / 4));
        }

        #[test]
        fn a_share_is_the_stream_or_its_two_ends(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..200), 0..30),
            capacity in 0usize..400, share_part in 0usize..=100,
        ) {
            let mut ends = Ends::new(capacity);
            let mut all = Vec::new();
            for chunk in &chunks {
                ends.push(chunk);
                all.extend_from_slice(chunk);
                prop_assert!(ends.head.len() + ends.tail.buf.len() <= capacity);
            }
            let share = capacity * share_part / 100;
            let kept = ends.keep(share);
            prop_assert_eq!(kept.written, all.len() as u64);
            if all.len() <= share {
                prop_assert_eq!(&kept.bytes, &all);
                prop_assert!(!kept.is_cut());
            } else {
                prop_assert_eq!(kept.bytes.len(), share);
                let (first, last) = (share - share / 2, share / 2);
                prop_assert_eq!(kept.first, first);
                prop_assert_eq!(&kept.bytes[..first], &all[..first]);
                prop_assert_eq!(&kept.bytes[first..], &all[all.len() - last..]);
            }
        }
    }
}
