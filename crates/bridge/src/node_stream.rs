//! A streamed run on a node (`system.run` with `stream`): its output goes to the gateway
//! as `exec.output` frames while it is written, and what the gateway sends for it —
//! `exec.input`, `exec.eof`, `exec.signal`, `exec.resize` — reaches the command.
//!
//! Output frames leave at most one per [`OUTPUT_INTERVAL`] per run, each carrying
//! everything written since the last (up to [`MAX_OUTPUT_CHUNK`]), so a program writing a
//! byte at a time costs the connection a hundred frames a second, not a million — within
//! the gateway's frame-rate bound with every run this connection may hold — while a
//! terminal's echo still comes back at once. Every frame of a run is sent before its
//! result.
//!
//! Input is kept in one buffer per run, moved into the command's own bounded input as it
//! reads, and each move is acknowledged (`exec.input.taken`): the gateway holds what it
//! has sent and not seen taken against the run's input bound, so a command that does not
//! read pushes back on the agent exactly as on the gateway host, and the buffer here
//! never holds more than that bound (a gateway that sends more is ended).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use caps::{INPUT_QUEUE_BYTES, InputError, InputSender, InputStream, LiveOutput};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::conn::Outbox;
use crate::message::{MAX_OUTPUT_CHUNK, Msg};

/// At most one output frame per run this often.
pub const OUTPUT_INTERVAL: Duration = Duration::from_millis(10);

/// Output a streamed run keeps for its frames while they wait to be sent.
const OUTPUT_BUFFER: usize = 1 << 20;

/// Input moved into the command's queue per step (so a partly full queue still takes
/// what fits).
const INPUT_STEP: usize = 4096;

/// How often input waiting for a command that does not read is offered again.
const INPUT_RETRY: Duration = Duration::from_millis(10);

/// The streamed runs of one connection, by run id.
#[derive(Clone, Default)]
pub(crate) struct Streams(Arc<Mutex<HashMap<String, Arc<RunInput>>>>);

/// A streamed run's input side, as the connection's reader reaches it.
pub(crate) struct RunInput {
    sender: InputSender,
    waiting: Mutex<Waiting>,
    wake: Notify,
}

#[derive(Default)]
struct Waiting {
    bytes: Vec<u8>,
    eof: bool,
}

/// Why a message for a streamed run breaks the protocol (the connection ends).
pub(crate) type Violation = String;

impl Streams {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<RunInput>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Open run `run_id`'s stream: its input for the runner. `None` if the id streams
    /// already on this connection.
    pub(crate) fn open(&self, run_id: &str) -> Option<InputStream> {
        let mut streams = self.lock();
        if streams.contains_key(run_id) {
            return None;
        }
        let (sender, stream) = caps::input_channel();
        streams.insert(
            run_id.to_owned(),
            Arc::new(RunInput {
                sender,
                waiting: Mutex::default(),
                wake: Notify::new(),
            }),
        );
        Some(stream)
    }

    fn get(&self, run_id: &str) -> Option<Arc<RunInput>> {
        self.lock().get(run_id).cloned()
    }

    /// Run `run_id` ended: what comes for it from now on is dropped.
    pub(crate) fn close(&self, run_id: &str) {
        self.lock().remove(run_id);
    }

