//! The host's own environment, read once here (the composition root) and passed on as
//! values. Commands never inherit it wholesale: only the names below are forwarded.

use std::collections::BTreeMap;

/// Variables forwarded from Warden's own environment to commands. Nothing that changes
/// how programs load or behave (LD_*, BASH_ENV, PYTHON*, ...) is on this list.
const FORWARDED: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "TERM", "TZ", "SHELL",
];

/// Fallback search path when Warden's own PATH is unset.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The environment a command starts with: the forwarded names and `LC_*`.
pub fn forwarded_environment() -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| FORWARDED.contains(&k.as_str()) || k.starts_with("LC_"))
        .collect();
    env.entry("PATH".into())
        .or_insert_with(|| DEFAULT_PATH.into());
    env
}
