//! The registry of backends: the one place that lists which kinds of source lockscope watches.
//! It names their config sections, validates them, starts their collectors and dispatches force
//! releases. Each backend keeps its config section, collector, decoding, state in the
//! aggregator, sessions and release together in its folder (`zookeeper/`, `redis/`, `etcd/`,
//! `database/` for both `[[mysql]]` and `[[postgres]]`).

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::collect::{Outbox, SentCounter, SourceStats, SourceUpdate};
use crate::config::Config;
use lockscope_model::wire::{Backend, HolderView, LockView, ReleaseRequest};

use crate::admin::Outcome;

pub mod database;
pub mod etcd;
pub mod redis;
pub mod zookeeper;

/// Every configured source's counters, in the order the snapshot lists sources.
pub fn source_stats(config: &Config) -> Vec<Arc<SourceStats>> {
    let zk = config
        .zookeeper
        .iter()
        .map(|z| (z.name.clone(), Backend::Zookeeper));
    let redis = redis::collect::specs(config)
        .into_iter()
        .map(|s| (s.name.clone(), Backend::Redis));
    let etcd = config.etcd.iter().map(|e| (e.name.clone(), Backend::Etcd));
    let databases =
        database_sources(config).map(|(_, c, flavor)| (c.name.clone(), flavor.backend()));
    zk.chain(redis)
        .chain(etcd)
        .chain(databases)
        .map(|(name, backend)| Arc::new(SourceStats::new(&name, backend)))
        .collect()
}

/// Starts one collector per configured source, each with its own [`Outbox`]. Every collector
/// ends when `stop` turns `true`: ZooKeeper's closes its session first (so its watches and
/// session go at once rather than at expiry), the others drop their connections.
pub fn start_collectors(
    config: &Config,
    stats: &[Arc<SourceStats>],
    tx: &mpsc::Sender<SourceUpdate>,
    sent: &SentCounter,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut stats = stats.iter().cloned();
    let mut next = || stats.next().expect("one stats entry per source");
    let mut tasks = Vec::new();
    for (index, zk) in config.zookeeper.iter().enumerate() {
        let out = Outbox::new(index, tx.clone(), sent.clone(), next(), stop.clone());
        tasks.push(tokio::spawn(zookeeper::collect::run(
            Arc::new(zk.clone()),
            out,
        )));
    }
    for (index, spec) in redis::collect::specs(config).into_iter().enumerate() {
        let out = Outbox::new(index, tx.clone(), sent.clone(), next(), stop.clone());
        tasks.push(tokio::spawn(until_stopped(
            out.clone(),
            redis::collect::run(Arc::new(spec), out),
        )));
    }
    for (index, etcd) in config.etcd.iter().enumerate() {
        let out = Outbox::new(index, tx.clone(), sent.clone(), next(), stop.clone());
        tasks.push(tokio::spawn(until_stopped(
            out.clone(),
            etcd::collect::run(Arc::new(etcd.clone()), out),
        )));
    }
    for (index, db, flavor) in database_sources(config) {
        let out = Outbox::new(index, tx.clone(), sent.clone(), next(), stop.clone());
        tasks.push(tokio::spawn(until_stopped(
            out.clone(),
            database::collect::run(Arc::new(db.clone()), flavor, out),
        )));
    }
    tasks
}

/// Every database source with its index among them (`[[mysql]]` first, then `[[postgres]]`)
/// and which database it is.
pub fn database_sources(
    config: &Config,
) -> impl Iterator<Item = (usize, &database::DbSourceConfig, database::Flavor)> {
    let mysql = config.mysql.iter().map(|c| (c, database::Flavor::Mysql));
    let postgres = config
        .postgres
        .iter()
        .map(|c| (c, database::Flavor::Postgres));
    mysql
        .chain(postgres)
        .enumerate()
        .map(|(i, (c, f))| (i, c, f))
}

/// Runs `collector` until lockscope stops (dropping it closes its connections).
async fn until_stopped<U: crate::collect::BackendUpdate>(
    out: Outbox<U>,
    collector: impl std::future::Future<Output = ()>,
) {
    tokio::select! {
        () = collector => {}
        () = out.stopping() => {}
    }
}

/// Every backend's config sections: (table name, the key lists its tables accept).
pub const CONFIG_SECTIONS: &[(&str, &[&[&str]])] = &[
    ("zookeeper", &[zookeeper::ZkSourceConfig::KEYS]),
    (
        "redis",
        &[redis::RedisSourceConfig::KEYS, redis::config::WATCH_KEYS],
    ),
    (
        "redlock",
        &[redis::RedlockConfig::KEYS, redis::config::WATCH_KEYS],
    ),
    ("etcd", &[etcd::EtcdSourceConfig::KEYS]),
    ("mysql", &[database::DbSourceConfig::KEYS]),
    ("postgres", &[database::DbSourceConfig::KEYS]),
];

