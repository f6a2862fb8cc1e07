//! `PolicyError`: invalid configuration, patterns, slash commands and requests. A policy
//! *decision* (deny, ask) is not an error; see [`crate::Decision`].

use std::path::PathBuf;

use crate::config_edit_error::ConfigEditError;
use crate::profile_error::ProfileError;

/// Everything that makes a policy input unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The config file is not valid TOML.
    #[error("{file}: {message}")]
    ConfigSyntax {
        /// The config file.
        file: PathBuf,
        /// The parser's message (with line and column).
        message: String,
    },
    /// A key the config schema does not have.
    #[error("{file}: unknown key `{key}`{hint}")]
    UnknownKey {
        /// The config file.
        file: PathBuf,
        /// The dotted key path.
        key: String,
        /// What was probably meant, as `: ...`, or empty.
        hint: String,
    },
    /// A known key with a value it cannot take.
    #[error("{file}: invalid value {value} for `{key}`: {expected}")]
    InvalidValue {
        /// The config file.
        file: PathBuf,
        /// The dotted key path.
        key: String,
        /// The offending value, as written.
        value: String,
        /// What is accepted.
        expected: String,
    },
    /// The config could not be read.
    #[error("cannot read {file}: {message}")]
    ConfigUnreadable {
        /// The config file.
        file: PathBuf,
        /// Why.
        message: String,
    },
    /// An edit of the config file that cannot be made; nothing was changed.
    #[error("{file}: cannot edit: {error}")]
    ConfigEdit {
        /// The config file.
        file: PathBuf,
        /// Why.
        #[source]
        error: ConfigEditError,
    },
    /// An allowlist pattern that can never be stored.
    #[error("invalid allowlist pattern {pattern:?}: {reason}")]
    InvalidPattern {
        /// The pattern as given.
        pattern: String,
        /// Why it is refused.
        reason: String,
    },
    /// A profiles file (the shipped one or the user's extension) that cannot be used.
    #[error("{file}: {error}")]
    Profiles {
        /// The file (`<shipped>` for the built-in one).
        file: String,
        /// What is wrong.
        #[source]
        error: ProfileError,
    },
    /// A slash command that could not be applied; nothing was changed.
    #[error("{0}")]
    SlashCommand(String),
    /// A request tried to set environment variables outside the allowlist.
    #[error("environment variables not allowed: {}", names.join(", "))]
    EnvRejected {
        /// The offending names, sorted.
        names: Vec<String>,
    },
    /// Node selection failed.
    #[error("{0}")]
    NodeSelection(String),
}
