//! The README, run as written, the way a new user meets it: a fresh home (no
//! `~/.warden`), the binaries under test on `PATH` in place of `cargo install`, and a
//! real terminal where the README's commands ask questions (`warden init`'s, and the
//! inline approval prompt of `warden exec`). Then every client setup the README shows
//! and every file `warden init` writes, started exactly as a client would start it
//! (the command and arguments for stdio, the URL and header for HTTP), answers an
//! `exec`; the README's `curl` session runs as a script; its gateway-host steps and its
//! `config.toml` example work pasted as they are.
//!
//! What cannot run here is named where it is skipped: `cargo install` (the binaries under
//! test stand in for it), `warden approvals ui` (a terminal approver that runs until
//! stopped: its own tests drive it), and the clients' own programs (not installed on a
//! test machine: their configuration is what is tested, by doing what they do with it).

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// What is skipped is said on stderr.
#![allow(clippy::print_stderr)]

mod support;
#[path = "support/terminal.rs"]
mod terminal;

use std::path::{Path, PathBuf};
use std::process::Command;

use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};
use terminal::Terminal;

/// The README's text.
fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).unwrap()
}

/// The first fenced block of language `lang` after the first occurrence of `marker`.
fn block_after(readme: &str, marker: &str, lang: &str) -> String {
    let at = readme
        .find(marker)
        .unwrap_or_else(|| panic!("the README no longer has {marker:?}"));
    let fence = format!("```{lang}\n");
    let start = at
        + readme[at..]
            .find(&fence)
            .unwrap_or_else(|| panic!("no ```{lang} block after {marker:?}"))
        + fence.len();
    let len = readme[start..].find("```").unwrap();
    readme[start..start + len].to_owned()
}

/// A new user: an empty home directory and a project to work in, with the binaries
/// under test first on `PATH`.
struct NewUser {
    home: tempfile::TempDir,
    workspace: tempfile::TempDir,
    path: String,
}

impl NewUser {
    fn new() -> NewUser {
        let bin = Path::new(env!("CARGO_BIN_EXE_warden")).parent().unwrap();
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
        );
        let workspace = tempfile::tempdir().unwrap();
        let ws = workspace.path();
        std::fs::write(
            ws.join("Makefile"),
            "all:\n\techo built > built.txt\ntest:\n\tgrep -q built built.txt && echo tests passed\n",
        )
        .unwrap();
        let git = Command::new("git")
            .args(["init", "-q"])
            .current_dir(ws)
            .status();
        assert!(git.is_ok_and(|s| s.success()), "git init failed");
        NewUser {
            home: tempfile::tempdir().unwrap(),
            workspace,
            path,
        }
    }

    fn ws(&self) -> PathBuf {
        std::fs::canonicalize(self.workspace.path()).unwrap()
    }

    /// `~/.warden`, where Warden keeps its state when `WARDEN_HOME` is unset.
    fn warden_home(&self) -> PathBuf {
        self.home.path().join(".warden")
    }

    /// `bash -c LINE` as this user, in the workspace.
    fn shell(&self, line: &str) -> Command {
        let mut cmd = Command::new("bash");
        cmd.args(["-c", line])
            .current_dir(self.ws())
            .env_clear()
            .env("HOME", self.home.path())
            .env("PATH", &self.path)
            .env("LANG", "C.UTF-8")
            .env("TERM", "xterm")
            .env("WARDEN_LOG", "warn");
        cmd
    }

    /// `warden ARGS` as this user (captured, no terminal).
    fn warden(&self, args: &[&str]) -> std::process::Output {
        let line = std::iter::once("warden")
            .chain(args.iter().copied())
            .map(shlex_quote)
            .collect::<Vec<_>>()
            .join(" ");
        self.shell(&line).output().unwrap()
    }

    /// A command that starts an MCP server as a client would: `command` found on this
    /// user's PATH, in the workspace, with this user's environment.
    fn stdio_server(&self, command: &str, args: &[String]) -> tokio::process::Command {
        let program = if command.contains('/') {
            PathBuf::from(command)
        } else {
            self.path
                .split(':')
                .map(|d| Path::new(d).join(command))
                .find(|p| p.is_file())
                .unwrap_or_else(|| panic!("{command} is not on the PATH"))
        };
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args)
            .current_dir(self.ws())
            .env_clear()
            .env("HOME", self.home.path())
            .env("PATH", &self.path)
            .env("WARDEN_LOG", "warn");
        cmd
    }
}

