//! Pairing: the node asks (`pair.request` with an ephemeral X25519 public key), the
//! gateway records the request (it expires; attempts and pending requests are capped)
//! and tells the node the short code to show, the operator approves (`warden nodes
//! approve ID`) or rejects it, and on approval both sides derive the same token from the
//! X25519 agreement — the token itself never travels. Over TLS the node has pinned the
//! gateway's certificate, so nobody in between can substitute keys; the code lets the
//! operator check they approve the node they mean.

use std::time::Duration;

use crate::handshake::{recv_step, refuse};
use crate::message::{self, GatewayReply, Opening};
use crate::pair_keys::{agree, keypair, token_from};
use crate::registry::Registry;
use crate::requests::PairStatus;
use crate::wire::Transport;
use crate::{BridgeError, PROTOCOL_NAME, PROTOCOL_VERSIONS};

/// How often a waiting request's connection looks at the registry.
const POLL: Duration = Duration::from_millis(200);

/// What the node learns while it waits.
#[derive(Clone, Debug)]
pub struct Pending {
    /// The code to show the operator.
    pub code: String,
    /// When the request expires (ms since the epoch).
    pub expires_at_ms: u64,
}

/// The node's side: ask, report the code through `pending`, wait for the operator, and
/// derive the token. Errors say whether the operator rejected it or it expired.
pub async fn request(
    t: &mut Transport,
    node_id: &str,
    display_name: Option<&str>,
    pending: impl FnOnce(&Pending),
) -> Result<String, BridgeError> {
    let (private, public) = keypair()?;
    let ask = Opening::PairRequest {
        protocol: PROTOCOL_NAME.to_owned(),
        versions: PROTOCOL_VERSIONS.to_vec(),
        node_id: node_id.to_owned(),
        display_name: display_name.map(str::to_owned),
        public_key: public.clone(),
        capabilities: message::CAPABILITIES
            .iter()
            .map(|c| (*c).to_owned())
            .collect(),
    };
    t.tx.send(message::encode(&ask)).await?;
    let refused = |code: String, message: String| {
        if code == "unsupported-version" {
            BridgeError::Version(message)
        } else {
            BridgeError::Refused { code, message }
        }
    };
    match message::decode::<GatewayReply>(&recv_step(t).await?)? {
        GatewayReply::PairPending {
            code,
            expires_at_ms,
        } => {
            if Some(&code) != crate::requests::pairing_code(&public).ok().as_ref() {
                return Err(BridgeError::Protocol(
                    "the gateway answered with another request's code".into(),
                ));
            }
            pending(&Pending {
                code,
                expires_at_ms,
            });
        }
        GatewayReply::Error { code, message } => return Err(refused(code, message)),
        other => {
            return Err(BridgeError::Protocol(format!(
                "expected pair.pending, got {other:?}"
            )));
        }
    }
    // The operator takes their time: no step deadline here, the gateway ends the wait
    // when the request expires.
    let frame = match t.rx.recv().await? {
        Some(f) => f,
        None => return Err(BridgeError::Closed("before the operator answered".into())),
    };
    match message::decode::<GatewayReply>(&frame)? {
        GatewayReply::PairApproved { public_key } => {
            let shared = agree(private, &public_key)?;
            Ok(token_from(&shared, node_id, &public, &public_key))
        }
        GatewayReply::PairRejected { message } => Err(BridgeError::Refused {
            code: "pairing-rejected".into(),
            message,
        }),
        GatewayReply::Error { code, message } => Err(refused(code, message)),
        other => Err(BridgeError::Protocol(format!(
            "expected the operator's answer, got {other:?}"
        ))),
    }
}

/// The gateway's side of a `pair.request` (already read): record it, tell the node its
/// code, and hold the connection until the operator answers, the request expires or the
/// node hangs up.
pub async fn serve_request(
    mut t: Transport,
    opening: Opening,
    registry: &Registry,
    now: impl Fn() -> u64,
) -> Result<(), BridgeError> {
    let Opening::PairRequest {
        node_id,
        display_name,
        public_key,
        capabilities,
        ..
    } = opening
    else {
        return Err(BridgeError::Invalid("not a pairing request".into()));
    };
    let Ok(public_key) = crate::requests::canonical_key(&public_key) else {
        return Err(refuse(
            &mut t,
            "bad-request",
            "the pairing request's key is not 32 bytes of hex".into(),
        )
        .await);
    };
    if capabilities.len() > 64 {
        return Err(refuse(
            &mut t,
            "bad-request",
            "the pairing request is malformed".into(),
        )
        .await);
    }
    let remote = t.remote.clone();
    let req = match registry.request_pairing(
        &node_id,
        display_name.as_deref(),
        &public_key,
        remote.as_deref(),
        &capabilities,
        now(),
    ) {
        Ok(r) => r,
        Err(BridgeError::Refused { code, message }) => {
            return Err(refuse(&mut t, &code, message).await);
        }
        Err(e) => return Err(refuse(&mut t, "pairing-refused", e.to_string()).await),
    };
    tracing::info!(
        "bridge: pairing request from node {node_id:?} ({}), code {}; compare it with the code the node shows, then `warden nodes approve {node_id} --code {}`",
        remote.as_deref().unwrap_or("?"),
        req.code,
        req.code
    );
    let reply = GatewayReply::PairPending {
        code: req.code.clone(),
        expires_at_ms: req.expires_at,
    };
    t.tx.send(message::encode(&reply)).await?;
    let answer = loop {
        tokio::select! {
            // The node says nothing while it waits: anything, or a close, ends the wait.
            _ = t.rx.recv() => return Err(BridgeError::Closed("the node stopped waiting".into())),
            () = tokio::time::sleep(POLL) => {}
        }
        match registry.pairing_status(&node_id, &req.code, now())? {
            PairStatus::Waiting => continue,
            PairStatus::Approved(public_key) => break GatewayReply::PairApproved { public_key },
            PairStatus::Refused(message) => break GatewayReply::PairRejected { message },
        }
    };
    t.tx.send(message::encode(&answer)).await?;
    t.tx.close().await;
    Ok(())
}
