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

async fn page(
    State(dir): State<Arc<PathBuf>>,
    base: Option<axum::Extension<super::proxy::BasePath>>,
) -> Response {
    let index = dir.join("index.html");
    match tokio::fs::read(&index).await {
        Ok(html) => {
            let base = base.map(|b| b.0 .0).unwrap_or_default();
            (
                [
                    (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
                    (
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("text/html; charset=utf-8"),
                    ),
                ],
                with_base_path(&html, &base),
            )
                .into_response()
        }
        Err(e) => {
            let shown = std::path::absolute(dir.as_path()).unwrap_or_else(|_| dir.to_path_buf());
            tracing::warn!(dir = %shown.display(), error = %e, "web UI not built");
            (StatusCode::SERVICE_UNAVAILABLE, Html(not_built(&shown))).into_response()
        }
    }
}

/// `index.html` as served under `base_path` (`""` or `/x`): its `<base href="/">` becomes
/// `<base href="/x/">`, which the page's relative URLs and the app (its API calls and routes)
/// resolve against. Without such a tag, one is put first in `<head>`.
pub fn with_base_path(index_html: &[u8], base_path: &str) -> Vec<u8> {
    const TAG: &[u8] = b"<base href=\"/\">";
    let href = format!(
        "<base href=\"{}/\">",
        escape(base_path.trim_end_matches('/'))
    );
    if let Some(at) = find(index_html, TAG) {
        let mut out = Vec::with_capacity(index_html.len() + href.len());
        out.extend_from_slice(&index_html[..at]);
        out.extend_from_slice(href.as_bytes());
        out.extend_from_slice(&index_html[at + TAG.len()..]);
        return out;
    }
    if base_path.is_empty() {
        return index_html.to_vec();
    }
    match find(index_html, b"<head>") {
        Some(at) => {
            let at = at + b"<head>".len();
            let mut out = index_html[..at].to_vec();
            out.extend_from_slice(href.as_bytes());
            out.extend_from_slice(&index_html[at..]);
            out
        }
        None => index_html.to_vec(),
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_tag_says_where_lockscope_is_served() {
        let html = b"<html><head><base href=\"/\"><link href=\"assets/a.css\"></head></html>";
        let out = String::from_utf8(with_base_path(html, "/lockscope")).expect("utf-8");
        assert!(out.contains("<base href=\"/lockscope/\">"), "{out}");
        assert_eq!(with_base_path(html, ""), html.to_vec());
        let bare = b"<html><head><title>x</title></head></html>";
        let out = String::from_utf8(with_base_path(bare, "/a\"b")).expect("utf-8");
        assert!(
            out.starts_with("<html><head><base href=\"/a&quot;b/\">"),
            "{out}"
        );
    }
}
