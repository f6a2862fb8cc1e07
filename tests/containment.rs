//! End-to-end: nothing a command starts outlives its run, whatever it does to leave its
//! process group (setsid, double forks, daemons), however the run ends (normal exit,
//! timeout, SIGINT/SIGTERM/SIGHUP to `warden exec`); and a run cannot take the host's
//! processes or memory (fork bomb, memory bomb). The real `warden` binary, real
//! processes, the host's real cgroups — and the subreaper fallback, forced with
//! `WARDEN_CONTAINMENT=subreaper`, since CI machines differ in what they allow.
// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Skips and measured times are reported on stderr.
#![allow(clippy::print_stderr)]

mod support;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use support::{
    open_gateway_home, pids_with_cmdline, pids_with_cmdline_words, wait_gone, warden_in,
};

/// The containment mechanisms this host offers, as `WARDEN_CONTAINMENT` values, each
/// with the mechanism `warden doctor --json` must then report.
fn mechanisms(home: &std::path::Path) -> Vec<(&'static str, String)> {
    let mut list = Vec::new();
    for setting in ["auto", "subreaper"] {
        let out = warden_in(home)
            .env("WARDEN_CONTAINMENT", setting)
            .args(["doctor", "--json"])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let mechanism = v["containment"]["mechanism"]["mechanism"]
            .as_str()
            .unwrap_or("none")
            .to_owned();
        if setting == "auto" && mechanism != "cgroup" {
            eprintln!(
                "SKIPPED (cgroup half): this host lets Warden make no cgroup ({}); only the subreaper is tested",
                v["containment"]["detail"]
            );
            continue;
        }
        list.push((setting, mechanism));
    }
    list
}

fn exec(home: &std::path::Path, containment: &str, args: &[&str]) -> Output {
    warden_in(home)
        .env("WARDEN_CONTAINMENT", containment)
        .arg("exec")
        .args(args)
        .output()
        .unwrap()
}

/// Every process whose command line is `marker` is gone (none may survive the run;
/// killing is synchronous, the grace is only for the kernel to reap).
fn assert_none_left(marker: &str, context: &str) {
    let survivors: Vec<i32> = pids_with_cmdline(marker)
        .into_iter()
        .filter(|pid| !wait_gone(*pid))
        .collect();
    assert!(
        survivors.is_empty(),
        "{context}: processes {survivors:?} ({marker}) outlived the run"
    );
}

