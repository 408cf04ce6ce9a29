//! What a force release comes to ([`Outcome`]) and how long each of its steps may take: the
//! vocabulary shared by each backend's compare-and-delete (`backends/*/release.rs`), the admin
//! layer that dispatches them and the HTTP layer that answers and audits them. Imports nothing
//! of the crate.

use serde_json::Value;

/// What a release attempt came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Deleted; `detail` says what.
    Released(Value),
    /// The named holder no longer holds (or never did); nothing was changed.
    HolderChanged(Value),
    /// This layout cannot be released safely.
    Unsupported(String),
    /// The server answered an error, or the attempt ran out of time part-way; the text says
    /// what is known to have changed (answered 502).
    Failed(String),
    /// No server that holds the lock could be asked (none known yet, every member down or
    /// answering MOVED); nothing was changed (answered 503).
    Unavailable(String),
}

/// Every connection a release opens gives up connecting after this long.
pub const RELEASE_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// Every command or statement a release sends gives up waiting for its answer after this long.
pub const RELEASE_COMMAND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl Outcome {
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Released(_) => "released",
            Outcome::HolderChanged(_) => "holder_changed",
            Outcome::Unsupported(_) => "unsupported",
            Outcome::Failed(_) => "failed",
            Outcome::Unavailable(_) => "unavailable",
        }
    }
}
