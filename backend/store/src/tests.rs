//! The store against real SQLite files (PostgreSQL and replicas: `tests/tests/store_replicas.rs`).

use super::*;
use lockscope_model::wire::{EventKind, ReleaseCause};
use sqlx::Connection;

/// How long a test waits for a fact before it fails.
const PATIENCE: Duration = Duration::from_secs(60);

fn config(path: &std::path::Path) -> StoreConfig {
    StoreConfig {
        url: Some(format!("sqlite://{}", path.display())),
        replica: Some("test".into()),
        ..StoreConfig::default()
    }
}

fn audit_record(name: &str) -> AuditRecord {
    AuditRecord {
        id: 0,
        at_ms: 1,
        token_name: name.into(),
        source: "zk".into(),
        lock_id: "zk~l".into(),
        observed_holder: "/l/n".into(),
        outcome: "released".into(),
        reason: "stuck".into(),
        detail: "{}".into(),
        client: "127.0.0.1".into(),
        finished_ms: Some(2),
    }
}

fn event(at: i64, kind: &str) -> LockEvent {
    LockEvent {
        at_ms: at,
        kind: EventKind::parse(kind).expect("a kind"),
        node: "/l/n".into(),
        session: "0x1".into(),
        cause: (kind == "released").then_some(ReleaseCause::Forced),
        duration_ms: Some(5),
    }
}

/// Polls `fact` until it holds; fails after [`PATIENCE`].
async fn wait_until<F: std::future::Future<Output = bool>>(
    what: &str,
    mut fact: impl FnMut() -> F,
) {
    let deadline = Instant::now() + PATIENCE;
    while !fact().await {
        assert!(Instant::now() < deadline, "still not so: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A lock's stored events, oldest first (every page).
async fn stored(store: &Store, lock: &str) -> Vec<LockEvent> {
    let mut out = Vec::new();
    let mut before = None;
    loop {
        let Ok(page) = store.lock_events(lock, 1000, before).await else {
            return Vec::new();
        };
        out.extend(page.events.into_iter().map(|e| e.event));
        match page.next_before {
            Some(next) => before = Some(next),
            None => break,
        }
    }
    out.reverse();
    out
}

async fn writing(store: &Store) {
    wait_until("the store is connected and this process writes", || async {
        store.writing()
    })
    .await;
}

#[tokio::test]
async fn audit_and_history_survive_reopening_and_page_backwards() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store.db");
    let store = Store::open(&config(&path)).expect("open");
    writing(&store).await;
    let id = store.audit(audit_record("alice")).await.expect("audit");
    assert!(id > 0);
    store.record(
        (0..250)
            .map(|i| ("zk~l".to_string(), event(10 + i, "acquired")))
            .chain([("zk~other".to_string(), event(15, "acquired"))])
            .collect(),
    );
    wait_until("every event is stored", || async {
        stored(&store, "zk~l").await.len() == 250
    })
    .await;
    let first = store.lock_events("zk~l", 100, None).await.expect("page");
    assert_eq!(first.events.len(), 100);
    assert_eq!(first.events[0].event.at_ms, 259, "newest first");
    let second = store
        .lock_events("zk~l", 100, first.next_before)
        .await
        .expect("page 2");
    assert_eq!(second.events[0].event.at_ms, 159);
    let third = store
        .lock_events("zk~l", 100, second.next_before)
        .await
        .expect("page 3");
    assert_eq!((third.events.len(), third.next_before), (50, None));
    assert!(store.close(PATIENCE).await);

    let store = Store::open(&config(&path)).expect("reopen");
    wait_until("the store is connected", || async {
        store.status().connected
    })
    .await;
    let audits = store.audits(10, None).await.expect("audits");
    assert_eq!(audits.len(), 1);
    assert_eq!(audits[0].token_name, "alice");
    assert_eq!(stored(&store, "zk~l").await.len(), 250);
    assert_eq!(store.status().schema_version, Some(4));
}

#[tokio::test]
async fn pending_records_are_finished_and_the_log_pages_backwards() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&config(&dir.path().join("store.db"))).expect("open");
    wait_until("connected", || async { store.status().connected }).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let mut record = audit_record(&format!("t{i}"));
        record.outcome = "pending".into();
        record.finished_ms = None;
        ids.push(store.audit(record).await.expect("audit"));
    }
    store
        .audit_finish(ids[2], "released", "{\"ok\":1}".into(), 42)
        .await
        .expect("finish");
    assert!(store
        .audit_finish(9_999, "released", "{}".into(), 1)
        .await
        .is_err());
    let first = store.audits(2, None).await.expect("page 1");
    assert_eq!(
        first.iter().map(|a| a.id).collect::<Vec<_>>(),
        vec![ids[4], ids[3]]
    );
    let second = store.audits(2, Some(ids[3])).await.expect("page 2");
    assert_eq!(
        (second[0].outcome.as_str(), second[0].finished_ms),
        ("released", Some(42))
    );
    assert_eq!(
        (second[1].outcome.as_str(), second[1].finished_ms),
        ("pending", None)
    );
    assert_eq!(store.audits(2, Some(ids[0])).await.expect("end").len(), 0);
}

