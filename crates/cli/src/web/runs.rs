//! The console's live-runs panel: the runs a running `warden gateway run` holds (every
//! agent's, those that outlive their call), the tail of one's output, and kill — asked of
//! the gateway over its operator socket, as `warden runs` does (this page's process is
//! the approver, not the gateway). Every text a run produced is made printable first
//! (`gateway::operator::printable`): no escape sequence, control or bidirectional
//! override reaches the page, which also only ever shows it as text.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use super::App;
use crate::operator::runs_call;

/// The tail of a run's output the page shows, at most.
pub const TAIL_BYTES: u64 = 16 * 1024;

type Shared = State<Arc<App>>;

/// Ask the gateway, off the async threads (the socket call blocks): its answer, or a
/// 502 saying why there is none (no gateway running here, an unknown run…).
async fn ask(app: &Arc<App>, request: Value) -> Result<Value, Response> {
    let facts = app.facts.clone();
    match tokio::task::spawn_blocking(move || runs_call(&facts, request)).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(why)) => Err((
            StatusCode::BAD_GATEWAY,
            Json(json!({ "error": format!("{why:#}") })),
        )
            .into_response()),
        Err(e) => Err((
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({ "error": e.to_string() })),
        )
            .into_response()),
    }
}

/// A run as the page shows it: its texts printable.
fn shown(mut run: Value) -> Value {
    for field in ["command", "status"] {
        if let Some(text) = run[field].as_str() {
            run[field] = gateway::operator::printable(text).into();
        }
    }
    run
}

/// `GET api/runs`: every run the gateway holds.
pub async fn list(State(app): Shared, headers: HeaderMap) -> Response {
    if app.auth.csrf_for(&headers).is_none() {
        return super::api::logged_out();
    }
    match ask(&app, json!({"op": "runs.list"})).await {
        Ok(answer) => {
            let runs: Vec<Value> = answer["runs"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(shown)
                .collect();
            Json(json!({ "runs": runs })).into_response()
        }
        Err(response) => response,
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunBody {
    run: String,
}

/// `POST api/runs/tail`: the last [`TAIL_BYTES`] of a run's output, printable.
pub async fn tail(State(app): Shared, Json(body): Json<RunBody>) -> Response {
    let request = json!({"op": "runs.read", "run": body.run, "tail": TAIL_BYTES});
    match ask(&app, request).await {
        Ok(answer) => Json(json!({
            "run": shown(answer["run"].clone()),
            "output": gateway::operator::printable(answer["output"].as_str().unwrap_or_default()),
            "from": answer["from"],
            "cursor": answer["cursor"],
            "ended": answer["ended"],
        }))
        .into_response(),
        Err(response) => response,
    }
}

/// `POST api/runs/kill`: end a run (its question withdrawn, its tree killed).
pub async fn kill(State(app): Shared, Json(body): Json<RunBody>) -> Response {
    match ask(&app, json!({"op": "runs.kill", "run": body.run})).await {
        Ok(answer) => Json(json!({
            "run": shown(answer["run"].clone()),
            "killed": answer["killed"],
        }))
        .into_response(),
        Err(response) => response,
    }
}
