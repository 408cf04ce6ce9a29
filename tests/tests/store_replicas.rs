//! The history store and replicas (issue 22), against real PostgreSQL 15, a real ZooKeeper and
//! kazoo's `Lock` from PyPI, with the real `lockscope` binary run as child processes that are
//! SIGKILLed and restarted (`support::process`; `cargo build -p lockscope` first when running
//! this file alone):
//!
//! * two replicas on one PostgreSQL store, lock churn while each is killed and restarted in
//!   turn: the history read from either holds every acquisition exactly once (each kazoo
//!   acquisition leaves a node of its own, so "once" is counted by node path);
//! * a force release on one replica is in the other's audit log, once;
//! * both stopped, a lock goes, both restarted: its page opens (`gone`) with its history;
//! * exactly one replica writes, both name it; kill it and the other takes over;
//! * the store down at start and killed mid-run: the live view works meanwhile, the history
//!   catches up;
//! * a read-only and a full store: a clear error, the live view unaffected, the history catches
//!   up once it is fixed;
//! * the quiet failures of issue 35: the writer frozen by SIGSTOP (the standby takes over once
//!   its lease runs out; it writes nothing when it wakes), the store silent behind a relay (the
//!   lock page answers from memory), replicas whose clocks are 90 s off the store's, and audit
//!   records whose completion the store did not take (completed later, or closed as
//!   `unknown` when their replica died);
//! * SQLite (one replica): the same history tests.
//!
//! Each test has its own ZooKeeper, PostgreSQL and temporary directories, and waits for facts
//! with bounds, never for a fixed time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use futures::StreamExt;
use lockscope_model::id::lock_id;
use lockscope_tests::harness::{eventually, Lockscope};
use lockscope_tests::recipes::{SeedClient, SeedRecipe, Ticket};
use lockscope_tests::support::process::{left, with_logs, LockscopeProcess};
use lockscope_tests::support::proxy::TcpProxy;
use lockscope_tests::support::python::{python_and_script, PyClient};
use lockscope_tests::support::store::PgStore;
use lockscope_tests::support::zk::ZkEnsemble;
use lockscope_tests::unique_root;
use serde_json::{json, Value};

const SOURCE: &str = "zk";
const TOKEN: &str = "oncall-token-0123456789abcdef";
/// Bound of one wait for a fact lockscope shows (a holder in the live view, an event in the
/// history, a store state).
const WAIT: Duration = Duration::from_secs(30);

/// Builds the Python environment of kazoo (once per test binary) off the async workers.
async fn prepare_python() -> Result<()> {
    tokio::task::spawn_blocking(python_and_script).await??;
    Ok(())
}

/// A one-member ZooKeeper with a lock root of this test's own.
struct Zk {
    zk: ZkEnsemble,
    root: String,
}

impl Zk {
    async fn start(prefix: &str) -> Result<Zk> {
        let (python, zk) = tokio::join!(prepare_python(), ZkEnsemble::start(1));
        python?;
        Ok(Zk {
            zk: zk?,
            root: unique_root(prefix),
        })
    }

    fn connect(&self) -> String {
        self.zk.connect_string()
    }

    /// The `[[zookeeper]]` table of every replica: this test's root, test-friendly intervals.
    fn toml(&self) -> String {
        format!(
            "[[zookeeper]]\nname = \"{SOURCE}\"\nconnect = \"{}\"\nroots = [\"{}\"]\n\
             session_timeout = \"4s\"\npoll_interval = \"300ms\"\n",
            self.connect(),
            self.root
        )
    }

    async fn kazoo(&self, lock: &str, who: &str) -> Result<PyClient> {
        PyClient::kazoo_lock(&self.connect(), &format!("{}/{lock}", self.root), who).await
    }

    fn path(&self, lock: &str) -> String {
        format!("{}/{lock}", self.root)
    }

    /// Deletes the (empty) lock node at `path`, as a cleanup job would once nobody uses the
    /// lock: then nothing is left of it at the source.
    async fn delete(&self, path: &str) -> Result<()> {
        let client = zookeeper_client::Client::connect(&self.connect()).await?;
        client
            .delete(path, None)
            .await
            .with_context(|| format!("delete {path}"))
    }
}

/// Force release on, behind one admin token.
fn admin_toml() -> String {
    format!(
        "[admin]\nenabled = true\nmax_releases_per_minute = 1000\n\
         tokens = [{{ name = \"oncall\", token = \"{TOKEN}\" }}]\n"
    )
}

/// Starts one replica per name on `store`, with the same configuration but `replica`.
async fn pg_replicas(
    zk: &Zk,
    store: &PgStore,
    names: &[&str],
    admin: bool,
) -> Result<Vec<LockscopeProcess>> {
    let mut replicas = Vec::new();
    for name in names {
        let mut config = zk.toml() + &store.store_toml(name);
        if admin {
            config += &admin_toml();
        }
        replicas.push(LockscopeProcess::start(name, &config, &store.env()).await?);
    }
    Ok(replicas)
}

/// `GET /api/v1/store` (200 expected).
async fn store_state(ls: &Lockscope) -> Result<Value> {
    let (status, body) = ls.get_json("/api/v1/store").await?;
    ensure!(status == 200, "GET /api/v1/store: {status} {body}");
    Ok(body)
}

