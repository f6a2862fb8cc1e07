//! End-to-end: `warden approvals ui --web` in a real headless Chromium, driven through
//! WebDriver. A prompt appears and is approved and the command runs; "allow always"
//! stores the rule the button showed and the next run needs nobody; an allowlist entry
//! added on the page is used; settings switch; an edit made meanwhile by the CLI is a
//! conflict, never overwritten; the approver runs a command itself when
//! `tools.exec.run_in_approver` says so; node bindings appear once a node exists and are
//! written into config.toml with its comments kept, a concurrent edit of it being a
//! conflict; a forged cross-origin post, a foreign origin and a wrong Host (DNS
//! rebinding) are refused; a running gateway's live runs are listed, their output tail
//! shown harmless, and one is killed from the page. Screenshots of the main screens are
//! taken along the way (copied into docs/screenshots with WARDEN_UPDATE_SCREENSHOTS=1).
//!
//! Skips loudly without `chromium` and `chromium-driver` (CI installs them).

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/mcp_runs.rs"]
mod mcp_runs;
mod support;
#[path = "support/webdriver.rs"]
mod webdriver;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use webdriver::{Driver, http};

/// A running web approver.
struct WebApprover {
    child: Child,
    /// `127.0.0.1:PORT`.
    addr: String,
    login: String,
}

impl WebApprover {
    fn start(home: &Path) -> WebApprover {
        let child = support::warden_in(home)
            .args(["approvals", "ui", "--web", "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        WebApprover::announced(child, |_| {})
    }

    /// The web approver `child` announces on its stdout (after the lines `before` reads).
    fn announced(
        mut child: Child,
        before: impl FnOnce(&mut dyn Iterator<Item = String>),
    ) -> WebApprover {
        let mut lines = BufReader::new(child.stdout.take().unwrap())
            .lines()
            .map_while(Result::ok);
        before(&mut lines);
        let first = lines.next().unwrap();
        assert!(first.starts_with("warden approver listening on"), "{first}");
        let second = lines.next().unwrap();
        let login = second
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no login link in {second:?}"))
            .to_owned();
        let addr = login
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap()
            .to_owned();
        // Keep reading so the approver never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        WebApprover { child, addr, login }
    }

    fn base(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for WebApprover {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            panic!("the web approver did not stop on SIGTERM");
        }
    }
}

/// Save a screenshot of the current tab as `name` (see the module comment).
fn screenshot(driver: &Driver, name: &str) {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("screenshots")
        .join(name);
    driver.screenshot(&path);
    if std::env::var_os("WARDEN_UPDATE_SCREENSHOTS").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/screenshots");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::copy(&path, docs.join(name)).unwrap();
    }
}

fn file(home: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(home.join("exec-approvals.json")).unwrap()).unwrap()
}

