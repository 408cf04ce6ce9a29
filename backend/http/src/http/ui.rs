//! Serves the web UI: built into the binary, or from a directory when `[ui] assets_dir` is set.
//!
//! The UI is one page routed in the browser, so every page path (`/`, `/sessions`,
//! `/locks/{id}`) answers with the same `index.html`, always through [`index_page`]; its script,
//! wasm, stylesheet and icon come from `/assets/…`.
//!
//! **Built in** (the default): `scripts/build-ui` writes `frontend/dist` with a brotli, zstd and
//! gzip copy of every file, and rust-embed ([`Embedded`]) puts that folder into the binary when
//! the crate is compiled — debug builds too (`debug-embed`), so the tests exercise what a
//! release serves. An asset is answered with the copy the client accepts (br, then zstd, then
//! gzip, then none; nothing is compressed per request), `Vary: Accept-Encoding`, a strong `ETag`
//! per copy (its SHA-256, computed at build time) and `304 Not Modified` for a matching
//! `If-None-Match`. Files whose name carries their content hash (`name-<16 hex>.ext`, as
//! `scripts/build-ui` names the script, wasm and stylesheet) are cached for a year
//! (`immutable`); `index.html` and the rest are `no-cache` (revalidated, a cheap 304). A binary
//! compiled without a UI build still serves the API; its pages answer 503 with a page that says
//! how to build the UI.
//!
//! **From a directory** (`[ui] assets_dir` or `LOCKSCOPE_UI_DIR`, for UI development): files
//! are read per request (tower-http's `ServeDir` with the precompressed copies), so a rebuilt UI
//! needs no restart.
//!
//! The API, `/metrics` and the probes never depend on the UI.

use super::headers::find;
use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{AppendHeaders, Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tower_http::services::ServeDir;
use tower_http::set_header::SetResponseHeaderLayer;

/// `frontend/dist` as it was when this crate was compiled (empty when it did not exist).
#[derive(rust_embed::RustEmbed)]
#[folder = "../../frontend/dist"]
#[allow_missing = true]
pub struct Embedded;

/// The `frontend/dist` listing the build script saw; naming it here makes a rebuilt UI
/// recompile this crate (build.rs).
const UI_STAMP: &str = env!("LOCKSCOPE_UI_STAMP");

/// Whether this binary carries a UI build.
pub fn embedded_build() -> bool {
    Embedded::get("index.html").is_some()
}

/// Where the UI comes from.
#[derive(Debug, Clone)]
enum Source {
    Embedded,
    Dir(Arc<PathBuf>),
}

/// The routes for the UI's pages and assets: from `dir` when given, else the built-in copy.
pub fn routes(dir: Option<&Path>) -> Router {
    let pages = |source: Source| {
        Router::new()
            .route("/", get(page))
            .route("/sessions", get(page))
            .route("/locks/{id}", get(page))
            .with_state(source)
    };
    match dir {
        None => {
            tracing::debug!(
                stamp = UI_STAMP,
                built = embedded_build(),
                "web UI built in"
            );
            pages(Source::Embedded).route("/assets/{*file}", get(embedded_asset))
        }
        Some(dir) => {
            // Assets keep their names across builds of a development tree, so browsers must
            // revalidate (ETag/Last-Modified make that a cheap 304).
            let assets = tower::ServiceBuilder::new()
                .layer(SetResponseHeaderLayer::overriding(
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("no-cache"),
                ))
                .service(
                    ServeDir::new(dir)
                        .precompressed_br()
                        .precompressed_zstd()
                        .precompressed_gzip(),
                );
            pages(Source::Dir(Arc::new(dir.to_path_buf()))).nest_service("/assets", assets)
        }
    }
}

async fn page(
    State(source): State<Source>,
    base: Option<axum::Extension<super::proxy::BasePath>>,
    headers: HeaderMap,
) -> Response {
    let base = base.map(|b| b.0 .0).unwrap_or_default();
    match source {
        Source::Embedded => match Embedded::get("index.html") {
            Some(file) => index_page(&with_base_path(&file.data, &base), &headers),
            None => {
                tracing::warn!("this lockscope was built without its web UI");
                not_built(None, &base)
            }
        },
        Source::Dir(dir) => match tokio::fs::read(dir.join("index.html")).await {
            Ok(html) => index_page(&with_base_path(&html, &base), &headers),
            Err(e) => {
                let shown =
                    std::path::absolute(dir.as_path()).unwrap_or_else(|_| dir.to_path_buf());
                tracing::warn!(dir = %shown.display(), error = %e, "web UI not built");
                not_built(Some(&shown), &base)
            }
        },
    }
}

/// The one answer every page path gets: `index.html` as given (embedded or read from disk),
/// `no-cache`, with an `ETag` of the bytes served and a 304 when the browser has them. Any
/// rewriting of the page (a base path) belongs here, so both sources get it.
pub fn index_page(html: &[u8], request: &HeaderMap) -> Response {
    let etag = etag(&sha256(html));
    if not_modified(request, &etag) {
        return (
            StatusCode::NOT_MODIFIED,
            [
                (header::ETAG, etag),
                (header::CACHE_CONTROL, "no-cache".to_string()),
                // A 304's headers replace the cached answer's: the page's own policy again,
                // or its inline scripts would run under the default one (and be refused).
                (
                    header::CONTENT_SECURITY_POLICY,
                    super::headers::page_policy(html),
                ),
            ],
        )
            .into_response();
    }
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8".to_string()),
            (header::CACHE_CONTROL, "no-cache".to_string()),
            (header::ETAG, etag),
            (
                header::CONTENT_SECURITY_POLICY,
                super::headers::page_policy(html),
            ),
        ],
        html.to_vec(),
    )
        .into_response()
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