/// `s` as one shell word.
fn shlex_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@".contains(c))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Run `exec` `echo hello` through a connected client; its text.
async fn exec_hello<S: rmcp::service::Service<rmcp::RoleClient>>(
    client: &rmcp::service::RunningService<rmcp::RoleClient, S>,
    what: &str,
) {
    let tools = client.list_all_tools().await.unwrap();
    assert!(
        tools.iter().any(|t| t.name == "exec"),
        "{what}: no exec tool"
    );
    let Value::Object(args) = json!({"command": "echo hello"}) else {
        unreachable!()
    };
    let result = client
        .call_tool(CallToolRequestParams::new("exec").with_arguments(args))
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let text = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<String>();
    assert_ne!(result.is_error, Some(true), "{what}: {text}");
    assert!(text.contains("hello"), "{what}: {text}");
}

/// Connect to a stdio server entry (`command`, `args`) and run `echo hello`.
async fn check_stdio(user: &NewUser, server: &Value, what: &str) {
    let command = server["command"].as_str().unwrap();
    let args: Vec<String> = server["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    let cmd = user.stdio_server(command, &args);
    let client = ()
        .serve(rmcp::transport::TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap_or_else(|e| panic!("{what}: the server did not start: {e}"));
    exec_hello(&client, what).await;
    client.cancel().await.unwrap();
}

/// Connect to an HTTP server entry as its client would — its `url`, and its
/// `Authorization` header (or Codex's `bearer_token_env_var`) with the client's
/// `placeholder` for the credential replaced by `token` — the gateway being at `addr`;
/// run `echo hello`.
async fn check_http(server: &Value, placeholder: &str, token: &str, addr: &str, what: &str) {
    let url = server["url"].as_str().unwrap();
    assert!(
        url.starts_with("http://127.0.0.1:7878/"),
        "{what}: the URL is {url}"
    );
    let url = url.replacen("127.0.0.1:7878", addr, 1);
    let header = match server["bearer_token_env_var"].as_str() {
        Some(var) => format!("Bearer ${{{var}}}"),
        None => server["headers"]["Authorization"]
            .as_str()
            .unwrap()
            .to_owned(),
    };
    assert!(header.contains(placeholder), "{what}: header {header:?}");
    let header = header.replace(placeholder, token);
    let bearer = header.strip_prefix("Bearer ").unwrap();
    let config =
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(url)
            .auth_header(bearer);
    let client = ()
        .serve(rmcp::transport::StreamableHttpClientTransport::from_config(
            config,
        ))
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    exec_hello(&client, what).await;
    client.cancel().await.unwrap();
}

/// The sandbox this machine can build, or why not (the tour runs sandboxed commands).
fn sandbox_works(user: &NewUser) -> bool {
    let out = user.warden(&["exec", "--", "true"]);
    if out.status.success() {
        return true;
    }
    eprintln!(
        "SKIPPED: this machine cannot run sandboxed commands: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    false
}

#[test]
fn the_five_minute_tour_runs_as_written_at_a_terminal() {
    let readme = readme();
    let tour = block_after(&readme, "## Five-minute tour", "sh");
    let user = NewUser::new();
    if !sandbox_works(&user) {
        return;
    }
    let mut ran = Vec::new();
    for line in tour.lines().filter(|l| !l.trim().is_empty()) {
        if line.starts_with("cargo install") {
            eprintln!("README tour: not running {line:?}: the binaries under test are on PATH");
            continue;
        }
        let mut term = Terminal::start(user.shell(line));
        let program_line = line.split(" #").next().unwrap().trim();
        match program_line {
            "warden init" => {
                // Enter for each default (this workspace, claude, stdio, ask), then yes to
                // writing the client's files.
                for question in [
                    "Workspace",
                    "Agent clients",
                    "Connect over",
                    "Start how strict",
                ] {
                    term.wait_for(question);
                    term.wait_for("]: ");
                    term.type_text("\n");
                }
                term.wait_for("Write the client configuration into");
                term.wait_for("[y/N]: ");
                term.type_text("y\n");
            }
            "warden exec --shell 'make && make test'" => {
                // The read-only run is refused its write; the question comes here.
                let question = term.wait_for("allow [o]nce, allow [a]lways, [d]eny?");
                assert!(question.contains("built.txt"), "{question}");
                term.type_text("o");
            }
            _ => {}
        }
        let (status, shown) = term.finish();
        assert!(
            status.success(),
            "README tour: {line:?} failed ({status}):\n{shown}"
        );
        ran.push((program_line.to_owned(), shown));
    }
    let shown = |prefix: &str| {
        ran.iter()
            .find(|(l, _)| l.starts_with(prefix))
            .map(|(_, s)| s.as_str())
            .unwrap_or_else(|| panic!("the tour has no {prefix:?} line"))
    };
    let init = shown("warden init");
    assert!(
        init.contains("created") && init.contains(".mcp.json"),
        "{init}"
    );
    assert!(shown("warden exec -- ls").contains("Makefile"));
    assert!(shown("warden exec --shell").contains("tests passed"));
    assert!(
        shown("warden exec --json").contains("\"exitCode\": 0"),
        "{}",
        shown("warden exec --json")
    );
    // What init set up is Warden's default home, and what it wrote for Claude Code
    // starts and works as Claude Code would start it.
    assert!(user.warden_home().join("config.toml").is_file());
    let mcp: Value =
        serde_json::from_str(&std::fs::read_to_string(user.ws().join(".mcp.json")).unwrap())
            .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(check_stdio(
        &user,
        &mcp["mcpServers"]["warden"],
        "init's .mcp.json",
    ));
    // Run again, with the same answers: nothing changes.
    let before = std::fs::read(user.warden_home().join("config.toml")).unwrap();
    let again = user.warden(&["init", "--yes", "--write-clients"]);
    support::assert_success(&again);
    let text = String::from_utf8_lossy(&again.stdout);
    for line in text.lines().take_while(|l| !l.is_empty()).skip(1) {
        assert!(line.trim_start().starts_with("unchanged"), "{text}");
    }
    assert_eq!(
        before,
        std::fs::read(user.warden_home().join("config.toml")).unwrap()
    );
}

#[test]
fn what_init_writes_for_every_client_works_over_the_gateway_and_over_stdio() {
    let user = NewUser::new();
    if !sandbox_works(&user) {
        return;
    }
    let ws = user.ws();
    let out = user.warden(&[
        "init",
        "--yes",
        "--client",
        "claude,codex,cursor,vscode,other",
        "--transport",
        "gateway",
        "--write-clients",
    ]);
    support::assert_success(&out);
    let home = user.warden_home();
    let gateway = support::GatewayProcess::start(&home, &ws, &[]);
    let token = |agent: &str| support::gateway_token(&home, agent);
    let read_json = |rel: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(ws.join(rel)).unwrap()).unwrap()
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let claude = read_json(".mcp.json");
        let s = &claude["mcpServers"]["warden"];
        check_http(
            s,
            "${WARDEN_TOKEN}",
            &token("claude"),
            &gateway.addr,
            "init's .mcp.json (gateway)",
        )
        .await;
        let cursor = read_json(".cursor/mcp.json");
        let s = &cursor["mcpServers"]["warden"];
        check_http(
            s,
            "${env:WARDEN_TOKEN}",
            &token("cursor"),
            &gateway.addr,
            "init's .cursor/mcp.json (gateway)",
        )
        .await;
        let vscode = read_json(".vscode/mcp.json");
        let s = &vscode["servers"]["warden"];
        assert_eq!(vscode["inputs"][0]["id"], "warden-token");
        check_http(
            s,
            "${input:warden-token}",
            &token("vscode"),
            &gateway.addr,
            "init's .vscode/mcp.json (gateway)",
        )
        .await;
        let codex: toml::Table =
            toml::from_str(&std::fs::read_to_string(ws.join(".codex/config.toml")).unwrap())
                .unwrap();
        let s = &serde_json::to_value(&codex["mcp_servers"]["warden"]).unwrap();
        assert_eq!(s["bearer_token_env_var"].as_str(), Some("WARDEN_TOKEN"));
        check_http(
            s,
            "${WARDEN_TOKEN}",
            &token("codex"),
            &gateway.addr,
            "init's .codex/config.toml (gateway)",
        )
        .await;
    });
    drop(gateway);

    // Switching to stdio: without --replace, Warden's different entries are kept and
    // said to be; with it, replaced, the old files kept beside them.
    let gateway_mcp = std::fs::read(ws.join(".mcp.json")).unwrap();
    let stdio = [
        "init",
        "--yes",
        "--client",
        "claude,codex,cursor,vscode",
        "--transport",
        "stdio",
        "--write-clients",
    ];
    let out = user.warden(&stdio);
    support::assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("kept        .mcp.json"), "{text}");
    assert_eq!(std::fs::read(ws.join(".mcp.json")).unwrap(), gateway_mcp);
    let out = user.warden(&[&stdio[..], &["--replace"]].concat());
    support::assert_success(&out);
    assert_eq!(
        std::fs::read(ws.join(".mcp.json.bak")).unwrap(),
        gateway_mcp
    );
    rt.block_on(async {
        let claude = read_json(".mcp.json");
        check_stdio(
            &user,
            &claude["mcpServers"]["warden"],
            "init's .mcp.json (stdio)",
        )
        .await;
        let cursor = read_json(".cursor/mcp.json");
        check_stdio(
            &user,
            &cursor["mcpServers"]["warden"],
            "init's .cursor/mcp.json",
        )
        .await;
        let vscode = read_json(".vscode/mcp.json");
        assert_eq!(vscode["servers"]["warden"]["type"], "stdio");
        check_stdio(
            &user,
            &vscode["servers"]["warden"],
            "init's .vscode/mcp.json",
        )
        .await;
        let codex: toml::Table =
            toml::from_str(&std::fs::read_to_string(ws.join(".codex/config.toml")).unwrap())
                .unwrap();
        let codex = serde_json::to_value(&codex["mcp_servers"]["warden"]).unwrap();
        check_stdio(&user, &codex, "init's .codex/config.toml (stdio)").await;
    });
    let settings = read_json(".claude/settings.json");
    assert_eq!(settings["permissions"]["allow"], json!(["mcp__warden"]));
    assert_eq!(settings["enabledMcpjsonServers"], json!(["warden"]));
    assert_eq!(settings["permissions"]["deny"], json!(["Bash"]));
}

