//! A database source as the aggregator keeps it: the last round's locks and connections, its
//! locks in the neutral [`Ledger`] (each round is a full read, so every lock of the last or this
//! round is observed), and its connections as sessions.
//!
//! Release causes: a holder whose connection is gone went `connection_closed` (`killed` when
//! the database last showed the connection being killed); a lock-table row deleted, a
//! transaction that ended, a named lock let go while the connection lives went `released`; an
//! expiring row whose expiry passed without being moved went `ttl_expired`; `forced` when an
//! operator's release was announced. A waiter that left without the lock past its deadline
//! left by `timeout`, one whose connection went by `connection_closed`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use lockscope_model::database::{DbLock, DbParticipant, DbRecipe, FLAG_EXPIRED};
use lockscope_model::wire::{
    HolderView, LockView, ReleaseCause, SessionKind, SessionView, SourceView, WaiterView,
};
use lockscope_model::wire::{StatementView, STATEMENT_MAX};

use super::config::{DbSourceConfig, Flavor};
use super::{DbConnection, DbRound, DbUpdate};
use lockscope_core::aggregate::ledger::{Ledger, Observed, Outcome, Seen};
use lockscope_core::aggregate::{LedgerContext, LockOp};

/// A waiter that leaves within this long of its deadline (a poll apart) timed out.
const DEADLINE_SLACK_MS: i64 = 1_500;

pub struct DbSourceState {
    pub config: Arc<DbSourceConfig>,
    pub flavor: Flavor,
    pub view: SourceView,
    /// The last round's locks, by path.
    locks: BTreeMap<String, DbLock>,
    connections: BTreeMap<i64, DbConnection>,
    rounds: u64,
    /// Queries run so far.
    pub queries: u64,
    /// Rounds with a part that failed.
    pub failed_rounds: u64,
    pub ledger: Ledger,
}

