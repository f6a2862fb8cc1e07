//! The JSON messages of the Bridge (`docs/protocol-bridge.md` has the JSON Schema). Every
//! type refuses unknown fields, and a JSON object with a duplicate key is refused before
//! it is decoded ([`decode`]), so two readers can never see two different messages in
//! the same bytes.
//!
//! Phases: the node opens with [`Opening`] (`hello` or `pair.request`); the gateway
//! answers with [`GatewayReply`]; the node proves itself with [`NodeAuth`]. After that
//! every frame is sealed ([`crate::seal`]) and carries one [`Msg`].

use policy::{Ask, AskFallback, DenyReason, Security, Sourced};
use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::BridgeError;

/// Invoke commands a node serves.
pub const SYSTEM_RUN: &str = "system.run";
/// Resolve a program name on the node's trusted PATH.
pub const SYSTEM_WHICH: &str = "system.which";
/// Read the node's approvals file (token redacted).
pub const SYSTEM_APPROVALS_GET: &str = "system.execApprovals.get";
/// Replace the node's approvals file by a stricter one (compare-and-swap).
pub const SYSTEM_APPROVALS_SET: &str = "system.execApprovals.set";
/// Not a command: a node that declares it streams a `system.run` asked to (`stream`):
/// output as it is written, standard input, signals and a terminal's size.
pub const EXEC_STREAM: &str = "exec.stream";
/// Not a command: a node that declares it says, in a `system.run` result asked for them
/// (`notices`), what stands on it that the result's reader should know (its config edit
/// not in force, its record not written).
pub const RUN_NOTICES: &str = "run.notices";
/// Everything a node of this build can do.
pub const CAPABILITIES: &[&str] = &[
    SYSTEM_RUN,
    SYSTEM_WHICH,
    SYSTEM_APPROVALS_GET,
    SYSTEM_APPROVALS_SET,
    EXEC_STREAM,
    RUN_NOTICES,
];

/// Largest chunk of output one `exec.output` carries (before base64).
pub const MAX_OUTPUT_CHUNK: usize = 64 * 1024;

/// Longest node id, display name or run id accepted.
pub const MAX_ID_LEN: usize = 128;

/// The node's first frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum Opening {
    /// A paired node connects.
    #[serde(rename = "hello", rename_all = "camelCase")]
    Hello {
        /// Always `warden-bridge`.
        protocol: String,
        /// Versions the node speaks.
        versions: Vec<u32>,
        /// Its node id.
        node_id: String,
        /// Its display name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        display_name: Option<String>,
        /// 32 random bytes, hex.
        nonce: String,
        /// The invoke commands it serves.
        capabilities: Vec<String>,
    },
    /// A node asks to be paired.
    #[serde(rename = "pair.request", rename_all = "camelCase")]
    PairRequest {
        /// Always `warden-bridge`.
        protocol: String,
        /// Versions the node speaks.
        versions: Vec<u32>,
        /// The node id it chose (kept across re-pairing).
        node_id: String,
        /// Its display name.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        display_name: Option<String>,
        /// Its ephemeral X25519 public key, hex.
        public_key: String,
        /// The invoke commands it serves.
        capabilities: Vec<String>,
    },
}

/// What the gateway says before the session is sealed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum GatewayReply {
    /// Prove you hold the token: the version chosen and the gateway's nonce.
    #[serde(rename = "challenge")]
    Challenge {
        /// The version this connection speaks.
        version: u32,
        /// 32 random bytes, hex.
        nonce: String,
    },
    /// The node's proof was right; here is the gateway's.
    #[serde(rename = "welcome")]
    Welcome {
        /// HMAC proof that the gateway holds the token too.
        proof: String,
    },
    /// Refused; the connection closes.
    #[serde(rename = "error")]
    Error {
        /// Machine-readable code (`unsupported-version`, `not-paired`, `pending`,
        /// `revoked`, `bad-proof`, `pairing-refused`...).
        code: String,
        /// Why, for the operator.
        message: String,
    },
    /// The pairing request is recorded and waits for the operator.
    #[serde(rename = "pair.pending", rename_all = "camelCase")]
    PairPending {
        /// A short code the operator compares with the one `warden nodes list` shows.
        code: String,
        /// When the request expires (ms since the epoch).
        expires_at_ms: u64,
    },
    /// The operator approved: the gateway's X25519 public key completes the agreement.
    #[serde(rename = "pair.approved", rename_all = "camelCase")]
    PairApproved {
        /// Hex.
        public_key: String,
    },
    /// The operator rejected the request, or it expired.
    #[serde(rename = "pair.rejected")]
    PairRejected {
        /// Why.
        message: String,
    },
}

