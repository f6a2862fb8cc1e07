//! What this machine can do for sandboxing (`warden doctor`), each check run for real:
//! bubblewrap present and trusted, user namespaces, a fresh `/proc`, seccomp, the Landlock
//! ABI, the write watch, a container engine.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Serialize;

use crate::SandboxError;
use crate::namespace::find_bwrap;

/// One check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What was checked.
    pub name: String,
    /// Whether it works.
    pub ok: bool,
    /// What was found (version, error, ABI...).
    pub detail: String,
}

/// Every check, and what they mean for the Linux backend.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The checks, in order.
    pub checks: Vec<Check>,
    /// `None` if the bubblewrap backend can run; otherwise why not.
    pub bwrap_unavailable: Option<String>,
    /// The Landlock ABI (0: none).
    pub landlock_abi: i64,
}

/// What bubblewrap said when a trial run failed (its error output, or why it could not
/// start).
#[derive(Clone, Debug)]
struct Complaint(String);

impl std::fmt::Display for Complaint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn check(name: &str, ok: bool, detail: impl Into<String>) -> Check {
    Check {
        name: name.into(),
        ok,
        detail: detail.into(),
    }
}

/// Run `bwrap` with `args` and `/bin/true` inside; `Err` carries bubblewrap's complaint
/// (text only: the probes below put it into their own diagnoses and checks).
fn try_bwrap(bwrap: &Path, args: &[&str]) -> Result<(), Complaint> {
    let out = Command::new(bwrap)
        .args(args)
        .args(["--", "/bin/true"])
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Complaint(format!("cannot run {}: {e}", bwrap.display())))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Complaint(
            String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        ))
    }
}

/// Whether bubblewrap can build the namespaces the sandbox uses; `Err` is the diagnosis.
pub fn namespaces_work(bwrap: &Path) -> Result<(), SandboxError> {
    try_bwrap(bwrap, &["--unshare-user", "--unshare-pid", "--unshare-net", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"])
        .map_err(|e| SandboxError::Probe(format!("bubblewrap cannot create the sandbox's namespaces here ({e}); user namespaces may be disabled")))
}

/// Whether Warden's own builder (`crate::builder`, in the `helper` binary) can build the
/// sandbox's namespaces; `Err` is the diagnosis.
pub fn builder_works(helper: &Path) -> Result<(), SandboxError> {
    let h = helper.to_string_lossy();
    let out = Command::new(helper)
        .args([
            crate::builder::SUBCOMMAND,
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-net",
            "--ro-bind",
            "/",
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--",
            &h,
            crate::helper::SUBCOMMAND,
            "--landlock",
            "off",
            "--",
            "/bin/true",
        ])
        .env_clear()
        .stdin(Stdio::null())
        .output()
        .map_err(|e| SandboxError::Probe(format!("cannot run {h}: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(SandboxError::Probe(format!(
            "Warden's namespace builder cannot create the sandbox's namespaces here ({}); user namespaces may be disabled",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Probe the bubblewrap backend using bubblewrap from `bwrap_dirs`.
pub fn probe(bwrap_dirs: &[PathBuf]) -> Report {
    let mut checks = Vec::new();
    let mut unavailable = None;
    match find_bwrap(bwrap_dirs) {
        Err(e) => {
            checks.push(check("bubblewrap", false, e.0.clone()));
            unavailable = Some(e.0);
        }
        Ok(bwrap) => {
            let version = Command::new(&bwrap)
                .arg("--version")
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                .unwrap_or_default();
            checks.push(check(
                "bubblewrap",
                true,
                format!("{} ({version})", bwrap.display()),
            ));
            let userns = try_bwrap(&bwrap, &["--unshare-user", "--ro-bind", "/", "/"]);
            checks.push(check(
                "user namespaces",
                userns.is_ok(),
                userns
                    .clone()
                    .err()
                    .map_or_else(|| "available".into(), |e| e.0),
            ));
            let proc_ok = try_bwrap(
                &bwrap,
                &[
                    "--unshare-user",
                    "--unshare-pid",
                    "--ro-bind",
                    "/",
                    "/",
                    "--proc",
                    "/proc",
                ],
            );
            checks.push(check(
                "fresh /proc",
                proc_ok.is_ok(),
                proc_ok
                    .clone()
                    .err()
                    .map_or_else(|| "mountable".into(), |e| e.0),
            ));
            if let Err(e) = userns.and(proc_ok) {
                unavailable = Some(format!("bubblewrap cannot create its namespaces here: {e}"));
            }
        }
    }
    let seccomp = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Seccomp:"))
                .map(str::to_owned)
        });
    checks.push(check(
        "seccomp",
        seccomp.is_some(),
        if seccomp.is_some() {
            "supported (filters are installed per command)".to_string()
        } else {
            "not supported by this kernel".to_string()
        },
    ));
    let abi = crate::landlock::abi();
    checks.push(check(
        "landlock",
        abi >= 1,
        if abi >= 1 {
            format!("ABI {abi}")
        } else {
            "not supported (commands still run, without this second layer)".into()
        },
    ));
    let watch = crate::watch::available();
    checks.push(check(
        "write watch",
        watch.is_ok(),
        match watch {
            Ok(()) => {
                "seccomp user notification: approval mode learns refused writes from the kernel"
                    .to_string()
            }
            Err(why) => format!("{why}; approval mode falls back to the EROFS message text"),
        },
    ));
    Report {
        checks,
        bwrap_unavailable: unavailable,
        landlock_abi: abi,
    }
}
