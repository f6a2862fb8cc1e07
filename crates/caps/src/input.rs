//! Standard input written while a command runs ([`crate::Stdin::Stream`]): whoever
//! started the run holds an [`InputSender`]; the provider feeds what it sends to the
//! command's standard input, in order, and closes it when asked or when the sender is
//! gone. The channel holds a bounded number of chunks: a command that does not read its
//! input makes the sender's next write fail ([`InputError::Full`]) instead of growing
//! Warden's memory.

use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

/// Chunks that may wait for a command to read them.
pub const INPUT_QUEUE_CHUNKS: usize = 64;

/// What the sender sends.
#[derive(Debug)]
enum Input {
    Bytes(Vec<u8>),
    Close,
}

/// The sending end: write to a running command's standard input.
#[derive(Clone, Debug)]
pub struct InputSender(mpsc::Sender<Input>);

/// Why input could not be sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// The command has not read what was sent before ([`INPUT_QUEUE_CHUNKS`] chunks wait).
    #[error(
        "the command is not reading its standard input ({INPUT_QUEUE_CHUNKS} earlier writes are still waiting); nothing was sent"
    )]
    Full,
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
        self.send(Input::Bytes(bytes))
    }

    /// Close the command's standard input (end-of-file) once what was queued is written.
    pub fn close(&self) -> Result<(), InputError> {
        self.send(Input::Close)
    }

    fn send(&self, input: Input) -> Result<(), InputError> {
        self.0.try_send(input).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => InputError::Full,
            mpsc::error::TrySendError::Closed(_) => InputError::Closed,
        })
    }
}

/// The receiving end, handed to a shell as [`crate::Stdin::Stream`]; the provider takes
/// it once.
#[derive(Clone, Debug)]
pub struct InputStream(Arc<Mutex<Option<mpsc::Receiver<Input>>>>);

impl PartialEq for InputStream {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for InputStream {}

/// A new channel: the sender for whoever drives the run, the stream for its options.
pub fn input_channel() -> (InputSender, InputStream) {
    let (tx, rx) = mpsc::channel(INPUT_QUEUE_CHUNKS);
    (InputSender(tx), InputStream(Arc::new(Mutex::new(Some(rx)))))
}

impl InputStream {
    /// The chunks to write, in order, until the input is closed; `None` once taken (a
    /// stream feeds one run).
    pub(crate) fn take(&self) -> Option<InputChunks> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .map(InputChunks)
    }
}

/// What a provider reads from an [`InputStream`].
#[derive(Debug)]
pub(crate) struct InputChunks(mpsc::Receiver<Input>);

impl InputChunks {
    /// The next chunk, or `None` when the input is to be closed.
    pub(crate) async fn next(&mut self) -> Option<Vec<u8>> {
        match self.0.recv().await {
            Some(Input::Bytes(bytes)) => Some(bytes),
            Some(Input::Close) | None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_command_that_does_not_read_fills_the_queue_and_the_sender_hears_it() {
        let (sender, stream) = input_channel();
        for _ in 0..INPUT_QUEUE_CHUNKS {
            sender.write(vec![0; 10]).unwrap();
        }
        assert_eq!(sender.write(vec![0]), Err(InputError::Full));
        drop(stream);
        assert_eq!(sender.write(vec![0]), Err(InputError::Closed));
    }
}
