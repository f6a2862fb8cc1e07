//! End-to-end: the sandbox's exec allowlist (`sandbox.exec_allowlist`) for real — both
//! namespace builders (Warden's and bubblewrap, every run made with each and their
//! answers compared), the `noexec` mounts, the helper and the kernel's Landlock
//! `EXECUTE` right. A program copied into the writable workspace or `/tmp` cannot run,
//! not even through the dynamic loader or as a preloaded library; a listed one runs with
//! its libraries; an interpreter that is not listed cannot run a script; per-agent lists
//! and modes reach each run through `warden exec`; `explain` and `doctor` say whether it
//! is in force; and where it cannot be enforced, `required` runs nothing.

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Skips report on stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use caps::{ExecAllowlist, ExecOptions, ExecOutput, Shell};
use sandbox::{LandlockMode, NamespaceSandbox, Profile, SandboxPolicy};
use serde_json::json;
use support::{configure, trusted_dirs, warden_home, warden_in};

/// Skip (loudly) when this machine cannot run bubblewrap, or the kernel has no Landlock
/// to enforce an allowlist with (the fail-closed side is tested without either).
fn usable() -> bool {
    if !support::bwrap_usable() {
        return false;
    }
    if let Err(e) = sandbox::exec_allowlist::kernel_support(sandbox::landlock::abi()) {
        eprintln!("SKIPPED: {e}");
        return false;
    }
    true
}

/// A writable workspace and a sandbox over it.
struct Lab {
    workspace: tempfile::TempDir,
}

impl Lab {
    fn new() -> Lab {
        Lab {
            workspace: tempfile::tempdir().unwrap(),
        }
    }

    fn ws(&self) -> PathBuf {
        std::fs::canonicalize(self.workspace.path()).unwrap()
    }

    fn policy(&self) -> SandboxPolicy {
        SandboxPolicy {
            writable_paths: vec![self.ws()],
            landlock: LandlockMode::Auto,
            ..Default::default()
        }
    }

    fn helper() -> caps::process::OpenedProgram {
        caps::process::OpenedProgram::open(Path::new(env!("CARGO_BIN_EXE_warden"))).unwrap()
    }

    /// bubblewrap's sandbox on a kernel offering Landlock ABI `abi`.
    fn sandbox(&self, abi: i64) -> Arc<NamespaceSandbox> {
        Arc::new(
            NamespaceSandbox::for_landlock_abi(self.policy(), Self::helper(), &trusted_dirs(), abi)
                .unwrap(),
        )
    }

    /// The sandbox built by each builder this machine can run: bubblewrap, and Warden's
    /// own where its probe succeeds.
    fn sandboxes(&self) -> Vec<(&'static str, Arc<NamespaceSandbox>)> {
        let mut out = vec![("bubblewrap", self.sandbox(sandbox::landlock::abi()))];
        let own = NamespaceSandbox::built_by_warden(self.policy(), Self::helper()).unwrap();
        match sandbox::probe::builder_works(own.helper().exec_path()) {
            Ok(()) => out.push(("warden", Arc::new(own))),
            Err(e) => {
                eprintln!("note: Warden's own builder cannot run here ({e}); bubblewrap only")
            }
        }
        out
    }

    /// Run `argv` writable, allowed to execute only `allowed` (`None`: anything), with
    /// every builder: they must agree on the exit code and the output.
    async fn run(&self, allowed: Option<&[&str]>, argv: &[&str]) -> ExecOutput {
        let mut options = ExecOptions::new(self.ws(), Duration::from_secs(60))
            .with_env("PATH", "/usr/local/bin:/usr/bin:/bin");
        options.exec_allowlist = allowed.map(|paths| ExecAllowlist {
            paths: paths.iter().map(PathBuf::from).collect(),
        });
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let mut first: Option<(&str, ExecOutput)> = None;
        for (builder, sandbox) in self.sandboxes() {
            let out = sandbox
                .shell(Profile::Writable)
                .exec(&argv, &options)
                .await
                .unwrap();
            if let Some((other, seen)) = &first {
                assert_eq!(
                    (seen.exit_code(), &seen.stdout),
                    (out.exit_code(), &out.stdout),
                    "{other} and {builder} disagree on {argv:?}: {} / {}",
                    text(seen),
                    text(&out)
                );
            } else {
                first = Some((builder, out));
            }
        }
        first.unwrap().1
    }

