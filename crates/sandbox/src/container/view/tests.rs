//! The container view's tests: the inspect answer parsed, and what a container may see of the host.

use super::*;

fn inspected(mounts: &str, network: &str) -> Inspected {
    Inspected::parse(&format!("true\nrunning\ntrue\n{network}\n{mounts}\nnull\n")).unwrap()
}

fn policy(writable: &[&str], readable: &[&str], hidden: &[&str]) -> SandboxPolicy {
    let paths = |l: &[&str]| l.iter().map(PathBuf::from).collect();
    SandboxPolicy {
        writable_paths: paths(writable),
        readable_extra_paths: paths(readable),
        hidden_paths: paths(hidden),
        ..Default::default()
    }
}

fn bind(source: &str, destination: &str, rw: bool) -> String {
    format!(
        r#"{{"Type":"bind","Source":"{source}","Destination":"{destination}","RW":{rw},"Options":["rbind"]}}"#
    )
}

#[test]
fn the_inspect_answer_is_parsed_with_volumes_and_tmpfs() {
    let got = Inspected::parse(
        "false\nexited\nfalse\nbridge\n[{\"Type\":\"volume\",\"Name\":\"v\",\"Source\":\"/var/lib/x\",\"Destination\":\"/cache\",\"RW\":true}]\n{\"/tmp\":\"rw,nosuid\",\"/ro\":\"ro\"}\n",
    )
    .unwrap();
    assert!(!got.running && !got.read_only_root);
    assert_eq!(
        (got.status.as_str(), got.network.as_str()),
        ("exited", "bridge")
    );
    let dests: Vec<(&Path, bool, bool)> = got
        .mounts
        .iter()
        .map(|m| (m.destination.as_path(), m.host.is_some(), m.writable))
        .collect();
    assert_eq!(
        dests,
        [
            (Path::new("/cache"), false, true),
            (Path::new("/ro"), false, false),
            (Path::new("/tmp"), false, true)
        ]
    );
    assert!(Inspected::parse("true\nrunning\n").is_err());
    assert!(Inspected::parse("true\nrunning\ntrue\nnone\n{bad\nnull").is_err());
}

#[test]
fn authorized_paths_must_be_seen_at_the_same_path() {
    let p = policy(&["/srv/ws"], &["/srv/ref"], &[]);
    let ok = inspected(
        &format!(
            "[{},{}]",
            bind("/srv/ws", "/srv/ws", true),
            bind("/srv/ref", "/srv/ref", false)
        ),
        "none",
    );
    assert_eq!(ok.broken_promises(&p, false), Vec::<String>::new());
    assert!(ok.same_path(Path::new("/srv/ws/sub/dir")));
    assert!(!ok.same_path(Path::new("/srv")));
    // Mounted elsewhere, or not at all: named, with the -v that fixes it.
    let elsewhere = inspected(
        &format!("[{}]", bind("/srv/ws", "/workspace", true)),
        "none",
    );
    let broken = elsewhere.broken_promises(&p, false);
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert!(broken[0].contains("/srv/ws at the same path"), "{broken:?}");
    assert!(broken[0].contains("no mount there"), "{broken:?}");
    assert!(broken[0].contains("-v /srv/ws:/srv/ws"), "{broken:?}");
    // Another host directory at the workspace's path is not the workspace.
    let other = inspected(
        &format!("[{}]", bind("/srv/other", "/srv/ws", true)),
        "none",
    );
    let broken = other.broken_promises(&policy(&["/srv/ws"], &[], &[]), false);
    assert!(
        broken[0].contains("shows the host's /srv/other there"),
        "{broken:?}"
    );
    // A volume over the path is not the host directory either.
    let volume = inspected(
        &format!(
            "[{},{{\"Type\":\"volume\",\"Source\":\"/v\",\"Destination\":\"/srv/ws/t\",\"RW\":true}}]",
            bind("/srv/ws", "/srv/ws", true)
        ),
        "none",
    );
    assert!(volume.same_path(Path::new("/srv/ws")));
    assert!(!volume.same_path(Path::new("/srv/ws/t/x")));
}

