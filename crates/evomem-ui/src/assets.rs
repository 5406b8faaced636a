//! The pages: one HTML file, two scripts and one style sheet, compiled into
//! the binary with `include_str!` (no build step, nothing fetched at run
//! time). The same files serve `evomem ui` (at `/`) and `evomem serve` (at
//! `/ui/`); the script finds its API relative to the page and asks
//! `api/mode` which of the two it is talking to.
//!
//! Both modes put [`security_headers`] on every answer: a
//! Content-Security-Policy ([`CSP`]) without `unsafe-inline` (the page has
//! no inline script, no inline handler and sets no `style` attribute; the
//! script builds every element with the DOM and styles through the CSSOM),
//! no framing, `nosniff` and `Referrer-Policy: no-referrer`.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// The page.
pub const INDEX_HTML: &str = include_str!("../assets/index.html");
/// The script (vanilla JS; draws its graphs as inline SVG).
pub const APP_JS: &str = include_str!("../assets/app.js");
/// The error collector the browser tests read (`window.__evomemErrors`),
/// loaded before the script.
pub const ERRORS_JS: &str = include_str!("../assets/errors.js");
/// The style sheet.
pub const APP_CSS: &str = include_str!("../assets/app.css");

async fn index() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        INDEX_HTML,
    )
}

async fn script() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        APP_JS,
    )
}

async fn errors_script() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        ERRORS_JS,
    )
}

async fn style() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        APP_CSS,
    )
}

/// The three files under `base` (`""` for `/`, `"/ui"` for `/ui/`), for
/// a router of any state.
pub fn routes<S: Clone + Send + Sync + 'static>(base: &str) -> Router<S> {
    Router::new()
        .route(&format!("{base}/"), get(index))
        .route(&format!("{base}/index.html"), get(index))
        .route(&format!("{base}/app.js"), get(script))
        .route(&format!("{base}/errors.js"), get(errors_script))
        .route(&format!("{base}/app.css"), get(style))
}

/// The Content-Security-Policy of the pages and their API: scripts, styles,
/// images and fetches from the server itself only (no `unsafe-inline`, so
/// no inline script, handler or style attribute runs), no plugin, no
/// `<base>`, no framing.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
                       img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
                       form-action 'self'; frame-ancestors 'none'";

/// Put the inspector's security headers on `resp` (module docs); both
/// modes' routers map every answer through it.
pub async fn security_headers(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    resp
}