    /// Put an executable file at `name` in the workspace.
    fn executable(&self, name: &str, contents: &[u8]) -> PathBuf {
        let path = self.ws().join(name);
        std::fs::write(&path, contents).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        path
    }
}

fn text(out: &ExecOutput) -> String {
    format!("exit {}: {}", out.exit_code(), out.combined)
}

/// `/bin/true`'s real file (merged-/usr systems link /bin to /usr/bin).
fn true_binary() -> PathBuf {
    std::fs::canonicalize("/bin/true").unwrap()
}

#[tokio::test]
async fn a_program_copied_into_the_writable_workspace_or_tmp_cannot_run() {
    if !usable() {
        return;
    }
    let lab = Lab::new();
    let copy = lab.executable("true", &std::fs::read(true_binary()).unwrap());
    let copy = copy.to_string_lossy().into_owned();
    let usr_bin = true_binary()
        .parent()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    // Without an allowlist the copy runs: it is the allowlist that stops it below.
    assert_eq!(lab.run(None, &[&copy]).await.exit_code(), 0);
    let out = lab.run(Some(&[&usr_bin]), &[&copy]).await;
    assert_eq!(out.exit_code(), 126, "{}", text(&out));
    assert!(
        out.stderr.contains("Permission denied") && out.stderr.contains("sandbox.exec_allowlist"),
        "{}",
        text(&out)
    );
    // The same bytes at their listed path run.
    let listed = true_binary().to_string_lossy().into_owned();
    assert_eq!(lab.run(Some(&[&usr_bin]), &[&listed]).await.exit_code(), 0);
    // Written by a listed shell into the workspace or the private /tmp, by the command
    // itself: its descendants are bound too.
    let out = lab
        .run(
            Some(&[&usr_bin]),
            &[
                "/bin/sh",
                "-c",
                "cp /bin/true ./t2 && ./t2; echo ws=$?; cp /bin/true /tmp/t3 && /tmp/t3; echo tmp=$?",
            ],
        )
        .await;
    assert!(
        out.stdout.contains("ws=126") && out.stdout.contains("tmp=126"),
        "{}",
        text(&out)
    );
    assert!(
        lab.ws().join("t2").exists(),
        "the workspace stayed writable"
    );
}

#[tokio::test]
async fn a_listed_program_runs_with_its_libraries_and_an_unlisted_one_does_not() {
    if !usable() {
        return;
    }
    let lab = Lab::new();
    // A dynamically linked program: its loader and libraries come with it.
    let git = Path::new("/usr/bin/git");
    let (program, args, expect): (&str, &[&str], &str) = if git.exists() {
        ("/usr/bin/git", &["--version"], "git version")
    } else {
        eprintln!("note: no /usr/bin/git here, using /usr/bin/ls");
        ("/usr/bin/ls", &["-d", "/"], "/")
    };
    assert!(
        sandbox::exec_allowlist::interpreter(Path::new(program)).is_some(),
        "{program} is dynamically linked"
    );
    let mut argv = vec![program];
    argv.extend_from_slice(args);
    let out = lab.run(Some(&[program]), &argv).await;
    assert_eq!(out.exit_code(), 0, "{}", text(&out));
    assert!(out.stdout.contains(expect), "{}", text(&out));
    // Not listed: refused, though it sits right next to the listed one.
    let out = lab.run(Some(&[program]), &["/usr/bin/id", "-u"]).await;
    assert_eq!(out.exit_code(), 126, "{}", text(&out));
    // An entry through a symlink allows the file it resolves to (/bin/sh → dash or bash).
    let out = lab
        .run(Some(&["/bin/sh"]), &["/bin/sh", "-c", "exit 3"])
        .await;
    assert_eq!(out.exit_code(), 3, "{}", text(&out));
    // Entries that do not exist allow nothing, and do not stop the listed ones.
    let out = lab.run(Some(&["/nonexistent/bin", program]), &argv).await;
    assert_eq!(out.exit_code(), 0, "{}", text(&out));
}

