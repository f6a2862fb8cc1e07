//! A small WebDriver client for the end-to-end tests of the web approver: it starts
//! Debian's `chromedriver` with a headless `chromium` and speaks the W3C WebDriver
//! protocol over plain HTTP — a real browser, driven the way a person uses it.
//! `Driver::start` returns `None` (and says why, loudly) when either is missing.
// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(dead_code)]
// Skipping says so on stderr, loudly.
#![allow(clippy::print_stderr)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

/// The W3C element reference key.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    for name in names {
        for dir in path.split(':').chain(["/usr/bin", "/usr/lib/chromium"]) {
            let candidate = Path::new(dir).join(name);
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    None
}

/// Send one HTTP/1.1 request to `addr` and return (status, headers, body). The body is
/// read by its length (or its chunks): a server may keep the connection open.
pub fn http(addr: &str, request: &str) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    let complete = |raw: &[u8]| -> bool {
        let text = String::from_utf8_lossy(raw);
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            return false;
        };
        let lower = head.to_ascii_lowercase();
        if let Some(len) = lower
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|n| n.trim().parse::<usize>().ok())
        {
            return body.len() >= len;
        }
        if lower.contains("transfer-encoding: chunked") {
            return body.ends_with("0\r\n\r\n");
        }
        false
    };
    loop {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                if complete(&raw) {
                    break;
                }
            }
            Err(e) => panic!("reading from {addr}: {e}"),
        }
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    (status, head.to_owned(), body)
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// One browser at a time: two cores cannot run several Chromiums and the approvers
/// they drive without every deadline becoming a race.
static ONE_BROWSER: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A headless Chromium under chromedriver. Ended when dropped.
pub struct Driver {
    _turn: std::sync::MutexGuard<'static, ()>,
    child: Child,
    addr: String,
    session: String,
    _profile: tempfile::TempDir,
}

