//! The console's History: the record (`$WARDEN_HOME/audit`, docs/audit.md) read with the
//! filters of `warden log` — agent, host, node, decision, kind, run, time — newest first,
//! and one run's records in full. It reads the files every process on this host writes,
//! so it shows the gateway's, `warden mcp`'s and `warden exec`'s records alike. Every text
//! a record holds (commands, rules, agents' words) is made printable before it is sent,
//! and the page only ever shows it as text.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use super::App;

/// Records one page shows unless asked for fewer.
pub const DEFAULT_SHOWN: usize = 200;
/// Records one page shows at most.
pub const MAX_SHOWN: usize = 2000;

type Shared = State<Arc<App>>;

/// The filters, as the page sends them (empty: no filter).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HistoryQuery {
    #[serde(default)]
    agent: String,
    #[serde(default)]
    host: String,
    #[serde(default)]
    node: String,
    #[serde(default)]
    decision: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    run: String,
    #[serde(default)]
    since: String,
    #[serde(default)]
    until: String,
    #[serde(default)]
    limit: Option<usize>,
}

/// `POST api/history`: the newest matching records (at most `limit`), how many matched,
/// and the filter as applied.
pub async fn list(
    State(app): Shared,
    headers: HeaderMap,
    Json(query): Json<HistoryQuery>,
) -> Response {
    if app.auth.csrf_for(&headers).is_none() {
        return super::api::logged_out();
    }
    let (filter, limit) = match filter_of(&query) {
        Ok(f) => f,
        Err(why) => {
            return (StatusCode::BAD_REQUEST, Json(json!({ "error": why }))).into_response();
        }
    };
    let facts = app.facts.clone();
    // Reading the files blocks (a million records take under a second).
    let read = tokio::task::spawn_blocking(move || {
        let fs = facts.fs();
        let dir = facts.audit_dir();
        let mut newest = std::collections::VecDeque::with_capacity(limit.min(4096));
        let mut matched = 0usize;
        for stored in audit::Records::read(fs.as_ref(), &dir, filter)? {
            let stored = stored?;
            matched += 1;
            if newest.len() == limit {
                newest.pop_front();
            }
            newest.push_back(stored.line);
        }
        Ok::<_, audit::AuditError>((newest, matched))
    })
    .await;
    match read {
        Ok(Ok((lines, matched))) => {
            let records: Vec<Value> = lines
                .into_iter()
                .rev()
                .filter_map(|line| serde_json::from_str::<Value>(&line).ok())
                .map(printable)
                .collect();
            Json(json!({ "records": records, "matched": matched, "limit": limit })).into_response()
        }
        Ok(Err(e)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({ "error": format!("the record cannot be read: {e}") })),
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({ "error": e.to_string() })),
        )
            .into_response(),
    }
}

/// The filter `query` asks for, and how many records to show; or why it is refused.
fn filter_of(query: &HistoryQuery) -> Result<(audit::Filter, usize), String> {
    let given = |s: &str| Some(s.trim().to_owned()).filter(|s| !s.is_empty());
    let decision = given(&query.decision);
    if let Some(d) = &decision
        && !["allow", "deny", "ask"].contains(&d.as_str())
    {
        return Err(format!("decision {d:?}: use allow, deny or ask"));
    }
    let host = given(&query.host);
    if let Some(h) = &host
        && !["sandbox", "gateway", "direct", "node"].contains(&h.as_str())
    {
        return Err(format!("host {h:?}: use sandbox, gateway, direct or node"));
    }
    let kind = match given(&query.kind) {
        None => None,
        Some(k) => Some(k.parse::<audit::Kind>().map_err(|e| format!("kind: {e}"))?),
    };
    let time = |name: &str, text: &str| match given(text) {
        None => Ok(None),
        Some(t) => audit::parse_time_bound(&t)
            .map(Some)
            .map_err(|e| format!("{name}: {e}")),
    };
    let limit = query.limit.unwrap_or(DEFAULT_SHOWN);
    if limit == 0 || limit > MAX_SHOWN {
        return Err(format!("limit {limit}: show 1 to {MAX_SHOWN} records"));
    }
    Ok((
        audit::Filter {
            agent: given(&query.agent),
            host,
            node: given(&query.node),
            decision,
            kind,
            run_id: given(&query.run),
            since: time("since", &query.since)?,
            until: time("until", &query.until)?,
        },
        limit,
    ))
}

/// `record` with every text made printable (no escape sequence, control or
/// bidirectional override reaches the page).
fn printable(record: Value) -> Value {
    match record {
        Value::String(s) => Value::String(gateway::operator::printable(&s)),
        Value::Array(items) => Value::Array(items.into_iter().map(printable).collect()),
        Value::Object(fields) => {
            Value::Object(fields.into_iter().map(|(k, v)| (k, printable(v))).collect())
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_checked_and_empty_ones_match_everything() {
        let (f, limit) = filter_of(&HistoryQuery::default()).unwrap();
        assert!(f.agent.is_none() && f.kind.is_none() && f.since.is_none());
        assert_eq!(limit, DEFAULT_SHOWN);
        let q = HistoryQuery {
            agent: " coder ".into(),
            decision: "deny".into(),
            kind: "run".into(),
            since: "1d".into(),
            ..Default::default()
        };
        let (f, _) = filter_of(&q).unwrap();
        assert_eq!(f.agent.as_deref(), Some("coder"));
        assert_eq!(f.kind, Some(audit::Kind::Run));
        assert!(f.since.is_some_and(|s| s.ends_with('Z')));
        for (bad, says) in [
            (
                HistoryQuery {
                    decision: "maybe".into(),
                    ..Default::default()
                },
                "decision",
            ),
            (
                HistoryQuery {
                    host: "elsewhere".into(),
                    ..Default::default()
                },
                "host",
            ),
            (
                HistoryQuery {
                    since: "yesterday-ish".into(),
                    ..Default::default()
                },
                "since",
            ),
            (
                HistoryQuery {
                    limit: Some(MAX_SHOWN + 1),
                    ..Default::default()
                },
                "limit",
            ),
        ] {
            let err = filter_of(&bad).unwrap_err();
            assert!(err.starts_with(says), "{err}");
        }
    }

    #[test]
    fn every_text_of_a_record_is_made_printable() {
        let shown = printable(
            json!({"command": "echo \u{1b}]0;pwned\u{7}x", "seq": 3, "nested": ["\u{202e}evil"]}),
        );
        let text = shown.to_string();
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{202e}'),
            "{text}"
        );
        assert_eq!(shown["seq"], 3);
    }
}
