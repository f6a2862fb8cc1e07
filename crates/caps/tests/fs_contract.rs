//! One contract for every `Fs` provider: the same expectations run over local, memory
//! and bounded worlds (ripgrep-style shared harness).
// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use caps::{BoundedFs, CapsError, FileKind, Fs, LocalFs, MemoryFs, WriteOptions};

/// Creates a symlink (target, link) in a world: the `Fs` trait deliberately cannot.
type MakeSymlink = Box<dyn Fn(&Path, &Path) + Send + Sync>;

/// A provider plus the directory tests work in and a way to make symlinks.
struct World {
    fs: Box<dyn Fs>,
    base: PathBuf,
    symlink: MakeSymlink,
    _tmp: Option<tempfile::TempDir>,
}

impl World {
    fn p(&self, rel: &str) -> PathBuf {
        self.base.join(rel)
    }
    fn link(&self, target: &str, link: &str) {
        (self.symlink)(Path::new(target), &self.p(link));
    }
}

fn local() -> World {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().to_path_buf();
    World {
        fs: Box::new(LocalFs::new("/").unwrap()),
        base,
        symlink: Box::new(|t, l| std::os::unix::fs::symlink(t, l).unwrap()),
        _tmp: Some(tmp),
    }
}

fn memory() -> World {
    let fs = std::sync::Arc::new(MemoryFs::new());
    fs.create_dir_all(Path::new("/work"), 0o755).unwrap();
    let for_links = std::sync::Arc::clone(&fs);
    World {
        fs: Box::new(caps::testkit::SharedMemoryFs::new(fs)),
        base: PathBuf::from("/work"),
        symlink: Box::new(move |t, l| for_links.symlink(t, l).unwrap()),
        _tmp: None,
    }
}

fn bounded() -> World {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    World {
        fs: Box::new(BoundedFs::open(&root).unwrap()),
        base: PathBuf::new(),
        symlink: Box::new(move |t, l| std::os::unix::fs::symlink(t, root.join(l)).unwrap()),
        _tmp: Some(tmp),
    }
}

/// A bounded world under a guard that allows everything: the handle-first code paths
/// must keep the same contract.
fn guarded() -> World {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    let allow_all: caps::Guard = std::sync::Arc::new(|_, _| Ok(()));
    World {
        fs: Box::new(BoundedFs::open(&root).unwrap().with_guard(allow_all)),
        base: PathBuf::new(),
        symlink: Box::new(move |t, l| std::os::unix::fs::symlink(t, root.join(l)).unwrap()),
        _tmp: Some(tmp),
    }
}

fn names(w: &World, dir: &str) -> Vec<String> {
    w.fs.list(&w.p(dir))
        .unwrap()
        .into_iter()
        .map(|e| e.name.to_string_lossy().into_owned())
        .collect()
}

fn write_then_read_round_trips(w: World) {
    w.fs.write(&w.p("a.txt"), b"hello", WriteOptions::default())
        .unwrap();
    assert_eq!(w.fs.read(&w.p("a.txt")).unwrap(), b"hello");
    assert_eq!(w.fs.read_to_string(&w.p("a.txt")).unwrap(), "hello");
}

