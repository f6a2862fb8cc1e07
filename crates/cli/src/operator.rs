//! The running gateway's operator socket (`gateway-operator.sock`, 0600, in the state
//! directory that the sandbox hides): how `warden approvals get|set --node N` reaches a
//! node's approvals file through the gateway, and how `warden runs` lists, reads and
//! kills the gateway's live runs. One JSON request and one JSON answer per connection,
//! from the gateway's own user only (checked on the socket's peer credentials). For
//! approvals, the node does the edit — compare-and-swap on the hash `get` returned, and
//! only if it tightens its file (`bridge::node`); the gateway only carries it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use bridge::Hub;
use bridge::message::{
    ApprovalsGetResult, ApprovalsSetResult, SYSTEM_APPROVALS_GET, SYSTEM_APPROVALS_SET,
};
use gateway::Gateway;
use gateway::operator::From;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;

use crate::host::HostFacts;

/// The socket's name in the state directory.
pub const SOCKET: &str = "gateway-operator.sock";
/// Largest request accepted (a whole approvals file).
const MAX_REQUEST: u64 = 1024 * 1024;
/// How long one remote call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

fn socket_path(facts: &HostFacts) -> PathBuf {
    facts.warden_home.join(SOCKET)
}

/// Serve operator requests for `hub` and `gateway` until the process ends.
pub fn serve(facts: &HostFacts, hub: Arc<Hub>, gateway: Arc<Gateway>) -> anyhow::Result<()> {
    let path = socket_path(facts);
    // A stale socket of an earlier gateway is replaced; nothing else may be there.
    if let Ok(meta) = std::fs::symlink_metadata(&path) {
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            bail!("{} exists and is not a socket; remove it", path.display());
        }
        std::fs::remove_file(&path)?;
    }
    let listener = tokio::net::UnixListener::bind(&path)
        .with_context(|| format!("cannot listen on {}", path.display()))?;
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    let uid = facts.uid;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let same_user = stream.peer_cred().map(|c| c.uid() == uid).unwrap_or(false);
            if !same_user {
                continue;
            }
            let hub = Arc::clone(&hub);
            let gateway = Arc::clone(&gateway);
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut line = String::new();
                let mut reader = BufReader::new(tokio::io::AsyncReadExt::take(read, MAX_REQUEST));
                let answer = match reader.read_line(&mut line).await {
                    Ok(_) => handle(&hub, &gateway, &line)
                        .await
                        .unwrap_or_else(|e| json!({"error": e})),
                    Err(e) => json!({"error": e.to_string()}),
                };
                let _ = write.write_all(format!("{answer}\n").as_bytes()).await;
            });
        }
    });
    Ok(())
}

async fn handle(hub: &Hub, gateway: &Gateway, line: &str) -> Result<Value, String> {
    let request: Value = serde_json::from_str(line).map_err(|e| format!("not a request: {e}"))?;
    if let Some(op) = request["op"]
        .as_str()
        .and_then(|op| op.strip_prefix("runs."))
    {
        return runs(gateway, op, &request).await.map(|v| json!({"ok": v}));
    }
    let node = request["node"].as_str().ok_or("no node named")?;
    let (command, params) = match request["op"].as_str() {
        Some("approvals.get") => (SYSTEM_APPROVALS_GET, json!({})),
        Some("approvals.set") => (
            SYSTEM_APPROVALS_SET,
            json!({"baseHash": request["baseHash"], "file": request["file"]}),
        ),
        other => return Err(format!("unknown operation {other:?}")),
    };
    let conn = hub.select(Some(node), None).map_err(|e| e.to_string())?;
    let never = CancellationToken::new();
    match tokio::time::timeout(
        CALL_TIMEOUT,
        conn.invoke(command, params, None, &never, Duration::ZERO),
    )
    .await
    {
        Ok(Ok(v)) => Ok(json!({"node": conn.id, "ok": v})),
        Ok(Err(e)) => Err(format!("node {}: {e}", conn.id)),
        Err(_) => Err(format!(
            "node {} did not answer within {}s",
            conn.id,
            CALL_TIMEOUT.as_secs()
        )),
    }
}

