//! The keys of pairing: each side's ephemeral X25519 key pair, their agreement, and the
//! token both derive from it (HMAC over the agreement, the node's id and both public
//! keys) — the token itself never travels. `pair.rs` runs the exchange; the registry's
//! requests (`requests.rs`) do the gateway's half when the operator approves.

use hmac::{Hmac, Mac};
use ring::agreement::{self, EphemeralPrivateKey, UnparsedPublicKey, X25519};
use ring::rand::SystemRandom;
use sha2::Sha256;

use crate::BridgeError;
use crate::seal::{from_hex, to_hex};

const PAIR_TOKEN: &[u8] = b"warden-bridge/v1/pair-token";

pub(crate) fn token_from(
    shared: &[u8],
    node_id: &str,
    node_public: &str,
    gateway_public: &str,
) -> String {
    use base64::Engine as _;
    let mut m = match <Hmac<Sha256> as Mac>::new_from_slice(shared) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    for part in [
        PAIR_TOKEN,
        node_id.as_bytes(),
        node_public.as_bytes(),
        gateway_public.as_bytes(),
    ] {
        m.update(&(part.len() as u32).to_be_bytes());
        m.update(part);
    }
    format!(
        "wnd_{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(m.finalize().into_bytes())
    )
}

pub(crate) fn agree(private: EphemeralPrivateKey, peer_hex: &str) -> Result<Vec<u8>, BridgeError> {
    let peer = from_hex::<32>("the peer's public key", peer_hex)?;
    agreement::agree_ephemeral(private, &UnparsedPublicKey::new(&X25519, peer), |k| {
        k.to_vec()
    })
    .map_err(|_| BridgeError::Protocol("the X25519 agreement failed (a bad public key)".into()))
}

pub(crate) fn keypair() -> Result<(EphemeralPrivateKey, String), BridgeError> {
    let rng = SystemRandom::new();
    let private = EphemeralPrivateKey::generate(&X25519, &rng)
        .map_err(|_| BridgeError::State("cannot make an X25519 key".into()))?;
    let public = private
        .compute_public_key()
        .map_err(|_| BridgeError::State("cannot make an X25519 key".into()))?;
    Ok((private, to_hex(public.as_ref())))
}

/// The gateway's half, done when the operator approves: a fresh key pair, the agreement
/// with the node's public key, and the token. Returns the gateway's public key and the
/// token.
pub fn gateway_agree(node_id: &str, node_public: &str) -> Result<(String, String), BridgeError> {
    let (private, public) = keypair()?;
    let shared = agree(private, node_public)?;
    let token = token_from(&shared, node_id, node_public, &public);
    Ok((public, token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_sides_derive_the_same_token_and_nobody_else_does() {
        let (node_private, node_public) = keypair().unwrap();
        let (gateway_public, token) = gateway_agree("n1", &node_public).unwrap();
        let shared = agree(node_private, &gateway_public).unwrap();
        assert_eq!(
            token_from(&shared, "n1", &node_public, &gateway_public),
            token
        );
        assert_ne!(
            token_from(&shared, "n2", &node_public, &gateway_public),
            token
        );
        let (_, other) = gateway_agree("n1", &node_public).unwrap();
        assert_ne!(other, token, "a re-pair rotates the token");
        assert!(gateway_agree("n1", "00").is_err());
    }
}
