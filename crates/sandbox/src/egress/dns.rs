//! The run's name resolver in `proxy` mode: a DNS stub on `127.0.0.1:53` of the run's
//! network namespace (what the sandbox's `/etc/resolv.conf` names), whose socket the
//! helper binds before the command starts and hands to the run's broker with the proxy's
//! listener — so, like the proxy, it is served by Warden outside and no process of
//! Warden's stays in the sandbox for it.
//!
//! It answers only names the run's rules allow ([`caps::AdmitConnection::admit_name`]:
//! some port of the name is allowed and not denied), with the addresses Warden's own
//! resolver gives — the ordinary public ones only, as the proxy would connect to them.
//! Every other name gets `REFUSED` at once and is never looked up, so a lookup cannot
//! carry data out (`<secret>.attacker.example` reaches no resolver). A lookup is never
//! put to a human: a host the approver allows is reached through the proxy, which looks
//! names up itself. Only standard queries with one question of class `IN` are answered;
//! `A` and `AAAA` with addresses, any other type of an allowed name with none. Queries
//! in flight are bounded, as are the lookups a run's report lists.

use std::collections::HashSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use simple_dns::rdata::{A, AAAA, RData};
use simple_dns::{CLASS, OPCODE, PacketFlag, QCLASS, QTYPE, RCODE, ResourceRecord, TYPE};

use super::proxy::{Admission, Connection, Gate, Resolve};

/// Where the stub listens inside the run's namespace.
pub const STUB: (Ipv4Addr, u16) = (Ipv4Addr::LOCALHOST, 53);

/// The sandbox's `/etc/resolv.conf` in `proxy` mode: the stub, and nothing else.
pub const RESOLV_CONF: &str = "# Warden: this sandbox's names are answered by Warden's \
egress rules (sandbox.network = \"proxy\")\nnameserver 127.0.0.1\noptions timeout:5 attempts:1\n";

/// How long an allowed name's lookup may take before the command is told `SERVFAIL`:
/// under the sandbox's resolver timeout (`RESOLV_CONF`), so the client hears it.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(4);

/// The longest reply: a plain UDP answer (no EDNS).
const MAX_REPLY: usize = 512;

/// Queries answered at once; more are dropped (the client asks again).
const IN_FLIGHT: usize = 32;

/// Distinct names a run's report lists; the rest are counted.
pub const MAX_REPORTED: usize = 64;

/// How long an answer may be kept.
const TTL: u32 = 5;

/// Addresses in one answer (a plain 512-byte reply holds them).
const MAX_ADDRESSES: usize = 16;

/// In the sandbox, while binding a privileged port is still allowed: the stub's socket.
pub(crate) fn bind_stub_socket() -> io::Result<OwnedFd> {
    std::net::UdpSocket::bind(STUB).map(OwnedFd::from)
}

/// The lookups of one run, as its report lists them: each name once, in the order first
/// asked — at most [`MAX_REPORTED`] answered names and as many refused ones, counted
/// apart, so a flood of refused names cannot hide the answered ones; `more` counts the
/// lookups past either bound (their names are not kept: the sets stay bounded).
#[derive(Default)]
pub(crate) struct Lookups {
    seen: HashSet<String>,
    answered: Vec<Connection>,
    refused: Vec<Connection>,
    more: usize,
}

impl Lookups {
    fn note(&mut self, lookup: Connection) {
        if self.seen.contains(&lookup.host) {
            return;
        }
        let list = if lookup.allowed {
            &mut self.answered
        } else {
            &mut self.refused
        };
        if list.len() >= MAX_REPORTED {
            self.more += 1;
            return;
        }
        self.seen.insert(lookup.host.clone());
        list.push(lookup);
    }

    /// What the report lists: each name's first lookup (answered, then refused), then one
    /// line for the rest.
    pub(crate) fn into_report(self) -> Vec<Connection> {
        let mut out = self.answered;
        out.extend(self.refused);
        if self.more > 0 {
            out.push(Connection {
                host: String::new(),
                port: STUB.1,
                kind: "dns",
                allowed: false,
                reason: format!(
                    "{} more, of names not listed (the report lists {MAX_REPORTED} answered and {MAX_REPORTED} refused names)",
                    self.more
                ),
                sent: 0,
                received: 0,
            });
        }
        out
    }
}

