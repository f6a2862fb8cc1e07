//! End-to-end: Warden's protected set held by identity, with both namespace builders.
//! The programs Warden runs outside any sandbox (`warden`, `warden-sandbox-helper`) are
//! out of every command's reach even where they lie inside the workspace — the README's
//! quick start builds them under `./target/` — and a running server never executes a
//! helper put in place of the one it opened. The state directory and the programs'
//! directory stay out of reach through a bind mount into the workspace, and no
//! authorized path may be or lie inside the state directory. Hard links a command could
//! write through, and set-id bits a command could leave on the host, are refused.

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Skips are reported on stderr.
#![allow(clippy::print_stderr)]

mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

/// The builders this machine can run (`sandbox.builder` values), each said once.
fn builders() -> Vec<&'static str> {
    if !support::bwrap_usable() {
        return Vec::new();
    }
    let mut out = vec!["bubblewrap"];
    let helper =
        caps::process::OpenedProgram::open(Path::new(env!("CARGO_BIN_EXE_warden"))).unwrap();
    match sandbox::probe::builder_works(helper.exec_path()) {
        Ok(()) => out.push("warden"),
        Err(e) => eprintln!("note: Warden's own builder cannot run here ({e}); bubblewrap only"),
    }
    out
}

/// A base directory under /var/tmp (not /tmp, which the sandbox empties) holding a
/// workspace, a home, a state directory and a copy of Warden's programs.
struct Scratch {
    _base: tempfile::TempDir,
    ws: PathBuf,
    home: PathBuf,
    state: PathBuf,
    /// Where the copied programs are.
    bin: PathBuf,
}

impl Scratch {
    /// The quick start's layout: the programs built under the workspace's
    /// `target/release`, each with cargo's twin hard link in `deps/`.
    fn quick_start() -> Scratch {
        let base = tempfile::Builder::new()
            .prefix("warden-pset-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let b = std::fs::canonicalize(base.path()).unwrap();
        let (ws, home, state) = (b.join("ws"), b.join("home"), b.join("state"));
        let bin = ws.join("target/release");
        std::fs::create_dir_all(bin.join("deps")).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&state).unwrap();
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
        for (name, from) in [
            ("warden", env!("CARGO_BIN_EXE_warden")),
            (
                "warden-sandbox-helper",
                env!("CARGO_BIN_EXE_warden-sandbox-helper"),
            ),
        ] {
            let twin = bin.join("deps").join(format!("{name}-0123abcd"));
            std::fs::copy(from, &twin).unwrap();
            std::fs::hard_link(&twin, bin.join(name)).unwrap();
        }
        Scratch {
            _base: base,
            ws,
            home,
            state,
            bin,
        }
    }

    /// `config.toml`: the builder, commands writable without asking, and `extra`.
    fn configure(&self, builder: &str, extra: &str) {
        std::fs::write(
            self.state.join("config.toml"),
            format!(
                "[sandbox]\nbuilder = \"{builder}\"\npermission_mode = \"unrestricted\"\n{extra}"
            ),
        )
        .unwrap();
    }

    /// The copied `warden`, run in the workspace.
    fn warden(&self) -> Command {
        let mut cmd = Command::new(self.bin.join("warden"));
        cmd.env("WARDEN_LOG", "warn")
            .env("HOME", &self.home)
            .env("WARDEN_HOME", &self.state)
            .current_dir(&self.ws);
        cmd
    }

    fn exec(&self, script: &str) -> Output {
        self.warden()
            .args(["exec", "--shell", script])
            .output()
            .unwrap()
    }

    fn doctor(&self) -> (i32, Value) {
        let out = self.warden().args(["doctor", "--json"]).output().unwrap();
        let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        (out.status.code().unwrap_or(-1), v)
    }

    /// `unshare --mount` running `script` (with `$0` = `arg`) in a private mount
    /// namespace, with this layout's environment.
    fn in_private_mounts(&self, script: &str, arg: &str) -> Output {
        Command::new("unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
                arg,
            ])
            .env("WARDEN_LOG", "warn")
            .env("HOME", &self.home)
            .env("WARDEN_HOME", &self.state)
            .current_dir(&self.ws)
            .output()
            .unwrap()
    }
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// What identifies each entry beneath a directory and would change with any write:
/// inode, mode, size, and modification and change times (to the nanosecond).
type Snapshot = BTreeMap<PathBuf, (u64, u32, u64, i64, i64)>;

