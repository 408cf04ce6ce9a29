//! Force release of a ZooKeeper lock node: check that the node's `ephemeralOwner` is the
//! session the operator saw and its `czxid` the creation the operator saw (both required: a
//! node deleted and created again under a fixed name has data version 0 again, so only the
//! czxid tells the new acquisition apart), then `delete(node, version)` with the version just
//! read. ZooKeeper cannot make a delete conditional on the czxid, so one round trip between the
//! `exists` and the `delete` remains in which a re-created node would be deleted. Waiters wake
//! through their own watches on the node. A kazoo lease is not deleted but ended: its record is
//! rewritten with an end in the past (see [`ZkReleaser::expire_lease`]); a ShedLock node's
//! instant is set to now (see [`ZkReleaser::end_shedlock`]). Connecting and each
//! request are bounded by
//! [`RELEASE_CONNECT_TIMEOUT`] and [`RELEASE_COMMAND_TIMEOUT`].

use std::collections::{BTreeMap, HashMap};

use lockscope_model::session_hex;
use serde_json::json;
use tokio::sync::Mutex;
use zookeeper_client as zkc;

use super::{ZkError, ZkSourceConfig};
use lockscope_core::release::{Outcome, RELEASE_COMMAND_TIMEOUT, RELEASE_CONNECT_TIMEOUT};

/// Releases ZooKeeper lock nodes, one admin session per source (opened on first use and
/// replaced after errors).
pub struct ZkReleaser {
    configs: BTreeMap<String, ZkSourceConfig>,
    clients: Mutex<HashMap<String, zkc::Client>>,
}

impl ZkReleaser {
    pub fn new(configs: &[ZkSourceConfig]) -> Self {
        ZkReleaser {
            configs: configs
                .iter()
                .map(|z| (z.name.clone(), z.clone()))
                .collect(),
            clients: Mutex::new(HashMap::new()),
        }
    }

    async fn zk_client(&self, source: &str) -> Result<zkc::Client, ZkError> {
        let mut clients = self.clients.lock().await;
        if let Some(client) = clients.get(source) {
            if !client.state().is_terminated() {
                return Ok(client.clone());
            }
        }
        let config = self
            .configs
            .get(source)
            .ok_or_else(|| ZkError::NoSource(source.to_string()))?;
        let client = tokio::time::timeout(RELEASE_CONNECT_TIMEOUT, super::collect::connect(config))
            .await
            .map_err(|_| ZkError::ConnectTimeout {
                connect: config.connect.clone(),
                limit: RELEASE_CONNECT_TIMEOUT,
            })??;
        clients.insert(source.to_string(), client.clone());
        Ok(client)
    }

