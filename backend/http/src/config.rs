//! The configuration sections the HTTP layer reads: `[http]`, `[admin]`, `[ui]`, `[stuck]` and
//! `[metrics]`, with their defaults. The binary's `config.rs` assembles them with the sources'
//! sections and validates the whole.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

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

pub fn parse_net(text: &str) -> Result<ipnet::IpNet, String> {
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

    pub fn validate(&self, at: &str) -> Vec<String> {
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

    pub fn validate(&self, at: &str, problems: &mut Vec<String>) {
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
    /// that is not configured, a recipe none of the backends (`recipes`: all they name) knows.
    pub fn validate(&self, sources: &[&str], recipes: &[&str], problems: &mut Vec<String>) {
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
            if !recipes.contains(&name.as_str()) {
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

/// One `[[identity]]` rule: sessions of `source` (every source when absent) whose process
/// name matches `pattern` are named by `name`, a template over its captures (`$1`, `${svc}`).
/// Use it where conventions differ: a kazoo identifier `svc-a-7f3c` and an `application_name`
/// `svc-a` become one process with `pattern = "^(svc-[a-z]+)-[0-9a-f]+$"`, `name = "$1"`.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentityRuleConfig {
    #[serde(default)]
    pub source: Option<String>,
    pub pattern: String,
    pub name: String,
}

impl IdentityRuleConfig {
    pub const KEYS: &'static [&'static str] = &["source", "pattern", "name"];

    /// Every problem of rule `i`, given the configured sources.
    pub fn validate(&self, i: usize, sources: &[&str], problems: &mut Vec<String>) {
        if let Err(e) = regex::Regex::new(&self.pattern) {
            problems.push(format!(
                "identity[{i}].pattern is not a regular expression: {e}"
            ));
        }
        if self.name.is_empty() {
            problems.push(format!("identity[{i}].name must not be empty"));
        }
        if let Some(source) = &self.source {
            if !sources.contains(&source.as_str()) {
                problems.push(format!(
                    "identity[{i}].source: no source is named {source:?}"
                ));
            }
        }
    }
}

/// The sections the HTTP layer reads, borrowed from the assembled configuration.
#[derive(Debug, Clone, Copy)]
pub struct Sections<'a> {
    pub http: &'a HttpConfig,
    pub admin: &'a AdminConfig,
    pub ui: &'a UiConfig,
    pub stuck: &'a StuckConfig,
    pub identity: &'a [IdentityRuleConfig],
}

fn default_max_lock_labels() -> usize {
    500
}
