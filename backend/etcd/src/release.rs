//! Force release of an etcd lock key: one txn that compares the key's `create_revision` and
//! `mod_revision` with what the operator saw and only then deletes it. Waiters wake through their
//! own watches (the next contender watches exactly this key). The holder's lease is left alone:
//! revoking it would delete every key of that client's session. Connecting is bounded by
//! [`RELEASE_CONNECT_TIMEOUT`] (per endpoint), the txn by [`RELEASE_COMMAND_TIMEOUT`].

use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use lockscope_model::redis::parse_display_bytes;
use serde_json::json;

use super::config::EtcdSourceConfig;
use lockscope_core::release::{Outcome, RELEASE_COMMAND_TIMEOUT, RELEASE_CONNECT_TIMEOUT};

/// Parses a holder version `<create_revision>/<mod_revision>`.
pub fn parse_version(version: &str) -> Option<(i64, i64)> {
    let (create, modified) = version.split_once('/')?;
    Some((create.trim().parse().ok()?, modified.trim().parse().ok()?))
}

/// Deletes `holder` (the key as shown) if it still has `version`.
pub async fn release(config: &EtcdSourceConfig, holder: &str, version: Option<&str>) -> Outcome {
    let Some(version) = version else {
        return Outcome::Unsupported(
            "an etcd release needs the holder's version (create_revision/mod_revision) as seen"
                .into(),
        );
    };
    let Some((create, modified)) = parse_version(version) else {
        return Outcome::Unsupported(format!(
            "version {version:?} is not <create_revision>/<mod_revision>"
        ));
    };
    let key = parse_display_bytes(holder);
    let limits = super::collect::Limits {
        connect: RELEASE_CONNECT_TIMEOUT,
        request: RELEASE_COMMAND_TIMEOUT,
    };
    let mut client = match super::collect::connect_any(config, 0, limits).await {
        Ok((client, _)) => client,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    let txn = Txn::new()
        .when([
            Compare::create_revision(key.clone(), CompareOp::Equal, create),
            Compare::mod_revision(key.clone(), CompareOp::Equal, modified),
        ])
        .and_then([TxnOp::delete(key.clone(), None)])
        .or_else([TxnOp::get(key.clone(), None)]);
    // The client's own request timeout bounds the txn too; this one also covers the time its
    // channel may spend reconnecting.
    let response = match tokio::time::timeout(RELEASE_COMMAND_TIMEOUT, client.txn(txn)).await {
        Ok(Ok(response)) => response,
        Ok(Err(e)) if super::error::permission_denied(&e) => {
            return Outcome::Failed(format!(
                "txn on {holder}: etcdserver: permission denied; nothing was changed. A force release deletes the key in a txn, which needs write on it besides read: grant the source's etcd user write on the lock prefix (etcdctl role add lockscope-release; etcdctl role grant-permission --prefix=true lockscope-release readwrite {prefix}; etcdctl user grant-role {user} lockscope-release)",
                prefix = config
                    .prefixes
                    .iter()
                    .find(|p| key.starts_with(p.as_bytes()))
                    .map_or("<prefix>", String::as_str),
                user = config.user.as_deref().unwrap_or("<user, or the client certificate's CN>"),
            ))
        }
        Ok(Err(e)) => return Outcome::Failed(format!("txn on {holder}: {e}")),
        Err(_) => {
            return Outcome::Failed(format!(
                "txn on {holder}: no answer within {RELEASE_COMMAND_TIMEOUT:?}; the key may or may not have been deleted"
            ))
        }
    };
    let revision = response.header().map(|h| h.revision());
    if response.succeeded() {
        return Outcome::Released(json!({
            "key": holder,
            "create_revision": create,
            "mod_revision": modified,
            "revision": revision,
        }));
    }
    let now = response.op_responses().into_iter().find_map(|op| match op {
        TxnOpResponse::Get(get) => get.kvs().first().map(|kv| {
            json!({
                "create_revision": kv.create_revision(),
                "mod_revision": kv.mod_revision(),
                "lease": format!("{:x}", kv.lease()),
            })
        }),
        _ => None,
    });
    Outcome::HolderChanged(json!({
        "message": match now {
            Some(_) => "the key was written again since (another holder, or a renewed one)",
            None => "the key is gone",
        },
        "key": holder,
        "seen": version,
        "now": now,
    }))
}

/// The force release of one etcd source.
pub struct EtcdReleaser(pub EtcdSourceConfig);

impl lockscope_core::release::Releaser for EtcdReleaser {
    fn release<'a>(
        &'a self,
        _lock: &'a lockscope_model::wire::LockView,
        holder: &'a lockscope_model::wire::HolderView,
        request: &'a lockscope_model::wire::ReleaseRequest,
        _members: &'a [String],
    ) -> futures::future::BoxFuture<'a, Outcome> {
        Box::pin(release(&self.0, &holder.node, request.version.as_deref()))
    }
}

#[cfg(test)]
mod tests {
    use super::parse_version;

    #[test]
    fn versions_parse_or_are_refused() {
        assert_eq!(parse_version("12/15"), Some((12, 15)));
        assert_eq!(parse_version("12"), None);
        assert_eq!(parse_version("a/b"), None);
    }
}
