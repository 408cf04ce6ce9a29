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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Credentials that passed, remembered at most; past it the cache starts over.
pub const MAX_CACHED: usize = 1024;

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
        }
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

    /// The name of the bearer token `token`, if it is one of this set's.
    pub async fn check_bearer(&self, token: &str) -> Option<String> {
        self.check(None, token).await
    }

    /// The user, if `user` with `password` is one of this set's basic-auth users.
    pub async fn check_basic(&self, user: &str, password: &str) -> Option<String> {
        self.check(Some(user), password).await
    }

    async fn check(&self, user: Option<&str>, presented: &str) -> Option<String> {
        let key: [u8; 32] = {
            let mut hasher = Sha256::new();
            hasher.update(user.unwrap_or_default().as_bytes());
            hasher.update([0u8, u8::from(user.is_some())]);
            hasher.update(presented.as_bytes());
            hasher.finalize().into()
        };
        if let Some(name) = self.cached(&key) {
            return Some(name);
        }
        let candidates: Vec<Entry> = self
            .entries
            .iter()
            .filter(|e| e.user.as_deref() == user)
            .cloned()
            .collect();
        if candidates.is_empty() {
            return None;
        }
        let presented = presented.to_string();
        let hashed = candidates
            .iter()
            .any(|e| matches!(e.secret, Secret::Hash(_)));
        let verify = move || {
            candidates
                .iter()
                .find(|e| e.secret.matches(&presented))
                .map(|e| e.name.clone())
        };
        // bcrypt on the blocking pool: a verification must not stall other connections.
        let name = if hashed {
            tokio::task::spawn_blocking(verify).await.ok().flatten()
        } else {
            verify()
        }?;
        if let Ok(mut verified) = self.verified.lock() {
            if verified.len() >= MAX_CACHED {
                verified.clear();
            }
            verified.insert(key, name.clone());
        }
        Some(name)
    }

    fn cached(&self, key: &[u8; 32]) -> Option<String> {
        self.verified.lock().ok()?.get(key).cloned()
    }

    /// How many verified credentials are remembered (tests).
    pub fn cached_len(&self) -> usize {
        self.verified.lock().map(|v| v.len()).unwrap_or(0)
    }
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
            set.check_bearer("s3cret-password").await.as_deref(),
            Some("grafana")
        );
        assert_eq!(
            set.check_bearer("0123456789abcdef").await.as_deref(),
            Some("old")
        );
        assert_eq!(set.check_bearer("0123456789abcdeF").await, None);
        assert_eq!(
            set.check_basic("alice", "s3cret-password").await.as_deref(),
            Some("alice")
        );
        assert_eq!(set.check_basic("alice", "wrong").await, None);
        assert_eq!(set.check_basic("bob", "s3cret-password").await, None);
        // A basic password is not a bearer token of the same value's user, and only successes
        // are remembered.
        assert_eq!(set.cached_len(), 3);
    }
}
