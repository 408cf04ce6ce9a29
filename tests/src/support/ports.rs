//! Free loopback ports. A port is handed out at most once per process, so parallel tests in one
//! binary never race for the same one; across processes a bind collision is retried by callers.

use std::collections::HashSet;
use std::net::TcpListener;
use std::sync::Mutex;

static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A port on 127.0.0.1 that was free a moment ago and was not given out before.
pub fn free_port() -> u16 {
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or(0);
        if port == 0 {
            continue;
        }
        let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
        if given.get_or_insert_with(HashSet::new).insert(port) {
            return port;
        }
    }
}
