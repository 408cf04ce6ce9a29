//! Force release: tokens, the rate limit, and the check that the named holder is the one
//! lockscope sees now; then each backend's own compare-and-delete (`backends/*/release.rs`,
//! the only code in lockscope that changes anything in a watched system), reached through the
//! registry ([`crate::backends::Releasers`]).
//!
//! A release names the holder the operator saw and deletes exactly that holder, atomically
//! checked on the server. The HTTP layer (`http/admin.rs`) authenticates, rate-limits
//! and writes the audit record for every attempt; this module only decides and executes.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use lockscope_model::wire::{LockView, ReleaseRequest};
use serde_json::json;
use tokio::sync::Mutex;

use crate::config::Config;

pub use crate::release::{Outcome, RELEASE_COMMAND_TIMEOUT, RELEASE_CONNECT_TIMEOUT};

/// Why a request was not let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// No bearer token.
    Unauthorized,
    /// A token that is not allowed here.
    Forbidden,
}

/// Token bucket over all callers.
struct RateLimiter {
    capacity: f64,
    tokens: f64,
    per_second: f64,
    last: Instant,
}

impl RateLimiter {
    fn new(per_minute: u32) -> Self {
        let capacity = f64::from(per_minute.max(1));
        RateLimiter {
            capacity,
            tokens: capacity,
            per_second: capacity / 60.0,
            last: Instant::now(),
        }
    }

    fn refill(&mut self) {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.last).as_secs_f64() * self.per_second)
            .min(self.capacity);
        self.last = now;
    }

    fn allow(&mut self) -> bool {
        self.refill();
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Whether a token is left, without taking it.
    fn has_room(&mut self) -> bool {
        self.refill();
        self.tokens >= 1.0
    }

    fn is_full(&mut self) -> bool {
        self.refill();
        self.tokens >= self.capacity
    }
}

/// Client addresses tracked by [`ClientLimiter`] at most; past it, new addresses share one bucket.
pub const MAX_TRACKED_CLIENTS: usize = 4096;
/// A client refused by [`ClientLimiter`] gets one audit record per this long; the rest of its
/// refusals are only counted (`lockscope_force_releases_total{outcome="rate_limited"}`).
pub const REFUSAL_RECORD_EVERY: Duration = Duration::from_secs(60);

/// Per client address: a token bucket of failed authentications, checked before a request's
/// credentials are looked at, so guessing tokens or flooding the audit log costs time.
struct ClientLimiter {
    per_minute: u32,
    clients: HashMap<IpAddr, ClientBucket>,
}

struct ClientBucket {
    bucket: RateLimiter,
    /// When a refusal of this client was last written to the audit log.
    recorded: Option<Instant>,
}

/// What [`Admin::client_gate`] says of a request before authentication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Go on to authentication.
    Open,
    /// Refuse; `record`: write this refusal to the audit log (the first of its window).
    Closed { record: bool },
}

impl ClientLimiter {
    /// The bucket of `client`; past [`MAX_TRACKED_CLIENTS`], after dropping buckets that are
    /// full again (clients that stopped failing), new clients share the unspecified address's.
    fn bucket(&mut self, client: IpAddr) -> &mut ClientBucket {
        let mut key = client;
        if !self.clients.contains_key(&key) && self.clients.len() >= MAX_TRACKED_CLIENTS {
            self.clients.retain(|_, c| !c.bucket.is_full());
            if self.clients.len() >= MAX_TRACKED_CLIENTS {
                key = IpAddr::from([0u8; 16]);
            }
        }
        let per_minute = self.per_minute;
        self.clients.entry(key).or_insert_with(|| ClientBucket {
            bucket: RateLimiter::new(per_minute),
            recorded: None,
        })
    }

    fn gate(&mut self, client: IpAddr) -> Gate {
        let entry = self.bucket(client);
        if entry.bucket.has_room() {
            return Gate::Open;
        }
        let record = entry
            .recorded
            .is_none_or(|at| at.elapsed() >= REFUSAL_RECORD_EVERY);
        if record {
            entry.recorded = Some(Instant::now());
        }
        Gate::Closed { record }
    }

    fn failed(&mut self, client: IpAddr) {
        self.bucket(client).bucket.allow();
    }
}

pub struct Admin {
    pub enabled: bool,
    /// Admin tokens (clear or bcrypt hashes).
    tokens: crate::credentials::CredentialSet,
    /// Each backend's release (the registry builds them).
    releasers: crate::backends::Releasers,
    limiter: Mutex<RateLimiter>,
    clients: Mutex<ClientLimiter>,
    by_outcome: Mutex<BTreeMap<String, u64>>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("enabled", &self.enabled)
            .field("tokens", &self.tokens)
            .finish_non_exhaustive()
    }
}

/// The tokens of a list (each clear or a bcrypt hash), as the set that checks them.
fn tokens(list: &[crate::config::TokenConfig]) -> crate::credentials::CredentialSet {
    list.iter()
        .fold(Default::default(), |set, t| match t.stored() {
            Some(secret) => set.bearer(&t.name, secret),
            None => set,
        })
}

