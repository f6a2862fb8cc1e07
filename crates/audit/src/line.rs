//! One record as one line: the record's JSON, then its own hash as the last field.
//!
//! ```text
//! {"v":1,"seq":7,"time":"2026-12-03T10:00:00.123Z","origin":"gateway","prev":"…","kind":"run",…,"hash":"<sha256>"}
//! ```
//!
//! The hash is the SHA-256 of the line's bytes up to the hash field, closed with `}` —
//! exactly the bytes written, so no re-encoding can make a verifier disagree with the
//! writer. `prev` is the hash of the record before (64 zeros for the first).

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::entry::Entry;

/// The record format's version (`v`).
pub const SCHEMA_VERSION: u32 = 1;

/// `prev` of the first record.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// `,"hash":"` + 64 hex digits + `"}`.
const HASH_SUFFIX_LEN: usize = 9 + 64 + 2;

/// One record of the log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The format version.
    pub v: u32,
    /// Its place in the log: 1, 2, 3… with no gaps, across rotated files.
    pub seq: u64,
    /// When it was written (RFC 3339, UTC, milliseconds).
    pub time: String,
    /// Which Warden wrote it: `gateway`, `mcp`, `exec`, `node`, `approver`, `cli`.
    pub origin: String,
    /// The hash of the record before it.
    pub prev: String,
    /// What happened.
    #[serde(flatten)]
    pub entry: Entry,
}

/// The chain fields of a line, read without decoding the rest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    /// The record's number.
    pub seq: u64,
    /// The hash it names as the one before it.
    pub prev: String,
    /// Its own hash (as written at the line's end; checked by [`check`]).
    pub hash: String,
}

/// Hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for b in digest {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
}

/// `record` as its line, newline included.
pub fn encode(record: &Record) -> Vec<u8> {
    encode_parts(&RecordRef {
        v: record.v,
        seq: record.seq,
        time: &record.time,
        origin: &record.origin,
        prev: &record.prev,
        entry: &record.entry,
    })
    .0
}

/// A [`Record`] borrowed from its parts, as the writer has them: the fields in the same
/// order, so it serialises to the same bytes (it is the one thing [`encode`] serialises).
#[derive(Serialize)]
pub(crate) struct RecordRef<'a> {
    pub(crate) v: u32,
    pub(crate) seq: u64,
    pub(crate) time: &'a str,
    pub(crate) origin: &'a str,
    pub(crate) prev: &'a str,
    #[serde(flatten)]
    pub(crate) entry: &'a Entry,
}

/// The line of `record` (ending in a newline) and its hash, the next record's `prev`.
pub(crate) fn encode_parts(record: &RecordRef<'_>) -> (Vec<u8>, String) {
    // A record is plain data: serialising it cannot fail.
    let body = serde_json::to_vec(record).unwrap_or_default();
    let hash = sha256_hex(&body);
    let mut line = Vec::with_capacity(body.len() + HASH_SUFFIX_LEN + 1);
    line.extend_from_slice(&body[..body.len().saturating_sub(1)]);
    line.extend_from_slice(b",\"hash\":\"");
    line.extend_from_slice(hash.as_bytes());
    line.extend_from_slice(b"\"}\n");
    (line, hash)
}

/// Why a line is not an intact record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LineFault {
    /// It does not end in a hash field: cut short (a crash while writing) or mangled.
    Torn,
    /// Its hash is not the hash of its bytes: edited.
    Edited,
    /// Its hash is right but its fields cannot be read.
    Unreadable(String),
}

/// Check `line` (without its newline): its chain fields if its hash is its own.
pub fn check(line: &[u8]) -> Result<Link, LineFault> {
    let (body, hash) = split(line).ok_or(LineFault::Torn)?;
    let mut closed = Vec::with_capacity(body.len() + 1);
    closed.extend_from_slice(body);
    closed.push(b'}');
    if sha256_hex(&closed) != hash {
        return Err(LineFault::Edited);
    }
    #[derive(Deserialize)]
    struct Chain {
        seq: u64,
        prev: String,
    }
    let chain: Chain =
        serde_json::from_slice(&closed).map_err(|e| LineFault::Unreadable(e.to_string()))?;
    Ok(Link {
        seq: chain.seq,
        prev: chain.prev,
        hash: hash.to_owned(),
    })
}

/// The whole record of an intact `line`.
pub fn decode(line: &[u8]) -> Result<Record, LineFault> {
    let (body, _) = split(line).ok_or(LineFault::Torn)?;
    let mut closed = Vec::with_capacity(body.len() + 1);
    closed.extend_from_slice(body);
    closed.push(b'}');
    serde_json::from_slice(&closed).map_err(|e| LineFault::Unreadable(e.to_string()))
}

/// `line` as (its bytes before the hash field, the hash), if it ends in one.
fn split(line: &[u8]) -> Option<(&[u8], &str)> {
    if line.len() < HASH_SUFFIX_LEN + 2 || !line.ends_with(b"\"}") {
        return None;
    }
    let at = line.len() - HASH_SUFFIX_LEN;
    let suffix = &line[at..];
    if !suffix.starts_with(b",\"hash\":\"") {
        return None;
    }
    let hash = std::str::from_utf8(&suffix[9..9 + 64]).ok()?;
    hash.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        .then_some((&line[..at], hash))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::Kind;

    fn record(seq: u64) -> Record {
        Record {
            v: SCHEMA_VERSION,
            seq,
            time: "2026-12-03T10:00:00.000Z".into(),
            origin: "test".into(),
            prev: GENESIS.into(),
            entry: Entry::new(Kind::Run).agent("coder").exit_code(0),
        }
    }

    #[test]
    fn a_line_round_trips_and_names_its_own_hash() {
        let line = encode(&record(1));
        assert!(line.ends_with(b"\"}\n"));
        let bare = &line[..line.len() - 1];
        let link = check(bare).unwrap();
        assert_eq!((link.seq, link.prev.as_str()), (1, GENESIS));
        assert_eq!(decode(bare).unwrap(), record(1));
        // The hash the writer chains the next record to is the one the line names.
        let r = record(1);
        let (again, hash) = encode_parts(&RecordRef {
            v: r.v,
            seq: r.seq,
            time: &r.time,
            origin: &r.origin,
            prev: &r.prev,
            entry: &r.entry,
        });
        assert_eq!(
            (again.as_slice(), hash.as_str()),
            (line.as_slice(), link.hash.as_str())
        );
        let text = String::from_utf8(line.clone()).unwrap();
        assert!(text.starts_with(r#"{"v":1,"seq":1,"time":"#), "{text}");
        assert!(
            text.contains(r#""kind":"run","agent":"coder","exitCode":0,"hash":""#),
            "{text}"
        );
    }

    #[test]
    fn any_changed_byte_is_found_and_a_cut_line_is_torn() {
        let line = encode(&record(1));
        let bare = &line[..line.len() - 1];
        for i in 0..bare.len() - 2 {
            let mut edited = bare.to_vec();
            edited[i] ^= 0x01;
            assert!(check(&edited).is_err(), "byte {i} changed unnoticed");
        }
        for cut in [1, 10, bare.len() / 2, bare.len() - 1] {
            assert_eq!(check(&bare[..cut]), Err(LineFault::Torn), "cut at {cut}");
        }
    }
}
