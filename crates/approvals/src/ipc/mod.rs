//! The approver IPC: an authenticated request/response protocol over a Unix socket.

mod client;
mod frame;
pub mod protocol;
mod server;

pub use client::{
    AskOutcome, ClientConfig, DEFAULT_APPROVAL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, ask,
};
pub use frame::{read_frame, write_frame};
pub use server::{Approver, Limits, ServeError, ServerConfig, bind_socket, serve};
