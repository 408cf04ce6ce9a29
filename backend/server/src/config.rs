//! Configuration: the TOML file, environment overrides, and validation in one place.
//!
//! Every problem is collected and reported together (unknown keys, bad values, duplicate source
//! names), so an operator fixes a config in one pass; `main` exits with status 2 on any of them.
//! Secrets (digest credentials) may come from the environment and are never printed: `Debug`
//! output redacts them.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

pub use crate::backends::database::{DbSourceConfig, LockTableConfig};
pub use crate::backends::etcd::EtcdSourceConfig;
pub use crate::backends::redis::{RedisSourceConfig, RedisWatchConfig, RedlockConfig};
pub use crate::backends::zookeeper::ZkSourceConfig;
pub use crate::collect::redact_url;
pub use crate::store::StoreConfig;

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
    /// With `tls_key_file`: serve HTTPS with this certificate chain (PEM), re-read when it
    /// changes ([`crate::server_tls`]).
    #[serde(default)]
    pub tls_cert_file: Option<std::path::PathBuf>,
    /// The private key (PEM) of `tls_cert_file`.
    #[serde(default)]
    pub tls_key_file: Option<std::path::PathBuf>,
    /// The HTTP server: base path, trusted proxies, read and metrics credentials.
    #[serde(default)]
    pub http: HttpConfig,
    #[serde(default)]
    pub zookeeper: Vec<ZkSourceConfig>,
    #[serde(default)]
    pub redis: Vec<RedisSourceConfig>,
    #[serde(default)]
    pub redlock: Vec<RedlockConfig>,
    #[serde(default)]
    pub etcd: Vec<EtcdSourceConfig>,
    /// MariaDB/MySQL servers.
    #[serde(default)]
    pub mysql: Vec<DbSourceConfig>,
    #[serde(default)]
    pub postgres: Vec<DbSourceConfig>,
    #[serde(default)]
    pub metrics: MetricsConfig,
    #[serde(default)]
    pub ui: UiConfig,
    /// How long a wait or a hold may last before it is marked stuck.
    #[serde(default)]
    pub stuck: StuckConfig,
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
    /// Release requests that fail authentication allowed per client address and minute;
    /// past it, the client's requests are refused before their credentials are looked at.
    #[serde(default = "default_failed_auth_per_minute")]
    pub max_failed_auth_per_minute: u32,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            tokens: Vec::new(),
            read_tokens: Vec::new(),
            max_releases_per_minute: default_releases_per_minute(),
            max_failed_auth_per_minute: default_failed_auth_per_minute(),
        }
    }
}

fn default_releases_per_minute() -> u32 {
    30
}

fn default_failed_auth_per_minute() -> u32 {
    10
}

/// A named bearer token, given inline, through an environment variable, or as a bcrypt hash
/// (`token_hash`, the one way that keeps it out of the file). Never printed.
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    pub name: String,
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub token_env: Option<String>,
    #[serde(default)]
    pub token_hash: Option<String>,
}

impl fmt::Debug for TokenConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenConfig")
            .field("name", &self.name)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("token_env", &self.token_env)
            .field("token_hash", &self.token_hash.as_ref().map(|_| "<hash>"))
            .finish()
    }
}

impl TokenConfig {
    /// The clear secret, from the file or the named environment variable.
    pub fn secret(&self) -> Option<String> {
        match (&self.token, &self.token_env) {
            (Some(t), _) => Some(t.clone()),
            (None, Some(var)) => std::env::var(var).ok(),
            (None, None) => None,
        }
    }

    /// What a presented token is checked against: the hash, or the clear secret.
    pub fn stored(&self) -> Option<crate::credentials::Secret> {
        match &self.token_hash {
            Some(hash) => Some(crate::credentials::Secret::Hash(hash.clone())),
            None => self.secret().map(crate::credentials::Secret::Clear),
        }
    }
}