    /// Deletes `node` if it is still the incarnation the operator saw: owned by `session` and
    /// created by the transaction `version` (the node's czxid, as [`HolderView::version`]
    /// showed it). Both are required.
    ///
    /// [`HolderView::version`]: lockscope_model::wire::HolderView::version
    pub async fn release(
        &self,
        source: &str,
        node: &str,
        session: Option<&str>,
        version: Option<&str>,
    ) -> Outcome {
        let Some(session) = session else {
            return Outcome::Unsupported(
                "a ZooKeeper release needs the holder's session as you saw it (session)".into(),
            );
        };
        // `<czxid>`, or `<czxid>@<instant>` for a node that holds by its data (ShedLock).
        let parsed = version.and_then(|v| {
            let (czxid, until) = match v.trim().split_once('@') {
                Some((c, at)) => (c, Some(lockscope_model::shedlock::parse_instant(at)?)),
                None => (v.trim(), None),
            };
            Some((czxid.parse::<i64>().ok()?, until))
        });
        let Some((czxid, seen_until)) = parsed else {
            return Outcome::Unsupported(format!(
                "a ZooKeeper release needs the holder's version as you saw it (the node's czxid, a number, or <czxid>@<instant> for a ShedLock node; got {version:?})"
            ));
        };
        let client = match self.zk_client(source).await {
            Ok(c) => c,
            Err(e) => return Outcome::Failed(e.to_string()),
        };
        let stat = match tokio::time::timeout(RELEASE_COMMAND_TIMEOUT, client.check_stat(node))
            .await
        {
            Ok(Ok(Some(stat))) => stat,
            Ok(Ok(None)) => {
                return Outcome::HolderChanged(
                    json!({"message": "the holder's node is gone", "node": node}),
                )
            }
            Ok(Err(e)) => {
                self.clients.lock().await.remove(source);
                return Outcome::Failed(format!("exists {node}: {e}"));
            }
            Err(_) => {
                self.clients.lock().await.remove(source);
                return Outcome::Failed(format!(
                    "exists {node}: no answer within {RELEASE_COMMAND_TIMEOUT:?}; nothing was deleted"
                ));
            }
        };
        let owner = session_hex(stat.ephemeral_owner);
        if owner != session {
            return Outcome::HolderChanged(json!({
                "message": "the node is owned by another session now",
                "node": node,
                "owner": owner,
            }));
        }
        if stat.czxid != czxid {
            // Deleted and created again under the same name since the operator looked (by this
            // session or, had the owner check not caught it, another): a new acquisition, whose
            // data version starts at 0 again, so only the czxid tells it apart.
            return Outcome::HolderChanged(json!({
                "message": "the node was deleted and created again since (another acquisition)",
                "node": node,
                "seen_czxid": czxid,
                "czxid": stat.czxid,
            }));
        }
        if stat.ephemeral_owner == 0 {
            // A persistent node may hold by its data (ShedLock's instant, a kazoo lease
            // record): read once, and ended the way its library ends it.
            let (data, stat) = match self.read(source, &client, node).await {
                Ok(read) => read,
                Err(outcome) => return outcome,
            };
            if let Some(until) = lockscope_model::shedlock::parse_until(&data) {
                return self
                    .end_shedlock(source, &client, node, until, &stat, seen_until)
                    .await;
            }
            let lease = node
                .ends_with(&format!("/{}", lockscope_model::zk::KAZOO_LEASE_NODE))
                .then(|| lockscope_model::zk::parse_kazoo_lease(&data))
                .flatten();
            if let Some(lease) = lease {
                return self
                    .expire_lease(source, &client, node, lease, &stat, czxid)
                    .await;
            }
        }
        // ZooKeeper has no delete conditional on czxid or owner, only on the data version. A
        // node deleted and created again between the `exists` above and this delete (one round
        // trip) has version 0 like an unchanged lock node, so that window remains: the version
        // catches only a node rewritten in place.
        match tokio::time::timeout(
            RELEASE_COMMAND_TIMEOUT,
            client.delete(node, Some(stat.version)),
        )
        .await
        {
            Ok(Ok(())) => Outcome::Released(json!({
                "node": node,
                "session": owner,
                "czxid": stat.czxid,
                "version": stat.version,
            })),
            Ok(Err(zkc::Error::NoNode)) | Ok(Err(zkc::Error::BadVersion)) => {
                Outcome::HolderChanged(json!({
                    "message": "the node changed or went between the check and the delete",
                    "node": node,
                }))
            }
            Ok(Err(zkc::Error::NoAuth)) => Outcome::Failed(format!(
                "not allowed to delete {node}: the ACL of its parent {parent} does not grant this source's identity (digest or SASL user) the DELETE permission",
                parent = node.rsplit_once('/').map_or("/", |(p, _)| if p.is_empty() { "/" } else { p })
            )),
            Ok(Err(e)) => {
                self.clients.lock().await.remove(source);
                Outcome::Failed(format!("delete {node}: {e}"))
            }
            Err(_) => {
                self.clients.lock().await.remove(source);
                Outcome::Failed(format!(
                    "delete {node}: no answer within {RELEASE_COMMAND_TIMEOUT:?}; the node may or may not have been deleted"
                ))
            }
        }
    }

    /// A kazoo lease (`…/lease_holder` holding a lease record) is released the way it ends:
    /// its record is rewritten with an end one second in the past, by a `setData` conditional
    /// on the data version just read (and only if the node is still the incarnation the
    /// operator saw). The next `NonBlockingLease` call takes it over, as after any expiry.
    /// Deleting the node instead would break kazoo: its lease code reads, deletes and creates
    /// the node without expecting it gone, and raises in the application. A node only named
    /// so, without a lease record, is released like any node.
    async fn expire_lease(
        &self,
        source: &str,
        client: &zkc::Client,
        node: &str,
        lease: lockscope_model::zk::KazooLease,
        stat: &zkc::Stat,
        czxid: i64,
    ) -> Outcome {
        if stat.czxid != czxid {
            return Outcome::HolderChanged(json!({
                "message": "the lease was taken or renewed since (its record was written again)",
                "node": node,
            }));
        }
        let past = lockscope_model::zk::format_naive_utc(now_ms() - 1000);
        // As kazoo writes it (`json.dumps` with its default separators).
        let record = format!(
            "{{\"version\": 1, \"holder\": {}, \"end\": \"{past}\"}}",
            serde_json::Value::from(lease.holder.clone())
        );
        let done = json!({
            "node": node,
            "lease_holder": lease.holder,
            "lease_end_was": lockscope_model::zk::format_naive_utc(lease.end_ms),
            "lease_end_now": past,
            "czxid": stat.czxid,
            "version": stat.version,
        });
        self.write(
            source,
            client,
            node,
            record.as_bytes(),
            stat.version,
            "the lease record",
            done,
        )
        .await
    }

