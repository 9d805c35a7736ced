//! `memlens live`'s GUI: a live source browser served on 127.0.0.1 behind a token,
//! under the same rules as `memlens view` ([`crate::guard`]). The page knows nothing
//! of any probe module: it shows the actions and data columns each module registers
//! (`{"cmd":"modules"}`), and every request goes to the collector as it is.

use crate::guard::{asset, page, serve_app};
use crate::{Error, ServeOptions};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::sync::Arc;

const LIVE_HTML: &str = include_str!("../assets/live.html");
const LIVE_JS: &str = include_str!("../assets/live.js");
const LIVE_CSS: &str = include_str!("../assets/live.css");

/// Answers one collector request (`{"cmd": ...}`) with `{"ok": ..., "result"|"error"}`.
/// Called off the async workers: it may block for the time the collector takes.
pub type LiveBackend = Arc<dyn Fn(Value) -> Value + Send + Sync>;

/// The requests the page may make: reading state and source, inserting and removing
/// probes.
const ALLOWED: [&str; 6] = ["state", "modules", "files", "source", "add", "rm"];

struct Live {
    backend: LiveBackend,
    token: String,
}

/// Serves the live GUI until the process ends. `ready` gets the URL (with the token)
/// once the socket listens. Only `opts.port` and `opts.token` are used.
pub fn serve_live(
    backend: LiveBackend,
    opts: ServeOptions,
    ready: impl FnOnce(&str),
) -> Result<(), Error> {
    let token = crate::guard::token(opts.token)?;
    let state = Arc::new(Live { backend, token: token.clone() });
    let app = Router::new()
        .route("/", get(|State(s): State<Arc<Live>>| async move { page(LIVE_HTML, &s.token) }))
        .route("/live.js", get(|| async { asset(LIVE_JS, "text/javascript") }))
        .route("/live.css", get(|| async { asset(LIVE_CSS, "text/css") }))
        .route("/api/call", post(call))
        .with_state(state);
    serve_app(app, &token, opts.port, 1, false, ready)
}

async fn call(State(s): State<Arc<Live>>, Json(req): Json<Value>) -> Response {
    let cmd = req["cmd"].as_str().unwrap_or("");
    if !ALLOWED.contains(&cmd) {
        let msg = format!("unknown request `{cmd}` (one of {})", ALLOWED.join(", "));
        return (StatusCode::BAD_REQUEST, Json(json!({"ok": false, "error": msg}))).into_response();
    }
    let backend = s.backend.clone();
    match tokio::task::spawn_blocking(move || backend(req)).await {
        Ok(v) => ([(header::CACHE_CONTROL, "no-store")], Json(v)).into_response(),
        Err(_) => {
            (StatusCode::INTERNAL_SERVER_ERROR, "memlens live: request failed\n").into_response()
        }
    }
}
