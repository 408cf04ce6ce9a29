//! Values read from a watched system, kept bounded.
//!
//! A lock's owner or value is whatever a client wrote: an etcd value, a lock-table owner column.
//! Nothing stops a client from writing megabytes there, and a holder id is copied into every
//! view, delta and history row. So lockscope keeps at most [`SHOWN_BYTES`] of any such value
//! (a [`Clipped`]), with the whole value's length and, where the source computed one, a SHA-256
//! digest of the whole value, which is what a force release compares a cut value by.
//!
//! A cut value is shown as its first [`SHOWN_BYTES`] bytes (with [`display_bytes`]: binary as
//! `\xNN`) followed by a marker `…[<length> bytes]` or `…[<length> bytes, sha256 <hex>]`. Only a
//! cut produces a marker after exactly [`SHOWN_BYTES`] bytes: a whole value is at most
//! [`SHOWN_BYTES`] long, so its text cannot hold that many bytes and a marker besides.
//! [`parse_cut`] reads the marker back.

use crate::redis::{display_bytes, parse_display_bytes};

/// The most bytes of a value lockscope keeps and shows.
pub const SHOWN_BYTES: usize = 4096;

/// A value, at most its first [`SHOWN_BYTES`] bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Clipped {
    /// The value, or its first [`SHOWN_BYTES`] bytes when it is longer.
    pub head: Vec<u8>,
    /// The whole value's length in bytes.
    pub len: u64,
    /// SHA-256 of the whole value (lower-case hex), when it was cut and the source computed it.
    pub sha256: Option<String>,
}

impl Clipped {
    /// Keeps `bytes` whole or cut to [`SHOWN_BYTES`] (no digest: the caller has none).
    pub fn of(mut bytes: Vec<u8>) -> Clipped {
        let len = bytes.len() as u64;
        bytes.truncate(SHOWN_BYTES);
        bytes.shrink_to_fit();
        Clipped {
            head: bytes,
            len,
            sha256: None,
        }
    }

    /// Keeps the first [`SHOWN_BYTES`] of `bytes` (copying only those).
    pub fn of_slice(bytes: &[u8]) -> Clipped {
        Clipped {
            head: bytes[..bytes.len().min(SHOWN_BYTES)].to_vec(),
            len: bytes.len() as u64,
            sha256: None,
        }
    }

    /// Whether part of the value was dropped.
    pub fn is_cut(&self) -> bool {
        (self.head.len() as u64) < self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The value as shown: whole with [`display_bytes`], or its head and the cut marker.
    pub fn display(&self) -> String {
        let mut out = display_bytes(&self.head);
        if self.is_cut() {
            match &self.sha256 {
                Some(digest) => out.push_str(&format!("…[{} bytes, sha256 {digest}]", self.len)),
                None => out.push_str(&format!("…[{} bytes]", self.len)),
            }
        }
        out
    }
}

/// What a shown cut value says about the whole value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// The first [`SHOWN_BYTES`] bytes.
    pub head: Vec<u8>,
    /// The whole value's length in bytes.
    pub len: u64,
    /// SHA-256 of the whole value, lower-case hex, when the marker carries it.
    pub sha256: Option<String>,
}

/// Reads a value shown by [`Clipped::display`] back: `Some` only for a cut value (a marker after
/// exactly [`SHOWN_BYTES`] bytes, claiming more than that); `None` for a whole value, which
/// [`parse_display_bytes`] reads back.
pub fn parse_cut(shown: &str) -> Option<Cut> {
    let (head, marker) = shown.rsplit_once("…[")?;
    let inner = marker.strip_suffix(']')?;
    let (len, sha256) = match inner.split_once(" bytes") {
        Some((len, "")) => (len, None),
        Some((len, rest)) => {
            let digest = rest.strip_prefix(", sha256 ")?;
            let hex = digest.len() == 64
                && digest
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
            if !hex {
                return None;
            }
            (len, Some(digest.to_string()))
        }
        None => return None,
    };
    let len: u64 = len.parse().ok()?;
    let head = parse_display_bytes(head);
    (head.len() == SHOWN_BYTES && len > SHOWN_BYTES as u64).then_some(Cut { head, len, sha256 })
}

/// Decodes hex (either case), as databases print a digest or a `HEX()`/`encode(…, 'hex')` value.
pub fn from_hex(text: &str) -> Option<Vec<u8>> {
    text.trim()
        .as_bytes()
        .chunks(2)
        .map(|pair| match pair {
            [high, low] => Some(hex_digit(*high)? << 4 | hex_digit(*low)?),
            _ => None,
        })
        .collect()
}