#[tokio::test]
async fn a_store_written_before_migrations_is_adopted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("old.db");
    {
        let mut conn = sqlx::SqliteConnection::connect_with(
            &sqlx::sqlite::SqliteConnectOptions::new()
                .filename(&path)
                .create_if_missing(true),
        )
        .await
        .expect("open");
        for sql in [
            "CREATE TABLE audit (id INTEGER PRIMARY KEY AUTOINCREMENT, at_ms INTEGER NOT NULL, \
             token_name TEXT NOT NULL, source TEXT NOT NULL, lock_id TEXT NOT NULL, \
             observed_holder TEXT NOT NULL, outcome TEXT NOT NULL, reason TEXT NOT NULL, \
             detail TEXT NOT NULL)",
            "INSERT INTO audit (at_ms, token_name, source, lock_id, observed_holder, outcome, \
             reason, detail) VALUES (1, 'old', 'zk', 'zk~l', '/l/n', 'released', 'r', '{}')",
            "CREATE TABLE lock_events (id INTEGER PRIMARY KEY AUTOINCREMENT, lock_id TEXT NOT NULL, \
             at_ms INTEGER NOT NULL, kind TEXT NOT NULL, node TEXT NOT NULL, session TEXT NOT NULL, \
             cause TEXT, duration_ms INTEGER)",
            "INSERT INTO lock_events (lock_id, at_ms, kind, node, session) \
             VALUES ('zk~l', 5, 'acquired', '/l/n', '0x1')",
        ] {
            sqlx::query(sql).execute(&mut conn).await.expect(sql);
        }
    }
    let store = Store::open(&config(&path)).expect("open old");
    wait_until("connected", || async { store.status().connected }).await;
    store.audit(audit_record("new")).await.expect("audit");
    let audits = store.audits(10, None).await.expect("audits");
    assert_eq!(audits.len(), 2);
    assert_eq!(
        (audits[1].token_name.as_str(), audits[1].client.as_str()),
        ("old", "")
    );
    assert_eq!(stored(&store, "zk~l").await.len(), 1);
    assert!(store.close(PATIENCE).await);
}

#[tokio::test]
async fn a_store_with_a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store.db");
    let store = Store::open(&config(&path)).expect("open");
    wait_until("connected", || async { store.status().connected }).await;
    assert!(store.close(PATIENCE).await);
    {
        let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
            .await
            .expect("open");
        sqlx::query(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (99, 'from the future', TRUE, X'00', 1)",
        )
        .execute(&mut conn)
        .await
        .expect("a newer migration");
    }
    let refused = Store::preflight(&config(&path), PATIENCE).await;
    let text = refused.expect_err("refused").to_string();
    assert!(
        text.contains("version 99") && text.contains("newer"),
        "{text}"
    );
    // Met while running (the store migrated by a newer replica meanwhile): not used, and said.
    let store = Store::open(&config(&path)).expect("open");
    wait_until("the schema is reported", || async {
        store
            .status()
            .error
            .is_some_and(|e| e.contains("version 99"))
    })
    .await;
    assert!(!store.status().connected);
}

