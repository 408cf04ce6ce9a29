//! What can fail when lockscope talks to a Redis server: building a client (URL, TLS),
//! connecting and authenticating, a named command or script, the pub/sub connection that
//! carries keyspace notifications, the reconcile scan's task, and Cluster discovery.
//!
//! Errors stay typed inside the backend; they become text only where they are shown (a
//! member's `error` in the API and UI, a failed release's text, log lines). Each message names
//! what failed and keeps redis-rs's own text. The server's address is not part of these
//! errors: whoever shows one puts the member's URL in front, through `redact_url`, so no
//! password is ever shown.

use std::borrow::Cow;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum RedisError {
    /// The CA file configured for TLS could not be read.
    #[error("read {path}: {source}", path = .path.display())]
    TlsCa {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A TLS client could not be built from the URL and the CA.
    #[error("TLS: {0}")]
    Tls(#[source] redis::RedisError),
    /// The URL does not make a client.
    #[error("URL: {0}")]
    Url(#[source] redis::RedisError),
    /// The server refused the credentials.
    #[error("authenticate: {0}")]
    Auth(#[source] redis::RedisError),
    /// No connection could be made (refused, timed out, TLS handshake).
    #[error("connect: {0}")]
    Connect(#[source] redis::RedisError),
    /// A command failed; `command` is how it was sent (`SCAN`, `CONFIG GET …`).
    #[error("{command}: {source}")]
    Command {
        command: Cow<'static, str>,
        #[source]
        source: redis::RedisError,
    },
    /// One of lockscope's Lua scripts (`read`, `release`) failed.
    #[error("{script} script: {source}")]
    Script {
        script: &'static str,
        #[source]
        source: redis::RedisError,
    },
    /// No answer within the bound lockscope sets (a force release's connect or script): a
    /// script that timed out may still have run.
    #[error("{what} timed out after {after:?}")]
    Timeout {
        what: &'static str,
        after: std::time::Duration,
    },
    /// A pipelined read came back without an answer for its key.
    #[error("no answer to a read")]
    NoAnswer,
    /// lockscope's ACL user may not run these commands (named, space-separated) on keys like
    /// `key`, which a script of lockscope's needs: Redis names no command refused inside a
    /// script, so lockscope asks first (`redis.acl_check_cmd`).
    #[error("NOPERM the ACL user may not run {commands} on keys matching {key:?} ({needed_by} needs them; see README's ACL)")]
    Denied {
        commands: String,
        key: String,
        needed_by: &'static str,
    },
    /// The pub/sub connection for keyspace notifications could not be opened.
    #[error("pub/sub connection: {0}")]
    PubSub(#[source] redis::RedisError),
    /// A connection answered nothing — not a `PING`, not a command — for the source's
    /// `silence_limit`: a path that went silent (no FIN, no RST), or a server that hangs.
    #[error("no answer for {} on the {connection} connection", lockscope_core::collect::seconds(*limit))]
    Silent {
        connection: &'static str,
        limit: std::time::Duration,
    },
    /// The pub/sub connection closed: notifications would be missed from now on.
    #[error("pub/sub connection lost")]
    PubSubLost,
    /// The task running a reconcile scan failed (panicked or was cancelled).
    #[error("reconcile scan: {0}")]
    ScanTask(#[source] tokio::task::JoinError),
    /// `CLUSTER NODES` named no master that is up.
    #[error("no masters")]
    NoMasters,
    /// No seed of a Cluster told its masters: why, seed by seed (each shown through
    /// `redact_url`).
    #[error("{}", seeds(.0))]
    Discovery(Vec<(String, RedisError)>),
}

impl RedisError {
    /// An error of `command` (as sent, e.g. `CONFIG GET notify-keyspace-events`), for `map_err`;
    /// a fixed name costs no allocation on the way of a command that succeeds.
    pub fn command(
        command: impl Into<Cow<'static, str>>,
    ) -> impl FnOnce(redis::RedisError) -> RedisError {
        let command = command.into();
        move |source| RedisError::Command { command, source }
    }

    /// A connect error, told apart when the server refused the credentials.
    pub fn connect(source: redis::RedisError) -> RedisError {
        if source.kind() == redis::ErrorKind::AuthenticationFailed {
            RedisError::Auth(source)
        } else {
            RedisError::Connect(source)
        }
    }

    /// The error redis-rs reported, if this is one.
    pub fn redis(&self) -> Option<&redis::RedisError> {
        match self {
            RedisError::Tls(e)
            | RedisError::Url(e)
            | RedisError::Auth(e)
            | RedisError::Connect(e)
            | RedisError::PubSub(e)
            | RedisError::Command { source: e, .. }
            | RedisError::Script { source: e, .. } => Some(e),
            RedisError::TlsCa { .. }
            | RedisError::Timeout { .. }
            | RedisError::Silent { .. }
            | RedisError::Denied { .. }
            | RedisError::NoAnswer
            | RedisError::PubSubLost
            | RedisError::ScanTask(_)
            | RedisError::NoMasters
            | RedisError::Discovery(_) => None,
        }
    }

    /// Whether the server answered with the error `code` (`MOVED`, `CROSSSLOT`, `NOAUTH`): the
    /// command's own error, or that of any command in a pipeline or transaction (a `MULTI` whose
    /// commands were refused fails as `EXECABORT`, with each refusal inside). Read from
    /// redis-rs's error codes, never from the text.
    pub fn says(&self, code: &str) -> bool {
        let Some(error) = self.redis() else {
            return false;
        };
        error.code().is_some_and(|c| c.eq_ignore_ascii_case(code))
            || error.clone().into_server_errors().is_some_and(|errors| {
                errors
                    .iter()
                    .any(|(_, e)| e.code().eq_ignore_ascii_case(code))
            })
    }
}

/// `seed: why; seed: why`, as discovery failures were always shown.
fn seeds(errors: &[(String, RedisError)]) -> String {
    errors
        .iter()
        .map(|(seed, error)| format!("{seed}: {error}"))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::RedisError;

    fn server(code: &str, detail: &str) -> redis::RedisError {
        redis::make_extension_error(code.to_string(), Some(detail.to_string()))
    }

    #[test]
    fn says_reads_the_servers_error_code() {
        let moved = RedisError::Script {
            script: "release",
            source: server("MOVED", "3999 127.0.0.1:7001"),
        };
        assert!(moved.says("MOVED"));
        assert!(!moved.says("CROSSSLOT"));
        let noauth = RedisError::command("CONFIG GET notify-keyspace-events")(server(
            "NOAUTH",
            "Authentication required.",
        ));
        assert!(noauth.says("NOAUTH"));
        // Only the code counts, not words in the text.
        let text = RedisError::Command {
            command: "GET".into(),
            source: server("ERR", "MOVED is just a word here"),
        };
        assert!(!text.says("MOVED"));
        assert!(!RedisError::PubSubLost.says("MOVED"));
    }

    #[test]
    fn messages_name_what_failed_and_keep_the_cause() {
        let e = RedisError::command("SCAN")(server("ERR", "boom"));
        assert!(e.to_string().starts_with("SCAN: "), "{e}");
        assert!(e.to_string().contains("boom"), "{e}");
        let discovery = RedisError::Discovery(vec![
            ("redis://a:6379".into(), RedisError::NoMasters),
            ("redis://b:6379".into(), RedisError::PubSubLost),
        ]);
        assert_eq!(
            discovery.to_string(),
            "redis://a:6379: no masters; redis://b:6379: pub/sub connection lost"
        );
    }
}
