//! What can fail when lockscope talks to a database: connecting (which authenticates), a query
//! of a round (the server's own error, e.g. a missing privilege or the statement timeout), and
//! a round that took longer than it may.
//!
//! A query the server refuses is a *problem* of one round (the rest of the round is applied and
//! the source shows the error); anything else (the connection broke, a protocol error, a round
//! that hung) drops the connection and reconnects with the usual backoff. The URL is shown with
//! its password redacted.

use super::config::TlsMode;

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// Connecting failed; `hint` says what it was checked against when TLS is involved (the
    /// mode and the CA file) or what the server wants.
    #[error("connect to {url}: {source}{hint}")]
    Connect {
        url: String,
        #[source]
        source: sqlx::Error,
        hint: String,
    },
    #[error("connect to {url}: no answer within {secs} s")]
    ConnectTimeout { url: String, secs: f64 },
    /// The server answered nothing (a query, a ping) for the source's silence limit.
    #[error("no answer from {server} for {}", lockscope_core::collect::seconds(*limit))]
    Silent {
        server: String,
        limit: std::time::Duration,
    },
    /// A query failed without a server error: the connection is not usable.
    #[error("{what}: {source}")]
    Connection {
        what: &'static str,
        #[source]
        source: sqlx::Error,
    },
    /// A round did not finish in time (the server did not cancel a query as asked).
    #[error("a poll round took longer than {secs} s; reconnecting")]
    RoundTimeout { secs: u64 },
}

/// A connect error of `config`'s source, with the URL redacted and a hint when the failure is
/// about TLS: a certificate the CA does not vouch for, an expired one, a refused handshake
/// (named with the mode and the CA file), or a server that takes TLS connections only while
/// lockscope connected in plain text.
pub fn connect_error(config: &super::config::DbSourceConfig, source: sqlx::Error) -> DbError {
    let text = source.to_string().to_lowercase();
    let tls_failure = matches!(source, sqlx::Error::Tls(_))
        || ["certificate", "handshake", "tls", "ssl"]
            .iter()
            .any(|word| text.contains(word));
    // PostgreSQL: `no pg_hba.conf entry for host …, no encryption`; MariaDB:
    // `Connections using insecure transport are prohibited while --require_secure_transport=ON`.
    let plain_refused = text.contains("no encryption") || text.contains("insecure transport");
    let plain = matches!(config.effective_tls_mode(), None | Some(TlsMode::Disable));
    let hint = if plain_refused && plain {
        " (the server takes TLS connections only: set tls_ca_file to verify it, or tls_mode = \"require\")"
            .to_string()
    } else if config.effective_tls_mode() == Some(TlsMode::Disable)
        && text.contains("access denied")
        && config.url.starts_with("m")
    {
        // MariaDB refuses a plain-text login to a server with require_secure_transport=ON as
        // it refuses a wrong password (seen on 10.11: 1045 either way).
        " (tls_mode = \"disable\": MariaDB answers a plain-text login to a server with require_secure_transport=ON with this same error; set tls_ca_file)".to_string()
    } else if config.url.starts_with("m")
        && text.contains("access denied")
        && config.tls_cert_file.is_none()
    {
        // MariaDB refuses a user created `REQUIRE X509` (or SUBJECT / ISSUER) that sent no
        // client certificate as it refuses a wrong password.
        " (if the user is created REQUIRE X509, SUBJECT or ISSUER, MariaDB refuses a login without a client certificate with this same error: tls_cert_file and tls_key_file)".to_string()
    } else if plain_refused || tls_failure {
        format!(" ({})", config.tls_context())
    } else {
        String::new()
    };
    DbError::Connect {
        url: lockscope_core::collect::redact_url(&config.url),
        source,
        hint,
    }
}

/// How a failed query of a round is handled.
pub enum QueryFailure {
    /// The server refused or cancelled it: a problem of this round, text for the source.
    Refused(String),
    /// The connection is not usable.
    Broken(DbError),
}

/// Sorts a query's error: the server's own errors are problems of the round (with a hint
/// for a missing privilege or a timeout), the rest breaks the connection.
pub fn classify(what: &'static str, error: sqlx::Error) -> QueryFailure {
    match &error {
        sqlx::Error::Database(db) => {
            let code = db.code().map(|c| c.to_string()).unwrap_or_default();
            let hint = match code.as_str() {
                // MariaDB: ER_SPECIFIC_ACCESS_DENIED_ERROR, ER_TABLEACCESS_DENIED_ERROR, …
                "42000" if db.message().contains("PROCESS") => {
                    " (lockscope's user needs the PROCESS privilege: GRANT PROCESS ON *.* TO …)"
                }
                // PostgreSQL: insufficient_privilege.
                "42501" => " (lockscope's user lacks a privilege on it)",
                // MariaDB ER_STATEMENT_TIMEOUT (max_statement_time), PostgreSQL query_canceled.
                "70100" | "57014" => " (it ran longer than statement_timeout)",
                _ => "",
            };
            QueryFailure::Refused(format!("{what}: {}{hint}", db.message()))
        }
        _ => QueryFailure::Broken(DbError::Connection {
            what,
            source: error,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::{DbSourceConfig, TlsMode};
    use super::connect_error;

    #[test]
    fn tls_failures_name_the_mode_and_the_ca_file() {
        let mut c = DbSourceConfig::new("db", "postgres://u:secret@127.0.0.1:5432/app");
        c.tls_ca_file = Some("/etc/db/ca.pem".into());
        let e = connect_error(
            &c,
            sqlx::Error::Tls("invalid peer certificate: UnknownIssuer".into()),
        );
        let text = e.to_string();
        assert!(
            text.ends_with("(TLS verify-full: the server's certificate is checked against tls_ca_file /etc/db/ca.pem)"),
            "{text}"
        );
        assert!(!text.contains("secret"), "{text}");
        c.tls_ca_file = None;
        c.tls_mode = Some(TlsMode::Disable);
        let refused = sqlx::Error::Protocol("no pg_hba.conf entry for host, no encryption".into());
        assert!(connect_error(&c, refused)
            .to_string()
            .contains("TLS connections only"));
        let other = sqlx::Error::Protocol("connection refused".into());
        assert!(connect_error(&c, other)
            .to_string()
            .ends_with("connection refused"));
    }
}
