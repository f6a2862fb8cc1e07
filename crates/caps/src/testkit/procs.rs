//! Probes of real processes for end-to-end tests, read from `/proc` through the local
//! provider.

use std::path::Path;
use std::time::Duration;

use crate::{Fs, LocalFs};

fn proc_fs() -> LocalFs {
    // "/" is absolute, so this cannot fail.
    LocalFs::new("/").unwrap_or_else(|e| panic!("testkit: {e}"))
}

/// True if `pid` exists and is not a zombie.
pub fn process_alive(pid: i32) -> bool {
    match proc_fs().read_to_string(Path::new(&format!("/proc/{pid}/stat"))) {
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

/// Wait (up to ~5 s) for a pid file to be written and parse it.
pub fn read_pid(path: &Path) -> i32 {
    for _ in 0..250 {
        if let Some(pid) = proc_fs()
            .read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("testkit: pid file {} never written", path.display());
}

/// Live processes whose command line (arguments joined by spaces) is `cmdline`.
pub fn pids_with_cmdline(cmdline: &str) -> Vec<i32> {
    pids_whose_cmdline(|line| line.trim() == cmdline)
}

/// Live processes whose command line (arguments joined by spaces) contains every one of
/// `words`.
pub fn pids_with_cmdline_words(words: &[&str]) -> Vec<i32> {
    pids_whose_cmdline(|line| words.iter().all(|w| line.contains(w)))
}

fn pids_whose_cmdline(matches: impl Fn(&str) -> bool) -> Vec<i32> {
    let fs = proc_fs();
    let Ok(entries) = fs.list(Path::new("/proc")) else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|e| e.name.to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            fs.read(Path::new(&format!("/proc/{pid}/cmdline")))
                .is_ok_and(|c| matches(&String::from_utf8_lossy(&c).replace('\0', " ")))
        })
        .filter(|pid| process_alive(*pid))
        .collect()
}
