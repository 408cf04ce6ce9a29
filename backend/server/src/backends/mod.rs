//! The registry of backends: the one place that lists which kinds of source lockscope watches
//! and starts their collectors. Each backend keeps its config section, collector, decoding,
//! sessions and release together (`backends/etcd/` is laid out that way; ZooKeeper and Redis
//! still keep their collectors in `collect/` and their release in `admin/`).

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::collect::{Outbox, SentCounter, SourceStats, SourceUpdate};
use crate::config::Config;
use lockscope_model::wire::Backend;

pub mod etcd;

/// Every configured source's counters, in the order the snapshot lists sources.
pub fn source_stats(config: &Config) -> Vec<Arc<SourceStats>> {
    let zk = config
        .zookeeper
        .iter()
        .map(|z| (z.name.clone(), Backend::Zookeeper));
    let redis = crate::collect::redis::specs(config)
        .into_iter()
        .map(|s| (s.name.clone(), Backend::Redis));
    let etcd = config.etcd.iter().map(|e| (e.name.clone(), Backend::Etcd));
    zk.chain(redis)
        .chain(etcd)
        .map(|(name, backend)| Arc::new(SourceStats::new(&name, backend)))
        .collect()
}

/// Starts one collector per configured source, each with its own [`Outbox`].
pub fn start_collectors(
    config: &Config,
    stats: &[Arc<SourceStats>],
    tx: &mpsc::Sender<SourceUpdate>,
    sent: &SentCounter,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut stats = stats.iter().cloned();
    let mut next = || stats.next().expect("one stats entry per source");
    let mut tasks = Vec::new();
    for (index, zk) in config.zookeeper.iter().enumerate() {
        let out = Outbox::new(index, tx.clone(), sent.clone(), next());
        tasks.push(tokio::spawn(crate::collect::zk::run(
            Arc::new(zk.clone()),
            out,
        )));
    }
    for (index, spec) in crate::collect::redis::specs(config).into_iter().enumerate() {
        let out = Outbox::new(index, tx.clone(), sent.clone(), next());
        tasks.push(tokio::spawn(crate::collect::redis::run(
            Arc::new(spec),
            out,
        )));
    }
    for (index, etcd) in config.etcd.iter().enumerate() {
        let out = Outbox::new(index, tx.clone(), sent.clone(), next());
        tasks.push(tokio::spawn(etcd::collect::run(
            Arc::new(etcd.clone()),
            out,
        )));
    }
    tasks
}

/// Config sections owned by backends in `backends/`: (table name, its keys).
pub const CONFIG_SECTIONS: &[(&str, &[&str])] = &[("etcd", etcd::EtcdSourceConfig::KEYS)];
