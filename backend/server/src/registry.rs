//! The registry of backends: the one place that lists which kinds of source lockscope watches.
//! It names their config sections, validates them, starts their collectors and dispatches force
//! releases. Each backend keeps its config section, collector, decoding, state in the
//! lock table, sessions and release together in its folder (`zookeeper/`, `redis/`, `etcd/`,
//! `database/` for both `[[mysql]]` and `[[postgres]]`).

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::config::Config;
use lockscope_core::aggregate::{Aggregator, Command, Handle, SourceModel};
use lockscope_core::collect::{Outbox, SentCounter, SourceStats, SourceUpdate};
use lockscope_core::release::{Releaser, Releasers};
use lockscope_database as database;
use lockscope_etcd as etcd;
use lockscope_model::wire::Backend;
use lockscope_redis as redis;
use lockscope_zookeeper as zookeeper;

/// The Redis sources of `config` (`[[redis]]` then `[[redlock]]`).
fn redis_specs(config: &Config) -> Vec<redis::collect::RedisSpec> {
    redis::collect::specs(&config.redis, &config.redlock)
}

/// Every configured source's name and backend, in the order of the lock table's sources (the
/// index an update carries): ZooKeeper, Redis, etcd, then the databases.
fn sources(config: &Config) -> Vec<(String, Backend)> {
    let zk = config
        .zookeeper
        .iter()
        .map(|z| (z.name.clone(), Backend::Zookeeper));
    let redis = redis_specs(config)
        .into_iter()
        .map(|s| (s.name, Backend::Redis));
    let etcd = config.etcd.iter().map(|e| (e.name.clone(), Backend::Etcd));
    let databases =
        database_sources(config).map(|(_, c, flavor)| (c.name.clone(), flavor.backend()));
    zk.chain(redis).chain(etcd).chain(databases).collect()
}

/// Every configured source's counters, in the order the snapshot lists sources.
pub fn source_stats(config: &Config) -> Vec<Arc<SourceStats>> {
    sources(config)
        .into_iter()
        .map(|(name, backend)| Arc::new(SourceStats::new(&name, backend)))
        .collect()
}

/// Every configured source's model for the lock table, in the same order.
pub fn models(config: &Config) -> Vec<Box<dyn SourceModel>> {
    let labels = config.metrics.max_lock_labels;
    let mut out: Vec<Box<dyn SourceModel>> = Vec::new();
    for zk in &config.zookeeper {
        out.push(Box::new(zookeeper::state::ZkSourceState::new(zk, labels)));
    }
    for spec in redis_specs(config) {
        out.push(Box::new(redis::state::RedisSourceState::new(spec, labels)));
    }
    for e in &config.etcd {
        out.push(Box::new(etcd::state::EtcdSourceState::new(
            e.clone(),
            labels,
        )));
    }
    for (_, c, flavor) in database_sources(config) {
        out.push(Box::new(database::state::DbSourceState::new(
            c.clone(),
            flavor,
            labels,
        )));
    }
    out
}

/// The lock table over every configured source, and the handle to read it.
pub fn aggregator(config: &Config) -> (Aggregator, Handle, mpsc::Receiver<Command>) {
    Aggregator::new(
        models(config),
        config.metrics.max_lock_labels,
        source_stats(config),
    )
}

/// Starts one collector per configured source, each with its own [`Outbox`] addressed to its
/// model's index in the lock table. Every collector ends when `stop` turns `true`: ZooKeeper's
/// closes its session first (so its watches and session go at once rather than at expiry), the
/// others drop their connections.
pub fn start_collectors(
    config: &Config,
    stats: &[Arc<SourceStats>],
    tx: &mpsc::Sender<SourceUpdate>,
    sent: &SentCounter,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut index = 0;
    let mut outbox = || {
        let out = (
            index,
            tx.clone(),
            sent.clone(),
            stats[index].clone(),
            stop.clone(),
        );
        index += 1;
        out
    };
    let mut tasks = Vec::new();
    for zk in &config.zookeeper {
        let (i, tx, sent, stats, stop) = outbox();
        let out = Outbox::new(i, tx, sent, stats, stop);
        tasks.push(tokio::spawn(zookeeper::collect::run(
            Arc::new(zk.clone()),
            out,
        )));
    }
    for spec in redis_specs(config) {
        let (i, tx, sent, stats, stop) = outbox();
        let out = Outbox::new(i, tx, sent, stats, stop);
        tasks.push(tokio::spawn(until_stopped(
            out.clone(),
            redis::collect::run(Arc::new(spec), out),
        )));
    }
    for etcd in &config.etcd {
        let (i, tx, sent, stats, stop) = outbox();
        let out = Outbox::new(i, tx, sent, stats, stop);
        tasks.push(tokio::spawn(until_stopped(
            out.clone(),
            etcd::collect::run(Arc::new(etcd.clone()), out),
        )));
    }
    for (_, db, flavor) in database_sources(config) {
        let (i, tx, sent, stats, stop) = outbox();
        let out = Outbox::new(i, tx, sent, stats, stop);
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
async fn until_stopped<U: Send + 'static>(
    out: Outbox<U>,
    collector: impl std::future::Future<Output = ()>,
) {
    tokio::select! {
        () = collector => {}
        () = out.stopping() => {}
    }
}

/// Each configured source's force release, by source name.
pub fn releasers(config: &Config) -> Releasers {
    let mut by_source: std::collections::BTreeMap<String, Arc<dyn Releaser>> = Default::default();
    let zookeeper = Arc::new(zookeeper::release::ZkReleaser::new(&config.zookeeper));
    for zk in &config.zookeeper {
        by_source.insert(zk.name.clone(), zookeeper.clone());
    }
    let specs = redis_specs(config);
    let redis = Arc::new(redis::release::RedisReleaser::new(&specs));
    for spec in &specs {
        by_source.insert(spec.name.clone(), redis.clone());
    }
    for e in &config.etcd {
        by_source.insert(
            e.name.clone(),
            Arc::new(etcd::release::EtcdReleaser(e.clone())),
        );
    }
    for (_, c, flavor) in database_sources(config) {
        by_source.insert(
            c.name.clone(),
            Arc::new(database::release::DbReleaser(c.clone(), flavor)),
        );
    }
    Releasers::new(by_source)
}
