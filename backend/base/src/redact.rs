//! Database passwords: kept out of what lockscope prints (a URL's password shown as `***` in logs, errors
//! and `Debug` output of configs), and the one check of where a password comes from.
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

/// Every problem with where a database password comes from (`at` names the section): in the URL
/// and in `password_env` both, or `password_env` naming a variable that is not set.
pub fn password_problems(at: &str, url: &str, password_env: Option<&str>) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(var) = password_env else {
        return problems;
    };
    let authority = url
        .split("://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_default();
    let in_url = authority.contains('@')
        && authority
            .split('@')
            .next()
            .is_some_and(|auth| auth.contains(':'));
    if in_url {
        problems.push(format!(
            "{at}: the password is both in url and in password_env; keep one"
        ));
    }
    if std::env::var(var).is_err() {
        problems.push(format!(
            "{at}.password_env: environment variable {var} is not set"
        ));
    }
    problems
}
