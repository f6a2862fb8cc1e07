//! Standard input written while a command runs ([`crate::Stdin::Stream`]): whoever
//! started the run holds an [`InputSender`]; the provider feeds what it sends to the
//! command's standard input, in order, and closes it when asked or when the sender is
//! gone. The channel holds a bounded number of chunks and bytes: a command that does not
//! read its input makes the sender's next write fail ([`InputError::Full`]) instead of
//! growing Warden's memory, whatever size of write a client may send.
//!
//! The same sender also carries the run's controls — a signal, a terminal's new size —
//! on a channel of their own, so that a command which stopped reading its input can
//! still be interrupted.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

/// Chunks that may wait for a command to read them.
pub const INPUT_QUEUE_CHUNKS: usize = 64;

/// Bytes that may wait for a command to read them (also the largest single write).
pub const INPUT_QUEUE_BYTES: usize = 1024 * 1024;

/// Controls that may wait for the supervisor to act on them (it does at once).
const CONTROL_QUEUE: usize = 16;

/// What a run's driver asks of the run besides input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Control {
    /// Send this signal to the run's processes.
    Signal(i32),
    /// Resize the run's terminal.
    Resize(crate::TerminalSize),
}

/// What the sender sends.
#[derive(Debug)]
enum Input {
    Bytes(Vec<u8>),
    Close,
}

/// The sending end: write to a running command's standard input, signal it, resize its
/// terminal.
#[derive(Clone, Debug)]
pub struct InputSender {
    input: mpsc::Sender<Input>,
    control: mpsc::Sender<Control>,
    /// Bytes queued and not yet taken by the provider.
    queued: Arc<AtomicUsize>,
}

/// Why input could not be sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// The command has not read what was sent before ([`INPUT_QUEUE_CHUNKS`] chunks or
    /// [`INPUT_QUEUE_BYTES`] bytes wait).
    #[error(
        "the command is not reading its standard input fast enough (earlier writes are still waiting: at most {INPUT_QUEUE_CHUNKS} writes and {INPUT_QUEUE_BYTES} bytes may); nothing was sent"
    )]
    Full,
    /// One write larger than [`INPUT_QUEUE_BYTES`].
    #[error("one write sends at most {INPUT_QUEUE_BYTES} bytes; nothing was sent (split it)")]
    TooLarge,
    /// Its standard input is closed: it was closed, the command ended, or the host that
    /// runs it takes no input.
    #[error(
        "the command's standard input is closed (closed earlier, the command ended, or the host that runs it takes no input); nothing was sent"
    )]
    Closed,
}

impl InputSender {
    /// Queue `bytes` for the command's standard input.
    pub fn write(&self, bytes: Vec<u8>) -> Result<(), InputError> {
        let len = bytes.len();
        if len > INPUT_QUEUE_BYTES {
            return Err(InputError::TooLarge);
        }
        let before = self.queued.fetch_add(len, Ordering::AcqRel);
        if before + len > INPUT_QUEUE_BYTES {
            self.queued.fetch_sub(len, Ordering::AcqRel);
            return Err(InputError::Full);
        }
        self.send(Input::Bytes(bytes)).inspect_err(|_| {
            self.queued.fetch_sub(len, Ordering::AcqRel);
        })
    }

    /// Close the command's standard input (end-of-file) once what was queued is written.
    pub fn close(&self) -> Result<(), InputError> {
        self.send(Input::Close)
    }

    /// Send `signal` to the run's processes (those Warden started and their
    /// descendants; see the provider for how far that reaches).
    pub fn signal(&self, signal: i32) -> Result<(), InputError> {
        self.control(Control::Signal(signal))
    }

    /// Resize the run's terminal (nothing happens for a run without one).
    pub fn resize(&self, size: crate::TerminalSize) -> Result<(), InputError> {
        self.control(Control::Resize(size))
    }

    fn send(&self, input: Input) -> Result<(), InputError> {
        self.input.try_send(input).map_err(refused)
    }

    fn control(&self, control: Control) -> Result<(), InputError> {
        self.control.try_send(control).map_err(refused)
    }
}

fn refused<T>(e: mpsc::error::TrySendError<T>) -> InputError {
    match e {
        mpsc::error::TrySendError::Full(_) => InputError::Full,
        mpsc::error::TrySendError::Closed(_) => InputError::Closed,
    }
}

