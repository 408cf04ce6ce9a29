//! Real Redis servers (Debian's `redis-server` 7.0) on free loopback ports, standalone or as a
//! Redis Cluster of masters (with replicas on request), plus [`load_noise`] for "many unrelated
//! TTL keys" tests, [`burst`] for lock names changing faster than lockscope reads them, and
//! [`server_locks`] for what a server holds. For Cluster fault tests: failovers
//! ([`RedisCluster::failover`], or a killed master and [`RedisCluster::wait_converged`]), slot
//! migrations ([`SlotMigration`]) and a small client that follows the cluster through them
//! ([`ClusterClient`]: `MOVED`, `ASK`, a dead node).
//!
//! This module owns the server processes: each [`RedisServer`] is one `redis-server` with its own
//! temporary directory (`--dir`, also where a cluster node keeps `nodes.conf`), its log in
//! `redis.log` there (what it printed before the log file was open goes to `redis.stdout`), no
//! persistence (`--save "" --appendonly no`), bound to 127.0.0.1 only, protected mode off and
//! keyspace notifications off (`--notify-keyspace-events ""`: lockscope turns them on itself).
//! Start failures carry both files' tails.
//!
//! Servers are SIGKILLed by PID and reaped on [`RedisServer::kill`] and on drop. A server that
//! cannot bind its port (another process took it between picking and binding) makes `start` try
//! again on fresh ports, so servers and clusters can start in parallel, in one process or many.
//!
//! Cluster nodes get an explicit `--cluster-port` from [`free_port`] (the default, port + 10000,
//! is neither checked for being free nor always below 65536) and `--cluster-node-timeout 2000`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use redis::aio::MultiplexedConnection;

use super::ports::free_port;
use crate::harness::eventually_every;

/// How long a server may take to answer PING after it is spawned.
const PING_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a cluster may take to say `cluster_state:ok` on every node after creation.
const CLUSTER_OK_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest pause between two probes of a wait on a cluster's state.
const POLL_PAUSE: Duration = Duration::from_millis(50);
/// Per-command response timeout of connections made here (the crate's default, 500 ms, is too
/// short for 10k-command pipelines on a busy 2-core machine).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

/// One running (or killed) `redis-server` on `127.0.0.1:port()`.
pub struct RedisServer {
    port: u16,
    /// `--cluster-port` of a cluster node.
    bus_port: Option<u16>,
    extra_args: Vec<String>,
    log: PathBuf,
    stdout: PathBuf,
    process: Option<Child>,
    // Dropped after `Drop::drop` killed the process.
    dir: tempfile::TempDir,
}

/// What is left until `deadline`: the bound of one of several waits that share it.
fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A multiplexed connection to `url` with a 5 s connect and a 30 s response timeout.
pub async fn connect(url: &str) -> Result<MultiplexedConnection> {
    let client = redis::Client::open(url).with_context(|| format!("bad Redis URL {url}"))?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(Some(RESPONSE_TIMEOUT));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .with_context(|| format!("connect to {url}"))
}

/// One PING on a fresh connection with short timeouts; on PONG, the answering server's PID
/// (`INFO server` `process_id`), so a caller can tell its own server from another process's
/// that took the port.
async fn ping(port: u16) -> Result<u32> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_millis(500)))
        .set_response_timeout(Some(Duration::from_millis(1000)));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let pong: String = redis::cmd("PING").query_async(&mut conn).await?;
    if pong != "PONG" {
        bail!("PING answered {pong:?}");
    }
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await?;
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow!("no process_id in INFO server"))
}

impl RedisServer {
    /// `redis-server` on `127.0.0.1:<free port>` with `--save "" --appendonly no --bind 127.0.0.1
    /// --protected-mode no --notify-keyspace-events ""`, `--dir` and `--logfile` in its own
    /// temporary directory; returns once it answers PING.
    pub async fn start() -> Result<RedisServer> {
        Self::start_with(&[]).await
    }

    /// Like [`Self::start`], with `extra_args` appended to the command line (later options win,
    /// e.g. `["--notify-keyspace-events", "KEA"]` or `["--maxmemory", "64mb"]`). Relative paths
    /// in them resolve in the server's temporary directory.
    pub async fn start_with(extra_args: &[&str]) -> Result<RedisServer> {
        let extra: Vec<String> = extra_args.iter().map(|s| s.to_string()).collect();
        Self::start_retrying(extra, false).await
    }

