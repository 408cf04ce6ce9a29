//! `fourlw`: the server's parsers of ZooKeeper's four-letter-word answers (`cons`, `wchp`,
//! `wchs`, `mntr`, `dump`), all on the same text (any bytes, read as the client reads them:
//! UTF-8 with invalid sequences replaced).
//!
//! Checks, besides "no panic": every `wchp` path starts with `/` and names at least one session;
//! `mntr` keys and values are trimmed; a `wchs` total is the number on its `Total watches:` line.

use lockscope_zookeeper::fourlw::{
    parse_cons, parse_dump_sessions, parse_mntr, parse_wchp, parse_wchs_total,
};

pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    crate::show(&text);
    let _ = parse_cons(&text);
    for (path, sessions) in parse_wchp(&text) {
        assert!(path.starts_with('/'), "wchp path {path:?}");
        assert!(!sessions.is_empty(), "wchp path {path:?} without sessions");
    }
    if let Some(total) = parse_wchs_total(&text) {
        assert!(text.contains("Total watches:"));
        assert!(text.contains(&total.to_string()) || total == 0);
    }
    for (key, value) in parse_mntr(&text) {
        assert_eq!(key.trim(), key);
        assert_eq!(value.trim(), value);
    }
    let _ = parse_dump_sessions(&text);
}