#[test]
fn what_leaves_the_process_group_still_ends_with_the_run() {
    let home = open_gateway_home();
    let list = mechanisms(home.path());
    assert!(!list.is_empty());
    for (setting, mechanism) in list {
        // Timeout: a setsid child, a double-forked daemon and a TERM-ignoring child.
        let marker = format!("sleep 4711{}", std::process::id());
        let script = format!(
            "setsid sh -c '{marker}' & (setsid sh -c '{marker} &' &) ; (trap '' TERM; {marker}) & {marker}"
        );
        let out = exec(
            home.path(),
            setting,
            &["--timeout", "2s", "--", "sh", "-c", &script],
        );
        assert_eq!(out.status.code(), Some(124), "{setting}: {out:?}");
        assert_none_left(&marker, &format!("{mechanism}, timeout"));

        // Normal exit: the command returns at once and leaves daemons behind.
        let marker = format!("sleep 4712{}", std::process::id());
        let script = format!(
            "setsid sh -c '{marker}' & (setsid {marker} &) ; nohup {marker} >/dev/null 2>&1 & echo started"
        );
        let out = exec(home.path(), setting, &["--", "sh", "-c", &script]);
        assert_eq!(out.status.code(), Some(0), "{setting}: {out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "started\n");
        assert_none_left(&marker, &format!("{mechanism}, normal exit"));
    }
}

#[test]
fn a_daemon_whose_main_thread_exited_still_ends_with_the_run() {
    // A process whose main thread has exited while another runs on looks like one
    // already on its way out (a zombie leader), and the kernel's cgroup.kill passes over
    // it: it must still end with its run, whichever containment holds the run.
    if !std::path::Path::new("/usr/bin/python3").exists() {
        eprintln!("SKIPPED: no /usr/bin/python3 to make a process whose main thread exited");
        return;
    }
    let home = open_gateway_home();
    for (setting, mechanism) in mechanisms(home.path()) {
        let dir = tempfile::tempdir().unwrap();
        let survived = dir.path().join("survived");
        let daemon = "import ctypes, sys, threading, time\\n\
                      def work():\\n    time.sleep(1.0)\\n    open(sys.argv[1], \"w\").write(\"x\")\\n\
                      threading.Thread(target=work).start()\\n\
                      time.sleep(0.05)\\n\
                      ctypes.CDLL(None).syscall(60, 0)\\n";
        let script = format!(
            "setsid /usr/bin/python3 -c \"$(printf '{daemon}')\" {} & pid=$!; \
             for i in $(seq 200); do grep -q '^State:.Z' /proc/$pid/status && break; sleep 0.05; done; \
             grep -E '^(State|Threads)' /proc/$pid/status",
            survived.display()
        );
        let out = exec(home.path(), setting, &["--", "sh", "-c", &script]);
        assert_eq!(out.status.code(), Some(0), "{setting}: {out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("State:\tZ") && stdout.contains("Threads:\t2"),
            "{mechanism}: the daemon was not set up: {out:?}"
        );
        std::thread::sleep(Duration::from_millis(1500));
        assert!(
            !survived.exists(),
            "{mechanism}: a thread of a process whose main thread had exited outlived its run"
        );
    }
}

/// `warden exec` (containment `setting`) of a script that runs `marker` itself and in
/// two `setsid` children, returned once all three run.
fn start_with_setsid_children(
    home: &std::path::Path,
    setting: &str,
    marker: &str,
    stderr: Stdio,
) -> std::process::Child {
    let ready = tempfile::NamedTempFile::new().unwrap();
    let script = format!(
        "setsid sh -c '{marker}' & (setsid {marker} &) ; echo up > {}; {marker}",
        ready.path().display()
    );
    let child = warden_in(home)
        .env("WARDEN_CONTAINMENT", setting)
        .args(["exec", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while pids_with_cmdline(marker).len() < 3
        || std::fs::read_to_string(ready.path()).unwrap_or_default() != "up\n"
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{setting}: the command or its children never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[test]
fn signals_to_warden_exec_end_the_whole_tree() {
    // A harness started under `nohup` (or by a shell's background job) passes SIGHUP (or
    // SIGINT) ignored to every child, and Warden rightly keeps a signal it was started
    // with ignored: this test is about the signals Warden watches, so it starts Warden
    // with them at their defaults.
    for signal in [
        nix::sys::signal::Signal::SIGINT,
        nix::sys::signal::Signal::SIGTERM,
        nix::sys::signal::Signal::SIGHUP,
    ] {
        // SAFETY: setting a disposition to the default installs no handler; no other
        // test of this binary relies on these signals being ignored.
        unsafe { nix::sys::signal::signal(signal, nix::sys::signal::SigHandler::SigDfl) }.unwrap();
    }
    let home = open_gateway_home();
    for (setting, mechanism) in mechanisms(home.path()) {
        for (signal, code) in [
            (nix::sys::signal::Signal::SIGINT, 130),
            (nix::sys::signal::Signal::SIGTERM, 143),
            (nix::sys::signal::Signal::SIGHUP, 129),
        ] {
            let marker = format!("sleep 4713{}{}", std::process::id(), signal as i32);
            let child = start_with_setsid_children(home.path(), setting, &marker, Stdio::piped());
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
            let out = child.wait_with_output().unwrap();
            assert_eq!(out.status.code(), Some(code), "{setting} {signal}: {out:?}");
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("the command was killed"),
                "{out:?}"
            );
            assert_none_left(&marker, &format!("{mechanism}, {signal}"));
        }
    }
}

/// The run cgroups of the Warden whose runs `prefix` names (`warden.<pid>`: its runs
/// are `warden.<pid>.run.<n>`; a directory named `warden.<pid>` itself counts too)
/// anywhere under /sys/fs/cgroup (a few levels deep: a process's own cgroup may be
/// nested).
fn run_cgroups_of(prefix: &str) -> Vec<std::path::PathBuf> {
    fn walk(dir: &std::path::Path, name: &str, depth: usize, found: &mut Vec<std::path::PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let entry_name = entry.file_name();
            let entry_name = entry_name.to_string_lossy();
            if entry_name == name || entry_name.starts_with(&format!("{name}.run.")) {
                found.push(entry.path());
            } else if depth > 0 {
                walk(&entry.path(), name, depth - 1, found);
            }
        }
    }
    let mut found = Vec::new();
    walk(
        std::path::Path::new("/sys/fs/cgroup"),
        prefix,
        6,
        &mut found,
    );
    found
}

/// The watchdogs of the Warden whose cgroup parent is `parent` (`warden.<pid>`; empty:
/// every one): the helper-binary watchdog, or the companion a one-shot `warden exec`
/// starts, which is its watchdog.
fn watchdogs_of(parent: &str) -> Vec<i32> {
    let words = |kind: &'static str| -> Vec<&str> {
        if parent.is_empty() {
            vec![kind]
        } else {
            vec![kind, parent]
        }
    };
    let mut pids = pids_with_cmdline_words(&words("__warden-cgroup-watchdog"));
    // The companion names its Warden as a word of its own (`warden.12` is not
    // `warden.123`); the sandbox pid 1 it keeps ready has its command line, and another
    // name.
    pids.extend(
        pids_with_cmdline_words(&words("__warden-companion"))
            .into_iter()
            .filter(|pid| {
                let line = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                parent.is_empty() || line.split(|b| *b == 0).any(|w| w == parent.as_bytes())
            })
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|comm| comm.trim_end() != "warden-pid1")
            }),
    );
    pids
}

