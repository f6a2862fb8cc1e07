//! `proxy` mode in the container backend: the run's listener is made inside the
//! container's own network namespace (a `--network none` container has only loopback),
//! by the helper binary run for it on the host (`HELPER __egress-join PID FD`): it enters
//! the namespace of the container's first process — its user namespace first, when the
//! engine runs rootless — listens on an unused loopback port there, hands the listener
//! to the run's broker over descriptor `FD` (`broker.rs`, as the bubblewrap sandbox's
//! helper does) and prints the port, which the run's proxy variables then name. Warden
//! alone holds the listener; nothing of Warden's runs in the container.
//!
//! What is refused, before anything is entered: a network namespace that is this
//! machine's own (a listener there would be the host's, open to every local process),
//! and a user namespace another user owns (the helper would be a process of this user —
//! of root, when Warden runs as root — that the namespace's owner may trace: it is made
//! non-dumpable first too). After entering, a namespace with any interface but loopback
//! is refused (the container's network changed, or its process id now names another
//! process). What enters is a process of its own, because the kernel lets only a
//! single-threaded process join a user namespace.

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
    // Nothing that shares a namespace with the container may read or trace this
    // process while it holds the broker's descriptor.
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(|e| format!("cannot make the helper non-dumpable: {e}"))?;
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
        let owner = owner_uid(&user)?;
        let me = rustix::process::geteuid().as_raw();
        if owner != me {
            return Err(format!(
                "the container's user namespace belongs to user {owner}: run Warden as that user"
            ));
        }
        rustix::thread::move_into_link_name_space(user.as_fd(), Some(LinkNameSpaceType::User))
            .map_err(|e| format!("cannot enter the container's user namespace: {e}"))?;
    }
    rustix::thread::move_into_link_name_space(net.as_fd(), Some(LinkNameSpaceType::Network))
        .map_err(|e| format!("cannot enter the container's network namespace: {e}"))?;
    let interfaces = interfaces()?;
    if interfaces.iter().any(|name| name != "lo") {
        return Err(format!(
            "the container's network namespace has interfaces besides loopback ({}): it is not --network none",
            interfaces.join(", ")
        ));
    }
    super::forward::listen_and_hand(broker, None)
        .map_err(|e| format!("the container's egress listener: {e}"))
}

/// The uid that owns the user namespace `ns` (`NS_GET_OWNER_UID`).
fn owner_uid(ns: &OwnedFd) -> Result<u32, String> {
    // `_IO(0xb7, 0x4)`, linux/nsfs.h.
    const NS_GET_OWNER_UID: u64 = 0xb704;
    let mut uid: nix::libc::uid_t = 0;
    // SAFETY: the ioctl writes one uid_t to the pointer, which outlives the call; `ns` is
    // an open user namespace file.
    let r = unsafe {
        nix::libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(ns),
            NS_GET_OWNER_UID as _,
            &mut uid as *mut nix::libc::uid_t,
        )
    };
    if r != 0 {
        return Err(format!(
            "who owns the container's user namespace: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(uid)
}

/// The network interfaces of this thread's network namespace (`/proc/thread-self/net`
/// follows the namespace the thread is in).
fn interfaces() -> Result<Vec<String>, String> {
    let dev = std::fs::read_to_string("/proc/thread-self/net/dev")
        .map_err(|e| format!("the container's network interfaces: {e}"))?;
    Ok(dev
        .lines()
        .skip(2)
        .filter_map(|line| line.split(':').next())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .collect())
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
