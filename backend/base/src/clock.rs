//! The wall clock every replica agrees on: this host's clock moved onto the clock of the store
//! the replicas share, once the store has measured how far apart they are
//! ([`set_clock_offset_ms`]), so that instants booked by different replicas compare.

use std::sync::atomic::{AtomicI64, Ordering};

/// Wall-clock now, epoch milliseconds, on the shared store's clock (this host's without a
/// PostgreSQL store).
pub fn now_ms() -> i64 {
    host_now_ms() + CLOCK_OFFSET_MS.load(Ordering::Relaxed)
}

/// This host's wall clock, epoch milliseconds (what the store measures against).
pub fn host_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The shared store's clock − this host's, ms (0 without a PostgreSQL store).
static CLOCK_OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// Sets what [`now_ms`] adds to this host's clock; only the store calls it.
pub fn set_clock_offset_ms(offset_ms: i64) {
    CLOCK_OFFSET_MS.store(offset_ms, Ordering::Relaxed);
}