    async fn start_retrying(extra_args: Vec<String>, cluster: bool) -> Result<RedisServer> {
        let mut last_error = None;
        // A port taken by another process between picking and binding makes the server exit:
        // start again on new ports.
        for _ in 0..4 {
            match Self::try_start(extra_args.clone(), cluster).await {
                Ok(server) => return Ok(server),
                Err(e) => {
                    tracing::warn!("redis-server did not start, retrying on new ports: {e:#}");
                    last_error = Some(e);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow!("redis-server did not start")))
    }

    async fn try_start(extra_args: Vec<String>, cluster: bool) -> Result<RedisServer> {
        let dir = tempfile::Builder::new()
            .prefix("lockscope-redis-")
            .tempdir()?;
        let mut server = RedisServer {
            port: free_port(),
            bus_port: cluster.then(free_port),
            extra_args,
            log: dir.path().join("redis.log"),
            stdout: dir.path().join("redis.stdout"),
            process: None,
            dir,
        };
        // From here on, a failure drops `server`, which kills what was started.
        server.spawn()?;
        server.wait_ping(PING_TIMEOUT).await?;
        Ok(server)
    }

    fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = [
            "--port",
            &self.port.to_string(),
            "--bind",
            "127.0.0.1",
            "--protected-mode",
            "no",
            "--save",
            "",
            "--appendonly",
            "no",
            "--notify-keyspace-events",
            "",
            "--daemonize",
            "no",
            "--dir",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(self.dir.path().display().to_string());
        args.push("--logfile".into());
        args.push(self.log.display().to_string());
        if let Some(bus) = self.bus_port {
            for a in [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "2000",
                "--cluster-port",
                &bus.to_string(),
            ] {
                args.push(a.to_string());
            }
        }
        args.extend(self.extra_args.iter().cloned());
        args
    }

    fn spawn(&mut self) -> Result<()> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.stdout)?;
        let child = Command::new("redis-server")
            .args(self.args())
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("start redis-server: is the redis-server package installed?")?;
        self.process = Some(child);
        Ok(())
    }

    fn failure(&self, what: &str) -> anyhow::Error {
        anyhow!(
            "redis-server on port {}{}: {what}; log tail:\n{}\nstdout/stderr tail:\n{}",
            self.port,
            self.bus_port
                .map(|b| format!(" (cluster bus {b})"))
                .unwrap_or_default(),
            tail(&self.log, 30),
            tail(&self.stdout, 10)
        )
    }

    /// `Some(status)` when the process has exited (it is reaped then), `None` while it runs.
    fn exited(&mut self) -> Option<String> {
        let child = self.process.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => {
                self.process = None;
                Some(status.to_string())
            }
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        }
    }

    async fn wait_ping(&mut self, timeout: Duration) -> Result<()> {
        let pause = Duration::from_millis(20);
        let waited = eventually_every(timeout, pause, "a PONG from this server", async || {
            match (ping(self.port).await, self.pid()) {
                (Ok(pid), Some(ours)) if pid == ours => return Ok(Some(())),
                (Ok(pid), Some(ours)) => {
                    // Another process's server has the port; ours will exit on the bind error.
                    tracing::debug!("port {} answered by PID {pid}, not {ours}", self.port);
                }
                _ => {}
            }
            if self.process.is_none() {
                bail!("not running");
            }
            if let Some(status) = self.exited() {
                bail!("exited ({status})");
            }
            Ok(None)
        })
        .await;
        waited.map_err(|e| self.failure(&format!("{e:#}")))
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The cluster bus port of a cluster node, `None` for a standalone server.
    pub fn bus_port(&self) -> Option<u16> {
        self.bus_port
    }

    /// PID of the server, `None` when it is not running (killed, or exited and reaped).
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(Child::id)
    }

    /// The server's temporary directory (`--dir`: `redis.log`, `nodes.conf`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// A new multiplexed connection (5 s connect timeout, 30 s response timeout).
    pub async fn connection(&self) -> Result<MultiplexedConnection> {
        connect(&self.url()).await
    }

    /// SIGKILLs the server by its PID and reaps it (no-op if it is not running). Its data is
    /// gone (no persistence); a cluster node keeps its `nodes.conf`.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.process.take() {
            // `Child::kill` sends SIGKILL to this child's PID; `wait` reaps it.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port(s) and directory (a running one is killed
    /// first) and waits for PING. Fails, with the log tail, if the port was taken meanwhile.
    pub async fn restart(&mut self) -> Result<()> {
        self.kill();
        self.spawn()?;
        self.wait_ping(PING_TIMEOUT).await
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Redis Cluster: `nodes[i]` is the i-th master it was created with (the i-th slot range),
/// and `replicas` its replicas, if it was started with some. A failover or a slot migration
/// changes who serves what: ask [`RedisCluster::masters`] and [`RedisCluster::owner_of`] then.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
    /// `replicas[i * per_master + j]` replicated `nodes[i]` at start (empty without replicas).
    pub replicas: Vec<RedisServer>,
}

/// Slot ranges per node port, from one node's `CLUSTER SLOTS`.
async fn slot_owners(conn: &mut MultiplexedConnection) -> Result<Vec<(u16, u16, u16)>> {
    let slots: redis::Value = redis::cmd("CLUSTER").arg("SLOTS").query_async(conn).await?;
    let redis::Value::Array(ranges) = slots else {
        bail!("CLUSTER SLOTS answered {slots:?}");
    };
    let mut out = Vec::new();
    for range in ranges {
        let redis::Value::Array(parts) = &range else {
            bail!("CLUSTER SLOTS entry {range:?}");
        };
        let int = |v: Option<&redis::Value>| -> Result<i64> {
            match v {
                Some(redis::Value::Int(i)) => Ok(*i),
                other => bail!("CLUSTER SLOTS: expected an integer, got {other:?}"),
            }
        };
        let start = int(parts.first())?;
        let end = int(parts.get(1))?;
        let port = match parts.get(2) {
            Some(redis::Value::Array(master)) => int(master.get(1))?,
            other => bail!("CLUSTER SLOTS: no master in {other:?}"),
        };
        out.push((
            u16::try_from(start)?,
            u16::try_from(end)?,
            u16::try_from(port)?,
        ));
    }
    Ok(out)
}

