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

/// A private WARDEN_HOME (0700, as Warden creates its own).
pub fn warden_home() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    dir
}

/// Write `config.toml` and a 0600 `exec-approvals.json` into `home`.
pub fn configure(home: &Path, config: &str, approvals: &str) {
    std::fs::write(home.join("config.toml"), config).unwrap();
    std::fs::write(home.join("exec-approvals.json"), approvals).unwrap();
    std::fs::set_permissions(
        home.join("exec-approvals.json"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
}

/// A home where host=gateway runs everything (security=full, ask=off): for tests of the
/// execution machinery rather than of policy.
pub fn open_gateway_home() -> tempfile::TempDir {
    let home = warden_home();
    configure(
        home.path(),
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"full\"\nask = \"off\"\n",
        r#"{"version":1,"defaults":{"security":"full","ask":"off","askFallback":"deny"}}"#,
    );
    home
}

/// `warden` with WARDEN_HOME set.
pub fn warden_in(home: &Path) -> Command {
    let mut cmd = warden();
    cmd.env("WARDEN_HOME", home);
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
