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

/// The path bytes of an id, decoded as they are read (no allocation): what
/// [`parse_lock_id`] would give for an id [`lock_id`] made, for ordering locks by path without
/// building each one's path. A malformed escape is read as its bytes.
pub fn path_bytes(id: &str) -> PathBytes<'_> {
    let rest = id.find('~').map_or("", |i| &id[i..]);
    PathBytes {
        bytes: rest.as_bytes(),
    }
}

/// See [`path_bytes`].
#[derive(Debug, Clone)]
pub struct PathBytes<'a> {
    bytes: &'a [u8],
}

impl Iterator for PathBytes<'_> {
    type Item = u8;

    fn next(&mut self) -> Option<u8> {
        let (&first, rest) = self.bytes.split_first()?;
        let hex = |b: u8| (b as char).to_digit(16);
        match (first, rest) {
            (b'~', _) => {
                self.bytes = rest;
                Some(b'/')
            }
            (b'!', [hi, lo, tail @ ..]) if hex(*hi).is_some() && hex(*lo).is_some() => {
                self.bytes = tail;
                Some((hex(*hi)? * 16 + hex(*lo)?) as u8)
            }
            _ => {
                self.bytes = rest;
                Some(first)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_bytes_are_the_parsed_path() {
        for (source, path) in [("zk", "/a b/ü~x!"), ("s", "/"), ("r", "/lock:{x}")] {
            let id = lock_id(source, path);
            let bytes: Vec<u8> = path_bytes(&id).collect();
            assert_eq!(bytes, path.as_bytes());
        }
    }

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
