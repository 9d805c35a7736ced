//! The web app: static assets and a JSON/binary API over an [`Index`], on 127.0.0.1
//! behind a random token.

use crate::guard::{asset, page, serve_app};
use crate::{Error, Index, TileFields, TileQuery, CELL_BYTES};
use axum::body::Body;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tokio::sync::Semaphore;

const INDEX_HTML: &str = include_str!("../assets/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const LANES_JS: &str = include_str!("../assets/lanes.js");
const CALLTREE_JS: &str = include_str!("../assets/calltree.js");
const HEAP_JS: &str = include_str!("../assets/heap.js");
const LAYOUT_JS: &str = include_str!("../assets/layout.js");
const NAV_JS: &str = include_str!("../assets/nav.js");
const STYLE_CSS: &str = include_str!("../assets/style.css");

/// Expensive requests (tiles, range sums, flame frames, source text) served at once;
/// the others wait. With [`MAX_ANSWER`] this bounds the server's memory under any
/// number of concurrent requests.
const HEAVY: usize = 2;
/// Largest tile answer, in bytes (cells × bytes per cell, before the row filter).
const MAX_ANSWER: u64 = 128 << 20;
/// Largest source file served.
const MAX_SOURCE: u64 = 16 << 20;
/// Answers go out in pieces of this size, so a slow reader holds at most a few.
const PIECE: usize = 64 << 10;

/// How to serve.
#[derive(Clone, Debug, Default)]
pub struct ServeOptions {
    /// Port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// The access token; `None` draws 128 random bits.
    pub token: Option<String>,
    /// The only files `/api/source` serves: the source files the trace's own debug
    /// information names, recomputed by the caller (the index's `meta.json` could
    /// be planted by anyone who can write beside the trace).
    pub sources: HashSet<String>,
}

struct AppState {
    index: Index,
    token: String,
    files: HashSet<String>,
    meta: Bytes,
    heavy: Arc<Semaphore>,
    /// The call trees of time ranges (computed from the trace on request).
    ranges: std::sync::Mutex<crate::rangetree::Ranges>,
}

pub(crate) type Params = Query<HashMap<String, String>>;

/// Serves `index` until the process is interrupted. `ready` gets the URL (with
/// the token) once the socket listens.
pub fn serve(index: Index, opts: ServeOptions, ready: impl FnOnce(&str)) -> Result<(), Error> {
    let token = crate::guard::token(opts.token)?;
    let state = Arc::new(AppState {
        meta: Bytes::copy_from_slice(index.meta_json()),
        index,
        token: token.clone(),
        files: opts.sources,
        heavy: Arc::new(Semaphore::new(HEAVY)),
        ranges: Default::default(),
    });
    let app = Router::new()
        .route("/", get(|State(s): State<Arc<AppState>>| async move { page(INDEX_HTML, &s.token) }))
        .route("/app.js", get(|| async { asset(APP_JS, "text/javascript") }))
        .route("/lanes.js", get(|| async { asset(LANES_JS, "text/javascript") }))
        .route("/calltree.js", get(|| async { asset(CALLTREE_JS, "text/javascript") }))
        .route("/heap.js", get(|| async { asset(HEAP_JS, "text/javascript") }))
        .route("/layout.js", get(|| async { asset(LAYOUT_JS, "text/javascript") }))
        .route("/nav.js", get(|| async { asset(NAV_JS, "text/javascript") }))
        .route("/style.css", get(|| async { asset(STYLE_CSS, "text/css") }))
        .route("/api/meta", get(meta))
        .route("/api/tiles", get(tiles))
        .route("/api/flame", get(flame))
        .route("/api/lanes", get(lanes))
        .route("/api/range", get(range))
        .route("/api/source", get(source))
        .route("/api/calltree", get(calltree))
        .route("/api/heap", get(heap_over_time))
        .with_state(state);
    serve_app(app, &token, opts.port, 2, true, ready)
}

/// Runs an expensive request: at most [`HEAVY`] at once, off the async workers, and
/// the answer keeps its permit until its last piece is handed to the connection, so
/// finished answers cannot pile up in memory behind slow readers.
pub(crate) async fn heavy<S: Send + Sync + 'static>(
    sem: &Arc<Semaphore>,
    s: &Arc<S>,
    ty: &'static str,
    work: impl FnOnce(&S) -> Result<Vec<Vec<u8>>, Failure> + Send + 'static,
) -> Response {
    let Ok(permit) = sem.clone().acquire_owned().await else {
        return (StatusCode::SERVICE_UNAVAILABLE, "memlens view: shutting down\n").into_response();
    };
    let st = s.clone();
    let parts = match tokio::task::spawn_blocking(move || work(&st)).await {
        Ok(Ok(p)) => p,
        Ok(Err(f)) => return f.into_response(),
        Err(_) => {
            return (StatusCode::INTERNAL_SERVER_ERROR, "memlens view: request failed\n")
                .into_response()
        }
    };
    let len: usize = parts.iter().map(Vec::len).sum();
    let pieces: Vec<Bytes> = parts
        .into_iter()
        .flat_map(|p| {
            let p = Bytes::from(p);
            (0..p.len()).step_by(PIECE).map(move |i| p.slice(i..(i + PIECE).min(p.len())))
        })
        .collect();
    let body = futures_util::stream::iter(pieces).map(move |p| {
        let _held = &permit;
        Ok::<_, std::convert::Infallible>(p)
    });
    (
        [(header::CONTENT_TYPE, ty), (header::CONTENT_LENGTH, &len.to_string())],
        Body::from_stream(body),
    )
        .into_response()
}

