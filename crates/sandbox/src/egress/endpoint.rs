//! One run's way out: a Unix socket of its own, in a directory only Warden reaches, served
//! by a proxy whose gate is that run's rules. The socket is what gets bound into the run's
//! sandbox, so the run is known by the socket it used — never by anything it sends. The
//! endpoint lives as long as the run: dropping it stops its proxy and removes the socket.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::net::UnixListener;

use super::proxy::{Connection, Gate, Limits, Proxy, Resolve};

/// A run's egress endpoint (see the module header).
pub struct Endpoint {
    path: PathBuf,
    serving: tokio::task::JoinHandle<std::io::Result<()>>,
    connections: Arc<Mutex<Vec<Connection>>>,
}

impl Endpoint {
    /// Open run `run_id`'s endpoint in `dir` (which must exist, private to Warden),
    /// deciding with `gate`. Call it inside a Tokio runtime.
    pub fn open(
        dir: &Path,
        run_id: &str,
        gate: Arc<dyn Gate>,
        resolver: Arc<dyn Resolve>,
        limits: Limits,
    ) -> std::io::Result<Endpoint> {
        if run_id.is_empty()
            || run_id.len() > 64
            || !run_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("run id {run_id:?} cannot name an egress socket"),
            ));
        }
        let path = dir.join(format!("egress-{run_id}.sock"));
        let listener = UnixListener::bind(&path)?;
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        let connections: Arc<Mutex<Vec<Connection>>> = Arc::default();
        let kept = Arc::clone(&connections);
        let proxy = Proxy {
            gate,
            resolver,
            report: Arc::new(move |c| {
                kept.lock().unwrap_or_else(|p| p.into_inner()).push(c);
            }),
            limits,
            ask: None,
        };
        Ok(Endpoint {
            path,
            serving: tokio::spawn(proxy.serve(listener)),
            connections,
        })
    }

    /// The socket to bind into the run's sandbox.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The connections that ended so far, in the order they ended.
    pub fn connections(&self) -> Vec<Connection> {
        self.connections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.serving.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}
