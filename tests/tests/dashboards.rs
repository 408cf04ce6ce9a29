//! The shipped Grafana dashboards and Prometheus alert rules (`dashboards/`), checked the way a
//! user would meet them: promtool checks and unit tests of the rules, and a real Prometheus
//! scraping a real lockscope that watches real ZooKeeper and Redis under the lock workload,
//! evaluating every panel query and every alert expression; and two replicas scraped together
//! answering every one of them as one replica does.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use lockscope::config::{section, Config, RedisSourceConfig};
use lockscope_tests::harness::{eventually, zk_source, Lockscope};
use lockscope_tests::recipes::{lock, SeedClient, SeedRecipe};
use lockscope_tests::support::prometheus::Prometheus;
use lockscope_tests::support::redis::RedisServer;
use lockscope_tests::support::zk::ZkEnsemble;
use serde_json::Value;

fn dashboards() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboards")
}

fn promtool(args: &[&str]) -> Result<String> {
    let out = std::process::Command::new("promtool")
        .args(args)
        .current_dir(dashboards().join("prometheus"))
        .output()
        .context("promtool (scripts/install-deps installs prometheus)")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(out.status.success(), "promtool {args:?} failed:\n{text}");
    Ok(text)
}

#[test]
fn alert_rules_pass_promtool_check_and_unit_tests() -> Result<()> {
    let checked = promtool(&["check", "rules", "alerts.yml"])?;
    ensure!(checked.contains("SUCCESS: 20 rules found"), "{checked}");
    promtool(&["test", "rules", "alerts.test.yml"])?;
    // Every alert has the three annotations an on-call engineer needs.
    let text = std::fs::read_to_string(dashboards().join("prometheus/alerts.yml"))?;
    let alerts = text.matches("- alert:").count();
    for key in ["summary:", "description:", "runbook:"] {
        ensure!(
            text.matches(key).count() == alerts,
            "not every alert has {key}"
        );
    }
    Ok(())
}

/// Every PromQL expression the dashboards use, with Grafana's variables filled in
/// (`$__rate_interval` as `rate_window`); the flag says whether it is on the overview (which must
/// return data).
fn dashboard_queries(rate_window: &str) -> Result<Vec<(String, String, bool)>> {
    let mut out = Vec::new();
    for (file, overview) in [
        ("lockscope-overview.json", true),
        ("lockscope-lock.json", false),
        // No database source here: its queries must run and name exported metrics, but
        // need not return data.
        ("lockscope-databases.json", false),
    ] {
        let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(
            dashboards().join("grafana").join(file),
        )?)?;
        ensure!(dashboard["uid"].is_string() && dashboard["title"].is_string());
        let vars: Vec<&str> = dashboard["templating"]["list"]
            .as_array()
            .context("templating")?
            .iter()
            .filter_map(|v| v["name"].as_str())
            .collect();
        ensure!(
            vars.contains(&"datasource") && vars.contains(&"source"),
            "{file}: variables {vars:?}"
        );
        for var in dashboard["templating"]["list"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(def) = var["definition"].as_str() {
                // label_values(<selector>, <label>) → the selector must select something.
                let inner = def
                    .trim_start_matches("label_values(")
                    .rsplit_once(',')
                    .map(|(sel, _)| sel.to_string())
                    .context("label_values")?;
                out.push((
                    format!("{file} variable {}", var["name"]),
                    fill(&inner, rate_window),
                    overview,
                ));
            }
        }
        let panels = dashboard["panels"].as_array().context("panels")?;
        if overview {
            // lockscope's own health has a row of its own.
            ensure!(
                panels
                    .iter()
                    .any(|p| p["type"] == "row" && p["title"] == "lockscope itself"),
                "{file}: no \"lockscope itself\" row"
            );
        }
        // A row only groups the panels below it: it has no query.
        for panel in panels.iter().filter(|p| p["type"] != "row") {
            ensure!(
                panel["datasource"]["uid"] == "${datasource}",
                "{file}: panel {} has a fixed datasource",
                panel["title"]
            );
            for target in panel["targets"].as_array().into_iter().flatten() {
                let expr = target["expr"].as_str().context("expr")?;
                out.push((
                    format!("{file} panel {:?}", panel["title"].as_str().unwrap_or("")),
                    fill(expr, rate_window),
                    overview,
                ));
            }
        }
    }
    Ok(out)
}

fn fill(expr: &str, rate_window: &str) -> String {
    expr.replace("$__rate_interval", rate_window)
        .replace("$source", ".*")
        .replace("$backend", ".*")
        .replace("$lock", ".*")
}

