//! The web approver's routes: the login link, the page and its assets, the event stream
//! and the JSON endpoints. `auth::guard` has checked Host, Origin and (for changes) the
//! session and CSRF token before any of these runs; reads check the session here.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use approvals::ipc::protocol::Answer;
use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::stream::Stream;
use http::{HeaderMap, StatusCode, Uri, header};
use serde::Deserialize;
use serde_json::json;

use super::App;
use super::auth;
use super::console::{self, Edit, EditError, ExplainRequest};
use super::queue::AnswerError;

const INDEX: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// The page says this until the browser has a session.
const LOGGED_OUT: &str = "<!doctype html><meta charset=utf-8><title>Warden approver</title>\
<p>Not logged in. Open the one-time link that <code>warden approvals ui --web</code> printed \
when it started.</p>";

type Shared = State<Arc<App>>;

/// All routes, behind the access guard: the login link at `/login`, everything else
/// under the server's secret path (`Auth::prefix`).
pub fn router(app: Arc<App>) -> Router {
    let at = |path: &str| format!("{}{path}", app.auth.prefix());
    Router::new()
        .route("/login", get(login))
        .route(&at("/"), get(index))
        .route(
            &at("/assets/app.js"),
            get(|| asset(APP_JS, "text/javascript; charset=utf-8")),
        )
        .route(
            &at("/assets/app.css"),
            get(|| asset(APP_CSS, "text/css; charset=utf-8")),
        )
        .route(&at("/api/events"), get(events))
        .route(&at("/api/state"), get(state))
        .route(&at("/api/answer"), post(answer))
        .route(&at("/api/edit"), post(edit))
        .route(&at("/api/explain"), post(explain))
        .route(&at("/api/runs"), get(super::runs::list))
        .route(&at("/api/runs/tail"), post(super::runs::tail))
        .route(&at("/api/runs/kill"), post(super::runs::kill))
        .route(&at("/api/history"), post(super::history::list))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&app),
            auth::guard,
        ))
        .with_state(app)
}

async fn asset(body: &'static str, kind: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

pub(super) fn logged_out() -> Response {
    error(
        StatusCode::UNAUTHORIZED,
        "not logged in: open the link `warden approvals ui --web` printed",
    )
}

async fn login(State(app): Shared, uri: Uri) -> Response {
    let offered = uri
        .query()
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("token="))
        .unwrap_or("");
    match app.auth.login(offered) {
        Ok(session) => (
            StatusCode::SEE_OTHER,
            [
                (
                    header::SET_COOKIE,
                    auth::session_cookie(&session, app.auth.prefix()),
                ),
                // The link's secret leaves the address bar (and the history) at once.
                (header::LOCATION, format!("{}/", app.auth.prefix())),
            ],
        )
            .into_response(),
        Err(why) => (StatusCode::FORBIDDEN, why).into_response(),
    }
}

async fn index(State(app): Shared, headers: HeaderMap) -> Response {
    match app.auth.csrf_for(&headers) {
        Some(csrf) => Html(INDEX.replace("{{CSRF}}", &csrf)).into_response(),
        None => (StatusCode::UNAUTHORIZED, Html(LOGGED_OUT)).into_response(),
    }
}

/// Everything the page shows at once.
fn snapshot(app: &App) -> serde_json::Value {
    let (pending, recent) = app.queue.views();
    let files = app.files_state.borrow().clone();
    json!({
        "pending": pending,
        "recent": recent,
        "store": *app.store_state.borrow(),
        "config": files.config,
        "nodes": files.nodes,
        "socket": app
            .store
            .load()
            .map(|s| app.store.socket_path(&s.file).display().to_string())
            .unwrap_or_default(),
    })
}

