//! The security headers every answer carries, set by one layer ([`layer`]) unless a handler set
//! its own: a `Content-Security-Policy` that the dashboard and `/api-docs` run under (scripts
//! only from lockscope itself, WebAssembly compiled from them, the page's inline scripts only
//! by their SHA-256 — [`page_policy`], which the UI's page sets for itself —, requests only to
//! lockscope, never framed), `X-Frame-Options: DENY` for browsers without `frame-ancestors`,
//! `X-Content-Type-Options: nosniff` and `Referrer-Policy: no-referrer`.
//!
//! Inline styles stay allowed: the UI sets `style` attributes (bar widths, graph positions),
//! and a style cannot run code.

use axum::http::{header, HeaderValue};
use base64::Engine;
use sha2::{Digest, Sha256};
use tower_http::set_header::SetResponseHeaderLayer;

/// Everything but the script sources: the same for every answer.
const REST: &str = "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
     connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'self'; \
     form-action 'self'; frame-ancestors 'none'";

/// The policy of an answer that is not the UI's page: no inline script at all.
pub fn default_policy() -> String {
    format!("{REST}; script-src 'self' 'wasm-unsafe-eval'")
}

/// The policy of an HTML page: its inline `<script>`s allowed by their SHA-256 and nothing
/// else inline.
pub fn page_policy(html: &[u8]) -> String {
    let mut policy = format!("{REST}; script-src 'self' 'wasm-unsafe-eval'");
    for script in inline_scripts(html) {
        let digest = Sha256::digest(script);
        policy.push_str(" 'sha256-");
        policy.push_str(&base64::engine::general_purpose::STANDARD.encode(digest));
        policy.push('\'');
    }
    policy
}

/// The text of each `<script>` without a `src` in `html`, as the browser hashes it.
fn inline_scripts(html: &[u8]) -> Vec<&[u8]> {
    let mut scripts = Vec::new();
    let mut rest = html;
    while let Some(open) = find(rest, b"<script") {
        let after = &rest[open..];
        let Some(tag_end) = find(after, b">") else {
            break;
        };
        let tag = &after[..tag_end];
        let body = &after[tag_end + 1..];
        let Some(close) = find(body, b"</script>") else {
            break;
        };
        if find(tag, b"src=").is_none() {
            scripts.push(&body[..close]);
        }
        rest = &body[close..];
    }
    scripts
}

/// The layers that put the headers on every answer that has none of its own.
pub fn layer<S>(router: axum::Router<S>) -> axum::Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let csp = HeaderValue::from_str(&default_policy()).unwrap_or(HeaderValue::from_static(
        "default-src 'self'; frame-ancestors 'none'",
    ));
    router
        .layer(SetResponseHeaderLayer::if_not_present(
            header::CONTENT_SECURITY_POLICY,
            csp,
        ))
        .layer(SetResponseHeaderLayer::if_not_present(
            header::X_FRAME_OPTIONS,
            HeaderValue::from_static("DENY"),
        ))
        .layer(SetResponseHeaderLayer::if_not_present(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
        .layer(SetResponseHeaderLayer::if_not_present(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ))
}

/// Where `needle` first occurs in `haystack`.
pub(super) fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_allows_its_inline_scripts_by_hash_only() {
        let html = b"<head><script>var a = 1;</script><script type=\"module\">\nimport x from \"./x.js\";\n</script><script src=\"y.js\"></script></head>";
        let policy = page_policy(html);
        let hash = |s: &[u8]| {
            format!(
                "'sha256-{}'",
                base64::engine::general_purpose::STANDARD.encode(Sha256::digest(s))
            )
        };
        assert!(policy.contains(&hash(b"var a = 1;")), "{policy}");
        assert!(policy.contains(&hash(b"\nimport x from \"./x.js\";\n")));
        assert_eq!(
            policy.matches("'sha256-").count(),
            2,
            "no hash for a src script"
        );
        assert!(policy.contains("frame-ancestors 'none'"));
        assert!(!default_policy().contains("sha256"));
        assert!(!policy.contains("'unsafe-eval'"));
    }
}
