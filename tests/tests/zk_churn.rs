//! Counts under churn: real kazoo and Curator clients take and release locks as fast as their
//! libraries go, and lockscope's acquisition and release counters and its wait/hold histograms
//! end up equal to what the clients made — every hold booked, even one gone before lockscope
//! could read its node — while the holders and waiters it shows are only nodes it read (each
//! with a client's session). Facts are awaited with bounds; nothing is timed.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use lockscope_model::parse_session_hex;
use lockscope_model::wire::StreamEvent;
use lockscope_tests::harness::{eventually, EventReader, Lockscope};
use lockscope_tests::support::curator::{CuratorClient, CuratorRecipe};
use lockscope_tests::support::python::python_and_script;
use lockscope_tests::support::zk::ZkEnsemble;
use lockscope_tests::unique_root;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The churn script, run with the test environment's kazoo.
const CHURN: &str = include_str!("../py/zk_churn.py");

/// How long lockscope may take to book the last change once the clients are done (release
/// causes wait for ensemble rounds, polled every 300 ms here).
const SETTLE: Duration = Duration::from_secs(60);

/// Label sets and values of every sample of `family` (exact name, no suffix) in `text`.
fn samples(text: &str, family: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let prefix = format!("{family}{{");
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(&prefix)?;
            let (labels, value) = rest.rsplit_once("} ")?;
            let labels = labels
                .split("\",")
                .filter_map(|pair| {
                    let (k, v) = pair.split_once("=\"")?;
                    Some((k.to_string(), v.trim_end_matches('"').to_string()))
                })
                .collect();
            Some((labels, value.trim().parse().ok()?))
        })
        .collect()
}

/// The sum of `family` over the samples of source `zk` whose `lock` is one of `locks`.
fn sum_of(text: &str, family: &str, locks: &[String]) -> f64 {
    samples(text, family)
        .into_iter()
        .filter(|(labels, _)| {
            labels.get("source").map(String::as_str) == Some("zk")
                && labels.get("lock").is_some_and(|l| locks.contains(l))
        })
        .map(|(_, value)| value)
        .sum()
}

/// lockscope's books for `locks`: acquisitions, releases (every cause), wait and hold
/// observations, and releases booked with a cause other than `released`.
#[derive(Debug, PartialEq)]
struct Books {
    acquisitions: u64,
    releases: u64,
    waits: u64,
    holds: u64,
    other_causes: u64,
}

fn books(text: &str, locks: &[String]) -> Books {
    let released_by_cause = samples(text, "lockscope_lock_releases_total")
        .into_iter()
        .filter(|(labels, _)| {
            labels.get("source").map(String::as_str) == Some("zk")
                && labels.get("lock").is_some_and(|l| locks.contains(l))
                && labels.get("cause").map(String::as_str) != Some("released")
        })
        .map(|(_, v)| v)
        .sum::<f64>();
    Books {
        acquisitions: sum_of(text, "lockscope_lock_acquisitions_total", locks) as u64,
        releases: sum_of(text, "lockscope_lock_releases_total", locks) as u64,
        waits: sum_of(text, "lockscope_lock_wait_duration_seconds_count", locks) as u64,
        holds: sum_of(text, "lockscope_lock_hold_duration_seconds_count", locks) as u64,
        other_causes: released_by_cause as u64,
    }
}

/// Waits until lockscope's books for `locks` equal `made` acquisitions and releases.
async fn wait_books(ls: &Lockscope, locks: &[String], made: u64) -> Result<()> {
    let want = Books {
        acquisitions: made,
        releases: made,
        waits: made,
        holds: made,
        other_causes: 0,
    };
    let mut last = None;
    let booked = eventually(
        SETTLE,
        "lockscope's books equal what the clients made",
        async || {
            let got = books(&ls.metrics().await?, locks);
            let done = got == want;
            last = Some(got);
            Ok(done.then_some(()))
        },
    )
    .await;
    booked.with_context(|| format!("want {want:?}, last seen {last:?}"))
}

/// Reads the event stream until `stop` fires and returns every session it showed holding or
/// waiting on a lock under `root`.
async fn shown_sessions(
    mut events: EventReader,
    root: String,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> Result<BTreeSet<String>> {
    let mut sessions = BTreeSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(sessions),
            event = events.next(Duration::from_secs(3600)) => {
                if let (_, StreamEvent::Lock { lock }) = event? {
                    if lock.path.starts_with(&root) {
                        sessions.extend(lock.holders.iter().map(|h| h.session.clone()));
                        sessions.extend(lock.waiters.iter().map(|w| w.session.clone()));
                    }
                }
            }
        }
    }
}

/// One kazoo churn process: its session and, once done, what it made.
struct Churner {
    child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    session: String,
}

