//! Credentials lockscope checks: bearer tokens and basic-auth users, each stored in clear (the
//! older `[admin]` tokens) or as a bcrypt hash (like Prometheus' web config file), and the
//! cache that keeps bcrypt off the path of every request.
//!
//! bcrypt is slow on purpose (tens of milliseconds at cost 10), so a verification runs on the
//! blocking pool, and a credential that passed is remembered by its SHA-256 (never in clear) in
//! a bounded cache: an event stream or 50 viewers of one dashboard pay bcrypt once, not per
//! request. Clear secrets are compared in constant time (`subtle`, over SHA-256 digests, so not
//! even the length shows). This module knows nothing about HTTP: the caller extracts the
//! credential and decides what a refusal looks like.
//!
//! What a flood of wrong credentials may cost is bounded here too: every hashed verification
//! runs under one [`Verifier`] that the whole process shares (at most half the cores verify at
//! once, at most [`MAX_WAITING`] wait; past that a check answers [`Verdict::Busy`] at once), so
//! bcrypt can never take the cores `/healthz`, readers with cached credentials and releases
//! need. An unknown basic-auth user costs one verification against a stand-in hash of the same
//! cost, as a known user with a wrong password does, so a user name's existence does not show
//! in the answer's time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Credentials that passed, remembered at most; past it the cache starts over.
pub const MAX_CACHED: usize = 1024;
/// Hashed verifications that may wait for a turn; past it a check answers [`Verdict::Busy`].
pub const MAX_WAITING: usize = 64;

/// What a check of a credential says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// One of the set's credentials: its name.
    Valid(String),
    /// None of the set's.
    Invalid,
    /// Not looked at: too many verifications are waiting for their turn ([`MAX_WAITING`]).
    Busy,
}

impl Verdict {
    /// The credential's name when it is valid.
    pub fn name(self) -> Option<String> {
        match self {
            Verdict::Valid(name) => Some(name),
            Verdict::Invalid | Verdict::Busy => None,
        }
    }
}

/// The bound on hashed verifications, shared by every [`CredentialSet`] of a process (one is
/// made where the sets are built and handed to each with [`CredentialSet::verified_by`]).
#[derive(Clone)]
pub struct Verifier {
    turns: Arc<tokio::sync::Semaphore>,
    waiting: Arc<AtomicUsize>,
    /// Hashes compared so far (each bcrypt run counts one).
    hashed: Arc<AtomicU64>,
}

impl Default for Verifier {
    /// Half the cores (at least one) verify at once.
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Verifier::new((cores / 2).max(1))
    }
}

impl Verifier {
    pub fn new(at_once: usize) -> Self {
        Verifier {
            turns: Arc::new(tokio::sync::Semaphore::new(at_once.max(1))),
            waiting: Arc::default(),
            hashed: Arc::default(),
        }
    }

    /// bcrypt hashes compared so far (`lockscope_auth_hash_verifications_total`).
    pub fn hashed(&self) -> u64 {
        self.hashed.load(Ordering::Relaxed)
    }

    /// Runs `verify` (which compares `hashes` bcrypt hashes) on the blocking pool in its turn;
    /// `None` when too many wait already.
    async fn run<T: Send + 'static>(
        &self,
        hashes: u64,
        verify: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= MAX_WAITING {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        let turn = self.turns.clone().acquire_owned().await;
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        let turn = turn.ok()?;
        self.hashed.fetch_add(hashes, Ordering::Relaxed);
        // bcrypt on the blocking pool: a verification must not stall other connections.
        let answer = tokio::task::spawn_blocking(verify).await.ok();
        drop(turn);
        answer
    }
}

/// A stored secret.
#[derive(Clone)]
pub enum Secret {
    Clear(String),
    /// A bcrypt hash (`$2a$`, `$2b$`, `$2y$`).
    Hash(String),
}

impl Secret {
    /// Whether `presented` matches; bcrypt for hashes (slow: call off the runtime's threads).
    fn matches(&self, presented: &str) -> bool {
        match self {
            Secret::Clear(secret) => {
                let (a, b) = (
                    Sha256::digest(secret.as_bytes()),
                    Sha256::digest(presented.as_bytes()),
                );
                a.ct_eq(&b).into()
            }
            Secret::Hash(hash) => bcrypt::verify(presented, hash).unwrap_or(false),
        }
    }
}

/// Checks that `hash` is a bcrypt hash lockscope can verify against; the message otherwise.
pub fn check_hash(hash: &str) -> Result<(), String> {
    hash.parse::<bcrypt::HashParts>().map(|_| ()).map_err(|_| {
        "is not a bcrypt hash (make one with `htpasswd -nbBC 10 \"\" PASSWORD | tr -d ':\\n'` \
             or `lockscope hash-password`)"
            .to_string()
    })
}

