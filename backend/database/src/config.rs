//! The `[[mysql]]` and `[[postgres]]` config sections (one shape for both): their keys,
//! defaults and validation (every problem listed). The password comes from the URL or from
//! `password_env` and is never printed.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use lockscope_model::database::SpringLockNames;
use serde::Deserialize;

pub use lockscope_core::tls_files::TlsMode;

use lockscope_core::collect::redact_url;

/// A table that keeps locks as rows (`{ table = "app.database_lock", key = "resource",
/// owner = "description" }`, with `until = "lock_until"` for an expiry column such as
/// ShedLock's), or a table of a known library's layout (`{ table = "public.int_lock", layout =
/// "spring_integration", names = ["orders"] }`), whose columns default to the library's.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockTableConfig {
    /// `table` or `schema.table` (MariaDB: `database.table`).
    pub table: String,
    /// A library's table layout ([`TableLayout`]): `spring_integration`. Read as text and
    /// checked with the rest, so an unknown layout is one problem among all the others.
    #[serde(default)]
    pub layout: Option<String>,
    /// The column naming the locked resource (unique); required without a layout.
    #[serde(default)]
    pub key: Option<String>,
    /// The column naming who holds it; required without a layout.
    #[serde(default)]
    pub owner: Option<String>,
    /// The expiry column: a row whose expiry has passed is free. Any timestamp type (one
    /// without a time zone is read as UTC) or a number of Unix seconds ([`crate::expiry`]).
    #[serde(default)]
    pub until: Option<String>,
    /// How a numeric `until` column counts: `s` (Unix seconds, the default) or `ms`.
    #[serde(default)]
    pub until_unit: Option<String>,
    /// `spring_integration`: the region column (default `REGION`).
    #[serde(default)]
    pub region: Option<String>,
    /// `spring_integration`: lock names (as the application passes them to `obtain`) whose
    /// rows are shown by name; any other lock shows the UUID Spring stores for its name.
    #[serde(default)]
    pub names: Vec<String>,
    /// `names` by the `LOCK_KEY` each is stored under, hashed once, when first needed.
    #[serde(skip)]
    spring_names: std::sync::OnceLock<SpringLockNames>,
}

/// A library's lock-table layout: lockscope knows its columns, how its rows hold and expire,
/// and how a force release keeps the library's invariants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableLayout {
    /// Spring Integration's `JdbcLockRegistry` with `DefaultLockRepository` (7.x):
    /// `INT_LOCK(LOCK_KEY, REGION, CLIENT_ID, CREATED_DATE, EXPIRED_AFTER)`.
    SpringIntegration,
}

impl TableLayout {
    pub const ALL: [TableLayout; 1] = [TableLayout::SpringIntegration];

    pub fn as_str(self) -> &'static str {
        match self {
            TableLayout::SpringIntegration => "spring_integration",
        }
    }

    pub fn parse(name: &str) -> Option<TableLayout> {
        TableLayout::ALL.into_iter().find(|l| l.as_str() == name)
    }
}

/// The columns lockscope reads of a lock table, with a layout's defaults filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableColumns<'a> {
    pub key: &'a str,
    pub owner: &'a str,
    pub until: Option<&'a str>,
    /// Spring's region column.
    pub region: Option<&'a str>,
}

