//! The `[[mysql]]` and `[[postgres]]` config sections (one shape for both): their keys,
//! defaults and validation (every problem listed). The password comes from the URL or from
//! `password_env` and is never printed.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

pub use crate::tls_files::TlsMode;

use crate::collect::redact_url;

/// A table that keeps locks as rows (`{ table = "app.database_lock", key = "resource",
/// owner = "description" }`, with `until = "lock_until"` for an expiry column such as
/// ShedLock's).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct LockTableConfig {
    /// `table` or `schema.table` (MariaDB: `database.table`).
    pub table: String,
    /// The column naming the locked resource (unique).
    pub key: String,
    /// The column naming who holds it.
    pub owner: String,
    /// The expiry column: a row whose expiry has passed is free.
    #[serde(default)]
    pub until: Option<String>,
}

impl LockTableConfig {
    pub const KEYS: &'static [&'static str] = &["table", "key", "owner", "until"];

    /// The table's name parts (`schema`, `table`).
    pub fn parts(&self) -> Vec<&str> {
        self.table.split('.').collect()
    }
}

/// One MariaDB/MySQL or PostgreSQL server.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DbSourceConfig {
    pub name: String,
    /// `mysql://user[:password]@host:port/[db]` or `postgres://user[:password]@host:port/db`.
    pub url: String,
    /// The password from this environment variable instead of the URL.
    #[serde(default)]
    pub password_env: Option<String>,
    /// How often the lock views are read.
    #[serde(default = "default_poll", with = "humantime_serde")]
    pub poll_interval: Duration,
    /// How long one of lockscope's queries may run before the server cancels it.
    #[serde(default = "default_statement_timeout", with = "humantime_serde")]
    pub statement_timeout: Duration,
    /// Tables that keep locks as rows.
    #[serde(default)]
    pub lock_tables: Vec<LockTableConfig>,
    /// Rows read per round at most from each view or table (a bound on one round's work).
    #[serde(default = "default_max_rows")]
    pub max_rows: u32,
    /// TLS: the CA that signed the server's certificate (the server is then verified:
    /// `verify-full` unless `tls_mode` says otherwise), and a client certificate and key.
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
    #[serde(default)]
    pub tls_cert_file: Option<PathBuf>,
    #[serde(default)]
    pub tls_key_file: Option<PathBuf>,
    /// How TLS is used; unset: `verify-full` with a `tls_ca_file`, else the driver's default
    /// (TLS when the server offers it, unverified) or the URL's `sslmode` / `ssl-mode`.
    #[serde(default)]
    pub tls_mode: Option<TlsMode>,
}

fn default_poll() -> Duration {
    Duration::from_secs(1)
}

fn default_statement_timeout() -> Duration {
    Duration::from_secs(2)
}

fn default_max_rows() -> u32 {
    100_000
}

impl fmt::Debug for DbSourceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DbSourceConfig")
            .field("name", &self.name)
            .field("url", &redact_url(&self.url))
            .field("password_env", &self.password_env)
            .field("poll_interval", &self.poll_interval)
            .field("statement_timeout", &self.statement_timeout)
            .field("lock_tables", &self.lock_tables)
            .field("max_rows", &self.max_rows)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("tls_cert_file", &self.tls_cert_file)
            .field("tls_mode", &self.tls_mode)
            .finish_non_exhaustive()
    }
}

/// Which database a section is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Mysql,
    Postgres,
}

impl Flavor {
    pub fn section(self) -> &'static str {
        match self {
            Flavor::Mysql => "mysql",
            Flavor::Postgres => "postgres",
        }
    }

    pub fn backend(self) -> lockscope_model::wire::Backend {
        match self {
            Flavor::Mysql => lockscope_model::wire::Backend::Mysql,
            Flavor::Postgres => lockscope_model::wire::Backend::Postgres,
        }
    }

    /// The recipes this database has.
    pub fn recipes(self) -> &'static [lockscope_model::database::DbRecipe] {
        use lockscope_model::database::DbRecipe::*;
        match self {
            Flavor::Mysql => &[LockTable, ExpiringLockTable, RowLock, GetLock],
            Flavor::Postgres => &[LockTable, ExpiringLockTable, RowLock, Advisory],
        }
    }

    fn schemes(self) -> &'static [&'static str] {
        match self {
            Flavor::Mysql => &["mysql", "mariadb"],
            Flavor::Postgres => &["postgres", "postgresql"],
        }
    }
}

