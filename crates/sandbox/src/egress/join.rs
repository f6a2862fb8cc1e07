//! `proxy` mode in the container backend: the run's listener is made inside the
//! container's own network namespace (a `--network none` container has only loopback),
//! by the helper binary run for it on the host (`HELPER __egress-join PID FD`): it enters
//! the namespace of the container's first process — its user namespace first, when the
//! engine runs rootless — listens on an unused loopback port there, hands the listener
//! to the run's broker over descriptor `FD` (`broker.rs`, as the bubblewrap sandbox's
//! helper does) and prints the port, which the run's proxy variables then name. Warden
//! alone holds the listener; nothing of Warden's runs in the container.
//!
//! A namespace that is this machine's own is refused: a listener there would be the
//! host's, open to every local process. What enters is a process of its own, because the
//! kernel lets only a single-threaded process join a user namespace.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{Mode, OFlags};
use rustix::thread::LinkNameSpaceType;

use crate::setup_failure::fail;

/// The helper's subcommand.
pub const SUBCOMMAND: &str = "__egress-join";

/// `__egress-join PID FD`: never returns; prints the port and exits 0, or says why and
/// exits 125.
pub fn main(args: &[String]) -> ! {
    let [pid, broker] = args else {
        fail("usage: __egress-join PID BROKER-FD")
    };
    let pid: u32 = pid
        .parse()
        .ok()
        .filter(|p| *p > 1)
        .unwrap_or_else(|| fail(format!("{pid:?} is not a container's process id")));
    let broker: i32 = broker
        .parse()
        .ok()
        .filter(|fd| *fd >= 3)
        .unwrap_or_else(|| fail(format!("{broker:?} is not a descriptor of 3 or more")));
    match listen_inside(pid, broker) {
        Ok(port) => {
            let mut out = std::io::stdout();
            let _ = writeln!(out, "{port}").and_then(|()| out.flush());
            std::process::exit(0)
        }
        Err(why) => fail(why),
    }
}

/// Enter process `pid`'s network namespace, listen on loopback there, hand the listener
/// to the broker on `broker`; the port.
fn listen_inside(pid: u32, broker: i32) -> Result<u16, String> {
    let open = |path: String| {
        rustix::fs::open(&path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).map_err(|e| {
            format!(
                "cannot open {path} ({e}): entering the container's network needs Warden to run as \
                 the user who runs the container (rootless podman) or as root"
            )
        })
    };
    let net = open(format!("/proc/{pid}/ns/net"))?;
    let user = open(format!("/proc/{pid}/ns/user"))?;
    let own_net = open("/proc/self/ns/net".to_owned())?;
    let own_user = open("/proc/self/ns/user".to_owned())?;
    if same(&net, &own_net)? {
        return Err(
            "the container uses this machine's own network (it is not --network none): nothing would stand between its commands and the network"
                .into(),
        );
    }
    if !same(&user, &own_user)? {
        rustix::thread::move_into_link_name_space(user.as_fd(), Some(LinkNameSpaceType::User))
            .map_err(|e| format!("cannot enter the container's user namespace: {e}"))?;
    }
    rustix::thread::move_into_link_name_space(net.as_fd(), Some(LinkNameSpaceType::Network))
        .map_err(|e| format!("cannot enter the container's network namespace: {e}"))?;
    let listener = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| format!("cannot listen on the container's loopback: {e}"))?;
    let port = listener
        .local_addr()
        .map_err(|e| format!("the listener's port: {e}"))?
        .port();
    super::broker::hand(broker, &listener, None)
        .map_err(|e| format!("the listener could not be handed over: {e}"))?;
    Ok(port)
}

/// Whether two namespace files are the same namespace (device and inode).
fn same(a: &OwnedFd, b: &OwnedFd) -> Result<bool, String> {
    let id = |fd: &OwnedFd| {
        rustix::fs::fstat(fd)
            .map(|st| (st.st_dev, st.st_ino))
            .map_err(|e| format!("stat of a namespace: {e}"))
    };
    Ok(id(a)? == id(b)?)
}
