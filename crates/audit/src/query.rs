//! Reading the log: records in order across its files, filtered — by agent, host, node,
//! decision, kind, run and time — without decoding records the filter cannot match.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use caps::Fs;

use crate::error::AuditError;
use crate::files::{self, io};
use crate::line::{self, Record};

/// Which records to read. Empty fields match everything.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Only this agent's.
    pub agent: Option<String>,
    /// Only this host's (sandbox, gateway, node).
    pub host: Option<String>,
    /// Only this node's.
    pub node: Option<String>,
    /// Only records with this decision (allow, deny, ask).
    pub decision: Option<String>,
    /// Only records of this kind.
    pub kind: Option<crate::Kind>,
    /// Only this run's.
    pub run_id: Option<String>,
    /// Only records written at or after this time (RFC 3339, as records say it).
    pub since: Option<String>,
    /// Only records written before this time.
    pub until: Option<String>,
}

impl Filter {
    /// Whether `record` matches.
    pub fn matches(&self, record: &Record) -> bool {
        let e = &record.entry;
        let same = |want: &Option<String>, have: &Option<String>| {
            want.as_ref().is_none_or(|w| have.as_ref() == Some(w))
        };
        same(&self.agent, &e.agent)
            && same(&self.host, &e.host)
            && same(&self.node, &e.node)
            && same(&self.decision, &e.decision)
            && same(&self.run_id, &e.run_id)
            && self.kind.is_none_or(|k| k == e.kind)
            && self
                .since
                .as_ref()
                .is_none_or(|s| record.time.as_str() >= s.as_str())
            && self
                .until
                .as_ref()
                .is_none_or(|u| record.time.as_str() < u.as_str())
    }

    /// Byte strings a matching line must contain (each field is written exactly as
    /// `"name":"value"`), to skip most lines without decoding them.
    fn needles(&self) -> Vec<Vec<u8>> {
        let field = |name: &str, value: &Option<String>| {
            value.as_ref().map(|v| {
                let quoted = serde_json::to_string(v).unwrap_or_default();
                format!("\"{name}\":{quoted}").into_bytes()
            })
        };
        [
            field("agent", &self.agent),
            field("host", &self.host),
            field("node", &self.node),
            field("decision", &self.decision),
            field("runId", &self.run_id),
            field("kind", &self.kind.map(|k| k.name().to_owned())),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

/// `text` as a time bound: RFC 3339 (`2026-12-02T10:00:00Z`), a date (`2026-12-02`,
/// midnight UTC), or a duration before now (`2h`, `1d`, `30m`).
pub fn parse_time_bound(text: &str) -> Result<String, String> {
    let text = text.trim();
    if let Ok(t) = humantime::parse_rfc3339_weak(text) {
        return Ok(humantime::format_rfc3339_millis(t).to_string());
    }
    if let Ok(t) = humantime::parse_rfc3339_weak(&format!("{text} 00:00:00")) {
        return Ok(humantime::format_rfc3339_millis(t).to_string());
    }
    if let Ok(d) = humantime::parse_duration(text) {
        let t = SystemTime::now()
            .checked_sub(d)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        return Ok(humantime::format_rfc3339_millis(t).to_string());
    }
    Err(format!(
        "{text:?} is not a time: use 2026-12-02, 2026-12-02T10:00:00Z or a duration before now such as 2h or 1d"
    ))
}

/// A record as read: decoded, and its line exactly as stored (hash included), for a
/// reader that checks or ships it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The record.
    pub record: Record,
    /// Its line, without the newline.
    pub line: String,
}

/// The matching records of a log, in order, read a file at a time.
pub struct Records<'a> {
    fs: &'a dyn Fs,
    dir: PathBuf,
    files: std::vec::IntoIter<PathBuf>,
    data: Vec<u8>,
    at: usize,
    filter: Filter,
    needles: Vec<memchr::memmem::Finder<'static>>,
}

impl<'a> Records<'a> {
    /// The records of the log in `dir` that `filter` matches.
    pub fn read(fs: &'a dyn Fs, dir: &Path, filter: Filter) -> Result<Records<'a>, AuditError> {
        let files = files::in_order(fs, dir)?;
        let needles = filter
            .needles()
            .into_iter()
            .map(|n| memchr::memmem::Finder::new(&n).into_owned())
            .collect();
        Ok(Records {
            fs,
            dir: dir.to_path_buf(),
            files: files.into_iter(),
            data: Vec::new(),
            at: 0,
            filter,
            needles,
        })
    }

    /// The byte size of the log's current file now (for following it).
    pub fn current_len(fs: &dyn Fs, dir: &Path) -> u64 {
        fs.metadata(&dir.join(files::CURRENT_FILE))
            .map(|m| m.len)
            .unwrap_or(0)
    }
}

impl Iterator for Records<'_> {
    type Item = Result<Stored, AuditError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            while self.at < self.data.len() {
                let rest = &self.data[self.at..];
                let len = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
                let bytes = &rest[..len];
                self.at += len + 1;
                if bytes.is_empty() || !self.needles.iter().all(|n| n.find(bytes).is_some()) {
                    continue;
                }
                if let Ok(record) = line::decode(bytes)
                    && self.filter.matches(&record)
                {
                    let line = String::from_utf8_lossy(bytes).into_owned();
                    return Some(Ok(Stored { record, line }));
                }
            }
            let file = self.files.next()?;
            match self.fs.read(&file) {
                Ok(data) => {
                    self.data = data;
                    self.at = 0;
                }
                // Rotated away between listing and reading: its records are in the next.
                Err(e) if e.is_not_found() => {}
                Err(e) => return Some(Err(io(&self.dir, e))),
            }
        }
    }
}