#[test]
fn the_client_setups_in_the_readme_work_as_written() {
    let readme = readme();
    let user = NewUser::new();
    if !sandbox_works(&user) {
        return;
    }
    let home = user.warden_home();
    std::fs::create_dir_all(&home).unwrap();
    std::fs::set_permissions(&home, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let ws = user.ws();
    let claude: Value =
        serde_json::from_str(&block_after(&readme, "**Claude Code**", "json")).unwrap();
    let codex: toml::Table =
        toml::from_str(&block_after(&readme, "**Codex CLI**", "toml")).unwrap();
    let cursor: Value = serde_json::from_str(&block_after(&readme, "**Cursor**", "json")).unwrap();
    let vscode: Value = serde_json::from_str(&block_after(&readme, "**VS Code**", "json")).unwrap();
    let settings: Value = serde_json::from_str(&block_after(
        &readme,
        "The project's servers approved",
        "json",
    ))
    .unwrap();
    assert_eq!(
        settings["enabledMcpjsonServers"],
        json!(["warden", "warden-gateway"]),
        "the settings must approve every server the README's .mcp.json names"
    );
    assert!(
        settings["permissions"]["deny"]
            .as_array()
            .unwrap()
            .contains(&json!("Bash")),
        "{settings}"
    );
    let gateway = support::GatewayProcess::start(&home, &ws, &[]);
    let token = |agent: &str| support::gateway_token(&home, agent);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        check_stdio(
            &user,
            &claude["mcpServers"]["warden"],
            "README: Claude Code stdio",
        )
        .await;
        let s = &claude["mcpServers"]["warden-gateway"];
        check_http(
            s,
            "${WARDEN_TOKEN}",
            &token("claude"),
            &gateway.addr,
            "README: Claude Code HTTP",
        )
        .await;
        let c = serde_json::to_value(&codex["mcp_servers"]["warden"]).unwrap();
        check_stdio(&user, &c, "README: Codex CLI").await;
        check_stdio(&user, &cursor["mcpServers"]["warden"], "README: Cursor").await;
        check_stdio(&user, &vscode["servers"]["warden"], "README: VS Code stdio").await;
        let s = &vscode["servers"]["warden-gateway"];
        check_http(
            s,
            "${input:warden-token}",
            &token("vscode"),
            &gateway.addr,
            "README: VS Code HTTP",
        )
        .await;
    });
    // The README's `claude mcp add` line keeps the variable for Claude Code to expand.
    assert!(
        readme.contains("--header\n'Authorization: Bearer ${WARDEN_TOKEN}'"),
        "the README's claude mcp add line must single-quote the header"
    );
}

