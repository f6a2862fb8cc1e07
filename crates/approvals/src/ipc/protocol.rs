//! The approver wire protocol (see `docs/protocol-approvals.md`): length-prefixed frames,
//! canonical length-delimited bytes with a domain/version label, HMAC-SHA256 over them,
//! and strict JSON payloads (no unknown fields, no duplicate keys).

use std::collections::BTreeMap;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use policy::{AlwaysOption, Ask, AskReason, RuleSpec, RunPlan, Security};

/// Largest frame either side accepts (bytes after the 4-byte length prefix).
pub const MAX_FRAME: usize = 64 * 1024;
/// Nonce size.
pub const NONCE_LEN: usize = 32;
/// HMAC-SHA256 tag size.
pub const MAC_LEN: usize = 32;
/// How far a message's timestamp may be from the receiver's clock.
pub const TTL_MS: u64 = 10_000;

/// Label of the server's challenge frame.
pub const CHALLENGE_LABEL: &[u8] = b"warden-approvals/v1/challenge";
/// Label of an authenticated request.
pub const REQUEST_LABEL: &[u8] = b"warden-approvals/v1/request";
/// Label of an authenticated response.
pub const RESPONSE_LABEL: &[u8] = b"warden-approvals/v1/response";

/// Why a frame or message was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// Shorter than its fixed parts, longer than allowed, or trailing bytes.
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
    /// The MAC does not verify.
    #[error("authentication failed")]
    BadMac,
    /// A different label (e.g. a response presented as a request).
    #[error("wrong message type")]
    WrongLabel,
    /// Not the nonce this connection issued.
    #[error("wrong or reused nonce")]
    WrongNonce,
    /// Timestamp outside the TTL window.
    #[error("message too old or from the future")]
    Expired,
    /// The response answers another request.
    #[error("response is not bound to this request")]
    NotBound,
    /// The payload is not a valid message.
    #[error("invalid payload: {0}")]
    Payload(String),
}

fn push_lp(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtocolError> {
        if self.rest.len() < n {
            return Err(ProtocolError::Malformed("truncated field"));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }
    fn lp(&mut self) -> Result<&'a [u8], ProtocolError> {
        let len = u32::from_be_bytes(
            self.take(4)?
                .try_into()
                .map_err(|_| ProtocolError::Malformed("length"))?,
        );
        self.take(len as usize)
    }
    fn u64(&mut self) -> Result<u64, ProtocolError> {
        Ok(u64::from_be_bytes(
            self.take(8)?
                .try_into()
                .map_err(|_| ProtocolError::Malformed("u64"))?,
        ))
    }
    fn end(&self) -> Result<(), ProtocolError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(ProtocolError::Malformed("trailing bytes"))
        }
    }
}

type HmacSha256 = Hmac<Sha256>;

fn mac(key: &[u8], body: &[u8]) -> [u8; MAC_LEN] {
    match <HmacSha256 as Mac>::new_from_slice(key) {
        Ok(mut m) => {
            m.update(body);
            m.finalize().into_bytes().into()
        }
        // HMAC takes keys of any length, so this cannot happen; an all-zero tag would
        // simply fail verification (fail closed).
        Err(_) => [0; MAC_LEN],
    }
}

/// Split `frame` into body and tag and verify the tag over the body — in constant time,
/// over the full tag — before anything in the body is looked at.
fn verify<'a>(key: &[u8], frame: &'a [u8]) -> Result<&'a [u8], ProtocolError> {
    if frame.len() < MAC_LEN {
        return Err(ProtocolError::Malformed("shorter than a MAC"));
    }
    let (body, tag) = frame.split_at(frame.len() - MAC_LEN);
    let mut m = <HmacSha256 as Mac>::new_from_slice(key).map_err(|_| ProtocolError::BadMac)?;
    m.update(body);
    m.verify_slice(tag).map_err(|_| ProtocolError::BadMac)?;
    Ok(body)
}

fn check_ttl(ts: u64, now_ms: u64) -> Result<(), ProtocolError> {
    if ts.abs_diff(now_ms) > TTL_MS {
        return Err(ProtocolError::Expired);
    }
    Ok(())
}