/// Why a request failed: its status and one line of text.
pub(crate) type Failure = (StatusCode, String);

pub(crate) fn bad_request(msg: String) -> Failure {
    (StatusCode::BAD_REQUEST, msg)
}

pub(crate) fn bad(msg: impl Into<String>) -> Response {
    (StatusCode::BAD_REQUEST, msg.into()).into_response()
}

pub(crate) fn num(p: &HashMap<String, String>, k: &str, default: u64) -> Result<u64, String> {
    match p.get(k) {
        None => Ok(default),
        Some(v) => v.parse().map_err(|_| format!("bad {k}: {v}")),
    }
}

async fn meta(State(s): State<Arc<AppState>>) -> Response {
    // One shared copy: concurrent requests do not each clone the metadata.
    ([(header::CONTENT_TYPE, "application/json")], Body::from(s.meta.clone())).into_response()
}

/// Binary tiles: `u32 buckets`, then per bucket `u32 bucket, u32 cells` and the
/// cells (see docs/viewer.md).
async fn tiles(State(s): State<Arc<AppState>>, Query(p): Params) -> Response {
    let go = move |s: &AppState| -> Result<Vec<Vec<u8>>, String> {
        let level = num(&p, "level", 0)? as usize;
        let b0 = num(&p, "b0", 0)?;
        let b1 = num(&p, "b1", b0.saturating_add(1))?;
        if b1 < b0 || b1 - b0 > 16384 {
            return Err("at most 16384 buckets per request".into());
        }
        let by_addr = p.get("mode").is_some_and(|m| m == "addr");
        let r0 = num(&p, "r0", 0)?.min(u32::MAX as u64) as u32;
        let r1 = num(&p, "r1", u32::MAX as u64)?.min(u32::MAX as u64) as u32;
        let fields = match p.get("fields").map(String::as_str) {
            None | Some("all") => None,
            Some("draw") => Some(TileFields::Draw),
            Some("detail") => Some(TileFields::Detail),
            Some(f) => return Err(format!("bad fields: {f} (all, draw or detail)")),
        };
        let per_cell = match fields {
            None => CELL_BYTES as u64,
            Some(TileFields::Draw) => 11,
            Some(TileFields::Detail) => 22,
        };
        let cells = s.index.cell_count(level, b0, b1).map_err(|e| e.to_string())?;
        if cells.saturating_mul(per_cell) > MAX_ANSWER {
            return Err(format!(
                "{cells} cells is too many for one request (at most {} MiB): ask for fewer buckets",
                MAX_ANSWER >> 20
            ));
        }
        let q = TileQuery { level, buckets: b0..b1, by_address: by_addr, rows: r0..r1 };
        if let Some(f) = fields {
            return s.index.tiles_soa_parts(&q, f).map_err(|e| e.to_string());
        }
        let t = s.index.tiles(&q).map_err(|e| e.to_string())?;
        let mut parts = Vec::with_capacity(t.len() * 2 + 1);
        parts.push((t.len() as u32).to_le_bytes().to_vec());
        for (b, cells) in t {
            let mut h = (b as u32).to_le_bytes().to_vec();
            h.extend_from_slice(&((cells.len() / CELL_BYTES) as u32).to_le_bytes());
            parts.push(h);
            parts.push(cells);
        }
        Ok(parts)
    };
    heavy(&s.heavy, &s, "application/octet-stream", move |s| go(s).map_err(bad_request)).await
}

