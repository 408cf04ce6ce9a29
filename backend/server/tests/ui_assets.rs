//! The web UI's files as the server hands them out: the one page for every UI route, the
//! brotli, zstd or gzip copy of an asset the browser accepts, and a clear page (not a blank one) when the UI was never built.

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use lockscope::config::Config;
use lockscope::http::{app, Settings};
use tower::ServiceExt;

async fn get(
    settings: &Settings,
    uri: &str,
    gzip: bool,
) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    get_accepting(settings, uri, if gzip { "gzip" } else { "" }).await
}

async fn get_accepting(
    settings: &Settings,
    uri: &str,
    accept: &str,
) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    if accept.is_empty() {
        app_get(settings, uri, &[]).await
    } else {
        app_get(settings, uri, &[(header::ACCEPT_ENCODING, accept)]).await
    }
}

fn settings(dir: &std::path::Path) -> Settings {
    Settings {
        ui_dir: Some(dir.to_path_buf()),
        ..Settings::default()
    }
}

#[tokio::test]
async fn a_missing_build_is_explained_and_the_api_still_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = settings(&dir.path().join("dist"));
    let (status, headers, body) = get(&s, "/", false).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(headers[header::CONTENT_TYPE]
        .to_str()
        .expect("ascii")
        .starts_with("text/html"));
    let text = String::from_utf8(body).expect("utf-8");
    assert!(text.contains("web UI is not built"), "{text}");
    assert!(text.contains("scripts/build-ui"), "{text}");
    assert!(
        text.contains("dist"),
        "names the directory it looked in: {text}"
    );
    let (status, _, _) = get(&s, "/api/v1/info", false).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn every_ui_route_gets_the_page_and_assets_come_gzipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let page = "<!doctype html><title>lockscope</title>";
    std::fs::write(dir.path().join("index.html"), page).expect("write");
    std::fs::write(dir.path().join("lockscope_ui.js"), "export default 1;").expect("write");
    std::fs::write(dir.path().join("lockscope_ui.js.gz"), b"\x1f\x8bnot-really").expect("write");
    std::fs::write(dir.path().join("lockscope_ui_bg.wasm"), b"\0asm").expect("write");
    let s = settings(dir.path());
    for route in ["/", "/sessions", "/locks/zk~a~b"] {
        let (status, headers, body) = get(&s, route, false).await;
        assert_eq!(status, StatusCode::OK, "{route}");
        assert_eq!(body, page.as_bytes(), "{route}");
        assert_eq!(headers[header::CACHE_CONTROL], "no-cache");
    }
    let (status, headers, body) = get(&s, "/assets/lockscope_ui.js", true).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CONTENT_ENCODING], "gzip");
    assert_eq!(body, b"\x1f\x8bnot-really");
    let (_, headers, body) = get(&s, "/assets/lockscope_ui.js", false).await;
    assert!(headers.get(header::CONTENT_ENCODING).is_none());
    assert_eq!(body, b"export default 1;");
    let (_, headers, _) = get(&s, "/assets/lockscope_ui_bg.wasm", false).await;
    assert_eq!(headers[header::CONTENT_TYPE], "application/wasm");
    // The copies scripts/build-ui made once: brotli or zstd when the browser takes them.
    std::fs::write(dir.path().join("lockscope_ui.js.br"), b"brotli-copy").expect("write");
    std::fs::write(dir.path().join("lockscope_ui.js.zst"), b"zstd-copy").expect("write");
    for (accept, encoding, body) in [
        ("gzip, deflate, br, zstd", "zstd", &b"zstd-copy"[..]),
        ("gzip, deflate, br", "br", &b"brotli-copy"[..]),
        ("gzip", "gzip", &b"\x1f\x8bnot-really"[..]),
    ] {
        let (_, headers, got) = get_accepting(&s, "/assets/lockscope_ui.js", accept).await;
        assert_eq!(headers[header::CONTENT_ENCODING], encoding, "{accept}");
        assert_eq!(got, body, "{accept}");
    }
    let (status, _, _) = get(&s, "/assets/nope.js", false).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, body) = get(&s, "/api/v1/nope", false).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(String::from_utf8_lossy(&body).contains("no such endpoint"));
}

#[tokio::test]
async fn info_reports_admin_off_and_the_stale_limit() {
    let config: Config = Config::parse(
        "[[redis]]\nname = \"r\"\nurl = \"redis://127.0.0.1:1\"\npatterns = [\"lock:*\"]\n\n[ui]\nstale_hold = \"90s\"\n",
    )
    .expect("valid");
    let s = Settings::from_config(config.http_sections(), Default::default());
    let (status, _, body) = get(&s, "/api/v1/info", false).await;
    assert_eq!(status, StatusCode::OK);
    let info: lockscope_model::wire::InfoView = serde_json::from_slice(&body).expect("json");
    assert_eq!(info.stale_hold_ms, 90_000);
    assert!(!info.admin_enabled);
    assert!(info.admin_disabled_reason.is_some());
}

