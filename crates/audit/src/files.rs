//! The log's files in its directory: `audit.jsonl` is written; when it is full it is
//! renamed `audit.000001.jsonl`, `audit.000002.jsonl`, … and a new one begun. Reading in
//! that order (rotated files by number, then the current one) reads the chain in order.

use std::path::{Path, PathBuf};

use caps::Fs;

use crate::error::AuditError;

/// The file records are appended to.
pub const CURRENT_FILE: &str = "audit.jsonl";

/// The lock every writer holds while it appends (a sidecar, so rotation keeps it).
pub const LOCK_FILE: &str = "audit.lock";

/// `audit.N.jsonl`'s number, if `name` is a rotated file's name.
fn rotated_number(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("audit.")?.strip_suffix(".jsonl")?;
    (digits.len() == 6 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// The rotated files of `dir`, oldest first.
pub fn rotated(fs: &dyn Fs, dir: &Path) -> Result<Vec<(u64, PathBuf)>, AuditError> {
    let entries = match fs.list(dir) {
        Ok(entries) => entries,
        Err(e) if e.is_not_found() => return Ok(Vec::new()),
        Err(source) => return Err(io(dir, source)),
    };
    let mut files: Vec<(u64, PathBuf)> = entries
        .into_iter()
        .filter_map(|e| {
            let name = e.name.to_str()?;
            rotated_number(name).map(|n| (n, dir.join(name)))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Every file of the log in reading order.
pub fn in_order(fs: &dyn Fs, dir: &Path) -> Result<Vec<PathBuf>, AuditError> {
    let mut files: Vec<PathBuf> = rotated(fs, dir)?.into_iter().map(|(_, p)| p).collect();
    let current = dir.join(CURRENT_FILE);
    match fs.metadata(&current) {
        Ok(_) => files.push(current),
        Err(e) if e.is_not_found() => {}
        Err(source) => return Err(io(dir, source)),
    }
    Ok(files)
}

/// The name the current file gets when it is rotated.
pub fn next_rotated(fs: &dyn Fs, dir: &Path) -> Result<PathBuf, AuditError> {
    let next = rotated(fs, dir)?.last().map_or(1, |(n, _)| n + 1);
    Ok(dir.join(format!("audit.{next:06}.jsonl")))
}

/// An I/O error of the log in `dir`.
pub fn io(dir: &Path, source: caps::CapsError) -> AuditError {
    AuditError::Io {
        dir: dir.display().to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_numbered_files_are_rotated_ones() {
        assert_eq!(rotated_number("audit.000012.jsonl"), Some(12));
        for other in [
            "audit.jsonl",
            "audit.12.jsonl",
            "audit.00001x.jsonl",
            "x.000001.jsonl",
        ] {
            assert_eq!(rotated_number(other), None, "{other}");
        }
    }
}