/// The node's answer to the challenge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum NodeAuth {
    /// HMAC proof that the node holds the token.
    #[serde(rename = "auth")]
    Auth {
        /// Hex.
        proof: String,
    },
}

/// A message on a sealed session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum Msg {
    /// Gateway → node: do something.
    #[serde(rename = "node.invoke")]
    Invoke {
        /// Chosen by the gateway, unique on the connection.
        id: u64,
        /// One of [`CAPABILITIES`].
        command: String,
        /// The command's parameters.
        params: serde_json::Value,
    },
    /// Node → gateway: how an invoke ended.
    #[serde(rename = "node.invoke.result")]
    InvokeResult {
        /// The invoke's id.
        id: u64,
        /// The result, when it succeeded.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ok: Option<serde_json::Value>,
        /// Why it failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<InvokeError>,
    },
    /// Node → gateway: a run is about to start.
    #[serde(rename = "exec.started", rename_all = "camelCase")]
    ExecStarted {
        /// The gateway's run id.
        run_id: String,
    },
    /// Node → gateway: a run ended.
    #[serde(rename = "exec.finished", rename_all = "camelCase")]
    ExecFinished {
        /// The gateway's run id.
        run_id: String,
        /// Exit code (128+N for signal N).
        code: i32,
        /// The signal, if one ended it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        /// It hit its timeout.
        timed_out: bool,
        /// It was cancelled.
        cancelled: bool,
        /// The last 20,000 bytes of output.
        tail: String,
    },
    /// Node → gateway: a run was refused by the node's policy or its human.
    #[serde(rename = "exec.denied", rename_all = "camelCase")]
    ExecDenied {
        /// The gateway's run id.
        run_id: String,
        /// Why.
        reason: DenyReason,
    },
    /// Node → gateway: a run was cancelled before it started.
    #[serde(rename = "exec.cancelled", rename_all = "camelCase")]
    ExecCancelled {
        /// The gateway's run id.
        run_id: String,
    },
    /// Node → gateway: output a streamed run wrote (stdout and stderr as they arrived,
    /// or its terminal's stream), at most [`MAX_OUTPUT_CHUNK`] bytes, base64.
    #[serde(rename = "exec.output", rename_all = "camelCase")]
    ExecOutput {
        /// The gateway's run id.
        run_id: String,
        /// The bytes, base64.
        data: String,
    },
    /// Gateway → node: bytes for a streamed run's standard input (typed on its
    /// terminal), base64.
    #[serde(rename = "exec.input", rename_all = "camelCase")]
    ExecInput {
        /// The gateway's run id.
        run_id: String,
        /// The bytes, base64.
        data: String,
    },
    /// Node → gateway: this many bytes of the run's input were queued for the command
    /// (what the gateway may send again: its bound on input in flight).
    #[serde(rename = "exec.input.taken", rename_all = "camelCase")]
    ExecInputTaken {
        /// The gateway's run id.
        run_id: String,
        /// Bytes taken.
        bytes: u64,
    },
    /// Gateway → node: end a streamed run's input after what was sent (on a terminal,
    /// Ctrl-D).
    #[serde(rename = "exec.eof", rename_all = "camelCase")]
    ExecEof {
        /// The gateway's run id.
        run_id: String,
    },
    /// Gateway → node: send a signal to a streamed run's processes.
    #[serde(rename = "exec.signal", rename_all = "camelCase")]
    ExecSignal {
        /// The gateway's run id.
        run_id: String,
        /// Its name, without `SIG`: one of `caps::SIGNALS` (numbers differ between
        /// systems).
        signal: String,
    },
    /// Gateway → node: a streamed run's terminal's new size.
    #[serde(rename = "exec.resize", rename_all = "camelCase")]
    ExecResize {
        /// The gateway's run id.
        run_id: String,
        /// Rows, 1–1000.
        rows: u16,
        /// Columns, 1–1000.
        cols: u16,
    },
    /// Gateway → node: stop an invoke (a run's whole tree is killed).
    #[serde(rename = "cancel")]
    Cancel {
        /// The invoke's id.
        id: u64,
    },
    /// Either way: still here.
    #[serde(rename = "heartbeat")]
    Heartbeat {},
}

