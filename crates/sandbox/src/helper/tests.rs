//! The helper's tests: its arguments round-trip, and malformed ones are refused.

use super::*;

#[test]
fn arguments_round_trip() {
    let args = HelperArgs {
        landlock: LandlockMode::Required,
        writable: vec![PathBuf::from("/w s")],
        exec_allowlist: Some(vec![PathBuf::from("/usr/bin/git"), PathBuf::from("/o pt")]),
        exec_libraries: vec![PathBuf::from("/usr/lib/x86_64-linux-gnu")],
        seccomp_fds: vec![3, 4],
        run_as: Some((1000, 100)),
        watch_fd: Some(7),
        status_fd: Some(9),
        egress_fd: Some(11),
        // Never on the command line: pid 1 of Warden's builder sets it.
        dns_stub_fd: None,
        watch_roots: vec![PathBuf::from("/w s"), PathBuf::from("/other")],
        arg0: Some("unxz".into()),
        terminal: true,
        argv: vec![
            "/usr/bin/xz".to_string(),
            "-c".into(),
            "echo -- --rw x".into(),
        ],
    };
    assert_eq!(decode(&encode(&args)).unwrap(), args);
    let plain = HelperArgs {
        argv: vec!["true".into()],
        ..Default::default()
    };
    assert_eq!(decode(&encode(&plain)).unwrap(), plain);
    // An allowlist with no entries left still restricts (nothing may execute).
    let nothing = HelperArgs {
        exec_allowlist: Some(Vec::new()),
        argv: vec!["true".into()],
        ..Default::default()
    };
    assert_eq!(decode(&encode(&nothing)).unwrap(), nothing);
    for bad in [
        &["--exec-allow", "/bin", "--", "x"][..],
        &["--exec-allowlist", "maybe", "--", "x"],
        &["--exec-map", "/lib", "--", "x"],
        // The egress descriptor must be one the helper was handed, never 0-2.
        &["--egress-fd", "1", "--", "x"],
        &["--egress-fd", "x", "--", "x"],
        &[
            "--exec-allowlist",
            "enforce",
            "--exec-map",
            "lib",
            "--",
            "x",
        ],
        &[
            "--exec-allowlist",
            "enforce",
            "--exec-allow",
            "bin",
            "--",
            "x",
        ],
    ] {
        let bad: Vec<String> = bad.iter().map(|s| s.to_string()).collect();
        assert!(decode(&bad).is_err(), "{bad:?}");
    }
    assert!(decode(&["--watch-writes".into(), "1".into(), "--".into(), "x".into()]).is_err());
    assert!(decode(&["--rw".into()]).is_err());
    assert!(decode(&["--arg0".into()]).is_err());
    assert!(decode(&["--".into()]).is_err());
    assert!(decode(&["--bogus".into(), "--".into(), "x".into()]).is_err());
}
