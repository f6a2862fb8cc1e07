//! The approver side: hosts the Unix socket, authenticates every request, and asks an
//! [`Approver`] (the terminal UI, a web page, a test script) for the decision.
//!
//! Order of checks on each connection, cheapest and most important first: same-UID peer
//! (before a byte is read), per-peer rate limit, a place among the pending handshakes
//! (the oldest is closed when they are full), fresh nonce, frame size, read deadline,
//! MAC (constant time, full tag), label, nonce, TTL, the cap on authenticated requests,
//! strict JSON, plan digest. Any failure closes the connection without an answer.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use caps::{FileKind, Fs};
use tokio::io::AsyncReadExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::frame::{read_frame, write_frame};
use super::protocol::{
    Answer, ExecPrompt, ExecReport, NONCE_LEN, Prompt, Request, Response, decode_request,
    encode_challenge, encode_response, parse_strict,
};
use crate::clock::Clock;
use crate::store::Randomness;

/// Resource limits of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Time a client has to send its request after the challenge.
    pub read_deadline: Duration,
    /// Authenticated requests handled at once (each may wait long for the human); more
    /// are closed immediately.
    pub max_connections: usize,
    /// Connections between the challenge and an authenticated request. When more
    /// arrive, the oldest is closed to make room, so idle connections cannot keep a
    /// real requester (who answers the challenge at once) out.
    pub max_handshakes: usize,
    /// Sustained requests per second per peer process.
    pub rate_per_sec: u32,
    /// Burst allowance per peer process.
    pub burst: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            read_deadline: Duration::from_secs(2),
            max_connections: 64,
            max_handshakes: 128,
            rate_per_sec: 20,
            burst: 40,
        }
    }
}

/// Decides on prompts. Implementations queue them for a human.
#[async_trait::async_trait]
pub trait Approver: Send + Sync {
    /// The decision for `prompt` and, for `allow-always`, which of the prompt's options
    /// to store (`None`: the preselected one). The future is dropped if the requester
    /// goes away.
    async fn decide(&self, prompt: &Prompt) -> (Answer, Option<usize>);

    /// The decision for an exec request, the option chosen as for [`Approver::decide`],
    /// and, when allowed, the approver's own run of it.
    async fn exec(&self, request: &ExecPrompt) -> (Answer, Option<usize>, Option<ExecReport>);
}

/// Why the socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The directory or an existing file at the socket path is unsafe to use.
    #[error("{0}")]
    Unsafe(String),
    /// Another approver already listens there.
    #[error("an approver is already listening on {0}")]
    AlreadyRunning(String),
    /// A filesystem or socket failure.
    #[error("{0}")]
    Io(String),
}

/// Create the socket at `path`: parent directory 0700 and ours, a stale socket of ours
/// replaced, anything else at that path refused (never deleted), the socket chmod 0600.
pub async fn bind_socket(
    fs: &dyn Fs,
    path: &Path,
    owner_uid: u32,
) -> Result<UnixListener, ServeError> {
    let dir = path
        .parent()
        .ok_or_else(|| ServeError::Unsafe(format!("{} has no parent directory", path.display())))?;
    fs.create_dir_all(dir, 0o700)
        .map_err(|e| ServeError::Io(e.to_string()))?;
    if let Some(why) = crate::socket_location::private_dir_problem(fs, dir, owner_uid) {
        return Err(ServeError::Unsafe(format!(
            "{why}; fix it with `chmod 700 {}` if it is yours",
            dir.display()
        )));
    }
    match fs.symlink_metadata(path) {
        Ok(m) if m.kind == FileKind::Socket && m.uid == owner_uid => {
            match tokio::time::timeout(Duration::from_secs(1), UnixStream::connect(path)).await {
                Ok(Ok(_)) => return Err(ServeError::AlreadyRunning(path.display().to_string())),
                // Nobody listens: a socket left by a crashed approver.
                _ => fs.remove(path).map_err(|e| ServeError::Io(e.to_string()))?,
            }
        }
        Ok(m) => {
            return Err(ServeError::Unsafe(format!(
                "{} exists and is not a socket of ours ({}, uid {}); not touching it",
                path.display(),
                m.kind,
                m.uid
            )));
        }
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(ServeError::Io(e.to_string())),
    }
    let listener = UnixListener::bind(path)
        .map_err(|e| ServeError::Io(format!("bind {}: {e}", path.display())))?;
    fs.set_permissions(path, 0o600)
        .map_err(|e| ServeError::Io(e.to_string()))?;
    Ok(listener)
}

/// What the server needs besides the socket.
#[derive(Clone)]
pub struct ServerConfig {
    /// The shared secret from the approvals file.
    pub token: String,
    /// The only uid allowed to connect.
    pub owner_uid: u32,
    /// Resource limits.
    pub limits: Limits,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("token", &"<redacted>")
            .field("owner_uid", &self.owner_uid)
            .field("limits", &self.limits)
            .finish()
    }
}

/// Token buckets per peer pid.
struct RateLimiter {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<i32, (f64, Instant)>>,
}

