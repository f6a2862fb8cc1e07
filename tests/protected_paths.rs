//! End-to-end: nothing a sandboxed command or a file tool does can change what Warden
//! reads to decide — its state directory (config, approvals file, direct-mode switch,
//! tokens) and the approver socket's directory — whatever the nesting of the state
//! directory, the home and the workspace. For every layout and every ancestor of every
//! protected directory, a real `warden exec` tries a rename, a remove-and-recreate, a
//! symlink swap and hard links, then plants a direct-mode switch, a permissive config
//! and approvals file; the file tools (`warden mcp`) try the same through symlinks the
//! command left behind. Afterwards the protected directories are byte-for-byte and
//! inode-for-inode what they were, and commands are still sandboxed.

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// Skips are reported on stderr.
#![allow(clippy::print_stderr)]

mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use support::warden;

/// Skip (loudly) when this machine cannot run bubblewrap.
fn sandbox_usable() -> bool {
    let out = warden().args(["doctor", "--json"]).output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    if v["hosts"]["sandbox"]["available"] == true {
        return true;
    }
    eprintln!(
        "SKIPPED: no usable sandbox here: {}",
        v["hosts"]["sandbox"]["detail"]
    );
    false
}

/// One arrangement of workspace, home, state directory and socket directory.
struct Layout {
    name: &'static str,
    /// The base every path lives under (removed at the end).
    _base: tempfile::TempDir,
    workspace: PathBuf,
    home: PathBuf,
    /// WARDEN_HOME, or `None` for the default `~/.warden`.
    warden_home: Option<PathBuf>,
    /// The approver socket, when configured outside the state directory.
    socket: Option<PathBuf>,
}

impl Layout {
    fn state(&self) -> PathBuf {
        self.warden_home
            .clone()
            .unwrap_or_else(|| self.home.join(".warden"))
    }

    /// The directories Warden reads from.
    fn protected(&self) -> Vec<PathBuf> {
        let mut dirs = vec![self.state()];
        if let Some(socket) = &self.socket {
            dirs.push(socket.parent().unwrap().to_path_buf());
        }
        dirs
    }

    fn command(&self) -> Command {
        let mut cmd = warden();
        cmd.env("HOME", &self.home).current_dir(&self.workspace);
        if let Some(h) = &self.warden_home {
            cmd.env("WARDEN_HOME", h);
        }
        cmd
    }
}

