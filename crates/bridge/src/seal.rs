//! The Bridge's cryptography, all HMAC-SHA256 as in the approver IPC, each use under its
//! own domain label over length-delimited fields:
//!
//! - proofs: the node proves it holds the pairing token by `HMAC(token, auth/node ‖
//!   node id ‖ gateway nonce ‖ node nonce)`, the gateway answers with the same under
//!   `auth/gateway` — the token itself never crosses the wire, and both nonces make a
//!   recorded handshake worthless on another connection;
//! - the session key: `HMAC(token, session ‖ node id ‖ gateway nonce ‖ node nonce)`, new
//!   for every connection;
//! - sealed frames: `version(1) ‖ sequence(8, big-endian) ‖ JSON ‖ HMAC(key, direction
//!   label ‖ version ‖ sequence ‖ JSON)`. The receiver verifies the tag (constant time,
//!   full length) before reading anything else, then requires exactly the next sequence
//!   number: a replayed, dropped or reordered frame is refused, and one reflected back
//!   to its sender fails the tag, since each direction has its own label.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::BridgeError;

/// Bytes of a nonce.
pub const NONCE_LEN: usize = 32;
/// Bytes of a tag, proof or key.
pub const MAC_LEN: usize = 32;
/// The sealed-frame format version (the first byte of every sealed frame).
pub const FRAME_VERSION: u8 = 1;
const HEADER_LEN: usize = 1 + 8;

const AUTH_NODE: &[u8] = b"warden-bridge/v1/auth/node";
const AUTH_GATEWAY: &[u8] = b"warden-bridge/v1/auth/gateway";
const SESSION: &[u8] = b"warden-bridge/v1/session";
const GATEWAY_TO_NODE: &[u8] = b"warden-bridge/v1/frame/gateway-to-node";
const NODE_TO_GATEWAY: &[u8] = b"warden-bridge/v1/frame/node-to-gateway";

type HmacSha256 = Hmac<Sha256>;

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; MAC_LEN] {
    let mut m = match <HmacSha256 as Mac>::new_from_slice(key) {
        Ok(m) => m,
        // HMAC accepts keys of every length; an all-zero tag would only fail to verify.
        Err(_) => return [0; MAC_LEN],
    };
    for part in parts {
        m.update(&(part.len() as u32).to_be_bytes());
        m.update(part);
    }
    m.finalize().into_bytes().into()
}

/// A fresh nonce from the OS CSPRNG.
pub fn nonce() -> Result<[u8; NONCE_LEN], BridgeError> {
    let mut n = [0u8; NONCE_LEN];
    getrandom::fill(&mut n).map_err(|e| BridgeError::State(format!("no randomness: {e}")))?;
    Ok(n)
}

/// Hex of bytes.
pub fn to_hex(bytes: &[u8]) -> String {
    policy::hex(bytes)
}

/// Bytes of hex, exactly `N` of them.
pub fn from_hex<const N: usize>(what: &str, text: &str) -> Result<[u8; N], BridgeError> {
    let bad = || BridgeError::Protocol(format!("{what} is not {N} bytes of hex"));
    if text.len() != 2 * N || !text.is_ascii() {
        return Err(bad());
    }
    let mut out = [0u8; N];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(out)
}

/// The nonces and id one handshake is bound to.
#[derive(Clone, Debug)]
pub struct Transcript {
    /// The node id from `hello`.
    pub node_id: String,
    /// The gateway's nonce.
    pub gateway_nonce: [u8; NONCE_LEN],
    /// The node's nonce.
    pub node_nonce: [u8; NONCE_LEN],
}

impl Transcript {
    fn mac(&self, token: &[u8], label: &[u8]) -> [u8; MAC_LEN] {
        hmac(
            token,
            &[
                label,
                self.node_id.as_bytes(),
                &self.gateway_nonce,
                &self.node_nonce,
            ],
        )
    }

    /// The node's proof.
    pub fn node_proof(&self, token: &[u8]) -> [u8; MAC_LEN] {
        self.mac(token, AUTH_NODE)
    }

    /// The gateway's proof.
    pub fn gateway_proof(&self, token: &[u8]) -> [u8; MAC_LEN] {
        self.mac(token, AUTH_GATEWAY)
    }

    /// This connection's key.
    pub fn session_key(&self, token: &[u8]) -> [u8; MAC_LEN] {
        self.mac(token, SESSION)
    }
}

/// Compare a presented proof (hex) with the expected one: full length, constant time.
pub fn proof_matches(expected: &[u8; MAC_LEN], presented_hex: &str) -> bool {
    match from_hex::<MAC_LEN>("proof", presented_hex) {
        Ok(presented) => bool::from(expected.ct_eq(&presented)),
        Err(_) => false,
    }
}

/// Which way a frame travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Gateway to node.
    GatewayToNode,
    /// Node to gateway.
    NodeToGateway,
}

impl Direction {
    fn label(self) -> &'static [u8] {
        match self {
            Direction::GatewayToNode => GATEWAY_TO_NODE,
            Direction::NodeToGateway => NODE_TO_GATEWAY,
        }
    }
}

fn tag(key: &[u8; MAC_LEN], direction: Direction, header: &[u8], body: &[u8]) -> [u8; MAC_LEN] {
    hmac(key, &[direction.label(), header, body])
}

