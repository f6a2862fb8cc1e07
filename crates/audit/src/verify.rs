//! Verifying the log: every record's hash is its own, every record names the one before
//! it, and the numbers run 1, 2, 3… across the files. The first place where that fails
//! is named; a torn line (a crash while writing) that the chain passes over is counted,
//! not a break — removing or cutting an intact record always breaks the chain at the
//! record after it.

use std::path::{Path, PathBuf};

use caps::Fs;
use serde::Serialize;

use crate::error::AuditError;
use crate::files::{self, io};
use crate::line::{self, GENESIS, LineFault};

/// Where and how the chain breaks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Break {
    /// The file.
    pub file: PathBuf,
    /// The line in it (from 1).
    pub line: usize,
    /// The record's number, if it could be read.
    pub seq: Option<u64>,
    /// What is wrong.
    pub problem: String,
}

/// What verification found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// Files read.
    pub files: usize,
    /// Intact records in chain order up to the first break.
    pub records: u64,
    /// Torn lines passed over (crashes while writing).
    pub torn: u64,
    /// The last intact record's number and hash.
    pub last: Option<(u64, String)>,
    /// The first break, if any.
    pub first_break: Option<Break>,
}

/// Verify the log in `dir` (an absent log is an empty one).
pub fn verify(fs: &dyn Fs, dir: &Path) -> Result<VerifyReport, AuditError> {
    let mut report = VerifyReport::default();
    let mut prev = GENESIS.to_owned();
    let mut expected = 1u64;
    // A torn line is forgiven only if the next intact record chains past it.
    let mut torn_pending: Option<Break> = None;
    for file in files::in_order(fs, dir)? {
        report.files += 1;
        let data = fs.read(&file).map_err(|e| io(dir, e))?;
        for (i, bytes) in data.split(|b| *b == b'\n').enumerate() {
            if bytes.is_empty() {
                continue;
            }
            let at = |seq: Option<u64>, problem: String| Break {
                file: file.clone(),
                line: i + 1,
                seq,
                problem,
            };
            match line::check(bytes) {
                Err(LineFault::Torn) => {
                    if torn_pending.is_none() {
                        torn_pending = Some(at(
                            None,
                            "a cut-short line whose next record does not chain past it: records were removed or cut".into(),
                        ));
                    }
                    report.torn += 1;
                }
                Err(LineFault::Edited) => {
                    report.first_break = Some(at(
                        seq_of(bytes),
                        "the record was edited: its hash is not the hash of its contents".into(),
                    ));
                    return Ok(report);
                }
                Err(LineFault::Unreadable(why)) => {
                    report.first_break =
                        Some(at(None, format!("the record cannot be read: {why}")));
                    return Ok(report);
                }
                Ok(link) => {
                    let problem = if link.prev != prev {
                        Some(if link.seq < expected {
                            format!(
                                "record {} comes after record {}: records were reordered or repeated",
                                link.seq,
                                expected - 1
                            )
                        } else {
                            format!(
                                "record {} does not follow the record before it (expected #{expected}): records were removed, reordered or inserted",
                                link.seq
                            )
                        })
                    } else if link.seq != expected {
                        Some(format!(
                            "record {} is numbered out of order (expected #{expected})",
                            link.seq
                        ))
                    } else {
                        None
                    };
                    if let Some(problem) = problem {
                        report.first_break = Some(at(Some(link.seq), problem));
                        return Ok(report);
                    }
                    torn_pending = None;
                    report.records += 1;
                    expected = link.seq + 1;
                    prev = link.hash.clone();
                    report.last = Some((link.seq, link.hash));
                }
            }
        }
    }
    // A torn line at the very end is the record a crash interrupted: nothing follows it.
    let _ = torn_pending;
    Ok(report)
}

/// The `seq` field of a line that cannot be trusted, for the report.
fn seq_of(bytes: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(bytes).ok()?;
    let rest = text.split("\"seq\":").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::{Entry, Kind};
    use crate::files::CURRENT_FILE;
    use crate::log::{AuditLog, AuditSink, Settings};
    use caps::{MemoryFs, WriteOptions};
    use std::sync::Arc;

    const DIR: &str = "/s/audit";

    fn five() -> (Arc<MemoryFs>, Vec<String>) {
        let fs = Arc::new(MemoryFs::new());
        let log = AuditLog::new(fs.clone(), DIR.into(), "t", Settings::default());
        for agent in ["a", "b", "c", "d", "e"] {
            log.record(Entry::new(Kind::Run).agent(agent)).unwrap();
        }
        let text = fs
            .read_to_string(&Path::new(DIR).join(CURRENT_FILE))
            .unwrap();
        (fs, text.lines().map(str::to_owned).collect())
    }

    fn rewrite(fs: &MemoryFs, lines: &[String]) -> VerifyReport {
        let text = lines.iter().map(|l| format!("{l}\n")).collect::<String>();
        fs.write(
            &Path::new(DIR).join(CURRENT_FILE),
            text.as_bytes(),
            WriteOptions::private(),
        )
        .unwrap();
        verify(fs, Path::new(DIR)).unwrap()
    }

    #[test]
    fn an_intact_log_verifies() {
        let (fs, lines) = five();
        let report = rewrite(&fs, &lines);
        assert_eq!((report.records, report.torn), (5, 0));
        assert!(report.first_break.is_none());
        assert_eq!(report.last.unwrap().0, 5);
    }

    #[test]
    fn an_edit_is_found_at_its_record() {
        let (fs, mut lines) = five();
        lines[2] = lines[2].replace("\"agent\":\"c\"", "\"agent\":\"z\"");
        let b = rewrite(&fs, &lines).first_break.unwrap();
        assert_eq!((b.line, b.seq), (3, Some(3)));
        assert!(b.problem.contains("edited"), "{b:?}");
    }

    #[test]
    fn a_removal_is_found_at_the_record_after_it() {
        let (fs, mut lines) = five();
        lines.remove(1);
        let b = rewrite(&fs, &lines).first_break.unwrap();
        assert_eq!(b.seq, Some(3));
        assert!(b.problem.contains("removed"), "{b:?}");
        // Cutting a record short (to pass it off as a crash) is the same.
        let (fs, mut lines) = five();
        lines[1].truncate(40);
        let b = rewrite(&fs, &lines).first_break.unwrap();
        assert_eq!(b.seq, Some(3), "{b:?}");
    }

    #[test]
    fn a_reorder_is_found() {
        let (fs, mut lines) = five();
        lines.swap(1, 2);
        let b = rewrite(&fs, &lines).first_break.unwrap();
        assert_eq!(b.seq, Some(3), "{b:?}");
        // And a record repeated.
        let (fs, mut lines) = five();
        let again = lines[1].clone();
        lines.insert(2, again);
        let b = rewrite(&fs, &lines).first_break.unwrap();
        assert!(b.problem.contains("reordered or repeated"), "{b:?}");
    }

    #[test]
    fn the_first_records_gone_is_a_break() {
        let (fs, lines) = five();
        let b = rewrite(&fs, &lines[2..]).first_break.unwrap();
        assert_eq!(b.seq, Some(3));
    }
}
