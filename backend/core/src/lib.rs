//! The neutral core of lockscope: the lock table ([`aggregate`]: one task owns lock state,
//! the ledger, the metrics state), what every collector shares ([`collect`]: the outbox to the
//! table, backoff, silence), what a force release comes to ([`release`]), and the contract a
//! backend fulfils ([`backend`]). It knows no backend: the backend crates depend on it, never
//! the reverse. The clock, redaction and TLS file checks come from `lockscope-base` and are
//! re-exported here so a backend depends on the core alone.

pub mod aggregate;
pub mod backend;
pub mod collect;
pub mod release;

pub use lockscope_base::clock::now_ms;
pub use lockscope_base::{clock, redact, tls_files};