/// The receiving end, handed to a shell as [`crate::Stdin::Stream`]; the provider takes
/// it once.
#[derive(Clone, Debug)]
pub struct InputStream(Arc<Mutex<Option<InputChunks>>>);

impl PartialEq for InputStream {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for InputStream {}

/// A new channel: the sender for whoever drives the run, the stream for its options.
pub fn input_channel() -> (InputSender, InputStream) {
    let (input, input_rx) = mpsc::channel(INPUT_QUEUE_CHUNKS);
    let (control, control_rx) = mpsc::channel(CONTROL_QUEUE);
    let queued = Arc::new(AtomicUsize::new(0));
    let chunks = InputChunks {
        input: input_rx,
        control: Some(control_rx),
        queued: Arc::clone(&queued),
    };
    (
        InputSender {
            input,
            control,
            queued,
        },
        InputStream(Arc::new(Mutex::new(Some(chunks)))),
    )
}

impl InputStream {
    /// The chunks to write, in order, until the input is closed; `None` once taken (a
    /// stream feeds one run).
    pub(crate) fn take(&self) -> Option<InputChunks> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

impl InputStream {
    /// Take the stream to carry it to a run elsewhere (a node over the Bridge); `None`
    /// once taken.
    pub fn relay(&self) -> Option<InputRelay> {
        self.take().map(|chunks| InputRelay {
            credit: InputCredit(Arc::clone(&chunks.queued)),
            input: Some(chunks.input),
            control: chunks.control,
        })
    }
}

/// One thing an [`InputRelay`] carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Relayed {
    /// Bytes for the command's standard input (counted against the sender's bound until
    /// [`InputCredit::delivered`]).
    Bytes(Vec<u8>),
    /// End of input, after the bytes before it (also when the sender is gone).
    Close,
    /// A signal for the run's processes.
    Signal(i32),
    /// The run's terminal's new size.
    Resize(crate::TerminalSize),
}

/// An [`InputStream`] carried to a run elsewhere: what its sender sends, in order, with
/// controls as soon as they come. Bytes stay counted against the sender's bound until the
/// far side says it took them ([`InputCredit::delivered`]), so a far command that does not
/// read its input pushes back on its writer exactly as a local one does.
#[derive(Debug)]
pub struct InputRelay {
    input: Option<mpsc::Receiver<Input>>,
    control: Option<mpsc::Receiver<Control>>,
    credit: InputCredit,
}

/// Where a relay's far side says how many bytes it took.
#[derive(Clone, Debug)]
pub struct InputCredit(Arc<AtomicUsize>);

impl InputCredit {
    /// The far side took `bytes` of what was relayed: that much may be sent again. More
    /// than is outstanding counts as what is outstanding (a peer cannot lift the bound).
    pub fn delivered(&self, bytes: usize) {
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
                Some(queued.saturating_sub(bytes))
            });
    }
}

impl InputRelay {
    /// Where the far side's acknowledgements go.
    pub fn credit(&self) -> InputCredit {
        self.credit.clone()
    }

    /// The next thing to carry; `None` once the input has ended and no control can come.
    pub async fn next(&mut self) -> Option<Relayed> {
        loop {
            let (input, control) = (&mut self.input, &mut self.control);
            if input.is_none() && control.is_none() {
                return None;
            }
            tokio::select! {
                biased;
                c = async { control.as_mut()?.recv().await }, if control.is_some() => match c {
                    Some(Control::Signal(signal)) => return Some(Relayed::Signal(signal)),
                    Some(Control::Resize(size)) => return Some(Relayed::Resize(size)),
                    None => self.control = None,
                },
                i = async { input.as_mut()?.recv().await }, if input.is_some() => match i {
                    Some(Input::Bytes(bytes)) => return Some(Relayed::Bytes(bytes)),
                    Some(Input::Close) | None => {
                        self.input = None;
                        return Some(Relayed::Close);
                    }
                },
            }
        }
    }
}

/// What a provider reads from an [`InputStream`].
#[derive(Debug)]
pub(crate) struct InputChunks {
    input: mpsc::Receiver<Input>,
    control: Option<mpsc::Receiver<Control>>,
    queued: Arc<AtomicUsize>,
}

impl InputChunks {
    /// The next chunk, or `None` when the input is to be closed.
    pub(crate) async fn next(&mut self) -> Option<Vec<u8>> {
        match self.input.recv().await {
            Some(Input::Bytes(bytes)) => {
                self.queued.fetch_sub(bytes.len(), Ordering::AcqRel);
                Some(bytes)
            }
            Some(Input::Close) | None => None,
        }
    }

