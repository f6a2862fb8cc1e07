//! `warden approvals ui --web`: the approver and operator console on a local web page.
//! It hosts the approver socket like the terminal approver, and serves on loopback only
//! (plain HTTP never leaves the machine): pending requests in real time (server-sent
//! events), allow once / allow always / deny, the allowlist and settings of
//! `exec-approvals.json` (edited through the store, compare-and-swap), node bindings in
//! `config.toml` once the gateway knows a node (`bindings.rs`: the same lock and
//! compare-and-swap, comments kept), the effective policy as `warden policy
//! explain` shows it, and a running gateway's live runs (`runs.rs`: list, output tail,
//! kill).
//!
//! Access: a one-time login link printed at start, a session cookie (HttpOnly,
//! SameSite=Strict), a CSRF token on every mutation, and the Host and Origin headers
//! checked on every request (DNS rebinding, forged cross-origin posts) — see `auth.rs`.
//! The page is plain HTML, CSS and JavaScript embedded in the binary (`assets/`).

mod api;
mod auth;
mod bindings;
mod console;
mod history;
mod queue;
mod runs;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use approvals::{OsRandom, Store};
use caps::LocalShell;
use tokio::sync::watch;

use crate::approver_socket::ApproverSocket;
use crate::exit;
use crate::host::HostFacts;

/// Where the page is served unless `--listen` says otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7879";

/// How often the console looks at `exec-approvals.json` for changes made elsewhere (the
/// CLI, a runner storing "allow always", usage bookkeeping), and at `config.toml` and
/// `nodes.json`.
const STORE_POLL: Duration = Duration::from_millis(500);

/// Options of `warden approvals ui --web`.
#[derive(Debug, clap::Args)]
pub struct WebArgs {
    /// Loopback address and port for the page (port 0: any free port). Other addresses
    /// are refused: the page is plain HTTP.
    #[arg(long, default_value = DEFAULT_LISTEN, requires = "web")]
    pub listen: SocketAddr,
}

/// Everything the handlers share.
pub(crate) struct App {
    pub queue: Arc<queue::Queue>,
    pub auth: auth::Auth,
    pub store: Store,
    pub facts: HostFacts,
    /// `config.toml`, whose node bindings the console edits.
    pub config: bindings::ConfigFile,
    /// The gateway's node registry (`nodes.json`): the nodes a binding may name.
    pub registry: bridge::Registry,
    /// The store's hash (or why it cannot be read), as last seen.
    pub store_state: watch::Receiver<String>,
    /// `config.toml`'s version and the node registry's fingerprint, as last seen.
    pub files_state: watch::Receiver<FilesState>,
    /// Becomes true when the server stops: event streams end, so shutdown need not wait.
    pub shutdown: watch::Receiver<bool>,
}

/// What the page compares, besides the store, to know that it shows old data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilesState {
    /// `config.toml`'s version (see `bindings::ConfigFile::fingerprint`).
    pub config: String,
    /// The node registry's (see `bindings::nodes_fingerprint`).
    pub nodes: String,
}

/// Run the web approver until SIGINT or SIGTERM.
pub fn run(args: WebArgs) -> i32 {
    exit::block_on(true, async move { run_async(args).await.map(|()| 0) })
}

async fn run_async(args: WebArgs) -> anyhow::Result<()> {
    let facts = HostFacts::read()?;
    let started = start(&facts, args.listen, exit::shutdown_signal()).await?;
    out!(
        "warden approver listening on {}\nweb approver: open {}\n(the link works once; keep it private)\n",
        started.socket.display(),
        started.login
    );
    started.done.await?
}

/// A web approver serving: its socket, its one-time login link, and its end.
pub struct Started {
    /// The approver socket it hosts.
    pub socket: std::path::PathBuf,
    /// The one-time login link.
    pub login: String,
    /// Resolves when it has stopped (after `shutdown`).
    pub done: tokio::task::JoinHandle<anyhow::Result<()>>,
}

/// Start the web approver on `listen` (loopback only) with this host's approver socket,
/// until `shutdown` resolves. Refused when another approver already listens on the socket.
pub async fn start(
    facts: &HostFacts,
    listen: SocketAddr,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<Started> {
    if !listen.ip().is_loopback() {
        anyhow::bail!(
            "--listen {listen}: the web approver serves plain HTTP and listens on loopback only \
             (127.0.0.1 or [::1]); reach it from elsewhere through an SSH tunnel"
        );
    }
    let facts = facts.clone();
    // Requests run here are held like the gateway's: nothing they start outlives them.
    let shell = LocalShell::contained(facts.containment()?);
    let store = facts.store();
    // The page's port first: a port in use leaves the approver socket to someone else.
    let tcp = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let socket = ApproverSocket::bind(&facts).await?;
    let socket_path = socket.path().to_path_buf();
    let addr = tcp.local_addr()?;
    let queue = Arc::new(queue::Queue::new(shell));
    let serving = socket.serve(Arc::clone(&queue) as Arc<dyn approvals::ipc::Approver>);
    let config =
        bindings::ConfigFile::new(facts.fs(), policy::config::config_path(&facts.warden_home))
            .with_audit(facts.audit(&facts.config().unwrap_or_default()));
    let registry = facts.node_registry();
    let (store_tx, store_state) = watch::channel(store_fingerprint(&store).await);
    let (files_tx, files_state) = watch::channel(files_fingerprint(&config, &registry).await);
    let poller = {
        let store = store.clone();
        let (config, registry) = (config.clone(), registry.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(STORE_POLL).await;
                let now = store_fingerprint(&store).await;
                store_tx.send_if_modified(|seen| {
                    let changed = *seen != now;
                    *seen = now;
                    changed
                });
                let now = files_fingerprint(&config, &registry).await;
                files_tx.send_if_modified(|seen| {
                    let changed = *seen != now;
                    *seen = now;
                    changed
                });
            }
        })
    };
    let (auth, login) = auth::Auth::new(addr, &OsRandom)?;
    let (stopping, stopped) = watch::channel(false);
    let app = Arc::new(App {
        queue,
        auth,
        store,
        facts,
        config,
        registry,
        store_state,
        files_state,
        shutdown: stopped,
    });
    let router = api::router(Arc::clone(&app));
    let shutdown = async move {
        shutdown.await;
        let _ = stopping.send(true);
    };
    let done = tokio::spawn(async move {
        let served = axum::serve(tcp, router)
            .with_graceful_shutdown(shutdown)
            .await
            .context("the web server stopped");
        poller.abort();
        serving.stop().await;
        served
    });
    Ok(Started {
        socket: socket_path,
        login: format!("http://{addr}/login?token={login}"),
        done,
    })
}

/// The store's hash, or the reason it cannot be read: what the page compares to know
/// that the file changed under it.
async fn store_fingerprint(store: &Store) -> String {
    let store = store.clone();
    tokio::task::spawn_blocking(move || match store.load() {
        Ok(s) => s.hash,
        Err(e) => format!("error: {e}"),
    })
    .await
    .unwrap_or_else(|e| format!("error: {e}"))
}

/// `config.toml`'s version and the node registry's fingerprint.
async fn files_fingerprint(
    config: &bindings::ConfigFile,
    registry: &bridge::Registry,
) -> FilesState {
    let (config, registry) = (config.clone(), registry.clone());
    tokio::task::spawn_blocking(move || FilesState {
        config: config.fingerprint(),
        nodes: bindings::nodes_fingerprint(&registry.list().map_err(|e| e.to_string())),
    })
    .await
    .unwrap_or_else(|e| FilesState {
        config: format!("error: {e}"),
        nodes: format!("error: {e}"),
    })
}