/// The HTTP server's own settings (`[http]`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Serve everything under this path (`/lockscope`), for a proxy that forwards a sub-path
    /// as it is; empty: at the root.
    #[serde(default)]
    pub base_path: String,
    /// Proxies (addresses or CIDRs) whose `X-Forwarded-For` names the client.
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// When set, reads (API, event streams, the UI page with basic users) need one of these.
    #[serde(default)]
    pub read_auth: Option<AuthConfig>,
    /// When set, `/metrics`, `/healthz` and `/readyz` need one of these; open otherwise.
    #[serde(default)]
    pub metrics_auth: Option<AuthConfig>,
    /// `/metrics` open to anyone although reads need credentials (it names lock paths); by
    /// default it then needs read credentials (or `metrics_auth`'s).
    #[serde(default)]
    pub metrics_open: bool,
    /// A connection that has not sent a whole request head this long after it opened (or after
    /// its last answer, between requests) is closed.
    #[serde(default = "default_header_read_timeout", with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// A connection whose request is being answered but that moved no byte either way this
    /// long is closed (a client that stopped reading; event streams send a comment every 15 s).
    #[serde(default = "default_idle_timeout", with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Open connections at most; past it a new one closes an idle one, those that have not
    /// sent a whole request head first, or is itself closed.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Open event streams per client address (IPv6: per /64) at most.
    #[serde(default = "default_max_streams_per_client")]
    pub max_streams_per_client: usize,
    /// Distinct live views (event streams with different queries) at most; past it a new one
    /// ends the least recently opened one.
    #[serde(default = "default_max_live_views")]
    pub max_live_views: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            base_path: String::new(),
            trusted_proxies: Vec::new(),
            read_auth: None,
            metrics_auth: None,
            metrics_open: false,
            header_read_timeout: default_header_read_timeout(),
            idle_timeout: default_idle_timeout(),
            max_connections: default_max_connections(),
            max_streams_per_client: default_max_streams_per_client(),
            max_live_views: default_max_live_views(),
        }
    }
}

fn default_header_read_timeout() -> Duration {
    Duration::from_secs(10)
}

/// Longer than a force release may run without a byte (its deadline, 60 s).
fn default_idle_timeout() -> Duration {
    Duration::from_secs(90)
}

fn default_max_connections() -> usize {
    4096
}

fn default_max_streams_per_client() -> usize {
    32
}

fn default_max_live_views() -> usize {
    128
}

impl HttpConfig {
    /// The base path as routes use it: `""` or `/x` without a trailing slash.
    pub fn base(&self) -> String {
        self.base_path.trim_end_matches('/').to_string()
    }

    /// `trusted_proxies` parsed (an address alone is a network of one); invalid ones skipped
    /// (validation reports them).
    pub fn trusted(&self) -> Vec<ipnet::IpNet> {
        self.trusted_proxies
            .iter()
            .filter_map(|p| parse_net(p).ok())
            .collect()
    }
}

fn parse_net(text: &str) -> Result<ipnet::IpNet, String> {
    let text = text.trim();
    text.parse::<ipnet::IpNet>()
        .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("{text:?} is not an address or CIDR (e.g. 10.0.0.0/8)"))
}

/// Credentials stored as bcrypt hashes, never in clear: bearer tokens and basic-auth users
/// (`basic_auth_users = { alice = "$2y$10$…" }`, as in Prometheus' web config file).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    #[serde(default)]
    pub bearer_tokens: Vec<HashedToken>,
    #[serde(default)]
    pub basic_auth_users: std::collections::BTreeMap<String, String>,
}

impl AuthConfig {
    /// The set [`crate::credentials`] checks.
    pub fn credentials(&self) -> crate::credentials::CredentialSet {
        use crate::credentials::{CredentialSet, Secret};
        let mut set = CredentialSet::default();
        for t in &self.bearer_tokens {
            set = set.bearer(&t.name, Secret::Hash(t.token_hash.clone()));
        }
        for (user, hash) in &self.basic_auth_users {
            set = set.basic(user, Secret::Hash(hash.clone()));
        }
        set
    }