#[tokio::test]
async fn a_script_interpreter_that_is_not_listed_cannot_run_the_script() {
    if !usable() {
        return;
    }
    let lab = Lab::new();
    let script = lab.executable("s.sh", b"#!/bin/sh\necho script ran\n");
    let script_s = script.to_string_lossy().into_owned();
    let sh = std::fs::canonicalize("/bin/sh").unwrap();
    let sh_s = sh.to_string_lossy().into_owned();
    let true_s = true_binary().to_string_lossy().into_owned();
    // `sh script` with sh not listed.
    let out = lab.run(Some(&[&true_s]), &["/bin/sh", &script_s]).await;
    assert_eq!(out.exit_code(), 126, "{}", text(&out));
    assert!(!out.stdout.contains("script ran"));
    // `./script`: the kernel opens both the script and its `#!` interpreter for
    // execution, so both must be listed.
    let out = lab.run(Some(&[&script_s]), &[&script_s]).await;
    assert_eq!(
        out.exit_code(),
        126,
        "interpreter not listed: {}",
        text(&out)
    );
    let out = lab.run(Some(&[&sh_s]), &[&script_s]).await;
    assert_eq!(out.exit_code(), 126, "script not listed: {}", text(&out));
    let out = lab.run(Some(&[&sh_s, &script_s]), &[&script_s]).await;
    assert_eq!(out.stdout, "script ran\n", "{}", text(&out));
    // A listed interpreter reads any script it is handed: reading is not executing.
    let out = lab.run(Some(&[&sh_s]), &["/bin/sh", &script_s]).await;
    assert_eq!(out.stdout, "script ran\n", "{}", text(&out));
    // Another interpreter, not listed, cannot run its script either.
    if Path::new("/usr/bin/perl").exists() {
        let pl = lab.executable("x.pl", b"print \"perl ran\\n\";\n");
        let out = lab
            .run(Some(&[&sh_s]), &["/usr/bin/perl", &pl.to_string_lossy()])
            .await;
        assert_eq!(out.exit_code(), 126, "{}", text(&out));
    } else {
        eprintln!("SKIPPED (part): no /usr/bin/perl for the second interpreter");
    }
}

#[tokio::test]
async fn a_memfd_cannot_become_a_way_to_execute_an_unlisted_program() {
    if !usable() {
        return;
    }
    let perl = Path::new("/usr/bin/perl");
    if !perl.exists() {
        eprintln!("SKIPPED: needs /usr/bin/perl to call memfd_create");
        return;
    }
    let lab = Lab::new();
    // memfd_create(2) is syscall 319 on x86_64 and 279 on aarch64.
    let nr = match std::env::consts::ARCH {
        "x86_64" => 319,
        "aarch64" => 279,
        other => {
            eprintln!("SKIPPED: memfd_create number unknown for {other}");
            return;
        }
    };
    let script = format!(
        r#"my $n = "x"; my $fd = syscall({nr}, $n, 0);
if ($fd < 0) {{ print "memfd refused: $!\n"; exit 0 }}
open(my $s, "<:raw", "/bin/true") or die; local $/; my $b = <$s>;
open(my $d, ">&=", $fd) or die; binmode $d; syswrite($d, $b) or die;
exec("/proc/self/fd/$fd"); print "exec failed: $!\n";
"#
    );
    let pl = lab.executable("m.pl", script.as_bytes());
    let pl = pl.to_string_lossy().into_owned();
    // Without an allowlist the memfd runs /bin/true (the exec replaces perl: no output).
    let out = lab.run(None, &["/usr/bin/perl", &pl]).await;
    assert_eq!(out.stdout, "", "{}", text(&out));
    let out = lab
        .run(Some(&["/usr/bin/perl"]), &["/usr/bin/perl", &pl])
        .await;
    assert!(
        out.stdout
            .contains("memfd refused: Operation not permitted"),
        "{}",
        text(&out)
    );
}

/// A shared library whose constructor prints `INJECTED` (and, for `LD_AUDIT`, an audit
/// interface), built with the host's C compiler into `dir`; `None` (skipped loudly by the
/// caller) without one.
fn injected_library(dir: &Path) -> Option<PathBuf> {
    let src = dir.join("inject.c");
    std::fs::write(
        &src,
        "#include <unistd.h>\n\
         __attribute__((constructor)) static void run(void) { write(2, \"INJECTED\\n\", 9); }\n\
         unsigned int la_version(unsigned int v) { return v; }\n",
    )
    .unwrap();
    let lib = dir.join("inject.so");
    let built = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .is_ok_and(|s| s.success());
    built.then_some(lib)
}

