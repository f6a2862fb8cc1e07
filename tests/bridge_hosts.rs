//! End-to-end across hosts, on one machine: a gateway and a node in two network
//! namespaces linked by a veth (TLS pinned by fingerprint, a partition that drops no FIN),
//! a node reached through a real `sshd` (key authentication, a throwaway host key), and
//! a node inside a Podman container reached with `podman exec -i`. Each test that lacks
//! what it needs (root for namespaces, `sshd`, podman) says `SKIPPED: …` and returns;
//! `.ci/run` installs what they need.

// Tests set up and inspect real files and processes.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]
// Test helpers panic on failure by design.
#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(clippy::print_stderr)]

#[path = "support/bridge.rs"]
mod bridge_support;
#[path = "support/netns.rs"]
mod netns;
#[path = "../crates/sandbox/tests/support/podman.rs"]
mod podman;
mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bridge_support::{
    Gateway, add_stdio_node, client, exec, home_with, pair_stdio, wait_node, warden_bin, workspace,
};
use serde_json::json;
use support::{gateway_token, warden_in};

const GATEWAY_CONFIG: &str = "[tools.exec]\nhost = \"node\"\nsecurity = \"full\"\nask = \"off\"\n";
const GATEWAY_FILE: &str =
    r#"{"version":1,"defaults":{"security":"deny","ask":"off","askFallback":"deny"}}"#;
/// `main` may run `/usr/bin/echo` and is asked (nobody answers) about the rest; `ops`
/// may run anything.
const NODE_FILE: &str = r#"{"version":1,"defaults":{"security":"allowlist","ask":"on-miss","askFallback":"deny"},
    "agents":{"main":{"allowlist":[{"pattern":"/usr/bin/echo"}]},"ops":{"security":"full","ask":"off"}}}"#;