/// A `warden gateway run` started as the README's first command starts it, as `user`,
/// with its first lines (the endpoint, the approver, the login link) read.
struct ReadmeGateway {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl ReadmeGateway {
    fn start(user: &NewUser, args: &[&str]) -> ReadmeGateway {
        use std::io::BufRead as _;
        let line = std::iter::once("exec warden")
            .chain(args.iter().copied())
            .collect::<Vec<_>>()
            .join(" ");
        let mut child = user
            .shell(&line)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        ReadmeGateway { child, lines }
    }

    /// The first line that starts with `prefix` (within 30 s).
    fn line(&self, prefix: &str) -> String {
        loop {
            let line = self
                .lines
                .recv_timeout(std::time::Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("the gateway printed no {prefix:?} line"));
            if line.starts_with(prefix) {
                return line;
            }
        }
    }
}

impl Drop for ReadmeGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// True if nothing listens on `addr` now.
fn port_free(addr: &str) -> bool {
    std::net::TcpListener::bind(addr).is_ok()
}

#[test]
fn the_main_job_serves_agents_and_the_web_approver_and_curl_reaches_it_as_written() {
    let readme = readme();
    let user = NewUser::new();
    if !sandbox_works(&user) {
        return;
    }
    let main_job = block_after(&readme, "## Two commands", "sh");
    assert_eq!(
        main_job.trim(),
        "cargo run --release --bin warden -- gateway run"
    );
    // `cargo run --release --bin warden --` is the binary under test; what follows is
    // run as written, on the README's ports when they are free here.
    let literal = port_free("127.0.0.1:7878") && port_free("127.0.0.1:7879");
    let gateway = if literal {
        ReadmeGateway::start(&user, &["gateway", "run"])
    } else {
        eprintln!(
            "README: 127.0.0.1:7878 or :7879 is in use on this machine: the gateway and the curl session run on free ports instead"
        );
        ReadmeGateway::start(
            &user,
            &[
                "gateway",
                "run",
                "--listen",
                "127.0.0.1:0",
                "--approver-listen",
                "127.0.0.1:0",
            ],
        )
    };
    let endpoint = gateway.line("warden gateway listening on http://");
    let addr = endpoint
        .split("http://")
        .nth(1)
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    // The web approver's one-time login link opens a session.
    let link = gateway.line("web approver: open http://");
    let url = link.split("open http://").nth(1).unwrap().trim();
    let (web, path) = url.split_once('/').unwrap();
    let mut stream = std::net::TcpStream::connect(web).unwrap();
    std::io::Write::write_all(
        &mut stream,
        format!("GET /{path} HTTP/1.1\r\nHost: {web}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut response = String::new();
    let _ = std::io::Read::read_to_string(&mut stream, &mut response);
    let head = response.to_ascii_lowercase();
    assert!(
        head.starts_with("http/1.1 303") || head.starts_with("http/1.1 200"),
        "{response}"
    );
    assert!(
        head.contains("set-cookie:"),
        "the login link opened no session: {response}"
    );

    // The curl session, as a script.
    if Command::new("curl").arg("--version").output().is_err() {
        eprintln!(
            "SKIPPED: the README's curl session: curl is not installed (.ci/run installs it)"
        );
        return;
    }
    let script = block_after(&readme, "By hand, with `curl`", "sh");
    assert!(script.contains("127.0.0.1:7878"));
    let script = script.replace("127.0.0.1:7878", &addr);
    let out = user.shell(&script).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("hello"),
        "the curl session did not run echo: {stdout}"
    );
}

#[test]
fn the_readme_configuration_and_gateway_host_steps_work_pasted() {
    let readme = readme();
    let user = NewUser::new();
    if !sandbox_works(&user) {
        return;
    }
    let home = user.warden_home();
    let config = block_after(&readme, "**Configuration** lives in", "toml");
    std::fs::write(home.join("config.toml"), &config).unwrap();
    let out = user.warden(&["exec", "--", "echo", "pasted"]);
    support::assert_success(&out);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "pasted\n");
    let steps = block_after(&readme, "two deliberate steps", "sh");
    for line in steps.lines().filter(|l| !l.trim().is_empty()) {
        if line.starts_with("warden approvals ui") {
            eprintln!(
                "README: not running {line:?}: it serves until stopped (tests/approvals_cli.rs drives it)"
            );
            continue;
        }
        let out = user.shell(line).output().unwrap();
        assert!(
            out.status.success(),
            "README: {line:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if line.starts_with("warden policy explain") {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains("allow"), "{text}");
        }
    }
    // And the steps took: the allowlisted pipeline runs on the gateway host.
    std::fs::write(user.ws().join("notes.txt"), "TODO: one\n").unwrap();
    let out = user.warden(&[
        "exec",
        "--host",
        "gateway",
        "--shell",
        "grep -rn TODO . | head",
    ]);
    support::assert_success(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("TODO: one"));
}

#[test]
fn init_asks_before_changing_what_the_user_has_and_no_means_nothing_changes() {
    let user = NewUser::new();
    support::assert_success(&user.warden(&["init", "--yes", "--write-clients"]));
    let home = user.warden_home();
    let config = home.join("config.toml");
    let approvals = home.join("exec-approvals.json");
    // The user makes config.toml their own.
    let mut mine = std::fs::read_to_string(&config).unwrap();
    mine.push_str("# my note\n");
    std::fs::write(&config, &mine).unwrap();
    let approvals_before = std::fs::read(&approvals).unwrap();
    let mcp_before = std::fs::read(user.ws().join(".mcp.json")).unwrap();

    // Other answers at a terminal: each difference is asked about; "no" keeps it.
    let mut term = Terminal::start(
        user.shell("warden init --client claude --transport stdio --strictness sandbox"),
    );
    term.wait_for("Workspace");
    term.wait_for("]: ");
    term.type_text("\n");
    let q = term.wait_for("[y/N]: ");
    assert!(q.contains("config.toml exists and differs"), "{q}");
    term.type_text("n\n");
    let q = term.wait_for("[y/N]: ");
    assert!(q.contains("security: allowlist → deny"), "{q}");
    term.type_text("\n");
    let (status, shown) = term.finish();
    assert!(status.success(), "{shown}");
    assert!(
        shown.contains("kept        ~/.warden/config.toml"),
        "{shown}"
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), mine);
    assert_eq!(std::fs::read(&approvals).unwrap(), approvals_before);
    assert_eq!(
        std::fs::read(user.ws().join(".mcp.json")).unwrap(),
        mcp_before
    );

