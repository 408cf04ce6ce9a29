//! Force release of a ZooKeeper lock node: check that the node's `ephemeralOwner` is the
//! session the operator saw, then `delete(node, version)` with the version just read, so a node
//! replaced in between is never deleted. Waiters wake through their own watches on the node.

use std::collections::{BTreeMap, HashMap};

use lockscope_model::session_hex;
use serde_json::json;
use tokio::sync::Mutex;
use zookeeper_client as zkc;

use super::{ZkError, ZkSourceConfig};
use crate::admin::Outcome;

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
        let client = super::collect::connect(config).await?;
        clients.insert(source.to_string(), client.clone());
        Ok(client)
    }

    pub async fn release(&self, source: &str, node: &str, session: &str) -> Outcome {
        let client = match self.zk_client(source).await {
            Ok(c) => c,
            Err(e) => return Outcome::Failed(e.to_string()),
        };
        let stat = match client.check_stat(node).await {
            Ok(Some(stat)) => stat,
            Ok(None) => {
                return Outcome::HolderChanged(
                    json!({"message": "the holder's node is gone", "node": node}),
                )
            }
            Err(e) => {
                self.clients.lock().await.remove(source);
                return Outcome::Failed(format!("exists {node}: {e}"));
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
        match client.delete(node, Some(stat.version)).await {
            Ok(()) => Outcome::Released(json!({
                "node": node,
                "session": owner,
                "version": stat.version,
            })),
            Err(zkc::Error::NoNode) | Err(zkc::Error::BadVersion) => {
                Outcome::HolderChanged(json!({
                    "message": "the node changed or went between the check and the delete",
                    "node": node,
                }))
            }
            Err(zkc::Error::NoAuth) => Outcome::Failed(format!(
                "not allowed to delete {node}: configure digest credentials for this source"
            )),
            Err(e) => {
                self.clients.lock().await.remove(source);
                Outcome::Failed(format!("delete {node}: {e}"))
            }
        }
    }
}