async fn flame(State(s): State<Arc<AppState>>, Query(p): Params) -> Response {
    let go = move |s: &AppState| -> Result<Value, String> {
        let t0 = num(&p, "t0", 0)?;
        let t1 = num(&p, "t1", u64::MAX)?;
        let min = num(&p, "min", 0)?;
        let spans = s.index.spans(t0, t1, min, 100_000).map_err(|e| e.to_string())?;
        Ok(Value::Array(
            spans.iter().map(|s| json!([s.start, s.end, s.func, s.thread, s.depth])).collect(),
        ))
    };
    heavy(&s.heavy, &s, "application/json", move |s| {
        Ok(vec![json_bytes(&go(s).map_err(bad_request)?)])
    })
    .await
}

/// The wall-clock lanes: stamps of every thread in `t0..t1` (ns), about `n` each.
async fn lanes(State(s): State<Arc<AppState>>, Query(p): Params) -> Response {
    let go = move |s: &AppState| -> Result<Value, String> {
        let t0 = num(&p, "t0", 0)?;
        let t1 = num(&p, "t1", u64::MAX)?;
        let n = num(&p, "n", 2048)?;
        Ok(s.index.lanes(t0, t1, n.min(1 << 16) as usize))
    };
    heavy(&s.heavy, &s, "application/json", move |s| {
        Ok(vec![json_bytes(&go(s).map_err(bad_request)?)])
    })
    .await
}

/// The call tree: `view=top&node=N` (node N and its children), `view=bottom&path=F,G`
/// (the inverted tree under function F called by G ...) or `view=function&function=F`
/// (F with its callers and callees). Function ids index the answer's names. With
/// `x0` and `x1`: the tree of the merged operations `x0..x1` only (node ids are
/// that tree's; see [`crate::rangetree`]).
async fn calltree(State(s): State<Arc<AppState>>, Query(p): Params) -> Response {
    let go = move |s: &AppState| -> Result<Value, String> {
        let mut ranged: Option<Arc<crate::profile::Profile>> = None;
        let mut range = None;
        let prof = if p.contains_key("x0") || p.contains_key("x1") {
            let ops = s.index.meta()["ops"].as_u64().unwrap_or(0);
            let (x0, x1) = (num(&p, "x0", 0)?, num(&p, "x1", ops)?.min(ops));
            if x0 >= x1 {
                return Err(format!(
                    "empty range: x0 {x0} ≥ x1 {x1} (the run has {ops} operations)"
                ));
            }
            let mut r = s.ranges.lock().map_err(|_| "a range request failed".to_string())?;
            range = Some([x0, x1]);
            &**ranged.insert(r.profile(&s.index, x0, x1)?)
        } else {
            s.index.profile()
        };
        let mut v = match p.get("view").map_or("top", String::as_str) {
            "top" => prof.top_down(num(&p, "node", 0)?.min(u32::MAX as u64) as u32),
            "bottom" => {
                let path = p.get("path").map_or("", String::as_str);
                let path: Result<Vec<u64>, _> =
                    path.split(',').filter(|x| !x.is_empty()).map(str::parse).collect();
                let path = path.map_err(|_| format!("bad path: {}", p["path"]))?;
                if path.len() > 256 {
                    return Err("at most 256 functions in a path".into());
                }
                Ok(prof.bottom_up(&path))
            }
            "function" => prof.function(num(&p, "function", 0)?),
            v => Err(format!("bad view: {v} (top, bottom or function)")),
        }?;
        if let Some(r) = range {
            v["range"] = json!(r);
        }
        Ok(v)
    };
    heavy(&s.heavy, &s, "application/json", move |s| {
        Ok(vec![json_bytes(&go(s).map_err(bad_request)?)])
    })
    .await
}