impl LockTableConfig {
    pub const KEYS: &'static [&'static str] = &[
        "table",
        "layout",
        "key",
        "owner",
        "until",
        "until_unit",
        "region",
        "names",
    ];

    /// A table of `key` and `owner` columns (no layout).
    pub fn new(table: &str, key: &str, owner: &str, until: Option<&str>) -> Self {
        LockTableConfig {
            table: table.to_string(),
            key: Some(key.to_string()),
            owner: Some(owner.to_string()),
            until: until.map(str::to_string),
            ..LockTableConfig::default()
        }
    }

    /// A Spring Integration lock table showing `names` by name (columns as Spring's DDL
    /// creates them).
    pub fn spring(table: &str, names: &[&str]) -> Self {
        LockTableConfig {
            table: table.to_string(),
            layout: Some(TableLayout::SpringIntegration.as_str().to_string()),
            names: names.iter().map(|n| n.to_string()).collect(),
            ..LockTableConfig::default()
        }
    }

    /// The table's name parts (`schema`, `table`).
    pub fn parts(&self) -> Vec<&str> {
        self.table.split('.').collect()
    }

    /// The layout (`None`: none, or one [`Self::validate`] refuses).
    pub fn layout(&self) -> Option<TableLayout> {
        self.layout.as_deref().and_then(TableLayout::parse)
    }

    /// The columns read on `flavor`: those configured, else the layout's. Spring's DDL names
    /// them unquoted in upper case: PostgreSQL folds them to lower case (`lock_key`), MariaDB
    /// keeps them (`LOCK_KEY`; column names are case-insensitive there anyway). lockscope
    /// quotes identifiers, so the defaults are what each database really created.
    pub fn columns(&self, flavor: Flavor) -> TableColumns<'_> {
        let spring = self.layout() == Some(TableLayout::SpringIntegration);
        let default = |postgres: &'static str, mysql: &'static str| match (spring, flavor) {
            (false, _) => None,
            (true, Flavor::Postgres) => Some(postgres),
            (true, Flavor::Mysql) => Some(mysql),
        };
        fn pick<'a>(configured: &'a Option<String>, default: Option<&'a str>) -> Option<&'a str> {
            configured.as_deref().or(default)
        }
        TableColumns {
            key: pick(&self.key, default("lock_key", "LOCK_KEY")).unwrap_or_default(),
            owner: pick(&self.owner, default("client_id", "CLIENT_ID")).unwrap_or_default(),
            until: pick(&self.until, default("expired_after", "EXPIRED_AFTER")),
            region: pick(&self.region, default("region", "REGION")),
        }
    }

    /// How a numeric expiry column counts (seconds unless `until_unit = "ms"`).
    pub fn unit(&self) -> crate::expiry::UntilUnit {
        self.until_unit
            .as_deref()
            .and_then(crate::expiry::UntilUnit::parse)
            .unwrap_or_default()
    }

    /// The configured Spring lock names by their `LOCK_KEY`, hashed on first use.
    pub fn spring_names(&self) -> &SpringLockNames {
        self.spring_names
            .get_or_init(|| SpringLockNames::new(self.names.iter().map(String::as_str)))
    }

    /// Every problem with this table (`at` names it, e.g. `postgres[0].lock_tables[1]`).
    fn validate(&self, at: &str) -> Vec<String> {
        let mut problems = Vec::new();
        let parts = self.parts();
        if parts.len() > 2 || parts.iter().any(|p| !is_identifier(p)) {
            problems.push(format!(
                "{at}.table {:?} is not `table` or `schema.table` (letters, digits, _ and $)",
                self.table
            ));
        }
        let layout = match self.layout.as_deref() {
            None => None,
            Some(name) => match TableLayout::parse(name) {
                Some(layout) => Some(layout),
                None => {
                    problems.push(format!(
                        "{at}.layout {name:?} is not a known layout (one of: {})",
                        TableLayout::ALL.map(TableLayout::as_str).join(", ")
                    ));
                    // Its other keys are not checked against a layout that does not exist.
                    return problems;
                }
            },
        };
        match layout {
            None => {
                for (key, column) in [("key", &self.key), ("owner", &self.owner)] {
                    if column.is_none() {
                        problems.push(format!(
                            "{at}.{key} is required (the column naming the {}), unless a layout gives it (layout = \"spring_integration\")",
                            if key == "key" { "locked resource" } else { "holder" }
                        ));
                    }
                }
                for (key, given) in [
                    ("names", !self.names.is_empty()),
                    ("region", self.region.is_some()),
                ] {
                    if given {
                        problems.push(format!(
                            "{at}.{key} is read only with layout = \"spring_integration\""
                        ));
                    }
                }
            }
            Some(TableLayout::SpringIntegration) => {
                if self
                    .until
                    .as_deref()
                    .is_some_and(|u| u.eq_ignore_ascii_case("created_date"))
                {
                    problems.push(format!(
                        "{at}.until = \"CREATED_DATE\": Spring Integration tables before 7.0 have no EXPIRED_AFTER and keep their TTL only in the clients' configuration, so lockscope cannot tell when such a lock expires and does not read them; upgrade to 7.x (ALTER TABLE INT_LOCK ADD EXPIRED_AFTER TIMESTAMP NOT NULL)"
                    ));
                }
            }
        }
        if let Some(unit) = &self.until_unit {
            if crate::expiry::UntilUnit::parse(unit).is_none() {
                problems.push(format!(
                    "{at}.until_unit {unit:?} is not \"s\" (Unix seconds) or \"ms\" (milliseconds)"
                ));
            } else if self.until.is_none() || layout.is_some() {
                problems.push(format!(
                    "{at}.until_unit is read only with an `until` column of your own (no layout)"
                ));
            }
        }
        for (key, column) in [
            ("key", &self.key),
            ("owner", &self.owner),
            ("until", &self.until),
            ("region", &self.region),
        ] {
            if let Some(column) = column {
                if !is_identifier(column) {
                    problems.push(format!(
                        "{at}.{key} {column:?} is not a column name (letters, digits, _ and $)"
                    ));
                }
            }
        }
        problems
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
    /// How long the source may stay silent (no answer to a query or to a ping between rounds) before it is shown not up, its locks marked as last seen.
    #[serde(
        default = "lockscope_core::collect::default_silence_limit",
        with = "humantime_serde"
    )]
    pub silence_limit: Duration,
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
            .field("silence_limit", &self.silence_limit)
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
            Flavor::Mysql => &[
                LockTable,
                ExpiringLockTable,
                RowLock,
                GetLock,
                SpringJdbcLock,
                TableLock,
            ],
            Flavor::Postgres => &[
                LockTable,
                ExpiringLockTable,
                RowLock,
                Advisory,
                SpringJdbcLock,
                TableLock,
            ],
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
        "silence_limit",
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
            silence_limit: lockscope_core::collect::DEFAULT_SILENCE_LIMIT,
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
        problems.extend(lockscope_core::redact::password_problems(
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
        problems.extend(lockscope_core::collect::silence_problems(
            at,
            self.silence_limit,
        ));
        // A query the server cancels answers (with its error) after the statement timeout:
        // past the silence limit it would be taken for silence.
        if self.silence_limit >= lockscope_core::collect::MIN_SILENCE_LIMIT
            && self.statement_timeout >= self.silence_limit
        {
            problems.push(format!(
                "{at}.statement_timeout ({}) must be shorter than silence_limit ({})",
                lockscope_core::collect::seconds(self.statement_timeout),
                lockscope_core::collect::seconds(self.silence_limit)
            ));
        }
        if self.max_rows == 0 {
            problems.push(format!("{at}.max_rows must be at least 1"));
        }
        problems.extend(lockscope_core::tls_files::check(
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
            problems.extend(table.validate(&format!("{at}.lock_tables[{i}]")));
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
        c.lock_tables
            .push(LockTableConfig::new("a.b.c", "re source", "o", Some("1x")));
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

    /// A statement the server cancels must answer before lockscope calls the source silent;
    /// a limit under a second is refused; both listed with the rest.
    #[test]
    fn the_silence_limit_is_checked_against_the_statement_timeout() {
        let mut c = DbSourceConfig::new("db", "postgres://lockscope@127.0.0.1:5432/app");
        assert_eq!(
            c.silence_limit,
            lockscope_core::collect::DEFAULT_SILENCE_LIMIT
        );
        c.statement_timeout = Duration::from_secs(10);
        let problems = c.validate("postgres[0]", Flavor::Postgres);
        assert_eq!(
            problems,
            vec!["postgres[0].statement_timeout (10 s) must be shorter than silence_limit (10 s)"]
        );
        c.silence_limit = Duration::from_millis(500);
        c.max_rows = 0;
        let problems = c.validate("postgres[0]", Flavor::Postgres);
        assert_eq!(problems.len(), 2, "{problems:#?}");
        assert!(problems[0].contains("silence_limit must be at least 1 s"));
        let text = r#"
            name = "db"
            url = "postgres://lockscope@127.0.0.1:5432/app"
            silence_limit = "4s"
        "#;
        let parsed: DbSourceConfig = toml::from_str(text).expect("parses");
        assert_eq!(parsed.silence_limit, Duration::from_secs(4));
        assert!(DbSourceConfig::KEYS.contains(&"silence_limit"));
    }

    /// Every problem of every lock table at once: an unknown layout, the keys a plain table
    /// needs, Spring's keys on a plain table, a pre-7.0 Spring table, bad column names.
    #[test]
    fn lock_table_layouts_are_checked_with_everything_else() {
        let text = r#"
            name = "db"
            url = "postgres://lockscope@127.0.0.1:5432/app"
            lock_tables = [
              { table = "int_lock", layout = "spring_integration", names = ["orders", "invoice/42"] },
              { table = "int_lock", layout = "spring" },
              { table = "app.database_lock", key = "resource" },
              { table = "shedlock", owner = "locked_by", names = ["x"], region = "region" },
              { table = "int_lock", layout = "spring_integration", until = "CREATED_DATE" },
              { table = "int_lock", layout = "spring_integration", region = "re gion" },
              { table = "cache_locks", key = "key", owner = "owner", until = "expiration", until_unit = "us" },
              { table = "cache_locks", key = "key", owner = "owner", until_unit = "ms" },
              { table = "jobs", key = "k", owner = "o", until = "until_ms", until_unit = "ms" },
            ]
        "#;
        let c: DbSourceConfig = toml::from_str(text).expect("parses: layouts are checked later");
        let problems = c.validate("postgres[0]", Flavor::Postgres);
        let expected = [
            "postgres[0].lock_tables[1].layout \"spring\" is not a known layout (one of: spring_integration)",
            "postgres[0].lock_tables[2].owner is required",
            "postgres[0].lock_tables[3].key is required",
            "postgres[0].lock_tables[3].names is read only with layout = \"spring_integration\"",
            "postgres[0].lock_tables[3].region is read only with layout = \"spring_integration\"",
            "postgres[0].lock_tables[4].until = \"CREATED_DATE\": Spring Integration tables before 7.0",
            "postgres[0].lock_tables[5].region \"re gion\" is not a column name",
            "postgres[0].lock_tables[6].until_unit \"us\" is not \"s\" (Unix seconds) or \"ms\"",
            "postgres[0].lock_tables[7].until_unit is read only with an `until` column",
        ];
        assert_eq!(problems.len(), expected.len(), "{problems:#?}");
        for (problem, start) in problems.iter().zip(expected) {
            assert!(problem.starts_with(start), "{problem:?} ≠ {start:?}…");
        }
    }

    #[test]
    fn spring_columns_are_what_each_database_creates_and_names_are_hashed_once() {
        let spring = LockTableConfig::spring("int_lock", &["orders", "invoice/42"]);
        assert!(spring.validate("t").is_empty());
        let pg = spring.columns(Flavor::Postgres);
        assert_eq!(
            (pg.key, pg.owner, pg.until, pg.region),
            (
                "lock_key",
                "client_id",
                Some("expired_after"),
                Some("region")
            )
        );
        let my = spring.columns(Flavor::Mysql);
        assert_eq!(
            (my.key, my.owner, my.until, my.region),
            (
                "LOCK_KEY",
                "CLIENT_ID",
                Some("EXPIRED_AFTER"),
                Some("REGION")
            )
        );
        let renamed = LockTableConfig {
            region: Some("lock_region".into()),
            ..LockTableConfig::spring("int_lock", &[])
        };
        assert_eq!(
            renamed.columns(Flavor::Postgres).region,
            Some("lock_region")
        );
        let names = spring.spring_names();
        assert_eq!(
            names.name_of("12c500ed-0b78-3910-9fb4-6af0f246be87"),
            Some("orders")
        );
        assert!(std::ptr::eq(names, spring.spring_names()), "computed once");
        let plain = LockTableConfig::new("shedlock", "name", "locked_by", Some("lock_until"));
        let cols = plain.columns(Flavor::Mysql);
        assert_eq!(
            (cols.key, cols.until, cols.region),
            ("name", Some("lock_until"), None)
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
