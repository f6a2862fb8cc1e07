//! Records handed over to be written soon ([`AuditSink::record_queued`]): a list under a
//! lock and one writer thread that takes the whole list at a time.
//!
//! A request hands over two records (its decision, then its end) while a command runs, so
//! handing one over must cost the request almost nothing: it is a push under a lock, and
//! the writer is woken only when the list goes from empty to not empty (or fills up, or
//! someone waits for a flush). A channel would wake the writer for every record — two
//! cross-core wake-ups per request, measurable against a 0.6 ms exec on a 2-core VM.
//!
//! Whoever writes holds the pen (`State::writing`) while the batch it took is written:
//! the writer thread, or a caller of [`Queue::flush`] that finds it free and writes what
//! is waiting itself (a one-shot `warden exec` on its way out: no hand-over to the thread
//! and back). One holder at a time, each taking all that waits, keeps the records in the
//! order they were handed over.
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

/// What the writer thread writes with (the log).
pub(crate) trait BatchWriter: Send + Sync + 'static {
    /// Write one batch, after the ones before it.
    fn write(&self, batch: Vec<Entry>);

    /// Once, as the writer thread starts, before its first batch: get ready for the
    /// first write off the path of whoever handed the records over (the log reads its
    /// last record then).
    fn prepare(&self) {}
}

impl<F: Fn(Vec<Entry>) + Send + Sync + 'static> BatchWriter for F {
    fn write(&self, batch: Vec<Entry>) {
        self(batch)
    }
}

/// The writer, shared by the thread and a flush that writes itself.
type WriteBatch = Arc<dyn BatchWriter>;