async fn state(State(app): Shared, headers: HeaderMap) -> Response {
    if app.auth.csrf_for(&headers).is_none() {
        return logged_out();
    }
    let console = {
        let app = Arc::clone(&app);
        tokio::task::spawn_blocking(move || console::view(&app)).await
    };
    match console {
        Ok(console) => {
            let mut value = snapshot(&app);
            value["console"] = json!(console);
            Json(value).into_response()
        }
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// A `state` event whenever a request arrives, is answered, runs or is withdrawn, and
/// whenever `exec-approvals.json`, `config.toml` or the node registry changes. The first
/// comes at once.
async fn events(State(app): Shared, headers: HeaderMap) -> Response {
    if app.auth.csrf_for(&headers).is_none() {
        return logged_out();
    }
    let stream = event_stream(app);
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

fn event_stream(app: Arc<App>) -> impl Stream<Item = Result<Event, Infallible>> {
    let queue = app.queue.subscribe();
    let store = app.store_state.clone();
    let files = app.files_state.clone();
    let shutdown = app.shutdown.clone();
    futures_util::stream::unfold(
        (app, queue, store, files, shutdown, true),
        |(app, mut queue, mut store, mut files, mut shutdown, first)| async move {
            if !first {
                tokio::select! {
                    changed = queue.changed() => changed.ok()?,
                    changed = store.changed() => changed.ok()?,
                    changed = files.changed() => changed.ok()?,
                    _ = shutdown.changed() => return None,
                }
            }
            queue.borrow_and_update();
            store.borrow_and_update();
            files.borrow_and_update();
            let data = snapshot(&app).to_string();
            let event = Event::default().event("state").data(data);
            Some((Ok(event), (app, queue, store, files, shutdown, false)))
        },
    )
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerBody {
    key: u64,
    digest: String,
    answer: Answer,
    /// With allow-always: the index of the scope chosen among the prompt's options
    /// (absent: the preselected one), sent on as the protocol's `allowAlwaysOption`.
    #[serde(default, rename = "allowAlwaysOption")]
    allow_always_option: Option<usize>,
}

async fn answer(State(app): Shared, Json(body): Json<AnswerBody>) -> Response {
    match app.queue.answer(
        body.key,
        &body.digest,
        body.answer,
        body.allow_always_option,
    ) {
        Ok((answer, note)) => Json(json!({ "answer": answer, "note": note })).into_response(),
        Err(AnswerError::Gone) => error(
            StatusCode::GONE,
            "that request is no longer waiting (answered elsewhere, or its requester gave up)",
        ),
        Err(AnswerError::Digest) => error(
            StatusCode::CONFLICT,
            "that request is not the one this page showed; nothing was answered",
        ),
        Err(AnswerError::Running) => {
            error(StatusCode::CONFLICT, "that request was already answered")
        }
        Err(AnswerError::Option(why)) => error(
            StatusCode::BAD_REQUEST,
            format!("{why}; nothing was answered"),
        ),
    }
}

async fn edit(State(app): Shared, Json(edit): Json<Edit>) -> Response {
    let done = {
        let app = Arc::clone(&app);
        tokio::task::spawn_blocking(move || console::apply(&app, edit)).await
    };
    match done {
        Ok(Ok(hash)) => Json(json!({ "hash": hash })).into_response(),
        Ok(Err(EditError::Conflict(why))) => (
            StatusCode::CONFLICT,
            Json(json!({ "error": why, "conflict": true })),
        )
            .into_response(),
        Ok(Err(EditError::Invalid(why))) => error(StatusCode::BAD_REQUEST, why),
        Ok(Err(EditError::Failed(why))) => error(StatusCode::INTERNAL_SERVER_ERROR, why),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn explain(State(app): Shared, Json(request): Json<ExplainRequest>) -> Response {
    let done = {
        let app = Arc::clone(&app);
        tokio::task::spawn_blocking(move || console::explain(&app.facts, request)).await
    };
    match done {
        Ok(Ok(explained)) => Json(explained).into_response(),
        Ok(Err(why)) => error(StatusCode::BAD_REQUEST, why),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}