impl RedisCluster {
    /// `masters` masters, no replicas. Each node runs with `--cluster-enabled yes
    /// --cluster-config-file nodes.conf` (in its own directory) `--cluster-node-timeout 2000` and
    /// its own `--cluster-port`; with 3 or more masters the cluster is made by `redis-cli
    /// --cluster create 127.0.0.1:p1 … --cluster-replicas 0 --cluster-yes` (redis-cli refuses
    /// fewer), with 1 or 2 by `CLUSTER ADDSLOTSRANGE` and `CLUSTER MEET`. Returns once
    /// `CLUSTER INFO` says `cluster_state:ok` on every node and every node's `CLUSTER SLOTS`
    /// names all masters.
    pub async fn start(masters: usize) -> Result<RedisCluster> {
        Self::start_with_replicas(masters, 0).await
    }

    /// Like [`Self::start`], then `per_master` replicas for each master: each a cluster node
    /// that `CLUSTER MEET`s the first master and `CLUSTER REPLICATE`s its master. Returns once
    /// every replica's link to its master is up (`master_link_status:up`), every node lists it
    /// as that master's replica, and every node says `cluster_state:ok` — so a
    /// `CLUSTER FAILOVER` or a master's death can promote it.
    pub async fn start_with_replicas(masters: usize, per_master: usize) -> Result<RedisCluster> {
        if masters == 0 {
            bail!("a cluster needs at least one master");
        }
        let starts = (0..masters).map(|_| RedisServer::start_retrying(Vec::new(), true));
        let nodes = futures::future::try_join_all(starts).await?;
        let mut cluster = RedisCluster {
            nodes,
            replicas: Vec::new(),
        };
        if masters >= 3 {
            cluster.create_with_redis_cli().await?;
        } else {
            cluster.create_by_hand().await?;
        }
        cluster.wait_ok(CLUSTER_OK_TIMEOUT).await?;
        if per_master > 0 {
            let starts =
                (0..masters * per_master).map(|_| RedisServer::start_retrying(Vec::new(), true));
            cluster.replicas = futures::future::try_join_all(starts).await?;
            cluster.attach_replicas(per_master).await?;
        }
        Ok(cluster)
    }

    /// Makes `replicas[i * per_master + j]` a replica of `nodes[i]` and waits until every node
    /// knows it as such and its replication link is up.
    async fn attach_replicas(&self, per_master: usize) -> Result<()> {
        let deadline = Instant::now() + CLUSTER_OK_TIMEOUT;
        let first = &self.nodes[0];
        let mut expected = Vec::new();
        for (r, replica) in self.replicas.iter().enumerate() {
            let master = &self.nodes[r / per_master];
            let master_id = node_id(master.port()).await?;
            let mut conn = replica.connection().await?;
            redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(first.port())
                .arg(first.bus_port().unwrap_or(0))
                .query_async::<()>(&mut conn)
                .await
                .with_context(|| format!("CLUSTER MEET from replica {r}"))?;
            // The replica must have heard of its master by gossip before it can follow it.
            let mut last = String::new();
            let what = format!("CLUSTER REPLICATE {master_id} accepted");
            eventually_every(left(deadline), POLL_PAUSE, &what, async || {
                let replicated = redis::cmd("CLUSTER")
                    .arg("REPLICATE")
                    .arg(&master_id)
                    .query_async::<()>(&mut conn)
                    .await;
                Ok(match replicated {
                    Ok(()) => Some(()),
                    Err(e) => {
                        last = e.to_string();
                        None
                    }
                })
            })
            .await
            .map_err(|e| replica.failure(&format!("{e}: {last}")))?;
            expected.push((node_id(replica.port()).await?, master_id));
        }
        for (r, replica) in self.replicas.iter().enumerate() {
            let mut last = String::new();
            let what = format!("replica {r}'s link up");
            eventually_every(left(deadline), POLL_PAUSE, &what, async || {
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query_async(&mut replica.connection().await?)
                    .await?;
                let up = info.contains("master_link_status:up");
                last = info;
                Ok(up.then_some(()))
            })
            .await
            .map_err(|e| replica.failure(&format!("{e}: {last}")))?;
        }
        for server in self.servers() {
            let mut last = String::new();
            let what = "every replica known to this node, cluster_state:ok";
            eventually_every(left(deadline), POLL_PAUSE, what, async || {
                let mut conn = server.connection().await?;
                let nodes: String = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query_async(&mut conn)
                    .await?;
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query_async(&mut conn)
                    .await?;
                let known = expected.iter().all(|(id, master)| {
                    nodes.lines().any(|line| {
                        let f: Vec<&str> = line.split_whitespace().collect();
                        f.first() == Some(&id.as_str())
                            && f.get(2).is_some_and(|flags| flags.contains("slave"))
                            && f.get(3) == Some(&master.as_str())
                    })
                });
                let ok = known && info.contains("cluster_state:ok");
                last = format!("{nodes}\n{info}");
                Ok(ok.then_some(()))
            })
            .await
            .map_err(|e| server.failure(&format!("{e}: replicas {expected:?}:\n{last}")))?;
        }
        Ok(())
    }

