//! Configuration: the TOML file, environment overrides, and validation in one place.
//!
//! Every problem is collected and reported together (unknown keys, bad values, duplicate source
//! names), so an operator fixes a config in one pass; `main` exits with status 2 on any of them.
//! Secrets (digest credentials) may come from the environment and are never printed: `Debug`
//! output redacts them.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

/// All problems found in a configuration.
#[derive(Debug, thiserror::Error)]
pub struct ConfigErrors(pub Vec<String>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "invalid configuration ({} problem(s)):", self.0.len())?;
        for problem in &self.0 {
            writeln!(f, "  - {problem}")?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address of the HTTP server (API, metrics, UI).
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    #[serde(default)]
    pub zookeeper: Vec<ZkSourceConfig>,
    #[serde(default)]
    pub redis: Vec<RedisSourceConfig>,
    #[serde(default)]
    pub redlock: Vec<RedlockConfig>,
    #[serde(default)]
    pub etcd: Vec<crate::backends::etcd::EtcdSourceConfig>,
    #[serde(default)]
    pub metrics: MetricsConfig,
    #[serde(default)]
    pub ui: UiConfig,
    #[serde(default)]
    pub admin: AdminConfig,
    #[serde(default)]
    pub store: StoreConfig,
}

/// The admin API (force release). Off unless `enabled` with at least one token.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    #[serde(default)]
    pub enabled: bool,
    /// Bearer tokens allowed to force-release; each has a name for the audit log.
    #[serde(default)]
    pub tokens: Vec<TokenConfig>,
    /// When not empty, the read API (`/api/v1/…`) needs one of these (or an admin token).
    #[serde(default)]
    pub read_tokens: Vec<TokenConfig>,
    /// Force releases allowed per minute, over all tokens (refusals count too).
    #[serde(default = "default_releases_per_minute")]
    pub max_releases_per_minute: u32,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            tokens: Vec::new(),
            read_tokens: Vec::new(),
            max_releases_per_minute: default_releases_per_minute(),
        }
    }
}

fn default_releases_per_minute() -> u32 {
    30
}

/// A named bearer token, given inline or through an environment variable. Never printed.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    pub name: String,
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub token_env: Option<String>,
}

impl fmt::Debug for TokenConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenConfig")
            .field("name", &self.name)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("token_env", &self.token_env)
            .finish()
    }
}

impl TokenConfig {
    /// The secret, from the file or the named environment variable.
    pub fn secret(&self) -> Option<String> {
        match (&self.token, &self.token_env) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(var)) => std::env::var(var).ok(),
            (None, None) => None,
        }
    }
}

/// The embedded store (SQLite): the audit log and lock history.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// The database file; without one, history stays in memory and the admin API cannot run.
    #[serde(default)]
    pub path: Option<std::path::PathBuf>,
    /// Lock events older than this are deleted.
    #[serde(default = "default_history_max_age", with = "humantime_serde")]
    pub history_max_age: Duration,
    /// At most this many lock events are kept (the oldest go first).
    #[serde(default = "default_history_max_events")]
    pub history_max_events: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            path: None,
            history_max_age: default_history_max_age(),
            history_max_events: default_history_max_events(),
        }
    }
}

fn default_history_max_age() -> Duration {
    Duration::from_secs(7 * 24 * 3600)
}

fn default_history_max_events() -> u64 {
    1_000_000
}

/// The web UI: where its built assets are and what it flags.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UiConfig {
    /// Directory `scripts/build-ui` fills (relative to the working directory);
    /// `LOCKSCOPE_UI_DIR` overrides it.
    #[serde(default = "default_assets_dir")]
    pub assets_dir: std::path::PathBuf,
    /// A lock held longer than this is shown (and counted) as stale.
    #[serde(default = "default_stale_hold", with = "humantime_serde")]
    pub stale_hold: Duration,
}

impl Default for UiConfig {
    fn default() -> Self {
        Self {
            assets_dir: default_assets_dir(),
            stale_hold: default_stale_hold(),
        }
    }
}

fn default_assets_dir() -> std::path::PathBuf {
    "frontend/dist".into()
}

fn default_stale_hold() -> Duration {
    Duration::from_secs(300)
}

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
}

impl fmt::Debug for RedisSourceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSourceConfig")
            .field("name", &self.name)
            .field("url", &redact_url(&self.url))
            .field("patterns", &self.patterns)
            .field("cluster", &self.cluster)
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