/// Build `name`'s layout: paths relative to a fresh base under /var/tmp (not /tmp, which
/// the sandbox empties, and not /home, so a home here is hidden like a service account's).
fn layout(name: &'static str) -> Layout {
    let base = tempfile::Builder::new()
        .prefix("warden-protect-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let b = std::fs::canonicalize(base.path()).unwrap();
    let (workspace, home, warden_home, socket) = match name {
        "state at depth 1" => (b.join("ws"), b.join("u"), Some(b.join("ws/.warden")), None),
        "state at depth 2" => (
            b.join("ws"),
            b.join("u"),
            Some(b.join("ws/a/.warden")),
            None,
        ),
        "state at depth 3" => (
            b.join("ws"),
            b.join("u"),
            Some(b.join("ws/a/b/.warden")),
            None,
        ),
        "home inside the workspace" => (b.join("ws"), b.join("ws/home/u"), None, None),
        "workspace inside home" => (b.join("u/proj"), b.join("u"), None, None),
        "workspace is home, state in .config" => (
            b.join("u"),
            b.join("u"),
            Some(b.join("u/.config/warden")),
            None,
        ),
        "custom socket dir in the workspace" => (
            b.join("ws"),
            b.join("u"),
            Some(b.join("state")),
            Some(b.join("ws/run/approver/sock")),
        ),
        other => panic!("unknown layout {other}"),
    };
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let l = Layout {
        name,
        _base: base,
        workspace,
        home,
        warden_home,
        socket,
    };
    let state = l.state();
    std::fs::create_dir_all(&state).unwrap();
    std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    // Commands may write (the strongest attacker), and everything else is denied.
    std::fs::write(
        state.join("config.toml"),
        "[sandbox]\npermission_mode = \"unrestricted\"\n",
    )
    .unwrap();
    let mut approvals = json!({"version": 1, "defaults": {"security": "deny"}});
    if let Some(socket) = &l.socket {
        approvals["socket"] = json!({"path": socket});
    }
    let file = state.join("exec-approvals.json");
    std::fs::write(&file, approvals.to_string()).unwrap();
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    std::fs::write(state.join("gateway-token"), "ORIGINAL-TOKEN").unwrap();
    if let Some(socket) = &l.socket {
        // As a running approver leaves it.
        let dir = socket.parent().unwrap();
        std::fs::create_dir_all(dir).unwrap();
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    }
    std::fs::write(l.workspace.join("planted"), "PLANTED").unwrap();
    l
}

const LAYOUTS: &[&str] = &[
    "state at depth 1",
    "state at depth 2",
    "state at depth 3",
    "home inside the workspace",
    "workspace inside home",
    "workspace is home, state in .config",
    "custom socket dir in the workspace",
];

/// Everything under `dir` (and `dir` itself): kind, inode, mode and contents.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, u32, String)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            out.insert(p, (0, 0, "<missing>".to_owned()));
            continue;
        };
        let data = if meta.is_file() {
            String::from_utf8_lossy(&std::fs::read(&p).unwrap_or_default()).into_owned()
        } else if meta.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                let child = e.unwrap().path();
                // Warden's own cache (the remembered namespace probe) is written by Warden
                // when the first sandboxed command runs. It lies in the protected state
                // directory like the rest, but its appearance is not an attack.
                // The record (`audit/`) grows with every command, by Warden's own hand:
                // that it was not touched otherwise is checked by `warden log --verify`
                // (see `assert_untouched`).
                if p == dir
                    && child
                        .file_name()
                        .is_some_and(|n| n == "cache" || n == "audit")
                {
                    continue;
                }
                stack.push(child);
            }
            String::new()
        } else {
            "<other>".to_owned()
        };
        out.insert(p, (meta.ino(), meta.mode(), data));
    }
    out
}

/// Ancestors of `path` worth attacking: itself and its parents below the base's parent.
fn ancestors(path: &Path) -> Vec<PathBuf> {
    path.ancestors()
        .filter(|a| a.components().count() > 3)
        .map(Path::to_path_buf)
        .collect()
}

fn q(p: &Path) -> String {
    format!("'{}'", p.display())
}

/// The moves against one ancestor `a` of the protected directory `p`, each followed by
/// planting the files Warden reads at `p`.
fn attacks(a: &Path, p: &Path, ws: &Path) -> Vec<(&'static str, String)> {
    let until = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 3_600_000)
        .to_string();
    let plant = format!(
        "mkdir -p {p}; echo '{{\"until\": {until}}}' > {p}/direct-mode.json; chmod 600 {p}/direct-mode.json; \
         printf '[tools.exec]\\nhost = \"gateway\"\\n' > {p}/config.toml; \
         echo '{{\"version\":1,\"defaults\":{{\"security\":\"full\",\"ask\":\"off\"}}}}' > {p}/exec-approvals.json; \
         ln -f {ws}/planted {p}/gateway-token; ln -f {p}/exec-approvals.json {ws}/stolen; \
         ln -sf {ws}/planted {p}/sock; true",
        p = q(p),
        ws = q(ws),
    );
    let decoy = ws.join("decoy");
    vec![
        ("rename", format!("mv {a} {a}.moved; {plant}", a = q(a))),
        (
            "remove and recreate",
            format!("rm -rf {a}; rmdir {a}; {plant}", a = q(a)),
        ),
        (
            "symlink swap",
            format!(
                "mkdir -p {d}; mv {a} {a}.old; rm -rf {a}; ln -sfn {d} {a}; {plant}",
                a = q(a),
                d = q(&decoy)
            ),
        ),
        (
            "hard links",
            format!(
                "ln {a}/config.toml {ws}/hl; ln {ws}/planted {a}/config.toml; {plant}",
                a = q(a),
                ws = q(ws)
            ),
        ),
    ]
}

