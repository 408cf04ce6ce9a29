//! The database collector: one connection per source (never a pool), opened with the session
//! set up for observing only (read-only transactions, a statement timeout, a short lock wait
//! timeout), then a round of read-only queries every `poll_interval` ([`Poller::poll`]). A round
//! that fails only in parts is still sent, with its problems; a broken connection is dropped and
//! reopened with the shared [`Backoff`]; a database down at start is retried the same way.
//!
//! Silence: every query must answer within the source's `silence_limit` of the last answer
//! ([`Watched`]), and between rounds further apart than half the limit the connection is
//! pinged, so a path that goes silent (no FIN, no RST) ends the connection within the limit
//! whatever `poll_interval` is; a statement the server cancels answers well before (the
//! configuration keeps `statement_timeout` under the limit).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lockscope_model::clip::{from_hex, Clipped};
use lockscope_model::database::{spring_lock, table_row_lock, DbLock, TableRow};

use super::config::{DbSourceConfig, Flavor, LockTableConfig, TableLayout};
use super::error::DbError;
use super::expiry::ExpiryKind;
use super::{DbRound, DbUpdate};
use lockscope_core::collect::redact_url;
use lockscope_core::collect::{within_silence, Backoff, Heard, Outbox};

/// A connection whose every request must answer within `limit` of the last answer heard on
/// it: past that the server is silent ([`DbError::Silent`]).
pub struct Watched<C> {
    pub conn: C,
    pub heard: Heard,
    pub limit: Duration,
    /// The server, as the error names it (`host:port`).
    pub server: String,
}

impl<C> Watched<C> {
    pub fn new(conn: C, config: &DbSourceConfig, heard: Heard) -> Self {
        heard.now();
        Watched {
            conn,
            heard,
            limit: config.silence_limit,
            server: server_of(&config.url),
        }
    }

    /// Runs one request on the connection, `Err` when the server stays silent past the
    /// limit (the request is then dropped half-way, and the connection with it).
    pub async fn answer<T>(
        &mut self,
        request: impl FnOnce(&mut C) -> std::pin::Pin<Box<dyn Future<Output = T> + Send + '_>>,
    ) -> Result<T, DbError> {
        let heard = self.heard.clone();
        let limit = self.limit;
        let server = self.server.clone();
        within_silence(&heard, limit, request(&mut self.conn))
            .await
            .ok_or(DbError::Silent { server, limit })
    }
}

impl<C: sqlx::Connection> Watched<C> {
    /// A round trip that says the server still answers (between rounds further apart than the
    /// silence limit allows).
    pub async fn ping(&mut self) -> Result<(), DbError> {
        self.answer(|c| Box::pin(sqlx::Connection::ping(c)))
            .await?
            .map_err(|source| DbError::Connection {
                what: "ping",
                source,
            })
    }
}

/// `host:port` of a database URL (what a silence error names; no credentials).
fn server_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host)
        .to_string()
}

/// One database's way of reading its locks over one connection.
pub trait Poller: Sized + Send {
    /// Connects and sets the session up for observing; what it hears goes to `heard`.
    fn connect(
        config: &DbSourceConfig,
        heard: Heard,
    ) -> impl Future<Output = Result<Self, DbError>> + Send;
    /// A round trip that reads nothing (between rounds far apart), under the silence limit.
    fn ping(&mut self) -> impl Future<Output = Result<(), DbError>> + Send;
    /// Reads one round. `previous`: the last round's locks (row locks whose holder is still
    /// open are carried while the database no longer lists them).
    fn poll(
        &mut self,
        config: &DbSourceConfig,
        previous: &[DbLock],
    ) -> impl Future<Output = Result<DbRound, DbError>> + Send;
}