impl Msg {
    /// The lifecycle message a node sends for one of its runner's events (the host is
    /// not sent: the gateway knows which node it hears).
    pub fn from_event(event: runner::ExecEvent) -> Msg {
        use runner::ExecEvent;
        match event {
            ExecEvent::Started { run_id, .. } => Msg::ExecStarted { run_id },
            ExecEvent::Finished {
                run_id,
                code,
                signal,
                timed_out,
                cancelled,
                tail,
                ..
            } => Msg::ExecFinished {
                run_id,
                code,
                signal,
                timed_out,
                cancelled,
                tail,
            },
            ExecEvent::Denied { run_id, reason, .. } => Msg::ExecDenied { run_id, reason },
            ExecEvent::Cancelled { run_id, .. } => Msg::ExecCancelled { run_id },
        }
    }

    /// A lifecycle message back into the event it reports, on `host`; any other message
    /// comes back as the error.
    pub fn into_event(self, host: runner::RunHost) -> Result<runner::ExecEvent, Box<Msg>> {
        use runner::ExecEvent;
        Ok(match self {
            Msg::ExecStarted { run_id } => ExecEvent::Started { run_id, host },
            Msg::ExecFinished {
                run_id,
                code,
                signal,
                timed_out,
                cancelled,
                tail,
            } => ExecEvent::Finished {
                run_id,
                host,
                code,
                signal,
                timed_out,
                cancelled,
                tail,
            },
            Msg::ExecDenied { run_id, reason } => ExecEvent::Denied {
                run_id,
                host,
                reason,
            },
            Msg::ExecCancelled { run_id } => ExecEvent::Cancelled { run_id, host },
            other => return Err(Box::new(other)),
        })
    }
}

/// Why an invoke failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvokeError {
    /// `invalid`, `unsupported`, `conflict`, `not-tighter`, `state`, `internal`.
    pub code: String,
    /// Why.
    pub message: String,
}

impl InvokeError {
    /// An error with `code`.
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        InvokeError {
            code: code.to_owned(),
            message: message.into(),
        }
    }
}

/// `system.run`'s parameters: who asks, and the request itself — the very
/// [`policy::ExecArgs`] an agent's MCP call or an operator's command line makes, so a
/// parameter added there crosses to nodes with nothing else to change. Its `security`
/// and `ask` are what the gateway resolved before any host file (the node caps them with
/// its own); `host` and `node` are the gateway's choice and are not sent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunParams {
    /// The gateway's run id (events carry it back).
    pub run_id: String,
    /// The requesting agent.
    pub agent: String,
    /// The requesting session (for the node's prompts; events go to the session the
    /// gateway dispatched from, whatever a node says).
    pub session: String,
    /// The request: exactly one of `command` and `argv`, `cwd` (the node's default
    /// when absent, relative paths start there), `env` (the node checks the names
    /// against its own list), `timeout` (capped by the node's maximum), `security` and
    /// `ask`.
    pub request: policy::ExecArgs,
    /// Stream the run (only to a node that declared [`EXEC_STREAM`]): its output comes
    /// as `exec.output` while it runs, and it takes `exec.input`, `exec.eof`,
    /// `exec.signal` and `exec.resize`; a `tty` request needs it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stream: bool,
    /// Put the node's standing notices in the result (only to a node that declared
    /// [`RUN_NOTICES`]: a gateway from before them would refuse the field).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub notices: bool,
}

