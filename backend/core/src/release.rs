//! What a force release comes to ([`Outcome`]) and how long each of its steps may take: the
//! vocabulary shared by each backend's compare-and-delete (each backend crate's `release.rs`), the admin
//! layer that dispatches them through [`Releasers`] and the HTTP layer that answers them.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use lockscope_model::wire::{HolderView, LockView, ReleaseRequest};
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

/// A backend's force release of one source: the compare-and-delete of exactly the holder the
/// operator saw, waking the waiters the library's own way. Each backend crate implements it;
/// the admin layer calls it through [`Releasers`] without knowing which backend it is.
pub trait Releaser: Send + Sync {
    /// Releases `holder` of `lock` if it still holds what `request` names. `members`: the
    /// servers the source's model has discovered (`SourceModel::members`), for backends whose
    /// release must ask the one that holds the lock.
    fn release<'a>(
        &'a self,
        lock: &'a LockView,
        holder: &'a HolderView,
        request: &'a ReleaseRequest,
        members: &'a [String],
    ) -> BoxFuture<'a, Outcome>;
}

/// Every configured source's [`Releaser`], by source name (built by the registry).
#[derive(Clone, Default)]
pub struct Releasers(Arc<BTreeMap<String, Arc<dyn Releaser>>>);

impl Releasers {
    pub fn new(by_source: BTreeMap<String, Arc<dyn Releaser>>) -> Self {
        Releasers(Arc::new(by_source))
    }

    /// Releases `holder` of `lock` with its source's release.
    pub async fn release(
        &self,
        lock: &LockView,
        holder: &HolderView,
        request: &ReleaseRequest,
        members: &[String],
    ) -> Outcome {
        match self.0.get(&lock.source) {
            Some(releaser) => releaser.release(lock, holder, request, members).await,
            None => Outcome::Failed(format!("no source {:?}", lock.source)),
        }
    }
}

impl std::fmt::Debug for Releasers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}