fn write_truncates_and_create_new_refuses(w: World) {
    w.fs.write(&w.p("a.txt"), b"long contents", WriteOptions::default())
        .unwrap();
    w.fs.write(&w.p("a.txt"), b"short", WriteOptions::default())
        .unwrap();
    assert_eq!(w.fs.read(&w.p("a.txt")).unwrap(), b"short");
    let err =
        w.fs.write(
            &w.p("a.txt"),
            b"x",
            WriteOptions {
                create_new: true,
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(matches!(err, CapsError::AlreadyExists { .. }), "{err:?}");
    assert_eq!(w.fs.read(&w.p("a.txt")).unwrap(), b"short");
}

fn missing_files_are_not_found(w: World) {
    assert!(w.fs.read(&w.p("nope")).unwrap_err().is_not_found());
    assert!(w.fs.metadata(&w.p("nope")).unwrap_err().is_not_found());
    assert!(!w.fs.exists(&w.p("nope")).unwrap());
    assert!(
        w.fs.write(&w.p("no/such/dir/f"), b"x", WriteOptions::default())
            .unwrap_err()
            .is_not_found()
    );
}

fn invalid_utf8_is_a_clear_error(w: World) {
    w.fs.write(&w.p("bin"), &[0xff, 0xfe], WriteOptions::default())
        .unwrap();
    assert!(matches!(
        w.fs.read_to_string(&w.p("bin")).unwrap_err(),
        CapsError::InvalidInput { .. }
    ));
}

fn atomic_write_replaces_with_exact_mode_and_leaves_no_temp(w: World) {
    w.fs.create_dir_all(&w.p("state"), 0o700).unwrap();
    w.fs.write(&w.p("state/f.json"), b"old", WriteOptions::default())
        .unwrap();
    w.fs.write_atomic(&w.p("state/f.json"), b"new", WriteOptions::private())
        .unwrap();
    assert_eq!(w.fs.read(&w.p("state/f.json")).unwrap(), b"new");
    assert_eq!(w.fs.metadata(&w.p("state/f.json")).unwrap().mode, 0o600);
    assert_eq!(names(&w, "state"), vec!["f.json"]);
    // Creating a new file atomically works too.
    w.fs.write_atomic(&w.p("state/g.json"), b"g", WriteOptions::private())
        .unwrap();
    assert_eq!(names(&w, "state"), vec!["f.json", "g.json"]);
}

fn directories_are_created_listed_and_removed(w: World) {
    w.fs.create_dir_all(&w.p("d/e/f"), 0o750).unwrap();
    w.fs.create_dir_all(&w.p("d/e/f"), 0o750).unwrap();
    assert!(w.fs.metadata(&w.p("d/e/f")).unwrap().is_dir());
    assert_eq!(w.fs.metadata(&w.p("d/e")).unwrap().mode, 0o750);
    w.fs.write(&w.p("d/b.txt"), b"1", WriteOptions::default())
        .unwrap();
    w.fs.write(&w.p("d/a.txt"), b"22", WriteOptions::default())
        .unwrap();
    let listing = w.fs.list(&w.p("d")).unwrap();
    let got: Vec<(String, FileKind)> = listing
        .iter()
        .map(|e| (e.name.to_string_lossy().into_owned(), e.kind))
        .collect();
    assert_eq!(
        got,
        vec![
            ("a.txt".into(), FileKind::File),
            ("b.txt".into(), FileKind::File),
            ("e".into(), FileKind::Dir)
        ]
    );
    assert_eq!(w.fs.metadata(&w.p("d/a.txt")).unwrap().len, 2);
    assert!(
        w.fs.remove(&w.p("d/e")).is_err(),
        "non-empty directory must not be removed"
    );
    w.fs.remove(&w.p("d/e/f")).unwrap();
    w.fs.remove(&w.p("d/e")).unwrap();
    w.fs.remove(&w.p("d/a.txt")).unwrap();
    assert_eq!(names(&w, "d"), vec!["b.txt"]);
}

fn rename_moves_and_replaces(w: World) {
    w.fs.write(&w.p("from"), b"payload", WriteOptions::default())
        .unwrap();
    w.fs.write(&w.p("to"), b"old", WriteOptions::default())
        .unwrap();
    w.fs.rename(&w.p("from"), &w.p("to")).unwrap();
    assert_eq!(w.fs.read(&w.p("to")).unwrap(), b"payload");
    assert!(!w.fs.exists(&w.p("from")).unwrap());
    w.fs.create_dir_all(&w.p("dir/sub"), 0o755).unwrap();
    w.fs.write(&w.p("dir/sub/x"), b"x", WriteOptions::default())
        .unwrap();
    w.fs.rename(&w.p("dir"), &w.p("moved")).unwrap();
    assert_eq!(w.fs.read(&w.p("moved/sub/x")).unwrap(), b"x");
}

fn permissions_are_set(w: World) {
    w.fs.write(&w.p("f"), b"", WriteOptions::default()).unwrap();
    w.fs.set_permissions(&w.p("f"), 0o640).unwrap();
    assert_eq!(w.fs.metadata(&w.p("f")).unwrap().mode, 0o640);
    w.fs.set_permissions(&w.p("f"), 0o755).unwrap();
    assert!(w.fs.metadata(&w.p("f")).unwrap().is_executable_file());
}

fn symlinks_inside_the_world_resolve(w: World) {
    w.fs.create_dir_all(&w.p("real/dir"), 0o755).unwrap();
    w.fs.write(&w.p("real/dir/file"), b"data", WriteOptions::default())
        .unwrap();
    w.link("real/dir", "alias");
    assert_eq!(w.fs.read(&w.p("alias/file")).unwrap(), b"data");
    assert_eq!(
        w.fs.symlink_metadata(&w.p("alias")).unwrap().kind,
        FileKind::Symlink
    );
    assert_eq!(w.fs.metadata(&w.p("alias")).unwrap().kind, FileKind::Dir);
    let canon = w.fs.canonicalize(&w.p("alias/file")).unwrap();
    assert_eq!(canon, w.fs.canonicalize(&w.p("real/dir/file")).unwrap());
    assert!(canon.ends_with("real/dir/file"));
    // Removing a symlink removes the link, not its target.
    w.fs.remove(&w.p("alias")).unwrap();
    assert!(w.fs.exists(&w.p("real/dir/file")).unwrap());
}

fn nul_bytes_are_denied(w: World) {
    let bad = w.p("a\0b");
    assert!(w.fs.read(&bad).unwrap_err().is_denied());
    assert!(
        w.fs.write(&bad, b"x", WriteOptions::default())
            .unwrap_err()
            .is_denied()
    );
    assert!(w.fs.resolve_path(&bad).unwrap_err().is_denied());
}

fn lock_is_exclusive(w: World) {
    let w = std::sync::Arc::new(w);
    let guard = w.fs.lock(&w.p("state.lock")).unwrap();
    let (tx, rx) = mpsc::channel();
    let w2 = std::sync::Arc::clone(&w);
    let waiter = std::thread::spawn(move || {
        let _second = w2.fs.lock(&w2.p("state.lock")).unwrap();
        tx.send(()).unwrap();
    });
    // The second locker must still be waiting while we hold the lock.
    assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    drop(guard);
    rx.recv_timeout(Duration::from_secs(10))
        .expect("second locker never got the lock");
    waiter.join().unwrap();
}

fn append_creates_extends_and_never_follows_a_link(w: World) {
    let log = w.p("log");
    let private = WriteOptions::private();
    w.fs.append(&log, b"one\n", private, true).unwrap();
    w.fs.append(&log, b"two\n", private, false).unwrap();
    assert_eq!(w.fs.read(&log).unwrap(), b"one\ntwo\n");
    // A synced append that creates its file in a directory below the root syncs that
    // directory (the file's name) as well; one to a file that is there does not need to.
    w.fs.create_dir_all(&w.p("logs"), 0o700).unwrap();
    let nested = w.p("logs/audit.jsonl");
    w.fs.append(&nested, b"first\n", private, true).unwrap();
    w.fs.append(&nested, b"second\n", private, true).unwrap();
    assert_eq!(w.fs.read(&nested).unwrap(), b"first\nsecond\n");
    assert_eq!(w.fs.metadata(&log).unwrap().mode, 0o600);
    // Ranges: the middle, past the end, and beyond it.
    assert_eq!(w.fs.read_range(&log, 4, 3).unwrap(), b"two");
    assert_eq!(w.fs.read_range(&log, 6, 100).unwrap(), b"o\n");
    assert!(w.fs.read_range(&log, 100, 10).unwrap().is_empty());
    // A link at the name is refused, and its target is left alone.
    w.fs.write(&w.p("target"), b"mine", WriteOptions::default())
        .unwrap();
    w.link("target", "link");
    assert!(w.fs.append(&w.p("link"), b"x", private, false).is_err());
    assert_eq!(w.fs.read(&w.p("target")).unwrap(), b"mine");
}

macro_rules! contract {
    ($($test:ident),* $(,)?) => {
        mod local_provider { use super::*; $(#[test] fn $test() { super::$test(local()) })* }
        mod memory_provider { use super::*; $(#[test] fn $test() { super::$test(memory()) })* }
        mod bounded_provider { use super::*; $(#[test] fn $test() { super::$test(bounded()) })* }
        mod guarded_bounded_provider { use super::*; $(#[test] fn $test() { super::$test(guarded()) })* }
    };
}

contract!(
    write_then_read_round_trips,
    write_truncates_and_create_new_refuses,
    missing_files_are_not_found,
    invalid_utf8_is_a_clear_error,
    atomic_write_replaces_with_exact_mode_and_leaves_no_temp,
    directories_are_created_listed_and_removed,
    rename_moves_and_replaces,
    permissions_are_set,
    symlinks_inside_the_world_resolve,
    nul_bytes_are_denied,
    lock_is_exclusive,
    append_creates_extends_and_never_follows_a_link,
);

#[test]
fn memory_provider_never_touches_the_real_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let real = tmp.path();
    let fs = MemoryFs::new();
    fs.create_dir_all(real, 0o755).unwrap();
    fs.write(&real.join("f"), b"memory only", WriteOptions::default())
        .unwrap();
    fs.write_atomic(&real.join("g"), b"memory only", WriteOptions::private())
        .unwrap();
    fs.create_dir_all(&real.join("d/e"), 0o700).unwrap();
    fs.rename(&real.join("f"), &real.join("d/f")).unwrap();
    drop(fs.lock(&real.join("lock")).unwrap());
    fs.set_permissions(&real.join("g"), 0o644).unwrap();
    assert_eq!(
        std::fs::read_dir(real).unwrap().count(),
        0,
        "memory writes reached the disk"
    );
    // And it never reads the disk either: a file that exists for real is absent here.
    assert!(Path::new("/proc/self/status").exists());
    assert!(
        fs.read(Path::new("/proc/self/status"))
            .unwrap_err()
            .is_not_found()
    );
    fs.write(
        Path::new("/etc/warden-memory-probe"),
        b"x",
        WriteOptions::default(),
    )
    .unwrap_err();
    assert!(!Path::new("/etc/warden-memory-probe").exists());
}

#[test]
fn local_provider_resolves_relative_paths_against_its_base_not_the_process_cwd() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = LocalFs::new(tmp.path()).unwrap();
    fs.write(Path::new("rel.txt"), b"x", WriteOptions::default())
        .unwrap();
    assert!(tmp.path().join("rel.txt").exists());
    assert!(LocalFs::new("relative/base").is_err());
}
