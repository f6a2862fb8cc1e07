//! Warden's egress proxy for sandboxed commands (issue 33): the only way out of a run's
//! network namespace in `proxy` mode. It takes HTTP `CONNECT host:port` and absolute-form
//! plain-HTTP requests on a listener only that run reaches, decides each by the run's
//! egress rules ([`policy::egress`]), resolves the name itself, refuses special addresses
//! a rule does not name exactly (`addr.rs`), holds TLS to the name it was allowed for
//! (`sni.rs`) and plain HTTP to its `Host`, and reports every connection — host, port,
//! verdict, bytes each way. A sandboxed run in `proxy` mode gets a broker of its own
//! (`broker.rs`: a descriptor only its helper inherits), over which the helper hands the
//! loopback listener it made in the run's namespace (`forward.rs`); the broker accepts
//! and the proxy serves each connection the command makes to it. `endpoint.rs` serves
//! the same proxy on a socket path instead. A host no rule names is asked about through the run's asker
//! ([`caps::ExecOptions::ask_connection`]), the client connection held meanwhile. Names
//! are answered inside the sandbox only as the rules allow them (`dns.rs`: a stub whose
//! socket the helper hands over with the listener). Not yet: the container backend.

pub mod addr;
pub mod broker;
pub mod dns;
pub mod endpoint;
pub mod forward;
pub mod join;
pub mod proxy;
pub mod sni;
pub mod splice;

use std::sync::Arc;
use std::time::Duration;

/// How long a run's connections have, once its processes are gone, to finish what they
/// were relaying (their command side is closed: an upstream that answers a closed
/// request ends at once) before they are cut.
const GRACE: Duration = Duration::from_millis(500);

/// After a run: what its broker's connections and lookups did, onto `output.egress`,
/// and a note on the run's output when some were cut short.
pub(crate) async fn gather(broker: broker::Broker, output: &mut caps::ExecOutput) {
    let (connections, cut) = broker.finish(GRACE).await;
    output.egress = connections.into_iter().map(Into::into).collect();
    if cut > 0 {
        crate::say(
            output,
            &format!(
                "warden sandbox: {cut} egress connection(s) were still open when the run ended and were closed"
            ),
        );
    }
}

/// What a sandbox in `proxy` mode decides its runs' connections with: the gate (the
/// run's rules), the resolver the proxy trusts, the proxy's bounds.
#[derive(Clone)]
pub struct Egress {
    /// Decides each host and port of a run that carries no rules of its own.
    pub gate: Arc<dyn proxy::Gate>,
    /// Resolves names.
    pub resolver: Arc<dyn proxy::Resolve>,
    /// The proxy's bounds.
    pub limits: proxy::Limits,
}

impl Egress {
    /// The proxy serving one run (its connections are gathered by the run's broker):
    /// the run's own `rules` decide, else the sandbox's gate; `ask` decides what they ask
    /// about.
    pub(crate) fn proxy(
        &self,
        rules: Option<caps::ConnectionRules>,
        ask: Option<caps::ConnectionAsker>,
    ) -> proxy::Proxy {
        proxy::Proxy {
            gate: rules.map_or_else(|| Arc::clone(&self.gate), |rules| rules.0),
            resolver: Arc::clone(&self.resolver),
            report: Arc::new(|connection| {
                tracing::debug!(?connection, "egress connection ended");
            }),
            limits: self.limits,
            ask,
        }
    }
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}
