//! Writing the log: [`AuditLog::record`] appends one record under the log's lock, chained
//! to the last intact record on disk, whoever wrote it. What a caller needs to know about
//! failure is kept: [`AuditSink::problem`] says why the last write failed until one
//! succeeds, and [`Settings::required`] is how the caller learns to fail closed.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use caps::{FileId, Fs, WriteOptions};

use crate::entry::Entry;
use crate::error::AuditError;
use crate::files::{self, CURRENT_FILE, LOCK_FILE, io};
use crate::line::{self, GENESIS, RecordRef, SCHEMA_VERSION};
use crate::queue::Queue;

/// How much of a file's end is read to find its last record: more than any record
/// (fields are cut at `MAX_FIELD_CHARS`), so the last intact one is always inside.
const TAIL_WINDOW: usize = 256 * 1024;

/// How much is read first: a few typical records. Every process's first write reads the
/// tail (`warden exec` is one process per command, and waits for its record at exit), so
/// the whole window is read only when this much holds no intact record.
const FIRST_TAIL_WINDOW: usize = 16 * 1024;

/// How the log is kept (`[audit]` in config.toml).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Every record is on disk (fsync) before `record` returns, and a caller refuses to
    /// run what it cannot record.
    pub required: bool,
    /// The current file is rotated once it reaches this size.
    pub max_file_bytes: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            required: false,
            max_file_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Where records go. The runner, the approvals store and the servers hold one; a host
/// without a log holds [`NoAudit`].
pub trait AuditSink: Send + Sync + std::fmt::Debug {
    /// Append `entry`; its sequence number. With [`Settings::required`] it is on disk
    /// when this returns.
    fn record(&self, entry: Entry) -> Result<u64, AuditError>;
    /// Append `entry` without waiting for the disk, even when the record is required:
    /// for a record a later [`AuditSink::record`] in the same request makes durable
    /// (syncing the file syncs all that was appended before).
    fn record_unsynced(&self, entry: Entry) -> Result<u64, AuditError> {
        self.record(entry)
    }
    /// Hand `entry` over to be written soon, in order with this sink's other records,
    /// batched with them: for records the caller need not see on disk (the record is not
    /// required). A failure is noted ([`AuditSink::problem`]) and logged when it happens.
    fn record_queued(&self, entry: Entry) {
        if let Err(e) = self.record(entry) {
            tracing_error(&e);
        }
    }
    /// Write everything handed over so far (before the process exits).
    fn flush(&self) {}
    /// Whether a run that cannot be recorded must not happen.
    fn required(&self) -> bool;
    /// Why the last write failed, until a write succeeds again.
    fn problem(&self) -> Option<String>;
}

/// No record is kept.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoAudit;

impl AuditSink for NoAudit {
    fn record(&self, _entry: Entry) -> Result<u64, AuditError> {
        Ok(0)
    }
    fn required(&self) -> bool {
        false
    }
    fn problem(&self) -> Option<String> {
        None
    }
}

/// The end of the log as last seen by this process: when the current file is still the
/// same file of the same size, nobody else wrote since, and its tail need not be read.
#[derive(Clone, Debug)]
struct Tail {
    file: Option<FileId>,
    size: u64,
    seq: u64,
    hash: String,
    ends_in_newline: bool,
}

/// A log in a directory (see the crate's documentation).
#[derive(Debug)]
pub struct AuditLog {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    origin: String,
    settings: Settings,
    tail: Arc<Mutex<Option<Tail>>>,
    problem: Arc<Mutex<Option<String>>>,
    /// Records handed over to be written soon, and their writer thread.
    queue: Arc<Queue>,
}

/// Say that a record was lost, on the program's log.
fn tracing_error(e: &AuditError) {
    tracing::error!("not on the record: {e}");
}

impl AuditLog {
    /// The log in `dir` (created 0700 on the first record), its records marked as written
    /// by `origin`.
    pub fn new(fs: Arc<dyn Fs>, dir: PathBuf, origin: &str, settings: Settings) -> AuditLog {
        AuditLog {
            fs,
            dir,
            origin: origin.to_owned(),
            settings,
            tail: Arc::default(),
            problem: Arc::default(),
            queue: Arc::default(),
        }
    }

