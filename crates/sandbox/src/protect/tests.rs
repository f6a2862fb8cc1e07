//! The protected set's tests: identities, aliases, refusals, links.

use super::links::remembered;
use super::*;

fn protected(path: &Path, create: bool) -> ProtectedPath {
    ProtectedPath {
        path: path.to_path_buf(),
        create,
        role: "test path",
        guard: Guard::Hidden,
    }
}

fn writable(paths: &[PathBuf]) -> Authorized<'_> {
    Authorized {
        writable: paths,
        readable: &[],
    }
}

fn layout<'a>(state: &'a Path, home: &'a Path) -> WardenLayout<'a> {
    WardenLayout {
        state_dir: state,
        socket: None,
        node_state: None,
        home,
        programs: &[],
    }
}

#[test]
fn the_node_state_is_protected_wherever_it_lies() {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let (state, home) = (base.join("state"), base.join("home"));
    let inside = state.join("node.json");
    let layout = WardenLayout {
        node_state: Some(&inside),
        ..layout(&state, &home)
    };
    let got = warden_paths(&layout, writable(&[])).unwrap();
    assert!(got.iter().any(|p| inside.starts_with(&p.real)), "{got:?}");
    let elsewhere = base.join("nodes/node.json");
    let layout = WardenLayout {
        node_state: Some(&elsewhere),
        ..layout
    };
    let got = warden_paths(&layout, writable(&[])).unwrap();
    assert!(got.iter().any(|p| p.real == base.join("nodes")), "{got:?}");
}

#[test]
fn missing_directories_are_created_private_and_located() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(tmp.path()).unwrap();
    let state = ws.join("a/b/.warden");
    let got = protect(
        &[protected(&state, true)],
        writable(std::slice::from_ref(&ws)),
        &[],
    )
    .unwrap();
    assert_eq!(got[0].real, state);
    assert_eq!(got[0].inside_writable.as_deref(), Some(ws.as_path()));
    let mode = std::fs::metadata(&state).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o700);
}

#[test]
fn a_symlink_inside_a_writable_path_is_refused_one_outside_is_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let ws = base.join("ws");
    let real = ws.join("real/.warden");
    std::fs::create_dir_all(&real).unwrap();
    std::os::unix::fs::symlink(ws.join("real"), ws.join("link")).unwrap();
    let err = protect(
        &[protected(&ws.join("link/.warden"), true)],
        writable(std::slice::from_ref(&ws)),
        &[],
    )
    .unwrap_err();
    assert!(err.to_string().contains("symlink"), "{err}");
    // A link outside the writable paths cannot be replaced by a command.
    std::os::unix::fs::symlink(ws.join("real"), base.join("outside")).unwrap();
    let got = protect(
        &[protected(&base.join("outside/.warden"), true)],
        writable(std::slice::from_ref(&ws)),
        &[],
    )
    .unwrap();
    assert_eq!(got[0].real, real);
}

#[test]
fn absent_paths_that_are_not_created_are_skipped_and_files_in_the_way_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(tmp.path()).unwrap();
    let got = protect(&[protected(&ws.join("nohome"), false)], writable(&[]), &[]).unwrap();
    assert!(got.is_empty());
    std::fs::write(ws.join("file"), "x").unwrap();
    assert!(protect(&[protected(&ws.join("file"), true)], writable(&[]), &[]).is_err());
}

#[test]
fn an_authorized_path_equal_to_or_inside_the_state_directory_is_refused_naming_both() {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let (state, home) = (base.join("state"), base.join("home"));
    std::fs::create_dir_all(state.join("sub")).unwrap();
    // Reached through a symlink too: identity, not the path's spelling.
    std::os::unix::fs::symlink(&state, base.join("alias")).unwrap();
    for (path, how) in [
        (state.clone(), "is"),
        (state.join("sub"), "lies inside"),
        (base.join("alias/sub"), "lies inside"),
    ] {
        for authorized in [
            Authorized {
                writable: std::slice::from_ref(&path),
                readable: &[],
            },
            Authorized {
                writable: &[],
                readable: std::slice::from_ref(&path),
            },
        ] {
            let err = warden_paths(&layout(&state, &home), authorized).unwrap_err();
            assert!(
                err.to_string().contains(&path.display().to_string()),
                "{err}"
            );
            assert!(
                err.to_string().contains(&state.display().to_string()),
                "{err}"
            );
            assert!(err.to_string().contains(how), "{err}");
        }
    }
    // Above it is fine: the plan hides it (and pins what leads to it).
    warden_paths(
        &layout(&state, &home),
        writable(std::slice::from_ref(&base)),
    )
    .unwrap();
}

