//! A loopback TCP proxy for fault tests: put between a client and one server, it forwards bytes
//! both ways, and on [`TcpProxy::blackhole`] stalls every byte in both directions and holds new
//! connections without connecting them upstream, until [`TcpProxy::pass`] lets traffic through
//! again — a network partition that heals: nothing is lost or reordered, it only arrives late, and
//! neither side sees its connection close.
//!
//! This module owns the proxy's listener and its connection tasks, nothing else: the proxy runs
//! in the test's tokio runtime (no process of its own), and dropping a [`TcpProxy`] aborts every
//! task it started, which closes every socket it holds.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// A proxy listening on `127.0.0.1:<free port>` for one upstream address.
pub struct TcpProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    /// `true` while traffic passes.
    passing: watch::Sender<bool>,
    /// Local ports of the open upstream connections: how the server names this proxy's clients
    /// (e.g. in ZooKeeper's `cons`).
    upstream_ports: Arc<Mutex<BTreeSet<u16>>>,
    /// The accept loop; it owns the connection tasks (a `JoinSet`), so aborting it ends them.
    task: JoinHandle<()>,
}

impl TcpProxy {
    /// Starts a proxy to `upstream`, passing traffic.
    pub async fn start(upstream: SocketAddr) -> Result<TcpProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("bind the proxy on 127.0.0.1")?;
        let addr = listener.local_addr()?;
        let (passing, passing_rx) = watch::channel(true);
        let upstream_ports = Arc::new(Mutex::new(BTreeSet::new()));
        let task = tokio::spawn(accept_loop(
            listener,
            upstream,
            passing_rx,
            upstream_ports.clone(),
        ));
        Ok(TcpProxy {
            addr,
            upstream,
            passing,
            upstream_ports,
            task,
        })
    }

    /// Where clients connect: `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server this proxy forwards to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Stalls all traffic: bytes already read are held, nothing more is read from either side,
    /// and new connections are accepted but not connected upstream.
    pub fn blackhole(&self) {
        self.passing.send_replace(false);
    }

    /// Lets traffic through again: held bytes and held connections go on where they stopped.
    pub fn pass(&self) {
        self.passing.send_replace(true);
    }

    /// Whether traffic passes.
    pub fn passing(&self) -> bool {
        *self.passing.borrow()
    }

    /// Local ports of the proxy's open upstream connections (the client addresses the server
    /// sees for this proxy's clients).
    pub fn upstream_ports(&self) -> BTreeSet<u16> {
        self.upstream_ports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Waits until traffic passes; `false` when the proxy is gone.
async fn until_passing(passing: &mut watch::Receiver<bool>) -> bool {
    passing.wait_for(|p| *p).await.is_ok()
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    passing: watch::Receiver<bool>,
    ports: Arc<Mutex<BTreeSet<u16>>>,
) {
    // Dropped (every connection task aborted) when this task is aborted.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                connections.spawn(serve(client, upstream, passing.clone(), ports.clone()));
            }
            // Reap finished connections so the set does not grow for the proxy's life.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Forgets an upstream port when its connection ends.
struct PortGuard {
    port: u16,
    ports: Arc<Mutex<BTreeSet<u16>>>,
}

impl Drop for PortGuard {
    fn drop(&mut self) {
        self.ports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.port);
    }
}

async fn serve(
    client: TcpStream,
    upstream: SocketAddr,
    mut passing: watch::Receiver<bool>,
    ports: Arc<Mutex<BTreeSet<u16>>>,
) {
    // A connection made during a blackhole is held until traffic passes.
    if !until_passing(&mut passing).await {
        return;
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _guard = match server.local_addr() {
        Ok(local) => {
            ports
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(local.port());
            Some(PortGuard {
                port: local.port(),
                ports: ports.clone(),
            })
        }
        Err(_) => None,
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    // Either direction ending (EOF or error) ends the connection: both sockets close.
    tokio::select! {
        _ = pump(client_read, server_write, passing.clone()) => {}
        _ = pump(server_read, client_write, passing) => {}
    }
}

/// Copies `from` to `to` while traffic passes; during a blackhole it neither reads nor writes.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut passing: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if !until_passing(&mut passing).await {
            return;
        }
        // A read is cancel-safe: a blackhole that starts while it waits stops it with nothing
        // lost, and the loop waits for traffic to pass again.
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            _ = passing.wait_for(|p| !*p) => continue,
        };
        // Bytes read just before a blackhole are held until it ends.
        if !until_passing(&mut passing).await {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
