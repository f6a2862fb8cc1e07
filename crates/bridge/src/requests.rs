//! Pairing requests as the registry keeps them, and the operator's answers. A request is
//! known by its key: the code both sides show is computed over the canonical bytes of
//! the node's X25519 public key (80 bits, in Crockford's base32: `7KQ2-M9XD-...`), so
//! no other key — and no other spelling of the same key — shows the same code. An id
//! may have several requests waiting (a rogue may ask under a real node's id): they are
//! listed side by side, and approving refuses as ambiguous until the operator has
//! rejected all but one. Approving needs the code the operator compared, and says
//! where the request came from.

use serde_json::Map;
use sha2::{Digest, Sha256};

use crate::BridgeError;
use crate::message::{check_id, check_name};
use crate::registry::{
    MAX_ATTEMPTS, MAX_PENDING, NodeEntry, NodeState, PAIR_TTL_MS, PairRequest, Registry, find,
};
use crate::wire::TransportKind;

/// Requests one id may have waiting at once (a real node and a few others asking in its
/// name); more is a flood.
pub const MAX_PENDING_PER_ID: usize = 4;

/// Crockford's base32 alphabet: no I, L, O or U, which people misread.
const CODE_ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
/// Bits of the key's digest the code shows: grinding a key whose code matches a given
/// one takes about 2^80 attempts.
const CODE_BITS: usize = 80;

/// How a pairing request stands, for the connection waiting on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PairStatus {
    /// Still waiting.
    Waiting,
    /// Approved: send this public key.
    Approved(String),
    /// Rejected, revoked or expired.
    Refused(String),
}

/// The canonical text of an X25519 public key given as hex: its 32 bytes, lower-case
/// hex. Any other length or character is refused.
pub fn canonical_key(public_key: &str) -> Result<String, BridgeError> {
    if public_key.len() != 64 || !public_key.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(BridgeError::Invalid(
            "the node's public key is not 32 bytes of hex".into(),
        ));
    }
    let bytes = crate::seal::from_hex::<32>("the node's public key", public_key)?;
    Ok(crate::seal::to_hex(&bytes))
}

/// The code both sides of a pairing show for `public_key` (hex): 80 bits of a digest of
/// the key's bytes under a label of its own, in four groups of four characters.
pub fn pairing_code(public_key: &str) -> Result<String, BridgeError> {
    let canonical = canonical_key(public_key)?;
    let bytes = crate::seal::from_hex::<32>("the node's public key", &canonical)?;
    let mut h = Sha256::new();
    h.update(b"warden-bridge/v1/pairing-code\0");
    h.update(bytes);
    let digest = h.finalize();
    let mut bits: u128 = 0;
    for b in &digest[..CODE_BITS / 8] {
        bits = (bits << 8) | u128::from(*b);
    }
    let chars: Vec<char> = (0..CODE_BITS / 5)
        .rev()
        .map(|i| CODE_ALPHABET[((bits >> (5 * i)) & 31) as usize] as char)
        .collect();
    Ok(chars
        .chunks(4)
        .map(|c| c.iter().collect::<String>())
        .collect::<Vec<_>>()
        .join("-"))
}

/// A code as a person typed it, compared as Crockford's base32 reads it: case, spaces
/// and dashes do not count; `O` is `0`, `I` and `L` are `1`.
pub fn normalize_code(typed: &str) -> String {
    typed
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .map(|c| match c.to_ascii_uppercase() {
            'O' => '0',
            'I' | 'L' => '1',
            c => c,
        })
        .collect()
}