impl Churner {
    async fn spawn(python: &std::path::Path, script: &std::path::Path, cfg: Value) -> Result<Self> {
        let mut child = tokio::process::Command::new(python)
            .arg(script)
            .arg(cfg.to_string())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("start the kazoo churn script")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .context("no READY from a kazoo churn client within 60 s")??
            .context("kazoo churn client exited before READY")?;
        let detail: Value = serde_json::from_str(
            ready
                .strip_prefix("READY ")
                .with_context(|| format!("not READY: {ready}"))?,
        )?;
        let session = detail["session_id"]
            .as_str()
            .context("no session id")?
            .to_string();
        Ok(Churner {
            child,
            lines,
            session,
        })
    }

    /// Acquisitions and releases the client made (they are equal: each acquire is released);
    /// its session stays open until [`Churner::close`].
    async fn done(&mut self) -> Result<(u64, u64)> {
        let line = tokio::time::timeout(Duration::from_secs(300), self.lines.next_line())
            .await
            .context("a kazoo churn client still running after 300 s")??
            .context("kazoo churn client exited without a result")?;
        let Some(result) = line.strip_prefix("DONE ") else {
            bail!("kazoo churn client: {line}");
        };
        let result: Value = serde_json::from_str(result)?;
        Ok((
            result["acquired"].as_u64().context("acquired")?,
            result["released"].as_u64().context("released")?,
        ))
    }

    /// Ends stdin: the client closes its session and exits.
    async fn close(mut self) -> Result<()> {
        drop(self.child.stdin.take());
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .context("a kazoo churn client still running 30 s after its stdin ended")??;
        ensure!(status.success(), "kazoo churn client exited with {status}");
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_lock_churn_is_booked_exactly() -> Result<()> {
    let (python, zk) = tokio::join!(
        tokio::task::spawn_blocking(python_and_script),
        ZkEnsemble::start(3)
    );
    let (python, _) = python??;
    let zk = zk?;
    let hosts = zk.connect_string();
    let root = unique_root("churn");
    let ls = Lockscope::watching("zk", &hosts, &[&root]).await?;
    let scripts = tempfile::tempdir()?;
    let script = scripts.path().join("zk_churn.py");
    std::fs::write(&script, CHURN)?;

    // Four sessions over two names: every name has two clients taking it in turn, so holds
    // start both at once (a free lock) and after a wait (the predecessor's release).
    let names: Vec<String> = (0..2).map(|i| format!("{root}/name{i}")).collect();
    const CLIENTS: usize = 4;
    const ITERATIONS: u64 = 250;
    let stream = ls.events().await?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let watcher = tokio::spawn(shown_sessions(stream, root.clone(), stop_rx));
    let mut churners = Vec::new();
    for c in 0..CLIENTS {
        let cfg = json!({
            "hosts": hosts,
            "paths": names,
            "identifier": format!("c{c}"),
            "iterations": ITERATIONS,
            "offset": c,
        });
        churners.push(Churner::spawn(&python, &script, cfg).await?);
    }
    let clients: BTreeSet<String> = churners.iter().map(|c| c.session.clone()).collect();
    let mut made = 0;
    for churner in &mut churners {
        let (acquired, released) = churner.done().await?;
        ensure!(acquired == ITERATIONS && released == ITERATIONS);
        made += acquired;
    }
    // The sessions live on until everything is booked: every release is the client's own.
    wait_books(&ls, &names, made).await?;
    for churner in churners {
        churner.close().await?;
    }

    // Nothing is shown any more, and what was shown on the way was read from ZooKeeper: only the
    // clients' own sessions ever held or waited.
    for name in &names {
        let lock = ls.lock("zk", name).await?;
        ensure!(
            lock.as_ref()
                .is_none_or(|l| l.holders.is_empty() && l.waiters.is_empty()),
            "{name} still shows participants: {lock:?}"
        );
    }
    let _ = stop_tx.send(());
    let shown = watcher.await??;
    ensure!(!shown.is_empty(), "the stream showed no participant at all");
    for session in &shown {
        ensure!(
            parse_session_hex(session).is_some() && clients.contains(session),
            "the stream showed session {session}, not one of the clients' {clients:?}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_mutex_churn_is_booked_exactly() -> Result<()> {
    let zk = ZkEnsemble::start(3).await?;
    let hosts = zk.connect_string();
    let root = unique_root("curator-churn");
    let ls = Lockscope::watching("zk", &hosts, &[&root]).await?;
    let path = format!("{root}/mutex");

    // Three JVMs contend for one InterProcessMutex; each takes and releases it in turn.
    const CLIENTS: usize = 3;
    const ITERATIONS: u64 = 60;
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(CuratorClient::spawn(&hosts, 10_000, CuratorRecipe::Mutex, &path).await?);
    }
    let runs = clients.into_iter().map(|mut client| {
        tokio::spawn(async move {
            for _ in 0..ITERATIONS {
                client.start_acquire().await?;
                client.wait_acquired(Duration::from_secs(60)).await?;
                client.release().await?;
            }
            anyhow::Ok(client)
        })
    });
    let mut done = Vec::new();
    for run in futures::future::join_all(runs).await {
        done.push(run??);
    }
    let made = CLIENTS as u64 * ITERATIONS;
    wait_books(&ls, std::slice::from_ref(&path), made).await?;
    for client in done {
        client.quit().await?;
    }
    Ok(())
}
