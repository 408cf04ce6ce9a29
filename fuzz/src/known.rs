//! Findings already reported, and how the harnesses step around them while they stand.
//!
//! Each predicate recognises exactly the inputs of one finding, so a fuzz run keeps exploring
//! everything else instead of stopping at the same crash again. When the decoder is fixed,
//! delete the predicate and its uses; `LOCKSCOPE_FUZZ_STRICT=1` (`scripts/fuzz --strict`) turns
//! every predicate off, to confirm a finding still reproduces (or that a fix holds).

/// Whether known findings are to be reported again (`LOCKSCOPE_FUZZ_STRICT=1`).
pub fn strict() -> bool {
    static STRICT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *STRICT.get_or_init(|| std::env::var_os("LOCKSCOPE_FUZZ_STRICT").is_some_and(|v| v == "1"))
}

/// True when `condition` names a known finding and the run is not strict.
fn known(condition: bool) -> bool {
    condition && !strict()
}

/// **Finding 1 (`redis::display_bytes`).** Text that already contains `\xNN` (a backslash, `x` and
/// two characters `u8::from_str_radix(_, 16)` accepts, `+f` included) is shown unescaped, so
/// `parse_display_bytes` reads it back as one byte: the key `lock:\x41` is shown as the path
/// `lock:\x41`, and the admin router's `parse_display_bytes(path)` names the key `lock:A`.
/// The same holds for holder ids (a token `a\x41`). True when `raw` has such text.
pub fn display_ambiguous(raw: &[u8]) -> bool {
    known(raw.utf8_chunks().any(|chunk| {
        let valid = chunk.valid();
        valid.match_indices("\\x").any(|(i, _)| {
            valid
                .get(i + 2..i + 4)
                .is_some_and(|h| u8::from_str_radix(h, 16).is_ok())
        })
    }))
}

/// **Finding 3 (`redis::as_epoch_ms`).** `(value - now_ms).abs()` overflows (a panic in debug
/// builds, a wrapped answer in release) for a string value that is an integer far below zero,
/// e.g. `-9223372036854775808` under any lock key with a real clock, or for an extreme clock.
/// True when the key's value is such an integer.
pub fn epoch_overflow(read: &lockscope_model::redis::KeyRead, now: i64) -> bool {
    let lockscope_model::redis::RedisValue::String(value) = &read.value else {
        return false;
    };
    let number = std::str::from_utf8(value)
        .ok()
        .and_then(|t| t.trim().parse::<i64>().ok());
    known(number.is_some_and(|v| v.checked_sub(now).and_then(i64::checked_abs).is_none()))
}

/// **Finding 2 (`redis::locks_of_companion`).** A key that itself starts with a Redisson
/// companion prefix (`redisson_lock_queue:`, `redisson_lock_timeout:`, `redisson_lock_token:`)
/// and has a `{`: its permit-timeouts companion `<key>:timeout` is taken for a prefix companion
/// and names `<rest>:timeout`, not the key. True for that companion of such a key.
pub fn companion_of_companion(key: &[u8], companion: &[u8]) -> bool {
    let prefixed = [
        &b"redisson_lock_queue:"[..],
        b"redisson_lock_timeout:",
        b"redisson_lock_token:",
    ]
    .iter()
    .any(|p| key.starts_with(p));
    known(
        prefixed
            && key.contains(&b'{')
            && companion.ends_with(b":timeout")
            && companion.starts_with(key),
    )
}

/// **Finding 4 (`zk::containers_for_change`).** Whether a node is part of a kazoo semaphore
/// depends on a sibling: `P-__lock__` is internal while `P` exists, and `P`'s children are lease
/// holders (internal) while `P-__lock__` exists. A change of `P` does not re-decode `P-__lock__`,
/// and a change of `P-__lock__` does not re-decode `P`'s children, so the aggregator keeps a
/// stale lock (or misses one) until the next resync: e.g. create `/s-__lock__` and
/// `/s-__lock__-__lock__` (ephemeral), delete `/s-__lock__`, and the exclusive lock
/// `/s-__lock__-__lock__` is never decoded. True when every container on which the kept locks
/// and a full decode disagree after a change of `path` is one of those two kinds.
pub fn stale_after_change(
    path: &str,
    kept: &std::collections::BTreeMap<String, Vec<lockscope_model::zk::DecodedLock>>,
    full: &std::collections::BTreeMap<String, Vec<lockscope_model::zk::DecodedLock>>,
) -> bool {
    let sibling_lock = format!("{path}-__lock__");
    let semaphore = path.strip_suffix("-__lock__");
    let explained = |container: &str| {
        container == sibling_lock
            || semaphore.is_some_and(|s| {
                lockscope_model::zk::split_parent(container).is_some_and(|(parent, _)| parent == s)
            })
    };
    let differing = kept
        .keys()
        .chain(full.keys())
        .filter(|c| kept.get(*c) != full.get(*c));
    let mut any = false;
    for c in differing {
        if !explained(c) {
            return false;
        }
        any = true;
    }
    known(any)
}

/// **Finding 5 (`collect::zk::fourlw::parse_java_date`, via `parse_dump_sessions`).** A `dump`
/// expiry line whose date has a huge day, year or time field (`1 expire at Sun Nov 22 12:51:38
/// UTC 300000000000000:`) overflows the civil-date arithmetic: a panic in debug builds, a
/// wrapped deadline in release. True when some ` expire at ` line of `text` is such a date.
#[cfg(feature = "server")]
pub fn java_date_overflow(text: &str) -> bool {
    known(text.lines().any(|line| {
        line.split_once(" expire at ")
            .is_some_and(|(_, date)| java_date_overflows(date.trim_end_matches(':')))
    }))
}

/// The arithmetic of `parse_java_date`, checked: true when the parser reaches it with numbers
/// that overflow.
#[cfg(feature = "server")]
fn java_date_overflows(text: &str) -> bool {
    let parts: Vec<&str> = text.split_whitespace().collect();
    let [_, month, day, time, zone, year] = parts.as_slice() else {
        return false;
    };
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (Some(month), Ok(day), Ok(year)) = (
        MONTHS.iter().position(|m| m == month),
        day.parse::<i64>(),
        year.parse::<i64>(),
    ) else {
        return false;
    };
    if *zone != "UTC" && *zone != "GMT" {
        return false;
    }
    let mut hms = time.split(':').map(|v| v.parse::<i64>());
    let (Some(Ok(h)), Some(Ok(m)), Some(Ok(sec))) = (hms.next(), hms.next(), hms.next()) else {
        return false;
    };
    let month = month as i64 + 1;
    let checked = || -> Option<i64> {
        let y = if month <= 2 {
            year.checked_sub(1)?
        } else {
            year
        };
        let era = y.div_euclid(400);
        let yoe = y.checked_sub(era.checked_mul(400)?)?;
        let mp = (month + 9) % 12;
        let doy = ((153 * mp + 2) / 5).checked_add(day)?.checked_sub(1)?;
        let doe = (yoe * 365 + yoe / 4 - yoe / 100).checked_add(doy)?;
        let days = era
            .checked_mul(146_097)?
            .checked_add(doe)?
            .checked_sub(719_468)?;
        days.checked_mul(24)?
            .checked_add(h)?
            .checked_mul(60)?
            .checked_add(m)?
            .checked_mul(60_000)?
            .checked_add(sec.checked_mul(1000)?)
    };
    checked().is_none()
}
