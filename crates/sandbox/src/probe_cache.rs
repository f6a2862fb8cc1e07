//! The namespace probe, remembered. Before the first sandboxed run a Warden process asks
//! bubblewrap to build the sandbox's namespaces once (`probe::namespaces_work`), so that
//! a host without user namespaces gets a diagnosis instead of a cryptic failure. Doing
//! that on every `warden exec` costs a whole extra bubblewrap run; this module keeps a
//! *success* on disk under a key of everything that decides the answer:
//!
//! - the kernel (release, build and boot id: a reboot re-probes),
//! - every namespace setting the kernel exposes (`/proc/sys/user/max_*_namespaces`,
//!   Debian's `unprivileged_userns_clone`, AppArmor's userns restriction),
//! - the binary that builds them — bubblewrap, or the helper binary for Warden's own
//!   builder (path, device, inode, size, change and modification times),
//! - the user, and the probe's own flags.
//!
//! Any change re-probes. A remembered success never means running unconfined: if
//! namespaces stop working in a way the key misses, the run itself fails in the builder —
//! closed — with its message. bubblewrap's failures are never remembered; the own
//! builder's are (see [`builder_works_cached`]: its failure only ever means bubblewrap or
//! nothing).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use crate::SandboxError;

/// Bumped when the probe's flags change, so old entries stop matching.
const PROBE_VERSION: &str = "namespaces-v2";

/// The kernel files whose content is part of the key (missing ones count as absent).
const KERNEL_FACTS: &[&str] = &[
    "/proc/sys/kernel/osrelease",
    "/proc/sys/kernel/version",
    "/proc/sys/kernel/random/boot_id",
    "/proc/sys/user/max_user_namespaces",
    "/proc/sys/user/max_pid_namespaces",
    "/proc/sys/user/max_net_namespaces",
    "/proc/sys/user/max_ipc_namespaces",
    "/proc/sys/user/max_uts_namespaces",
    "/proc/sys/user/max_mnt_namespaces",
    "/proc/sys/kernel/unprivileged_userns_clone",
    "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
];

/// Everything the probe's answer depends on, as one line of text: `program` is what
/// builds the namespaces (bubblewrap, or the helper binary for Warden's own builder).
fn key(program: &Path) -> std::io::Result<String> {
    let meta = std::fs::metadata(program)?;
    let mut key = format!(
        "{PROBE_VERSION} uid={} builder={} dev={} ino={} size={} mtime={}.{} ctime={}.{}",
        nix::unistd::geteuid().as_raw(),
        program.display(),
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec()
    );
    // The first two are what uname(2) says (the same strings, from the same place):
    // one system call instead of two files opened and read, on every `warden exec`.
    let uname = rustix::system::uname();
    for fact in KERNEL_FACTS {
        let value = match *fact {
            "/proc/sys/kernel/osrelease" => uname.release().to_string_lossy().into_owned(),
            "/proc/sys/kernel/version" => uname.version().to_string_lossy().into_owned(),
            _ => read_fact(fact).unwrap_or_else(|| "-".into()),
        };
        key.push_str(&format!(" {fact}={}", value.trim()));
    }
    Ok(key)
}

/// A kernel setting's file (a line or two) read whole, without first asking its size,
/// which a `/proc/sys` file does not know; `None` when it cannot be read. A longer one
/// is read as any file is.
fn read_fact(path: &str) -> Option<String> {
    use rustix::fs::{Mode, OFlags};
    let file = rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).ok()?;
    let mut buf = [0u8; 256];
    let mut len = 0;
    loop {
        match rustix::io::read(&file, &mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return None,
        }
        if len == buf.len() {
            return std::fs::read_to_string(path).ok();
        }
    }
    String::from_utf8(buf[..len].to_vec()).ok()
}

/// Whether bubblewrap can build the sandbox's namespaces, answered from `cache` when it
/// holds a success under the current key, else by probing (and remembering a success).
/// `Err` is the diagnosis.
pub fn namespaces_work_cached(bwrap: &Path, cache: &Path) -> Result<(), SandboxError> {
    cached(bwrap, cache, crate::probe::namespaces_work)
}