/// How long `--follow` waits between looks at the log.
pub const FOLLOW_INTERVAL: Duration = Duration::from_millis(200);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::{Entry, Kind};
    use crate::log::{AuditLog, AuditSink, Settings};
    use caps::MemoryFs;
    use std::sync::Arc;

    #[test]
    fn filters_match_fields_exactly_and_across_rotated_files() {
        let fs = Arc::new(MemoryFs::new());
        let log = AuditLog::new(
            fs.clone(),
            "/a".into(),
            "t",
            Settings {
                required: false,
                max_file_bytes: 1500,
            },
        );
        for i in 0..30 {
            let agent = if i % 2 == 0 { "claude" } else { "claude-2" };
            let decision = if i % 3 == 0 { "deny" } else { "allow" };
            log.record(
                Entry::new(Kind::Decision)
                    .agent(agent)
                    .decision(decision)
                    .host("gateway"),
            )
            .unwrap();
        }
        let read = |filter: Filter| -> Vec<u64> {
            Records::read(fs.as_ref(), Path::new("/a"), filter)
                .unwrap()
                .map(|r| r.unwrap().record.seq)
                .collect()
        };
        let claude = read(Filter {
            agent: Some("claude".into()),
            ..Filter::default()
        });
        assert_eq!(claude, (1..=30).step_by(2).collect::<Vec<u64>>());
        let denied = read(Filter {
            agent: Some("claude".into()),
            decision: Some("deny".into()),
            ..Filter::default()
        });
        assert_eq!(denied, vec![1, 7, 13, 19, 25]);
        assert_eq!(read(Filter::default()).len(), 30);
        assert!(
            read(Filter {
                host: Some("node".into()),
                ..Filter::default()
            })
            .is_empty()
        );
    }

    #[test]
    fn time_bounds_take_dates_times_and_durations() {
        assert_eq!(
            parse_time_bound("2026-12-02").unwrap(),
            "2026-12-02T00:00:00.000Z"
        );
        assert_eq!(
            parse_time_bound("2026-12-02T10:11:12Z").unwrap(),
            "2026-12-02T10:11:12.000Z"
        );
        assert!(
            parse_time_bound("2h").unwrap()
                < humantime::format_rfc3339_millis(SystemTime::now()).to_string()
        );
        assert!(
            parse_time_bound("yesterday-ish")
                .unwrap_err()
                .contains("not a time")
        );
    }
}
