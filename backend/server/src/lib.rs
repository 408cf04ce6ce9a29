//! lockscope: an observability and admin dashboard for distributed locks.
//!
//! The crate is a library (so integration tests can run the server in-process) and the
//! `lockscope` binary (`main.rs`). Layers, each importing only those below it (ARCHITECTURE.md):
//! * [`http`], [`cli`] — the read API, SSE stream, `/metrics`, probes, the UI; the CLI client;
//! * [`admin`] — force release: tokens, limits, the holder check, dispatch to the backends;
//!   [`metrics`] — the Prometheus exposition of the core's state;
//! * [`backends`] — the registry: lists backends, builds their models, starts collectors;
//! * [`config`] — file + environment, validated in one place;
//! * `backends::*` — one folder per backend: config section, collector, model, release;
//! * [`collect`] — what every collector shares (the [`collect::Outbox`] to the core, backoff,
//!   task groups);
//! * [`aggregate`] — the neutral core: the lock table (one task owns lock state and publishes
//!   snapshots and deltas), the ledger, the metrics state;
//! * [`store`] — the store handle (audit log and lock history, SQLite or a PostgreSQL shared by
//!   replicas, and the election of the replica that writes it); [`release`] — what a force
//!   release comes to; [`tls_files`] — the TLS files a source names, checked at validation.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::mpsc;

pub mod admin;
pub mod aggregate;
pub mod backends;
pub mod cli;
pub mod collect;
pub mod config;
pub mod credentials;
pub mod http;
pub mod metrics;
pub mod redact;
pub mod release;
pub mod server_tls;
pub mod store;
pub mod tls_files;

pub use config::Config;

/// Wall-clock now, epoch milliseconds: this host's clock, moved onto the clock of the store
/// the replicas share once the store has measured how far apart they are
/// ([`set_clock_offset_ms`]), so that instants booked by different replicas compare.
pub fn now_ms() -> i64 {
    host_now_ms() + CLOCK_OFFSET_MS.load(std::sync::atomic::Ordering::Relaxed)
}

/// This host's wall clock, epoch milliseconds (what the store measures against).
pub fn host_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The shared store's clock − this host's, ms (0 without a PostgreSQL store).
static CLOCK_OFFSET_MS: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// Sets what [`now_ms`] adds to this host's clock; only the store calls it.
pub fn set_clock_offset_ms(offset_ms: i64) {
    CLOCK_OFFSET_MS.store(offset_ms, std::sync::atomic::Ordering::Relaxed);
}

/// A running lockscope: its address and the handle to its state.
pub struct Running {
    pub addr: SocketAddr,
    pub handle: aggregate::Handle,
    /// The HTTPS certificate being served, when `tls_cert_file` is set (its [`error`] says why
    /// changed files were refused).
    ///
    /// [`error`]: server_tls::ReloadingCert::error
    pub https: Option<Arc<server_tls::ReloadingCert>>,
    collectors: Vec<tokio::task::JoinHandle<()>>,
    aggregator: tokio::task::JoinHandle<()>,
    server: tokio::task::JoinHandle<()>,
    store: Option<store::Store>,
    /// Tells collectors and open event streams that lockscope stops.
    stopping: tokio::sync::watch::Sender<bool>,
}

/// How long each step of [`Running::shutdown`] may take before it is cut short.
const SHUTDOWN_STEP: std::time::Duration = std::time::Duration::from_secs(5);

impl Running {
    /// Stops at once: every task is aborted (a ZooKeeper session is then left to expire).
    pub fn stop(self) {
        drop(self);
    }

    /// Stops in order, each step bounded by [`SHUTDOWN_STEP`]: collectors end (ZooKeeper's
    /// close their sessions), open event streams end, the aggregator applies what was sent,
    /// the HTTP server and the aggregator end, and the store writes what is pending. Answers
    /// whether every step finished in time.
    pub async fn shutdown(mut self) -> bool {
        let _ = self.stopping.send(true);
        let mut clean = true;
        for (i, task) in std::mem::take(&mut self.collectors).into_iter().enumerate() {
            if !finish(task).await {
                tracing::warn!(collector = i, "a collector did not stop in time; cut short");
                clean = false;
            }
        }
        if !self.handle.settled(SHUTDOWN_STEP).await {
            tracing::warn!("the aggregator did not apply every update in time");
            clean = false;
        }
        self.server.abort();
        self.aggregator.abort();
        let _ = (&mut self.server).await;
        let _ = (&mut self.aggregator).await;
        if let Some(store) = self.store.take() {
            if !store.close(SHUTDOWN_STEP).await {
                tracing::warn!("the store did not write what was pending in time");
                clean = false;
            }
        }
        clean
    }
}

