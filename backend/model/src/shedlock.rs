//! ShedLock's records, as its providers write them into each store: the lock-until instant a
//! ZooKeeper node holds and the `ADDED:<time>@<host>[:<uuid>]` value of its Redis and etcd keys.
//!
//! Followed: lukas-krecan/ShedLock at commit 2495b1406d85323b8deadbe75d7a5dd3e8b8e844 (7.9.0 +
//! 14, August 2026; the providers' sources are unchanged since 7.9.0):
//!
//! * `shedlock-core/…/support/Utils.java` `toIsoString`: `DateTimeFormatterBuilder()
//!   .appendInstant(3)` in UTC, so always `YYYY-MM-DDTHH:MM:SS.mmmZ`; `getHostname()` is
//!   `InetAddress.getLocalHost().getHostName()` (or `unknown`), not escaped;
//! * `providers/zookeeper/shedlock-provider-zookeeper-curator/…/ZookeeperCuratorLockProvider.java`:
//!   a PERSISTENT node `<base path>/<name>` (`/shedlock/<name>` by default) whose data is only
//!   the lock-until instant; lock = `setData` conditional on the version read (or create),
//!   unlock = an unconditional `setData` of `max(now, lockAtLeastUntil)`; the node is never
//!   deleted, so an idle job keeps a node whose instant has passed;
//! * `providers/etcd/shedlock-provider-etcd-jetcd/…/EtcdLockProvider.java`: the key
//!   `shedlock:<env>:<name>` valued `ADDED:<time>@<host>`, bound to a lease of
//!   `ceil(lockAtMostFor)` seconds that nothing keeps alive;
//! * `providers/redis/shedlock-support-redis/…/InternalRedisLockProvider.java`:
//!   `job-lock:<env>:<name>` valued `ADDED:<time>@<host>:<uuid>` (the uuid since 6.7.0), with a
//!   PX expiry.
//!
//! Nothing in ShedLock waits: a job that finds the lock taken skips its run, so no store ever
//! shows a waiter. Pure functions, fuzzed with the decoders that use them.

use crate::time::{format_naive_utc, parse_naive_utc};

/// An instant as `Instant.parse` reads ShedLock's: `YYYY-MM-DDTHH:MM:SS[.f…]Z` (ShedLock always
/// writes three fraction digits; any number up to nine is read, kept to the millisecond).
pub fn parse_instant(text: &str) -> Option<i64> {
    let body = text.strip_suffix('Z')?;
    let (whole, fraction) = match body.split_once('.') {
        Some((whole, fraction)) => (whole, fraction),
        None => (body, ""),
    };
    if fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if body.contains('.') && fraction.is_empty() {
        return None;
    }
    let ms = fraction
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(3)
        .fold(0i64, |acc, b| acc * 10 + i64::from(b - b'0'));
    Some(parse_naive_utc(whole)? + ms)
}

/// Epoch ms as ShedLock writes an instant: `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn format_instant(ms: i64) -> String {
    format!("{}.{:03}Z", format_naive_utc(ms), ms.rem_euclid(1000))
}

/// The lock-until instant of a ShedLock ZooKeeper node, from its data (`None`: not one).
pub fn parse_until(data: &[u8]) -> Option<i64> {
    parse_instant(std::str::from_utf8(data).ok()?)
}

/// A ShedLock Redis or etcd value, `ADDED:<time>@<host>[:<uuid>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShedLockValue {
    /// When the lock was taken (the holder's clock), epoch ms. An extension keeps it.
    pub added_ms: i64,
    /// The host that took it (`InetAddress.getLocalHost().getHostName()`).
    pub host: String,
    /// The acquisition's random id (Redis, since 6.7.0).
    pub uuid: Option<String>,
}

fn is_uuid(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// Reads a ShedLock value; `None` for anything else. The host is everything between `@` and
/// the trailing `:<uuid>` (a host name is not escaped, so it is taken as the greedy middle).
pub fn parse_value(value: &[u8]) -> Option<ShedLockValue> {
    let text = std::str::from_utf8(value).ok()?;
    let rest = text.strip_prefix("ADDED:")?;
    let (at, holder) = rest.split_once('@')?;
    let added_ms = parse_instant(at)?;
    let (host, uuid) = match holder.rsplit_once(':') {
        Some((host, uuid)) if is_uuid(uuid) => (host, Some(uuid.to_string())),
        _ => (holder, None),
    };
    if host.is_empty() {
        return None;
    }
    Some(ShedLockValue {
        added_ms,
        host: host.to_string(),
        uuid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_read_as_java_writes_them() {
        let ms = parse_instant("2025-06-01T10:05:00.123Z").expect("an instant");
        assert_eq!(format_instant(ms), "2025-06-01T10:05:00.123Z");
        assert_eq!(ms % 1000, 123);
        assert_eq!(parse_instant("2025-06-01T10:05:00Z"), Some(ms - 123));
        assert_eq!(parse_instant("2025-06-01T10:05:00.1Z"), Some(ms - 23));
        assert_eq!(parse_instant("2025-06-01T10:05:00.123456789Z"), Some(ms));
        for bad in [
            "",
            "2025-06-01T10:05:00.123",
            "2025-06-01T10:05:00.Z",
            "2025-06-01T10:05:00.1234567890Z",
            "2025-06-01 10:05:00Z",
            "2025-13-01T10:05:00Z",
            "2025-06-01T10:05:00.12aZ",
        ] {
            assert_eq!(parse_instant(bad), None, "{bad}");
        }
        assert_eq!(format_instant(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_instant(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(parse_until(b"\xff"), None);
    }

    #[test]
    fn values_before_and_since_6_7_0() {
        let since = parse_value(
            b"ADDED:2025-06-01T10:00:00.123Z@app:node-1:3f0c1e2d-0000-4000-8000-00000000abcd",
        )
        .expect("a value since 6.7.0");
        assert_eq!(since.host, "app:node-1");
        assert_eq!(
            since.uuid.as_deref(),
            Some("3f0c1e2d-0000-4000-8000-00000000abcd")
        );
        assert_eq!(format_instant(since.added_ms), "2025-06-01T10:00:00.123Z");
        let before = parse_value(b"ADDED:2025-06-01T10:00:00.123Z@app-node-1").expect("a value");
        assert_eq!((before.host.as_str(), before.uuid), ("app-node-1", None));
        for bad in [
            &b"ADDED:2025-06-01T10:00:00.123Z@"[..],
            b"ADDED:yesterday@host",
            b"2025-06-01T10:00:00.123Z@host",
            b"ADDED:2025-06-01T10:00:00.123Z",
            b"ADDED:\xff@h",
        ] {
            assert_eq!(parse_value(bad), None);
        }
    }
}
