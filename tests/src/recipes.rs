//! The hand-written ZooKeeper lock recipes applications really use ("seed" recipes), each honest
//! to its style, on `zookeeper-client`:
//!
//! * [`SeedRecipe::PlainEphemeral`]: create one EPHEMERAL node; on `NodeExists`, set an exists
//!   watch on it and retry when it fires — every contender watches the node (a herd);
//! * [`SeedRecipe::QueuePredecessor`]: EPHEMERAL_SEQUENTIAL children, lowest holds, each waiter
//!   watches only its predecessor (the good recipe);
//! * [`SeedRecipe::QueueChildrenWatch`]: same nodes, waiters set a children watch on the parent
//!   (every change wakes everyone: a herd);
//! * [`SeedRecipe::QueuePolling`]: same nodes, waiters poll `getChildren` without any watch.
//!
//! This module owns those recipes for the integration tests and the `lockscope-workload`
//! binary. Parents are created as persistent nodes; lock nodes are created with open ACLs and
//! carry the owner's session id (decimal) as data. Sequence suffixes are 10 digits and are
//! compared by suffix only.
//!
//! Dropping every clone of a client closes its session cleanly (its ephemeral nodes go at once);
//! a process that dies leaves them until the session expires. Cancelling
//! [`Ticket::acquired`] drops its watcher, and `zookeeper-client` then removes that watch on the
//! server (RemoveWatches).

use std::time::Duration;

use anyhow::{anyhow, Result};
use zookeeper_client as zkc;

/// How a hand-written client takes and waits for a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeedRecipe {
    /// One EPHEMERAL node at the lock path; contenders exists-watch it (a herd).
    PlainEphemeral,
    /// `<path>/<prefix>NNNNNNNNNN`; a waiter exists-watches its predecessor only.
    QueuePredecessor { prefix: String },
    /// `<path>/<prefix>NNNNNNNNNN`; a waiter children-watches `<path>` (a herd).
    QueueChildrenWatch { prefix: String },
    /// `<path>/<prefix>NNNNNNNNNN`; a waiter polls `getChildren` every `interval`, no watch.
    QueuePolling { prefix: String, interval: Duration },
}

/// One client = one ZooKeeper session.
#[derive(Clone)]
pub struct SeedClient {
    client: zkc::Client,
}

/// A place in a lock: the node this client created (once created).
#[derive(Debug)]
pub struct Ticket {
    /// Full path of this client's node (for a plain ephemeral lock, the lock path itself).
    pub node: String,
    lock: String,
    recipe: SeedRecipe,
    created: bool,
}

fn sequence_of(name: &str) -> Option<u64> {
    lockscope_model::zk::parse_sequence(name).map(|(_, seq)| seq)
}

/// Creates `path` and its parents as persistent nodes, open to all (existing ones are fine):
/// Curator's `creatingParentsIfNeeded()`.
pub async fn ensure_path(client: &zkc::Client, path: &str) -> Result<()> {
    let mut current = String::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        current.push('/');
        current.push_str(part);
        let options = zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all());
        match client.create(&current, b"", &options).await {
            Ok(_) | Err(zkc::Error::NodeExists) => {}
            Err(e) => return Err(anyhow!("create {current}: {e}")),
        }
    }
    Ok(())
}

impl SeedClient {
    /// Opens one session (5 s connection timeout).
    pub async fn connect(connect: &str, session_timeout: Duration) -> Result<SeedClient> {
        let client = zkc::Client::connector()
            .with_session_timeout(session_timeout)
            .with_connection_timeout(Duration::from_secs(5))
            .connect(connect)
            .await?;
        Ok(SeedClient { client })
    }

    /// This client's session id.
    pub fn session_id(&self) -> i64 {
        self.client.session_id().0
    }

    /// The underlying client, for reads and extra operations in tests.
    pub fn client(&self) -> &zkc::Client {
        &self.client
    }

    /// Creates `path` and its parents as persistent nodes (existing ones are fine).
    async fn ensure_path(&self, path: &str) -> Result<()> {
        ensure_path(&self.client, path).await
    }

    /// Takes a place in the lock and returns without waiting to hold it.
    pub async fn enqueue(&self, path: &str, recipe: &SeedRecipe) -> Result<Ticket> {
        match recipe {
            SeedRecipe::PlainEphemeral => {
                if let Some((parent, _)) = lockscope_model::zk::split_parent(path) {
                    self.ensure_path(parent).await?;
                }
                let created = self.try_create_plain(path).await?;
                Ok(Ticket {
                    node: path.to_string(),
                    lock: path.to_string(),
                    recipe: recipe.clone(),
                    created,
                })
            }
            SeedRecipe::QueuePredecessor { prefix }
            | SeedRecipe::QueueChildrenWatch { prefix }
            | SeedRecipe::QueuePolling { prefix, .. } => {
                self.ensure_path(path).await?;
                let options =
                    zkc::CreateMode::EphemeralSequential.with_acls(zkc::Acls::anyone_all());
                let base = format!("{path}/{prefix}");
                let (_, seq) = self
                    .client
                    .create(&base, self.session_id().to_string().as_bytes(), &options)
                    .await?;
                Ok(Ticket {
                    node: format!("{base}{:010}", seq.into_i64()),
                    lock: path.to_string(),
                    recipe: recipe.clone(),
                    created: true,
                })
            }
        }
    }

