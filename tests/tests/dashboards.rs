//! The shipped Grafana dashboards and Prometheus alert rules (`dashboards/`), checked the way a
//! user would meet them: promtool checks and unit tests of the rules, and a real Prometheus
//! scraping a real lockscope that watches real ZooKeeper and Redis under the lock workload,
//! evaluating every panel query and every alert expression.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use lockscope::config::{Config, RedisSourceConfig};
use lockscope_tests::harness::{eventually, zk_source, Lockscope};
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
    ensure!(checked.contains("SUCCESS: 14 rules found"), "{checked}");
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

/// Every PromQL expression the dashboards use, with Grafana's variables filled in; the flag says
/// whether it is on the overview (which must return data).
fn dashboard_queries() -> Result<Vec<(String, String, bool)>> {
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
                    fill(&inner),
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
                    fill(expr),
                    overview,
                ));
            }
        }
    }
    Ok(out)
}

fn fill(expr: &str) -> String {
    expr.replace("$__rate_interval", "30s")
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
    ensure!(out.len() == 14, "{out:?}");
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
        zookeeper: vec![zk_source("zk", &zk.connect_string(), &[&root])],
        redis: vec![RedisSourceConfig::new(
            "cache",
            &redis.url(),
            &["lock:*", "wl:*", "*lock*"],
        )],
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
    let queries = dashboard_queries()?;
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
    ensure!(loaded.len() == 14, "{rules}");
    ensure!(loaded.iter().all(|r| r["health"] == "ok"), "{rules}");
    let _ = workload.kill().await;
    Ok(())
}