impl DbSourceState {
    pub fn new(config: DbSourceConfig, flavor: Flavor, max_labels: usize) -> Self {
        DbSourceState {
            view: SourceView::connecting(&config.name, flavor.backend()),
            ledger: Ledger::new(&config.name, max_labels, lockscope_model::id::lock_id),
            config: Arc::new(config),
            flavor,
            locks: BTreeMap::new(),
            connections: BTreeMap::new(),
            rounds: 0,
            queries: 0,
            failed_rounds: 0,
        }
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Rounds applied.
    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    /// Applies one update from the source's collector.
    pub fn apply(&mut self, update: DbUpdate, cx: &mut LedgerContext<'_>) {
        match update {
            DbUpdate::Status {
                up,
                error,
                last_seen_ms,
            } => {
                if self.view.up != up || self.view.error != error {
                    self.view.set_up(up, last_seen_ms.unwrap_or(cx.now));
                    self.view.error = error;
                    cx.source_changed = true;
                }
            }
            DbUpdate::Round(round) => self.apply_round(*round, cx),
        }
        self.view.locks = self.ledger.locks.len();
    }

    fn apply_round(&mut self, round: DbRound, cx: &mut LedgerContext<'_>) {
        let bootstrap = !self.view.synced;
        let fresh: BTreeMap<String, DbLock> = round
            .locks
            .into_iter()
            .map(|l| (l.path.clone(), l))
            .collect();
        let connections: BTreeMap<i64, DbConnection> =
            round.connections.into_iter().map(|c| (c.id, c)).collect();
        let paths: BTreeSet<String> = self.locks.keys().chain(fresh.keys()).cloned().collect();
        let now = cx.now;
        for path in paths {
            let before = self.locks.get(&path);
            let after = fresh.get(&path);
            // Unchanged since the last round and booked: nothing to do.
            if !bootstrap
                && before.is_some()
                && before == after
                && self.ledger.locks.contains_key(path.as_str())
            {
                continue;
            }
            let observed = after.map(|lock| Observed {
                holders: lock.holders.iter().map(seen).collect(),
                waiters: lock.waiters.iter().map(seen).collect(),
            });
            let old_participants: HashMap<&str, &DbParticipant> = before
                .map(|l| l.holders.iter().chain(&l.waiters))
                .into_iter()
                .flatten()
                .map(|p| (p.id.as_str(), p))
                .collect();
            let gone_connection = |p: &DbParticipant| -> Option<ReleaseCause> {
                let id = p.connection?;
                match connections.get(&id) {
                    Some(_) => None,
                    None if self.connections.get(&id).is_some_and(|c| c.killed) => {
                        Some(ReleaseCause::Killed)
                    }
                    None => Some(ReleaseCause::ConnectionClosed),
                }
            };
            let mut cause = |holder: &str| -> ReleaseCause {
                let Some(p) = old_participants.get(holder) else {
                    return ReleaseCause::Released;
                };
                if let Some(cause) = gone_connection(p) {
                    return cause;
                }
                // An expiring row that is still there, expired, with the expiry it had: it ran
                // out rather than being unlocked (ShedLock's unlock moves lock_until; Spring's
                // deletes the row, and a lapsed Spring row stays until somebody takes it over).
                let expired_unmoved = after.is_some_and(|l| {
                    matches!(
                        l.recipe,
                        DbRecipe::ExpiringLockTable | DbRecipe::SpringJdbcLock
                    ) && l.flags.iter().any(|f| f == FLAG_EXPIRED)
                        && l.expires_at_ms.is_some()
                        && before.is_some_and(|b| b.expires_at_ms == l.expires_at_ms)
                });
                if expired_unmoved {
                    ReleaseCause::TtlExpired
                } else {
                    ReleaseCause::Released
                }
            };
            let left = |waiter: &str| -> Option<ReleaseCause> {
                let p = old_participants.get(waiter)?;
                if let Some(cause) = gone_connection(p) {
                    return Some(cause);
                }
                p.deadline_ms
                    .filter(|d| now >= d - DEADLINE_SLACK_MS)
                    .map(|_| ReleaseCause::Timeout)
            };
            let mut booking = cx.booking();
            booking.left = Some(&left);
            let outcome = self.ledger.observe(
                &path,
                observed.as_ref(),
                bootstrap,
                &mut cause,
                &mut booking,
            );
            match outcome {
                Outcome::Gone(id) => {
                    cx.lock_ops.push(LockOp::Removed(id));
                    cx.source_changed = true;
                }
                Outcome::Changed | Outcome::Same => {
                    if let Some(lock) = after {
                        self.publish_view(lock, &connections, cx);
                    }
                }
                Outcome::Absent => {}
            }
        }
        self.locks = fresh;
        self.connections = connections;
        self.rounds += 1;
        self.queries += u64::from(round.queries);
        let error = (!round.problems.is_empty()).then(|| round.problems.join("; "));
        if !round.problems.is_empty() {
            self.failed_rounds += 1;
        }
        if bootstrap
            || self.view.error != error
            || self.view.limits != round.limits
            || self.view.nodes != self.connections.len()
            || !self.view.up
        {
            cx.source_changed = true;
        }
        self.view.up = true;
        self.view.synced = true;
        self.view.error = error;
        self.view.limits = round.limits;
        self.view.nodes = self.connections.len();
        self.view.last_sync_ms = Some(round.at_ms);
    }

    /// Builds the lock's view and queues it when it differs from the one published.
    /// `connections` are the round's (the lock's participants are among them).
    fn publish_view(
        &mut self,
        lock: &DbLock,
        connections: &BTreeMap<i64, DbConnection>,
        cx: &mut LedgerContext<'_>,
    ) {
        let Some(entry) = self.ledger.locks.get(lock.path.as_str()) else {
            return;
        };
        // Who a connection is, when the lock itself names nobody: `user@client (application)`,
        // as MariaDB's process list and PostgreSQL's pg_stat_activity tell it.
        let who = |p: &lockscope_model::database::DbParticipant| -> Option<String> {
            if p.identity.is_some() {
                return p.identity.clone();
            }
            let c = &connections.get(&p.connection?)?.view;
            let mut text = c.user.clone();
            if let Some(client) = c.client.as_deref().filter(|c| !c.is_empty()) {
                text.push('@');
                text.push_str(client);
            }
            if let Some(app) = c.application.as_deref().filter(|a| !a.is_empty()) {
                text.push_str(&format!(" ({app})"));
            }
            lockscope_model::clip::identity_text(&text)
        };
        // What a connection runs: its statement and kind, `idle` while it sits in an open
        // transaction (PostgreSQL `idle in transaction`, MariaDB `Sleep` with a transaction).
        let statement =
            |p: &lockscope_model::database::DbParticipant| -> Option<Box<StatementView>> {
                let c = &connections.get(&p.connection?)?.view;
                let text = c.statement.as_deref().unwrap_or_default();
                let idle = c.state.starts_with("idle in transaction")
                    || (c.state == "Sleep" && c.transaction_since_ms.is_some());
                if text.is_empty() && !idle {
                    return None;
                }
                Some(Box::new(StatementView {
                    kind: if idle {
                        "idle".into()
                    } else {
                        lockscope_model::database::statement_kind(text).into()
                    },
                    text: lockscope_model::clip::shorten_text(text, STATEMENT_MAX),
                }))
            };
        let people = entry.people();
        let holders: Vec<HolderView> = lock
            .holders
            .iter()
            .zip(&people.holders)
            .map(|(p, (_, since))| HolderView {
                node: p.id.clone(),
                session: session_of(p),
                since_ms: *since,
                held_ms: 0,
                mode: p.mode,
                watchers: 0,
                reentrancy: None,
                lease: None,
                identity: who(p),
                version: p.version.clone(),
                statement: statement(p),
            })
            .collect();
        let waiters: Vec<WaiterView> = lock
            .waiters
            .iter()
            .zip(&people.waiters)
            .enumerate()
            .map(|(i, (p, (_, since)))| WaiterView {
                node: p.id.clone(),
                session: session_of(p),
                since_ms: *since,
                waited_ms: 0,
                position: i as u32 + 1,
                mode: p.mode,
                watches: None,
                deadline_ms: p.deadline_ms,
                lease: None,
                identity: who(p),
                statement: statement(p),
            })
            .collect();
        let view = LockView {
            id: self.ledger.id_of(&lock.path),
            source: self.config.name.clone(),
            backend: self.flavor.backend(),
            path: lock.path.clone(),
            recipe: lock.recipe.as_str().to_string(),
            holders,
            waiters,
            acquisitions: entry.history().acquisitions,
            releases: entry.history().releases,
            changed_ms: entry.changed_ms,
            expires_at_ms: lock.expires_at_ms,
            usual_hold_ms: lockscope_core::aggregate::usual_hold_of(entry.history()),
            flags: lock.flags.clone(),
            ..LockView::default()
        };
        self.ledger.publish(&lock.path, view, cx.lock_ops);
    }

    /// Connections as sessions: every connection that holds or waits, with what the database
    /// tells of it.
    pub fn sessions(&self) -> Vec<SessionView> {
        let by_conn = self.ledger.by_session(&self.locks, |lock: &DbLock| {
            (
                lock.holders.iter().filter_map(|h| h.connection).collect(),
                lock.waiters.iter().filter_map(|w| w.connection).collect(),
            )
        });
        by_conn
            .into_iter()
            .map(|(id, (holds, waits))| {
                let conn = self.connections.get(&id);
                SessionView {
                    source: self.config.name.clone(),
                    session: id.to_string(),
                    kind: SessionKind::DatabaseConnection,
                    timeout_ms: None,
                    connected: conn.is_some(),
                    server: None,
                    expires_at_ms: None,
                    holds,
                    waits,
                    connection: conn.map(|c| c.view.clone()),
                    process: None,
                }
            })
            .collect()
    }

    /// The lock-table config a lock path belongs to, with the row's key.
    pub fn table_of<'a>(
        config: &'a DbSourceConfig,
        path: &str,
    ) -> Option<(&'a super::LockTableConfig, String)> {
        config.lock_tables.iter().find_map(|t| {
            path.strip_prefix(&format!("/tables/{}/", t.table))
                .map(|key| (t, key.to_string()))
        })
    }
}

/// A participant's session: its connection id (a lock-table row has none).
fn session_of(p: &DbParticipant) -> String {
    p.connection.map(|c| c.to_string()).unwrap_or_default()
}

fn seen(p: &DbParticipant) -> Seen {
    Seen {
        id: p.id.clone(),
        session: session_of(p),
        since_ms: p.since_ms,
    }
}
