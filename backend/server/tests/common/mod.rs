//! Shared by the boundary tests: a real aggregator fed the updates a collector would send,
//! read through the real router with `Router::oneshot`.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use lockscope::aggregate::Handle;
use lockscope::backends::zookeeper::ZkUpdate;
use lockscope::collect::{Outbox, SourceStats, SourceUpdate};
use lockscope::config::Config;
use serde_json::Value;
use tokio::sync::mpsc;
use tower::ServiceExt;

pub struct Fixture {
    tx: mpsc::Sender<SourceUpdate>,
    pub handle: Handle,
    _task: tokio::task::JoinHandle<()>,
}

/// An aggregator for `config` with no collectors: the test sends their updates.
pub fn fixture(config: &Config) -> Fixture {
    let (agg, handle, commands) = lockscope::registry::aggregator(config);
    let (tx, rx) = mpsc::channel(64);
    let task = tokio::spawn(agg.run(rx, commands));
    Fixture {
        tx,
        handle,
        _task: task,
    }
}

impl Fixture {
    /// Sends an update as from the first configured source (these fixtures configure one).
    pub async fn send<U: Send + 'static>(&self, update: U) {
        let stats = std::sync::Arc::new(SourceStats::new("test", Default::default()));
        // Nothing here stops: the sender may go at once.
        let (_, stop) = tokio::sync::watch::channel(false);
        let out: Outbox<U> = Outbox::new(0, self.tx.clone(), self.handle.sent.clone(), stats, stop);
        assert!(out.send(update).await, "aggregator running");
    }

    /// A ZooKeeper node went, heard of now.
    #[allow(dead_code)] // the Redis boundary tests remove no nodes
    pub async fn remove(&self, path: &str) {
        self.send(ZkUpdate::Removed {
            path: path.into(),
            at_ms: lockscope::now_ms(),
        })
        .await;
    }

    pub async fn get(&self, uri: &str) -> (StatusCode, String) {
        // Everything sent so far is applied and published first.
        assert!(
            self.handle.settled(Duration::from_secs(10)).await,
            "the aggregator did not apply what was sent"
        );
        let resp = lockscope::http::app(self.handle.clone(), Default::default())
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

    pub async fn json(&self, uri: &str) -> (StatusCode, Value) {
        let (status, body) = self.get(uri).await;
        (
            status,
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{uri}: {e}: {body}")),
        )
    }
}