    fn validate(&self, at: &str) -> Vec<String> {
        let mut problems = Vec::new();
        if self.bearer_tokens.is_empty() && self.basic_auth_users.is_empty() {
            problems.push(format!(
                "{at} needs bearer_tokens or basic_auth_users (leave the table out for open access)"
            ));
        }
        let mut names = std::collections::BTreeSet::new();
        for (i, t) in self.bearer_tokens.iter().enumerate() {
            if t.name.trim().is_empty() {
                problems.push(format!("{at}.bearer_tokens[{i}].name must not be empty"));
            } else if !names.insert(t.name.clone()) {
                problems.push(format!(
                    "{at}.bearer_tokens[{i}].name {:?} is used twice",
                    t.name
                ));
            }
            if let Err(e) = crate::credentials::check_hash(&t.token_hash) {
                problems.push(format!("{at}.bearer_tokens[{i}].token_hash {e}"));
            }
        }
        for (user, hash) in &self.basic_auth_users {
            if user.is_empty() || user.contains(':') {
                problems.push(format!(
                    "{at}.basic_auth_users: user {user:?} must be non-empty without ':'"
                ));
            }
            if let Err(e) = crate::credentials::check_hash(hash) {
                problems.push(format!("{at}.basic_auth_users.{user} {e}"));
            }
        }
        problems
    }
}

/// A named bearer token known only by its bcrypt hash.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HashedToken {
    pub name: String,
    pub token_hash: String,
}

impl fmt::Debug for HashedToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HashedToken")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The web UI: where its built assets are and what it flags.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UiConfig {
    /// Serve the UI from this directory (relative to the working directory), read per
    /// request, instead of the copy built into the binary: for UI development against
    /// `frontend/dist`. Unset by default; `LOCKSCOPE_UI_DIR` sets it.
    #[serde(default)]
    pub assets_dir: Option<std::path::PathBuf>,
    /// A lock held longer than this is shown (and counted) as stale.
    #[serde(default = "default_stale_hold", with = "humantime_serde")]
    pub stale_hold: Duration,
}

impl Default for UiConfig {
    fn default() -> Self {
        Self {
            assets_dir: None,
            stale_hold: default_stale_hold(),
        }
    }
}

fn default_stale_hold() -> Duration {
    Duration::from_secs(300)
}

/// The four limits of `[stuck]`, `[stuck.sources.<name>]` and `[stuck.recipes.<recipe>]`;
/// an unset one is inherited (recipe, then source, then global).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StuckLimitsConfig {
    #[serde(default, with = "humantime_serde")]
    pub wait_warning: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub wait_critical: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub hold_warning: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub hold_critical: Option<Duration>,
}

impl StuckLimitsConfig {
    pub const KEYS: &'static [&'static str] = &[
        "wait_warning",
        "wait_critical",
        "hold_warning",
        "hold_critical",
    ];

    fn rules(&self) -> lockscope_model::wire::StuckRules {
        let ms = |d: Option<Duration>| d.map(|d| d.as_millis().min(i64::MAX as u128) as i64);
        lockscope_model::wire::StuckRules {
            wait: lockscope_model::wire::StuckLimits {
                warning_ms: ms(self.wait_warning),
                critical_ms: ms(self.wait_critical),
            },
            hold: lockscope_model::wire::StuckLimits {
                warning_ms: ms(self.hold_warning),
                critical_ms: ms(self.hold_critical),
            },
        }
    }

    fn validate(&self, at: &str, problems: &mut Vec<String>) {
        for (kind, warning, critical) in [
            ("wait", self.wait_warning, self.wait_critical),
            ("hold", self.hold_warning, self.hold_critical),
        ] {
            for (level, limit) in [("warning", warning), ("critical", critical)] {
                if limit == Some(Duration::ZERO) {
                    problems.push(format!("{at}{kind}_{level} must be longer than 0s"));
                }
            }
            if let (Some(w), Some(c)) = (warning, critical) {
                // A zero limit is reported above already.
                if w > c && !c.is_zero() {
                    problems.push(format!(
                        "{at}{kind}_warning ({}) is longer than {at}{kind}_critical ({}): a warning comes first",
                        humantime_serde::re::humantime::format_duration(w),
                        humantime_serde::re::humantime::format_duration(c)
                    ));
                }
            }
        }
    }
}

/// Whether some backend decodes locks as `recipe` (a name the API shows).
fn known_recipe(recipe: &str) -> bool {
    use lockscope_model::{database::DbRecipe, etcd::EtcdRecipe, redis::RedisRecipe, zk::Recipe};
    Recipe::ALL.iter().any(|r| r.as_str() == recipe)
        || RedisRecipe::ALL.iter().any(|r| r.as_str() == recipe)
        || EtcdRecipe::ALL.iter().any(|r| r.as_str() == recipe)
        || DbRecipe::ALL.iter().any(|r| r.as_str() == recipe)
        || matches!(recipe, "redlock" | "redisson_redlock")
}

