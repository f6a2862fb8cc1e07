//! Helpers for the Bridge's end-to-end tests: a gateway process with its Bridge
//! listener, node homes, the MCP client that drives `exec`, and waiting on
//! `warden nodes list`.

// Each test binary uses a different part.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;

use super::support::{configure, warden_home, warden_in};

/// The warden binary's path.
pub fn warden_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_warden"))
}

/// A running `warden gateway run` (killed on drop).
pub struct Gateway {
    pub child: Child,
    /// `127.0.0.1:PORT` of the MCP endpoint.
    pub http: String,
    /// The Bridge listener, if one was asked for.
    pub bridge: Option<String>,
    /// Everything it printed on stderr so far.
    pub stderr: Arc<Mutex<Vec<String>>>,
}

impl Gateway {
    /// `warden gateway run` in `home`, with `extra` arguments, started through `prefix`
    /// (e.g. `ip netns exec NS`).
    pub fn start_with(prefix: &[&str], home: &Path, workspace: &Path, extra: &[&str]) -> Gateway {
        let mut cmd = match prefix.split_first() {
            Some((p, rest)) => {
                let mut c = Command::new(p);
                c.args(rest).arg(warden_bin());
                c
            }
            None => Command::new(warden_bin()),
        };
        cmd.env_remove("WARDEN_HOME")
            .env("WARDEN_HOME", home)
            .env("WARDEN_LOG", "warden=info,bridge=info")
            .args(super::support::GATEWAY_RUN)
            .arg(workspace)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let keep = Arc::clone(&stderr);
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                keep.lock().unwrap().push(line);
            }
        });
        let (tx, rx) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let wants_bridge = extra.contains(&"--bridge-listen");
        let (mut http, mut bridge) = (None, None);
        while http.is_none() || (wants_bridge && bridge.is_none()) {
            let line = rx
                .recv_timeout(Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("gateway did not start: {:#?}", stderr.lock().unwrap()));
            if let Some(rest) = line.split("http://").nth(1) {
                http = Some(rest.split('/').next().unwrap().to_owned());
            }
            if let Some(rest) = line
                .split("bridge listening on ")
                .nth(1)
                .and_then(|r| r.split("://").nth(1))
            {
                bridge = Some(rest.split('/').next().unwrap().to_owned());
            }
        }
        Gateway {
            child,
            http: http.unwrap(),
            bridge,
            stderr,
        }
    }

    /// Without a prefix.
    pub fn start(home: &Path, workspace: &Path, extra: &[&str]) -> Gateway {
        Gateway::start_with(&[], home, workspace, extra)
    }

    /// The Bridge certificate's fingerprint it printed.
    pub fn fingerprint(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(fp) = self.stderr.lock().unwrap().iter().find_map(|l| {
                l.split("fingerprint ")
                    .nth(1)
                    .map(|r| r.split(' ').next().unwrap().to_owned())
            }) {
                return fp;
            }
            assert!(Instant::now() < deadline, "no fingerprint printed");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stderr so far, joined.
    pub fn log(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    /// Whether stderr says `needle` within `within` (it is read by a thread, so a line
    /// the gateway wrote just before what the test saw may not be in `log` yet).
    #[allow(dead_code)] // not every test binary waits for its log
    pub fn log_says(&self, needle: &str, within: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + within;
        loop {
            if self.log().contains(needle) {
                return true;
            }
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A home with `config` and `approvals`.
pub fn home_with(config: &str, approvals: &str) -> tempfile::TempDir {
    let home = warden_home();
    configure(home.path(), config, approvals);
    home
}

/// An MCP client of `gateway` with `token`.
pub async fn client(http: &str, token: &str) -> RunningService<RoleClient, ()> {
    let config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            format!("http://{http}/mcp"),
        )
        .auth_header(token);
    ().serve(StreamableHttpClientTransport::from_config(config))
        .await
        .unwrap()
}

/// Call `exec` with `args`; the structured result.
pub async fn exec(client: &rmcp::service::Peer<RoleClient>, args: Value) -> Value {
    let r: CallToolResult = client
        .call_tool(
            CallToolRequestParams::new("exec").with_arguments(args.as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    r.structured_content.unwrap()
}

/// The pid a run writes to `pidfile` once it has started (a remote run: up to 20 s).
pub async fn started_pid(pidfile: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(pid) = std::fs::read_to_string(pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(Instant::now() < deadline, "the run never started");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Start a run on node `node_id` through `client` that sleeps with its pid in `pidfile`
/// (a path the node writes), `cut` the connection once it runs, and check what must
/// follow: the call fails naming the disconnected node, and the node kills the run's
/// whole tree. How long the caller waited after the cut.
pub async fn cut_mid_run(
    client: &rmcp::service::Peer<RoleClient>,
    node_id: &str,
    pidfile: &Path,
    cut: impl FnOnce(),
) -> Duration {
    let script = format!("sleep 600 & echo $! > {}; wait", pidfile.display());
    let running = tokio::spawn({
        let client = client.clone();
        async move { exec(&client, serde_json::json!({"command": script})).await }
    });
    let pid = started_pid(pidfile).await;
    let at = Instant::now();
    cut();
    let r = running.await.unwrap();
    let took = at.elapsed();
    assert_eq!(r["status"], "error", "{r:#}");
    let wanted = format!("node {node_id} disconnected");
    assert!(r["error"].as_str().unwrap().contains(&wanted), "{r:#}");
    assert!(
        super::support::wait_gone(pid),
        "the node's run tree outlived its connection"
    );
    took
}

/// `warden nodes list --json` of `home`.
pub fn nodes(home: &Path) -> Value {
    let out = warden_in(home)
        .args(["nodes", "list", "--json"])
        .output()
        .unwrap();
    super::support::assert_success(&out);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Wait until node `id` of the gateway in `home` is (or is not) connected; its entry.
pub fn wait_node(home: &Path, id: &str, connected: bool, within: Duration) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let all = nodes(home);
        if let Some(n) = all["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["id"] == id)
            && n["connected"].as_bool() == Some(connected)
        {
            return n.clone();
        }
        assert!(
            Instant::now() < deadline,
            "node {id} never became connected={connected}: {all:#}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Add stdio node `id` running `command` to the gateway in `gw`, and store its token in
/// the node home `node`.
pub fn add_stdio_node(gw: &Path, node: &Path, id: &str, name: &str, command: &[&str]) {
    let out = warden_in(gw)
        .args(["nodes", "add", id, "--name", name, "--"])
        .args(command)
        .output()
        .unwrap();
    super::support::assert_success(&out);
    let token = String::from_utf8(out.stdout).unwrap();
    pair_stdio(node, id, &token);
}

/// `warden node pair --stdio --id ID` in `node`, fed `token`.
pub fn pair_stdio(node: &Path, id: &str, token: &str) {
    use std::io::Write;
    let mut child = warden_in(node)
        .args(["node", "pair", "--stdio", "--id", id, "--name", id])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(token.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    super::support::assert_success(&out);
}

/// `env WARDEN_HOME=NODE warden node stdio` as a command line.
pub fn local_stdio_command(node: &Path) -> Vec<String> {
    vec![
        "/usr/bin/env".into(),
        format!("WARDEN_HOME={}", node.display()),
        warden_bin().display().to_string(),
        "node".into(),
        "stdio".into(),
        "--heartbeat".into(),
        "0.5".into(),
    ]
}

/// A fresh workspace directory (canonical).
pub fn workspace() -> (tempfile::TempDir, PathBuf) {
    let ws = tempfile::tempdir().unwrap();
    let p = std::fs::canonicalize(ws.path()).unwrap();
    (ws, p)
}

/// A free loopback port (bound and released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
