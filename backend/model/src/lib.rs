//! lockscope's lock domain, shared by the server and the web UI.
//!
//! This crate owns what a lock *is* for lockscope: the recipe decoders that turn what a
//! coordination server holds into holders and ordered waiter queues ([`zk`], [`redis`],
//! [`etcd`], [`database`]; ShedLock's records in [`shedlock`]), the stable lock identifiers ([`id`]), the stale-lock and deadlock rules
//! ([`rules`]), the stuck thresholds ([`stuck`]), the bound on values read from a server ([`clip`]), the wire types of the HTTP
//! API and event stream ([`wire`]) and the limits of a force-release request ([`release`]).
//!
//! It knows nothing about ZooKeeper connections, Redis, etcd, HTTP or async runtimes: everything
//! here is a pure function of data, so it is tested with tables and builds for `wasm32`.

pub mod clip;
pub mod database;
pub mod etcd;
pub mod id;
pub mod redis;
pub mod release;
pub mod rules;
pub mod shedlock;
pub mod stuck;
pub mod time;
pub mod wire;
pub mod zk;

/// Formats a ZooKeeper session id the way ZooKeeper's own tools print it (`0x` + lower hex).
pub fn session_hex(session: i64) -> String {
    format!("0x{:x}", session as u64)
}

/// Parses `0x…` (or bare hex) back into a session id.
pub fn parse_session_hex(text: &str) -> Option<i64> {
    let digits = text
        .trim()
        .trim_start_matches("0x")
        .trim_start_matches("0X");
    u64::from_str_radix(digits, 16).ok().map(|v| v as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_hex_round_trips_including_high_bit() {
        for id in [0x1000001234_i64, -0x6fff_ffff_ffff_fff1, 1] {
            assert_eq!(parse_session_hex(&session_hex(id)), Some(id));
        }
        assert_eq!(session_hex(0x100abc), "0x100abc");
        assert_eq!(parse_session_hex("zz"), None);
    }
}