/// `[stuck]`: past these a wait or a hold is marked (warning, critical) in the UI, the API's
/// `stuck` and `lockscope_lock_stuck`. The global limits are the section's own keys;
/// `[stuck.sources.<source name>]` and `[stuck.recipes.<recipe>]` override them key by key.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StuckConfig {
    #[serde(default = "default_wait_warning", with = "humantime_serde")]
    pub wait_warning: Option<Duration>,
    #[serde(default = "default_wait_critical", with = "humantime_serde")]
    pub wait_critical: Option<Duration>,
    #[serde(default = "default_hold_warning", with = "humantime_serde")]
    pub hold_warning: Option<Duration>,
    #[serde(default = "default_hold_critical", with = "humantime_serde")]
    pub hold_critical: Option<Duration>,
    #[serde(default)]
    pub sources: std::collections::BTreeMap<String, StuckLimitsConfig>,
    #[serde(default)]
    pub recipes: std::collections::BTreeMap<String, StuckLimitsConfig>,
}

fn default_wait_warning() -> Option<Duration> {
    Some(Duration::from_secs(30))
}
fn default_wait_critical() -> Option<Duration> {
    Some(Duration::from_secs(120))
}
fn default_hold_warning() -> Option<Duration> {
    Some(Duration::from_secs(300))
}
fn default_hold_critical() -> Option<Duration> {
    Some(Duration::from_secs(1800))
}

impl Default for StuckConfig {
    fn default() -> Self {
        StuckConfig {
            wait_warning: default_wait_warning(),
            wait_critical: default_wait_critical(),
            hold_warning: default_hold_warning(),
            hold_critical: default_hold_critical(),
            sources: Default::default(),
            recipes: Default::default(),
        }
    }
}

impl StuckConfig {
    pub const KEYS: &'static [&'static str] = &[
        "wait_warning",
        "wait_critical",
        "hold_warning",
        "hold_critical",
        "sources",
        "recipes",
    ];

    fn global(&self) -> StuckLimitsConfig {
        StuckLimitsConfig {
            wait_warning: self.wait_warning,
            wait_critical: self.wait_critical,
            hold_warning: self.hold_warning,
            hold_critical: self.hold_critical,
        }
    }

    /// The limits as the model judges them.
    pub fn thresholds(&self) -> lockscope_model::wire::StuckThresholds {
        lockscope_model::wire::StuckThresholds {
            global: self.global().rules(),
            sources: self
                .sources
                .iter()
                .map(|(k, v)| (k.clone(), v.rules()))
                .collect(),
            recipes: self
                .recipes
                .iter()
                .map(|(k, v)| (k.clone(), v.rules()))
                .collect(),
        }
    }

    /// Every problem: zero limits, a warning longer than its critical at one level, a source
    /// that is not configured, a recipe lockscope does not know.
    fn validate(&self, sources: &[&str], problems: &mut Vec<String>) {
        self.global().validate("stuck.", problems);
        for (name, limits) in &self.sources {
            limits.validate(&format!("stuck.sources.{name}."), problems);
            if !sources.contains(&name.as_str()) {
                problems.push(format!(
                    "stuck.sources.{name}: no source is named {name:?} (configured: {})",
                    sources.join(", ")
                ));
            }
        }
        for (name, limits) in &self.recipes {
            limits.validate(&format!("stuck.recipes.{name}."), problems);
            if !known_recipe(name) {
                problems.push(format!(
                    "stuck.recipes.{name}: lockscope knows no recipe {name:?} (the recipe names the API shows, e.g. curator_mutex, token_lock)"
                ));
            }
        }
    }
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

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7070))
}
fn default_max_lock_labels() -> usize {
    500
}
impl Default for Config {
    fn default() -> Self {
        Self {
            listen: default_listen(),
            tls_cert_file: None,
            tls_key_file: None,
            http: HttpConfig::default(),
            zookeeper: Vec::new(),
            redis: Vec::new(),
            redlock: Vec::new(),
            etcd: Vec::new(),
            mysql: Vec::new(),
            postgres: Vec::new(),
            metrics: MetricsConfig::default(),
            ui: UiConfig::default(),
            stuck: StuckConfig::default(),
            admin: AdminConfig::default(),
            store: StoreConfig::default(),
        }
    }
}

