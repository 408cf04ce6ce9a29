//! The seed corpus: real layouts from `shared/LOCK_LAYOUTS.md`, written as the bytes each target
//! reads them from, and the tests that keep `fuzz/corpus/` in step with them.
//!
//! `arbitrary` has no encoder, so [`Encode`] writes each input type the way `arbitrary` (and
//! [`Blob`]) read it: integers little-endian, `bool` one byte, an enum's variant `i` of `n` as
//! the `u32` `ceil(i·2³²/n)`, `Option` a flag byte then the value, `Vec` a `1` before each
//! element and a `0` after the last. Every seed is decoded back and compared, so a change of an
//! input type that breaks the seeds fails here.
//!
//! `LOCKSCOPE_FUZZ_WRITE_SEEDS=1 cargo test --manifest-path fuzz/Cargo.toml` (or
//! `scripts/fuzz --write-seeds`) rewrites the files; without it the test checks them.

use std::path::PathBuf;

use crate::db;
use crate::etcd as ed;
use crate::redis_decode::{
    self as rd, Clock, Hint, Item, Name, Pttl, Read, Registry, Score, Value,
};
use crate::redis_redlock::{self as rl, Master, Token};
use crate::rules::{self, Lock, Session};
use crate::zk::{self, Meta, Op, Owner, Place, Prefix, Target};
use crate::{Blob, Text};

trait Encode {
    fn encode(&self, out: &mut Vec<u8>);
}

fn variant(out: &mut Vec<u8>, i: u64, n: u64) {
    let x = (i << 32).div_ceil(n);
    out.extend_from_slice(&(x as u32).to_le_bytes());
}

macro_rules! le {
    ($($t:ty),*) => {$(
        impl Encode for $t {
            fn encode(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
le!(u8, u16, u32, u64, i32, i64);

impl Encode for f64 {
    fn encode(&self, out: &mut Vec<u8>) {
        self.to_bits().encode(out);
    }
}

impl Encode for bool {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
}

impl<T: Encode> Encode for Option<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                v.encode(out);
            }
        }
    }
}

impl<T: Encode> Encode for Vec<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        for v in self {
            out.push(1);
            v.encode(out);
        }
        out.push(0);
    }
}

impl<A: Encode, B: Encode> Encode for (A, B) {
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out);
        self.1.encode(out);
    }
}

impl Encode for Blob {
    fn encode(&self, out: &mut Vec<u8>) {
        if self.0.len() < 0xFF {
            out.push(self.0.len() as u8);
        } else {
            out.push(0xFF);
            u16::try_from(self.0.len())
                .expect("blob too long")
                .encode(out);
        }
        out.extend_from_slice(&self.0);
    }
}

impl Encode for Text {
    fn encode(&self, out: &mut Vec<u8>) {
        Blob(self.0.as_bytes().to_vec()).encode(out);
    }
}

// redis_decode

impl Encode for rd::Input {
    fn encode(&self, out: &mut Vec<u8>) {
        self.key.encode(out);
        self.read.encode(out);
        self.fair_queue.encode(out);
        self.fair_timeouts.encode(out);
        self.fencing_counter.encode(out);
        self.permit_timeouts.encode(out);
        self.signal_list.encode(out);
        self.hint.encode(out);
        self.spring_registries.encode(out);
        self.now.encode(out);
    }
}

impl Encode for Registry {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Registry::Known(i) => (variant(out, 0, 2), i.encode(out)),
            Registry::Raw(b) => (variant(out, 1, 2), b.encode(out)),
        };
    }
}

impl Encode for Name {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Name::Known(i) => (variant(out, 0, 2), i.encode(out)),
            Name::Raw(b) => (variant(out, 1, 2), b.encode(out)),
        };
    }
}

impl Encode for Item {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Item::Known(i) => (variant(out, 0, 2), i.encode(out)),
            Item::Raw(b) => (variant(out, 1, 2), b.encode(out)),
        };
    }
}

impl Encode for Read {
    fn encode(&self, out: &mut Vec<u8>) {
        self.value.encode(out);
        self.pttl.encode(out);
    }
}

impl Encode for Value {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Value::Missing => variant(out, 0, 6),
            Value::String(v) => (variant(out, 1, 6), v.encode(out)).1,
            Value::Hash(v) => (variant(out, 2, 6), v.encode(out)).1,
            Value::List(v) => (variant(out, 3, 6), v.encode(out)).1,
            Value::ZSet(v) => (variant(out, 4, 6), v.encode(out)).1,
            Value::Other(v) => (variant(out, 5, 6), v.encode(out)).1,
        }
    }
}

impl Encode for Score {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Score::FromNow(d) => (variant(out, 0, 2), d.encode(out)),
            Score::Raw(v) => (variant(out, 1, 2), v.encode(out)),
        };
    }
}

impl Encode for Pttl {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Pttl::Persistent => variant(out, 0, 4),
            Pttl::Gone => variant(out, 1, 4),
            Pttl::Ms(v) => (variant(out, 2, 4), v.encode(out)).1,
            Pttl::Raw(v) => (variant(out, 3, 4), v.encode(out)).1,
        }
    }
}

impl Encode for Hint {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Hint::None => variant(out, 0, 4),
            Hint::Semaphore(p) => (variant(out, 1, 4), p.encode(out)).1,
            Hint::Latch => variant(out, 2, 4),
            Hint::PythonRedisLock => variant(out, 3, 4),
        }
    }
}

impl Encode for Clock {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Clock::Around(d) => (variant(out, 0, 2), d.encode(out)),
            Clock::Raw(v) => (variant(out, 1, 2), v.encode(out)),
        };
    }
}

// redis_redlock

impl Encode for rl::Input {
    fn encode(&self, out: &mut Vec<u8>) {
        self.masters.encode(out);
    }
}

impl Encode for Master {
    fn encode(&self, out: &mut Vec<u8>) {
        self.name.encode(out);
        self.holder.encode(out);
    }
}

impl Encode for Token {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Token::Few(i) => (variant(out, 0, 2), i.encode(out)),
            Token::Raw(t) => (variant(out, 1, 2), t.encode(out)),
        };
    }
}

// zk_tree, zk_incremental

impl Encode for zk::Input {
    fn encode(&self, out: &mut Vec<u8>) {
        self.ops.encode(out);
        self.max_leases.encode(out);
    }
}

impl Encode for Op {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Op::Upsert { at, meta } => {
                variant(out, 0, 2);
                at.encode(out);
                meta.encode(out);
            }
            Op::Remove(t) => (variant(out, 1, 2), t.encode(out)).1,
        }
    }
}

impl Encode for Place {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Place::Child { parent, name } => {
                variant(out, 0, 3);
                parent.encode(out);
                name.encode(out);
            }
            Place::KazooLockOf(t) => (variant(out, 1, 3), t.encode(out)).1,
            Place::Path(t) => (variant(out, 2, 3), t.encode(out)).1,
        }
    }
}

impl Encode for Target {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Target::Root => variant(out, 0, 3),
            Target::Earlier(i) => (variant(out, 1, 3), i.encode(out)).1,
            Target::Path(t) => (variant(out, 2, 3), t.encode(out)).1,
        }
    }
}

impl Encode for zk::Name {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            zk::Name::Word(w) => (variant(out, 0, 3), w.encode(out)).1,
            zk::Name::Sequential { prefix, seq } => {
                variant(out, 1, 3);
                prefix.encode(out);
                seq.encode(out);
            }
            zk::Name::Raw(t) => (variant(out, 2, 3), t.encode(out)).1,
        }
    }
}

impl Encode for Prefix {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Prefix::Word(w) => (variant(out, 0, 4), w.encode(out)).1,
            Prefix::Curator { uuid, word } => {
                variant(out, 1, 4);
                uuid.encode(out);
                word.encode(out);
            }
            Prefix::Kazoo { uuid, read } => {
                variant(out, 2, 4);
                uuid.encode(out);
                read.encode(out);
            }
            Prefix::Raw(t) => (variant(out, 3, 4), t.encode(out)).1,
        }
    }
}

impl Encode for Meta {
    fn encode(&self, out: &mut Vec<u8>) {
        self.ctime.encode(out);
        self.owner.encode(out);
        self.version.encode(out);
        self.data_len.encode(out);
        self.data.encode(out);
    }
}

impl Encode for zk::Data {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            zk::Data::None => variant(out, 0, 6),
            zk::Data::Number(n) => (variant(out, 1, 6), n.encode(out)).1,
            zk::Data::Lease {
                version,
                holder,
                end,
            } => {
                variant(out, 2, 6);
                version.encode(out);
                holder.encode(out);
                end.encode(out);
            }
            zk::Data::Identity(i) => (variant(out, 3, 6), i.encode(out)).1,
            zk::Data::Bytes(b) => {
                variant(out, 4, 6);
                out.extend_from_slice(b);
            }
            zk::Data::Until(ms) => (variant(out, 5, 6), ms.encode(out)).1,
        }
    }
}

impl Encode for Owner {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Owner::Persistent => variant(out, 0, 3),
            Owner::Session(s) => (variant(out, 1, 3), s.encode(out)).1,
            Owner::Raw(v) => (variant(out, 2, 3), v.encode(out)).1,
        }
    }
}

// etcd_decode

impl Encode for ed::Input {
    fn encode(&self, out: &mut Vec<u8>) {
        self.kvs.encode(out);
        self.probe.encode(out);
        self.ops.encode(out);
    }
}

impl Encode for ed::Kv {
    fn encode(&self, out: &mut Vec<u8>) {
        self.key.encode(out);
        self.value.encode(out);
        self.create_revision.encode(out);
        self.mod_revision.encode(out);
        self.version.encode(out);
        self.lease.encode(out);
    }
}