    // Without a terminal nothing is asked and nothing of the user's changes either.
    let out = user.warden(&["init", "--strictness", "sandbox"]);
    support::assert_success(&out);
    assert_eq!(std::fs::read_to_string(&config).unwrap(), mine);
    assert_eq!(std::fs::read(&approvals).unwrap(), approvals_before);

    // --replace: replaced, the user's version kept beside it.
    let out = user.warden(&["init", "--strictness", "sandbox", "--replace"]);
    support::assert_success(&out);
    assert_eq!(
        std::fs::read_to_string(home.join("config.toml.bak")).unwrap(),
        mine
    );
    assert!(
        std::fs::read_to_string(&config)
            .unwrap()
            .contains("security = \"deny\"")
    );
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&approvals).unwrap()).unwrap();
    assert_eq!(file["defaults"]["security"], "deny", "{file}");
    // The gateway host now denies `main` what the allowlist had allowed.
    let out = user.warden(&["exec", "--host", "gateway", "--", "ls"]);
    assert!(!out.status.success());

    // A workspace is where an agent writes: a client file, or a directory above one,
    // that is a link (here to the approvals file, and to Warden's home) is neither
    // read nor written nor copied.
    let approvals_now = std::fs::read(&approvals).unwrap();
    std::os::unix::fs::symlink(&home, user.ws().join(".vscode")).unwrap();
    std::fs::remove_file(user.ws().join(".mcp.json")).unwrap();
    std::os::unix::fs::symlink(&approvals, user.ws().join(".mcp.json")).unwrap();
    let out = user.warden(&[
        "init",
        "--yes",
        "--client",
        "claude,vscode",
        "--write-clients",
        "--replace",
        "--strictness",
        "sandbox",
    ]);
    support::assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("not merged  .mcp.json"), "{text}");
    assert!(text.contains("not merged  .vscode/mcp.json"), "{text}");
    assert_eq!(std::fs::read(&approvals).unwrap(), approvals_now);
    assert!(!home.join("mcp.json").exists());
    assert!(!user.ws().join(".mcp.json.bak").exists());
    assert!(user.ws().join(".mcp.json").is_symlink());
}