fn same_code(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq as _;
    let (a, b) = (normalize_code(a), normalize_code(b));
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// One waiting request as the operator sees it: code, source, when.
pub fn describe(r: &PairRequest) -> String {
    format!(
        "code {} from {}",
        r.code,
        r.remote.as_deref().unwrap_or("an unknown address")
    )
}

fn refused(message: String) -> BridgeError {
    BridgeError::Refused {
        code: "pairing-refused".into(),
        message,
    }
}

impl Registry {
    /// Record a pairing request from `id` with `public_key` (hex; a re-pair of a known
    /// node, too: its old token keeps working until a new request is approved). The same
    /// key asking again is the same request; another key is another request, kept
    /// beside it. Returns the request.
    pub fn request_pairing(
        &self,
        id: &str,
        display_name: Option<&str>,
        public_key: &str,
        remote: Option<&str>,
        capabilities: &[String],
        now: u64,
    ) -> Result<PairRequest, BridgeError> {
        check_id("node id", id)?;
        if let Some(name) = display_name {
            check_name(name)?;
        }
        let public_key = canonical_key(public_key)?;
        let code = pairing_code(&public_key)?;
        self.update(|nodes| {
            // Expired requests make room.
            for n in nodes.iter_mut() {
                n.pending.retain(|r| r.expires_at > now);
                if n.state == NodeState::Pending && n.pending.is_empty() {
                    n.state = NodeState::Rejected;
                    n.updated_at = now;
                }
            }
            let waiting: usize = nodes.iter().map(|n| n.pending.len()).sum();
            let fresh = PairRequest {
                requested_at: now,
                expires_at: now + PAIR_TTL_MS,
                attempts: 1,
                remote: remote.map(str::to_owned),
                public_key: public_key.clone(),
                code: code.clone(),
                capabilities: capabilities.to_vec(),
            };
            let n = match nodes.iter_mut().find(|n| n.id == id) {
                Some(n) if n.transport == TransportKind::Stdio => {
                    return Err(refused(format!(
                        "node {id:?} is configured as a stdio node; its operator's configuration is its pairing"
                    )));
                }
                Some(n) => n,
                None => {
                    if waiting >= MAX_PENDING {
                        return Err(too_many());
                    }
                    nodes.push(NodeEntry {
                        id: id.to_owned(),
                        display_name: display_name.map(str::to_owned),
                        state: NodeState::Pending,
                        transport: TransportKind::WebSocket,
                        command: None,
                        token: None,
                        created_at: now,
                        updated_at: now,
                        request: None,
                        pending: vec![fresh.clone()],
                        gateway_public_key: None,
                        extra: Map::new(),
                    });
                    return Ok(fresh);
                }
            };
            if let Some(same) = n.pending.iter_mut().find(|r| r.public_key == public_key) {
                if same.attempts >= MAX_ATTEMPTS {
                    return Err(refused(format!(
                        "node {id:?} asked {MAX_ATTEMPTS} times already; wait for the operator or for the request to expire"
                    )));
                }
                same.attempts += 1;
                return Ok(same.clone());
            }
            if waiting >= MAX_PENDING {
                return Err(too_many());
            }
            if n.pending.len() >= MAX_PENDING_PER_ID {
                return Err(refused(format!(
                    "{MAX_PENDING_PER_ID} pairing requests for node {id:?} are already waiting for the operator"
                )));
            }
            if n.state != NodeState::Approved {
                n.state = NodeState::Pending;
            }
            n.display_name = display_name.map(str::to_owned).or(n.display_name.take());
            n.pending.push(fresh.clone());
            n.updated_at = now;
            Ok(fresh)
        })
    }

    /// How the request with `code` from `id` stands now.
    pub fn pairing_status(
        &self,
        id: &str,
        code: &str,
        now: u64,
    ) -> Result<PairStatus, BridgeError> {
        let nodes = self.list()?;
        let Some(n) = nodes.iter().find(|n| n.id == id) else {
            return Ok(PairStatus::Refused("the request was removed".into()));
        };
        if let (Some(approved), Some(gw), NodeState::Approved) =
            (&n.request, &n.gateway_public_key, n.state)
            && approved.code == code
        {
            return Ok(PairStatus::Approved(gw.clone()));
        }
        if n.state == NodeState::Revoked {
            return Ok(PairStatus::Refused("the node was revoked".into()));
        }
        match n.pending.iter().find(|r| r.code == code) {
            Some(r) if r.expires_at > now => Ok(PairStatus::Waiting),
            Some(_) => Ok(PairStatus::Refused(
                "the request expired before the operator approved it".into(),
            )),
            None => Ok(PairStatus::Refused(
                "the operator rejected the request (or another request was approved)".into(),
            )),
        }
    }

    /// The requests of `id` waiting now.
    pub fn waiting(&self, id: &str, now: u64) -> Result<Vec<PairRequest>, BridgeError> {
        let nodes = self.list()?;
        Ok(nodes
            .iter()
            .find(|n| n.id == id)
            .map(|n| {
                n.pending
                    .iter()
                    .filter(|r| r.expires_at > now)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Approve `id`'s one waiting request, whose code must be `code` (the one the node
    /// shows, as the operator compared it): agree on its token with the node's key (the
    /// token never travels) and rotate any previous one. Refused when the code differs,
    /// when no request waits (and said when the node is approved already), and when
    /// several wait: the operator rejects the others first.
    pub fn approve(&self, id: &str, code: &str, now: u64) -> Result<NodeEntry, BridgeError> {
        self.update(|nodes| {
            let n = find(nodes, id)?;
            let waiting: Vec<PairRequest> = n
                .pending
                .iter()
                .filter(|r| r.expires_at > now)
                .cloned()
                .collect();
            let req = match waiting.as_slice() {
                [] if n.state == NodeState::Approved => {
                    return Err(BridgeError::Invalid(format!(
                        "node {id:?} is already approved; nothing changed (a node re-pairs with `warden node pair`)"
                    )));
                }
                [] if !n.pending.is_empty() => {
                    return Err(BridgeError::Invalid(format!(
                        "node {id:?}'s pairing request expired; have it ask again (`warden node pair`)"
                    )));
                }
                [] => {
                    return Err(BridgeError::Invalid(format!(
                        "node {id:?} has no pending pairing request"
                    )));
                }
                [one] => one.clone(),
                several => {
                    return Err(BridgeError::Invalid(format!(
                        "{} pairing requests for node {id:?} are waiting ({}): they cannot all be the node; reject the ones it did not make (`warden nodes reject {id} --code CODE`), then approve",
                        several.len(),
                        several.iter().map(describe).collect::<Vec<_>>().join("; ")
                    )));
                }
            };
            if !same_code(code, &req.code) {
                return Err(BridgeError::Invalid(format!(
                    "code {code:?} is not the code of node {id:?}'s request ({}); nothing was approved",
                    describe(&req)
                )));
            }
            let (gateway_public, token) = crate::pair_keys::gateway_agree(id, &req.public_key)?;
            n.token = Some(token);
            n.gateway_public_key = Some(gateway_public);
            n.state = NodeState::Approved;
            n.updated_at = now;
            n.pending.clear();
            // Marked answered (kept for `pairing_status` and the record).
            n.request = Some(PairRequest {
                expires_at: 0,
                ..req
            });
            Ok(n.clone())
        })
    }

    /// Reject `id`'s waiting request with `code`, or (`None`) every one. Returns how
    /// many were rejected.
    pub fn reject(&self, id: &str, code: Option<&str>, now: u64) -> Result<usize, BridgeError> {
        self.update(|nodes| {
            let n = find(nodes, id)?;
            let before = n.pending.len();
            match code {
                Some(code) => n.pending.retain(|r| !same_code(code, &r.code)),
                None => n.pending.clear(),
            }
            let rejected = before - n.pending.len();
            if rejected == 0 {
                return Err(BridgeError::Invalid(match code {
                    Some(code) => format!("node {id:?} has no pending request with code {code:?}"),
                    None => format!("node {id:?} has no pending pairing request"),
                }));
            }
            if n.state == NodeState::Pending && n.pending.is_empty() {
                n.state = NodeState::Rejected;
            }
            n.updated_at = now;
            Ok(rejected)
        })
    }
}

fn too_many() -> BridgeError {
    refused(format!(
        "{MAX_PENDING} pairing requests are already waiting for the operator"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Lookup;
    use caps::MemoryFs;
    use std::sync::Arc;

    fn registry() -> Registry {
        Registry::new(Arc::new(MemoryFs::new()), "/state")
    }

    fn key(n: u8) -> String {
        crate::seal::to_hex(&[n; 32])
    }

    fn real_key() -> String {
        use ring::agreement::{EphemeralPrivateKey, X25519};
        let rng = ring::rand::SystemRandom::new();
        let k = EphemeralPrivateKey::generate(&X25519, &rng).unwrap();
        crate::seal::to_hex(k.compute_public_key().unwrap().as_ref())
    }

    #[test]
    fn the_code_covers_the_key_s_bytes_has_80_bits_and_one_spelling() {
        let k = real_key();
        let code = pairing_code(&k).unwrap();
        assert_eq!(code.len(), 19, "{code}");
        assert_eq!(code.split('-').count(), 4);
        assert!(
            code.chars()
                .all(|c| c == '-' || CODE_ALPHABET.contains(&(c as u8)))
        );
        // Another spelling of the same key: the same code (and the same stored key).
        assert_eq!(pairing_code(&k.to_uppercase()).unwrap(), code);
        assert_eq!(canonical_key(&k.to_uppercase()).unwrap(), k);
        // Other keys, other codes; a key that is not 32 bytes of hex has none.
        assert_ne!(
            pairing_code(&key(1)).unwrap(),
            pairing_code(&key(2)).unwrap()
        );
        for bad in ["", "00", &format!("+{}", &k[1..]), &format!("{k}00")] {
            assert!(pairing_code(bad).is_err(), "{bad}");
        }
        // As a person types it.
        let typed = code.to_lowercase().replace('-', " ").replace('0', "o");
        assert!(same_code(&typed, &code));
        assert!(!same_code(&code[..18], &code));
    }

    #[test]
    fn a_request_gets_nothing_until_approved_with_its_code_and_a_re_pair_rotates_the_token() {
        let r = registry();
        let req = r
            .request_pairing(
                "n1",
                Some("Box"),
                &real_key(),
                Some("127.0.0.1"),
                &[],
                1_000,
            )
            .unwrap();
        assert_eq!(
            r.lookup("n1").unwrap(),
            Lookup::NotApproved(NodeState::Pending)
        );
        assert_eq!(
            r.pairing_status("n1", &req.code, 2_000).unwrap(),
            PairStatus::Waiting
        );
        let e = r.approve("n1", "0000-0000-0000-0000", 2_500).unwrap_err();
        assert!(e.to_string().contains("from 127.0.0.1"), "{e}");
        assert_eq!(
            r.lookup("n1").unwrap(),
            Lookup::NotApproved(NodeState::Pending)
        );
        let first = r.approve("n1", &req.code, 3_000).unwrap().token.unwrap();
        assert!(matches!(
            r.pairing_status("n1", &req.code, 4_000).unwrap(),
            PairStatus::Approved(_)
        ));
        assert!(matches!(r.lookup("n1").unwrap(), Lookup::Approved(_)));
        let e = r.approve("n1", &req.code, 4_500).unwrap_err();
        assert!(e.to_string().contains("already approved"), "{e}");
        // Asking again: the old token keeps working until the new request is approved.
        let again = r
            .request_pairing("n1", None, &real_key(), None, &[], 5_000)
            .unwrap();
        assert!(
            matches!(r.lookup("n1").unwrap(), Lookup::Approved(e) if e.token.as_deref() == Some(first.as_str()))
        );
        let second = r.approve("n1", &again.code, 6_000).unwrap().token.unwrap();
        assert_ne!(first, second);
        assert!(matches!(
            r.pairing_status("n1", &req.code, 7_000).unwrap(),
            PairStatus::Refused(_)
        ));
        r.revoke("n1", 8_000).unwrap();
        assert_eq!(
            r.lookup("n1").unwrap(),
            Lookup::NotApproved(NodeState::Revoked)
        );
    }

    #[test]
    fn a_second_request_for_an_id_makes_approval_ambiguous_until_one_is_rejected() {
        let r = registry();
        let (real, rogue) = (real_key(), real_key());
        let real_req = r
            .request_pairing("n1", None, &real, Some("10.0.0.5"), &[], 10)
            .unwrap();
        let rogue_req = r
            .request_pairing("n1", None, &rogue, Some("10.6.6.6"), &[], 11)
            .unwrap();
        assert_eq!(r.waiting("n1", 12).unwrap().len(), 2);
        // Both are still waiting; neither replaced the other.
        for code in [&real_req.code, &rogue_req.code] {
            assert_eq!(
                r.pairing_status("n1", code, 12).unwrap(),
                PairStatus::Waiting
            );
        }
        for code in [&real_req.code, &rogue_req.code] {
            let e = r.approve("n1", code, 13).unwrap_err().to_string();
            assert!(
                e.contains("2 pairing requests")
                    && e.contains("10.6.6.6")
                    && e.contains("10.0.0.5"),
                "{e}"
            );
        }
        assert_eq!(r.reject("n1", Some(&rogue_req.code), 14).unwrap(), 1);
        assert!(matches!(
            r.pairing_status("n1", &rogue_req.code, 15).unwrap(),
            PairStatus::Refused(_)
        ));
        let entry = r.approve("n1", &real_req.code, 16).unwrap();
        assert_eq!(entry.request.unwrap().public_key, real);
        // The same key asking again is the same request, not another.
        let r2 = registry();
        let a = r2.request_pairing("n2", None, &real, None, &[], 1).unwrap();
        let b = r2
            .request_pairing("n2", None, &real.to_uppercase(), None, &[], 2)
            .unwrap();
        assert_eq!((a.code, b.attempts), (b.code.clone(), 2));
        assert_eq!(r2.waiting("n2", 3).unwrap().len(), 1);
    }

    #[test]
    fn requests_expire_are_capped_and_rejections_stick() {
        let r = registry();
        let req = r
            .request_pairing("late", None, &key(1), None, &[], 0)
            .unwrap();
        assert!(matches!(
            r.pairing_status("late", &req.code, PAIR_TTL_MS).unwrap(),
            PairStatus::Refused(_)
        ));
        assert!(
            r.approve("late", &req.code, PAIR_TTL_MS + 1).is_err(),
            "an expired request cannot be approved"
        );
        for attempt in 1..=MAX_ATTEMPTS {
            r.request_pairing("eager", None, &key(2), None, &[], 10)
                .unwrap_or_else(|e| panic!("attempt {attempt}: {e}"));
        }
        let e = r
            .request_pairing("eager", None, &key(2), None, &[], 11)
            .unwrap_err();
        assert!(e.to_string().contains("asked"), "{e}");
        for i in 0..MAX_PENDING_PER_ID as u8 {
            let _ = r.request_pairing("crowd", None, &key(100 + i), None, &[], 12);
        }
        let e = r
            .request_pairing("crowd", None, &key(99), None, &[], 12)
            .unwrap_err();
        assert!(e.to_string().contains("already waiting"), "{e}");
        for i in 0..MAX_PENDING as u8 {
            let _ = r.request_pairing(&format!("flood{i}"), None, &key(3 + i), None, &[], 20);
        }
        let e = r
            .request_pairing("one-more", None, &key(200), None, &[], 21)
            .unwrap_err();
        assert!(e.to_string().contains("already waiting"), "{e}");
        r.reject("flood0", None, 23).unwrap();
        assert_eq!(
            r.lookup("flood0").unwrap(),
            Lookup::NotApproved(NodeState::Rejected)
        );
        assert!(r.reject("flood0", None, 24).is_err());
        assert!(
            r.request_pairing("../x", None, &key(6), None, &[], 1)
                .is_err()
        );
    }
}