impl Encode for ed::Key {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            ed::Key::Queued(i) => (variant(out, 0, 5), i.encode(out)).1,
            ed::Key::QueuedRaw(b) => (variant(out, 1, 5), b.encode(out)).1,
            ed::Key::QueuedOther { name, lease } => {
                variant(out, 2, 5);
                name.encode(out);
                lease.encode(out);
            }
            ed::Key::Word(i) => (variant(out, 3, 5), i.encode(out)).1,
            ed::Key::Raw(b) => (variant(out, 4, 5), b.encode(out)).1,
        }
    }
}

impl Encode for ed::Lease {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            ed::Lease::None => variant(out, 0, 3),
            ed::Lease::Few(i) => (variant(out, 1, 3), i.encode(out)).1,
            ed::Lease::Raw(v) => (variant(out, 2, 3), v.encode(out)).1,
        }
    }
}

impl Encode for ed::Rev {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            ed::Rev::Few(v) => (variant(out, 0, 2), v.encode(out)).1,
            ed::Rev::Raw(v) => (variant(out, 1, 2), v.encode(out)).1,
        }
    }
}

impl Encode for ed::Value {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            ed::Value::Empty => variant(out, 0, 3),
            ed::Value::Known(i) => (variant(out, 1, 3), i.encode(out)).1,
            ed::Value::Raw(b) => (variant(out, 2, 3), b.encode(out)).1,
        }
    }
}

impl Encode for ed::Op {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            ed::Op::Put(kv) => (variant(out, 0, 2), kv.encode(out)).1,
            ed::Op::Delete(i) => (variant(out, 1, 2), i.encode(out)).1,
        }
    }
}

// db_decode

impl Encode for i16 {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

impl Encode for db::Input {
    fn encode(&self, out: &mut Vec<u8>) {
        self.inno_locks.encode(out);
        self.inno_trxs.encode(out);
        self.lock_wait_timeout_ms.encode(out);
        self.pg_rows.encode(out);
        self.conns.encode(out);
        self.held.encode(out);
        self.waits.encode(out);
        self.table.encode(out);
        self.table_rows.encode(out);
        self.expiring.encode(out);
        self.statements.encode(out);
        self.keys.encode(out);
        self.identifiers.encode(out);
        self.open.encode(out);
        self.spring_names.encode(out);
        self.spring_rows.encode(out);
        self.mdl_held.encode(out);
        self.mdl_waits.encode(out);
        self.idle.encode(out);
    }
}

impl Encode for db::MdlHeld {
    fn encode(&self, out: &mut Vec<u8>) {
        self.thread.encode(out);
        self.mode.encode(out);
        self.schema.encode(out);
        self.table.encode(out);
    }
}

impl Encode for db::SpringRow {
    fn encode(&self, out: &mut Vec<u8>) {
        self.region.encode(out);
        self.key.encode(out);
        self.owner.encode(out);
        self.until.encode(out);
        self.expired.encode(out);
    }
}

impl Encode for db::SpringKey {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            db::SpringKey::Of(name) => (variant(out, 0, 2), name.encode(out)).1,
            db::SpringKey::Raw(key) => (variant(out, 1, 2), key.encode(out)).1,
        }
    }
}

impl Encode for db::Str {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            db::Str::Pick(i) => (variant(out, 0, 2), i.encode(out)).1,
            db::Str::Raw(t) => (variant(out, 1, 2), t.encode(out)).1,
        }
    }
}

impl Encode for db::Num {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            db::Num::Few(x) => (variant(out, 0, 2), x.encode(out)).1,
            db::Num::Raw(x) => (variant(out, 1, 2), x.encode(out)).1,
        }
    }
}

impl Encode for db::Inno {
    fn encode(&self, out: &mut Vec<u8>) {
        self.lock_id.encode(out);
        self.trx_id.encode(out);
        self.mode.encode(out);
        self.lock_type.encode(out);
        self.table.encode(out);
        self.index.encode(out);
        self.data.encode(out);
    }
}

impl Encode for db::Data {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            db::Data::Pick(i) => (variant(out, 0, 2), i.encode(out)).1,
            db::Data::Raw(b) => (variant(out, 1, 2), b.encode(out)).1,
        }
    }
}

impl Encode for db::Trx {
    fn encode(&self, out: &mut Vec<u8>) {
        self.trx_id.encode(out);
        self.thread.encode(out);
        self.started_ms.encode(out);
        self.started.encode(out);
        self.wait_started_ms.encode(out);
        self.requested_lock.encode(out);
    }
}

impl Encode for db::Pg {
    fn encode(&self, out: &mut Vec<u8>) {
        self.locktype.encode(out);
        self.pid.encode(out);
        self.mode.encode(out);
        self.granted.encode(out);
        self.waitstart_ms.encode(out);
        self.classid.encode(out);
        self.objid.encode(out);
        self.objsubid.encode(out);
        self.relation.encode(out);
        self.page.encode(out);
        self.tuple.encode(out);
        self.transactionid.encode(out);
        self.database.encode(out);
    }
}

impl Encode for db::Conn {
    fn encode(&self, out: &mut Vec<u8>) {
        self.pid.encode(out);
        self.in_transaction.encode(out);
        self.statement.encode(out);
        self.started.encode(out);
        self.xact_started.encode(out);
    }
}

impl Encode for db::Held {
    fn encode(&self, out: &mut Vec<u8>) {
        self.thread.encode(out);
        self.name.encode(out);
    }
}

impl Encode for db::Wait {
    fn encode(&self, out: &mut Vec<u8>) {
        self.thread.encode(out);
        self.statement.encode(out);
        self.since_ms.encode(out);
    }
}

impl Encode for db::Name {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            db::Name::Pick(i) => (variant(out, 0, 2), i.encode(out)).1,
            db::Name::Raw(b) => (variant(out, 1, 2), b.encode(out)).1,
        }
    }
}

impl Encode for db::Statement {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            db::Statement::GetLock {
                prefix,
                name,
                quoting,
                timeout,
            } => {
                variant(out, 0, 3);
                prefix.encode(out);
                name.encode(out);
                let q = match quoting {
                    db::Quoting::Client => 0,
                    db::Quoting::Doubled => 1,
                    db::Quoting::Double => 2,
                };
                variant(out, q, 3);
                match timeout {
                    db::Timeout::Int(t) => (variant(out, 0, 2), t.encode(out)).1,
                    db::Timeout::Half(t) => (variant(out, 1, 2), t.encode(out)).1,
                }
            }
            db::Statement::Pick(i) => (variant(out, 1, 3), i.encode(out)).1,
            db::Statement::Raw(t) => (variant(out, 2, 3), t.encode(out)).1,
        }
    }
}

impl Encode for db::Row {
    fn encode(&self, out: &mut Vec<u8>) {
        self.key.encode(out);
        self.owner.encode(out);
        self.until.encode(out);
        self.expired.encode(out);
    }
}

impl Encode for db::Key {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            db::Key::Big(k) => (variant(out, 0, 4), k.encode(out)).1,
            db::Key::Pair(a, b) => (variant(out, 1, 4), a.encode(out), b.encode(out)).2,
            db::Key::Columns(c, o, s) => {
                variant(out, 2, 4);
                c.encode(out);
                o.encode(out);
                s.encode(out);
            }
            db::Key::Text(t) => (variant(out, 3, 4), t.encode(out)).1,
        }
    }
}

impl Encode for db::Ident {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            db::Ident::Parts(p) => (variant(out, 0, 2), p.encode(out)).1,
            db::Ident::Raw(t) => (variant(out, 1, 2), t.encode(out)).1,
        }
    }
}

// rules

impl Encode for rules::Input {
    fn encode(&self, out: &mut Vec<u8>) {
        self.sessions.encode(out);
        self.lock.encode(out);
        self.now.encode(out);
        self.stale_hold.encode(out);
    }
}

impl Encode for Session {
    fn encode(&self, out: &mut Vec<u8>) {
        self.source.encode(out);
        self.session.encode(out);
        self.holds.encode(out);
        self.waits.encode(out);
    }
}

impl Encode for Lock {
    fn encode(&self, out: &mut Vec<u8>) {
        self.zookeeper.encode(out);
        self.recipe.encode(out);
        self.holders.encode(out);
        self.waiters.encode(out);
        self.changed.encode(out);
        self.deadline.encode(out);
        self.lease.encode(out);
        self.expires_at.encode(out);
        self.no_expiry.encode(out);
        self.usual_hold.encode(out);
    }
}

// The seeds.

fn raw(bytes: &[u8]) -> Item {
    Item::Raw(Blob(bytes.to_vec()))
}

fn key(bytes: &[u8]) -> Name {
    Name::Raw(Blob(bytes.to_vec()))
}

fn string(value: Item, pttl: Pttl) -> Read {
    Read {
        value: Value::String(value),
        pttl,
    }
}

fn redis(key: Name, read: Read) -> rd::Input {
    rd::Input {
        key,
        read,
        fair_queue: None,
        fair_timeouts: None,
        fencing_counter: None,
        permit_timeouts: None,
        signal_list: None,
        hint: Hint::None,
        spring_registries: Vec::new(),
        now: Clock::Around(0),
    }
}

fn registries(keys: &[&[u8]]) -> Vec<Registry> {
    keys.iter()
        .map(|k| Registry::Raw(Blob(k.to_vec())))
        .collect()
}