    /// One of the gateway's stream messages. Messages for a run that is not streaming
    /// (any more) are dropped: input racing a run's end is not a violation.
    pub(crate) fn handle(&self, msg: Msg) -> Result<(), Violation> {
        let run_id = match &msg {
            Msg::ExecInput { run_id, .. }
            | Msg::ExecEof { run_id }
            | Msg::ExecSignal { run_id, .. }
            | Msg::ExecResize { run_id, .. } => run_id.clone(),
            other => return Err(format!("{other:?} is not a stream message")),
        };
        let Some(run) = self.get(&run_id) else {
            tracing::debug!("bridge: stream message for run {run_id:?}, which is not streaming");
            return Ok(());
        };
        match msg {
            Msg::ExecInput { data, .. } => {
                let bytes = BASE64
                    .decode(&data)
                    .map_err(|e| format!("exec.input for {run_id:?} is not base64: {e}"))?;
                let mut waiting = run.waiting.lock().unwrap_or_else(|p| p.into_inner());
                if waiting.eof {
                    return Err(format!("exec.input for {run_id:?} after its exec.eof"));
                }
                if waiting.bytes.len() + bytes.len() > INPUT_QUEUE_BYTES {
                    return Err(format!(
                        "the gateway sent run {run_id:?} more input than it may have in flight ({INPUT_QUEUE_BYTES} bytes)"
                    ));
                }
                waiting.bytes.extend_from_slice(&bytes);
            }
            Msg::ExecEof { .. } => {
                run.waiting.lock().unwrap_or_else(|p| p.into_inner()).eof = true;
            }
            Msg::ExecSignal { signal, .. } => {
                let number = caps::signal_number(&signal).ok_or_else(|| {
                    format!("exec.signal names no signal a run may be sent: {signal:?}")
                })?;
                // A run that has ended (or not started) takes no signal: nothing to do.
                let _ = run.sender.signal(number);
            }
            Msg::ExecResize { rows, cols, .. } => {
                let size = caps::TerminalSize::new(rows, cols)
                    .map_err(|e| format!("exec.resize for {run_id:?}: {e}"))?;
                let _ = run.sender.resize(size);
            }
            _ => unreachable!("matched above"),
        }
        run.wake.notify_one();
        Ok(())
    }
}

/// Move run `run_id`'s waiting input into the command's input as it reads, telling the
/// gateway what was taken, until `done`.
pub(crate) async fn feed_input(
    streams: Streams,
    run_id: String,
    outbox: Outbox,
    done: CancellationToken,
) {
    let Some(run) = streams.get(&run_id) else {
        return;
    };
    let mut eof_sent = false;
    loop {
        let (taken, stuck) = {
            let mut waiting = run.waiting.lock().unwrap_or_else(|p| p.into_inner());
            let mut taken = 0;
            let mut stuck = false;
            while !waiting.bytes.is_empty() {
                let n = waiting.bytes.len().min(INPUT_STEP);
                match run.sender.write(waiting.bytes[..n].to_vec()) {
                    Ok(()) => {}
                    Err(InputError::Full) => {
                        stuck = true;
                        break;
                    }
                    // Its input is closed (or it ended): nothing more can reach it; what
                    // waits is dropped and counted as taken, so the gateway's bound frees.
                    Err(InputError::Closed | InputError::TooLarge) => {}
                }
                waiting.bytes.drain(..n);
                taken += n;
            }
            if waiting.bytes.is_empty() && waiting.eof && !eof_sent {
                let _ = run.sender.close();
                eof_sent = true;
            }
            (taken, stuck)
        };
        if taken > 0 {
            outbox.post(Msg::ExecInputTaken {
                run_id: run_id.clone(),
                bytes: taken as u64,
            });
        }
        tokio::select! {
            () = done.cancelled() => return,
            () = run.wake.notified() => {}
            () = tokio::time::sleep(INPUT_RETRY), if stuck => {}
        }
    }
}

/// A streamed run's output buffer (its runner writes to it).
pub(crate) fn output_buffer() -> LiveOutput {
    LiveOutput::new(OUTPUT_BUFFER)
}

/// Send what run `run_id` writes to `live` as `exec.output` frames, until `done` — and
/// then everything written before it, so that the run's result follows its last output.
pub(crate) async fn forward_output(
    live: LiveOutput,
    run_id: String,
    outbox: Outbox,
    done: CancellationToken,
) {
    let mut cursor = 0u64;
    loop {
        let finished = tokio::select! {
            biased;
            () = live.more_than(cursor) => false,
            () = done.cancelled() => true,
        };
        loop {
            let (from, bytes) = live.bytes_since(cursor, MAX_OUTPUT_CHUNK);
            if bytes.is_empty() {
                break;
            }
            cursor = from + bytes.len() as u64;
            let frame = Msg::ExecOutput {
                run_id: run_id.clone(),
                data: BASE64.encode(&bytes),
            };
            if outbox.send(frame).await.is_err() {
                return;
            }
        }
        if finished || done.is_cancelled() {
            return;
        }
        // One frame per interval at most: what comes meanwhile goes in the next.
        tokio::time::sleep(OUTPUT_INTERVAL).await;
    }
}
