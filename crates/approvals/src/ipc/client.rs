//! The runner side: connect on demand, answer the challenge, send one authenticated
//! request, verify the authenticated answer. Every failure is bounded in time and ends
//! in [`AskOutcome::NoApprover`] or [`AskOutcome::TimedOut`], so the caller applies
//! askFallback promptly instead of hanging.

use std::path::PathBuf;
use std::time::Duration;

use tokio::net::UnixStream;

use super::frame::{read_frame, write_frame};
use super::protocol::{
    Answer, MAC_LEN, Request, Response, decode_challenge, decode_response, encode_request,
    parse_strict,
};
use crate::clock::Clock;

/// How to reach the approver.
#[derive(Clone)]
pub struct ClientConfig {
    /// The socket path from the approvals file.
    pub socket_path: PathBuf,
    /// The shared secret from the approvals file.
    pub token: String,
    /// The user the approver must run as (root is accepted too). Whoever else listens
    /// at the path is sent nothing.
    pub approver_uid: u32,
    /// Time to connect and receive the challenge.
    pub connect_timeout: Duration,
    /// Time the human has to answer.
    pub approval_timeout: Duration,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("socket_path", &self.socket_path)
            .field("token", &"<redacted>")
            .field("approver_uid", &self.approver_uid)
            .field("connect_timeout", &self.connect_timeout)
            .field("approval_timeout", &self.approval_timeout)
            .finish()
    }
}

/// Default time the human has to answer.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(120);
/// Time an approver has, past an exec request's run timeout, to end the run and report.
pub const EXEC_REPORT_GRACE: Duration = Duration::from_secs(10);
/// Default time to reach the approver.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// How asking ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AskOutcome {
    /// The approver answered (authenticated, bound to this request and plan).
    Answered(Response),
    /// No approver could be reached, or it went away, or its answer was not valid.
    NoApprover(String),
    /// The approver did not answer within the approval timeout.
    TimedOut,
    /// An exec request reached the approver, but no valid answer came back (it went
    /// away, or its answer was refused): the approver may have run the command, so the
    /// caller must not run it again by falling back.
    MayHaveRun(String),
}

/// Ask the approver; never takes longer than `connect_timeout + approval_timeout` (for
/// an exec request, plus its run timeout and [`EXEC_REPORT_GRACE`]).
pub async fn ask(config: &ClientConfig, clock: &dyn Clock, request: &Request) -> AskOutcome {
    let path = config.socket_path.display().to_string();
    let connected = tokio::time::timeout(config.connect_timeout, async {
        let mut stream = UnixStream::connect(&config.socket_path)
            .await
            .map_err(|e| format!("no approver is listening at {path}: {e}"))?;
        // Who listens is checked before anything is read or sent: the request carries
        // the command and its environment.
        let peer = stream
            .peer_cred()
            .map_err(|e| format!("cannot tell who listens at {path}: {e}"))?;
        if peer.uid() != config.approver_uid && peer.uid() != 0 {
            return Err(format!(
                "the process listening at {path} runs as uid {}, not as uid {} (or root); nothing was sent to it",
                peer.uid(),
                config.approver_uid
            ));
        }
        let challenge = read_frame(&mut stream)
            .await
            .map_err(|e| format!("the approver at {path} closed the connection: {e}"))?;
        Ok::<_, String>((stream, challenge))
    })
    .await;
    let (mut stream, challenge) = match connected {
        Err(_) => return AskOutcome::NoApprover(format!("the approver at {path} did not respond")),
        Ok(Err(why)) => return AskOutcome::NoApprover(why),
        Ok(Ok(pair)) => pair,
    };
    let nonce = match decode_challenge(&challenge) {
        Ok(n) => n,
        Err(e) => {
            return AskOutcome::NoApprover(format!("invalid challenge from the approver: {e}"));
        }
    };
    let payload = match serde_json::to_vec(request) {
        Ok(p) => p,
        Err(e) => return AskOutcome::NoApprover(format!("cannot encode the request: {e}")),
    };
    let token = config.token.as_bytes();
    let frame = encode_request(token, &nonce, clock.now_ms(), &payload);
    let request_mac: [u8; MAC_LEN] = match frame[frame.len() - MAC_LEN..].try_into() {
        Ok(m) => m,
        Err(_) => return AskOutcome::NoApprover("internal: frame without a MAC".into()),
    };
    if let Err(e) = write_frame(&mut stream, &frame).await {
        return AskOutcome::NoApprover(format!("the approver closed the connection: {e}"));
    }
    // An exec request's answer comes after the approver's run: the human's time plus
    // the run's own timeout (and a moment to kill and report a run that hit it).
    let wait = match request {
        Request::Prompt(_) => config.approval_timeout,
        Request::Exec(e) => config
            .approval_timeout
            .saturating_add(Duration::from_millis(e.timeout_ms))
            .saturating_add(EXEC_REPORT_GRACE),
    };
    // From here on the request has been delivered: an exec request may have run.
    let lost = |why: String| match request {
        Request::Exec(_) => AskOutcome::MayHaveRun(why),
        Request::Prompt(_) => AskOutcome::NoApprover(why),
    };
    let answer = match tokio::time::timeout(wait, read_frame(&mut stream)).await {
        Err(_) => return AskOutcome::TimedOut,
        Ok(Err(e)) => return lost(format!("the approver went away without answering: {e}")),
        Ok(Ok(frame)) => frame,
    };
    let payload = match decode_response(token, &nonce, &request_mac, clock.now_ms(), &answer) {
        Ok(p) => p,
        Err(e) => return lost(format!("rejected the approver's answer: {e}")),
    };
    let response: Response = match parse_strict(payload) {
        Ok(r) => r,
        Err(e) => return lost(format!("rejected the approver's answer: {e}")),
    };
    let prompt = request.prompt();
    if response.id != prompt.id || response.digest != prompt.digest {
        return lost("the approver answered a different request".into());
    }
    // The choice must be one the prompt offered, and only allow-always carries one.
    if response.allow_always_option.is_some() && response.answer != Answer::AllowAlways {
        return lost(
            "rejected the approver's answer: an allow-always option without allow-always".into(),
        );
    }
    if let Err(why) = prompt.allow_always_rules(response.allow_always_option) {
        return lost(format!("rejected the approver's answer: {why}"));
    }
    AskOutcome::Answered(response)
}