/// `system.run`'s result: the node's decision and how the run ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunResult {
    /// The run id.
    pub run_id: String,
    /// Effective security on the node, with its source.
    pub security: Sourced<Security>,
    /// Effective ask on the node.
    pub ask: Sourced<Ask>,
    /// The node's fallback.
    pub ask_fallback: Sourced<AskFallback>,
    /// The node's final decision.
    pub decision: WireDecision,
    /// What ran, if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executed: Option<WireExecuted>,
    /// How it ended.
    pub outcome: WireOutcome,
    /// What stands on the node that the result's reader should know (only when the
    /// request asked for `notices`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
}

/// A decision as sent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "lowercase", deny_unknown_fields)]
pub enum WireDecision {
    /// Ran.
    Allow {
        /// Why.
        reason: policy::AllowReason,
        /// The rule.
        rule: String,
    },
    /// A human was to be asked (only in a result cancelled while asking).
    Ask {
        /// Why.
        reason: policy::AskReason,
        /// The rule.
        rule: String,
    },
    /// Refused.
    Deny {
        /// Why.
        reason: DenyReason,
        /// The rule.
        rule: String,
    },
}

/// What ran.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireExecuted {
    /// The OS argv.
    pub argv: Vec<String>,
    /// The rebuilt (allowlisted) form.
    pub rebuilt: bool,
    /// The node's approver ran it, in its own context (`tools.exec.run_in_approver` on
    /// the node); absent means the node's runner did.
    #[serde(
        rename = "inApprover",
        default,
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub in_approver: bool,
}

/// How a run ended.
// One per run result, built to be serialized at once: boxing the finished variant would
// only add an allocation (as for `runner::Outcome`).
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase", deny_unknown_fields)]
pub enum WireOutcome {
    /// It ran.
    #[serde(rename_all = "camelCase")]
    Finished {
        /// Exit code, if it exited.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<i32>,
        /// Signal, if one killed it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        /// Standard output.
        stdout: String,
        /// Standard error.
        stderr: String,
        /// Standard output's bytes in base64, present only when they are not UTF-8
        /// (`stdout` then carries them with replacement characters).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stdout_base64: Option<String>,
        /// Standard error's bytes in base64, likewise.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stderr_base64: Option<String>,
        /// What the command wrote to stdout and which of it is kept (absent from nodes
        /// before these fields: then the text is all there is to know).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stdout_size: Option<caps::StreamSize>,
        /// Likewise for stderr.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stderr_size: Option<caps::StreamSize>,
        /// Both, interleaved.
        combined: String,
        /// The last 20,000 bytes.
        tail: String,
        /// Output was discarded.
        truncated: bool,
        /// It hit its timeout.
        timed_out: bool,
        /// Wall time.
        duration_ms: u64,
    },
    /// Nothing ran.
    Denied {
        /// Why.
        reason: DenyReason,
        /// The rule.
        rule: String,
    },
    /// It could not be carried out.
    #[serde(rename_all = "camelCase")]
    Error {
        /// What went wrong.
        message: String,
        /// The code reported for it.
        exit_code: i32,
    },
    /// Cancelled.
    Cancelled {
        /// Whether it had started.
        started: bool,
    },
}

/// `system.which`'s parameters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WhichParams {
    /// A program name.
    pub name: String,
}

/// `system.which`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WhichResult {
    /// The canonical path it resolves to on the node's trusted PATH, if any.
    pub path: Option<String>,
}

/// `system.execApprovals.get`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsGetResult {
    /// The file's hash (`absent` when there is none), the base of a `set`.
    pub hash: String,
    /// The document, token redacted.
    pub file: serde_json::Value,
}

/// `system.execApprovals.set`'s parameters.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApprovalsSetParams {
    /// The hash `get` returned; the node refuses if the file changed since.
    pub base_hash: String,
    /// The whole new document (token redacted or absent: the node keeps its own).
    pub file: serde_json::Value,
}

/// `system.execApprovals.set`'s result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsSetResult {
    /// The new hash.
    pub hash: String,
    /// Whether the file was rewritten.
    pub written: bool,
}