fn redis_seeds() -> Vec<(&'static str, rd::Input)> {
    let redisson_hash = Read {
        value: Value::Hash(vec![(
            raw(b"8a1f3c2e-5b7d-4e6f-9a0b-1c2d3e4f5a6b:52"),
            raw(b"3"),
        )]),
        pttl: Pttl::Ms(28_500),
    };
    let queue = Read {
        value: Value::List(vec![raw(b"u2:7"), raw(b"u3:9"), raw(b"gone:1")]),
        pttl: Pttl::Persistent,
    };
    let timeouts = Read {
        value: Value::ZSet(vec![
            (raw(b"gone:1"), Score::FromNow(-1)),
            (raw(b"u2:7"), Score::FromNow(5_000)),
            (raw(b"u3:9"), Score::FromNow(10_000)),
        ]),
        pttl: Pttl::Persistent,
    };
    vec![
        (
            "token-lock",
            redis(
                key(b"lock:orders"),
                string(raw(b"4f1c-token"), Pttl::Ms(29_000)),
            ),
        ),
        (
            "redisson-lock",
            redis(key(b"orders"), redisson_hash.clone()),
        ),
        (
            "redisson-fair-lock",
            rd::Input {
                fair_queue: Some(queue.clone()),
                fair_timeouts: Some(timeouts.clone()),
                ..redis(
                    key(b"lock:{order}"),
                    Read {
                        value: Value::Hash(vec![(raw(b"u1:5"), raw(b"1"))]),
                        pttl: Pttl::Ms(30_000),
                    },
                )
            },
        ),
        (
            "redisson-fair-leftover-queue",
            rd::Input {
                fair_queue: Some(queue),
                fair_timeouts: Some(timeouts),
                ..redis(
                    key(b"fair"),
                    Read {
                        value: Value::Missing,
                        pttl: Pttl::Gone,
                    },
                )
            },
        ),
        (
            "redisson-fenced-lock",
            rd::Input {
                fencing_counter: Some(string(raw(b"17"), Pttl::Persistent)),
                ..redis(key(b"pay"), redisson_hash)
            },
        ),
        (
            "redisson-rw-write",
            redis(
                key(b"doc"),
                Read {
                    value: Value::Hash(vec![
                        (raw(b"mode"), raw(b"write")),
                        (raw(b"u1:10:write"), raw(b"1")),
                        (raw(b"u1:10"), raw(b"1")),
                    ]),
                    pttl: Pttl::Ms(30_000),
                },
            ),
        ),
        (
            "redisson-permit-semaphore",
            rd::Input {
                permit_timeouts: Some(Read {
                    value: Value::ZSet(vec![
                        (
                            raw(
                                b"\xa5\x80\xcf\x1e\x6d\xbc\x2b\x4a\x99\xf8\x37\xd6\x65\x04\x93\x72",
                            ),
                            Score::FromNow(9_000),
                        ),
                        (raw(b"p-old"), Score::FromNow(-1)),
                    ]),
                    pttl: Pttl::Persistent,
                }),
                hint: Hint::Semaphore(5),
                ..redis(key(b"permits"), string(raw(b"1"), Pttl::Persistent))
            },
        ),
        (
            "python-redis-lock-id",
            redis(
                key(b"lock:report"),
                string(raw(b"q1Jw0N3bO4m7kz+Z/fQ2aXc9"), Pttl::Persistent),
            ),
        ),
        (
            "python-redis-lock-signal",
            rd::Input {
                signal_list: Some(Read {
                    value: Value::List(vec![raw(b"1")]),
                    pttl: Pttl::Ms(900),
                }),
                ..redis(
                    key(b"lock:report"),
                    string(raw(b"custom-id"), Pttl::Persistent),
                )
            },
        ),
        (
            "shedlock",
            redis(
                key(b"job-lock:prod:nightly"),
                string(
                    raw(b"ADDED:2026-11-22T12:00:00.000Z@batch-host-3:6f1d"),
                    Pttl::Ms(600_000),
                ),
            ),
        ),
        (
            "setnx-deadline",
            redis(
                key(b"legacy"),
                string(raw(b"1794999990000"), Pttl::Persistent),
            ),
        ),
        (
            "redisson-latch",
            rd::Input {
                hint: Hint::Latch,
                ..redis(key(b"latch"), string(raw(b"3"), Pttl::Persistent))
            },
        ),
        (
            "binary-token",
            redis(key(b"bin\xff"), string(raw(b"\xffa\x00"), Pttl::Raw(1_000))),
        ),
        (
            // redis-semaphore 5.8.0 Semaphore(limit 2): two holders, one stale (lockTimeout
            // 10 s estimated from the PTTL the newest write set).
            "redis-semaphore",
            rd::Input {
                hint: Hint::Semaphore(2),
                ..redis(
                    key(b"semaphore:pool"),
                    Read {
                        value: Value::ZSet(vec![
                            (
                                raw(b"0b6f6d1e-9c1a-4d8e-a7a5-3f1f5e0d2c11"),
                                Score::FromNow(-12_000),
                            ),
                            (
                                raw(b"5e1c2f0a-1b2c-4d3e-8f4a-5b6c7d8e9f00"),
                                Score::FromNow(-2_000),
                            ),
                        ]),
                        pttl: Pttl::Ms(8_000),
                    },
                )
            },
        ),
        (
            // MultiSemaphore(permits 3): `<id>_0` … `<id>_2`.
            "redis-multi-semaphore",
            redis(
                key(b"semaphore:big"),
                Read {
                    value: Value::ZSet(vec![
                        (raw(b"4f1e_0"), Score::FromNow(-1_000)),
                        (raw(b"4f1e_1"), Score::FromNow(-1_000)),
                        (raw(b"4f1e_2"), Score::FromNow(-1_000)),
                    ]),
                    pttl: Pttl::Ms(9_000),
                },
            ),
        ),
        (
            // Spring Integration RedisLockRegistry("orders"): `orders:job-7` holding the
            // registry's client id, PX 60 s less a second.
            "spring-redis-lock",
            rd::Input {
                spring_registries: registries(&[b"orders"]),
                ..redis(
                    key(b"orders:job-7"),
                    string(
                        raw(b"0b6f6d1e-9c1a-4d8e-a7a5-3f1f5e0d2c11"),
                        Pttl::Ms(59_000),
                    ),
                )
            },
        ),
        (
            // Registries `a` and `a:b` both fit `a:b:c`: the longer is the one shown.
            "spring-overlapping-registries",
            rd::Input {
                spring_registries: registries(&[b"a", b"a:b"]),
                ..redis(
                    key(b"a:b:c"),
                    string(
                        raw(b"5e1c2f0a-1b2c-4d3e-8f4a-5b6c7d8e9f00"),
                        Pttl::Ms(60_000),
                    ),
                )
            },
        ),
        (
            // The same layout under a registry key nobody configured: a token lock.
            "spring-unconfigured",
            rd::Input {
                spring_registries: registries(&[b"orders"]),
                ..redis(
                    key(b"billing:job-7"),
                    string(
                        raw(b"0b6f6d1e-9c1a-4d8e-a7a5-3f1f5e0d2c11"),
                        Pttl::Ms(59_000),
                    ),
                )
            },
        ),
    ]
}

/// Inputs of the findings listed in [`crate::known`], fixed since: regression seeds.
fn redis_findings() -> Vec<(&'static str, rd::Input)> {
    vec![
        (
            "finding-1-display-ambiguous",
            redis(
                key(b"lock:\\x41"),
                string(raw(b"tok\\x+f"), Pttl::Ms(30_000)),
            ),
        ),
        (
            "finding-2-companion-of-companion",
            redis(
                key(b"redisson_lock_queue:{x}"),
                string(raw(b"t"), Pttl::Ms(30_000)),
            ),
        ),
        (
            "finding-3-epoch-overflow",
            redis(
                key(b"lock:orders"),
                string(raw(b"-9223372036854775808"), Pttl::Persistent),
            ),
        ),
    ]
}

fn redlock_seeds() -> Vec<(&'static str, rl::Input)> {
    let m = |name: &str, holder: Option<u8>| Master {
        name: Token::Raw(Text(name.into())),
        holder: holder.map(|h| (Token::Few(h), Some(1_000))),
    };
    vec![
        (
            "majority",
            rl::Input {
                masters: vec![
                    m("a:6379", Some(1)),
                    m("b:6379", Some(1)),
                    m("c:6379", None),
                ],
            },
        ),
        (
            "split",
            rl::Input {
                masters: vec![
                    m("a:6379", Some(1)),
                    m("b:6379", Some(2)),
                    m("c:6379", None),
                ],
            },
        ),
    ]
}

fn meta(ctime: i64, owner: Owner) -> Meta {
    Meta {
        ctime,
        owner,
        version: 0,
        data_len: 0,
        data: zk::Data::None,
    }
}

fn create(parent: Target, name: zk::Name, owner: Owner) -> Op {
    Op::Upsert {
        at: Place::Child { parent, name },
        meta: meta(1_795_000_000_000, owner),
    }
}

fn path(p: &str) -> Target {
    Target::Path(Text(p.into()))
}

fn word(w: &str) -> zk::Name {
    zk::Name::Raw(Text(w.into()))
}

fn seq(prefix: Prefix, n: u32) -> zk::Name {
    zk::Name::Sequential { prefix, seq: n }
}

fn curator(word: u8) -> Prefix {
    Prefix::Curator { uuid: 0, word }
}