    async fn create_with_redis_cli(&self) -> Result<()> {
        let mut cmd = tokio::process::Command::new("redis-cli");
        cmd.arg("--cluster").arg("create");
        for n in &self.nodes {
            cmd.arg(format!("127.0.0.1:{}", n.port()));
        }
        cmd.args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
            .await
            .map_err(|_| anyhow!("redis-cli --cluster create did not finish in 60 s"))?
            .context("run redis-cli: is the redis-tools package installed?")?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() || !text.contains("[OK] All 16384 slots covered") {
            bail!(
                "redis-cli --cluster create failed ({}):\n{text}\nfirst node's log tail:\n{}",
                out.status,
                self.nodes
                    .first()
                    .map(|n| tail(n.log_path(), 20))
                    .unwrap_or_default()
            );
        }
        Ok(())
    }

    async fn create_by_hand(&self) -> Result<()> {
        let n = self.nodes.len();
        let per = 16384 / n;
        for (i, node) in self.nodes.iter().enumerate() {
            let start = i * per;
            let end = if i + 1 == n { 16383 } else { start + per - 1 };
            let mut conn = node.connection().await?;
            redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(start)
                .arg(end)
                .query_async::<()>(&mut conn)
                .await
                .with_context(|| format!("CLUSTER ADDSLOTSRANGE on node {i}"))?;
            if i > 0 {
                redis::cmd("CLUSTER")
                    .arg("MEET")
                    .arg("127.0.0.1")
                    .arg(self.nodes[0].port())
                    .arg(self.nodes[0].bus_port().unwrap_or(0))
                    .query_async::<()>(&mut conn)
                    .await
                    .with_context(|| format!("CLUSTER MEET from node {i}"))?;
            }
        }
        Ok(())
    }

    /// Waits until every node (replicas too) says `cluster_state:ok` and knows every master's
    /// slots, the masters being `nodes` (as created: use [`Self::wait_converged`] after a
    /// failover).
    pub async fn wait_ok(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let all_ports: std::collections::BTreeSet<u16> =
            self.nodes.iter().map(RedisServer::port).collect();
        for (i, node) in self.servers().enumerate() {
            let mut last = String::new();
            let what = format!("cluster node {i} (port {}) ok", node.port());
            let waited = eventually_every(left(deadline), POLL_PAUSE, &what, async || {
                let state = async {
                    let mut conn = node.connection().await?;
                    let info: String = redis::cmd("CLUSTER")
                        .arg("INFO")
                        .query_async(&mut conn)
                        .await?;
                    let owners = slot_owners(&mut conn).await?;
                    anyhow::Ok((info, owners))
                }
                .await;
                last = match state {
                    Ok((info, owners)) => {
                        let ports: std::collections::BTreeSet<u16> =
                            owners.iter().map(|o| o.2).collect();
                        if info.contains("cluster_state:ok") && ports == all_ports {
                            return Ok(Some(()));
                        }
                        info
                    }
                    Err(e) => format!("{e:#}"),
                };
                Ok(None)
            })
            .await;
            waited.map_err(|e| anyhow!("{e}: {last}\nlog tail:\n{}", tail(node.log_path(), 20)))?;
        }
        Ok(())
    }

    /// `redis://127.0.0.1:<port>` of every node, in `nodes` order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Index in `nodes` of the master that owns `key`'s slot (`CLUSTER KEYSLOT`, then
    /// `CLUSTER SLOTS`, both asked of the first running node).
    pub async fn node_for(&self, key: &[u8]) -> Result<usize> {
        let mut last = None;
        for node in self.nodes.iter().filter(|n| n.pid().is_some()) {
            let found = async {
                let mut conn = node.connection().await?;
                let slot: i64 = redis::cmd("CLUSTER")
                    .arg("KEYSLOT")
                    .arg(key)
                    .query_async(&mut conn)
                    .await?;
                let owners = slot_owners(&mut conn).await?;
                let port = owners
                    .iter()
                    .find(|(start, end, _)| (*start as i64..=*end as i64).contains(&slot))
                    .map(|o| o.2)
                    .ok_or_else(|| anyhow!("slot {slot} is not served"))?;
                self.nodes
                    .iter()
                    .position(|n| n.port() == port)
                    .ok_or_else(|| anyhow!("slot {slot} is served by unknown port {port}"))
            }
            .await;
            match found {
                Ok(i) => return Ok(i),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow!("no cluster node is running")))
    }

    /// A connection to the master that owns `key`'s slot (a replica promoted by a failover
    /// included).
    pub async fn connection_for(&self, key: &[u8]) -> Result<MultiplexedConnection> {
        self.owner_of(key).await?.connection().await
    }

