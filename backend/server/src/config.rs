//! Configuration: the TOML file, environment overrides, and validation in one place.
//!
//! Every problem is collected and reported together (unknown keys, bad values, duplicate source
//! names), so an operator fixes a config in one pass; `main` exits with status 2 on any of them.
//! Secrets (digest credentials) may come from the environment and are never printed: `Debug`
//! output redacts them.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;

use serde::Deserialize;

pub use crate::registry::{section, ConfiguredSource};
pub use lockscope_core::collect::redact_url;
pub use lockscope_database::{DbSource, DbSourceConfig, LockTableConfig};
pub use lockscope_etcd::EtcdSourceConfig;
pub use lockscope_http::config::*;
pub use lockscope_redis::{RedisSourceConfig, RedisWatchConfig, RedlockConfig};
pub use lockscope_store::StoreConfig;
pub use lockscope_zookeeper::ZkSourceConfig;

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
    /// changes ([`lockscope_http::server_tls`]).
    #[serde(default)]
    pub tls_cert_file: Option<std::path::PathBuf>,
    /// The private key (PEM) of `tls_cert_file`.
    #[serde(default)]
    pub tls_key_file: Option<std::path::PathBuf>,
    /// The HTTP server: base path, trusted proxies, read and metrics credentials.
    #[serde(default)]
    pub http: HttpConfig,
    /// Every source, from the sections the registry's backends read (`[[zookeeper]]`,
    /// `[[redis]]` …), in registry order and then file order.
    #[serde(skip)]
    pub sources: Vec<ConfiguredSource>,
    #[serde(default)]
    pub metrics: MetricsConfig,
    #[serde(default)]
    pub ui: UiConfig,
    /// How long a wait or a hold may last before it is marked stuck.
    #[serde(default)]
    pub stuck: StuckConfig,
    /// Rules that name sessions' processes where conventions differ between sources.
    #[serde(default)]
    pub identity: Vec<lockscope_http::config::IdentityRuleConfig>,
    #[serde(default)]
    pub admin: AdminConfig,
    #[serde(default)]
    pub store: StoreConfig,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 7070))
}
impl Default for Config {
    fn default() -> Self {
        Self {
            listen: default_listen(),
            tls_cert_file: None,
            tls_key_file: None,
            http: HttpConfig::default(),
            sources: Vec::new(),
            metrics: MetricsConfig::default(),
            ui: UiConfig::default(),
            stuck: StuckConfig::default(),
            identity: Vec::new(),
            admin: AdminConfig::default(),
            store: StoreConfig::default(),
        }
    }
}

