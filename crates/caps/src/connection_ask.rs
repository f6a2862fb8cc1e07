//! Deciding a sandboxed run's connections (`sandbox.network = "proxy"`): the run's caller
//! supplies the run's own rules in [`crate::ExecOptions::connection_rules`] (the runner
//! adapts the approved plan's egress rules) and an asker in
//! [`crate::ExecOptions::ask_connection`] for a host those rules do not name — the
//! runner's asks the run's approver, with the run's agent, command and fallback — and the
//! provider's proxy holds the connection until it answers. A provider without a proxy
//! ignores both.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// `Debug` (opaque) and equality by identity (the same `Arc`) for a handle around a
/// trait object, as [`crate::ExecOptions`] compares them.
macro_rules! by_identity {
    ($name:ident) => {
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(concat!(stringify!($name), "(..)"))
            }
        }

        impl PartialEq for $name {
            fn eq(&self, other: &Self) -> bool {
                Arc::ptr_eq(&self.0, &other.0)
            }
        }

        impl Eq for $name {}
    };
}

/// What a run's rules say about one host and port, before anyone is asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Reach it; `rule` is what allowed it, and `names_address` says the rule names the
    /// (IP literal) host exactly — the only way a special address is reached.
    Allow {
        /// The rule, in words.
        rule: String,
        /// Whether the rule names this address exactly.
        names_address: bool,
    },
    /// Refuse it, saying why.
    Refuse(String),
    /// No rule names it: the run's asker decides (refused when the run has none), and
    /// the words say why it is asked.
    Ask(String),
}

/// Decides each host and port a run's command asks for by rules (no human).
pub trait AdmitConnection: Send + Sync {
    /// What the rules say about `host` (lower-cased, brackets removed) on `port`.
    fn admit(&self, host: &str, port: u16) -> Admission;

    /// Whether a name lookup for `host` (lower-cased, no trailing dot) is answered inside
    /// the sandbox: [`Admission::Allow`] when the rules allow the name on some port and
    /// no rule denies it on that port. A lookup is never asked about, so anything else
    /// is refused — and so is every name by rules that do not say (this default).
    fn admit_name(&self, host: &str) -> Admission {
        Admission::Refuse(format!("these rules answer no name lookups ({host})"))
    }
}

/// A run's own connection rules, as [`crate::ExecOptions`] carries them (compared by
/// identity).
#[derive(Clone)]
pub struct ConnectionRules(pub Arc<dyn AdmitConnection>);

by_identity!(ConnectionRules);

/// What the asker decided about one host and port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectionAnswer {
    /// Reach it.
    Allow {
        /// Who allowed it, in words ("allowed for this run by the approver…").
        reason: String,
        /// Whether what allowed it named this host exactly — a human shown the address,
        /// or a stored address rule — which is the only way a special address (loopback,
        /// private, metadata…) written out as the host is reached; a fallback does not.
        names_address: bool,
    },
    /// Refuse it, saying why.
    Refuse(String),
}

/// One question: a host and port no rule names, and why it is asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionQuestion {
    /// The host asked for (a name, lower-cased, or an address).
    pub host: String,
    /// The port asked for.
    pub port: u16,
    /// Why it is asked (no rule names it), in words.
    pub why: String,
    /// What the address is when the host is a special one (loopback, private,
    /// metadata…): the human is told that allowing it reaches that.
    pub special: Option<String>,
}

/// `host:port` as people write it: `[v6]:port` for an IPv6 address.
pub fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

impl ConnectionQuestion {
    /// Its host and port as people write them ([`host_port`]).
    pub fn destination(&self) -> String {
        host_port(&self.host, self.port)
    }
}

/// Decides connections nobody's rules decided: the run's caller's answer.
pub trait AskConnection: Send + Sync {
    /// Decide `question`. May take as long as a human does; the provider drops the
    /// future when the run ends (which withdraws the question).
    fn ask<'a>(
        &'a self,
        question: &'a ConnectionQuestion,
    ) -> Pin<Box<dyn Future<Output = ConnectionAnswer> + Send + 'a>>;
}

/// A run's asker, as [`crate::ExecOptions`] carries it (compared by identity).
#[derive(Clone)]
pub struct ConnectionAsker(pub Arc<dyn AskConnection>);

by_identity!(ConnectionAsker);