/// One accepted credential and the name it is known by (audit log, logs).
#[derive(Clone)]
struct Entry {
    name: String,
    /// Basic auth: the user name; bearer tokens have none.
    user: Option<String>,
    secret: Secret,
}

/// A set of accepted credentials with its cache of verified ones.
#[derive(Clone, Default)]
pub struct CredentialSet {
    entries: Arc<Vec<Entry>>,
    /// SHA-256 of a credential that passed → the entry's name.
    verified: Arc<Mutex<HashMap<[u8; 32], String>>>,
    verifier: Verifier,
    /// A hash of nothing anyone knows, at the cost of the set's hashes: what an unknown user's
    /// password is compared with (made on first need).
    stand_in: Arc<OnceLock<Option<String>>>,
}

impl std::fmt::Debug for CredentialSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.entries.iter().map(|e| e.name.as_str()).collect();
        f.debug_struct("CredentialSet")
            .field("names", &names)
            .finish_non_exhaustive()
    }
}

impl CredentialSet {
    /// Adds a bearer token named `name`.
    pub fn bearer(mut self, name: &str, secret: Secret) -> Self {
        Arc::make_mut(&mut self.entries).push(Entry {
            name: name.to_string(),
            user: None,
            secret,
        });
        self
    }

    /// Adds a basic-auth user (known by its user name).
    pub fn basic(mut self, user: &str, secret: Secret) -> Self {
        Arc::make_mut(&mut self.entries).push(Entry {
            name: user.to_string(),
            user: Some(user.to_string()),
            secret,
        });
        self
    }

    /// This set and `other`'s entries (each keeps its own cache).
    pub fn and(mut self, other: &CredentialSet) -> Self {
        Arc::make_mut(&mut self.entries).extend(other.entries.iter().cloned());
        self
    }

    /// Only this set's bearer tokens.
    pub fn bearer_only(&self) -> Self {
        CredentialSet {
            entries: Arc::new(
                self.entries
                    .iter()
                    .filter(|e| e.user.is_none())
                    .cloned()
                    .collect(),
            ),
            verified: Arc::default(),
            verifier: self.verifier.clone(),
            stand_in: Arc::default(),
        }
    }

    /// This set, its hashed verifications taking turns with every other set's under `verifier`.
    pub fn verified_by(mut self, verifier: &Verifier) -> Self {
        self.verifier = verifier.clone();
        self
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn has_bearer(&self) -> bool {
        self.entries.iter().any(|e| e.user.is_none())
    }

    pub fn has_basic(&self) -> bool {
        self.entries.iter().any(|e| e.user.is_some())
    }

    /// Whether `token` is one of this set's bearer tokens.
    pub async fn check_bearer(&self, token: &str) -> Verdict {
        self.check(None, token).await
    }

    /// Whether `user` with `password` is one of this set's basic-auth users.
    pub async fn check_basic(&self, user: &str, password: &str) -> Verdict {
        self.check(Some(user), password).await
    }

    /// The bearer token's name if it passed a check before (no verification).
    pub fn cached_bearer(&self, token: &str) -> Option<String> {
        self.cached(&cache_key(None, token))
    }

    /// The user if this user and password passed a check before (no verification).
    pub fn cached_basic(&self, user: &str, password: &str) -> Option<String> {
        self.cached(&cache_key(Some(user), password))
    }

    async fn check(&self, user: Option<&str>, presented: &str) -> Verdict {
        let key = cache_key(user, presented);
        if let Some(name) = self.cached(&key) {
            return Verdict::Valid(name);
        }
        let candidates: Vec<Entry> = self
            .entries
            .iter()
            .filter(|e| e.user.as_deref() == user)
            .cloned()
            .collect();
        let hashes = candidates
            .iter()
            .filter(|e| matches!(e.secret, Secret::Hash(_)))
            .count() as u64;
        let presented = presented.to_string();
        let name = if hashes > 0 {
            let verify = move || {
                candidates
                    .iter()
                    .find(|e| e.secret.matches(&presented))
                    .map(|e| e.name.clone())
            };
            match self.verifier.run(hashes, verify).await {
                Some(name) => name,
                None => return Verdict::Busy,
            }
        } else if candidates.is_empty() {
            // An unknown user: as long as a known one with a wrong password takes.
            match self.stand_in() {
                Some(hash) => {
                    let verify = move || bcrypt::verify(&presented, &hash).unwrap_or(false);
                    if self.verifier.run(1, verify).await.is_none() {
                        return Verdict::Busy;
                    }
                    None
                }
                None => None,
            }
        } else {
            candidates
                .iter()
                .find(|e| e.secret.matches(&presented))
                .map(|e| e.name.clone())
        };
        let Some(name) = name else {
            return Verdict::Invalid;
        };
        if let Ok(mut verified) = self.verified.lock() {
            if verified.len() >= MAX_CACHED {
                verified.clear();
            }
            verified.insert(key, name.clone());
        }
        Verdict::Valid(name)
    }

    /// The stand-in hash: at the cost of the set's first hash; `None` when the set has none.
    fn stand_in(&self) -> Option<String> {
        self.stand_in
            .get_or_init(|| {
                let cost = self.entries.iter().find_map(|e| match &e.secret {
                    Secret::Hash(hash) => hash.parse::<bcrypt::HashParts>().ok(),
                    Secret::Clear(_) => None,
                })?;
                // Any salt will do: the password it hides is one nobody is asked for.
                bcrypt::hash_with_salt(b"no such user", cost.get_cost(), [0x5a; 16])
                    .ok()
                    .map(|h| h.to_string())
            })
            .clone()
    }

    fn cached(&self, key: &[u8; 32]) -> Option<String> {
        self.verified.lock().ok()?.get(key).cloned()
    }

    /// How many verified credentials are remembered (tests).
    pub fn cached_len(&self) -> usize {
        self.verified.lock().map(|v| v.len()).unwrap_or(0)
    }
}

/// A credential's key in the cache: SHA-256 of the user (if any) and the secret presented.
fn cache_key(user: Option<&str>, presented: &str) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(user.unwrap_or_default().as_bytes());
    hasher.update([0u8, u8::from(user.is_some())]);
    hasher.update(presented.as_bytes());
    hasher.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn clear_and_hashed_secrets_and_the_cache() {
        let hash = bcrypt::hash("s3cret-password", 4).expect("hash");
        assert!(check_hash(&hash).is_ok());
        assert!(check_hash("s3cret-password").is_err());
        let set = CredentialSet::default()
            .bearer("grafana", Secret::Hash(hash.clone()))
            .bearer("old", Secret::Clear("0123456789abcdef".into()))
            .basic("alice", Secret::Hash(hash));
        assert_eq!(
            set.check_bearer("s3cret-password").await.name().as_deref(),
            Some("grafana")
        );
        assert_eq!(
            set.check_bearer("0123456789abcdef").await.name().as_deref(),
            Some("old")
        );
        assert_eq!(set.check_bearer("0123456789abcdeF").await, Verdict::Invalid);
        assert_eq!(
            set.check_basic("alice", "s3cret-password")
                .await
                .name()
                .as_deref(),
            Some("alice")
        );
        assert_eq!(set.check_basic("alice", "wrong").await, Verdict::Invalid);
        assert_eq!(
            set.check_basic("bob", "s3cret-password").await,
            Verdict::Invalid
        );
        // A basic password is not a bearer token of the same value's user, and only successes
        // are remembered.
        assert_eq!(set.cached_len(), 3);
    }

