//! The web app: static assets and a JSON/binary API over an [`Index`], on 127.0.0.1
//! behind a random token.

use crate::{Error, Index, TileFields, CELL_BYTES};
use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

const INDEX_HTML: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const STYLE_CSS: &str = include_str!("../assets/style.css");

/// How to serve.
#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    /// Port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// The access token; `None` draws 128 random bits.
    pub token: Option<String>,
}

struct AppState {
    index: Index,
    token: String,
    files: HashSet<String>,
}

type Params = Query<HashMap<String, String>>;

fn random_token() -> Result<String, Error> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| Error::Io(format!("no randomness for the token: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Serves `index` until the process is interrupted. `ready` gets the URL (with
/// the token) once the socket listens.
pub fn serve(index: Index, opts: ServeOptions, ready: impl FnOnce(&str)) -> Result<(), Error> {
    let token = match opts.token {
        Some(t) => t,
        None => random_token()?,
    };
    let files = index.meta()["source"]
        .as_array()
        .map(|a| a.iter().filter_map(|r| r["file"].as_str().map(String::from)).collect())
        .unwrap_or_default();
    let state = Arc::new(AppState { index, token: token.clone(), files });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::Io(format!("cannot start the server runtime: {e}")))?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", opts.port))
            .await
            .map_err(|e| Error::Io(format!("cannot listen on 127.0.0.1:{}: {e}", opts.port)))?;
        let addr = listener.local_addr().map_err(|e| Error::Io(e.to_string()))?;
        let app = Router::new()
            .route("/", get(page))
            .route("/app.js", get(|| async { asset(APP_JS, "text/javascript") }))
            .route("/style.css", get(|| async { asset(STYLE_CSS, "text/css") }))
            .route("/api/meta", get(meta))
            .route("/api/tiles", get(tiles))
            .route("/api/flame", get(flame))
            .route("/api/range", get(range))
            .route("/api/source", get(source))
            .layer(middleware::from_fn_with_state(state.clone(), check_token))
            .with_state(state);
        ready(&format!("http://{addr}/?token={token}"));
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .map_err(|e| Error::Io(format!("server failed: {e}")))
    })
}

/// Every request carries `?token=`; anything else is 403.
async fn check_token(State(s): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let ok = req.uri().query().is_some_and(|q| {
        q.split('&').any(|kv| kv.strip_prefix("token=").is_some_and(|t| ct_eq(t, &s.token)))
    });
    if !ok {
        return (StatusCode::FORBIDDEN, "memlens view: missing or wrong token\n").into_response();
    }
    next.run(req).await
}

/// Compares without an early exit on the first differing byte.
fn ct_eq(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn asset(body: &'static str, ty: &'static str) -> Response {
    ([(header::CONTENT_TYPE, ty), (header::CACHE_CONTROL, "no-store")], body).into_response()
}

async fn page() -> Response {
    asset(INDEX_HTML, "text/html; charset=utf-8")
}

fn bad(msg: impl Into<String>) -> Response {
    (StatusCode::BAD_REQUEST, msg.into()).into_response()
}

fn num(p: &HashMap<String, String>, k: &str, default: u64) -> Result<u64, String> {
    match p.get(k) {
        None => Ok(default),
        Some(v) => v.parse().map_err(|_| format!("bad {k}: {v}")),
    }
}

async fn meta(State(s): State<Arc<AppState>>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], s.index.meta_json().to_vec()).into_response()
}

/// Binary tiles: `u32 buckets`, then per bucket `u32 bucket, u32 cells` and the
/// cells (see docs/viewer.md).
async fn tiles(State(s): State<Arc<AppState>>, Query(p): Params) -> Response {
    let go = || -> Result<Vec<u8>, String> {
        let level = num(&p, "level", 0)? as usize;
        let b0 = num(&p, "b0", 0)?;
        let b1 = num(&p, "b1", b0 + 1)?;
        if b1 < b0 || b1 - b0 > 16384 {
            return Err("at most 16384 buckets per request".into());
        }
        let by_addr = p.get("mode").is_some_and(|m| m == "addr");
        let r0 = num(&p, "r0", 0)? as u32;
        let r1 = num(&p, "r1", u32::MAX as u64)?.min(u32::MAX as u64) as u32;
        let fields = match p.get("fields").map(String::as_str) {
            None | Some("all") => None,
            Some("draw") => Some(TileFields::Draw),
            Some("detail") => Some(TileFields::Detail),
            Some(f) => return Err(format!("bad fields: {f} (all, draw or detail)")),
        };
        if let Some(f) = fields {
            return s.index.tiles_soa(level, b0, b1, by_addr, r0..r1, f).map_err(|e| e.to_string());
        }
        let t = s.index.tiles(level, b0, b1, by_addr, r0..r1).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        out.extend_from_slice(&(t.len() as u32).to_le_bytes());
        for (b, cells) in t {
            out.extend_from_slice(&(b as u32).to_le_bytes());
            out.extend_from_slice(&((cells.len() / CELL_BYTES) as u32).to_le_bytes());
            out.extend_from_slice(&cells);
        }
        Ok(out)
    };
    match go() {
        Ok(b) => {
            ([(header::CONTENT_TYPE, "application/octet-stream")], Body::from(b)).into_response()
        }
        Err(e) => bad(e),
    }
}

