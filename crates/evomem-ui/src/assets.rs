//! The pages: one HTML file, one script and one style sheet, compiled into
//! the binary with `include_str!` (no build step, nothing fetched at run
//! time). The same files serve `evomem ui` (at `/`) and `evomem serve` (at
//! `/ui/`); the script finds its API relative to the page and asks
//! `api/mode` which of the two it is talking to.

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

/// The page.
pub const INDEX_HTML: &str = include_str!("../assets/index.html");
/// The script (vanilla JS; draws its graphs as inline SVG).
pub const APP_JS: &str = include_str!("../assets/app.js");
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
        .route(&format!("{base}/app.css"), get(style))
}
