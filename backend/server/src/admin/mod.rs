//! Force release: tokens, the rate limit, and the check that the named holder is the one
//! lockscope sees now; then each backend's own compare-and-delete (`backends/*/release.rs`,
//! the only code in lockscope that changes anything in a watched system), reached through the
//! registry ([`crate::backends::Releasers`]).
//!
//! A release names the holder the operator saw and deletes exactly that holder, atomically
//! checked on the server. The HTTP layer ([`crate::http::admin`]) authenticates, rate-limits
//! and writes the audit record for every attempt; this module only decides and executes.

use std::collections::BTreeMap;
use std::time::Instant;

use lockscope_model::wire::{LockView, ReleaseRequest};
use serde_json::{json, Value};
use tokio::sync::Mutex;

use crate::config::Config;

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

/// A named bearer token.
#[derive(Clone)]
struct Token {
    name: String,
    secret: String,
}

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

    fn allow(&mut self) -> bool {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.last).as_secs_f64() * self.per_second)
            .min(self.capacity);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

pub struct Admin {
    pub enabled: bool,
    tokens: Vec<Token>,
    read_tokens: Vec<Token>,
    /// Each backend's release (the registry builds them).
    releasers: crate::backends::Releasers,
    limiter: Mutex<RateLimiter>,
    by_outcome: Mutex<BTreeMap<String, u64>>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("enabled", &self.enabled)
            .field(
                "tokens",
                &self.tokens.iter().map(|t| &t.name).collect::<Vec<_>>(),
            )
            .field("read_tokens", &self.read_tokens.len())
            .finish_non_exhaustive()
    }
}

fn tokens(list: &[crate::config::TokenConfig]) -> Vec<Token> {
    list.iter()
        .filter_map(|t| {
            t.secret().map(|secret| Token {
                name: t.name.clone(),
                secret,
            })
        })
        .collect()
}

/// Compares without stopping at the first difference (no timing hint about the secret).
fn same_secret(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        diff |= usize::from(a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0));
    }
    diff == 0
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
            read_tokens: tokens(&config.admin.read_tokens),
            releasers: crate::backends::Releasers::new(config),
            limiter: Mutex::new(RateLimiter::new(config.admin.max_releases_per_minute)),
            by_outcome: Mutex::new(BTreeMap::new()),
        }
    }

    /// The admin token's name for an `Authorization` header.
    pub fn authorize(&self, header: Option<&str>) -> Result<String, Denied> {
        let token = bearer(header).ok_or(Denied::Unauthorized)?;
        self.tokens
            .iter()
            .find(|t| same_secret(&t.secret, token))
            .map(|t| t.name.clone())
            .ok_or(Denied::Forbidden)
    }

    /// Whether reads need a token, and if so whether `token` is a read or admin token.
    pub fn authorize_read(&self, token: Option<&str>) -> Result<(), Denied> {
        if self.read_tokens.is_empty() {
            return Ok(());
        }
        let token = token.ok_or(Denied::Unauthorized)?;
        self.read_tokens
            .iter()
            .chain(&self.tokens)
            .any(|t| same_secret(&t.secret, token))
            .then_some(())
            .ok_or(Denied::Forbidden)
    }

    pub fn reads_need_token(&self) -> bool {
        !self.read_tokens.is_empty()
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
    pub async fn render_metrics(&self) -> String {
        let mut out = String::from(
            "# HELP lockscope_force_releases_total Force-release attempts by outcome (every attempt is audited).\n\
             # TYPE lockscope_force_releases_total counter\n",
        );
        let counts = self.by_outcome.lock().await;
        for outcome in [
            "released",
            "holder_changed",
            "not_found",
            "unauthorized",
            "forbidden",
            "invalid",
            "rate_limited",
            "unsupported",
            "failed",
            "disabled",
        ] {
            let n = counts.get(outcome).copied().unwrap_or(0);
            out.push_str(&format!(
                "lockscope_force_releases_total{{outcome=\"{outcome}\"}} {n}\n"
            ));
        }
        out
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
        assert!(same_secret("0123456789abcdef", "0123456789abcdef"));
        assert!(!same_secret("0123456789abcdef", "0123456789abcdeF"));
        assert!(!same_secret("short", "shorter"));
    }

    #[test]
    fn rate_limiter_refuses_a_burst_beyond_capacity() {
        let mut limiter = RateLimiter::new(3);
        assert!(limiter.allow() && limiter.allow() && limiter.allow());
        assert!(!limiter.allow());
    }
}