/// `warden exec --json` of `script`; returns the report.
fn exec(l: &Layout, script: &str) -> Value {
    let out = l
        .command()
        .args(["exec", "--json", "--shell", script])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "{}: no JSON report: {} {}",
            l.name,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// After an attack: nothing Warden reads changed, and commands are still sandboxed.
fn assert_untouched(
    l: &Layout,
    before: &BTreeMap<PathBuf, BTreeMap<PathBuf, (u64, u32, String)>>,
    what: &str,
) {
    for dir in l.protected() {
        assert_eq!(
            &snapshot(&dir),
            &before[&dir],
            "{}: {what} changed {}",
            l.name,
            dir.display()
        );
    }
    let verified = l.command().args(["log", "--verify"]).output().unwrap();
    assert!(
        verified.status.success(),
        "{}: {what} broke the record: {}",
        l.name,
        String::from_utf8_lossy(&verified.stdout)
    );
    let report = exec(
        l,
        "cat /etc/shadow >/dev/null 2>&1 && echo UNCONFINED; true",
    );
    assert_eq!(
        report["decision"]["reason"], "sandboxed",
        "{}: after {what}: {report:#}",
        l.name
    );
    assert!(
        !report["stdout"]
            .as_str()
            .unwrap_or("")
            .contains("UNCONFINED"),
        "{}: after {what}: {report:#}",
        l.name
    );
}

#[test]
fn no_command_can_rename_recreate_swap_or_link_its_way_into_what_warden_reads() {
    if !sandbox_usable() {
        return;
    }
    let mut tried = 0;
    for name in LAYOUTS {
        let probe = layout(name);
        for (t, target) in probe.protected().iter().enumerate() {
            for (depth, ancestor) in ancestors(target).iter().enumerate() {
                for (m, (move_name, _)) in attacks(ancestor, target, &probe.workspace)
                    .into_iter()
                    .enumerate()
                {
                    // A fresh layout per attempt: a partly successful move must not hide
                    // the next one.
                    let l = layout(name);
                    let target = &l.protected()[t];
                    let ancestor = &ancestors(target)[depth];
                    let (_, script) = attacks(ancestor, target, &l.workspace).swap_remove(m);
                    let before: BTreeMap<_, _> = l
                        .protected()
                        .into_iter()
                        .map(|d| (d.clone(), snapshot(&d)))
                        .collect();
                    let report = exec(&l, &script);
                    assert_ne!(
                        report["status"], "denied",
                        "{name}: the attack did not even run: {report:#}"
                    );
                    let what = format!("{move_name} of {}", ancestor.display());
                    assert_untouched(&l, &before, &what);
                    tried += 1;
                }
            }
        }
    }
    assert!(tried >= 40, "only {tried} attacks were tried");
}

/// A minimal MCP client over `warden mcp`'s stdio: one JSON-RPC line each way.
struct Mcp {
    child: std::process::Child,
    reader: BufReader<std::process::ChildStdout>,
    next_id: u64,
}

impl Mcp {
    fn start(l: &Layout) -> Mcp {
        let mut child = l
            .command()
            .args(["mcp", "--agent", "main", "--workspace"])
            .arg(&l.workspace)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let reader = BufReader::new(child.stdout.take().unwrap());
        let mut mcp = Mcp {
            child,
            reader,
            next_id: 1,
        };
        mcp.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "e2e", "version": "0"}}),
        );
        mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    fn send(&mut self, v: &Value) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let mut line = String::new();
            assert!(
                self.reader.read_line(&mut line).unwrap() > 0,
                "warden mcp exited"
            );
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    }

    fn tool(&mut self, name: &str, args: Value) -> Value {
        self.request("tools/call", json!({"name": name, "arguments": args}))
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

#[test]
fn no_file_tool_reaches_what_warden_reads_by_any_path() {
    if !sandbox_usable() {
        return;
    }
    for name in LAYOUTS {
        let l = layout(name);
        let ws = &l.workspace;
        // The command leaves symlinks into every protected directory behind (it cannot
        // see them, but the file tools run outside the sandbox).
        let mut links = Vec::new();
        for (i, dir) in l.protected().iter().enumerate() {
            let link = format!("link{i}");
            let rel = format!("rel{i}");
            std::os::unix::fs::symlink(dir, ws.join(&link)).unwrap();
            let relative = pathdiff(dir, ws);
            std::os::unix::fs::symlink(&relative, ws.join(&rel)).unwrap();
            std::os::unix::fs::symlink(dir.join("config.toml"), ws.join(format!("file{i}")))
                .unwrap();
            links.extend([link, rel, format!("file{i}")]);
        }
        let before: BTreeMap<_, _> = l
            .protected()
            .into_iter()
            .map(|d| (d.clone(), snapshot(&d)))
            .collect();
        let mut mcp = Mcp::start(&l);
        let mut targets: Vec<String> = Vec::new();
        for dir in l.protected() {
            targets.push(dir.display().to_string());
            if let Ok(rel) = dir.strip_prefix(ws) {
                targets.push(rel.display().to_string());
            }
        }
        targets.extend(links.iter().cloned());
        for t in &targets {
            let writes = [
                (
                    "write",
                    json!({"path": format!("{t}/direct-mode.json"), "content": "{\"until\": 99999999999999}"}),
                ),
                (
                    "write",
                    json!({"path": format!("{t}/config.toml"), "content": "[tools.exec]\nhost = \"gateway\"\n"}),
                ),
                (
                    "write",
                    json!({"path": format!("{t}/new/deeper/x"), "content": "x"}),
                ),
                ("write", json!({"path": t, "content": "x"})),
                (
                    "edit",
                    json!({"path": format!("{t}/config.toml"), "old_string": "unrestricted", "new_string": "readonly"}),
                ),
                (
                    "edit",
                    json!({"path": t, "old_string": "unrestricted", "new_string": "readonly"}),
                ),
            ];
            for (tool, args) in writes {
                let r = mcp.tool(tool, args.clone());
                assert_eq!(
                    r["result"]["isError"], true,
                    "{name}: {tool} {args} was not refused: {r:#}"
                );
            }
            for (tool, args) in [
                ("read", json!({"path": format!("{t}/exec-approvals.json")})),
                ("read", json!({"path": format!("{t}/gateway-token")})),
                ("read", json!({"path": t})),
                ("list", json!({"path": t})),
                ("grep", json!({"pattern": "TOKEN|version", "path": t})),
            ] {
                let r = mcp.tool(tool, args.clone());
                let text = r.to_string();
                assert!(
                    !text.contains("ORIGINAL-TOKEN") && !text.contains("\\\"version\\\""),
                    "{name}: {tool} {args} leaked: {r:#}"
                );
            }
        }
        // grep over the whole workspace never shows the state either.
        let r = mcp.tool("grep", json!({"pattern": "ORIGINAL-TOKEN"}));
        assert!(!r.to_string().contains("ORIGINAL-TOKEN:"), "{name}: {r:#}");
        drop(mcp);
        for dir in l.protected() {
            assert_eq!(
                snapshot(&dir),
                before[&dir],
                "{name}: the file tools changed {}",
                dir.display()
            );
        }
    }
}

/// `to` relative to the directory `from` (both absolute, canonical).
fn pathdiff(to: &Path, from: &Path) -> PathBuf {
    let common = to
        .components()
        .zip(from.components())
        .take_while(|(a, b)| a == b)
        .count();
    let mut out = PathBuf::new();
    for _ in from.components().skip(common) {
        out.push("..");
    }
    for c in to.components().skip(common) {
        out.push(c);
    }
    out
}

#[test]
fn a_layout_a_command_could_redirect_is_refused_with_the_fix() {
    // WARDEN_HOME reached through a symlink inside the workspace: a command could point
    // the link at a directory of its own. Refused before anything runs, on every host.
    let base = tempfile::Builder::new()
        .prefix("warden-protect-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let b = std::fs::canonicalize(base.path()).unwrap();
    let ws = b.join("ws");
    std::fs::create_dir_all(ws.join("real/.warden")).unwrap();
    std::os::unix::fs::symlink("real", ws.join("link")).unwrap();
    let home = ws.join("link/.warden");
    for args in [
        &["exec", "--", "true"][..],
        &["exec", "--host", "gateway", "--", "true"],
    ] {
        let out = warden()
            .env("WARDEN_HOME", &home)
            .env("HOME", &b)
            .current_dir(&ws)
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {stderr}");
        assert!(
            stderr.contains("symlink")
                && stderr.contains(&ws.join("real/.warden").display().to_string()),
            "{stderr}"
        );
    }
    let out = warden()
        .env("WARDEN_HOME", &home)
        .env("HOME", &b)
        .current_dir(&ws)
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["protected"]["ok"], false, "{v:#}");
    assert_ne!(out.status.code(), Some(0));
    // With the real path, doctor lists what is protected and what is pinned.
    let out = warden()
        .env("WARDEN_HOME", ws.join("real/.warden"))
        .env("HOME", &b)
        .current_dir(&ws)
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["protected"]["ok"], true, "{v:#}");
    let state = &v["protected"]["paths"][0];
    assert_eq!(state["path"], json!(ws.join("real/.warden")), "{v:#}");
    assert_eq!(state["insideWritable"], json!(ws), "{v:#}");
    assert_eq!(state["pinned"], json!([ws.join("real")]), "{v:#}");
}