#[test]
fn nothing_writable_beyond_the_writable_paths_and_extras_read_only() {
    let p = policy(&["/srv/ws"], &["/srv/ref"], &[]);
    let c = inspected(
        &format!(
            "[{},{},{}]",
            bind("/srv/ws", "/srv/ws", true),
            bind("/srv/ref", "/srv/ref", true),
            bind("/srv/data", "/data", true)
        ),
        "none",
    );
    let broken = c.broken_promises(&p, false);
    assert!(
        broken.iter().any(
            |b| b.contains("mounts /srv/ref writable") && b.contains("-v /srv/ref:/srv/ref:ro")
        ),
        "{broken:?}"
    );
    assert!(
        broken
            .iter()
            .any(|b| b.contains("host's /srv/data writable at /data")),
        "{broken:?}"
    );
    // Read-only, an unauthorized host path is what the sandbox's read-only root
    // shows anyway.
    let c = inspected(
        &format!(
            "[{},{}]",
            bind("/srv/ws", "/srv/ws", true),
            bind("/usr/share/doc", "/usr/share/doc", false)
        ),
        "none",
    );
    assert_eq!(
        c.broken_promises(&policy(&["/srv/ws"], &[], &[]), false),
        Vec::<String>::new()
    );
}

#[test]
fn what_the_sandbox_hides_is_never_mounted() {
    // The state directory inside the workspace, the home around it, /run.
    let p = policy(
        &["/srv/home/me/ws"],
        &[],
        &["/srv/home/me", "/srv/home/me/ws/.warden"],
    );
    for (source, hidden) in [
        ("/srv/home/me/ws", "/srv/home/me/ws/.warden"),
        ("/srv/home/me", "/srv/home/me"),
        ("/srv/home/me/.ssh", "/srv/home/me/.ssh"),
        ("/run/podman", "/run/podman"),
        ("/", "/"),
    ] {
        let c = inspected(&format!("[{}]", bind(source, source, false)), "none");
        let broken = c.broken_promises(&p, false);
        assert!(
            broken
                .iter()
                .any(|b| b.contains(&format!("which shows {hidden}"))),
            "{source}: {broken:?}"
        );
    }
    // A home that is the workspace is authorized (the plan empties an existing home
    // and binds the workspace back): only what lies hidden inside it counts.
    let tmp = tempfile::tempdir().unwrap();
    let home = std::fs::canonicalize(tmp.path()).unwrap();
    let home = home.to_str().unwrap();
    let state = format!("{home}/.warden");
    std::fs::create_dir(&state).unwrap();
    let c = inspected(&format!("[{}]", bind(home, home, true)), "none");
    assert_eq!(
        c.broken_promises(&policy(&[home], &[], &[home]), false),
        Vec::<String>::new()
    );
    let broken = c.broken_promises(&policy(&[home], &[], &[home, &state]), false);
    assert!(
        broken[0].contains(&format!("which shows {state}")),
        "{broken:?}"
    );
}

#[test]
fn warden_s_programs_are_never_mounted_writable() {
    let mut p = policy(&["/ws"], &[], &[]);
    p.read_only_paths = vec![PathBuf::from("/ws/target/release")];
    let c = inspected(&format!("[{}]", bind("/ws", "/ws", true)), "none");
    let broken = c.broken_promises(&p, false);
    assert!(
        broken.iter().any(|b| b.contains("Warden's own programs")),
        "{broken:?}"
    );
    let c = inspected(&format!("[{}]", bind("/ws", "/ws", false)), "none");
    assert!(
        !c.broken_promises(&p, false)
            .iter()
            .any(|b| b.contains("Warden's own programs"))
    );
}

#[test]
fn a_network_needs_sandbox_network() {
    let c = inspected("[]", "bridge");
    let mut p = policy(&[], &[], &[]);
    let broken = c.broken_promises(&p, false);
    assert_eq!(broken.len(), 1);
    assert!(broken[0].contains("--network none"), "{broken:?}");
    p.network = crate::Network::On;
    assert!(c.broken_promises(&p, false).is_empty());
}

#[test]
fn programs_count_as_read_only_only_on_a_read_only_root_outside_writable_mounts() {
    let c = inspected(
        &format!("[{}]", bind("/srv/ws", "/usr/local", true)),
        "none",
    );
    assert!(c.on_read_only_root(Path::new("/usr/bin/unshare")));
    assert!(!c.on_read_only_root(Path::new("/usr/local/bin/unshare")));
    let mut writable_root = c.clone();
    writable_root.read_only_root = false;
    assert!(!writable_root.on_read_only_root(Path::new("/usr/bin/unshare")));
}

#[test]
fn the_suggested_command_mounts_what_the_policy_authorizes() {
    let p = policy(&["/srv/ws"], &["/srv/ref"], &[]);
    assert_eq!(
        run_command("podman", "box", &p),
        "podman run -d --name box --read-only --network none -v /srv/ws:/srv/ws \
         -v /srv/ref:/srv/ref:ro IMAGE sleep infinity"
    );
}
