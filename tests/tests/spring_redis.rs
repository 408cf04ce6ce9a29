//! Spring Integration `RedisLockRegistry` on a real Redis, driven by the source-faithful client
//! of `redis_recipes/spring.rs` (spring-integration 7.2.0-SNAPSHOT at f369e899): a configured registry
//! key makes its keys `spring_redis_lock` (the holder is the registry's client id), the same
//! layout under an unconfigured prefix stays a token lock, a force release through the admin
//! API compares the client id, unlinks and publishes the key so a PUB_SUB_LOCK waiter wakes by
//! the message (a SPIN_LOCK waiter by its own poll), a holder that stops renewing lets its key
//! expire, and on a Cluster the publish reaches a waiter subscribed through another master.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use lockscope::config::{section, Config, RedisSourceConfig};
use lockscope_model::id::lock_id;
use lockscope_model::wire::{EventKind, LockView, ReleaseCause};
use lockscope_tests::harness::{eventually, Lockscope};
use lockscope_tests::redis_recipes::{
    random_uuid, SpringAcquire, SpringLockRegistry, SpringUnlockListener, SPRING_DEFAULT_IDLE,
};
use lockscope_tests::support::redis::{RedisCluster, RedisServer};
use serde_json::{json, Value};

const TOKEN: &str = "oncall-token-spring-0123456789abcdef";
const WAIT: Duration = Duration::from_secs(15);
/// A waiter's `tryLock` time: far longer than any bound these tests wait, so a waiter that
/// acquires within them was woken by the unlock message (or its poll), never by its timeout.
const LONG_WAIT: Duration = Duration::from_secs(600);

/// Admin on, watching `orders:*` (a configured registry) and `billing:*` (a registry lockscope
/// is not told about).
fn config(url: &str, cluster: bool, dir: &std::path::Path) -> Config {
    let mut source = RedisSourceConfig::new("r", url, &["orders:*", "billing:*"]);
    source.cluster = cluster;
    source.spring_lock_registries = vec!["orders".into()];
    source.watch.reconcile_interval = Duration::from_secs(2);
    let mut config = lockscope_tests::harness::with_admin(
        Config {
            sources: section("redis", vec![source]),
            ..Config::default()
        },
        dir,
        TOKEN,
    );
    config.admin.max_releases_per_minute = 1000;
    config
}

async fn wait_key(
    ls: &Lockscope,
    key: &str,
    what: &str,
    check: impl Fn(&LockView) -> bool,
) -> Result<LockView> {
    ls.wait_lock("r", &format!("/{key}"), WAIT, what, check)
        .await
}

async fn release(ls: &Lockscope, key: &str, holder: &str) -> Result<(u16, Value)> {
    let id = lock_id("r", &format!("/{key}"));
    ls.release(
        &id,
        Some(TOKEN),
        &json!({"holder": holder, "reason": "spring registry holder stuck"}),
    )
    .await
}

/// A PUB_SUB_LOCK `tryLock(LONG_WAIT)` of `lock_key` by `registry`, running until it returns.
fn spawn_pub_sub_waiter(
    registry: Arc<SpringLockRegistry>,
    listener: Arc<SpringUnlockListener>,
    mut conn: redis::aio::MultiplexedConnection,
    lock_key: &'static str,
) -> tokio::task::JoinHandle<Result<SpringAcquire>> {
    tokio::spawn(async move {
        registry
            .try_lock_pub_sub(&mut conn, &listener, lock_key, LONG_WAIT)
            .await
    })
}

/// Waits until `listener`'s registry has a waiter registered for `key` (in its wait, or about
/// to enter it: a message from then on completes it).
async fn wait_waiting(listener: &SpringUnlockListener, key: &str) -> Result<()> {
    eventually(WAIT, &format!("a waiter registered on {key}"), async || {
        Ok(listener.waiting_on(key).then_some(()))
    })
    .await
}

