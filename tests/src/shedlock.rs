//! ShedLock's ZooKeeper and etcd lock providers, written in Rust because ShedLock is a Java
//! library on Maven Central, which the tests cannot reach. Each follows the provider's source
//! step by step, so what it leaves on a server is what ShedLock leaves.
//!
//! Followed: lukas-krecan/ShedLock at commit 2495b1406d85323b8deadbe75d7a5dd3e8b8e844 (7.9.0 +
//! 14, August 2026; both providers' `src/main` unchanged since 7.9.0):
//!
//! * `providers/zookeeper/shedlock-provider-zookeeper-curator/src/main/java/net/javacrumbs/
//!   shedlock/provider/zookeeper/curator/ZookeeperCuratorLockProvider.java`
//!   ([`ZkShedLock`]): `lock` reads `<path>/<name>` with its stat; if the instant in it is in
//!   the future the lock is taken; else `setData().withVersion(stat.version)` writes
//!   `lockAtMostUntil` (a `BadVersion` means another node won); on `NoNode` it creates the
//!   node PERSISTENT with parents (`NodeExists`: another won). `unlock` is an unconditional
//!   `setData` of `max(now, lockAtLeastUntil)`. The node is never deleted.
//! * `providers/etcd/shedlock-provider-etcd-jetcd/src/main/java/net/javacrumbs/shedlock/
//!   provider/etcd/jetcd/EtcdLockProvider.java` ([`EtcdShedLock`]): `lock` grants a lease of
//!   `ceil(seconds until lockAtMostUntil)`, then one txn `If(version(key) == 0) Then put(key,
//!   value, lease) Else get(key)`; a failed txn revokes the new lease. `unlock`: with
//!   lockAtLeastFor left, grant a lease for it, `put` the same value on it (no txn), revoke the
//!   old lease; else revoke the lease (deleting the key). Nothing keeps a lease alive.
//!
//! Both write instants with `Utils.toIsoString` (`YYYY-MM-DDTHH:MM:SS.mmmZ`, UTC) and name the
//! host with `Utils.getHostname()`; here the host name is the caller's, so tests can tell
//! clients apart.

use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use etcd_client::{Client as EtcdClient, Compare, CompareOp, PutOptions, Txn, TxnOp};
use lockscope_model::shedlock::{format_instant, parse_until};
use zookeeper_client as zkc;

/// The clock ShedLock reads (`ClockProvider.now()`, truncated to ms), as epoch ms.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// `@SchedulerLock(lockAtMostFor, lockAtLeastFor)` of one run.
#[derive(Debug, Clone, Copy)]
pub struct LockConfig {
    pub at_most: Duration,
    pub at_least: Duration,
}

impl LockConfig {
    pub fn at_most(at_most: Duration) -> LockConfig {
        LockConfig {
            at_most,
            at_least: Duration::ZERO,
        }
    }
}

/// A taken lock: when it was taken (the run's `createdAt`) and its configuration.
#[derive(Debug, Clone, Copy)]
pub struct Taken {
    pub created_ms: i64,
    pub config: LockConfig,
}

impl Taken {
    fn at_most_until(&self) -> i64 {
        self.created_ms + self.config.at_most.as_millis() as i64
    }
    fn at_least_until(&self) -> i64 {
        self.created_ms + self.config.at_least.as_millis() as i64
    }
    /// `LockConfiguration.getUnlockTime()`: `max(now, lockAtLeastUntil)`.
    fn unlock_time(&self) -> i64 {
        now_ms().max(self.at_least_until())
    }
}

/// `ZookeeperCuratorLockProvider` on one session (`DEFAULT_PATH` is `/shedlock`).
pub struct ZkShedLock {
    client: zkc::Client,
    path: String,
}

impl ZkShedLock {
    pub async fn connect(connect: &str, path: &str) -> Result<ZkShedLock> {
        let client = zkc::Client::connector()
            .with_session_timeout(Duration::from_secs(10))
            .with_connection_timeout(Duration::from_secs(5))
            .connect(connect)
            .await?;
        Ok(ZkShedLock {
            client,
            path: path.to_string(),
        })
    }

    /// `getNodePath(lockName)`: `path + "/" + lockName`.
    pub fn node_path(&self, name: &str) -> String {
        format!("{}/{name}", self.path)
    }

