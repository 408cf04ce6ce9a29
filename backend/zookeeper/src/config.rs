//! The `[[zookeeper]]` config section: what it accepts and its own checks (every problem
//! reported, not the first).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZkSourceConfig {
    /// Source name: appears in lock ids, the API and metric labels.
    pub name: String,
    /// `host:port,host:port,…` (an optional `/chroot` suffix is not supported).
    pub connect: String,
    /// Subtrees to watch.
    pub roots: Vec<String>,
    /// Session timeout lockscope asks for.
    #[serde(default = "default_session_timeout", with = "humantime_serde")]
    pub session_timeout: Duration,
    /// How often every member is asked for watches and sessions (`wchp`, `wchs`, `cons`, `mntr`).
    #[serde(default = "default_poll_interval", with = "humantime_serde")]
    pub poll_interval: Duration,
    /// Curator semaphore sizes: lock path → max leases (default 1, a semaphore-mutex).
    #[serde(default)]
    pub max_leases: BTreeMap<String, u32>,
    /// Digest credentials `user:password` for ACL-protected lock trees.
    #[serde(default)]
    pub digest: Option<String>,
    /// Name of an environment variable holding the digest credentials instead.
    #[serde(default)]
    pub digest_env: Option<String>,
    /// TLS (every member on its `secureClientPort`): the CA that signed the members'
    /// certificates, and a client certificate and key for members with `ssl.clientAuth=need`.
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
    #[serde(default)]
    pub tls_cert_file: Option<PathBuf>,
    #[serde(default)]
    pub tls_key_file: Option<PathBuf>,
    /// SASL DIGEST-MD5 user (a `user_<name>` of the ensemble's JAAS `Server` section); the
    /// password from `sasl_password` or the environment variable `sasl_password_env` names.
    #[serde(default)]
    pub sasl_user: Option<String>,
    #[serde(default)]
    pub sasl_password: Option<String>,
    #[serde(default)]
    pub sasl_password_env: Option<String>,
    /// How long the source may stay silent (no answer to a heartbeat or a request, no
    /// keepalive acknowledgement) before it is shown not up, its locks marked as last seen.
    #[serde(
        default = "lockscope_core::collect::default_silence_limit",
        with = "humantime_serde"
    )]
    pub silence_limit: Duration,
}

impl fmt::Debug for ZkSourceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkSourceConfig")
            .field("name", &self.name)
            .field("connect", &self.connect)
            .field("roots", &self.roots)
            .field("session_timeout", &self.session_timeout)
            .field("poll_interval", &self.poll_interval)
            .field("max_leases", &self.max_leases)
            .field("digest", &self.digest.as_ref().map(|_| "<redacted>"))
            .field("digest_env", &self.digest_env)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("tls_cert_file", &self.tls_cert_file)
            .field("tls_key_file", &self.tls_key_file)
            .field("sasl_user", &self.sasl_user)
            .field(
                "sasl_password",
                &self.sasl_password.as_ref().map(|_| "<redacted>"),
            )
            .field("sasl_password_env", &self.sasl_password_env)
            .field("silence_limit", &self.silence_limit)
            .finish()
    }
}

impl ZkSourceConfig {
    /// A source with defaults for everything optional.
    pub fn new(name: &str, connect: &str, roots: &[&str]) -> Self {
        Self {
            name: name.to_string(),
            connect: connect.to_string(),
            roots: roots.iter().map(|r| r.to_string()).collect(),
            session_timeout: default_session_timeout(),
            poll_interval: default_poll_interval(),
            max_leases: BTreeMap::new(),
            digest: None,
            digest_env: None,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            sasl_user: None,
            sasl_password: None,
            sasl_password_env: None,
            silence_limit: lockscope_core::collect::DEFAULT_SILENCE_LIMIT,
        }
    }

    /// The ensemble members named in `connect`.
    pub fn members(&self) -> Vec<String> {
        self.connect
            .split(',')
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// Digest credentials from the file or the named environment variable.
    pub fn digest_credentials(&self) -> Option<String> {
        if let Some(var) = &self.digest_env {
            if let Ok(value) = std::env::var(var) {
                return Some(value);
            }
        }
        self.digest.clone()
    }

    /// The SASL password: from the file, else from the named environment variable.
    pub fn sasl_password(&self) -> Option<String> {
        self.sasl_password.clone().or_else(|| {
            self.sasl_password_env
                .as_ref()
                .and_then(|var| std::env::var(var).ok())
        })
    }

    /// The TLS options the source's files make, `None` without `tls_ca_file` (plain TCP).
    /// Every problem names the key and the file.
    pub fn tls_options(&self) -> Result<Option<zookeeper_client::TlsOptions>, String> {
        let Some(ca_file) = &self.tls_ca_file else {
            return Ok(None);
        };
        let ca = read_pem("tls_ca_file", ca_file)?;
        let mut options = zookeeper_client::TlsOptions::new()
            .with_pem_ca(&ca)
            .map_err(|e| format!("tls_ca_file {}: {e}", ca_file.display()))?;
        if let (Some(cert_file), Some(key_file)) = (&self.tls_cert_file, &self.tls_key_file) {
            let cert = read_pem("tls_cert_file", cert_file)?;
            let key = read_pem("tls_key_file", key_file)?;
            options = options.with_pem_identity(&cert, &key).map_err(|e| {
                format!(
                    "tls_cert_file {} / tls_key_file {}: {e}",
                    cert_file.display(),
                    key_file.display()
                )
            })?;
        }
        Ok(Some(options))
    }
}

/// A PEM file's text; a problem names the key and the file.
fn read_pem(key: &str, path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{key} {}: {e}", path.display()))
}

impl ZkSourceConfig {
    /// The keys a `[[zookeeper]]` table accepts.
    pub const KEYS: &'static [&'static str] = &[
        "name",
        "connect",
        "roots",
        "session_timeout",
        "poll_interval",
        "max_leases",
        "digest",
        "digest_env",
        "tls_ca_file",
        "tls_cert_file",
        "tls_key_file",
        "sasl_user",
        "sasl_password",
        "sasl_password_env",
        "silence_limit",
    ];