fn skip(why: &str) {
    let current = std::thread::current();
    podman::shout(&format!(
        "SKIPPED: {} because {why}",
        current.name().unwrap_or("a bridge host test")
    ));
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `warden node ARGS` in `home`, inside namespace `ns`.
fn node_in(ns: &str, home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns])
        .arg(warden_bin())
        .arg("node")
        .args(args)
        .env("WARDEN_HOME", home)
        .env("WARDEN_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_pair_over_pinned_tls_run_under_the_nodes_file_and_survive_a_partition() {
    let hosts = match netns::HostPair::new("b") {
        Ok(h) => h,
        Err(why) => {
            return skip(&format!(
                "no network namespaces here ({why}); run as root with iproute2"
            ));
        }
    };
    let gw = home_with(GATEWAY_CONFIG, GATEWAY_FILE);
    let node = home_with("", NODE_FILE);
    let (_ws, ws) = workspace();
    let bridge_addr = format!("{}.1:7879", hosts.prefix);
    let g = Gateway::start_with(
        &["ip", "netns", "exec", &hosts.a],
        gw.path(),
        &ws,
        &[
            "--bridge-listen",
            &bridge_addr,
            "--bridge-tls",
            "--bridge-heartbeat",
            "0.5",
        ],
    );
    let fp = g.fingerprint();
    let http = netns::forward_into(&hosts.a, g.http.clone());

    // Host B asks; the operator on host A approves.
    let url = format!("wss://{bridge_addr}");
    let pairing = node_in(
        &hosts.b,
        node.path(),
        &[
            "pair",
            "--gateway",
            &url,
            "--fingerprint",
            &fp,
            "--id",
            "hostb",
        ],
    )
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        let all = bridge_support::nodes(gw.path());
        if all["nodes"][0]["state"] == "pending" {
            assert_eq!(
                all["nodes"][0]["requests"][0]["remote"],
                format!("{}.2", hosts.prefix)
            );
            break all["nodes"][0]["requests"][0]["code"]
                .as_str()
                .unwrap()
                .to_owned();
        }
        assert!(Instant::now() < deadline, "no request: {all:#}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = warden_in(gw.path())
        .args(["nodes", "approve", "hostb", "--code", &code])
        .output()
        .unwrap();
    support::assert_success(&out);
    let out = pairing.wait_with_output().unwrap();
    support::assert_success(&out);
    let _serving = KillOnDrop(
        node_in(&hosts.b, node.path(), &["run", "--heartbeat", "0.5"])
            .spawn()
            .unwrap(),
    );
    let entry = wait_node(gw.path(), "hostb", true, Duration::from_secs(20));
    assert_eq!(entry["remote"], format!("{}.2", hosts.prefix));

    let main = client(&http, &gateway_token(gw.path(), "main")).await;
    let r = exec(&main, json!({"argv": ["/usr/bin/echo", "from host b"]})).await;
    assert_eq!(
        (r["host"].as_str(), r["stdout"].as_str()),
        (Some("hostb"), Some("from host b\n")),
        "{r:#}"
    );
    // The gateway says full; host B's own file says ask, and nobody answers there.
    let r = exec(&main, json!({"argv": ["/usr/bin/id"]})).await;
    assert_eq!(r["reason"], "no-approver", "{r:#}");

    // A partition mid-run: no FIN crosses, heartbeats stop. The caller hears promptly,
    // and host B ends the run's whole tree on its own.
    let ops = client(&http, &gateway_token(gw.path(), "ops")).await;
    let pidfile = node.path().join("run.pid");
    let took = bridge_support::cut_mid_run(&ops, "hostb", &pidfile, || hosts.cut()).await;
    assert!(took < Duration::from_secs(6), "the caller waited {took:?}");
    eprintln!("partition: the call failed after {took:?}; host B's tree is gone");

    // Mended: host B comes back by itself.
    hosts.mend();
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let r = exec(&main, json!({"argv": ["/usr/bin/echo", "back"]})).await;
        if r["stdout"] == "back\n" {
            break;
        }
        assert!(Instant::now() < deadline, "host B did not come back: {r:#}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A throwaway sshd on loopback: its own host key, one authorized client key.
struct Sshd {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Sshd {
    fn start() -> Result<Sshd, String> {
        let sshd = Path::new("/usr/sbin/sshd");
        if !sshd.exists() || Command::new("ssh-keygen").arg("-?").output().is_err() {
            return Err(
                "sshd/ssh-keygen are not installed (apt-get install openssh-server openssh-client)"
                    .into(),
            );
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for key in ["host", "client"] {
            let out = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(d.join(key))
                .output()
                .unwrap();
            support::assert_success(&out);
        }
        std::fs::copy(d.join("client.pub"), d.join("authorized_keys")).unwrap();
        let port = bridge_support::free_port();
        let host_pub = std::fs::read_to_string(d.join("host.pub")).unwrap();
        std::fs::write(
            d.join("known_hosts"),
            format!("[127.0.0.1]:{port} {host_pub}"),
        )
        .unwrap();
        std::fs::write(
            d.join("sshd_config"),
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {host}\nAuthorizedKeysFile {auth}\n\
                 PidFile {pid}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nLogLevel ERROR\n",
                host = d.join("host").display(),
                auth = d.join("authorized_keys").display(),
                pid = d.join("sshd.pid").display(),
            ),
        )
        .unwrap();
        // sshd's privilege separation directory.
        std::fs::create_dir_all("/run/sshd").ok();
        let child = Command::new(sshd)
            .arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(d.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start sshd: {e}"))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err("sshd did not start listening".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(Sshd { child, port, dir })
    }

    /// `ssh … root@127.0.0.1 REMOTE…` on `port`.
    fn command(&self, port: u16, remote: &[String]) -> Vec<String> {
        let d = self.dir.path();
        let mut cmd: Vec<String> = vec![
            "/usr/bin/ssh".into(),
            "-F".into(),
            "/dev/null".into(),
            "-i".into(),
            d.join("client").display().to_string(),
            "-o".into(),
            "IdentitiesOnly=yes".into(),
            "-o".into(),
            "BatchMode=yes".into(),
            "-o".into(),
            "StrictHostKeyChecking=yes".into(),
            "-o".into(),
            format!("UserKnownHostsFile={}", d.join("known_hosts").display()),
            "-p".into(),
            port.to_string(),
            "root@127.0.0.1".into(),
        ];
        cmd.extend(remote.iter().cloned());
        cmd
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_behind_ssh_is_reached_through_a_real_sshd_and_a_failing_one_says_why() {
    if nix::unistd::geteuid().as_raw() != 0 {
        return skip("the throwaway sshd logs in as the current user, which needs root here");
    }
    let sshd = match Sshd::start() {
        Ok(s) => s,
        Err(why) => return skip(&why),
    };
    let gw = home_with(GATEWAY_CONFIG, GATEWAY_FILE);
    let node = home_with("", NODE_FILE);
    let (_ws, ws) = workspace();
    let remote = vec![
        "env".to_owned(),
        format!("WARDEN_HOME={}", node.path().display()),
        warden_bin().display().to_string(),
        "node".into(),
        "stdio".into(),
    ];
    let good = sshd.command(sshd.port, &remote);
    let good: Vec<&str> = good.iter().map(String::as_str).collect();
    add_stdio_node(gw.path(), node.path(), "over-ssh", "SSH box", &good);
    // A second node whose sshd is not there: it never connects, and says why.
    let closed = bridge_support::free_port();
    let bad = sshd.command(closed, &remote);
    let out = warden_in(gw.path())
        .args(["nodes", "add", "ssh-down", "--"])
        .args(&bad)
        .output()
        .unwrap();
    assert!(out.status.success());
    let _token = String::from_utf8(out.stdout).unwrap();

    let g = Gateway::start(gw.path(), &ws, &[]);
    wait_node(gw.path(), "over-ssh", true, Duration::from_secs(30));
    let c = client(&g.http, &gateway_token(gw.path(), "main")).await;
    let r = exec(
        &c,
        json!({"argv": ["/usr/bin/echo", "through sshd"], "node": "over-ssh"}),
    )
    .await;
    assert_eq!(r["stdout"], "through sshd\n", "{r:#}");
    assert_eq!(r["host"], "over-ssh");
    let r = exec(&c, json!({"argv": ["/usr/bin/id"], "node": "SSH box"})).await;
    assert_eq!(r["reason"], "no-approver", "{r:#}");

    let deadline = Instant::now() + Duration::from_secs(20);
    let down = loop {
        let n = bridge_support::nodes(gw.path());
        let down = n["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["id"] == "ssh-down")
            .unwrap()
            .clone();
        if down["lastError"].is_string() {
            break down;
        }
        assert!(
            Instant::now() < deadline,
            "no status for the failing node: {n:#}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let why = down["lastError"].as_str().unwrap();
    assert!(
        why.contains("/usr/bin/ssh") && why.contains("exit status: 255"),
        "{why}"
    );
    assert!(why.to_lowercase().contains("connection refused"), "{why}");
    assert_eq!(down["connected"], false);
    drop(g);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_inside_a_container_is_reached_with_podman_exec() {
    let node = home_with(
        "",
        r#"{"version":1,"defaults":{"security":"full","ask":"off","askFallback":"deny"}}"#,
    );
    let home = node.path().display().to_string();
    let exe = warden_bin().display().to_string();
    // The host's warden binary and the libraries it links, read-only, in a busybox image.
    let setup = podman::Setup {
        extra: [
            "-v",
            "/usr/lib/x86_64-linux-gnu:/lib/x86_64-linux-gnu:ro",
            "-v",
            "/lib64:/lib64:ro",
            "-v",
            &format!("{exe}:/usr/local/bin/warden:ro"),
            "-v",
            &format!("{home}:{home}"),
        ]
        .map(String::from)
        .to_vec(),
        ..podman::Setup::default()
    };
    if !Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6").exists() {
        return skip("this test mounts the host's x86_64 glibc into the container");
    }
    let Some(fx) = podman::Fixture::with("bridge-node", setup) else {
        return;
    };
    let gw = home_with(GATEWAY_CONFIG, GATEWAY_FILE);
    let (_ws, ws) = workspace();
    let mut cmd: Vec<String> = vec![fx.podman.display().to_string()];
    cmd.extend(podman::SETUP_OPTIONS.iter().map(|s| (*s).to_owned()));
    cmd.extend(
        [
            "exec",
            "-i",
            "-e",
            "HOME=/",
            "-e",
            &format!("WARDEN_HOME={home}"),
            &fx.name,
            "/usr/local/bin/warden",
            "node",
            "stdio",
        ]
        .map(String::from),
    );
    let out = warden_in(gw.path())
        .args(["nodes", "add", "in-ctr", "--"])
        .args(&cmd)
        .output()
        .unwrap();
    support::assert_success(&out);
    pair_stdio(
        node.path(),
        "in-ctr",
        &String::from_utf8(out.stdout).unwrap(),
    );

    let g = Gateway::start(gw.path(), &ws, &[]);
    wait_node(gw.path(), "in-ctr", true, Duration::from_secs(40));
    let c = client(&g.http, &gateway_token(gw.path(), "main")).await;
    // The fixture's image carries a file naming it: the command ran inside.
    let r = exec(&c, json!({"argv": ["/bin/cat", "/etc/warden-test-id"]})).await;
    assert_eq!(r["status"], "finished", "{r:#}");
    assert_eq!(r["host"], "in-ctr");
    assert_eq!(r["stdout"].as_str().unwrap().trim(), fx.name);
    drop(g);
}