impl DbSourceConfig {
    pub const KEYS: &'static [&'static str] = &[
        "name",
        "url",
        "password_env",
        "poll_interval",
        "statement_timeout",
        "lock_tables",
        "max_rows",
        "tls_ca_file",
        "tls_cert_file",
        "tls_key_file",
        "tls_mode",
    ];

    /// A source with defaults for everything optional.
    pub fn new(name: &str, url: &str) -> Self {
        DbSourceConfig {
            name: name.to_string(),
            url: url.to_string(),
            password_env: None,
            poll_interval: default_poll(),
            statement_timeout: default_statement_timeout(),
            lock_tables: Vec::new(),
            max_rows: default_max_rows(),
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            tls_mode: None,
        }
    }

    /// The TLS mode lockscope asks the driver for: `tls_mode`, else `verify-full` when a CA
    /// is given; `None`: the driver's default (or the URL's).
    pub fn effective_tls_mode(&self) -> Option<TlsMode> {
        self.tls_mode
            .or(self.tls_ca_file.as_ref().map(|_| TlsMode::VerifyFull))
    }

    /// What a TLS failure is checked against, for its error text: the mode and the CA file.
    pub fn tls_context(&self) -> String {
        let mode = self.effective_tls_mode().map_or("default", TlsMode::name);
        match &self.tls_ca_file {
            Some(ca) => format!(
                "TLS {mode}: the server's certificate is checked against tls_ca_file {}",
                ca.display()
            ),
            None => format!("TLS {mode}, no tls_ca_file: the system's CA roots"),
        }
    }

    /// The URL with the password from `password_env` put in (when configured), for the driver.
    pub fn connect_url(&self) -> String {
        let Some(password) = self
            .password_env
            .as_ref()
            .and_then(|var| std::env::var(var).ok())
        else {
            return self.url.clone();
        };
        let Some(scheme) = self.url.find("://") else {
            return self.url.clone();
        };
        let rest = &self.url[scheme + 3..];
        let Some(at) = rest.find('@') else {
            return self.url.clone();
        };
        let user = rest[..at].split(':').next().unwrap_or_default();
        format!(
            "{}{user}:{}{}",
            &self.url[..scheme + 3],
            percent_encode(&password),
            &rest[at..]
        )
    }

    /// Every problem with this section (`at` names it, e.g. `mysql[0]`).
    pub fn validate(&self, at: &str, flavor: Flavor) -> Vec<String> {
        let mut problems = Vec::new();
        let scheme = self.url.split("://").next().unwrap_or_default();
        if !self.url.contains("://") || !flavor.schemes().contains(&scheme) {
            problems.push(format!(
                "{at}.url: {} is not a {} URL",
                redact_url(&self.url),
                flavor
                    .schemes()
                    .iter()
                    .map(|s| format!("{s}://"))
                    .collect::<Vec<_>>()
                    .join(" or ")
            ));
        } else {
            let rest = &self.url[scheme.len() + 3..];
            let authority = rest.split('/').next().unwrap_or_default();
            let host = authority.rsplit('@').next().unwrap_or_default();
            if !authority.contains('@') {
                problems.push(format!("{at}.url names no user (user@host)"));
            }
            if host.is_empty() {
                problems.push(format!("{at}.url names no host"));
            }
        }
        problems.extend(crate::redact::password_problems(
            at,
            &self.url,
            self.password_env.as_deref(),
        ));
        if self.poll_interval < Duration::from_millis(100) {
            problems.push(format!("{at}.poll_interval must be at least 100ms"));
        }
        if self.statement_timeout < Duration::from_millis(100) {
            problems.push(format!("{at}.statement_timeout must be at least 100ms"));
        }
        if self.max_rows == 0 {
            problems.push(format!("{at}.max_rows must be at least 1"));
        }
        problems.extend(crate::tls_files::check(
            at,
            self.tls_ca_file.as_deref(),
            self.tls_cert_file.as_deref(),
            self.tls_key_file.as_deref(),
        ));
        if self.tls_mode == Some(TlsMode::Disable)
            && (self.tls_ca_file.is_some() || self.tls_cert_file.is_some())
        {
            problems.push(format!(
                "{at}: tls_mode = \"disable\" with TLS files; drop one or the other"
            ));
        }
        for (i, table) in self.lock_tables.iter().enumerate() {
            let parts = table.parts();
            if parts.len() > 2 || parts.iter().any(|p| !is_identifier(p)) {
                problems.push(format!(
                    "{at}.lock_tables[{i}].table {:?} is not `table` or `schema.table` (letters, digits, _ and $)",
                    table.table
                ));
            }
            for (key, column) in [
                ("key", Some(&table.key)),
                ("owner", Some(&table.owner)),
                ("until", table.until.as_ref()),
            ] {
                if let Some(column) = column {
                    if !is_identifier(column) {
                        problems.push(format!(
                            "{at}.lock_tables[{i}].{key} {column:?} is not a column name (letters, digits, _ and $)"
                        ));
                    }
                }
            }
        }
        problems
    }
}