fn zk_seeds() -> Vec<(&'static str, zk::Input)> {
    let persistent = Owner::Persistent;
    let s = Owner::Session;
    vec![
        (
            "exclusive",
            zk::Input {
                ops: vec![
                    create(Target::Root, word("distributed"), persistent),
                    create(path("/distributed"), word("lock"), s(1)),
                ],
                max_leases: None,
            },
        ),
        (
            "curator-mutex",
            zk::Input {
                ops: vec![
                    create(Target::Root, word("locks"), persistent),
                    create(path("/locks"), word("orders"), persistent),
                    create(path("/locks/orders"), seq(curator(0), 7), s(1)),
                    create(
                        path("/locks/orders"),
                        seq(Prefix::Curator { uuid: 1, word: 0 }, 8),
                        s(2),
                    ),
                    create(path("/locks/orders"), seq(Prefix::Word(0), 9), s(3)),
                    Op::Remove(path(
                        "/locks/orders/_c_1b4e28ba-2fa1-11d2-883f-0016d3cca427-lock-0000000007",
                    )),
                ],
                max_leases: None,
            },
        ),
        (
            "curator-semaphore",
            zk::Input {
                ops: vec![
                    create(Target::Root, word("sem"), persistent),
                    create(path("/sem"), word("leases"), persistent),
                    create(path("/sem"), word("locks"), persistent),
                    create(path("/sem/locks"), seq(curator(0), 3), s(1)),
                    create(path("/sem/leases"), seq(curator(2), 4), s(1)),
                    create(path("/sem/leases"), seq(curator(2), 5), s(2)),
                    create(path("/sem/leases"), seq(curator(2), 6), s(3)),
                ],
                max_leases: Some(2),
            },
        ),
        (
            "curator-read-write",
            zk::Input {
                ops: vec![
                    create(Target::Root, word("rw"), persistent),
                    create(Target::Earlier(0), seq(curator(3), 1), s(1)),
                    create(Target::Earlier(0), seq(curator(3), 2), s(2)),
                    create(Target::Earlier(0), seq(curator(4), 3), s(3)),
                    create(Target::Earlier(0), seq(curator(3), 4), s(4)),
                ],
                max_leases: None,
            },
        ),
        (
            "shared-host-rw",
            zk::Input {
                ops: vec![
                    create(Target::Root, word("shared"), persistent),
                    create(Target::Earlier(0), seq(Prefix::Word(6), 7), s(1)),
                    create(Target::Earlier(0), seq(Prefix::Word(7), 8), s(2)),
                ],
                max_leases: None,
            },
        ),
        (
            "kazoo-lock",
            zk::Input {
                ops: vec![
                    create(Target::Root, word("kz"), persistent),
                    create(
                        Target::Earlier(0),
                        seq(
                            Prefix::Kazoo {
                                uuid: 2,
                                read: true,
                            },
                            1,
                        ),
                        s(1),
                    ),
                    create(
                        Target::Earlier(0),
                        seq(
                            Prefix::Kazoo {
                                uuid: 2,
                                read: false,
                            },
                            2,
                        ),
                        s(2),
                    ),
                ],
                max_leases: None,
            },
        ),
        (
            "kazoo-lease",
            zk::Input {
                ops: vec![
                    create(Target::Root, word("nightly"), persistent),
                    Op::Upsert {
                        at: Place::Child {
                            parent: Target::Earlier(0),
                            name: word("lease_holder"),
                        },
                        meta: Meta {
                            data: zk::Data::Lease {
                                version: 1,
                                holder: 3,
                                end: 1_795_000_600_000,
                            },
                            ..meta(1_795_000_000_000, persistent)
                        },
                    },
                ],
                max_leases: None,
            },
        ),
        (
            "shedlock-node",
            zk::Input {
                ops: vec![
                    create(Target::Root, word("shedlock"), persistent),
                    Op::Upsert {
                        at: Place::Child {
                            parent: Target::Earlier(0),
                            name: word("nightly"),
                        },
                        meta: Meta {
                            data: zk::Data::Until(1_795_000_600_123),
                            ..meta(1_795_000_000_000, persistent)
                        },
                    },
                ],
                max_leases: None,
            },
        ),
        (
            "kazoo-semaphore",
            zk::Input {
                ops: vec![
                    Op::Upsert {
                        at: Place::Child {
                            parent: Target::Root,
                            name: word("ksem"),
                        },
                        meta: Meta {
                            data: zk::Data::Number(2),
                            ..meta(1_795_000_000_000, persistent)
                        },
                    },
                    Op::Upsert {
                        at: Place::KazooLockOf(Target::Earlier(0)),
                        meta: meta(1_795_000_000_001, persistent),
                    },
                    create(
                        Target::Earlier(1),
                        seq(
                            Prefix::Kazoo {
                                uuid: 2,
                                read: false,
                            },
                            1,
                        ),
                        s(3),
                    ),
                    create(
                        Target::Earlier(0),
                        word("1b4e28ba2fa111d2883f0016d3cca427"),
                        s(1),
                    ),
                    create(
                        Target::Earlier(0),
                        word("9f0c6a2e7d614c8e9d3b5a1f2e3d4c5b"),
                        s(2),
                    ),
                ],
                max_leases: None,
            },
        ),
        (
            "temp-queue-and-odd-paths",
            zk::Input {
                ops: vec![
                    create(Target::Root, word("q"), persistent),
                    create(Target::Earlier(0), seq(Prefix::Word(1), 12), s(1)),
                    create(Target::Earlier(0), seq(Prefix::Word(1), 11), s(2)),
                    Op::Upsert {
                        at: Place::Path(Text("//q/\u{fffd}-0000000001/".into())),
                        meta: meta(0, s(3)),
                    },
                    Op::Remove(path("/q/temp0000000012")),
                ],
                max_leases: None,
            },
        ),
        (
            "double-slash-path",
            zk::Input {
                ops: vec![
                    create(Target::Root, word("sem"), persistent),
                    create(Target::Root, word("/sem"), s(3)),
                    Op::Remove(Target::Earlier(1)),
                ],
                max_leases: None,
            },
        ),
    ]
}

/// Inputs of finding 4 in [`crate::known`] (`zk_incremental`), fixed since: regression seeds.
fn zk_findings() -> Vec<(&'static str, zk::Input)> {
    let persistent = Owner::Persistent;
    let s = Owner::Session;
    vec![
        (
            "finding-4-kazoo-lock-sibling-removed",
            zk::Input {
                ops: vec![
                    create(Target::Root, word("ksem"), persistent),
                    Op::Upsert {
                        at: Place::KazooLockOf(Target::Earlier(0)),
                        meta: meta(1_795_000_000_001, persistent),
                    },
                    create(
                        Target::Earlier(0),
                        word("1b4e28ba2fa111d2883f0016d3cca427"),
                        s(1),
                    ),
                    Op::Remove(Target::Earlier(1)),
                ],
                max_leases: None,
            },
        ),
        (
            "finding-4-semaphore-created-after-its-lock",
            zk::Input {
                ops: vec![
                    Op::Upsert {
                        at: Place::Path(Text("/x-__lock__".into())),
                        meta: meta(1_795_000_000_000, persistent),
                    },
                    create(
                        Target::Earlier(0),
                        seq(
                            Prefix::Kazoo {
                                uuid: 2,
                                read: false,
                            },
                            1,
                        ),
                        s(1),
                    ),
                    create(Target::Root, word("x"), persistent),
                ],
                max_leases: None,
            },
        ),
        (
            // `/sem/-__lock__` is no semaphore's queue: stripping the suffix leaves `/sem/`,
            // which the tree's lookup resolved to `/sem`.
            "finding-10-empty-kazoo-semaphore-name",
            zk::Input {
                ops: vec![
                    create(Target::Root, word("sem"), persistent),
                    Op::Upsert {
                        at: Place::Path(Text("/sem/-__lock__".into())),
                        meta: meta(1_795_000_000_001, persistent),
                    },
                ],
                max_leases: None,
            },
        ),
        (
            // The harness's own finding: it removed `orders` (no leading `/`, which ZooKeeper
            // refuses) as `/orders`, whose ShedLock the re-decode of `orders` could not drop.
            "finding-harness-relative-remove",
            zk::Input {
                ops: vec![
                    Op::Upsert {
                        at: Place::Child {
                            parent: Target::Root,
                            name: word("orders"),
                        },
                        meta: Meta {
                            data: zk::Data::Until(-1),
                            ..meta(1_795_000_000_000, persistent)
                        },
                    },
                    Op::Remove(Target::Path(Text("orders".into()))),
                ],
                max_leases: None,
            },
        ),
    ]
}

fn rules_seeds() -> Vec<(&'static str, rules::Input)> {
    let session = |session: u8, holds: Vec<u8>, waits: Vec<u8>| Session {
        source: 0,
        session,
        holds,
        waits,
    };
    let now = 1_795_000_000_000_i64 << 13;
    vec![(
        "deadlock-and-stale",
        rules::Input {
            sessions: vec![
                session(0, vec![0], vec![1]),
                session(1, vec![1], vec![0]),
                session(2, vec![], vec![0]),
            ],
            lock: Lock {
                zookeeper: false,
                recipe: 0,
                holders: vec![(now - (60_000 << 13), 0)],
                waiters: vec![now - (10_000 << 13)],
                changed: now - (60_000 << 13),
                deadline: None,
                lease: Some(30_000 << 13),
                expires_at: Some(now + (2_000 << 13)),
                no_expiry: false,
                usual_hold: Some(1_000 << 13),
            },
            now,
            stale_hold: 3_600_000 << 13,
        },
    )]
}

/// An etcd key as the seeds write it: revisions given, `mod_revision` = `create_revision`.
fn etcd_kv(key: ed::Key, value: ed::Value, revision: i64, lease: ed::Lease) -> ed::Kv {
    ed::Kv {
        key,
        value,
        create_revision: ed::Rev::Raw(revision),
        mod_revision: ed::Rev::Raw(revision),
        version: 1,
        lease,
    }
}