/// The keys each table accepts; used to list every unknown key at once (serde stops at the first).
const TOP_KEYS: &[&str] = &[
    "listen",
    "tls_cert_file",
    "tls_key_file",
    "http",
    "zookeeper",
    "redis",
    "redlock",
    "etcd",
    "mysql",
    "postgres",
    "metrics",
    "ui",
    "stuck",
    "admin",
    "store",
];
const ADMIN_KEYS: &[&str] = &[
    "enabled",
    "tokens",
    "read_tokens",
    "max_releases_per_minute",
    "max_failed_auth_per_minute",
];
const TOKEN_KEYS: &[&str] = &["name", "token", "token_env", "token_hash"];
const HTTP_KEYS: &[&str] = &[
    "base_path",
    "trusted_proxies",
    "read_auth",
    "metrics_auth",
    "metrics_open",
    "header_read_timeout",
    "idle_timeout",
    "max_connections",
    "max_streams_per_client",
    "max_live_views",
];
const AUTH_KEYS: &[&str] = &["bearer_tokens", "basic_auth_users"];
const HASHED_TOKEN_KEYS: &[&str] = &["name", "token_hash"];
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
                config.ui.assets_dir = Some(dir.into());
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
                let given = [
                    t.token.is_some(),
                    t.token_env.is_some(),
                    t.token_hash.is_some(),
                ];
                match given.iter().filter(|g| **g).count() {
                    0 => problems.push(format!("{at}: token, token_env or token_hash is required")),
                    1 => {}
                    _ => {
                        problems.push(format!("{at}: give one of token, token_env and token_hash"))
                    }
                }
                if let (None, Some(var)) = (&t.token, &t.token_env) {
                    if std::env::var(var).is_err() {
                        problems.push(format!(
                            "{at}.token_env: environment variable {var} is not set"
                        ));
                    }
                }
                if let Some(hash) = &t.token_hash {
                    if let Err(e) = crate::credentials::check_hash(hash) {
                        problems.push(format!("{at}.token_hash {e}"));
                    }
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
            if !self.store.configured() {
                problems.push(
                    "admin.enabled needs a store ([store] url): every force release is audited there".into(),
                );
            }
        }
        if admin.max_releases_per_minute == 0 {
            problems.push("admin.max_releases_per_minute must be at least 1".into());
        }
        if admin.max_failed_auth_per_minute == 0 {
            problems.push("admin.max_failed_auth_per_minute must be at least 1".into());
        }
        problems.extend(self.store.validate());
        problems
    }

    fn validate_http(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let base = &self.http.base_path;
        if !base.is_empty()
            && (!base.starts_with('/')
                || base.contains(['?', '#', ' '])
                || base.contains("//")
                || base.split('/').any(|s| s == ".." || s == "."))
        {
            problems.push(format!(
                "http.base_path {base:?} must be a path like \"/lockscope\" (starting with '/')"
            ));
        }
        for p in &self.http.trusted_proxies {
            if let Err(e) = parse_net(p) {
                problems.push(format!("http.trusted_proxies: {e}"));
            }
        }
        if let Some(auth) = &self.http.read_auth {
            problems.extend(auth.validate("http.read_auth"));
        }
        if let Some(auth) = &self.http.metrics_auth {
            problems.extend(auth.validate("http.metrics_auth"));
        }
        let http = &self.http;
        for (key, value) in [
            ("header_read_timeout", http.header_read_timeout),
            ("idle_timeout", http.idle_timeout),
        ] {
            if value.is_zero() {
                problems.push(format!("http.{key} must be longer than 0 s"));
            }
        }
        for (key, value) in [
            ("max_connections", http.max_connections),
            ("max_streams_per_client", http.max_streams_per_client),
            ("max_live_views", http.max_live_views),
        ] {
            if value == 0 {
                problems.push(format!("http.{key} must be at least 1"));
            }
        }
        match (&self.tls_cert_file, &self.tls_key_file) {
            (Some(cert), Some(key)) => {
                if let Err(e) = crate::server_tls::load(cert, key) {
                    problems.push(e);
                }
            }
            (Some(_), None) => problems.push("tls_cert_file needs tls_key_file".into()),
            (None, Some(_)) => problems.push("tls_key_file needs tls_cert_file".into()),
            (None, None) => {}
        }
        problems
    }

    /// Semantic checks; returns every problem found.
    pub fn validate(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if source_names(self).is_empty() {
            let tables: Vec<String> = CONFIG_SECTIONS
                .iter()
                .map(|(section, _)| format!("[[{section}]]"))
                .collect();
            problems.push(format!(
                "no sources configured: add at least one {} or {} table",
                tables[..tables.len() - 1].join(", "),
                tables[tables.len() - 1]
            ));
        }
        problems.extend(validate_sources(self));
        problems.extend(self.validate_admin());
        problems.extend(self.validate_http());
        if self.ui.stale_hold.is_zero() {
            problems.push("ui.stale_hold must be longer than 0s".into());
        }
        if self.metrics.max_lock_labels == 0 {
            problems.push("metrics.max_lock_labels must be at least 1".into());
        }
        let configured: Vec<&str> = source_names(self).into_iter().map(|(_, n)| n).collect();
        self.stuck.validate(&configured, &mut problems);
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
        for (at, name) in source_names(self) {
            check_name(&at, name, &mut problems);
        }
        problems
    }
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
    for (section, keys) in CONFIG_SECTIONS {
        if let Some(toml::Value::Array(sources)) = table.get_mut(*section) {
            for (i, source) in sources.iter_mut().enumerate() {
                if let toml::Value::Table(t) = source {
                    let known: Vec<&str> = keys.iter().flat_map(|k| k.iter()).copied().collect();
                    check(t, &known, &format!("{section}[{i}]."));
                    if let Some(toml::Value::Array(tables)) = t.get_mut("lock_tables") {
                        for (j, lock_table) in tables.iter_mut().enumerate() {
                            if let toml::Value::Table(lt) = lock_table {
                                check(
                                    lt,
                                    LockTableConfig::KEYS,
                                    &format!("{section}[{i}].lock_tables[{j}]."),
                                );
                            }
                        }
                    }
                }
            }
        }
    }
    if let Some(toml::Value::Table(t)) = table.get_mut("ui") {
        check(t, UI_KEYS, "ui.");
    }
    if let Some(toml::Value::Table(t)) = table.get_mut("store") {
        check(t, StoreConfig::KEYS, "store.");
    }
    if let Some(toml::Value::Table(t)) = table.get_mut("stuck") {
        check(t, StuckConfig::KEYS, "stuck.");
        for part in ["sources", "recipes"] {
            if let Some(toml::Value::Table(named)) = t.get_mut(part) {
                for (name, limits) in named.iter_mut() {
                    if let toml::Value::Table(l) = limits {
                        check(l, StuckLimitsConfig::KEYS, &format!("stuck.{part}.{name}."));
                    }
                }
            }
        }
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
    if let Some(toml::Value::Table(http)) = table.get_mut("http") {
        check(http, HTTP_KEYS, "http.");
        for section in ["read_auth", "metrics_auth"] {
            if let Some(toml::Value::Table(auth)) = http.get_mut(section) {
                check(auth, AUTH_KEYS, &format!("http.{section}."));
                if let Some(toml::Value::Array(tokens)) = auth.get_mut("bearer_tokens") {
                    for (i, token) in tokens.iter_mut().enumerate() {
                        if let toml::Value::Table(t) = token {
                            check(
                                t,
                                HASHED_TOKEN_KEYS,
                                &format!("http.{section}.bearer_tokens[{i}]."),
                            );
                        }
                    }
                }
            }
        }
    }
    problems
}

