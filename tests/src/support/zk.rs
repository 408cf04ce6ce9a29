//! Real ZooKeeper ensembles (Debian's `zookeeper` 3.8) on free loopback ports.
//!
//! This module owns the server processes: each member is a `QuorumPeerMain` JVM with its own
//! config, `myid` and data directory in one temporary directory, four-letter words enabled
//! (`4lw.commands.whitelist=*`) and the AdminServer on (it needs `servlet-api.jar` on the class
//! path, or it silently does not start; `start` checks that it answers). `tickTime` is 500 ms, so
//! sessions may time out between 1 s and 10 s. Each member's stdout/stderr goes to `zk<myid>.log`
//! in the temporary directory; start failures carry that log's tail.
//!
//! Members are SIGKILLed by PID and reaped on [`ZkEnsemble::kill`] and on drop. A member that
//! cannot bind its ports (another process took one between picking and binding) makes
//! [`ZkEnsemble::start`] try again on fresh ports.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{anyhow, bail, ensure, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::ports::free_port;
use super::proxy::TcpProxy;
use crate::harness::eventually;

/// `zookeeper.jar`'s manifest pulls in jetty, netty, jackson, metrics and snappy; servlet-api and
/// an slf4j binding are not in it.
const CLASSPATH: &str = "/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/servlet-api.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-simple.jar";

/// How long one member may take to serve after its JVM starts.
const SERVE_TIMEOUT: Duration = Duration::from_secs(60);

struct Member {
    myid: usize,
    client: u16,
    /// The `secureClientPort` of a [`ZkEnsemble::start_secure`] member.
    secure: Option<u16>,
    /// Jars after [`CLASSPATH`] (Netty's codecs for a secured member).
    extra_classpath: String,
    quorum: u16,
    election: u16,
    admin: u16,
    config: PathBuf,
    log: PathBuf,
    /// Behind a mutex so `&self` methods can notice a JVM that exited.
    process: Mutex<Option<Child>>,
    /// JVM options after the defaults (a later `-Xmx` wins).
    jvm_args: Vec<String>,
}

impl Member {
    fn process(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        self.process.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `Some(status)` when the JVM has exited (it is reaped then), `None` while it runs.
    fn exited(&self) -> Option<String> {
        let mut guard = self.process();
        let child = guard.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => {
                *guard = None;
                Some(status.to_string())
            }
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        }
    }

