//! `lockscope top` (issue 40) in a real terminal: tmux from Debian runs a shell, the shell runs
//! `lockscope top` against a lockscope watching a real ZooKeeper and Redis, with kazoo and
//! redis-py clients holding and waiting. The locks are listed, a new one appears without a key
//! pressed, Enter shows a queue by identity, `q` leaves the terminal as the shell had it,
//! NO_COLOR is honoured, and a lockscope that goes away is said to be unreachable. Facts are
//! awaited with bounds.

use anyhow::{ensure, Result};
use lockscope::config::{section, Config, RedisSourceConfig};
use lockscope_tests::harness::{with_admin, zk_source, Lockscope};
use lockscope_tests::support::python::PyClient;
use lockscope_tests::support::redis::RedisServer;
use lockscope_tests::support::tmux::Tmux;
use lockscope_tests::support::zk::ZkEnsemble;

const WAIT: std::time::Duration = std::time::Duration::from_secs(30);
const ADMIN: &str = "top-admin-token-0123456789";

/// An SGR sequence that sets a foreground colour (`ESC [ 3x m`, `ESC [ 38;5;…`, `ESC [ 9x m`).
fn has_colour(escaped: &str) -> bool {
    escaped.split('\u{1b}').any(|seq| {
        let Some(params) = seq
            .strip_prefix('[')
            .and_then(|s| s.split_once('m'))
            .map(|(p, _)| p)
        else {
            return false;
        };
        params.split(';').any(|p| {
            (p.len() == 2 && (p.starts_with('3') || p.starts_with('9')) && p != "39") || p == "38"
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_in_a_terminal_lists_follows_opens_and_quits_cleanly() -> Result<()> {
    let zk = ZkEnsemble::start(1).await?;
    let redis = RedisServer::start().await?;
    let root = lockscope_tests::unique_root("top");
    let dir = tempfile::tempdir()?;
    let ls = Lockscope::start(with_admin(
        Config {
            sources: [
                section(
                    "zookeeper",
                    vec![zk_source("zk", &zk.connect_string(), &[&root])],
                ),
                section(
                    "redis",
                    vec![RedisSourceConfig::new(
                        "cache",
                        &redis.url(),
                        &["lock:*", "job:*"],
                    )],
                ),
            ]
            .concat(),
            ..Config::default()
        },
        dir.path(),
        ADMIN,
    ))
    .await?;
    ls.wait_ready(WAIT).await?;

    // kazoo: billing-7 holds, billing-8 waits; redis-py holds lock:orders.
    let path = format!("{root}/orders");
    let mut holder = PyClient::kazoo_lock(&zk.connect_string(), &path, "billing-7").await?;
    holder.acquire().await?;
    let mut waiter = PyClient::kazoo_lock(&zk.connect_string(), &path, "billing-8").await?;
    waiter.start_acquire().await?;
    let mut cache = PyClient::redis_py_lock(&redis.url(), "lock:orders", Some(60_000)).await?;
    cache.acquire().await?;
    ls.wait_lock("zk", &path, WAIT, "a holder and a waiter", |l| {
        l.holders.len() == 1 && l.waiters.len() == 1
    })
    .await?;

    let bin = lockscope_tests::support::process::binary()?;
    let term = Tmux::start(100, 30, &[("TERM", "xterm-256color")])?;
    term.line("clear; echo before-top")?;
    term.wait_for("the shell", |s| s.contains("before-top"))
        .await?;
    term.line(&format!(
        "LOCKSCOPE_ADMIN_TOKEN={ADMIN} {} top --url {}",
        bin.display(),
        ls.base
    ))?;
    let screen = term
        .wait_for("both locks listed, live", |s| {
            s.contains("· live ·") && s.contains("/orders") && s.contains("lock:orders")
        })
        .await?;
    println!("measured: lockscope top at 100×30:\n{screen}");
    ensure!(
        screen.contains("billing-7"),
        "the holder by identity:\n{screen}"
    );
    ensure!(
        has_colour(&term.screen_escaped()?),
        "colour on a colour terminal"
    );

    // The sessions' waits: the kazoo holder is the root blocker, its waiter blocked on it.
    term.keys(&["w"])?;
    let waits = term
        .wait_for("the wait-for screen", |s| {
            s.contains("ROOT BLOCKERS (1)") && s.contains("BLOCKED → BLOCKING (1)")
        })
        .await?;
    println!("measured: the wait-for screen:\n{waits}");
    ensure!(waits.contains("billing-7 holds up 1"), "{waits}");
    term.keys(&["w"])?;
    term.wait_for("back on the list, the root blocker marked", |s| {
        s.contains("PATH") && s.contains("ROOT BLOCKER (1)")
    })
    .await?;

    // A lock taken now appears without a key pressed.
    let mut job = PyClient::redis_py_lock(&redis.url(), "job:nightly", Some(60_000)).await?;
    job.acquire().await?;
    term.wait_for("the new lock", |s| s.contains("job:nightly"))
        .await?;

    // Filter to the kazoo lock, open it: the queue in order, by identity.
    term.keys(&["/"])?;
    term.line("orders")?;
    term.wait_for("the filter applied", |s| {
        s.contains("/orders") && !s.contains("job:nightly")
    })
    .await?;
    let sorted_first = term.screen()?;
    let first_is_zk = sorted_first
        .lines()
        .skip(3)
        .find(|l| !l.trim().is_empty())
        .is_some_and(|l| l.contains("/orders"));
    if !first_is_zk {
        term.keys(&["Down"])?;
    }
    term.keys(&["Enter"])?;
    let queue = term
        .wait_for("the queue", |s| {
            s.contains("HOLDERS (1)") && s.contains("WAITERS (1)")
        })
        .await?;
    println!("measured: a lock in lockscope top:\n{queue}");
    let holder_at = queue.find("billing-7").unwrap_or(usize::MAX);
    let waiter_at = queue.find("billing-8").unwrap_or(0);
    ensure!(
        holder_at < waiter_at,
        "holder, then waiter, by identity:\n{queue}"
    );

    // Force release through the keys: R, the holder named, a reason, Enter. The guarded call
    // removes billing-7's node; billing-8's watch fires and it holds.
    term.keys(&["R"])?;
    let dialog = term
        .wait_for("the confirmation", |s| {
            s.contains("Release exactly this holder")
        })
        .await?;
    ensure!(dialog.contains("billing-7"), "the holder named:\n{dialog}");
    term.line("holder host is dead, INC-7")?;
    let released = term
        .wait_for("released, the waiter holding", |s| {
            s.contains("Released") && s.contains("HOLDERS (1)") && s.contains("WAITERS (0)")
        })
        .await?;
    println!("measured: after R in lockscope top:\n{released}");
    ensure!(
        released.contains("billing-8"),
        "the next waiter holds:\n{released}"
    );
    waiter.wait_acquired(WAIT).await?;
    // The lock's recent events say so.
    term.wait_for("the forced release among the events", |s| {
        s.contains("RECENT EVENTS") && s.contains("released (forced)")
    })
    .await?;
    let audit = ls.audit_log().await?;
    ensure!(
        audit
            .first()
            .is_some_and(|a| a.reason == "holder host is dead, INC-7"),
        "audited: {audit:?}"
    );

    // q goes back, q quits: the shell's screen is as it was, the prompt answers.
    term.keys(&["q"])?;
    term.wait_for("back on the list", |s| s.contains("PATH"))
        .await?;
    term.keys(&["q"])?;
    term.line("echo after-top-$?")?;
    let after = term
        .wait_for("the shell again", |s| s.contains("after-top-0"))
        .await?;
    ensure!(
        after.contains("before-top"),
        "the terminal restored:\n{after}"
    );
    ensure!(
        !after.contains("PATH"),
        "nothing of top left on the screen:\n{after}"
    );

    // NO_COLOR: no colour at all; a lockscope gone is said to be unreachable.
    let plain = Tmux::start(80, 24, &[("TERM", "xterm-256color"), ("NO_COLOR", "1")])?;
    plain.line(&format!("{} top --url {}", bin.display(), ls.base))?;
    plain
        .wait_for("live without colour", |s| s.contains("· live ·"))
        .await?;
    let escaped = plain.screen_escaped()?;
    ensure!(!has_colour(&escaped), "NO_COLOR honoured:\n{escaped:?}");
    drop(ls);
    let gone = plain
        .wait_for("unreachable said", |s| {
            s.contains("lockscope unreachable — retrying") && s.contains("not live")
        })
        .await?;
    ensure!(!gone.contains("zk live"), "nothing shown as live:\n{gone}");
    println!("measured: with lockscope gone:\n{gone}");
    Ok(())
}
