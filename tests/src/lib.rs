//! lockscope's integration-test support, real lock clients and the demo workload.
//!
//! * [`support`] starts real servers (ZooKeeper ensembles) and real Apache Curator clients on
//!   free loopback ports and stops them by PID;
//! * [`recipes`] holds the hand-written "seed" lock recipes in Rust;
//! * [`harness`] runs lockscope in-process and reads it over HTTP;
//! * [`churn`] keeps seed clients taking and releasing locks, for fault tests;
//! * [`db_scenarios`] runs a database lock scenario the same way on MariaDB and PostgreSQL.

pub mod bench;
pub mod churn;
pub mod db_scenarios;
pub mod harness;
pub mod recipes;
pub mod redis_recipes;
pub mod shedlock;
pub mod support;

/// A lock root no other test uses: `/<prefix>-<pid>-<counter>-<nanos>`.
pub fn unique_root(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("/{prefix}-{}-{n}-{nanos}", std::process::id())
}