/// `runs.list`, `runs.read` (`run`, then `cursor` or `tail`, and `waitMs`), `runs.kill`
/// (`run`).
async fn runs(gateway: &Gateway, op: &str, request: &Value) -> Result<Value, String> {
    let run = || request["run"].as_str().ok_or("no run named");
    match op {
        "list" => Ok(gateway::operator::list(gateway)),
        "read" => {
            let wait = Duration::from_millis(request["waitMs"].as_u64().unwrap_or(0));
            let from = match request["tail"].as_u64() {
                Some(bytes) => From::Tail(bytes),
                None => From::Cursor(request["cursor"].as_u64().unwrap_or(0)),
            };
            gateway::operator::read(gateway, run()?, from, wait)
                .await
                .map_err(|e| e.to_string())
        }
        "kill" => gateway::operator::kill(gateway, run()?)
            .await
            .map_err(|e| e.to_string()),
        other => Err(format!("unknown operation \"runs.{other}\"")),
    }
}

fn call(facts: &HostFacts, request: Value) -> anyhow::Result<(String, Value)> {
    use std::io::{BufRead, Write};
    let path = socket_path(facts);
    let mut stream = std::os::unix::net::UnixStream::connect(&path).with_context(|| {
        format!(
            "no gateway is running with WARDEN_HOME={} ({} is not there): remote edits and `warden runs` go through `warden gateway run`",
            facts.warden_home.display(),
            path.display()
        )
    })?;
    stream.set_read_timeout(Some(CALL_TIMEOUT + Duration::from_secs(15)))?;
    stream.write_all(format!("{request}\n").as_bytes())?;
    let mut line = String::new();
    std::io::BufReader::new(stream).read_line(&mut line)?;
    let answer: Value = serde_json::from_str(&line).context("the gateway's answer is not JSON")?;
    if let Some(e) = answer["error"].as_str() {
        bail!("{e}");
    }
    Ok((
        answer["node"].as_str().unwrap_or_default().to_owned(),
        answer["ok"].clone(),
    ))
}

/// `warden approvals get --node NODE`: the node's file as text and as JSON.
pub fn remote_get(facts: &HostFacts, node: &str) -> anyhow::Result<(String, Value)> {
    let (id, ok) = call(facts, json!({"op": "approvals.get", "node": node}))?;
    let got: ApprovalsGetResult = serde_json::from_value(ok)?;
    let body = serde_json::to_string_pretty(&got.file)?;
    Ok((
        format!("# node {id}\n# hash: {}\n{body}\n", got.hash),
        json!({"node": id, "hash": got.hash, "file": got.file}),
    ))
}

/// `warden approvals set --node NODE --file FILE --base-hash HASH`: what the node did,
/// as text and as JSON.
pub fn remote_set(
    facts: &HostFacts,
    node: &str,
    file: &std::path::Path,
    base_hash: &str,
) -> anyhow::Result<(String, Value)> {
    let text = std::fs::read_to_string(facts.absolute(file))
        .with_context(|| format!("reading {}", file.display()))?;
    // `get` prints `#` lines before the document.
    let body: Vec<&str> = text
        .lines()
        .skip_while(|l| l.trim_start().starts_with('#'))
        .collect();
    let doc: Value =
        serde_json::from_str(&body.join("\n")).context("not a JSON approvals document")?;
    let (id, ok) = call(
        facts,
        json!({"op": "approvals.set", "node": node, "baseHash": base_hash, "file": doc}),
    )?;
    let set: ApprovalsSetResult = serde_json::from_value(ok)?;
    let what = if set.written {
        "updated"
    } else {
        "nothing changed"
    };
    Ok((
        format!("node {id}: {what} (hash {})\n", set.hash),
        json!({"node": id, "written": set.written, "hash": set.hash}),
    ))
}

/// One `runs.*` request to the running gateway: its answer.
pub fn runs_call(facts: &HostFacts, request: Value) -> anyhow::Result<Value> {
    call(facts, request).map(|(_, ok)| ok)
}
