//! What can go wrong with the record.

/// An audit log that cannot be written or read.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The files could not be read or written.
    #[error("the audit log in {dir} cannot be used: {source}")]
    Io {
        /// The log's directory.
        dir: String,
        /// What the filesystem said.
        #[source]
        source: caps::CapsError,
    },
    /// The log's last record cannot be found, so no record could be chained to it.
    #[error(
        "the audit log in {dir} ends in something that is not a record ({detail}); run `warden log --verify`"
    )]
    NoTail {
        /// The log's directory.
        dir: String,
        /// What was found.
        detail: String,
    },
}
