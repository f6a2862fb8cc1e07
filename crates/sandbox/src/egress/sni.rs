//! The server name a TLS client asks for, read from its first flight (the ClientHello)
//! before any byte reaches the upstream: the proxy compares it with the host the
//! connection was allowed for, so a command cannot ask the proxy for an allowed name and
//! then talk TLS to another one behind the same address (domain fronting). The hello may
//! span several records; at most [`MAX_HELLO`] bytes are looked at.

/// The most of a client's first bytes read for its hello.
pub const MAX_HELLO: usize = 16 * 1024 + 5;

/// What a client's first bytes are.
#[derive(Debug, PartialEq, Eq)]
pub enum Hello {
    /// A ClientHello naming this server (lower-cased).
    Sni(String),
    /// A ClientHello without a server name.
    NoSni,
    /// A ClientHello carrying an Encrypted ClientHello (`encrypted_client_hello`,
    /// 0xfe0d): the name it shows is not the one the server will see.
    Encrypted,
    /// Not TLS (the first byte is not a handshake record).
    NotTls,
    /// TLS, but more bytes are needed to read the whole hello.
    Incomplete,
    /// TLS that is not a well-formed ClientHello.
    Malformed(&'static str),
}

/// Read `bytes`, the client's first bytes so far.
pub fn read_hello(bytes: &[u8]) -> Hello {
    if bytes.is_empty() {
        return Hello::Incomplete;
    }
    if bytes[0] != 0x16 {
        return Hello::NotTls;
    }
    // The handshake message, gathered from consecutive handshake records.
    let mut message = Vec::new();
    let mut rest = bytes;
    loop {
        if rest.len() < 5 {
            return Hello::Incomplete;
        }
        if rest[0] != 0x16 {
            return Hello::Malformed("a ClientHello interleaved with another record");
        }
        let len = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
        if len == 0 || len > 16 * 1024 {
            return Hello::Malformed("a handshake record of impossible length");
        }
        if rest.len() < 5 + len {
            return Hello::Incomplete;
        }
        message.extend_from_slice(&rest[5..5 + len]);
        rest = &rest[5 + len..];
        if message.len() >= 4 {
            let body = u32::from_be_bytes([0, message[1], message[2], message[3]]) as usize;
            if message[0] != 1 {
                return Hello::Malformed("the first handshake message is not a ClientHello");
            }
            if body + 4 > MAX_HELLO {
                return Hello::Malformed("a ClientHello larger than 16 KiB");
            }
            if message.len() >= body + 4 {
                return parse_client_hello(&message[4..4 + body]);
            }
        }
    }
}

/// A cursor over a byte slice that fails instead of panicking.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }
    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| usize::from(b[0]))
    }
    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(n)
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(n)
    }
}

fn parse_client_hello(body: &[u8]) -> Hello {
    let mut r = Reader(body);
    let fields = (|| {
        r.take(2 + 32)?; // version, random
        r.vec8()?; // session id
        r.vec16()?; // cipher suites
        r.vec8()?; // compression methods
        Some(())
    })();
    if fields.is_none() {
        return Hello::Malformed("a ClientHello cut short");
    }
    if r.0.is_empty() {
        return Hello::NoSni;
    }
    let Some(extensions) = r.vec16() else {
        return Hello::Malformed("a ClientHello's extensions cut short");
    };
    let mut ext = Reader(extensions);
    let mut found = None;
    let mut encrypted = false;
    while !ext.0.is_empty() {
        let (Some(kind), Some(data)) = (ext.u16(), ext.vec16()) else {
            return Hello::Malformed("an extension cut short");
        };
        encrypted |= kind == ENCRYPTED_CLIENT_HELLO;
        if kind != 0 {
            continue;
        }
        if found.is_some() {
            return Hello::Malformed("two server_name extensions");
        }
        found = Some(server_name(data));
    }
    if encrypted {
        // Whatever the outer name says, the inner hello may name another server behind
        // the same front: never taken at its word.
        return Hello::Encrypted;
    }
    found.unwrap_or(Hello::NoSni)
}

/// The `encrypted_client_hello` extension's type (RFC 9849; also sent as GREASE by
/// clients that have no ECH configuration, which is refused the same way).
const ENCRYPTED_CLIENT_HELLO: usize = 0xfe0d;

