//! A program run at a real terminal (a pseudo-terminal pair): what a person at a
//! terminal sees and types, for tests of prompts that appear only at a terminal.
// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)]

use std::io::{Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A child whose stdin, stdout and stderr are one terminal, and the other end of it.
pub struct Terminal {
    child: Child,
    master: std::fs::File,
    screen: mpsc::Receiver<String>,
    /// Everything shown so far.
    pub shown: String,
    /// Where [`Terminal::wait_for`] continues from.
    read_to: usize,
}

impl Terminal {
    /// Start `command` at a new terminal.
    pub fn start(mut command: Command) -> Terminal {
        let pty = nix::pty::openpty(None, None).unwrap();
        let slave = || Stdio::from(pty.slave.try_clone().unwrap());
        let child = command
            .stdin(slave())
            .stdout(slave())
            .stderr(slave())
            .spawn()
            .unwrap();
        drop(pty.slave);
        let master = std::fs::File::from(pty.master);
        let mut reader = master.try_clone().unwrap();
        let (tx, screen) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // The read fails (EIO) once the last process holding the terminal exits.
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0
                    || tx
                        .send(String::from_utf8_lossy(&buf[..n]).into_owned())
                        .is_err()
                {
                    break;
                }
            }
        });
        Terminal {
            child,
            master,
            screen,
            shown: String::new(),
            read_to: 0,
        }
    }

    /// Wait (up to 60 s) until `needle` is shown after what earlier waits consumed;
    /// the text shown up to and including it.
    pub fn wait_for(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(at) = self.shown[self.read_to..].find(needle) {
                let end = self.read_to + at + needle.len();
                let seen = self.shown[self.read_to..end].to_owned();
                self.read_to = end;
                return seen;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.screen.recv_timeout(left) {
                Ok(chunk) => self.shown.push_str(&chunk),
                Err(_) => panic!(
                    "{needle:?} was not shown; the terminal shows:\n{}",
                    self.shown
                ),
            }
        }
    }

    /// Type `text`.
    pub fn type_text(&mut self, text: &str) {
        self.master.write_all(text.as_bytes()).unwrap();
    }

    /// Wait (up to 120 s) for the program to end; its status and everything shown.
    pub fn finish(mut self) -> (ExitStatus, String) {
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "still running after 120 s; the terminal shows:\n{}",
                self.shown
            );
            while let Ok(chunk) = self.screen.try_recv() {
                self.shown.push_str(&chunk);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // What was written before the exit.
        while let Ok(chunk) = self.screen.recv_timeout(Duration::from_millis(300)) {
            self.shown.push_str(&chunk);
        }
        (status, std::mem::take(&mut self.shown))
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
