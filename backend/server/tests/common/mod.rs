//! Shared by the boundary tests: a real aggregator fed the updates a collector would send,
//! read through the real router with `Router::oneshot`.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use lockscope::aggregate::Handle;
use lockscope::aggregate::Model;
use lockscope::backends::redis::state::RedisSourceState;
use lockscope::backends::redis::{RedisSourceConfig, RedisUpdate};
use lockscope::backends::zookeeper::state::ZkSourceState;
use lockscope::backends::zookeeper::{ZkSourceConfig, ZkUpdate};
use lockscope::collect::{hand_fed, Outbox};
use serde_json::Value;
use tower::ServiceExt;

pub struct Fixture<U: Send + 'static> {
    out: Outbox<U>,
    pub handle: Handle,
    _stop: tokio::sync::watch::Sender<bool>,
    _task: tokio::task::JoinHandle<()>,
}

/// A lock table over `model` alone, with no collector: the test sends its updates.
pub fn fixture<M: Model>(model: M, max_labels: usize) -> Fixture<M::Update> {
    let fed = hand_fed(model, max_labels);
    let task = tokio::spawn(fed.aggregator.run(fed.updates, fed.commands));
    Fixture {
        out: fed.outbox,
        handle: fed.handle,
        _stop: fed.stop,
        _task: task,
    }
}

/// The table over one ZooKeeper source.
#[allow(dead_code)] // not every boundary test watches ZooKeeper
pub fn zk_fixture(source: &ZkSourceConfig, max_labels: usize) -> Fixture<ZkUpdate> {
    fixture(ZkSourceState::new(source, max_labels), max_labels)
}

/// The table over one Redis source.
#[allow(dead_code)] // not every boundary test watches Redis
pub fn redis_fixture(source: &RedisSourceConfig) -> Fixture<RedisUpdate> {
    fixture(RedisSourceState::new(source.into(), 500), 500)
}

impl<U: Send + 'static> Fixture<U> {
    /// Sends an update as the source's collector would.
    pub async fn send(&self, update: U) {
        assert!(self.out.send(update).await, "aggregator running");
    }

    pub async fn get(&self, uri: &str) -> (StatusCode, String) {
        get(&self.handle, uri).await
    }

    pub async fn json(&self, uri: &str) -> (StatusCode, Value) {
        let (status, body) = self.get(uri).await;
        (
            status,
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{uri}: {e}: {body}")),
        )
    }
}

impl Fixture<ZkUpdate> {
    /// A ZooKeeper node went, heard of now.
    #[allow(dead_code)] // the Redis boundary tests remove no nodes
    pub async fn remove(&self, path: &str) {
        self.send(ZkUpdate::Removed {
            path: path.into(),
            at_ms: lockscope::now_ms(),
        })
        .await;
    }
}

/// Answers `uri` from the real router once everything sent to `handle` is applied.
async fn get(handle: &Handle, uri: &str) -> (StatusCode, String) {
    // Everything sent so far is applied and published first.
    assert!(
        handle.settled(Duration::from_secs(10)).await,
        "the aggregator did not apply what was sent"
    );
    let resp = lockscope::http::app(handle.clone(), Default::default())
        .oneshot(
            Request::builder()
                .uri(uri)
                .body(Body::empty())
                .expect("request"),
        )
        .await
        .expect("response");
    let status = resp.status();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 24)
        .await
        .expect("body");
    (status, String::from_utf8_lossy(&bytes).into_owned())
}
