//! Escape attempts against the bounded provider. Every attempt must be a
//! `CapsError::Denied` raised before anything outside the root is read or changed.
// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use caps::{BoundedFs, BoundedShell, ExecOptions, Fs, Shell, WriteOptions};

struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

/// `tmp/outside/secret.txt` and a root `tmp/root` holding symlinks that try to leave.
fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(root.join("dir")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "SECRET").unwrap();
    std::fs::write(root.join("inner.txt"), "inner").unwrap();
    symlink("../outside", root.join("up")).unwrap();
    symlink(&outside, root.join("abs")).unwrap();
    symlink("/etc", root.join("etc")).unwrap();
    symlink("../../outside/secret.txt", root.join("dir/deep")).unwrap();
    symlink("loop", root.join("loop")).unwrap();
    symlink("/proc/self/root/etc", root.join("magic")).unwrap();
    Fixture {
        _tmp: tmp,
        root,
        outside,
    }
}

/// A snapshot of everything outside the root, to prove attempts changed nothing there.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>, u32)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = std::fs::symlink_metadata(entry.path()).unwrap();
        let data = if meta.is_file() {
            std::fs::read(entry.path()).unwrap()
        } else {
            Vec::new()
        };
        out.push((entry.path(), data, meta.permissions().mode()));
    }
    out.sort();
    out
}

/// Paths that must never resolve, whichever operation uses them.
fn hostile_paths(f: &Fixture) -> Vec<PathBuf> {
    vec![
        "../outside/secret.txt".into(),
        "dir/../../outside/secret.txt".into(),
        "/etc/passwd".into(),
        f.outside.join("secret.txt"),
        "up/secret.txt".into(),
        "abs/secret.txt".into(),
        "etc/passwd".into(),
        "dir/deep".into(),
        "magic/passwd".into(),
        "inner.txt\0/../../etc/passwd".into(),
        "up/new-file".into(),
        "abs/new-dir/x".into(),
    ]
}

/// Operations that act on a final symlink itself rather than following it (replacing or
/// renaming the link is confined to the root and legitimate).
const ACTS_ON_LINK_ITSELF: &[&str] = &["write_atomic", "rename_from", "rename_to"];