    async fn try_create_plain(&self, path: &str) -> Result<bool> {
        let options = zkc::CreateMode::Ephemeral.with_acls(zkc::Acls::anyone_all());
        match self
            .client
            .create(path, self.session_id().to_string().as_bytes(), &options)
            .await
        {
            Ok(_) => Ok(true),
            Err(zkc::Error::NodeExists) => Ok(false),
            Err(e) => Err(anyhow!("create {path}: {e}")),
        }
    }
}

impl Ticket {
    /// Waits until this client holds the lock, in its recipe's style.
    pub async fn acquired(&mut self, client: &SeedClient) -> Result<()> {
        let zk = &client.client;
        match self.recipe.clone() {
            SeedRecipe::PlainEphemeral => {
                while !self.created {
                    // Every contender sets an exists watch on the lock node: a herd.
                    let (stat, watcher) = zk.check_and_watch_stat(&self.lock).await?;
                    if stat.is_some() {
                        watcher.changed().await;
                    }
                    self.created = client.try_create_plain(&self.lock).await?;
                }
                Ok(())
            }
            SeedRecipe::QueuePredecessor { .. } => loop {
                let Some(predecessor) = self.predecessor(zk).await? else {
                    return Ok(());
                };
                let (stat, watcher) = zk.check_and_watch_stat(&predecessor).await?;
                if stat.is_some() {
                    watcher.changed().await;
                }
            },
            SeedRecipe::QueueChildrenWatch { .. } => loop {
                let (children, watcher) = zk.list_and_watch_children(&self.lock).await?;
                if self.is_lowest(&children)? {
                    return Ok(());
                }
                watcher.changed().await;
            },
            SeedRecipe::QueuePolling { interval, .. } => loop {
                let children = zk.list_children(&self.lock).await?;
                if self.is_lowest(&children)? {
                    return Ok(());
                }
                tokio::time::sleep(interval).await;
            },
        }
    }

    fn own_sequence(&self) -> Option<u64> {
        self.node.rsplit('/').next().and_then(sequence_of)
    }

    /// The node's name below the lock.
    fn own_name(&self) -> &str {
        self.node.rsplit('/').next().unwrap_or_default()
    }

    /// Fails when this client's node is gone (its session expired, or someone force-released
    /// it): waiting on would wait forever, or hold a lock it has no node for.
    fn check_present(&self, children: &[String]) -> Result<()> {
        if children.iter().any(|c| c == self.own_name()) {
            Ok(())
        } else {
            Err(anyhow!(
                "{} is gone (session expired or node deleted)",
                self.node
            ))
        }
    }

    fn is_lowest(&self, children: &[String]) -> Result<bool> {
        self.check_present(children)?;
        let own = self.own_sequence();
        Ok(children
            .iter()
            .filter_map(|c| sequence_of(c))
            .min()
            .is_none_or(|lowest| Some(lowest) == own))
    }

    /// The lock's path (the node for [`SeedRecipe::PlainEphemeral`], the parent of the queue).
    pub fn lock_path(&self) -> &str {
        &self.lock
    }

    /// Whether this client's node exists yet (always for queues; for a plain ephemeral lock only
    /// once it holds).
    pub fn is_created(&self) -> bool {
        self.created
    }

    /// The node just before this one, by sequence number; `None` when this one is first.
    async fn predecessor(&self, zk: &zkc::Client) -> Result<Option<String>> {
        let own = self
            .own_sequence()
            .ok_or_else(|| anyhow!("not a sequential node: {}", self.node))?;
        let children = zk.list_children(&self.lock).await?;
        self.check_present(&children)?;
        Ok(children
            .iter()
            .filter_map(|c| sequence_of(c).map(|s| (s, c)))
            .filter(|(s, _)| *s < own)
            .max_by_key(|(s, _)| *s)
            .map(|(_, name)| format!("{}/{name}", self.lock)))
    }

    /// Deletes this client's node.
    pub async fn release(self, client: &SeedClient) -> Result<()> {
        if self.created {
            match client.client.delete(&self.node, None).await {
                Ok(()) | Err(zkc::Error::NoNode) => {}
                Err(e) => return Err(anyhow!("delete {}: {e}", self.node)),
            }
        }
        Ok(())
    }
}

/// Takes a place and waits until held.
pub async fn lock(client: &SeedClient, path: &str, recipe: &SeedRecipe) -> Result<Ticket> {
    let mut ticket = client.enqueue(path, recipe).await?;
    ticket.acquired(client).await?;
    Ok(ticket)
}