fn alert_exprs() -> Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(dashboards().join("prometheus/alerts.yml"))?;
    let mut out = Vec::new();
    let mut name = String::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(n) = line.strip_prefix("- alert:") {
            name = n.trim().to_string();
        } else if let Some(e) = line.strip_prefix("expr:") {
            out.push((name.clone(), e.trim().to_string()));
        }
    }
    ensure!(out.len() == 20, "{out:?}");
    Ok(out)
}

/// `lockscope_*` and `process_*` names a query uses, without histogram suffixes.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = ["lockscope_", "process_"]
        .iter()
        .filter_map(|prefix| expr[i..].find(prefix))
        .min()
    {
        let start = i + at;
        // A name starts at a word boundary (not `…_process_…`).
        if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            i = start + 1;
            continue;
        }
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        let name = &expr[start..end];
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        names.insert(base.to_string());
        i = end;
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_dashboard_and_alert_query_runs_on_real_data() -> Result<()> {
    let zk = ZkEnsemble::start(3).await?;
    let redis = RedisServer::start().await?;
    let root = lockscope_tests::unique_root("dash");
    let dir = tempfile::tempdir()?;
    let mut config = Config {
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
                    &["lock:*", "wl:*", "*lock*"],
                )],
            ),
        ]
        .concat(),
        ..Config::default()
    };
    config.store.path = Some(dir.path().join("lockscope.db"));
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(Duration::from_secs(30)).await?;

    // The real workload program: seed recipes (one herd-prone), Redis clients, crashed holders.
    let mut workload = tokio::process::Command::new(env!("CARGO_BIN_EXE_lockscope-workload"))
        .args([
            "--connect",
            &zk.connect_string(),
            "--root",
            &root,
            "--clients",
            "8",
            "--locks",
            "2",
        ])
        .args([
            "--hold-min-ms",
            "100",
            "--hold-max-ms",
            "800",
            "--think-min-ms",
            "50",
            "--think-max-ms",
            "300",
        ])
        .args([
            "--crash-every",
            "6",
            "--duration-secs",
            "90",
            "--redis",
            &redis.url(),
            "--redis-clients",
            "6",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("start lockscope-workload")?;

    let target = ls.base.trim_start_matches("http://").to_string();
    let prometheus =
        Prometheus::start(&[target], &[dashboards().join("prometheus/alerts.yml")]).await?;
    // Scrapes every second.
    eventually(
        Duration::from_secs(30),
        "Prometheus scraped lockscope's two sources",
        async || {
            let answer = prometheus.query("lockscope_source_up").await?;
            Ok(answer["data"]["result"]
                .as_array()
                .is_some_and(|r| r.len() == 2)
                .then_some(()))
        },
    )
    .await
    .with_context(|| format!("Prometheus log: {}", prometheus.log_path().display()))?;

    let exported: BTreeSet<String> = ls
        .metrics()
        .await?
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    let mut problems = Vec::new();
    let queries = dashboard_queries("30s")?;
    let alerts = alert_exprs()?;
    let all = queries
        .iter()
        .map(|(w, e, o)| (w.clone(), e.clone(), *o))
        .chain(
            alerts
                .iter()
                .map(|(n, e)| (format!("alert {n}"), e.clone(), false)),
        );
    let mut count = 0;
    for (what, expr, _) in all {
        count += 1;
        for name in metric_names(&expr) {
            if !exported.contains(&name) {
                problems.push(format!("{what}: {name} is not a metric lockscope exports"));
            }
        }
        let answer = prometheus.query(&expr).await?;
        if answer["status"] != "success" {
            problems.push(format!("{what}: {expr}: {}", answer["error"]));
            continue;
        }
    }
    println!(
        "evaluated {count} queries ({} dashboard, {} alert)",
        queries.len(),
        alerts.len()
    );
    ensure!(
        problems.is_empty(),
        "query problems:\n{}",
        problems.join("\n")
    );
    // Every overview panel shows data at some point while the workload runs (herds, crashed
    // holders' expiries and rates come and go): each query is asked until it has answered with
    // data once, within the workload's run.
    let mut empty: BTreeSet<(String, String)> = queries
        .iter()
        .filter(|(_, _, must)| *must)
        .map(|(what, expr, _)| (what.clone(), expr.clone()))
        .collect();
    let waited = eventually(
        Duration::from_secs(80),
        "every overview query answered with data",
        async || {
            let mut still = BTreeSet::new();
            for (what, expr) in &empty {
                let answer = prometheus.query(expr).await?;
                if answer["data"]["result"]
                    .as_array()
                    .is_none_or(|r| r.is_empty())
                {
                    still.insert((what.clone(), expr.clone()));
                }
            }
            empty = still;
            Ok(empty.is_empty().then_some(()))
        },
    )
    .await;
    ensure!(
        waited.is_ok(),
        "overview queries without data:\n{}",
        empty
            .iter()
            .map(|(what, expr)| format!("{what}: {expr}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Prometheus loaded the rules and evaluates them without errors.
    let rules = prometheus.rules().await?;
    let loaded: Vec<&Value> = rules["data"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .collect();
    ensure!(loaded.len() == 20, "{rules}");
    ensure!(loaded.iter().all(|r| r["health"] == "ok"), "{rules}");
    let _ = workload.kill().await;
    Ok(())
}

/// Families only one replica's own work or health feeds (its process, HTTP server, streams,
/// queue, store, collectors): queries over them stay per replica.
const PER_REPLICA: [&str; 9] = [
    "process_",
    "lockscope_build_info",
    "lockscope_http_",
    "lockscope_event_stream",
    "lockscope_aggregator_",
    "lockscope_source_lagging",
    "lockscope_store_",
    "lockscope_view_",
    "lockscope_collector_",
];

/// One query's answer as series (labels → value); a variable's query as the values of its label.
fn series(answer: &Value, label: Option<&str>) -> Result<BTreeMap<String, f64>> {
    ensure!(answer["status"] == "success", "{answer}");
    let result = answer["data"]["result"].as_array().context("result")?;
    let mut out = BTreeMap::new();
    for s in result {
        let key = match label {
            Some(label) => s["metric"][label].as_str().unwrap_or("").to_string(),
            None => s["metric"].to_string(),
        };
        let value = match label {
            Some(_) => 1.0,
            None => s["value"][1]
                .as_str()
                .context("value")?
                .parse::<f64>()
                .context("value")?,
        };
        out.insert(key, value);
    }
    Ok(out)
}

/// How far apart one replica's and two replicas' answers to `expr` may be: nothing for lock
/// state; the time between two scrapes where a gauge is an age; a little where a counter's rate
/// is extrapolated from scrapes the two Prometheus servers took at different moments (and the
/// two replicas booked at different instants, so a hold may fall into the next bucket).
fn tolerance(expr: &str, a: f64, b: f64) -> f64 {
    let scale = a.abs().max(b.abs());
    let mut tolerance: f64 = 1e-9;
    if expr.contains("oldest_wait_seconds") || expr.contains("ttl_seconds") {
        tolerance = tolerance.max(3.0);
    }
    if expr.contains("histogram_quantile") {
        tolerance = tolerance.max(0.1 * scale + 0.05);
    } else if expr.contains("increase(") {
        tolerance = tolerance.max(0.1 * scale + 1.0);
    } else if expr.contains("rate(") {
        tolerance = tolerance.max(0.1 * scale + 0.01);
    }
    tolerance
}

/// Where Prometheus scraping one replica and Prometheus scraping two answer `expr` differently.
fn differences(
    what: &str,
    expr: &str,
    one: &BTreeMap<String, f64>,
    two: &BTreeMap<String, f64>,
) -> Vec<String> {
    let mut out = Vec::new();
    // A counter's series exists once it first counted: one missing on one side is a 0 there
    // (within the tolerance, a replica may have booked an event the other judged otherwise).
    let counted = !expr.contains("histogram_quantile")
        && (expr.contains("rate(") || expr.contains("increase("));
    if counted {
        let keys: BTreeSet<&String> = one.keys().chain(two.keys()).collect();
        for key in keys {
            let (a, b) = (
                one.get(key).copied().unwrap_or(0.0),
                two.get(key).copied().unwrap_or(0.0),
            );
            if (a - b).abs() > tolerance(expr, a, b) {
                out.push(format!(
                    "{what}: {expr}: {key} is {a} with one replica, {b} with two"
                ));
            }
        }
        return out;
    }
    if one.keys().ne(two.keys()) {
        out.push(format!(
            "{what}: {expr}: series {:?} with one replica, {:?} with two",
            one.keys().collect::<Vec<_>>(),
            two.keys().collect::<Vec<_>>()
        ));
        return out;
    }
    for (key, a) in one {
        let b = two[key];
        let same = (a.is_nan() && b.is_nan()) || (a - b).abs() <= tolerance(expr, *a, b);
        if !same {
            out.push(format!(
                "{what}: {expr}: {key} is {a} with one replica, {b} with two"
            ));
        }
    }
    out
}

/// The alerts of the lock rules (group `lockscope`) Prometheus holds now: name, labels, state.
fn lock_alerts(rules: &Value) -> BTreeSet<String> {
    rules["data"]["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| g["name"] == "lockscope")
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .flat_map(|r| r["alerts"].as_array().into_iter().flatten())
        .map(|a| format!("{} {}", a["labels"], a["state"]))
        .collect()
}

fn now_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Two lockscope replicas watching the same ZooKeeper and Redis through the lock workload, one
/// Prometheus scraping replica a alone and one scraping a and b: every dashboard query and every
/// alert expression answers the same on both (the lock series are aggregated over `instance`
/// before anything is summed), the lock alerts are the same alerts, and the per-replica
/// self-metrics show each replica. A naive `sum(lockscope_locks)` doubles on the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_answer_as_one() -> Result<()> {
    let zk = ZkEnsemble::start(1).await?;
    let redis = RedisServer::start().await?;
    let root = lockscope_tests::unique_root("replicas");
    let config = || Config {
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
                    &["lock:*", "wl:*", "*lock*"],
                )],
            ),
        ]
        .concat(),
        ..Config::default()
    };
    let a = Lockscope::start(config()).await?;
    let b = Lockscope::start(config()).await?;
    a.wait_ready(Duration::from_secs(30)).await?;
    b.wait_ready(Duration::from_secs(30)).await?;
    let target = |ls: &Lockscope| ls.base.trim_start_matches("http://").to_string();
    let rules = [dashboards().join("prometheus/alerts.yml")];
    let one = Prometheus::start(&[target(&a)], &rules).await?;
    let two = Prometheus::start(&[target(&a), target(&b)], &rules).await?;
    for (prometheus, series) in [(&one, 2), (&two, 4)] {
        eventually(
            Duration::from_secs(30),
            "Prometheus scraped every replica's two sources",
            async || {
                let answer = prometheus.query("lockscope_source_up == 1").await?;
                Ok(answer["data"]["result"]
                    .as_array()
                    .is_some_and(|r| r.len() == series)
                    .then_some(()))
            },
        )
        .await
        .with_context(|| format!("Prometheus log: {}", prometheus.log_path().display()))?;
    }

    // The lock workload (ZooKeeper recipes, one herd-prone; Redis clients; crashed holders)
    // runs to its end, so that every counter has a history both replicas booked.
    let status = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_lockscope-workload"))
            .args(["--connect", &zk.connect_string(), "--root", &root])
            .args(["--clients", "8", "--locks", "2", "--crash-every", "6"])
            .args(["--hold-min-ms", "100", "--hold-max-ms", "800"])
            .args(["--think-min-ms", "50", "--think-max-ms", "300"])
            .args(["--duration-secs", "40", "--redis", &redis.url()])
            .args(["--redis-clients", "6"])
            // A crashed holder's session is judged expired (not closed) when a full poll round
            // saw it gone a quarter of its timeout before its nodes went; 10 s leaves a busy
            // machine's rounds seconds for that, so both replicas judge every crash alike
            // (with 4 s one replica once judged 7 of 32 crashes closes).
            .args(["--session-timeout-ms", "10000"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .status(),
    )
    .await
    .context("the workload did not end")??;
    ensure!(status.success(), "workload: {status}");

    // Then a state that stays: a ZooKeeper lock with a holder and two queued waiters, and a
    // Redis lock without a TTL (a stale lock, pending alert LockscopeStaleLock).
    let client = SeedClient::connect(&zk.connect_string(), Duration::from_secs(10)).await?;
    let recipe = SeedRecipe::QueuePredecessor {
        prefix: "lock-".into(),
    };
    let held = format!("{root}/held");
    let _holder = lock(&client, &held, &recipe).await?;
    let waiter_one = SeedClient::connect(&zk.connect_string(), Duration::from_secs(10)).await?;
    let waiter_two = SeedClient::connect(&zk.connect_string(), Duration::from_secs(10)).await?;
    let _queued_one = waiter_one.enqueue(&held, &recipe).await?;
    let _queued_two = waiter_two.enqueue(&held, &recipe).await?;
    let mut conn = redis.connection().await?;
    let stuck = format!(
        "lock:{}:stuck",
        root.trim_start_matches('/').replace('/', ":")
    );
    let _: () = redis::cmd("SET")
        .arg(&stuck)
        .arg("token-1")
        .query_async(&mut conn)
        .await?;

    // Every rate over a window longer than both Prometheus servers have run: the whole history.
    let queries = dashboard_queries("10m")?;
    let alerts = alert_exprs()?;
    let all: Vec<(String, String, Option<String>)> = queries
        .iter()
        .map(|(what, expr, _)| {
            // A variable's query: the values of its label (Grafana lists each once).
            let label = what
                .split_once(" variable ")
                .map(|(_, name)| name.trim_matches('"').to_string());
            (what.clone(), expr.clone(), label)
        })
        .chain(
            alerts
                .iter()
                .map(|(name, expr)| (format!("alert {name}"), expr.clone(), None)),
        )
        .collect();
    let instances: BTreeSet<String> = [target(&a), target(&b)].into_iter().collect();
    // Wait for the fact: once sessions of crashed holders expired, crashed Redis tokens ran out
    // and both replicas applied and Prometheus scraped the same state, both servers answer
    // every query alike at one moment and hold the same lock alerts.
    let mut problems = Vec::new();
    let compared = eventually(
        Duration::from_secs(90),
        "one and two replicas answer alike",
        async || {
            problems.clear();
            let at = now_secs();
            let mut compared = 0;
            for (what, expr, label) in &all {
                let (answer_one, answer_two) =
                    (one.query_at(expr, at).await?, two.query_at(expr, at).await?);
                let (s_one, s_two) = (
                    series(&answer_one, label.as_deref())
                        .with_context(|| format!("{what}: {expr}"))?,
                    series(&answer_two, label.as_deref())
                        .with_context(|| format!("{what}: {expr}"))?,
                );
                if PER_REPLICA.iter().any(|family| expr.contains(family)) {
                    // Per replica: where one replica's answer names its instance, two
                    // replicas' answer names both.
                    let named = |s: &BTreeMap<String, f64>| -> BTreeSet<String> {
                        s.keys()
                            .filter_map(|k| serde_json::from_str::<Value>(k).ok())
                            .filter_map(|m| m["instance"].as_str().map(str::to_string))
                            .collect()
                    };
                    if !named(&s_one).is_empty() && named(&s_two) != instances {
                        problems.push(format!(
                            "{what}: {expr}: instances {:?} with two replicas",
                            named(&s_two)
                        ));
                    }
                    continue;
                }
                compared += 1;
                problems.extend(differences(what, expr, &s_one, &s_two));
            }
            let (alerts_one, alerts_two) = (
                lock_alerts(&one.rules().await?),
                lock_alerts(&two.rules().await?),
            );
            if alerts_one != alerts_two {
                problems.push(format!(
                    "lock alerts with one replica: {alerts_one:?}\nwith two: {alerts_two:?}"
                ));
            }
            // The stable state is in: the stale Redis lock's alert is pending or firing.
            if !alerts_one.iter().any(|a| a.contains("no_ttl")) {
                problems.push("LockscopeStaleLock (no_ttl) not yet pending".into());
            }
            Ok(problems.is_empty().then_some((compared, alerts_one.len())))
        },
    )
    .await;
    let (compared, lock_alerts_seen) = compared.with_context(|| {
        format!(
            "answers differ (Prometheus logs {} and {}):\n{}",
            one.log_path().display(),
            two.log_path().display(),
            problems.join("\n")
        )
    })?;
    println!(
        "{compared} of {} queries answered alike with one and two replicas (the rest are per replica); the same {lock_alerts_seen} lock alerts pending or firing",
        all.len()
    );

    // The comparison proves something: summed without the max, two replicas count twice.
    let at = now_secs();
    let naive = |answer: Value| -> Result<f64> {
        let values = series(&answer, None)?;
        values.values().next().copied().context("no value")
    };
    let locks_one = naive(one.query_at("sum(lockscope_locks)", at).await?)?;
    let locks_two = naive(two.query_at("sum(lockscope_locks)", at).await?)?;
    let waiters_two = naive(two.query_at("sum(lockscope_lock_waiters)", at).await?)?;
    ensure!(locks_one >= 2.0, "locks: {locks_one}");
    ensure!(
        locks_two == 2.0 * locks_one,
        "naive sum(lockscope_locks): {locks_two} with two replicas, {locks_one} with one"
    );
    ensure!(waiters_two == 4.0, "naive sum of waiters: {waiters_two}");
    let safe = "sum(max without (instance, pod) (lockscope_lock_waiters))";
    ensure!(naive(two.query_at(safe, at).await?)? == 2.0);
    Ok(())
}
