//! The terminal approver's input. On a terminal an answer is one key press: stdin goes
//! into non-canonical mode without echo (signals stay on, so Ctrl-C still stops the
//! approver) and is restored when the approver ends. From a pipe or a file — scripts and
//! tests — answers are whole lines, as before.

use std::io::IsTerminal as _;

use nix::sys::termios::{self, LocalFlags, SetArg, SpecialCharacterIndices, Termios};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader, Stdin};

/// End of transmission (Ctrl-D): in non-canonical mode it arrives as a byte, and means
/// what it means on a line — nobody will answer here any more.
const EOT: u8 = 0x04;

/// Restores the terminal's settings when dropped.
struct RawMode {
    saved: Termios,
}

impl RawMode {
    /// Switch stdin to single key presses, without echo; `None` if it cannot be done.
    fn enter() -> Option<RawMode> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(&stdin).ok()?;
        let mut raw = saved.clone();
        raw.local_flags
            .remove(LocalFlags::ICANON | LocalFlags::ECHO);
        // Every key is delivered at once, one read per key.
        raw.control_chars[SpecialCharacterIndices::VMIN as usize] = 1;
        raw.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
        termios::tcsetattr(&stdin, SetArg::TCSANOW, &raw).ok()?;
        Some(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin(), SetArg::TCSANOW, &self.saved);
    }
}

/// Answers typed by the human: keys on a terminal, lines otherwise.
pub struct Input {
    reader: BufReader<Stdin>,
    raw: Option<RawMode>,
}

impl Input {
    /// Read from stdin, in key mode if it is a terminal.
    pub fn open() -> Input {
        let raw = if std::io::stdin().is_terminal() {
            RawMode::enter()
        } else {
            None
        };
        Input {
            reader: BufReader::new(tokio::io::stdin()),
            raw,
        }
    }

    /// True when one key press is an answer (no Enter needed).
    pub fn single_key(&self) -> bool {
        self.raw.is_some()
    }

    /// The next key press (as text), or the next line; `None` when input has ended
    /// (end of file, or Ctrl-D on a terminal).
    pub async fn next(&mut self) -> std::io::Result<Option<String>> {
        if self.raw.is_none() {
            let mut line = String::new();
            return Ok(match self.reader.read_line(&mut line).await? {
                0 => None,
                _ => Some(line),
            });
        }
        loop {
            let Some(byte) = self.byte().await? else {
                return Ok(None);
            };
            match byte {
                EOT => return Ok(None),
                ESC => self.skip_escape_sequence().await?,
                // Only lower-case letters and the digits 1-9 (an allow-always scope) are
                // answers: an arrow or function key sends upper-case letters and digits
                // inside its escape sequence (Up is `ESC [ A`, Ctrl-Up `ESC [ 1 ; 5 A`),
                // which is skipped whole, and no such key may ever pass for "a" or "1".
                b'a'..=b'z' | b'1'..=b'9' => return Ok(Some(char::from(byte).to_string())),
                _ => continue,
            }
        }
    }

    async fn byte(&mut self) -> std::io::Result<Option<u8>> {
        match self.reader.read_u8().await {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Discard the rest of an escape sequence: `ESC [ params final` (CSI, final byte in
    /// `@`..`~`) or `ESC O x` (SS3). After a lone Esc the next key is discarded too —
    /// an answer lost, never one invented.
    async fn skip_escape_sequence(&mut self) -> std::io::Result<()> {
        match self.byte().await? {
            Some(b'[') => {
                while let Some(b) = self.byte().await? {
                    if (0x40..=0x7e).contains(&b) {
                        break;
                    }
                }
            }
            Some(b'O') => {
                self.byte().await?;
            }
            _ => {}
        }
        Ok(())
    }
}

/// The escape key, which also starts every cursor and function key's sequence.
const ESC: u8 = 0x1b;
