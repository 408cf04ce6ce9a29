//! What can fail when lockscope talks to an etcd cluster: reading the TLS files, connecting
//! (which authenticates), the probe that tells a member answers, a range, a watch and lease
//! TTLs.
//!
//! Errors stay typed inside the backend; they become text only where they are shown (a
//! source's `error` in the API and UI, a failed release's text, log lines). Each message names
//! what failed and keeps etcd-client's own text. Endpoints carry no credentials (user and
//! password are configured apart), so they are shown as configured. With authentication on, a
//! request etcd refuses for want of a permission is [`EtcdError::PermissionDenied`], naming the
//! grant it needs; a connection that fails with TLS configured names the CA file and the client
//! certificate it was checked with ([`tls_hint`]).

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
    /// The client could not be built or could not authenticate; `hint` names the TLS files it
    /// was checked against when TLS is configured.
    #[error("connect to {endpoints}: {source}{hint}")]
    Connect {
        endpoints: String,
        #[source]
        source: etcd_client::Error,
        hint: String,
    },
    /// No endpoint answered within the time a connect attempt is given.
    #[error("connect to {endpoints}: no endpoint answered")]
    ConnectTimeout { endpoints: String },
    /// The member was dialled but its answer to a first request was an error (a TLS failure
    /// shows here: the handshake happens at the first request); `hint` as for `Connect`.
    #[error("{endpoint}: {source}{hint}")]
    Probe {
        endpoint: String,
        #[source]
        source: etcd_client::Error,
        hint: String,
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
    /// etcd refused a request for want of a permission (auth enabled, the source's user's
    /// roles do not allow it): what was asked, and the grant it needs.
    #[error("{what}: etcdserver: permission denied; {needs}")]
    PermissionDenied { what: String, needs: String },
    /// A lease's TTL could not be read.
    #[error("lease TTL {lease:x}: {source}")]
    LeaseTtl {
        lease: i64,
        #[source]
        source: etcd_client::Error,
    },
}

/// Whether etcd refused a request for want of a permission (`etcdserver: permission denied`,
/// gRPC `PermissionDenied`).
pub(crate) fn permission_denied(error: &etcd_client::Error) -> bool {
    matches!(error, etcd_client::Error::GRpcStatus(status) if status.message().contains("permission denied"))
}

/// What a failed connection was checked against when TLS is configured (the CA file, the
/// client certificate or its absence), for its error text; empty without TLS, and for an
/// answer etcd itself gave (a refused password, a missing permission), which TLS did not cause.
pub(crate) fn tls_hint(
    config: &super::config::EtcdSourceConfig,
    error: &etcd_client::Error,
) -> String {
    let answered = matches!(error, etcd_client::Error::GRpcStatus(status) if status.message().starts_with("etcdserver:"));
    if answered || (config.tls_ca_file.is_none() && config.tls_cert_file.is_none()) {
        return String::new();
    }
    let ca = config
        .tls_ca_file
        .as_ref()
        .map_or("the system's CA roots".to_string(), |ca| {
            format!("tls_ca_file {}", ca.display())
        });
    let client = config.tls_cert_file.as_ref().map_or(
        "no tls_cert_file: no client certificate sent".to_string(),
        |cert| format!("client certificate tls_cert_file {}", cert.display()),
    );
    format!(" (TLS: the server's certificate checked against {ca}; {client})")
}

/// The grant a read of `prefix` needs, as the error shows it.
pub(crate) fn read_grant(prefix: &str) -> String {
    format!(
        "the source's etcd user needs read on the prefix (etcdctl role grant-permission --prefix=true <role> read {prefix})"
    )
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