    fn kill(&self) {
        if let Some(mut child) = self.process().take() {
            // `Child::kill` sends SIGKILL to this child's PID; `wait` reaps it.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn failure(&self, what: &str) -> anyhow::Error {
        anyhow!(
            "ZooKeeper member {} (client {}, quorum {}, election {}, admin {}): {what}; log tail:\n{}",
            self.myid,
            self.client,
            self.quorum,
            self.election,
            self.admin,
            tail(&self.log, 40)
        )
    }
}

/// How a [`ZkEnsemble::start_secure`] server is secured, as production runs it: the Netty
/// connection factory, a `secureClientPort` with PEM key and trust stores, and SASL DIGEST-MD5
/// users from a JAAS `Server` section. The plain `clientPort` stays open (for the test's own
/// four-letter words and for clients that do not speak TLS).
#[derive(Debug, Clone, Default)]
pub struct ZkSecurity {
    /// The server's certificate and key (one PEM key store) and the CA it trusts for client
    /// certificates; `None`: no secure port.
    pub tls: Option<(super::certs::CertFiles, PathBuf)>,
    /// `ssl.clientAuth=need` (client certificates required) instead of `none`.
    pub client_auth: bool,
    /// SASL DIGEST-MD5 users (`user_<name>="<password>"` in the JAAS `Server` section).
    pub sasl_users: Vec<(String, String)>,
    /// `enforce.auth.enabled=true` with `enforce.auth.schemes=sasl`: a session that has not
    /// authenticated with SASL gets no answers.
    pub enforce_sasl: bool,
}

impl ZkSecurity {
    /// The lines `zoo.cfg` gains and the JVM options, writing the files they name into `dir`.
    fn apply(&self, dir: &Path) -> Result<(String, Vec<String>)> {
        let mut cfg = String::new();
        let mut jvm = Vec::new();
        if let Some((server, ca)) = &self.tls {
            // ZooKeeper's PEM key store is the private key and the certificate in one file.
            let bundle = dir.join("server-bundle.pem");
            let mut text = std::fs::read_to_string(&server.key)?;
            text.push_str(&std::fs::read_to_string(&server.cert)?);
            std::fs::write(&bundle, text)?;
            cfg.push_str(&format!(
                "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
                 secureClientPortAddress=127.0.0.1\n\
                 ssl.keyStore.location={}\n\
                 ssl.keyStore.type=PEM\n\
                 ssl.trustStore.location={}\n\
                 ssl.trustStore.type=PEM\n\
                 ssl.clientAuth={}\n",
                bundle.display(),
                ca.display(),
                if self.client_auth { "need" } else { "none" },
            ));
        }
        if !self.sasl_users.is_empty() {
            let users: String = self
                .sasl_users
                .iter()
                .map(|(user, password)| format!("\n  user_{user}=\"{password}\""))
                .collect();
            let jaas = dir.join("jaas.conf");
            std::fs::write(
                &jaas,
                format!(
                    "Server {{\n  org.apache.zookeeper.server.auth.DigestLoginModule required{users};\n}};\n"
                ),
            )?;
            jvm.push(format!(
                "-Djava.security.auth.login.config={}",
                jaas.display()
            ));
            cfg.push_str(
                "authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n",
            );
            if self.enforce_sasl {
                cfg.push_str("enforce.auth.enabled=true\nenforce.auth.schemes=sasl\n");
            }
        }
        Ok((cfg, jvm))
    }
}

/// A running ensemble of `members()` servers; member `i` has `myid` `i + 1`.
pub struct ZkEnsemble {
    members: Vec<Member>,
    // Dropped after `Drop::drop` killed the members.
    dir: tempfile::TempDir,
}

/// Sends a four-letter word to `addr` and reads the answer to EOF (5 s timeout).
pub async fn four_letter(addr: SocketAddr, cmd: &str) -> Result<String> {
    let work = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        stream.write_all(cmd.as_bytes()).await?;
        let mut out = Vec::new();
        stream.read_to_end(&mut out).await?;
        anyhow::Ok(String::from_utf8_lossy(&out).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(5), work)
        .await
        .map_err(|_| anyhow!("{cmd} to {addr} timed out"))?
        .with_context(|| format!("{cmd} to {addr}"))
}

/// The sessions connected through `proxies`, as the members themselves (asked directly, with
/// `cons`) name them: the server sees a proxied client at the proxy's upstream port.
pub async fn sessions_via(zk: &ZkEnsemble, proxies: &[TcpProxy]) -> Result<BTreeSet<i64>> {
    let ports: BTreeSet<u16> = proxies.iter().flat_map(TcpProxy::upstream_ports).collect();
    let mut out = BTreeSet::new();
    for i in 0..zk.members() {
        let text = four_letter(zk.client_addr(i), "cons").await?;
        for conn in lockscope::backends::zookeeper::fourlw::parse_cons(&text) {
            let port = conn
                .client
                .rsplit_once(':')
                .and_then(|(_, p)| p.parse::<u16>().ok());
            if conn.session != 0 && port.is_some_and(|p| ports.contains(&p)) {
                out.insert(conn.session);
            }
        }
    }
    Ok(out)
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The `Mode:` line of a `srvr` answer (`leader`, `follower`, `standalone`), if any.
fn mode(srvr: &str) -> Option<&str> {
    srvr.lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(str::trim)
}

impl ZkEnsemble {
    /// Starts `members` servers (1 = standalone) and waits until every one serves (`srvr` says
    /// leader, follower or standalone) and its AdminServer answers.
    pub async fn start(members: usize) -> Result<ZkEnsemble> {
        Self::start_with_jvm_args(members, &[]).await
    }

    /// [`Self::start`] with JVM options added after the defaults, e.g. `-Xmx2g` for a tree of a
    /// million nodes (the default heap is 256 MB) or `-Djute.maxbuffer=<bytes>` for a node with
    /// more children than a 1 MB answer lists.
    pub async fn start_with_jvm_args(members: usize, jvm_args: &[&str]) -> Result<ZkEnsemble> {
        if members == 0 {
            bail!("an ensemble needs at least one member");
        }
        let mut last_error = None;
        // A port taken by another process between picking and binding makes a member fail:
        // start again on new ports.
        for _ in 0..3 {
            match Self::try_start(members, jvm_args, None).await {
                Ok(ensemble) => return Ok(ensemble),
                Err(e) => {
                    tracing::warn!(
                        "ZooKeeper ensemble did not start, retrying on new ports: {e:#}"
                    );
                    last_error = Some(e);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow!("ZooKeeper did not start")))
    }

    /// A standalone server secured as `security` says (see [`ZkSecurity`]), serving once its
    /// plain port answers `srvr`.
    pub async fn start_secure(security: &ZkSecurity) -> Result<ZkEnsemble> {
        let mut last_error = None;
        for _ in 0..3 {
            match Self::try_start(1, &[], Some(security)).await {
                Ok(ensemble) => return Ok(ensemble),
                Err(e) => {
                    tracing::warn!("secured ZooKeeper did not start, retrying on new ports: {e:#}");
                    last_error = Some(e);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow!("ZooKeeper did not start")))
    }

    async fn try_start(
        count: usize,
        jvm_args: &[&str],
        security: Option<&ZkSecurity>,
    ) -> Result<ZkEnsemble> {
        let dir = tempfile::Builder::new().prefix("lockscope-zk-").tempdir()?;
        let (secure_cfg, secure_jvm) = match security {
            Some(security) => security.apply(dir.path())?,
            None => (String::new(), Vec::new()),
        };
        let members: Vec<Member> = (1..=count)
            .map(|myid| Member {
                myid,
                secure: security.is_some_and(|s| s.tls.is_some()).then(free_port),
                extra_classpath: if security.is_some() {
                    netty_classpath()
                } else {
                    String::new()
                },
                client: free_port(),
                quorum: free_port(),
                election: free_port(),
                admin: free_port(),
                config: dir.path().join(format!("zoo{myid}.cfg")),
                log: dir.path().join(format!("zk{myid}.log")),
                process: Mutex::new(None),
                jvm_args: jvm_args
                    .iter()
                    .map(|a| a.to_string())
                    .chain(secure_jvm.iter().cloned())
                    .collect(),
            })
            .collect();
        let servers: String = if count > 1 {
            members
                .iter()
                .map(|m| format!("server.{}=127.0.0.1:{}:{}\n", m.myid, m.quorum, m.election))
                .collect()
        } else {
            String::new()
        };
        for m in &members {
            let data = dir.path().join(format!("data{}", m.myid));
            std::fs::create_dir_all(&data)?;
            std::fs::write(data.join("myid"), format!("{}\n", m.myid))?;
            std::fs::write(
                &m.config,
                format!(
                    "tickTime=500\n\
                     initLimit=20\n\
                     syncLimit=10\n\
                     dataDir={}\n\
                     clientPort={}\n\
                     clientPortAddress=127.0.0.1\n\
                     4lw.commands.whitelist=*\n\
                     admin.enableServer=true\n\
                     admin.serverAddress=127.0.0.1\n\
                     admin.serverPort={}\n\
                     maxClientCnxns=0\n\
                     autopurge.purgeInterval=0\n\
                     {servers}{secure_cfg}{secure_port}",
                    data.display(),
                    m.client,
                    m.admin,
                    secure_port = m
                        .secure
                        .map(|p| format!("secureClientPort={p}\n"))
                        .unwrap_or_default(),
                ),
            )?;
        }
        // From here on, a failure drops `ensemble`, which kills what was started.
        let ensemble = ZkEnsemble { members, dir };
        for m in &ensemble.members {
            spawn_member(m)?;
        }
        for i in 0..count {
            ensemble.wait_serving(i, SERVE_TIMEOUT).await?;
        }
        for i in 0..count {
            ensemble.wait_admin(i, Duration::from_secs(20)).await?;
        }
        Ok(ensemble)
    }

    /// `127.0.0.1:p1,127.0.0.1:p2,…`
    pub fn connect_string(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Client address of member `i` (also where its four-letter words answer).
    pub fn client_addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.members[i].client))
    }

    /// `127.0.0.1:<secureClientPort>` of each member of a [`Self::start_secure`] server.
    pub fn secure_connect_string(&self) -> String {
        self.members
            .iter()
            .filter_map(|m| m.secure)
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// AdminServer port of member `i` (`http://127.0.0.1:<port>/commands/...`).
    pub fn admin_port(&self, i: usize) -> u16 {
        self.members[i].admin
    }

    /// Number of members (running or killed).
    pub fn members(&self) -> usize {
        self.members.len()
    }

    /// PID of member `i`'s JVM, `None` when it is not running.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].process().as_ref().map(Child::id)
    }

    /// Where the members keep their configs, data and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Member `i`'s log file (its JVM's stdout and stderr).
    pub fn log_path(&self, i: usize) -> &Path {
        &self.members[i].log
    }

    /// Index of the current leader (or the standalone server), asking running members with
    /// `srvr`; waits up to 30 s for an election to finish.
    pub async fn leader(&self) -> Result<usize> {
        eventually(Duration::from_secs(30), "a leader elected", async || {
            for (i, m) in self.members.iter().enumerate() {
                if m.process().is_none() {
                    continue;
                }
                if let Ok(text) = four_letter(self.client_addr(i), "srvr").await {
                    if matches!(mode(&text), Some("leader" | "standalone")) {
                        return Ok(Some(i));
                    }
                }
            }
            Ok(None)
        })
        .await
    }

    /// SIGKILLs member `i`'s JVM by its PID and reaps it (no-op if it is not running).
    pub fn kill(&mut self, i: usize) {
        self.members[i].kill();
    }

    /// Starts member `i` again with its config and data (after [`Self::kill`]; a running member
    /// is killed first) and waits until it serves and its AdminServer answers.
    pub async fn restart(&mut self, i: usize) -> Result<()> {
        self.members[i].kill();
        spawn_member(&self.members[i])?;
        self.wait_serving(i, SERVE_TIMEOUT).await?;
        self.wait_admin(i, Duration::from_secs(20)).await
    }

    /// Starts every member that is not running (after the whole ensemble, or more than a quorum,
    /// was killed: restarting them one by one would wait for a quorum that cannot form), then
    /// waits until all serve and their AdminServers answer.
    pub async fn restart_all(&mut self) -> Result<()> {
        for m in &self.members {
            let started = m.process().is_some();
            if !started || m.exited().is_some() {
                spawn_member(m)?;
            }
        }
        for i in 0..self.members.len() {
            self.wait_serving(i, SERVE_TIMEOUT).await?;
        }
        for i in 0..self.members.len() {
            self.wait_admin(i, Duration::from_secs(20)).await?;
        }
        Ok(())
    }

    /// Waits until member `i` answers `srvr` with a serving mode (leader, follower, standalone).
    /// Fails at once, with the log tail, if its JVM exited.
    pub async fn wait_serving(&self, i: usize, timeout: Duration) -> Result<()> {
        let m = &self.members[i];
        eventually(timeout, "serving", async || {
            if let Ok(text) = four_letter(self.client_addr(i), "srvr").await {
                if matches!(mode(&text), Some("leader" | "follower" | "standalone")) {
                    return Ok(Some(()));
                }
            }
            if m.process().is_none() {
                bail!("not running");
            }
            if let Some(status) = m.exited() {
                bail!("JVM exited ({status})");
            }
            Ok(None)
        })
        .await
        .map_err(|e| m.failure(&format!("{e:#}")))
    }

    /// Waits until member `i`'s AdminServer answers `/commands/ruok`. A standalone server exits
    /// (code 4) when Jetty cannot bind, but a quorum peer only logs a warning and serves on
    /// without it (and without servlet-api.jar it never starts), so this is checked separately.
    async fn wait_admin(&self, i: usize, timeout: Duration) -> Result<()> {
        let m = &self.members[i];
        let url = format!("http://127.0.0.1:{}/commands/ruok", m.admin);
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(3))
            .no_proxy()
            .build()?;
        eventually(
            timeout,
            &format!("AdminServer answering {url}"),
            async || {
                if let Ok(resp) = http.get(&url).send().await {
                    if resp.status().is_success() {
                        // The AdminServer answering is this member's: its configuration names
                        // this member's client port.
                        let conf = format!("http://127.0.0.1:{}/commands/conf", m.admin);
                        let conf = match http.get(&conf).send().await {
                            Ok(resp) => resp.json::<serde_json::Value>().await.ok(),
                            Err(_) => None,
                        };
                        let Some(conf) = conf else {
                            return Ok(None);
                        };
                        if let Some(port) = conf["client_port"].as_u64() {
                            ensure!(
                                port == u64::from(m.client),
                                "the AdminServer on port {} is another server's (client port {port})",
                                m.admin
                            );
                        }
                        return Ok(Some(()));
                    }
                }
                if let Some(status) = m.exited() {
                    bail!("JVM exited ({status})");
                }
                Ok(None)
            },
        )
        .await
        .map_err(|e| m.failure(&format!("{e:#}")))
    }
}

/// `:`-prefixed Debian's unversioned Netty jars (`/usr/share/java/netty-*.jar`): the Netty
/// connection factory needs its codec and handler classes, which `zookeeper.jar`'s manifest
/// does not name.
fn netty_classpath() -> String {
    let mut jars: Vec<String> = std::fs::read_dir("/usr/share/java")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("netty-") && n.ends_with(".jar") && !n.contains("-4."))
        .collect();
    jars.sort();
    jars.iter()
        .map(|j| format!(":/usr/share/java/{j}"))
        .collect()
}