fn etcd_seeds() -> Vec<(&'static str, ed::Input)> {
    use ed::{Key, Lease, Value};
    let input = |kvs: Vec<ed::Kv>| ed::Input {
        kvs,
        probe: Blob(b"/locks/job".to_vec()),
        ops: vec![],
    };
    let raw_key = |k: &[u8]| Key::Raw(Blob(k.to_vec()));
    let text = |v: &[u8]| Value::Raw(Blob(v.to_vec()));
    // `/locks/job/<hex>`: NAMES[0], and the seen lease (LEASES[0], 0x694da2082de77e06).
    let job = Key::Queued(0);
    let seen = Lease::Few(0);
    vec![
        (
            "etcdctl-lock",
            input(vec![etcd_kv(job.clone(), Value::Empty, 5, seen.clone())]),
        ),
        (
            "mutex-waiters",
            input(vec![
                etcd_kv(job.clone(), Value::Empty, 77, Lease::Raw(0x7587)),
                etcd_kv(job.clone(), Value::Empty, 40, Lease::Raw(0x2a)),
                etcd_kv(job.clone(), Value::Empty, 12, seen.clone()),
                etcd_kv(job.clone(), Value::Empty, 41, Lease::Raw(0x1)),
            ]),
        ),
        (
            "election",
            input(vec![
                etcd_kv(Key::Queued(1), Value::Known(1), 20, Lease::Raw(0x22)),
                etcd_kv(Key::Queued(1), Value::Known(0), 10, Lease::Raw(0x11)),
                etcd_kv(Key::Queued(1), text(b"node-c:2379"), 30, Lease::Raw(0x33)),
            ]),
        ),
        (
            "lease-key-binary-owner",
            input(vec![etcd_kv(
                raw_key(b"/service/locks/billing"),
                Value::Known(2),
                8,
                Lease::Raw(0x3e8),
            )]),
        ),
        (
            "shedlock-key",
            input(vec![etcd_kv(
                raw_key(b"shedlock:default:nightly-report"),
                Value::Known(5),
                9,
                Lease::Raw(0x3e9),
            )]),
        ),
        (
            "hex-of-another-lease",
            input(vec![
                etcd_kv(Key::Word(1), Value::Empty, 5, Lease::Raw(0x694d)),
                etcd_kv(
                    Key::QueuedOther {
                        name: 0,
                        lease: Lease::Raw(0xff),
                    },
                    Value::Empty,
                    6,
                    Lease::Raw(0xfe),
                ),
            ]),
        ),
        (
            "keys-without-lease",
            input(vec![
                etcd_kv(raw_key(b"/config/max"), text(b"5"), 1, Lease::None),
                etcd_kv(Key::Word(1), Value::Empty, 2, Lease::None),
                etcd_kv(job.clone(), Value::Empty, 3, Lease::None),
            ]),
        ),
        (
            "odd-keys",
            ed::Input {
                kvs: vec![
                    // `/<hex>`: a group named by the empty string, and the empty key leased.
                    etcd_kv(Key::Queued(2), Value::Empty, 0, seen.clone()),
                    etcd_kv(raw_key(b""), text(b"v"), -3, Lease::Raw(1)),
                    // Negative leases (Go's %x) and extreme revisions.
                    etcd_kv(Key::Queued(4), Value::Empty, -5, Lease::Few(4)),
                    etcd_kv(Key::Queued(4), Value::Empty, i64::MIN, Lease::Few(5)),
                    etcd_kv(Key::Queued(3), Value::Empty, i64::MAX, Lease::Few(6)),
                    // Not UTF-8, an escape-like name, a value of one invalid byte.
                    etcd_kv(Key::Queued(6), Value::Known(4), 4, Lease::Raw(7)),
                    etcd_kv(Key::Queued(7), Value::Known(3), 4, Lease::Raw(8)),
                    // A lease key at a group's path, and a key given twice.
                    etcd_kv(Key::Word(0), text(b"owner"), 9, Lease::Raw(9)),
                    etcd_kv(job.clone(), Value::Empty, 10, Lease::Few(1)),
                    etcd_kv(job.clone(), Value::Empty, 11, Lease::Few(1)),
                ],
                probe: Blob(b"".to_vec()),
                ops: vec![],
            },
        ),
        (
            "incremental",
            ed::Input {
                kvs: vec![
                    etcd_kv(job.clone(), Value::Empty, 12, seen.clone()),
                    etcd_kv(job.clone(), Value::Empty, 13, Lease::Few(1)),
                    etcd_kv(job.clone(), Value::Empty, 14, Lease::Few(2)),
                ],
                probe: Blob(b"/locks/job".to_vec()),
                ops: vec![
                    // The holder's session ends: its key goes, the next waiter holds.
                    ed::Op::Delete(2),
                    // A new contender queues.
                    ed::Op::Put(etcd_kv(job.clone(), Value::Empty, 20, Lease::Few(3))),
                    // A lease key at the mutex's name, then the key rebound to another lease.
                    ed::Op::Put(etcd_kv(Key::Word(0), text(b"o"), 21, Lease::Raw(5))),
                    ed::Op::Put(etcd_kv(
                        Key::QueuedOther {
                            name: 0,
                            lease: Lease::Few(1),
                        },
                        Value::Empty,
                        13,
                        Lease::Few(2),
                    )),
                    // Everything goes.
                    ed::Op::Delete(0),
                    ed::Op::Delete(0),
                    ed::Op::Delete(0),
                    ed::Op::Delete(0),
                ],
            },
        ),
    ]
}

/// Text seeds for `lock_id` and `fourlw` (real ids and real ZooKeeper 3.8 answers).
fn text_seeds() -> Vec<(&'static str, &'static str, &'static [u8])> {
    vec![
        ("lock_id", "zk-path", b"zk-main\n/locks/orders"),
        ("lock_id", "odd-path", "zk\n/a b/\u{fc}~x".as_bytes()),
        ("lock_id", "redis-key", b"redis-main\nlock:{order}"),
        ("lock_id", "redis-binary-key", b"redis\nbin\xff\x00end"),
        ("lock_id", "an-id", b"zk-main~locks~orders!20x"),
        ("lock_id", "finding-1-display-ambiguous", b"redis\nlock:\\x41"),
        (
            "release_body",
            "zookeeper",
            br#"{"holder":"/locks/job/_c_1-lock-0000000007","session":"0x100008c0e7a0001","version":"0x2a","reason":"stuck since 03:00"}"#,
        ),
        (
            "release_body",
            "redisson",
            br#"{"holder":"6f1c:1","reentrancy":2,"reason":"worker gone\nforged line"}"#,
        ),
        ("release_body", "not-json", b"holder=/l/n&reason=x"),
        ("release_body", "blank-reason", br#"{"holder":"h","reason":" \t"}"#),
        (
            "fourlw",
            "finding-5-java-date-overflow",
            b"1 expire at Sun Nov 22 12:51:38 UTC 300000000000000:\n\t0x100008c0e7a0001\n",
        ),
        (
            "fourlw",
            "cons",
            b" /127.0.0.1:41234[1](queued=0,recved=5,sent=5,sid=0x100008c0e7a0001,lop=PING,est=1795000000000,to=6000,lcxid=0x3,lzxid=0x2a,lresp=123,llat=0,minlat=0,avglat=0,maxlat=1)\n /127.0.0.1:41240[0](queued=0,recved=1,sent=0)\n\n",
        ),
        (
            "fourlw",
            "wchp",
            b"/locks/orders/_c_1b4e28ba-2fa1-11d2-883f-0016d3cca427-lock-0000000007\n\t0x100008c0e7a0002\n\t0x100008c0e7a0003\n/distributed/lock\n\t0x200001d2f6b0000\n",
        ),
        ("fourlw", "wchs", b"2 connections watching 3 paths\nTotal watches:3\n"),
        (
            "fourlw",
            "mntr",
            b"zk_version\t3.8.0-debian, built on 2023-01-01\nzk_server_state\tleader\nzk_watch_count\t5\nzk_ephemerals_count\t3\n",
        ),
        (
            "fourlw",
            "dump",
            b"SessionTracker dump:\nSession Sets (3)/(2):\n0 expire at Thu Jan 01 00:00:00 UTC 1970:\n1 expire at Sun Nov 22 12:51:38 UTC 2026:\n\t0x100008c0e7a0001\n1 expire at Sun Nov 22 12:51:42 UTC 2026:\n\t0x100008c0e7a0002\nephemeral nodes dump:\nSessions with Ephemerals (1):\n0x100008c0e7a0001:\n\t/distributed/lock\nConnections dump:\nConnections Sets (1)/(1):\n",
        ),
    ]
}

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target)
}

/// Writes (with `LOCKSCOPE_FUZZ_WRITE_SEEDS=1`) or checks one seed file.
fn keep(target: &str, name: &str, bytes: &[u8]) {
    let file = if name.starts_with("finding-") {
        corpus_dir(target).join(name)
    } else {
        corpus_dir(target).join(format!("seed-{name}"))
    };
    if std::env::var_os("LOCKSCOPE_FUZZ_WRITE_SEEDS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(corpus_dir(target)).expect("corpus dir");
        std::fs::write(&file, bytes).expect("write seed");
    } else {
        let on_disk = std::fs::read(&file).unwrap_or_default();
        assert!(
            on_disk == bytes,
            "{} is out of date: run scripts/fuzz --write-seeds",
            file.display()
        );
    }
}

fn encoded<T: Encode>(value: &T) -> Vec<u8> {
    let mut out = Vec::new();
    value.encode(&mut out);
    out
}

