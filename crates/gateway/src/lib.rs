//! The gateway: sessions and their slash-command overrides, routing of each exec by its
//! effective host (`gateway` → the local runner, `sandbox` → the sandbox route, `node`
//! → the Bridge), bounded per-session system-event queues, the agent-facing MCP server
//! (stdio and Streamable HTTP), and the file tools behind path authorization.

#![forbid(unsafe_code)]

pub mod credentials;
pub mod direct;
pub mod files;
mod gateway;
pub mod http;
pub mod mcp;
mod metrics;
mod node_route;
pub mod operator;
pub mod processes;
mod route;
mod runs;
mod sessions;
pub mod stdio;

pub use credentials::{Credentials, Identity};
pub use direct::{DirectModeError, DirectSwitch, MAX_DIRECT_TTL};
pub use files::{FileError, FileTools, OpenRoot, PathAuthorization};
pub use gateway::Gateway;
pub use http::HttpLimits;
pub use mcp::{WardenMcp, report_json, report_text, tools};
pub use processes::{Process, ProcessError, ProcessState, Processes};
pub use route::{DirectMode, FollowingRoute, Routes, SandboxRoute};
pub use runs::{DEFAULT_RUNS_PER_AGENT, RunSlot, RunSlots};
pub use sessions::{MAX_EVENTS_PER_SESSION, SessionEvents, SessionKey, Sessions};
