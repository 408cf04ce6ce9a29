//! The `[[redis]]` and `[[redlock]]` config sections: what each accepts and its own checks
//! (every problem reported, not the first).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;

/// A Redis server or Cluster whose keys hold locks.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisSourceConfig {
    pub name: String,
    /// `redis://[user:password@]host:port[/db]`.
    pub url: String,
    /// Key patterns (SCAN MATCH / PSUBSCRIBE syntax) holding locks.
    pub patterns: Vec<String>,
    /// Discover every master with CLUSTER NODES and watch them all.
    #[serde(default)]
    pub cluster: bool,
    /// The `registryKey`s of Spring Integration `RedisLockRegistry`s writing to this server: a
    /// string `<registryKey>:<lockKey>` holding a UUID is then read as such a registry's lock
    /// (recipe `spring_redis_lock`). The server alone cannot tell it from a token lock (either
    /// part may contain `:`), so it is named here. Only `[[redis]]`: the registry takes its
    /// locks on one server or Cluster, never as a Redlock.
    #[serde(default)]
    pub spring_lock_registries: Vec<String>,
    #[serde(flatten)]
    pub watch: RedisWatchConfig,
}

/// One logical lock set kept on N independent masters (Redlock).
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedlockConfig {
    pub name: String,
    pub urls: Vec<String>,
    pub patterns: Vec<String>,
    #[serde(flatten)]
    pub watch: RedisWatchConfig,
}

/// How a Redis source is watched; shared by `[[redis]]` and `[[redlock]]`.
#[derive(Debug, Clone, Deserialize)]
pub struct RedisWatchConfig {
    /// Full SCAN of the lock keys to repair anything pub/sub lost.
    #[serde(default = "default_reconcile_interval", with = "humantime_serde")]
    pub reconcile_interval: Duration,
    /// lockscope may add the keyspace-notification classes it needs to `notify-keyspace-events`.
    #[serde(default = "default_true")]
    pub set_notify_config: bool,
    /// Redisson Semaphore sizes: key → total permits.
    #[serde(default)]
    pub semaphores: BTreeMap<String, u32>,
    /// Keys that are Redisson CountDownLatches.
    #[serde(default)]
    pub latches: Vec<String>,
    /// Key patterns whose keys are python-redis-lock locks (`lock:<name>`), whatever their ids
    /// look like; without it they are recognised by their `lock-signal:` list or guessed from
    /// python-redis-lock's default id (the lock then says it is a guess).
    #[serde(default)]
    pub python_redis_locks: Vec<String>,
    /// PEM CA certificate that signed the servers' certificates, for `rediss://` URLs (without
    /// it the system trust store is used).
    #[serde(default)]
    pub tls_ca_file: Option<std::path::PathBuf>,
    /// PEM client certificate and key, for servers with `tls-auth-clients yes`.
    #[serde(default)]
    pub tls_cert_file: Option<std::path::PathBuf>,
    #[serde(default)]
    pub tls_key_file: Option<std::path::PathBuf>,
    /// How long a member (its command or its notification connection) may stay silent (no answer to a heartbeat or a request, no
    /// keepalive acknowledgement) before the source is shown not up, its locks marked as last seen.
    #[serde(
        default = "lockscope_core::collect::default_silence_limit",
        with = "humantime_serde"
    )]
    pub silence_limit: Duration,
}

impl fmt::Debug for RedisSourceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSourceConfig")
            .field("name", &self.name)
            .field("url", &redact_url(&self.url))
            .field("patterns", &self.patterns)
            .field("cluster", &self.cluster)
            .field("spring_lock_registries", &self.spring_lock_registries)
            .field("watch", &self.watch)
            .finish()
    }
}

impl fmt::Debug for RedlockConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockConfig")
            .field("name", &self.name)
            .field(
                "urls",
                &self.urls.iter().map(|u| redact_url(u)).collect::<Vec<_>>(),
            )
            .field("patterns", &self.patterns)
            .field("watch", &self.watch)
            .finish()
    }
}

pub use lockscope_core::collect::redact_url;

impl RedisSourceConfig {
    pub fn new(name: &str, url: &str, patterns: &[&str]) -> Self {
        Self {
            name: name.into(),
            url: url.into(),
            patterns: patterns.iter().map(|p| p.to_string()).collect(),
            cluster: false,
            spring_lock_registries: Vec::new(),
            watch: RedisWatchConfig::default(),
        }
    }
}

impl RedlockConfig {
    pub fn new(name: &str, urls: &[String], patterns: &[&str]) -> Self {
        Self {
            name: name.into(),
            urls: urls.to_vec(),
            patterns: patterns.iter().map(|p| p.to_string()).collect(),
            watch: RedisWatchConfig::default(),
        }
    }
}

