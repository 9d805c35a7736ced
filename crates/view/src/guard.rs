//! The rules every memlens web server follows (`memlens view` and `memlens live`'s
//! GUI): 127.0.0.1 only, a random token on every request, `Host`/`Origin` checked
//! against DNS rebinding, and a strict Content-Security-Policy (docs/security.md).

use crate::Error;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::sync::Arc;

/// Sent with every answer: no script but ours (no inline script, no eval), no
/// connection elsewhere, no framing, no type sniffing, no referrer.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
    connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

/// The token and port a server checks requests against.
pub(crate) struct Guard {
    token: String,
    port: u16,
}

/// The given token, or 128 random bits in hex. It goes into HTML: only hex digits may.
pub(crate) fn token(given: Option<String>) -> Result<String, Error> {
    let token = match given {
        Some(t) => t,
        None => {
            let mut b = [0u8; 16];
            getrandom::fill(&mut b)
                .map_err(|e| Error::Io(format!("no randomness for the token: {e}")))?;
            b.iter().map(|x| format!("{x:02x}")).collect()
        }
    };
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::Config("the token must be hex digits".into()));
    }
    Ok(token)
}

impl Guard {
    pub(crate) fn new(token: String, port: u16) -> Arc<Guard> {
        Arc::new(Guard { token, port })
    }

    /// `app` behind the token and Host/Origin checks, every answer with the security
    /// headers.
    pub(crate) fn protect(self: Arc<Guard>, app: Router) -> Router {
        app.layer(middleware::from_fn_with_state(self.clone(), check_token))
            .layer(middleware::from_fn_with_state(self, check_host))
            .layer(middleware::map_response(secure_headers))
    }
}

async fn secure_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    r
}

/// `Host` (and `Origin`, when sent) must name this server as 127.0.0.1:PORT or
/// localhost:PORT: a page whose DNS name was rebound to 127.0.0.1 sends its own.
async fn check_host(State(s): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    let ok_host = |h: &str| {
        let (name, port) = match h.rsplit_once(':') {
            Some((n, p)) => (n, p.parse::<u16>().ok()),
            None => (h, Some(80)),
        };
        port == Some(s.port) && (name == "127.0.0.1" || name.eq_ignore_ascii_case("localhost"))
    };
    let hd = req.headers();
    let host = hd.get(header::HOST).and_then(|v| v.to_str().ok());
    let host_ok =
        host.is_some_and(ok_host) && req.uri().authority().is_none_or(|a| ok_host(a.as_str()));
    let origin_ok = hd
        .get_all(header::ORIGIN)
        .iter()
        .all(|o| o.to_str().ok().and_then(|o| o.strip_prefix("http://")).is_some_and(ok_host));
    if !host_ok || !origin_ok {
        return (
            StatusCode::FORBIDDEN,
            "memlens: wrong Host or Origin (open the URL memlens printed)\n",
        )
            .into_response();
    }
    next.run(req).await
}

/// Every request carries `?token=`; anything else is 403.
async fn check_token(State(s): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    let ok = req.uri().query().is_some_and(|q| {
        q.split('&').any(|kv| kv.strip_prefix("token=").is_some_and(|t| ct_eq(t, &s.token)))
    });
    if !ok {
        return (StatusCode::FORBIDDEN, "memlens: missing or wrong token\n").into_response();
    }
    next.run(req).await
}

/// Compares without an early exit on the first differing byte.
fn ct_eq(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A static asset, never cached.
/// The helpers every page's script shares, served at `/common.js` by every server.
const COMMON_JS: &str = include_str!("../assets/common.js");

pub(crate) fn asset(body: &'static str, ty: &'static str) -> Response {
    ([(header::CONTENT_TYPE, ty), (header::CACHE_CONTROL, "no-store")], body).into_response()
}

/// A page with the token in its asset URLs (hex digits, checked at start: no inline
/// script is needed to pass it on), never cached.
pub(crate) fn page(html: &'static str, token: &str) -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-store")],
        html.replace("__TOKEN__", token),
    )
        .into_response()
}

/// Serves `app` behind the guard on 127.0.0.1:`port` (0: any free port), on a runtime
/// of `workers` threads. `ready` gets the URL (with the token) once the socket
/// listens. With `ctrl_c`, Ctrl-C ends it gracefully; else it runs until the process ends.
pub(crate) fn serve_app(
    app: Router,
    token: &str,
    port: u16,
    workers: usize,
    ctrl_c: bool,
    ready: impl FnOnce(&str),
) -> Result<(), Error> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .map_err(|e| Error::Io(format!("cannot start the server runtime: {e}")))?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .map_err(|e| Error::Io(format!("cannot listen on 127.0.0.1:{port}: {e}")))?;
        let addr = listener.local_addr().map_err(|e| Error::Io(e.to_string()))?;
        // common.js: what every page's script shares (token, requests, formats).
        let app = app.route("/common.js", get(|| async { asset(COMMON_JS, "text/javascript") }));
        let app = Guard::new(token.to_string(), addr.port()).protect(app);
        ready(&format!("http://{addr}/?token={token}"));
        let server = axum::serve(listener, app);
        let done = if ctrl_c {
            server
                .with_graceful_shutdown(async {
                    let _ = tokio::signal::ctrl_c().await;
                })
                .await
        } else {
            server.await
        };
        done.map_err(|e| Error::Io(format!("server failed: {e}")))
    })
}