/// A plain SQL identifier: quoted by lockscope, so only names that need no escaping.
fn is_identifier(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
        && !name.starts_with(|c: char| c.is_ascii_digit())
}

fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_is_listed_and_the_password_is_never_printed() {
        let mut c = DbSourceConfig::new("db", "redis://root:hunter2@127.0.0.1:3306/");
        c.poll_interval = Duration::from_millis(1);
        c.lock_tables.push(LockTableConfig {
            table: "a.b.c".into(),
            key: "re source".into(),
            owner: "o".into(),
            until: Some("1x".into()),
        });
        let problems = c.validate("mysql[0]", Flavor::Mysql);
        assert_eq!(problems.len(), 5, "{problems:#?}");
        assert!(!problems.join(" ").contains("hunter2"));
        assert!(!format!("{c:?}").contains("hunter2"));
        let ok = DbSourceConfig::new("db", "postgres://lockscope@127.0.0.1:5432/app");
        assert!(ok.validate("postgres[0]", Flavor::Postgres).is_empty());
        assert_eq!(
            ok.validate("mysql[0]", Flavor::Mysql).len(),
            1,
            "a postgres URL in a mysql section"
        );
    }

    #[test]
    fn a_ca_means_verified_and_disable_takes_no_files() {
        let mut c = DbSourceConfig::new("db", "postgres://lockscope@127.0.0.1:5432/app");
        assert_eq!(c.effective_tls_mode(), None, "the driver's default");
        c.tls_ca_file = Some("/nonexistent/ca.pem".into());
        assert_eq!(c.effective_tls_mode(), Some(TlsMode::VerifyFull));
        c.tls_mode = Some(TlsMode::Disable);
        let problems = c.validate("postgres[0]", Flavor::Postgres);
        assert_eq!(problems.len(), 2, "{problems:#?}");
        assert!(problems[0].starts_with("postgres[0].tls_ca_file /nonexistent/ca.pem"));
        assert!(problems[1].contains("disable"));
        let parsed: DbSourceConfig =
            toml::from_str("name = \"db\"\nurl = \"mysql://u@h:1/\"\ntls_mode = \"verify-ca\"\n")
                .expect("parse");
        assert_eq!(parsed.tls_mode, Some(TlsMode::VerifyCa));
    }

    #[test]
    fn password_env_goes_into_the_url() {
        std::env::set_var("LOCKSCOPE_TEST_DB_PASSWORD", "p@ss:w/rd");
        let mut c = DbSourceConfig::new("db", "mysql://app@127.0.0.1:3306/x");
        c.password_env = Some("LOCKSCOPE_TEST_DB_PASSWORD".into());
        assert_eq!(
            c.connect_url(),
            "mysql://app:p%40ss%3Aw%2Frd@127.0.0.1:3306/x"
        );
        assert!(c.validate("mysql[0]", Flavor::Mysql).is_empty());
    }
}
