//! Database locks (MariaDB/MySQL and PostgreSQL): what a poll of a database's lock views means
//! as holders and ordered waiters.
//!
//! A database keeps no lock *layout* an observer can read at leisure: each poll reads the lock
//! views (`information_schema.INNODB_LOCKS`/`INNODB_LOCK_WAITS`/`INNODB_TRX`/`METADATA_LOCK_INFO`
//! /`PROCESSLIST` on MariaDB, `pg_locks`/`pg_stat_activity` on PostgreSQL) and the configured
//! lock tables, and the functions here turn those rows into [`DbLock`]s by structure:
//!
//! * **lock-table rows** ([`table_row_lock`]): one row per held lock (the seed's
//!   `database_lock(resource UNIQUE, description)`), or, with an expiry column, one row per lock
//!   name kept after unlock (ShedLock's `shedlock(name, lock_until, locked_at, locked_by)`): a row
//!   whose expiry has passed is free, so it is listed without a holder and flagged `expired`.
//!   Key and owner come bounded ([`crate::clip`]): a cut value shows its size and digest.
//! * **Spring Integration's `JdbcLockRegistry`** ([`spring_lock`]): `INT_LOCK` rows keyed by
//!   region and the lock name's UUID ([`spring_lock_key`], `UUIDConverter`'s MD5 name-based
//!   UUID), held by `CLIENT_ID` until `EXPIRED_AFTER`; the configured lock names are hashed
//!   once ([`SpringLockNames`]) so their rows show the name; waiters poll and are never seen.
//! * **row locks** ([`innodb_row_locks`], [`pg_row_locks`]): only visible while someone waits.
//!   MariaDB lists record locks in `INNODB_LOCKS` only while they conflict; PostgreSQL keeps a
//!   row lock in the tuple itself and shows only the waits (an ungranted `transactionid` lock on
//!   the holder's transaction for the first waiter, which holds the `tuple` lock; ungranted
//!   `tuple` locks for the rest).
//! * **named locks**: MariaDB `GET_LOCK` ([`get_lock_locks`]: holders from
//!   `METADATA_LOCK_INFO`, waiters from the process list, whose statement names the lock,
//!   [`parse_get_lock_call`]) and PostgreSQL advisory locks ([`advisory_locks`]; the key from
//!   `classid`/`objid`/`objsubid`, [`AdvisoryKey`]).
//!
//! Participants held by a connection are named `conn <id>` (a row lock's holder `trx <id>`), and
//! their session is the connection id, so the wait-for graph runs across connections. Pure
//! functions of data, fuzzed (`fuzz/`): nothing here talks to a database.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::clip::Clipped;
use crate::redis::display_bytes;
use crate::wire::LockMode;

/// Which database's way of locking a lock is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DbRecipe {
    /// A row per held lock in a table with a unique resource (insert = lock, delete = unlock).
    LockTable,
    /// A row per lock name with an expiry column (ShedLock's JDBC table).
    ExpiringLockTable,
    /// A row lock (`SELECT … FOR UPDATE`) someone waits on.
    RowLock,
    /// MySQL/MariaDB `GET_LOCK(name, timeout)`.
    GetLock,
    /// A PostgreSQL advisory lock.
    Advisory,
    /// Spring Integration's `JdbcLockRegistry` (`DefaultLockRepository`, 7.x): a row per lock
    /// in `INT_LOCK` keyed by region and the lock name's UUID, held by `CLIENT_ID` until
    /// `EXPIRED_AFTER` ([`spring_lock`]).
    SpringJdbcLock,
    /// A table's lock queue: PostgreSQL relation locks ([`pg_relation_locks`]), MariaDB/MySQL
    /// metadata locks ([`metadata_locks`]); listed while someone waits.
    TableLock,
}

impl DbRecipe {
    pub const ALL: [DbRecipe; 7] = [
        DbRecipe::LockTable,
        DbRecipe::ExpiringLockTable,
        DbRecipe::RowLock,
        DbRecipe::GetLock,
        DbRecipe::Advisory,
        DbRecipe::SpringJdbcLock,
        DbRecipe::TableLock,
    ];

    /// The recipe named `name` ([`DbRecipe::as_str`]).
    pub fn parse(name: &str) -> Option<DbRecipe> {
        DbRecipe::ALL.into_iter().find(|r| r.as_str() == name)
    }

    /// Its holders are connections (a force release terminates one), not table rows.
    pub fn held_by_connection(self) -> bool {
        matches!(
            self,
            DbRecipe::RowLock | DbRecipe::GetLock | DbRecipe::Advisory | DbRecipe::TableLock
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            DbRecipe::LockTable => "lock_table",
            DbRecipe::ExpiringLockTable => "lock_table_until",
            DbRecipe::RowLock => "row_lock",
            DbRecipe::GetLock => "get_lock",
            DbRecipe::Advisory => "advisory",
            DbRecipe::SpringJdbcLock => "spring_jdbc_lock",
            DbRecipe::TableLock => "table_lock",
        }
    }
}

/// A holder or waiter of a database lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbParticipant {
    /// Identifies it within the lock: `conn <id>`, `trx <id>`, or a lock-table row's owner.
    pub id: String,
    /// The connection it belongs to (`None`: a lock-table row, whose owner is not a connection).
    pub connection: Option<i64>,
    /// When it began, when the database tells (a wait's start, a transaction's start).
    pub since_ms: Option<i64>,
    pub mode: Option<LockMode>,
    /// When its wait ends by the database's own timeout, when known.
    pub deadline_ms: Option<i64>,
    /// What a force release compares against (a row's expiry, a transaction's start, a
    /// connection's start), as the database printed it.
    pub version: Option<String>,
    /// Who holds, in the lock's own words, where the row records it (Spring's `CLIENT_ID`),
    /// bounded as [`crate::wire::HolderView::identity`].
    pub identity: Option<String>,
}

impl DbParticipant {
    fn of_connection(connection: i64) -> Self {
        DbParticipant {
            id: conn_id(connection),
            connection: Some(connection),
            since_ms: None,
            mode: None,
            deadline_ms: None,
            version: None,
            identity: None,
        }
    }
}

/// The participant id of connection `id`.
pub fn conn_id(id: i64) -> String {
    format!("conn {id}")
}

/// A lock as one poll saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbLock {
    /// `/tables/<table>/<key>`, `/rows/<table>/<index>/<key>`, `/get_lock/<name>`,
    /// `/advisory/<key>`, `/transactions/<id>`.
    pub path: String,
    pub recipe: DbRecipe,
    pub holders: Vec<DbParticipant>,
    /// In the order they will get it, as far as the database tells (by wait start).
    pub waiters: Vec<DbParticipant>,
    /// A lock-table row's expiry (epoch ms).
    pub expires_at_ms: Option<i64>,
    /// Facts about it the UI explains (`expired`, `holder_visible_only_while_contended`, …).
    pub flags: Vec<String>,
}

/// Flag of a lock whose holder the database shows only while someone waits.
pub const FLAG_CONTENDED_ONLY: &str = "holder_visible_only_while_contended";
/// Flag of a row lock nobody waits on any more whose holder's transaction is still open: the
/// database no longer lists it, so whether it is still held cannot be seen.
pub const FLAG_HOLDER_UNCONFIRMED: &str = "holder_unconfirmed";
/// Flag of a lock-table row whose expiry has passed (free to take).
pub const FLAG_EXPIRED: &str = "expired";
/// Flag of [`GET_LOCK_UNKNOWN`]: its waiters' statements do not name the lock.
pub const FLAG_NAME_NOT_IN_STATEMENT: &str = "lock_name_not_in_statement";
/// Where `GET_LOCK` waiters go whose statement does not name the lock (a bound parameter).
pub const GET_LOCK_UNKNOWN: &str = "/get_lock/?";

/// One row of a configured lock table, as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRow {
    /// The key column, at most [`crate::clip::SHOWN_BYTES`] of it (with its length and digest
    /// when cut: a release compares a cut value by those).
    pub key: Clipped,
    /// The owner column (`None`: SQL NULL), bounded like the key.
    pub owner: Option<Clipped>,
    /// The expiry column as the database printed it, and as epoch ms.
    pub until: Option<(String, Option<i64>)>,
    /// The database judged the expiry passed (`until <= NOW()`).
    pub expired: bool,
}

/// A lock-table row as a lock (`table` as configured, e.g. `app.database_lock`).
pub fn table_row_lock(table: &str, row: &TableRow, expiring: bool) -> DbLock {
    let owner = row.owner.as_ref().map(Clipped::display).unwrap_or_default();
    let mut flags = Vec::new();
    let mut holders = Vec::new();
    if expiring && row.expired {
        flags.push(FLAG_EXPIRED.to_string());
    } else {
        holders.push(DbParticipant {
            id: owner,
            connection: None,
            since_ms: None,
            mode: Some(LockMode::Write),
            deadline_ms: None,
            version: row.until.as_ref().map(|(text, _)| text.clone()),
            identity: None,
        });
    }
    DbLock {
        path: format!("/tables/{table}/{}", row.key.display()),
        recipe: if expiring {
            DbRecipe::ExpiringLockTable
        } else {
            DbRecipe::LockTable
        },
        holders,
        waiters: Vec::new(),
        expires_at_ms: row.until.as_ref().and_then(|(_, ms)| *ms),
        flags,
    }
}

/// Flag of a lock whose waiters leave nothing on the server (they poll from the client, as
/// Spring's `JdbcLockRegistry` does every 100 ms): nobody can be shown waiting.
pub const FLAG_WAITERS_NOT_VISIBLE: &str = "waiters_not_visible";
/// Flag of a Spring JDBC lock whose `LOCK_KEY` is the name-based (MD5, version 3) UUID of a
/// lock name that is not among the table's configured `names`: the name cannot be recovered
/// from it, so the lock is shown under the UUID.
pub const FLAG_LOCK_NAME_HASHED: &str = "lock_name_hashed";