    /// `lock(lockConfiguration)`: `Some` when this run got the lock, `None` when it is taken.
    pub async fn lock(&self, name: &str, config: LockConfig) -> Result<Option<Taken>> {
        let node = self.node_path(name);
        let taken = Taken {
            created_ms: now_ms(),
            config,
        };
        let until = format_instant(taken.at_most_until());
        match self.client.get_data(&node).await {
            Ok((data, stat)) => {
                // `isLocked`: unparseable or empty data counts as locked forever.
                let locked = parse_until(&data).is_none_or(|at| at > now_ms());
                if locked {
                    return Ok(None);
                }
                match self
                    .client
                    .set_data(&node, until.as_bytes(), Some(stat.version))
                    .await
                {
                    Ok(_) => Ok(Some(taken)),
                    Err(zkc::Error::BadVersion) => Ok(None),
                    Err(e) => Err(anyhow!("setData {node}: {e}")),
                }
            }
            Err(zkc::Error::NoNode) => {
                // `create().creatingParentsIfNeeded().withMode(PERSISTENT)`.
                if let Some((parent, _)) = lockscope_model::zk::split_parent(&node) {
                    crate::recipes::ensure_path(&self.client, parent).await?;
                }
                let options = zkc::CreateMode::Persistent.with_acls(zkc::Acls::anyone_all());
                match self.client.create(&node, until.as_bytes(), &options).await {
                    Ok(_) => Ok(Some(taken)),
                    Err(zkc::Error::NodeExists) => Ok(None),
                    Err(e) => Err(anyhow!("create {node}: {e}")),
                }
            }
            Err(e) => Err(anyhow!("getData {node}: {e}")),
        }
    }

    /// `unlock()`: an unconditional `setData` of the unlock time (the node stays).
    pub async fn unlock(&self, name: &str, taken: &Taken) -> Result<()> {
        let node = self.node_path(name);
        let until = format_instant(taken.unlock_time());
        self.client
            .set_data(&node, until.as_bytes(), None)
            .await
            .with_context(|| format!("setData {node}"))?;
        Ok(())
    }
}

/// `EtcdLockProvider` (`KEY_PREFIX` `shedlock`, `ENV_DEFAULT` `default`).
pub struct EtcdShedLock {
    client: EtcdClient,
    environment: String,
    host: String,
}

/// An etcd run's lock: the lease its key is on.
#[derive(Debug, Clone, Copy)]
pub struct EtcdTaken {
    pub taken: Taken,
    pub lease: i64,
}

impl EtcdShedLock {
    pub async fn connect(endpoints: &[String], environment: &str, host: &str) -> Result<Self> {
        let client = EtcdClient::connect(endpoints, None).await?;
        Ok(EtcdShedLock {
            client,
            environment: environment.to_string(),
            host: host.to_string(),
        })
    }

    /// `buildKey(lockName)`: `shedlock:<env>:<name>`.
    pub fn key(&self, name: &str) -> String {
        format!("shedlock:{}:{name}", self.environment)
    }

    /// `buildValue()`: `ADDED:<now>@<host>`.
    fn value(&self) -> String {
        format!("ADDED:{}@{}", format_instant(now_ms()), self.host)
    }

    /// `getSecondsUntil(instant)`: whole seconds, rounded up.
    fn seconds_until(until_ms: i64) -> i64 {
        let ms = (until_ms - now_ms()).max(0);
        (ms + 999) / 1000
    }

    /// `lock(lockConfiguration)`.
    pub async fn lock(&mut self, name: &str, config: LockConfig) -> Result<Option<EtcdTaken>> {
        let taken = Taken {
            created_ms: now_ms(),
            config,
        };
        let key = self.key(name);
        let ttl = Self::seconds_until(taken.at_most_until());
        let lease = self.client.lease_grant(ttl, None).await?.id();
        let txn = Txn::new()
            .when([Compare::version(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key.as_str(),
                self.value(),
                Some(PutOptions::new().with_lease(lease)),
            )])
            .or_else([TxnOp::get(key.as_str(), None)]);
        let result = self.client.txn(txn).await;
        match result {
            Ok(response) if response.succeeded() => Ok(Some(EtcdTaken { taken, lease })),
            Ok(_) => {
                self.client.lease_revoke(lease).await?;
                Ok(None)
            }
            Err(e) => {
                let _ = self.client.lease_revoke(lease).await;
                Err(e.into())
            }
        }
    }

    /// `unlock()`: keep the key for what is left of lockAtLeastFor on a new lease, or revoke
    /// the run's lease (deleting the key).
    pub async fn unlock(&mut self, name: &str, run: &EtcdTaken) -> Result<()> {
        let keep = Self::seconds_until(run.taken.unlock_time());
        if keep <= 0 {
            self.client
                .lease_revoke(run.lease)
                .await
                .context("revoke the run's lease")?;
            return Ok(());
        }
        let key = self.key(name);
        let lease = self.client.lease_grant(keep, None).await?.id();
        self.client
            .put(
                key.as_str(),
                self.value(),
                Some(PutOptions::new().with_lease(lease)),
            )
            .await?;
        self.client
            .lease_revoke(run.lease)
            .await
            .context("revoke the run's lease")?;
        Ok(())
    }
}