    /// The log's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its settings.
    pub fn settings(&self) -> Settings {
        self.settings
    }

    /// Append `entries` as consecutive records under one lock, in one write; the last
    /// one's sequence number.
    fn append_all(&self, entries: &[Entry], sync: bool) -> Result<u64, AuditError> {
        let fs = self.fs.as_ref();
        // Made once: while this process has written here, the directory is there (a
        // directory removed since makes the lock fail, and the next write remakes it).
        if self
            .tail
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
        {
            fs.create_dir_all(&self.dir, 0o700)
                .map_err(|e| io(&self.dir, e))?;
        }
        let _lock = fs
            .lock(&self.dir.join(LOCK_FILE))
            .map_err(|e| io(&self.dir, e))?;
        let current = self.dir.join(CURRENT_FILE);
        let meta = match fs.metadata(&current) {
            Ok(m) => Some(m),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(io(&self.dir, e)),
        };
        let (size, file) = meta.as_ref().map_or((0, None), |m| (m.len, Some(m.id)));
        let cached = self
            .tail
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .filter(|t| t.size == size && t.file == file);
        let mut tail = match cached {
            Some(t) => Some(t),
            None => last_record(fs, &self.dir, size)?,
        };
        let mut size = size;
        if size >= self.settings.max_file_bytes {
            let rotated = files::next_rotated(fs, &self.dir)?;
            fs.rename(&current, &rotated)
                .map_err(|e| io(&self.dir, e))?;
            size = 0;
            if let Some(t) = &mut tail {
                t.ends_in_newline = true;
            }
        }
        let (mut seq, mut prev) = tail
            .as_ref()
            .map_or((0, GENESIS.to_owned()), |t| (t.seq, t.hash.clone()));
        let mut bytes = Vec::new();
        // A torn line left by a crash keeps its own line: these records start a new one.
        if size > 0 && tail.as_ref().is_some_and(|t| !t.ends_in_newline) {
            bytes.push(b'\n');
        }
        let time = humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string();
        for entry in entries {
            seq += 1;
            let (encoded, hash) = line::encode_parts(&RecordRef {
                v: SCHEMA_VERSION,
                seq,
                time: &time,
                origin: &self.origin,
                prev: &prev,
                entry,
            });
            prev = hash;
            bytes.extend_from_slice(&encoded);
        }
        // A required record's file must be found after a crash, not only its bytes: the
        // write that begins a file (the first, or the first after a rotation) is synced,
        // and a synced append that begins a file syncs its directory as well.
        let sync = sync || (size == 0 && self.settings.required);
        fs.append(&current, &bytes, WriteOptions::private(), sync)
            .map_err(|e| io(&self.dir, e))?;
        let file = match file.filter(|_| size > 0) {
            Some(id) => Some(id),
            None => fs.metadata(&current).ok().map(|m| m.id),
        };
        *self.tail.lock().unwrap_or_else(|p| p.into_inner()) = Some(Tail {
            file,
            size: size + bytes.len() as u64,
            seq,
            hash: prev,
            ends_in_newline: true,
        });
        Ok(seq)
    }
}

impl AuditLog {
    /// What the writer thread writes queued records with: this log (sharing what it has
    /// seen and what went wrong).
    fn batch_writer(&self) -> QueuedWriter {
        QueuedWriter(AuditLog {
            fs: Arc::clone(&self.fs),
            dir: self.dir.clone(),
            origin: self.origin.clone(),
            settings: self.settings,
            tail: Arc::clone(&self.tail),
            problem: Arc::clone(&self.problem),
            queue: Arc::default(),
        })
    }

