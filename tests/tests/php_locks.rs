//! PHP's lock libraries (issue 38) as Debian ships them, driven from php-cli by
//! `tests/php/lockclient.php`: Symfony Lock 5.4's `RedisStore` (a sorted set of tokens scored
//! by expiry, `__write__` while a writer holds, one token per reader) and `PdoStore`
//! (`lock_keys`, an `INTEGER` expiry of Unix seconds), Laravel 8.83's cache locks on Redis
//! (`SET … EX … NX` under the cache prefix) and in the database (`cache_locks`, an `INTEGER`
//! expiry) on PostgreSQL and MariaDB; what lockscope shows against what the servers hold, a
//! lapsed row free, a force release each library notices, expiry columns in milliseconds and
//! of a type lockscope cannot read, and keys under a watched pattern that are no lock counted
//! and sampled, not hidden. Facts are awaited with bounds.

use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use lockscope::backends::database::{DbSourceConfig, LockTableConfig};
use lockscope::config::{section, Config, DbSource, RedisSourceConfig};
use lockscope_model::id::lock_id;
use lockscope_model::wire::{LockMode, LockView};
use lockscope_tests::harness::{eventually, with_admin, Lockscope};
use lockscope_tests::support::dblocks::DbConn;
use lockscope_tests::support::php::{Attempt, Kept, PhpClient};
use lockscope_tests::support::redis::RedisServer;
use lockscope_tests::support::{mysql::MariaDb, postgres::Postgres};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);
const TOKEN: &str = "php-admin-token";

fn now_ms() -> i64 {
    lockscope_tests::shedlock::now_ms()
}

async fn redis_lockscope(server: &RedisServer, dir: &Path) -> Result<Lockscope> {
    let mut source = RedisSourceConfig::new(
        "r",
        &server.url(),
        &["report:*", "laravel_database_laravel_cache:*", "jobs:*"],
    );
    source.watch.reconcile_interval = Duration::from_secs(2);
    let config = with_admin(
        Config {
            sources: section("redis", vec![source]),
            ..Config::default()
        },
        dir,
        TOKEN,
    );
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(WAIT).await?;
    Ok(ls)
}

fn symfony_redis(server: &RedisServer, resource: &str, ttl: f64, read: bool) -> Value {
    json!({"kind": "symfony-redis", "host": "127.0.0.1", "port": server.port(),
           "resource": resource, "ttl": ttl, "read": read})
}

async fn zrange(server: &RedisServer, key: &str) -> Result<Vec<(String, f64)>> {
    let mut conn = server.connection().await?;
    Ok(redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut conn)
        .await?)
}

/// The lock at `key` once lockscope shows each holder scored as the server holds it: Symfony's
/// acquire first scores its token at now + 300 s (its initial TTL), then `refresh()` scores
/// it at now + the lock's TTL, and lockscope may have read the first.
async fn agreed(
    ls: &Lockscope,
    server: &RedisServer,
    key: &str,
) -> Result<(LockView, Vec<(String, f64)>)> {
    let mut last = String::new();
    let found = eventually(WAIT, "lockscope's scores are the server's", async || {
        let members = zrange(server, key).await?;
        let lock = ls.lock("r", &format!("/{key}")).await?;
        Ok(match lock {
            Some(lock) => match check_members(&lock, &members) {
                Ok(()) => Some((lock, members)),
                Err(e) => {
                    last = e.to_string();
                    None
                }
            },
            None => None,
        })
    })
    .await;
    found.with_context(|| last.clone())
}

async fn release(ls: &Lockscope, source: &str, path: &str, body: Value) -> Result<(u16, Value)> {
    ls.release(&lock_id(source, path), Some(TOKEN), &body).await
}