/// `redis://user:secret@host` → `redis://user:***@host` (URLs are shown in logs and errors).
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let auth = &url[scheme + 3..at];
            let user = auth.split(':').next().unwrap_or_default();
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

impl RedisSourceConfig {
    pub fn new(name: &str, url: &str, patterns: &[&str]) -> Self {
        Self {
            name: name.into(),
            url: url.into(),
            patterns: patterns.iter().map(|p| p.to_string()).collect(),
            cluster: false,
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
        }
    }
}

fn default_reconcile_interval() -> Duration {
    Duration::from_secs(60)
}
fn default_true() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Distinct `lock` label values per source before the rest fold into `__other__`.
    #[serde(default = "default_max_lock_labels")]
    pub max_lock_labels: usize,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            max_lock_labels: default_max_lock_labels(),
        }
    }
}

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZkSourceConfig {
    /// Source name: appears in lock ids, the API and metric labels.
    pub name: String,
    /// `host:port,host:port,…` (an optional `/chroot` suffix is not supported).
    pub connect: String,
    /// Subtrees to watch.
    pub roots: Vec<String>,
    /// Session timeout lockscope asks for.
    #[serde(default = "default_session_timeout", with = "humantime_serde")]
    pub session_timeout: Duration,
    /// How often every member is asked for watches and sessions (`wchp`, `wchs`, `cons`, `mntr`).
    #[serde(default = "default_poll_interval", with = "humantime_serde")]
    pub poll_interval: Duration,
    /// Curator semaphore sizes: lock path → max leases (default 1, a semaphore-mutex).
    #[serde(default)]
    pub max_leases: BTreeMap<String, u32>,
    /// Digest credentials `user:password` for ACL-protected lock trees.
    #[serde(default)]
    pub digest: Option<String>,
    /// Name of an environment variable holding the digest credentials instead.
    #[serde(default)]
    pub digest_env: Option<String>,
}

impl fmt::Debug for ZkSourceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkSourceConfig")
            .field("name", &self.name)
            .field("connect", &self.connect)
            .field("roots", &self.roots)
            .field("session_timeout", &self.session_timeout)
            .field("poll_interval", &self.poll_interval)
            .field("max_leases", &self.max_leases)
            .field("digest", &self.digest.as_ref().map(|_| "<redacted>"))
            .field("digest_env", &self.digest_env)
            .finish()
    }
}

impl ZkSourceConfig {
    /// A source with defaults for everything optional.
    pub fn new(name: &str, connect: &str, roots: &[&str]) -> Self {
        Self {
            name: name.to_string(),
            connect: connect.to_string(),
            roots: roots.iter().map(|r| r.to_string()).collect(),
            session_timeout: default_session_timeout(),
            poll_interval: default_poll_interval(),
            max_leases: BTreeMap::new(),
            digest: None,
            digest_env: None,
        }
    }

    /// The ensemble members named in `connect`.
    pub fn members(&self) -> Vec<String> {
        self.connect
            .split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// Digest credentials from the file or the named environment variable.
    pub fn digest_credentials(&self) -> Option<String> {
        if let Some(var) = &self.digest_env {
            if let Ok(value) = std::env::var(var) {
                return Some(value);
            }
        }
        self.digest.clone()
    }
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7070))
}
fn default_max_lock_labels() -> usize {
    500
}
fn default_session_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_poll_interval() -> Duration {
    Duration::from_secs(2)
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: default_listen(),
            zookeeper: Vec::new(),
            redis: Vec::new(),
            redlock: Vec::new(),
            etcd: Vec::new(),
            metrics: MetricsConfig::default(),
            ui: UiConfig::default(),
            admin: AdminConfig::default(),
            store: StoreConfig::default(),
        }
    }
}