/// Every entry beneath `dir` (itself included), as [`Snapshot`] says.
fn snapshot(dir: &Path) -> Snapshot {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p).unwrap();
        if meta.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        }
        let time = |s: i64, ns: i64| s * 1_000_000_000 + ns;
        out.insert(
            p,
            (
                meta.ino(),
                meta.mode(),
                meta.size(),
                time(meta.mtime(), meta.mtime_nsec()),
                time(meta.ctime(), meta.ctime_nsec()),
            ),
        );
    }
    out
}

/// A sandboxed command's moves against the programs' directory (`target/release` of the
/// workspace): change each program in place (also through cargo's twin link), plant a
/// program beside them, rename, remove or swap the directory or its parent for a link,
/// link the programs elsewhere, change their modes.
const PROGRAM_ATTACKS: &[(&str, &str)] = &[
    (
        "write in place",
        "echo evil > target/release/warden-sandbox-helper; echo evil > target/release/warden",
    ),
    (
        "write through the twin link",
        "echo evil > target/release/deps/warden-sandbox-helper-0123abcd",
    ),
    ("plant a new file", "echo evil > target/release/planted"),
    (
        "rename the directory",
        "mv target/release target/old && mkdir -p target/release && echo evil > target/release/warden-sandbox-helper",
    ),
    (
        "rename its parent",
        "mv target t2 && mkdir -p target/release && echo evil > target/release/warden-sandbox-helper",
    ),
    ("remove it", "rm -rf target/release"),
    (
        "swap its parent for a link",
        "mkdir -p decoy/release && rm -rf target; ln -sfn decoy target",
    ),
    (
        "hard-link a program out",
        "ln target/release/warden-sandbox-helper ./h && echo evil > ./h",
    ),
    (
        "change the mode",
        "chmod 777 target/release/warden-sandbox-helper target/release",
    ),
];

#[test]
fn the_quick_start_layout_keeps_warden_s_programs_out_of_every_command_s_reach() {
    let s = Scratch::quick_start();
    for builder in builders() {
        s.configure(builder, "");
        let before = snapshot(&s.bin);
        for (what, script) in PROGRAM_ATTACKS {
            let out = s.exec(&format!("{script}; echo attempted"));
            assert!(
                String::from_utf8_lossy(&out.stdout).contains("attempted"),
                "{builder}, {what}: {}",
                text(&out)
            );
            assert_eq!(
                snapshot(&s.bin),
                before,
                "{builder}, {what}: {}",
                text(&out)
            );
        }
        // Still Warden's own programs running, still sandboxed.
        let out = s.exec("cat /etc/shadow >/dev/null 2>&1 && echo UNCONFINED; echo still-here");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "still-here\n",
            "{builder}: {}",
            text(&out)
        );
        // doctor says where they are and how they are kept.
        let (code, v) = s.doctor();
        assert_eq!(code, 0, "{builder}: {v:#}");
        let programs = v["protected"]["paths"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["guard"] == "read-only")
            .cloned()
            .unwrap_or_else(|| panic!("{builder}: no programs' directory in {v:#}"));
        assert_eq!(programs["path"], json!(s.bin), "{builder}");
        assert_eq!(programs["locked"], json!([s.bin]), "{builder}");
        assert_eq!(
            programs["pinned"],
            json!([s.ws.join("target")]),
            "{builder}"
        );
    }
}

/// A `warden mcp` session over stdio, written to directly: its stdin and a reader of its
/// answers.
struct McpSession {
    child: std::process::Child,
    lines: BufReader<std::process::ChildStdout>,
    next_id: u64,
}

impl McpSession {
    fn start(s: &Scratch) -> McpSession {
        let mut child = s
            .warden()
            .args(["mcp", "--agent", "coder", "--session", "s1", "--workspace"])
            .arg(&s.ws)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap());
        let mut session = McpSession {
            child,
            lines,
            next_id: 1,
        };
        session.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "protected-set-test", "version": "1"}}),
        );
        session.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        session
    }

    fn send(&mut self, message: &Value) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            assert!(
                self.lines.read_line(&mut line).unwrap() > 0,
                "warden mcp ended"
            );
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    }

    /// `exec` of a shell string: the structured result.
    fn exec(&mut self, command: &str) -> Value {
        let v = self.request(
            "tools/call",
            json!({"name": "exec", "arguments": {"command": command}}),
        );
        v["result"]["structuredContent"].clone()
    }
}

