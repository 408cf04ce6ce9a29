//! Real ZooKeeper ensembles (Debian's `zookeeper` 3.8) on free loopback ports.
//!
//! Each member is a `QuorumPeerMain` JVM with four-letter words enabled and the AdminServer on
//! (it needs `servlet-api.jar` on the class path, or it silently does not start). `tickTime` is
//! 500 ms, so sessions may time out between 1 s and 10 s. Members are killed by PID on drop.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::ports::free_port;

const CLASSPATH: &str = "/usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/servlet-api.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-simple.jar";

struct Member {
    myid: usize,
    client: u16,
    quorum: u16,
    election: u16,
    admin: u16,
    config: PathBuf,
    log: PathBuf,
    process: Option<Child>,
}

/// A running ensemble.
pub struct ZkEnsemble {
    dir: tempfile::TempDir,
    members: Vec<Member>,
}

/// Sends a four-letter word and reads the answer to EOF.
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
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

impl ZkEnsemble {
    /// Starts `members` servers (1 = standalone) and waits until every one serves.
    pub async fn start(members: usize) -> Result<ZkEnsemble> {
        let mut last_error = None;
        // A port taken by another process between picking and binding makes a member fail:
        // start again on new ports.
        for _ in 0..3 {
            match Self::try_start(members).await {
                Ok(ensemble) => return Ok(ensemble),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow!("ZooKeeper did not start")))
    }

    async fn try_start(count: usize) -> Result<ZkEnsemble> {
        let dir = tempfile::Builder::new().prefix("lockscope-zk-").tempdir()?;
        let mut members: Vec<Member> = (1..=count)
            .map(|myid| Member {
                myid,
                client: free_port(),
                quorum: free_port(),
                election: free_port(),
                admin: free_port(),
                config: dir.path().join(format!("zoo{myid}.cfg")),
                log: dir.path().join(format!("zk{myid}.log")),
                process: None,
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
                    "tickTime=500\ninitLimit=20\nsyncLimit=10\ndataDir={}\nclientPort={}\nclientPortAddress=127.0.0.1\n\
                     4lw.commands.whitelist=*\nadmin.enableServer=true\nadmin.serverAddress=127.0.0.1\nadmin.serverPort={}\n\
                     maxClientCnxns=0\nautopurge.purgeInterval=0\n{servers}",
                    data.display(),
                    m.client,
                    m.admin
                ),
            )?;
        }
        let mut ensemble = ZkEnsemble {
            dir,
            members: Vec::new(),
        };
        for m in &mut members {
            spawn_member(m)?;
        }
        ensemble.members = members;
        for i in 0..count {
            ensemble.wait_serving(i, Duration::from_secs(60)).await?;
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

    pub fn client_addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.members[i].client))
    }

    pub fn admin_port(&self, i: usize) -> u16 {
        self.members[i].admin
    }

    pub fn members(&self) -> usize {
        self.members.len()
    }

    /// Where the members keep their configs, data and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Index of the current leader (or the standalone server).
    pub async fn leader(&self) -> Result<usize> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            for i in 0..self.members.len() {
                if self.members[i].process.is_none() {
                    continue;
                }
                if let Ok(text) = four_letter(self.client_addr(i), "srvr").await {
                    if text.contains("Mode: leader") || text.contains("Mode: standalone") {
                        return Ok(i);
                    }
                }
            }
            if Instant::now() > deadline {
                bail!("no leader elected");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGKILLs member `i` and reaps it.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `i` again with its config and data, and waits until it serves.
    pub async fn restart(&mut self, i: usize) -> Result<()> {
        self.kill(i);
        spawn_member(&mut self.members[i])?;
        self.wait_serving(i, Duration::from_secs(60)).await
    }

    /// Waits until member `i` answers `srvr` with a serving mode.
    pub async fn wait_serving(&self, i: usize, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        let m = &self.members[i];
        loop {
            if let Ok(text) = four_letter(self.client_addr(i), "srvr").await {
                if ["Mode: leader", "Mode: follower", "Mode: standalone"]
                    .iter()
                    .any(|mode| text.contains(mode))
                {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "ZooKeeper member {} (client port {}) not serving after {timeout:?}; log tail:\n{}",
                    m.myid,
                    m.client,
                    tail(&m.log)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn spawn_member(m: &mut Member) -> Result<()> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&m.log)?;
    let child = Command::new("java")
        .args([
            "-Xmx192m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Dzookeeper.admin.enableServer=true",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            CLASSPATH,
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
        ])
        .arg(&m.config)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context(
            "start java (ZooKeeper): is the zookeeper package installed? run scripts/install-deps",
        )?;
    m.process = Some(child);
    Ok(())
}

impl Drop for ZkEnsemble {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