    #[tokio::test]
    async fn an_unknown_user_costs_one_verification_as_a_known_one_does() {
        let hash = bcrypt::hash_with_salt("right", 4, [1; 16])
            .expect("hash")
            .to_string();
        let verifier = Verifier::new(1);
        let set = CredentialSet::default()
            .basic("alice", Secret::Hash(hash))
            .verified_by(&verifier);
        assert_eq!(set.check_basic("alice", "wrong").await, Verdict::Invalid);
        assert_eq!(
            verifier.hashed(),
            1,
            "a known user's wrong password: one bcrypt"
        );
        assert_eq!(set.check_basic("mallory", "wrong").await, Verdict::Invalid);
        assert_eq!(
            verifier.hashed(),
            2,
            "an unknown user costs a bcrypt too, so the answer's time does not tell"
        );
        // The stand-in hash is at the set's cost.
        let stand_in = set.stand_in().expect("a stand-in");
        let parts: bcrypt::HashParts = stand_in.parse().expect("a bcrypt hash");
        assert_eq!(parts.get_cost(), 4);
    }

    #[tokio::test]
    async fn verifications_take_turns_and_a_crowd_past_the_bound_is_busy() {
        let hash = bcrypt::hash_with_salt("right", 4, [2; 16])
            .expect("hash")
            .to_string();
        let verifier = Verifier::new(1);
        let set = CredentialSet::default()
            .bearer("t", Secret::Hash(hash))
            .verified_by(&verifier);
        // Hold the only turn, so every check waits.
        let turn = verifier.turns.clone().acquire_owned().await.expect("turn");
        let mut waiting = Vec::new();
        for _ in 0..MAX_WAITING {
            let set = set.clone();
            waiting.push(tokio::spawn(async move { set.check_bearer("wrong").await }));
        }
        while verifier.waiting.load(Ordering::SeqCst) < MAX_WAITING {
            tokio::task::yield_now().await;
        }
        assert_eq!(set.check_bearer("wrong").await, Verdict::Busy);
        drop(turn);
        for check in waiting {
            assert_eq!(check.await.expect("joined"), Verdict::Invalid);
        }
        assert_eq!(verifier.hashed(), MAX_WAITING as u64);
        assert_eq!(set.check_bearer("right").await, Verdict::Valid("t".into()));
    }
}