/// The same for Warden's own builder in the `helper` binary (`crate::builder`), in a file
/// of its own next to `cache` (so that `auto`, which may ask both, keeps both answers).
/// Unlike bubblewrap's, a *failure* is remembered too, with its diagnosis: a builder that
/// cannot run means bubblewrap builds the sandbox (`auto`) or nothing runs (`warden`) —
/// never less confinement — and without it every `warden exec` on such a host would pay
/// for a failing probe. The key (kernel, boot, namespace settings, the binary) decides
/// when it is asked again.
pub fn builder_works_cached(
    helper: &caps::process::OpenedProgram,
    cache: &Path,
) -> Result<(), SandboxError> {
    // Keyed by the file where it was found (its exec path names this process's
    // descriptor, different in every process), run through the opened file.
    let (found, helper) = (helper.real_path(), helper.exec_path());
    let name = cache
        .file_name()
        .map(|n| format!("{}-builder", n.to_string_lossy()))
        .unwrap_or_else(|| "probe-builder".into());
    let cache = cache.with_file_name(name);
    let Ok(key) = key(found) else {
        return crate::probe::builder_works(helper);
    };
    let failed = format!("failed {key}\n");
    match std::fs::read_to_string(&cache) {
        Ok(stored) if stored == key => return Ok(()),
        Ok(stored) if stored.starts_with(&failed) => {
            return Err(SandboxError::Probe(stored[failed.len()..].to_owned()));
        }
        _ => {}
    }
    let result = crate::probe::builder_works(helper);
    let entry = match &result {
        Ok(()) => key,
        Err(why) => format!("{failed}{why}"),
    };
    if let Err(e) = remember(&cache, &entry) {
        tracing::debug!(
            "cannot remember the builder probe in {}: {e}",
            cache.display()
        );
    }
    result
}

/// `probe(program)`, or a success remembered in `cache` under `program`'s key.
fn cached(
    program: &Path,
    cache: &Path,
    probe: fn(&Path) -> Result<(), SandboxError>,
) -> Result<(), SandboxError> {
    let Ok(key) = key(program) else {
        return probe(program);
    };
    if std::fs::read_to_string(cache).is_ok_and(|stored| stored == key) {
        return Ok(());
    }
    probe(program)?;
    if let Err(e) = remember(cache, &key) {
        // Only speed is lost: the next call probes again.
        tracing::debug!(
            "cannot remember the namespace probe in {}: {e}",
            cache.display()
        );
    }
    Ok(())
}

