//! What can fail when lockscope talks to an etcd cluster: reading the TLS files, connecting
//! (which authenticates), the probe that tells a member answers, a range, a watch and lease
//! TTLs.
//!
//! Errors stay typed inside the backend; they become text only where they are shown (a
//! source's `error` in the API and UI, a failed release's text, log lines). Each message names
//! what failed and keeps etcd-client's own text. Endpoints carry no credentials (user and
//! password are configured apart), so they are shown as configured.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    /// A TLS file (CA, certificate or key) could not be read.
    #[error("read {path}: {source}", path = .path.display())]
    TlsFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The client could not be built or could not authenticate.
    #[error("connect to {endpoints}: {source}")]
    Connect {
        endpoints: String,
        #[source]
        source: etcd_client::Error,
    },
    /// No endpoint answered within the time a connect attempt is given.
    #[error("connect to {endpoints}: no endpoint answered")]
    ConnectTimeout { endpoints: String },
    /// The member was dialled but its answer to a first request was an error.
    #[error("{endpoint}: {source}")]
    Probe {
        endpoint: String,
        #[source]
        source: etcd_client::Error,
    },
    /// The member did not answer a first request in time.
    #[error("{endpoint}: no answer")]
    ProbeTimeout { endpoint: String },
    /// No endpoint of the source could be used: why, endpoint by endpoint.
    #[error("{}", join(.0))]
    Endpoints(Vec<EtcdError>),
    /// A range read of a prefix failed.
    #[error("range {prefix}: {source}")]
    Range {
        prefix: String,
        #[source]
        source: etcd_client::Error,
    },
    /// A watch on a prefix could not be created.
    #[error("watch {prefix}: {source}")]
    Watch {
        prefix: String,
        #[source]
        source: etcd_client::Error,
    },
    /// The source has no prefix to watch.
    #[error("no prefixes")]
    NoPrefixes,
    /// The watch stream failed.
    #[error("watch: {0}")]
    WatchStream(#[source] etcd_client::Error),
    /// The watch stream ended.
    #[error("watch stream ended")]
    WatchEnded,
    /// etcd canceled the watch, for the reason it gives.
    #[error("watch canceled: {0}")]
    WatchCanceled(String),
    /// A lease's TTL could not be read.
    #[error("lease TTL {lease:x}: {source}")]
    LeaseTtl {
        lease: i64,
        #[source]
        source: etcd_client::Error,
    },
}

/// `why; why`, as failures over several endpoints were always shown.
fn join(errors: &[EtcdError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::EtcdError;

    #[test]
    fn endpoint_failures_are_listed_in_turn() {
        let e = EtcdError::Endpoints(vec![
            EtcdError::ProbeTimeout {
                endpoint: "127.0.0.1:2379".into(),
            },
            EtcdError::ConnectTimeout {
                endpoints: "http://127.0.0.1:2380".into(),
            },
        ]);
        assert_eq!(
            e.to_string(),
            "127.0.0.1:2379: no answer; connect to http://127.0.0.1:2380: no endpoint answered"
        );
        assert_eq!(
            EtcdError::WatchCanceled("compacted".into()).to_string(),
            "watch canceled: compacted"
        );
    }
}
