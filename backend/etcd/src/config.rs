//! The `[[etcd]]` config section: its keys, defaults and validation (every problem listed).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// One etcd cluster and the key prefixes its locks live under.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EtcdSourceConfig {
    pub name: String,
    /// Client endpoints, `host:port` or `http(s)://host:port`.
    pub endpoints: Vec<String>,
    /// Key prefixes to watch, e.g. `["/locks"]`.
    pub prefixes: Vec<String>,
    /// etcd authentication (the password from here or from `password_env`; never logged).
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub password: Option<String>,
    #[serde(default)]
    pub password_env: Option<String>,
    /// TLS: the CA that signed the servers' certificates, and a client certificate and key.
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
    #[serde(default)]
    pub tls_cert_file: Option<PathBuf>,
    #[serde(default)]
    pub tls_key_file: Option<PathBuf>,
    /// How often the TTL left of the leases that locks are bound to is read.
    #[serde(default = "default_lease_poll", with = "humantime_serde")]
    pub lease_poll_interval: Duration,
    /// How long the source may stay silent (no answer to a heartbeat or a request, no
    /// keepalive acknowledgement) before it is shown not up, its locks marked as last seen.
    #[serde(
        default = "lockscope_core::collect::default_silence_limit",
        with = "humantime_serde"
    )]
    pub silence_limit: Duration,
}

fn default_lease_poll() -> Duration {
    Duration::from_secs(1)
}

impl fmt::Debug for EtcdSourceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdSourceConfig")
            .field("name", &self.name)
            .field("endpoints", &self.endpoints)
            .field("prefixes", &self.prefixes)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("password_env", &self.password_env)
            .field("tls_ca_file", &self.tls_ca_file)
            .field("tls_cert_file", &self.tls_cert_file)
            .field("lease_poll_interval", &self.lease_poll_interval)
            .field("silence_limit", &self.silence_limit)
            .finish_non_exhaustive()
    }
}

impl EtcdSourceConfig {
    /// The keys an `[[etcd]]` table accepts.
    pub const KEYS: &'static [&'static str] = &[
        "name",
        "endpoints",
        "prefixes",
        "user",
        "password",
        "password_env",
        "tls_ca_file",
        "tls_cert_file",
        "tls_key_file",
        "lease_poll_interval",
        "silence_limit",
    ];

    /// A source with defaults for everything optional.
    pub fn new(name: &str, endpoints: &[String], prefixes: &[&str]) -> Self {
        EtcdSourceConfig {
            name: name.to_string(),
            endpoints: endpoints.to_vec(),
            prefixes: prefixes.iter().map(|p| p.to_string()).collect(),
            user: None,
            password: None,
            password_env: None,
            tls_ca_file: None,
            tls_cert_file: None,
            tls_key_file: None,
            lease_poll_interval: default_lease_poll(),
            silence_limit: lockscope_core::collect::DEFAULT_SILENCE_LIMIT,
        }
    }

    /// The password: from the file, else from the named environment variable.
    pub fn password(&self) -> Option<String> {
        self.password.clone().or_else(|| {
            self.password_env
                .as_ref()
                .and_then(|var| std::env::var(var).ok())
        })
    }

    /// Every problem with this section (`at` names it, e.g. `etcd[0]`).
    pub fn validate(&self, at: &str) -> Vec<String> {
        let mut problems = Vec::new();
        if self.endpoints.is_empty() {
            problems.push(format!("{at}.endpoints is empty"));
        }
        for endpoint in &self.endpoints {
            let bare = endpoint
                .strip_prefix("http://")
                .or_else(|| endpoint.strip_prefix("https://"))
                .unwrap_or(endpoint);
            let ok = bare
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !ok {
                problems.push(format!(
                    "{at}.endpoints: {endpoint:?} is not host:port (or http(s)://host:port)"
                ));
            }
        }
        if self.prefixes.is_empty() {
            problems.push(format!("{at}.prefixes is empty"));
        }
        if self.prefixes.iter().any(String::is_empty) {
            problems.push(format!(
                "{at}.prefixes: an empty prefix would watch the whole keyspace; name one"
            ));
        }
        problems.extend(lockscope_core::collect::credential_problems(
            at,
            "",
            self.user.is_some(),
            self.password.is_some(),
            self.password_env.as_deref(),
        ));
        problems.extend(lockscope_core::tls_files::check(
            at,
            self.tls_ca_file.as_deref(),
            self.tls_cert_file.as_deref(),
            self.tls_key_file.as_deref(),
        ));
        if self.lease_poll_interval < Duration::from_millis(100) {
            problems.push(format!("{at}.lease_poll_interval must be at least 100ms"));
        }
        problems.extend(lockscope_core::collect::silence_problems(
            at,
            self.silence_limit,
        ));
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_is_listed() {
        let mut config = EtcdSourceConfig::new("e", &["nohost".to_string()], &[""]);
        config.user = Some("root".into());
        config.tls_ca_file = Some("/nonexistent/ca.pem".into());
        config.lease_poll_interval = Duration::from_millis(1);
        let problems = config.validate("etcd[0]");
        assert_eq!(problems.len(), 5, "{problems:#?}");
        let ok = EtcdSourceConfig::new("e", &["127.0.0.1:2379".to_string()], &["/locks"]);
        assert!(ok.validate("etcd[0]").is_empty());
    }

    #[test]
    fn the_password_is_never_printed() {
        let mut config = EtcdSourceConfig::new("e", &["127.0.0.1:2379".to_string()], &["/l"]);
        config.user = Some("root".into());
        config.password = Some("hunter2".into());
        assert!(!format!("{config:?}").contains("hunter2"));
    }
}
