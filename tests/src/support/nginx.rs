//! A real nginx (Debian's `nginx-light`) in front of lockscope, as a deployment puts it: a plain
//! process with its own configuration, prefix, pid file, logs and temporary folders in a
//! temporary directory, listening on a free loopback port; stopped by its PID on drop.
//!
//! Its `server` block includes `deploy/nginx-lockscope.conf` (what README's "Deploying" shows)
//! with the upstream address replaced by the test's lockscope.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{anyhow, Context, Result};

use super::ports::free_port;
use crate::harness::eventually;

pub const BINARY: &str = "/usr/sbin/nginx";

/// The location block README shows, from the repository.
pub fn snippet_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/nginx-lockscope.conf")
}

pub struct Nginx {
    pub port: u16,
    process: Option<Child>,
    dir: tempfile::TempDir,
}

impl Nginx {
    /// Starts nginx proxying `/lockscope/` to `upstream` (`host:port`) with the repository's
    /// snippet; waits until it answers.
    pub async fn start(upstream: &str) -> Result<Nginx> {
        let snippet = std::fs::read_to_string(snippet_path()).context("read the nginx snippet")?;
        let snippet = snippet.replace("127.0.0.1:7070", upstream);
        let dir = tempfile::Builder::new()
            .prefix("lockscope-nginx-")
            .tempdir()?;
        let d = dir.path();
        std::fs::create_dir_all(d.join("tmp"))?;
        std::fs::write(d.join("lockscope.conf"), snippet)?;
        let port = free_port();
        let temp = |name: &str| {
            format!(
                "{}_temp_path {};\n",
                name,
                d.join("tmp").join(name).display()
            )
        };
        let config = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {pid};\nerror_log {log} info;\n\
             events {{ worker_connections 256; }}\n\
             http {{\n  access_log {access};\n  {body}  {proxy}  {fastcgi}  {uwsgi}  {scgi}\
               server {{\n    listen 127.0.0.1:{port};\n    include {snippet};\n  }}\n}}\n",
            pid = d.join("nginx.pid").display(),
            log = d.join("error.log").display(),
            access = d.join("access.log").display(),
            body = temp("client_body"),
            proxy = temp("proxy"),
            fastcgi = temp("fastcgi"),
            uwsgi = temp("uwsgi"),
            scgi = temp("scgi"),
            snippet = d.join("lockscope.conf").display(),
        );
        std::fs::write(d.join("nginx.conf"), config)?;
        let process = Command::new(BINARY)
            .arg("-p")
            .arg(d)
            .arg("-e")
            .arg(d.join("error.log"))
            .arg("-c")
            .arg(d.join("nginx.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {BINARY} (scripts/install-deps installs it)"))?;
        let mut nginx = Nginx {
            port,
            process: Some(process),
            dir,
        };
        let addr = format!("127.0.0.1:{port}");
        eventually(Duration::from_secs(20), "nginx listening", async || {
            if let Some(child) = nginx.process.as_mut() {
                if let Some(status) = child.try_wait()? {
                    return Err(anyhow!("nginx exited ({status}): {}", nginx.log()));
                }
            }
            Ok(tokio::net::TcpStream::connect(&addr).await.ok().map(|_| ()))
        })
        .await?;
        Ok(nginx)
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// nginx's error log (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.stop();
    }
}