/// The `LOCK_KEY` Spring Integration's `JdbcLockRegistry` stores for the lock name `name`
/// (`pathFor(name)` = `UUIDConverter.getUUID(name).toString()`): a name that already reads as a
/// UUID (8-4-4-4-12 hex digits, either case) is that UUID in lower case; any other name is
/// `UUID.nameUUIDFromBytes(name.getBytes(UTF_8))` — the MD5 of the bytes (no namespace), with
/// the version nibble set to 3 and the IETF variant bits, in lower case.
pub fn spring_lock_key(name: &str) -> String {
    use md5::{Digest, Md5};
    if is_uuid(name) {
        return name.to_ascii_lowercase();
    }
    let mut b: [u8; 16] = Md5::digest(name.as_bytes()).into();
    b[6] = (b[6] & 0x0f) | 0x30;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// `text` is a UUID as `UUIDConverter` recognises one: `^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-
/// [0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`, the whole text.
pub fn is_uuid(text: &str) -> bool {
    let b = text.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// A UUID of version 3 with the IETF variant: what `nameUUIDFromBytes` makes (a name given as
/// such a UUID looks the same, and is stored the same).
fn is_name_based_uuid(text: &str) -> bool {
    is_uuid(text)
        && text.as_bytes()[14] == b'3'
        && matches!(text.as_bytes()[19], b'8' | b'9' | b'a' | b'b' | b'A' | b'B')
}

/// The lock names configured for a Spring lock table, by the `LOCK_KEY` each is stored under
/// ([`spring_lock_key`], computed once when the table's config is first used).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpringLockNames {
    by_key: HashMap<String, String>,
}

impl SpringLockNames {
    /// The names' keys; of two names with one key (a UUID in two cases) the first is kept.
    pub fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> SpringLockNames {
        let mut by_key = HashMap::new();
        for name in names {
            by_key
                .entry(spring_lock_key(name))
                .or_insert_with(|| name.to_string());
        }
        SpringLockNames { by_key }
    }

    /// The configured name stored under `key` (compared in lower case, as Spring writes it).
    pub fn name_of(&self, key: &str) -> Option<&str> {
        self.by_key
            .get(&key.to_ascii_lowercase())
            .map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

/// What a Spring lock's path shows after its region: the configured name stored under `key`,
/// else the key itself (a UUID: the MD5 UUID of a name not configured, or a name that was a UUID).
pub fn spring_lock_leaf(key: &Clipped, names: &SpringLockNames) -> (String, bool) {
    let text = (!key.is_cut())
        .then(|| std::str::from_utf8(&key.head).ok())
        .flatten();
    match text.and_then(|k| names.name_of(k)) {
        Some(name) => (display_bytes(name.as_bytes()), false),
        None => (key.display(), text.is_some_and(is_name_based_uuid)),
    }
}

/// What a Spring lock's path names, back: `rest` is the path after `/tables/<table>/`, i.e.
/// `<region>/<leaf>` as [`spring_lock`] wrote it. The region may hold `/` and so may a lock
/// name, so each split is tried: a leaf counts when it is a configured name (its key is
/// [`spring_lock_key`] of it) or a UUID (the key itself). `Ok((region, key))` as displayed
/// (the region as [`Clipped::display`] showed it); `Err` says why there is not exactly one.
pub fn spring_lock_parts(rest: &str, names: &SpringLockNames) -> Result<(String, String), String> {
    let mut found: Vec<(String, String)> = Vec::new();
    for (at, _) in rest.match_indices('/') {
        let (region, leaf) = (&rest[..at], &rest[at + 1..]);
        if region.is_empty() {
            continue;
        }
        let name = String::from_utf8(crate::redis::parse_display_bytes(leaf)).ok();
        let configured = name
            .as_deref()
            .map(spring_lock_key)
            .filter(|key| names.name_of(key) == name.as_deref());
        if let Some(key) = configured {
            found.push((region.to_string(), key));
        } else if is_uuid(leaf) {
            found.push((region.to_string(), leaf.to_string()));
        }
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(format!(
            "{rest:?} names no region and lock key (neither a configured name nor a UUID after a region)"
        )),
        _ => Err(format!(
            "{rest:?} can be read as more than one region and lock (a region with '/' in it): {}",
            found
                .iter()
                .map(|(r, k)| format!("region {r:?} key {k}"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// A row of Spring Integration's lock table (`INT_LOCK`, 7.x: `LOCK_KEY`, `REGION`,
/// `CLIENT_ID`, `CREATED_DATE`, `EXPIRED_AFTER`) as a lock: `row.key` is `LOCK_KEY`,
/// `row.owner` `CLIENT_ID`, `row.until` `EXPIRED_AFTER` (naive UTC written from the holder's
/// Java clock) and `row.expired` whether it is before the database's UTC now.
///
/// The path is `/tables/<table>/<region>/<lock name>` when `LOCK_KEY` is the key of a
/// configured name, else `/tables/<table>/<region>/<LOCK_KEY>` (flagged
/// [`FLAG_LOCK_NAME_HASHED`] when it is a name-based UUID). `CLIENT_ID` holds (as id and
/// identity) until `EXPIRED_AFTER`; an expired row stays in the table until the next acquirer
/// takes it over, so it is listed without a holder and flagged [`FLAG_EXPIRED`]. Waiters poll
/// and leave nothing: every such lock is flagged [`FLAG_WAITERS_NOT_VISIBLE`]. `CREATED_DATE`
/// is not read: only an INSERT sets it (a takeover by UPDATE keeps the old one), so it does not
/// say since when the holder holds.
pub fn spring_lock(
    table: &str,
    region: &Clipped,
    row: &TableRow,
    names: &SpringLockNames,
) -> DbLock {
    let (leaf, hashed) = spring_lock_leaf(&row.key, names);
    let mut flags = Vec::new();
    let mut holders = Vec::new();
    if row.expired {
        flags.push(FLAG_EXPIRED.to_string());
    } else {
        let owner = row.owner.as_ref().map(Clipped::display).unwrap_or_default();
        holders.push(DbParticipant {
            identity: crate::clip::identity_text(&owner),
            id: owner,
            connection: None,
            since_ms: None,
            mode: Some(LockMode::Write),
            deadline_ms: None,
            version: row.until.as_ref().map(|(text, _)| text.clone()),
        });
    }
    if hashed {
        flags.push(FLAG_LOCK_NAME_HASHED.to_string());
    }
    flags.push(FLAG_WAITERS_NOT_VISIBLE.to_string());
    DbLock {
        path: format!("/tables/{table}/{}/{leaf}", region.display()),
        recipe: DbRecipe::SpringJdbcLock,
        holders,
        waiters: Vec::new(),
        expires_at_ms: row.until.as_ref().and_then(|(_, ms)| *ms),
        flags,
    }
}

/// A PostgreSQL advisory lock key as `pg_locks` encodes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AdvisoryKey {
    /// `pg_advisory_lock(bigint)`: `classid` = high 32 bits, `objid` = low, `objsubid` = 1.
    Big(i64),
    /// `pg_advisory_lock(int, int)`: `classid`, `objid`, `objsubid` = 2.
    Pair(i32, i32),
}

impl AdvisoryKey {
    /// The key from `pg_locks` (oids are unsigned 32-bit; `None` for any other `objsubid`).
    pub fn from_pg_locks(classid: i64, objid: i64, objsubid: i64) -> Option<AdvisoryKey> {
        let hi = u32::try_from(classid).ok()?;
        let lo = u32::try_from(objid).ok()?;
        match objsubid {
            1 => Some(AdvisoryKey::Big((((hi as u64) << 32) | lo as u64) as i64)),
            2 => Some(AdvisoryKey::Pair(hi as i32, lo as i32)),
            _ => None,
        }
    }

    /// As the SQL that takes it would name it: `42`, `(1,2)`.
    pub fn display(self) -> String {
        match self {
            AdvisoryKey::Big(k) => k.to_string(),
            AdvisoryKey::Pair(a, b) => format!("({a},{b})"),
        }
    }

    /// The `pg_locks` columns that select it: (classid, objid, objsubid).
    pub fn pg_locks_columns(self) -> (i64, i64, i64) {
        match self {
            AdvisoryKey::Big(k) => ((k as u64 >> 32) as i64, (k as u64 & 0xffff_ffff) as i64, 1),
            AdvisoryKey::Pair(a, b) => (a as u32 as i64, b as u32 as i64, 2),
        }
    }

    /// Parses [`AdvisoryKey::display`] back.
    pub fn parse(text: &str) -> Option<AdvisoryKey> {
        let text = text.trim();
        if let Some(inner) = text.strip_prefix('(').and_then(|t| t.strip_suffix(')')) {
            let (a, b) = inner.split_once(',')?;
            return Some(AdvisoryKey::Pair(
                a.trim().parse().ok()?,
                b.trim().parse().ok()?,
            ));
        }
        text.parse().ok().map(AdvisoryKey::Big)
    }
}

/// The level an advisory lock was taken at, as far as an observer can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdvisoryLevel {
    /// Held by a connection with no open transaction: only session-level locks outlive one.
    Session,
    /// Its connection's current statement takes transaction-level advisory locks.
    Transaction,
    /// In a transaction, taken by an earlier statement: `pg_locks` does not say which level.
    Unknown,
}

impl AdvisoryLevel {
    pub fn flag(self) -> &'static str {
        match self {
            AdvisoryLevel::Session => "session_level",
            AdvisoryLevel::Transaction => "transaction_level",
            AdvisoryLevel::Unknown => "level_unknown",
        }
    }

    /// The level of an advisory lock held by a connection in/out of a transaction whose
    /// current (or last) statement is `statement`.
    pub fn judge(in_transaction: bool, statement: &str) -> AdvisoryLevel {
        if !in_transaction {
            return AdvisoryLevel::Session;
        }
        let s = statement.to_ascii_lowercase();
        if s.contains("advisory_xact_lock") {
            AdvisoryLevel::Transaction
        } else {
            AdvisoryLevel::Unknown
        }
    }
}

/// One `pg_locks` row (with the relation's name for `tuple` locks).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PgLockRow {
    pub locktype: String,
    pub pid: i64,
    pub mode: String,
    pub granted: bool,
    pub waitstart_ms: Option<i64>,
    pub classid: Option<i64>,
    pub objid: Option<i64>,
    pub objsubid: Option<i64>,
    pub relation: Option<String>,
    pub page: Option<i64>,
    pub tuple: Option<i64>,
    pub transactionid: Option<String>,
    /// The database it is in (advisory keys and relations are per database).
    pub database: Option<String>,
}

/// What the lock functions need to know of a connection.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnFacts {
    /// Its transaction is open.
    pub in_transaction: bool,
    /// Its current (or last) statement.
    pub statement: String,
    /// Its start as the database printed it (PostgreSQL `backend_start`): what a force
    /// release of a lock the connection holds (an advisory lock) compares against.
    pub started: Option<String>,
    /// Its transaction's start as printed (`xact_start`): what a force release of a row lock,
    /// held until that transaction ends, compares against.
    pub xact_started: Option<String>,
}

fn pg_mode(mode: &str) -> LockMode {
    // ShareLock (pg_advisory_lock_shared) and the other share modes let others in.
    if mode.contains("Exclusive") {
        LockMode::Write
    } else {
        LockMode::Read
    }
}

/// PostgreSQL advisory locks from `pg_locks` rows (`locktype = 'advisory'`; others ignored).
pub fn advisory_locks(rows: &[PgLockRow], conns: &HashMap<i64, ConnFacts>) -> Vec<DbLock> {
    let mut by_key: BTreeMap<(Option<&str>, AdvisoryKey), Vec<&PgLockRow>> = BTreeMap::new();
    for row in rows.iter().filter(|r| r.locktype == "advisory") {
        let key = match (row.classid, row.objid, row.objsubid) {
            (Some(c), Some(o), Some(s)) => AdvisoryKey::from_pg_locks(c, o, s),
            _ => None,
        };
        if let Some(key) = key {
            by_key
                .entry((row.database.as_deref(), key))
                .or_default()
                .push(row);
        }
    }
    by_key
        .into_iter()
        .map(|((database, key), rows)| {
            let mut holders: Vec<DbParticipant> = Vec::new();
            let mut waiters: Vec<(Option<i64>, DbParticipant)> = Vec::new();
            let mut levels = BTreeSet::new();
            for row in rows {
                let facts = conns.get(&row.pid);
                let mut p = DbParticipant::of_connection(row.pid);
                p.mode = Some(pg_mode(&row.mode));
                p.version = facts.and_then(|f| f.started.clone());
                if row.granted {
                    if holders.iter().any(|h| h.id == p.id) {
                        continue;
                    }
                    if let Some(f) = facts {
                        levels.insert(AdvisoryLevel::judge(f.in_transaction, &f.statement).flag());
                    }
                    holders.push(p);
                } else if !waiters.iter().any(|(_, w)| w.id == p.id) {
                    p.since_ms = row.waitstart_ms;
                    waiters.push((row.waitstart_ms, p));
                }
            }
            waiters.sort_by(|a, b| {
                (a.0.unwrap_or(i64::MAX), &a.1.id).cmp(&(b.0.unwrap_or(i64::MAX), &b.1.id))
            });
            DbLock {
                path: advisory_path(database, key),
                recipe: DbRecipe::Advisory,
                holders,
                waiters: waiters.into_iter().map(|(_, w)| w).collect(),
                expires_at_ms: None,
                flags: levels.into_iter().map(str::to_string).collect(),
            }
        })
        .collect()
}

/// The path of an advisory lock: `/advisory/<database>/<key>`.
pub fn advisory_path(database: Option<&str>, key: AdvisoryKey) -> String {
    match database {
        Some(db) => format!("/advisory/{db}/{}", key.display()),
        None => format!("/advisory/{}", key.display()),
    }
}

/// PostgreSQL row locks that someone waits on, from `pg_locks` rows (`transactionid` and
/// `tuple`). The first waiter holds the row's `tuple` lock and waits on the holder's
/// transaction; later waiters wait on the `tuple` lock. `xact_owner` maps a transaction id to
/// the connection running it (the granted `transactionid` lock of that id).
pub fn pg_row_locks(rows: &[PgLockRow], conns: &HashMap<i64, ConnFacts>) -> Vec<DbLock> {
    /// A wait on a transaction: (transaction id, wait start, mode).
    type XactWait<'a> = (&'a str, Option<i64>, &'a str);
    let mut xact_owner: HashMap<&str, i64> = HashMap::new();
    let mut waits_on_xact: HashMap<i64, XactWait<'_>> = HashMap::new();
    type Tuple = (String, String, i64, i64);
    let mut tuple_holder: HashMap<Tuple, i64> = HashMap::new();
    let mut tuple_waiters: BTreeMap<Tuple, Vec<&PgLockRow>> = BTreeMap::new();
    for row in rows {
        match row.locktype.as_str() {
            "transactionid" => {
                let Some(x) = row.transactionid.as_deref() else {
                    continue;
                };
                if row.granted && row.mode == "ExclusiveLock" {
                    xact_owner.insert(x, row.pid);
                } else if !row.granted {
                    waits_on_xact.insert(row.pid, (x, row.waitstart_ms, row.mode.as_str()));
                }
            }
            "tuple" => {
                let (Some(rel), Some(page), Some(tuple)) = (&row.relation, row.page, row.tuple)
                else {
                    continue;
                };
                let db = row.database.clone().unwrap_or_default();
                let key = (db, rel.clone(), page, tuple);
                if row.granted {
                    tuple_holder.insert(key, row.pid);
                } else {
                    tuple_waiters.entry(key).or_default().push(row);
                }
            }
            _ => {}
        }
    }
    let mut out: BTreeMap<String, DbLock> = BTreeMap::new();
    let holder_of = |xact: &str| -> Option<DbParticipant> {
        let pid = *xact_owner.get(xact)?;
        let mut p = DbParticipant::of_connection(pid);
        p.mode = Some(LockMode::Write);
        p.version = conns.get(&pid).and_then(|f| f.xact_started.clone());
        Some(p)
    };
    let waiter = |pid: i64, since: Option<i64>, mode: &str| -> DbParticipant {
        let mut p = DbParticipant::of_connection(pid);
        p.since_ms = since;
        p.mode = Some(if mode.contains("Share") && !mode.contains("Exclusive") {
            LockMode::Read
        } else {
            LockMode::Write
        });
        p.version = conns.get(&pid).and_then(|f| f.xact_started.clone());
        p
    };
    let mut placed: BTreeSet<i64> = BTreeSet::new();
    // Rows identified by their tuple lock.
    let mut keys: BTreeSet<Tuple> = tuple_waiters.keys().cloned().collect();
    keys.extend(
        tuple_holder
            .iter()
            .filter(|(_, pid)| waits_on_xact.contains_key(pid))
            .map(|(k, _)| k.clone()),
    );
    for key in keys {
        let mut waiters: Vec<DbParticipant> = Vec::new();
        let mut holders = Vec::new();
        if let Some(first) = tuple_holder.get(&key) {
            if let Some((xact, since, mode)) = waits_on_xact.get(first) {
                holders.extend(holder_of(xact));
                waiters.push(waiter(*first, *since, mode));
                placed.insert(*first);
            }
        }
        let mut rest: Vec<&PgLockRow> = tuple_waiters.get(&key).cloned().unwrap_or_default();
        rest.sort_by_key(|r| (r.waitstart_ms.unwrap_or(i64::MAX), r.pid));
        for r in rest {
            if !waiters.iter().any(|w| w.connection == Some(r.pid)) {
                placed.insert(r.pid);
                waiters.push(waiter(r.pid, r.waitstart_ms, &r.mode));
            }
        }
        let (db, rel, page, tuple) = key;
        let path = if db.is_empty() {
            format!("/rows/{rel}/({page},{tuple})")
        } else {
            format!("/rows/{db}/{rel}/({page},{tuple})")
        };
        out.insert(
            path.clone(),
            DbLock {
                path,
                recipe: DbRecipe::RowLock,
                holders,
                waiters,
                expires_at_ms: None,
                flags: vec![FLAG_CONTENDED_ONLY.to_string()],
            },
        );
    }
    // Waits on a transaction with no row named (a unique-key insert, a waiter not yet holding
    // the tuple lock).
    let mut by_xact: BTreeMap<&str, Vec<(i64, XactWait<'_>)>> = BTreeMap::new();
    for (pid, wait) in &waits_on_xact {
        if !placed.contains(pid) {
            by_xact.entry(wait.0).or_default().push((*pid, *wait));
        }
    }
    for (xact, mut ws) in by_xact {
        ws.sort_by_key(|(pid, (_, since, _))| (since.unwrap_or(i64::MAX), *pid));
        let path = format!("/transactions/{xact}");
        out.insert(
            path.clone(),
            DbLock {
                path,
                recipe: DbRecipe::RowLock,
                holders: holder_of(xact).into_iter().collect(),
                waiters: ws
                    .into_iter()
                    .map(|(pid, (_, since, mode))| waiter(pid, since, mode))
                    .collect(),
                expires_at_ms: None,
                flags: vec![FLAG_CONTENDED_ONLY.to_string()],
            },
        );
    }
    out.into_values().collect()
}

/// Flag of a table's lock queue: listed only while someone waits to lock the table (every
/// query takes table locks; uncontended ones are not shown).
pub const FLAG_LISTED_WHILE_QUEUED: &str = "listed_only_while_queued";

/// Flag of a table lock one of whose holders is idle in its transaction: it holds the table
/// until that transaction ends, and nothing it runs will end it.
pub const FLAG_IDLE_IN_TRANSACTION: &str = "holder_idle_in_transaction";

/// The path of a table's lock queue: `/table_locks/<database>/<table>`.
pub fn table_lock_path(database: Option<&str>, table: &str) -> String {
    match database.filter(|d| !d.is_empty()) {
        Some(db) => format!("/table_locks/{db}/{table}"),
        None => format!("/table_locks/{table}"),
    }
}

/// What kind of statement `sql` is: `ddl` (it changes a table's definition, or locks it
/// whole: ALTER, CREATE, DROP, TRUNCATE, RENAME, LOCK, REINDEX, CLUSTER, VACUUM, OPTIMIZE,
/// ANALYZE, COMMENT, GRANT/REVOKE), `dml` (INSERT, UPDATE, DELETE, MERGE, REPLACE, COPY,
/// UPSERT, LOAD), `read` (SELECT, WITH, TABLE, VALUES, SHOW, EXPLAIN, DESCRIBE), else `other`.
/// Leading comments and parentheses are skipped; `WITH … INSERT`/`SELECT … FOR UPDATE` read
/// as they start.
pub fn statement_kind(sql: &str) -> &'static str {
    let mut rest = sql.trim_start();
    loop {
        if let Some(r) = rest.strip_prefix("/*") {
            rest = r
                .split_once("*/")
                .map(|(_, r)| r)
                .unwrap_or("")
                .trim_start();
        } else if let Some(r) = rest.strip_prefix("--") {
            rest = r
                .split_once('\n')
                .map(|(_, r)| r)
                .unwrap_or("")
                .trim_start();
        } else if let Some(r) = rest.strip_prefix('(') {
            rest = r.trim_start();
        } else {
            break;
        }
    }
    let word: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_uppercase();
    match word.as_str() {
        "ALTER" | "CREATE" | "DROP" | "TRUNCATE" | "RENAME" | "LOCK" | "REINDEX" | "CLUSTER"
        | "VACUUM" | "OPTIMIZE" | "ANALYZE" | "COMMENT" | "GRANT" | "REVOKE" | "REFRESH" => "ddl",
        "INSERT" | "UPDATE" | "DELETE" | "MERGE" | "REPLACE" | "COPY" | "UPSERT" | "LOAD" => "dml",
        "SELECT" | "WITH" | "TABLE" | "VALUES" | "SHOW" | "EXPLAIN" | "DESCRIBE" | "DESC" => "read",
        _ => "other",
    }
}

/// PostgreSQL table lock queues from `pg_locks` rows of `locktype = 'relation'` (others
/// ignored): a relation someone waits on is a lock, its granted rows the holders, its
/// ungranted ones the waiters in the order they began waiting (`waitstart`; PostgreSQL grants
/// in queue order, so an `ALTER TABLE` waiting behind an open transaction holds up every
/// later `SELECT` too). A relation nobody waits on is not listed: every query takes relation
/// locks. Holders idle in their transaction flag the lock [`FLAG_IDLE_IN_TRANSACTION`]
/// (`idle` names the connections that are).
pub fn pg_relation_locks(
    rows: &[PgLockRow],
    conns: &HashMap<i64, ConnFacts>,
    idle: &BTreeSet<i64>,
) -> Vec<DbLock> {
    // By path, not by name: two names can spell one path (a database `""` and none).
    let mut by_path: BTreeMap<String, Vec<&PgLockRow>> = BTreeMap::new();
    for row in rows.iter().filter(|r| r.locktype == "relation") {
        if let Some(rel) = row.relation.as_deref() {
            by_path
                .entry(table_lock_path(row.database.as_deref(), rel))
                .or_default()
                .push(row);
        }
    }
    let mut out = Vec::new();
    for (path, rows) in by_path {
        if rows.iter().all(|r| r.granted) {
            continue;
        }
        let mut holders: Vec<DbParticipant> = Vec::new();
        let mut waiters: Vec<DbParticipant> = Vec::new();
        let version = |pid: i64| conns.get(&pid).and_then(|f| f.xact_started.clone());
        for row in rows {
            if row.granted {
                hold(&mut holders, row.pid, pg_mode(&row.mode), version(row.pid));
            } else if !waiters.iter().any(|w| w.connection == Some(row.pid)) {
                let mut p = DbParticipant::of_connection(row.pid);
                p.mode = Some(pg_mode(&row.mode));
                p.version = version(row.pid);
                p.since_ms = row.waitstart_ms;
                waiters.push(p);
            }
        }
        waiters.sort_by(|a, b| {
            (a.since_ms.unwrap_or(i64::MAX), &a.id).cmp(&(b.since_ms.unwrap_or(i64::MAX), &b.id))
        });
        out.push(table_queue(path, holders, waiters, idle));
    }
    out
}

/// Adds connection `connection` holding in `mode` to `holders`; a connection holding several
/// modes is listed once, with the strongest.
fn hold(
    holders: &mut Vec<DbParticipant>,
    connection: i64,
    mode: LockMode,
    version: Option<String>,
) {
    match holders
        .iter_mut()
        .find(|h| h.connection == Some(connection))
    {
        Some(h) => {
            if mode == LockMode::Write {
                h.mode = Some(mode);
            }
        }
        None => {
            let mut p = DbParticipant::of_connection(connection);
            p.mode = Some(mode);
            p.version = version;
            holders.push(p);
        }
    }
}

/// A table's lock queue under `path`. A connection both holding (a weaker mode) and waiting
/// (an upgrade, an `ALTER`'s upgradable lock) is a waiter: it is not what the others wait for.
fn table_queue(
    path: String,
    mut holders: Vec<DbParticipant>,
    waiters: Vec<DbParticipant>,
    idle: &BTreeSet<i64>,
) -> DbLock {
    holders.retain(|h| !waiters.iter().any(|w| w.connection == h.connection));
    let mut flags = vec![FLAG_LISTED_WHILE_QUEUED.to_string()];
    if holders
        .iter()
        .any(|h| h.connection.is_some_and(|c| idle.contains(&c)))
    {
        flags.push(FLAG_IDLE_IN_TRANSACTION.to_string());
    }
    DbLock {
        path,
        recipe: DbRecipe::TableLock,
        holders,
        waiters,
        expires_at_ms: None,
        flags,
    }
}

/// A metadata lock granted to a connection (MariaDB `METADATA_LOCK_INFO`, MySQL
/// `performance_schema.metadata_locks` with `LOCK_STATUS = 'GRANTED'`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataLockHeld {
    pub connection: i64,
    /// `MDL_SHARED_READ`, `MDL_SHARED_UPGRADABLE`, `MDL_EXCLUSIVE`, … (MySQL: `SHARED_READ`, …).
    pub mode: String,
    pub schema: String,
    pub table: String,
}

/// A connection waiting for a table's metadata lock: MySQL names the table
/// (`performance_schema.metadata_locks` `PENDING`); MariaDB's process list only says
/// "Waiting for table metadata lock", so the table is read from the statement
/// ([`statement_tables`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataLockWait {
    pub connection: i64,
    /// `(schema, table)` when the server names it.
    pub table: Option<(String, String)>,
    /// The connection's default schema (for unqualified names in the statement).
    pub schema: Option<String>,
    pub statement: String,
    /// When it began waiting (epoch ms): the process list's time in its state.
    pub since_ms: Option<i64>,
    /// `MDL_EXCLUSIVE` etc. when the server tells.
    pub mode: Option<String>,
}

/// Where metadata-lock waiters go whose table cannot be told.
pub const METADATA_UNKNOWN: &str = "/table_locks/?";

fn mdl_mode(mode: &str) -> LockMode {
    // Exclusive (and the upgradable/no-write modes an ALTER takes) keep others out; the
    // shared read/write modes of queries and the intention locks let each other in.
    let m = mode.to_ascii_uppercase();
    let exclusive = m.contains("EXCLUSIVE") && !m.contains("INTENTION");
    if exclusive
        || m.contains("UPGRADABLE")
        || m.contains("NO_WRITE")
        || m.contains("NO_READ_WRITE")
    {
        LockMode::Write
    } else {
        LockMode::Read
    }
}

/// MariaDB/MySQL table lock queues: each table some connection waits to lock (its metadata
/// lock) is a lock; the connections holding a metadata lock on it are the holders — except
/// those waiting themselves (an `ALTER TABLE` holds `MDL_SHARED_UPGRADABLE` while it waits to
/// upgrade to exclusive) — and the waiters come longest wait first. Tables nobody waits on
/// are not listed (every open table holds metadata locks). `idle` names connections idle in
/// an open transaction ([`FLAG_IDLE_IN_TRANSACTION`]).
pub fn metadata_locks(
    held: &[MetadataLockHeld],
    waits: &[MetadataLockWait],
    idle: &BTreeSet<i64>,
) -> Vec<DbLock> {
    let tables: BTreeSet<(String, String)> = held
        .iter()
        .map(|h| (h.schema.clone(), h.table.clone()))
        .collect();
    // By path (two names can spell one path); the table is unknown under METADATA_UNKNOWN.
    let mut waiting: BTreeMap<String, Vec<&MetadataLockWait>> = BTreeMap::new();
    let mut unknown = false;
    let mut placed = BTreeSet::new();
    for w in waits {
        // A connection waits for one lock at a time: its first row counts.
        if !placed.insert(w.connection) {
            continue;
        }
        let table = w.table.clone().or_else(|| {
            // The one table of the statement that someone holds a metadata lock on.
            let named: BTreeSet<(String, String)> = statement_tables(&w.statement)
                .into_iter()
                .filter_map(|(schema, table)| {
                    let schema = schema.or_else(|| w.schema.clone())?;
                    Some((schema, table))
                })
                .filter(|t| tables.contains(t))
                .collect();
            (named.len() == 1)
                .then(|| named.into_iter().next())
                .flatten()
        });
        let path = match table {
            Some((schema, name)) => table_lock_path(Some(&schema), &name),
            None => {
                unknown = true;
                METADATA_UNKNOWN.to_string()
            }
        };
        waiting.entry(path).or_default().push(w);
    }
    let mut out = Vec::new();
    for (path, mut ws) in waiting {
        ws.sort_by_key(|w| (w.since_ms.unwrap_or(i64::MAX), w.connection));
        let waiters: Vec<DbParticipant> = ws
            .iter()
            .map(|w| {
                let mut p = DbParticipant::of_connection(w.connection);
                p.since_ms = w.since_ms;
                p.mode = Some(match &w.mode {
                    Some(m) => mdl_mode(m),
                    None if statement_kind(&w.statement) == "read" => LockMode::Read,
                    None => LockMode::Write,
                });
                p
            })
            .collect();
        let mut holders: Vec<DbParticipant> = Vec::new();
        if path != METADATA_UNKNOWN || !unknown {
            for h in held
                .iter()
                .filter(|h| table_lock_path(Some(&h.schema), &h.table) == path)
            {
                hold(&mut holders, h.connection, mdl_mode(&h.mode), None);
            }
        }
        let mut lock = table_queue(path, holders, waiters, idle);
        if unknown && lock.path == METADATA_UNKNOWN {
            lock.flags.push(FLAG_NAME_NOT_IN_STATEMENT.to_string());
        }
        out.push(lock);
    }
    out
}

/// The tables a statement names, `(schema, table)` with the schema when it is qualified: the
/// names after `FROM`, `JOIN`, `UPDATE`, `INTO`, `TABLE` (also `ALTER TABLE`, `TRUNCATE
/// TABLE`, `LOCK TABLES`), unquoted from backticks or double quotes. A reading, not a parser:
/// subqueries' tables count too, and a name it cannot read is skipped.
pub fn statement_tables(sql: &str) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    let tokens = sql_tokens(sql);
    let mut i = 0;
    while i < tokens.len() {
        let word = tokens[i].to_ascii_uppercase();
        let follows = matches!(
            word.as_str(),
            "FROM" | "JOIN" | "UPDATE" | "INTO" | "TABLE" | "TABLES"
        );
        i += 1;
        if !follows {
            continue;
        }
        // `ALTER TABLE IF EXISTS t`, `TRUNCATE TABLE ONLY t`.
        while i < tokens.len()
            && matches!(
                tokens[i].to_ascii_uppercase().as_str(),
                "IF" | "EXISTS" | "ONLY" | "NOT" | "IGNORE" | "LOW_PRIORITY"
            )
        {
            i += 1;
        }
        let Some(first) = tokens.get(i) else { break };
        if first.starts_with('(') || first == "(" {
            continue;
        }
        let name = unquote_identifier_path(first).replace('"', "");
        let parts: Vec<&str> = name.split('.').collect();
        let (schema, table) = match parts.as_slice() {
            [table] => (None, table.to_string()),
            [schema, table] => (Some(schema.to_string()), table.to_string()),
            _ => continue,
        };
        if !table.is_empty() && !table.starts_with('(') {
            out.push((schema, table));
        }
    }
    out
}

/// Splits SQL into words, keeping quoted identifiers (with their dots) whole, opening
/// parentheses as words of their own, and dropping commas, semicolons, closing parentheses
/// and string literals.
fn sql_tokens(sql: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    for c in sql.chars().take(4096) {
        match quote {
            Some(q) => {
                current.push(c);
                if c == q {
                    quote = None;
                }
            }
            None => match c {
                '`' | '"' => {
                    current.push(c);
                    quote = Some(c);
                }
                '\'' => {
                    // A string literal is not a name: skip words until it closes.
                    if !current.is_empty() {
                        tokens.push(std::mem::take(&mut current));
                    }
                    quote = Some('\'');
                    current.push(c);
                }
                c if c.is_whitespace() || c == ',' || c == ';' || c == '(' || c == ')' => {
                    if !current.is_empty() {
                        tokens.push(std::mem::take(&mut current));
                    }
                    // An opening parenthesis stays: `FROM (` starts a subquery, not a name.
                    if c == '(' {
                        tokens.push("(".into());
                    }
                }
                c => current.push(c),
            },
        }
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    tokens.retain(|t| !t.starts_with('\''));
    tokens
}

/// One `INNODB_TRX` row.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InnoTrx {
    pub trx_id: String,
    pub thread: i64,
    pub started_ms: Option<i64>,
    /// `trx_started` as the server printed it (a force release compares it).
    pub started: Option<String>,
    pub wait_started_ms: Option<i64>,
    /// The lock it waits for (`trx_requested_lock_id`).
    pub requested_lock: Option<String>,
}

/// One `INNODB_LOCKS` row.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct InnoLock {
    pub lock_id: String,
    pub trx_id: String,
    /// `X`, `S`, `X,GAP`, `IX`, …
    pub mode: String,
    /// `RECORD` or `TABLE`.
    pub lock_type: String,
    /// `` `db`.`table` ``.
    pub table: String,
    pub index: Option<String>,
    /// The locked key as InnoDB prints it (`'orders'`, `1`, `supremum pseudo-record`).
    pub data: Option<Vec<u8>>,
}