/// Waits until `GET /api/v1/store` satisfies `check`; fails with the last answer.
async fn wait_store(ls: &Lockscope, what: &str, check: impl Fn(&Value) -> bool) -> Result<Value> {
    let mut last = Value::Null;
    eventually(WAIT, what, async || {
        let state = match ls.get_json("/api/v1/store").await {
            Ok((200, body)) => body,
            Ok((status, body)) => json!({"status": status, "body": body}),
            Err(e) => json!({"request failed": format!("{e:#}")}),
        };
        let done = check(&state).then(|| state.clone());
        last = state;
        Ok(done)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; last /api/v1/store: {last}"))
}

/// The whole history of lock `id` from `GET /api/v1/locks/{id}/events`, newest first, read
/// `limit` events a page, each next page asked with the last one's `next_before`. Checks the
/// paging on the way: no page longer than `limit`, ids strictly falling across pages, and the
/// end marked by `next_before: null`.
async fn history(ls: &Lockscope, id: &str, limit: usize) -> Result<Vec<Value>> {
    let mut all: Vec<Value> = Vec::new();
    let mut before: Option<i64> = None;
    for _ in 0..10_000 {
        let path = match before {
            None => format!("/api/v1/locks/{id}/events?limit={limit}"),
            Some(b) => format!("/api/v1/locks/{id}/events?limit={limit}&before={b}"),
        };
        let (status, body) = ls.get_json(&path).await?;
        ensure!(status == 200, "GET {path}: {status} {body}");
        let page = body["events"]
            .as_array()
            .with_context(|| format!("GET {path}: no events: {body}"))?;
        ensure!(page.len() <= limit, "GET {path}: {} events", page.len());
        for event in page {
            let event_id = event["id"]
                .as_i64()
                .with_context(|| format!("event without id: {event}"))?;
            if let Some(prev) = all.last().and_then(|e| e["id"].as_i64()) {
                ensure!(
                    event_id < prev,
                    "ids not newest first: {prev} then {event_id}"
                );
            }
            all.push(event.clone());
        }
        match body["next_before"].as_i64() {
            Some(next) => {
                ensure!(
                    !page.is_empty(),
                    "GET {path}: empty page, next_before {next}"
                );
                ensure!(Some(next) != before, "GET {path}: next_before did not move");
                before = Some(next);
            }
            None if body["next_before"].is_null() => return Ok(all),
            None => bail!("GET {path}: next_before {}", body["next_before"]),
        }
    }
    bail!("{id}: more than 10,000 pages")
}

/// How many `acquired` events each node has in `events`.
fn acquisitions(events: &[Value]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for e in events.iter().filter(|e| e["kind"] == "acquired") {
        *counts
            .entry(e["node"].as_str().unwrap_or_default().to_string())
            .or_insert(0) += 1;
    }
    counts
}

/// Waits until the history of `id` on `ls` has an `acquired` event for every node of `nodes`,
/// then checks that each has exactly one and that there are no others.
async fn history_holds_once(ls: &Lockscope, id: &str, nodes: &[String], page: usize) -> Result<()> {
    let mut last = BTreeMap::new();
    let found = eventually(WAIT, "every acquisition in the history", async || {
        let counts = match history(ls, id, page).await {
            Ok(events) => acquisitions(&events),
            // Not there yet (e.g. 503 while the store is unreachable): wait.
            Err(_) => return Ok(None),
        };
        let done = nodes.iter().all(|n| counts.contains_key(n));
        last = counts;
        Ok(done.then_some(()))
    })
    .await;
    if let Err(e) = found {
        let missing: Vec<&String> = nodes.iter().filter(|n| !last.contains_key(*n)).collect();
        bail!(
            "{} on {}: {e}; {} of {} acquisitions missing: {missing:?}",
            id,
            ls.base,
            missing.len(),
            nodes.len()
        );
    }
    // Read again: whatever was written after the first complete read counts too.
    let counts = acquisitions(&history(ls, id, page).await?);
    let twice: Vec<_> = counts.iter().filter(|(_, &c)| c != 1).collect();
    ensure!(
        twice.is_empty(),
        "{id} on {}: acquisitions not recorded exactly once: {twice:?}",
        ls.base
    );
    let unknown: Vec<_> = counts.keys().filter(|n| !nodes.contains(n)).collect();
    ensure!(
        unknown.is_empty(),
        "{id} on {}: acquisitions nobody made: {unknown:?}",
        ls.base
    );
    Ok(())
}

/// Waits until the live view of `ls` shows `node` holding the lock at `path`.
async fn wait_holder(ls: &Lockscope, path: &str, node: &str) -> Result<()> {
    ls.wait_lock(SOURCE, path, WAIT, &format!("{node} holds"), |l| {
        l.holders.iter().any(|h| h.node == node)
    })
    .await
    .map(drop)
}

/// One kazoo acquisition of `client`: the node it holds.
async fn acquire(client: &mut PyClient) -> Result<String> {
    client.acquire().await?.node.context("kazoo named no node")
}

// -------------------------------------------------------------------------------------------
// Two replicas on PostgreSQL

/// Lock churn while each replica is SIGKILLed and restarted in turn (one always running), each
/// restarted as soon as a few acquisitions were made while it was down (a supervisor restarts a
/// crashed process within a second), the next kill once a replica writes again: the history
/// read from either replica, paged with `before`, holds every acquisition exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_while_replicas_are_killed_in_turn_is_recorded_exactly_once() -> Result<()> {
    let zk = Zk::start("replica-churn").await?;
    let store = PgStore::start().await?;
    let mut replicas = pg_replicas(&zk, &store, &["a", "b"], false).await?;
    let result = churn_body(&zk, &mut replicas, false).await;
    with_logs(result, &replicas.iter().collect::<Vec<_>>())
}

/// The same churn, each killed replica kept down until the other one writes the history: every
/// acquisition exactly once across real takeovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_across_writer_takeovers_is_recorded_exactly_once() -> Result<()> {
    let zk = Zk::start("replica-takeover").await?;
    let store = PgStore::start().await?;
    let mut replicas = pg_replicas(&zk, &store, &["a", "b"], false).await?;
    let result = churn_body(&zk, &mut replicas, true).await;
    with_logs(result, &replicas.iter().collect::<Vec<_>>())
}

/// At least this many acquisitions, and at least as long as the kills and restarts go on.
const CHURN_MIN: usize = 30;
/// How many times each replica is killed.
const KILL_ROUNDS: usize = 2;
/// Acquisitions before each kill and while the killed replica is down.
const CHURN_BETWEEN: usize = 3;

/// `takeover`: a killed replica stays down until the other one writes the history (else it is
/// restarted once [`CHURN_BETWEEN`] acquisitions were made while it was down).
async fn churn_body(zk: &Zk, replicas: &mut [LockscopeProcess], takeover: bool) -> Result<()> {
    let path = zk.path("churn");
    let id = lock_id(SOURCE, &path);
    // Which replicas each acquisition must be seen by before it is released: every one that
    // is running or starting (one being killed is taken out first). So every acquisition is
    // observed by a replica that outlives it, and none is released unseen.
    let counted = [AtomicBool::new(true), AtomicBool::new(true)];
    let stop = AtomicBool::new(false);
    // Acquisitions made so far, and whether the churn has ended (by an error, or stopped).
    let made = AtomicUsize::new(0);
    let ended = AtomicBool::new(false);
    let clients: Vec<Lockscope> = replicas
        .iter()
        .map(|r| Lockscope::at(&r.api().base))
        .collect::<Result<_>>()?;
    let mut kazoo = zk.kazoo("churn", "churner").await?;
    // Both run in this task (joined, not spawned): the kills and restarts, and the churn.
    let churn = async {
        let result = async {
            let mut nodes = Vec::new();
            while nodes.len() < CHURN_MIN || !stop.load(Ordering::SeqCst) {
                let node = acquire(&mut kazoo).await?;
                eventually(
                    WAIT,
                    &format!("{node} seen by every running replica"),
                    async || {
                        let mut all = true;
                        for (i, ls) in clients.iter().enumerate() {
                            if !counted[i].load(Ordering::SeqCst) {
                                continue;
                            }
                            let shown = ls.lock(SOURCE, &path).await.ok().flatten();
                            all &= shown.is_some_and(|l| l.holders.iter().any(|h| h.node == node));
                        }
                        Ok(all.then_some(()))
                    },
                )
                .await?;
                kazoo.release().await?;
                nodes.push(node);
                made.fetch_add(1, Ordering::SeqCst);
            }
            anyhow::Ok(nodes)
        }
        .await;
        ended.store(true, Ordering::SeqCst);
        result
    };
    // `n` more acquisitions than when called (so the churn goes on across each kill and
    // restart, not only between them).
    let more = async |n: usize, what: &str| {
        let from = made.load(Ordering::SeqCst);
        eventually(WAIT, &format!("{n} acquisitions {what}"), async || {
            if ended.load(Ordering::SeqCst) {
                bail!("the churn ended");
            }
            Ok((made.load(Ordering::SeqCst) >= from + n).then_some(()))
        })
        .await
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let kills = async {
        let result = async {
            for round in 0..KILL_ROUNDS {
                for (i, replica) in replicas.iter_mut().enumerate() {
                    let name = replica.name().to_string();
                    more(CHURN_BETWEEN, &format!("before {name} is killed")).await?;
                    // One failure at a time: a failover completes (some replica writes the
                    // history) before the next kill. Two replicas dying within the takeover's
                    // few hundred milliseconds lose what only they observed (README, "Running
                    // two replicas"); that is a double failure, not a failover.
                    eventually(WAIT, "a replica writing the history", async || {
                        for c in &clients {
                            if let Ok((200, s)) = c.get_json("/api/v1/store").await {
                                if s["writing"] == true {
                                    return Ok(Some(()));
                                }
                            }
                        }
                        Ok(None)
                    })
                    .await?;
                    counted[i].store(false, Ordering::SeqCst);
                    replica.kill();
                    more(CHURN_BETWEEN, &format!("while {name} is down")).await?;
                    if takeover {
                        let other = &clients[1 - i];
                        wait_store(other, "the other replica writing", |s| s["writing"] == true)
                            .await?;
                        more(
                            CHURN_BETWEEN,
                            &format!("after {name}'s successor took over"),
                        )
                        .await?;
                    }
                    replica.restart_only()?;
                    counted[i].store(true, Ordering::SeqCst);
                    replica
                        .wait_ready(left(deadline))
                        .await
                        .with_context(|| format!("round {round}: restart {name}"))?;
                }
            }
            anyhow::Ok(())
        }
        .await;
        stop.store(true, Ordering::SeqCst);
        result
    };
    let (nodes, killed) =
        tokio::time::timeout(left(deadline), async { tokio::join!(churn, kills) })
            .await
            .context("the churn did not finish")?;
    killed?;
    let nodes = nodes?;
    ensure!(nodes.len() >= CHURN_MIN, "{} acquisitions", nodes.len());
    for replica in replicas.iter() {
        history_holds_once(replica.api(), &id, &nodes, 7).await?;
    }
    Ok(())
}

/// A force release on replica a is in replica b's audit log, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_release_on_one_replica_is_in_the_others_audit_once() -> Result<()> {
    let zk = Zk::start("replica-audit").await?;
    let store = PgStore::start().await?;
    let replicas = pg_replicas(&zk, &store, &["a", "b"], true).await?;
    let result = audit_body(&zk, &replicas).await;
    with_logs(result, &replicas.iter().collect::<Vec<_>>())
}