/// The keys each table accepts; used to list every unknown key at once (serde stops at the first).
const TOP_KEYS: &[&str] = &[
    "listen",
    "zookeeper",
    "redis",
    "redlock",
    "etcd",
    "metrics",
    "ui",
    "admin",
    "store",
];
const ADMIN_KEYS: &[&str] = &[
    "enabled",
    "tokens",
    "read_tokens",
    "max_releases_per_minute",
];
const TOKEN_KEYS: &[&str] = &["name", "token", "token_env"];
const STORE_KEYS: &[&str] = &["path", "history_max_age", "history_max_events"];
const WATCH_KEYS: &[&str] = &[
    "reconcile_interval",
    "set_notify_config",
    "semaphores",
    "latches",
    "python_redis_locks",
    "tls_ca_file",
];
const REDIS_KEYS: &[&str] = &["name", "url", "patterns", "cluster"];
const REDLOCK_KEYS: &[&str] = &["name", "urls", "patterns"];
const ZK_KEYS: &[&str] = &[
    "name",
    "connect",
    "roots",
    "session_timeout",
    "poll_interval",
    "max_leases",
    "digest",
    "digest_env",
];
const METRICS_KEYS: &[&str] = &["max_lock_labels"];
const UI_KEYS: &[&str] = &["assets_dir", "stale_hold"];

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigErrors(vec![format!("cannot read {}: {e}", path.display())]))?;
        Self::parse(&text)
    }

    /// Parses and validates configuration text, then applies `LOCKSCOPE_LISTEN`.
    pub fn parse(text: &str) -> Result<Config, ConfigErrors> {
        let mut value: toml::Table = toml::from_str(text)
            .map_err(|e| ConfigErrors(vec![format!("not valid TOML: {}", e.message())]))?;
        // Unknown keys are listed and removed first, so the rest is still checked.
        let mut problems = take_unknown_keys(&mut value);
        let mut config: Option<Config> = None;
        match Config::deserialize(toml::Value::Table(value)) {
            Ok(parsed) => config = Some(parsed),
            Err(e) => problems.push(e.message().to_string()),
        }
        if let Some(config) = &mut config {
            if let Ok(listen) = std::env::var("LOCKSCOPE_LISTEN") {
                match listen.parse() {
                    Ok(addr) => config.listen = addr,
                    Err(e) => problems.push(format!("LOCKSCOPE_LISTEN={listen:?}: {e}")),
                }
            }
            if let Some(dir) = std::env::var_os("LOCKSCOPE_UI_DIR") {
                config.ui.assets_dir = dir.into();
            }
            problems.extend(config.validate());
        }
        match config {
            Some(config) if problems.is_empty() => Ok(config),
            _ => Err(ConfigErrors(problems)),
        }
    }

    fn validate_admin(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let admin = &self.admin;
        let mut names = std::collections::BTreeSet::new();
        for (list, tokens) in [
            ("tokens", &admin.tokens),
            ("read_tokens", &admin.read_tokens),
        ] {
            for (i, t) in tokens.iter().enumerate() {
                let at = format!("admin.{list}[{i}]");
                if t.name.trim().is_empty() {
                    problems.push(format!("{at}.name must not be empty"));
                } else if !names.insert(t.name.clone()) {
                    problems.push(format!("{at}.name {:?} is used twice", t.name));
                }
                match (&t.token, &t.token_env) {
                    (Some(_), Some(_)) => {
                        problems.push(format!("{at}: give token or token_env, not both"))
                    }
                    (None, None) => problems.push(format!("{at}: token or token_env is required")),
                    (None, Some(var)) if std::env::var(var).is_err() => problems.push(format!(
                        "{at}.token_env: environment variable {var} is not set"
                    )),
                    _ => {}
                }
                if t.secret().is_some_and(|s| s.len() < 16) {
                    problems.push(format!("{at}: the token must be at least 16 characters"));
                }
            }
        }
        if admin.enabled {
            if admin.tokens.is_empty() {
                problems.push("admin.enabled needs at least one entry in admin.tokens".into());
            }
            if self.store.path.is_none() {
                problems.push(
                    "admin.enabled needs store.path: every force release is audited there".into(),
                );
            }
        }
        if admin.max_releases_per_minute == 0 {
            problems.push("admin.max_releases_per_minute must be at least 1".into());
        }
        if self.store.history_max_events == 0 {
            problems.push("store.history_max_events must be at least 1".into());
        }
        problems
    }

    /// Semantic checks; returns every problem found.
    pub fn validate(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.zookeeper.is_empty()
            && self.redis.is_empty()
            && self.redlock.is_empty()
            && self.etcd.is_empty()
        {
            problems.push(
                "no sources configured: add at least one [[zookeeper]], [[redis]], [[redlock]] or [[etcd]] table"
                    .into(),
            );
        }
        for (i, etcd) in self.etcd.iter().enumerate() {
            problems.extend(etcd.validate(&format!("etcd[{i}]")));
        }
        problems.extend(self.validate_admin());
        if self.ui.stale_hold.is_zero() {
            problems.push("ui.stale_hold must be longer than 0s".into());
        }
        if self.metrics.max_lock_labels == 0 {
            problems.push("metrics.max_lock_labels must be at least 1".into());
        }
        let mut names = std::collections::BTreeSet::new();
        let mut check_name = |at: &str, name: &str, problems: &mut Vec<String>| {
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                problems.push(format!(
                    "{at}.name {name:?}: use letters, digits, '-' and '_' only"
                ));
            }
            if !names.insert(name.to_string()) {
                problems.push(format!("{at}.name {name:?} is used by another source"));
            }
        };
        for (i, etcd) in self.etcd.iter().enumerate() {
            check_name(&format!("etcd[{i}]"), &etcd.name, &mut problems);
        }
        for (i, redis) in self.redis.iter().enumerate() {
            let at = format!("redis[{i}]");
            check_name(&at, &redis.name, &mut problems);
            check_redis_url(&at, "url", &redis.url, &mut problems);
            check_watch(&at, &redis.patterns, &redis.watch, &mut problems);
        }
        for (i, redlock) in self.redlock.iter().enumerate() {
            let at = format!("redlock[{i}]");
            check_name(&at, &redlock.name, &mut problems);
            if redlock.urls.len() < 2 {
                problems.push(format!(
                    "{at}.urls: a Redlock set needs at least 2 masters (usually 3 or 5)"
                ));
            }
            for url in &redlock.urls {
                check_redis_url(&at, "urls", url, &mut problems);
            }
            check_watch(&at, &redlock.patterns, &redlock.watch, &mut problems);
        }
        for (i, zk) in self.zookeeper.iter().enumerate() {
            let at = format!("zookeeper[{i}]");
            check_name(&at, &zk.name, &mut problems);
            let members = zk.members();
            if members.is_empty() {
                problems.push(format!("{at}.connect is empty"));
            }
            for member in &members {
                if member.contains('/') {
                    problems.push(format!(
                        "{at}.connect: chroot suffixes are not supported ({member:?}); watch a root instead"
                    ));
                } else if !valid_host_port(member) {
                    problems.push(format!("{at}.connect: {member:?} is not host:port"));
                }
            }
            if zk.roots.is_empty() {
                problems.push(format!("{at}.roots is empty"));
            }
            for root in &zk.roots {
                if !valid_zk_path(root) {
                    problems.push(format!(
                        "{at}.roots: {root:?} is not an absolute ZooKeeper path"
                    ));
                }
            }
            for (path, leases) in &zk.max_leases {
                if !valid_zk_path(path) {
                    problems.push(format!(
                        "{at}.max_leases: {path:?} is not an absolute ZooKeeper path"
                    ));
                }
                if *leases == 0 {
                    problems.push(format!("{at}.max_leases: {path:?} must be at least 1"));
                }
            }
            if zk.session_timeout < Duration::from_millis(500) {
                problems.push(format!("{at}.session_timeout must be at least 500ms"));
            }
            if zk.poll_interval < Duration::from_millis(100) {
                problems.push(format!("{at}.poll_interval must be at least 100ms"));
            }
            if let Some(var) = &zk.digest_env {
                if std::env::var(var).is_err() && zk.digest.is_none() {
                    problems.push(format!(
                        "{at}.digest_env: environment variable {var} is not set"
                    ));
                }
            }
            if let Some(digest) = zk.digest_credentials() {
                if !digest.contains(':') {
                    problems.push(format!("{at}: digest credentials must be user:password"));
                }
            }
        }
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
    if let Some(ca) = &watch.tls_ca_file {
        if let Err(e) = std::fs::read(ca) {
            problems.push(format!("{at}.tls_ca_file {}: {e}", ca.display()));
        }
    }
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