/// The challenge frame: `lp(CHALLENGE_LABEL) || lp(nonce)`.
pub fn encode_challenge(nonce: &[u8; NONCE_LEN]) -> Vec<u8> {
    let mut out = Vec::new();
    push_lp(&mut out, CHALLENGE_LABEL);
    push_lp(&mut out, nonce);
    out
}

/// Read the nonce from a challenge frame.
pub fn decode_challenge(frame: &[u8]) -> Result<[u8; NONCE_LEN], ProtocolError> {
    let mut c = Cursor { rest: frame };
    if c.lp()? != CHALLENGE_LABEL {
        return Err(ProtocolError::WrongLabel);
    }
    let nonce: [u8; NONCE_LEN] = c
        .lp()?
        .try_into()
        .map_err(|_| ProtocolError::Malformed("nonce length"))?;
    c.end()?;
    Ok(nonce)
}

/// An authenticated request frame: `lp(REQUEST_LABEL) || lp(nonce) || u64(ts) ||
/// lp(payload) || HMAC(token, everything before)`.
pub fn encode_request(
    token: &[u8],
    nonce: &[u8; NONCE_LEN],
    ts_ms: u64,
    payload: &[u8],
) -> Vec<u8> {
    let mut out = Vec::new();
    push_lp(&mut out, REQUEST_LABEL);
    push_lp(&mut out, nonce);
    out.extend_from_slice(&ts_ms.to_be_bytes());
    push_lp(&mut out, payload);
    let tag = mac(token, &out);
    out.extend_from_slice(&tag);
    out
}

/// Verify and open a request frame for the connection that issued `nonce`. Returns the
/// payload bytes and the request's MAC (which the response must be bound to).
pub fn decode_request<'a>(
    token: &[u8],
    nonce: &[u8; NONCE_LEN],
    now_ms: u64,
    frame: &'a [u8],
) -> Result<(&'a [u8], [u8; MAC_LEN]), ProtocolError> {
    let body = verify(token, frame)?;
    let request_mac: [u8; MAC_LEN] = frame[body.len()..]
        .try_into()
        .map_err(|_| ProtocolError::Malformed("mac"))?;
    let mut c = Cursor { rest: body };
    if c.lp()? != REQUEST_LABEL {
        return Err(ProtocolError::WrongLabel);
    }
    if c.lp()? != nonce.as_slice() {
        return Err(ProtocolError::WrongNonce);
    }
    check_ttl(c.u64()?, now_ms)?;
    let payload = c.lp()?;
    c.end()?;
    Ok((payload, request_mac))
}

/// An authenticated response frame: `lp(RESPONSE_LABEL) || lp(nonce) ||
/// lp(request_mac) || u64(ts) || lp(payload) || HMAC(token, everything before)`.
pub fn encode_response(
    token: &[u8],
    nonce: &[u8; NONCE_LEN],
    request_mac: &[u8; MAC_LEN],
    ts_ms: u64,
    payload: &[u8],
) -> Vec<u8> {
    let mut out = Vec::new();
    push_lp(&mut out, RESPONSE_LABEL);
    push_lp(&mut out, nonce);
    push_lp(&mut out, request_mac);
    out.extend_from_slice(&ts_ms.to_be_bytes());
    push_lp(&mut out, payload);
    let tag = mac(token, &out);
    out.extend_from_slice(&tag);
    out
}

/// Verify and open a response to the request with `request_mac` on this connection.
pub fn decode_response<'a>(
    token: &[u8],
    nonce: &[u8; NONCE_LEN],
    request_mac: &[u8; MAC_LEN],
    now_ms: u64,
    frame: &'a [u8],
) -> Result<&'a [u8], ProtocolError> {
    let body = verify(token, frame)?;
    let mut c = Cursor { rest: body };
    if c.lp()? != RESPONSE_LABEL {
        return Err(ProtocolError::WrongLabel);
    }
    if c.lp()? != nonce.as_slice() {
        return Err(ProtocolError::WrongNonce);
    }
    if c.lp()? != request_mac.as_slice() {
        return Err(ProtocolError::NotBound);
    }
    check_ttl(c.u64()?, now_ms)?;
    let payload = c.lp()?;
    c.end()?;
    Ok(payload)
}