fn inno_mode(mode: &str) -> LockMode {
    if mode.starts_with('S') || mode.starts_with("IS") {
        LockMode::Read
    } else {
        LockMode::Write
    }
}

/// MariaDB row (and table) locks that conflict, from `INNODB_LOCKS` and `INNODB_TRX`: a lock
/// some transaction requests (`trx_requested_lock_id`) is a wait, the others on the same record
/// are held. `lock_wait_timeout_ms` (`innodb_lock_wait_timeout`) gives waiters their deadline.
pub fn innodb_row_locks(
    locks: &[InnoLock],
    trxs: &[InnoTrx],
    lock_wait_timeout_ms: Option<i64>,
) -> Vec<DbLock> {
    let trx: HashMap<&str, &InnoTrx> = trxs.iter().map(|t| (t.trx_id.as_str(), t)).collect();
    let requested: BTreeSet<&str> = trxs
        .iter()
        .filter_map(|t| t.requested_lock.as_deref())
        .collect();
    let mut by_record: BTreeMap<String, Vec<&InnoLock>> = BTreeMap::new();
    for lock in locks {
        let table = unquote_identifier_path(&lock.table);
        let path = match (&lock.data, lock.lock_type.as_str()) {
            (Some(data), "RECORD") => format!(
                "/rows/{table}/{}/{}",
                lock.index.as_deref().unwrap_or("?"),
                display_bytes(data)
            ),
            _ => format!("/tables-locked/{table}"),
        };
        by_record.entry(path).or_default().push(lock);
    }
    by_record
        .into_iter()
        .map(|(path, locks)| {
            let mut holders: Vec<DbParticipant> = Vec::new();
            let mut waiters: Vec<(Option<i64>, DbParticipant)> = Vec::new();
            let waiting_trx: BTreeSet<&str> = locks
                .iter()
                .filter(|l| requested.contains(l.lock_id.as_str()))
                .map(|l| l.trx_id.as_str())
                .collect();
            for lock in &locks {
                let t = trx.get(lock.trx_id.as_str());
                let p = DbParticipant {
                    id: format!("trx {}", lock.trx_id),
                    connection: t.map(|t| t.thread),
                    since_ms: None,
                    mode: Some(inno_mode(&lock.mode)),
                    deadline_ms: None,
                    version: t.and_then(|t| t.started.clone()),
                    identity: None,
                };
                if waiting_trx.contains(lock.trx_id.as_str()) {
                    if waiters.iter().any(|(_, w)| w.id == p.id) {
                        continue;
                    }
                    let since = t.and_then(|t| t.wait_started_ms);
                    waiters.push((
                        since,
                        DbParticipant {
                            since_ms: since,
                            deadline_ms: since
                                .zip(lock_wait_timeout_ms)
                                .map(|(s, t)| s.saturating_add(t)),
                            ..p
                        },
                    ));
                } else if !holders.iter().any(|h| h.id == p.id) {
                    holders.push(DbParticipant {
                        since_ms: t.and_then(|t| t.started_ms),
                        ..p
                    });
                }
            }
            waiters.sort_by(|a, b| {
                (a.0.unwrap_or(i64::MAX), &a.1.id).cmp(&(b.0.unwrap_or(i64::MAX), &b.1.id))
            });
            DbLock {
                path,
                recipe: DbRecipe::RowLock,
                holders,
                waiters: waiters.into_iter().map(|(_, w)| w).collect(),
                expires_at_ms: None,
                flags: vec![FLAG_CONTENDED_ONLY.to_string()],
            }
        })
        .collect()
}