/// Every backend's config sections: (table name, the key lists its tables accept).
pub(crate) const CONFIG_SECTIONS: &[(&str, &[&[&str]])] = &[
    (
        "zookeeper",
        &[crate::backends::zookeeper::ZkSourceConfig::KEYS],
    ),
    (
        "redis",
        &[
            crate::backends::redis::RedisSourceConfig::KEYS,
            crate::backends::redis::config::WATCH_KEYS,
        ],
    ),
    (
        "redlock",
        &[
            crate::backends::redis::RedlockConfig::KEYS,
            crate::backends::redis::config::WATCH_KEYS,
        ],
    ),
    ("etcd", &[crate::backends::etcd::EtcdSourceConfig::KEYS]),
    ("mysql", &[crate::backends::database::DbSourceConfig::KEYS]),
    (
        "postgres",
        &[crate::backends::database::DbSourceConfig::KEYS],
    ),
];

/// Every configured source as (`section[i]`, name), for checks across sources.
pub(crate) fn source_names(config: &Config) -> Vec<(String, &str)> {
    let mut out = Vec::new();
    out.extend(
        config
            .zookeeper
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("zookeeper[{i}]"), s.name.as_str())),
    );
    out.extend(
        config
            .redis
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("redis[{i}]"), s.name.as_str())),
    );
    out.extend(
        config
            .redlock
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("redlock[{i}]"), s.name.as_str())),
    );
    out.extend(
        config
            .etcd
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("etcd[{i}]"), s.name.as_str())),
    );
    for (flavor, sources) in [
        (crate::backends::database::Flavor::Mysql, &config.mysql),
        (
            crate::backends::database::Flavor::Postgres,
            &config.postgres,
        ),
    ] {
        out.extend(
            sources
                .iter()
                .enumerate()
                .map(|(i, s)| (format!("{}[{i}]", flavor.section()), s.name.as_str())),
        );
    }
    out
}

