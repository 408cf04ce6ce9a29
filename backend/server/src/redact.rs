//! Secrets kept out of what lockscope prints: a URL's password, shown as `***` in logs, errors
//! and `Debug` output of configs.
//!
//! Core module: imports nothing of the crate (the store and the collectors both use it).

/// `scheme://user:secret@host` → `scheme://user:***@host` (URLs are shown in logs and errors).
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let auth = &url[scheme + 3..at];
            let user = auth.split(':').next().unwrap_or_default();
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}