/// `` `app`.`locks` `` → `app.locks` (backquotes doubled inside a name are undone).
pub fn unquote_identifier_path(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match c {
            '`' if quoted && chars.peek() == Some(&'`') => {
                chars.next();
                out.push('`');
            }
            '`' => quoted = !quoted,
            c => out.push(c),
        }
    }
    out
}

/// A `GET_LOCK` holder from `METADATA_LOCK_INFO` (`THREAD_ID`, the name in `TABLE_SCHEMA`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserLockHeld {
    pub thread: i64,
    pub name: Vec<u8>,
}

/// A connection the process list shows in state `User lock`, with its statement and how long
/// it has waited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserLockWait {
    pub thread: i64,
    pub statement: String,
    /// When the wait began (now − `TIME_MS`).
    pub since_ms: Option<i64>,
}

/// MariaDB `GET_LOCK` locks: holders from `METADATA_LOCK_INFO`, waiters from the process list
/// (the lock named by the literal in their `GET_LOCK(…)` call, [`parse_get_lock_call`]; a wait
/// whose statement does not name it literally, e.g. a bound parameter, is under
/// `/get_lock/?`). Waiters are ordered by wait start; their deadline is the call's timeout.
pub fn get_lock_locks(held: &[UserLockHeld], waits: &[UserLockWait]) -> Vec<DbLock> {
    let mut locks: BTreeMap<String, DbLock> = BTreeMap::new();
    fn entry<'a>(locks: &'a mut BTreeMap<String, DbLock>, name: &str) -> &'a mut DbLock {
        let path = format!("/get_lock/{name}");
        locks.entry(path.clone()).or_insert_with(|| DbLock {
            path,
            recipe: DbRecipe::GetLock,
            holders: Vec::new(),
            waiters: Vec::new(),
            expires_at_ms: None,
            flags: Vec::new(),
        })
    }
    for h in held {
        let lock = entry(&mut locks, &display_bytes(&h.name));
        let mut p = DbParticipant::of_connection(h.thread);
        p.mode = Some(LockMode::Write);
        if !lock.holders.iter().any(|x| x.id == p.id) {
            lock.holders.push(p);
        }
    }
    let mut sorted: Vec<&UserLockWait> = waits.iter().collect();
    sorted.sort_by_key(|w| (w.since_ms.unwrap_or(i64::MAX), w.thread));
    for w in sorted {
        let (name, timeout_s) = match parse_get_lock_call(&w.statement) {
            Some((name, timeout)) => (name, timeout),
            None => (b"?".to_vec(), None),
        };
        // Shown as holders' names are, so that a name with `\x` in it is one lock.
        let lock = entry(&mut locks, &display_bytes(&name));
        let mut p = DbParticipant::of_connection(w.thread);
        p.since_ms = w.since_ms;
        p.mode = Some(LockMode::Write);
        // A negative timeout waits forever.
        p.deadline_ms = w
            .since_ms
            .zip(timeout_s.filter(|t| *t >= 0.0 && t.is_finite() && *t < 1e12))
            .map(|(s, t)| s.saturating_add((t * 1000.0) as i64));
        // GET_LOCK is reentrant, so a holder never waits for its own lock: the process list is
        // read before METADATA_LOCK_INFO, and the waiter got the lock in between.
        if !lock
            .waiters
            .iter()
            .chain(&lock.holders)
            .any(|x| x.id == p.id)
        {
            lock.waiters.push(p);
        }
    }
    for lock in locks.values_mut() {
        if lock.path == GET_LOCK_UNKNOWN {
            lock.flags.push(FLAG_NAME_NOT_IN_STATEMENT.to_string());
        }
    }
    locks.into_values().collect()
}