/// Waits for `task` to end by itself, aborting it after [`SHUTDOWN_STEP`].
async fn finish(mut task: tokio::task::JoinHandle<()>) -> bool {
    match tokio::time::timeout(SHUTDOWN_STEP, &mut task).await {
        Ok(_) => true,
        Err(_) => {
            task.abort();
            false
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Ends open event streams (their connections outlive the server task).
        let _ = self.stopping.send(true);
        for task in &self.collectors {
            task.abort();
        }
        self.server.abort();
        self.aggregator.abort();
        // Nothing pending is written: as far as the store can tell, lockscope crashed.
        if let Some(store) = &self.store {
            store.abort();
        }
    }
}

/// Starts the collectors, the aggregator and the HTTP server on `listener`.
pub fn start(config: &Config, listener: TcpListener) -> std::io::Result<Running> {
    // rustls is built with two crypto providers (ring, which lockscope picks, and aws-lc-rs,
    // which zookeeper-client's `tls` feature enables), so libraries that ask rustls for the
    // process default (redis-rs, zookeeper-client) need one installed. Already installed
    // (a second start in one process) is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let addr = listener.local_addr()?;
    let store = if config.store.configured() {
        Some(store::Store::open(&config.store).map_err(std::io::Error::other)?)
    } else {
        None
    };
    let (aggregator, handle, commands) = backends::aggregator(config);
    let aggregator = aggregator.with_store(store.clone());
    if let Some(store) = &store {
        store.attach(Arc::new(handle.clone()));
    }
    let (tx, rx) = mpsc::channel(aggregate::UPDATE_QUEUE);
    let (stopping, stopping_rx) = tokio::sync::watch::channel(false);
    let collectors = backends::start_collectors(
        config,
        &handle.collector_stats,
        &tx,
        &handle.sent,
        &stopping_rx,
    );
    drop(tx);
    let aggregator = tokio::spawn(aggregator.run(rx, commands));
    let settings = http::Settings {
        stopping: stopping_rx,
        store: store.clone(),
        ..http::Settings::from_config(config)
    };
    let stopping_http = settings.stopping.clone();
    let http_metrics = settings.http_metrics.clone();
    let app = http::app(handle.clone(), settings);
    let https = match (&config.tls_cert_file, &config.tls_key_file) {
        (Some(cert), Some(key)) => Some(Arc::new(
            server_tls::ReloadingCert::new(cert, key).map_err(std::io::Error::other)?,
        )),
        _ => None,
    };
    let tls = match &https {
        Some(resolver) => {
            Some(server_tls::server_config(resolver.clone()).map_err(std::io::Error::other)?)
        }
        None => None,
    };
    let server = tokio::spawn(http::listen::serve(
        listener,
        app,
        tls,
        http::listen::Limits::from_config(&config.http),
        http_metrics,
        stopping_http,
    ));
    Ok(Running {
        addr,
        handle,
        https,
        collectors,
        aggregator,
        server,
        store,
        stopping,
    })
}

/// Waits for Ctrl-C or SIGTERM.
async fn shutdown_signal() -> std::io::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result,
        _ = term.recv() => Ok(()),
    }
}

/// Binds `config.listen` and runs until the process is stopped.
pub async fn serve(config: Config) -> anyhow::Result<()> {
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.listen))?;
    if config.store.configured() {
        // A store whose schema is newer than this binary is refused now; one that cannot be
        // reached yet is retried while lockscope runs.
        store::Store::preflight(&config.store, std::time::Duration::from_secs(10))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let running = start(&config, listener)?;
    let scheme = if config.tls_cert_file.is_some() {
        "https"
    } else {
        "http"
    };
    tracing::info!(addr = %running.addr, "lockscope serving on {scheme}://{}{}/",
        running.addr, config.http.base());
    shutdown_signal().await?;
    tracing::info!("shutting down");
    if running.shutdown().await {
        tracing::info!("stopped");
    } else {
        tracing::warn!("stopped; some tasks did not finish in time and were cut short");
    }
    Ok(())
}