impl Driver {
    /// Start a browser whose resolver maps `evil.test` to 127.0.0.1 (to play a DNS
    /// rebinding attack). `None` when chromium or chromedriver is not installed.
    pub fn start() -> Option<Driver> {
        let (Some(driver), Some(browser)) = (
            find_program(&["chromedriver"]),
            find_program(&["chromium", "chromium-browser"]),
        ) else {
            eprintln!(
                "SKIPPED: the web approver's browser tests need Debian's `chromium` and \
                 `chromium-driver` (apt-get install chromium chromium-driver; .ci/run installs them)"
            );
            return None;
        };
        let turn = ONE_BROWSER.lock().unwrap_or_else(|p| p.into_inner());
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = tempfile::tempdir().unwrap();
        let mut driver = Driver {
            _turn: turn,
            child,
            addr,
            session: String::new(),
            _profile: profile,
        };
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": browser,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=1280,1000", "--no-first-run", "--disable-extensions",
                    "--host-resolver-rules=MAP evil.test 127.0.0.1",
                    format!("--user-data-dir={}", driver._profile.path().display()),
                ],
            },
        }}});
        let value = driver.call("POST", "/session", Some(caps));
        driver.session = value["sessionId"].as_str().unwrap().to_owned();
        Some(driver)
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.try_call(method, path, body)
            .unwrap_or_else(|e| panic!("WebDriver {method} {path} failed: {e}"))
    }

    fn try_call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        let (status, _, text) = http(&self.addr, &request);
        let value: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {path}: {e}: {text}"));
        if status != 200 {
            return Err(format!("({status}) {}", value["value"]["message"]));
        }
        Ok(value["value"].clone())
    }

    fn session_call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.call(method, &format!("/session/{}{path}", self.session), body)
    }

    fn try_session_call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, String> {
        self.try_call(method, &format!("/session/{}{path}", self.session), body)
    }

    /// Open `url` in the current tab.
    pub fn goto(&self, url: &str) {
        self.session_call("POST", "/url", Some(json!({ "url": url })));
    }

    /// The current tab's address.
    pub fn url(&self) -> String {
        self.session_call("GET", "/url", None)
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// The elements matching `css` now.
    pub fn find_all(&self, css: &str) -> Vec<String> {
        self.session_call(
            "POST",
            "/elements",
            Some(json!({"using": "css selector", "value": css})),
        )
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            e[ELEMENT]
                .as_str()
                .unwrap_or_else(|| panic!("{e}"))
                .to_owned()
        })
        .collect()
    }

    /// The texts of the elements matching `css` now (the page re-renders as events
    /// arrive: an element that went stale meanwhile is left out).
    pub fn texts(&self, css: &str) -> Vec<(String, String)> {
        self.find_all(css)
            .into_iter()
            .filter_map(|id| {
                let text = self
                    .try_session_call("GET", &format!("/element/{id}/text"), None)
                    .ok()?;
                Some((id, text.as_str().unwrap_or_default().to_owned()))
            })
            .collect()
    }

    /// Wait (up to 30 s) for an element matching `css` whose text contains `needle`;
    /// its text.
    pub fn wait_text(&self, css: &str, needle: &str) -> String {
        self.retry(&format!("{css:?} containing {needle:?}"), || {
            self.texts(css)
                .into_iter()
                .find(|(_, t)| t.contains(needle))
                .map(|(_, t)| t)
                .ok_or_else(|| format!("found {:#?}", self.texts(css)))
        })
    }

    /// Wait (up to 30 s) until nothing matches `css`.
    pub fn wait_gone(&self, css: &str) {
        self.retry(&format!("{css:?} gone"), || {
            if self.find_all(css).is_empty() {
                Ok(())
            } else {
                Err("still there".into())
            }
        })
    }

    /// Try `action` until it succeeds, for up to 30 s.
    fn retry<T>(&self, what: &str, mut action: impl FnMut() -> Result<T, String>) -> T {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match action() {
                Ok(v) => return v,
                Err(e) if Instant::now() > deadline => panic!("{what}: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Click the first element matching `css` whose text contains `needle` (waiting for
    /// one, and finding it again if the page re-rendered it meanwhile).
    pub fn click(&self, css: &str, needle: &str) {
        self.retry(&format!("click {css:?} ({needle:?})"), || {
            let (id, _) = self
                .texts(css)
                .into_iter()
                .find(|(_, t)| t.contains(needle))
                .ok_or("not there")?;
            self.try_session_call("POST", &format!("/element/{id}/click"), Some(json!({})))
                .map(drop)
        })
    }

    /// Type `text` into the first element matching `css` (waiting for one).
    pub fn type_into(&self, css: &str, text: &str) {
        self.retry(&format!("type into {css:?}"), || {
            let id = self.find_all(css).into_iter().next().ok_or("not there")?;
            self.try_session_call(
                "POST",
                &format!("/element/{id}/value"),
                Some(json!({ "text": text })),
            )
            .map(drop)
        })
    }

    /// Press and release `key` on whatever has the focus (the page itself, when nothing
    /// else does).
    pub fn press(&self, key: &str) {
        self.session_call(
            "POST",
            "/actions",
            Some(
                json!({"actions": [{"type": "key", "id": "keyboard", "actions": [
                {"type": "keyDown", "value": key}, {"type": "keyUp", "value": key}]}]}),
            ),
        );
    }

    /// Run `script` in the page and return its result.
    pub fn script(&self, script: &str) -> Value {
        self.session_call(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
    }

    /// The browser's cookies for the current page (HttpOnly ones included).
    pub fn cookies(&self) -> Value {
        self.session_call("GET", "/cookie", None)
    }

    /// Open a new tab and switch to it; returns the previous tab's handle.
    pub fn new_tab(&self) -> String {
        let previous = self.session_call("GET", "/window", None);
        let tab = self.session_call("POST", "/window/new", Some(json!({"type": "tab"})));
        self.switch_to(tab["handle"].as_str().unwrap());
        previous.as_str().unwrap().to_owned()
    }

    /// Make tab `handle` the current one.
    pub fn switch_to(&self, handle: &str) {
        self.session_call("POST", "/window", Some(json!({ "handle": handle })));
    }

    /// Save a PNG of the current tab at `path`.
    pub fn screenshot(&self, path: &Path) {
        let b64 = self.session_call("GET", "/screenshot", None);
        let png = base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().unwrap())
            .unwrap();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let path = format!("/session/{}", self.session);
            let request = format!(
                "DELETE {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                self.addr
            );
            let _ = std::panic::catch_unwind(|| http(&self.addr, &request));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
