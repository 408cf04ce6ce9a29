//! What the core costs per Redis lock, without a server: the real lock table and Redis model fed
//! one bootstrap scan of N token locks as redis-py leaves them (a 32-hex-digit token, PX one
//! hour), then the RSS and how long the table took to apply it. Run under `heaptrack` for the
//! heap by allocation site (what ARCHITECTURE.md's "What a lock costs" counts):
//!
//! ```sh
//! cargo build --release -p lockscope --example lock_memory
//! heaptrack target/release/examples/lock_memory 100000   # heap still held at exit = the table's
//! ```
use lockscope::backends::redis::state::RedisSourceState;
use lockscope::backends::redis::{KeyReport, RedisUpdate};
use lockscope::collect::hand_fed;
use lockscope::config::RedisSourceConfig;
use lockscope_model::redis::{decode, Companions, KeyHint, KeyRead, RedisValue};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let source = RedisSourceConfig::new("cache", "redis://127.0.0.1:1", &["lock:*"]);
    let fed = hand_fed(RedisSourceState::new((&source).into(), 500), 500);
    let (handle, out, _stop) = (fed.handle, fed.outbox, fed.stop);
    let task = tokio::spawn(fed.aggregator.run(fed.updates, fed.commands));
    out.send(RedisUpdate::Members {
        members: vec!["redis://127.0.0.1:1".into()],
    })
    .await;
    let now = lockscope::now_ms();
    let reports: Vec<KeyReport> = (0..n)
        .map(|i| {
            let key = format!("lock:b{i}");
            let token = format!(
                "{:032x}",
                (i as u128).wrapping_mul(0x9e3779b97f4a7c15f39cc0605cedc835)
            );
            let read = KeyRead {
                value: RedisValue::String(token.into_bytes()),
                pttl_ms: 3_600_000,
            };
            let lock = decode(
                key.as_bytes(),
                &read,
                &Companions::default(),
                KeyHint::None,
                now,
            );
            KeyReport {
                key: key.into_bytes(),
                lock,
                watchers: 0,
                at_ms: now,
                pttl_ms: 3_600_000,
                read_seq: 0,
                truncated: Vec::new(),
                unrecognised: None,
            }
        })
        .collect();
    let t = std::time::Instant::now();
    out.send(RedisUpdate::Keys {
        member: 0,
        full: true,
        reports,
    })
    .await;
    out.send(RedisUpdate::Status {
        member: Some(0),
        up: true,
        error: None,
        last_seen_ms: None,
    })
    .await;
    assert!(
        handle.settled(std::time::Duration::from_secs(600)).await,
        "the table did not apply the scan"
    );
    eprintln!("applied in {:?}", t.elapsed());
    // What a reader pays to see every lock: each view rendered from its record.
    let t = std::time::Instant::now();
    let rendered = handle.snapshot.borrow().views().count();
    eprintln!("rendered {rendered} views in {:?}", t.elapsed());
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmRSS"))
        .unwrap_or("VmRSS: ?");
    println!(
        "{n} locks: {} locks in snapshot; {rss}",
        handle.snapshot.borrow().locks.len()
    );
    task.abort();
    // Exit without freeing: under heaptrack, what is still allocated is the table.
    std::process::exit(0);
}