fn spawn_member(m: &Member) -> Result<()> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&m.log)?;
    // The heap a member may use: 256 MB holds this project's tests and the 110k-node bench;
    // `LOCKSCOPE_ZK_HEAP` (e.g. `2g`) raises it for a million nodes.
    let heap = std::env::var("LOCKSCOPE_ZK_HEAP").unwrap_or_else(|_| "256m".into());
    let child = Command::new("java")
        .arg(format!("-Xmx{heap}"))
        .args([
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Xshare:auto",
            "-Dzookeeper.admin.enableServer=true",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
        ])
        .args(&m.jvm_args)
        .arg("-cp")
        .arg(format!("{CLASSPATH}{}", m.extra_classpath))
        .arg("org.apache.zookeeper.server.quorum.QuorumPeerMain")
        .arg(&m.config)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("start java (ZooKeeper): are the zookeeper and JDK packages installed?")?;
    *m.process() = Some(child);
    Ok(())
}

impl Drop for ZkEnsemble {
    fn drop(&mut self) {
        for m in &self.members {
            m.kill();
        }
    }
}

/// Locks by path: holder nodes and waiter nodes, as a fresh decode or lockscope shows them.
pub type LockNodes = std::collections::BTreeMap<String, (Vec<String>, Vec<String>)>;