/// The loader trick and its relatives, closed by the `noexec` layer: the dynamic loader
/// must be executable (every dynamically linked program needs it), but run as a program
/// it maps nothing that is not listed — a copy of a program in the workspace or `/tmp`,
/// an unlisted program, an unlisted interpreter — and a library the command wrote loads
/// nothing through `LD_PRELOAD` or `LD_AUDIT`; every listed program still runs.
#[tokio::test]
async fn the_dynamic_loader_maps_nothing_that_is_not_listed() {
    if !usable() {
        return;
    }
    let lab = Lab::new();
    let Some(loader) =
        sandbox::exec_allowlist::interpreter(&std::fs::canonicalize("/bin/sh").unwrap())
    else {
        eprintln!("SKIPPED: /bin/sh is statically linked");
        return;
    };
    let loader = loader.display().to_string();
    let listed: &[&str] = &["/bin/sh", "/usr/bin/cp", "/usr/bin/cat"];
    let moves = [
        (
            "copy in the workspace",
            format!("cp /bin/true ./t && {loader} ./t"),
        ),
        (
            "copy in /tmp",
            format!("cp /bin/true /tmp/t && {loader} /tmp/t"),
        ),
        ("unlisted program", format!("{loader} /usr/bin/id")),
        (
            "unlisted interpreter",
            format!("{loader} /usr/bin/perl -e 1"),
        ),
    ];
    for (what, script) in &moves {
        let script = format!("{script} && echo RAN");
        // The move itself works without an allowlist: it is the allowlist that stops it.
        let free = lab.run(None, &["/bin/sh", "-c", &script]).await;
        if what.contains("perl") && !Path::new("/usr/bin/perl").exists() {
            eprintln!("SKIPPED (part): no /usr/bin/perl for {what}");
            continue;
        }
        assert!(free.stdout.contains("RAN"), "{what}: {}", text(&free));
        let out = lab.run(Some(listed), &["/bin/sh", "-c", &script]).await;
        assert!(!out.stdout.contains("RAN"), "{what}: {}", text(&out));
        assert!(
            out.stderr.contains("failed to map segment"),
            "{what}: {}",
            text(&out)
        );
    }
    // A library the command wrote, preloaded or audited, into a listed program.
    match injected_library(&lab.ws()) {
        None => eprintln!("SKIPPED (part): no C compiler to build a library to inject"),
        Some(lib) => {
            for variable in ["LD_PRELOAD", "LD_AUDIT"] {
                let script = format!(
                    "{variable}={} /usr/bin/cat /dev/null; echo done",
                    lib.display()
                );
                let free = lab.run(None, &["/bin/sh", "-c", &script]).await;
                assert!(
                    free.stderr.contains("INJECTED"),
                    "{variable}: {}",
                    text(&free)
                );
                let out = lab.run(Some(listed), &["/bin/sh", "-c", &script]).await;
                assert!(
                    !out.stderr.contains("INJECTED"),
                    "{variable}: {}",
                    text(&out)
                );
                assert!(out.stdout.contains("done"), "{variable}: {}", text(&out));
            }
        }
    }
    // Every listed program runs, with its loader and libraries.
    let out = lab
        .run(
            Some(listed),
            &[
                "/bin/sh",
                "-c",
                "cp /dev/null ./n && /usr/bin/cat ./n && echo listed-ok",
            ],
        )
        .await;
    assert_eq!(out.stdout, "listed-ok\n", "{}", text(&out));
}

/// A listed program inside the writable workspace is seen read-only for the run: the
/// command cannot turn it into another program and then run that.
#[tokio::test]
async fn a_listed_program_in_the_workspace_cannot_be_changed_during_the_run() {
    if !usable() {
        return;
    }
    let lab = Lab::new();
    let tool = lab.executable("tool", &std::fs::read(true_binary()).unwrap());
    let tool_s = tool.to_string_lossy().into_owned();
    let script = format!(
        "cp /usr/bin/id {tool_s}; echo cp=$?; mv /dev/null {tool_s} 2>/dev/null; {tool_s} && echo still-true"
    );
    let out = lab
        .run(
            Some(&["/bin/sh", "/usr/bin/cp", &tool_s]),
            &["/bin/sh", "-c", &script],
        )
        .await;
    assert!(out.stdout.contains("cp=1"), "{}", text(&out));
    assert!(out.stdout.contains("still-true"), "{}", text(&out));
    assert_eq!(
        std::fs::read(&tool).unwrap(),
        std::fs::read(true_binary()).unwrap()
    );
}