/// The token of an `Authorization: Bearer …` header value.
pub fn bearer(header: Option<&str>) -> Option<&str> {
    let value = header?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

impl Admin {
    pub fn new(config: &Config) -> Admin {
        Admin {
            enabled: config.admin.enabled,
            tokens: tokens(&config.admin.tokens),
            releasers: crate::backends::Releasers::new(config),
            limiter: Mutex::new(RateLimiter::new(config.admin.max_releases_per_minute)),
            clients: Mutex::new(ClientLimiter {
                per_minute: config.admin.max_failed_auth_per_minute,
                clients: HashMap::new(),
            }),
            by_outcome: Mutex::new(BTreeMap::new()),
        }
    }

    /// The admin token's name for an `Authorization` header (a hashed token is verified
    /// once, then remembered: [`crate::credentials`]).
    pub async fn authorize(&self, header: Option<&str>) -> Result<String, Denied> {
        let token = bearer(header).ok_or(Denied::Unauthorized)?;
        self.tokens
            .check_bearer(token)
            .await
            .ok_or(Denied::Forbidden)
    }

    /// Before authentication: whether `client` may try (it has not failed authentication too
    /// often lately).
    pub async fn client_gate(&self, client: IpAddr) -> Gate {
        self.clients.lock().await.gate(client)
    }

    /// `client` failed authentication: it uses up one of its tries.
    pub async fn client_failed(&self, client: IpAddr) {
        self.clients.lock().await.failed(client);
    }

    pub async fn allow_rate(&self) -> bool {
        self.limiter.lock().await.allow()
    }

    /// Counts an attempt's outcome for `/metrics`.
    pub async fn count(&self, outcome: &str) {
        *self
            .by_outcome
            .lock()
            .await
            .entry(outcome.to_string())
            .or_default() += 1;
    }

    /// `lockscope_force_releases_total{outcome}` in exposition format.
    /// Force-release attempts so far by outcome, every outcome listed.
    pub async fn outcome_counts(&self) -> Vec<(&'static str, u64)> {
        let counts = self.by_outcome.lock().await;
        [
            "released",
            "holder_changed",
            "not_found",
            "unauthorized",
            "forbidden",
            "invalid",
            "rate_limited",
            "too_large",
            "unsupported",
            "failed",
            "unavailable",
            "store_unavailable",
            "disabled",
        ]
        .into_iter()
        .map(|outcome| (outcome, counts.get(outcome).copied().unwrap_or(0)))
        .collect()
    }

    /// Releases `request.holder` of `lock` (as lockscope sees it now) if that holder still holds.
    /// `members` are the Redis source's member URLs (unused for ZooKeeper).
    pub async fn release(
        &self,
        lock: &LockView,
        request: &ReleaseRequest,
        members: &[String],
    ) -> Outcome {
        let Some(holder) = lock.holders.iter().find(|h| h.node == request.holder) else {
            return Outcome::HolderChanged(json!({
                "message": "that holder does not hold this lock now",
                "current_holders": lock.holders.iter().map(|h| &h.node).collect::<Vec<_>>(),
            }));
        };
        if request
            .session
            .as_ref()
            .is_some_and(|s| *s != holder.session)
        {
            return Outcome::HolderChanged(json!({
                "message": "the holder belongs to another session now",
                "current_session": holder.session,
            }));
        }
        self.releasers.release(lock, holder, request, members).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_and_secrets() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(None), None);
    }

    #[test]
    fn each_client_has_its_own_failed_authentication_budget() {
        let mut limiter = ClientLimiter {
            per_minute: 2,
            clients: HashMap::new(),
        };
        let (a, b) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        assert_eq!(limiter.gate(a), Gate::Open);
        limiter.failed(a);
        limiter.failed(a);
        // Refused, the first refusal of the window recorded, the next ones only counted.
        assert_eq!(limiter.gate(a), Gate::Closed { record: true });
        assert_eq!(limiter.gate(a), Gate::Closed { record: false });
        assert_eq!(limiter.gate(b), Gate::Open);
    }

    #[test]
    fn tracked_clients_are_bounded() {
        let mut limiter = ClientLimiter {
            per_minute: 1,
            clients: HashMap::new(),
        };
        for i in 0..(MAX_TRACKED_CLIENTS as u32 + 500) {
            let client = IpAddr::from(i.to_be_bytes());
            limiter.failed(client);
        }
        assert!(limiter.clients.len() <= MAX_TRACKED_CLIENTS + 1);
        // Clients past the cap share a bucket: the late ones are refused together.
        let late = IpAddr::from((MAX_TRACKED_CLIENTS as u32 + 499).to_be_bytes());
        assert!(matches!(limiter.gate(late), Gate::Closed { .. }));
    }

    #[test]
    fn rate_limiter_refuses_a_burst_beyond_capacity() {
        let mut limiter = RateLimiter::new(3);
        assert!(limiter.allow() && limiter.allow() && limiter.allow());
        assert!(!limiter.allow());
    }
}