/// Every configured source as (`section[i]`, name), for checks across sources.
pub fn source_names(config: &Config) -> Vec<(String, &str)> {
    let mut out = Vec::new();
    out.extend(
        config
            .zookeeper
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("zookeeper[{i}]"), s.name.as_str())),
    );
    out.extend(
        config
            .redis
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("redis[{i}]"), s.name.as_str())),
    );
    out.extend(
        config
            .redlock
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("redlock[{i}]"), s.name.as_str())),
    );
    out.extend(
        config
            .etcd
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("etcd[{i}]"), s.name.as_str())),
    );
    for (flavor, sources) in [
        (database::Flavor::Mysql, &config.mysql),
        (database::Flavor::Postgres, &config.postgres),
    ] {
        out.extend(
            sources
                .iter()
                .enumerate()
                .map(|(i, s)| (format!("{}[{i}]", flavor.section()), s.name.as_str())),
        );
    }
    out
}

/// Every problem each backend finds with its own sections.
pub fn validate(config: &Config) -> Vec<String> {
    let mut problems = Vec::new();
    for (i, s) in config.zookeeper.iter().enumerate() {
        problems.extend(s.validate(&format!("zookeeper[{i}]")));
    }
    for (i, s) in config.redis.iter().enumerate() {
        problems.extend(s.validate(&format!("redis[{i}]")));
    }
    for (i, s) in config.redlock.iter().enumerate() {
        problems.extend(s.validate(&format!("redlock[{i}]")));
    }
    for (i, s) in config.etcd.iter().enumerate() {
        problems.extend(s.validate(&format!("etcd[{i}]")));
    }
    for (flavor, sources) in [
        (database::Flavor::Mysql, &config.mysql),
        (database::Flavor::Postgres, &config.postgres),
    ] {
        for (i, s) in sources.iter().enumerate() {
            problems.extend(s.validate(&format!("{}[{i}]", flavor.section()), flavor));
        }
    }
    problems
}

/// Each backend's force release.
pub struct Releasers {
    zookeeper: zookeeper::release::ZkReleaser,
    redis: redis::release::RedisReleaser,
    etcd: std::collections::BTreeMap<String, etcd::EtcdSourceConfig>,
    databases: std::collections::BTreeMap<String, (database::DbSourceConfig, database::Flavor)>,
}

impl Releasers {
    pub fn new(config: &Config) -> Self {
        Releasers {
            zookeeper: zookeeper::release::ZkReleaser::new(&config.zookeeper),
            redis: redis::release::RedisReleaser::new(config),
            etcd: config
                .etcd
                .iter()
                .map(|e| (e.name.clone(), e.clone()))
                .collect(),
            databases: database_sources(config)
                .map(|(_, c, f)| (c.name.clone(), (c.clone(), f)))
                .collect(),
        }
    }

    /// Releases `holder` of `lock` with its backend's compare-and-delete. `members`: a Redis
    /// source's member URLs.
    pub async fn release(
        &self,
        lock: &LockView,
        holder: &HolderView,
        request: &ReleaseRequest,
        members: &[String],
    ) -> Outcome {
        match lock.backend {
            Backend::Zookeeper => {
                // The session and czxid the operator saw (the admin layer has checked the session
                // against the one lockscope sees now; the releaser checks both on the node).
                self.zookeeper
                    .release(
                        &lock.source,
                        &holder.node,
                        request.session.as_deref(),
                        request.version.as_deref(),
                    )
                    .await
            }
            Backend::Redis => {
                self.redis
                    .release(
                        lock,
                        holder,
                        request.reentrancy,
                        request.version.as_deref(),
                        members,
                    )
                    .await
            }
            Backend::Etcd => match self.etcd.get(&lock.source) {
                Some(config) => {
                    etcd::release::release(config, &holder.node, request.version.as_deref()).await
                }
                None => Outcome::Failed(format!("no etcd source {:?}", lock.source)),
            },
            Backend::Mysql | Backend::Postgres => match self.databases.get(&lock.source) {
                Some((config, flavor)) => {
                    database::release::release(
                        config,
                        *flavor,
                        lock,
                        holder,
                        request.version.as_deref(),
                    )
                    .await
                }
                None => Outcome::Failed(format!("no database source {:?}", lock.source)),
            },
        }
    }
}