#[tokio::test]
async fn without_landlock_an_allowlist_is_refused_and_nothing_runs() {
    // The policy side (required refuses, best-effort runs without) is tested everywhere in
    // the runner's tests; this is the sandbox's own refusal, on a simulated kernel.
    let Ok(bwrap) = sandbox::namespace::find_bwrap(&trusted_dirs()) else {
        eprintln!("SKIPPED: no bubblewrap (the runner's tests cover the refusal)");
        return;
    };
    if sandbox::probe::namespaces_work(&bwrap).is_err() {
        eprintln!("SKIPPED: bubblewrap cannot build namespaces here");
        return;
    }
    let lab = Lab::new();
    let sandbox = lab.sandbox(0);
    let shell = sandbox.shell(Profile::Writable);
    assert!(
        shell
            .exec_allowlist_support()
            .unwrap_err()
            .contains("Landlock")
    );
    let mut options = ExecOptions::new(lab.ws(), Duration::from_secs(30));
    options.exec_allowlist = Some(ExecAllowlist {
        paths: vec!["/usr/bin".into()],
    });
    let marker = lab.ws().join("ran");
    let argv: Vec<String> = vec![
        "/bin/sh".into(),
        "-c".into(),
        format!("touch {}", marker.display()),
    ];
    let err = shell.exec(&argv, &options).await.unwrap_err();
    assert!(
        err.to_string().contains("cannot be enforced") && err.to_string().contains("Landlock"),
        "{err}"
    );
    assert!(!marker.exists(), "nothing ran");
    // Without an allowlist the same simulated kernel still runs commands (Landlock auto).
    options.exec_allowlist = None;
    assert_eq!(shell.exec(&argv, &options).await.unwrap().exit_code(), 0);
    assert!(marker.exists());
}