/// The list and its writer.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    entries: Vec<Entry>,
    /// Callers waiting until everything handed over before them is written.
    flushes: Vec<mpsc::Sender<()>>,
    writer: Writer,
    /// What the writer thread writes with, while it runs: also for a flush that writes
    /// itself.
    write: Option<WriteBatch>,
    /// A batch taken from `entries` is being written (by the thread or a flush): nobody
    /// else takes one until it is.
    writing: bool,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("entries", &self.entries.len())
            .field("flushes", &self.flushes.len())
            .field("writer", &self.writer)
            .field("writing", &self.writing)
            .finish_non_exhaustive()
    }
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
    pub(crate) fn push<W: BatchWriter>(
        self: &Arc<Self>,
        entry: Entry,
        writer: impl FnOnce() -> W,
    ) -> Option<Entry> {
        let mut state = self.state();
        if state.writer == Writer::NotStarted {
            (state.writer, state.write) = match self.start(writer()) {
                Ok(write) => (Writer::Running, Some(write)),
                Err(()) => (Writer::Unavailable, None),
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

    /// Wait until everything handed over so far is written: written here, when nobody
    /// is writing, else by the writer thread.
    pub(crate) fn flush(&self) {
        let wait = {
            let mut state = self.state();
            if state.writer != Writer::Running {
                return;
            }
            if let Some(write) = state.write.clone().filter(|_| !state.writing) {
                let (entries, flushes) = self.take(&mut state);
                drop(state);
                self.write_batches(&write, entries, flushes);
                return;
            }
            // Someone else holds the pen: it answers on this channel once it has written
            // what was queued before now.
            let (done, wait) = mpsc::channel();
            state.flushes.push(done);
            self.wake.notify_one();
            wait
        };
        let _ = wait.recv();
    }

    /// Take the pen and everything waiting (records, and the flushes that wait for them).
    fn take(&self, state: &mut State) -> (Vec<Entry>, Vec<mpsc::Sender<()>>) {
        state.writing = true;
        (
            std::mem::take(&mut state.entries),
            std::mem::take(&mut state.flushes),
        )
    }

    /// Write what [`Queue::take`] took, answer its flushes, and put the pen down.
    fn write_batches(
        &self,
        write: &WriteBatch,
        entries: Vec<Entry>,
        flushes: Vec<mpsc::Sender<()>>,
    ) {
        for batch in chunks(entries) {
            // A panic while writing (a bug) loses that batch, said on the program's
            // log; it must not end the writer, or every later flush would wait for
            // it forever.
            let written =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| write.write(batch)));
            if written.is_err() {
                tracing::error!("not on the record: the record's writer panicked");
            }
        }
        for done in flushes {
            let _ = done.send(());
        }
        self.state().writing = false;
        // The writer thread may be waiting for the pen.
        self.wake.notify_all();
    }

    /// The log is gone: the writer writes what is left and ends.
    pub(crate) fn close(&self) {
        let mut state = self.state();
        if state.writer == Writer::Running {
            state.writer = Writer::Closed;
            self.wake.notify_one();
        }
    }

    /// Start the writer thread; what it writes with.
    fn start(self: &Arc<Self>, write: impl BatchWriter) -> Result<WriteBatch, ()> {
        let write: WriteBatch = Arc::new(write);
        let queue = Arc::clone(self);
        let thread_write = Arc::clone(&write);
        std::thread::Builder::new()
            .name("warden-audit".into())
            .spawn(move || queue.write_until_closed(&thread_write))
            .map(|_| write)
            .map_err(drop)
    }

    /// The writer thread: wait for a first record, gather for a moment (a request's
    /// records come in pairs and bursts), write them all in one append, answer flushes.
    fn write_until_closed(&self, write: &WriteBatch) {
        // Before the lock: a flush may write meanwhile (the writer copes with that).
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| write.prepare())).is_err() {
            tracing::error!("the record's writer panicked getting ready");
        }
        let mut state = self.state();
        loop {
            while (state.entries.is_empty() && state.flushes.is_empty() || state.writing)
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
            // A flush may hold the pen (it took what was waiting): wait for it to be put
            // down, then take what is left, if anything.
            while state.writing {
                state = self.wake.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            let closed = state.writer == Writer::Closed;
            if !state.entries.is_empty() || !state.flushes.is_empty() {
                let (entries, flushes) = self.take(&mut state);
                drop(state);
                self.write_batches(write, entries, flushes);
                state = self.state();
            }
            if closed && state.entries.is_empty() {
                // Nothing is written from here on: what wrote goes (with what it holds).
                state.write = None;
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
    fn a_flush_with_nobody_writing_writes_on_the_flushing_thread() {
        let queue = Arc::new(Queue::default());
        let (seen, written) = mpsc::channel();
        let mut seen = Some(seen);
        let entry = Entry::new(Kind::Run).agent("a");
        let pushed = queue.push(entry, || {
            let seen = Mutex::new(seen.take().expect("the writer is made once"));
            move |batch: Vec<Entry>| {
                for e in batch {
                    let seen = seen.lock().unwrap();
                    let _ = seen.send((e.agent.unwrap(), std::thread::current().id()));
                }
            }
        });
        assert!(pushed.is_none());
        queue.flush();
        // Written before the flush returned, by this thread: no hand-over.
        assert_eq!(
            written.try_iter().collect::<Vec<_>>(),
            [("a".to_owned(), std::thread::current().id())]
        );
    }

    #[test]
    fn records_pushed_and_flushed_from_many_threads_are_written_once_each_in_order() {
        let queue = Arc::new(Queue::default());
        let written = Arc::new(Mutex::new(Vec::<String>::new()));
        let writer = {
            let written = Arc::clone(&written);
            move || {
                move |batch: Vec<Entry>| {
                    let mut written = written.lock().unwrap();
                    for e in batch {
                        written.push(e.agent.unwrap());
                    }
                }
            }
        };
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let queue = Arc::clone(&queue);
                let writer = writer.clone();
                std::thread::spawn(move || {
                    for i in 0..200 {
                        let entry = Entry::new(Kind::Run).agent(format!("{t}:{i}"));
                        assert!(queue.push(entry, writer.clone()).is_none());
                        if i % 7 == 0 {
                            queue.flush();
                        }
                    }
                    queue.flush();
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let written = written.lock().unwrap().clone();
        assert_eq!(written.len(), 800, "each record once");
        for t in 0..4 {
            let mine: Vec<&String> = written
                .iter()
                .filter(|a| a.starts_with(&format!("{t}:")))
                .collect();
            let expected: Vec<String> = (0..200).map(|i| format!("{t}:{i}")).collect();
            assert_eq!(
                mine,
                expected.iter().collect::<Vec<_>>(),
                "thread {t}'s order"
            );
        }
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