/// Decode one message, refusing JSON objects with duplicate keys (serde would keep the
/// last, another reader the first).
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, BridgeError> {
    approvals::ipc::protocol::reject_duplicate_keys(bytes).map_err(|e| {
        BridgeError::Protocol(if e.is_syntax() || e.is_eof() {
            format!("not a JSON message: {e}")
        } else {
            format!("invalid message: {e}")
        })
    })?;
    serde_json::from_slice(bytes)
        .map_err(|e| BridgeError::Protocol(format!("invalid message: {e}")))
}

/// Encode one message.
pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    // Our message types serialize infallibly (string keys, no non-finite floats).
    serde_json::to_vec(msg).unwrap_or_default()
}

/// An id (node id, run id) is 1–128 letters, digits, `.`, `_`, `-` and `:` (an IP
/// address may serve as a node id), not starting with `.` or `-`: it is shown to
/// operators and used as a key, never as a path, and nothing in it reads as one.
pub fn check_id(what: &str, id: &str) -> Result<(), BridgeError> {
    let ok = !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'))
        && !id.starts_with(['.', '-']);
    if ok {
        Ok(())
    } else {
        Err(BridgeError::Invalid(format!(
            "invalid {what} {id:?}: use 1-{MAX_ID_LEN} letters, digits, '.', '_', '-' and ':', not starting with '.' or '-'"
        )))
    }
}

/// A display name: 1–128 characters, no control characters.
pub fn check_name(name: &str) -> Result<(), BridgeError> {
    if name.trim().is_empty()
        || name.chars().count() > MAX_ID_LEN
        || name.chars().any(char::is_control)
    {
        return Err(BridgeError::Invalid(format!(
            "invalid display name {name:?}: 1-{MAX_ID_LEN} characters, no control characters"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lifecycle_event_crosses_as_a_message_and_back_and_nothing_else_is_an_event() {
        use runner::{ExecEvent, RunHost};
        let host = RunHost::Node("n1".into());
        let events = [
            ExecEvent::Started {
                run_id: "r".into(),
                host: host.clone(),
            },
            ExecEvent::Finished {
                run_id: "r".into(),
                host: host.clone(),
                code: 137,
                signal: Some(9),
                timed_out: true,
                cancelled: false,
                tail: "last words".into(),
            },
            ExecEvent::Denied {
                run_id: "r".into(),
                host: host.clone(),
                reason: DenyReason::AllowlistMiss,
            },
            ExecEvent::Cancelled {
                run_id: "r".into(),
                host: host.clone(),
            },
        ];
        for event in events {
            let msg = Msg::from_event(event.clone());
            let wire = decode::<Msg>(&encode(&msg)).unwrap();
            assert_eq!(wire.into_event(host.clone()), Ok(event));
        }
        let other = Msg::Cancel { id: 1 };
        assert_eq!(other.clone().into_event(host), Err(Box::new(other)));
    }

    #[test]
    fn unknown_fields_duplicate_keys_and_unknown_types_are_refused() {
        let ok = br#"{"type":"cancel","id":3}"#;
        assert_eq!(decode::<Msg>(ok).unwrap(), Msg::Cancel { id: 3 });
        assert!(decode::<Msg>(br#"{"type":"cancel","id":3,"extra":1}"#).is_err());
        let dup = decode::<Msg>(br#"{"type":"cancel","id":3,"id":4}"#).unwrap_err();
        assert!(dup.to_string().contains("duplicate"), "{dup}");
        assert!(decode::<Msg>(br#"{"type":"exec.pwned","runId":"x"}"#).is_err());
        assert!(decode::<Msg>(br#"{"type":"heartbeat"}"#).is_ok());
        let nested =
            br#"{"type":"node.invoke","id":1,"command":"system.run","params":{"a":1,"a":2}}"#;
        assert!(decode::<Msg>(nested).is_err());
    }

    #[test]
    fn ids_and_names_are_plain() {
        assert!(check_id("node id", "build-box_1.x").is_ok());
        for bad in [
            "",
            "a b",
            "x\n",
            "é",
            "../x",
            "a/b",
            "-rf",
            &"a".repeat(129),
        ] {
            assert!(check_id("node id", bad).is_err(), "{bad:?}");
        }
        assert!(check_name("Build Box").is_ok());
        assert!(check_name("a\u{1b}[31m").is_err());
    }
}