/// The lock name (its bytes) and timeout (seconds) of the first `GET_LOCK(name, timeout)` call
/// in a statement, when the name is a literal and the timeout a number literal (else `None` for
/// the timeout). The literals drivers send: a string (`'…'` or `"…"`, with `\` escapes and
/// doubled quotes), a hex literal (`X'766f'`, `0x766f`), either after a character set
/// introducer (`_binary X'…'`, what PyMySQL sends for a `bytes` name; `_utf8mb4'…'`) or `N`.
pub fn parse_get_lock_call(statement: &str) -> Option<(Vec<u8>, Option<f64>)> {
    let lower = statement.to_ascii_lowercase();
    let mut from = 0;
    while let Some(at) = lower[from..].find("get_lock") {
        let start = from + at;
        from = start + "get_lock".len();
        // Not part of a longer name (release_lock, is_used_lock never match; my_get_lock would).
        if start > 0 {
            let before = lower.as_bytes()[start - 1];
            if before.is_ascii_alphanumeric() || before == b'_' {
                continue;
            }
        }
        let rest = statement[from..].trim_start();
        let Some(rest) = rest.strip_prefix('(') else {
            continue;
        };
        let rest = rest.trim_start();
        let (name, after) = name_literal(rest)?;
        let after = after.trim_start();
        // `_utf8mb4'x' COLLATE utf8mb4_bin`: the collation does not change the name's bytes.
        let after = match after.get(..7) {
            Some(word) if word.eq_ignore_ascii_case("collate") => after[7..]
                .trim_start()
                .trim_start_matches(|c: char| c.is_ascii_alphanumeric() || c == '_')
                .trim_start(),
            _ => after,
        };
        let timeout = after.strip_prefix(',').and_then(|t| {
            let t = t.trim_start();
            let end = t
                .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E')))
                .unwrap_or(t.len());
            t[..end].parse::<f64>().ok()
        });
        return Some((name, timeout));
    }
    None
}

