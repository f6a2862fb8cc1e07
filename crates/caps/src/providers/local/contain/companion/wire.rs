//! What Warden and its companion say to each other over their socket pair: a request is
//! a header (magic, body length) and a body of length-prefixed fields, with the
//! descriptors it hands over attached to its first byte (`SCM_RIGHTS`); a spawn's reply
//! is the child's pid or the error number, and the answer to `Prepare` the standby's pid with
//! its socket attached. Only this process and its own companion hold
//! the socket, but the decoder still trusts nothing: every count and length is checked
//! against what is left of the body and against the descriptors that came with it.

use std::ffi::OsString;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};

/// The first word of every request ("WCMP").
const MAGIC: u32 = 0x5743_4d50;

/// The largest body accepted: far above any command line the kernel would execute
/// (its own limit on arguments and environment together is a few MiB).
const MAX_BODY: usize = 64 << 20;

/// The most descriptors one request may carry (the kernel's `SCM_MAX_FD` is 253).
pub(crate) const MAX_FDS: usize = 240;

/// Where the child starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Cwd {
    Path(PathBuf),
    /// The descriptor that came with the request.
    Fd,
}

/// One process to start: the fields of a `SpawnRequest` that cross the socket, and
/// what the descriptors attached to it are, in order: stdout, stderr, then stdin (if
/// piped), the working directory (if by handle), the v2 cgroup (if any), the v1 cgroup
/// directories, and the descriptors the child keeps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Spawn {
    pub argv: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    pub cwd: Cwd,
    pub stdin_piped: bool,
    pub v2: bool,
    pub v1: u32,
    pub keep: u32,
    /// `CLONE_NEW*` flags to clone with (only those in [`NAMESPACE_FLAGS`]).
    pub namespaces: u64,
    /// The process may be started outside the v2 cgroup (the run is also held by a v1
    /// `pids` cgroup): a standby made before the run may serve it.
    pub v2_optional: bool,
}

/// The clone flags a request may ask for: new namespaces, nothing else.
pub(crate) const NAMESPACE_FLAGS: u64 = (nix::libc::CLONE_NEWUSER
    | nix::libc::CLONE_NEWNS
    | nix::libc::CLONE_NEWPID
    | nix::libc::CLONE_NEWIPC
    | nix::libc::CLONE_NEWUTS
    | nix::libc::CLONE_NEWNET) as u64;

impl Spawn {
    /// Where the v2 cgroup's descriptor is among those that come with it (when `v2`).
    pub(crate) fn v2_index(&self) -> usize {
        2 + usize::from(self.stdin_piped) + usize::from(self.cwd == Cwd::Fd)
    }

    /// How many descriptors come with it.
    pub(crate) fn fd_count(&self) -> usize {
        2 + usize::from(self.stdin_piped)
            + usize::from(self.cwd == Cwd::Fd)
            + usize::from(self.v2)
            + self.v1 as usize
            + self.keep as usize
    }
}

/// A message to the companion.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Message {
    /// The `(flavor, warden.<pid>)` prefixes whose runs it ends once Warden is gone.
    Watch(Vec<(String, PathBuf)>),
    /// Start a process.
    Spawn(Spawn),
    /// Make a process ready in these `CLONE_NEW*` namespaces and hand it over (see
    /// [`send_standby`]).
    Prepare { namespaces: u64 },
    /// Remove these cgroup directories (children first) once the kernel lets them go:
    /// what a finished run left, still listing a process on its way out.
    Remove(Vec<PathBuf>),
}

const KIND_WATCH: u32 = 1;
const KIND_SPAWN: u32 = 2;
const KIND_PREPARE: u32 = 3;
const KIND_REMOVE: u32 = 4;

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) -> io::Result<()> {
    let len = u32::try_from(bytes.len()).map_err(|_| invalid("a field is too long"))?;
    put_u32(out, len);
    out.extend_from_slice(bytes);
    Ok(())
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("companion message: {what}"),
    )
}

