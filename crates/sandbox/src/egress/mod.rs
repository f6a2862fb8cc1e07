//! Warden's egress proxy for sandboxed commands (issue 33): the only way out of a run's
//! network namespace in `proxy` mode. It takes HTTP `CONNECT host:port` and absolute-form
//! plain-HTTP requests on a listener only that run reaches, decides each by the run's
//! egress rules ([`policy::egress`]), resolves the name itself, refuses special addresses
//! a rule does not name exactly (`addr.rs`), holds TLS to the name it was allowed for
//! (`sni.rs`) and plain HTTP to its `Host`, and reports every connection — host, port,
//! verdict, bytes each way. A run gets an endpoint of its own (`endpoint.rs`: its socket,
//! its gate), and inside its namespace a forwarder (`forward.rs`) carries loopback TCP to
//! that socket. Not yet wired into runs: starting the forwarder beside the command, the
//! DNS stub, the ask path and the configuration come next.

pub mod addr;
pub mod endpoint;
pub mod forward;
pub mod proxy;
pub mod sni;