async fn audit_body(zk: &Zk, replicas: &[LockscopeProcess]) -> Result<()> {
    let (a, b) = (replicas[0].api(), replicas[1].api());
    let path = zk.path("forced");
    let id = lock_id(SOURCE, &path);
    let mut holder = zk.kazoo("forced", "stuck-worker").await?;
    let node = acquire(&mut holder).await?;
    wait_holder(b, &path, &node).await?;
    let lock = a
        .wait_lock(SOURCE, &path, WAIT, "the holder on a", |l| {
            l.holders.iter().any(|h| h.node == node)
        })
        .await?;
    let held = &lock.holders[0];
    let reason = format!("replica test {}", unique_root("reason"));
    let (status, answer) = a
        .release(
            &id,
            Some(TOKEN),
            &json!({"holder": held.node, "session": held.session, "version": held.version,
                    "reason": reason}),
        )
        .await?;
    ensure!(status == 200, "release on a: {status} {answer}");
    // The release reached the source: b no longer shows the node holding (a lock left with
    // no nodes may also be shown as gone).
    eventually(WAIT, "the released holder gone on b", async || {
        let lock = b.lock(SOURCE, &path).await?;
        Ok((!lock.is_some_and(|l| l.holders.iter().any(|h| h.node == node))).then_some(()))
    })
    .await?;
    let on_b = eventually(WAIT, "the release in b's audit log", async || {
        let records = b.audit_log().await?;
        let mine: Vec<_> = records.into_iter().filter(|r| r.reason == reason).collect();
        Ok((!mine.is_empty()).then_some(mine))
    })
    .await?;
    ensure!(
        on_b.len() == 1,
        "b's audit has it {} times: {on_b:#?}",
        on_b.len()
    );
    ensure!(on_b[0].outcome == "released", "{:#?}", on_b[0]);
    ensure!(on_b[0].token_name == "oncall" && on_b[0].lock_id == id);
    let on_a: Vec<_> = a
        .audit_log()
        .await?
        .into_iter()
        .filter(|r| r.reason == reason)
        .collect();
    ensure!(on_a == on_b, "a: {on_a:#?}\nb: {on_b:#?}");
    Ok(())
}

/// Both replicas stopped, the lock goes at the source, both restarted: its page opens on
/// either, `gone`, with its history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_gone_while_both_replicas_were_down_opens_with_its_history() -> Result<()> {
    let zk = Zk::start("replica-gone").await?;
    let store = PgStore::start().await?;
    let mut replicas = pg_replicas(&zk, &store, &["a", "b"], false).await?;
    let result = gone_across_restart(&zk, &mut replicas, Some(&store)).await;
    with_logs(result, &replicas.iter().collect::<Vec<_>>())
}

/// A lock acquired twice and held, all of `replicas` killed, the lock released and its node
/// deleted, the replicas restarted: `GET /api/v1/locks/{id}` answers 200, `gone`, with both
/// acquisitions, and so does the paged history.
async fn gone_across_restart(
    zk: &Zk,
    replicas: &mut [LockscopeProcess],
    store: Option<&PgStore>,
) -> Result<()> {
    let path = zk.path("vanishing");
    let id = lock_id(SOURCE, &path);
    let mut client = zk.kazoo("vanishing", "leaver").await?;
    let first = acquire(&mut client).await?;
    for r in replicas.iter() {
        wait_holder(r.api(), &path, &first).await?;
    }
    client.release().await?;
    let second = acquire(&mut client).await?;
    for r in replicas.iter() {
        wait_holder(r.api(), &path, &second).await?;
    }
    let nodes = vec![first, second];
    // In the store before anything stops.
    history_holds_once(replicas[0].api(), &id, &nodes, 100).await?;
    for r in replicas.iter_mut() {
        r.kill();
    }
    client.release().await?;
    client.exit().await?;
    zk.delete(&path).await?;
    for r in replicas.iter_mut() {
        r.restart().await?;
    }
    for r in replicas.iter() {
        let ls = r.api();
        let mut last = (0, Value::Null);
        let detail = eventually(WAIT, "the gone lock's page", async || {
            let (status, body) = ls.get_json(&format!("/api/v1/locks/{id}")).await?;
            let done = (status == 200 && body["gone"] == true).then(|| body.clone());
            if ![200, 404].contains(&status) {
                bail!("GET /api/v1/locks/{id}: {status} {body}");
            }
            last = (status, body);
            Ok(done)
        })
        .await;
        let detail = match detail {
            Ok(detail) => detail,
            Err(e) => {
                // What the store holds of the lock, for the failure message.
                let kept = match store {
                    Some(store) => format!(
                        "lock_state rows {:?}, lock_events rows {:?}",
                        store
                            .column(&format!(
                                "SELECT coalesce(gone_ms::text, 'live') FROM lockscope.lock_state \
                                 WHERE lock_id = '{id}'"
                            ))
                            .await,
                        store
                            .column(&format!(
                                "SELECT count(*)::text FROM lockscope.lock_events \
                                 WHERE lock_id = '{id}'"
                            ))
                            .await
                    ),
                    None => String::new(),
                };
                bail!(
                    "{}: the lock gone while it was down: {e}; last answer: {} {}; {kept}",
                    r.name(),
                    last.0,
                    last.1
                );
            }
        };
        let counts = acquisitions(detail["events"].as_array().context("no events")?);
        ensure!(
            nodes.iter().all(|n| counts.get(n) == Some(&1)),
            "{}: the gone lock's events: {detail}",
            r.name()
        );
        ensure!(detail["path"] == path.as_str(), "{}: {detail}", r.name());
        history_holds_once(ls, &id, &nodes, 1).await?;
    }
    Ok(())
}