/// The human's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Answer {
    /// Run it this time.
    AllowOnce,
    /// Run it and store its patterns.
    AllowAlways,
    /// Do not run it.
    Deny,
}

/// What the human is shown and decides on. Its `digest` (of everything shown) binds
/// the answer: an answer for another prompt is never taken for this one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Prompt {
    /// The run id.
    pub id: String,
    /// Requesting agent.
    pub agent: String,
    /// Requesting session.
    pub session: String,
    /// The executing host (`gateway`, `sandbox`, a node id).
    pub host: String,
    /// What is asked.
    pub kind: PromptKind,
    /// [`Prompt::compute_digest`]; must match the rest.
    pub digest: String,
}

/// What a human is asked to allow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "kebab-case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum PromptKind {
    /// A command the policy sends to a human (`ask=always`, or an allowlist miss).
    Command {
        /// Exactly what runs if allowed.
        plan: RunPlan,
        /// The command as the agent wrote it.
        command: String,
        /// Effective security on the executing host.
        security: Security,
        /// Effective ask mode.
        ask: Ask,
        /// Why a human is asked.
        reason: AskReason,
        /// What "allow always" may store, narrowest first (never a shell, interpreter
        /// or wrapper); empty when nothing can be stored. The approver picks one.
        allow_always: Vec<AlwaysOption>,
        /// The option stored when the approver picks none.
        #[serde(default)]
        allow_always_default: usize,
        /// Programs "allow always" leaves out, and why (`program: reason`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        not_stored: Vec<String>,
        /// Why an allowlist entry that names the program does not allow this command (a
        /// flag it does not allow, an argument that reaches Warden's own files).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        why: Option<String>,
    },
    /// A write: a sandboxed command that was refused writes (then `retry` is the command
    /// that re-runs with the writable profile), or a file tool's change (`detail` says
    /// what it writes). "Allow always" stores nothing for it.
    Write {
        /// The paths written.
        paths: Vec<String>,
        /// What is written, in words.
        detail: String,
        /// The command run again, writable, if allowed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry: Option<RunPlan>,
    },
    /// A connection a sandboxed run asked Warden's egress proxy for, to a host its egress
    /// rules do not name (`sandbox.network = "proxy"`): allowed, it is reached for the
    /// rest of this run; "allow always" also stores `store` for the agent.
    Connection {
        /// The run's command as the agent wrote it.
        command: String,
        /// The host asked for: a name, or an address.
        destination: String,
        /// The port asked for.
        port: u16,
        /// Why the human is asked (no rule names it).
        why: String,
        /// What the address is when it is a special one (loopback, private, metadata…):
        /// allowing it reaches that.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        special: Option<String>,
        /// The rule "allow always" stores in the agent's `egressAllow` (exactly this host
        /// and port); `None`: nothing can be stored, "allow always" allows once.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        store: Option<String>,
    },
}

fn put(hasher: &mut sha2::Sha256, bytes: &[u8]) {
    use sha2::Digest as _;
    hasher.update((bytes.len() as u64).to_be_bytes());
    hasher.update(bytes);
}

/// A stored rule in the digest: pattern, whether it has argument patterns and which,
/// how they match, and the flags it allows (examples are never part of a prompt).
fn put_rule(h: &mut sha2::Sha256, rule: &RuleSpec) {
    use sha2::Digest as _;
    put(h, rule.pattern.as_bytes());
    match &rule.args {
        None => put(h, b"any"),
        Some(args) => {
            put(
                h,
                if rule.args_match == policy::ArgsMatch::Exact {
                    b"exact"
                } else {
                    b"prefix"
                },
            );
            h.update((args.len() as u64).to_be_bytes());
            for a in args {
                put(h, a.as_bytes());
            }
        }
    }
    h.update((rule.allow_flags.len() as u64).to_be_bytes());
    for f in &rule.allow_flags {
        put(h, f.as_bytes());
    }
}