/// `warden exec ARGS` with cgroups where the host has them: the prefix of its cgroups
/// (`warden.<pid>`) and its output.
fn exec_naming_its_cgroups(home: &std::path::Path, args: &[&str]) -> (String, Output) {
    let child = warden_in(home)
        .env("WARDEN_CONTAINMENT", "auto")
        .arg("exec")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let parent = format!("warden.{}", child.id());
    (parent, child.wait_with_output().unwrap())
}

/// Neither cgroups nor a watchdog of the Warden whose cgroup parent is `parent` are left
/// once it has ended (its companion or watchdog clears them: allowed a few seconds).
fn assert_nothing_of_warden_left(parent: &str, context: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !run_cgroups_of(parent).is_empty() || !watchdogs_of(parent).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "{context}: left behind: cgroups {:?}, watchdog {:?}",
            run_cgroups_of(parent),
            watchdogs_of(parent)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_killed_warden_leaves_no_run_behind() {
    // SIGKILL (the OOM killer, a supervisor, a crash) gives `warden exec` no chance to
    // end its run: with cgroups its watchdog must (and remove the cgroups, and go
    // itself); with the subreaper, the reaper's parent-death signal — however the run's
    // processes left the session.
    let home = open_gateway_home();
    for (setting, mechanism) in mechanisms(home.path()) {
        let marker = format!("sleep 4714{}{}", std::process::id(), setting.len());
        let mut child = start_with_setsid_children(home.path(), setting, &marker, Stdio::null());
        let parent = format!("warden.{}", child.id());
        let cgroups = mechanism == "cgroup";
        if cgroups {
            let watchdog = watchdogs_of(&parent);
            assert_eq!(watchdog.len(), 1, "one watchdog for warden {}", child.id());
            assert!(
                !run_cgroups_of(&parent).is_empty(),
                "the run's cgroups exist"
            );
        }

        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        assert_none_left(&marker, &format!("{mechanism}, warden killed"));
        if cgroups {
            assert_nothing_of_warden_left(&parent, "warden killed");
        }
    }

    // After a run that ends normally the watchdog goes with its warden (watchdogs of
    // other, live wardens — tests in parallel — stay), and nothing of the run's cgroups
    // is left: a cgroup that still lists a process on its way out (the sandbox's pid 1
    // tearing its namespaces down) is removed after the result went back, by warden or
    // by its watchdog once warden has ended — on the gateway host and in the sandbox.
    for host in ["gateway", "sandbox"] {
        let (parent, out) = exec_naming_its_cgroups(home.path(), &["--host", host, "--", "true"]);
        if host == "sandbox" && out.status.code() != Some(0) {
            eprintln!("SKIPPED (sandbox half): no usable sandbox here: {out:?}");
            continue;
        }
        assert_eq!(out.status.code(), Some(0), "{host}: {out:?}");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !run_cgroups_of(&parent).is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "{host}: cgroups left behind by a finished run: {:?}",
                run_cgroups_of(&parent)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let out = exec(home.path(), "auto", &["--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    for pid in watchdogs_of("") {
        let line = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let line = String::from_utf8_lossy(&line).replace('\0', " ");
        let warden_alive = line
            .split_whitespace()
            .filter_map(|w| w.rsplit('/').next()?.strip_prefix("warden."))
            .filter_map(|p| p.parse::<i32>().ok())
            .all(caps::testkit::process_alive);
        assert!(
            warden_alive || wait_gone(pid),
            "watchdog {pid} outlived its warden: {line}"
        );
    }
}

#[test]
fn a_warden_exec_that_runs_nothing_leaves_no_cgroup_behind() {
    // A run's cgroups are made ahead, on a thread of their own while Warden decides. A
    // command that is refused leaves them unused: they go with Warden all the same —
    // refused at once, and refused after a moment's work (the thread may or may not
    // have made them by then).
    let home = open_gateway_home();
    if !mechanisms(home.path())
        .iter()
        .any(|(_, mechanism)| mechanism == "cgroup")
    {
        return;
    }
    let refused: [&[&str]; 2] = [
        &["--host", "gateway", "--security", "deny", "--", "true"],
        &[
            "--host",
            "gateway",
            "--security",
            "deny",
            "--shell",
            "true && true | cat",
        ],
    ];
    for args in refused {
        let (parent, out) = exec_naming_its_cgroups(home.path(), args);
        assert_eq!(out.status.code(), Some(77), "{args:?}: {out:?}");
        assert_nothing_of_warden_left(&parent, &format!("{args:?}"));
    }
}

#[test]
fn signals_ignored_when_warden_exec_starts_stay_ignored() {
    // `nohup warden exec …` must survive a hang-up, and a script's background job (the
    // shell starts it with SIGINT ignored) an interrupt, as any program does; a signal
    // that was not ignored still ends the run.
    let home = open_gateway_home();
    let start = |ready: &std::path::Path| {
        let script = format!("echo up > {}; sleep 1; echo finished", ready.display());
        Command::new("sh")
            .args(["-c", "trap '' HUP INT; exec \"$0\" \"$@\""])
            .arg(env!("CARGO_BIN_EXE_warden"))
            .args(["exec", "--", "sh", "-c", &script])
            .env("WARDEN_HOME", home.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let wait_ready = |ready: &std::path::Path| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::fs::read_to_string(ready).unwrap_or_default() != "up\n" {
            assert!(
                std::time::Instant::now() < deadline,
                "the command never started"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let ready = tempfile::NamedTempFile::new().unwrap();
    let child = start(ready.path());
    wait_ready(ready.path());
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "finished\n");

    let ready = tempfile::NamedTempFile::new().unwrap();
    let child = start(ready.path());
    wait_ready(ready.path());
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
}

/// A host where Warden may make cgroups with limits, or why not (the limit tests then
/// skip loudly; the fallback is covered above).
fn limits_enforced(home: &std::path::Path) -> bool {
    let out = warden_in(home).args(["doctor", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    if v["containment"]["limitsEnforced"] == true {
        return true;
    }
    eprintln!(
        "SKIPPED: process and memory limits are not enforceable here: {}",
        v["containment"]["detail"]
    );
    false
}

/// Whether host=sandbox works here (bubblewrap and namespaces), or why not.
fn sandbox_usable(home: &std::path::Path) -> bool {
    let out = warden_in(home)
        .args(["exec", "--host", "sandbox", "--", "true"])
        .output()
        .unwrap();
    if out.status.success() {
        return true;
    }
    eprintln!(
        "SKIPPED (sandbox half): host=sandbox is unavailable here: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    false
}

#[test]
fn a_fork_bomb_is_bounded_and_the_host_can_still_start_processes() {
    let home = open_gateway_home();
    if !limits_enforced(home.path()) {
        return;
    }
    support::configure(
        home.path(),
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"full\"\nask = \"off\"\nmax_processes = 64\n[sandbox]\npermission_mode = \"unrestricted\"\n",
        r#"{"version":1,"defaults":{"security":"full","ask":"off","askFallback":"deny"}}"#,
    );
    let mut hosts = vec!["gateway"];
    if sandbox_usable(home.path()) {
        hosts.push("sandbox");
    }
    for host in hosts {
        let marker = format!("forkbomb4714{host}{}", std::process::id());
        // The classic bomb that survives refused forks: every process forks for ever.
        let bomb = warden_in(home.path())
            .args([
                "exec",
                "--host",
                host,
                "--timeout",
                "4s",
                "--",
                "perl",
                "-e",
                "while (1) { fork }",
                &marker,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // While it runs, the host still starts processes: a bounded bomb cannot exhaust
        // the machine's pids.
        std::thread::sleep(Duration::from_millis(1500));
        let bomb_cmdline = format!("perl -e while (1) {{ fork }} {marker}");
        let peak = pids_with_cmdline(&bomb_cmdline).len();
        for _ in 0..20 {
            let status = Command::new("true").status().unwrap();
            assert!(status.success());
        }
        // A host-side /proc listing stays quick (unbounded, the same bomb made one take
        // 10 s): the bound here is only loose enough for a slow CI machine.
        let listing = std::time::Instant::now();
        let entries = std::fs::read_dir("/proc").unwrap().count();
        let took = listing.elapsed();
        eprintln!("{host}: /proc listing ({entries} entries) during the bomb took {took:?}");
        assert!(
            took < Duration::from_secs(1),
            "{host}: /proc listing took {took:?}"
        );
        let out = exec(home.path(), "auto", &["--", "echo", "still here"]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "still here\n");
        let bombed = bomb.wait_with_output().unwrap();
        assert_eq!(bombed.status.code(), Some(124), "{host}: {bombed:?}");
        // Never past the limit (the sandbox's own bubblewrap processes count too). How
        // close it gets depends on the CPU the bomb gets: its runs weigh a quarter of
        // anything else, so on a busy machine it may not reach it while sampled.
        assert!(
            (2..=64).contains(&peak),
            "{host}: {peak} bomb processes at once (limit 64)"
        );
        assert_none_left(&bomb_cmdline, &format!("fork bomb on {host}"));
    }
}

#[test]
fn a_memory_bomb_is_stopped_at_the_limit_and_says_so() {
    let home = open_gateway_home();
    if !limits_enforced(home.path()) {
        return;
    }
    support::configure(
        home.path(),
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"full\"\nask = \"off\"\nmax_memory = \"64MiB\"\n[sandbox]\npermission_mode = \"unrestricted\"\n",
        r#"{"version":1,"defaults":{"security":"full","ask":"off","askFallback":"deny"}}"#,
    );
    let mut hosts = vec!["gateway"];
    if sandbox_usable(home.path()) {
        hosts.push("sandbox");
    }
    // awk doubles a string until it has a gigabyte: far past the limit.
    let bomb = "BEGIN { s = \"x\"; for (i = 0; i < 30; i++) s = s s; print length(s) }";
    for host in hosts {
        let out = exec(
            home.path(),
            "auto",
            &["--host", host, "--timeout", "60s", "--", "awk", bomb],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "{host}: {out:?}");
        assert!(
            stderr.contains("reached its memory limit (64 MiB)"),
            "{host}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{host}: the bomb finished: {out:?}");
    }
    // The limit and where it comes from are in the explanation.
    let out = warden_in(home.path())
        .args(["policy", "explain", "--", "true"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("64 MiB"), "{text}");
}

/// `doctor` says whether each run's start waits for a cgroup migration, and where it
/// does, how to remove the wait — as read from this host's mount table.
#[test]
fn doctor_says_whether_a_runs_start_waits_for_a_cgroup_migration_and_how_to_avoid_it() {
    let home = open_gateway_home();
    let out = warden_in(home.path())
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mechanism = &v["containment"]["mechanism"];
    if mechanism["mechanism"] != "cgroup" {
        eprintln!(
            "SKIPPED: no cgroup containment here ({}); nothing migrates",
            v["containment"]["detail"]
        );
        return;
    }
    let waits = mechanism["startWaitsForMigration"]
        .as_bool()
        .expect("startWaitsForMigration is a boolean");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let favoured = mountinfo.lines().any(|l| {
        l.split_once(" - ").is_some_and(|(_, right)| {
            right.starts_with("cgroup") && right.split([' ', ',']).any(|o| o == "favordynmods")
        })
    });
    if favoured {
        assert!(!waits, "favordynmods is mounted, yet doctor reports a wait");
    }
    let detail = v["containment"]["detail"].as_str().unwrap();
    assert_eq!(detail.contains("favordynmods"), waits, "{detail}");
}

#[test]
fn a_gateway_started_with_sigint_ignored_keeps_ignoring_it() {
    // The same rule for the servers: a gateway started as a script's background job
    // (SIGINT ignored) is not stopped by an interrupt; SIGTERM still stops it; and one
    // started normally stops on SIGINT.
    use std::io::BufRead;
    let home = open_gateway_home();
    let workspace = tempfile::tempdir().unwrap();
    let start = |ignore_int: bool| {
        let trap = if ignore_int { "trap '' INT; " } else { "" };
        let mut child = Command::new("sh")
            .args(["-c", &format!("{trap}exec \"$0\" \"$@\"")])
            .arg(env!("CARGO_BIN_EXE_warden"))
            .args(support::GATEWAY_RUN)
            .arg(workspace.path())
            .env("WARDEN_HOME", home.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Serving once it prints its address.
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        assert!(
            lines.any(|l| l.is_ok_and(|l| l.contains("http://"))),
            "the gateway did not start"
        );
        std::thread::spawn(move || lines.for_each(drop));
        child
    };
    let signal = |child: &std::process::Child, sig| {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap()
    };
    use nix::sys::signal::Signal::{SIGINT, SIGTERM};

    let mut ignoring = start(true);
    signal(&ignoring, SIGINT);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        ignoring.try_wait().unwrap().is_none(),
        "an ignored SIGINT stopped the gateway"
    );
    signal(&ignoring, SIGTERM);
    assert!(ignoring.wait().unwrap().success());

    let mut normal = start(false);
    signal(&normal, SIGINT);
    assert!(normal.wait().unwrap().success());
}

#[test]
fn the_helper_binary_opens_dev_null_on_standard_descriptors_it_lacks() {
    // The helper binary starts at the C entry point, without std's start-up: it must
    // still open /dev/null on a standard descriptor it was started without, as std
    // would, so that no file it opens can take that number. Seen through its reaper
    // subcommand, whose command inherits the descriptors.
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_warden-sandbox-helper"));
    cmd.args([
        caps::process::REAPER_SUBCOMMAND,
        &std::process::id().to_string(),
        "/bin/sh",
        "sh",
        "-c",
        "echo $(readlink /proc/$$/fd/0) $(readlink /proc/$$/fd/1) >&2",
    ])
    .stderr(Stdio::piped());
    // SAFETY: close(2) only, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            nix::libc::close(0);
            nix::libc::close(1);
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "/dev/null /dev/null\n",
        "{out:?}"
    );
}
