//! The opening of a connection, on either side: `hello` → `challenge` → `auth` →
//! `welcome` (or an `error` naming why, after which the connection closes). Each step has
//! a deadline, so a peer that stalls mid-handshake holds nothing for long. Versions are
//! settled in the first exchange: a node offering no version this gateway speaks is told
//! so in words (`unsupported-version`), and so is a gateway choosing one the node lacks.

use std::time::Duration;

use crate::message::{self, GatewayReply, NodeAuth, Opening};
use crate::seal::{self, Direction, Opener, Sealer, Transcript, from_hex, to_hex};
use crate::wire::Transport;
use crate::{BridgeError, PROTOCOL_NAME, PROTOCOL_VERSIONS};

/// How long each handshake step may take.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(10);

/// What a paired node knows about itself.
#[derive(Clone)]
pub struct NodeIdentity {
    /// Its node id.
    pub node_id: String,
    /// Its display name.
    pub display_name: Option<String>,
    /// The pairing token (never sent).
    pub token: String,
}

impl std::fmt::Debug for NodeIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeIdentity")
            .field("node_id", &self.node_id)
            .field("display_name", &self.display_name)
            .finish_non_exhaustive()
    }
}

/// A sealed session's two directions.
pub struct Keys {
    /// Seals what this side sends.
    pub sealer: Sealer,
    /// Opens what this side receives.
    pub opener: Opener,
}

/// Receive one handshake frame within the step deadline.
pub async fn recv_step(t: &mut Transport) -> Result<Vec<u8>, BridgeError> {
    match tokio::time::timeout(STEP_TIMEOUT, t.rx.recv()).await {
        Err(_) => Err(BridgeError::Timeout(
            "the peer did not answer the handshake in time".into(),
        )),
        Ok(Err(e)) => Err(e),
        Ok(Ok(None)) => Err(BridgeError::Closed("during the handshake".into())),
        Ok(Ok(Some(frame))) => Ok(frame),
    }
}

/// Tell the peer why, then give up.
pub async fn refuse(t: &mut Transport, code: &str, message: String) -> BridgeError {
    let reply = GatewayReply::Error {
        code: code.to_owned(),
        message: message.clone(),
    };
    let _ = t.tx.send(message::encode(&reply)).await;
    t.tx.close().await;
    if code == "unsupported-version" {
        BridgeError::Version(message)
    } else {
        BridgeError::Refused {
            code: code.to_owned(),
            message,
        }
    }
}

fn refused(code: String, message: String) -> BridgeError {
    if code == "unsupported-version" {
        BridgeError::Version(message)
    } else {
        BridgeError::Refused { code, message }
    }
}

/// The version both speak, or the words saying there is none.
pub fn choose_version(offered: &[u32]) -> Result<u32, String> {
    PROTOCOL_VERSIONS
        .iter()
        .rev()
        .find(|v| offered.contains(v))
        .copied()
        .ok_or_else(|| {
            format!(
                "the peer speaks Bridge protocol version(s) {offered:?}; this Warden speaks {PROTOCOL_VERSIONS:?} — upgrade the older side"
            )
        })
}

/// The node's side: say hello, prove the token, check the gateway's proof.
pub async fn node_side(t: &mut Transport, me: &NodeIdentity) -> Result<Keys, BridgeError> {
    let node_nonce = seal::nonce()?;
    let hello = Opening::Hello {
        protocol: PROTOCOL_NAME.to_owned(),
        versions: PROTOCOL_VERSIONS.to_vec(),
        node_id: me.node_id.clone(),
        display_name: me.display_name.clone(),
        nonce: to_hex(&node_nonce),
        capabilities: message::CAPABILITIES
            .iter()
            .map(|c| (*c).to_owned())
            .collect(),
    };
    t.tx.send(message::encode(&hello)).await?;
    let gateway_nonce = match message::decode::<GatewayReply>(&recv_step(t).await?)? {
        GatewayReply::Challenge { version, nonce } => {
            if !PROTOCOL_VERSIONS.contains(&version) {
                return Err(BridgeError::Version(format!(
                    "the gateway chose Bridge protocol version {version}; this Warden speaks {PROTOCOL_VERSIONS:?}"
                )));
            }
            from_hex::<{ seal::NONCE_LEN }>("the gateway's nonce", &nonce)?
        }
        GatewayReply::Error { code, message } => return Err(refused(code, message)),
        other => {
            return Err(BridgeError::Protocol(format!(
                "expected a challenge, got {other:?}"
            )));
        }
    };
    let transcript = Transcript {
        node_id: me.node_id.clone(),
        gateway_nonce,
        node_nonce,
    };
    let token = me.token.as_bytes();
    let auth = NodeAuth::Auth {
        proof: to_hex(&transcript.node_proof(token)),
    };
    t.tx.send(message::encode(&auth)).await?;
    match message::decode::<GatewayReply>(&recv_step(t).await?)? {
        GatewayReply::Welcome { proof } => {
            if !seal::proof_matches(&transcript.gateway_proof(token), &proof) {
                return Err(BridgeError::Protocol(
                    "the gateway could not prove it holds this node's token".into(),
                ));
            }
        }
        GatewayReply::Error { code, message } => return Err(refused(code, message)),
        other => {
            return Err(BridgeError::Protocol(format!(
                "expected welcome, got {other:?}"
            )));
        }
    }
    let key = transcript.session_key(token);
    Ok(Keys {
        sealer: Sealer::new(key, Direction::NodeToGateway),
        opener: Opener::new(key, Direction::GatewayToNode),
    })
}