/// The keys each table accepts; used to list every unknown key at once (serde stops at the first).
/// The backends' sections come from the registry.
const TOP_KEYS: &[&str] = &[
    "listen",
    "tls_cert_file",
    "tls_key_file",
    "http",
    "metrics",
    "ui",
    "stuck",
    "identity",
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
    /// The sections the HTTP layer reads.
    pub fn http_sections(&self) -> lockscope_http::config::Sections<'_> {
        lockscope_http::config::Sections {
            http: &self.http,
            admin: &self.admin,
            ui: &self.ui,
            stuck: &self.stuck,
            identity: &self.identity,
        }
    }

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
        let sources = take_sources(&mut value, &mut problems);
        let mut config: Option<Config> = None;
        match Config::deserialize(toml::Value::Table(value)) {
            Ok(parsed) => config = Some(Config { sources, ..parsed }),
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
                    if let Err(e) = lockscope_http::credentials::check_hash(hash) {
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
                if let Err(e) = lockscope_http::server_tls::load(cert, key) {
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
            let tables: Vec<String> = crate::registry::sections()
                .map(|section| format!("[[{}]]", section.name))
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
        let recipes: Vec<&str> = crate::registry::BACKENDS
            .iter()
            .flat_map(|b| b.recipes().iter().copied())
            .collect();
        self.stuck.validate(&configured, &recipes, &mut problems);
        for (i, rule) in self.identity.iter().enumerate() {
            rule.validate(i, &configured, &mut problems);
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
    let top: Vec<&str> = TOP_KEYS
        .iter()
        .copied()
        .chain(crate::registry::sections().map(|s| s.name))
        .collect();
    check(table, &top, "");
    for section in crate::registry::sections() {
        let name = section.name;
        if let Some(toml::Value::Array(sources)) = table.get_mut(name) {
            for (i, source) in sources.iter_mut().enumerate() {
                if let toml::Value::Table(t) = source {
                    let known: Vec<&str> = section
                        .keys
                        .iter()
                        .flat_map(|k| k.iter())
                        .copied()
                        .collect();
                    check(t, &known, &format!("{name}[{i}]."));
                    for (key, keys) in section.nested {
                        if let Some(toml::Value::Array(tables)) = t.get_mut(*key) {
                            for (j, nested) in tables.iter_mut().enumerate() {
                                if let toml::Value::Table(nt) = nested {
                                    check(nt, keys, &format!("{name}[{i}].{key}[{j}]."));
                                }
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
    if let Some(toml::Value::Array(rules)) = table.get_mut("identity") {
        for (i, rule) in rules.iter_mut().enumerate() {
            if let toml::Value::Table(t) = rule {
                check(
                    t,
                    lockscope_http::config::IdentityRuleConfig::KEYS,
                    &format!("identity[{i}]."),
                );
            }
        }
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

/// Takes the backends' sections out of `table` and reads each of their tables as a source with
/// its backend's descriptor, in registry order; what does not read is a problem naming it.
fn take_sources(table: &mut toml::Table, problems: &mut Vec<String>) -> Vec<ConfiguredSource> {
    let mut sources = Vec::new();
    for backend in crate::registry::BACKENDS {
        for section in backend.sections() {
            let name = section.name;
            let tables = match table.remove(name) {
                None => continue,
                Some(toml::Value::Array(tables)) => tables,
                Some(_) => {
                    problems.push(format!("{name} must be an array of tables ([[{name}]])"));
                    continue;
                }
            };
            for (i, source) in tables.into_iter().enumerate() {
                let at = format!("{name}[{i}]");
                match backend.source(name, source) {
                    Ok(config) => sources.push(ConfiguredSource { at, config }),
                    Err(e) => problems.push(format!("{at}: {e}")),
                }
            }
        }
    }
    sources
}

/// Every configured source as (`section[i]`, name), for checks across sources.
pub(crate) fn source_names(config: &Config) -> Vec<(String, &str)> {
    config
        .sources
        .iter()
        .map(|s| (s.at.clone(), s.config.name()))
        .collect()
}

/// Every problem each backend finds with its own sources (each backend validates its own).
pub(crate) fn validate_sources(config: &Config) -> Vec<String> {
    config
        .sources
        .iter()
        .flat_map(|s| s.config.validate(&s.at))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Table `i` of section `name` in `text` read as its backend's type `T`, after checking
    /// `config` (parsed from `text`) has that source (parsing keeps it behind its descriptor).
    fn typed<T: serde::de::DeserializeOwned>(
        config: &Config,
        text: &str,
        name: &str,
        i: usize,
    ) -> T {
        let at = format!("{name}[{i}]");
        assert!(config.sources.iter().any(|s| s.at == at), "no {at}");
        let table: toml::Table = toml::from_str(text).expect("toml");
        table[name].as_array().expect("array")[i]
            .clone()
            .try_into()
            .expect("typed")
    }

    #[test]
    fn parses_minimal_and_full_configs() {
        let text = r#"
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
            "#;
        let config = Config::parse(text).expect("valid");
        assert_eq!(config.sources.len(), 2);
        let zk: ZkSourceConfig = typed(&config, text, "zookeeper", 0);
        assert_eq!(zk.members().len(), 3);
        assert_eq!(zk.session_timeout, Duration::from_secs(6));
        assert_eq!(zk.max_leases["/locks/sem"], 3);
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

    /// `[[identity]]` rules: a bad pattern, an empty name, an unknown source and an unknown key
    /// are all listed; good rules rename a process.
    #[test]
    fn identity_rules_are_checked_and_rename_processes() {
        let err = Config::parse(
            r#"
            [[zookeeper]]
            name = "zk"
            connect = "127.0.0.1:2181"
            roots = ["/locks"]
            [[identity]]
            source = "nowhere"
            pattern = "(unclosed"
            name = ""
            [[identity]]
            pattern = "x"
            name = "y"
            colour = "red"
            "#,
        )
        .expect_err("invalid");
        let text = err.to_string();
        for needle in [
            "identity[0].pattern is not a regular expression",
            "identity[0].name must not be empty",
            "identity[0].source: no source is named \"nowhere\"",
            "unknown key identity[1].\"colour\"",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in {text}");
        }
        let ok = Config::parse(
            r#"
            [[zookeeper]]
            name = "zk"
            connect = "127.0.0.1:2181"
            roots = ["/locks"]
            [[identity]]
            source = "zk"
            pattern = "^(svc-[a-z]+)-[0-9a-f]+$"
            name = "$1"
            "#,
        )
        .expect("valid");
        let rules = lockscope_http::http::waitfor::IdentityRules::compile(&ok.identity);
        let process = |name: &str| lockscope_model::wire::ProcessView {
            name: name.into(),
            from: "identifier".into(),
            exact: true,
        };
        let renamed = rules.apply("zk", process("svc-a-7f3c"));
        assert_eq!(
            (renamed.name.as_str(), renamed.from.as_str()),
            ("svc-a", "rule")
        );
        assert!(renamed.exact);
        // Another source, or a name the pattern does not match, keeps its name.
        assert_eq!(rules.apply("pg", process("svc-a-7f3c")).name, "svc-a-7f3c");
        assert_eq!(rules.apply("zk", process("worker")).name, "worker");
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
        let text = r#"
            [[postgres]]
            name = "p"
            url = "postgres://lockscope@127.0.0.1:5432/app"
            lock_tables = [{ table = "int_lock", layout = "spring_integration", names = ["orders"] }]
            "#;
        let ok = Config::parse(text).expect("valid");
        let pg: DbSourceConfig = typed(&ok, text, "postgres", 0);
        assert_eq!(pg.lock_tables[0].names, ["orders"]);
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
        let text = "[[zookeeper]]\nname = \"a\"\nconnect = \"127.0.0.1:1\"\nroots = [\"/\"]\ndigest_env = \"PATH\"\n";
        let ok = Config::parse(text).expect("valid");
        assert_eq!(
            typed::<ZkSourceConfig>(&ok, text, "zookeeper", 0).digest_credentials(),
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
        let text = r#"
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
            "#;
        let config = Config::parse(text).expect("valid");
        let redis: RedisSourceConfig = typed(&config, text, "redis", 0);
        assert_eq!(redis.watch.semaphores["pool"], 4);
        assert_eq!(redis.spring_lock_registries, ["orders", "jobs:batch"]);
        assert!(redis.cluster);
        let redlock: RedlockConfig = typed(&config, text, "redlock", 0);
        assert!(!redlock.watch.set_notify_config);
        assert!(!format!("{:?}", config.sources[0]).contains("pw"));
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