/// Seals frames in one direction.
pub struct Sealer {
    key: [u8; MAC_LEN],
    direction: Direction,
    next: u64,
}

impl Sealer {
    /// Frames travelling `direction` under `key`, numbered from 0.
    pub fn new(key: [u8; MAC_LEN], direction: Direction) -> Self {
        Sealer {
            key,
            direction,
            next: 0,
        }
    }

    /// Seal one JSON message.
    pub fn seal(&mut self, body: &[u8]) -> Vec<u8> {
        let mut frame = Vec::with_capacity(HEADER_LEN + body.len() + MAC_LEN);
        frame.push(FRAME_VERSION);
        frame.extend_from_slice(&self.next.to_be_bytes());
        let t = tag(&self.key, self.direction, &frame[..HEADER_LEN], body);
        frame.extend_from_slice(body);
        frame.extend_from_slice(&t);
        self.next += 1;
        frame
    }
}

/// Opens frames arriving from one direction, in order.
pub struct Opener {
    key: [u8; MAC_LEN],
    direction: Direction,
    next: u64,
}

impl Opener {
    /// Frames arriving `direction` under `key`, expected from 0.
    pub fn new(key: [u8; MAC_LEN], direction: Direction) -> Self {
        Opener {
            key,
            direction,
            next: 0,
        }
    }

    /// Verify and unwrap one frame; the JSON body if it is authentic and the next one.
    pub fn open<'a>(&mut self, frame: &'a [u8]) -> Result<&'a [u8], BridgeError> {
        if frame.len() < HEADER_LEN + MAC_LEN {
            return Err(BridgeError::Protocol(
                "a sealed frame shorter than its header and tag".into(),
            ));
        }
        if frame[0] != FRAME_VERSION {
            return Err(BridgeError::Version(format!(
                "sealed frame version {} (this build speaks {FRAME_VERSION})",
                frame[0]
            )));
        }
        let (header, rest) = frame.split_at(HEADER_LEN);
        let (body, presented) = rest.split_at(rest.len() - MAC_LEN);
        let expected = tag(&self.key, self.direction, header, body);
        if !bool::from(expected.ct_eq(presented)) {
            return Err(BridgeError::Protocol(
                "a frame failed authentication (forged, altered, or sent the other way)".into(),
            ));
        }
        let mut seq = [0u8; 8];
        seq.copy_from_slice(&header[1..]);
        let seq = u64::from_be_bytes(seq);
        if seq != self.next {
            return Err(BridgeError::Protocol(format!(
                "frame {seq} arrived where frame {} was expected (replayed, dropped or reordered)",
                self.next
            )));
        }
        self.next += 1;
        Ok(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transcript() -> Transcript {
        Transcript {
            node_id: "n1".into(),
            gateway_nonce: [1; 32],
            node_nonce: [2; 32],
        }
    }

    #[test]
    fn proofs_differ_by_role_token_and_nonces() {
        let t = transcript();
        let node = t.node_proof(b"token");
        assert_ne!(
            node,
            t.gateway_proof(b"token"),
            "a reflected proof never passes"
        );
        assert_ne!(node, t.node_proof(b"other"));
        let mut t2 = t.clone();
        t2.gateway_nonce = [3; 32];
        assert_ne!(node, t2.node_proof(b"token"));
        assert!(proof_matches(&node, &to_hex(&node)));
        assert!(!proof_matches(&node, &to_hex(&node)[..62]));
        assert!(!proof_matches(&node, "zz"));
    }

    #[test]
    fn sealed_frames_refuse_replay_reorder_reflection_and_any_bit_flip() {
        let key = transcript().session_key(b"token");
        let mut g = Sealer::new(key, Direction::GatewayToNode);
        let mut n = Opener::new(key, Direction::GatewayToNode);
        let f0 = g.seal(br#"{"type":"heartbeat"}"#);
        let f1 = g.seal(br#"{"type":"cancel","id":1}"#);
        let f2 = g.seal(br#"{"type":"cancel","id":2}"#);
        assert!(n.open(&f1).is_err(), "reordered");
        assert_eq!(n.open(&f0).unwrap(), br#"{"type":"heartbeat"}"#);
        assert!(n.open(&f0).is_err(), "replayed");
        assert!(n.open(&f1).is_ok());
        for i in 0..f2.len() {
            for bit in 0..8 {
                let mut bad = f2.clone();
                bad[i] ^= 1 << bit;
                assert!(n.open(&bad).is_err(), "flip of byte {i} bit {bit}");
            }
        }
        assert!(n.open(&f2).is_ok());
        // The node's own frame 0, reflected back to it as if the gateway sent it.
        let mut node_side = Sealer::new(key, Direction::NodeToGateway);
        let mine = node_side.seal(br#"{"type":"heartbeat"}"#);
        let mut fresh = Opener::new(key, Direction::GatewayToNode);
        assert!(fresh.open(&mine).is_err());
        // Another connection's key.
        let mut other = Opener::new(transcript().session_key(b"other"), Direction::GatewayToNode);
        assert!(other.open(&f0).is_err());
        let mut v2 = f0.clone();
        v2[0] = 2;
        assert!(matches!(
            Opener::new(key, Direction::GatewayToNode).open(&v2),
            Err(BridgeError::Version(_))
        ));
    }
}
