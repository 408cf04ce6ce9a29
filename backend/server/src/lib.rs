//! lockscope: an observability and admin dashboard for distributed locks.
//!
//! The binary's crate: configuration assembly ([`config`]), the registry of backends
//! ([`registry`]), the CLI client ([`cli`]) and [`start`], which builds the store, the lock
//! table, the collectors and the HTTP server and runs them. Everything else lives in the layer
//! crates (ARCHITECTURE.md), re-exported here under their old paths for the tests:
//! `lockscope-base` (clock, redaction, TLS files) → `lockscope-store` → `lockscope-core` (lock
//! table, collectors' outbox, backend contract) → one crate per backend
//! (`lockscope-zookeeper`, `-redis`, `-etcd`, `-database`) and `lockscope-http` (API, UI,
//! metrics, admin) → this crate.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;

pub mod cli;
pub mod config;
pub mod registry;

pub use config::Config;
pub use lockscope_base::clock::{host_now_ms, now_ms, set_clock_offset_ms};
pub use lockscope_base::{redact, tls_files};
pub use lockscope_core::{aggregate, collect, release};
pub use lockscope_http::{admin, credentials, http, metrics, server_tls};
pub use lockscope_store as store;

/// The backends, under the paths the tests name them by.
pub mod backends {
    pub use lockscope_database as database;
    pub use lockscope_etcd as etcd;
    pub use lockscope_redis as redis;
    pub use lockscope_zookeeper as zookeeper;
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
    let (stopping, stopping_rx) = tokio::sync::watch::channel(false);
    let registry::Assembly {
        aggregator,
        handle,
        commands,
        updates,
        collectors,
        releasers,
    } = registry::assemble(
        &config.sources,
        config.metrics.max_lock_labels,
        &stopping_rx,
    );
    let settings = http::Settings {
        stopping: stopping_rx,
        store: store.clone(),
        ..http::Settings::from_config(config.http_sections(), releasers)
    };
    // The index judges locks as the API does.
    let aggregator = aggregator
        .with_store(store.clone())
        .with_judge((*settings.judge).clone());
    if let Some(store) = &store {
        store.attach(Arc::new(handle.clone()));
    }
    let collectors = collectors.into_iter().map(tokio::spawn).collect();
    let aggregator = tokio::spawn(aggregator.run(updates, commands));
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