#[test]
fn the_programs_directory_is_read_only_and_a_writable_path_equal_to_it_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let (state, home) = (base.join("state"), base.join("home"));
    let bin = base.join("ws/target/release");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("warden"), "").unwrap();
    let programs = [bin.join("warden")];
    let layout = WardenLayout {
        programs: &programs,
        ..layout(&state, &home)
    };
    let ws = [base.join("ws")];
    let got = warden_paths(&layout, writable(&ws)).unwrap();
    let dir = got.iter().find(|p| p.guard == Guard::ReadOnly).unwrap();
    assert_eq!(dir.real, bin);
    assert_eq!(dir.inside_writable.as_deref(), Some(ws[0].as_path()));
    let (hidden, read_only) = plan_paths(&got);
    assert_eq!(read_only, vec![bin.clone()]);
    assert!(hidden.contains(&state));
    let err = warden_paths(&layout, writable(std::slice::from_ref(&bin))).unwrap_err();
    assert!(err.to_string().contains("cargo install"), "{err}");
}

#[test]
fn aliases_are_found_by_device_and_mount_root() {
    let table = caps::mounts::parse_mount_table(
        b"1 0 8:1 / / rw - ext4 /dev/sda1 rw\n\
          2 1 8:1 /root/.warden /ws/alias rw - ext4 /dev/sda1 rw\n\
          3 1 8:1 /root /ws/home rw - ext4 /dev/sda1 rw\n\
          4 1 8:1 /root/.warden/cache /srv/cache rw - ext4 /dev/sda1 rw\n\
          5 1 0:40 / /tmp rw - tmpfs tmpfs rw\n\
          6 1 8:1 /srv /mnt/srv rw - ext4 /dev/sda1 rw\n",
    );
    let found = aliases(Path::new("/root/.warden"), &table);
    assert_eq!(
        found,
        vec![
            PathBuf::from("/ws/alias"),
            PathBuf::from("/ws/home/.warden"),
            PathBuf::from("/srv/cache"),
        ]
    );
    // Through a bind of the state directory itself, the same places.
    let found = aliases(Path::new("/ws/alias"), &table);
    assert!(found.contains(&PathBuf::from("/root/.warden")), "{found:?}");
    assert!(aliases(Path::new("/tmp/x"), &table).is_empty());
}

#[test]
fn a_protected_file_with_another_name_on_a_writable_device_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let (state, home, ws) = (base.join("state"), base.join("home"), base.join("ws"));
    std::fs::create_dir_all(state.join("cache")).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(state.join("config.toml"), "").unwrap();
    let ws_list = [ws.clone()];
    warden_paths(&layout(&state, &home), writable(&ws_list)).unwrap();
    std::fs::hard_link(state.join("config.toml"), ws.join("planted")).unwrap();
    let err = warden_paths(&layout(&state, &home), writable(&ws_list)).unwrap_err();
    assert!(
        err.to_string().contains("config.toml has 2 hard links"),
        "{err}"
    );
    std::fs::remove_file(ws.join("planted")).unwrap();
    // Deeper in the state directory too.
    std::fs::write(state.join("cache/probe"), "").unwrap();
    std::fs::hard_link(state.join("cache/probe"), ws.join("planted")).unwrap();
    assert!(warden_paths(&layout(&state, &home), writable(&ws_list)).is_err());
    // With no writable path there is nowhere a command could write through it.
    warden_paths(&layout(&state, &home), writable(&[])).unwrap();
}

#[test]
fn a_program_s_links_must_all_lie_in_its_read_only_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let (state, home, ws) = (base.join("state"), base.join("home"), base.join("ws"));
    let bin = ws.join("target/release");
    std::fs::create_dir_all(bin.join("deps")).unwrap();
    std::fs::write(bin.join("deps/warden-0123"), "").unwrap();
    // cargo's layout: the program and its twin in deps/, both read-only to commands.
    std::fs::hard_link(bin.join("deps/warden-0123"), bin.join("warden")).unwrap();
    let programs = [bin.join("warden")];
    let layout = WardenLayout {
        programs: &programs,
        ..layout(&state, &home)
    };
    let ws_list = [ws.clone()];
    warden_paths(&layout, writable(&ws_list)).unwrap();
    let cached: Vec<_> = std::fs::read_dir(state.join("cache"))
        .unwrap()
        .flatten()
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    assert!(
        cached.len() == 1 && remembered(&state.join("cache"), &cached[0]),
        "{cached:?}"
    );
    // A third name in the workspace: found missing, whatever was remembered.
    std::fs::hard_link(bin.join("warden"), ws.join("copy")).unwrap();
    let err = warden_paths(&layout, writable(&ws_list)).unwrap_err();
    assert!(
        err.to_string()
            .contains("has 3 hard links, 1 of them outside"),
        "{err}"
    );
}