/// The bytes of a name literal at the start of `text` (see [`parse_get_lock_call`]), and what
/// follows it.
fn name_literal(text: &str) -> Option<(Vec<u8>, &str)> {
    let mut t = text;
    if let Some(rest) = t.strip_prefix('_') {
        // A character set introducer: `_binary`, `_utf8mb4`, `_latin1`, … then the literal.
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            return None;
        }
        t = rest[end..].trim_start();
    } else if t.len() > 1 && t.as_bytes()[0].eq_ignore_ascii_case(&b'n') && t[1..].starts_with('\'')
    {
        // N'…': a national character set string.
        t = &t[1..];
    }
    if let Some(rest) = t
        .strip_prefix(['x', 'X'])
        .and_then(|r| r.strip_prefix('\''))
    {
        // X'…': an even number of hex digits.
        let end = rest.find('\'')?;
        let digits = &rest[..end];
        if digits.len() % 2 != 0 {
            return None;
        }
        return Some((hex_bytes(digits)?, &rest[end + 1..]));
    }
    if let Some(rest) = t.strip_prefix("0x") {
        // 0x…: any number of hex digits (an odd count has a leading 0 implied); the literal
        // ends at the first character that is not one (`0x1g` is an identifier, not a literal).
        let end = rest
            .find(|c: char| !c.is_ascii_hexdigit())
            .unwrap_or(rest.len());
        let after = &rest[end..];
        if end == 0 || after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
            return None;
        }
        let digits = &rest[..end];
        let padded;
        let digits = if digits.len() % 2 == 0 {
            digits
        } else {
            padded = format!("0{digits}");
            &padded
        };
        return Some((hex_bytes(digits)?, after));
    }
    let (name, after) = string_literal(t)?;
    Some((name.into_bytes(), after))
}