    /// Every server of the cluster, running or not: `nodes`, then `replicas`.
    pub fn servers(&self) -> impl Iterator<Item = &RedisServer> {
        self.nodes.iter().chain(&self.replicas)
    }

    /// The server listening on `port`, if it is one of the cluster's.
    pub fn server_on(&self, port: u16) -> Option<&RedisServer> {
        self.servers().find(|s| s.port() == port)
    }

    /// Ports of every server (running or not): seeds for a [`ClusterClient`].
    pub fn ports(&self) -> Vec<u16> {
        self.servers().map(RedisServer::port).collect()
    }

    /// Slot ranges and the port of the master serving each, as the first running server that
    /// answers says (`CLUSTER SLOTS`).
    pub async fn slot_map(&self) -> Result<Vec<(u16, u16, u16)>> {
        let mut last = None;
        for server in self.servers().filter(|s| s.pid().is_some()) {
            let map = async {
                let mut conn = server.connection().await?;
                slot_owners(&mut conn).await
            }
            .await;
            match map {
                Ok(map) => return Ok(map),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow!("no cluster node is running")))
    }

    /// The masters serving slots now (after failovers too), by port, each once.
    pub async fn masters(&self) -> Result<Vec<&RedisServer>> {
        let ports: std::collections::BTreeSet<u16> =
            self.slot_map().await?.iter().map(|o| o.2).collect();
        ports
            .into_iter()
            .map(|p| {
                self.server_on(p)
                    .ok_or_else(|| anyhow!("a slot is served by unknown port {p}"))
            })
            .collect()
    }

    /// The server that serves `slot` now.
    pub async fn owner_of_slot(&self, slot: u16) -> Result<&RedisServer> {
        let map = self.slot_map().await?;
        let port = map
            .iter()
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
            .map(|o| o.2)
            .ok_or_else(|| anyhow!("slot {slot} is not served"))?;
        self.server_on(port)
            .ok_or_else(|| anyhow!("slot {slot} is served by unknown port {port}"))
    }

    /// The server that serves `key`'s slot now.
    pub async fn owner_of(&self, key: &[u8]) -> Result<&RedisServer> {
        self.owner_of_slot(lockscope_model::redis::hash_slot(key))
            .await
    }

    /// Waits until the cluster has settled: every running server says `cluster_state:ok`, all
    /// of them give the same `CLUSTER SLOTS` masters, and every one of those masters runs and
    /// says it is a master (`ROLE`). Answers the settled slot map.
    pub async fn wait_converged(&self, timeout: Duration) -> Result<Vec<(u16, u16, u16)>> {
        let mut last = String::new();
        let waited = eventually_every(timeout, POLL_PAUSE, "the cluster settled", async || {
            let state = async {
                let mut maps = Vec::new();
                for server in self.servers().filter(|s| s.pid().is_some()) {
                    let mut conn = server.connection().await?;
                    let info: String = redis::cmd("CLUSTER")
                        .arg("INFO")
                        .query_async(&mut conn)
                        .await?;
                    if !info.contains("cluster_state:ok") {
                        bail!("port {}: not ok", server.port());
                    }
                    let mut map = slot_owners(&mut conn).await?;
                    map.sort_unstable();
                    maps.push(map);
                }
                let first = maps.first().cloned().unwrap_or_default();
                if maps.iter().any(|m| *m != first) {
                    bail!("servers disagree on the slots: {maps:?}");
                }
                let ports: std::collections::BTreeSet<u16> = first.iter().map(|o| o.2).collect();
                for port in ports {
                    let server = self
                        .server_on(port)
                        .filter(|s| s.pid().is_some())
                        .ok_or_else(|| anyhow!("slots served by port {port}, which is down"))?;
                    if role(server.port()).await? != "master" {
                        bail!("port {port} serves slots but is no master yet");
                    }
                }
                anyhow::Ok(first)
            }
            .await;
            Ok(match state {
                Ok(map) => Some(map),
                Err(e) => {
                    last = format!("{e:#}");
                    None
                }
            })
        })
        .await;
        waited.map_err(|e| anyhow!("{e}: {last}"))
    }

    /// A manual failover: `CLUSTER FAILOVER` on `replicas[replica]` (its master hands over once
    /// the replica has caught up, so no write is lost), then waits until the cluster has settled
    /// with the replica serving its old master's slots.
    pub async fn failover(&self, replica: usize) -> Result<()> {
        let server = &self.replicas[replica];
        let mut conn = server.connection().await?;
        redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .query_async::<()>(&mut conn)
            .await
            .with_context(|| format!("CLUSTER FAILOVER on replica {replica}"))?;
        self.wait_serving(server.port(), CLUSTER_OK_TIMEOUT).await
    }

