//! Helpers shared by the end-to-end tests.
// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// The `warden` binary under test, with a clean, predictable environment.
pub fn warden() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_warden"));
    cmd.env_remove("WARDEN_HOME").env("WARDEN_LOG", "warn");
    cmd
}

/// True if `pid` exists and is not a zombie.
pub fn process_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat[stat.rfind(')').unwrap_or(0) + 2..]
                .chars()
                .next()
                .unwrap_or('X');
            state != 'Z' && state != 'X'
        }
        Err(_) => false,
    }
}

/// Wait up to ~5 s for `pid` to be gone.
pub fn wait_gone(pid: i32) -> bool {
    for _ in 0..250 {
        if !process_alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Wait for a pid file to be written and parse it.
pub fn read_pid(path: &Path) -> i32 {
    for _ in 0..250 {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("pid file {} never written", path.display());
}