    /// Every problem with this `[[zookeeper]]` table (`at` names it); the name is checked with
    /// every other source's.
    pub fn validate(&self, at: &str) -> Vec<String> {
        let mut problems = Vec::new();
        let members = self.members();
        if members.is_empty() {
            problems.push(format!("{at}.connect is empty"));
        }
        for member in &members {
            if member.contains('/') {
                problems.push(format!(
                        "{at}.connect: chroot suffixes are not supported ({member:?}); watch a root instead"
                    ));
            } else if !valid_host_port(member) {
                problems.push(format!("{at}.connect: {member:?} is not host:port"));
            }
        }
        if self.roots.is_empty() {
            problems.push(format!("{at}.roots is empty"));
        }
        for root in &self.roots {
            if !valid_zk_path(root) {
                problems.push(format!(
                    "{at}.roots: {root:?} is not an absolute ZooKeeper path"
                ));
            }
        }
        for (path, leases) in &self.max_leases {
            if !valid_zk_path(path) {
                problems.push(format!(
                    "{at}.max_leases: {path:?} is not an absolute ZooKeeper path"
                ));
            }
            if *leases == 0 {
                problems.push(format!("{at}.max_leases: {path:?} must be at least 1"));
            }
        }
        if self.session_timeout < Duration::from_millis(500) {
            problems.push(format!("{at}.session_timeout must be at least 500ms"));
        }
        if self.poll_interval < Duration::from_millis(100) {
            problems.push(format!("{at}.poll_interval must be at least 100ms"));
        }
        problems.extend(lockscope_core::collect::silence_problems(
            at,
            self.silence_limit,
        ));
        if let Some(var) = &self.digest_env {
            if std::env::var(var).is_err() && self.digest.is_none() {
                problems.push(format!(
                    "{at}.digest_env: environment variable {var} is not set"
                ));
            }
        }
        if let Some(digest) = self.digest_credentials() {
            if !digest.contains(':') {
                problems.push(format!("{at}: digest credentials must be user:password"));
            }
        }
        problems.extend(lockscope_core::collect::credential_problems(
            at,
            "sasl_",
            self.sasl_user.is_some(),
            self.sasl_password.is_some(),
            self.sasl_password_env.as_deref(),
        ));
        problems.extend(lockscope_core::tls_files::check(
            at,
            self.tls_ca_file.as_deref(),
            self.tls_cert_file.as_deref(),
            self.tls_key_file.as_deref(),
        ));
        if self.tls_ca_file.is_none() && self.tls_cert_file.is_some() {
            problems.push(format!(
                "{at}: tls_cert_file needs tls_ca_file (TLS to ZooKeeper verifies the members)"
            ));
        }

        problems
    }
}

fn default_session_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_poll_interval() -> Duration {
    Duration::from_secs(2)
}

fn valid_host_port(member: &str) -> bool {
    match member.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0),
        None => false,
    }
}

fn valid_zk_path(path: &str) -> bool {
    path.starts_with('/')
        && (path == "/" || !path.ends_with('/'))
        && !path.contains("//")
        && !path.contains('\0')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sasl_password_is_never_printed_and_needs_its_user() {
        let mut config = ZkSourceConfig::new("z", "127.0.0.1:2281", &["/locks"]);
        config.sasl_password = Some("hunter2".into());
        assert!(!format!("{config:?}").contains("hunter2"));
        let problems = config.validate("zookeeper[0]");
        assert!(
            problems.iter().any(|p| p.contains("needs a sasl_user")),
            "{problems:#?}"
        );
        config.sasl_user = Some("lockscope".into());
        config.sasl_password = None;
        config.tls_cert_file = Some("/nonexistent/client.pem".into());
        let problems = config.validate("zookeeper[0]");
        // The user without a password, the unreadable certificate, the certificate without its
        // key, and the certificate without a CA: every one listed.
        assert_eq!(problems.len(), 4, "{problems:#?}");
    }
}