impl Prompt {
    /// A prompt with its digest filled in.
    pub fn new(
        id: impl Into<String>,
        agent: impl Into<String>,
        session: impl Into<String>,
        host: impl Into<String>,
        kind: PromptKind,
    ) -> Prompt {
        let mut prompt = Prompt {
            id: id.into(),
            agent: agent.into(),
            session: session.into(),
            host: host.into(),
            kind,
            digest: String::new(),
        };
        prompt.digest = prompt.compute_digest();
        prompt
    }

    /// `sha256:<hex>` over a length-delimited encoding of everything the human sees and
    /// what it allows (the run plans by their own digests).
    pub fn compute_digest(&self) -> String {
        use sha2::Digest as _;
        let mut h = sha2::Sha256::new();
        put(&mut h, b"warden-prompt/v3");
        put(&mut h, self.agent.as_bytes());
        put(&mut h, self.session.as_bytes());
        put(&mut h, self.host.as_bytes());
        match &self.kind {
            PromptKind::Command {
                plan,
                command,
                security,
                ask,
                reason,
                allow_always,
                allow_always_default,
                not_stored,
                why,
            } => {
                put(&mut h, b"command");
                put(&mut h, plan.digest().as_bytes());
                put(&mut h, command.as_bytes());
                put(&mut h, security.as_str().as_bytes());
                put(&mut h, ask.as_str().as_bytes());
                put(&mut h, reason.as_str().as_bytes());
                h.update((allow_always.len() as u64).to_be_bytes());
                for option in allow_always {
                    put(&mut h, option.scope.as_str().as_bytes());
                    h.update((option.rules.len() as u64).to_be_bytes());
                    for rule in &option.rules {
                        put_rule(&mut h, rule);
                    }
                }
                h.update((*allow_always_default as u64).to_be_bytes());
                h.update((not_stored.len() as u64).to_be_bytes());
                for item in not_stored {
                    put(&mut h, item.as_bytes());
                }
                // Only when present: prompts without it keep the digests they had.
                if let Some(why) = why {
                    put(&mut h, b"why");
                    put(&mut h, why.as_bytes());
                }
            }
            PromptKind::Write {
                paths,
                detail,
                retry,
            } => {
                put(&mut h, b"write");
                h.update((paths.len() as u64).to_be_bytes());
                for p in paths {
                    put(&mut h, p.as_bytes());
                }
                put(&mut h, detail.as_bytes());
                put(
                    &mut h,
                    retry
                        .as_ref()
                        .map(RunPlan::digest)
                        .unwrap_or_default()
                        .as_bytes(),
                );
            }
            PromptKind::Connection {
                command,
                destination,
                port,
                why,
                special,
                store,
            } => {
                put(&mut h, b"connection");
                put(&mut h, command.as_bytes());
                put(&mut h, destination.as_bytes());
                h.update(u64::from(*port).to_be_bytes());
                put(&mut h, why.as_bytes());
                match special {
                    Some(special) => {
                        put(&mut h, b"special");
                        put(&mut h, special.as_bytes());
                    }
                    None => put(&mut h, b"ordinary"),
                }
                match store {
                    Some(rule) => {
                        put(&mut h, b"store");
                        put(&mut h, rule.as_bytes());
                    }
                    None => put(&mut h, b"store nothing"),
                }
            }
        }
        format!("sha256:{}", policy::hex(&h.finalize()))
    }

    /// The rules "allow always" stores for the approver's `choice` (`None`: the
    /// preselected option), or why the choice is not one the prompt offered.
    pub fn allow_always_rules(&self, choice: Option<usize>) -> Result<&[RuleSpec], String> {
        match &self.kind {
            PromptKind::Command {
                allow_always,
                allow_always_default,
                ..
            } => {
                if allow_always.is_empty() {
                    return match choice {
                        None => Ok(&[]),
                        Some(i) => Err(format!(
                            "allow-always option {i} chosen, but none was offered"
                        )),
                    };
                }
                let i = choice.unwrap_or(*allow_always_default);
                allow_always
                    .get(i)
                    .map(|o| o.rules.as_slice())
                    .ok_or_else(|| {
                        format!(
                            "allow-always option {i} chosen, but only {} were offered",
                            allow_always.len()
                        )
                    })
            }
            PromptKind::Write { .. } => match choice {
                None => Ok(&[]),
                Some(i) => Err(format!(
                    "allow-always option {i} chosen for a write permission"
                )),
            },
            PromptKind::Connection { store, .. } => match (choice, store) {
                (None, _) | (Some(0), Some(_)) => Ok(&[]),
                (Some(i), _) => Err(format!("allow-always option {i} chosen for a connection")),
            },
        }
    }

