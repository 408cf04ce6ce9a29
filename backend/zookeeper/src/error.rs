//! What can fail when lockscope talks to a ZooKeeper ensemble: connecting (and authenticating),
//! registering its watches, reading the tree, and the session itself.
//!
//! Errors stay typed inside the backend; they become text only where they are shown (a
//! source's `error` in the API and UI, a failed release's log line). Each message names what
//! failed and keeps the client's own error text. The connect string carries no credentials
//! (digest credentials are configured apart), so it is shown as configured.

use std::time::Duration;

use zookeeper_client as zkc;

#[derive(Debug, thiserror::Error)]
pub enum ZkError {
    /// The ensemble refused the source's credentials (digest or SASL), or required some it was
    /// not given (`enforce.auth.enabled`); `who` says which identity was tried.
    #[error("connect to {connect}: {source} ({who})")]
    Auth {
        connect: String,
        who: String,
        #[source]
        source: zkc::Error,
    },
    /// No session could be established.
    #[error("connect to {connect}: {source}")]
    Connect {
        connect: String,
        #[source]
        source: zkc::Error,
    },
    /// The source's TLS files (CA, client certificate, key) do not make a TLS client; the
    /// text names the key and the file.
    #[error("TLS: {0}")]
    TlsFiles(String),
    /// A member refused the TLS handshake or its certificate was refused.
    #[error("TLS handshake with {member}: {error}")]
    TlsHandshake { member: String, error: String },
    /// No member answered within the time a connect attempt is given.
    #[error("connect to {connect}: no member answered within {limit:?}")]
    ConnectTimeout { connect: String, limit: Duration },
    /// A force release named a source that is not configured.
    #[error("no ZooKeeper source {0:?}")]
    NoSource(String),
    /// A persistent recursive watch on a root could not be registered.
    #[error("register persistent watch: {0}")]
    Watch(#[source] zkc::Error),
    /// The client stopped delivering watch events.
    #[error("watch stream ended")]
    WatchEnded,
    /// The tree could not be read and the session is over.
    #[error("read tree: {0}")]
    ReadTree(#[source] zkc::Error),
    /// The session ended (expired, closed, or authentication failed on it).
    #[error("session {0}")]
    Session(zkc::SessionState),
}