fn sha256(bytes: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).into()
}

/// A strong entity tag from a SHA-256: its first 128 bits in hex, quoted.
fn etag(hash: &[u8; 32]) -> String {
    let hex: String = hash[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

/// Whether `If-None-Match` names `etag` (or is `*`); weak tags compare equal too (RFC 9110's
/// weak comparison, which `If-None-Match` uses).
fn not_modified(request: &HeaderMap, etag: &str) -> bool {
    request
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag)
}

/// The encodings a client accepts, from `Accept-Encoding` (a coding with `q=0` is refused).
fn accepts(request: &HeaderMap, coding: &str) -> bool {
    request
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let name = parts.next().unwrap_or_default();
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            (name.eq_ignore_ascii_case(coding) || name == "*") && !refused
        })
}

/// The precompressed copies `scripts/build-ui` makes, in the order they are preferred.
const ENCODINGS: [(&str, &str); 3] = [("br", ".br"), ("zstd", ".zst"), ("gzip", ".gz")];

/// Whether a file name carries its content hash (`name-0123456789abcdef.ext`): such a file
/// never changes under its name, so it may be cached for good.
pub fn content_hashed(name: &str) -> bool {
    let stem = name.split('.').next().unwrap_or_default();
    stem.rsplit_once('-')
        .is_some_and(|(_, hash)| hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `GET /assets/{file}` from the built-in copy.
async fn embedded_asset(
    axum::extract::Path(file): axum::extract::Path<String>,
    request: HeaderMap,
) -> Response {
    let Some(plain) = Embedded::get(&file) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let content_type = plain.metadata.mimetype().to_string();
    let (encoding, served) = ENCODINGS
        .iter()
        .filter(|(coding, _)| accepts(&request, coding))
        .find_map(|(coding, suffix)| {
            Embedded::get(&format!("{file}{suffix}")).map(|f| (Some(*coding), f))
        })
        .unwrap_or((None, plain));
    let cache = if content_hashed(&file) {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    let etag = etag(&served.metadata.sha256_hash());
    let mut headers = vec![
        (header::CACHE_CONTROL, cache.to_string()),
        (header::VARY, "accept-encoding".to_string()),
        (header::ETAG, etag.clone()),
    ];
    if not_modified(&request, &etag) {
        return (StatusCode::NOT_MODIFIED, AppendHeaders(headers)).into_response();
    }
    headers.push((header::CONTENT_TYPE, content_type));
    if let Some(encoding) = encoding {
        headers.push((header::CONTENT_ENCODING, encoding.to_string()));
    }
    let body = match served.data {
        Cow::Borrowed(bytes) => axum::body::Body::from(bytes),
        Cow::Owned(bytes) => axum::body::Body::from(bytes),
    };
    (AppendHeaders(headers), body).into_response()
}

fn not_built(dir: Option<&Path>, base: &str) -> Response {
    let base = escape(base.trim_end_matches('/'));
    let looked = match dir {
        Some(dir) => format!(
            "<p>lockscope looked for it in <code>{}</code> (<code>[ui] assets_dir</code>) and \
             found no <code>index.html</code>. Build it with <code>scripts/build-ui</code> from \
             the lockscope checkout, or point <code>[ui] assets_dir</code> (or \
             <code>LOCKSCOPE_UI_DIR</code>) at a built copy. Nothing needs a restart.</p>",
            escape(&dir.display().to_string())
        ),
        None => "<p>This lockscope binary was compiled without it. Build it with \
                 <code>scripts/build-ui</code> in the lockscope checkout, then build lockscope \
                 again (<code>cargo build --release</code>, or <code>scripts/release</code>): \
                 the UI in <code>frontend/dist</code> is built into the binary. Or point \
                 <code>[ui] assets_dir</code> (or <code>LOCKSCOPE_UI_DIR</code>) at a built \
                 copy.</p>"
            .to_string(),
    };
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>lockscope: web UI not built</title></head><body style=\"font-family:sans-serif;\
         max-width:40em;margin:3em auto\"><h1>The lockscope web UI is not built</h1>{looked}\
         <p>The rest of lockscope is running: \
         <a href=\"{base}/api/v1/locks\">{base}/api/v1/locks</a>, <a href=\"{base}/metrics\">{base}/metrics</a>.</p>\
         </body></html>"
    );
    (StatusCode::SERVICE_UNAVAILABLE, Html(html)).into_response()
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

    fn headers(pairs: &[(header::HeaderName, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (k.clone(), HeaderValue::from_static(v)))
            .collect()
    }

    #[test]
    fn content_hashed_names_are_recognised() {
        assert!(content_hashed("lockscope_ui-0123456789abcdef.js"));
        assert!(content_hashed("lockscope_ui_bg-0123456789abcdef.wasm"));
        assert!(content_hashed("style-0123456789abcdef.css.br"));
        assert!(!content_hashed("lockscope_ui.js"));
        assert!(!content_hashed("index.html"));
        assert!(!content_hashed("favicon.svg"));
        assert!(!content_hashed("lockscope_ui-0123.js"));
    }

    #[test]
    fn accept_encoding_honours_refusals_and_wildcards() {
        let h = headers(&[(header::ACCEPT_ENCODING, "gzip, br;q=0, zstd;q=0.5")]);
        assert!(accepts(&h, "gzip"));
        assert!(!accepts(&h, "br"));
        assert!(accepts(&h, "zstd"));
        assert!(accepts(&headers(&[(header::ACCEPT_ENCODING, "*")]), "br"));
        assert!(!accepts(&HeaderMap::new(), "gzip"));
    }

    #[test]
    fn if_none_match_lists_and_weak_tags_match() {
        let tag = "\"abc\"";
        let h = headers(&[(header::IF_NONE_MATCH, "\"x\", W/\"abc\"")]);
        assert!(not_modified(&h, tag));
        assert!(!not_modified(
            &headers(&[(header::IF_NONE_MATCH, "\"x\"")]),
            tag
        ));
        assert!(not_modified(&headers(&[(header::IF_NONE_MATCH, "*")]), tag));
    }

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