impl Drop for McpSession {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_running_server_never_executes_a_helper_put_in_place_of_the_one_it_opened() {
    let s = Scratch::quick_start();
    let helper = s.bin.join("warden-sandbox-helper");
    let original = std::fs::read(&helper).unwrap();
    for builder in builders() {
        s.configure(builder, "");
        // The real helper back in place (the previous builder's turn planted another).
        let fresh = s.bin.join("fresh");
        std::fs::write(&fresh, &original).unwrap();
        std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&fresh, &helper).unwrap();
        let mut mcp = McpSession::start(&s);
        let first = mcp.exec("echo first");
        assert_eq!(first["stdout"], "first\n", "{builder}: {first:#}");
        // The session's own commands cannot replace it.
        let before = snapshot(&s.bin);
        let r = mcp.exec(
            "echo evil > target/release/warden-sandbox-helper; \
             cp /bin/true target/release/warden-sandbox-helper; echo tried",
        );
        assert_eq!(r["stdout"], "tried\n", "{builder}: {r:#}");
        assert_eq!(snapshot(&s.bin), before, "{builder}");
        // Nor can its file tools, which read there but write nothing.
        let v = mcp.request(
            "tools/call",
            json!({"name": "write", "arguments": {
                "path": s.bin.join("warden-sandbox-helper"), "content": "evil"}}),
        );
        assert_eq!(v["result"]["isError"], true, "{builder}: {v:#}");
        assert!(
            v.to_string().contains("holds the programs Warden runs"),
            "{builder}: {v:#}"
        );
        let v = mcp.request(
            "tools/call",
            json!({"name": "read", "arguments": {"path": s.bin.join("deps")}}),
        );
        assert!(
            !v.to_string().contains("Warden protects"),
            "{builder}: {v:#}"
        );
        assert_eq!(snapshot(&s.bin), before, "{builder}");
        // Replaced on disk by someone who can (a new file renamed over it): the server
        // keeps running the helper it opened, and the planted one never runs.
        let marker = s.ws.join("PLANTED-HELPER-RAN");
        let planted = s.bin.join("planted");
        std::fs::write(
            &planted,
            format!("#!/bin/sh\ntouch '{}'\nexit 0\n", marker.display()),
        )
        .unwrap();
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&planted, &helper).unwrap();
        for _ in 0..3 {
            let r = mcp.exec("echo again");
            assert_eq!(r["stdout"], "again\n", "{builder}: {r:#}");
        }
        assert!(!marker.exists(), "{builder}: the planted helper ran");
    }
}

#[test]
fn the_state_and_programs_bound_into_the_workspace_stay_out_of_reach() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: bind mounts in a private mount namespace need root here");
        return;
    }
    let s = Scratch::quick_start();
    std::fs::write(s.state.join("secret-token"), "TOKEN-SECRET").unwrap();
    std::fs::create_dir_all(s.ws.join("alias")).unwrap();
    std::fs::create_dir_all(s.ws.join("programs")).unwrap();
    let binds = format!(
        "mount --bind {state} {ws}/alias && mount --bind {bin} {ws}/programs",
        state = s.state.display(),
        ws = s.ws.display(),
        bin = s.bin.display(),
    );
    let warden = s.bin.join("warden");
    for builder in builders() {
        s.configure(builder, "");
        let bin_before = snapshot(&s.bin);
        let token_before = std::fs::metadata(s.state.join("secret-token")).unwrap();
        let attacks = "cat alias/secret-token; \
             echo '{\"until\": 99999999999999}' > alias/direct-mode.json; \
             echo evil > programs/warden-sandbox-helper; echo evil > programs/planted; \
             mv alias a2; mv programs p2; echo attempted";
        let out = s.in_private_mounts(
            &format!("{binds} && exec {} exec --shell \"$0\"", warden.display()),
            attacks,
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("attempted"), "{builder}: {}", text(&out));
        assert!(
            !stdout.contains("TOKEN-SECRET"),
            "{builder}: {}",
            text(&out)
        );
        assert!(!s.state.join("direct-mode.json").exists(), "{builder}");
        let token = std::fs::metadata(s.state.join("secret-token")).unwrap();
        assert_eq!(
            (token.ino(), token.mtime_nsec()),
            (token_before.ino(), token_before.mtime_nsec()),
            "{builder}"
        );
        assert_eq!(snapshot(&s.bin), bin_before, "{builder}");
        // doctor, in the same layout, names where each shows.
        let out = s.in_private_mounts(
            &format!("{binds} && exec {} doctor --json", warden.display()),
            "",
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let role = |guard: &str| {
            v["protected"]["paths"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["guard"] == guard && p["role"] != "home directory")
                .cloned()
                .unwrap_or_else(|| panic!("{builder}: {guard} in {v:#}"))
        };
        assert_eq!(
            role("hidden")["aliases"],
            json!([s.ws.join("alias")]),
            "{builder}: {v:#}"
        );
        assert_eq!(
            role("read-only")["aliases"],
            json!([s.ws.join("programs")]),
            "{builder}: {v:#}"
        );
    }
}