/// The one host name of a server_name extension.
fn server_name(data: &[u8]) -> Hello {
    let mut r = Reader(data);
    let Some(list) = r.vec16() else {
        return Hello::Malformed("a server_name list cut short");
    };
    let mut names = Reader(list);
    let mut host = None;
    while !names.0.is_empty() {
        let (Some(kind), Some(name)) = (names.u8(), names.vec16()) else {
            return Hello::Malformed("a server name cut short");
        };
        if kind != 0 {
            continue;
        }
        if host.is_some() {
            return Hello::Malformed("two host names in one hello");
        }
        match std::str::from_utf8(name) {
            Ok(n) if !n.is_empty() && n.is_ascii() && !n.contains('\0') => {
                host = Some(n.trim_end_matches('.').to_ascii_lowercase())
            }
            _ => return Hello::Malformed("a server name that is not an ASCII host name"),
        }
    }
    host.map_or(Hello::NoSni, Hello::Sni)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello as a TLS client writes it, naming `sni`, split into records of at
    /// most `record` bytes.
    pub(crate) fn client_hello(sni: &str, record: usize) -> Vec<u8> {
        client_hello_with(sni, record, &[])
    }

    /// [`client_hello`] with the extension bytes `extra` after the server name.
    fn client_hello_with(sni: &str, record: usize, extra: &[u8]) -> Vec<u8> {
        let mut ext = Vec::new();
        // An unrelated extension first (supported_versions).
        ext.extend_from_slice(&[0x00, 0x2b, 0x00, 0x03, 0x02, 0x03, 0x04]);
        let name = sni.as_bytes();
        let mut list = vec![0u8];
        list.extend_from_slice(&(name.len() as u16).to_be_bytes());
        list.extend_from_slice(name);
        ext.extend_from_slice(&[0x00, 0x00]);
        ext.extend_from_slice(&((list.len() + 2) as u16).to_be_bytes());
        ext.extend_from_slice(&(list.len() as u16).to_be_bytes());
        ext.extend_from_slice(&list);
        ext.extend_from_slice(extra);
        let mut body = vec![0x03, 0x03];
        body.extend_from_slice(&[7u8; 32]);
        body.push(0); // session id
        body.extend_from_slice(&[0x00, 0x02, 0x13, 0x01]); // one suite
        body.extend_from_slice(&[0x01, 0x00]); // null compression
        body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        body.extend_from_slice(&ext);
        let mut message = vec![1u8];
        message.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        message.extend_from_slice(&body);
        let mut out = Vec::new();
        for chunk in message.chunks(record) {
            out.extend_from_slice(&[0x16, 0x03, 0x01]);
            out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
            out.extend_from_slice(chunk);
        }
        out
    }

    #[test]
    fn the_server_name_is_read_whole_or_across_records() {
        for record in [16 * 1024, 40, 7] {
            let hello = client_hello("Files.PythonHosted.org", record);
            assert_eq!(
                read_hello(&hello),
                Hello::Sni("files.pythonhosted.org".into()),
                "records of {record}"
            );
            // Every prefix is incomplete, never a wrong answer.
            for cut in 0..hello.len() {
                assert_eq!(read_hello(&hello[..cut]), Hello::Incomplete, "cut at {cut}");
            }
        }
    }

    #[test]
    fn an_encrypted_client_hello_is_never_taken_at_its_outer_name() {
        // encrypted_client_hello (0xfe0d), an outer hello's few bytes; before or after
        // the server name, real or GREASE alike.
        let ech = [0xfe, 0x0d, 0x00, 0x03, 0x00, 0x00, 0x01];
        assert_eq!(
            read_hello(&client_hello_with("allowed.example", 16 * 1024, &ech)),
            Hello::Encrypted
        );
        assert_eq!(
            read_hello(&client_hello_with("allowed.example", 9, &ech)),
            Hello::Encrypted
        );
    }

    #[test]
    fn what_is_not_a_client_hello_is_said() {
        assert_eq!(read_hello(b"GET / HTTP/1.1\r\n"), Hello::NotTls);
        assert_eq!(read_hello(b"SSH-2.0-OpenSSH\r\n"), Hello::NotTls);
        let mut server_hello = client_hello("a.example", 16 * 1024);
        server_hello[5] = 2;
        assert!(matches!(read_hello(&server_hello), Hello::Malformed(_)));
        let mut huge = client_hello("a.example", 16 * 1024);
        huge[3] = 0xff;
        assert!(matches!(read_hello(&huge), Hello::Malformed(_)));
        let nul = client_hello("a.example\0.evil", 16 * 1024);
        assert!(matches!(read_hello(&nul), Hello::Malformed(_)));
    }
}