#[tokio::test]
async fn a_missing_protected_directory_in_a_writable_path_fails_closed() {
    use caps::Shell;
    if !sandbox_usable() {
        return;
    }
    // Nothing there to hide, but a command could create it: the sandbox refuses to start
    // rather than let it.
    let ws = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(ws.path()).unwrap();
    let policy = sandbox::SandboxPolicy {
        writable_paths: vec![ws.clone()],
        hidden_paths: vec![ws.join("a/.warden")],
        ..Default::default()
    };
    let dirs: Vec<PathBuf> = sandbox::namespace::TRUSTED_BWRAP_DIRS
        .iter()
        .map(PathBuf::from)
        .collect();
    let bwrap = std::sync::Arc::new(
        sandbox::NamespaceSandbox::new(
            policy,
            caps::process::OpenedProgram::open(Path::new(env!("CARGO_BIN_EXE_warden"))).unwrap(),
            &dirs,
        )
        .unwrap(),
    );
    let opts = caps::ExecOptions::new(&ws, std::time::Duration::from_secs(30));
    let argv = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        "mkdir -p a/.warden".to_owned(),
    ];
    let err = bwrap
        .shell(sandbox::Profile::Writable)
        .exec(&argv, &opts)
        .await
        .unwrap_err();
    assert!(
        err.is_denied() && err.to_string().contains("does not exist"),
        "{err}"
    );
    assert!(!ws.join("a").exists());
    // The read-only profile cannot create it, so it runs.
    let out = bwrap
        .shell(sandbox::Profile::ReadOnly)
        .exec(&argv, &opts)
        .await
        .unwrap();
    assert!(!out.status.success() && !ws.join("a").exists(), "{out:?}");
}
