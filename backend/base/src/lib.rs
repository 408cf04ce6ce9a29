//! What every layer of lockscope shares and that knows nothing of locks: the clock
//! ([`clock`]), redaction of passwords ([`redact`]) and the checks of TLS files a config names
//! ([`tls_files`]). Beneath the store and the core; the core re-exports it for the backends.

pub mod clock;
pub mod redact;
pub mod tls_files;

pub use clock::{host_now_ms, now_ms};