fn valid_host_port(member: &str) -> bool {
    match member.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0),
        None => false,
    }
}

fn valid_zk_path(path: &str) -> bool {
    path.starts_with('/')
        && (path == "/" || !path.ends_with('/'))
        && !path.contains("//")
        && !path.contains('\0')
}

fn take_unknown_keys(table: &mut toml::Table) -> Vec<String> {
    let mut problems = Vec::new();
    let mut check = |table: &mut toml::Table, known: &[&str], at: &str| {
        let unknown: Vec<String> = table
            .keys()
            .filter(|key| !known.contains(&key.as_str()))
            .cloned()
            .collect();
        for key in unknown {
            problems.push(format!(
                "unknown key {at}{key:?} (expected one of: {})",
                known.join(", ")
            ));
            table.remove(&key);
        }
    };
    check(table, TOP_KEYS, "");
    if let Some(toml::Value::Array(sources)) = table.get_mut("zookeeper") {
        for (i, source) in sources.iter_mut().enumerate() {
            if let toml::Value::Table(t) = source {
                check(t, ZK_KEYS, &format!("zookeeper[{i}]."));
            }
        }
    }
    for (section, keys) in crate::backends::CONFIG_SECTIONS {
        if let Some(toml::Value::Array(sources)) = table.get_mut(*section) {
            for (i, source) in sources.iter_mut().enumerate() {
                if let toml::Value::Table(t) = source {
                    check(t, keys, &format!("{section}[{i}]."));
                }
            }
        }
    }
    for (section, own) in [("redis", REDIS_KEYS), ("redlock", REDLOCK_KEYS)] {
        let known: Vec<&str> = own.iter().chain(WATCH_KEYS).copied().collect();
        if let Some(toml::Value::Array(sources)) = table.get_mut(section) {
            for (i, source) in sources.iter_mut().enumerate() {
                if let toml::Value::Table(t) = source {
                    check(t, &known, &format!("{section}[{i}]."));
                }
            }
        }
    }
    if let Some(toml::Value::Table(t)) = table.get_mut("ui") {
        check(t, UI_KEYS, "ui.");
    }
    if let Some(toml::Value::Table(t)) = table.get_mut("store") {
        check(t, STORE_KEYS, "store.");
    }
    if let Some(toml::Value::Table(admin)) = table.get_mut("admin") {
        check(admin, ADMIN_KEYS, "admin.");
        for list in ["tokens", "read_tokens"] {
            if let Some(toml::Value::Array(tokens)) = admin.get_mut(list) {
                for (i, token) in tokens.iter_mut().enumerate() {
                    if let toml::Value::Table(t) = token {
                        check(t, TOKEN_KEYS, &format!("admin.{list}[{i}]."));
                    }
                }
            }
        }
    }
    if let Some(toml::Value::Table(t)) = table.get_mut("metrics") {
        check(t, METRICS_KEYS, "metrics.");
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_minimal_and_full_configs() {
        let config = Config::parse(
            r#"
            listen = "127.0.0.1:7070"
            [[zookeeper]]
            name = "zk-main"
            connect = "127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183"
            roots = ["/locks", "/other"]
            session_timeout = "6s"
            poll_interval = "500ms"
            max_leases = { "/locks/sem" = 3 }
            [[zookeeper]]
            name = "zk-b"
            connect = "127.0.0.1:2281"
            roots = ["/"]
            "#,
        )
        .expect("valid");
        assert_eq!(config.zookeeper.len(), 2);
        assert_eq!(config.zookeeper[0].members().len(), 3);
        assert_eq!(config.zookeeper[0].session_timeout, Duration::from_secs(6));
        assert_eq!(config.zookeeper[0].max_leases["/locks/sem"], 3);
        assert_eq!(config.metrics.max_lock_labels, 500);
    }

    #[test]
    fn lists_every_problem_at_once() {
        let err = Config::parse(
            r#"
            bogus = 1
            [[zookeeper]]
            name = "bad name"
            connect = "nohost,127.0.0.1:2181/chroot"
            roots = ["relative", "/ok"]
            typo_key = true
            [[zookeeper]]
            name = "bad name"
            connect = "127.0.0.1:1"
            roots = []
            [metrics]
            max_lock_labels = 0
            "#,
        )
        .expect_err("invalid");
        let text = err.to_string();
        for needle in [
            "unknown key \"bogus\"",
            "unknown key zookeeper[0].\"typo_key\"",
            "letters, digits",
            "used by another source",
            "\"nohost\" is not host:port",
            "chroot",
            "\"relative\" is not an absolute",
            "zookeeper[1].roots is empty",
            "max_lock_labels",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in {text}");
        }
        assert!(err.0.len() >= 9, "{text}");
    }

    #[test]
    fn type_errors_and_bad_toml_are_reported() {
        let err = Config::parse("listen = 5").expect_err("invalid");
        assert!(err.to_string().contains("listen") || err.to_string().contains("invalid"));
        let err = Config::parse("[[zookeeper]\n").expect_err("invalid");
        assert!(err.to_string().contains("not valid TOML"));
        let err = Config::parse("").expect_err("no sources");
        assert!(err.to_string().contains("no sources"));
    }

    #[test]
    fn digest_credentials_come_from_the_named_variable() {
        // PATH is always set and contains ':', so it passes as user:password.
        let ok = Config::parse(
            "[[zookeeper]]\nname = \"a\"\nconnect = \"127.0.0.1:1\"\nroots = [\"/\"]\ndigest_env = \"PATH\"\n",
        )
        .expect("valid");
        assert_eq!(
            ok.zookeeper[0].digest_credentials(),
            std::env::var("PATH").ok()
        );
        let err = Config::parse(
            "[[zookeeper]]\nname = \"a\"\nconnect = \"127.0.0.1:1\"\nroots = [\"/\"]\ndigest_env = \"LOCKSCOPE_SURELY_UNSET_VAR\"\n",
        )
        .expect_err("unset");
        assert!(err
            .to_string()
            .contains("LOCKSCOPE_SURELY_UNSET_VAR is not set"));
    }

    #[test]
    fn redis_and_redlock_sources() {
        let config = Config::parse(
            r#"
            [[redis]]
            name = "cache"
            url = "redis://app:pw@127.0.0.1:6379"
            patterns = ["lock:*", "*:lock"]
            cluster = true
            reconcile_interval = "30s"
            semaphores = { "pool" = 4 }
            [[redlock]]
            name = "orders-redlock"
            urls = ["redis://127.0.0.1:6391", "redis://127.0.0.1:6392", "redis://127.0.0.1:6393"]
            patterns = ["redlock:*"]
            set_notify_config = false
            "#,
        )
        .expect("valid");
        assert_eq!(config.redis[0].watch.semaphores["pool"], 4);
        assert!(config.redis[0].cluster);
        assert!(!config.redlock[0].watch.set_notify_config);
        assert!(!format!("{:?}", config.redis[0]).contains("pw"));
        let err = Config::parse(
            r#"
            [[redis]]
            name = "cache"
            url = "http://x"
            patterns = []
            colour = 1
            [[redlock]]
            name = "cache"
            urls = ["http://a:1"]
            tls_ca_file = "/nonexistent/ca.pem"
            patterns = ["x"]
            "#,
        )
        .expect_err("invalid");
        let text = err.to_string();
        for needle in [
            "must start with redis://",
            "patterns is empty",
            "redis[0].\"colour\"",
            "used by another source",
            "at least 2 masters",
            "tls_ca_file /nonexistent/ca.pem",
            "must start with redis:// or rediss://",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in {text}");
        }
    }

    #[test]
    fn admin_and_store_are_checked_together() {
        let base =
            "[[redis]]\nname = \"r\"\nurl = \"redis://127.0.0.1:1\"\npatterns = [\"lock:*\"]\n";
        let err = Config::parse(&format!(
            "{base}[admin]\nenabled = true\nmax_releases_per_minute = 0\nbogus = 1\ntokens = [\n  {{ name = \"a\", token = \"short\" }},\n  {{ name = \"a\", token_env = \"LOCKSCOPE_SURELY_UNSET_VAR\" }},\n  {{ name = \"b\" }},\n  {{ name = \"c\", token = \"0123456789abcdef\", extra = 2 }},\n]\n"
        ))
        .expect_err("invalid");
        let text = err.to_string();
        for expected in [
            "unknown key admin.\"bogus\"",
            "unknown key admin.tokens[3].\"extra\"",
            "at least 16 characters",
            "\"a\" is used twice",
            "LOCKSCOPE_SURELY_UNSET_VAR is not set",
            "admin.tokens[2]: token or token_env is required",
            "admin.enabled needs store.path",
            "max_releases_per_minute must be at least 1",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
        }
        assert!(
            !text.contains("0123456789abcdef"),
            "a secret was printed:\n{text}"
        );
        let ok = Config::parse(&format!(
            "{base}[admin]\nenabled = true\ntokens = [{{ name = \"oncall\", token = \"0123456789abcdef\" }}]\n[store]\npath = \"/tmp/x.db\"\nhistory_max_age = \"1d\"\n"
        ))
        .expect("valid");
        assert!(ok.admin.enabled);
        assert!(!format!("{:?}", ok.admin).contains("0123456789abcdef"));
        assert_eq!(ok.store.history_max_age, Duration::from_secs(86_400));
    }

    #[test]
    fn debug_output_redacts_credentials() {
        let mut zk = ZkSourceConfig::new("a", "127.0.0.1:1", &["/"]);
        zk.digest = Some("user:secret".into());
        assert!(!format!("{zk:?}").contains("secret"));
    }
}
