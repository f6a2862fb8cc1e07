//! `ConfigEditError`: why an edit of `config.toml` (`config::edit`) cannot be made. A
//! leaf outside `config/`, so that [`crate::PolicyError`] can carry it without `error`
//! and `config` using each other.

/// Why an edit of the config file cannot be made; nothing was changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigEditError {
    /// The node to bind is empty or has control characters.
    #[error("{node:?} is not a node id (empty, or with control characters)")]
    NotANodeId {
        /// The node as given.
        node: String,
    },
    /// The agent is empty or has control characters.
    #[error("{agent:?} is not an agent id (empty, or with control characters)")]
    NotAnAgentId {
        /// The agent as given.
        agent: String,
    },
    /// The text does not parse as TOML for editing.
    #[error("{message}")]
    Unparsable {
        /// The parser's message.
        message: String,
    },
    /// A key on the way to the setting holds something other than a table.
    #[error("`{key}` is not a table")]
    NotATable {
        /// The key.
        key: String,
    },
    /// `agents.list` holds something other than a list of agents.
    #[error("`agents.list` is not a list of agents")]
    AgentsNotAList,
    /// The agent entry just added could not be found again.
    #[error("the new agent entry went missing")]
    NewAgentEntryMissing,
    /// The agent entry could not be found again.
    #[error("the agent entry went missing")]
    AgentEntryMissing,
    /// The edited text would differ from the original in more than the setting.
    #[error(
        "the edit would change more than tools.exec.node (an unusual layout of the file); edit it by hand"
    )]
    ChangesMore,
}