/// Exactly one replica writes history and both name it; kill it and the other takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_writer_at_a_time_and_the_other_takes_over() -> Result<()> {
    let zk = Zk::start("replica-writer").await?;
    let store = PgStore::start().await?;
    let mut replicas = pg_replicas(&zk, &store, &["a", "b"], false).await?;
    let result = writer_body(&zk, &mut replicas).await;
    with_logs(result, &replicas.iter().collect::<Vec<_>>())
}

/// Waits until exactly one of `replicas` says `writing: true` and every one names it as
/// `writer`; returns its index.
async fn agreed_writer(replicas: &[LockscopeProcess]) -> Result<usize> {
    let mut last = Vec::new();
    eventually(WAIT, "one writer named by every replica", async || {
        let mut states = Vec::new();
        for r in replicas {
            states.push(store_state(r.api()).await?);
        }
        let writing: Vec<usize> = (0..states.len())
            .filter(|&i| states[i]["writing"] == true)
            .collect();
        let agreed = writing.len() == 1
            && states
                .iter()
                .all(|s| s["writer"]["replica"] == replicas[writing[0]].name());
        last = states;
        Ok(agreed.then(|| writing[0]))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; last /api/v1/store answers: {last:#?}"))
}

async fn writer_body(zk: &Zk, replicas: &mut [LockscopeProcess]) -> Result<()> {
    let writer = agreed_writer(replicas).await?;
    let other = 1 - writer;
    for r in replicas.iter() {
        let state = store_state(r.api()).await?;
        ensure!(
            state["backend"] == "postgres"
                && state["replica"] == r.name()
                && state["connected"] == true
                && state["error"].is_null(),
            "{}: {state}",
            r.name()
        );
        let gauge = r.api().metric("lockscope_store_writer").await?;
        let want = if r.name() == replicas[writer].name() {
            1.0
        } else {
            0.0
        };
        ensure!(
            gauge == Some(want),
            "{}: lockscope_store_writer {gauge:?}",
            r.name()
        );
    }
    let since = store_state(replicas[other].api()).await?["writer"]["since_ms"].as_i64();
    ensure!(since.is_some(), "the writer's since_ms is missing");

    replicas[writer].kill();
    let survivor = &replicas[other];
    let taken = Instant::now();
    let state = wait_store(survivor.api(), "the other replica writing", |s| {
        s["writing"] == true && s["writer"]["replica"] == survivor.name()
    })
    .await?;
    println!(
        "{} took over in {:?}: {state}",
        survivor.name(),
        taken.elapsed()
    );
    // Its history keeps going: an acquisition now is written by the new writer.
    let path = zk.path("after-failover");
    let mut client = zk.kazoo("after-failover", "late").await?;
    let node = acquire(&mut client).await?;
    wait_holder(survivor.api(), &path, &node).await?;
    history_holds_once(survivor.api(), &lock_id(SOURCE, &path), &[node], 100).await?;
    // The killed one comes back as a reader and names the new writer.
    replicas[writer].restart().await?;
    ensure!(
        agreed_writer(replicas).await? == other,
        "the writer moved back"
    );
    Ok(())
}

// -------------------------------------------------------------------------------------------
// Store faults (one replica)

/// Starts one replica named `a` on `store`.
async fn one_replica(zk: &Zk, store: &PgStore, extra: &str) -> Result<LockscopeProcess> {
    let config = zk.toml() + &store.store_toml("a") + extra;
    LockscopeProcess::start("a", &config, &store.env()).await
}

/// The store down at start: lockscope starts, the live view works, `/api/v1/store` says why it
/// is not connected; once PostgreSQL is up the history catches up. Then the same with the store
/// killed mid-run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_down_at_start_and_mid_run_catches_up() -> Result<()> {
    let zk = Zk::start("store-down").await?;
    let mut store = PgStore::start().await?;
    store.kill();
    let replica = one_replica(&zk, &store, "").await?;
    let result = store_down_body(&zk, &mut store, &replica).await;
    let result = result.map_err(|e| e.context(format!("postgres log:\n{}", store.log_tail(30))));
    with_logs(result, &[&replica])
}

/// Acquires and releases `count` times at `path` with `client`, each held until `ls` shows it.
async fn acquire_seen(
    client: &mut PyClient,
    ls: &Lockscope,
    path: &str,
    count: usize,
) -> Result<Vec<String>> {
    let mut nodes = Vec::new();
    for _ in 0..count {
        let node = acquire(client).await?;
        wait_holder(ls, path, &node).await?;
        client.release().await?;
        nodes.push(node);
    }
    Ok(nodes)
}

async fn store_down_body(zk: &Zk, store: &mut PgStore, replica: &LockscopeProcess) -> Result<()> {
    let ls = replica.api();
    let down = wait_store(ls, "not connected, with the error", |s| {
        s["connected"] == false && s["error"].as_str().is_some_and(|e| !e.is_empty())
    })
    .await?;
    println!("store down at start: {down}");
    ensure!(down["writing"] != true, "{down}");
    let path = zk.path("while-down");
    let id = lock_id(SOURCE, &path);
    let mut client = zk.kazoo("while-down", "early").await?;
    let mut nodes = acquire_seen(&mut client, ls, &path, 3).await?;

    store.restart().await?;
    wait_store(ls, "connected and writing", |s| {
        s["connected"] == true && s["error"].is_null() && s["writing"] == true
    })
    .await?;
    history_holds_once(ls, &id, &nodes, 100).await?;

    store.kill();
    let down = wait_store(ls, "the store lost mid-run", |s| {
        s["connected"] == false && s["error"].as_str().is_some_and(|e| !e.is_empty())
    })
    .await?;
    println!("store killed mid-run: {down}");
    nodes.extend(acquire_seen(&mut client, ls, &path, 3).await?);
    store.restart().await?;
    wait_store(ls, "connected again", |s| {
        s["connected"] == true && s["error"].is_null()
    })
    .await?;
    history_holds_once(ls, &id, &nodes, 100).await?;
    let state = store_state(ls).await?;
    ensure!(state["events_dropped"] == 0, "{state}");
    Ok(())
}

/// A read-only store and a full one: a clear error in `/api/v1/store`, the live view
/// unaffected, and what was buffered meanwhile lands once the store is fixed, nothing dropped.
/// Then more events than the buffer holds while the store is full: the newest land, the rest
/// are counted in `events_dropped` and `lockscope_store_events_dropped_total`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_or_full_store_is_reported_and_caught_up_after() -> Result<()> {
    let zk = Zk::start("store-faults").await?;
    let store = PgStore::start().await?;
    let extra = format!("buffer_events = {BUFFER}\n");
    let replica = one_replica(&zk, &store, &extra).await?;
    let result = store_faults_body(&zk, &store, &replica).await;
    let result = result.map_err(|e| e.context(format!("postgres log:\n{}", store.log_tail(30))));
    with_logs(result, &[&replica])
}

/// `[store] buffer_events` of the fault test (its smallest allowed value).
const BUFFER: usize = 1000;
/// Lock events made while the store is full, past the buffer.
const OVERFLOW: usize = 1300;

async fn store_faults_body(zk: &Zk, store: &PgStore, replica: &LockscopeProcess) -> Result<()> {
    let ls = replica.api();
    wait_store(ls, "connected and writing", |s| {
        s["connected"] == true && s["writing"] == true
    })
    .await?;
    let path = zk.path("faults");
    let id = lock_id(SOURCE, &path);
    let mut client = zk.kazoo("faults", "worker").await?;
    let mut nodes = acquire_seen(&mut client, ls, &path, 1).await?;
    history_holds_once(ls, &id, &nodes, 100).await?;
    ensure!(!store.tables().await?.is_empty(), "no tables were made");

    // (fault, words its error must carry, set it, clear it)
    for (fault, words) in [
        ("read-only", ["read-only", "read only"]),
        ("full", ["No space left", "disk"]),
    ] {
        let set = |on: bool| async move {
            match fault {
                "read-only" => store.set_read_only(on).await,
                _ => store.set_full(on).await,
            }
        };
        set(true).await?;
        // The live view goes on while writes fail.
        let during = acquire_seen(&mut client, ls, &path, 2).await?;
        let state = wait_store(ls, &format!("the {fault} store's error"), |s| {
            s["error"]
                .as_str()
                .is_some_and(|e| words.iter().any(|w| e.contains(w)))
        })
        .await?;
        println!("{fault} store: {state}");
        ensure!(
            ls.get_json("/api/v1/sources").await?.0 == 200,
            "the live view stopped"
        );
        set(false).await?;
        nodes.extend(during);
        wait_store(ls, &format!("the {fault} error cleared"), |s| {
            s["connected"] == true && s["error"].is_null()
        })
        .await?;
        history_holds_once(ls, &id, &nodes, 100).await?;
        let state = store_state(ls).await?;
        ensure!(state["events_dropped"] == 0, "{fault}: {state}");
        let dropped = ls.metric("lockscope_store_events_dropped_total").await?;
        ensure!(
            dropped == Some(0.0),
            "{fault}: lockscope_store_events_dropped_total {dropped:?}"
        );
    }

    // Full again, and more lock events than the buffer holds: the oldest are dropped and
    // counted, the newest land once the store takes writes again. (Plain ephemeral locks
    // made by a Rust client: kazoo, one acquisition at a time, is too slow for thousands.)
    store.set_full(true).await?;
    let locks = OVERFLOW;
    let seeder = SeedClient::connect(&zk.connect(), Duration::from_secs(10)).await?;
    let prefix = zk.path("overflow");
    let made: Vec<Result<Ticket>> = futures::stream::iter(0..locks)
        .map(|i| {
            let (seeder, path) = (&seeder, format!("{prefix}/lock-{i}"));
            async move { seeder.enqueue(&path, &SeedRecipe::PlainEphemeral).await }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let held = made.into_iter().collect::<Result<Vec<_>>>()?;
    ensure!(
        held.iter().all(|t| t.is_created()),
        "a lock was taken already"
    );
    ls.source_where(WAIT, SOURCE, "every overflow lock shown", |s| {
        s.locks >= locks
    })
    .await?;
    let state = wait_store(ls, "events dropped", |s| {
        s["events_dropped"].as_u64().is_some_and(|d| d > 0)
    })
    .await?;
    println!("overflowing buffer: {state}");
    store.set_full(false).await?;
    wait_store(ls, "the buffer written", |s| {
        s["connected"] == true && s["error"].is_null() && s["queue_depth"] == 0
    })
    .await?;
    let dropped = store_state(ls).await?["events_dropped"]
        .as_u64()
        .context("events_dropped")?;
    let metric = ls.metric("lockscope_store_events_dropped_total").await?;
    ensure!(
        metric == Some(dropped as f64),
        "lockscope_store_events_dropped_total {metric:?}, /api/v1/store {dropped}"
    );
    let prefix_id = format!("{}~", lock_id(SOURCE, &prefix));
    let kept: u64 = store
        .column(&format!(
            "SELECT count(*)::text FROM lockscope.lock_events \
             WHERE kind = 'acquired' AND starts_with(lock_id, '{prefix_id}')"
        ))
        .await?
        .first()
        .and_then(|c| c.parse().ok())
        .context("count")?;
    println!("{locks} acquisitions while full: {kept} written, {dropped} dropped");
    ensure!(
        kept + dropped >= locks as u64,
        "{locks} acquisitions made, {kept} written, {dropped} dropped"
    );
    // Nothing that fitted the buffer was lost.
    ensure!(
        kept + 10 >= BUFFER as u64,
        "{kept} written of a buffer of {BUFFER}"
    );
    // What was held before the overflow is all there, once.
    history_holds_once(ls, &id, &nodes, 100).await?;
    ensure!(dropped > 0 && kept > 0, "kept {kept}, dropped {dropped}");
    Ok(())
}

// -------------------------------------------------------------------------------------------
// Quiet failures (issue 35): a writer paused, a store gone silent, a skewed clock, audit
// records whose completion the store did not take

/// Sends `signal` (`STOP`, `CONT`) to the process `pid` (only that process).
fn signal(pid: u32, signal: &str) -> Result<()> {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .context("run kill")?;
    ensure!(status.success(), "kill -{signal} {pid}: {status}");
    Ok(())
}

/// A process stopped by SIGSTOP, resumed when this is dropped (a failing test leaves no
/// process frozen).
struct Frozen(Option<u32>);

impl Frozen {
    fn stop(pid: u32) -> Result<Frozen> {
        signal(pid, "STOP")?;
        Ok(Frozen(Some(pid)))
    }

    fn resume(mut self) -> Result<()> {
        match self.0.take() {
            Some(pid) => signal(pid, "CONT"),
            None => Ok(()),
        }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if let Some(pid) = self.0.take() {
            let _ = signal(pid, "CONT");
        }
    }
}

/// Lock churn in the background of a fault: acquisitions one after another, each released
/// once every replica in `watchers` shows it (so each is observed by a replica that writes, or
/// will), until `stop`.
struct Churn {
    made: AtomicUsize,
    stop: AtomicBool,
    ended: AtomicBool,
}

impl Churn {
    fn new() -> Churn {
        Churn {
            made: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            ended: AtomicBool::new(false),
        }
    }

    async fn run(
        &self,
        kazoo: &mut PyClient,
        path: &str,
        watchers: &[&Lockscope],
    ) -> Result<Vec<String>> {
        let result = async {
            let mut nodes = Vec::new();
            while !self.stop.load(Ordering::SeqCst) {
                let node = acquire(kazoo).await?;
                for ls in watchers {
                    wait_holder(ls, path, &node).await?;
                }
                kazoo.release().await?;
                nodes.push(node);
                self.made.fetch_add(1, Ordering::SeqCst);
            }
            anyhow::Ok(nodes)
        }
        .await;
        self.ended.store(true, Ordering::SeqCst);
        result
    }

    /// Waits until `n` more acquisitions than now were made.
    async fn more(&self, n: usize, what: &str) -> Result<()> {
        let from = self.made.load(Ordering::SeqCst);
        eventually(WAIT, &format!("{n} acquisitions {what}"), async || {
            if self.ended.load(Ordering::SeqCst) {
                bail!("the churn ended");
            }
            Ok((self.made.load(Ordering::SeqCst) >= from + n).then_some(()))
        })
        .await
    }
}

/// How many lock events replica `replica` has written to `store`.
async fn rows_by(store: &PgStore, replica: &str) -> Result<i64> {
    store
        .number(&format!(
            "SELECT count(*) FROM lockscope.lock_events WHERE replica = '{replica}'"
        ))
        .await
}

/// The history writer frozen by SIGSTOP while kazoo locks churn (its PostgreSQL session, and
/// whatever it holds, stay open): the standby takes over once the writer's lease runs out,
/// the frozen writer writes nothing after SIGCONT and stands by, and every acquisition is in
/// the history exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_writer_is_replaced_within_seconds_and_writes_nothing_when_it_wakes() -> Result<()>
{
    let zk = Zk::start("frozen-writer").await?;
    let store = PgStore::start().await?;
    let replicas = pg_replicas(&zk, &store, &["a", "b"], false).await?;
    let result = frozen_writer_body(&zk, &store, &replicas).await;
    let result = result.map_err(|e| e.context(format!("postgres log:\n{}", store.log_tail(30))));
    with_logs(result, &replicas.iter().collect::<Vec<_>>())
}

async fn frozen_writer_body(zk: &Zk, store: &PgStore, replicas: &[LockscopeProcess]) -> Result<()> {
    // `a` is the writer, `b` the standby (usually the first started writes, but both start
    // at about the same time).
    let writer = agreed_writer(replicas).await?;
    let (a, b) = (&replicas[writer], &replicas[1 - writer]);
    let (a_name, b_name) = (a.name().to_string(), b.name().to_string());
    let path = zk.path("frozen");
    let id = lock_id(SOURCE, &path);
    let mut kazoo = zk.kazoo("frozen", "churner").await?;
    let churn = Churn::new();
    let (a_api, b_api) = (a.api(), b.api());
    let pid = a.pid().context("a runs")?;
    let faults = async {
        let result = async {
            churn.more(3, "while a writes").await?;
            let frozen = Frozen::stop(pid)?;
            let stopped = Instant::now();
            wait_store(b_api, "the standby writing after the writer froze", |s| {
                s["writing"] == true
            })
            .await?;
            let took_over = stopped.elapsed();
            println!("writer SIGSTOP: the standby took over after {took_over:?}");
            // a is frozen: whatever it wrote is all it will ever write.
            let by_a = rows_by(store, &a_name).await?;
            churn
                .more(5, "after the standby took over, the writer still frozen")
                .await?;
            frozen.resume()?;
            let resumed = Instant::now();
            wait_store(a_api, "the old writer standing by after it woke", |s| {
                s["writing"] == false
                    && s["writer"]["replica"] == b_name.as_str()
                    && s["connected"] == true
            })
            .await?;
            println!(
                "writer SIGCONT: {a_name} stood by after {:?}",
                resumed.elapsed()
            );
            churn.more(5, "after the old writer woke").await?;
            let after = rows_by(store, &a_name).await?;
            ensure!(
                after == by_a,
                "{a_name} wrote {} lock events after it lost the lease",
                after - by_a
            );
            anyhow::Ok(took_over)
        }
        .await;
        churn.stop.store(true, Ordering::SeqCst);
        result
    };
    // While a is frozen only b can show the holders; each acquisition is seen by b (which
    // writes, or will) before it is released.
    let watchers = [b_api];
    let (nodes, took_over) = tokio::time::timeout(Duration::from_secs(120), async {
        tokio::join!(churn.run(&mut kazoo, &path, &watchers), faults)
    })
    .await
    .context("the churn did not finish")?;
    let (nodes, took_over) = (nodes?, took_over?);
    ensure!(took_over < WAIT);
    for ls in [b_api, a_api] {
        history_holds_once(ls, &id, &nodes, 100).await?;
    }
    let tokens = store
        .column("SELECT replica || ' ' || token FROM lockscope.store_writer")
        .await?;
    println!(
        "{} acquisitions, each in the history once; lease {tokens:?}",
        nodes.len()
    );
    Ok(())
}

/// The store reached through a relay that goes silent (no FIN, no RST): the lock page answers
/// at once from memory with the history marked unavailable, `/api/v1/store` says so, and after
/// the heal every acquisition made meanwhile is in the history, nothing dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_store_leaves_the_lock_page_answering_from_memory_and_loses_nothing() -> Result<()>
{
    let zk = Zk::start("silent-store").await?;
    let store = PgStore::start().await?;
    let relay = TcpProxy::start(store.addr()).await?;
    let config = zk.toml() + &store.store_toml_at("a", relay.addr(), "");
    let replica = LockscopeProcess::start("a", &config, &store.env()).await?;
    let result = silent_store_body(&zk, &relay, &replica).await;
    let result = result.map_err(|e| e.context(format!("postgres log:\n{}", store.log_tail(30))));
    with_logs(result, &[&replica])
}

async fn silent_store_body(zk: &Zk, relay: &TcpProxy, replica: &LockscopeProcess) -> Result<()> {
    let ls = replica.api();
    wait_store(ls, "connected and writing", |s| {
        s["connected"] == true && s["writing"] == true
    })
    .await?;
    let path = zk.path("silent");
    let id = lock_id(SOURCE, &path);
    let mut client = zk.kazoo("silent", "worker").await?;
    let mut nodes = acquire_seen(&mut client, ls, &path, 2).await?;
    history_holds_once(ls, &id, &nodes, 100).await?;

    relay.blackhole();
    let cut = Instant::now();
    let node = acquire(&mut client).await?;
    wait_holder(ls, &path, &node).await?;
    let asked = Instant::now();
    let (status, page) = tokio::time::timeout(
        Duration::from_secs(5),
        ls.get_json(&format!("/api/v1/locks/{id}")),
    )
    .await
    .context("the lock page waited for the silent store")??;
    let answered = asked.elapsed();
    ensure!(status == 200, "lock page: {status} {page}");
    ensure!(
        page["history_unavailable"]
            .as_str()
            .is_some_and(|why| !why.is_empty()),
        "the lock page does not say the history is unavailable: {page}"
    );
    let holders = page["holders"].as_array().cloned().unwrap_or_default();
    ensure!(
        holders.iter().any(|h| h["node"] == node.as_str()),
        "the lock page from memory lacks the holder {node}: {page}"
    );
    println!(
        "store silent: the lock page answered from memory in {answered:?}: {}",
        page["history_unavailable"]
    );
    client.release().await?;
    nodes.push(node);
    nodes.extend(acquire_seen(&mut client, ls, &path, 2).await?);
    let said = wait_store(ls, "the silent store reported", |s| {
        s["error"].as_str().is_some_and(|e| !e.is_empty()) && s["writing"] != true
    })
    .await?;
    println!(
        "store silent: /api/v1/store said so after {:?}: {}",
        cut.elapsed(),
        said["error"]
    );

    relay.pass();
    let healed = Instant::now();
    wait_store(ls, "connected and writing again", |s| {
        s["connected"] == true && s["error"].is_null() && s["writing"] == true
    })
    .await?;
    history_holds_once(ls, &id, &nodes, 100).await?;
    println!(
        "store healed: the history complete again after {:?}",
        healed.elapsed()
    );
    let (status, page) = ls.get_json(&format!("/api/v1/locks/{id}")).await?;
    ensure!(
        status == 200 && page.get("history_unavailable").is_none(),
        "{status} {page}"
    );
    let state = store_state(ls).await?;
    ensure!(state["events_dropped"] == 0, "{state}");
    Ok(())
}

/// The writer's lease, the replicas' beats and the store's sessions, for a failure message.
async fn store_facts(store: &PgStore) -> String {
    let mut facts = String::new();
    for sql in [
        "SELECT concat_ws(' ', replica, token, backend_pid, expires_ms, through_ms, \
         (extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM lockscope.store_writer",
        "SELECT concat_ws(' ', replica, started_ms, beat_ms) FROM lockscope.replica_beats",
        "SELECT concat_ws(' ', pid, application_name, state, wait_event, left(query, 80)) \
         FROM pg_stat_activity WHERE usename = 'lockscope_store'",
    ] {
        facts += &format!("{sql}: {:?}\n", store.column(sql).await);
    }
    facts
}

/// libfaketime, preloaded into one lockscope replica to skew its clock.
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// Starts replica `name` on `store` with its wall clock moved by `skew` (libfaketime's
/// `FAKETIME` syntax, `+90s`), as `faketime -f` does.
async fn skewed_replica(
    zk: &Zk,
    store: &PgStore,
    name: &str,
    skew: &str,
) -> Result<LockscopeProcess> {
    ensure!(
        std::path::Path::new(LIBFAKETIME).exists(),
        "{LIBFAKETIME} is missing: scripts/install-deps installs Debian's faketime"
    );
    let mut env: Vec<(&str, &str)> = store.env().to_vec();
    env.extend([
        ("LD_PRELOAD", LIBFAKETIME),
        ("FAKETIME", skew),
        // Only the wall clock is off, as on a host whose clock is wrong.
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ]);
    let config = zk.toml() + &store.store_toml(name);
    LockscopeProcess::start(name, &config, &env).await
}

/// Two replicas whose clocks are 180 s apart (one 90 s behind the store's, one 90 s ahead),
/// each killed and restarted in turn while locks churn, each kill waiting for the other to
/// take over: the election, the takeover's gap and the matching window all hold, and every
/// acquisition is in the history exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_90_s_off_the_stores_clock_take_over_and_record_exactly_once() -> Result<()> {
    let zk = Zk::start("skewed-replicas").await?;
    let store = PgStore::start().await?;
    let mut replicas = vec![
        skewed_replica(&zk, &store, "a", "-90s").await?,
        skewed_replica(&zk, &store, "b", "+90s").await?,
    ];
    let result = async {
        // The skew took: each measured its offset to the store's clock (store − replica).
        for (replica, expected) in [(&replicas[0], 90_000), (&replicas[1], -90_000)] {
            eventually(WAIT, "the clock offset measured", async || {
                let log = replica.log_tail(400);
                let offset = log
                    .split("offset_ms=")
                    .nth(1)
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(|n| n.parse::<i64>().ok());
                Ok(offset.filter(|o| (o - expected).abs() < 1_000))
            })
            .await
            .with_context(|| format!("{}'s clock offset", replica.name()))?;
        }
        churn_body(&zk, &mut replicas, true).await?;
        // How far the history is written is said in the store's time, whichever replica
        // writes (the standby compares it with what it keeps): an idle writer's `through_ms`
        // is a second behind the store's clock, not 90 s off it.
        let behind = store
            .number(
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint - through_ms \
                 FROM lockscope.store_writer",
            )
            .await?;
        ensure!(
            (-5_000..=15_000).contains(&behind),
            "through_ms is {behind} ms behind the store's clock"
        );
        anyhow::Ok(())
    }
    .await;
    let result = match result {
        Ok(()) => Ok(()),
        Err(e) => Err(e.context(store_facts(&store).await)),
    };
    with_logs(result, &replicas.iter().collect::<Vec<_>>())
}

/// A force release whose audit record was written `pending` and whose completion the store
/// refused: completed once the store takes writes again. Then the same on a replica that is
/// killed before the store takes it: the writer closes the record as `unknown`, with the
/// reason, once the replica's beats have stopped. Then a record whose write the store stalled
/// past lockscope's wait: the release is refused, and the record, landing later, is closed by
/// its replica as `store_unavailable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_audit_records_are_completed_or_closed_as_unknown() -> Result<()> {
    let zk = Zk::start("audit-pending").await?;
    let store = PgStore::start().await?;
    let mut replicas = pg_replicas(&zk, &store, &["a", "b"], true).await?;
    let result = pending_audits_body(&zk, &store, &mut replicas).await;
    let result = result.map_err(|e| e.context(format!("postgres log:\n{}", store.log_tail(30))));
    with_logs(result, &replicas.iter().collect::<Vec<_>>())
}

/// Force-releases a fresh kazoo holder of `lock` on `ls`; answers the reason it was given
/// (unique) and the answer.
async fn force_release(zk: &Zk, ls: &Lockscope, lock: &str) -> Result<(String, Value)> {
    let path = zk.path(lock);
    let id = lock_id(SOURCE, &path);
    let mut holder = zk.kazoo(lock, "stuck-worker").await?;
    let node = acquire(&mut holder).await?;
    let view = ls
        .wait_lock(SOURCE, &path, WAIT, "the holder", |l| {
            l.holders.iter().any(|h| h.node == node)
        })
        .await?;
    let held = &view.holders[0];
    let reason = format!("pending test {}", unique_root("reason"));
    let (status, answer) = ls
        .release(
            &id,
            Some(TOKEN),
            &json!({"holder": held.node, "session": held.session, "version": held.version,
                    "reason": reason}),
        )
        .await?;
    ensure!(status == 200, "release: {status} {answer}");
    Ok((reason, answer))
}

/// The audit record with `reason`, as `ls` lists it.
async fn audit_with(
    ls: &Lockscope,
    reason: &str,
) -> Result<Option<lockscope_model::wire::AuditRecord>> {
    Ok(ls
        .audit_log()
        .await?
        .into_iter()
        .find(|r| r.reason == reason))
}

async fn pending_audits_body(
    zk: &Zk,
    store: &PgStore,
    replicas: &mut [LockscopeProcess],
) -> Result<()> {
    // `a` writes (and survives); releases run on the standby `b`, which is then killed.
    let writer = agreed_writer(replicas).await?;
    let a = Lockscope::at(&replicas[writer].api().base)?;
    let b = 1 - writer;

    // The completion refused, then taken.
    store.set_audit_completions_failing(true).await?;
    let (reason, answer) = force_release(zk, replicas[b].api(), "completed-later").await?;
    ensure!(
        answer["audit_error"].is_string(),
        "the answer does not say the outcome is not stored yet: {answer}"
    );
    let record = audit_with(&a, &reason).await?.context("no record")?;
    ensure!(record.outcome == "pending", "{record:#?}");
    store.set_audit_completions_failing(false).await?;
    let back = Instant::now();
    let done = eventually(WAIT, "the record completed", async || {
        Ok(audit_with(&a, &reason)
            .await?
            .filter(|r| r.outcome != "pending"))
    })
    .await?;
    ensure!(
        done.outcome == "released" && done.finished_ms.is_some(),
        "{done:#?}"
    );
    println!(
        "audit completion refused: written {:?} after the store took writes again",
        back.elapsed()
    );

    // The replica dies with its record pending.
    store.set_audit_completions_failing(true).await?;
    let (reason, answer) = force_release(zk, replicas[b].api(), "abandoned").await?;
    ensure!(answer["audit_error"].is_string(), "{answer}");
    replicas[b].kill();
    let killed = Instant::now();
    store.set_audit_completions_failing(false).await?;
    let closed = eventually(WAIT, "the abandoned record closed", async || {
        Ok(audit_with(&a, &reason)
            .await?
            .filter(|r| r.outcome != "pending"))
    })
    .await?;
    ensure!(
        closed.outcome == "unknown"
            && closed.detail.contains("unknown")
            && closed.finished_ms.is_some(),
        "{closed:#?}"
    );
    println!(
        "replica killed with a pending audit record: closed as unknown after {:?}",
        killed.elapsed()
    );

    // The store stalls on the record's write past lockscope's 5 s: the release is refused
    // (nothing changed); the write lands later all the same, and its replica closes it as
    // refused.
    let path = zk.path("unconfirmed");
    let id = lock_id(SOURCE, &path);
    let mut holder = zk.kazoo("unconfirmed", "stuck-worker").await?;
    let node = acquire(&mut holder).await?;
    let view = a
        .wait_lock(SOURCE, &path, WAIT, "the holder", |l| {
            l.holders.iter().any(|h| h.node == node)
        })
        .await?;
    let held = &view.holders[0];
    let reason = format!("unconfirmed {}", unique_root("reason"));
    store.set_audit_inserts_slow(Some(8)).await?;
    let (status, answer) = a
        .release(
            &id,
            Some(TOKEN),
            &json!({"holder": held.node, "session": held.session, "version": held.version,
                    "reason": reason}),
        )
        .await?;
    // Waits for the slow insert (the trigger's table lock) before it drops the trigger.
    store.set_audit_inserts_slow(None).await?;
    ensure!(
        status == 503,
        "a release whose record was not confirmed: {status} {answer}"
    );
    let released = a.lock(SOURCE, &path).await?;
    ensure!(
        released.is_some_and(|l| l.holders.iter().any(|h| h.node == node)),
        "the holder was released although its record was not written"
    );
    let unstalled = Instant::now();
    let closed = eventually(WAIT, "the unconfirmed record closed", async || {
        Ok(audit_with(&a, &reason)
            .await?
            .filter(|r| r.outcome != "pending"))
    })
    .await;
    let closed = match closed {
        Ok(closed) => closed,
        Err(e) => {
            let rows = store
                .column(
                    "SELECT concat_ws(' ', id, replica, outcome, store_at_ms, reason) \
                     FROM lockscope.audit ORDER BY id",
                )
                .await;
            bail!("{e}; audit rows {rows:?}; {}", store_facts(store).await)
        }
    };
    ensure!(closed.outcome == "store_unavailable", "{closed:#?}");
    println!(
        "a record written after its release was refused: closed as store_unavailable {:?} after the store took it",
        unstalled.elapsed()
    );
    Ok(())
}

// -------------------------------------------------------------------------------------------
// SQLite

/// The embedded store keeps the history tests: a lock gone across a restart opens with its
/// history, and the history pages with `before`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_keeps_history_across_a_restart_and_pages_it() -> Result<()> {
    let zk = Zk::start("sqlite-history").await?;
    let dir = tempfile::tempdir()?;
    let config = zk.toml()
        + &format!(
            "[store]\nurl = \"sqlite://{}\"\n",
            dir.path().join("store.db").display()
        );
    let mut replicas = vec![LockscopeProcess::start("sqlite", &config, &[]).await?];
    let result = sqlite_body(&zk, &mut replicas).await;
    with_logs(result, &replicas.iter().collect::<Vec<_>>())
}

