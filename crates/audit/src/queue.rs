//! Records handed over to be written soon ([`AuditSink::record_queued`]): a list under a
//! lock and one writer thread that takes the whole list at a time.
//!
//! A request hands over two records (its decision, then its end) while a command runs, so
//! handing one over must cost the request almost nothing: it is a push under a lock, and
//! the writer is woken only when the list goes from empty to not empty (or fills up, or
//! someone waits for a flush). A channel would wake the writer for every record — two
//! cross-core wake-ups per request, measurable against a 0.6 ms exec on a 2-core VM.
//!
//! [`AuditSink::record_queued`]: crate::AuditSink::record_queued

use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::entry::Entry;

/// How long the writer gathers records after the first before it writes them together.
const BATCH_WAIT: Duration = Duration::from_millis(5);

/// The most records written in one append.
pub(crate) const MAX_BATCH: usize = 256;

/// The list and its writer.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct State {
    entries: Vec<Entry>,
    /// Callers waiting until everything handed over before them is written.
    flushes: Vec<mpsc::Sender<()>>,
    writer: Writer,
}

#[derive(Debug, Default, PartialEq, Eq)]
enum Writer {
    #[default]
    NotStarted,
    Running,
    /// No thread could be started: callers write their records themselves.
    Unavailable,
    /// The log was dropped: the writer writes what is left and ends.
    Closed,
}

impl Queue {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hand `entry` over. The writer thread is started on the first record, writing each
    /// batch with what `writer` makes. When no thread could be started, the entry comes
    /// back: the caller writes it itself.
    #[must_use]
    pub(crate) fn push<W: Fn(Vec<Entry>) + Send + 'static>(
        self: &Arc<Self>,
        entry: Entry,
        writer: impl FnOnce() -> W,
    ) -> Option<Entry> {
        let mut state = self.state();
        if state.writer == Writer::NotStarted {
            state.writer = match self.start(writer()) {
                Ok(()) => Writer::Running,
                Err(()) => Writer::Unavailable,
            };
        }
        if state.writer != Writer::Running {
            return Some(entry);
        }
        state.entries.push(entry);
        // The writer is either waiting for a first record (wake it) or already gathering
        // (it takes this one with the rest): only the first and a full batch wake it.
        if state.entries.len() == 1 || state.entries.len() >= MAX_BATCH {
            self.wake.notify_one();
        }
        None
    }

    /// Wait until everything handed over so far is written.
    pub(crate) fn flush(&self) {
        let (done, wait) = mpsc::channel();
        {
            let mut state = self.state();
            if state.writer != Writer::Running {
                return;
            }
            state.flushes.push(done);
            self.wake.notify_one();
        }
        let _ = wait.recv();
    }

    /// The log is gone: the writer writes what is left and ends.
    pub(crate) fn close(&self) {
        let mut state = self.state();
        if state.writer == Writer::Running {
            state.writer = Writer::Closed;
            self.wake.notify_one();
        }
    }

    fn start(self: &Arc<Self>, write: impl Fn(Vec<Entry>) + Send + 'static) -> Result<(), ()> {
        let queue = Arc::clone(self);
        std::thread::Builder::new()
            .name("warden-audit".into())
            .spawn(move || queue.write_until_closed(write))
            .map(drop)
            .map_err(drop)
    }

    /// The writer thread: wait for a first record, gather for a moment (a request's
    /// records come in pairs and bursts), write them all in one append, answer flushes.
    fn write_until_closed(&self, write: impl Fn(Vec<Entry>)) {
        let mut state = self.state();
        loop {
            while state.entries.is_empty()
                && state.flushes.is_empty()
                && state.writer == Writer::Running
            {
                state = self.wake.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            let until = Instant::now() + BATCH_WAIT;
            while state.flushes.is_empty()
                && state.entries.len() < MAX_BATCH
                && state.writer == Writer::Running
            {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                state = self
                    .wake
                    .wait_timeout(state, left)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            let entries = std::mem::take(&mut state.entries);
            let flushes = std::mem::take(&mut state.flushes);
            let closed = state.writer == Writer::Closed;
            drop(state);
            for batch in chunks(entries) {
                // A panic while writing (a bug) loses that batch, said on the program's
                // log; it must not end the writer, or every later flush would wait for
                // it forever.
                let written =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| write(batch)));
                if written.is_err() {
                    tracing::error!("not on the record: the record's writer panicked");
                }
            }
            for done in flushes {
                let _ = done.send(());
            }
            state = self.state();
            if closed && state.entries.is_empty() {
                return;
            }
        }
    }
}

/// `entries` in batches of at most [`MAX_BATCH`], in order.
fn chunks(mut entries: Vec<Entry>) -> Vec<Vec<Entry>> {
    let mut batches = Vec::new();
    while entries.len() > MAX_BATCH {
        let rest = entries.split_off(MAX_BATCH);
        batches.push(entries);
        entries = rest;
    }
    if !entries.is_empty() {
        batches.push(entries);
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::Kind;

    #[test]
    fn batches_keep_order_and_size() {
        let entries: Vec<Entry> = (0..600)
            .map(|i| Entry::new(Kind::Run).agent(format!("a{i}")))
            .collect();
        let batches = chunks(entries);
        assert_eq!(
            batches.iter().map(Vec::len).collect::<Vec<_>>(),
            [256, 256, 88]
        );
        let agents: Vec<String> = batches
            .into_iter()
            .flatten()
            .map(|e| e.agent.unwrap())
            .collect();
        assert_eq!(
            agents,
            (0..600).map(|i| format!("a{i}")).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_writer_that_panics_goes_on_and_answers_flushes() {
        let queue = Arc::new(Queue::default());
        let (seen, written) = mpsc::channel();
        let mut seen = Some(seen);
        let mut push = |agent: &str| {
            let pushed = queue.push(Entry::new(Kind::Run).agent(agent), || {
                let seen = seen.take().expect("the writer is made once");
                move |batch: Vec<Entry>| {
                    for e in batch {
                        let agent = e.agent.unwrap();
                        assert_ne!(agent, "bad", "a bug in writing");
                        let _ = seen.send(agent);
                    }
                }
            });
            assert!(pushed.is_none());
        };
        push("bad");
        queue.flush();
        push("good");
        queue.flush();
        assert_eq!(written.try_iter().collect::<Vec<_>>(), ["good"]);
    }

    #[test]
    fn a_closed_queue_writes_what_is_left_and_its_writer_ends() {
        let queue = Arc::new(Queue::default());
        let (seen, written) = mpsc::channel();
        let mut seen = Some(seen);
        for i in 0..10 {
            let entry = Entry::new(Kind::Run).agent(format!("a{i}"));
            let pushed = queue.push(entry, || {
                let seen = seen.take().expect("the writer is made once");
                move |batch: Vec<Entry>| {
                    for e in batch {
                        let _ = seen.send(e.agent.unwrap());
                    }
                }
            });
            assert!(pushed.is_none());
        }
        queue.close();
        // The writer holds the only sender: it is dropped when the writer ends, which
        // ends this iteration.
        let got: Vec<String> = written.iter().collect();
        assert_eq!(got, (0..10).map(|i| format!("a{i}")).collect::<Vec<_>>());
    }
}