#[tokio::test]
async fn past_the_buffer_the_oldest_events_are_dropped_and_counted_then_the_rest_lands() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The store's directory does not exist yet: the store is "down" at start.
    let path = dir.path().join("later").join("store.db");
    let mut config = config(&path);
    config.buffer_events = 1_000;
    let store = Store::open(&config).expect("open");
    wait_until("the failure is reported", || async {
        store.status().error.is_some()
    })
    .await;
    for i in 0..3_500 {
        store.record(vec![("zk~storm".into(), event(i, "acquired"))]);
    }
    assert_eq!(
        (store.events_dropped(), store.queue_depth()),
        (2_500, 1_000)
    );
    let status = store.status();
    assert!(!status.connected && status.error.is_some(), "{status:?}");
    std::fs::create_dir(dir.path().join("later")).expect("mkdir");
    wait_until("the newest events are stored", || async {
        stored(&store, "zk~storm").await.len() == 1_000
    })
    .await;
    let events = stored(&store, "zk~storm").await;
    assert_eq!((events[0].at_ms, events[999].at_ms), (2_500, 3_499));
    assert_eq!(store.queue_depth(), 0);
    assert!(store.status().connected && store.status().error.is_none());
}

#[tokio::test]
async fn closing_writes_what_is_pending() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store.db");
    let store = Store::open(&config(&path)).expect("open");
    writing(&store).await;
    store.record(
        (0..10_000)
            .map(|i| ("zk~last".to_string(), event(i, "acquired")))
            .collect(),
    );
    assert!(store.close(PATIENCE).await);
    let mut conn = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .expect("open");
    let count: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM lock_events WHERE lock_id = 'zk~last'")
            .fetch_one(&mut conn)
            .await
            .expect("count");
    assert_eq!(count, 10_000);
}

/// The live table as a test sets it.
#[derive(Default)]
struct Table {
    locks: Mutex<std::collections::BTreeMap<Arc<str>, LockView>>,
    synced: AtomicBool,
}

struct Record(LockView);

impl LockRecord for Record {
    fn view(&self, _: &str) -> LockView {
        self.0.clone()
    }
}

impl LiveLocks for Table {
    fn page(
        &self,
        prefix: &str,
        after: Option<&str>,
        n: usize,
    ) -> Vec<(Arc<str>, Arc<dyn LockRecord>)> {
        self.locks
            .lock()
            .expect("table")
            .iter()
            .filter(|(id, _)| id.starts_with(prefix) && after.is_none_or(|a| &***id > a))
            .take(n)
            .map(|(id, v)| {
                (
                    id.clone(),
                    Arc::new(Record(v.clone())) as Arc<dyn LockRecord>,
                )
            })
            .collect()
    }

    fn sources(&self) -> Vec<(String, bool)> {
        vec![("zk".into(), self.synced.load(Ordering::Relaxed))]
    }
}

fn view(id: &str) -> LockView {
    LockView {
        id: id.into(),
        source: "zk".into(),
        path: id.trim_start_matches("zk~").into(),
        ..LockView::default()
    }
}