    /// Read the last record into what this log has seen, if it has seen nothing yet —
    /// without the lock: a write checks it under the lock (the file and its size) and
    /// reads again if another writer has appended since, so this only spares the first
    /// write the read when nobody has.
    fn load_tail(&self) {
        if self
            .tail
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
        {
            return;
        }
        let Ok(meta) = self.fs.metadata(&self.dir.join(CURRENT_FILE)) else {
            return;
        };
        let Ok(Some(tail)) = last_record(self.fs.as_ref(), &self.dir, meta.len) else {
            return;
        };
        // Read from the file that had this size: not one a rotation put in its place
        // between the two looks (a write would take that pairing as the file's).
        if tail.file != Some(meta.id) {
            return;
        }
        let mut seen = self.tail.lock().unwrap_or_else(|p| p.into_inner());
        // A write may have got there first (and seen more): keep what it saw.
        if seen.is_none() {
            *seen = Some(tail);
        }
    }

    /// Append `entries` as consecutive records under one lock, in one write, noting a
    /// failure for [`AuditSink::problem`] (and clearing it on success); the last one's
    /// sequence number.
    fn append_noting(&self, entries: Vec<Entry>, sync: bool) -> Result<u64, AuditError> {
        let mut result = self.append_all(&entries, sync);
        // The directory may have been removed since it was made: forget what was seen
        // and try once more from scratch. Only then: a failure after the bytes were
        // written (syncing them) must not write the records a second time.
        if let Err(AuditError::Io { source, .. }) = &result
            && source.is_not_found()
        {
            *self.tail.lock().unwrap_or_else(|p| p.into_inner()) = None;
            result = self.append_all(&entries, sync);
        }
        let mut problem = self.problem.lock().unwrap_or_else(|p| p.into_inner());
        match &result {
            Ok(_) => *problem = None,
            Err(e) => *problem = Some(e.to_string()),
        }
        result
    }
}

/// The writer thread's log: appends each batch (saying so if that fails), and reads the
/// last record while the first batch gathers.
struct QueuedWriter(AuditLog);

impl crate::queue::BatchWriter for QueuedWriter {
    fn write(&self, batch: Vec<Entry>) {
        if let Err(e) = self.0.append_noting(batch, false) {
            tracing_error(&e);
        }
    }

    fn prepare(&self) {
        self.0.load_tail();
    }
}

impl AuditSink for AuditLog {
    fn record(&self, entry: Entry) -> Result<u64, AuditError> {
        self.append_noting(vec![entry], self.settings.required)
    }

    fn record_unsynced(&self, entry: Entry) -> Result<u64, AuditError> {
        self.append_noting(vec![entry], false)
    }

    fn record_queued(&self, entry: Entry) {
        if let Some(entry) = self.queue.push(entry, || self.batch_writer())
            && let Err(e) = self.append_noting(vec![entry], false)
        {
            tracing_error(&e);
        }
    }

    fn flush(&self) {
        self.queue.flush();
    }

    fn required(&self) -> bool {
        self.settings.required
    }