/// Each holder of `lock` is a member of the set scored as its version and lease say.
fn check_members(lock: &LockView, members: &[(String, f64)]) -> Result<()> {
    for holder in &lock.holders {
        let score = members
            .iter()
            .find(|(m, _)| *m == holder.node)
            .map(|(_, s)| s.floor() as i64)
            .with_context(|| format!("{} is not in the set {members:?}", holder.node))?;
        ensure!(
            holder.version == Some(score.to_string()),
            "{holder:?} vs {score}"
        );
        let lease = holder.lease.as_ref().context("no lease")?;
        ensure!(lease.expires_at_ms == Some(score), "{lease:?} vs {score}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symfony_sorted_sets_laravel_tokens_and_unrecognised_keys_on_redis() -> Result<()> {
    let server = RedisServer::start().await?;
    let dir = tempfile::tempdir()?;
    let ls = redis_lockscope(&server, dir.path()).await?;

    // Symfony's write lock: a sorted set of its token and `__write__`, scored by expiry.
    let mut writer = PhpClient::spawn(symfony_redis(&server, "report:daily", 30.0, false)).await?;
    writer.acquire().await?;
    ls.wait_lock("r", "/report:daily", WAIT, "the writer", |l| {
        l.holders.len() == 1
    })
    .await?;
    let (lock, members) = agreed(&ls, &server, "report:daily").await?;
    eprintln!(
        "measured: report:daily holds {members:?}; lockscope shows {:?}",
        lock.holders
    );
    ensure!(members.iter().any(|(m, _)| m == "__write__"), "{members:?}");
    assert_eq!(lock.recipe, "token_zset");
    assert_eq!(lock.holders[0].mode, Some(LockMode::Write));
    assert_ne!(lock.holders[0].node, "__write__", "the marker is no holder");
    check_members(&lock, &members)?;
    let ttl = lock.ttl_ms.context("no TTL")?;
    ensure!((20_000..=30_000).contains(&ttl), "TTL {ttl}");
    ensure!(lock.waiters.is_empty() && lock.flags.contains(&"waiters_not_visible".into()));
    // A reader is refused while the writer holds; the writer lets go and the key goes.
    let mut refused = PhpClient::spawn(symfony_redis(&server, "report:daily", 30.0, true)).await?;
    ensure!(refused.try_acquire().await? == Attempt::Busy);
    ensure!(writer.release().await? == Kept::Yes);
    eventually(WAIT, "the write lock gone", async || {
        Ok(ls.lock("r", "/report:daily").await?.is_none().then_some(()))
    })
    .await?;

    // Two readers share one lock, each token with its own expiry; the key lives to the later.
    let mut first = PhpClient::spawn(symfony_redis(&server, "report:shared", 30.0, true)).await?;
    let mut second = PhpClient::spawn(symfony_redis(&server, "report:shared", 60.0, true)).await?;
    first.acquire().await?;
    second.acquire().await?;
    ls.wait_lock("r", "/report:shared", WAIT, "two readers", |l| {
        l.holders.len() == 2
    })
    .await?;
    let (lock, members) = agreed(&ls, &server, "report:shared").await?;
    eprintln!(
        "measured: report:shared holds {members:?}; lockscope shows {:?}",
        lock.holders
    );
    ensure!(
        lock.holders.iter().all(|h| h.mode == Some(LockMode::Read)),
        "{lock:?}"
    );
    check_members(&lock, &members)?;
    let ttl = lock.ttl_ms.context("no TTL")?;
    ensure!(
        (45_000..=60_000).contains(&ttl),
        "TTL {ttl}: the later reader's"
    );
    // A writer is refused while they read.
    let mut blocked =
        PhpClient::spawn(symfony_redis(&server, "report:shared", 30.0, false)).await?;
    ensure!(blocked.try_acquire().await? == Attempt::Busy);

    // Force release of the first reader: a stale score is refused and changes nothing; the
    // score shown removes exactly that token; Symfony's refresh then finds its lock gone.
    let shorter = lock
        .holders
        .iter()
        .min_by_key(|h| h.lease.as_ref().and_then(|l| l.expires_at_ms))
        .context("no holder")?
        .clone();
    let (status, body) = release(
        &ls,
        "r",
        "/report:shared",
        json!({"holder": shorter.node, "version": "1000", "reason": "stale look"}),
    )
    .await?;
    ensure!(status == 409, "a stale score answered {status}: {body}");
    ensure!(zrange(&server, "report:shared").await?.len() == 2);
    let (status, body) = release(
        &ls,
        "r",
        "/report:shared",
        json!({"holder": shorter.node, "version": shorter.version, "reason": "stuck report"}),
    )
    .await?;
    ensure!(status == 200, "release answered {status}: {body}");
    let members = zrange(&server, "report:shared").await?;
    ensure!(
        members.len() == 1 && members[0].0 != shorter.node,
        "{members:?}"
    );
    // The reader that was released is the one with the shorter ttl (30 s): `first`.
    let lost = first.refresh().await?;
    ensure!(
        matches!(lost, Kept::Lost(_)),
        "Symfony still thinks it holds: {lost:?}"
    );
    eprintln!("measured: after the force release Symfony's refresh says {lost:?}");
    ensure!(
        second.refresh().await? == Kept::Yes,
        "the other reader keeps its lock"
    );
    ls.wait_lock("r", "/report:shared", WAIT, "one reader left", |l| {
        l.holders.len() == 1 && l.holders[0].node != shorter.node
    })
    .await?;
    ensure!(second.release().await? == Kept::Yes);
    ensure!(
        blocked.try_acquire().await? != Attempt::Busy,
        "the writer gets it now"
    );
    ensure!(blocked.release().await? == Kept::Yes);
    drop(refused);

    // Laravel's Redis lock: a token under the cache prefix, EX 30; a second owner is refused.
    let laravel = |name: &str, seconds: u64| {
        json!({"kind": "laravel-redis", "host": "127.0.0.1", "port": server.port(),
               "prefix": "laravel_database_", "cache_prefix": "laravel_cache",
               "name": name, "seconds": seconds})
    };
    let mut owner = PhpClient::spawn(laravel("invoice-42", 30)).await?;
    let token = owner.acquire().await?.context("Laravel names its owner")?;
    let path = "/laravel_database_laravel_cache:invoice-42";
    let lock = ls
        .wait_lock("r", path, WAIT, "Laravel's lock", |l| l.holders.len() == 1)
        .await?;
    assert_eq!(lock.recipe, "token_lock");
    assert_eq!(lock.holders[0].node, token);
    let ttl = lock.ttl_ms.context("no TTL")?;
    ensure!((20_000..=30_000).contains(&ttl), "TTL {ttl}");
    let mut other = PhpClient::spawn(laravel("invoice-42", 30)).await?;
    ensure!(other.try_acquire().await? == Attempt::Busy);
    // Force release compares the token: Laravel's own release then finds nothing of its own,
    // and the next owner gets the lock.
    let (status, body) = release(
        &ls,
        "r",
        path,
        json!({"holder": token, "reason": "stuck invoice"}),
    )
    .await?;
    ensure!(status == 200, "release answered {status}: {body}");
    ensure!(matches!(owner.release().await?, Kept::Lost(_)));
    ensure!(matches!(other.try_acquire().await?, Attempt::Acquired(_)));
    // A holder that crashes: its key stays until its TTL, then lockscope books the expiry.
    let mut crashing = PhpClient::spawn(laravel("invoice-7", 1)).await?;
    crashing.acquire().await?;
    crashing.crash().await?;
    let path7 = "/laravel_database_laravel_cache:invoice-7";
    eventually(WAIT, "the crashed holder's lock expired", async || {
        let detail = ls.detail("r", path7).await;
        Ok(detail.ok().filter(|d| {
            d.gone
                && d.events
                    .iter()
                    .any(|e| e.cause == Some(lockscope_model::wire::ReleaseCause::TtlExpired))
        }))
    })
    .await?;

    // Keys under a watched pattern that no recipe reads: counted and sampled, not hidden.
    let mut conn = server.connection().await?;
    let _: () = redis::cmd("SADD")
        .arg("jobs:set")
        .arg("a")
        .arg("b")
        .query_async(&mut conn)
        .await?;
    let _: String = redis::cmd("XADD")
        .arg("jobs:stream")
        .arg("*")
        .arg("k")
        .arg("v")
        .query_async(&mut conn)
        .await?;
    let _: () = redis::cmd("ZADD")
        .arg("jobs:board")
        .arg(1)
        .arg("alice")
        .query_async(&mut conn)
        .await?;
    let _: () = redis::cmd("RPUSH")
        .arg("jobs:queue")
        .arg("payload-1")
        .query_async(&mut conn)
        .await?;
    let source = ls
        .source_where(WAIT, "r", "four unrecognised keys", |s| s.unrecognised == 4)
        .await?;
    eprintln!("measured: source r shows {:?}", source.unrecognised_sample);
    let kinds: Vec<(&str, &str)> = source
        .unrecognised_sample
        .iter()
        .map(|k| (k.key.as_str(), k.kind.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("jobs:board", "zset"),
            ("jobs:queue", "list"),
            ("jobs:set", "set"),
            ("jobs:stream", "stream")
        ]
    );
    let queue = &source.unrecognised_sample[1];
    assert_eq!((queue.size, queue.head.as_str()), (Some(1), "payload-1"));
    ensure!(
        ls.lock("r", "/jobs:set").await?.is_none(),
        "not shown as a lock"
    );
    let metric = ls
        .metric("lockscope_unrecognised_keys{source=\"r\"}")
        .await?;
    ensure!(metric == Some(4.0), "{metric:?}");
    // One goes: the count follows.
    let _: () = redis::cmd("DEL")
        .arg("jobs:set")
        .query_async(&mut conn)
        .await?;
    ls.source_where(WAIT, "r", "three unrecognised keys", |s| {
        s.unrecognised == 3 && s.unrecognised_sample.iter().all(|k| k.key != "jobs:set")
    })
    .await?;
    Ok(())
}

/// One database for the lock-table test.
enum Db {
    Postgres(Postgres),
    MariaDb(MariaDb),
}

impl Db {
    fn url(&self) -> String {
        match self {
            Db::Postgres(p) => p.url(),
            Db::MariaDb(m) => m.app_url(),
        }
    }

    async fn conn(&self) -> Result<DbConn> {
        match self {
            Db::Postgres(p) => p.connect("schema").await,
            Db::MariaDb(m) => m.connect().await,
        }
    }

    fn laravel(&self, name: &str, seconds: u64) -> Value {
        let (driver, port, database, username) = match self {
            Db::Postgres(p) => ("pgsql", p.port(), "postgres", "postgres"),
            Db::MariaDb(m) => ("mysql", m.port(), "app", "root"),
        };
        json!({"kind": "laravel-db", "driver": driver, "host": "127.0.0.1", "port": port,
               "database": database, "username": username, "password": "",
               "table": "cache_locks", "cache_prefix": "laravel_cache", "name": name,
               "seconds": seconds, "create": true})
    }

    fn symfony(&self, resource: &str, ttl: f64) -> Value {
        let (dsn, username) = match self {
            Db::Postgres(p) => (
                format!("pgsql:host=127.0.0.1;port={};dbname=postgres", p.port()),
                "postgres",
            ),
            Db::MariaDb(m) => (
                format!("mysql:host=127.0.0.1;port={};dbname=app", m.port()),
                "root",
            ),
        };
        json!({"kind": "symfony-pdo", "dsn": dsn, "username": username, "password": "",
               "resource": resource, "ttl": ttl})
    }

    fn source(&self) -> DbSource {
        let mut config = DbSourceConfig::new("d", &self.url());
        config.poll_interval = Duration::from_millis(200);
        let mut millis = LockTableConfig::new("app_locks", "name", "holder", Some("until_ms"));
        millis.until_unit = Some("ms".into());
        config.lock_tables = vec![
            LockTableConfig::new("cache_locks", "key", "owner", Some("expiration")),
            LockTableConfig::new("lock_keys", "key_id", "key_token", Some("key_expiration")),
            millis,
            LockTableConfig::new("odd_locks", "name", "holder", Some("until_text")),
        ];
        match self {
            Db::Postgres(_) => DbSource::postgres(config),
            Db::MariaDb(_) => DbSource::mysql(config),
        }
    }
}

async fn integer_expiry_columns(db: Db) -> Result<()> {
    let label = match db {
        Db::Postgres(_) => "PostgreSQL",
        Db::MariaDb(_) => "MariaDB",
    };
    // The libraries make their own tables (Laravel through its schema builder, Symfony on its
    // first save); the other two are an application's own.
    let mut laravel = PhpClient::spawn(db.laravel("invoice-42", 300)).await?;
    let owner = laravel
        .acquire()
        .await?
        .context("Laravel names its owner")?;
    let mut symfony = PhpClient::spawn(db.symfony("report:daily", 300.0)).await?;
    symfony.acquire().await?;
    let mut conn = db.conn().await?;
    conn.exec("CREATE TABLE app_locks (name VARCHAR(64) PRIMARY KEY, holder VARCHAR(64), until_ms BIGINT)").await?;
    conn.exec("CREATE TABLE odd_locks (name VARCHAR(64) PRIMARY KEY, holder VARCHAR(64), until_text VARCHAR(64))").await?;
    let until_ms = now_ms() + 120_000;
    conn.exec(&format!(
        "INSERT INTO app_locks VALUES ('nightly', 'worker-3', {until_ms})"
    ))
    .await?;
    conn.exec("INSERT INTO odd_locks VALUES ('x', 'y', 'tomorrow')")
        .await?;

    let dir = tempfile::tempdir()?;
    let config = with_admin(
        Config {
            sources: section(
                match db {
                    Db::Postgres(_) => "postgres",
                    Db::MariaDb(_) => "mysql",
                },
                vec![db.source()],
            ),
            ..Config::default()
        },
        dir.path(),
        TOKEN,
    );
    let ls = Lockscope::start(config).await?;

    // Laravel's row: held by its owner until its INTEGER expiry (Unix seconds).
    let path = "/tables/cache_locks/laravel_cacheinvoice-42";
    let lock = ls
        .wait_lock("d", path, WAIT, "Laravel's row held", |l| {
            l.holders.len() == 1
        })
        .await?;
    assert_eq!(lock.holders[0].node, owner);
    let expires = lock.expires_at_ms.context("no expiry")?;
    let ahead = expires - now_ms();
    eprintln!(
        "measured: {label} Laravel row expires in {ahead} ms (acquired for 300 s); version {:?}",
        lock.holders[0].version
    );
    ensure!(
        (280_000..=301_000).contains(&ahead),
        "{label}: expiry {ahead} ms ahead"
    );
    ensure!(!lock.flags.contains(&"expired".to_string()), "{lock:?}");
    // Symfony's row: key_id is the SHA-256 of the resource, its token the holder.
    let key_id = sha256_hex("report:daily");
    let lock = ls
        .wait_lock(
            "d",
            &format!("/tables/lock_keys/{key_id}"),
            WAIT,
            "Symfony's row held",
            |l| l.holders.len() == 1,
        )
        .await?;
    let ahead = lock.expires_at_ms.context("no expiry")? - now_ms();
    ensure!(
        (280_000..=302_000).contains(&ahead),
        "{label}: Symfony expiry {ahead} ms ahead"
    );
    // Milliseconds with until_unit = "ms".
    let lock = ls
        .wait_lock(
            "d",
            "/tables/app_locks/nightly",
            WAIT,
            "a BIGINT ms expiry",
            |l| l.holders.len() == 1,
        )
        .await?;
    // Shown on lockscope's clock: the server's instants are shifted by the clock difference
    // a round measures (milliseconds here, one host).
    let shown = lock.expires_at_ms.context("no expiry")?;
    ensure!((shown - until_ms).abs() < 1_000, "{shown} vs {until_ms}");
    // A text expiry cannot be read: the source says which table and column, the rest works.
    let source = ls
        .source_where(WAIT, "d", "the text expiry column named", |s| {
            s.error
                .as_deref()
                .is_some_and(|e| e.contains("odd_locks.until_text"))
        })
        .await?;
    eprintln!("measured: {label} source error: {:?}", source.error);
    ensure!(ls.lock("d", "/tables/odd_locks/x").await?.is_none());

    // A lapsed row is free: a Laravel lock of one second, not released.
    let mut brief = PhpClient::spawn(db.laravel("brief", 1)).await?;
    brief.acquire().await?;
    let lock = ls
        .wait_lock(
            "d",
            "/tables/cache_locks/laravel_cachebrief",
            WAIT,
            "the lapsed row free",
            |l| l.holders.is_empty() && l.flags.contains(&"expired".to_string()),
        )
        .await?;
    eprintln!("measured: {label} lapsed row shown {:?}", lock.flags);

    // Force release of Laravel's row sets its expiry to now (as the library's takeover reads
    // it); a second owner then gets the lock, and the first finds it is no longer its own.
    let mut next = PhpClient::spawn(db.laravel("invoice-42", 300)).await?;
    ensure!(next.try_acquire().await? == Attempt::Busy);
    let lock = ls.lock("d", path).await?.context("no lock")?;
    let holder = &lock.holders[0];
    let (status, body) = release(
        &ls,
        "d",
        path,
        json!({"holder": holder.node, "version": "1", "reason": "stale look"}),
    )
    .await?;
    ensure!(
        status == 409,
        "{label}: a stale expiry answered {status}: {body}"
    );
    let (status, body) = release(
        &ls,
        "d",
        path,
        json!({"holder": holder.node, "version": holder.version, "reason": "stuck invoice"}),
    )
    .await?;
    ensure!(status == 200, "{label}: release answered {status}: {body}");
    ensure!(
        matches!(next.try_acquire().await?, Attempt::Acquired(_)),
        "{label}: takeover"
    );
    ensure!(
        laravel.refresh().await? != Kept::Yes,
        "{label}: Laravel still thinks it owns it"
    );
    ensure!(next.release().await? == Kept::Yes);
    ensure!(symfony.release().await? == Kept::Yes);
    Ok(())
}

fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn integer_expiry_columns_on_postgres() -> Result<()> {
    integer_expiry_columns(Db::Postgres(Postgres::start().await?)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn integer_expiry_columns_on_mariadb() -> Result<()> {
    integer_expiry_columns(Db::MariaDb(MariaDb::start().await?)).await
}