    /// Waits until the cluster has settled with the server on `port` serving slots (a replica
    /// promoted by a failover, or the target of a migration).
    pub async fn wait_serving(&self, port: u16, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let mut last = Vec::new();
        let what = format!("port {port} serving slots");
        let waited = eventually_every(timeout, POLL_PAUSE, &what, async || {
            let map = self.wait_converged(left(deadline)).await?;
            let serving = map.iter().any(|o| o.2 == port);
            last = map;
            Ok(serving.then_some(()))
        })
        .await;
        waited.map_err(|e| anyhow!("{e}: {last:?}"))
    }

    /// Starts moving `slot` from the master that serves it to the master on `to`:
    /// `CLUSTER SETSLOT <slot> IMPORTING <source id>` on the target, then
    /// `CLUSTER SETSLOT <slot> MIGRATING <target id>` on the source (redis.io's order).
    pub async fn start_migration(&self, slot: u16, to: u16) -> Result<SlotMigration> {
        let from = self.owner_of_slot(slot).await?.port();
        if from == to {
            bail!("slot {slot} is already served by port {to}");
        }
        let migration = SlotMigration {
            slot,
            from,
            to,
            from_id: node_id(from).await?,
            to_id: node_id(to).await?,
        };
        setslot(to, slot, "IMPORTING", &migration.from_id).await?;
        setslot(from, slot, "MIGRATING", &migration.to_id).await?;
        Ok(migration)
    }
}

/// A slot being moved between two masters (see [`RedisCluster::start_migration`]).
pub struct SlotMigration {
    pub slot: u16,
    /// Ports of the source and the target master.
    pub from: u16,
    pub to: u16,
    from_id: String,
    to_id: String,
}

impl SlotMigration {
    /// Keys of the slot still on the source (`CLUSTER COUNTKEYSINSLOT`).
    pub async fn keys_left(&self) -> Result<u64> {
        let mut conn = connect(&port_url(self.from)).await?;
        Ok(redis::cmd("CLUSTER")
            .arg("COUNTKEYSINSLOT")
            .arg(self.slot)
            .query_async(&mut conn)
            .await?)
    }

    /// Moves up to `max` of the slot's keys from source to target in one `MIGRATE … KEYS`
    /// (atomic for those keys: a client sees each on one side or the other); answers how many
    /// the source listed (`CLUSTER GETKEYSINSLOT`).
    pub async fn move_keys(&self, max: usize) -> Result<usize> {
        let mut conn = connect(&port_url(self.from)).await?;
        let keys: Vec<Vec<u8>> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(self.slot)
            .arg(max)
            .query_async(&mut conn)
            .await?;
        if keys.is_empty() {
            return Ok(0);
        }
        let mut migrate = redis::cmd("MIGRATE");
        migrate
            .arg("127.0.0.1")
            .arg(self.to)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS");
        for key in &keys {
            migrate.arg(key.as_slice());
        }
        // `NOKEY` when every listed key went meanwhile (deleted or expired): nothing to move.
        migrate
            .query_async::<redis::Value>(&mut conn)
            .await
            .with_context(|| format!("MIGRATE {} keys of slot {}", keys.len(), self.slot))?;
        Ok(keys.len())
    }

    /// Moves the keys left (bounded: 10 000 rounds) and hands the slot to the target:
    /// `CLUSTER SETSLOT <slot> NODE <target id>` on the target, the source, then every other
    /// running master; waits until the cluster has settled with the target serving the slot.
    pub async fn finish(&self, cluster: &RedisCluster) -> Result<()> {
        let mut rounds = 0;
        while self.move_keys(100).await? > 0 {
            rounds += 1;
            if rounds >= 10_000 {
                bail!(
                    "slot {} still has keys after {rounds} MIGRATE rounds",
                    self.slot
                );
            }
        }
        // A key written by a client between the last move and the handover would be stranded;
        // the caller stops writing to the slot's source or follows ASK (then writes go to the
        // target once a key is missing on the source).
        setslot(self.to, self.slot, "NODE", &self.to_id).await?;
        setslot(self.from, self.slot, "NODE", &self.to_id).await?;
        for master in cluster.masters().await? {
            if master.port() != self.to && master.port() != self.from {
                setslot(master.port(), self.slot, "NODE", &self.to_id).await?;
            }
        }
        let deadline = Instant::now() + CLUSTER_OK_TIMEOUT;
        let what = format!(
            "slot {} served by port {} after the handover",
            self.slot, self.to
        );
        eventually_every(CLUSTER_OK_TIMEOUT, POLL_PAUSE, &what, async || {
            cluster.wait_converged(left(deadline)).await?;
            let owner = cluster.owner_of_slot(self.slot).await?.port();
            Ok((owner == self.to).then_some(()))
        })
        .await
    }
}

fn port_url(port: u16) -> String {
    format!("redis://127.0.0.1:{port}")
}

/// `CLUSTER MYID` of the node on `port`.
pub async fn node_id(port: u16) -> Result<String> {
    let mut conn = connect(&port_url(port)).await?;
    Ok(redis::cmd("CLUSTER")
        .arg("MYID")
        .query_async(&mut conn)
        .await?)
}