    /// What "allow always" stores for the approver's `choice`, one line each (escape
    /// before showing); empty when nothing can be stored (then it allows once). The
    /// error: the choice is not one the prompt offered.
    pub fn always_stores(&self, choice: Option<usize>) -> Result<Vec<String>, String> {
        let rules = self.allow_always_rules(choice)?;
        Ok(match &self.kind {
            PromptKind::Connection {
                store: Some(rule), ..
            } => vec![format!("{rule} (egressAllow)")],
            _ => rules.iter().map(RuleSpec::describe).collect(),
        })
    }

    /// The run plan the answer allows, if it allows one.
    pub fn plan(&self) -> Option<&RunPlan> {
        match &self.kind {
            PromptKind::Command { plan, .. } => Some(plan),
            PromptKind::Write { retry, .. } => retry.as_ref(),
            PromptKind::Connection { .. } => None,
        }
    }
}

/// A request for the approver to run the command itself, in its own context, if the
/// human allows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExecPrompt {
    /// The prompt to show.
    pub prompt: Prompt,
    /// Run timeout in milliseconds.
    pub timeout_ms: u64,
}

/// A request payload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Request {
    /// Ask for a decision.
    Prompt(Prompt),
    /// Ask for a decision and, if allowed, run it in the approver.
    Exec(ExecPrompt),
}

impl Request {
    /// The prompt inside either kind.
    pub fn prompt(&self) -> &Prompt {
        match self {
            Request::Prompt(p) => p,
            Request::Exec(e) => &e.prompt,
        }
    }
}

/// The output of a run the approver performed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExecReport {
    /// Exit code (128+N for signal N).
    pub exit_code: i32,
    /// The signal that killed the command, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Captured stdout (its beginning and end when it was cut).
    pub stdout: String,
    /// Captured stderr (likewise).
    pub stderr: String,
    /// What the command wrote to stdout and which of it is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_size: Option<caps::StreamSize>,
    /// Likewise for stderr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_size: Option<caps::StreamSize>,
    /// Output was cut at the cap.
    pub truncated: bool,
    /// The run timed out.
    pub timed_out: bool,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
    /// Why it could not run at all (not found, not executable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A response payload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Response {
    /// The run id of the request.
    pub id: String,
    /// The digest of the prompt it answers.
    pub digest: String,
    /// The decision.
    pub answer: Answer,
    /// With `allow-always`: which of the prompt's `allowAlways` options the approver
    /// chose (absent: the preselected one). Only an index: the approver chooses among
    /// the rules the runner offered, bound by the digest, and can add none of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_always_option: Option<usize>,
    /// For exec requests that were allowed: what happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<Box<ExecReport>>,
}

/// Parse a JSON payload strictly: duplicate keys anywhere are rejected before the typed
/// decoding (which itself rejects unknown fields).
pub fn parse_strict<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ProtocolError> {
    reject_duplicate_keys(bytes).map_err(|e| ProtocolError::Payload(e.to_string()))?;
    serde_json::from_slice(bytes).map_err(|e| ProtocolError::Payload(e.to_string()))
}

/// Check that `bytes` is one JSON value in which no object repeats a key (serde would
/// keep the last, another reader the first). Shared by every wire format Warden reads:
/// the approver protocol here and the Bridge's messages.
pub fn reject_duplicate_keys(bytes: &[u8]) -> Result<(), serde_json::Error> {
    use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
    struct Strict;
    impl<'de> Visitor<'de> for Strict {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                if !seen.insert(key.clone()) {
                    return Err(serde::de::Error::custom(format!("duplicate key {key:?}")));
                }
                map.next_value_seed(StrictSeed)?;
            }
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            while seq.next_element_seed(StrictSeed)?.is_some() {}
            Ok(())
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
    }
    struct StrictSeed;
    impl<'de> serde::de::DeserializeSeed<'de> for StrictSeed {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(Strict)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    de.deserialize_any(Strict)?;
    de.end()
}