fn hex_digit(b: u8) -> Option<u8> {
    char::from(b).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_are_whole_and_long_ones_cut_with_their_size() {
        let short = Clipped::of(b"owner-a".to_vec());
        assert!(!short.is_cut());
        assert_eq!(short.display(), "owner-a");
        assert_eq!(parse_cut(&short.display()), None);

        let long = Clipped::of(vec![b'x'; 5 * 1024 * 1024]);
        assert!(long.is_cut());
        assert_eq!(long.head.len(), SHOWN_BYTES);
        let shown = long.display();
        assert!(shown.len() < SHOWN_BYTES + 64, "{}", shown.len());
        assert!(shown.ends_with("…[5242880 bytes]"), "{shown}");
        let cut = parse_cut(&shown).expect("a cut value");
        assert_eq!((cut.len, cut.sha256), (5_242_880, None));
    }

    #[test]
    fn binary_heads_show_escaped_and_digests_round_trip() {
        let mut head = vec![0xff; SHOWN_BYTES];
        head[0] = b'a';
        let digest = "ab".repeat(32);
        let value = Clipped {
            head: head.clone(),
            len: 10_000,
            sha256: Some(digest.clone()),
        };
        let shown = value.display();
        assert!(shown.starts_with("a\\xff\\xff"), "{}", &shown[..20]);
        let cut = parse_cut(&shown).expect("a cut value");
        assert_eq!(cut.head, head);
        assert_eq!(cut.len, 10_000);
        assert_eq!(cut.sha256.as_deref(), Some(digest.as_str()));
    }

    #[test]
    fn a_whole_value_that_looks_like_a_marker_is_not_a_cut() {
        // Its text cannot hold SHOWN_BYTES bytes before the marker and be whole.
        for text in [
            "x…[9999 bytes]".to_string(),
            format!("{}…[9999 bytes]", "x".repeat(100)),
            format!("{}…[10 bytes]", "x".repeat(SHOWN_BYTES)),
            format!("{}…[9999 bytes, sha256 XYZ]", "x".repeat(SHOWN_BYTES)),
        ] {
            assert_eq!(parse_cut(&text), None, "{text}");
        }
    }

    #[test]
    fn hex_decodes_either_case() {
        assert_eq!(from_hex("00fFaB"), Some(vec![0, 255, 171]));
        assert_eq!(from_hex("0"), None);
        assert_eq!(from_hex("zz"), None);
    }
}

/// A participant's identity as shown ([`crate::wire::HolderView::identity`]): `bytes` with
/// [`display_bytes`], cut after [`crate::wire::IDENTITY_MAX`] bytes with `…`; `None` when
/// empty or only whitespace.
pub fn identity(bytes: &[u8]) -> Option<String> {
    let max = crate::wire::IDENTITY_MAX;
    let trimmed = bytes.trim_ascii();
    if trimmed.is_empty() {
        return None;
    }
    if trimmed.len() <= max {
        return Some(display_bytes(trimmed));
    }
    // Cut on a character boundary where the head is UTF-8.
    let mut cut = max;
    while cut > 0 && std::str::from_utf8(&trimmed[..cut]).is_err() && max - cut < 4 {
        cut -= 1;
    }
    if std::str::from_utf8(&trimmed[..cut]).is_err() {
        cut = max;
    }
    Some(format!("{}…", display_bytes(&trimmed[..cut])))
}

/// [`identity`] of a value already shown as text (with [`display_bytes`] or
/// [`Clipped::display`]): cut after [`crate::wire::IDENTITY_MAX`] bytes with `…`, never inside
/// a character or a `\xNN` escape.
pub fn identity_text(text: &str) -> Option<String> {
    let max = crate::wire::IDENTITY_MAX;
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if text.len() <= max {
        return Some(text.to_string());
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    // An escape `\xNN` is four characters: do not leave a piece of one.
    if let Some(at) = text[..cut].rfind("\\x") {
        if cut - at < 4 {
            cut = at;
        }
    }
    Some(format!("{}…", &text[..cut]))
}

#[cfg(test)]
mod identity_tests {
    use super::{identity, identity_text};

    #[test]
    fn shown_values_are_cut_between_characters_and_escapes() {
        assert_eq!(identity_text("  owner-7 ").as_deref(), Some("owner-7"));
        assert_eq!(identity_text(""), None);
        let escaped = "\\xff".repeat(40);
        let shown = identity_text(&escaped).unwrap_or_default();
        assert_eq!(shown, format!("{}…", "\\xff".repeat(32)));
        let accented = format!("a{}", "é".repeat(100));
        let shown = identity_text(&accented).unwrap_or_default();
        assert!(
            shown.ends_with('…') && shown.len() <= 128 + '…'.len_utf8(),
            "{shown}"
        );
    }

    #[test]
    fn identities_are_bounded_escaped_and_never_blank() {
        assert_eq!(identity(b"  worker-1\n").as_deref(), Some("worker-1"));
        assert_eq!(identity(b" \t"), None);
        assert_eq!(identity(b"\x7f\xffid").as_deref(), Some("\x7f\\xffid"));
        let long = "é".repeat(100);
        let shown = identity(long.as_bytes()).unwrap_or_default();
        assert!(shown.ends_with('…') && !shown.contains("\\x"), "{shown}");
        assert_eq!(shown.trim_end_matches('…').len(), 128);
        let binary = [0xffu8; 300];
        let shown = identity(&binary).unwrap_or_default();
        assert_eq!(shown, format!("{}…", "\\xff".repeat(128)));
    }
}

/// `text` cut to at most `max` bytes on a character boundary, ending in `…` when cut (a
/// statement shown beside a participant).
pub fn shorten_text(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.len() <= max {
        return text.to_string();
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &text[..cut])
}
