//! `lock_id`: lock ids for any source name and path, and `parse_lock_id` on any text.
//!
//! The input is text: its first line is the source name (bytes outside `[A-Za-z0-9_-]`, which
//! configuration rejects, are mapped into it), the rest the lock path (`/` is put in front when it
//! is missing: every ZooKeeper path and every Redis lock's path starts with one). Checks:
//! * `parse_lock_id(lock_id(source, path))` gives back `(source, path)`, and the id is URL-path
//!   safe (`[A-Za-z0-9._~!-]`);
//! * a Redis key's id (`lock_id(source, "/" + display_bytes(key))`, as the aggregator builds it)
//!   reads back to the key (the admin router's path);
//! * `parse_lock_id` on the whole input never panics, and whatever it accepts encodes back to an
//!   id that parses to the same pair.

use lockscope_model::id::{lock_id, parse_lock_id};
use lockscope_model::redis::{display_bytes, parse_display_bytes};

const SOURCE_CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";

pub fn run(data: &[u8]) {
    let (first, rest) = match data.iter().position(|b| *b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let mut source: String = first
        .iter()
        .map(|b| {
            if SOURCE_CHARS.contains(b) {
                char::from(*b)
            } else {
                char::from(SOURCE_CHARS[usize::from(*b) % SOURCE_CHARS.len()])
            }
        })
        .collect();
    if source.is_empty() {
        source.push('s');
    }
    let text = String::from_utf8_lossy(rest);
    let path = if text.starts_with('/') {
        text.into_owned()
    } else {
        format!("/{text}")
    };
    crate::show(&(&source, &path));

    let id = lock_id(&source, &path);
    assert!(
        id.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~!".contains(&b)),
        "id {id:?} is not URL-path safe"
    );
    assert_eq!(
        parse_lock_id(&id),
        Some((source.clone(), path.clone())),
        "id {id:?} does not parse back"
    );

    // A Redis key of the raw bytes after the first line.
    let shown = display_bytes(rest);
    let id = lock_id(&source, &format!("/{shown}"));
    let (parsed_source, parsed_path) = parse_lock_id(&id).expect("a Redis lock id does not parse");
    assert_eq!(parsed_source, source);
    let key_text = parsed_path
        .strip_prefix('/')
        .expect("a Redis lock path without its '/'");
    assert_eq!(
        parse_display_bytes(key_text),
        rest,
        "Redis key {shown:?} does not read back from its id"
    );

    // Anything `parse_lock_id` accepts is an id of the pair it names.
    let whole = String::from_utf8_lossy(data);
    if let Some((s, p)) = parse_lock_id(&whole) {
        assert!(!s.is_empty() && !s.contains('~'));
        assert_eq!(parse_lock_id(&lock_id(&s, &p)), Some((s, p)));
    }
}