#[test]
fn no_authorized_path_is_or_lies_inside_the_state_directory() {
    let s = Scratch::quick_start();
    std::fs::create_dir_all(s.state.join("sub")).unwrap();
    let refused = |out: &Output, path: &Path, what: &str| {
        assert_eq!(out.status.code(), Some(125), "{what}: {}", text(out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&path.display().to_string())
                && stderr.contains(&format!("state directory {}", s.state.display())),
            "{what}: {stderr}"
        );
    };
    // The working directory (the default workspace) is the state directory.
    s.configure("auto", "");
    let out = s
        .warden()
        .current_dir(&s.state)
        .args(["exec", "--", "true"])
        .output()
        .unwrap();
    refused(&out, &s.state, "cwd");
    // Named by writable_paths (the directory and one inside it) or readable_extra_paths.
    for (key, path) in [
        ("writable_paths", s.state.clone()),
        ("writable_paths", s.state.join("sub")),
        ("readable_extra_paths", s.state.clone()),
    ] {
        s.configure("auto", &format!("{key} = [\"{}\"]\n", path.display()));
        let out = s.warden().args(["exec", "--", "true"]).output().unwrap();
        refused(&out, &path, key);
        let (code, v) = s.doctor();
        assert_eq!(code, 1, "{key}: {v:#}");
        let named = v["protected"]["problems"].as_array().is_some_and(|p| {
            p.iter()
                .any(|p| p.as_str().unwrap().contains("state directory"))
        });
        assert!(named, "{key}: {v:#}");
    }
    // Its parent is fine: the state directory is hidden in it.
    if !builders().is_empty() {
        let parent = s.state.parent().unwrap();
        s.configure(
            "auto",
            &format!("writable_paths = [\"{}\"]\n", parent.display()),
        );
        let out = s
            .warden()
            .args(["exec", "--shell"])
            .arg(format!(
                "ls {0}; echo x > {0}/direct-mode.json; echo done",
                s.state.display()
            ))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "done\n",
            "{}",
            text(&out)
        );
        assert!(!s.state.join("direct-mode.json").exists());
    }
}

#[test]
fn a_hard_link_a_command_could_write_through_is_refused_with_the_fix() {
    let s = Scratch::quick_start();
    s.configure("auto", "");
    // A second name of config.toml inside the workspace.
    std::fs::hard_link(s.state.join("config.toml"), s.ws.join("cfg")).unwrap();
    let out = s.warden().args(["exec", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("config.toml has 2 hard links") && stderr.contains("cp "),
        "{stderr}"
    );
    let (code, v) = s.doctor();
    assert_eq!(code, 1, "{v:#}");
    std::fs::remove_file(s.ws.join("cfg")).unwrap();
    assert_eq!(s.doctor().0, 0);
    // A third name of the helper, outside its (read-only) directory.
    std::fs::hard_link(s.bin.join("warden-sandbox-helper"), s.ws.join("h")).unwrap();
    let out = s.warden().args(["exec", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("has 3 hard links") && stderr.contains("cargo install"),
        "{stderr}"
    );
    let (code, v) = s.doctor();
    assert_eq!(code, 1, "{v:#}");
    let named = v["protected"]["problems"]
        .as_array()
        .is_some_and(|p| p.iter().any(|p| p.as_str().unwrap().contains("hard links")));
    assert!(named, "{v:#}");
}

#[test]
fn a_sandboxed_command_cannot_leave_a_set_id_file_on_the_host() {
    let s = Scratch::quick_start();
    let made = ["f", "t", "p", "d"];
    for builder in builders() {
        s.configure(builder, "");
        for name in made {
            let _ = std::fs::remove_file(s.ws.join(name));
            let _ = std::fs::remove_dir(s.ws.join(name));
        }
        let script = "touch f && chmod u+s f; chmod g+s f; chmod 6755 f; \
             install -m 4755 /bin/true t; \
             perl -e 'use Fcntl; sysopen(my $f, \"p\", O_CREAT|O_WRONLY, 04755) or print \"perl: $!\\n\"'; \
             mkdir d; chmod g+s d; echo attempted";
        let out = s.exec(script);
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("attempted"),
            "{builder}: {}",
            text(&out)
        );
        for name in made {
            let Ok(meta) = std::fs::metadata(s.ws.join(name)) else {
                continue;
            };
            assert_eq!(
                meta.mode() & 0o6000,
                0,
                "{builder}: {name} has mode {:o}: {}",
                meta.mode(),
                text(&out)
            );
        }
        assert!(s.ws.join("f").exists(), "{builder}: the command ran");
    }
}