/// Runs the collector of one database source with its database's poller `P` until lockscope
/// stops.
pub async fn run<P: Poller>(config: Arc<DbSourceConfig>, out: Outbox<DbUpdate>) {
    let mut backoff = Backoff::new();
    loop {
        backoff.attempt();
        let heard = Heard::new();
        let reason = match session::<P>(&config, &out, &heard).await {
            Ok(()) => return,
            Err(reason) => reason,
        };
        tracing::warn!(source = %config.name, %reason, "database source down; retrying");
        out.reconnected();
        if !out
            .send(DbUpdate::Status {
                up: false,
                error: Some(reason.to_string()),
                last_seen_ms: Some(heard.at_ms()),
            })
            .await
        {
            return;
        }
        backoff.wait().await;
    }
}

/// One connection's life: `Ok` when the aggregator has gone, else why the connection ended.
async fn session<P: Poller>(
    config: &DbSourceConfig,
    out: &Outbox<DbUpdate>,
    heard: &Heard,
) -> Result<(), DbError> {
    let connect_limit = Backoff::CONNECT_TIMEOUT.min(config.silence_limit);
    let connecting = P::connect(config, heard.clone());
    let mut poller = match tokio::time::timeout(connect_limit, connecting).await {
        Ok(connected) => connected?,
        Err(_) => {
            return Err(DbError::ConnectTimeout {
                url: redact_url(&config.url),
                secs: connect_limit.as_secs_f64(),
            })
        }
    };
    if !out
        .send(DbUpdate::Status {
            up: true,
            error: None,
            last_seen_ms: None,
        })
        .await
    {
        return Ok(());
    }
    // Every query of a round is cancelled by the server after `statement_timeout`; a round
    // that outlives a few of them has a connection that does not answer.
    let round_limit = config.statement_timeout * 4 + Duration::from_secs(2);
    let mut ticks = tokio::time::interval(config.poll_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut previous: Vec<DbLock> = Vec::new();
    // Rounds further apart than this leave the connection unchecked for too long: it is pinged
    // meanwhile.
    let ping_every = config.silence_limit / 2;
    loop {
        if config.poll_interval > ping_every {
            let tick = ticks.tick();
            tokio::pin!(tick);
            loop {
                tokio::select! {
                    _ = &mut tick => break,
                    () = tokio::time::sleep(ping_every) => poller.ping().await?,
                }
            }
        } else {
            ticks.tick().await;
        }
        let round = match tokio::time::timeout(round_limit, poller.poll(config, &previous)).await {
            Ok(round) => round?,
            Err(_) => {
                return Err(DbError::RoundTimeout {
                    secs: round_limit.as_secs(),
                })
            }
        };
        previous = round.locks.clone();
        if !out.send(DbUpdate::Round(Box::new(round))).await {
            return Ok(());
        }
    }
}

/// Runs one query of a round over the text protocol: its rows, or `None` with the server's
/// refusal noted as a problem of the round; `Err` when the connection broke or went silent.
pub(crate) async fn rows<DB: sqlx::Database>(
    conn: &mut Watched<DB::Connection>,
    round: &mut DbRound,
    what: &'static str,
    sql: String,
) -> Result<Option<Vec<DB::Row>>, DbError>
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    round.queries += 1;
    let answer = conn
        .answer(|c| Box::pin(async move { sqlx::Executor::fetch_all(c, sql.as_str()).await }))
        .await?;
    match answer {
        Ok(rows) => Ok(Some(rows)),
        Err(error) => match super::error::classify(what, error) {
            super::error::QueryFailure::Refused(problem) => {
                round.problems.push(problem);
                Ok(None)
            }
            super::error::QueryFailure::Broken(error) => Err(error),
        },
    }
}

/// A row of the text protocol (every value as the server printed it), read cell by cell.
pub(crate) trait TextRow {
    /// The cell's bytes (`None`: SQL NULL or no such column).
    fn cell(&self, i: usize) -> Option<Vec<u8>>;

