//! What a force-release request may carry: the body's size and field limits, its parsing and
//! validation, and the bounded copies of untrusted text that go into the audit log.
//!
//! The server's admin router reads a request body only after the caller authenticated and only
//! up to [`MAX_BODY_BYTES`]; this module decides whether those bytes are a release request
//! lockscope will act on. Pure (fuzzed by `fuzz/`'s `release_body` target): whatever the bytes,
//! it answers `Ok` with fields inside the limits or a [`BodyError`] that names the field.

use crate::wire::ReleaseRequest;

/// A release request body is refused (413) past this many bytes, before it is parsed.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// A named holder longer than this is refused: no holder lockscope shows is longer (values a
/// collector reads are cut to a few kB and named by a digest).
pub const MAX_HOLDER_BYTES: usize = 16 * 1024;
/// A reason longer than this (in characters) is refused.
pub const MAX_REASON_CHARS: usize = 1000;
/// Session, version: longer than this is refused.
pub const MAX_SMALL_FIELD_BYTES: usize = 1024;
/// Text from a request that was not authenticated is cut to this many characters before it is
/// stored or logged.
pub const UNAUTHENTICATED_FIELD_CHARS: usize = 120;

/// Why a body is not a release request lockscope acts on; `field` names the part at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyError {
    pub field: &'static str,
    pub message: String,
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

fn error(field: &'static str, message: impl Into<String>) -> BodyError {
    BodyError {
        field,
        message: message.into(),
    }
}

/// Parses and checks a release request body (JSON `{"holder", "reason", "session"?,
/// "reentrancy"?, "version"?}`).
pub fn parse_request(body: &[u8]) -> Result<ReleaseRequest, BodyError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(error("body", format!("larger than {MAX_BODY_BYTES} bytes")));
    }
    let request: ReleaseRequest = serde_json::from_slice(body).map_err(|e| {
        error(
            "body",
            format!(
                "must be JSON {{\"holder\": …, \"reason\": …}}: {}",
                bounded(&e.to_string(), 200)
            ),
        )
    })?;
    if request.holder.is_empty() {
        return Err(error("holder", "must name the holder you saw"));
    }
    if request.holder.len() > MAX_HOLDER_BYTES {
        return Err(error(
            "holder",
            format!("longer than {MAX_HOLDER_BYTES} bytes: no holder lockscope shows is"),
        ));
    }
    if request.reason.trim().is_empty() {
        return Err(error("reason", "a reason is required"));
    }
    if request.reason.chars().count() > MAX_REASON_CHARS {
        return Err(error(
            "reason",
            format!("longer than {MAX_REASON_CHARS} characters"),
        ));
    }
    for (field, value) in [
        ("session", request.session.as_deref()),
        ("version", request.version.as_deref()),
    ] {
        if value.is_some_and(|v| v.len() > MAX_SMALL_FIELD_BYTES) {
            return Err(error(
                field,
                format!("longer than {MAX_SMALL_FIELD_BYTES} bytes"),
            ));
        }
    }
    Ok(request)
}

/// `text` cut to at most `chars` characters (on a character boundary), with `…` when cut.
pub fn bounded(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_good_body_parses() {
        let r = parse_request(br#"{"holder":"/l/n","reason":"stuck","session":"0x1"}"#)
            .expect("parses");
        assert_eq!(
            (r.holder.as_str(), r.session.as_deref()),
            ("/l/n", Some("0x1"))
        );
    }

    #[test]
    fn each_problem_names_its_field() {
        let field = |body: &[u8]| parse_request(body).expect_err("refused").field;
        assert_eq!(field(b"not json"), "body");
        assert_eq!(field(br#"{"holder":"","reason":"x"}"#), "holder");
        assert_eq!(field(br#"{"holder":"h","reason":"  "}"#), "reason");
        let long_reason = format!(r#"{{"holder":"h","reason":"{}"}}"#, "é".repeat(1001));
        assert_eq!(field(long_reason.as_bytes()), "reason");
        let long_holder = format!(
            r#"{{"holder":"{}","reason":"r"}}"#,
            "h".repeat(16 * 1024 + 1)
        );
        assert_eq!(field(long_holder.as_bytes()), "holder");
        let long_version = format!(
            r#"{{"holder":"h","reason":"r","version":"{}"}}"#,
            "v".repeat(1025)
        );
        assert_eq!(field(long_version.as_bytes()), "version");
        assert_eq!(field(&vec![b' '; MAX_BODY_BYTES + 1]), "body");
    }

    #[test]
    fn bounded_cuts_on_character_boundaries() {
        assert_eq!(bounded("abc", 3), "abc");
        assert_eq!(bounded("abcd", 3), "abc…");
        assert_eq!(bounded("ééé", 2), "éé…");
        assert_eq!(bounded("", 0), "");
    }
}
