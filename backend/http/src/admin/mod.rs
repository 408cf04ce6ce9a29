//! Force release: tokens, the rate limit, and the check that the named holder is the one
//! lockscope sees now; then each backend's own compare-and-delete (its crate's `release.rs`,
//! the only code in lockscope that changes anything in a watched system), reached through the
//! registry ([`lockscope_core::release::Releasers`]).
//!
//! A release names the holder the operator saw and deletes exactly that holder, atomically
//! checked on the server. [`attempt`] runs each attempt from its first byte to its answer and
//! reports how it ended (count, log line and audit record together); the HTTP layer
//! (`http/admin.rs`) only takes the request apart and answers.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use lockscope_model::wire::{LockView, ReleaseRequest};
use serde_json::json;
use tokio::sync::Mutex;

use crate::config::AdminConfig;

pub mod attempt;

pub use lockscope_core::release::{Outcome, RELEASE_COMMAND_TIMEOUT, RELEASE_CONNECT_TIMEOUT};

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

    fn is_full(&mut self) -> bool {
        self.refill();
        self.tokens >= self.capacity
    }
}

/// Client addresses (IPv6: /64 networks) tracked by [`ClientLimiter`] at most; past it the one
/// that tried least recently is forgotten.
pub const MAX_TRACKED_CLIENTS: usize = 4096;
/// A client refused by [`ClientLimiter`] gets one audit record per this long; the rest of its
/// refusals are only counted (`lockscope_force_releases_total{outcome="rate_limited"}`).
pub const REFUSAL_RECORD_EVERY: Duration = Duration::from_secs(60);

/// Who a client is for the limits: its IPv4 address, or its IPv6 /64 — one host's share of a
/// network, since a single host commonly holds a whole /64 and can pick any address in it.
pub fn client_key(client: IpAddr) -> IpAddr {
    match client {
        IpAddr::V4(_) => client,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(
                u128::from(v6) & !((1u128 << 64) - 1),
            )),
        },
    }
}

/// Per client ([`client_key`]): a token bucket of authentication tries, taken *before* a
/// request's credentials are looked at and given back when they pass, so tries in flight count
/// as much as failed ones: a burst of any concurrency verifies at most the bucket's worth, and
/// guessing tokens or flooding the audit log costs time.
struct ClientLimiter {
    per_minute: u32,
    clients: HashMap<IpAddr, ClientBucket>,
}

struct ClientBucket {
    bucket: RateLimiter,
    /// When a refusal of this client was last written to the audit log.
    recorded: Option<Instant>,
    /// When it last tried.
    tried: Instant,
}

/// What [`Admin::begin_attempt`] says of a request before authentication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Go on to authentication: one try is taken (given back by [`Admin::attempt_passed`]).
    Open,
    /// Refuse; `record`: write this refusal to the audit log (the first of its window).
    Closed { record: bool },
}

impl ClientLimiter {
    /// The bucket of `client`; past [`MAX_TRACKED_CLIENTS`], buckets that are full again
    /// (clients that stopped failing) are dropped, then the least recently used one: never a
    /// bucket shared by strangers, which one client could empty for all.
    fn bucket(&mut self, client: IpAddr) -> &mut ClientBucket {
        let key = client_key(client);
        if !self.clients.contains_key(&key) && self.clients.len() >= MAX_TRACKED_CLIENTS {
            self.clients.retain(|_, c| !c.bucket.is_full());
            if self.clients.len() >= MAX_TRACKED_CLIENTS {
                let oldest = self
                    .clients
                    .iter()
                    .min_by_key(|(_, c)| c.tried)
                    .map(|(k, _)| *k);
                if let Some(oldest) = oldest {
                    self.clients.remove(&oldest);
                }
            }
        }
        let per_minute = self.per_minute;
        let entry = self.clients.entry(key).or_insert_with(|| ClientBucket {
            bucket: RateLimiter::new(per_minute),
            recorded: None,
            tried: Instant::now(),
        });
        entry.tried = Instant::now();
        entry
    }