/// A `hello` as the gateway received it.
#[derive(Clone, Debug)]
pub struct Hello {
    /// The claimed node id (not yet proven).
    pub node_id: String,
    /// Its display name.
    pub display_name: Option<String>,
    /// Its nonce.
    pub nonce: [u8; seal::NONCE_LEN],
    /// What it serves.
    pub capabilities: Vec<String>,
}

/// The gateway's side, step one: read the node's opening and settle the version.
pub async fn read_opening(t: &mut Transport) -> Result<Opening, BridgeError> {
    let frame = recv_step(t).await?;
    let opening = match message::decode::<Opening>(&frame) {
        Ok(o) => o,
        Err(e) => return Err(refuse(t, "bad-request", e.to_string()).await),
    };
    let (protocol, versions) = match &opening {
        Opening::Hello {
            protocol, versions, ..
        }
        | Opening::PairRequest {
            protocol, versions, ..
        } => (protocol, versions),
    };
    if protocol != PROTOCOL_NAME {
        let why = format!("not a Bridge client (protocol {protocol:?})");
        return Err(refuse(t, "bad-request", why).await);
    }
    if let Err(why) = choose_version(versions) {
        return Err(refuse(t, "unsupported-version", why).await);
    }
    Ok(opening)
}

/// The gateway's side, step two: challenge a `hello` whose node holds `token`; on a
/// right proof, welcome it.
pub async fn gateway_side(
    t: &mut Transport,
    hello: &Hello,
    token: &str,
) -> Result<Keys, BridgeError> {
    let gateway_nonce = seal::nonce()?;
    let challenge = GatewayReply::Challenge {
        version: PROTOCOL_VERSIONS[PROTOCOL_VERSIONS.len() - 1],
        nonce: to_hex(&gateway_nonce),
    };
    t.tx.send(message::encode(&challenge)).await?;
    let transcript = Transcript {
        node_id: hello.node_id.clone(),
        gateway_nonce,
        node_nonce: hello.nonce,
    };
    let NodeAuth::Auth { proof } = match message::decode::<NodeAuth>(&recv_step(t).await?) {
        Ok(a) => a,
        Err(e) => return Err(refuse(t, "bad-request", e.to_string()).await),
    };
    let token = token.as_bytes();
    if !seal::proof_matches(&transcript.node_proof(token), &proof) {
        let why = format!("node {:?} did not prove it holds its token", hello.node_id);
        return Err(refuse(t, "bad-proof", why).await);
    }
    let welcome = GatewayReply::Welcome {
        proof: to_hex(&transcript.gateway_proof(token)),
    };
    t.tx.send(message::encode(&welcome)).await?;
    let key = transcript.session_key(token);
    Ok(Keys {
        sealer: Sealer::new(key, Direction::GatewayToNode),
        opener: Opener::new(key, Direction::NodeToGateway),
    })
}

/// Check a `hello`'s fields and turn it into a [`Hello`].
pub fn check_hello(opening: Opening) -> Result<Hello, BridgeError> {
    match opening {
        Opening::Hello {
            node_id,
            display_name,
            nonce,
            capabilities,
            ..
        } => {
            message::check_id("node id", &node_id)?;
            if let Some(name) = &display_name {
                message::check_name(name)?;
            }
            if capabilities.len() > 64 {
                return Err(BridgeError::Invalid("too many capabilities".into()));
            }
            Ok(Hello {
                node_id,
                display_name,
                nonce: from_hex::<{ seal::NONCE_LEN }>("the node's nonce", &nonce)?,
                capabilities,
            })
        }
        Opening::PairRequest { .. } => Err(BridgeError::Invalid(
            "a pairing request is not a hello".into(),
        )),
    }
}
