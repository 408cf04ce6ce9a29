//! lockscope's HTTP layer: the read API, live views and the event stream ([`http`]), the
//! Prometheus exposition ([`metrics`]), force release ([`admin`]: tokens, limits, the holder
//! check, the typed attempt and its audit), credentials ([`credentials`]), the HTTPS
//! certificate ([`server_tls`]) and the config sections it reads ([`config`]). It reads the
//! core and the store; it names no backend.

pub mod admin;
pub mod config;
pub mod credentials;
pub mod http;
pub mod metrics;
pub mod server_tls;