    /// Takes a try for `client`, or says it has none left.
    fn begin(&mut self, client: IpAddr) -> Gate {
        let entry = self.bucket(client);
        if entry.bucket.allow() {
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

    /// `client`'s try passed: it gets it back.
    fn passed(&mut self, client: IpAddr) {
        let bucket = &mut self.bucket(client).bucket;
        bucket.tokens = (bucket.tokens + 1.0).min(bucket.capacity);
    }
}

pub struct Admin {
    pub enabled: bool,
    /// Admin tokens (clear or bcrypt hashes).
    tokens: crate::credentials::CredentialSet,
    /// Each backend's release (the registry builds them).
    releasers: lockscope_core::release::Releasers,
    limiter: Mutex<RateLimiter>,
    clients: Mutex<ClientLimiter>,
    /// The bound on hashed verifications, shared with the read credentials (`http/auth.rs`).
    pub verifier: crate::credentials::Verifier,
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
    pub fn new(config: &AdminConfig, releasers: lockscope_core::release::Releasers) -> Admin {
        let verifier = crate::credentials::Verifier::default();
        Admin {
            enabled: config.enabled,
            tokens: tokens(&config.tokens).verified_by(&verifier),
            verifier,
            releasers,
            limiter: Mutex::new(RateLimiter::new(config.max_releases_per_minute)),
            clients: Mutex::new(ClientLimiter {
                per_minute: config.max_failed_auth_per_minute,
                clients: HashMap::new(),
            }),
            by_outcome: Mutex::new(BTreeMap::new()),
        }
    }

    /// The admin token's name for an `Authorization` header if it passed before (no
    /// verification, no try taken).
    pub fn authorized_before(&self, header: Option<&str>) -> Option<String> {
        self.tokens.cached_bearer(bearer(header)?)
    }

    /// The admin token's name for an `Authorization` header (a hashed token is verified
    /// once, then remembered: [`crate::credentials`]); `Err(None)` when verifications are
    /// too many to wait for a turn.
    pub async fn authorize(&self, header: Option<&str>) -> Result<String, Option<Denied>> {
        let token = bearer(header).ok_or(Some(Denied::Unauthorized))?;
        match self.tokens.check_bearer(token).await {
            crate::credentials::Verdict::Valid(name) => Ok(name),
            crate::credentials::Verdict::Invalid => Err(Some(Denied::Forbidden)),
            crate::credentials::Verdict::Busy => Err(None),
        }
    }

    /// Before authentication: takes one of `client`'s tries, or says it has none left (it
    /// failed, or has in flight, `admin.max_failed_auth_per_minute` tries lately).
    pub async fn begin_attempt(&self, client: IpAddr) -> Gate {
        self.clients.lock().await.begin(client)
    }

    /// `client`'s credentials passed: its try is given back.
    pub async fn attempt_passed(&self, client: IpAddr) {
        self.clients.lock().await.passed(client);
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
        attempt::OUTCOMES
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

    fn limiter(per_minute: u32) -> ClientLimiter {
        ClientLimiter {
            per_minute,
            clients: HashMap::new(),
        }
    }

    #[test]
    fn each_client_has_its_own_failed_authentication_budget() {
        let mut limiter = limiter(2);
        let (a, b) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        assert_eq!(limiter.begin(a), Gate::Open);
        assert_eq!(limiter.begin(a), Gate::Open);
        // Refused, the first refusal of the window recorded, the next ones only counted.
        assert_eq!(limiter.begin(a), Gate::Closed { record: true });
        assert_eq!(limiter.begin(a), Gate::Closed { record: false });
        assert_eq!(limiter.begin(b), Gate::Open);
    }

    #[test]
    fn tries_in_flight_count_and_passed_ones_come_back() {
        let mut limiter = limiter(3);
        let a = IpAddr::from([10, 0, 0, 1]);
        // Three tries begun at once, none finished: a fourth is refused before it verifies.
        for _ in 0..3 {
            assert_eq!(limiter.begin(a), Gate::Open);
        }
        assert!(matches!(limiter.begin(a), Gate::Closed { .. }));
        // One passed: its try is back.
        limiter.passed(a);
        assert_eq!(limiter.begin(a), Gate::Open);
    }

    #[test]
    fn an_ipv6_client_is_its_64() {
        let mut limiter = limiter(2);
        let one: IpAddr = "2001:db8:1:2::1".parse().expect("v6");
        let same_64: IpAddr = "2001:db8:1:2:ffff:ffff:ffff:ffff".parse().expect("v6");
        let other_64: IpAddr = "2001:db8:1:3::1".parse().expect("v6");
        assert_eq!(limiter.begin(one), Gate::Open);
        assert_eq!(limiter.begin(same_64), Gate::Open);
        assert!(matches!(limiter.begin(one), Gate::Closed { .. }));
        assert_eq!(limiter.begin(other_64), Gate::Open);
        // An IPv4-mapped address is its IPv4 address.
        let mapped: IpAddr = "::ffff:10.0.0.7".parse().expect("mapped");
        assert_eq!(client_key(mapped), IpAddr::from([10, 0, 0, 7]));
    }

    #[test]
    fn tracked_clients_are_bounded_and_never_share_a_bucket() {
        let mut limiter = limiter(1);
        for i in 0..(MAX_TRACKED_CLIENTS as u32 + 500) {
            let client = IpAddr::from(i.to_be_bytes());
            assert_eq!(limiter.begin(client), Gate::Open);
        }
        assert!(limiter.clients.len() <= MAX_TRACKED_CLIENTS);
        // A client past the cap that used up its try is refused...
        let late = IpAddr::from((MAX_TRACKED_CLIENTS as u32 + 499).to_be_bytes());
        assert!(matches!(limiter.begin(late), Gate::Closed { .. }));
        // ...and a newcomer is not refused with it (a shared overflow bucket would be empty).
        let newcomer = IpAddr::from([192, 0, 2, 1]);
        assert_eq!(limiter.begin(newcomer), Gate::Open);
    }

    #[test]
    fn rate_limiter_refuses_a_burst_beyond_capacity() {
        let mut limiter = RateLimiter::new(3);
        assert!(limiter.allow() && limiter.allow() && limiter.allow());
        assert!(!limiter.allow());
    }
}