    fn text(&self, i: usize) -> Option<String> {
        self.cell(i)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    fn int(&self, i: usize) -> Option<i64> {
        parse_i64(self.text(i).as_deref())
    }

    /// A boolean as MariaDB (`1`) or PostgreSQL (`t`) prints it.
    fn truth(&self, i: usize) -> bool {
        self.text(i).is_some_and(|t| t == "1" || t == "t")
    }
}

impl TextRow for sqlx::mysql::MySqlRow {
    fn cell(&self, i: usize) -> Option<Vec<u8>> {
        sqlx::Row::try_get_unchecked::<Option<Vec<u8>>, _>(self, i)
            .ok()
            .flatten()
    }
}

impl TextRow for sqlx::postgres::PgRow {
    fn cell(&self, i: usize) -> Option<Vec<u8>> {
        self.text(i).map(String::into_bytes)
    }

    /// PostgreSQL's text protocol is UTF-8 already: no copy through bytes.
    fn text(&self, i: usize) -> Option<String> {
        sqlx::Row::try_get_unchecked::<Option<String>, _>(self, i)
            .ok()
            .flatten()
    }
}

/// Reads every configured lock table (one query each, `query` in the database's dialect:
/// key and owner as four columns each (see [`clipped`]), with an expiry column its text, ms and
/// whether it has passed, and with a Spring layout the region as four more) into `locks`;
/// a table the server refuses is a problem of the round, named.
pub(crate) async fn read_lock_tables<DB: sqlx::Database>(
    conn: &mut Watched<DB::Connection>,
    round: &mut DbRound,
    config: &DbSourceConfig,
    flavor: Flavor,
    query: fn(&LockTableConfig, ExpiryKind, u32) -> String,
    shift: impl Fn(Option<i64>) -> Option<i64>,
    locks: &mut Vec<DbLock>,
) -> Result<(), DbError>
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Row: TextRow,
{
    for table in &config.lock_tables {
        // A column of one's own is read as the catalog says it is typed; a layout's is known.
        let kind = match table.columns(flavor).until {
            Some(column) if table.layout().is_none() => {
                let sql = crate::expiry::catalog_query(flavor, table, column);
                let Some(answer) = rows::<DB>(conn, round, "lock table expiry type", sql).await?
                else {
                    continue;
                };
                match answer.first().and_then(|r| r.text(0)) {
                    // No such column (or table): the read below says so in the server's words.
                    None => ExpiryKind::Instant,
                    Some(type_name) => {
                        match ExpiryKind::of_type(&type_name, table.unit(), &table.table, column) {
                            Ok(kind) => kind,
                            Err(problem) => {
                                round.problems.push(problem);
                                continue;
                            }
                        }
                    }
                }
            }
            _ => ExpiryKind::NaiveUtc,
        };
        let read = rows::<DB>(
            conn,
            round,
            "lock table",
            query(table, kind, config.max_rows),
        )
        .await?;
        let Some(read) = read else {
            if let Some(last) = round.problems.last_mut() {
                *last = format!(
                    "{} {}{}",
                    table.table,
                    last,
                    table_hint(table, flavor, last)
                );
            }
            continue;
        };
        let expiring = table.columns(flavor).until.is_some();
        let spring = table.layout() == Some(TableLayout::SpringIntegration);
        for r in &read {
            // A NULL key names no lock.
            let Some(key) = clipped(r, 0) else { continue };
            let row = TableRow {
                key,
                owner: clipped(r, 4),
                until: expiring
                    .then(|| r.text(8).map(|t| (t, shift(r.int(9)))))
                    .flatten(),
                expired: r.truth(10),
            };
            locks.push(if spring {
                // REGION is NOT NULL in Spring's DDL; a NULL one is shown empty.
                let region = clipped(r, 11).unwrap_or_default();
                spring_lock(&table.table, &region, &row, table.spring_names())
            } else {
                table_row_lock(&table.table, &row, expiring)
            });
        }
    }
    Ok(())
}

/// What to add to a lock table's refused read: a Spring table without `EXPIRED_AFTER` is one
/// from before 7.0, which lockscope does not read.
fn table_hint(table: &LockTableConfig, flavor: Flavor, problem: &str) -> &'static str {
    let until = table.columns(flavor).until.unwrap_or_default();
    let missing = problem.contains("does not exist") || problem.contains("Unknown column");
    if table.layout() == Some(TableLayout::SpringIntegration)
        && missing
        && problem
            .to_ascii_lowercase()
            .contains(&until.to_ascii_lowercase())
    {
        " (a Spring Integration table from before 7.0 has no EXPIRED_AFTER: lockscope reads 7.x tables only, whose expiry is stored; after upgrading: ALTER TABLE INT_LOCK ADD EXPIRED_AFTER TIMESTAMP NOT NULL)"
    } else {
        ""
    }
}

