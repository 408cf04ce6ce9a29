//! Text for times and names: relative durations ("12 s"), absolute UTC instants for tooltips,
//! short node names, release causes, and the anchors of session rows. Pure, so it is
//! unit-tested on the host.

use lockscope_model::wire::ReleaseCause;

/// A duration in milliseconds as an on-call engineer reads it: `850 ms`, `12 s`, `3 m 04 s`,
/// `2 h 05 m`, `3 d 4 h` (the model's, shared with `lockscope top`).
pub fn duration(ms: i64) -> String {
    lockscope_model::time::duration_text(ms)
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

/// An instant as a clock `offset_min` minutes east of UTC shows it, with that offset:
/// `2026-11-22 15:05:09.123 UTC+01:00` (the browser's local time: its offset at that instant).
pub fn instant_at_offset(ms: i64, offset_min: i32) -> String {
    let local = instant_utc(ms + i64::from(offset_min) * 60_000);
    let sign = if offset_min < 0 { '-' } else { '+' };
    let off = offset_min.unsigned_abs();
    format!("{local}{sign}{:02}:{:02}", off / 60, off % 60)
}

/// The time of day of an instant at `offset_min` east of UTC, `HH:MM:SS`: what a table row
/// shows beside a duration, to line up with logs.
pub fn clock_at_offset(ms: i64, offset_min: i32) -> String {
    let secs = (ms + i64::from(offset_min) * 60_000).div_euclid(1_000);
    let rem = secs.rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", rem / 3_600, rem % 3_600 / 60, rem % 60)
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

/// A lock's short name where space is scarce: the last segment of a node path, but a database
/// lock's path without its kind (`/rows/app.jobs/PRIMARY/1` → `app.jobs/PRIMARY/1`, whose last
/// segment alone would say nothing).
pub fn lock_label(path: &str) -> String {
    for kind in [
        "/rows/",
        "/get_lock/",
        "/advisory/",
        "/tables/",
        "/table_locks/",
        "/transactions/",
    ] {
        if let Some(rest) = path.strip_prefix(kind) {
            return rest.to_string();
        }
    }
    leaf(path).to_string()
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

/// A release cause as the timeline shows it, and what it means (for a tooltip).
pub fn cause_label(cause: ReleaseCause) -> (&'static str, &'static str) {
    match cause {
        ReleaseCause::Released => ("released", "The holder released it itself."),
        ReleaseCause::SessionClosed => ("session closed", "The holder's client closed its session."),
        ReleaseCause::SessionExpired => (
            "session expired",
            "The holder's session expired: its client vanished or stalled past the session timeout.",
        ),
        ReleaseCause::TtlExpired => ("TTL ran out", "The lock key's TTL ran out before anyone renewed it."),
        ReleaseCause::LeaseExpired => (
            "lease expired",
            "The lease the key was bound to ran out: the holder stopped keeping it alive.",
        ),
        ReleaseCause::Forced => ("force-released", "An operator force-released it."),
        ReleaseCause::ConnectionClosed => (
            "connection closed",
            "The holder's database connection ended: its transaction rolled back and its locks went.",
        ),
        ReleaseCause::Killed => (
            "connection killed",
            "The holder's database connection was killed (KILL / pg_terminate_backend).",
        ),
        ReleaseCause::Timeout => (
            "timed out",
            "The database's own timeout ended it (lock wait timeout, GET_LOCK timeout).",
        ),
    }
}

/// The `id` of a session's row on the sessions page: `/sessions#<anchor>` links to it.
/// Characters other than ASCII letters, digits, `-` and `_` become `_`, so any source or
/// session name gives a valid fragment.
pub fn session_anchor(source: &str, session: &str) -> String {
    let clean = |t: &str| -> String {
        t.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    format!("session-{}--{}", clean(source), clean(session))
}

/// A statement cut to `max_chars` on one line (whitespace runs become one space).
pub fn one_line(text: &str, max_chars: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max_chars {
        return flat;
    }
    let mut cut: String = flat.chars().take(max_chars.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Whether `text` is the ZooKeeper session `session` (`0x…`) written in decimal, as some
/// clients store it in their lock nodes (`72057745862754304` for `0x100002359770000`).
pub fn is_session_in_decimal(text: &str, session: &str) -> bool {
    let text = text.trim();
    if text.is_empty()
        || !text
            .bytes()
            .enumerate()
            .all(|(i, b)| b.is_ascii_digit() || (i == 0 && b == b'-'))
    {
        return false;
    }
    let Some(id) = session
        .strip_prefix("0x")
        .and_then(|_| lockscope_model::parse_session_hex(session))
    else {
        return false;
    };
    text.parse::<i64>().ok() == Some(id) || text.parse::<u64>().ok() == Some(id as u64)
}

/// A participant's identity as the UI shows it: `None` when it only repeats its session (a
/// ZooKeeper session id written in decimal), so the session is shown once, in the `0x…` hex
/// ZooKeeper's own tools print, and never in two notations.
pub fn identity_label(identity: Option<&str>, session: &str) -> Option<String> {
    identity
        .filter(|i| !is_session_in_decimal(i, session))
        .map(str::to_string)
}

/// A database statement's kind (`StatementView::kind`) as a short badge label.
pub fn statement_kind_label(kind: &str) -> &str {
    match kind {
        "ddl" => "DDL",
        "dml" => "DML",
        "read" => "read",
        "idle" => "idle in transaction",
        other => other,
    }
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
        assert_eq!(lock_label("/rows/app.jobs/PRIMARY/1"), "app.jobs/PRIMARY/1");
        assert_eq!(lock_label("/advisory/postgres/(1,2)"), "postgres/(1,2)");
        assert_eq!(lock_label("/app/locks/job"), "job");
        assert_eq!(middle_ellipsis("abcdefghijkl", 7), "abc…jkl");
        assert_eq!(middle_ellipsis("short", 7), "short");
        assert_eq!(middle_ellipsis("ééééééééé", 5), "éé…éé");
    }

    #[test]
    fn causes_read_as_words() {
        for c in ReleaseCause::ALL {
            let (label, why) = cause_label(c);
            assert!(!label.contains('_') && !why.is_empty(), "{c:?}");
        }
        assert_eq!(
            cause_label(ReleaseCause::ConnectionClosed).0,
            "connection closed"
        );
        assert_eq!(cause_label(ReleaseCause::Killed).0, "connection killed");
        assert_eq!(cause_label(ReleaseCause::Timeout).0, "timed out");
    }

    #[test]
    fn anchors_and_statements() {
        assert_eq!(session_anchor("maria", "12"), "session-maria--12");
        assert_eq!(session_anchor("zk 1", "0x1a/b"), "session-zk_1--0x1a_b");
        assert_eq!(one_line("SELECT *\n  FROM t", 40), "SELECT * FROM t");
        assert_eq!(one_line("abcdefghij", 5), "abcd…");
    }

    #[test]
    fn zookeeper_sessions_are_written_in_hex_only() {
        // 72057745862754304 is 0x100002359770000: the demo's clients store it as node data.
        assert!(is_session_in_decimal(
            "72057745862754304",
            "0x100002359770000"
        ));
        assert_eq!(
            identity_label(Some("72057745862754304"), "0x100002359770000"),
            None
        );
        // A session id past i64::MAX reads back from its unsigned decimal too.
        let high = lockscope_model::session_hex(-0x6fff_ffff_ffff_fff1);
        let unsigned = (-0x6fff_ffff_ffff_fff1_i64 as u64).to_string();
        assert!(is_session_in_decimal(&unsigned, &high));
        assert!(is_session_in_decimal("-8070450532247928817", &high));
        // Anything else is the participant's own word and stays.
        assert_eq!(
            identity_label(Some("orders-worker-0"), "0x1"),
            Some("orders-worker-0".into())
        );
        assert_eq!(identity_label(Some("2"), "0x1"), Some("2".into()));
        assert!(
            !is_session_in_decimal("1", "1"),
            "a connection id is not hex"
        );
        assert!(!is_session_in_decimal("", "0x0"));
        assert_eq!(lock_label("/table_locks/app/orders"), "app/orders");
        assert_eq!(statement_kind_label("ddl"), "DDL");
        assert_eq!(statement_kind_label("idle"), "idle in transaction");
    }

    #[test]
    fn instants_line_up_with_logs_in_utc_and_at_an_offset() {
        let ms = 1_795_000_000_123;
        assert_eq!(instant_utc(ms), "2026-11-18 11:06:40.123 UTC");
        assert_eq!(
            instant_at_offset(ms, 60),
            "2026-11-18 12:06:40.123 UTC+01:00"
        );
        assert_eq!(
            instant_at_offset(ms, -330),
            "2026-11-18 05:36:40.123 UTC-05:30"
        );
        assert_eq!(
            instant_at_offset(ms, 0),
            "2026-11-18 11:06:40.123 UTC+00:00"
        );
        assert_eq!(clock_at_offset(ms, 0), "11:06:40");
        assert_eq!(clock_at_offset(ms, -720), "23:06:40");
    }
}
