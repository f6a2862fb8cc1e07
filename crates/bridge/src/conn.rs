//! An authenticated connection at work: a writer task seals and sends messages (and a
//! heartbeat when the line has been quiet for a heartbeat interval), a reader task
//! opens, checks and decodes what arrives and hands it on in order. Each connection
//! keeps its own timer — nothing loops over all nodes. Any failure — a forged, replayed
//! or malformed frame, silence past the deadline, a closed transport — ends the whole
//! connection, and [`Conn::closed`] says so with the reason.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::BridgeError;
use crate::handshake::Keys;
use crate::message::{self, Msg};
use crate::wire::Transport;

/// Messages waiting to be sent (per connection); senders wait when it is full.
const OUTBOX: usize = 256;
/// Messages received but not yet handled.
const INBOX: usize = 256;
/// Frames a peer may send in a second, sustained, and in a burst: far above what a busy
/// node sends (a result and two events per run, heartbeats), far below what a flooding
/// one could make the other side authenticate and decode. Past it the connection ends.
pub const MAX_FRAMES_PER_SEC: f64 = 10_000.0;
/// See [`MAX_FRAMES_PER_SEC`].
pub const FRAME_BURST: f64 = 20_000.0;
/// Bytes a peer may send in a second, sustained (with a burst of twice as many): a
/// node's results are at most a few hundred kilobytes each.
pub const MAX_BYTES_PER_SEC: f64 = 256.0 * 1024.0 * 1024.0;

/// Heartbeat timing.
#[derive(Clone, Copy, Debug)]
pub struct Heartbeat {
    /// Send a heartbeat after this much silence on the way out.
    pub interval: Duration,
    /// Give the connection up after this much silence on the way in.
    pub dead_after: Duration,
}

impl Default for Heartbeat {
    fn default() -> Self {
        Heartbeat {
            interval: Duration::from_secs(10),
            dead_after: Duration::from_secs(35),
        }
    }
}

impl Heartbeat {
    /// An interval of `interval`, dead after three and a half of them.
    pub fn every(interval: Duration) -> Self {
        Heartbeat {
            interval,
            dead_after: interval * 7 / 2,
        }
    }
}

/// Sends messages on a connection.
#[derive(Clone)]
pub struct Outbox {
    tx: mpsc::Sender<Msg>,
    closed: CancellationToken,
}

impl Outbox {
    /// Queue `msg`; fails once the connection is closed.
    pub async fn send(&self, msg: Msg) -> Result<(), BridgeError> {
        if self.closed.is_cancelled() {
            return Err(BridgeError::Closed(String::new()));
        }
        self.tx
            .send(msg)
            .await
            .map_err(|_| BridgeError::Closed(String::new()))
    }

    /// End the connection.
    pub fn close(&self) {
        self.closed.cancel();
    }

    /// Queue `msg` without waiting (from synchronous code such as an event sink); when
    /// the outbox is full it is sent from a task of its own.
    pub fn post(&self, msg: Msg) {
        if let Err(mpsc::error::TrySendError::Full(msg)) = self.tx.try_send(msg) {
            let tx = self.tx.clone();
            tokio::spawn(async move {
                let _ = tx.send(msg).await;
            });
        }
    }
}

/// One authenticated connection.
pub struct Conn {
    /// Where to send.
    pub outbox: Outbox,
    /// What arrived, in order (heartbeats are consumed here).
    pub inbox: mpsc::Receiver<Msg>,
    /// Cancelled when the connection ends (either side, any reason).
    pub closed: CancellationToken,
    reason: Arc<Mutex<String>>,
}