/// Pairs of hex digits as bytes.
fn hex_bytes(digits: &str) -> Option<Vec<u8>> {
    if !digits.is_ascii() {
        return None;
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(digits.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A SQL string literal at the start of `text`, and what follows it.
fn string_literal(text: &str) -> Option<(String, &str)> {
    let quote = text.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let mut out = String::new();
    let mut chars = text[1..].char_indices();
    while let Some((i, c)) = chars.next() {
        if c == '\\' {
            let (_, escaped) = chars.next()?;
            out.push(match escaped {
                'n' => '\n',
                't' => '\t',
                'r' => '\r',
                '0' => '\0',
                // As MySQL reads them: client libraries escape Ctrl-Z as `\Z`.
                'b' => '\u{8}',
                'Z' => '\u{1a}',
                other => other,
            });
        } else if c == quote {
            let next = &text[1 + i + c.len_utf8()..];
            if next.starts_with(quote) {
                out.push(quote);
                chars.next();
            } else {
                return Some((out, next));
            }
        } else {
            out.push(c);
        }
    }
    None
}

/// Row locks the last poll saw whose holder's transaction is still open but that the database
/// no longer lists (nobody waits any more): kept, without waiters and flagged
/// [`FLAG_HOLDER_UNCONFIRMED`], until that transaction ends. `open` tells whether a holder
/// (by participant id and version) still runs.
pub fn carry_row_locks(
    previous: &[DbLock],
    current: &mut Vec<DbLock>,
    open: impl Fn(&DbParticipant) -> bool,
) {
    let listed: BTreeSet<String> = current.iter().map(|l| l.path.clone()).collect();
    for lock in previous {
        if lock.recipe != DbRecipe::RowLock || listed.contains(&lock.path) {
            continue;
        }
        let holders: Vec<DbParticipant> =
            lock.holders.iter().filter(|h| open(h)).cloned().collect();
        if holders.is_empty() {
            continue;
        }
        let mut flags: Vec<String> = lock
            .flags
            .iter()
            .filter(|f| f.as_str() != FLAG_HOLDER_UNCONFIRMED)
            .cloned()
            .collect();
        flags.push(FLAG_HOLDER_UNCONFIRMED.to_string());
        current.push(DbLock {
            holders,
            waiters: Vec::new(),
            flags,
            ..lock.clone()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advisory_keys_round_trip_through_pg_locks_columns() {
        for key in [
            AdvisoryKey::Big(42),
            AdvisoryKey::Big(-1),
            AdvisoryKey::Big(i64::MIN),
            AdvisoryKey::Big(1 << 33),
            AdvisoryKey::Pair(-5, 7),
            AdvisoryKey::Pair(i32::MAX, i32::MIN),
        ] {
            let (c, o, s) = key.pg_locks_columns();
            assert_eq!(AdvisoryKey::from_pg_locks(c, o, s), Some(key));
            assert_eq!(AdvisoryKey::parse(&key.display()), Some(key));
        }
        // Seen: pg_advisory_lock(4294967298) is classid 1, objid 2, objsubid 1.
        assert_eq!(
            AdvisoryKey::from_pg_locks(1, 2, 1),
            Some(AdvisoryKey::Big(4_294_967_298))
        );
        assert_eq!(AdvisoryKey::from_pg_locks(1, 2, 3), None);
        assert_eq!(AdvisoryKey::from_pg_locks(-1, 2, 1), None);
    }

    #[test]
    fn get_lock_calls_name_their_lock() {
        assert_eq!(
            parse_get_lock_call("SELECT GET_LOCK('orders', 10)"),
            Some(("orders".into(), Some(10.0)))
        );
        assert_eq!(
            parse_get_lock_call("select get_lock( \"it's\" ,-1)"),
            Some(("it's".into(), Some(-1.0)))
        );
        assert_eq!(
            parse_get_lock_call(r"SELECT GET_LOCK('a\'b''c', 2.5)"),
            Some(("a'b'c".into(), Some(2.5)))
        );
        assert_eq!(parse_get_lock_call("SELECT GET_LOCK(?, 10)"), None);
        assert_eq!(parse_get_lock_call("SELECT RELEASE_LOCK('x')"), None);
        assert_eq!(parse_get_lock_call("SELECT GET_LOCK('unterminated"), None);
        assert_eq!(
            parse_get_lock_call("SELECT GET_LOCK(CONCAT('a','b'), 1)"),
            None
        );
    }

    /// Names sent as binary or introduced literals land under their lock, as holders' names
    /// (bytes from `METADATA_LOCK_INFO`) are shown: PyMySQL 1.2 sends a `bytes` name as
    /// `_binary X'…'`.
    #[test]
    fn get_lock_names_in_hex_and_introduced_literals() {
        let name = |statement: &str| parse_get_lock_call(statement).map(|(n, _)| n);
        assert_eq!(
            parse_get_lock_call("SELECT GET_LOCK(_binary X'766f7465', 5)"),
            Some((b"vote".to_vec(), Some(5.0)))
        );
        assert_eq!(name("SELECT GET_LOCK(x'ff00', 1)"), Some(vec![0xff, 0]));
        assert_eq!(
            name("SELECT GET_LOCK(0x766f7465, 1)"),
            Some(b"vote".to_vec())
        );
        assert_eq!(name("SELECT GET_LOCK(0xf, 1)"), Some(vec![0x0f]));
        assert_eq!(
            name("SELECT GET_LOCK(_binary'a\\'b', 1)"),
            Some(b"a'b".to_vec())
        );
        assert_eq!(
            name("SELECT GET_LOCK(_utf8mb4 'vote' COLLATE utf8mb4_bin, 3)"),
            Some(b"vote".to_vec())
        );
        assert_eq!(
            parse_get_lock_call("SELECT GET_LOCK(_utf8mb4 'v' COLLATE utf8mb4_bin, 3)")
                .and_then(|(_, t)| t),
            Some(3.0)
        );
        assert_eq!(name("SELECT GET_LOCK(N'vote', 1)"), Some(b"vote".to_vec()));
        // Not literals: an odd X'…', a bare introducer, an identifier that starts like one.
        assert_eq!(name("SELECT GET_LOCK(X'766', 1)"), None);
        assert_eq!(name("SELECT GET_LOCK(_binary, 1)"), None);
        assert_eq!(name("SELECT GET_LOCK(0x1g, 1)"), None);
        assert_eq!(name("SELECT GET_LOCK(X'zz', 1)"), None);
        let waits = vec![UserLockWait {
            thread: 7,
            statement: "SELECT GET_LOCK(_binary X'766fff', 10)".into(),
            since_ms: Some(0),
        }];
        let held = vec![UserLockHeld {
            thread: 1,
            name: vec![0x76, 0x6f, 0xff],
        }];
        let out = get_lock_locks(&held, &waits);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].path, r"/get_lock/vo\xff");
        assert_eq!(out[0].waiters[0].id, "conn 7");
        assert!(out[0].flags.is_empty());
    }

    /// Found by fuzzing (`fuzz/`, `db_decode`): `\Z` as client libraries escape Ctrl-Z; a
    /// connection that got the lock between the process-list and `METADATA_LOCK_INFO` reads;
    /// a name with `\x` in it; a wait start near `i64::MAX`.
    #[test]
    fn get_lock_escapes_names_holders_and_deadlines_as_fuzzed() {
        assert_eq!(
            parse_get_lock_call(r"SELECT GET_LOCK('ctrl\Zz\b', 0)"),
            Some(("ctrl\u{1a}z\u{8}".into(), Some(0.0)))
        );
        let held = vec![
            UserLockHeld {
                thread: 1,
                name: b"orders".to_vec(),
            },
            UserLockHeld {
                thread: 2,
                name: br"a\x41".to_vec(),
            },
        ];
        let wait = |thread, statement: &str, since_ms| UserLockWait {
            thread,
            statement: statement.into(),
            since_ms: Some(since_ms),
        };
        let waits = vec![
            wait(1, "SELECT GET_LOCK('orders', 10)", 0),
            wait(3, r"SELECT GET_LOCK('a\\x41', 10)", 0),
            wait(4, "SELECT GET_LOCK('orders', 10)", i64::MAX - 1),
        ];
        let out = get_lock_locks(&held, &waits);
        let paths: Vec<_> = out.iter().map(|l| l.path.as_str()).collect();
        assert_eq!(paths, [r"/get_lock/a\x5cx41", "/get_lock/orders"]);
        assert_eq!(out[0].waiters[0].id, "conn 3");
        let ws: Vec<_> = out[1].waiters.iter().map(|w| w.id.as_str()).collect();
        assert_eq!(ws, ["conn 4"]);
        assert_eq!(out[1].waiters[0].deadline_ms, Some(i64::MAX));

        let trxs = vec![
            trx("10", 1, 100, None),
            trx("11", 2, 200, Some((i64::MAX - 1, "11:1"))),
        ];
        let locks = vec![lock("10:1", "10", "X"), lock("11:1", "11", "X")];
        let out = innodb_row_locks(&locks, &trxs, Some(50_000));
        assert_eq!(out[0].waiters[0].deadline_ms, Some(i64::MAX));
    }

    fn trx(id: &str, thread: i64, started: i64, wait: Option<(i64, &str)>) -> InnoTrx {
        InnoTrx {
            trx_id: id.into(),
            thread,
            started_ms: Some(started),
            started: Some(format!("t{started}")),
            wait_started_ms: wait.map(|w| w.0),
            requested_lock: wait.map(|w| w.1.to_string()),
        }
    }

    fn lock(id: &str, trx: &str, mode: &str) -> InnoLock {
        InnoLock {
            lock_id: id.into(),
            trx_id: trx.into(),
            mode: mode.into(),
            lock_type: "RECORD".into(),
            table: "`app`.`locks`".into(),
            index: Some("PRIMARY".into()),
            data: Some(b"'orders'".to_vec()),
        }
    }

    #[test]
    fn innodb_queue_of_three() {
        let trxs = vec![
            trx("10", 1, 100, None),
            trx("11", 2, 200, Some((250, "11:5:3:2"))),
            trx("12", 3, 300, Some((350, "12:5:3:2"))),
        ];
        let locks = vec![
            lock("10:5:3:2", "10", "X"),
            lock("11:5:3:2", "11", "X"),
            lock("12:5:3:2", "12", "X"),
        ];
        let out = innodb_row_locks(&locks, &trxs, Some(50_000));
        assert_eq!(out.len(), 1);
        let l = &out[0];
        assert_eq!(l.path, "/rows/app.locks/PRIMARY/'orders'");
        assert_eq!(l.holders.len(), 1);
        assert_eq!(l.holders[0].id, "trx 10");
        assert_eq!(l.holders[0].connection, Some(1));
        assert_eq!(l.holders[0].version.as_deref(), Some("t100"));
        let ws: Vec<_> = l.waiters.iter().map(|w| w.id.as_str()).collect();
        assert_eq!(ws, ["trx 11", "trx 12"]);
        assert_eq!(l.waiters[0].deadline_ms, Some(50_250));
    }

    fn pg(locktype: &str, pid: i64, granted: bool) -> PgLockRow {
        PgLockRow {
            locktype: locktype.into(),
            pid,
            mode: "ExclusiveLock".into(),
            granted,
            ..PgLockRow::default()
        }
    }

    #[test]
    fn pg_for_update_queue_of_three() {
        let tuple = |pid, granted, wait| PgLockRow {
            relation: Some("locks".into()),
            page: Some(0),
            tuple: Some(1),
            waitstart_ms: wait,
            mode: "AccessExclusiveLock".into(),
            ..pg("tuple", pid, granted)
        };
        let xact = |pid, granted, wait, mode: &str| PgLockRow {
            transactionid: Some("900".into()),
            waitstart_ms: wait,
            mode: mode.into(),
            ..pg("transactionid", pid, granted)
        };
        let rows = vec![
            xact(1, true, None, "ExclusiveLock"),
            tuple(2, true, None),
            xact(2, false, Some(20), "ShareLock"),
            tuple(4, false, Some(40)),
            tuple(3, false, Some(30)),
        ];
        let out = pg_row_locks(&rows, &HashMap::new());
        assert_eq!(out.len(), 1, "{out:#?}");
        assert_eq!(out[0].path, "/rows/locks/(0,1)");
        assert_eq!(out[0].holders[0].id, "conn 1");
        let ws: Vec<_> = out[0].waiters.iter().map(|w| w.id.as_str()).collect();
        assert_eq!(ws, ["conn 2", "conn 3", "conn 4"]);
    }

    #[test]
    fn advisory_holders_waiters_and_levels() {
        let adv = |pid, granted, wait, mode: &str| PgLockRow {
            classid: Some(0),
            objid: Some(7),
            objsubid: Some(1),
            waitstart_ms: wait,
            mode: mode.into(),
            ..pg("advisory", pid, granted)
        };
        let rows = vec![
            adv(1, true, None, "ExclusiveLock"),
            adv(3, false, Some(30), "ExclusiveLock"),
            adv(2, false, Some(20), "ShareLock"),
        ];
        let mut conns = HashMap::new();
        conns.insert(
            1,
            ConnFacts {
                in_transaction: false,
                statement: String::new(),
                started: Some("b1".into()),
                xact_started: None,
            },
        );
        let out = advisory_locks(&rows, &conns);
        assert_eq!(out[0].path, "/advisory/7");
        assert_eq!(out[0].holders[0].version.as_deref(), Some("b1"));
        assert_eq!(out[0].flags, ["session_level"]);
        let ws: Vec<_> = out[0].waiters.iter().map(|w| w.id.as_str()).collect();
        assert_eq!(ws, ["conn 2", "conn 3"]);
        assert_eq!(out[0].waiters[0].mode, Some(LockMode::Read));
    }

    #[test]
    fn a_cut_owner_and_key_show_their_size_and_digest() {
        let digest = "0f".repeat(32);
        let cut = |fill: u8| Clipped {
            head: vec![fill; crate::clip::SHOWN_BYTES],
            len: 5 << 20,
            sha256: Some(digest.clone()),
        };
        let row = TableRow {
            key: cut(b'k'),
            owner: Some(cut(b'o')),
            until: None,
            expired: false,
        };
        let lock = table_row_lock("t", &row, false);
        let id = &lock.holders[0].id;
        assert!(id.len() < crate::clip::SHOWN_BYTES + 100, "{}", id.len());
        assert!(id.ends_with(&format!("…[5242880 bytes, sha256 {digest}]")));
        let cut_owner = crate::clip::parse_cut(id).expect("a cut owner");
        assert_eq!(cut_owner.sha256.as_deref(), Some(digest.as_str()));
        assert!(lock.path.starts_with("/tables/t/kkk") && lock.path.ends_with(']'));
    }

    #[test]
    fn expired_rows_are_free_and_row_locks_linger_while_their_transaction_runs() {
        let row = TableRow {
            key: Clipped::of_slice(b"job"),
            owner: Some(Clipped::of_slice(b"host-1")),
            until: Some(("2026-01-01 00:00:00.000".into(), Some(1))),
            expired: true,
        };
        let l = table_row_lock("app.shedlock", &row, true);
        assert!(l.holders.is_empty());
        assert_eq!(l.flags, ["expired"]);
        let held = table_row_lock(
            "app.shedlock",
            &TableRow {
                expired: false,
                ..row
            },
            true,
        );
        assert_eq!(held.holders[0].id, "host-1");
        assert_eq!(
            held.holders[0].version.as_deref(),
            Some("2026-01-01 00:00:00.000")
        );

        let trxs = vec![
            trx("10", 1, 100, None),
            trx("11", 2, 200, Some((250, "11:1"))),
        ];
        let locks = vec![lock("10:1", "10", "X"), lock("11:1", "11", "X")];
        let before = innodb_row_locks(&locks, &trxs, None);
        let mut now = Vec::new();
        carry_row_locks(&before, &mut now, |h| h.id == "trx 10");
        assert_eq!(now.len(), 1);
        assert!(now[0].waiters.is_empty());
        assert!(now[0].flags.contains(&FLAG_HOLDER_UNCONFIRMED.to_string()));
        let mut gone = Vec::new();
        carry_row_locks(&before, &mut gone, |_| false);
        assert!(gone.is_empty());
    }

    /// `UUID.nameUUIDFromBytes(name.getBytes(UTF_8))` as OpenJDK 17 prints it, and
    /// `UUID.fromString(name).toString()` for a name that is a UUID (`UUIDConverter.getUUID`).
    #[test]
    fn spring_lock_keys_are_javas_name_based_uuids() {
        for (name, key) in [
            ("orders", "12c500ed-0b78-3910-9fb4-6af0f246be87"),
            ("invoice/42", "0a5b82ef-bd6b-3111-a2ec-8bb5196516fa"),
            ("", "d41d8cd9-8f00-3204-a980-0998ecf8427e"),
            ("ünïcode 🔒", "0b4b72ae-9823-3b34-85ee-cd1c14b7332c"),
            (
                "2F1E0B7C-1D2E-4A5B-9C8D-0E1F2A3B4C5D",
                "2f1e0b7c-1d2e-4a5b-9c8d-0e1f2a3b4c5d",
            ),
            // Not a UUID to Java's pattern (one digit short, a trailing newline): hashed.
            (
                "2F1E0B7C-1D2E-4A5B-9C8D-0E1F2A3B4C5",
                &spring_lock_key("2F1E0B7C-1D2E-4A5B-9C8D-0E1F2A3B4C5"),
            ),
        ] {
            assert_eq!(spring_lock_key(name), key, "{name:?}");
            assert!(is_uuid(key));
        }
        assert_ne!(
            spring_lock_key("2f1e0b7c-1d2e-4a5b-9c8d-0e1f2a3b4c5d\n"),
            "2f1e0b7c-1d2e-4a5b-9c8d-0e1f2a3b4c5d"
        );
        assert!(!is_uuid("2f1e0b7c-1d2e-4a5b-9c8d-0e1f2a3b4c5g"));
        assert!(!is_uuid("2f1e0b7c_1d2e-4a5b-9c8d-0e1f2a3b4c5d"));
    }

    fn spring_row(key: &str, owner: &str, expired: bool) -> TableRow {
        TableRow {
            key: Clipped::of_slice(key.as_bytes()),
            owner: Some(Clipped::of_slice(owner.as_bytes())),
            until: Some(("2026-08-21 10:00:05.123456".into(), Some(1_787_306_405_123))),
            expired,
        }
    }

    #[test]
    fn spring_locks_are_named_when_configured_and_hashed_otherwise() {
        let names = SpringLockNames::new([
            "orders",
            "invoice/42",
            "2F1E0B7C-1D2E-4A5B-9C8D-0E1F2A3B4C5D",
        ]);
        assert_eq!(names.len(), 3);
        let region = Clipped::of_slice(b"DEFAULT");
        let client = "8d3f0a4e-5b7c-4f1a-9e2d-3c4b5a697887";
        let l = spring_lock(
            "public.int_lock",
            &region,
            &spring_row("12c500ed-0b78-3910-9fb4-6af0f246be87", client, false),
            &names,
        );
        assert_eq!(l.path, "/tables/public.int_lock/DEFAULT/orders");
        assert_eq!(l.recipe, DbRecipe::SpringJdbcLock);
        assert_eq!(l.flags, [FLAG_WAITERS_NOT_VISIBLE]);
        assert_eq!(l.holders[0].id, client);
        assert_eq!(l.holders[0].identity.as_deref(), Some(client));
        assert_eq!(
            l.holders[0].version.as_deref(),
            Some("2026-08-21 10:00:05.123456")
        );
        assert_eq!(
            l.holders[0].since_ms, None,
            "CREATED_DATE is not a hold start"
        );
        assert_eq!(l.expires_at_ms, Some(1_787_306_405_123));
        assert!(l.waiters.is_empty());

        // A name with '/' in it, and one that is a UUID (stored in lower case).
        let slash = spring_lock(
            "app.INT_LOCK",
            &region,
            &spring_row("0a5b82ef-bd6b-3111-a2ec-8bb5196516fa", "node-a", false),
            &names,
        );
        assert_eq!(slash.path, "/tables/app.INT_LOCK/DEFAULT/invoice/42");
        let uuid_name = spring_lock(
            "t",
            &region,
            &spring_row("2f1e0b7c-1d2e-4a5b-9c8d-0e1f2a3b4c5d", "node-a", false),
            &names,
        );
        assert_eq!(
            uuid_name.path,
            "/tables/t/DEFAULT/2F1E0B7C-1D2E-4A5B-9C8D-0E1F2A3B4C5D"
        );

        // Not configured: the MD5 UUID, flagged; a (version 4) UUID name is the name itself.
        let hashed = spring_lock(
            "t",
            &region,
            &spring_row(&spring_lock_key("nightly-report"), "node-a", false),
            &names,
        );
        assert_eq!(
            hashed.path,
            format!("/tables/t/DEFAULT/{}", spring_lock_key("nightly-report"))
        );
        assert_eq!(
            hashed.flags,
            [FLAG_LOCK_NAME_HASHED, FLAG_WAITERS_NOT_VISIBLE]
        );
        let v4 = spring_lock(
            "t",
            &region,
            &spring_row("8d3f0a4e-5b7c-4f1a-9e2d-3c4b5a697887", "node-a", false),
            &names,
        );
        assert_eq!(v4.flags, [FLAG_WAITERS_NOT_VISIBLE]);

        // Past EXPIRED_AFTER: the row stays, free; expiry kept.
        let expired = spring_lock(
            "t",
            &Clipped::of_slice(b"jobs"),
            &spring_row("12c500ed-0b78-3910-9fb4-6af0f246be87", client, true),
            &names,
        );
        assert_eq!(expired.path, "/tables/t/jobs/orders");
        assert!(expired.holders.is_empty());
        assert_eq!(expired.flags, [FLAG_EXPIRED, FLAG_WAITERS_NOT_VISIBLE]);
        assert_eq!(expired.expires_at_ms, Some(1_787_306_405_123));
    }

    #[test]
    fn spring_lock_paths_read_back_to_region_and_key() {
        let names = SpringLockNames::new(["orders", "invoice/42", "a/b"]);
        let key = |n: &str| spring_lock_key(n);
        assert_eq!(
            spring_lock_parts("DEFAULT/orders", &names),
            Ok(("DEFAULT".into(), key("orders")))
        );
        assert_eq!(
            spring_lock_parts("DEFAULT/invoice/42", &names),
            Ok(("DEFAULT".into(), key("invoice/42")))
        );
        let uuid = key("not-configured");
        assert_eq!(
            spring_lock_parts(&format!("eu/west/{uuid}"), &names),
            Ok(("eu/west".into(), uuid.clone()))
        );
        // `x/a/b`: region `x` with name `a/b`, or region `x/a` with name `b`? Only `a/b` is
        // configured, so one reading. With both configured it is refused.
        assert_eq!(
            spring_lock_parts("x/a/b", &names),
            Ok(("x".into(), key("a/b")))
        );
        let both = SpringLockNames::new(["a/b", "b"]);
        assert!(spring_lock_parts("x/a/b", &both).is_err_and(|e| e.contains("more than one")));
        assert!(spring_lock_parts("DEFAULT/unknown", &names).is_err());
        assert!(spring_lock_parts("orders", &names).is_err());
        assert!(
            spring_lock_parts("/orders", &names).is_err(),
            "no empty region"
        );
        // What spring_lock writes reads back.
        for (region, name) in [("DEFAULT", "orders"), ("r/1", "invoice/42"), ("r", "a/b")] {
            let lock = spring_lock(
                "t",
                &Clipped::of_slice(region.as_bytes()),
                &spring_row(&key(name), "c", false),
                &names,
            );
            let rest = lock
                .path
                .strip_prefix("/tables/t/")
                .expect("under the table");
            assert_eq!(
                spring_lock_parts(rest, &names),
                Ok((region.to_string(), key(name))),
                "{rest}"
            );
        }
    }

    #[test]
    fn get_lock_holders_and_waiters() {
        let held = vec![UserLockHeld {
            thread: 5,
            name: b"orders".to_vec(),
        }];
        let waits = vec![
            UserLockWait {
                thread: 7,
                statement: "SELECT GET_LOCK('orders', 10)".into(),
                since_ms: Some(2_000),
            },
            UserLockWait {
                thread: 6,
                statement: "SELECT GET_LOCK('orders', -1)".into(),
                since_ms: Some(1_000),
            },
            UserLockWait {
                thread: 8,
                statement: "SELECT GET_LOCK(?, 10)".into(),
                since_ms: Some(1_500),
            },
        ];
        let out = get_lock_locks(&held, &waits);
        assert_eq!(out.len(), 2);
        let orders = out
            .iter()
            .find(|l| l.path == "/get_lock/orders")
            .expect("orders");
        assert_eq!(orders.holders[0].id, "conn 5");
        let ws: Vec<_> = orders.waiters.iter().map(|w| w.id.as_str()).collect();
        assert_eq!(ws, ["conn 6", "conn 7"]);
        assert_eq!(orders.waiters[0].deadline_ms, None);
        assert_eq!(orders.waiters[1].deadline_ms, Some(12_000));
        let unknown = out.iter().find(|l| l.path == "/get_lock/?").expect("?");
        assert_eq!(unknown.flags, ["lock_name_not_in_statement"]);
    }

    fn relation(pid: i64, mode: &str, granted: bool, waitstart: Option<i64>) -> PgLockRow {
        PgLockRow {
            locktype: "relation".into(),
            pid,
            mode: mode.into(),
            granted,
            waitstart_ms: waitstart,
            relation: Some("orders".into()),
            database: Some("app".into()),
            ..PgLockRow::default()
        }
    }

    #[test]
    fn a_postgres_queue_behind_alter_table_is_one_lock_idle_holder_first() {
        let rows = [
            // The SELECT came last but is listed first: the order is by wait start.
            relation(30, "AccessShareLock", false, Some(3_000)),
            relation(10, "AccessShareLock", true, None),
            relation(20, "AccessExclusiveLock", false, Some(2_000)),
            // Another table nobody waits on is not a lock.
            PgLockRow {
                relation: Some("other".into()),
                ..relation(10, "RowExclusiveLock", true, None)
            },
        ];
        let idle = BTreeSet::from([10]);
        let out = pg_relation_locks(&rows, &HashMap::new(), &idle);
        assert_eq!(out.len(), 1);
        let lock = &out[0];
        assert_eq!(lock.path, "/table_locks/app/orders");
        assert_eq!(lock.recipe, DbRecipe::TableLock);
        let holders: Vec<Option<i64>> = lock.holders.iter().map(|h| h.connection).collect();
        assert_eq!(holders, [Some(10)]);
        let waiters: Vec<(Option<i64>, Option<LockMode>)> = lock
            .waiters
            .iter()
            .map(|w| (w.connection, w.mode))
            .collect();
        assert_eq!(
            waiters,
            [
                (Some(20), Some(LockMode::Write)),
                (Some(30), Some(LockMode::Read))
            ]
        );
        assert!(lock.flags.contains(&FLAG_IDLE_IN_TRANSACTION.to_string()));
    }

    #[test]
    fn a_mariadb_metadata_lock_queue_reads_the_table_from_the_statement() {
        let held = [
            MetadataLockHeld {
                connection: 5,
                mode: "MDL_SHARED_READ".into(),
                schema: "app".into(),
                table: "orders".into(),
            },
            // The ALTER holds an upgradable lock while it waits: a waiter, not a holder.
            MetadataLockHeld {
                connection: 6,
                mode: "MDL_SHARED_UPGRADABLE".into(),
                schema: "app".into(),
                table: "orders".into(),
            },
        ];
        let waits = [
            MetadataLockWait {
                connection: 7,
                schema: Some("app".into()),
                statement: "SELECT * FROM orders WHERE id = 1".into(),
                since_ms: Some(3_000),
                ..MetadataLockWait::default()
            },
            MetadataLockWait {
                connection: 6,
                schema: Some("app".into()),
                statement: "ALTER TABLE `app`.`orders` ADD COLUMN w INT".into(),
                since_ms: Some(2_000),
                ..MetadataLockWait::default()
            },
            MetadataLockWait {
                connection: 8,
                schema: None,
                statement: "SELECT 1".into(),
                since_ms: Some(4_000),
                ..MetadataLockWait::default()
            },
        ];
        let out = metadata_locks(&held, &waits, &BTreeSet::from([5]));
        let orders = out
            .iter()
            .find(|l| l.path == "/table_locks/app/orders")
            .expect("orders");
        let holders: Vec<Option<i64>> = orders.holders.iter().map(|h| h.connection).collect();
        assert_eq!(holders, [Some(5)]);
        let waiters: Vec<(Option<i64>, Option<LockMode>)> = orders
            .waiters
            .iter()
            .map(|w| (w.connection, w.mode))
            .collect();
        assert_eq!(
            waiters,
            [
                (Some(6), Some(LockMode::Write)),
                (Some(7), Some(LockMode::Read))
            ]
        );
        assert!(orders.flags.contains(&FLAG_IDLE_IN_TRANSACTION.to_string()));
        let unknown = out.iter().find(|l| l.path == METADATA_UNKNOWN).expect("?");
        assert_eq!(unknown.waiters[0].connection, Some(8));
    }

    #[test]
    fn statements_are_told_by_kind_and_their_tables_read() {
        for (sql, kind) in [
            ("ALTER TABLE t ADD COLUMN w int", "ddl"),
            ("  /* app */ alter table t drop w", "ddl"),
            ("-- x\nTRUNCATE t", "ddl"),
            ("LOCK TABLE t IN ACCESS EXCLUSIVE MODE", "ddl"),
            ("insert into t values (1)", "dml"),
            ("UPDATE t SET v = 1", "dml"),
            ("(SELECT 1)", "read"),
            ("WITH x AS (SELECT 1) SELECT * FROM x", "read"),
            ("BEGIN", "other"),
            ("", "other"),
        ] {
            assert_eq!(statement_kind(sql), kind, "{sql}");
        }
        assert_eq!(
            statement_tables("SELECT a FROM `s`.`t` JOIN u ON 1 WHERE x = 'FROM v'"),
            [(Some("s".into()), "t".into()), (None, "u".into())]
        );
        assert_eq!(
            statement_tables("ALTER TABLE IF EXISTS \"orders\" ADD w int"),
            [(None, "orders".into())]
        );
        assert_eq!(statement_tables("SELECT * FROM (SELECT 1) x"), []);
    }
}
