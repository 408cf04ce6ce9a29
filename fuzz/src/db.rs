//! `db_decode`: every decoder in `lockscope_model::database` on one poll's worth of rows, as a
//! MariaDB or PostgreSQL server could return them (and rows no server returns).
//!
//! An input holds `INNODB_LOCKS` and `INNODB_TRX` rows, `pg_locks` rows with the connections'
//! facts (`pg_stat_activity`), `METADATA_LOCK_INFO` holders and process-list `User lock` waits,
//! lock-table rows, SQL statements (built `GET_LOCK` calls and any text), advisory keys and
//! `pg_locks` key columns, and identifier paths. Ids, trx ids, lock ids, modes, tables and names
//! are picked from small tables of real values most of the time (so rows refer to each other:
//! a transaction requests a listed lock, a connection waits on a listed transaction) or are any
//! text; times are a few nearby instants, none, or any `i64`.
//!
//! Checks, besides "no panic":
//! * every lock's path starts with `/` and names its recipe's place (`/rows/`, `/advisory/`,
//!   `/get_lock/`, `/tables/`, …); paths are distinct within one decoder's output; no
//!   participant is twice a holder or twice a waiter of one lock;
//! * no participant is both a holder and a waiter of one lock, except where `pg_locks` itself
//!   says so (one consistent snapshot: a backend holding an advisory lock shared and waiting to
//!   take it exclusively, or in a row-lock deadlock); MariaDB's `GET_LOCK` is reentrant, so a
//!   connection never waits for a lock it holds (the process list and `METADATA_LOCK_INFO` are
//!   two reads, between which a waiter can get the lock);
//! * waiters are in wait-start order where the database gives one (a PostgreSQL row's first
//!   waiter, which holds the tuple lock, before the rest); a wait's deadline is not before its
//!   start; holders and waiters of one `GET_LOCK` name are in one lock, under the name as
//!   `display_bytes` shows it;
//! * `AdvisoryKey`: `from_pg_locks(pg_locks_columns(k)) == k`, `parse(display(k)) == k`, and
//!   whatever `from_pg_locks` accepts maps back to the same columns; an advisory lock's path is
//!   `advisory_path` of its rows' database and key;
//! * `parse_get_lock_call` of `SELECT GET_LOCK(<name quoted as a client would>, N)` gives the
//!   name and `N`, for any name (quotes, backslashes, NUL, Ctrl-Z, unicode);
//!   `unquote_identifier_path` undoes backquoting;
//! * `table_row_lock` keeps the key, owner and expiry, and has a holder unless expired;
//! * `spring_lock` names a Spring row by region and the configured name its key is stored under
//!   (else the key, flagged `lock_name_hashed` exactly for a name-based UUID), keeps owner (as
//!   id and identity), expiry and flags, and its path reads back through `spring_lock_parts`;
//!   `spring_lock_key` of any name is a lower-case UUID, name-based unless the name is one;
//! * `carry_row_locks` adds only row locks it was given, under paths not already listed, with
//!   holders it was told are open, no waiters, and the `holder_unconfirmed` flag once.

use std::collections::{BTreeSet, HashMap};

use arbitrary::Arbitrary;
use lockscope_model::clip::Clipped;
use lockscope_model::database::{
    advisory_locks, advisory_path, carry_row_locks, get_lock_locks, innodb_row_locks, is_uuid,
    metadata_locks, parse_get_lock_call, pg_relation_locks, pg_row_locks, spring_lock,
    spring_lock_key, spring_lock_parts, statement_kind, statement_tables, table_row_lock,
    unquote_identifier_path, AdvisoryKey, ConnFacts, DbLock, DbParticipant, MetadataLockHeld,
    MetadataLockWait,
    DbRecipe, InnoLock, InnoTrx, PgLockRow, SpringLockNames, TableRow, UserLockHeld, UserLockWait,
    FLAG_EXPIRED, FLAG_HOLDER_UNCONFIRMED, FLAG_LOCK_NAME_HASHED, FLAG_WAITERS_NOT_VISIBLE,
};
use lockscope_model::redis::display_bytes;

use crate::{pick, Blob, Text};

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub struct Input {
    pub inno_locks: Vec<Inno>,
    pub inno_trxs: Vec<Trx>,
    pub lock_wait_timeout_ms: Option<Num>,
    pub pg_rows: Vec<Pg>,
    pub conns: Vec<Conn>,
    pub held: Vec<Held>,
    pub waits: Vec<Wait>,
    pub table: Str,
    pub table_rows: Vec<Row>,
    pub expiring: bool,
    pub statements: Vec<Statement>,
    pub keys: Vec<Key>,
    pub identifiers: Vec<Ident>,
    /// Which holders `carry_row_locks` is told are still open (bit `i % 64` of participant `i`).
    pub open: u64,
    /// Spring Integration's lock table (in `table`): the lock names configured for it, and its
    /// rows.
    pub spring_names: Vec<Str>,
    pub spring_rows: Vec<SpringRow>,
    /// Tables' metadata locks granted (`METADATA_LOCK_INFO`) and process-list waits for one.
    pub mdl_held: Vec<MdlHeld>,
    pub mdl_waits: Vec<Wait>,
    /// Which connections are idle in a transaction (bit `id % 64`).
    pub idle: u64,
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub struct MdlHeld {
    pub thread: Num,
    pub mode: Str,
    pub schema: Str,
    pub table: Str,
}

/// A string: one of a table of real values (which table depends on the field), or any text.
#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Str {
    Pick(u8),
    Raw(Text),
}

