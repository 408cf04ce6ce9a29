//! TLS to ZooKeeper members outside the client library: the four-letter words on a
//! `secureClientPort` ([`super::fourlw`]) and the handshake probe that tells why a TLS session
//! could not be opened (the client library only says that no member could be reached).
//! Both trust the source's `tls_ca_file` and present its client certificate, as the session
//! does.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::ZkSourceConfig;

/// The connector the source's TLS files make; `None` without `tls_ca_file`.
pub fn connector(config: &ZkSourceConfig) -> Result<Option<TlsConnector>, String> {
    let Some(ca_file) = &config.tls_ca_file else {
        return Ok(None);
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca_file)
        .map_err(|e| format!("tls_ca_file {}: {e}", ca_file.display()))?
    {
        let cert = cert.map_err(|e| format!("tls_ca_file {}: {e}", ca_file.display()))?;
        roots
            .add(cert)
            .map_err(|e| format!("tls_ca_file {}: {e}", ca_file.display()))?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots);
    let client = match (&config.tls_cert_file, &config.tls_key_file) {
        (Some(cert_file), Some(key_file)) => {
            let certs = CertificateDer::pem_file_iter(cert_file)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("tls_cert_file {}: {e}", cert_file.display()))?;
            let key = PrivateKeyDer::from_pem_file(key_file)
                .map_err(|e| format!("tls_key_file {}: {e}", key_file.display()))?;
            builder.with_client_auth_cert(certs, key).map_err(|e| {
                format!(
                    "tls_cert_file {} / tls_key_file {}: {e}",
                    cert_file.display(),
                    key_file.display()
                )
            })?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(Some(TlsConnector::from(Arc::new(client))))
}

/// A TLS session with `member` (`host:port`) over `stream`, its certificate checked for the
/// member's host name (or IP address).
pub async fn handshake(
    tls: &TlsConnector,
    member: &str,
    stream: TcpStream,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let host = member.rsplit_once(':').map_or(member, |(host, _)| host);
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    tls.connect(name, stream).await
}

/// Why a TLS session with `member` fails, if it does: the handshake, then a `ruok` whose
/// answer (or the server's alert, e.g. a client certificate it requires) ends the exchange.
/// `None` when the member answers over TLS, or cannot be reached at all (not a TLS problem:
/// the session's own error says so).
pub async fn probe(tls: &TlsConnector, member: &str) -> Option<String> {
    let work = async {
        let Ok(stream) = TcpStream::connect(member).await else {
            return Ok(());
        };
        let mut stream = handshake(tls, member, stream).await?;
        stream.write_all(b"ruok").await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        std::io::Result::Ok(())
    };
    match tokio::time::timeout(std::time::Duration::from_secs(3), work).await {
        Ok(Ok(())) | Err(_) => None,
        Ok(Err(e)) => Some(e.to_string()),
    }
}