/// The result of a waiter task, which must end well within [`LONG_WAIT`].
async fn joined<T>(task: tokio::task::JoinHandle<Result<T>>, who: &str) -> Result<T> {
    tokio::time::timeout(WAIT, task)
        .await
        .with_context(|| format!("{who} did not acquire"))?
        .with_context(|| format!("{who} panicked"))?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_registry_is_shown_released_by_client_id_and_its_waiters_wake() -> Result<()> {
    let server = RedisServer::start().await?;
    let dir = tempfile::tempdir()?;
    let ls = Lockscope::start(config(&server.url(), false, dir.path())).await?;
    ls.wait_ready(Duration::from_secs(30)).await?;
    let mut conn = server.connection().await?;

    // Holder A: PX 60 s, its client id as the value.
    let a = SpringLockRegistry::new("orders");
    ensure!(a.obtain(&mut conn, "job-7", a.expire_after_ms).await?);
    let key = a.key("job-7");
    let lock = wait_key(&ls, &key, "A holds orders:job-7", |l| l.holders.len() == 1).await?;
    ensure!(lock.recipe == "spring_redis_lock", "{lock:?}");
    ensure!(lock.path == "orders:job-7", "{lock:?}");
    let holder = &lock.holders[0];
    ensure!(holder.node == a.client_id, "{holder:?}");
    ensure!(holder.session == a.client_id, "{holder:?}");
    ensure!(
        holder.identity.as_deref() == Some(a.client_id.as_str()),
        "{holder:?}"
    );
    let ttl = lock.ttl_ms.context("a TTL")?;
    ensure!(ttl > 50_000 && ttl <= 60_000, "{ttl}");
    ensure!(
        lock.flags == ["waiters_not_visible"],
        "only waiters_not_visible: {:?}",
        lock.flags
    );
    ensure!(lock.recipe_guess.is_none() && lock.waiters.is_empty() && lock.watchers == 0);

    // Waiter B: another registry instance of the same key, PUB_SUB_LOCK: its listener
    // PSUBSCRIBEs `orders-channel:*`, and it waits far longer than this test would.
    let b = Arc::new(SpringLockRegistry::new("orders"));
    let listener = Arc::new(SpringUnlockListener::start(&server.url(), &b).await?);
    ensure!(listener.pattern() == "orders-channel:*");
    let waiter = spawn_pub_sub_waiter(
        b.clone(),
        listener.clone(),
        server.connection().await?,
        "job-7",
    );
    wait_waiting(&listener, &key).await?;
    // Nothing on the server names it: a pattern subscriber is not counted on the channel a
    // release publishes on, and lockscope still shows one holder and no waiter.
    let (_, subscribers): (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(a.unlock_channel("job-7"))
        .query_async(&mut conn)
        .await?;
    ensure!(subscribers == 0, "{subscribers}");
    let lock = wait_key(&ls, &key, "still A", |l| l.holders.len() == 1).await?;
    ensure!(lock.waiters.is_empty() && lock.holders[0].node == a.client_id);

    // A release naming another client id (B's, a would-be holder; a random one) changes nothing.
    for wrong in [b.client_id.clone(), random_uuid()] {
        let (status, body) = release(&ls, &key, &wrong).await?;
        ensure!(status == 409, "{wrong}: {status} {body}");
    }
    let value: Option<String> = redis::cmd("GET").arg(&key).query_async(&mut conn).await?;
    ensure!(value.as_deref() == Some(a.client_id.as_str()), "{value:?}");
    ensure!(
        listener.received().is_empty(),
        "a refused release published something"
    );

    // The right client id: unlinked, and the key published on the per-key channel (which B's
    // pattern matches) and on the channel of releases before 7.0.0 / 6.5.3 / 6.4.8.
    let (status, body) = release(&ls, &key, &a.client_id).await?;
    ensure!(status == 200, "{status} {body}");
    let woke = &body["released"]["woke"];
    ensure!(woke["message"] == key, "{body}");
    ensure!(
        woke["published"]
            == json!([
                {"channel": "orders-channel:orders:job-7", "receivers": 1},
                {"channel": "orders-channel", "receivers": 0},
            ]),
        "{body}"
    );
    let how = joined(waiter, "waiter B").await?;
    ensure!(
        how == SpringAcquire::AfterMessage,
        "B was not woken by the unlock message: {how:?}"
    );
    ensure!(listener.received() == [key.as_bytes().to_vec()]);
    wait_key(&ls, &key, "B holds", |l| {
        l.holders.first().is_some_and(|h| {
            h.node == b.client_id && h.identity.as_deref() == Some(b.client_id.as_str())
        })
    })
    .await?;
    // A was not told: its renew and its unlock now find another client id and fail, as the
    // registry's do ("Could not renew mutex", ConcurrentModificationException).
    ensure!(!a.renew(&mut conn, "job-7", 60_000).await?);
    ensure!(
        a.uses_scripts(),
        "Redis 7.0 has no SET … IFEQ: the renew script is used"
    );
    ensure!(!a.unlock_pub_sub(&mut conn, "job-7").await?);

    // The audit names the channels and what each publish reached; the history calls the
    // release forced.
    let records = ls.audit_log().await?;
    let record = records
        .iter()
        .find(|r| r.outcome == "released")
        .context("no released record")?;
    ensure!(
        record.detail.contains("orders-channel:orders:job-7")
            && record.detail.contains("\"receivers\":1"),
        "{record:?}"
    );
    ensure!(
        records
            .iter()
            .filter(|r| r.outcome == "holder_changed")
            .count()
            == 2,
        "{records:?}"
    );
    let path = format!("/{key}");
    eventually(WAIT, "A's release booked as forced", async || {
        let detail = ls.detail("r", &path).await?;
        Ok(detail
            .events
            .iter()
            .any(|e| {
                e.kind == EventKind::Released
                    && e.node == a.client_id
                    && e.cause == Some(ReleaseCause::Forced)
            })
            .then_some(()))
    })
    .await?;

    // SPIN_LOCK: a waiter polling every 100 ms (no subscription) picks the key up by itself
    // after a release; the publish does not bother it.
    let holder = SpringLockRegistry::new("orders");
    ensure!(
        holder
            .obtain(&mut conn, "job-8", holder.expire_after_ms)
            .await?
    );
    let spin_key = holder.key("job-8");
    wait_key(&ls, &spin_key, "job-8 held", |l| l.holders.len() == 1).await?;
    let spinner = Arc::new(SpringLockRegistry::new("orders"));
    let spinning = tokio::spawn({
        let (spinner, mut conn) = (spinner.clone(), server.connection().await?);
        async move {
            spinner
                .try_lock_spin(&mut conn, "job-8", LONG_WAIT, SPRING_DEFAULT_IDLE)
                .await
        }
    });
    let (status, body) = release(&ls, &spin_key, &holder.client_id).await?;
    ensure!(status == 200, "{status} {body}");
    ensure!(joined(spinning, "the SPIN_LOCK waiter").await?);
    wait_key(&ls, &spin_key, "the spinner holds", |l| {
        l.holders
            .first()
            .is_some_and(|h| h.node == spinner.client_id)
    })
    .await?;
    // Its own unlock: Redis 7.0 has no `DELEX` (8.4's compare-and-delete), so the registry
    // falls back to its UNLINK script, as it does for `SET … IFEQ` on renew.
    ensure!(!spinner.uses_scripts());
    ensure!(spinner.unlock_spin(&mut conn, "job-8").await?);
    ensure!(spinner.uses_scripts());
    for (command, says) in [
        (
            redis::cmd("DELEX")
                .arg(&spin_key)
                .arg("IFEQ")
                .arg("x")
                .clone(),
            "unknown command",
        ),
        (
            redis::cmd("SET")
                .arg(&spin_key)
                .arg("x")
                .arg("IFEQ")
                .arg("x")
                .arg("PX")
                .arg(1000)
                .clone(),
            "syntax error",
        ),
    ] {
        let answer = command.query_async::<redis::Value>(&mut conn).await;
        ensure!(
            answer.as_ref().is_err_and(|e| e.to_string().contains(says)),
            "{answer:?}"
        );
    }
    let mut last = None;
    eventually(WAIT, "job-8 gone", async || {
        last = ls.lock("r", &format!("/{spin_key}")).await?;
        Ok(last.is_none().then_some(()))
    })
    .await
    .with_context(|| format!("last seen: {last:?}"))?;

    // The same layout under a registry key lockscope was not told about: a token lock.
    let billing = SpringLockRegistry::new("billing");
    ensure!(
        billing
            .obtain(&mut conn, "run-1", billing.expire_after_ms)
            .await?
    );
    let lock = wait_key(&ls, &billing.key("run-1"), "billing held", |l| {
        l.holders.len() == 1
    })
    .await?;
    ensure!(lock.recipe == "token_lock", "{lock:?}");
    ensure!(lock.holders[0].node == billing.client_id, "{lock:?}");
    ensure!(
        lock.holders[0].identity.is_none() && lock.flags.is_empty(),
        "{lock:?}"
    );

    // A holder that renews every third of its 3 s expiry (the registry's renewal task) keeps
    // its key past that expiry, and once it stops (its process died) the key expires.
    let mortal = Arc::new(SpringLockRegistry::with_expire_after("orders", 3_000));
    ensure!(mortal.obtain(&mut conn, "nightly", 3_000).await?);
    let renewals = Arc::new(AtomicU32::new(0));
    let renewing: tokio::task::JoinHandle<Result<()>> = tokio::spawn({
        let (mortal, renewals, mut conn) =
            (mortal.clone(), renewals.clone(), server.connection().await?);
        async move {
            loop {
                tokio::time::sleep(Duration::from_millis(mortal.expire_after_ms / 3)).await;
                if !mortal
                    .renew(&mut conn, "nightly", mortal.expire_after_ms)
                    .await?
                {
                    anyhow::bail!("renew refused");
                }
                renewals.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    let mortal_key = mortal.key("nightly");
    wait_key(&ls, &mortal_key, "nightly held", |l| {
        l.recipe == "spring_redis_lock" && l.ttl_ms.is_some_and(|t| t <= 3_000)
    })
    .await?;
    eventually(WAIT, "three renewals", async || {
        ensure!(!renewing.is_finished(), "the renewal task ended");
        Ok((renewals.load(Ordering::SeqCst) >= 3).then_some(()))
    })
    .await?;
    // Three renewals a second apart: the key outlived its first 3 s only by them.
    let exists: bool = redis::cmd("EXISTS")
        .arg(&mortal_key)
        .query_async(&mut conn)
        .await?;
    ensure!(exists, "{mortal_key} expired while renewed");
    renewing.abort();
    let mut last = None;
    eventually(WAIT, "nightly gone", async || {
        last = ls.lock("r", &format!("/{mortal_key}")).await?;
        Ok(last.is_none().then_some(()))
    })
    .await
    .with_context(|| format!("last seen: {last:?}"))?;
    let detail = ls.detail("r", &format!("/{mortal_key}")).await?;
    ensure!(detail.gone, "{detail:?}");
    ensure!(
        detail.events.last().and_then(|e| e.cause) == Some(ReleaseCause::TtlExpired),
        "{:?}",
        detail.events
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_release_reaches_a_waiter_subscribed_through_another_master() -> Result<()> {
    let cluster = RedisCluster::start(3).await?;
    let dir = tempfile::tempdir()?;
    let ls = Lockscope::start(config(&cluster.urls()[0], true, dir.path())).await?;
    ls.wait_ready(Duration::from_secs(30)).await?;

    let a = SpringLockRegistry::new("orders");
    let key = a.key("cluster-job");
    let owner = cluster.node_for(key.as_bytes()).await?;
    let mut conn = cluster.connection_for(key.as_bytes()).await?;
    ensure!(
        a.obtain(&mut conn, "cluster-job", a.expire_after_ms)
            .await?
    );
    wait_key(&ls, &key, "A holds", |l| {
        l.recipe == "spring_redis_lock" && l.holders.first().is_some_and(|h| h.node == a.client_id)
    })
    .await?;

    // B's listener is connected to a master that does not own the key.
    let b = Arc::new(SpringLockRegistry::new("orders"));
    let elsewhere = cluster.urls()[(owner + 1) % 3].clone();
    let listener = Arc::new(SpringUnlockListener::start(&elsewhere, &b).await?);
    let waiter = spawn_pub_sub_waiter(
        b.clone(),
        listener.clone(),
        cluster.connection_for(key.as_bytes()).await?,
        "cluster-job",
    );
    wait_waiting(&listener, &key).await?;

    let (status, body) = release(&ls, &key, &random_uuid()).await?;
    ensure!(status == 409, "{status} {body}");
    let (status, body) = release(&ls, &key, &a.client_id).await?;
    ensure!(status == 200, "{status} {body}");
    ensure!(
        body["released"]["members"].as_array().map(Vec::len) == Some(1)
            && body["released"]["failed_on"] == json!([]),
        "released on the key's master alone, the others' MOVED no failure: {body}"
    );
    // PUBLISH counts the subscribers of the node it ran on: B listens elsewhere, so 0 here,
    // and the answer says so; the cluster bus still delivers it to B.
    let woke = &body["released"]["woke"];
    ensure!(
        woke["published"][0]
            == json!({"channel": "orders-channel:orders:cluster-job", "receivers": 0})
            && woke["note"]
                .as_str()
                .is_some_and(|n| n.contains("key's master only")),
        "{body}"
    );
    let how = joined(waiter, "waiter B").await?;
    ensure!(how == SpringAcquire::AfterMessage, "{how:?}");
    wait_key(&ls, &key, "B holds", |l| {
        l.holders.first().is_some_and(|h| h.node == b.client_id)
    })
    .await?;
    Ok(())
}
