//! The database backends (MariaDB/MySQL `[[mysql]]` and PostgreSQL `[[postgres]]`), all of
//! them: their config sections ([`config`]), the polling collector ([`collect`], with each
//! database's read-only queries in [`mysql`] and [`postgres`]), their state in the aggregator
//! ([`state`]: lock tables, row locks, named locks through the neutral ledger; connections as
//! sessions) and their guarded force release ([`release`]).
//!
//! Databases cannot be watched: each source is polled every `poll_interval` with a fixed, small
//! set of read-only queries under a statement timeout (see `shared/LOCK_LAYOUTS.md`, "Databases",
//! for what each server shows). The decoding of what the queries return into holders and
//! waiters is pure and lives in `lockscope_model::database`.

pub mod collect;
pub mod config;
pub mod error;
pub mod expiry;
pub mod mysql;
pub mod postgres;
pub mod release;
pub mod state;

pub use config::{DbSourceConfig, Flavor, LockTableConfig, TlsMode};
pub use error::DbError;
use lockscope_model::database::DbLock;
use lockscope_model::wire::ConnectionView;

/// A connection as one round saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbConnection {
    /// MariaDB's connection id, PostgreSQL's backend pid.
    pub id: i64,
    pub view: ConnectionView,
    /// The database shows it being killed (MariaDB's `Killed` command).
    pub killed: bool,
}

/// Everything one poll read, at `at_ms` (lockscope's clock; the server's times are shifted by
/// the clock difference measured in the same round).
#[derive(Debug, Clone, Default)]
pub struct DbRound {
    pub at_ms: i64,
    pub locks: Vec<DbLock>,
    pub connections: Vec<DbConnection>,
    /// Parts of the round that failed (a missing privilege, a table that cannot be read, a
    /// query that timed out): the rest is applied, these are the source's error.
    pub problems: Vec<String>,
    /// What this source cannot show (listed in the API and the UI).
    pub limits: Vec<String>,
    /// Queries the round ran.
    pub queries: u32,
}

/// What a database collector reports.
#[derive(Debug)]
pub enum DbUpdate {
    /// Connection state changed; `up == false` carries the reason and, for a session that
    /// ends, when the source was last seen (epoch ms; `None`: now).
    Status {
        up: bool,
        error: Option<String>,
        last_seen_ms: Option<i64>,
    },
    /// One poll's locks and connections.
    Round(Box<DbRound>),
}

use lockscope_model::wire::{SessionView, SourceView};

use lockscope_core::aggregate::counters::{BackendFamily, SourceSample};
use lockscope_core::aggregate::counters::{LockCounters, MetricsInput};
use std::sync::Arc;

use lockscope_core::aggregate::{ledger_metrics, History, LedgerContext, Model, SourceModel};
use lockscope_core::backend::{
    BackendDescriptor, BuiltSource, Section, SourceConfig, SourceContext,
};
use prometheus_client::metrics::MetricType;

/// The families a database source adds to `/metrics`: its polling.
static ROUNDS: BackendFamily = BackendFamily {
    name: "lockscope_db_rounds",
    kind: MetricType::Counter,
    help: "Poll rounds a database source's collector completed (databases cannot be watched).",
};
static QUERIES: BackendFamily = BackendFamily {
    name: "lockscope_db_queries",
    kind: MetricType::Counter,
    help: "Read-only queries lockscope ran against a database source.",
};
static FAILED_ROUNDS: BackendFamily = BackendFamily {
    name: "lockscope_db_failed_rounds",
    kind: MetricType::Counter,
    help: "Poll rounds with a query the database refused or cancelled (a missing privilege, the statement timeout); the source's error says which.",
};

impl Model for state::DbSourceState {
    type Update = DbUpdate;
    fn apply(&mut self, update: DbUpdate, cx: &mut LedgerContext<'_>) {
        state::DbSourceState::apply(self, update, cx);
    }
}