/// Answer every query on `socket` (the run's stub) by `gate` and `resolver`, noting each
/// lookup in `lookups`, until dropped (the broker aborts it when the run ends, and with
/// it every answer in flight).
pub(crate) async fn serve(
    socket: std::net::UdpSocket,
    gate: Arc<dyn Gate>,
    resolver: Arc<dyn Resolve>,
    lookups: Arc<Mutex<Lookups>>,
) {
    let Ok(socket) = socket
        .set_nonblocking(true)
        .and_then(|()| tokio::net::UdpSocket::from_std(socket))
        .map(Arc::new)
    else {
        return;
    };
    let mut answering = tokio::task::JoinSet::new();
    let mut buf = vec![0u8; 4096];
    loop {
        let (len, from) = match socket.recv_from(&mut buf).await {
            Ok(received) => received,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        while answering.try_join_next().is_some() {}
        if answering.len() >= IN_FLIGHT {
            continue;
        }
        let query = buf[..len].to_vec();
        let (socket, gate, resolver, lookups) = (
            Arc::clone(&socket),
            Arc::clone(&gate),
            Arc::clone(&resolver),
            Arc::clone(&lookups),
        );
        answering.spawn(async move {
            let note = |lookup| lock(&lookups).note(lookup);
            if let Some(reply) = answer(&query, &*gate, &*resolver, &note).await {
                let _ = socket.send_to(&reply, from).await;
            }
        });
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The reply to one query (none to something that is not a query at all). The lookup it
/// was goes to `note` as soon as it is decided — before any resolver is asked, so a run
/// that ends while a lookup is out still reports it.
pub async fn answer(
    query: &[u8],
    gate: &dyn Gate,
    resolver: &dyn Resolve,
    note: &(dyn Fn(Connection) + Sync),
) -> Option<Vec<u8>> {
    let Ok(packet) = simple_dns::Packet::parse(query) else {
        // Unreadable: FORMERR, if it has an id to answer to.
        let reply = (query.len() >= 2).then(|| {
            let id = u16::from_be_bytes([query[0], query[1]]);
            bare_reply(id, RCODE::FormatError)
        });
        return reply;
    };
    if packet.has_flags(PacketFlag::RESPONSE) {
        return None;
    }
    if packet.opcode() != OPCODE::StandardQuery {
        return Some(bare_reply(packet.id(), RCODE::NotImplemented));
    }
    let [question] = packet.questions.as_slice() else {
        return Some(bare_reply(packet.id(), RCODE::FormatError));
    };
    let mut reply = simple_dns::Packet::new_reply(packet.id());
    if packet.has_flags(PacketFlag::RECURSION_DESIRED) {
        reply.set_flags(PacketFlag::RECURSION_DESIRED);
    }
    reply.set_flags(PacketFlag::RECURSION_AVAILABLE);
    reply.questions.push(question.clone());
    let name = match plain_name(&question.qname) {
        Ok(name) => name,
        Err(why) => {
            *reply.rcode_mut() = RCODE::Refused;
            note(lookup(String::new(), false, why));
            return build(&reply);
        }
    };
    if question.qclass != QCLASS::CLASS(CLASS::IN) {
        *reply.rcode_mut() = RCODE::Refused;
        note(lookup(name, false, "only class IN is answered".to_owned()));
        return build(&reply);
    }
    let rule = match gate.admit_name(&name) {
        Admission::Allow { rule, .. } => rule,
        Admission::Refuse(why) | Admission::Ask(why) => {
            *reply.rcode_mut() = RCODE::Refused;
            note(lookup(name, false, why));
            return build(&reply);
        }
    };
    note(lookup(name.clone(), true, rule));
    let family = match question.qtype {
        QTYPE::TYPE(TYPE::A) => Some(false),
        QTYPE::TYPE(TYPE::AAAA) => Some(true),
        _ => None,
    };
    let Some(v6) = family else {
        // An allowed name, a type with no addresses: an empty answer (NODATA).
        return build(&reply);
    };
    // Absolute (a final dot): the host's search domains are never tried on it.
    let absolute = format!("{name}.");
    let found = tokio::time::timeout(LOOKUP_TIMEOUT, resolver.resolve(&absolute, 0)).await;
    let Ok(Ok(addresses)) = found else {
        *reply.rcode_mut() = RCODE::ServerFailure;
        return build(&reply);
    };
    let mut seen = HashSet::new();
    let mut answers = Vec::new();
    for ip in addresses
        .iter()
        .map(SocketAddr::ip)
        .filter(|ip| ip.is_ipv6() == v6 && super::addr::special(*ip).is_none())
        .filter(|ip| seen.insert(*ip))
        .take(MAX_ADDRESSES)
    {
        let rdata = match ip {
            IpAddr::V4(v4) => RData::A(A::from(v4)),
            IpAddr::V6(v6) => RData::AAAA(AAAA::from(v6)),
        };
        answers.push(ResourceRecord::new(
            question.qname.clone(),
            CLASS::IN,
            TTL,
            rdata,
        ));
    }
    // A reply without EDNS must fit 512 bytes: as many addresses as fit, and the
    // truncation flag if some did not.
    for n in (0..=answers.len()).rev() {
        reply.answers = answers[..n].to_vec();
        if n < answers.len() {
            reply.set_flags(PacketFlag::TRUNCATION);
        }
        if let Some(bytes) = build(&reply).filter(|b| b.len() <= MAX_REPLY) {
            return Some(bytes);
        }
    }
    None
}

/// The name asked for, lower-cased, if every label is a plain one (letters, digits, `-`
/// and `_`, no dot inside a label): anything else is refused unread.
fn plain_name(name: &simple_dns::Name<'_>) -> Result<String, String> {
    let mut labels = Vec::new();
    for label in name.as_bytes() {
        let plain = !label.is_empty()
            && label
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_');
        if !plain {
            return Err("a name with a label that is not letters, digits, - or _".into());
        }
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
    }
    if labels.is_empty() {
        return Err("the root name".into());
    }
    Ok(labels.join("."))
}

fn lookup(host: String, allowed: bool, reason: String) -> Connection {
    Connection {
        host,
        port: STUB.1,
        kind: "dns",
        allowed,
        reason,
        sent: 0,
        received: 0,
    }
}

fn bare_reply(id: u16, rcode: RCODE) -> Vec<u8> {
    let mut reply = simple_dns::Packet::new_reply(id);
    *reply.rcode_mut() = rcode;
    build(&reply).unwrap_or_default()
}

fn build(reply: &simple_dns::Packet<'_>) -> Option<Vec<u8>> {
    reply.build_bytes_vec_compressed().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Allows `pypi.org` and `*.pythonhosted.org`; every other name is refused.
    struct Rules;
    impl Gate for Rules {
        fn admit(&self, _: &str, _: u16) -> Admission {
            Admission::Refuse("connections are not looked at here".into())
        }
        fn admit_name(&self, host: &str) -> Admission {
            if host == "pypi.org" || host.ends_with(".pythonhosted.org") {
                Admission::Allow {
                    rule: format!("allow {host}"),
                    names_address: false,
                }
            } else {
                Admission::Refuse(format!("no rule names {host}"))
            }
        }
    }

    /// Answers every name with public and special addresses, counting the lookups.
    #[derive(Default)]
    struct Counting(AtomicUsize);
    impl Resolve for Counting {
        fn resolve<'a>(
            &'a self,
            _: &'a str,
            port: u16,
        ) -> std::pin::Pin<Box<dyn Future<Output = io::Result<Vec<SocketAddr>>> + Send + 'a>>
        {
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                Ok([
                    "203.0.113.7",
                    "10.0.0.5",
                    "169.254.169.254",
                    "2001:db8::7",
                    "::1",
                ]
                .iter()
                .map(|ip| SocketAddr::new(ip.parse().unwrap(), port))
                .collect())
            })
        }
    }

    fn query(name: &str, qtype: TYPE, class: CLASS) -> Vec<u8> {
        let mut q = simple_dns::Packet::new_query(0x4242);
        q.set_flags(PacketFlag::RECURSION_DESIRED);
        q.questions.push(simple_dns::Question::new(
            simple_dns::Name::new_unchecked(name),
            qtype.into(),
            class.into(),
            false,
        ));
        q.build_bytes_vec().unwrap()
    }

    async fn ask(query: &[u8], resolver: &Counting) -> (Option<Vec<u8>>, Option<Connection>) {
        let noted = Mutex::new(Vec::new());
        let reply = answer(query, &Rules, resolver, &|c| noted.lock().unwrap().push(c)).await;
        (reply, noted.into_inner().unwrap().pop())
    }

    fn addresses(reply: &[u8]) -> (RCODE, Vec<IpAddr>) {
        let packet = simple_dns::Packet::parse(reply).unwrap();
        assert_eq!(packet.id(), 0x4242);
        assert!(packet.has_flags(PacketFlag::RESPONSE));
        let ips = packet
            .answers
            .iter()
            .map(|rr| match &rr.rdata {
                RData::A(a) => IpAddr::V4(Ipv4Addr::from(a.address)),
                RData::AAAA(a) => IpAddr::V6(std::net::Ipv6Addr::from(a.address)),
                other => panic!("{other:?}"),
            })
            .collect();
        (packet.rcode(), ips)
    }

    #[tokio::test]
    async fn an_allowed_name_gets_its_public_addresses_of_the_type_asked() {
        let resolver = Counting::default();
        let (reply, lookup) = ask(&query("PyPI.org", TYPE::A, CLASS::IN), &resolver).await;
        let (rcode, ips) = addresses(&reply.unwrap());
        assert_eq!(rcode, RCODE::NoError);
        assert_eq!(
            ips,
            vec!["203.0.113.7".parse::<IpAddr>().unwrap()],
            "no special address"
        );
        let lookup = lookup.unwrap();
        assert_eq!((lookup.host.as_str(), lookup.allowed), ("pypi.org", true));
        assert_eq!(lookup.reason, "allow pypi.org");
        let (reply, _) = ask(
            &query("files.pythonhosted.org", TYPE::AAAA, CLASS::IN),
            &resolver,
        )
        .await;
        assert_eq!(
            addresses(&reply.unwrap()),
            (
                RCODE::NoError,
                vec!["2001:db8::7".parse::<IpAddr>().unwrap()]
            )
        );
        // Another type of an allowed name: an empty answer, and nothing looked up.
        let before = resolver.0.load(Ordering::SeqCst);
        let (reply, _) = ask(&query("pypi.org", TYPE::TXT, CLASS::IN), &resolver).await;
        assert_eq!(addresses(&reply.unwrap()), (RCODE::NoError, vec![]));
        assert_eq!(resolver.0.load(Ordering::SeqCst), before);
    }

    /// Exfiltration through names: every name the rules do not allow is refused without
    /// any lookup — so no resolver anywhere sees it.
    #[tokio::test]
    async fn a_name_the_rules_do_not_allow_is_refused_and_never_looked_up() {
        let resolver = Counting::default();
        for (name, qtype, class) in [
            ("c2VjcmV0.attacker.example", TYPE::A, CLASS::IN),
            ("c2VjcmV0.attacker.example", TYPE::TXT, CLASS::IN),
            ("pythonhosted.org", TYPE::A, CLASS::IN),
            ("pypi.org.attacker.example", TYPE::AAAA, CLASS::IN),
            ("pypi.org", TYPE::A, CLASS::CH),
        ] {
            let (reply, lookup) = ask(&query(name, qtype, class), &resolver).await;
            let (rcode, ips) = addresses(&reply.unwrap());
            assert_eq!((rcode, ips.len()), (RCODE::Refused, 0), "{name}");
            assert!(!lookup.unwrap().allowed, "{name}");
        }
        assert_eq!(
            resolver.0.load(Ordering::SeqCst),
            0,
            "nothing was looked up"
        );
    }

    #[tokio::test]
    async fn what_is_not_one_plain_question_is_not_looked_up() {
        let resolver = Counting::default();
        // A label with a dot inside, or a byte no host name has.
        for name in [&b"\x08pypi.org\x00"[..], &b"\x04py\x00i\x03org\x00"[..]] {
            let mut raw = vec![0x42, 0x42, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0];
            raw.extend_from_slice(name);
            raw.extend_from_slice(&[0, 1, 0, 1]);
            let (reply, _) = ask(&raw, &resolver).await;
            assert_eq!(addresses(&reply.unwrap()).0, RCODE::Refused, "{name:?}");
        }
        // Two questions.
        let one = query("pypi.org", TYPE::A, CLASS::IN);
        let mut two = simple_dns::Packet::parse(&one).unwrap().questions;
        two.push(two[0].clone());
        let mut packet = simple_dns::Packet::new_query(0x4242);
        packet.questions = two;
        let (reply, _) = ask(&packet.build_bytes_vec().unwrap(), &resolver).await;
        assert_eq!(addresses(&reply.unwrap()).0, RCODE::FormatError);
        // Garbage with an id, and too short to have one.
        let (reply, _) = ask(&[0x42, 0x42, 0xff], &resolver).await;
        assert_eq!(addresses(&reply.unwrap()).0, RCODE::FormatError);
        assert_eq!(ask(&[7], &resolver).await.0, None);
        // A response is never answered (no loops between stubs).
        let mut response = simple_dns::Packet::parse(&one).unwrap().into_reply();
        response.set_id(0x4242);
        assert_eq!(
            ask(&response.build_bytes_vec().unwrap(), &resolver).await.0,
            None
        );
        assert_eq!(resolver.0.load(Ordering::SeqCst), 0);
    }

    /// Many addresses for a long name: as many as fit a plain 512-byte reply, and the
    /// truncation flag, never a reply a small client cannot take.
    #[tokio::test]
    async fn an_answer_that_would_not_fit_512_bytes_is_cut_and_says_so() {
        struct Many;
        impl Resolve for Many {
            fn resolve<'a>(
                &'a self,
                _: &'a str,
                port: u16,
            ) -> std::pin::Pin<Box<dyn Future<Output = io::Result<Vec<SocketAddr>>> + Send + 'a>>
            {
                Box::pin(async move {
                    Ok((1..=40u16)
                        .map(|i| SocketAddr::new(format!("2001:db8::{i:x}").parse().unwrap(), port))
                        .collect())
                })
            }
        }
        let long = format!(
            "{}.pythonhosted.org",
            ["a".repeat(60), "b".repeat(60)].join(".")
        );
        let reply = answer(&query(&long, TYPE::AAAA, CLASS::IN), &Rules, &Many, &|_| {})
            .await
            .unwrap();
        assert!(reply.len() <= MAX_REPLY, "{} bytes", reply.len());
        let packet = simple_dns::Packet::parse(&reply).unwrap();
        assert!(packet.has_flags(PacketFlag::TRUNCATION));
        assert!(!packet.answers.is_empty() && packet.answers.len() < MAX_ADDRESSES);
    }

    /// A lookup is noted before the resolver answers: a run that ends meanwhile still
    /// reports it.
    #[tokio::test]
    async fn a_lookup_is_noted_before_the_resolver_answers() {
        struct Never;
        impl Resolve for Never {
            fn resolve<'a>(
                &'a self,
                _: &'a str,
                _: u16,
            ) -> std::pin::Pin<Box<dyn Future<Output = io::Result<Vec<SocketAddr>>> + Send + 'a>>
            {
                Box::pin(std::future::pending())
            }
        }
        let noted = Mutex::new(Vec::new());
        let query = query("pypi.org", TYPE::A, CLASS::IN);
        let note = |c| noted.lock().unwrap().push(c);
        let asking = answer(&query, &Rules, &Never, &note);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), asking)
                .await
                .is_err()
        );
        let noted = noted.into_inner().unwrap();
        assert_eq!(noted.len(), 1);
        assert!(noted[0].allowed && noted[0].host == "pypi.org");
    }

    #[test]
    fn the_report_lists_each_name_once_and_counts_past_its_bound() {
        let mut lookups = Lookups::default();
        for n in 0..MAX_REPORTED + 10 {
            lookups.note(lookup(format!("n{n}.test"), false, "no".into()));
            lookups.note(lookup(format!("n{n}.test"), false, "again".into()));
        }
        // A flood of refused names does not hide an answered one.
        lookups.note(lookup("pypi.org".into(), true, "allow pypi.org".into()));
        let report = lookups.into_report();
        assert_eq!(report.len(), MAX_REPORTED + 2);
        assert!(
            report[0].allowed && report[0].host == "pypi.org",
            "{report:?}"
        );
        assert!(
            report[MAX_REPORTED + 1]
                .reason
                .starts_with("20 more, of names not listed"),
            "{report:?}"
        );
    }
}