#[test]
fn redis_seeds_decode_as_written_and_pass() {
    for (name, input) in redis_seeds().into_iter().chain(redis_findings()) {
        let bytes = encoded(&input);
        assert_eq!(
            crate::input::<rd::Input>(&bytes),
            Some(input.clone()),
            "{name}"
        );
        rd::check(&input);
        keep("redis_decode", name, &bytes);
    }
}

#[test]
fn redis_seeds_are_the_layouts_they_name() {
    use lockscope_model::redis::RedisRecipe as R;
    let want = [
        ("token-lock", R::TokenLock),
        ("redisson-lock", R::RedissonLock),
        ("redisson-fair-lock", R::RedissonFairLock),
        ("redisson-fair-leftover-queue", R::RedissonFairLock),
        ("redisson-fenced-lock", R::RedissonFencedLock),
        ("redisson-rw-write", R::RedissonReadWriteLock),
        (
            "redisson-permit-semaphore",
            R::RedissonPermitExpirableSemaphore,
        ),
        ("python-redis-lock-id", R::PythonRedisLock),
        ("python-redis-lock-signal", R::PythonRedisLock),
        ("shedlock", R::ShedLock),
        ("setnx-deadline", R::SetnxDeadline),
        ("redisson-latch", R::RedissonCountDownLatch),
        ("binary-token", R::TokenLock),
        ("redis-semaphore", R::NodeSemaphore),
        ("redis-multi-semaphore", R::NodeMultiSemaphore),
        ("spring-redis-lock", R::SpringRedisLock),
        ("spring-overlapping-registries", R::SpringRedisLock),
        ("spring-unconfigured", R::TokenLock),
    ];
    let seeds = redis_seeds();
    assert_eq!(seeds.len(), want.len());
    for ((name, input), (want_name, recipe)) in seeds.iter().zip(want) {
        assert_eq!(*name, want_name);
        let now = input.now.ms();
        let c = |r: &Option<Read>| r.as_ref().map(|r| r.key_read(now));
        let lock = lockscope_model::redis::decode(
            &input.key.bytes(),
            &input.read.key_read(now),
            &lockscope_model::redis::Companions {
                fair_queue: c(&input.fair_queue),
                fair_timeouts: c(&input.fair_timeouts),
                fencing_counter: c(&input.fencing_counter),
                permit_timeouts: c(&input.permit_timeouts),
                signal_list: c(&input.signal_list),
            },
            input.key_hint(),
            now,
        )
        .unwrap_or_else(|| panic!("{name}: no lock"));
        assert_eq!(lock.recipe, recipe, "{name}");
    }
}

#[test]
fn redlock_seeds_decode_as_written_and_pass() {
    for (name, input) in redlock_seeds() {
        let bytes = encoded(&input);
        assert_eq!(
            crate::input::<rl::Input>(&bytes),
            Some(input.clone()),
            "{name}"
        );
        rl::check(&input);
        keep("redis_redlock", name, &bytes);
    }
}

#[test]
fn zk_seeds_decode_as_written_and_pass() {
    for (name, input) in zk_seeds().into_iter().chain(zk_findings()) {
        let bytes = encoded(&input);
        assert_eq!(
            crate::input::<zk::Input>(&bytes),
            Some(input.clone()),
            "{name}"
        );
        zk::check_tree(&input);
        zk::check_incremental(&input);
        if !name.starts_with("finding-") {
            keep("zk_tree", name, &bytes);
        }
        keep("zk_incremental", name, &bytes);
    }
}

#[test]
fn zk_seeds_are_the_layouts_they_name() {
    use lockscope_model::zk::Recipe as R;
    let want = [
        ("exclusive", vec![R::Exclusive]),
        ("curator-mutex", vec![R::CuratorMutex]),
        ("curator-semaphore", vec![R::CuratorSemaphore]),
        ("curator-read-write", vec![R::CuratorReadWrite]),
        ("shared-host-rw", vec![R::SharedReadWrite]),
        ("kazoo-lock", vec![R::KazooLock]),
        ("kazoo-lease", vec![R::KazooLease]),
        ("shedlock-node", vec![R::ShedLock]),
        ("kazoo-semaphore", vec![R::KazooSemaphore]),
        // Two queues under `/q`: `temp…` and `\u{fffd}-…` (both sequential, so neither is an
        // exclusive lock).
        ("temp-queue-and-odd-paths", vec![R::Queue, R::Queue]),
        ("double-slash-path", vec![]),
    ];
    let seeds = zk_seeds();
    assert_eq!(seeds.len(), want.len());
    for ((name, input), (want_name, recipes)) in seeds.iter().zip(want) {
        assert_eq!(*name, want_name);
        let found: Vec<R> = zk::check_tree(input)
            .values()
            .flatten()
            .map(|l| l.recipe)
            .collect();
        assert_eq!(found, recipes, "{name}");
    }
}

#[test]
fn rules_seeds_decode_as_written_and_pass() {
    for (name, input) in rules_seeds() {
        let bytes = encoded(&input);
        assert_eq!(
            crate::input::<rules::Input>(&bytes),
            Some(input.clone()),
            "{name}"
        );
        rules::run(&bytes);
        keep("rules", name, &bytes);
    }
}

#[test]
fn text_seeds_pass() {
    for (target, name, bytes) in text_seeds() {
        match target {
            "lock_id" => crate::lock_id::run(bytes),
            "release_body" => crate::release_body::run(bytes),
            #[cfg(feature = "server")]
            "fourlw" => crate::fourlw::run(bytes),
            _ => {}
        }
        keep(target, name, bytes);
    }
}

#[test]
fn etcd_seeds_decode_as_written_and_pass() {
    for (name, input) in etcd_seeds() {
        let bytes = encoded(&input);
        assert_eq!(
            crate::input::<ed::Input>(&bytes),
            Some(input.clone()),
            "{name}"
        );
        ed::check(&input);
        keep("etcd_decode", name, &bytes);
    }
}

#[test]
fn etcd_seeds_are_the_layouts_they_name() {
    use lockscope_model::etcd::EtcdRecipe as R;
    /// A lock's path, recipe and number of waiters.
    type Want<'a> = (&'a str, R, usize);
    let want: [(&str, Vec<Want>); 9] = [
        ("etcdctl-lock", vec![("/locks/job", R::Mutex, 0)]),
        ("mutex-waiters", vec![("/locks/job", R::Mutex, 3)]),
        ("election", vec![("/election/leader", R::Election, 2)]),
        (
            "lease-key-binary-owner",
            vec![("/service/locks/billing", R::LeaseKey, 0)],
        ),
        (
            "shedlock-key",
            vec![("shedlock:default:nightly-report", R::ShedLock, 0)],
        ),
        (
            "hex-of-another-lease",
            vec![
                ("/locks/job/694da2082de77e06", R::LeaseKey, 0),
                ("/locks/job/ff", R::LeaseKey, 0),
            ],
        ),
        ("keys-without-lease", vec![]),
        (
            "odd-keys",
            vec![
                ("", R::Mutex, 0),
                ("/bin\\xff", R::Election, 0),
                ("/jobs/", R::Mutex, 0),
                ("/locks", R::Mutex, 1),
                ("/locks/job", R::Mutex, 0),
                ("/x\\x5cx41", R::Election, 0),
            ],
        ),
        ("incremental", vec![("/locks/job", R::Mutex, 2)]),
    ];
    let seeds = etcd_seeds();
    assert_eq!(seeds.len(), want.len());
    for ((name, input), (want_name, locks)) in seeds.iter().zip(want) {
        assert_eq!(*name, want_name);
        let found: Vec<(String, R, usize)> = ed::check(input)
            .into_values()
            .map(|l| (l.path, l.recipe, l.waiters.len()))
            .collect();
        let locks: Vec<(String, R, usize)> = locks
            .into_iter()
            .map(|(p, r, w)| (p.to_string(), r, w))
            .collect();
        assert_eq!(found, locks, "{name}");
    }
}

/// The index of `value` in one of `db`'s tables, for `Pick`.
fn at<T: PartialEq + ?Sized>(table: &[&T], value: &T) -> u8 {
    table
        .iter()
        .position(|v| *v == value)
        .expect("value in table") as u8
}

fn db_empty() -> db::Input {
    db::Input {
        inno_locks: vec![],
        inno_trxs: vec![],
        lock_wait_timeout_ms: None,
        pg_rows: vec![],
        conns: vec![],
        held: vec![],
        waits: vec![],
        table: db::Str::Pick(0),
        table_rows: vec![],
        expiring: false,
        statements: vec![],
        keys: vec![],
        identifiers: vec![],
        open: u64::MAX,
        spring_names: vec![],
        spring_rows: vec![],
        mdl_held: vec![],
        mdl_waits: vec![],
        idle: 0,
    }
}

/// A Spring `INT_LOCK` row of `name`'s key in `region`, held by `owner` (`None`: lapsed).
fn spring_row(region: &str, name: &str, owner: Option<&str>) -> db::SpringRow {
    db::SpringRow {
        region: pick_str(db::REGIONS, region),
        key: db::SpringKey::Of(pick_str(db::SPRING_NAMES, name)),
        owner: Some(pick_str(
            db::CLIENT_IDS,
            owner.unwrap_or("8d3f0a4e-5b7c-4f1a-9e2d-3c4b5a697887"),
        )),
        until: Some((
            pick_str(db::STAMPS, "2026-11-23 22:41:10.123"),
            Some(few(200)),
        )),
        expired: owner.is_none(),
    }
}

fn pick_str(table: &[&str], value: &str) -> db::Str {
    db::Str::Pick(at(table, value))
}

/// `Num::Few(x)`: a connection id `x % 8 + 1`, an instant `x` quarter-seconds after the base.
fn few(x: u8) -> db::Num {
    db::Num::Few(x)
}