impl Conn {
    /// Why the connection ended (empty while it is open).
    pub fn reason(&self) -> String {
        self.reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A handle that reads the reason later.
    pub fn reason_handle(&self) -> ReasonHandle {
        ReasonHandle(Arc::clone(&self.reason))
    }
}

/// Reads a connection's end reason.
#[derive(Clone)]
pub struct ReasonHandle(Arc<Mutex<String>>);

impl ReasonHandle {
    /// Why it ended.
    pub fn get(&self) -> String {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Say why it is being ended (kept only if no reason was recorded before).
    pub fn note(&self, why: impl Into<String>) {
        let mut r = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if r.is_empty() {
            *r = why.into();
        }
    }
}

fn end(reason: &Mutex<String>, closed: &CancellationToken, why: String) {
    let mut r = reason.lock().unwrap_or_else(|p| p.into_inner());
    if r.is_empty() {
        *r = why;
    }
    closed.cancel();
}

/// Handles each message on the reader task itself (no hand-over to another task):
/// for a side whose handling is quick and never waits, such as the gateway's routing
/// of results and events to the calls waiting for them.
pub type Dispatch = Arc<dyn Fn(Msg, &Outbox) + Send + Sync>;

/// Run `transport` as a sealed session with `keys`; what arrives goes to
/// [`Conn::inbox`].
pub fn start(transport: Transport, keys: Keys, heartbeat: Heartbeat) -> Conn {
    start_with(transport, keys, heartbeat, None)
}

/// [`start`], handing what arrives to `dispatch` on the reader task instead (the inbox
/// then stays empty).
pub fn start_dispatching(
    transport: Transport,
    keys: Keys,
    heartbeat: Heartbeat,
    dispatch: Dispatch,
) -> Conn {
    start_with(transport, keys, heartbeat, Some(dispatch))
}

fn start_with(
    transport: Transport,
    keys: Keys,
    heartbeat: Heartbeat,
    dispatch: Option<Dispatch>,
) -> Conn {
    let Transport { mut tx, mut rx, .. } = transport;
    let Keys {
        mut sealer,
        mut opener,
    } = keys;
    let closed = CancellationToken::new();
    let reason = Arc::new(Mutex::new(String::new()));
    let (out_tx, mut out_rx) = mpsc::channel::<Msg>(OUTBOX);
    let (in_tx, in_rx) = mpsc::channel::<Msg>(INBOX);

    let (w_closed, w_reason) = (closed.clone(), Arc::clone(&reason));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(heartbeat.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let mut sent = false;
        loop {
            let msg = tokio::select! {
                biased;
                () = w_closed.cancelled() => break,
                msg = out_rx.recv() => match msg {
                    Some(m) => m,
                    None => break,
                },
                _ = tick.tick() => {
                    if std::mem::take(&mut sent) {
                        continue;
                    }
                    Msg::Heartbeat {}
                }
            };
            sent = true;
            // Whatever else is queued leaves in the same write.
            let mut frames = vec![sealer.seal(&message::encode(&msg))];
            while frames.len() < 64 {
                match out_rx.try_recv() {
                    Ok(more) => frames.push(sealer.seal(&message::encode(&more))),
                    Err(_) => break,
                }
            }
            if let Err(e) = tx.send_all(frames).await {
                end(&w_reason, &w_closed, format!("sending failed: {e}"));
                break;
            }
        }
        tx.close().await;
    });

