//! `warden nodes list|approve|reject|revoke|add|remove`: the gateway operator's view of
//! its nodes (`nodes.json`) — pairing requests to approve or reject, tokens to revoke,
//! stdio nodes (reached by a command) to add — and, while `warden gateway run` is up,
//! which are connected (`nodes-live.json`, which the gateway keeps current).

use approvals::{Clock, SystemClock};
use bridge::NodeState;

use crate::exit;
use crate::host::HostFacts;

/// Where a running gateway says which nodes are connected.
pub const LIVE_FILE: &str = "nodes-live.json";
/// A live file older than this is from a gateway that is not running.
const LIVE_FRESH_MS: u64 = 5_000;

/// `warden nodes ...`
#[derive(Debug, clap::Subcommand)]
pub enum NodesCommand {
    /// List nodes: pairing requests, paired, rejected and revoked nodes, and who is connected.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Approve a node's pending pairing request: give the code the node shows
    /// (`--code`), or type it when asked on a terminal.
    Approve {
        /// The node id.
        id: String,
        /// The code the node printed when it asked (e.g. 7KQ2-M9XD-4RTW-0BHN).
        #[arg(long)]
        code: Option<String>,
    },
    /// Reject a node's pending pairing request (the one with `--code`, or all of them).
    Reject {
        /// The node id.
        id: String,
        /// Only the request with this code.
        #[arg(long)]
        code: Option<String>,
    },
    /// Revoke a node's token: it is disconnected at once and gets nothing until re-paired.
    Revoke {
        /// The node id.
        id: String,
    },
    /// Add a node the gateway reaches by running a command whose stdio carries the Bridge
    /// (`-- ssh HOST warden node stdio`); prints the token to give the node
    /// (`warden node pair --stdio --id ID` reads it from stdin).
    Add {
        /// The node id.
        id: String,
        /// Its display name.
        #[arg(long)]
        name: Option<String>,
        /// The command (after `--`).
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Forget a node entirely.
    Remove {
        /// The node id.
        id: String,
    },
}

/// Run `warden nodes ...`.
pub fn run(command: NodesCommand) -> i32 {
    exit::or_report(run_inner(command))
}

fn run_inner(command: NodesCommand) -> anyhow::Result<i32> {
    let facts = HostFacts::read()?;
    let registry = facts.node_registry();
    let now = SystemClock.now_ms();
    match command {
        NodesCommand::List { json } => list(&facts, &registry, json, now),
        NodesCommand::Approve { id, code } => {
            let code = match code {
                Some(code) => code,
                None => ask_for_code(&registry, &id, now)?,
            };
            let entry = registry.approve(&id, &code, now)?;
            facts.record_policy(
                "nodes.json",
                format!(
                    "node {id} approved (token fingerprint {})",
                    entry.token_fingerprint().unwrap_or_default()
                ),
            );
            let request = entry.request.as_ref();
            outln!(
                "approved node {id:?} ({}); its token was agreed without crossing the wire (fingerprint {})",
                request.map(bridge::requests::describe).unwrap_or_default(),
                entry.token_fingerprint().unwrap_or_default()
            );
            Ok(0)
        }
        NodesCommand::Reject { id, code } => {
            let n = registry.reject(&id, code.as_deref(), now)?;
            facts.record_policy(
                "nodes.json",
                format!("{n} pairing request(s) of node {id} rejected"),
            );
            outln!(
                "rejected {n} pairing request{} of node {id:?}",
                if n == 1 { "" } else { "s" }
            );
            Ok(0)
        }
        NodesCommand::Revoke { id } => {
            registry.revoke(&id, now)?;
            facts.record_policy("nodes.json", format!("node {id} revoked"));
            outln!("revoked node {id:?}: its token no longer works and a running gateway drops it");
            Ok(0)
        }
        NodesCommand::Add { id, name, command } => {
            let token = registry.add_stdio(&id, name.as_deref(), command.clone(), now)?;
            facts.record_policy(
                "nodes.json",
                format!("stdio node {id} added (reached by `{}`)", command.join(" ")),
            );
            eprintln!(
                "added stdio node {id:?} (`{}`); give it this token: on the node run `warden node pair --stdio --id {id}` and paste it (or pipe it in)",
                command.join(" ")
            );
            outln!("{token}");
            Ok(0)
        }
        NodesCommand::Remove { id } => {
            registry.remove(&id)?;
            facts.record_policy("nodes.json", format!("node {id} removed"));
            outln!("removed node {id:?}");
            Ok(0)
        }
    }
}

/// The code of `id`'s waiting request, typed by the operator at a terminal after seeing
/// where the request came from. Without a terminal the code must be given.
fn ask_for_code(registry: &bridge::Registry, id: &str, now: u64) -> anyhow::Result<String> {
    use std::io::{BufRead as _, IsTerminal as _, Write as _};
    let waiting = registry.waiting(id, now)?;
    if waiting.is_empty() || !std::io::stdin().is_terminal() {
        // The registry says why (no request, already approved, expired), or this does.
        anyhow::ensure!(
            waiting.is_empty(),
            "give the code node {id:?} shows: `warden nodes approve {id} --code CODE` (waiting: {})",
            waiting
                .iter()
                .map(bridge::requests::describe)
                .collect::<Vec<_>>()
                .join("; ")
        );
        return Ok(String::new());
    }
    for r in &waiting {
        eprintln!(
            "node {id:?}: pairing request {}",
            bridge::requests::describe(r)
        );
    }
    eprint!("type the code the node shows to approve it (nothing to cancel): ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let typed = line.trim().to_owned();
    anyhow::ensure!(!typed.is_empty(), "nothing approved");
    Ok(typed)
}

/// One line of text, whatever a library's error carried: line breaks and runs of
/// blanks made single spaces, links to documentation left out, at most 400 characters.
fn one_line(text: &str) -> String {
    let words: Vec<&str> = text
        .split_whitespace()
        .filter(|w| !w.contains("://"))
        .collect();
    let mut line = words.join(" ");
    if line.chars().count() > 400 {
        line = line.chars().take(399).collect::<String>() + "…";
    }
    line
}

fn list(
    facts: &HostFacts,
    registry: &bridge::Registry,
    json: bool,
    now: u64,
) -> anyhow::Result<i32> {
    let entries = registry.list()?;
    let live: Option<serde_json::Value> =
        std::fs::read_to_string(facts.warden_home.join(LIVE_FILE))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .filter(|v: &serde_json::Value| {
                v["writtenAt"]
                    .as_u64()
                    .is_some_and(|t| now.saturating_sub(t) < LIVE_FRESH_MS)
            });
    let live_of = |id: &str| {
        live.as_ref()
            .and_then(|l| l["nodes"].as_array())
            .and_then(|nodes| nodes.iter().find(|n| n["id"] == id).cloned())
    };
    let rows: Vec<serde_json::Value> = entries
        .iter()
        .map(|e| {
            let l = live_of(&e.id);
            serde_json::json!({
                "id": e.id,
                "displayName": e.display_name,
                "state": e.state,
                "transport": e.transport,
                "command": e.command,
                "tokenFingerprint": e.token_fingerprint(),
                "requests": e.pending.iter().filter(|r| r.expires_at > now).map(|r| serde_json::json!({
                    "code": r.code, "remote": r.remote, "requestedAt": r.requested_at,
                    "expiresAt": r.expires_at, "attempts": r.attempts,
                })).collect::<Vec<_>>(),
                "connected": l.as_ref().map(|l| l["connected"].as_bool() == Some(true)),
                "remote": l.as_ref().and_then(|l| l["remote"].as_str().map(str::to_owned)),
                "capabilities": l.as_ref().map(|l| l["capabilities"].clone()),
                "connectedAt": l.as_ref().and_then(|l| l["connectedAt"].as_u64()),
                "lastError": l.as_ref().and_then(|l| l["lastError"].as_str().map(one_line)),
            })
        })
        .collect();
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({"gatewayRunning": live.is_some(), "nodes": rows})
            )?
        );
        return Ok(0);
    }
    if rows.is_empty() {
        outln!(
            "no nodes (a node asks with `warden node pair --gateway URL`; `warden nodes add ID -- COMMAND` adds a stdio node)"
        );
        return Ok(0);
    }
    for (e, row) in entries.iter().zip(&rows) {
        let requests: Vec<String> = e
            .pending
            .iter()
            .filter(|r| r.expires_at > now)
            .map(bridge::requests::describe)
            .collect();
        let ambiguous = if requests.len() > 1 {
            " — AMBIGUOUS: reject the ones the node did not make"
        } else {
            ""
        };
        let state = match (e.state, requests.is_empty()) {
            (NodeState::Approved, false) => format!(
                "approved, re-pair pending ({}){ambiguous}",
                requests.join("; ")
            ),
            (NodeState::Pending, false) => {
                format!("PENDING {}{ambiguous}", requests.join("; "))
            }
            (NodeState::Pending, true) => "pending (expired)".to_owned(),
            (s, _) => s.to_string(),
        };
        let link = match (row["connected"].as_bool(), row["lastError"].as_str()) {
            (Some(true), _) => format!(
                "connected from {}",
                row["remote"].as_str().unwrap_or("stdio")
            ),
            (Some(false), Some(err)) => format!("not connected: {err}"),
            (Some(false), None) => "not connected".to_owned(),
            (None, _) => "gateway not running".to_owned(),
        };
        outln!(
            "{:<20} {:<18} {:<9} {:<40} {}",
            e.id,
            e.display_name.as_deref().unwrap_or("-"),
            e.transport,
            state,
            link
        );
    }
    Ok(0)
}