/// Every problem each backend finds with its own sections (each backend validates its own).
pub(crate) fn validate_sources(config: &Config) -> Vec<String> {
    let mut problems = Vec::new();
    for (i, s) in config.zookeeper.iter().enumerate() {
        problems.extend(s.validate(&format!("zookeeper[{i}]")));
    }
    for (i, s) in config.redis.iter().enumerate() {
        problems.extend(s.validate(&format!("redis[{i}]")));
    }
    for (i, s) in config.redlock.iter().enumerate() {
        problems.extend(s.validate(&format!("redlock[{i}]")));
    }
    for (i, s) in config.etcd.iter().enumerate() {
        problems.extend(s.validate(&format!("etcd[{i}]")));
    }
    for (flavor, sources) in [
        (crate::backends::database::Flavor::Mysql, &config.mysql),
        (
            crate::backends::database::Flavor::Postgres,
            &config.postgres,
        ),
    ] {
        for (i, s) in sources.iter().enumerate() {
            problems.extend(s.validate(&format!("{}[{i}]", flavor.section()), flavor));
        }
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

    /// `check-config` on database lock tables: an unknown layout, Spring's keys without it, a
    /// missing key column and an unknown key of a lock table are all listed, with the rest.
    #[test]
    fn stuck_limits_resolve_and_every_problem_is_listed() {
        let err = Config::parse(
            r#"
            [[zookeeper]]
            name = "zk"
            connect = "127.0.0.1:2181"
            roots = ["/locks"]
            [stuck]
            wait_warning = "5m"
            wait_critical = "1m"
            hold_critical = "0s"
            colour = "red"
            [stuck.sources.nowhere]
            hold_warning = "1m"
            [stuck.recipes.curator_mutex]
            hold_warning = "2m"
            [stuck.recipes.no_such_recipe]
            wait_warning = "1s"
            soon = "1s"
            "#,
        )
        .expect_err("invalid");
        let text = err.to_string();
        for needle in [
            "unknown key stuck.\"colour\"",
            "unknown key stuck.recipes.no_such_recipe.\"soon\"",
            "stuck.wait_warning (5m) is longer than stuck.wait_critical (1m)",
            "stuck.hold_critical must be longer than 0s",
            "stuck.sources.nowhere: no source is named \"nowhere\"",
            "stuck.recipes.no_such_recipe: lockscope knows no recipe",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in {text}");
        }
        assert_eq!(err.0.len(), 6, "{text}");
        let ok = Config::parse(
            r#"
            [[zookeeper]]
            name = "zk"
            connect = "127.0.0.1:2181"
            roots = ["/locks"]
            [stuck]
            hold_warning = "10m"
            [stuck.sources.zk]
            hold_warning = "1m"
            [stuck.recipes.shedlock]
            hold_warning = "2h"
            "#,
        )
        .expect("valid");
        let t = ok.stuck.thresholds();
        // Unset global limits keep their defaults; overrides apply key by key.
        assert_eq!(t.global.wait.warning_ms, Some(30_000));
        assert_eq!(
            t.for_lock("zk", "curator_mutex").hold.warning_ms,
            Some(60_000)
        );
        assert_eq!(
            t.for_lock("zk", "shedlock").hold.warning_ms,
            Some(7_200_000)
        );
        assert_eq!(
            t.for_lock("zk", "shedlock").hold.critical_ms,
            Some(1_800_000)
        );
        assert_eq!(t.for_lock("other", "queue").hold.warning_ms, Some(600_000));
    }

    #[test]
    fn lock_table_layout_problems_are_listed_with_the_rest() {
        let err = Config::parse(
            r#"
            [[postgres]]
            name = "p"
            url = "postgres://lockscope@127.0.0.1:5432/app"
            poll_interval = "1ms"
            lock_tables = [
              { table = "int_lock", layout = "spring_integration", names = ["orders", "invoice/42"] },
              { table = "int_lock", layout = "spring-integration" },
              { table = "shedlock", key = "name", names = ["orders"] },
              { table = "int_lock", layout = "spring_integration", prefix = "INT_" },
            ]
            [[mysql]]
            name = "m"
            url = "mysql://lockscope@127.0.0.1:3306/"
            lock_tables = [{ table = "app.INT_LOCK", layout = "spring_integration", until = "CREATED_DATE" }]
            "#,
        )
        .expect_err("invalid");
        let text = err.to_string();
        for needle in [
            "postgres[0].poll_interval",
            "postgres[0].lock_tables[1].layout \"spring-integration\" is not a known layout",
            "postgres[0].lock_tables[2].owner is required",
            "postgres[0].lock_tables[2].names is read only with layout",
            "unknown key postgres[0].lock_tables[3].\"prefix\"",
            "mysql[0].lock_tables[0].until = \"CREATED_DATE\"",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in {text}");
        }
        assert_eq!(err.0.len(), 6, "{text}");
        let ok = Config::parse(
            r#"
            [[postgres]]
            name = "p"
            url = "postgres://lockscope@127.0.0.1:5432/app"
            lock_tables = [{ table = "int_lock", layout = "spring_integration", names = ["orders"] }]
            "#,
        )
        .expect("valid");
        assert_eq!(ok.postgres[0].lock_tables[0].names, ["orders"]);
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
            spring_lock_registries = ["orders", "jobs:batch"]
            [[redlock]]
            name = "orders-redlock"
            urls = ["redis://127.0.0.1:6391", "redis://127.0.0.1:6392", "redis://127.0.0.1:6393"]
            patterns = ["redlock:*"]
            set_notify_config = false
            "#,
        )
        .expect("valid");
        assert_eq!(config.redis[0].watch.semaphores["pool"], 4);
        assert_eq!(
            config.redis[0].spring_lock_registries,
            ["orders", "jobs:batch"]
        );
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
            spring_lock_registries = ["", "orders", "orders"]
            [[redlock]]
            name = "cache"
            urls = ["http://a:1"]
            tls_ca_file = "/nonexistent/ca.pem"
            patterns = ["x"]
            spring_lock_registries = ["orders"]
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
            "redis[0].spring_lock_registries[0] is empty",
            "redis[0].spring_lock_registries[2]: \"orders\" is listed twice",
            // A Redlock set holds no RedisLockRegistry lock: only [[redis]] takes the key.
            "redlock[0].\"spring_lock_registries\"",
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
            "admin.tokens[2]: token, token_env or token_hash is required",
            "admin.enabled needs a store",
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
        assert_eq!(ok.store.keep, Duration::from_secs(86_400));
    }

    #[test]
    fn debug_output_redacts_credentials() {
        let mut zk = ZkSourceConfig::new("a", "127.0.0.1:1", &["/"]);
        zk.digest = Some("user:secret".into());
        assert!(!format!("{zk:?}").contains("secret"));
    }
}