    let (r_closed, r_reason) = (closed.clone(), Arc::clone(&reason));
    let answer_tx = out_tx.downgrade();
    tokio::spawn(async move {
        let mut flow = Flow::new(tokio::time::Instant::now());
        loop {
            let frame = tokio::select! {
                biased;
                () = r_closed.cancelled() => break,
                frame = tokio::time::timeout(heartbeat.dead_after, rx.recv()) => frame,
            };
            let why = match frame {
                Err(_) => format!(
                    "nothing heard for {} (no heartbeat)",
                    humanize(heartbeat.dead_after)
                ),
                Ok(Ok(None)) => "the peer closed the connection".to_owned(),
                Ok(Err(e)) => e.to_string(),
                Ok(Ok(Some(frame)))
                    if let Err(why) = flow.take(frame.len(), tokio::time::Instant::now()) =>
                {
                    tracing::warn!("bridge: dropping the connection: {why}");
                    why
                }
                Ok(Ok(Some(frame))) => {
                    let msg = opener.open(&frame).and_then(message::decode::<Msg>);
                    match msg {
                        Ok(Msg::Heartbeat {}) => continue,
                        Ok(msg) if dispatch.is_some() => {
                            if let (Some(d), Some(tx)) = (&dispatch, answer_tx.upgrade()) {
                                let outbox = Outbox {
                                    tx,
                                    closed: r_closed.clone(),
                                };
                                d(msg, &outbox);
                            }
                            continue;
                        }
                        Ok(msg) => {
                            if in_tx.send(msg).await.is_err() {
                                "the connection's handler stopped".to_owned()
                            } else {
                                continue;
                            }
                        }
                        Err(e) => {
                            tracing::warn!("bridge: dropping the connection: {e}");
                            e.to_string()
                        }
                    }
                }
            };
            end(&r_reason, &r_closed, why);
            break;
        }
    });

    Conn {
        outbox: Outbox {
            tx: out_tx,
            closed: closed.clone(),
        },
        inbox: in_rx,
        closed,
        reason,
    }
}

/// A token bucket over what a peer sends: frames and bytes, refilled with time.
struct Flow {
    frames: f64,
    bytes: f64,
    at: tokio::time::Instant,
}

impl Flow {
    fn new(now: tokio::time::Instant) -> Flow {
        Flow {
            frames: FRAME_BURST,
            bytes: 2.0 * MAX_BYTES_PER_SEC,
            at: now,
        }
    }

    /// Take one frame of `len` bytes arriving at `now`; `Err` says the peer sends too
    /// much.
    fn take(&mut self, len: usize, now: tokio::time::Instant) -> Result<(), String> {
        let secs = now.duration_since(self.at).as_secs_f64();
        self.at = now;
        self.frames = (self.frames + secs * MAX_FRAMES_PER_SEC).min(FRAME_BURST);
        self.bytes = (self.bytes + secs * MAX_BYTES_PER_SEC).min(2.0 * MAX_BYTES_PER_SEC);
        self.frames -= 1.0;
        self.bytes -= len as f64;
        if self.frames < 0.0 {
            return Err(format!(
                "the peer sent more than {MAX_FRAMES_PER_SEC} frames a second (flooding)"
            ));
        }
        if self.bytes < 0.0 {
            return Err(format!(
                "the peer sent more than {} MiB a second (flooding)",
                MAX_BYTES_PER_SEC / 1024.0 / 1024.0
            ));
        }
        Ok(())
    }
}

fn humanize(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_of_frames_or_bytes_is_refused_and_a_busy_peer_is_not() {
        let t0 = tokio::time::Instant::now();
        let mut flow = Flow::new(t0);
        // A burst's worth goes through at once; one more frame in the same instant does not.
        let mut refused = None;
        for i in 0..(FRAME_BURST as usize + 10) {
            if let Err(why) = flow.take(16, t0) {
                refused = Some((i, why));
                break;
            }
        }
        let (at, why) = refused.expect("a flood is refused");
        assert!(at >= FRAME_BURST as usize - 1, "refused after {at} frames");
        assert!(why.contains("frames a second"), "{why}");
        // Big frames exhaust the byte budget first.
        let mut flow = Flow::new(t0);
        let frame = crate::wire::MAX_FRAME;
        let taken = (0..1000)
            .take_while(|_| flow.take(frame, t0).is_ok())
            .count();
        assert!(
            taken < 1000 && taken as f64 * frame as f64 >= MAX_BYTES_PER_SEC,
            "{taken}"
        );
        // A steady, busy peer: 2,000 frames over a second, refilled as it goes.
        let mut flow = Flow::new(t0);
        flow.frames = 1.0;
        for i in 0..2000u64 {
            flow.take(200, t0 + Duration::from_micros(500 * i)).unwrap();
        }
    }
}