/// The `/assets/…` paths `index.html` names.
fn assets_named(html: &str) -> Vec<String> {
    html.split("assets/")
        .skip(1)
        .filter_map(|rest| rest.split(['"', '\'']).next())
        .map(|name| format!("/assets/{name}"))
        .collect()
}

#[tokio::test]
async fn the_built_in_ui_is_served_precompressed_with_etags_and_caching() {
    let s = Settings::default();
    assert!(s.ui_dir.is_none(), "the built-in copy is the default");
    let dist = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../frontend/dist");
    // build.rs recompiles the crate when frontend/dist changes, so a built UI in the tree is
    // the one in this binary.
    assert_eq!(
        lockscope::http::ui::embedded_build(),
        dist.join("index.html").exists(),
        "the built-in UI does not match {}",
        dist.display()
    );
    let (status, headers, body) = get(&s, "/", false).await;
    if !lockscope::http::ui::embedded_build() {
        // Compiled without frontend/dist: the API works and the page says how to get the UI.
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        let text = String::from_utf8(body).expect("utf-8");
        assert!(text.contains("scripts/build-ui"), "{text}");
        let (status, _, _) = get(&s, "/api/v1/info", false).await;
        assert_eq!(status, StatusCode::OK);
        return;
    }
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::CACHE_CONTROL], "no-cache");
    let html = String::from_utf8(body).expect("utf-8");
    assert!(html.contains("<title>lockscope</title>"), "{html}");
    for route in ["/sessions", "/locks/zk~a~b"] {
        let (status, _, body) = get(&s, route, false).await;
        assert_eq!(status, StatusCode::OK, "{route}");
        assert_eq!(body, html.as_bytes(), "{route}");
    }
    // The page's ETag makes a revisit a 304.
    let etag = headers[header::ETAG].to_str().expect("ascii").to_string();
    let resp = app_get(&s, "/", &[(header::IF_NONE_MATCH, &etag)]).await;
    assert_eq!(resp.0, StatusCode::NOT_MODIFIED);

    let assets = assets_named(&html);
    assert!(
        assets.iter().any(|a| a.ends_with(".wasm")) && assets.iter().any(|a| a.ends_with(".js")),
        "{assets:?}"
    );
    for asset in &assets {
        let name = asset.trim_start_matches("/assets/");
        let plain = std::fs::read(dist.join(name)).expect("the embedded build is frontend/dist's");
        let immutable = lockscope::http::ui::content_hashed(name);
        for (accept, encoding, suffix) in [
            ("gzip, deflate, br, zstd", Some("br"), ".br"),
            ("gzip, zstd", Some("zstd"), ".zst"),
            ("gzip", Some("gzip"), ".gz"),
            ("br;q=0, identity", None, ""),
            ("", None, ""),
        ] {
            let (status, headers, body) = get_accepting(&s, asset, accept).await;
            assert_eq!(status, StatusCode::OK, "{asset} {accept}");
            let expected = if suffix.is_empty() {
                plain.clone()
            } else {
                std::fs::read(dist.join(format!("{name}{suffix}"))).expect("precompressed copy")
            };
            assert_eq!(body, expected, "{asset} {accept}");
            assert_eq!(
                headers
                    .get(header::CONTENT_ENCODING)
                    .map(|v| v.to_str().expect("ascii")),
                encoding,
                "{asset} {accept}"
            );
            assert_eq!(headers[header::VARY], "accept-encoding");
            assert_eq!(
                headers[header::CACHE_CONTROL],
                if immutable {
                    "public, max-age=31536000, immutable"
                } else {
                    "no-cache"
                },
                "{asset}"
            );
            if name.ends_with(".wasm") {
                assert_eq!(headers[header::CONTENT_TYPE], "application/wasm");
            }
            // Each copy has its own tag, and a client holding it gets a 304.
            let etag = headers[header::ETAG].to_str().expect("ascii").to_string();
            let mut sent = vec![(header::IF_NONE_MATCH, etag.as_str())];
            if !accept.is_empty() {
                sent.push((header::ACCEPT_ENCODING, accept));
            }
            let (status, _, body) = app_get(&s, asset, &sent).await;
            assert_eq!(status, StatusCode::NOT_MODIFIED, "{asset} {accept}");
            assert!(body.is_empty());
        }
    }
    let (status, _, _) = get(&s, "/assets/nope.js", false).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

async fn app_get(
    settings: &Settings,
    uri: &str,
    headers: &[(header::HeaderName, &str)],
) -> (StatusCode, axum::http::HeaderMap, Vec<u8>) {
    // An aggregator with no sources: these routes never ask it anything about locks.
    let (_stop, stop) = tokio::sync::watch::channel(false);
    let assembly = lockscope::registry::assemble(&[], 500, &stop);
    let handle = assembly.handle;
    let task = tokio::spawn(assembly.aggregator.run(assembly.updates, assembly.commands));
    let mut request = Request::builder().uri(uri);
    for (k, v) in headers {
        request = request.header(k, *v);
    }
    let resp = app(handle, settings.clone())
        .oneshot(request.body(Body::empty()).expect("request"))
        .await
        .expect("response");
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 24)
        .await
        .expect("body")
        .to_vec();
    task.abort();
    (status, headers, body)
}
