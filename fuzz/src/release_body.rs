//! `release_body`: a force-release request body as anyone on the network could send it, through
//! `lockscope_model::release::parse_request` (what the admin router acts on once the caller is
//! authenticated) and `bounded` (how untrusted text is cut before it is stored or logged).
//!
//! The input is the raw body. Checks:
//! * parsing never panics, whatever the bytes;
//! * what it accepts is inside every limit: a holder of 1 to `MAX_HOLDER_BYTES` bytes, a reason
//!   that is not blank and at most `MAX_REASON_CHARS` characters, session and version at most
//!   `MAX_SMALL_FIELD_BYTES`, from a body of at most `MAX_BODY_BYTES`;
//! * what it refuses names one of the request's fields;
//! * an accepted request serialises and parses back to itself (the audit record's fields are
//!   exactly what the operator sent);
//! * `bounded` of any text at any limit is a prefix of it, at most the limit plus `…` long, and
//!   the whole text when it fits.

use lockscope_model::release::{
    bounded, parse_request, MAX_BODY_BYTES, MAX_HOLDER_BYTES, MAX_REASON_CHARS,
    MAX_SMALL_FIELD_BYTES,
};

pub fn run(data: &[u8]) {
    crate::show(&String::from_utf8_lossy(data));
    match parse_request(data) {
        Ok(request) => {
            assert!(data.len() <= MAX_BODY_BYTES);
            assert!(!request.holder.is_empty() && request.holder.len() <= MAX_HOLDER_BYTES);
            assert!(!request.reason.trim().is_empty());
            assert!(request.reason.chars().count() <= MAX_REASON_CHARS);
            for field in [&request.session, &request.version].into_iter().flatten() {
                assert!(field.len() <= MAX_SMALL_FIELD_BYTES);
            }
            let again = serde_json::to_vec(&request).expect("a request serialises");
            assert_eq!(parse_request(&again).as_ref(), Ok(&request));
        }
        Err(e) => assert!(
            ["body", "holder", "reason", "session", "version"].contains(&e.field),
            "refusal names no field: {e:?}"
        ),
    }
    let text = String::from_utf8_lossy(data);
    for limit in [0, 1, 7, 120, data.first().map_or(3, |b| usize::from(*b))] {
        let cut = bounded(&text, limit);
        let kept = cut.strip_suffix('…').unwrap_or(&cut);
        assert!(text.starts_with(kept), "{cut:?} is not a prefix");
        assert!(kept.chars().count() <= limit);
        if text.chars().count() <= limit {
            assert_eq!(cut, text);
        }
    }
}
