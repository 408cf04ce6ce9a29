//! Serves the web UI that `scripts/build-ui` writes into the assets directory.
//!
//! The UI is one page routed in the browser, so every page path (`/`, `/sessions`,
//! `/locks/{id}`) answers with the same `index.html`; its script, wasm, stylesheet and icon come
//! from `/assets/…` (the brotli, zstd or gzip copy `scripts/build-ui` made once is served to a
//! client that accepts it; nothing is compressed per request). Files are
//! read per request, so rebuilding the UI needs no restart. When the directory holds no build,
//! page paths answer 503 with a page that says how to build it, rather than a blank page; the
//! API, `/metrics` and the probes do not depend on the UI.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tower_http::services::ServeDir;
use tower_http::set_header::SetResponseHeaderLayer;

/// The routes for the UI's pages and assets, reading from `dir`.
pub fn routes(dir: &Path) -> Router {
    let dir = Arc::new(dir.to_path_buf());
    // Assets keep their names across builds, so browsers must revalidate (ETag/Last-Modified
    // make that a cheap 304) instead of running an old wasm against a new server.
    let assets = tower::ServiceBuilder::new()
        .layer(SetResponseHeaderLayer::overriding(
            header::CACHE_CONTROL,
            HeaderValue::from_static("no-cache"),
        ))
        .service(
            ServeDir::new(dir.as_path())
                .precompressed_br()
                .precompressed_zstd()
                .precompressed_gzip(),
        );
    Router::new()
        .route("/", get(page))
        .route("/sessions", get(page))
        .route("/locks/{id}", get(page))
        .nest_service("/assets", assets)
        .with_state(dir)
}

async fn page(State(dir): State<Arc<PathBuf>>) -> Response {
    let index = dir.join("index.html");
    match tokio::fs::read_to_string(&index).await {
        Ok(html) => (
            [(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"))],
            Html(html),
        )
            .into_response(),
        Err(e) => {
            let shown = std::path::absolute(dir.as_path()).unwrap_or_else(|_| dir.to_path_buf());
            tracing::warn!(dir = %shown.display(), error = %e, "web UI not built");
            (StatusCode::SERVICE_UNAVAILABLE, Html(not_built(&shown))).into_response()
        }
    }
}

fn not_built(dir: &Path) -> String {
    let dir = escape(&dir.display().to_string());
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>lockscope: web UI not built</title></head><body style=\"font-family:sans-serif;\
         max-width:40em;margin:3em auto\"><h1>The lockscope web UI is not built</h1>\
         <p>lockscope looked for it in <code>{dir}</code> and found no <code>index.html</code>.</p>\
         <p>Build it with <code>scripts/build-ui</code> from the lockscope checkout, or point \
         <code>[ui] assets_dir</code> (or <code>LOCKSCOPE_UI_DIR</code>) at a built copy. \
         Nothing needs a restart.</p><p>The rest of lockscope is running: \
         <a href=\"/api/v1/locks\">/api/v1/locks</a>, <a href=\"/metrics\">/metrics</a>.</p>\
         </body></html>"
    )
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