#[test]
fn every_operation_denies_every_escape_and_touches_nothing_outside() {
    let mut failures = Vec::new();
    let op_names = [
        "read",
        "write",
        "write_atomic",
        "create_dir_all",
        "list",
        "metadata",
        "canonicalize",
        "set_permissions",
        "lock",
        "rename_from",
        "rename_to",
    ];
    for index in 0..hostile_paths(&fixture()).len() {
        for name in op_names {
            // A fresh fixture per attempt, so one attempt cannot mask another.
            let f = fixture();
            let path = hostile_paths(&f)[index].clone();
            let fs = BoundedFs::open(&f.root).unwrap();
            let before = snapshot(&f.outside);
            let result = match name {
                "read" => fs.read(&path).map(drop),
                "write" => fs.write(&path, b"PWNED", WriteOptions::default()),
                "write_atomic" => fs.write_atomic(&path, b"PWNED", WriteOptions::default()),
                "create_dir_all" => fs.create_dir_all(&path, 0o777),
                "list" => fs.list(&path).map(drop),
                "metadata" => fs.metadata(&path).map(drop),
                "canonicalize" => fs.canonicalize(&path).map(drop),
                "set_permissions" => fs.set_permissions(&path, 0o777),
                "lock" => fs.lock(&path).map(drop),
                "rename_from" => fs.rename(&path, Path::new("stolen")),
                "rename_to" => fs.rename(Path::new("inner.txt"), &path),
                _ => unreachable!(),
            };
            let final_link = path == Path::new("dir/deep");
            match result {
                Err(e) if e.is_denied() => {}
                Ok(()) if final_link && ACTS_ON_LINK_ITSELF.contains(&name) => {}
                // mkdir does not follow a final symlink: the name is simply taken.
                Err(caps::CapsError::AlreadyExists { .. })
                    if final_link && name == "create_dir_all" => {}
                other => failures.push(format!("{name}({path:?}) -> {other:?}")),
            }
            if snapshot(&f.outside) != before {
                failures.push(format!(
                    "{name}({path:?}) changed something outside the root"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "escapes not denied:\n{}",
        failures.join("\n")
    );
}

#[test]
fn symlink_loops_are_denied_not_followed_forever() {
    let f = fixture();
    let fs = BoundedFs::open(&f.root).unwrap();
    assert!(fs.read(Path::new("loop")).unwrap_err().is_denied());
}

#[test]
fn removing_or_inspecting_a_link_itself_stays_inside() {
    let f = fixture();
    let fs = BoundedFs::open(&f.root).unwrap();
    assert_eq!(
        fs.symlink_metadata(Path::new("up")).unwrap().kind,
        caps::FileKind::Symlink
    );
    fs.remove(Path::new("up")).unwrap();
    assert!(
        f.outside.join("secret.txt").exists(),
        "removing the link removed its target"
    );
}

#[tokio::test]
async fn links_created_later_by_a_shell_are_still_refused() {
    let f = fixture();
    let fs = BoundedFs::open(&f.root).unwrap();
    let shell = BoundedShell::for_fs(&fs).unwrap();
    let opts = ExecOptions::new("", Duration::from_secs(10)).with_env("PATH", "/usr/bin:/bin");
    let argv: Vec<String> = ["ln", "-s", f.outside.to_str().unwrap(), "late"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let out = shell.exec(&argv, &opts).await.unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        fs.read(Path::new("late/secret.txt"))
            .unwrap_err()
            .is_denied()
    );
    assert!(
        fs.write(Path::new("late/x"), b"x", WriteOptions::default())
            .unwrap_err()
            .is_denied()
    );
    assert!(!f.outside.join("x").exists());
}

#[tokio::test]
async fn bounded_shell_cwd_cannot_leave_the_root() {
    let f = fixture();
    let fs = BoundedFs::open(&f.root).unwrap();
    let shell = BoundedShell::for_fs(&fs).unwrap();
    let argv = vec!["/bin/pwd".to_string()];
    for cwd in ["..", "/tmp", "up", "abs", "dir/../.."] {
        let opts = ExecOptions::new(cwd, Duration::from_secs(10));
        let err = shell.exec(&argv, &opts).await.unwrap_err();
        assert!(err.is_denied(), "cwd {cwd:?}: {err:?}");
    }
    let out = shell
        .exec(&argv, &ExecOptions::new("dir", Duration::from_secs(10)))
        .await
        .unwrap();
    let root = std::fs::canonicalize(&f.root).unwrap();
    assert_eq!(out.stdout.trim(), root.join("dir").to_str().unwrap());
}

/// A directory inside the root is swapped (atomically, with RENAME_EXCHANGE) for a
/// symlink to the outside thousands of times while reads and writes run through it.
/// A read may fail, but must never return the outside file; a write must never land
/// outside.
#[test]
fn directory_swapped_for_symlink_during_operations_never_escapes() {
    let f = fixture();
    std::fs::create_dir(f.root.join("swap")).unwrap();
    std::fs::write(f.root.join("swap/file.txt"), "INSIDE").unwrap();
    std::fs::write(f.outside.join("file.txt"), "OUTSIDE").unwrap();
    symlink(&f.outside, f.root.join("swap-alt")).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let stop = Arc::clone(&stop);
        let root = f.root.clone();
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                nix::fcntl::renameat2(
                    nix::fcntl::AT_FDCWD,
                    &root.join("swap"),
                    nix::fcntl::AT_FDCWD,
                    &root.join("swap-alt"),
                    nix::fcntl::RenameFlags::RENAME_EXCHANGE,
                )
                .unwrap();
                swaps += 1;
            }
            swaps
        })
    };

    let fs = BoundedFs::open(&f.root).unwrap();
    let (mut reads_inside, mut denied) = (0, 0);
    for i in 0..5000 {
        match fs.read(Path::new("swap/file.txt")) {
            Ok(data) => {
                assert_eq!(data, b"INSIDE", "read escaped the root on iteration {i}");
                reads_inside += 1;
            }
            Err(e) => {
                assert!(e.is_denied() || e.is_not_found(), "unexpected error {e:?}");
                denied += 1;
            }
        }
        let _ = fs.write(Path::new("swap/written.txt"), b"W", WriteOptions::default());
        let _ = fs.write_atomic(Path::new("swap/atomic.txt"), b"A", WriteOptions::default());
        let _ = fs.create_dir_all(Path::new("swap/made"), 0o755);
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(
        swaps >= 1000,
        "only {swaps} swaps happened; the race was not exercised"
    );
    assert!(
        reads_inside > 0 && denied > 0,
        "both outcomes should occur: {reads_inside} ok / {denied} refused"
    );
    let outside: Vec<_> = std::fs::read_dir(&f.outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let mut outside = outside;
    outside.sort();
    assert_eq!(
        outside,
        vec!["file.txt", "secret.txt"],
        "a write escaped the root"
    );
    assert_eq!(
        std::fs::read_to_string(f.outside.join("file.txt")).unwrap(),
        "OUTSIDE"
    );
}

/// A guarded root holding a protected directory (`ws/a/.warden`, as Warden's state
/// directory inside a workspace) and symlinks that lead into it.
struct Guarded {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    protected: PathBuf,
    fs: BoundedFs,
}

fn guarded() -> Guarded {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap().join("ws");
    let protected = root.join("a/.warden");
    std::fs::create_dir_all(&protected).unwrap();
    std::fs::write(protected.join("config.toml"), "ORIGINAL").unwrap();
    symlink("a/.warden", root.join("dirlink")).unwrap();
    symlink("a/.warden/config.toml", root.join("filelink")).unwrap();
    symlink(".warden/config.toml", root.join("a/sibling")).unwrap();
    let fenced = protected.clone();
    let guard: caps::Guard = Arc::new(move |real: &Path, _| {
        if real.starts_with(&fenced) {
            Err(format!("{} is protected", real.display()))
        } else {
            Ok(())
        }
    });
    let fs = BoundedFs::open(&root).unwrap().with_guard(guard);
    Guarded {
        _tmp: tmp,
        root,
        protected,
        fs,
    }
}

#[test]
fn a_guarded_subtree_is_refused_by_every_operation_and_every_path() {
    let g = guarded();
    let before = snapshot(&g.protected);
    let w = WriteOptions::default();
    let mut failures = Vec::new();
    let mut expect_denied = |what: &str, r: caps::Result<()>| match r {
        Err(e) if e.is_denied() => {}
        other => failures.push(format!("{what}: {other:?}")),
    };
    for path in [
        "a/.warden/config.toml",
        "dirlink/config.toml",
        "filelink",
        "a/sibling",
        "a/../a/.warden/config.toml",
    ] {
        let p = Path::new(path);
        expect_denied(&format!("read {path}"), g.fs.read(p).map(drop));
        expect_denied(&format!("metadata {path}"), g.fs.metadata(p).map(drop));
        expect_denied(&format!("write {path}"), g.fs.write(p, b"PLANTED", w));
        expect_denied(
            &format!("set_permissions {path}"),
            g.fs.set_permissions(p, 0o777),
        );
        expect_denied(
            &format!("canonicalize {path}"),
            g.fs.canonicalize(p).map(drop),
        );
    }
    // An atomic write lands in the directory that holds the name: refused there, and
    // through a link outside the subtree it replaces the link, not its target.
    for path in ["a/.warden/config.toml", "dirlink/config.toml"] {
        expect_denied(
            &format!("write_atomic {path}"),
            g.fs.write_atomic(Path::new(path), b"PLANTED", w),
        );
    }
    for dir in ["a/.warden", "dirlink"] {
        let d = Path::new(dir);
        expect_denied(&format!("list {dir}"), g.fs.list(d).map(drop));
        expect_denied(
            &format!("create_dir_all {dir}/sub"),
            g.fs.create_dir_all(&d.join("sub"), 0o755),
        );
        expect_denied(
            &format!("write {dir}/direct-mode.json"),
            g.fs.write(&d.join("direct-mode.json"), b"{}", w),
        );
        expect_denied(
            &format!("write_atomic {dir}/new.json"),
            g.fs.write_atomic(&d.join("new.json"), b"{}", w),
        );
        expect_denied(
            &format!("lock {dir}/x.lock"),
            g.fs.lock(&d.join("x.lock")).map(drop),
        );
        expect_denied(
            &format!("remove {dir}/config.toml"),
            g.fs.remove(&d.join("config.toml")),
        );
        expect_denied(
            &format!("rename {dir}/config.toml"),
            g.fs.rename(&d.join("config.toml"), Path::new("stolen")),
        );
    }
    std::fs::write(g.root.join("planted"), "PLANTED").unwrap();
    expect_denied(
        "rename into dirlink",
        g.fs.rename(Path::new("planted"), Path::new("dirlink/config.toml")),
    );
    expect_denied("remove the directory", g.fs.remove(Path::new("a/.warden")));
    assert!(failures.is_empty(), "not refused:\n{}", failures.join("\n"));
    assert_eq!(
        snapshot(&g.protected),
        before,
        "the protected directory changed"
    );
    // Everything else still works, including symlinks that stay outside the subtree.
    symlink("a", g.root.join("alias")).unwrap();
    g.fs.write_atomic(Path::new("alias/ok.txt"), b"ok", w)
        .unwrap();
    assert_eq!(g.fs.read(Path::new("a/ok.txt")).unwrap(), b"ok");
    g.fs.create_dir_all(Path::new("alias/new/deeper"), 0o755)
        .unwrap();
    assert!(g.root.join("a/new/deeper").is_dir());
    // Replacing a symlink by an atomic write replaces the link, not its target.
    g.fs.write_atomic(Path::new("filelink"), b"replaced", w)
        .unwrap();
    assert!(
        std::fs::symlink_metadata(g.root.join("filelink"))
            .unwrap()
            .is_file()
    );
    assert_eq!(
        std::fs::read_to_string(g.protected.join("config.toml")).unwrap(),
        "ORIGINAL"
    );
}

/// A directory is swapped (RENAME_EXCHANGE) with a symlink into the guarded subtree
/// thousands of times while reads and writes run through it: nothing may ever be read
/// from or written into the subtree.
#[test]
fn a_directory_swapped_for_a_symlink_into_the_guarded_subtree_never_gets_in() {
    let g = guarded();
    std::fs::create_dir(g.root.join("swap")).unwrap();
    std::fs::write(g.root.join("swap/config.toml"), "INSIDE").unwrap();
    symlink("a/.warden", g.root.join("swap-alt")).unwrap();
    let before = snapshot(&g.protected);
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let stop = Arc::clone(&stop);
        let root = g.root.clone();
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                nix::fcntl::renameat2(
                    nix::fcntl::AT_FDCWD,
                    &root.join("swap"),
                    nix::fcntl::AT_FDCWD,
                    &root.join("swap-alt"),
                    nix::fcntl::RenameFlags::RENAME_EXCHANGE,
                )
                .unwrap();
                swaps += 1;
            }
            swaps
        })
    };
    let (mut inside, mut refused) = (0, 0);
    for i in 0..3000 {
        match g.fs.read(Path::new("swap/config.toml")) {
            Ok(data) => {
                assert_eq!(data, b"INSIDE", "read the guarded file on iteration {i}");
                inside += 1;
            }
            Err(e) => {
                assert!(e.is_denied() || e.is_not_found(), "{e:?}");
                refused += 1;
            }
        }
        let w = WriteOptions::default();
        let _ = g.fs.write(Path::new("swap/written.txt"), b"W", w);
        let _ =
            g.fs.write_atomic(Path::new("swap/direct-mode.json"), b"A", w);
        let _ = g.fs.create_dir_all(Path::new("swap/made"), 0o755);
        let _ = g.fs.list(Path::new("swap"));
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert!(
        swaps >= 1000,
        "only {swaps} swaps: the race was not exercised"
    );
    assert!(
        inside > 0 && refused > 0,
        "{inside} read / {refused} refused"
    );
    assert_eq!(
        snapshot(&g.protected),
        before,
        "something got into the subtree"
    );
}