impl SourceModel for state::DbSourceState {
    fn recipe_labels(&self) -> &'static [&'static str] {
        recipe_labels()
    }
    fn view(&mut self) -> SourceView {
        self.view.clone()
    }
    fn history_of(&self, id: &str) -> Option<&History> {
        self.ledger.history_of(id)
    }
    fn sessions(&self) -> Vec<SessionView> {
        state::DbSourceState::sessions(self)
    }
    fn metrics(&self, input: &mut MetricsInput) {
        input
            .sources
            .push(ledger_metrics(&self.view, &self.ledger, 0));
        for (family, value) in [
            (&ROUNDS, self.rounds()),
            (&QUERIES, self.queries),
            (&FAILED_ROUNDS, self.failed_rounds),
        ] {
            input.backend_samples.push(SourceSample {
                family,
                source: self.name().to_string(),
                backend: self.flavor.backend(),
                value: value as f64,
            });
        }
    }
    fn counters(&mut self) -> &mut LockCounters {
        &mut self.ledger.counters
    }
}

/// The database backend's descriptor: `[[mysql]]` (MariaDB/MySQL) and `[[postgres]]` sources
/// (the registry's line).
pub static BACKEND: Databases = Databases;

/// See [`BACKEND`].
#[derive(Debug)]
pub struct Databases;

impl BackendDescriptor for Databases {
    fn recipes(&self) -> &'static [&'static str] {
        recipe_labels()
    }

    fn sections(&self) -> &'static [Section] {
        &[
            Section {
                name: "mysql",
                keys: &[DbSourceConfig::KEYS],
                nested: &[("lock_tables", LockTableConfig::KEYS)],
            },
            Section {
                name: "postgres",
                keys: &[DbSourceConfig::KEYS],
                nested: &[("lock_tables", LockTableConfig::KEYS)],
            },
        ]
    }

    fn source(&self, section: &str, table: toml::Value) -> Result<Arc<dyn SourceConfig>, String> {
        let config: DbSourceConfig = table.try_into().map_err(|e| e.message().to_string())?;
        let flavor = match section {
            "postgres" => Flavor::Postgres,
            _ => Flavor::Mysql,
        };
        Ok(Arc::new(DbSource { config, flavor }))
    }

    fn families(&self) -> &'static [&'static BackendFamily] {
        static FAMILIES: [&BackendFamily; 3] = [&ROUNDS, &QUERIES, &FAILED_ROUNDS];
        &FAMILIES
    }
}

/// One database source: its settings and which database it is.
#[derive(Debug, Clone)]
pub struct DbSource {
    pub config: DbSourceConfig,
    pub flavor: Flavor,
}

impl SourceConfig for DbSource {
    fn name(&self) -> &str {
        &self.config.name
    }
    fn backend(&self) -> lockscope_model::wire::Backend {
        self.flavor.backend()
    }
    fn validate(&self, at: &str) -> Vec<String> {
        self.config.validate(at, self.flavor)
    }
    fn build(&self, ctx: SourceContext) -> BuiltSource {
        let model =
            state::DbSourceState::new(self.config.clone(), self.flavor, ctx.max_lock_labels);
        let (out, model) = ctx.connect(model);
        let config = Arc::new(self.config.clone());
        let collector: futures::future::BoxFuture<'static, ()> = match self.flavor {
            Flavor::Mysql => Box::pin(async move {
                let poll = collect::run::<mysql::MysqlPoller>(config, out.clone());
                out.until_stopped(poll).await
            }),
            Flavor::Postgres => Box::pin(async move {
                let poll = collect::run::<postgres::PgPoller>(config, out.clone());
                out.until_stopped(poll).await
            }),
        };
        BuiltSource {
            model,
            collector,
            releaser: Arc::new(release::DbReleaser(self.config.clone(), self.flavor)),
        }
    }
}

impl DbSource {
    /// A `[[mysql]]` source (MariaDB/MySQL).
    pub fn mysql(config: DbSourceConfig) -> Self {
        DbSource {
            config,
            flavor: Flavor::Mysql,
        }
    }

    /// A `[[postgres]]` source.
    pub fn postgres(config: DbSourceConfig) -> Self {
        DbSource {
            config,
            flavor: Flavor::Postgres,
        }
    }
}

/// Every recipe label this backend's locks can carry (its closed set; anything else is
/// `other`).
pub fn recipe_labels() -> &'static [&'static str] {
    static LABELS: std::sync::LazyLock<Vec<&'static str>> = std::sync::LazyLock::new(|| {
        lockscope_model::database::DbRecipe::ALL
            .iter()
            .map(|r| r.as_str())
            .collect()
    });
    &LABELS
}