fn inno(lock_id: &str, trx: &str, mode: &str, data: db::Data) -> db::Inno {
    db::Inno {
        lock_id: pick_str(db::LOCK_IDS, lock_id),
        trx_id: pick_str(db::TRX_IDS, trx),
        mode: pick_str(db::INNO_MODES, mode),
        lock_type: pick_str(db::INNO_TYPES, "RECORD"),
        table: pick_str(db::TABLES, "`app`.`locks`"),
        index: Some(pick_str(db::INDEXES, "PRIMARY")),
        data: Some(data),
    }
}

fn trx(id: &str, thread: u8, started: u8, wait: Option<(u8, &str)>) -> db::Trx {
    db::Trx {
        trx_id: pick_str(db::TRX_IDS, id),
        thread: few(thread),
        started_ms: Some(few(started)),
        started: Some(pick_str(db::STAMPS, "2026-11-23 22:41:11")),
        wait_started_ms: wait.map(|w| few(w.0)),
        requested_lock: wait.map(|w| pick_str(db::LOCK_IDS, w.1)),
    }
}

fn pg(locktype: &str, pid: u8, mode: &str, granted: bool, wait: Option<u8>) -> db::Pg {
    db::Pg {
        locktype: pick_str(db::PG_TYPES, locktype),
        pid: few(pid),
        mode: pick_str(db::PG_MODES, mode),
        granted,
        waitstart_ms: wait.map(few),
        classid: None,
        objid: None,
        objsubid: None,
        relation: None,
        page: None,
        tuple: None,
        transactionid: None,
        database: Some(pick_str(db::DATABASES, "app")),
    }
}

fn pg_tuple(pid: u8, granted: bool, wait: Option<u8>) -> db::Pg {
    db::Pg {
        relation: Some(pick_str(db::RELATIONS, "locks")),
        page: Some(few(0)),
        tuple: Some(few(1)),
        ..pg("tuple", pid, "AccessExclusiveLock", granted, wait)
    }
}

fn pg_xact(pid: u8, xid: &str, mode: &str, granted: bool, wait: Option<u8>) -> db::Pg {
    db::Pg {
        transactionid: Some(pick_str(db::XIDS, xid)),
        ..pg("transactionid", pid, mode, granted, wait)
    }
}

fn pg_advisory(
    pid: u8,
    key: (i64, i64, i64),
    mode: &str,
    granted: bool,
    wait: Option<u8>,
) -> db::Pg {
    db::Pg {
        classid: Some(db::Num::Raw(key.0)),
        objid: Some(db::Num::Raw(key.1)),
        objsubid: Some(db::Num::Raw(key.2)),
        ..pg("advisory", pid, mode, granted, wait)
    }
}

fn get_lock(name: db::Name, quoting: db::Quoting, timeout: i32) -> db::Statement {
    db::Statement::GetLock {
        prefix: 0,
        name,
        quoting,
        timeout: db::Timeout::Int(timeout),
    }
}

fn name(n: &str) -> db::Name {
    db::Name::Pick(at(db::NAMES, n))
}

fn raw_name(n: &[u8]) -> db::Name {
    db::Name::Raw(Blob(n.to_vec()))
}

fn db_seeds() -> Vec<(&'static str, db::Input)> {
    use db::Quoting::{Client, Double, Doubled};
    vec![
        (
            // Three sessions SELECT … FOR UPDATE the row 'orders': INNODB_LOCKS lists the
            // holder's lock only while the others wait (innodb_lock_wait_timeout 50 s).
            "innodb-for-update-queue",
            db::Input {
                inno_locks: vec![
                    inno("10:5:3:2", "10", "X", db::Data::Pick(0)),
                    inno("11:5:3:2", "11", "X", db::Data::Pick(0)),
                    inno("12:5:3:2", "12", "X", db::Data::Pick(0)),
                ],
                inno_trxs: vec![
                    trx("10", 0, 0, None),
                    trx("11", 1, 4, Some((5, "11:5:3:2"))),
                    trx("12", 2, 8, Some((9, "12:5:3:2"))),
                ],
                lock_wait_timeout_ms: Some(few(50)),
                ..db_empty()
            },
        ),
        (
            // A binary primary key (lock_data as raw bytes), a gap lock, and a table whose
            // name has a backquote in it.
            "innodb-binary-key-and-gap",
            db::Input {
                inno_locks: vec![
                    db::Inno {
                        table: pick_str(db::TABLES, "`we``ird`.`t`"),
                        ..inno(
                            "10:5:3:2",
                            "10",
                            "X",
                            db::Data::Raw(Blob(b"0x00ff\x00\xff".to_vec())),
                        )
                    },
                    db::Inno {
                        table: pick_str(db::TABLES, "`we``ird`.`t`"),
                        ..inno(
                            "11:5:3:2",
                            "11",
                            "X,GAP",
                            db::Data::Raw(Blob(b"0x00ff\x00\xff".to_vec())),
                        )
                    },
                    // Inserting past the last row waits on the supremum record's lock.
                    inno("10:5:3:3", "10", "X", db::Data::Pick(3)),
                    inno("12:5", "12", "X,GAP", db::Data::Pick(3)),
                ],
                inno_trxs: vec![
                    trx("10", 0, 0, None),
                    trx("11", 1, 4, Some((5, "11:5:3:2"))),
                    trx("12", 2, 8, Some((9, "12:5"))),
                ],
                lock_wait_timeout_ms: Some(few(1)),
                ..db_empty()
            },
        ),
        (
            // PostgreSQL FOR UPDATE queue: backend 2 holds the tuple lock and waits on backend
            // 1's transaction; 3 and 4 wait on the tuple lock.
            "pg-for-update-queue",
            db::Input {
                pg_rows: vec![
                    pg_xact(0, "900", "ExclusiveLock", true, None),
                    pg_tuple(1, true, None),
                    pg_xact(1, "900", "ShareLock", false, Some(20)),
                    pg_tuple(3, false, Some(40)),
                    pg_tuple(2, false, Some(30)),
                    pg_xact(4, "901", "ExclusiveLock", true, None),
                    pg_xact(5, "901", "ShareLock", false, Some(50)),
                ],
                conns: vec![db::Conn {
                    pid: few(0),
                    in_transaction: true,
                    statement: db::Statement::Raw(Text(
                        "SELECT * FROM locks WHERE name = 'orders' FOR UPDATE".into(),
                    )),
                    started: Some(pick_str(db::STAMPS, "2026-11-23 22:41:10.123+00")),
                    xact_started: Some(pick_str(db::STAMPS, "2026-11-23 22:41:11")),
                }],
                ..db_empty()
            },
        ),
        (
            // Advisory locks: pg_advisory_lock(4294967298) (classid 1, objid 2, objsubid 1)
            // held at session level; pg_advisory_lock(1, 2) shared by two, one of which waits
            // to take it exclusively; a negative bigint key.
            "pg-advisory",
            db::Input {
                pg_rows: vec![
                    pg_advisory(0, (1, 2, 1), "ExclusiveLock", true, None),
                    pg_advisory(1, (1, 2, 1), "ExclusiveLock", false, Some(10)),
                    pg_advisory(2, (1, 2, 2), "ShareLock", true, None),
                    pg_advisory(3, (1, 2, 2), "ShareLock", true, None),
                    pg_advisory(2, (1, 2, 2), "ExclusiveLock", false, Some(12)),
                    pg_advisory(
                        4,
                        (0xffff_ffff, 0xffff_ffff, 1),
                        "ExclusiveLock",
                        true,
                        None,
                    ),
                ],
                conns: vec![
                    db::Conn {
                        pid: few(0),
                        in_transaction: false,
                        statement: db::Statement::Pick(5),
                        started: Some(pick_str(db::STAMPS, "2026-11-23 22:41:10.123+00")),
                        xact_started: None,
                    },
                    db::Conn {
                        pid: few(2),
                        in_transaction: true,
                        statement: db::Statement::Pick(6),
                        started: None,
                        xact_started: None,
                    },
                ],
                keys: vec![
                    db::Key::Big(4_294_967_298),
                    db::Key::Big(i64::MIN),
                    db::Key::Pair(-5, 7),
                    db::Key::Columns(1, 2, 1),
                    db::Key::Columns(1, 2, 3),
                    db::Key::Text(pick_str(db::KEY_TEXTS, "( -5 , 7 )")),
                ],
                ..db_empty()
            },
        ),
        (
            // GET_LOCK: holders from METADATA_LOCK_INFO, waiters from the process list, names
            // with quotes, backslashes, unicode and binary bytes; a bound parameter.
            "get-lock",
            db::Input {
                held: vec![
                    db::Held {
                        thread: few(0),
                        name: name("orders"),
                    },
                    db::Held {
                        thread: few(1),
                        name: name("it's"),
                    },
                    db::Held {
                        thread: few(2),
                        name: name("a\\x41"),
                    },
                    db::Held {
                        thread: few(3),
                        name: name("zürich-🔒"),
                    },
                    db::Held {
                        thread: few(4),
                        name: raw_name(b"bin\x00\xff"),
                    },
                ],
                waits: vec![
                    db::Wait {
                        thread: few(5),
                        statement: get_lock(name("orders"), Client, 10),
                        since_ms: Some(few(8)),
                    },
                    db::Wait {
                        thread: few(6),
                        statement: get_lock(name("orders"), Doubled, -1),
                        since_ms: Some(few(4)),
                    },
                    db::Wait {
                        thread: few(7),
                        statement: get_lock(name("it's"), Doubled, 5),
                        since_ms: Some(few(2)),
                    },
                    db::Wait {
                        thread: few(5),
                        statement: get_lock(name("a\\x41"), Client, 1),
                        since_ms: Some(few(3)),
                    },
                    db::Wait {
                        thread: few(6),
                        statement: get_lock(name("zürich-🔒"), Double, 0),
                        since_ms: None,
                    },
                    db::Wait {
                        thread: few(7),
                        statement: db::Statement::Pick(2),
                        since_ms: Some(few(1)),
                    },
                ],
                ..db_empty()
            },
        ),
        (
            // Lock tables: database_lock rows, and ShedLock rows held and expired.
            "lock-tables",
            db::Input {
                table: db::Str::Pick(1),
                expiring: true,
                table_rows: vec![
                    db::Row {
                        key: raw_name(b"report-job"),
                        owner: Some(raw_name(b"host-1")),
                        until: Some((
                            pick_str(db::STAMPS, "2026-11-23 22:41:10.123"),
                            Some(few(200)),
                        )),
                        expired: false,
                    },
                    db::Row {
                        key: raw_name(b"cleanup"),
                        owner: Some(raw_name(b"host-2")),
                        until: Some((pick_str(db::STAMPS, "2026-11-23 22:41:11"), Some(few(0)))),
                        expired: true,
                    },
                    db::Row {
                        key: raw_name(b"bin\xff\\x41"),
                        owner: None,
                        until: None,
                        expired: false,
                    },
                ],
                identifiers: vec![
                    db::Ident::Parts(vec![Text("app".into()), Text("database_lock".into())]),
                    db::Ident::Parts(vec![Text("we`ird".into()), Text("t".into())]),
                    db::Ident::Raw(Text("`unterminated".into())),
                ],
                ..db_empty()
            },
        ),
        (
            // Spring Integration's INT_LOCK: configured names shown by name (one with '/' in a
            // region with '/', one that is a UUID in upper case, stored in lower case), one not
            // configured shown by its MD5 UUID, and a lapsed row (free, kept).
            "spring-jdbc-lock",
            db::Input {
                table: db::Str::Pick(4),
                spring_names: [
                    "orders",
                    "invoice/42",
                    "2F1E0B7C-1D2E-4A5B-9C8D-0E1F2A3B4C5D",
                ]
                .map(|n| pick_str(db::SPRING_NAMES, n))
                .to_vec(),
                spring_rows: vec![
                    spring_row("DEFAULT", "orders", Some("billing-node-1")),
                    spring_row("DEFAULT", "a/b", Some("billing-node-1")),
                    spring_row("eu/west", "invoice/42", Some("billing-node-1")),
                    spring_row(
                        "DEFAULT",
                        "2F1E0B7C-1D2E-4A5B-9C8D-0E1F2A3B4C5D",
                        Some("  "),
                    ),
                    spring_row("x", "orders", None),
                ],
                ..db_empty()
            },
        ),
        (
            // GET_LOCK statements as clients escape them: Ctrl-Z as \Z, NUL as \0, quotes,
            // backslashes, unicode; fractional and negative timeouts; odd statements.
            "get-lock-statements",
            db::Input {
                statements: vec![
                    get_lock(name("ctrl\u{1a}z"), Client, 3),
                    get_lock(name("nul\0byte"), Client, 3),
                    get_lock(name("say \"hi\""), Client, 3),
                    get_lock(name("say \"hi\""), Double, 3),
                    get_lock(name("a\\b"), Doubled, 3),
                    db::Statement::GetLock {
                        prefix: 2,
                        name: name("zürich-🔒"),
                        quoting: Client,
                        timeout: db::Timeout::Half(-1),
                    },
                    db::Statement::Pick(3),
                    db::Statement::Pick(7),
                    db::Statement::Pick(8),
                ],
                ..db_empty()
            },
        ),
    ]
}