impl RateLimiter {
    fn allow(&self, peer: i32) -> bool {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() > 4096 {
            // Forget peers that have been quiet long enough to have a full bucket again.
            let refill = Duration::from_secs_f64(self.burst / self.rate.max(1e-9));
            buckets.retain(|_, (_, at)| now.duration_since(*at) < refill);
        }
        let (tokens, at) = buckets.entry(peer).or_insert((self.burst, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * self.rate).min(self.burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The connections waiting for their authenticated request, oldest first.
struct Handshakes {
    max: usize,
    next_id: std::sync::atomic::AtomicU64,
    pending: Mutex<std::collections::VecDeque<(u64, Arc<tokio::sync::Notify>)>>,
}

/// One connection's place among the handshakes; leaves when dropped.
struct Handshake<'a> {
    pool: &'a Handshakes,
    id: u64,
    evicted: Arc<tokio::sync::Notify>,
}

impl Handshakes {
    /// Take a place, closing the oldest handshake if the pool is full.
    fn enter(&self) -> Handshake<'_> {
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let evicted = Arc::new(tokio::sync::Notify::new());
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        while pending.len() >= self.max.max(1) {
            if let Some((_, oldest)) = pending.pop_front() {
                // `notify_one` keeps a permit, so the eviction lands even if the oldest
                // is not waiting yet.
                oldest.notify_one();
            }
        }
        pending.push_back((id, Arc::clone(&evicted)));
        Handshake {
            pool: self,
            id,
            evicted,
        }
    }
}

impl Drop for Handshake<'_> {
    fn drop(&mut self) {
        let mut pending = self.pool.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.retain(|(id, _)| *id != self.id);
    }
}

struct Shared {
    config: ServerConfig,
    handshakes: Handshakes,
    approver: Arc<dyn Approver>,
    clock: Arc<dyn Clock>,
    random: Arc<dyn Randomness>,
    slots: Semaphore,
    rate: RateLimiter,
}

/// Serve connections on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: UnixListener,
    config: ServerConfig,
    approver: Arc<dyn Approver>,
    clock: Arc<dyn Clock>,
    random: Arc<dyn Randomness>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let shared = Arc::new(Shared {
        handshakes: Handshakes {
            max: config.limits.max_handshakes,
            next_id: Default::default(),
            pending: Mutex::default(),
        },
        slots: Semaphore::new(config.limits.max_connections),
        rate: RateLimiter {
            rate: f64::from(config.limits.rate_per_sec),
            burst: f64::from(config.limits.burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
        },
        config,
        approver,
        clock,
        random,
    });
    tokio::pin!(shutdown);
    let mut connections = tokio::task::JoinSet::new();
    let (stop, stopping) = tokio::sync::watch::channel(false);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            // Finished connections are reaped as they end, so the set stays small.
            Some(_) = connections.join_next() => {}
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let shared = Arc::clone(&shared);
                let stopping = stopping.clone();
                connections.spawn(async move {
                    if let Err(why) = handle(stream, &shared, stopping).await {
                        tracing::debug!("approver connection closed: {why}");
                    }
                });
            }
        }
    }
    // An answer the human already gave is still delivered: a connection holding one is
    // writing it. Connections still waiting for a human end unanswered now (their
    // requester applies askFallback); past the grace anything left is dropped.
    let _ = stop.send(true);
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
}

/// How long a stopping server waits for its connections to deliver answers already given.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

async fn handle(
    mut stream: UnixStream,
    shared: &Shared,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) -> Result<(), String> {
    // Same-UID peers only, decided before reading a single byte.
    let cred = stream
        .peer_cred()
        .map_err(|e| format!("peer credentials: {e}"))?;
    if cred.uid() != shared.config.owner_uid {
        return Err(format!("refused peer uid {}", cred.uid()));
    }
    if !shared.rate.allow(cred.pid().unwrap_or(-1)) {
        return Err("peer over its rate limit".into());
    }
    let handshake = shared.handshakes.enter();
    let mut nonce = [0u8; NONCE_LEN];
    shared.random.fill(&mut nonce)?;
    write_frame(&mut stream, &encode_challenge(&nonce))
        .await
        .map_err(|e| e.to_string())?;
    let frame = tokio::select! {
        read = tokio::time::timeout(shared.config.limits.read_deadline, read_frame(&mut stream)) => read
            .map_err(|_| "request not received before the deadline".to_string())?
            .map_err(|e| e.to_string())?,
        () = handshake.evicted.notified() => {
            return Err("closed to make room for newer connections".into());
        }
    };
    let token = shared.config.token.as_bytes();
    let (payload, request_mac) =
        decode_request(token, &nonce, shared.clock.now_ms(), &frame).map_err(|e| e.to_string())?;
    drop(handshake);
    // Only an authenticated request holds one of the slots that wait for the human.
    let _slot = shared
        .slots
        .try_acquire()
        .map_err(|_| "connection cap reached".to_string())?;
    let request: Request = parse_strict(payload).map_err(|e| e.to_string())?;
    let prompt = request.prompt();
    if prompt.digest != prompt.compute_digest() {
        return Err("the prompt's digest does not match the prompt".into());
    }
    let (reader, mut writer) = stream.split();
    let decision = async {
        match &request {
            Request::Prompt(p) => {
                let (answer, choice) = shared.approver.decide(p).await;
                (answer, choice, None)
            }
            Request::Exec(e) => shared.approver.exec(e).await,
        }
    };
    // The requester may give up (timeout, cancellation): stop asking the human then.
    let gone = async {
        let mut reader = reader;
        let mut byte = [0u8; 1];
        let _ = reader.read(&mut byte).await;
    };
    let (answer, choice, report) = tokio::select! {
        // An answer already given wins over a stop that arrives with it.
        biased;
        decided = decision => decided,
        _ = gone => return Err("the requester went away".into()),
        _ = stopping.wait_for(|stopped| *stopped) => {
            return Err("the approver stopped before anyone answered".into());
        }
    };
    let response = Response {
        id: prompt.id.clone(),
        digest: prompt.digest.clone(),
        answer,
        allow_always_option: choice.filter(|_| answer == Answer::AllowAlways),
        report: report.map(Box::new),
    };
    let body = serde_json::to_vec(&response).map_err(|e| e.to_string())?;
    let frame = encode_response(token, &nonce, &request_mac, shared.clock.now_ms(), &body);
    write_frame(&mut writer, &frame)
        .await
        .map_err(|e| e.to_string())
}