/// Reads the tree under `root` afresh with a new client and decodes it: what lockscope's model
/// must equal (locks with nobody holding or waiting left out).
pub async fn fresh_locks(connect: &str, root: &str) -> Result<LockNodes> {
    let client = zookeeper_client::Client::connector()
        .with_session_timeout(Duration::from_secs(5))
        .connect(connect)
        .await?;
    let (nodes, _) =
        lockscope::backends::zookeeper::collect::read_tree(&client, &[root.to_string()]).await?;
    let mut tree = lockscope_model::zk::ZkTree::new();
    for (path, meta) in &nodes {
        tree.upsert(path, meta.clone());
    }
    let mut out = LockNodes::new();
    for (path, _) in &nodes {
        for lock in lockscope_model::zk::decode_container(&tree, path, &|_: &str| None) {
            if lock.holders.is_empty() && lock.waiters.is_empty() {
                continue;
            }
            out.insert(
                lock.path,
                (
                    lock.holders.into_iter().map(|p| p.node).collect(),
                    lock.waiters.into_iter().map(|p| p.node).collect(),
                ),
            );
        }
    }
    Ok(out)
}

/// The locks lockscope shows with somebody holding or waiting, in the same shape.
pub async fn shown_locks(ls: &crate::harness::Lockscope) -> Result<LockNodes> {
    Ok(ls
        .locks()
        .await?
        .into_iter()
        .filter(|l| !l.holders.is_empty() || !l.waiters.is_empty())
        .map(|l| {
            (
                l.path,
                (
                    l.holders.into_iter().map(|h| h.node).collect(),
                    l.waiters.into_iter().map(|w| w.node).collect(),
                ),
            )
        })
        .collect())
}