/// The first element of `ROLE` on `port`: `master` or `slave`.
async fn role(port: u16) -> Result<String> {
    let mut conn = connect(&port_url(port)).await?;
    let role: redis::Value = redis::cmd("ROLE").query_async(&mut conn).await?;
    match role {
        redis::Value::Array(parts) => parts
            .first()
            .and_then(value_text)
            .ok_or_else(|| anyhow!("ROLE answered {parts:?}")),
        other => bail!("ROLE answered {other:?}"),
    }
}

fn value_text(value: &redis::Value) -> Option<String> {
    match value {
        redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        redis::Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// `CLUSTER SETSLOT <slot> <state> <node id>` on the node on `port`.
async fn setslot(port: u16, slot: u16, state: &str, id: &str) -> Result<()> {
    let mut conn = connect(&port_url(port)).await?;
    redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg(state)
        .arg(id)
        .query_async::<()>(&mut conn)
        .await
        .with_context(|| format!("CLUSTER SETSLOT {slot} {state} {id} on port {port}"))
}

/// A minimal Redis Cluster client for fault tests: sends a key's command to the master that
/// serves the key's slot (from `CLUSTER SLOTS` of the first seed that answers, cached), follows
/// `MOVED` (and re-reads the slots), answers `ASK` with `ASKING` on the named node (a slot being
/// migrated), and after a connection failure forgets the connection and the slots, so the next
/// command finds the cluster as it is then. At most 5 redirects per command.
pub struct ClusterClient {
    seeds: Vec<u16>,
    slots: Vec<(u16, u16, u16)>,
    conns: std::collections::HashMap<u16, MultiplexedConnection>,
}

/// Connections of a [`ClusterClient`] give up fast on a dead node (1 s to connect, 5 s for an
/// answer), so a client notices a killed master instead of waiting on it.
async fn quick_connect(port: u16) -> Result<MultiplexedConnection> {
    let client = redis::Client::open(port_url(port))?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(Duration::from_secs(5)));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .with_context(|| format!("connect to port {port}"))
}

impl ClusterClient {
    /// A client that learns the cluster from the servers on `seeds` (e.g.
    /// [`RedisCluster::ports`]).
    pub fn new(seeds: Vec<u16>) -> ClusterClient {
        ClusterClient {
            seeds,
            slots: Vec::new(),
            conns: std::collections::HashMap::new(),
        }
    }

    async fn refresh(&mut self) -> Result<()> {
        let mut last = None;
        for &seed in &self.seeds {
            let map = async {
                let mut conn = quick_connect(seed).await?;
                slot_owners(&mut conn).await
            }
            .await;
            match map {
                Ok(map) if !map.is_empty() => {
                    self.slots = map;
                    return Ok(());
                }
                Ok(_) => last = Some(anyhow!("port {seed}: no slots")),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow!("no seeds")))
    }

    async fn owner(&mut self, slot: u16) -> Result<u16> {
        let find = |slots: &[(u16, u16, u16)]| {
            slots
                .iter()
                .find(|(start, end, _)| (*start..=*end).contains(&slot))
                .map(|o| o.2)
        };
        if let Some(port) = find(&self.slots) {
            return Ok(port);
        }
        self.refresh().await?;
        find(&self.slots).ok_or_else(|| anyhow!("slot {slot} is not served"))
    }

    async fn connection(&mut self, port: u16) -> Result<MultiplexedConnection> {
        if let Some(conn) = self.conns.get(&port) {
            return Ok(conn.clone());
        }
        let conn = quick_connect(port).await?;
        self.conns.insert(port, conn.clone());
        Ok(conn)
    }

    /// Runs `cmd`, whose key is `key`, where the cluster serves `key`.
    pub async fn query<T: redis::FromRedisValue>(
        &mut self,
        key: &[u8],
        cmd: &redis::Cmd,
    ) -> Result<T> {
        let mut port = self.owner(lockscope_model::redis::hash_slot(key)).await?;
        let mut asking = false;
        for _ in 0..=5 {
            let answer = match self.connection(port).await {
                Ok(mut conn) => {
                    if asking {
                        redis::pipe()
                            .cmd("ASKING")
                            .ignore()
                            .add_command(cmd.clone())
                            .query_async::<(T,)>(&mut conn)
                            .await
                            .map(|(v,)| v)
                    } else {
                        cmd.query_async::<T>(&mut conn).await
                    }
                }
                Err(e) => {
                    self.slots.clear();
                    return Err(e);
                }
            };
            let e = match answer {
                Ok(value) => return Ok(value),
                Err(e) => e,
            };
            let redirect = e
                .redirect_node()
                .and_then(|(addr, _)| addr.rsplit_once(':'))
                .and_then(|(_, p)| p.parse::<u16>().ok());
            match (e.kind(), redirect) {
                (redis::ErrorKind::Server(redis::ServerErrorKind::Moved), Some(to)) => {
                    self.slots.clear();
                    port = to;
                    asking = false;
                }
                (redis::ErrorKind::Server(redis::ServerErrorKind::Ask), Some(to)) => {
                    port = to;
                    asking = true;
                }
                _ => {
                    if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() {
                        self.conns.remove(&port);
                    }
                    self.slots.clear();
                    return Err(anyhow::Error::new(e).context(format!("on port {port}")));
                }
            }
        }
        bail!("more than 5 redirects for {}", String::from_utf8_lossy(key))
    }
}

/// Loads `count` unrelated string keys `noise:<i>` (value `n`) with PX TTLs spread between 1 and
/// 10 minutes, in pipelines of 10 000 `SET`s. About 1 s per 100k keys on loopback.
pub async fn load_noise(conn: &mut MultiplexedConnection, count: usize) -> Result<()> {
    load_noise_range(conn, 0..count, 60_000..600_000).await
}

/// [`load_noise`] of the keys `noise:<i>` for `i` in `keys`, with PX TTLs spread over `ttl_ms`:
/// a keyspace grown in steps, or one that must not expire during a long run.
pub async fn load_noise_range(
    conn: &mut MultiplexedConnection,
    keys: std::ops::Range<usize>,
    ttl_ms: std::ops::Range<u64>,
) -> Result<()> {
    const BATCH: usize = 10_000;
    let spread = ttl_ms.end.saturating_sub(ttl_ms.start).max(1);
    let mut start = keys.start;
    while start < keys.end {
        let end = (start + BATCH).min(keys.end);
        let mut pipe = redis::pipe();
        for i in start..end {
            // Deterministic spread over `ttl_ms`.
            let ttl = ttl_ms.start + (i as u64).wrapping_mul(2_654_435_761) % spread;
            pipe.cmd("SET")
                .arg(format!("noise:{i}"))
                .arg("n")
                .arg("PX")
                .arg(ttl)
                .ignore();
        }
        pipe.query_async::<()>(conn)
            .await
            .with_context(|| format!("load noise keys {start}..{end}"))?;
        start = end;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Bursts of lock names, faster than lockscope reads them

/// TTL of every lock a [`burst`] sets: far longer than any run, so none expires in one.
const BURST_TTL_MS: u64 = 600_000;

/// How a [`burst`] client writes one name.
pub enum BurstName {
    /// `SET key token PX …`, then `DEL key` in the same pipeline: a lock taken and given back.
    Churned { key: String, token: String },
    /// `SET key token PX …` for each token in turn: a lock that stays held by the last token.
    Kept { key: String, tokens: Vec<String> },
}

/// When a [`burst`] client stops.
#[derive(Debug, Clone, Copy)]
pub enum BurstEnd {
    /// After this many names.
    Names(u64),
    /// Before the first round trip that would start at or after this instant.
    At(Instant),
}

/// What one [`burst`] client wrote.
#[derive(Debug, Default, Clone, Copy)]
pub struct BurstCount {
    /// Names written (churned and kept).
    pub names: u64,
    /// Names deleted again (churned).
    pub deleted: u64,
    /// Commands sent.
    pub commands: u64,
}

/// One pipelining client of a burst: on its own connection to `url`, writes name `n` (0, 1, …)
/// as `name(n)` says, `depth` names per round trip, until `end`.
pub async fn burst(
    url: &str,
    depth: usize,
    end: BurstEnd,
    mut name: impl FnMut(u64) -> BurstName,
) -> Result<BurstCount> {
    let mut conn = connect(url).await?;
    let mut count = BurstCount::default();
    let more = |count: &BurstCount| match end {
        BurstEnd::Names(n) => count.names < n,
        BurstEnd::At(until) => Instant::now() < until,
    };
    while more(&count) {
        let mut pipe = redis::pipe();
        for _ in 0..depth {
            if let BurstEnd::Names(n) = end {
                if count.names >= n {
                    break;
                }
            }
            let (key, tokens, delete) = match name(count.names) {
                BurstName::Churned { key, token } => (key, vec![token], true),
                BurstName::Kept { key, tokens } => (key, tokens, false),
            };
            for token in tokens {
                pipe.cmd("SET")
                    .arg(&key)
                    .arg(token)
                    .arg("PX")
                    .arg(BURST_TTL_MS)
                    .ignore();
                count.commands += 1;
            }
            if delete {
                pipe.cmd("DEL").arg(&key).ignore();
                count.commands += 1;
                count.deleted += 1;
            }
            count.names += 1;
        }
        pipe.query_async::<()>(&mut conn)
            .await
            .with_context(|| format!("burst to {url}: after {} names", count.names))?;
    }
    Ok(count)
}

/// Lock key → value of every `lock:*` key on the server now (`SCAN … COUNT 1000`, then `GET`s
/// pipelined 1000 at a time): the truth a model of a standalone server is compared with.
pub async fn server_locks(
    conn: &mut MultiplexedConnection,
) -> Result<std::collections::BTreeMap<String, String>> {
    let mut keys: Vec<String> = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("lock:*")
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await?;
        keys.extend(batch);
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    let mut out = std::collections::BTreeMap::new();
    for chunk in keys.chunks(1000) {
        let mut pipe = redis::pipe();
        for key in chunk {
            pipe.cmd("GET").arg(key);
        }
        let values: Vec<Option<String>> = pipe.query_async(conn).await?;
        for (key, value) in chunk.iter().zip(values) {
            if let Some(value) = value {
                out.insert(key.clone(), value);
            }
        }
    }
    Ok(out)
}
