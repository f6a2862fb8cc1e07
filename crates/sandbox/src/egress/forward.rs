//! Inside the run's network namespace, in the sandbox's helper before the command starts:
//! a TCP listener on a loopback port (what `HTTP_PROXY` and `HTTPS_PROXY` name for the
//! command), handed to the run's broker outside (`broker.rs`), which accepts and serves
//! every connection the command makes to it. No process of Warden's stays in the sandbox
//! for it, and no byte passes through anything but the proxy.

use std::net::TcpListener;
use std::os::fd::{AsFd, OwnedFd};

/// The proxy variables a `proxy` run's command gets, each naming its listener: the
/// upper- and lower-case spellings programs read (curl, git, pip, npm, Go, Python's
/// `urllib`, Node's undici), and npm's own.
pub const PROXY_VARIABLES: &[&str] = &[
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "npm_config_proxy",
    "npm_config_https_proxy",
];

/// Variables that would send a program around the proxy, removed (nothing is reachable
/// around it; a program that tried would only fail more obscurely).
pub const BYPASS_VARIABLES: &[&str] = &["NO_PROXY", "no_proxy", "npm_config_noproxy"];

/// In the sandbox's helper, before the command starts (one thread, confined as the
/// command will be): listen on an unused loopback port of the run's own network
/// namespace, hand the listener — and `stub`, the DNS stub's socket bound before the
/// helper was confined (`dns.rs`) — to the run's broker (descriptor `broker`), and name
/// the listener in the proxy variables. The helper's copies of both descriptors are closed with every
/// other one it does not keep, before the command starts: from then on only Warden holds
/// the listener. Any failure ends the run before the command starts.
pub(crate) fn start_in_sandbox(broker: i32, stub: Option<OwnedFd>) {
    let port = listen_and_hand(broker, stub)
        .unwrap_or_else(|e| crate::setup_failure::fail(format!("the egress listener: {e}")));
    let url = proxy_url(port);
    // SAFETY: the helper is single-threaded; nothing reads the environment concurrently.
    unsafe {
        for name in PROXY_VARIABLES {
            std::env::set_var(name, &url);
        }
        for name in BYPASS_VARIABLES {
            std::env::remove_var(name);
        }
    }
}

/// Listen on an unused loopback port of this thread's network namespace and hand the
/// listener — with `stub`, the DNS stub's socket, when there is one — to the broker on
/// descriptor `broker`, closing this process's copies; the port. The run's helper does
/// this inside the sandbox, the container backend's helper inside the container.
pub(crate) fn listen_and_hand(broker: i32, stub: Option<OwnedFd>) -> Result<u16, String> {
    let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| format!("cannot listen on loopback: {e}"))?;
    let port = listener
        .local_addr()
        .map_err(|e| format!("its port: {e}"))?
        .port();
    super::broker::hand(broker, &listener, stub.as_ref().map(AsFd::as_fd))
        .map_err(|e| format!("it could not be handed over: {e}"))?;
    Ok(port)
}

/// What the proxy variables say for a listener on loopback port `port`.
pub(crate) fn proxy_url(port: u16) -> String {
    format!("http://127.0.0.1:{port}")
}

/// `env` as a command whose proxy listens on loopback port `port` gets it: every proxy
/// variable naming it, none that would send a program around it.
pub(crate) fn point_at_proxy(env: &mut std::collections::BTreeMap<String, String>, port: u16) {
    let url = proxy_url(port);
    for name in PROXY_VARIABLES {
        env.insert((*name).to_owned(), url.clone());
    }
    for name in BYPASS_VARIABLES {
        env.remove(*name);
    }
}
