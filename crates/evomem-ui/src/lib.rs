//! # evomem-ui
//!
//! The web inspector: `evomem ui --run DIR [--run DIR2]` serves a run folder
//! (or two, side by side) on 127.0.0.1, and `evomem serve` serves the same
//! pages at `/ui` over a tenant's live memory.
//!
//! - [`assets`]: the static pages (HTML, vanilla JS, CSS) compiled in;
//! - [`api`]: the JSON API of run mode (`/api/...`), paged;
//! - [`runs`]: the run folders and what is built from them on demand;
//! - [`index`]: the op-log index (one streaming pass over the log, then
//!   offsets into a spilled plain copy), so that AtomRec's 2M-op log is
//!   served a page at a time;
//! - [`error`]: the API's errors (404 naming what is unknown, 400 for bad
//!   parameters), each answered as `{"error": "..."}`.

pub mod api;
pub mod assets;
pub mod error;
pub mod index;
pub mod runs;

pub use error::UiError;
pub use runs::Runs;

use axum::Router;
use std::sync::Arc;

/// The whole app of run mode: the pages at `/` and the API at `/api`, every
/// answer with the pages' security headers ([`assets::security_headers`]).
pub fn router(runs: Arc<Runs>) -> Router {
    assets::routes::<()>("")
        .merge(api::router(runs))
        .layer(axum::middleware::map_response(assets::security_headers))
}

/// Serve `app` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}
