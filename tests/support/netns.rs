//! Two hosts on one machine: network namespaces joined by a veth pair whose ends carry
//! loopback-range addresses (127.77.N.1 and .2, with `route_localnet` so the kernel
//! routes them over the link) — no traffic leaves the machine or uses a private range.
//! Made with `ip netns`/`ip link` (root), removed on drop. A test reaches a TCP port
//! inside a namespace through [`forward_into`], a relay whose outgoing sockets are made
//! by a thread that joined that namespace.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::Command;

/// A pair of namespaces linked by a veth.
pub struct HostPair {
    /// The first namespace's name.
    pub a: String,
    /// The second's.
    pub b: String,
    /// The link's addresses: `a` has `.1`, `b` has `.2`.
    pub prefix: String,
    link: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn sysctl(ns: &str, key: &str) -> Result<(), String> {
    ip(&["netns", "exec", ns, "sysctl", "-qw", &format!("{key}=1")])
}

impl HostPair {
    /// Make them, or say why not (not root, no `ip`, no netns support).
    pub fn new(tag: &str) -> Result<HostPair, String> {
        if nix::unistd::geteuid().as_raw() != 0 {
            return Err("network namespaces need root".into());
        }
        let id = std::process::id() % 50_000;
        let n = (id % 200) + 20;
        let pair = HostPair {
            a: format!("wdn{tag}a{id}"),
            b: format!("wdn{tag}b{id}"),
            prefix: format!("127.77.{n}"),
            link: format!("wv{tag}{id}"),
        };
        ip(&["netns", "add", &pair.a])?;
        ip(&["netns", "add", &pair.b])?;
        let (la, lb) = (format!("{}a", pair.link), format!("{}b", pair.link));
        ip(&["link", "add", &la, "type", "veth", "peer", "name", &lb])?;
        ip(&["link", "set", &la, "netns", &pair.a])?;
        ip(&["link", "set", &lb, "netns", &pair.b])?;
        for (ns, dev, host) in [(&pair.a, &la, 1), (&pair.b, &lb, 2)] {
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{}.{host}/24", pair.prefix),
                "dev",
                dev,
            ])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            sysctl(ns, "net.ipv4.conf.all.route_localnet")?;
            sysctl(ns, &format!("net.ipv4.conf.{dev}.route_localnet"))?;
        }
        Ok(pair)
    }

    /// Cut the link (from `b`'s side): a partition, no FIN or RST crosses it.
    pub fn cut(&self) {
        ip(&[
            "-n",
            &self.b,
            "link",
            "set",
            &format!("{}b", self.link),
            "down",
        ])
        .unwrap();
    }

    /// Mend it.
    pub fn mend(&self) {
        ip(&[
            "-n",
            &self.b,
            "link",
            "set",
            &format!("{}b", self.link),
            "up",
        ])
        .unwrap();
    }
}

impl Drop for HostPair {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.a]);
        let _ = ip(&["netns", "del", &self.b]);
    }
}

/// A loopback address of this namespace that relays each connection to `target` inside
/// namespace `ns`.
pub fn forward_into(ns: &str, target: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let handle = std::fs::File::open(format!("/run/netns/{ns}")).unwrap();
    std::thread::spawn(move || {
        // SAFETY: setns on a valid namespace descriptor changes only this thread's
        // network namespace; the listener made before keeps its own.
        let rc = unsafe { libc::setns(handle.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
        for down in listener.incoming() {
            let Ok(down) = down else { break };
            let Ok(up) = TcpStream::connect(&target) else {
                continue;
            };
            let (d2, u2) = (down.try_clone().unwrap(), up.try_clone().unwrap());
            std::thread::spawn(move || pump(down, up));
            std::thread::spawn(move || pump(u2, d2));
        }
    });
    addr
}

fn pump(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