/// Inputs of the findings (fixed in `database.rs`): they must keep passing.
fn db_findings() -> Vec<(&'static str, db::Input)> {
    vec![
        (
            // `\Z` (Ctrl-Z as client libraries escape it) was read as `Z`.
            "finding-get-lock-ctrl-z",
            db::Input {
                statements: vec![get_lock(name("ctrl\u{1a}z"), db::Quoting::Client, 0)],
                ..db_empty()
            },
        ),
        (
            // A connection that got the lock between the process-list read and the
            // METADATA_LOCK_INFO read was listed as holder and waiter.
            "finding-get-lock-holder-waits",
            db::Input {
                held: vec![db::Held {
                    thread: few(0),
                    name: name("orders"),
                }],
                waits: vec![db::Wait {
                    thread: few(0),
                    statement: get_lock(name("orders"), db::Quoting::Client, 10),
                    since_ms: Some(few(1)),
                }],
                ..db_empty()
            },
        ),
        (
            // A waiter's lock was named by the raw name, a holder's by `display_bytes`: a name
            // with `\x` in it was two locks.
            "finding-get-lock-backslash-x",
            db::Input {
                held: vec![db::Held {
                    thread: few(0),
                    name: name("a\\x41"),
                }],
                waits: vec![db::Wait {
                    thread: few(1),
                    statement: get_lock(name("a\\x41"), db::Quoting::Client, 10),
                    since_ms: Some(few(1)),
                }],
                ..db_empty()
            },
        ),
        (
            // A wait start near i64::MAX plus the timeout overflowed (GET_LOCK and InnoDB).
            "finding-deadline-overflow",
            db::Input {
                inno_locks: vec![
                    inno("10:5:3:2", "10", "X", db::Data::Pick(0)),
                    inno("11:5:3:2", "11", "X", db::Data::Pick(0)),
                ],
                inno_trxs: vec![
                    trx("10", 0, 0, None),
                    db::Trx {
                        wait_started_ms: Some(db::Num::Raw(i64::MAX - 1_000)),
                        ..trx("11", 1, 4, Some((5, "11:5:3:2")))
                    },
                ],
                lock_wait_timeout_ms: Some(few(50)),
                waits: vec![db::Wait {
                    thread: few(1),
                    statement: get_lock(name("orders"), db::Quoting::Client, 10),
                    since_ms: Some(db::Num::Raw(i64::MAX - 1_000)),
                }],
                ..db_empty()
            },
        ),
    ]
}

#[test]
fn db_seeds_decode_as_written_and_pass() {
    for (name, input) in db_seeds().into_iter().chain(db_findings()) {
        let bytes = encoded(&input);
        assert_eq!(
            crate::input::<db::Input>(&bytes),
            Some(input.clone()),
            "{name}"
        );
        db::check(&input);
        keep("db_decode", name, &bytes);
    }
}

#[test]
fn db_seeds_are_the_layouts_they_name() {
    /// A lock's path, number of holders and number of waiters.
    type Want<'a> = (&'a str, usize, usize);
    let want: [(&str, Vec<Want>); 8] = [
        (
            "innodb-for-update-queue",
            vec![("/rows/app.locks/PRIMARY/'orders'", 1, 2)],
        ),
        (
            "innodb-binary-key-and-gap",
            vec![
                ("/rows/app.locks/PRIMARY/supremum pseudo-record", 1, 1),
                ("/rows/we`ird.t/PRIMARY/0x00ff\0\\xff", 1, 1),
            ],
        ),
        (
            "pg-for-update-queue",
            vec![("/rows/app/locks/(0,1)", 1, 3), ("/transactions/901", 1, 1)],
        ),
        (
            "pg-advisory",
            vec![
                ("/advisory/app/-1", 1, 0),
                ("/advisory/app/4294967298", 1, 1),
                ("/advisory/app/(1,2)", 2, 1),
            ],
        ),
        (
            "get-lock",
            vec![
                ("/get_lock/?", 0, 1),
                ("/get_lock/a\\x5cx41", 1, 1),
                ("/get_lock/bin\0\\xff", 1, 0),
                ("/get_lock/it's", 1, 1),
                ("/get_lock/orders", 1, 2),
                ("/get_lock/zürich-🔒", 1, 1),
            ],
        ),
        (
            "lock-tables",
            vec![
                ("/tables/shedlock/report-job", 1, 0),
                ("/tables/shedlock/cleanup", 0, 0),
                ("/tables/shedlock/bin\\xff\\x5cx41", 1, 0),
            ],
        ),
        (
            "spring-jdbc-lock",
            vec![
                ("/tables/public.int_lock/DEFAULT/orders", 1, 0),
                (
                    "/tables/public.int_lock/DEFAULT/a7e86136-543b-319d-b246-8ceebf71fb8e",
                    1,
                    0,
                ),
                ("/tables/public.int_lock/eu/west/invoice/42", 1, 0),
                (
                    "/tables/public.int_lock/DEFAULT/2F1E0B7C-1D2E-4A5B-9C8D-0E1F2A3B4C5D",
                    1,
                    0,
                ),
                ("/tables/public.int_lock/x/orders", 0, 0),
            ],
        ),
        ("get-lock-statements", vec![]),
    ];
    let seeds = db_seeds();
    assert_eq!(seeds.len(), want.len());
    for ((name, input), (want_name, locks)) in seeds.iter().zip(want) {
        assert_eq!(*name, want_name);
        let out = db::check(input);
        let found: Vec<(String, usize, usize)> = out
            .innodb
            .iter()
            .chain(&out.pg_rows)
            .chain(&out.advisory)
            .chain(&out.get_lock)
            .chain(&out.tables)
            .chain(&out.spring)
            .map(|l| (l.path.clone(), l.holders.len(), l.waiters.len()))
            .collect();
        let locks: Vec<(String, usize, usize)> = locks
            .into_iter()
            .map(|(p, h, w)| (p.to_string(), h, w))
            .collect();
        assert_eq!(found, locks, "{name}");
    }
}