async fn sqlite_body(zk: &Zk, replicas: &mut [LockscopeProcess]) -> Result<()> {
    let state = store_state(replicas[0].api()).await?;
    ensure!(
        state["backend"] == "sqlite" && state["connected"] == true,
        "{state}"
    );
    // Paging: 25 acquisitions of one lock, read 7 a page.
    let ls = replicas[0].api();
    let path = zk.path("paged");
    let mut client = zk.kazoo("paged", "pager").await?;
    let nodes = acquire_seen(&mut client, ls, &path, 25).await?;
    let id = lock_id(SOURCE, &path);
    history_holds_once(ls, &id, &nodes, 7).await?;
    let (status, body) = ls
        .get_json(&format!("/api/v1/locks/{id}/events?limit=0"))
        .await?;
    ensure!(status == 400, "limit=0: {status} {body}");
    // The contract says 404 for a lock nobody knows; the store answers an empty history
    // (200) instead: both say "nothing".
    let (status, body) = ls
        .get_json(&format!(
            "/api/v1/locks/{}/events",
            lock_id(SOURCE, "/nothing/here")
        ))
        .await?;
    ensure!(
        status == 404 || (status == 200 && body == json!({"events": [], "next_before": null})),
        "an unknown lock's events: {status} {body}"
    );
    // Gone across a restart.
    gone_across_restart(zk, replicas, None).await
}