/// A bounded value from the four columns at `at` (the dialects' `bounded_columns`): whole, or
/// its head (hex), length and digest; `None` for SQL NULL.
pub(crate) fn clipped(row: &impl TextRow, at: usize) -> Option<Clipped> {
    let len = u64::try_from(row.int(at + 2)?).ok()?;
    match row.cell(at) {
        Some(whole) => Some(Clipped::of(whole)),
        None => Some(Clipped {
            head: from_hex(&row.text(at + 1)?)?,
            len,
            sha256: row.text(at + 3).map(|d| d.to_ascii_lowercase()),
        }),
    }
}

/// The round's locks, one per path (the first kept).
pub(crate) fn finish(round: &mut DbRound, mut locks: Vec<DbLock>) {
    let mut seen = std::collections::HashSet::new();
    locks.retain(|l| seen.insert(l.path.clone()));
    round.locks = locks;
}

/// How far the measured clock offset may move before lockscope applies the new one.
pub(crate) const CLOCK_SLACK_MS: i64 = 1_000;

/// The offset (lockscope's clock minus the server's, ms) a round shifts the server's times by:
/// the one kept, unless this round measured one more than [`CLOCK_SLACK_MS`] away (a clock that
/// was stepped), which is then kept. Each round's measurement differs from the last by the
/// clock query's latency, a millisecond or two; applied as measured, it would move every
/// shifted time — a lock-table row's expiry, a wait's start — in every round, so a lock would
/// look changed each round (a view and an event per lock and round), and an expiry that ran out
/// unmoved would look moved.
pub(crate) fn steady_offset(kept: &mut Option<i64>, measured: Option<i64>) -> i64 {
    match (*kept, measured) {
        (Some(k), Some(m)) if (m - k).abs() <= CLOCK_SLACK_MS => k,
        (_, Some(m)) => {
            *kept = Some(m);
            m
        }
        (k, None) => k.unwrap_or(0),
    }
}

/// A number a text-protocol column printed (`None`: NULL or not a number).
pub(crate) fn parse_i64(text: Option<&str>) -> Option<i64> {
    let text = text?.trim();
    text.parse::<i64>().ok().or_else(|| {
        text.parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .map(|f| f.round() as i64)
    })
}

/// Shortens a statement for the sessions view (at a character boundary).
pub(crate) fn shorten(statement: String, max: usize) -> String {
    if statement.len() <= max {
        return statement;
    }
    let mut end = max;
    while !statement.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &statement[..end])
}

#[cfg(test)]
mod tests {
    use super::steady_offset;

    #[test]
    fn the_clock_offset_holds_still_through_jitter_and_follows_a_step() {
        let mut kept = None;
        assert_eq!(steady_offset(&mut kept, None), 0);
        assert_eq!(steady_offset(&mut kept, Some(-1)), -1);
        assert_eq!(steady_offset(&mut kept, Some(0)), -1, "jitter");
        assert_eq!(steady_offset(&mut kept, Some(-2)), -1, "jitter");
        assert_eq!(steady_offset(&mut kept, None), -1, "no clock this round");
        assert_eq!(
            steady_offset(&mut kept, Some(5_000)),
            5_000,
            "a stepped clock"
        );
        assert_eq!(steady_offset(&mut kept, Some(4_999)), 5_000);
    }
}
