//! What several benchmarks set up the same way: a private Warden state directory whose
//! approvals file allowlists `/bin/true` for agent `bench`, the approvals store on it, and
//! the arguments that start a gateway.

use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A fresh private directory `warden-bench-<tag>-<pid>` in the temp dir, holding an
/// approvals file (0600) that allows `/bin/true` to agent `bench`, no asking.
pub fn true_allowed_home(tag: &str) -> anyhow::Result<PathBuf> {
    let home = std::env::temp_dir().join(format!("warden-bench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home)?;
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
    let true_path = std::fs::canonicalize("/bin/true")?;
    let approvals = serde_json::json!({
        "version": 1,
        "defaults": {"security": "allowlist", "ask": "off", "askFallback": "deny"},
        "agents": {"bench": {"allowlist": [{"pattern": true_path}]}}
    });
    let path = home.join("exec-approvals.json");
    std::fs::write(&path, serde_json::to_vec(&approvals)?)?;
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    Ok(home)
}

/// The approvals store of `home` (`exec-approvals.json` there, owned by this user).
pub fn store(fs: Arc<caps::LocalFs>, home: &Path) -> approvals::Store {
    approvals::Store::new(
        fs,
        approvals::StoreConfig {
            path: home.join("exec-approvals.json"),
            owner_uid: nix::unistd::geteuid().as_raw(),
            home: home.to_path_buf(),
            case: policy::CaseMode::Sensitive,
        },
    )
}

/// `warden` arguments that start a gateway on a free loopback port, without hosting the
/// web approver (its page and memory are not what the benchmarks measure); the workspace
/// follows.
pub const GATEWAY_RUN: [&str; 6] = [
    "gateway",
    "run",
    "--no-approver",
    "--listen",
    "127.0.0.1:0",
    "--workspace",
];
