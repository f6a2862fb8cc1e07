//! A resolved value and the level it came from (tool parameter, session, agent, global,
//! host file, built-in default): what every explanation shows beside each value.

use std::fmt;

use serde::Serialize;

/// Where a resolved value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// A parameter of this exec request.
    ToolParam,
    /// A session override set by `/exec` or `/elevated`.
    Session,
    /// The agent's `[[agents.list]]` entry in config.toml.
    Agent,
    /// The global `[tools.exec]` table in config.toml.
    Global,
    /// The executing host's `exec-approvals.json` (a ceiling that won).
    HostFile,
    /// Warden's built-in secure default.
    Default,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::ToolParam => "tool param",
            Source::Session => "session",
            Source::Agent => "agent",
            Source::Global => "global",
            Source::HostFile => "host file",
            Source::Default => "built-in default",
        })
    }
}

/// A value and the level it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Sourced<T> {
    /// The value.
    pub value: T,
    /// Where it came from.
    pub source: Source,
}

impl<T> Sourced<T> {
    pub(crate) fn new(value: T, source: Source) -> Self {
        Sourced { value, source }
    }
}
