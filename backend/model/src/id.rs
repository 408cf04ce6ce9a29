//! Lock identifiers: URL-path-safe, stable for the same source and path, reversible.
//!
//! An id is `<source>` followed by the lock path with `/` written as `~`. Bytes outside
//! `[A-Za-z0-9._-]` (including `~` itself) are written as `!` and two hex digits, so any path,
//! however odd, maps to exactly one id and back. Source names are restricted by configuration to
//! `[A-Za-z0-9_-]`, and every path starts with `/`, so the first `~` ends the source name.

/// Builds the id of the lock at `path` in `source`.
pub fn lock_id(source: &str, path: &str) -> String {
    let mut out = String::with_capacity(source.len() + path.len() + 4);
    out.push_str(source);
    for byte in path.bytes() {
        match byte {
            b'/' => out.push('~'),
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-' => out.push(byte as char),
            other => {
                out.push('!');
                out.push_str(&format!("{other:02X}"));
            }
        }
    }
    out
}

/// Splits an id back into `(source, path)`; `None` when it is not an id [`lock_id`] could make.
pub fn parse_lock_id(id: &str) -> Option<(String, String)> {
    let start = id.find('~')?;
    let (source, rest) = id.split_at(start);
    if source.is_empty() {
        return None;
    }
    let mut bytes = Vec::with_capacity(rest.len());
    let mut chars = rest.bytes();
    while let Some(byte) = chars.next() {
        match byte {
            b'~' => bytes.push(b'/'),
            b'!' => {
                let hi = chars.next()?;
                let lo = chars.next()?;
                let hex = [hi, lo];
                let text = std::str::from_utf8(&hex).ok()?;
                bytes.push(u8::from_str_radix(text, 16).ok()?);
            }
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-' => bytes.push(byte),
            _ => return None,
        }
    }
    Some((source.to_string(), String::from_utf8(bytes).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_url_safe_and_reversible() {
        let cases = [
            ("zk-main", "/locks/orders", "zk-main~locks~orders"),
            ("zk", "/a b/ü~x", "zk~a!20b~!C3!BC!7Ex"),
            ("s_1", "/", "s_1~"),
        ];
        for (source, path, want) in cases {
            let id = lock_id(source, path);
            assert_eq!(id, want);
            assert!(id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~!".contains(&b)));
            assert_eq!(
                parse_lock_id(&id),
                Some((source.to_string(), path.to_string()))
            );
        }
        assert_eq!(parse_lock_id("nosep"), None);
        assert_eq!(parse_lock_id("~locks"), None);
        assert_eq!(parse_lock_id("zk~bad!G1"), None);
    }
}
