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

use std::any::Any;

use lockscope_model::wire::{SessionView, SourceView};

use lockscope_core::aggregate::counters::{LockCounters, MetricsInput};
use lockscope_core::aggregate::{ledger_metrics, open_update, History, LedgerContext, SourceModel};

impl SourceModel for state::DbSourceState {
    fn apply(&mut self, update: Box<dyn Any + Send>, cx: &mut LedgerContext<'_>) {
        if let Some(update) = open_update::<DbUpdate>(update, &self.view.name) {
            state::DbSourceState::apply(self, update, cx);
        }
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
        input
            .databases
            .push(lockscope_core::aggregate::counters::DatabaseMetrics {
                name: self.name().to_string(),
                backend: self.flavor.backend(),
                rounds: self.rounds(),
                queries: self.queries,
                failed_rounds: self.failed_rounds,
            });
    }
    fn counters(&mut self) -> &mut LockCounters {
        &mut self.ledger.counters
    }
}