impl Default for RedisWatchConfig {
    fn default() -> Self {
        Self {
            reconcile_interval: default_reconcile_interval(),
            set_notify_config: true,
            semaphores: BTreeMap::new(),
            latches: Vec::new(),
            python_redis_locks: Vec::new(),
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            silence_limit: lockscope_core::collect::DEFAULT_SILENCE_LIMIT,
        }
    }
}

fn default_reconcile_interval() -> Duration {
    Duration::from_secs(60)
}
fn default_true() -> bool {
    true
}

/// The keys `[[redis]]` and `[[redlock]]` tables share (how a source is watched).
pub const WATCH_KEYS: &[&str] = &[
    "reconcile_interval",
    "set_notify_config",
    "semaphores",
    "latches",
    "python_redis_locks",
    "tls_ca_file",
    "tls_cert_file",
    "tls_key_file",
    "silence_limit",
];

impl RedisSourceConfig {
    /// The keys a `[[redis]]` table accepts besides [`WATCH_KEYS`].
    pub const KEYS: &'static [&'static str] = &[
        "name",
        "url",
        "patterns",
        "cluster",
        "spring_lock_registries",
    ];

    /// Every problem with this `[[redis]]` table (`at` names it); the name is checked with
    /// every other source's.
    pub fn validate(&self, at: &str) -> Vec<String> {
        let mut problems = Vec::new();
        check_redis_url(at, "url", &self.url, &mut problems);
        check_watch(at, &self.patterns, &self.watch, &mut problems);
        check_spring_registries(at, &self.spring_lock_registries, &mut problems);
        problems
    }
}

impl RedlockConfig {
    /// The keys a `[[redlock]]` table accepts besides [`WATCH_KEYS`].
    pub const KEYS: &'static [&'static str] = &["name", "urls", "patterns"];

    /// Every problem with this `[[redlock]]` table (`at` names it).
    pub fn validate(&self, at: &str) -> Vec<String> {
        let mut problems = Vec::new();
        if self.urls.len() < 2 {
            problems.push(format!(
                "{at}.urls: a Redlock set needs at least 2 masters (usually 3 or 5)"
            ));
        }
        for url in &self.urls {
            check_redis_url(at, "urls", url, &mut problems);
        }
        check_watch(at, &self.patterns, &self.watch, &mut problems);
        problems
    }
}

fn check_redis_url(at: &str, key: &str, url: &str, problems: &mut Vec<String>) {
    let shown = redact_url(url);
    if !url.starts_with("redis://") && !url.starts_with("rediss://") {
        problems.push(format!(
            "{at}.{key}: {shown:?} must start with redis:// or rediss://"
        ));
    } else if let Err(e) = redis::Client::open(url) {
        problems.push(format!("{at}.{key}: {shown:?}: {e}"));
    }
}

fn check_watch(
    at: &str,
    patterns: &[String],
    watch: &RedisWatchConfig,
    problems: &mut Vec<String>,
) {
    if patterns.is_empty() {
        problems.push(format!("{at}.patterns is empty"));
    }
    if patterns.iter().any(String::is_empty) {
        problems.push(format!("{at}.patterns: an empty pattern matches nothing"));
    }
    problems.extend(lockscope_core::tls_files::check(
        at,
        watch.tls_ca_file.as_deref(),
        watch.tls_cert_file.as_deref(),
        watch.tls_key_file.as_deref(),
    ));
    problems.extend(lockscope_core::collect::silence_problems(
        at,
        watch.silence_limit,
    ));
    if watch.reconcile_interval < Duration::from_secs(1) {
        problems.push(format!("{at}.reconcile_interval must be at least 1s"));
    }
    for (key, permits) in &watch.semaphores {
        if *permits == 0 {
            problems.push(format!(
                "{at}.semaphores: {key:?} must have at least 1 permit"
            ));
        }
    }
}

/// A registry key names the prefix of its locks' keys: an empty one (Spring would write
/// `:<lockKey>`, almost surely a slip here) and one listed twice are refused.
fn check_spring_registries(at: &str, registries: &[String], problems: &mut Vec<String>) {
    for (i, registry) in registries.iter().enumerate() {
        if registry.is_empty() {
            problems.push(format!(
                "{at}.spring_lock_registries[{i}] is empty: name the registryKey the \
                 RedisLockRegistry was built with (its keys are `<registryKey>:<lockKey>`)"
            ));
        } else if registries[..i].contains(registry) {
            problems.push(format!(
                "{at}.spring_lock_registries[{i}]: {registry:?} is listed twice"
            ));
        }
    }
}
