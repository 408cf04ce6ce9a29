//! Database lock scenarios that run the same way against MariaDB and PostgreSQL: the test files
//! (`tests/mysql_locks.rs`, `tests/postgres_locks.rs`) start the server, create the schema and
//! lockscope, and hand them here with a way to open client connections.
//!
//! Every wait is for a fact lockscope or the database shows ([`Lockscope::wait_lock`] and
//! friends), never a sleep; the only sleeps are the lock clients' own polling.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{ensure, Result};
use lockscope_model::id::lock_id;
use lockscope_model::wire::{LockDetail, ReleaseCause};
use serde_json::json;

use crate::harness::Lockscope;
use crate::support::dblocks::{DbConn, SpringJdbcLock, SPRING_UNLOCK_LOST};

const WAIT: Duration = Duration::from_secs(30);
/// A lease that does not run out during a test.
const LONG: Duration = Duration::from_secs(600);

fn released_by(detail: &LockDetail, node: &str) -> Option<ReleaseCause> {
    detail
        .events
        .iter()
        .rev()
        .find(|e| e.kind == "released" && e.node == node)
        .and_then(|e| e.cause)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Spring Integration's `JdbcLockRegistry` on `table` (configured in lockscope's source
/// `source` with `layout = "spring_integration"` and `names = ["orders", "invoice/42"]`, the
/// table created with Spring's DDL and prefix `INT_`; lockscope's admin API open with `token`):
///
/// * registry `a` (random `CLIENT_ID`) holds `orders` (configured: shown by name) and
///   `nightly-report` (not configured: shown by its MD5 UUID, flagged `lock_name_hashed`), with
///   `CLIENT_ID` as holder and identity and `EXPIRED_AFTER` as the version and the expiry;
/// * registry `b` (a user-given `CLIENT_ID` shorter than `CHAR(36)`) polls for `orders` and gives
///   up: nothing shows it waiting; its short lease on `invoice/42` runs out: shown expired and
///   free (`ttl_expired`), the row still there; `a` takes it over and `b`'s unlock throws;
/// * a force release of `orders` with a stale view (another expiry, another client, an expiry
///   renewed since) is refused with 409 and changes nothing; with what lockscope shows it
///   deletes the row, `b`'s polling gets the lock, and `a`'s unlock throws
///   `ConcurrentModificationException`;
/// * `a`'s close deletes its remaining rows.
pub async fn spring_jdbc_lock_registry(
    ls: &Lockscope,
    source: &str,
    table: &str,
    token: &str,
    mut conn: impl AsyncFnMut() -> Result<DbConn>,
) -> Result<()> {
    let base = format!("/tables/{table}/DEFAULT");
    let mut a = SpringJdbcLock::new(conn().await?);
    let a_id = a.client_id().to_string();
    let taken_ms = now_ms();
    ensure!(a.acquire("orders", LONG).await?, "a takes orders");
    ensure!(a.acquire("nightly-report", LONG).await?);
    let orders = format!("{base}/orders");
    let lock = ls
        .wait_lock(source, &orders, WAIT, "orders held by a", |l| {
            l.holders.iter().any(|h| h.node == a_id)
        })
        .await?;
    ensure!(lock.recipe == "spring_jdbc_lock", "{lock:?}");
    ensure!(lock.flags == ["waiters_not_visible"], "{lock:?}");
    ensure!(lock.waiters.is_empty());
    let h = &lock.holders[0];
    ensure!(h.identity.as_deref() == Some(a_id.as_str()), "{h:?}");
    let (_, stored) = a.row("orders").await?.expect("a's row");
    ensure!(
        h.version.as_deref() == Some(stored.as_str()),
        "{h:?} vs {stored}"
    );
    // EXPIRED_AFTER is naive UTC from this machine's clock: its epoch is the lease's end.
    let expected = taken_ms + LONG.as_millis() as i64;
    let expires = lock.expires_at_ms.unwrap_or_default();
    ensure!(
        (expires - expected).abs() < 5_000,
        "expires_at_ms {expires} is not the lease's end {expected} ({stored})"
    );

    let hashed_path = format!("{base}/{}", SpringJdbcLock::path_for("nightly-report"));
    let hashed = ls
        .wait_lock(
            source,
            &hashed_path,
            WAIT,
            "the unlisted lock by UUID",
            |l| !l.holders.is_empty(),
        )
        .await?;
    ensure!(
        hashed.flags == ["lock_name_hashed", "waiters_not_visible"],
        "{hashed:?}"
    );

    // b polls for orders (every 100 ms, as the library does) and gives up; it leaves nothing.
    let mut b = SpringJdbcLock::with_id(conn().await?, "billing-node-1");
    ensure!(
        !b.try_lock("orders", Duration::from_millis(600), LONG)
            .await?,
        "orders is a's"
    );
    let still = ls.lock(source, &orders).await?.expect("orders listed");
    ensure!(
        still.waiters.is_empty() && still.holders[0].node == a_id,
        "{still:?}"
    );

    // b's short lease on a configured name with '/' in it runs out; the row stays, free.
    ensure!(b.acquire("invoice/42", Duration::from_millis(1500)).await?);
    let invoice = format!("{base}/invoice/42");
    let held = ls
        .wait_lock(source, &invoice, WAIT, "b holds invoice/42", |l| {
            !l.holders.is_empty()
        })
        .await?;
    // CHAR(36) pads a shorter CLIENT_ID with spaces: shown as Spring compares it.
    ensure!(held.holders[0].node == "billing-node-1", "{held:?}");
    let lapsed = ls
        .wait_detail(source, &invoice, WAIT, "b's lease ran out", |d| {
            !d.gone && d.lock.holders.is_empty()
        })
        .await?;
    ensure!(
        lapsed.lock.flags == ["expired", "waiters_not_visible"],
        "{:?}",
        lapsed.lock
    );
    ensure!(
        released_by(&lapsed, "billing-node-1") == Some(ReleaseCause::TtlExpired),
        "{:?}",
        lapsed.events
    );
    ensure!(
        b.row("invoice/42").await?.is_some(),
        "an expired row stays until taken over"
    );
    ensure!(
        a.acquire("invoice/42", LONG).await?,
        "a takes the lapsed lock over"
    );
    ls.wait_lock(source, &invoice, WAIT, "a holds invoice/42", |l| {
        l.holders.iter().any(|h| h.node == a_id)
    })
    .await?;
    let lost = b.unlock("invoice/42").await;
    ensure!(
        lost.as_ref()
            .is_err_and(|e| e.to_string().contains(SPRING_UNLOCK_LOST)),
        "{lost:?}"
    );

    // Force release of orders: stale views are refused and change nothing.
    let id = lock_id(source, &orders);
    let lock = ls.lock(source, &orders).await?.expect("orders");
    let seen = lock.holders[0].version.clone().expect("EXPIRED_AFTER");
    for (body, what) in [
        (
            json!({"holder": a_id, "version": "2001-01-01 00:00:00", "reason": "stale"}),
            "another expiry",
        ),
        (
            json!({"holder": "someone-else", "version": seen, "reason": "stale"}),
            "another client",
        ),
    ] {
        let (status, answer) = ls.release(&id, Some(token), &body).await?;
        ensure!(status == 409, "{what}: {status} {answer}");
    }
    let (status, answer) = ls
        .release(
            &id,
            Some(token),
            &json!({"holder": a_id, "reason": "no version"}),
        )
        .await?;
    ensure!(status == 422, "without the expiry seen: {status} {answer}");
    // a renews: the expiry seen before is stale now.
    ensure!(a.renew("orders", LONG).await?);
    let (_, renewed) = a.row("orders").await?.expect("a's row");
    ensure!(renewed != seen, "the renew moved EXPIRED_AFTER");
    let (status, answer) = ls
        .release(
            &id,
            Some(token),
            &json!({"holder": a_id, "version": seen, "reason": "stale"}),
        )
        .await?;
    ensure!(status == 409, "an expiry renewed since: {status} {answer}");
    ensure!(a.row("orders").await?.is_some_and(|(c, _)| c == a_id));
    let lock = ls
        .wait_lock(source, &orders, WAIT, "the renewed expiry", |l| {
            l.holders
                .first()
                .is_some_and(|h| h.version.as_deref() == Some(renewed.as_str()))
        })
        .await?;
    let (status, answer) = ls
        .release(
            &id,
            Some(token),
            &json!({"holder": a_id, "version": lock.holders[0].version, "reason": "a is stuck"}),
        )
        .await?;
    ensure!(status == 200, "{status} {answer}");
    ensure!(answer["released"]["action"] == "row deleted", "{answer}");

    // b, polling, gets it; lockscope books a's release as forced; a is not told, and its
    // unlock throws.
    ensure!(b.try_lock("orders", WAIT, LONG).await?, "b takes orders");
    let detail = ls
        .wait_detail(source, &orders, WAIT, "b holds orders", |d| {
            d.lock.holders.iter().any(|h| h.node == "billing-node-1")
        })
        .await?;
    ensure!(
        released_by(&detail, &a_id) == Some(ReleaseCause::Forced),
        "{:?}",
        detail.events
    );
    let lost = a.unlock("orders").await;
    ensure!(
        lost.as_ref()
            .is_err_and(|e| e.to_string().contains("ConcurrentModificationException")),
        "{lost:?}"
    );

    // Closing a's registry deletes its rows in the region: nightly-report and invoice/42.
    ensure!(a.close().await? == 2);
    ls.wait_detail(source, &hashed_path, WAIT, "nightly-report gone", |d| {
        d.gone
    })
    .await?;
    b.unlock("orders").await?;
    ls.wait_detail(source, &orders, WAIT, "orders unlocked", |d| d.gone)
        .await?;
    Ok(())
}