/// The body of `message`.
pub(crate) fn encode(message: &Message) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    match message {
        Message::Watch(parents) => {
            put_u32(&mut out, KIND_WATCH);
            put_u32(&mut out, count(parents.len())?);
            for (flavor, path) in parents {
                put_bytes(&mut out, flavor.as_bytes())?;
                put_bytes(&mut out, path.as_os_str().as_bytes())?;
            }
        }
        Message::Spawn(s) => {
            put_u32(&mut out, KIND_SPAWN);
            put_u32(&mut out, count(s.argv.len())?);
            for a in &s.argv {
                put_bytes(&mut out, a.as_bytes())?;
            }
            put_u32(&mut out, count(s.env.len())?);
            for (k, v) in &s.env {
                put_bytes(&mut out, k.as_bytes())?;
                put_bytes(&mut out, v.as_bytes())?;
            }
            match &s.cwd {
                Cwd::Path(p) => {
                    out.push(0);
                    put_bytes(&mut out, p.as_os_str().as_bytes())?;
                }
                Cwd::Fd => out.push(1),
            }
            out.push(u8::from(s.stdin_piped));
            out.push(u8::from(s.v2));
            put_u32(&mut out, s.v1);
            put_u32(&mut out, s.keep);
            out.extend_from_slice(&s.namespaces.to_le_bytes());
            out.push(u8::from(s.v2_optional));
        }
        Message::Prepare { namespaces } => {
            put_u32(&mut out, KIND_PREPARE);
            out.extend_from_slice(&namespaces.to_le_bytes());
        }
        Message::Remove(dirs) => {
            put_u32(&mut out, KIND_REMOVE);
            put_u32(&mut out, count(dirs.len())?);
            for d in dirs {
                put_bytes(&mut out, d.as_os_str().as_bytes())?;
            }
        }
    }
    if out.len() > MAX_BODY {
        return Err(invalid("the request is too large"));
    }
    Ok(out)
}

fn count(n: usize) -> io::Result<u32> {
    u32::try_from(n).map_err(|_| invalid("too many fields"))
}

/// Reads a body front to back, refusing to run past its end.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> io::Result<&[u8]> {
        if self.0.len() < n {
            return Err(invalid("truncated"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> io::Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn flag(&mut self) -> io::Result<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(invalid("a flag is neither 0 nor 1")),
        }
    }
    fn u64(&mut self) -> io::Result<u64> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes([
            b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
        ]))
    }
    fn u32(&mut self) -> io::Result<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// A count of items that each take at least `min` bytes: never more than fit.
    fn count(&mut self, min: usize) -> io::Result<usize> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min) > self.0.len() {
            return Err(invalid("a count exceeds the body"));
        }
        Ok(n)
    }
    fn bytes(&mut self) -> io::Result<Vec<u8>> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
}

/// The message in `body`.
pub(crate) fn decode(body: &[u8]) -> io::Result<Message> {
    let mut r = Reader(body);
    let message = match r.u32()? {
        KIND_WATCH => {
            let n = r.count(8)?;
            let mut parents = Vec::with_capacity(n);
            for _ in 0..n {
                let flavor = String::from_utf8(r.bytes()?).map_err(|_| invalid("flavor"))?;
                let path = PathBuf::from(OsString::from_vec(r.bytes()?));
                parents.push((flavor, path));
            }
            Message::Watch(parents)
        }
        KIND_SPAWN => {
            let n = r.count(4)?;
            let argv = (0..n)
                .map(|_| r.bytes().map(OsString::from_vec))
                .collect::<io::Result<Vec<_>>>()?;
            if argv.is_empty() {
                return Err(invalid("no argv"));
            }
            let n = r.count(8)?;
            let env = (0..n)
                .map(|_| {
                    Ok((
                        OsString::from_vec(r.bytes()?),
                        OsString::from_vec(r.bytes()?),
                    ))
                })
                .collect::<io::Result<Vec<_>>>()?;
            let cwd = match r.u8()? {
                0 => Cwd::Path(PathBuf::from(OsString::from_vec(r.bytes()?))),
                1 => Cwd::Fd,
                _ => return Err(invalid("working directory kind")),
            };
            let stdin_piped = r.flag()?;
            let v2 = r.flag()?;
            let v1 = r.u32()?;
            let keep = r.u32()?;
            let namespaces = r.u64()?;
            if namespaces & !NAMESPACE_FLAGS != 0 {
                return Err(invalid("clone flags other than new namespaces"));
            }
            let v2_optional = r.flag()?;
            let s = Spawn {
                argv,
                env,
                cwd,
                stdin_piped,
                v2,
                v1,
                keep,
                namespaces,
                v2_optional,
            };
            if s.fd_count() > MAX_FDS {
                return Err(invalid("too many descriptors"));
            }
            Message::Spawn(s)
        }
        KIND_PREPARE => {
            let namespaces = r.u64()?;
            if namespaces & !NAMESPACE_FLAGS != 0 {
                return Err(invalid("clone flags other than new namespaces"));
            }
            Message::Prepare { namespaces }
        }
        KIND_REMOVE => {
            let n = r.count(4)?;
            let dirs = (0..n)
                .map(|_| r.bytes().map(|b| PathBuf::from(OsString::from_vec(b))))
                .collect::<io::Result<Vec<_>>>()?;
            Message::Remove(dirs)
        }
        _ => return Err(invalid("unknown kind")),
    };
    if !r.0.is_empty() {
        return Err(invalid("trailing bytes"));
    }
    Ok(message)
}