    /// The controls, taken once by whoever acts on them (the supervisor), apart from
    /// the input, which may wait on a command that does not read.
    pub(crate) fn take_controls(&mut self) -> Option<Controls> {
        self.control.take().map(Controls)
    }
}

/// A run's controls as the supervisor receives them.
#[derive(Debug)]
pub(crate) struct Controls(mpsc::Receiver<Control>);

impl Controls {
    /// The next control; `None` once every sender is gone.
    pub(crate) async fn next(&mut self) -> Option<Control> {
        self.0.recv().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_relay_carries_everything_in_order_and_holds_the_bound_until_delivered() {
        let (sender, stream) = input_channel();
        let mut relay = stream.relay().expect("taken once");
        assert!(stream.relay().is_none());
        let credit = relay.credit();
        sender.write(vec![b'x'; INPUT_QUEUE_BYTES / 2]).unwrap();
        sender.signal(2).unwrap();
        assert_eq!(
            relay.next().await,
            Some(Relayed::Signal(2)),
            "controls first"
        );
        assert_eq!(
            relay.next().await,
            Some(Relayed::Bytes(vec![b'x'; INPUT_QUEUE_BYTES / 2]))
        );
        // Relayed but not yet taken on the far side: still counted.
        sender.write(vec![b'y'; INPUT_QUEUE_BYTES / 2]).unwrap();
        assert_eq!(sender.write(vec![b'z']), Err(InputError::Full));
        credit.delivered(INPUT_QUEUE_BYTES / 2);
        sender.write(vec![b'z']).unwrap();
        // A peer that claims more than was sent cannot lift the bound past empty.
        credit.delivered(usize::MAX);
        sender.close().unwrap();
        assert!(matches!(relay.next().await, Some(Relayed::Bytes(b)) if b[0] == b'y'));
        assert_eq!(relay.next().await, Some(Relayed::Bytes(vec![b'z'])));
        assert_eq!(relay.next().await, Some(Relayed::Close));
        drop(sender);
        assert_eq!(relay.next().await, None);
    }

    #[tokio::test]
    async fn chunks_arrive_in_order_then_close() {
        let (sender, stream) = input_channel();
        sender.write(b"a".to_vec()).unwrap();
        sender.write(b"b".to_vec()).unwrap();
        sender.close().unwrap();
        let mut chunks = stream.take().expect("taken once");
        assert!(stream.take().is_none(), "a stream feeds one run");
        assert_eq!(chunks.next().await, Some(b"a".to_vec()));
        assert_eq!(chunks.next().await, Some(b"b".to_vec()));
        assert_eq!(chunks.next().await, None);
    }

    #[tokio::test]
    async fn queued_bytes_are_bounded_whatever_the_size_of_each_write() {
        let (sender, stream) = input_channel();
        assert_eq!(
            sender.write(vec![0; INPUT_QUEUE_BYTES + 1]),
            Err(InputError::TooLarge)
        );
        sender.write(vec![0; INPUT_QUEUE_BYTES - 10]).unwrap();
        assert_eq!(sender.write(vec![0; 11]), Err(InputError::Full));
        sender.write(vec![0; 10]).unwrap();
        // Taken by the provider: room again.
        let mut chunks = stream.take().unwrap();
        assert_eq!(
            chunks.next().await.map(|b| b.len()),
            Some(INPUT_QUEUE_BYTES - 10)
        );
        sender.write(vec![0; INPUT_QUEUE_BYTES - 10]).unwrap();
    }

    #[test]
    fn a_command_that_does_not_read_fills_the_queue_and_the_sender_hears_it() {
        let (sender, stream) = input_channel();
        for _ in 0..INPUT_QUEUE_CHUNKS {
            sender.write(vec![0; 10]).unwrap();
        }
        assert_eq!(sender.write(vec![0]), Err(InputError::Full));
        // Controls do not wait behind input a command does not read.
        sender.signal(2).unwrap();
        let mut chunks = stream.take().unwrap();
        let mut controls = chunks.take_controls().unwrap();
        assert!(chunks.take_controls().is_none());
        assert_eq!(
            controls.0.try_recv().ok(),
            Some(Control::Signal(2)),
            "the signal arrived while the input queue was full"
        );
        drop((stream, chunks, controls));
        assert_eq!(sender.write(vec![0]), Err(InputError::Closed));
    }
}