/// Write `key` to `cache` atomically (0600, in a 0700 directory created if missing).
pub(crate) fn remember(cache: &Path, key: &str) -> std::io::Result<()> {
    let dir = cache
        .parent()
        .ok_or_else(|| std::io::Error::other("the cache path has no directory"))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    if std::fs::symlink_metadata(dir)?.permissions().mode() & 0o077 != 0 {
        return Err(std::io::Error::other("the cache directory is not private"));
    }
    let tmp = dir.join(format!(".probe.{}.tmp", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(key.as_bytes())?;
    drop(file);
    std::fs::rename(&tmp, cache).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uname_says_what_the_kernel_files_say_and_facts_are_read_whole() {
        let uname = rustix::system::uname();
        for (file, said) in [
            ("/proc/sys/kernel/osrelease", uname.release()),
            ("/proc/sys/kernel/version", uname.version()),
        ] {
            let read = std::fs::read_to_string(file).unwrap();
            assert_eq!(read.trim(), said.to_string_lossy().trim(), "{file}");
            assert_eq!(read_fact(file).as_deref(), Some(read.as_str()), "{file}");
        }
        assert_eq!(read_fact("/proc/sys/kernel/no-such-setting"), None);
        // Longer than the first read's buffer: read as any file is, whole.
        let dir = tempfile::tempdir().unwrap();
        let long = dir.path().join("long");
        let text = "x".repeat(1000) + "\n";
        std::fs::write(&long, &text).unwrap();
        assert_eq!(read_fact(long.to_str().unwrap()), Some(text));
        let exact = dir.path().join("exact");
        std::fs::write(&exact, "y".repeat(256)).unwrap();
        assert_eq!(read_fact(exact.to_str().unwrap()), Some("y".repeat(256)));
    }

    /// A stand-in bubblewrap that records each run and succeeds or fails as told.
    fn fake_bwrap(dir: &Path, succeed: bool) -> std::path::PathBuf {
        let bwrap = dir.join("bwrap");
        let log = dir.join("runs");
        std::fs::write(
            &bwrap,
            format!(
                "#!/bin/sh\necho run >> {}\n{}\n",
                log.display(),
                if succeed {
                    "exit 0"
                } else {
                    "echo 'bwrap: No permissions to create new namespace' >&2; exit 1"
                }
            ),
        )
        .unwrap();
        std::fs::set_permissions(&bwrap, std::fs::Permissions::from_mode(0o755)).unwrap();
        bwrap
    }

    fn runs(dir: &Path) -> usize {
        std::fs::read_to_string(dir.join("runs"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    #[test]
    fn a_success_is_remembered_until_bubblewrap_changes_and_a_failure_never_is() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = tmp.path().join("state/cache/probe");
        let bwrap = fake_bwrap(tmp.path(), false);
        for _ in 0..2 {
            let err = namespaces_work_cached(&bwrap, &cache)
                .unwrap_err()
                .to_string();
            assert!(err.contains("No permissions"), "{err}");
        }
        assert_eq!(runs(tmp.path()), 2, "a failure must be probed again");
        assert!(!cache.exists());

        let bwrap = fake_bwrap(tmp.path(), true);
        namespaces_work_cached(&bwrap, &cache).unwrap();
        namespaces_work_cached(&bwrap, &cache).unwrap();
        assert_eq!(
            runs(tmp.path()),
            3,
            "the second success came from the cache"
        );
        let mode = std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);

        // Replacing bubblewrap (a new file: another inode or change time) re-probes,
        // and its failure is reported, not the old success.
        std::fs::remove_file(&bwrap).unwrap();
        let bwrap = fake_bwrap(tmp.path(), false);
        assert!(namespaces_work_cached(&bwrap, &cache).is_err());
        assert_eq!(runs(tmp.path()), 4);
    }

    #[test]
    fn the_builder_probe_remembers_success_and_failure_under_its_own_key() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = tmp.path().join("state/cache/probe");
        // A stand-in helper: records each run, fails as a host without user namespaces.
        let open = |path: &Path| caps::process::OpenedProgram::open(path).unwrap();
        let helper = open(&fake_bwrap(tmp.path(), false));
        for _ in 0..2 {
            let err = builder_works_cached(&helper, &cache)
                .unwrap_err()
                .to_string();
            assert!(err.contains("No permissions"), "{err}");
        }
        assert_eq!(
            runs(tmp.path()),
            1,
            "the failure came from the cache the second time"
        );
        assert!(!cache.exists(), "bubblewrap's entry is a file of its own");
        // A changed binary is asked again, and its success remembered in place.
        std::fs::remove_file(helper.real_path()).unwrap();
        let helper = open(&fake_bwrap(tmp.path(), true));
        builder_works_cached(&helper, &cache).unwrap();
        builder_works_cached(&helper, &cache).unwrap();
        assert_eq!(runs(tmp.path()), 2);
        // A planted failure under another key is not believed.
        let stored = tmp.path().join("state/cache/probe-builder");
        std::fs::write(&stored, "failed namespaces-v2 uid=0 (planted)\nno").unwrap();
        builder_works_cached(&helper, &cache).unwrap();
        assert_eq!(runs(tmp.path()), 3);
    }

    #[test]
    fn a_cache_entry_under_another_key_is_not_trusted() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = tmp.path().join("probe");
        let bwrap = fake_bwrap(tmp.path(), false);
        std::fs::write(&cache, "namespaces-v1 uid=0 bwrap=/usr/bin/bwrap (planted)").unwrap();
        assert!(namespaces_work_cached(&bwrap, &cache).is_err());
        assert_eq!(runs(tmp.path()), 1);
    }
}