fn patterns(home: &Path, agent: &str) -> Vec<String> {
    file(home)["agents"][agent]["allowlist"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|e| e["pattern"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn exec(home: &Path, args: &[&str]) -> Child {
    support::warden_in(home)
        .arg("exec")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Wait for `child` at most `limit`; kill it and fail if it takes longer.
fn finish(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{child:?} still runs after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

fn real(path: &str) -> String {
    std::fs::canonicalize(path)
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

const GATEWAY_ALLOWLIST: &str = "[tools.exec]\nhost = \"gateway\"\nsecurity = \"allowlist\"\nask = \"on-miss\"\n\n[[agents.list]]\nid = \"main\"\n";
const HOST_ALLOWLIST: &str =
    r#"{"version":1,"defaults":{"security":"allowlist","ask":"on-miss","askFallback":"deny"}}"#;

/// Log `driver` in and wait for the page to be live; the page's address (under the
/// server's secret path, ending in `/`).
fn log_in(driver: &Driver, web: &WebApprover) -> String {
    driver.goto(&web.login);
    driver.wait_text("#status", "live");
    driver.wait_text(".agent h3", "main");
    let app = driver.url();
    assert!(
        app.starts_with(&format!("{}/s/", web.base())) && app.ends_with('/'),
        "{app}"
    );
    app
}

/// A browser signed in to a web approver of a fresh Warden home whose `config.toml` is
/// `config` (and whose approvals file is the host allowlist); the page's address.
struct SignedIn {
    driver: Driver,
    web: WebApprover,
    app: String,
    home: tempfile::TempDir,
}

/// [`SignedIn`], or `None` where no browser can be driven (skipped loudly by `Driver`).
fn signed_in(config: &str) -> Option<SignedIn> {
    let driver = Driver::start()?;
    let home = support::warden_home();
    support::configure(home.path(), config, HOST_ALLOWLIST);
    let web = WebApprover::start(home.path());
    let app = log_in(&driver, &web);
    Some(SignedIn {
        driver,
        web,
        app,
        home,
    })
}

#[test]
fn prompts_are_answered_in_the_browser_and_the_console_edits_the_allowlist() {
    let Some(SignedIn {
        driver,
        web: _web,
        app,
        home,
    }) = signed_in(GATEWAY_ALLOWLIST)
    else {
        return;
    };
    let h = home.path();

    // A second tab of the same browser shares the session.
    let first_tab = driver.new_tab();
    driver.goto(&app);
    driver.wait_text("#status", "live");
    driver.wait_text(".agent h3", "main");
    driver.switch_to(&first_tab);

    // A prompt appears, escaped as the terminal shows it, and one key press allows it.
    let child = exec(h, &["--", "echo", "hid\u{202e}den"]);
    let shown = driver.wait_text(".request pre.prompt-text", "echo");
    assert!(
        shown.contains("hid\\u{202e}den") && !shown.contains('\u{202e}'),
        "{shown}"
    );
    assert!(shown.contains("agent:    main"), "{shown}");
    screenshot(&driver, "web-approver-prompt.png");
    driver.press("o");
    let out = finish(child, Duration::from_secs(30));
    support::assert_success(&out);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hid\u{202e}den\n");
    driver.wait_gone(".request");
    driver.wait_text("#recent li", "allow-once");

    // A requester that gives up takes its prompt off the page.
    let mut child = exec(h, &["--", "ls", "/usr"]);
    driver.wait_text(".request", "ls");
    child.kill().unwrap();
    child.wait().unwrap();
    driver.wait_gone(".request");
    driver.wait_text("#recent li", "withdrawn");

    // Allow always shows the exact rule it stores, stores it, and the next run asks
    // nobody.
    let ls = real("/usr/bin/ls");
    let child = exec(h, &["--", "ls", "/usr"]);
    let label = driver.wait_text(".request button.allow-always", "stores");
    assert_eq!(label, format!("Allow always — stores {ls} (a)"));
    driver.click(".request button.allow-always", &ls);
    let out = finish(child, Duration::from_secs(30));
    assert!(out.status.success());
    assert_eq!(patterns(h, "main"), vec![ls.clone()]);
    let out = finish(exec(h, &["--", "ls", "/usr"]), Duration::from_secs(20));
    assert!(out.status.success(), "the stored rule did not match");
    assert!(driver.find_all(".request").is_empty());

    // The console shows the stored entry with its last use (the file changed, the
    // editor was clean: it reloaded by itself).
    driver.wait_text(".agent[data-agent='main'] tr td.pattern", &ls);
    driver.wait_text(".agent[data-agent='main'] td.last-command", "ls /usr");

    // An invalid pattern is refused inline, and nothing is written.
    let before = std::fs::read(h.join("exec-approvals.json")).unwrap();
    const MAIN: &str = ".agent[data-agent='main']";
    driver.type_into(&format!("{MAIN} .pattern-input"), "./bin/x");
    driver.click(&format!("{MAIN} button.add-pattern"), "");
    driver.wait_text(
        ".agent[data-agent='main'] .add-form .inline-error",
        "./bin/x",
    );
    assert_eq!(
        std::fs::read(h.join("exec-approvals.json")).unwrap(),
        before
    );

    // A valid one is added and used: no prompt for `cat` any more.
    let cat = real("/usr/bin/cat");
    driver
        .script("document.querySelector(\".agent[data-agent='main'] .pattern-input\").value = ''");
    driver.type_into(&format!("{MAIN} .pattern-input"), &cat);
    driver.click(&format!("{MAIN} button.add-pattern"), "");
    driver.wait_text(".agent[data-agent='main'] td.pattern", &cat);
    assert_eq!(patterns(h, "main"), vec![ls.clone(), cat.clone()]);
    let notes = "/etc/hostname".to_owned();
    let out = finish(exec(h, &["--", "cat", &notes]), Duration::from_secs(20));
    support::assert_success(&out);
    driver.wait_text(
        ".agent[data-agent='main'] td.last-command",
        &format!("cat {notes}"),
    );
    // Not Warden's own files, though: the entry allows `cat`, not a way to the token.
    let config = h.join("exec-approvals.json").to_string_lossy().into_owned();
    let child = exec(h, &["--", "cat", &config]);
    let prompt = driver.wait_text(".request", "where Warden keeps its own files");
    assert!(prompt.contains(&config), "{prompt}");
    driver.click(".request button.deny", "");
    let out = finish(child, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(77));
    driver.script("document.querySelector(\".agent[data-agent='main']\").scrollIntoView()");
    screenshot(&driver, "web-approver-console.png");

    // Switches: the agent's security ceiling to deny, and the next run is denied.
    driver.click(
        &format!("{MAIN} select.set-security option[value='deny']"),
        "",
    );
    wait_until("security = deny in the file", || {
        file(h)["agents"]["main"]["security"] == "deny"
    });
    let out = finish(exec(h, &["--", "ls", "/usr"]), Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(77));
    // The agent's effective policy (a collapsed <details>) names the ceiling's source.
    wait_until("the policy to show the host file's ceiling", || {
        driver
            .script("return document.querySelector(\".agent[data-agent='main'] details pre\").textContent")
            .as_str()
            .is_some_and(|t| t.contains("security     deny       (host file)"))
    });
    driver.click(&format!("{MAIN} select.set-security option[value='']"), "");
    wait_until("security inherited again", || {
        file(h)["agents"]["main"].get("security").is_none()
    });

    // The CLI edits the file while a pattern is being typed here: the page says the
    // file changed, and adding on the old version is a conflict that writes nothing.
    let head = real("/usr/bin/head");
    driver.type_into(&format!("{MAIN} .pattern-input"), &head);
    let out = support::warden_in(h)
        .args([
            "approvals",
            "allowlist",
            "add",
            "--agent",
            "main",
            "/usr/bin/true",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    wait_until("the changed-on-disk banner", || {
        driver.script("return !document.querySelector('#store-banner').hidden") == true
    });
    driver.click(&format!("{MAIN} button.add-pattern"), "");
    driver.wait_text(
        ".agent[data-agent='main'] .add-form .inline-error",
        "changed since this page showed it",
    );
    let stored = patterns(h, "main");
    assert!(stored.contains(&"/usr/bin/true".to_owned()), "{stored:?}");
    assert!(
        !stored.contains(&head),
        "the stale edit was applied: {stored:?}"
    );
    screenshot(&driver, "web-approver-conflict.png");
    // After a reload, the typed pattern is still there and goes in on the new version.
    driver.click("#reload", "");
    driver.wait_text(".agent[data-agent='main'] td.pattern", "/usr/bin/true");
    driver.click(&format!("{MAIN} button.add-pattern"), "");
    driver.wait_text(".agent[data-agent='main'] td.pattern", &head);
    assert_eq!(
        patterns(h, "main"),
        vec![
            ls.clone(),
            cat.clone(),
            "/usr/bin/true".to_owned(),
            head.clone()
        ]
    );
    // Remove takes out exactly that entry.
    driver.click(
        &format!("{MAIN} tr[data-pattern='/usr/bin/true'] button.remove-pattern"),
        "Remove",
    );
    driver.wait_gone(&format!("{MAIN} tr[data-pattern='/usr/bin/true']"));
    assert_eq!(patterns(h, "main"), vec![ls, cat, head]);

    // The effective policy of a command, as `policy explain` prints it. (Not `ls /`:
    // "/" holds Warden's state directory, which an allowlisted program may not be
    // pointed at on the gateway host.)
    driver.type_into("#explain-form input[name='command']", "ls /usr | head -n1");
    driver.click("#explain-form button", "Explain");
    let text = driver.wait_text("#explain-out", "decision: allow");
    assert!(text.contains("security     allowlist"), "{text}");
    assert!(
        text.contains("in approver  no (built-in default)"),
        "{text}"
    );
    assert!(text.contains("(exit code 0)"), "{text}");
    driver.script("document.querySelector('#explain-section').scrollIntoView()");
    screenshot(&driver, "web-approver-explain.png");
}

#[test]
fn the_approver_runs_the_command_itself_when_run_in_approver_is_set() {
    let Some(SignedIn {
        driver,
        web: _web,
        app: _,
        home,
    }) = signed_in(&format!(
        "{GATEWAY_ALLOWLIST}tools.exec.run_in_approver = true\n"
    ))
    else {
        return;
    };
    let h = home.path();
    let child = exec(
        h,
        &["--json", "--", "printf", "hello from %s", "the approver"],
    );
    let banner = driver.wait_text(".request .runs-here", "ITSELF");
    assert!(
        banner.contains("runs this command ITSELF") && banner.contains("this approver (uid"),
        "{banner}"
    );
    let once = driver.wait_text(".request button.allow-once", "");
    assert_eq!(once, "Run here once (o)");
    screenshot(&driver, "web-approver-runs-here.png");
    driver.click(".request button.allow-once", "Run here");
    let out = finish(child, Duration::from_secs(30));
    support::assert_success(&out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["executed"]["in_approver"], true, "{report}");
    assert_eq!(report["stdout"], "hello from the approver", "{report}");
    // The approver has the output of its own run.
    driver.wait_text("#recent .ran-stdout", "hello from the approver");
    driver.wait_text("#recent .ran", "ran here: exit 0");
}

#[test]
fn allow_always_offers_each_scope_and_the_console_edits_argument_rules() {
    let Some(SignedIn {
        driver,
        web: _web,
        app: _,
        home,
    }) = signed_in(GATEWAY_ALLOWLIST)
    else {
        return;
    };
    let h = home.path();
    // The git the trusted PATH finds first.
    let git = real(
        ["/usr/local/bin/git", "/usr/bin/git"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("git is installed"),
    );
    const MAIN: &str = ".agent[data-agent='main']";

    // One button per scope, the preselected one (the subcommand) first, each naming
    // exactly what it stores.
    let child = exec(h, &["--", "git", "help", "-a"]);
    driver.wait_text(".request button.allow-always", "stores");
    let labels: Vec<String> = driver
        .texts(".request button.allow-always")
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    assert_eq!(
        labels,
        vec![
            format!("Allow always — stores {git} help … (a)"),
            format!("Allow always, exact — stores {git} help -a (exactly) (1)"),
            format!("Allow always, program — stores {git} (3)"),
        ]
    );
    // A scope the prompt did not offer is refused, and nothing is answered.
    let status = driver.script(
        "const p = pending[0]; return fetch('api/answer', {method: 'POST', credentials: 'same-origin', \
         headers: {'Content-Type': 'application/json', \
                   'X-Warden-CSRF': document.querySelector('meta[name=\"warden-csrf\"]').content}, \
         body: JSON.stringify({key: p.key, digest: p.digest, answer: 'allow-always', allowAlwaysOption: 9})}) \
         .then((r) => r.status)",
    );
    assert_eq!(status, 400);
    assert_eq!(driver.find_all(".request").len(), 1);
    screenshot(&driver, "web-approver-scopes.png");
    // Key 1: exactly this command.
    driver.press("1");
    let out = finish(child, Duration::from_secs(30));
    support::assert_success(&out);
    let entry = &file(h)["agents"]["main"]["allowlist"][0];
    assert_eq!(entry["pattern"], git.as_str());
    assert_eq!(entry["args"], serde_json::json!(["help", "-a"]));
    assert_eq!(entry["argsMatch"], "exact");
    driver.wait_text("#recent li", &format!("{git} help -a (exactly)"));
    // The console shows the entry with its argument rule.
    driver.wait_text(
        &format!("{MAIN} td.pattern"),
        &format!("{git} help -a (exactly)"),
    );

    // An entry with argument patterns, added on the page, is used.
    driver.type_into(&format!("{MAIN} .pattern-input"), &git);
    driver.type_into(&format!("{MAIN} .args-input"), "version");
    driver.click(&format!("{MAIN} .exact-input"), "");
    driver.click(&format!("{MAIN} button.add-pattern"), "");
    let version = format!("{git} version (exactly)");
    driver.wait_text(&format!("{MAIN} td.pattern"), &version);
    let out = finish(exec(h, &["--", "git", "version"]), Duration::from_secs(20));
    support::assert_success(&out);
    assert!(driver.find_all(".request").is_empty());
    // The run recorded its use: the page shows the version with it (an edit based on
    // the one before would be a conflict).
    driver.wait_text(
        &format!("{MAIN} tr[data-rule='{version}'] td.last-command"),
        "git version",
    );
    // Remove takes out exactly that rule; the other entry of the same program stays.
    driver.click(
        &format!("{MAIN} tr[data-rule='{version}'] button.remove-pattern"),
        "Remove",
    );
    driver.wait_gone(&format!("{MAIN} tr[data-rule='{version}']"));
    let list = file(h)["agents"]["main"]["allowlist"].clone();
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list[0]["args"], serde_json::json!(["help", "-a"]));
}

/// A config.toml with the operator's comments, which the page's edits keep.
const COMMENTED_CONFIG: &str = "# Warden on this host: every comment here stays
[tools.exec]
host = \"gateway\"   # commands run on this machine
security = \"allowlist\"
ask = \"on-miss\"

# the coding agent
[[agents.list]]
id = \"main\"
";

fn config_text(home: &Path) -> String {
    std::fs::read_to_string(home.join("config.toml")).unwrap()
}

#[test]
fn node_bindings_are_edited_in_config_toml_once_a_node_exists() {
    let Some(SignedIn {
        driver,
        web: _web,
        app: _,
        home,
    }) = signed_in(COMMENTED_CONFIG)
    else {
        return;
    };
    let h = home.path();
    const MAIN: &str = ".agent[data-agent='main']";

    // No node in the registry: no node control at all (hidden, not a disabled stub).
    driver.wait_text(".defaults h3", "host-wide defaults");
    assert!(driver.find_all(".node-binding").is_empty());
    assert!(driver.find_all("select.set-node").is_empty());

    // `warden nodes add` writes a paired stdio node into nodes.json (no gateway needed);
    // the page notices the registry changed and shows the controls by itself.
    let out = support::warden_in(h)
        .args(["nodes", "add", "build", "--name", "Build Box", "--", "true"])
        .output()
        .unwrap();
    support::assert_success(&out);
    driver.wait_text(
        ".defaults .node-binding .binding-current",
        "none: any node may be used",
    );
    let choices: Vec<String> = driver
        .texts(&format!("{MAIN} select.set-node option"))
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    assert_eq!(
        choices,
        vec!["none / inherit (no default)", "Build Box (build)"]
    );

    // Binding main: one line in its entry, every comment kept.
    driver.click(&format!("{MAIN} select.set-node option[value='build']"), "");
    let bound = COMMENTED_CONFIG.replace(
        "id = \"main\"\n",
        "id = \"main\"\ntools.exec.node = \"build\"\n",
    );
    wait_until("main's binding in config.toml", || config_text(h) == bound);
    driver.wait_text(
        &format!("{MAIN} .binding-current"),
        "build (set for this agent) — paired node Build Box (build)",
    );
    // `policy explain` shows the binding with its source, and so does the page.
    let out = support::warden_in(h)
        .args(["policy", "explain", "--agent", "main", "--", "true"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("binding      build      (agent; this agent may use no other node)"),
        "{text}"
    );
    wait_until("the page's policy to show the binding", || {
        driver
            .script("return document.querySelector(\".agent[data-agent='main'] details pre\").textContent")
            .as_str()
            .is_some_and(|t| t.contains("binding      build      (agent;"))
    });
    driver.script(
        "document.querySelector(\".agent[data-agent='main'] details\").open = true; \
         document.querySelector('#notice').hidden = true; \
         document.querySelector('#console-section').scrollIntoView()",
    );
    screenshot(&driver, "web-approver-nodes.png");

    // The host-wide default goes into [tools.exec]; clearing main's makes it inherit.
    driver.click(".defaults select.set-node option[value='build']", "");
    let both = bound.replace(
        "ask = \"on-miss\"\n",
        "ask = \"on-miss\"\nnode = \"build\"\n",
    );
    wait_until("the global binding in config.toml", || {
        config_text(h) == both
    });
    driver.wait_text(".defaults .binding-current", "build (set host-wide)");
    driver.click(&format!("{MAIN} button.clear-node"), "Clear");
    let global = COMMENTED_CONFIG.replace(
        "ask = \"on-miss\"\n",
        "ask = \"on-miss\"\nnode = \"build\"\n",
    );
    wait_until("main's binding cleared", || config_text(h) == global);
    driver.wait_text(
        &format!("{MAIN} .binding-current"),
        "build (inherited from the host-wide default)",
    );

    // A node the registry does not know is refused, and nothing is written.
    let refused = driver.script(
        "return fetch('api/edit', {method: 'POST', credentials: 'same-origin', \
         headers: {'Content-Type': 'application/json', \
                   'X-Warden-CSRF': document.querySelector('meta[name=\"warden-csrf\"]').content}, \
         body: JSON.stringify({op: 'node-binding', base: configHash, agent: 'main', node: 'nope'})}) \
         .then((r) => r.json().then((j) => [r.status, j.error]))",
    );
    assert_eq!(refused[0], 400, "{refused}");
    assert!(
        refused[1]
            .as_str()
            .unwrap()
            .contains("no node \"nope\" is known"),
        "{refused}"
    );
    assert_eq!(config_text(h), global);

    // config.toml is edited elsewhere while a pattern is being typed here (so the page
    // keeps its view): it says so, and a binding made on the old version is a conflict
    // that writes nothing.
    driver.type_into(&format!("{MAIN} .pattern-input"), "/usr/bin/true");
    let by_hand = format!("{global}# edited by hand meanwhile\n");
    std::fs::write(h.join("config.toml"), &by_hand).unwrap();
    wait_until("the changed-on-disk banner", || {
        driver.script("return !document.querySelector('#store-banner').hidden") == true
    });
    driver.wait_text("#store-banner", "config.toml changed on disk");
    driver.click(&format!("{MAIN} select.set-node option[value='build']"), "");
    driver.wait_text(
        &format!("{MAIN} .node-binding .inline-error"),
        "config.toml changed since this page showed it",
    );
    assert_eq!(config_text(h), by_hand, "the stale edit was written");
    // After a reload it goes in on the new version, the hand edit kept.
    driver.click("#reload", "");
    driver.wait_text(
        &format!("{MAIN} .binding-current"),
        "inherited from the host-wide default",
    );
    driver.click(&format!("{MAIN} select.set-node option[value='build']"), "");
    wait_until("main bound on the new version", || {
        config_text(h)
            == by_hand.replace(
                "id = \"main\"\n",
                "id = \"main\"\ntools.exec.node = \"build\"\n",
            )
    });

    // Without any node again, the controls go away (the editor is clean: by itself).
    driver
        .script("document.querySelector(\".agent[data-agent='main'] .pattern-input\").value = ''");
    let out = support::warden_in(h)
        .args(["nodes", "remove", "build"])
        .output()
        .unwrap();
    assert!(out.status.success());
    driver.wait_gone(".node-binding");
}

/// Serve `page` to whoever connects to the returned address, for a while.
fn serve_page(page: String) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        listener.set_nonblocking(false).unwrap();
        for stream in listener.incoming().take(8) {
            let Ok(mut stream) = stream else { continue };
            use std::io::{Read, Write};
            let mut buf = [0u8; 4096];
            let _ = stream.read(&mut buf);
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
            let _ = stream.write_all(response.as_bytes());
        }
    });
    addr
}

#[test]
fn forged_cross_origin_posts_foreign_origins_and_wrong_hosts_are_refused() {
    let Some(SignedIn {
        driver,
        web,
        app,
        home,
    }) = signed_in(GATEWAY_ALLOWLIST)
    else {
        return;
    };
    let h = home.path();
    let path = app.trim_start_matches(&web.base()).to_owned();
    let hash = || -> String {
        let out = support::warden_in(h)
            .args(["approvals", "get", "--json"])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["hash"].as_str().unwrap().to_owned()
    };
    let base = hash();
    let before = std::fs::read(h.join("exec-approvals.json")).unwrap();

    // A page of another origin (same site: 127.0.0.1, so the browser even sends the
    // SameSite cookie) posts a valid edit, as a form and with fetch.
    let target = format!("{app}api/edit");
    let body = format!(r#"{{"op":"create-agent","base":"{base}","agent":"evil"}}"#);
    let page = format!(
        r#"<!doctype html><title>attacker</title>
<form id="f" method="POST" action="{target}" enctype="text/plain">
<input name='{{"op":"create-agent","base":"{base}","agent":"evil2","x":"' value='"}}'></form>
<script>
fetch("{target}", {{method: "POST", mode: "no-cors", credentials: "include",
  headers: {{"Content-Type": "application/json", "X-Warden-CSRF": "guess"}},
  body: {body:?}}}).catch(() => {{}}).finally(() => {{
    fetch("{target}", {{method: "POST", mode: "no-cors", credentials: "include",
      headers: {{"Content-Type": "text/plain"}}, body: {body:?}}}).catch(() => {{}})
      .finally(() => document.getElementById("f").submit());
}});
</script>"#
    );
    let attacker = serve_page(page);
    driver.goto(&format!("http://{attacker}/"));
    // The form's navigation lands on the approver's refusal.
    driver.wait_text("body", "refused");
    assert_eq!(
        std::fs::read(h.join("exec-approvals.json")).unwrap(),
        before,
        "a forged request changed the file"
    );

    // The same request with the real session cookie and CSRF token, but from a
    // foreign origin, is refused; from the page's own origin it is taken (so it is
    // the origin that refused it).
    driver.goto(&app);
    driver.wait_text("#status", "live");
    let csrf = driver
        .script("return document.querySelector('meta[name=\"warden-csrf\"]').content")
        .as_str()
        .unwrap()
        .to_owned();
    let cookies = driver.cookies();
    let session = cookies
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "warden_console")
        .unwrap();
    assert_eq!(session["httpOnly"], true);
    assert_eq!(session["sameSite"], "Strict");
    // Cookies are not isolated by port: the secret path keeps the browser from sending
    // this one to any other server on 127.0.0.1.
    assert_eq!(session["path"].as_str(), Some(path.as_str()));
    let cookie = format!("warden_console={}", session["value"].as_str().unwrap());
    let post = |host: &str, origin: Option<&str>, csrf: &str, agent: &str| {
        let body = format!(
            r#"{{"op":"create-agent","base":"{}","agent":"{agent}"}}"#,
            hash()
        );
        let origin = origin
            .map(|o| format!("Origin: {o}\r\n"))
            .unwrap_or_default();
        http(
            &web.addr,
            &format!(
                "POST {path}api/edit HTTP/1.1\r\nHost: {host}\r\n{origin}Cookie: {cookie}\r\n\
                 X-Warden-CSRF: {csrf}\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ),
        )
    };
    let (status, _, text) = post(&web.addr, Some("http://evil.test"), &csrf, "evil3");
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("origin"), "{text}");
    let (status, _, text) = post(&web.addr, None, &csrf, "evil4");
    assert_eq!(status, 403, "{text}");
    let (status, _, text) = post(&web.addr, Some(&web.base()), "wrong", "evil5");
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("CSRF"), "{text}");
    let port = web.addr.rsplit(':').next().unwrap();
    let (status, _, text) = post(
        &format!("evil.test:{port}"),
        Some(&format!("http://evil.test:{port}")),
        &csrf,
        "evil6",
    );
    assert_eq!(status, 421, "{text}");
    assert_eq!(
        std::fs::read(h.join("exec-approvals.json")).unwrap(),
        before,
        "a refused request changed the file"
    );
    let (status, _, text) = post(&web.addr, Some(&web.base()), &csrf, "ops");
    assert_eq!(status, 200, "{text}");
    assert!(file(h)["agents"].get("ops").is_some());
    assert!(file(h)["agents"].get("evil").is_none());

    // DNS rebinding: the browser reaches the approver under another name (evil.test is
    // mapped to 127.0.0.1) and gets a refusal, not the console or its state.
    driver.goto(&format!("http://evil.test:{port}/"));
    driver.wait_text("body", "is not this approver");
    driver.goto(&format!("http://evil.test:{port}{path}api/state"));
    driver.wait_text("body", "DNS rebinding");
    // Nothing is served outside the secret path, even with the session cookie.
    let (status, _, _) = http(
        &web.addr,
        &format!(
            "GET /api/state HTTP/1.1\r\nHost: {}\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n",
            web.addr
        ),
    );
    assert_eq!(status, 404);
    // The record is read only by the page: a history request without the page's CSRF
    // token, or without its session, gets nothing of it.
    for (cookie, token, says) in [
        (cookie.as_str(), "wrong", "CSRF"),
        ("", csrf.as_str(), "not logged in"),
    ] {
        let body = "{}";
        let (status, _, text) = http(
            &web.addr,
            &format!(
                "POST {path}api/history HTTP/1.1\r\nHost: {}\r\nOrigin: {}\r\nCookie: {cookie}\r\n\
                 X-Warden-CSRF: {token}\r\nContent-Type: application/json\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                web.addr,
                web.base(),
                body.len()
            ),
        );
        assert!(status == 403 || status == 401, "{status}: {text}");
        assert!(text.contains(says) && !text.contains("records"), "{text}");
    }
    // And the login link works once only.
    driver.goto(&web.login);
    driver.wait_text("body", "used already");
}

#[test]
fn the_page_is_served_on_loopback_only() {
    let tmp = support::warden_home();
    let h = tmp.path();
    for addr in ["0.0.0.0:0", "192.0.2.1:7879", "[::]:0"] {
        let out = support::warden_in(h)
            .args(["approvals", "ui", "--web", "--listen", addr])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125), "{addr}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("loopback only"), "{addr}: {err}");
        assert!(
            !h.join("exec-approvals.sock").exists(),
            "{addr}: the socket was bound before the refusal"
        );
    }
    // --listen belongs to --web.
    let out = support::warden_in(h)
        .args(["approvals", "ui", "--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--web"));
}

#[test]
fn the_console_lists_a_gateways_live_runs_and_kills_one() {
    let Some(SignedIn {
        driver,
        web: _web,
        app: _,
        home,
    }) = signed_in(GATEWAY_ALLOWLIST)
    else {
        return;
    };
    let h = home.path();
    // No gateway yet: the panel says where runs would come from.
    driver.wait_text("#runs-note", "no gateway is running");

    let workspace = tempfile::tempdir().unwrap();
    let gateway = support::GatewayProcess::start(h, workspace.path(), &[]);
    let token = support::gateway_token(h, "main");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = runtime.block_on(mcp_runs::http_client(&gateway.addr, &token));
    // A background server whose output would drive a terminal (a title, a screen clear).
    let started = runtime.block_on(mcp_runs::structured(
        &client,
        "exec",
        serde_json::json!({
            "command": "printf 'title\\033]0;pwned\\007\\033[2Jshown\\n'; echo pid=$$; exec sleep 300",
            "background": true
        }),
    ));
    let run = started["runId"].as_str().unwrap().to_owned();
    // It asks this approver first (allowlist, on-miss): pending in both panels.
    driver.wait_text("#runs tr.run td.state", "awaiting operator approval");
    driver.wait_text(".request", "exec sleep 300");
    driver.click(".request button.allow-once", "");
    driver.wait_text("#runs tr.run td.state", "running");

    // Its output tail, made harmless, under the row clicked.
    driver.click("#runs tr.run", &run);
    let tail = driver.wait_text("#run-tail", "pid=");
    assert!(tail.contains("titleshown"), "{tail:?}");
    assert!(
        !tail.contains('\u{1b}') && !tail.contains("pwned"),
        "{tail:?}"
    );
    let pid: i32 = tail
        .lines()
        .find_map(|l| l.strip_prefix("pid="))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    screenshot(&driver, "web-approver-live-runs.png");

    // Killed from the page: its process is gone and its agent reads who ended it.
    driver.click("#runs button.kill", "Kill");
    mcp_runs::wait_gone(pid);
    driver.wait_text("#runs tr.run td.state", "killed by the gateway's operator");
    let polled = runtime.block_on(mcp_runs::structured(
        &client,
        "process",
        serde_json::json!({"action": "poll", "runId": run}),
    ));
    assert!(
        polled["message"]
            .as_str()
            .unwrap()
            .contains("killed by the gateway's operator"),
        "{polled}"
    );
    runtime.block_on(client.cancel()).unwrap();
}

/// `warden gateway run` hosting its web approver: the gateway's address and the web
/// approver (its login link, and the gateway as its process).
fn gateway_with_its_approver(home: &Path, workspace: &Path) -> (String, WebApprover) {
    let child = support::warden_in(home)
        .args([
            "gateway",
            "run",
            "--listen",
            "127.0.0.1:0",
            "--approver-listen",
            "127.0.0.1:0",
            "--workspace",
        ])
        .arg(workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut http = String::new();
    let web = WebApprover::announced(child, |lines| {
        let first = lines.next().unwrap();
        http = first
            .split("http://")
            .nth(1)
            .unwrap_or_else(|| panic!("no address in {first:?}"))
            .split('/')
            .next()
            .unwrap()
            .to_owned();
    });
    (http, web)
}

#[test]
fn the_gateway_hosts_the_web_approver_so_a_question_needs_no_second_terminal() {
    let Some(driver) = Driver::start() else {
        return;
    };
    let home = support::warden_home();
    support::configure(home.path(), GATEWAY_ALLOWLIST, HOST_ALLOWLIST);
    let workspace = tempfile::tempdir().unwrap();
    let (http, web) = gateway_with_its_approver(home.path(), workspace.path());
    log_in(&driver, &web);

    // An agent's command that needs a human: the gateway's own page asks, and the answer
    // comes back to the agent's call.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = runtime.block_on(mcp_runs::http_client(
        &http,
        &support::gateway_token(home.path(), "main"),
    ));
    let asking = runtime.spawn({
        let peer = client.peer().clone();
        async move {
            peer.call_tool(
                rmcp::model::CallToolRequestParams::new("exec").with_arguments(
                    serde_json::json!({"argv": ["/usr/bin/echo", "approved on the gateway's page"]})
                        .as_object()
                        .unwrap()
                        .clone(),
                ),
            )
            .await
            .unwrap()
        }
    });
    driver.wait_text(".request", "approved on the gateway");
    driver.click(".request button.allow-once", "");
    let result = runtime.block_on(asking).unwrap();
    let value = result.structured_content.unwrap();
    assert_eq!(
        value["stdout"], "approved on the gateway's page\n",
        "{value}"
    );
    assert_eq!(value["decision"]["reason"], "approved-once", "{value}");
    runtime.block_on(client.cancel()).unwrap();

    // A second gateway in the same home finds the approver running, says so, and serves.
    let second = support::warden_in(home.path())
        .args([
            "gateway",
            "run",
            "--listen",
            "127.0.0.1:0",
            "--approver-listen",
            "127.0.0.1:0",
            "--workspace",
        ])
        .arg(workspace.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut second = Stopped(second);
    let mut out = BufReader::new(second.0.stdout.take().unwrap()).lines();
    assert!(
        out.next()
            .unwrap()
            .unwrap()
            .starts_with("warden gateway listening on")
    );
    let said = BufReader::new(second.0.stderr.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .find(|l| l.contains("not hosting the web approver"))
        .expect("the second gateway says why it hosts no approver");
    assert!(said.contains("already listening"), "{said}");
    drop(second);
    drop(web);
}

/// A child killed (and reaped) when the test ends.
struct Stopped(Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_history_page_filters_the_record_and_shows_a_runs_whole_record() {
    let Some(SignedIn {
        driver,
        web: _web,
        app: _,
        home,
    }) = signed_in(GATEWAY_ALLOWLIST)
    else {
        return;
    };
    let h = home.path();
    // Asked on this page and allowed once — a command text that would drive a terminal —
    // then one a human denies.
    let child = exec(h, &["--", "echo", "title\u{1b}]0;pwned\u{7}shown"]);
    driver.wait_text(".request pre.prompt-text", "echo");
    driver.press("o");
    support::assert_success(&finish(child, Duration::from_secs(30)));
    driver.wait_gone(".request");
    let child = exec(h, &["--", "touch", "nope"]);
    driver.wait_text(".request pre.prompt-text", "touch");
    driver.press("d");
    let out = finish(child, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(77), "{out:?}");

    // Denied runs only.
    driver.script(
        "const f = document.querySelector('#history-form'); f.decision.value = 'deny'; f.kind.value = 'run';",
    );
    driver.click("#history-form button", "Show");
    driver.wait_text("#history tr.record td.command", "touch nope");
    let rows = driver.texts("#history tr.record td.command");
    assert_eq!(rows.len(), 1, "{rows:?}");
    // Its whole record, then every record of its run: decision, answer, run.
    driver.click("#history tr.record", "touch nope");
    let detail = driver.wait_text("#history-detail", "\"outcome\": \"denied\"");
    assert!(detail.contains("\"runId\""), "{detail}");
    driver.click("#history-run", "All records of this run");
    driver.wait_text("#history tr.record td.kind", "answer");
    let kinds: Vec<String> = driver
        .texts("#history tr.record td.kind")
        .into_iter()
        .map(|(_, t)| t)
        .collect();
    assert_eq!(kinds, ["run", "answer", "decision"], "newest first");
    let answer = driver.wait_text("#history tr.record", "answer");
    assert!(answer.contains("deny"), "{answer}");
    screenshot(&driver, "web-approver-history.png");

    // Everything: the allowed echo is there, its text made harmless.
    driver.script("document.querySelector('#history-form').reset();");
    driver.click("#history-form button", "Show");
    let echo = driver.wait_text("#history tr.record td.command", "shown");
    assert!(
        !echo.contains('\u{1b}') && !echo.contains('\u{7}'),
        "{echo:?}"
    );
    // A filter the record cannot take is refused with its reason.
    driver.script("document.querySelector('#history-form').since.value = 'last tuesday';");
    driver.click("#history-form button", "Show");
    driver.wait_text("#history-note", "since");
}

/// A sandboxed run whose network goes through Warden's proxy, with no host allowed.
const PROXY_SANDBOX: &str = "[tools.exec]\nhost = \"sandbox\"\nask = \"on-miss\"\n\n[[agents.list]]\nid = \"main\"\n\n[sandbox]\nnetwork = \"proxy\"\n\n[sandbox.egress]\nallow = []\n";

/// A loopback HTTP server answering every request with `body`; its address.
fn answering(body: &'static str) -> std::net::SocketAddr {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let mut head = [0u8; 4096];
            let _ = conn.read(&mut head);
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}

/// A proxied sandbox run's question about a host its rules do not name is answered on
/// the page: the card says it is a network connection, the prompt names the host and
/// port and that the address is loopback, and the one allow-always button names exactly
/// the rule it stores — pressing `a` stores it in the agent's `egressAllow`, and the run
/// reaches the host; the console lists the stored host under the agent and removes it.
#[test]
fn a_connection_question_is_answered_on_the_page_and_allow_always_stores_the_host() {
    if !support::bwrap_usable() {
        return;
    }
    if !Path::new("/usr/bin/curl").exists() {
        eprintln!(
            "SKIPPED: /usr/bin/curl is missing (.ci/run installs it): the run fetches with it"
        );
        return;
    }
    let Some(SignedIn {
        driver,
        web: _web,
        app: _,
        home,
    }) = signed_in(PROXY_SANDBOX)
    else {
        return;
    };
    let h = home.path();
    let upstream = answering("reached from the sandbox");
    let url = format!("http://{upstream}/");
    let child = exec(h, &["--", "curl", "-sS", "--max-time", "60", &url]);
    let label = driver.wait_text(".request button.allow-always", "egressAllow");
    let rule = format!("127.0.0.1:{}", upstream.port());
    assert_eq!(
        label,
        format!("Allow always — stores {rule} (egressAllow) (a)")
    );
    let shown = driver.wait_text(".request pre.prompt-text", "connects:");
    assert!(
        shown.contains(&format!("connects: {rule}")) && shown.contains("127.0.0.1 is loopback"),
        "{shown}"
    );
    driver.wait_text(".request .meta", "a network connection");
    screenshot(&driver, "web-approver-connection.png");
    driver.press("a");
    let out = finish(child, Duration::from_secs(60));
    support::assert_success(&out);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("reached from the sandbox"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        file(h)["agents"]["main"]["egressAllow"],
        serde_json::json!([rule])
    );
    driver.wait_text("#recent li", "egressAllow");
    // The console lists the stored host under the agent, and removes it.
    let stored = format!(".agent[data-agent='main'] .egress-allow li[data-rule='{rule}']");
    driver.wait_text(&stored, &rule);
    driver.click(&format!("{stored} button.remove-egress"), "Remove");
    driver.wait_gone(&stored);
    assert_eq!(
        file(h)["agents"]["main"]["egressAllow"],
        serde_json::Value::Null
    );
}