async fn flame(State(s): State<Arc<AppState>>, Query(p): Params) -> Response {
    let go = || -> Result<Value, String> {
        let t0 = num(&p, "t0", 0)?;
        let t1 = num(&p, "t1", u64::MAX)?;
        let min = num(&p, "min", 0)?;
        let spans = s.index.spans(t0, t1, min, 100_000).map_err(|e| e.to_string())?;
        Ok(Value::Array(
            spans.iter().map(|s| json!([s.start, s.end, s.func, s.thread, s.depth])).collect(),
        ))
    };
    match go() {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => bad(e),
    }
}

/// Metrics per code address in `t0..t1`: `[pc, loads, stores, bytes, shared, misses,
/// mem]` from the window sums (whole buckets of the finest level that answers in
/// ≤ 4 M records). Indexes without them: `[pc, loads, stores]` from the tiles of the
/// finest level that covers the range in at most 4096 buckets (approximate there:
/// coarser levels keep one code address per line and bucket).
async fn range(State(s): State<Arc<AppState>>, Query(p): Params) -> Response {
    let go = || -> Result<Value, String> {
        let t0 = num(&p, "t0", 0)?;
        let t1 = num(&p, "t1", u64::MAX)?;
        let ix = &s.index;
        // Exact per-bucket sums when the index has them (every column, any window).
        if let Some((level, pcs)) = ix.window(t0, t1, 4 << 20).map_err(|e| e.to_string())? {
            let bs = ix.bucket_size(level).unwrap_or(1);
            let rows: Vec<Value> = pcs
                .iter()
                .map(|(pc, w)| json!([pc, w.loads, w.stores, w.bytes, w.shared, w.misses, w.mem]))
                .collect();
            return Ok(json!({"level": level, "t0": t0 / bs * bs,
                "t1": t1.div_ceil(bs).saturating_mul(bs), "pcs": rows}));
        }
        let mut level = 0;
        while level + 1 < ix.levels() {
            let bs = ix.bucket_size(level).unwrap_or(1);
            if (t1.saturating_sub(t0)) / bs <= 4096 {
                break;
            }
            level += 1;
        }
        let bs = ix.bucket_size(level).unwrap_or(1);
        let nb = ix.meta()["levels"][level]["buckets"].as_u64().unwrap_or(0);
        let (b0, b1) = (t0 / bs, t1.div_ceil(bs).min(nb));
        let mut per_pc: HashMap<u32, (u64, u64)> = HashMap::new();
        let mut b = b0;
        while b < b1 {
            let e = (b + 4096).min(b1);
            let t = ix.tiles(level, b, e, false, 0..u32::MAX).map_err(|e| e.to_string())?;
            for (_, cells) in t {
                for c in cells.chunks_exact(CELL_BYTES) {
                    let loads = u16::from_le_bytes([c[20], c[21]]) as u64;
                    let stores = u16::from_le_bytes([c[22], c[23]]) as u64;
                    if loads + stores > 0 {
                        let pc = u32::from_le_bytes([c[8], c[9], c[10], c[11]]);
                        let v = per_pc.entry(pc).or_default();
                        v.0 += loads;
                        v.1 += stores;
                    }
                }
            }
            b = e;
        }
        Ok(
            json!({"level": level, "pcs": per_pc.into_iter().map(|(k, v)| json!([k, v.0, v.1])).collect::<Vec<_>>()}),
        )
    };
    match go() {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => bad(e),
    }
}

/// Source text of a file the debug information names (no other file is served).
async fn source(State(s): State<Arc<AppState>>, Query(p): Params) -> Response {
    let Some(f) = p.get("file") else { return bad("missing file") };
    if !s.files.contains(f) {
        return (StatusCode::NOT_FOUND, "not a source file of this trace").into_response();
    }
    match tokio::fs::read(f).await {
        Ok(b) => ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], b).into_response(),
        Err(e) => (StatusCode::NOT_FOUND, format!("cannot read {f}: {e}")).into_response(),
    }
}
