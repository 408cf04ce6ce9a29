//! Text for times and names: relative durations ("12 s"), absolute UTC instants for tooltips,
//! and short node names. Pure, so it is unit-tested on the host.

/// A duration in milliseconds as an on-call engineer reads it: `850 ms`, `12 s`, `3 m 04 s`,
/// `2 h 05 m`, `3 d 4 h`.
pub fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 1_000 {
        return format!("{ms} ms");
    }
    let s = ms / 1_000;
    if s < 60 {
        return format!("{s} s");
    }
    let (m, s) = (s / 60, s % 60);
    if m < 60 {
        return format!("{m} m {s:02} s");
    }
    let (h, m) = (m / 60, m % 60);
    if h < 24 {
        return format!("{h} h {m:02} m");
    }
    format!("{} d {} h", h / 24, h % 24)
}

/// An epoch-millisecond instant as `2026-11-22 14:05:09.123 UTC`.
pub fn instant_utc(ms: i64) -> String {
    let secs = ms.div_euclid(1_000);
    let millis = ms.rem_euclid(1_000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, mo, d) = civil_from_days(days);
    format!(
        "{y:04}-{mo:02}-{d:02} {:02}:{:02}:{:02}.{millis:03} UTC",
        rem / 3_600,
        rem % 3_600 / 60,
        rem % 60
    )
}

/// Howard Hinnant's days-to-civil conversion (proleptic Gregorian).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The last segment of a node path (`/app/locks/x/_c_…-lock-0000000012` → `_c_…-lock-0000000012`),
/// or the whole text when it has no `/` (Redis tokens).
pub fn leaf(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some((_, leaf)) if !leaf.is_empty() => leaf,
        _ => path,
    }
}

/// Cuts long identifiers in the middle so both ends stay readable.
pub fn middle_ellipsis(text: &str, max_chars: usize) -> String {
    let count = text.chars().count();
    if count <= max_chars || max_chars < 5 {
        return text.to_string();
    }
    let head = (max_chars - 1) / 2;
    let tail = max_chars - 1 - head;
    let start: String = text.chars().take(head).collect();
    let end: String = text.chars().skip(count - tail).collect();
    format!("{start}…{end}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration(-5), "0 ms");
        assert_eq!(duration(850), "850 ms");
        assert_eq!(duration(12_400), "12 s");
        assert_eq!(duration(184_000), "3 m 04 s");
        assert_eq!(duration(7_500_000), "2 h 05 m");
        assert_eq!(duration(3 * 86_400_000 + 4 * 3_600_000), "3 d 4 h");
    }

    #[test]
    fn instants_are_utc() {
        assert_eq!(instant_utc(0), "1970-01-01 00:00:00.000 UTC");
        assert_eq!(
            instant_utc(1_795_359_909_123),
            "2026-11-22 15:05:09.123 UTC"
        );
        assert_eq!(instant_utc(951_782_400_000), "2000-02-29 00:00:00.000 UTC");
    }

    #[test]
    fn names_shorten() {
        assert_eq!(leaf("/a/b/lock-0000000001"), "lock-0000000001");
        assert_eq!(leaf("token-abc"), "token-abc");
        assert_eq!(leaf("/"), "/");
        assert_eq!(middle_ellipsis("abcdefghijkl", 7), "abc…jkl");
        assert_eq!(middle_ellipsis("short", 7), "short");
        assert_eq!(middle_ellipsis("ééééééééé", 5), "éé…éé");
    }
}