/// Send `message` with `fds` attached.
pub(crate) fn send(socket: BorrowedFd<'_>, message: &Message, fds: &[RawFd]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(invalid("too many descriptors"));
    }
    let body = encode(message)?;
    let mut header = Vec::with_capacity(8);
    put_u32(&mut header, MAGIC);
    put_u32(&mut header, body.len() as u32);
    let cmsgs = [ControlMessage::ScmRights(fds)];
    let sent = sendmsg::<()>(
        socket.as_raw_fd(),
        &[IoSlice::new(&header), IoSlice::new(&body)],
        if fds.is_empty() { &[] } else { &cmsgs },
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(io::Error::from)?;
    // A stream socket may take a large body in parts; the descriptors went with the first.
    let mut rest: Vec<u8> = header.into_iter().chain(body).skip(sent).collect();
    while !rest.is_empty() {
        let n = nix::sys::socket::send(socket.as_raw_fd(), &rest, MsgFlags::MSG_NOSIGNAL)
            .map_err(io::Error::from)?;
        rest.drain(..n);
    }
    Ok(())
}

/// Read exactly `buf.len()` bytes (`Ok(false)`: end of file before the first byte).
fn read_exact(socket: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match nix::unistd::read(socket, &mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(invalid("truncated")),
            Ok(n) => got += n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

/// The descriptors a message brought (SCM_RIGHTS, installed close-on-exec), owned; an
/// error if the kernel had to cut some off (they would be lost unseen).
fn received_fds(msg: &nix::sys::socket::RecvMsg<'_, '_, ()>) -> io::Result<Vec<OwnedFd>> {
    let mut fds = Vec::new();
    for cmsg in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(raw) = cmsg {
            // SAFETY: SCM_RIGHTS just installed these descriptors in our table; nothing
            // else owns them.
            fds.extend(
                raw.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    if msg.flags.contains(MsgFlags::MSG_CTRUNC) {
        return Err(invalid("descriptors were cut off"));
    }
    Ok(fds)
}

/// Receive the next message and the descriptors that came with it (close-on-exec);
/// `None` at end of file — the other side is gone.
pub(crate) fn receive(socket: BorrowedFd<'_>) -> io::Result<Option<(Message, Vec<OwnedFd>)>> {
    let mut header = [0u8; 8];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let (got, fds) = loop {
        let mut iov = [IoSliceMut::new(&mut header)];
        match recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(msg) => break (msg.bytes, received_fds(&msg)?),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    if got == 0 {
        return Ok(None);
    }
    if got < header.len() && !read_exact(socket, &mut header[got..])? {
        return Err(invalid("truncated header"));
    }
    let magic = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let len = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
    if magic != MAGIC || len > MAX_BODY {
        return Err(invalid("bad header"));
    }
    let mut body = vec![0u8; len];
    if len > 0 && !read_exact(socket, &mut body)? {
        return Err(invalid("truncated body"));
    }
    let message = decode(&body)?;
    let expected = match &message {
        Message::Spawn(s) => s.fd_count(),
        Message::Watch(_) | Message::Prepare { .. } | Message::Remove(_) => 0,
    };
    if fds.len() != expected {
        return Err(invalid("the descriptors do not match the request"));
    }
    Ok(Some((message, fds)))
}

/// A spawn's reply: the pid, or an error number.
pub(crate) fn send_reply(socket: BorrowedFd<'_>, result: Result<i32, i32>) -> io::Result<()> {
    let bytes = answer(result).to_le_bytes();
    let mut buf = &bytes[..];
    while !buf.is_empty() {
        let n = nix::sys::socket::send(socket.as_raw_fd(), buf, MsgFlags::MSG_NOSIGNAL)
            .map_err(io::Error::from)?;
        buf = &buf[n..];
    }
    Ok(())
}

/// A pid, or an error number as its negation (never 0), as both answers carry it.
fn answer(result: Result<i32, i32>) -> i32 {
    match result {
        Ok(pid) => pid,
        Err(errno) => -errno.max(1),
    }
}

/// The other side of [`answer`].
fn from_answer(value: i32) -> io::Result<i32> {
    if value > 0 {
        Ok(value)
    } else {
        Err(io::Error::from_raw_os_error(-value))
    }
}

/// The answer to `Prepare`: the ready process's pid and this side of its socket (over
/// which it takes one `Spawn` request), or why there is none.
pub(crate) fn send_standby(
    socket: BorrowedFd<'_>,
    standby: Result<(i32, BorrowedFd<'_>), i32>,
) -> io::Result<()> {
    let (value, fds) = match &standby {
        Ok((pid, fd)) => (answer(Ok(*pid)), vec![fd.as_raw_fd()]),
        Err(errno) => (answer(Err(*errno)), Vec::new()),
    };
    let cmsgs = [ControlMessage::ScmRights(&fds)];
    let body = value.to_le_bytes();
    let sent = sendmsg::<()>(
        socket.as_raw_fd(),
        &[IoSlice::new(&body)],
        if fds.is_empty() { &[] } else { &cmsgs },
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(io::Error::from)?;
    if sent != body.len() {
        return Err(invalid("short write"));
    }
    Ok(())
}

/// Read the answer to `Prepare` (see [`send_standby`]).
pub(crate) fn receive_standby(socket: BorrowedFd<'_>) -> io::Result<(i32, OwnedFd)> {
    let mut body = [0u8; 4];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let (got, fds) = loop {
        let mut iov = [IoSliceMut::new(&mut body)];
        match recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC | MsgFlags::MSG_WAITALL,
        ) {
            Ok(msg) => break (msg.bytes, received_fds(&msg)?),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    if got == 0 {
        return Err(io::Error::new(
            io::ErrorKind::BrokenPipe,
            "the companion is gone",
        ));
    }
    if got != body.len() {
        return Err(invalid("truncated answer"));
    }
    let pid = from_answer(i32::from_le_bytes(body))?;
    match <[OwnedFd; 1]>::try_from(fds) {
        Ok([socket]) => Ok((pid, socket)),
        Err(_) => Err(invalid("an answer without exactly its socket")),
    }
}

/// Read a spawn's reply: the pid (end of file: the companion is gone).
pub(crate) fn receive_reply(socket: BorrowedFd<'_>) -> io::Result<i32> {
    let mut buf = [0u8; 4];
    if !read_exact(socket, &mut buf)? {
        return Err(io::Error::new(
            io::ErrorKind::BrokenPipe,
            "the companion is gone",
        ));
    }
    from_answer(i32::from_le_bytes(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spawn() -> Spawn {
        Spawn {
            argv: vec!["/h".into(), "__sandbox-build".into(), "a b".into()],
            env: vec![("PATH".into(), "/usr/bin".into()), ("E".into(), "".into())],
            cwd: Cwd::Path("/w s".into()),
            stdin_piped: true,
            v2: true,
            v1: 3,
            keep: 4,
            namespaces: (nix::libc::CLONE_NEWUSER | nix::libc::CLONE_NEWPID) as u64,
            v2_optional: true,
        }
    }

    #[test]
    fn messages_round_trip() {
        let s = Message::Spawn(spawn());
        assert_eq!(decode(&encode(&s).unwrap()).unwrap(), s);
        let s = Message::Spawn(Spawn {
            cwd: Cwd::Fd,
            stdin_piped: false,
            v2: false,
            v1: 0,
            keep: 0,
            ..spawn()
        });
        assert_eq!(decode(&encode(&s).unwrap()).unwrap(), s);
        let w = Message::Watch(vec![
            ("v2".into(), "/sys/fs/cgroup/warden.1".into()),
            ("pids".into(), "/sys/fs/cgroup/pids/warden.1".into()),
        ]);
        assert_eq!(decode(&encode(&w).unwrap()).unwrap(), w);
        let p = Message::Prepare {
            namespaces: nix::libc::CLONE_NEWNET as u64,
        };
        assert_eq!(decode(&encode(&p).unwrap()).unwrap(), p);
        let r = Message::Remove(vec!["/sys/fs/cgroup/pids/warden.1.run.0".into()]);
        assert_eq!(decode(&encode(&r).unwrap()).unwrap(), r);
        assert_eq!(spawn().fd_count(), 2 + 1 + 1 + 3 + 4);
        // stdout, stderr, stdin; the working directory is a path.
        assert_eq!(spawn().v2_index(), 3);
    }

    #[test]
    fn every_truncation_and_corruption_is_refused() {
        let body = encode(&Message::Spawn(spawn())).unwrap();
        for cut in 0..body.len() {
            assert!(decode(&body[..cut]).is_err(), "cut at {cut}");
        }
        let mut trailing = body.clone();
        trailing.push(0);
        assert!(decode(&trailing).is_err());
        // A count far beyond the body, an unknown kind, a flag that is not 0/1.
        let mut huge = body.clone();
        huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&huge).is_err());
        let mut kind = body.clone();
        kind[0] = 9;
        assert!(decode(&kind).is_err());
        // Only namespace flags may be asked for (not CLONE_VM, CLONE_THREAD, ...).
        let vm = Message::Spawn(Spawn {
            namespaces: nix::libc::CLONE_VM as u64,
            ..spawn()
        });
        assert!(decode(&encode(&vm).unwrap()).is_err());
        let no_argv = encode(&Message::Spawn(Spawn {
            argv: vec![],
            ..spawn()
        }))
        .unwrap();
        assert!(decode(&no_argv).is_err());
        let many = Message::Spawn(Spawn {
            keep: MAX_FDS as u32,
            ..spawn()
        });
        assert!(decode(&encode(&many).unwrap()).is_err());
    }

    #[test]
    fn a_message_crosses_a_socket_with_its_descriptors() {
        use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
        use std::os::fd::AsFd;
        let (a, b) = socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        // A body larger than a socket buffer arrives whole, in parts.
        let mut big = spawn();
        big.argv.push(OsString::from("x".repeat(1 << 20)));
        big.v1 = 0;
        big.keep = 0;
        big.v2 = false;
        big.stdin_piped = false;
        let message = Message::Spawn(big);
        let devnull = std::fs::File::open("/dev/null").unwrap();
        let fds = [devnull.as_raw_fd(), devnull.as_raw_fd()];
        let sender = std::thread::spawn(move || {
            send(a.as_fd(), &message, &fds).unwrap();
            (a, message)
        });
        let (got, got_fds) = receive(b.as_fd()).unwrap().unwrap();
        let (a, message) = sender.join().unwrap();
        assert_eq!(got, message);
        assert_eq!(got_fds.len(), 2);
        // Replies both ways, and end of file.
        send_reply(b.as_fd(), Ok(1234)).unwrap();
        assert_eq!(receive_reply(a.as_fd()).unwrap(), 1234);
        send_reply(b.as_fd(), Err(nix::libc::EAGAIN)).unwrap();
        assert_eq!(
            receive_reply(a.as_fd()).unwrap_err().raw_os_error(),
            Some(nix::libc::EAGAIN)
        );
        // A standby's socket crosses too, and its absence says why.
        let (x, _y) = socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .unwrap();
        send_standby(b.as_fd(), Ok((77, x.as_fd()))).unwrap();
        let (pid, _fd) = receive_standby(a.as_fd()).unwrap();
        assert_eq!(pid, 77);
        send_standby(b.as_fd(), Err(nix::libc::EPERM)).unwrap();
        assert_eq!(
            receive_standby(a.as_fd()).unwrap_err().raw_os_error(),
            Some(nix::libc::EPERM)
        );
        drop(a);
        assert!(receive(b.as_fd()).unwrap().is_none());
    }
}