/// The heap over time in `n` bins of `x0..x1` (or of the merged operations
/// `op0..op1` mapped to the axis): `axis=time` (ns, when the trace has stamps) or
/// `order` (merged memory operations); with the whole run's peak, the sites live at
/// it and the sites live at exit (`analyze heap`'s `at_peak` and `leaks`).
async fn heap_over_time(State(s): State<Arc<AppState>>, Query(p): Params) -> Response {
    let go = move |s: &AppState| -> Result<Value, String> {
        let meta = s.index.meta();
        let time = match p.get("axis").map_or("order", String::as_str) {
            "time" if s.index.clock().is_empty() => {
                return Err("this trace has no time stamps: use axis=order".into())
            }
            "time" => true,
            "order" => false,
            a => return Err(format!("bad axis: {a} (time or order)")),
        };
        let (lo, hi) = if time {
            (meta["time"]["t0"].as_u64().unwrap_or(0), meta["time"]["t1"].as_u64().unwrap_or(1))
        } else {
            (0, meta["ops"].as_u64().unwrap_or(0).max(1))
        };
        let (mut x0, mut x1) = (num(&p, "x0", lo)?, num(&p, "x1", hi)?);
        // `op0`, `op1`: the range as merged operations (the page's selection), mapped
        // to the axis
        if p.contains_key("op0") || p.contains_key("op1") {
            let (o0, o1) = (num(&p, "op0", 0)?, num(&p, "op1", u64::MAX)?);
            if o0 >= o1 {
                return Err(format!("empty range: op0 {o0} ≥ op1 {o1}"));
            }
            let ops = meta["ops"].as_u64().unwrap_or(0).max(1);
            let (o0, o1) = (o0.min(ops), o1.min(ops));
            (x0, x1) = if time {
                let c = s.index.clock();
                (crate::profile::op_to_ns(c, o0), crate::profile::op_to_ns(c, o1))
            } else {
                (o0, o1)
            };
        }
        let n = num(&p, "n", 512)?.min(4096) as usize;
        let mut v = s.index.profile().heap(time.then(|| s.index.clock()), x0, x1, n);
        let h = &meta["tables"]["heap"];
        v["summary"] = h["summary"][0].clone();
        v["at_peak"] = h["at_peak"].clone();
        v["leaks"] = h["leaks"].clone();
        Ok(v)
    };
    heavy(&s.heavy, &s, "application/json", move |s| {
        Ok(vec![json_bytes(&go(s).map_err(bad_request)?)])
    })
    .await
}

pub(crate) fn json_bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

/// Metrics per code address in `t0..t1`: `[pc, loads, stores, bytes, shared, misses,
/// mem]` from the window sums (whole buckets of the finest level that answers in
/// ≤ 4 M records). Indexes without them: `[pc, loads, stores]` from the tiles of the
/// finest level that covers the range in at most 4096 buckets (approximate there:
/// coarser levels keep one code address per line and bucket).
async fn range(State(s): State<Arc<AppState>>, Query(p): Params) -> Response {
    let go = move |s: &AppState| -> Result<Value, String> {
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
        let (b0, b1) = (t0 / bs, t1.div_ceil(bs));
        let mut per_pc: HashMap<u32, (u64, u64)> = HashMap::new();
        // Cell by cell from the file: memory stays flat whatever the range.
        ix.for_each_cell(level, b0, b1, false, |_, c| {
            let loads = u16::from_le_bytes([c[20], c[21]]) as u64;
            let stores = u16::from_le_bytes([c[22], c[23]]) as u64;
            if loads + stores > 0 {
                let pc = u32::from_le_bytes([c[8], c[9], c[10], c[11]]);
                let v = per_pc.entry(pc).or_default();
                v.0 += loads;
                v.1 += stores;
            }
        })
        .map_err(|e| e.to_string())?;
        Ok(
            json!({"level": level, "pcs": per_pc.into_iter().map(|(k, v)| json!([k, v.0, v.1])).collect::<Vec<_>>()}),
        )
    };
    heavy(&s.heavy, &s, "application/json", move |s| {
        Ok(vec![json_bytes(&go(s).map_err(bad_request)?)])
    })
    .await
}

/// Source text of a file the trace's debug information names (no other file is
/// served; only regular files, at most [`MAX_SOURCE`] bytes).
async fn source(State(s): State<Arc<AppState>>, Query(p): Params) -> Response {
    let Some(f) = p.get("file").cloned() else { return bad("missing file") };
    if !s.files.contains(&f) {
        return (StatusCode::NOT_FOUND, "not a source file of this trace").into_response();
    }
    heavy(&s.heavy, &s, "text/plain; charset=utf-8", move |_| read_source(&f)).await
}

/// The text of the source file `f` (already checked against the trace's DWARF):
/// only a regular file of at most [`MAX_SOURCE`] bytes.
pub(crate) fn read_source(f: &str) -> Result<Vec<Vec<u8>>, Failure> {
    let not_found = |why: String| (StatusCode::NOT_FOUND, why);
    // stat first: opening a FIFO named like a source file would block.
    let md = std::fs::metadata(f).map_err(|e| not_found(format!("cannot read {f}: {e}")))?;
    if !md.is_file() {
        return Err(not_found(format!("{f} is not a regular file")));
    }
    let file = std::fs::File::open(f).map_err(|e| not_found(format!("cannot read {f}: {e}")))?;
    let md = file.metadata().map_err(|e| not_found(format!("cannot read {f}: {e}")))?;
    if !md.is_file() {
        return Err(not_found(format!("{f} is not a regular file")));
    }
    if md.len() > MAX_SOURCE {
        return Err(not_found(format!("{f} is larger than {} MiB", MAX_SOURCE >> 20)));
    }
    let mut b = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_SOURCE), &mut b)
        .map_err(|e| not_found(format!("cannot read {f}: {e}")))?;
    Ok(vec![b])
}