impl Str {
    fn get(&self, table: &[&str]) -> String {
        match self {
            Str::Pick(i) => pick(table, *i).to_string(),
            Str::Raw(Text(t)) => t.clone(),
        }
    }
}

/// A number: small (ids collide, times are close), or any `i64`.
#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Num {
    Few(u8),
    Raw(i64),
}

impl Num {
    /// A connection, thread or pid: 1…8.
    fn id(&self) -> i64 {
        match self {
            Num::Few(x) => i64::from(x % 8) + 1,
            Num::Raw(x) => *x,
        }
    }

    /// An instant: a few seconds after a real epoch-ms time, or (`Few(248…)`) a boundary.
    fn ms(&self) -> i64 {
        match self {
            Num::Few(x @ 248..) => pick(BOUNDARIES, *x),
            Num::Few(x) => 1_795_000_000_000 + i64::from(*x) * 250,
            Num::Raw(x) => *x,
        }
    }

    /// A timeout in ms (`innodb_lock_wait_timeout` · 1000), or (`Few(248…)`) a boundary.
    fn timeout(&self) -> i64 {
        match self {
            Num::Few(x @ 248..) => pick(BOUNDARIES, *x),
            Num::Few(x) => i64::from(*x) * 1000,
            Num::Raw(x) => *x,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub struct Inno {
    pub lock_id: Str,
    pub trx_id: Str,
    pub mode: Str,
    pub lock_type: Str,
    pub table: Str,
    pub index: Option<Str>,
    pub data: Option<Data>,
}

/// `lock_data`: as InnoDB prints it, or any bytes (a binary key prints as raw bytes).
#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Data {
    Pick(u8),
    Raw(Blob),
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub struct Trx {
    pub trx_id: Str,
    pub thread: Num,
    pub started_ms: Option<Num>,
    pub started: Option<Str>,
    pub wait_started_ms: Option<Num>,
    pub requested_lock: Option<Str>,
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub struct Pg {
    pub locktype: Str,
    pub pid: Num,
    pub mode: Str,
    pub granted: bool,
    pub waitstart_ms: Option<Num>,
    /// `classid`, `objid`, `objsubid`: small (0…3), the halves of a real key, or any.
    pub classid: Option<Num>,
    pub objid: Option<Num>,
    pub objsubid: Option<Num>,
    pub relation: Option<Str>,
    pub page: Option<Num>,
    pub tuple: Option<Num>,
    pub transactionid: Option<Str>,
    pub database: Option<Str>,
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub struct Conn {
    pub pid: Num,
    pub in_transaction: bool,
    pub statement: Statement,
    pub started: Option<Str>,
    pub xact_started: Option<Str>,
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub struct Held {
    pub thread: Num,
    pub name: Name,
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub struct Wait {
    pub thread: Num,
    pub statement: Statement,
    pub since_ms: Option<Num>,
}

/// A `GET_LOCK` name: a real one or any bytes (`METADATA_LOCK_INFO` gives bytes).
#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Name {
    Pick(u8),
    Raw(Blob),
}

impl Name {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Name::Pick(i) => pick(NAMES, *i).as_bytes().to_vec(),
            Name::Raw(Blob(b)) => b.clone(),
        }
    }
}

/// SQL text: a `GET_LOCK` call as a client builds it, or any text.
#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Statement {
    GetLock {
        prefix: u8,
        name: Name,
        quoting: Quoting,
        timeout: Timeout,
    },
    Pick(u8),
    Raw(Text),
}

#[derive(Debug, Clone, Copy, PartialEq, Arbitrary)]
pub enum Quoting {
    /// `'…'`, escaped as `mysql_real_escape_string` does (`\0 \n \r \\ \' \" \Z`).
    Client,
    /// `'…'`, quotes doubled, backslashes escaped.
    Doubled,
    /// `"…"`, `\"` and `\\` escaped.
    Double,
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Timeout {
    Int(i32),
    /// `x.5`.
    Half(i16),
}

impl Timeout {
    fn text(&self) -> (String, f64) {
        match self {
            Timeout::Int(t) => (t.to_string(), f64::from(*t)),
            Timeout::Half(t) => (format!("{t}.5"), format!("{t}.5").parse().expect("number")),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub struct Row {
    pub key: Name,
    pub owner: Option<Name>,
    pub until: Option<(Str, Option<Num>)>,
    pub expired: bool,
}

/// A row of Spring's `INT_LOCK` as read: `REGION`, `LOCK_KEY`, `CLIENT_ID`, `EXPIRED_AFTER` (text
/// and ms) and whether it has passed.
#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub struct SpringRow {
    pub region: Str,
    pub key: SpringKey,
    pub owner: Option<Str>,
    pub until: Option<(Str, Option<Num>)>,
    pub expired: bool,
}

/// A `LOCK_KEY`: the one Spring stores for a name (a configured one or not), or a key from a
/// table of UUIDs and other text (a custom `pathFor`, a hand-written row), or any text.
#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum SpringKey {
    Of(Str),
    Raw(Str),
}

impl SpringKey {
    fn get(&self) -> String {
        match self {
            SpringKey::Of(name) => spring_lock_key(&name.get(SPRING_NAMES)),
            SpringKey::Raw(key) => key.get(SPRING_KEYS),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Key {
    Big(i64),
    Pair(i32, i32),
    /// `pg_locks` columns.
    Columns(i64, i64, i64),
    /// Text for `AdvisoryKey::parse`.
    Text(Str),
}

/// An identifier path: `schema.table` parts quoted with backquotes, or any text.
#[derive(Debug, Clone, PartialEq, Arbitrary)]
pub enum Ident {
    Parts(Vec<Text>),
    Raw(Text),
}

/// Extreme instants and timeouts (`Few(248…)` picks `BOUNDARIES[x % 8]`).
pub const BOUNDARIES: &[i64] = &[
    i64::MAX,
    i64::MAX - 1_000,
    i64::MIN,
    -1,
    0,
    1 << 53,
    31_536_000_000_000,
    -(1 << 53),
];

pub const TRX_IDS: &[&str] = &["10", "11", "12", "13", "421", ""];
pub const LOCK_IDS: &[&str] = &[
    "10:5:3:2", "11:5:3:2", "12:5:3:2", "13:5:3:2", "10:5:3:3", "11:5", "12:5", "",
];
pub const INNO_MODES: &[&str] = &["X", "S", "X,GAP", "S,GAP", "IX", "IS", "X,REC_NOT_GAP", ""];
pub const INNO_TYPES: &[&str] = &["RECORD", "TABLE", "record"];
pub const TABLES: &[&str] = &[
    "`app`.`locks`",
    "`app`.`database_lock`",
    "`app`.`shedlock`",
    "`we``ird`.`t`",
    "app.locks",
    "",
];
pub const INDEXES: &[&str] = &["PRIMARY", "resource", "GEN_CLUST_INDEX", ""];
pub const DATA: &[&[u8]] = &[
    b"'orders'",
    b"'billing'",
    b"1",
    b"supremum pseudo-record",
    b"'it''s'",
    b"'a\\x41'",
    b"0x00ff10",
    b"\xff\xfe",
];
pub const PG_TYPES: &[&str] = &[
    "advisory",
    "transactionid",
    "tuple",
    "relation",
    "virtualxid",
    "",
];
pub const PG_MODES: &[&str] = &[
    "ExclusiveLock",
    "ShareLock",
    "AccessExclusiveLock",
    "RowShareLock",
    "ShareUpdateExclusiveLock",
    "",
];
pub const RELATIONS: &[&str] = &["locks", "public.locks", "shedlock", "a/b", ""];
pub const XIDS: &[&str] = &["900", "901", "902", "903", ""];
pub const DATABASES: &[&str] = &["app", "postgres", "a/1", ""];
pub const STAMPS: &[&str] = &[
    "2026-11-23 22:41:10.123+00",
    "2026-11-23 22:41:11",
    "2026-11-23 22:41:10.123",
    "",
];
pub const NAMES: &[&str] = &[
    "orders",
    "billing",
    "it's",
    "say \"hi\"",
    "a\\b",
    "a\\x41",
    "?",
    "zürich-🔒",
    "nul\0byte",
    "ctrl\u{1a}z",
    "",
];
pub const STATEMENTS: &[&str] = &[
    "SELECT GET_LOCK('orders', 10)",
    "select get_lock( \"it's\" ,-1)",
    "SELECT GET_LOCK(?, 10)",
    "SELECT GET_LOCK(CONCAT('a','b'), 1)",
    "SELECT RELEASE_LOCK('orders')",
    "SELECT pg_advisory_lock(42)",
    "SELECT pg_advisory_xact_lock(1, 2)",
    "SELECT my_get_lock('x', 1), GET_LOCK('y', 2)",
    "SELECT GET_LOCK('unterminated",
    "",
];
pub const SPRING_NAMES: &[&str] = &[
    "orders",
    "invoice/42",
    "a/b",
    "b",
    "2F1E0B7C-1D2E-4A5B-9C8D-0E1F2A3B4C5D",
    "12c500ed-0b78-3910-9fb4-6af0f246be87",
    "a\\x41",
    "zürich-🔒",
    "",
];
pub const SPRING_KEYS: &[&str] = &[
    "12c500ed-0b78-3910-9fb4-6af0f246be87",
    "12C500ED-0B78-3910-9FB4-6AF0F246BE87",
    "8d3f0a4e-5b7c-4f1a-9e2d-3c4b5a697887",
    "d41d8cd9-8f00-3204-a980-0998ecf8427e",
    "12c500ed-0b78-3910-9fb4-6af0f246be8",
    "orders",
    "a/b",
    "",
];
pub const REGIONS: &[&str] = &["DEFAULT", "eu/west", "x", "x/a", "a\\x41", ""];
pub const CLIENT_IDS: &[&str] = &[
    "8d3f0a4e-5b7c-4f1a-9e2d-3c4b5a697887",
    "billing-node-1",
    "",
    "  ",
];
pub const KEY_TEXTS: &[&str] = &["42", "-1", "(1,2)", "( -5 , 7 )", "(1,2", "+7", ""];

/// A name quoted as a string literal.
pub fn quote(name: &str, quoting: Quoting) -> String {
    let mut out = String::new();
    let q = if quoting == Quoting::Double {
        '"'
    } else {
        '\''
    };
    out.push(q);
    for c in name.chars() {
        match (quoting, c) {
            (_, '\\') => out.push_str("\\\\"),
            (Quoting::Client, '\0') => out.push_str("\\0"),
            (Quoting::Client, '\n') => out.push_str("\\n"),
            (Quoting::Client, '\r') => out.push_str("\\r"),
            (Quoting::Client, '\'') => out.push_str("\\'"),
            (Quoting::Client, '"') => out.push_str("\\\""),
            (Quoting::Client, '\u{1a}') => out.push_str("\\Z"),
            (Quoting::Doubled, '\'') => out.push_str("''"),
            (Quoting::Double, '"') => out.push_str("\\\""),
            (_, c) => out.push(c),
        }
    }
    out.push(q);
    out
}

const PREFIXES: &[&str] = &[
    "SELECT ",
    "select ",
    "/* app */ SELECT ",
    "DO ",
    "SELECT 1, ",
];

/// The statement's text, and the name and timeout a built `GET_LOCK` call must parse to.
fn statement(s: &Statement) -> (String, Option<(String, f64)>) {
    match s {
        Statement::GetLock {
            prefix,
            name,
            quoting,
            timeout,
        } => {
            // The process list shows the statement as text: a name that is not UTF-8 is shown
            // with U+FFFD.
            let name = String::from_utf8_lossy(&name.bytes()).into_owned();
            let (t, value) = timeout.text();
            let text = format!(
                "{}GET_LOCK({}, {t})",
                pick(PREFIXES, *prefix),
                quote(&name, *quoting)
            );
            (text, Some((name, value)))
        }
        Statement::Pick(i) => (pick(STATEMENTS, *i).to_string(), None),
        Statement::Raw(Text(t)) => (t.clone(), None),
    }
}

fn data(d: &Data) -> Vec<u8> {
    match d {
        Data::Pick(i) => pick(DATA, *i).to_vec(),
        Data::Raw(Blob(b)) => b.clone(),
    }
}

/// `classid`/`objid`/`objsubid`: 0…3 as `Few`, so real keys (and the odd `objsubid`) appear.
fn column(n: &Option<Num>) -> Option<i64> {
    n.as_ref().map(|n| match n {
        Num::Few(x) => i64::from(x % 4),
        Num::Raw(x) => *x,
    })
}

pub fn run(data: &[u8]) {
    if let Some(input) = crate::input::<Input>(data) {
        crate::show(&input);
        check(&input);
    }
}

/// What the input means as the decoders' arguments.
pub struct Rows {
    pub inno_locks: Vec<InnoLock>,
    pub inno_trxs: Vec<InnoTrx>,
    pub lock_wait_timeout_ms: Option<i64>,
    pub pg_rows: Vec<PgLockRow>,
    pub conns: HashMap<i64, ConnFacts>,
    pub held: Vec<UserLockHeld>,
    pub waits: Vec<UserLockWait>,
    pub table: String,
    pub table_rows: Vec<TableRow>,
    pub spring_names: Vec<String>,
    /// Spring rows: the region and the row (key, owner, expiry).
    pub spring_rows: Vec<(Clipped, TableRow)>,
    pub mdl_held: Vec<MetadataLockHeld>,
    pub mdl_waits: Vec<MetadataLockWait>,
    pub idle: BTreeSet<i64>,
}

/// `MDL_*` modes as MariaDB names them (MySQL's without the prefix), and none.
pub const MDL_MODES: &[&str] = &[
    "MDL_SHARED_READ",
    "MDL_SHARED_WRITE",
    "MDL_SHARED_UPGRADABLE",
    "MDL_EXCLUSIVE",
    "MDL_INTENTION_EXCLUSIVE",
    "SHARED_NO_READ_WRITE",
    "",
];

pub fn rows(input: &Input) -> Rows {
    let opt = |s: &Option<Str>, table: &[&str]| s.as_ref().map(|s| s.get(table));
    Rows {
        inno_locks: input
            .inno_locks
            .iter()
            .map(|l| InnoLock {
                lock_id: l.lock_id.get(LOCK_IDS),
                trx_id: l.trx_id.get(TRX_IDS),
                mode: l.mode.get(INNO_MODES),
                lock_type: l.lock_type.get(INNO_TYPES),
                table: l.table.get(TABLES),
                index: opt(&l.index, INDEXES),
                data: l.data.as_ref().map(data),
            })
            .collect(),
        inno_trxs: input
            .inno_trxs
            .iter()
            .map(|t| InnoTrx {
                trx_id: t.trx_id.get(TRX_IDS),
                thread: t.thread.id(),
                started_ms: t.started_ms.as_ref().map(Num::ms),
                started: opt(&t.started, STAMPS),
                wait_started_ms: t.wait_started_ms.as_ref().map(Num::ms),
                requested_lock: opt(&t.requested_lock, LOCK_IDS),
            })
            .collect(),
        lock_wait_timeout_ms: input.lock_wait_timeout_ms.as_ref().map(Num::timeout),
        pg_rows: input
            .pg_rows
            .iter()
            .map(|r| PgLockRow {
                locktype: r.locktype.get(PG_TYPES),
                pid: r.pid.id(),
                mode: r.mode.get(PG_MODES),
                granted: r.granted,
                waitstart_ms: r.waitstart_ms.as_ref().map(Num::ms),
                classid: column(&r.classid),
                objid: column(&r.objid),
                objsubid: column(&r.objsubid),
                relation: opt(&r.relation, RELATIONS),
                page: column(&r.page),
                tuple: column(&r.tuple),
                transactionid: opt(&r.transactionid, XIDS),
                database: opt(&r.database, DATABASES),
            })
            .collect(),
        conns: input
            .conns
            .iter()
            .map(|c| {
                (
                    c.pid.id(),
                    ConnFacts {
                        in_transaction: c.in_transaction,
                        statement: statement(&c.statement).0,
                        started: opt(&c.started, STAMPS),
                        xact_started: opt(&c.xact_started, STAMPS),
                    },
                )
            })
            .collect(),
        held: input
            .held
            .iter()
            .map(|h| UserLockHeld {
                thread: h.thread.id(),
                name: h.name.bytes(),
            })
            .collect(),
        waits: input
            .waits
            .iter()
            .map(|w| UserLockWait {
                thread: w.thread.id(),
                statement: statement(&w.statement).0,
                since_ms: w.since_ms.as_ref().map(Num::ms),
            })
            .collect(),
        table: input.table.get(&[
            "app.database_lock",
            "shedlock",
            "a/b",
            "",
            "public.int_lock",
        ]),
        table_rows: input
            .table_rows
            .iter()
            .map(|r| TableRow {
                key: Clipped::of(r.key.bytes()),
                owner: r.owner.as_ref().map(|o| Clipped::of(o.bytes())),
                until: r
                    .until
                    .as_ref()
                    .map(|(s, ms)| (s.get(STAMPS), ms.as_ref().map(Num::ms))),
                expired: r.expired,
            })
            .collect(),
        spring_names: input
            .spring_names
            .iter()
            .map(|n| n.get(SPRING_NAMES))
            .collect(),
        mdl_held: input
            .mdl_held
            .iter()
            .map(|h| MetadataLockHeld {
                connection: h.thread.id(),
                mode: h.mode.get(MDL_MODES),
                schema: h.schema.get(DATABASES),
                table: h.table.get(RELATIONS),
            })
            .collect(),
        mdl_waits: input
            .mdl_waits
            .iter()
            .map(|w| MetadataLockWait {
                connection: w.thread.id(),
                table: None,
                schema: Some(pick(DATABASES, w.thread.id() as u8).to_string()),
                statement: statement(&w.statement).0,
                since_ms: w.since_ms.as_ref().map(Num::ms),
                mode: None,
            })
            .collect(),
        idle: input
            .conns
            .iter()
            .map(|c| c.pid.id())
            .chain(input.mdl_held.iter().map(|h| h.thread.id()))
            .filter(|id| input.idle & (1 << id.rem_euclid(64)) != 0)
            .collect(),
        spring_rows: input
            .spring_rows
            .iter()
            .map(|r| {
                let row = TableRow {
                    key: Clipped::of(r.key.get().into_bytes()),
                    owner: r
                        .owner
                        .as_ref()
                        .map(|o| Clipped::of(o.get(CLIENT_IDS).into_bytes())),
                    until: r
                        .until
                        .as_ref()
                        .map(|(s, ms)| (s.get(STAMPS), ms.as_ref().map(Num::ms))),
                    expired: r.expired,
                };
                (Clipped::of(r.region.get(REGIONS).into_bytes()), row)
            })
            .collect(),
    }
}

/// Every decoder's locks, by decoder.
#[derive(Debug, Default)]
pub struct Decoded {
    pub innodb: Vec<DbLock>,
    pub pg_rows: Vec<DbLock>,
    pub advisory: Vec<DbLock>,
    pub get_lock: Vec<DbLock>,
    pub tables: Vec<DbLock>,
    pub spring: Vec<DbLock>,
}

pub fn check(input: &Input) -> Decoded {
    let r = rows(input);
    let relation = pg_relation_locks(&r.pg_rows, &r.conns, &r.idle);
    check_queues(&relation, &r.idle);
    let metadata = metadata_locks(&r.mdl_held, &r.mdl_waits, &r.idle);
    check_queues(&metadata, &r.idle);
    // Every waiting connection is in one queue, once.
    let queued: Vec<i64> = metadata
        .iter()
        .flat_map(|l| l.waiters.iter().filter_map(|w| w.connection))
        .collect();
    let distinct: BTreeSet<i64> = r.mdl_waits.iter().map(|w| w.connection).collect();
    assert_eq!(queued.len(), distinct.len(), "{metadata:#?}");
    assert_eq!(queued.into_iter().collect::<BTreeSet<_>>(), distinct);
    let out = Decoded {
        innodb: innodb_row_locks(&r.inno_locks, &r.inno_trxs, r.lock_wait_timeout_ms),
        pg_rows: pg_row_locks(&r.pg_rows, &r.conns),
        advisory: advisory_locks(&r.pg_rows, &r.conns),
        get_lock: get_lock_locks(&r.held, &r.waits),
        tables: r
            .table_rows
            .iter()
            .map(|row| table_row_lock(&r.table, row, input.expiring))
            .collect(),
        spring: {
            let names = SpringLockNames::new(r.spring_names.iter().map(String::as_str));
            r.spring_rows
                .iter()
                .map(|(region, row)| spring_lock(&r.table, region, row, &names))
                .collect()
        },
    };
    check_innodb(&out.innodb, r.lock_wait_timeout_ms);
    check_pg_rows(&out.pg_rows, &r.pg_rows);
    check_advisory(&out.advisory, &r.pg_rows);
    check_get_lock(&out.get_lock, &r);
    check_tables(&out.tables, &r, input.expiring);
    check_spring(&out.spring, &r);
    check_statements(input);
    check_keys(input);
    check_identifiers(input);
    check_carry(&out, input.open);
    out
}

/// What every decoder's locks share: paths, recipe, participants listed once.
fn common(locks: &[DbLock], recipe: &[DbRecipe], prefixes: &[&str]) {
    let mut paths = BTreeSet::new();
    for lock in locks {
        assert!(lock.path.starts_with('/'), "path {:?}", lock.path);
        assert!(
            prefixes.iter().any(|p| lock.path.starts_with(p)),
            "path {:?} not under {prefixes:?}",
            lock.path
        );
        assert!(recipe.contains(&lock.recipe), "{lock:?}");
        assert!(paths.insert(lock.path.clone()), "two locks {:?}", lock.path);
        for list in [&lock.holders, &lock.waiters] {
            let ids: BTreeSet<&str> = list.iter().map(|p| p.id.as_str()).collect();
            assert_eq!(ids.len(), list.len(), "a participant twice: {lock:#?}");
        }
    }
}

fn deadlines_after_start(lock: &DbLock) {
    for w in &lock.waiters {
        if let (Some(since), Some(deadline)) = (w.since_ms, w.deadline_ms) {
            assert!(deadline >= since, "deadline before start: {w:?}");
        }
    }
}

/// Waiters with a start are in start order, and come before those without.
fn sorted_by_since(lock: &DbLock, skip: usize) {
    let keys: Vec<i64> = lock
        .waiters
        .iter()
        .skip(skip)
        .map(|w| w.since_ms.unwrap_or(i64::MAX))
        .collect();
    assert!(
        keys.windows(2).all(|w| w[0] <= w[1]),
        "waiters out of order: {lock:#?}"
    );
}

fn holder_and_waiter(lock: &DbLock) -> Vec<&str> {
    let holders: BTreeSet<&str> = lock.holders.iter().map(|p| p.id.as_str()).collect();
    lock.waiters
        .iter()
        .map(|p| p.id.as_str())
        .filter(|id| holders.contains(id))
        .collect()
}

fn check_innodb(locks: &[DbLock], timeout_ms: Option<i64>) {
    common(locks, &[DbRecipe::RowLock], &["/rows/", "/tables-locked/"]);
    for lock in locks {
        assert!(holder_and_waiter(lock).is_empty(), "{lock:#?}");
        sorted_by_since(lock, 0);
        // `innodb_lock_wait_timeout` is at least 1 s.
        if timeout_ms.is_some_and(|t| t >= 0) {
            deadlines_after_start(lock);
        }
    }
}

fn check_pg_rows(locks: &[DbLock], rows: &[PgLockRow]) {
    common(locks, &[DbRecipe::RowLock], &["/rows/", "/transactions/"]);
    for lock in locks {
        // A row's first waiter may hold its tuple lock (and wait on the holder's transaction);
        // the rest wait on the tuple lock in start order.
        sorted_by_since(lock, usize::from(lock.path.starts_with("/rows/")));
        for id in holder_and_waiter(lock) {
            // pg_locks is one snapshot: a backend is both only when it owns a transaction
            // (granted) and waits (ungranted) for a row lock, as in a deadlock.
            let pid = lock
                .holders
                .iter()
                .find(|h| h.id == id)
                .and_then(|h| h.connection);
            let owns = rows
                .iter()
                .any(|r| Some(r.pid) == pid && r.granted && r.locktype == "transactionid");
            let waits = rows.iter().any(|r| Some(r.pid) == pid && !r.granted);
            assert!(owns && waits, "{id} holds and waits: {lock:#?}");
        }
    }
}

fn check_advisory(locks: &[DbLock], rows: &[PgLockRow]) {
    common(locks, &[DbRecipe::Advisory], &["/advisory/"]);
    for lock in locks {
        sorted_by_since(lock, 0);
        let mine: Vec<&PgLockRow> = rows
            .iter()
            .filter(|r| r.locktype == "advisory")
            .filter(|r| {
                let key = AdvisoryKey::from_pg_locks(
                    r.classid.unwrap_or(-1),
                    r.objid.unwrap_or(-1),
                    r.objsubid.unwrap_or(-1),
                );
                key.is_some_and(|k| advisory_path(r.database.as_deref(), k) == lock.path)
            })
            .collect();
        assert!(!mine.is_empty(), "no rows for {lock:#?}");
        for p in &lock.holders {
            assert!(mine
                .iter()
                .any(|r| r.granted && Some(r.pid) == p.connection));
        }
        for p in &lock.waiters {
            assert!(mine
                .iter()
                .any(|r| !r.granted && Some(r.pid) == p.connection));
        }
        // Both only when pg_locks lists the backend with a granted and an ungranted row for the
        // key (holding it shared, waiting to take it exclusively): checked by the two loops.
    }
}

fn check_get_lock(locks: &[DbLock], r: &Rows) {
    common(locks, &[DbRecipe::GetLock], &["/get_lock/"]);
    for lock in locks {
        assert!(
            holder_and_waiter(lock).is_empty(),
            "a connection waits for a GET_LOCK it holds: {lock:#?}"
        );
        sorted_by_since(lock, 0);
        deadlines_after_start(lock);
    }
    // Holders and waiters of one name are in one lock, under the name as displayed.
    let path_of = |name: &[u8]| format!("/get_lock/{}", display_bytes(name));
    for h in &r.held {
        let path = path_of(&h.name);
        let lock = locks
            .iter()
            .find(|l| l.path == path)
            .expect("holder's lock");
        assert!(lock.holders.iter().any(|p| p.connection == Some(h.thread)));
    }
    for w in &r.waits {
        if let Some((name, _)) = parse_get_lock_call(&w.statement) {
            let path = path_of(&name);
            let holds = r
                .held
                .iter()
                .any(|h| h.thread == w.thread && path_of(&h.name) == path);
            let lock = locks.iter().find(|l| l.path == path);
            assert!(
                lock.is_some_and(
                    |l| holds || l.waiters.iter().any(|p| p.connection == Some(w.thread))
                ),
                "waiter {w:?} not under {path:?}: {locks:#?}"
            );
        }
    }
}

fn check_tables(locks: &[DbLock], r: &Rows, expiring: bool) {
    for (lock, row) in locks.iter().zip(&r.table_rows) {
        assert_eq!(
            lock.path,
            format!("/tables/{}/{}", r.table, row.key.display())
        );
        let recipe = if expiring {
            DbRecipe::ExpiringLockTable
        } else {
            DbRecipe::LockTable
        };
        assert_eq!(lock.recipe, recipe);
        assert!(lock.waiters.is_empty());
        assert_eq!(
            lock.holders.is_empty(),
            expiring && row.expired,
            "{lock:#?}"
        );
        if let Some(h) = lock.holders.first() {
            let owner = row.owner.as_ref().map(Clipped::display).unwrap_or_default();
            assert_eq!(h.id, owner);
            assert_eq!(h.version, row.until.as_ref().map(|(t, _)| t.clone()));
        }
        assert_eq!(
            lock.expires_at_ms,
            row.until.as_ref().and_then(|(_, ms)| *ms)
        );
    }
}

/// Spring rows: the path names the region and the configured name the key is stored under
/// (the first such name), else the key, flagged `lock_name_hashed` exactly when it is a
/// version-3 UUID; reads back through `spring_lock_parts` (or is refused as ambiguous);
/// holders, versions, identities and flags as the row says; `spring_lock_key` of every name is
/// a lower-case UUID, a name-based one unless the name is a UUID, and idempotent.
fn check_spring(locks: &[DbLock], r: &Rows) {
    let names = SpringLockNames::new(r.spring_names.iter().map(String::as_str));
    for name in &r.spring_names {
        let key = spring_lock_key(name);
        assert!(
            is_uuid(&key) && key == key.to_ascii_lowercase(),
            "{name:?} → {key}"
        );
        assert_eq!(spring_lock_key(&key), key, "{name:?}");
        if !is_uuid(name) {
            assert_eq!(&key[14..15], "3", "{name:?} → {key}");
        }
        assert!(names.name_of(&key).is_some(), "{name:?}");
    }
    assert_eq!(locks.len(), r.spring_rows.len());
    for (lock, (region, row)) in locks.iter().zip(&r.spring_rows) {
        assert_eq!(lock.recipe, DbRecipe::SpringJdbcLock);
        assert!(lock.waiters.is_empty());
        // A key cut short (over 4 kB) is never a configured name's or a UUID.
        let key = (!row.key.is_cut())
            .then(|| String::from_utf8(row.key.head.clone()).ok())
            .flatten()
            .unwrap_or_default();
        let configured = r
            .spring_names
            .iter()
            .find(|n| !row.key.is_cut() && spring_lock_key(n) == key.to_ascii_lowercase());
        let leaf = match configured {
            Some(name) => display_bytes(name.as_bytes()),
            None => row.key.display(),
        };
        let prefix = format!("/tables/{}/{}/", r.table, region.display());
        assert_eq!(lock.path, format!("{prefix}{leaf}"), "{lock:#?}");
        let hashed = configured.is_none()
            && is_uuid(&key)
            && &key[14..15] == "3"
            && "89abAB".contains(&key[19..20]);
        let want_flags: Vec<&str> = [
            row.expired.then_some(FLAG_EXPIRED),
            hashed.then_some(FLAG_LOCK_NAME_HASHED),
            Some(FLAG_WAITERS_NOT_VISIBLE),
        ]
        .into_iter()
        .flatten()
        .collect();
        assert_eq!(lock.flags, want_flags, "{lock:#?}");
        assert_eq!(lock.holders.is_empty(), row.expired);
        if let Some(h) = lock.holders.first() {
            let owner = row.owner.as_ref().map(Clipped::display).unwrap_or_default();
            assert_eq!(h.id, owner);
            assert_eq!(h.identity, lockscope_model::clip::identity_text(&owner));
            assert_eq!(h.version, row.until.as_ref().map(|(t, _)| t.clone()));
            assert_eq!(h.connection, None);
        }
        assert_eq!(
            lock.expires_at_ms,
            row.until.as_ref().and_then(|(_, ms)| *ms)
        );
        // Back from the path: the region and key, unless another reading is as good.
        let rest = &lock.path[format!("/tables/{}/", r.table).len()..];
        let resolves = configured.is_some() || is_uuid(&leaf);
        let want = (
            region.display(),
            configured.map_or(leaf.clone(), |n| spring_lock_key(n)),
        );
        match spring_lock_parts(rest, &names) {
            Ok(parts) => {
                // The one reading found is this row's whenever this row's reading counts.
                if resolves && !region.is_empty() {
                    assert_eq!(parts, want, "{rest:?}");
                }
            }
            Err(why) => assert!(
                !resolves || region.is_empty() || why.contains("more than one"),
                "{rest:?}: {why}"
            ),
        }
    }
}

/// A table's lock queue: under `/table_locks/`, nobody both holds and waits, waiters in
/// wait-start order, flagged when an idle connection holds.
fn check_queues(locks: &[DbLock], idle: &BTreeSet<i64>) {
    common(locks, &[DbRecipe::TableLock], &["/table_locks/"]);
    for lock in locks {
        assert!(holder_and_waiter(lock).is_empty(), "holds and waits: {lock:#?}");
        sorted_by_since(lock, 0);
        assert!(!lock.waiters.is_empty(), "a queue without waiters: {lock:#?}");
        let idle_holder = lock
            .holders
            .iter()
            .any(|h| h.connection.is_some_and(|c| idle.contains(&c)));
        if idle_holder {
            assert!(
                lock.flags.iter().any(|f| f == "holder_idle_in_transaction"),
                "{lock:#?}"
            );
        }
    }
}

fn check_statements(input: &Input) {
    let all = input
        .statements
        .iter()
        .chain(input.waits.iter().map(|w| &w.statement))
        .chain(input.conns.iter().map(|c| &c.statement));
    for s in all {
        let (text, want) = statement(s);
        let kind = statement_kind(&text);
        assert!(["ddl", "dml", "read", "other"].contains(&kind));
        for (schema, table) in statement_tables(&text) {
            assert!(!table.is_empty() && !table.starts_with('('), "{text:?}: {table:?}");
            assert!(schema.is_none_or(|s| !s.contains('.')), "{text:?}");
        }
        let got = parse_get_lock_call(&text);
        if let Some((name, timeout)) = want {
            assert_eq!(
                got,
                Some((name.into_bytes(), Some(timeout))),
                "statement {text:?} parsed wrong"
            );
        }
    }
}

fn check_keys(input: &Input) {
    for k in &input.keys {
        let key = match k {
            Key::Big(x) => Some(AdvisoryKey::Big(*x)),
            Key::Pair(a, b) => Some(AdvisoryKey::Pair(*a, *b)),
            Key::Columns(c, o, s) => {
                let key = AdvisoryKey::from_pg_locks(*c, *o, *s);
                if let Some(key) = key {
                    assert_eq!(key.pg_locks_columns(), (*c, *o, *s), "{key:?}");
                }
                key
            }
            Key::Text(t) => AdvisoryKey::parse(&t.get(KEY_TEXTS)),
        };
        if let Some(key) = key {
            let (c, o, s) = key.pg_locks_columns();
            assert_eq!(AdvisoryKey::from_pg_locks(c, o, s), Some(key));
            assert_eq!(AdvisoryKey::parse(&key.display()), Some(key));
            assert!(!advisory_path(None, key).contains("//"));
        }
    }
}

fn check_identifiers(input: &Input) {
    for ident in &input.identifiers {
        match ident {
            Ident::Parts(parts) => {
                let quoted: Vec<String> = parts
                    .iter()
                    .map(|Text(p)| format!("`{}`", p.replace('`', "``")))
                    .collect();
                let plain: Vec<&str> = parts.iter().map(|Text(p)| p.as_str()).collect();
                assert_eq!(unquote_identifier_path(&quoted.join(".")), plain.join("."));
            }
            Ident::Raw(Text(t)) => {
                unquote_identifier_path(t);
            }
        }
    }
}

/// Whether `carry_row_locks` is told a holder still runs: a bit of `open` chosen by its id and
/// version.
fn is_open(open: u64, h: &DbParticipant) -> bool {
    let mut x: u64 = 0;
    for b in h.id.bytes().chain(h.version.iter().flat_map(|v| v.bytes())) {
        x = x.wrapping_mul(31).wrapping_add(u64::from(b));
    }
    open >> (x % 64) & 1 == 1
}

fn check_carry(out: &Decoded, open: u64) {
    // The last poll's locks of one database, and this poll's (another decoder's, so some row
    // paths are listed again, or none).
    let none = Vec::new();
    let cases = [
        (&out.innodb, &out.get_lock),
        (&out.innodb, &none),
        (&out.pg_rows, &out.advisory),
        (&out.pg_rows, &out.innodb),
        (&out.advisory, &none),
    ];
    for (previous, before) in cases {
        let mut current = before.clone();
        carry_row_locks(previous, &mut current, |h| is_open(open, h));
        assert_eq!(
            &current[..before.len()],
            &before[..],
            "listed locks changed"
        );
        let mut listed: BTreeSet<&str> = before.iter().map(|l| l.path.as_str()).collect();
        for added in &current[before.len()..] {
            assert!(added.waiters.is_empty(), "carried with waiters: {added:#?}");
            assert_eq!(added.recipe, DbRecipe::RowLock);
            assert!(
                listed.insert(added.path.as_str()),
                "listed twice: {added:#?}"
            );
            assert!(!added.holders.is_empty());
            assert!(added.holders.iter().all(|h| is_open(open, h)));
            let was = previous
                .iter()
                .find(|l| l.path == added.path)
                .expect("carried a lock it was not given");
            assert!(added.holders.iter().all(|h| was.holders.contains(h)));
            let unconfirmed = added
                .flags
                .iter()
                .filter(|f| f.as_str() == FLAG_HOLDER_UNCONFIRMED)
                .count();
            assert_eq!(unconfirmed, 1, "{added:#?}");
        }
    }
}
