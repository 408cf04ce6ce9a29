//! Free loopback ports. A port is handed out at most once per process, so parallel tests in one
//! binary never race for the same one; across processes (nextest runs each test in its own) a
//! port is claimed by binding an abstract Unix socket named after it, held until the process
//! ends. The kernel drops the claim with the process, so nothing is left behind, and two test
//! processes never start servers on the same port (one's server failing to bind while the
//! other's answers in its place).

use std::collections::HashSet;
use std::net::TcpListener;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::sync::Mutex;

static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
/// The claims of the ports given out, kept open for the process's life.
static CLAIMS: Mutex<Vec<UnixListener>> = Mutex::new(Vec::new());

/// Claims `port` for this process among all test processes on the machine.
fn claim(port: u16) -> bool {
    let Ok(name) = SocketAddr::from_abstract_name(format!("lockscope-test-port-{port}")) else {
        return true;
    };
    match UnixListener::bind_addr(&name) {
        Ok(listener) => {
            CLAIMS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(listener);
            true
        }
        Err(_) => false,
    }
}

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
        if given.get_or_insert_with(HashSet::new).insert(port) && claim(port) {
            return port;
        }
    }
}