    fn problem(&self) -> Option<String> {
        self.problem
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Drop for AuditLog {
    /// What was handed over is still written; the writer thread then ends.
    fn drop(&mut self) {
        self.queue.close();
    }
}

/// The last intact record of the log: in the current file (`size` bytes), else in the
/// newest rotated file; none in an empty log.
fn last_record(fs: &dyn Fs, dir: &Path, size: u64) -> Result<Option<Tail>, AuditError> {
    let current = dir.join(CURRENT_FILE);
    if size > 0
        && let Some((seq, hash, ends_in_newline)) = last_in(fs, dir, &current, size)?
    {
        let file = fs.metadata(&current).ok().map(|m| m.id);
        return Ok(Some(Tail {
            file,
            size,
            seq,
            hash,
            ends_in_newline,
        }));
    }
    for (_, rotated) in files::rotated(fs, dir)?.into_iter().rev() {
        let len = fs.metadata(&rotated).map_err(|e| io(dir, e))?.len;
        if let Some((seq, hash, _)) = last_in(fs, dir, &rotated, len)? {
            let file = fs.metadata(&current).ok().map(|m| m.id);
            return Ok(Some(Tail {
                file,
                size,
                seq,
                hash,
                // The current file, if any, holds only torn lines: start on a new line.
                ends_in_newline: size == 0,
            }));
        }
    }
    if size > 0 {
        return Err(AuditError::NoTail {
            dir: dir.display().to_string(),
            detail: format!("{CURRENT_FILE} has {size} bytes and no intact record"),
        });
    }
    Ok(None)
}

/// The last intact record in `file` (`len` bytes): its seq, hash, and whether the file
/// ends in a newline.
fn last_in(
    fs: &dyn Fs,
    dir: &Path,
    file: &Path,
    len: u64,
) -> Result<Option<(u64, String, bool)>, AuditError> {
    for size in [FIRST_TAIL_WINDOW, TAIL_WINDOW] {
        let start = len.saturating_sub(size as u64);
        let window = fs.read_range(file, start, size).map_err(|e| io(dir, e))?;
        let ends_in_newline = window.last() == Some(&b'\n');
        // The window's first line may be cut by its start: a cut line fails its hash.
        for candidate in window.split(|b| *b == b'\n').rev() {
            if let Ok(link) = line::check(candidate) {
                return Ok(Some((link.seq, link.hash, ends_in_newline)));
            }
        }
        if start == 0 {
            break;
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::Kind;
    use crate::verify::verify;
    use caps::MemoryFs;

    fn log(fs: &Arc<MemoryFs>, origin: &str, max: u64) -> AuditLog {
        AuditLog::new(
            fs.clone(),
            PathBuf::from("/s/audit"),
            origin,
            Settings {
                required: false,
                max_file_bytes: max,
            },
        )
    }

    #[test]
    fn two_writers_share_one_chain_and_rotation_continues_it() {
        let fs = Arc::new(MemoryFs::new());
        let (a, b) = (log(&fs, "gateway", 2_000), log(&fs, "exec", 2_000));
        for i in 0..40 {
            let (w, agent) = if i % 3 == 0 { (&a, "x") } else { (&b, "y") };
            assert_eq!(w.record(Entry::new(Kind::Run).agent(agent)).unwrap(), i + 1);
        }
        let report = verify(fs.as_ref(), Path::new("/s/audit")).unwrap();
        assert_eq!(report.records, 40);
        assert!(report.first_break.is_none(), "{report:?}");
        assert!(report.files > 3, "{report:?}");
    }

    #[test]
    fn a_last_record_read_ahead_never_breaks_the_chain() {
        let fs = Arc::new(MemoryFs::new());
        let other = log(&fs, "gateway", 600);
        // Nothing on disk yet: nothing read ahead, and the first write starts the chain.
        let ahead = log(&fs, "exec", 600);
        ahead.load_tail();
        assert_eq!(ahead.record(Entry::new(Kind::Run)).unwrap(), 1);
        other.record(Entry::new(Kind::Decision)).unwrap();
        // Read ahead, then the log moves on under it — appended to and rotated — before
        // its write: the write sees the file changed and reads again.
        let late = log(&fs, "exec", 600);
        late.load_tail();
        for _ in 0..6 {
            other.record(Entry::new(Kind::Run)).unwrap();
        }
        assert_eq!(late.record(Entry::new(Kind::Run)).unwrap(), 9);
        // Read ahead with nobody writing since: the write continues from it.
        let quiet = log(&fs, "exec", 600);
        quiet.load_tail();
        assert_eq!(quiet.record(Entry::new(Kind::Run)).unwrap(), 10);
        let report = verify(fs.as_ref(), Path::new("/s/audit")).unwrap();
        assert_eq!(report.records, 10);
        assert!(report.first_break.is_none(), "{report:?}");
        assert!(report.files > 1, "rotated: {report:?}");
    }

    #[test]
    fn a_torn_last_line_is_left_alone_and_the_next_record_chains_past_it() {
        let fs = Arc::new(MemoryFs::new());
        let w = log(&fs, "gateway", 1 << 20);
        w.record(Entry::new(Kind::Decision)).unwrap();
        // A crash while writing the second: half a line, no newline.
        let current = Path::new("/s/audit").join(CURRENT_FILE);
        let half = br#"{"v":1,"seq":2,"time":"2026"#;
        fs.append(&current, half, WriteOptions::private(), false)
            .unwrap();
        // Another process (no cached tail) writes next.
        let other = log(&fs, "exec", 1 << 20);
        assert_eq!(other.record(Entry::new(Kind::Run)).unwrap(), 2);
        let text = String::from_utf8(fs.read(&current).unwrap()).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        let report = verify(fs.as_ref(), Path::new("/s/audit")).unwrap();
        assert_eq!((report.records, report.torn), (2, 1), "{report:?}");
        assert!(report.first_break.is_none(), "{report:?}");
    }

    #[test]
    fn a_last_record_longer_than_the_first_window_is_still_found() {
        let fs = Arc::new(MemoryFs::new());
        let w = log(&fs, "gateway", 1 << 20);
        w.record(Entry::new(Kind::Run).agent("small")).unwrap();
        // Fields are cut at 4,096 characters: two-byte ones in three fields make a line
        // longer than the first window.
        let long = "é".repeat(FIRST_TAIL_WINDOW);
        w.record(Entry::new(Kind::Run).command(&long).cwd(&long).rule(&long))
            .unwrap();
        let line_len = fs
            .read_to_string(&Path::new("/s/audit").join(CURRENT_FILE))
            .unwrap()
            .lines()
            .last()
            .unwrap()
            .len();
        assert!(line_len > FIRST_TAIL_WINDOW, "{line_len}");
        // A process that has not written here (no cached tail) chains to it.
        let other = log(&fs, "exec", 1 << 20);
        assert_eq!(other.record(Entry::new(Kind::Run)).unwrap(), 3);
        let report = verify(fs.as_ref(), Path::new("/s/audit")).unwrap();
        assert_eq!(report.records, 3);
        assert!(report.first_break.is_none(), "{report:?}");
    }

    #[test]
    fn queued_records_are_written_in_order_and_all_of_them_by_a_flush() {
        let fs = Arc::new(MemoryFs::new());
        let w = log(&fs, "gateway", 1 << 20);
        for i in 0..600 {
            w.record_queued(Entry::new(Kind::Run).agent(format!("a{i}")));
        }
        // A record written directly comes after everything queued before it only once
        // the queue is flushed: flush, then check the order.
        w.flush();
        let text = fs
            .read_to_string(&Path::new("/s/audit").join(CURRENT_FILE))
            .unwrap();
        let agents: Vec<String> = text
            .lines()
            .map(|l| {
                crate::line::decode(l.as_bytes())
                    .unwrap()
                    .entry
                    .agent
                    .unwrap()
            })
            .collect();
        assert_eq!(
            agents,
            (0..600).map(|i| format!("a{i}")).collect::<Vec<_>>()
        );
        let report = verify(fs.as_ref(), Path::new("/s/audit")).unwrap();
        assert_eq!(report.records, 600);
        assert!(report.first_break.is_none());
    }

    #[test]
    fn a_write_that_fails_after_its_bytes_landed_is_not_written_twice() {
        let memory = Arc::new(MemoryFs::new());
        let w = AuditLog::new(
            Arc::new(caps::testkit::SharedMemoryFs::failing_synced_appends(
                memory.clone(),
            )),
            PathBuf::from("/s/audit"),
            "gateway",
            Settings {
                required: true,
                max_file_bytes: 1 << 20,
            },
        );
        assert!(w.record(Entry::new(Kind::Run).agent("once")).is_err());
        assert!(w.problem().is_some());
        let report = verify(memory.as_ref(), Path::new("/s/audit")).unwrap();
        assert_eq!(report.records, 1, "{report:?}");
    }

    #[test]
    fn a_failed_write_is_said_until_one_succeeds() {
        let fs = Arc::new(MemoryFs::new());
        // A file where the directory should be.
        fs.create_dir_all(Path::new("/s"), 0o700).unwrap();
        fs.write(Path::new("/s/audit"), b"", WriteOptions::default())
            .unwrap();
        let w = log(&fs, "gateway", 1 << 20);
        assert!(w.record(Entry::new(Kind::Run)).is_err());
        assert!(
            w.problem().unwrap().contains("/s/audit"),
            "{:?}",
            w.problem()
        );
        fs.remove(Path::new("/s/audit")).unwrap();
        w.record(Entry::new(Kind::Run)).unwrap();
        assert_eq!(w.problem(), None);
    }
}