#[test]
fn per_agent_lists_and_modes_reach_each_run_through_warden_exec() {
    if !usable() {
        return;
    }
    let home = warden_home();
    let ws = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(ws.path()).unwrap();
    configure(
        home.path(),
        "[sandbox]\npermission_mode = \"unrestricted\"\nexec_allowlist = [\"/bin/sh\", \"/usr/bin/cp\"]\n\
         [[agents.list]]\nid = \"builder\"\nsandbox.exec_allowlist = [\"/usr/bin\"]\n\
         sandbox.exec_allowlist_mode = \"best-effort\"\n\
         [[agents.list]]\nid = \"reviewer\"\nsandbox.permission_mode = \"approval\"\n",
        r#"{"version":1}"#,
    );
    let exec = |args: &[&str]| {
        warden_in(home.path())
            .arg("exec")
            .args(args)
            .current_dir(&ws)
            .output()
            .unwrap()
    };
    let out = exec(&["--", "/usr/bin/id", "-u"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(126), "{stderr}");
    assert!(stderr.contains("sandbox.exec_allowlist"), "{stderr}");
    // The builder's own list replaces the global one.
    let out = exec(&["--agent", "builder", "--", "/usr/bin/id", "-u"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A program the command writes itself never runs.
    let out = exec(&["--shell", "cp /bin/true ./mine && ./mine"]);
    assert_eq!(out.status.code(), Some(126));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Permission denied"));
    // Approval mode's watched first run is restricted too, and a listed shell still works.
    let out = exec(&["--agent", "reviewer", "--shell", "echo listed"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "listed\n");
    let out = exec(&["--agent", "reviewer", "--", "/usr/bin/id"]);
    assert_eq!(out.status.code(), Some(126));
}

#[test]
fn a_bad_entry_is_an_error_naming_the_key_and_nothing_runs() {
    let home = warden_home();
    let ws = tempfile::tempdir().unwrap();
    for (config, key) in [
        (
            "[sandbox]\nexec_allowlist = [\"usr/bin\"]\n",
            "sandbox.exec_allowlist",
        ),
        (
            "[[agents.list]]\nid = \"main\"\nsandbox.exec_allowlist = []\n",
            "agents.list[0].sandbox.exec_allowlist",
        ),
        (
            "[sandbox]\nexec_allowlist = [\"/usr/bin\"]\nexec_allowlist_mode = \"maybe\"\n",
            "sandbox.exec_allowlist_mode",
        ),
    ] {
        configure(home.path(), config, r#"{"version":1}"#);
        let marker = ws.path().join("ran");
        let out = warden_in(home.path())
            .args(["exec", "--", "/bin/sh", "-c"])
            .arg(format!("touch {}", marker.display()))
            .current_dir(ws.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{config}: {stderr}");
        assert!(
            stderr.contains(&format!("`{key}`")) && stderr.contains("config.toml"),
            "{config}: {stderr}"
        );
        assert!(!marker.exists(), "{config}: nothing ran");
        let out = warden_in(home.path())
            .args(["policy", "explain", "--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125));
    }
}

#[test]
fn explain_and_doctor_say_whether_it_is_in_force() {
    let home = warden_home();
    let ws = tempfile::tempdir().unwrap();
    // The container backend cannot enforce it, whatever the kernel: required refuses,
    // best-effort is off — said by explain (text and JSON) and doctor, on any machine.
    configure(
        home.path(),
        "[sandbox]\nbackend = \"container\"\ncontainer.name = \"none\"\nexec_allowlist = [\"/usr/bin/git\"]\n\
         [[agents.list]]\nid = \"lax\"\nsandbox.exec_allowlist_mode = \"best-effort\"\n",
        r#"{"version":1}"#,
    );
    let explain = |args: &[&str]| {
        let out = warden_in(home.path())
            .args(["policy", "explain"])
            .args(args)
            .current_dir(ws.path())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = explain(&["--", "git", "status"]);
    assert!(
        text.contains("exec allow   /usr/bin/git (global); required (built-in default)"),
        "{text}"
    );
    assert!(
        text.contains("exec allowlist: REFUSED") && text.contains("container backend"),
        "{text}"
    );
    let text = explain(&["--agent", "lax", "--", "git", "status"]);
    assert!(text.contains("exec allowlist: OFF: best-effort"), "{text}");
    let text = explain(&["--host", "gateway", "--", "git", "status"]);
    assert!(text.contains("exec allowlist: not applied"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&explain(&["--json", "--", "git", "status"])).unwrap();
    assert_eq!(json["execAllowlistStatus"]["state"], "refused", "{json}");
    assert_eq!(
        json["policy"]["execAllowlist"]["paths"]["value"][0],
        "/usr/bin/git"
    );
    assert_eq!(json["policy"]["execAllowlist"]["mode"]["source"], "default");
    let out = warden_in(home.path())
        .args(["doctor", "--json"])
        .current_dir(ws.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "required and unenforceable");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let lists = &v["execAllowlist"]["lists"];
    assert_eq!(lists[0]["level"], "global");
    assert_eq!(lists[0]["state"], "refused");
    assert_eq!(lists[1]["level"], "agent lax");
    assert_eq!(lists[1]["state"], "off");
    // Where it is in force, both say what a run may execute and map as code.
    if usable() {
        configure(
            home.path(),
            "[sandbox]\nexec_allowlist = [\"/bin/sh\"]\n",
            r#"{"version":1}"#,
        );
        let text = explain(&["--", "true"]);
        let sh = std::fs::canonicalize("/bin/sh").unwrap();
        assert!(
            text.contains(&format!("may execute: {}", sh.display()))
                && text.contains("may map libraries from: /")
                && text.contains("every other mount is noexec"),
            "{text}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&explain(&["--json", "--", "true"])).unwrap();
        assert_eq!(json["execAllowlistStatus"]["executable"][0], json!(sh));
        assert!(
            !json["execAllowlistStatus"]["libraries"]
                .as_array()
                .unwrap()
                .is_empty(),
            "{json}"
        );
        let out = warden_in(home.path())
            .args(["doctor", "--json"])
            .current_dir(ws.path())
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["execAllowlist"]["lists"][0]["executable"][0], json!(sh));
    }
    // Nothing configured: explain prints no exec allowlist and JSON has null.
    configure(home.path(), "", r#"{"version":1}"#);
    let text = explain(&["--", "true"]);
    assert!(!text.contains("exec allow"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&explain(&["--json", "--", "true"])).unwrap();
    assert!(json["policy"]["execAllowlist"].is_null());
    assert!(json.get("execAllowlistStatus").is_none());
    // On bubblewrap with Landlock: active.
    if !usable() {
        return;
    }
    configure(
        home.path(),
        "[sandbox]\nexec_allowlist = [\"/usr/bin/git\"]\n",
        r#"{"version":1}"#,
    );
    let text = explain(&["--", "git", "status"]);
    assert!(
        text.contains(&format!(
            "exec allowlist: active (noexec mounts and Landlock ABI {}",
            sandbox::landlock::abi()
        )),
        "{text}"
    );
    let out = warden_in(home.path())
        .args(["doctor"])
        .current_dir(ws.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("exec allowlist") && text.contains("global: 1 entry, required — active"),
        "{text}"
    );
}