#[tokio::test]
async fn every_lock_keeps_its_last_state_and_those_gone_unwatched_are_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store.db");
    let table = Arc::new(Table::default());
    for id in ["zk~a", "zk~b", "zk~c"] {
        table
            .locks
            .lock()
            .expect("table")
            .insert(Arc::from(id), view(id));
    }
    table.synced.store(true, Ordering::Relaxed);
    let store = Store::open(&config(&path)).expect("open");
    store.attach(table.clone());
    wait_until("every live lock is stored", || async {
        store.lock_state("zk~c").await.ok().flatten().is_some()
    })
    .await;
    // `b` goes while this lockscope watches.
    store.lock_states([(
        Arc::from("zk~b"),
        StateChange::Gone {
            last: Arc::new(Record(view("zk~b"))),
            at_ms: 42,
        },
    )]);
    wait_until("b is stored as gone", || async {
        store
            .lock_state("zk~b")
            .await
            .ok()
            .flatten()
            .is_some_and(|s| s.gone_ms == Some(42) && !s.gone_unseen)
    })
    .await;
    assert!(store.close(PATIENCE).await);
    // `a` goes while no lockscope runs; the next one finds it missing once `zk` is read.
    let table = Arc::new(Table::default());
    table
        .locks
        .lock()
        .expect("table")
        .insert(Arc::from("zk~c"), view("zk~c"));
    let store = Store::open(&config(&path)).expect("reopen");
    store.attach(table.clone());
    writing(&store).await;
    let a = store.lock_state("zk~a").await.expect("read").expect("a");
    assert_eq!(a.gone_ms, None, "not judged before the source is read");
    table.synced.store(true, Ordering::Relaxed);
    wait_until("a is found gone", || async {
        store
            .lock_state("zk~a")
            .await
            .ok()
            .flatten()
            .is_some_and(|s| s.gone_unseen && s.gone_ms.is_some())
    })
    .await;
    let c = store.lock_state("zk~c").await.expect("read").expect("c");
    assert_eq!(c.gone_ms, None);
    let b = store.lock_state("zk~b").await.expect("read").expect("b");
    assert_eq!((b.gone_ms, b.gone_unseen), (Some(42), false));
}

/// The fencing itself, on one SQLite file and two writer connections: once another writer has
/// taken the lease (the next token), a write with the old token fails as `Fenced` and leaves
/// nothing behind; a lease that has not run out, held by an open session, is not taken.
#[tokio::test]
async fn a_write_with_a_superseded_token_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store.db");
    let location = Location::Sqlite(path.clone());
    let config = config(&path);
    let pool = db::Db::connect(&location, &config).await.expect("pool");
    pool.migrate().await.expect("migrate");
    let mut old = db::Db::writer_conn(&location, &config)
        .await
        .expect("old writer");
    let mut new = db::Db::writer_conn(&location, &config)
        .await
        .expect("new writer");
    let lease_ms = 60_000;
    let first = old
        .take_lease("old", 0, lease_ms, None, false)
        .await
        .expect("take")
        .expect("a fresh store's lease is free");
    let fence = db::Fence {
        token: first,
        lease_ms,
    };
    old.write_events(fence, &[("zk~l".into(), event(1, "acquired"))], "old", 1)
        .await
        .expect("the holder writes");
    // Unexpired and its session not known gone: not taken.
    let refused = new
        .take_lease("new", 0, lease_ms, Some(first), false)
        .await
        .expect("ask");
    assert_eq!(refused, None);
    // Its session gone (as a taking-over replica finds it, or ends it): taken.
    let second = new
        .take_lease("new", 0, lease_ms, Some(first), true)
        .await
        .expect("take over")
        .expect("taken");
    assert!(second > first);
    let stale = old
        .write_events(fence, &[("zk~l".into(), event(2, "released"))], "old", 2)
        .await;
    assert!(matches!(stale, Err(StoreError::Fenced)), "{stale:?}");
    assert!(matches!(
        old.renew(fence, None).await,
        Err(StoreError::Fenced)
    ));
    let rows = pool.read_lock_events("zk~l", 10, None).await.expect("read");
    assert_eq!(rows.len(), 1, "the superseded writer wrote nothing");
    let lease = new.lease().await.expect("lease").expect("held");
    assert_eq!((lease.replica.as_str(), lease.token), ("new", second));
}