// -------------------------------------------------------------------------------------------
// The support

/// The child-process support itself: lockscope is SIGKILLed by its PID (the process is gone, not
/// just its port closed) and a restart answers on the same address; a bad configuration fails
/// the start at once with lockscope's own message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lockscope_process_is_killed_by_pid_and_restarted_on_its_port() -> Result<()> {
    let zk = Zk::start("process-support").await?;
    let mut ls = LockscopeProcess::start("solo", &zk.toml(), &[]).await?;
    let (port, pid) = (ls.port(), ls.pid().context("no pid")?);
    let sources = ls.api().sources().await?;
    ensure!(sources.len() == 1 && sources[0].synced, "{sources:?}");
    ls.kill();
    ensure!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "pid {pid} still there after kill"
    );
    ensure!(ls.api().sources().await.is_err(), "answers after kill");
    ls.restart().await?;
    ensure!(ls.port() == port && ls.pid() != Some(pid));
    ensure!(ls.api().sources().await?.len() == 1);
    let bad = LockscopeProcess::start("bad", &(zk.toml() + "bogus = 1\n"), &[])
        .await
        .err()
        .context("a bad config started")?;
    ensure!(format!("{bad:#}").contains("bogus"), "{bad:#}");
    Ok(())
}

/// SQLSTATE of what `sql` fails with as the store role on a new connection (`None`: it worked).
async fn store_user_sqlstate(store: &PgStore, sql: &str) -> Result<Option<String>> {
    use lockscope_tests::support::dblocks::DbFailure;
    let mut conn =
        lockscope_tests::support::postgres::connect(&store.url(), "lockscope-test").await?;
    let result = sqlx::raw_sql(sql).execute(&mut conn).await;
    let _ = sqlx::Connection::close(conn).await;
    Ok(result.err().map(|e| {
        let failure = DbFailure::from_sqlx(&e);
        failure.sqlstate.unwrap_or(failure.message)
    }))
}

