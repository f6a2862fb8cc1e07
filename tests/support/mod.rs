//! Helpers shared by the end-to-end tests.
// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The `warden` binary under test, with a clean, predictable environment.
pub fn warden() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_warden"));
    cmd.env_remove("WARDEN_HOME").env("WARDEN_LOG", "warn");
    cmd
}

/// A private WARDEN_HOME (0700, as Warden creates its own).
pub fn warden_home() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    dir
}

/// Write `config.toml` and a 0600 `exec-approvals.json` into `home`.
pub fn configure(home: &Path, config: &str, approvals: &str) {
    std::fs::write(home.join("config.toml"), config).unwrap();
    std::fs::write(home.join("exec-approvals.json"), approvals).unwrap();
    std::fs::set_permissions(
        home.join("exec-approvals.json"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
}

/// A home where host=gateway runs everything (security=full, ask=off): for tests of the
/// execution machinery rather than of policy.
pub fn open_gateway_home() -> tempfile::TempDir {
    let home = warden_home();
    configure(
        home.path(),
        "[tools.exec]\nhost = \"gateway\"\nsecurity = \"full\"\nask = \"off\"\n",
        r#"{"version":1,"defaults":{"security":"full","ask":"off","askFallback":"deny"}}"#,
    );
    home
}

/// Every record of the record in `home` that `filter` (`warden log`'s flags) matches, as
/// `warden log --json` prints it.
pub fn log_records(home: &Path, filter: &[&str]) -> Vec<serde_json::Value> {
    let out = warden_in(home)
        .args(["log", "--json"])
        .args(filter)
        .output()
        .unwrap();
    assert_success(&out);
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `warden` with WARDEN_HOME set.
pub fn warden_in(home: &Path) -> Command {
    let mut cmd = warden();
    cmd.env("WARDEN_HOME", home);
    cmd
}

#[allow(unused_imports)] // each test binary uses a different subset
pub use caps::testkit::{
    pids_with_cmdline, pids_with_cmdline_words, process_alive, read_pid, wait_gone,
};

/// A running `warden approvals ui` (the real terminal approver), driven through its
/// stdin, with a line reader on its stdout. Dropping it closes stdin, which stops it.
pub struct TerminalApprover {
    pub child: Child,
    lines: mpsc::Receiver<String>,
    /// The socket it announced.
    pub socket: PathBuf,
}

impl TerminalApprover {
    /// Start it in `home` and wait until it listens.
    pub fn start(home: &Path) -> TerminalApprover {
        let mut child = warden_in(home)
            .args(["approvals", "ui"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if tx.send(line.unwrap_or_default()).is_err() {
                    break;
                }
            }
        });
        let first = lines.recv_timeout(Duration::from_secs(20)).unwrap();
        assert!(first.starts_with("warden approver listening on"), "{first}");
        let socket = PathBuf::from(first.rsplit(' ').next().unwrap());
        TerminalApprover {
            child,
            lines,
            socket,
        }
    }

    /// Lines until (and including) one containing `marker`.
    pub fn read_until(&self, marker: &str) -> Vec<String> {
        let mut got = Vec::new();
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("no {marker:?} in {got:#?}"));
            let done = line.contains(marker);
            got.push(line);
            if done {
                return got;
            }
        }
    }

    /// Type `text` into its terminal.
    pub fn type_text(&mut self, text: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(text.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// Wait for the next prompt (it ends with its `digest:` line), check that it shows
    /// `expect_in_prompt`, and answer `reply`.
    pub fn answer(&mut self, expect_in_prompt: &str, reply: &str) {
        let text = self.read_until("digest:").join("\n");
        assert!(text.contains(expect_in_prompt), "{text}");
        self.type_text(reply);
    }

    /// Close its stdin and check it exits cleanly.
    pub fn stop(&mut self) {
        drop(self.child.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status:?}");
    }
}

impl Drop for TerminalApprover {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// Fail the test, showing the command's stderr, unless it exited 0.
#[track_caller]
pub fn assert_success(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `agent`'s gateway credential in `home` (created on first use).
pub fn gateway_token(home: &Path, agent: &str) -> String {
    let out = warden_in(home)
        .args(["gateway", "token", "--agent", agent])
        .output()
        .unwrap();
    assert_success(&out);
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// `warden` arguments that start a gateway on a free loopback port without hosting the
/// web approver (a test's own approver takes the socket); the workspace follows.
pub const GATEWAY_RUN: [&str; 6] = [
    "gateway",
    "run",
    "--no-approver",
    "--listen",
    "127.0.0.1:0",
    "--workspace",
];

/// A running `warden gateway run` on a free loopback port. Killed when dropped.
pub struct GatewayProcess {
    pub child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl GatewayProcess {
    /// Start it with `home` and `workspace`, plus `extra` arguments.
    pub fn start(home: &Path, workspace: &Path, extra: &[&str]) -> GatewayProcess {
        let mut child = warden_in(home)
            .args(GATEWAY_RUN)
            .arg(workspace)
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .split("http://")
            .nth(1)
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .split('/')
            .next()
            .unwrap()
            .to_owned();
        GatewayProcess { child, addr }
    }

    /// Send a raw HTTP/1.1 request (with `Connection: close`) and return the response.
    pub fn raw(&self, request: &str) -> String {
        let mut stream = std::net::TcpStream::connect(&self.addr).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        response
    }

    /// The gateway's resident memory, in KiB.
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Python with the official MCP SDK (`WARDEN_TEST_PYTHON`, else `target/mcp-sdk`,
/// which `.ci/run` creates), or why not, said loudly.
#[allow(clippy::print_stderr)]
pub fn python_sdk() -> Option<PathBuf> {
    let python = std::env::var_os("WARDEN_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/mcp-sdk/bin/python")
        });
    let works = Command::new(&python)
        .args(["-c", "import mcp, httpx2, jsonschema"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !works {
        eprintln!(
            "SKIPPED: the official MCP Python SDK is not installed at {} (.ci/run: python3 -m venv target/mcp-sdk && target/mcp-sdk/bin/pip install mcp)",
            python.display()
        );
        return None;
    }
    Some(python)
}

/// Where the official MCP TypeScript SDK is installed (`WARDEN_TEST_MCP_TS`, else
/// `target/mcp-ts`, which `.ci/run` fills from tests/clients/package.json with `npm ci`),
/// with `node` to run it, or why not, said loudly.
#[allow(clippy::print_stderr)]
pub fn typescript_sdk() -> Option<PathBuf> {
    let dir = std::env::var_os("WARDEN_TEST_MCP_TS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/mcp-ts"));
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let sdk = dir
        .join("node_modules/@modelcontextprotocol/sdk/package.json")
        .is_file();
    if !node || !sdk {
        eprintln!(
            "SKIPPED: the official MCP TypeScript SDK is not installed in {} (node: {node}; .ci/run: npm ci in target/mcp-ts)",
            dir.display()
        );
        return None;
    }
    Some(dir)
}

/// The directories a trusted bubblewrap may be found in.
pub fn trusted_dirs() -> Vec<PathBuf> {
    sandbox::namespace::TRUSTED_BWRAP_DIRS
        .iter()
        .map(PathBuf::from)
        .collect()
}

/// Whether this machine can run bubblewrap and create its namespaces; says why not on
/// stderr (the caller skips, loudly).
#[allow(clippy::print_stderr)]
pub fn bwrap_usable() -> bool {
    match sandbox::namespace::find_bwrap(&trusted_dirs()) {
        Err(e) => {
            eprintln!("SKIPPED: {}", e.0);
            false
        }
        Ok(b) => match sandbox::probe::namespaces_work(&b) {
            Ok(()) => true,
            Err(e) => {
                eprintln!("SKIPPED: {e}");
                false
            }
        },
    }
}
