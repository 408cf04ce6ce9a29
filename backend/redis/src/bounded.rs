//! Redis values, hash fields, list and zset members and key names can be up to 512 MB; a lock's
//! are a few dozen bytes. lockscope never copies a long one out of Redis: its scripts read at
//! most [`SHOWN_MAX`] bytes of each, and name a longer one by a digest so a holder stays
//! identifiable and can still be compared by a force release.
//!
//! **The digest** of an `n`-byte value is `sha1hex("<n>:" .. first 64 KiB .. last 64 KiB)`
//! (the two ranges do not overlap: a value up to 128 KiB is hashed whole). It is computed in
//! Lua, by the collector's read and again by the release script, over bounded reads
//! (`STRLEN` + `GETRANGE`), so neither ever blocks Redis hashing a 512 MB value. The price: two
//! values of the same length, head and tail that differ only in between get the same digest.
//! A lock's holder is a token written whole by one `SET`; a changed holder changes its length,
//! head or tail in practice, and the release compares the digest as well as the length.
//!
//! A long value's holder id is `<first 64 bytes>…[<n> bytes, sha1 <digest>]`, and its holder's
//! `version` is `<n>:<digest>`: a release of it must send that version back (a short value whose
//! text only looks like such an id has no version, so it cannot be confused with one).
//!
//! Key names longer than [`KEY_NAME_MAX`] are not read as locks at all: the collector skips them
//! and the source lists how many it skipped (`limits`), with the start of one.

use std::sync::LazyLock;

/// Values, fields and members up to this many bytes are read whole.
pub const SHOWN_MAX: usize = 1024;
/// Of a longer one, this many bytes are shown (before its length and digest).
pub const SHOWN_HEAD: usize = 64;
/// The digest covers the length, this many bytes at the start and as many at the end.
pub const DIGEST_PART: usize = 64 * 1024;
/// Keys with longer names are skipped (counted on the source, never read as locks).
pub const KEY_NAME_MAX: usize = 1024;
/// How many bytes of a compared value a release's answer shows.
pub const ANSWER_SHOWN: usize = 256;

/// Lua shared by the read and the release scripts: `string_digest(key, n)` (a string key of `n`
/// bytes, read in two bounded ranges), `text_digest(s)` (the same digest of a string already in
/// the script, e.g. a hash field) and `short(s)` (`s` when short, else `{head, n, digest}`).
pub static DIGEST_LUA: LazyLock<String> = LazyLock::new(|| {
    format!(
        r#"
local PART, SHOWN_MAX, SHOWN_HEAD = {DIGEST_PART}, {SHOWN_MAX}, {SHOWN_HEAD}
local function bounded_digest(n, head, tail)
  return redis.sha1hex(string.format('%d', n) .. ':' .. head .. tail)
end
local function string_digest(key, n)
  local tail = ''
  if n > PART then tail = redis.call('GETRANGE', key, math.max(PART, n - PART), n - 1) end
  return bounded_digest(n, redis.call('GETRANGE', key, 0, PART - 1), tail)
end
local function text_digest(s)
  local n = #s
  local tail = ''
  if n > PART then tail = string.sub(s, math.max(PART, n - PART) + 1, n) end
  return bounded_digest(n, string.sub(s, 1, PART), tail)
end
local function short(s)
  if type(s) ~= 'string' or #s <= SHOWN_MAX then return s end
  return {{string.sub(s, 1, SHOWN_HEAD), #s, text_digest(s)}}
end
"#
    )
});

/// The bytes a long value is shown as (and identified by): its head, length and digest.
pub fn truncated_id(head: &[u8], len: u64, digest: &str) -> Vec<u8> {
    let mut out = head[..head.len().min(SHOWN_HEAD)].to_vec();
    out.extend_from_slice(format!("…[{len} bytes, sha1 {digest}]").as_bytes());
    out
}

/// The `version` of a holder whose id is truncated: what the release compares.
pub fn truncated_version(len: u64, digest: &str) -> String {
    format!("{len}:{digest}")
}

/// The length and digest in a truncated holder's version; `None` for any other version.
pub fn parse_truncated_version(version: &str) -> Option<(u64, &str)> {
    let (len, digest) = version.split_once(':')?;
    let len = len.parse().ok()?;
    (digest.len() == 40 && digest.bytes().all(|b| b.is_ascii_hexdigit())).then_some((len, digest))
}

/// The version of a Redisson RedLock holder: a short digest over the per-master fields it
/// stands for, in master order (`None` where it does not hold). Its id, `*:<threadId>`, is
/// shared by every JVM's thread of that number; the version tells one set of fields from another.
pub fn redlock_version(fields: &[Option<&str>]) -> String {
    let mut hasher = sha1_smol::Sha1::new();
    for (i, field) in fields.iter().enumerate() {
        match field {
            // Length-prefixed: no field can run into the next.
            Some(f) => hasher.update(format!("{i}={}:", f.len()).as_bytes()),
            None => hasher.update(format!("{i}-").as_bytes()),
        }
        hasher.update(field.unwrap_or_default().as_bytes());
    }
    hasher.digest().to_string()[..16].to_string()
}

/// A release script's bounded text (at most [`ANSWER_SHOWN`] bytes) and the full length it was
/// cut from, as shown in an answer.
pub fn answer_text(head: &[u8], len: i64) -> String {
    let shown = lockscope_model::redis::display_bytes(head);
    if usize::try_from(len).is_ok_and(|n| n > head.len()) {
        format!("{shown}…[{len} bytes]")
    } else {
        shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncated_versions_round_trip_and_nothing_else_parses() {
        let digest = "86f7e437faa5a7fce15d1ddcb9eaeaea377667b8";
        let v = truncated_version(20_971_520, digest);
        assert_eq!(parse_truncated_version(&v), Some((20_971_520, digest)));
        assert_eq!(parse_truncated_version("3f2a9c0d11aa22bb"), None);
        assert_eq!(parse_truncated_version("12/34"), None);
        assert_eq!(parse_truncated_version("1:xyz"), None);
        let id = truncated_id(&[b'a'; 100], 20_971_520, digest);
        assert_eq!(
            String::from_utf8(id).unwrap_or_default(),
            format!("{}…[20971520 bytes, sha1 {digest}]", "a".repeat(SHOWN_HEAD))
        );
    }

    #[test]
    fn redlock_versions_tell_field_sets_apart() {
        let a = redlock_version(&[Some("u1:52"), Some("u2:52"), None]);
        assert_eq!(a.len(), 16);
        assert_eq!(a, redlock_version(&[Some("u1:52"), Some("u2:52"), None]));
        assert_ne!(a, redlock_version(&[Some("u1:52"), None, Some("u2:52")]));
        assert_ne!(a, redlock_version(&[Some("v1:52"), Some("u2:52"), None]));
        // Lengths keep fields apart: ("ab", "c") is not ("a", "bc").
        assert_ne!(
            redlock_version(&[Some("ab"), Some("c")]),
            redlock_version(&[Some("a"), Some("bc")])
        );
    }

    #[test]
    fn answers_show_a_bounded_head_and_the_length() {
        assert_eq!(answer_text(b"tok", 3), "tok");
        assert_eq!(answer_text(b"tok", 20), "tok…[20 bytes]");
    }
}