/// Environment maps in payloads are ordered for display and hashing.
pub type Env = BTreeMap<String, String>;

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &[u8] = b"token-for-tests";
    const NONCE: [u8; NONCE_LEN] = [7; NONCE_LEN];
    const NOW: u64 = 1_700_000_000_000;

    #[test]
    fn request_and_response_round_trip() {
        let frame = encode_request(TOKEN, &NONCE, NOW, b"{\"x\":1}");
        let (payload, req_mac) = decode_request(TOKEN, &NONCE, NOW + 5, &frame).unwrap();
        assert_eq!(payload, b"{\"x\":1}");
        let resp = encode_response(TOKEN, &NONCE, &req_mac, NOW, b"ok");
        assert_eq!(
            decode_response(TOKEN, &NONCE, &req_mac, NOW, &resp).unwrap(),
            b"ok"
        );
    }

    #[test]
    fn every_single_bit_flip_is_rejected() {
        let frame = encode_request(TOKEN, &NONCE, NOW, b"{\"type\":\"prompt\"}");
        for i in 0..frame.len() {
            for bit in 0..8 {
                let mut bad = frame.clone();
                bad[i] ^= 1 << bit;
                assert!(
                    decode_request(TOKEN, &NONCE, NOW, &bad).is_err(),
                    "byte {i} bit {bit}"
                );
            }
        }
        let (_, req_mac) = decode_request(TOKEN, &NONCE, NOW, &frame).unwrap();
        let resp = encode_response(TOKEN, &NONCE, &req_mac, NOW, b"{}");
        for i in 0..resp.len() {
            let mut bad = resp.clone();
            bad[i] ^= 0x01;
            assert!(
                decode_response(TOKEN, &NONCE, &req_mac, NOW, &bad).is_err(),
                "byte {i}"
            );
        }
    }

    #[test]
    fn reflection_replay_expiry_and_binding_are_rejected() {
        let frame = encode_request(TOKEN, &NONCE, NOW, b"{}");
        let (_, req_mac) = decode_request(TOKEN, &NONCE, NOW, &frame).unwrap();
        let resp = encode_response(TOKEN, &NONCE, &req_mac, NOW, b"{}");
        // A response presented as a request.
        assert_eq!(
            decode_request(TOKEN, &NONCE, NOW, &resp).unwrap_err(),
            ProtocolError::WrongLabel
        );
        // A request presented as a response.
        assert!(decode_response(TOKEN, &NONCE, &req_mac, NOW, &frame).is_err());
        // Replayed on a connection with another nonce.
        assert_eq!(
            decode_request(TOKEN, &[8; NONCE_LEN], NOW, &frame).unwrap_err(),
            ProtocolError::WrongNonce
        );
        // Too old, from the future, and at the extremes of u64 (no overflow).
        assert_eq!(
            decode_request(TOKEN, &NONCE, NOW + TTL_MS + 1, &frame).unwrap_err(),
            ProtocolError::Expired
        );
        assert_eq!(
            decode_request(TOKEN, &NONCE, NOW - TTL_MS - 1, &frame).unwrap_err(),
            ProtocolError::Expired
        );
        assert_eq!(
            decode_request(TOKEN, &NONCE, u64::MAX, &frame).unwrap_err(),
            ProtocolError::Expired
        );
        let far = encode_request(TOKEN, &NONCE, u64::MAX, b"{}");
        assert_eq!(
            decode_request(TOKEN, &NONCE, 0, &far).unwrap_err(),
            ProtocolError::Expired
        );
        // A response bound to another request.
        assert_eq!(
            decode_response(TOKEN, &NONCE, &[0; MAC_LEN], NOW, &resp).unwrap_err(),
            ProtocolError::NotBound
        );
        // Wrong token.
        assert_eq!(
            decode_request(b"other", &NONCE, NOW, &frame).unwrap_err(),
            ProtocolError::BadMac
        );
        // Truncated and extended frames.
        assert!(decode_request(TOKEN, &NONCE, NOW, &frame[..frame.len() - 1]).is_err());
        assert!(decode_request(TOKEN, &NONCE, NOW, &[]).is_err());
    }

    #[test]
    fn payloads_are_strict() {
        let ok = br#"{"id":"r1","digest":"d","answer":"deny"}"#;
        assert!(parse_strict::<Response>(ok).is_ok());
        let dup = br#"{"id":"r1","digest":"d","answer":"deny","answer":"allow-once"}"#;
        assert!(parse_strict::<Response>(dup).is_err());
        let unknown = br#"{"id":"r1","digest":"d","answer":"deny","extra":1}"#;
        assert!(parse_strict::<Response>(unknown).is_err());
        let nested_dup = br#"{"type":"prompt","id":"r","agent":"a","session":"s","host":"gateway","kind":{"type":"write","paths":[],"detail":"x","retry":{"launch":{"kind":"script","shell":"/bin/sh","source":"x"},"cwd":"/","env":{"A":"1","A":"2"},"agent":"a","session":"s","host":"gateway"}},"digest":"d"}"#;
        assert!(parse_strict::<Request>(nested_dup).is_err());
        let well_formed = br#"{"type":"prompt","id":"r","agent":"a","session":"s","host":"gateway","kind":{"type":"write","paths":["/w/a"],"detail":"x"},"digest":"d"}"#;
        assert!(parse_strict::<Request>(well_formed).is_ok());
        let unknown_in_kind = br#"{"type":"prompt","id":"r","agent":"a","session":"s","host":"gateway","kind":{"type":"write","paths":[],"detail":"x","extra":1},"digest":"d"}"#;
        assert!(parse_strict::<Request>(unknown_in_kind).is_err());
        assert!(parse_strict::<Response>(b"{} trailing").is_err());
    }

    fn connection(destination: &str, port: u16, why: &str, special: Option<&str>) -> Prompt {
        Prompt::new(
            "r",
            "a",
            "s",
            "sandbox",
            PromptKind::Connection {
                command: "curl https://x/".into(),
                destination: destination.into(),
                port,
                why: why.into(),
                special: special.map(str::to_owned),
                store: Some(format!("{destination}:{port}")),
            },
        )
    }

    #[test]
    fn a_connection_prompts_digest_binds_everything_shown_and_it_stores_nothing() {
        let base = connection("pypi.org", 443, "no rule names it", None);
        let others = [
            connection("pypi.org.evil", 443, "no rule names it", None),
            connection("pypi.org", 80, "no rule names it", None),
            connection("pypi.org", 443, "another reason", None),
            connection("pypi.org", 443, "no rule names it", Some("loopback")),
            Prompt::new(
                "r",
                "a",
                "s",
                "sandbox",
                PromptKind::Connection {
                    command: "curl https://y/".into(),
                    destination: "pypi.org".into(),
                    port: 443,
                    why: "no rule names it".into(),
                    special: None,
                    store: Some("pypi.org:443".into()),
                },
            ),
            Prompt::new(
                "r",
                "a",
                "s",
                "sandbox",
                PromptKind::Connection {
                    command: "curl https://x/".into(),
                    destination: "pypi.org".into(),
                    port: 443,
                    why: "no rule names it".into(),
                    special: None,
                    store: Some("*.pypi.org".into()),
                },
            ),
        ];
        for other in &others {
            assert_ne!(base.digest, other.digest, "{other:?}");
        }
        assert_eq!(base.allow_always_rules(None), Ok(&[][..]));
        assert_eq!(
            base.always_stores(None),
            Ok(vec!["pypi.org:443 (egressAllow)".to_string()])
        );
        assert_eq!(base.always_stores(Some(0)), base.always_stores(None));
        assert!(base.always_stores(Some(1)).is_err());
        assert_eq!(base.plan(), None);
        // It travels as strict JSON, like every other kind.
        let wire = serde_json::to_vec(&Request::Prompt(base.clone())).unwrap();
        assert_eq!(
            parse_strict::<Request>(&wire).unwrap(),
            Request::Prompt(base)
        );
    }
}