/// The store fixture: the role may create tables in its own schema only and is no superuser;
/// "read only" and "full" fail writes with PostgreSQL's own SQLSTATEs (25006, 53100) and are
/// undone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_fixture_is_least_privilege_and_its_faults_are_real_errors() -> Result<()> {
    let store = PgStore::start().await?;
    let create = "CREATE TABLE lock_events (id bigserial PRIMARY KEY, node text)";
    ensure!(store_user_sqlstate(&store, create).await?.is_none());
    let insert = "INSERT INTO lock_events (node) VALUES ('n')";
    ensure!(store_user_sqlstate(&store, insert).await?.is_none());
    let elsewhere = store_user_sqlstate(&store, "CREATE TABLE public.x (a int)").await?;
    ensure!(elsewhere.as_deref() == Some("42501"), "{elsewhere:?}");
    let other_db = store_user_sqlstate(&store, "CREATE DATABASE other").await?;
    ensure!(other_db.as_deref() == Some("42501"), "{other_db:?}");
    let superuser = store
        .column("SELECT rolsuper::text FROM pg_roles WHERE rolname = 'lockscope_store'")
        .await?;
    ensure!(superuser == ["false"], "{superuser:?}");
    ensure!(store.tables().await? == ["lock_events"]);

    store.set_full(true).await?;
    let full = store_user_sqlstate(&store, insert).await?;
    ensure!(full.as_deref() == Some("53100"), "{full:?}");
    store.set_full(false).await?;
    ensure!(store_user_sqlstate(&store, insert).await?.is_none());

    store.set_read_only(true).await?;
    let read_only = store_user_sqlstate(&store, insert).await?;
    ensure!(read_only.as_deref() == Some("25006"), "{read_only:?}");
    let advisory = store_user_sqlstate(&store, "SELECT pg_advisory_lock(1)").await?;
    ensure!(
        advisory.is_none(),
        "advisory lock on a read-only store: {advisory:?}"
    );
    store.set_read_only(false).await?;
    ensure!(store_user_sqlstate(&store, insert).await?.is_none());
    Ok(())
}