    /// A ShedLock node (a persistent node holding only its lock-until instant) is released the
    /// way ShedLock's own unlock does it: its instant is set to now. Unlike ShedLock's unlock,
    /// it happens only if the node still holds the instant the operator saw (every run writes
    /// a new one), by a `setData` conditional on the data version read with it, so a lock
    /// taken again since is left alone; the node is kept, as ShedLock keeps it.
    async fn end_shedlock(
        &self,
        source: &str,
        client: &zkc::Client,
        node: &str,
        until: i64,
        stat: &zkc::Stat,
        seen_until: Option<i64>,
    ) -> Outcome {
        let Some(seen) = seen_until else {
            return Outcome::Unsupported(
                "a ShedLock node's release needs its lock-until instant as you saw it (version <czxid>@<instant>)".into(),
            );
        };
        let now = now_ms();
        if until != seen {
            return Outcome::HolderChanged(json!({
                "message": "the lock was taken or unlocked again since (its instant was written again)",
                "node": node,
                "seen_until": lockscope_model::shedlock::format_instant(seen),
                "until": lockscope_model::shedlock::format_instant(until),
            }));
        }
        if until <= now {
            return Outcome::HolderChanged(json!({
                "message": "the lock is free already (its instant has passed)",
                "node": node,
                "until": lockscope_model::shedlock::format_instant(until),
            }));
        }
        let instant = lockscope_model::shedlock::format_instant(now);
        let done = json!({
            "node": node,
            "until_was": lockscope_model::shedlock::format_instant(until),
            "until_now": instant,
            "czxid": stat.czxid,
            "version": stat.version,
        });
        self.write(
            source,
            client,
            node,
            instant.as_bytes(),
            stat.version,
            "the ShedLock node",
            done,
        )
        .await
    }

    /// `getData` within [`RELEASE_COMMAND_TIMEOUT`]; a failure is the release's outcome.
    async fn read(
        &self,
        source: &str,
        client: &zkc::Client,
        node: &str,
    ) -> Result<(Vec<u8>, zkc::Stat), Outcome> {
        match tokio::time::timeout(RELEASE_COMMAND_TIMEOUT, client.get_data(node)).await {
            Ok(Ok(read)) => Ok(read),
            Ok(Err(zkc::Error::NoNode)) => Err(Outcome::HolderChanged(
                json!({"message": "the holder's node is gone", "node": node}),
            )),
            Ok(Err(e)) => {
                self.clients.lock().await.remove(source);
                Err(Outcome::Failed(format!("get {node}: {e}")))
            }
            Err(_) => {
                self.clients.lock().await.remove(source);
                Err(Outcome::Failed(format!(
                    "get {node}: no answer within {RELEASE_COMMAND_TIMEOUT:?}; nothing was changed"
                )))
            }
        }
    }

    /// `setData(node, data, version)` within [`RELEASE_COMMAND_TIMEOUT`]: `done` when written.
    #[allow(clippy::too_many_arguments)]
    async fn write(
        &self,
        source: &str,
        client: &zkc::Client,
        node: &str,
        data: &[u8],
        version: i32,
        what: &str,
        done: serde_json::Value,
    ) -> Outcome {
        match tokio::time::timeout(
            RELEASE_COMMAND_TIMEOUT,
            client.set_data(node, data, Some(version)),
        )
        .await
        {
            Ok(Ok(_)) => Outcome::Released(done),
            Ok(Err(zkc::Error::NoNode)) | Ok(Err(zkc::Error::BadVersion)) => {
                Outcome::HolderChanged(json!({
                    "message": format!("{what} changed or went between the read and the write"),
                    "node": node,
                }))
            }
            Ok(Err(zkc::Error::NoAuth)) => Outcome::Failed(format!(
                "not allowed to write {node}: its ACL does not grant this source's identity the WRITE permission"
            )),
            Ok(Err(e)) => {
                self.clients.lock().await.remove(source);
                Outcome::Failed(format!("set {node}: {e}"))
            }
            Err(_) => {
                self.clients.lock().await.remove(source);
                Outcome::Failed(format!(
                    "set {node}: no answer within {RELEASE_COMMAND_TIMEOUT:?}; it may or may not have been written"
                ))
            }
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl lockscope_core::release::Releaser for ZkReleaser {
    fn release<'a>(
        &'a self,
        lock: &'a lockscope_model::wire::LockView,
        holder: &'a lockscope_model::wire::HolderView,
        request: &'a lockscope_model::wire::ReleaseRequest,
        _members: &'a [String],
    ) -> futures::future::BoxFuture<'a, Outcome> {
        // The session and czxid the operator saw (the admin layer has checked the session
        // against the one lockscope sees now; the release checks both on the node).
        Box::pin(ZkReleaser::release(
            self,
            &lock.source,
            &holder.node,
            request.session.as_deref(),
            request.version.as_deref(),
        ))
    }
}
