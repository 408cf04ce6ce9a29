//! The HTTPS server's certificate (`tls_cert_file`, `tls_key_file`): loading and checking the
//! PEM files, and the rustls certificate resolver that re-reads them when they change.
//!
//! At start a bad file is a configuration error naming it (missing, not PEM, a key that does
//! not belong to the certificate, a certificate outside its validity period). Afterwards the
//! resolver looks at the files' modification times and sizes at most once a
//! [`CHECK_EVERY`], on a handshake; when they changed it loads them again, and a bad new pair
//! keeps the certificate served until then and logs why (a rotation tool writing the two files
//! one after the other is read again once both are there). Files refused are looked at again
//! at the same pace even when they do not change, so a certificate installed before its
//! validity starts is served once it does. Nothing restarts. This module knows nothing about
//! HTTP: `http/listen.rs` serves connections with it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// How often, at most, a handshake looks whether the files changed.
pub const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The certificate chain and key in `cert` and `key`, checked: readable PEM, a key that belongs
/// to the first certificate, that certificate valid now. The error names the file.
pub fn load(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, String> {
    let cert_pem = std::fs::read(cert)
        .map_err(|e| format!("tls_cert_file {}: cannot read: {e}", cert.display()))?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            format!(
                "tls_cert_file {}: not a PEM certificate: {e}",
                cert.display()
            )
        })?;
    let Some(leaf) = chain.first() else {
        return Err(format!(
            "tls_cert_file {}: holds no certificate (no BEGIN CERTIFICATE block)",
            cert.display()
        ));
    };
    check_validity(leaf, SystemTime::now())
        .map_err(|e| format!("tls_cert_file {}: {e}", cert.display()))?;
    let key_pem = std::fs::read(key)
        .map_err(|e| format!("tls_key_file {}: cannot read: {e}", key.display()))?;
    let key_der = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| format!("tls_key_file {}: not a PEM private key: {e}", key.display()))?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key_der)
        .map_err(|e| format!("tls_key_file {}: unusable key: {e}", key.display()))?;
    let certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(_) => {
            return Err(format!(
                "tls_key_file {} is not the key of the certificate in tls_cert_file {}",
                key.display(),
                cert.display()
            ))
        }
    }
    Ok(Arc::new(certified))
}

/// Whether `cert` is valid at `now`; the reason otherwise.
fn check_validity(cert: &CertificateDer<'_>, now: SystemTime) -> Result<(), String> {
    use x509_cert::der::Decode;
    let parsed = x509_cert::Certificate::from_der(cert.as_ref())
        .map_err(|e| format!("not an X.509 certificate: {e}"))?;
    let validity = &parsed.tbs_certificate.validity;
    let now = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    if validity.not_after.to_unix_duration() < now {
        return Err(format!("the certificate expired at {}", validity.not_after));
    }
    if validity.not_before.to_unix_duration() > now {
        return Err(format!(
            "the certificate is not valid before {}",
            validity.not_before
        ));
    }
    Ok(())
}

/// What tells that a file changed: its modification time and size.
type Stamp = [(Option<SystemTime>, u64); 2];

fn stamp(cert: &Path, key: &Path) -> Stamp {
    [cert, key].map(|p| match std::fs::metadata(p) {
        Ok(m) => (m.modified().ok(), m.len()),
        Err(_) => (None, 0),
    })
}

/// Serves the certificate in two files, loading them again when they change.
#[derive(Debug)]
pub struct ReloadingCert {
    cert: PathBuf,
    key: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    current: Arc<CertifiedKey>,
    checked: Instant,
    stamp: Stamp,
    /// Why the files as they are now were not taken, if they were not.
    error: Option<String>,
}

impl ReloadingCert {
    /// Loads the files (the error names the bad one).
    pub fn new(cert: &Path, key: &Path) -> Result<ReloadingCert, String> {
        let stamp = stamp(cert, key);
        let current = load(cert, key)?;
        Ok(ReloadingCert {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            state: Mutex::new(State {
                current,
                checked: Instant::now(),
                stamp,
                error: None,
            }),
        })
    }

    /// The certificate to serve, after loading the files again if they changed (looked at most
    /// once a [`CHECK_EVERY`]).
    pub fn current(&self) -> Arc<CertifiedKey> {
        let mut state = match self.state.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        };
        if state.checked.elapsed() >= CHECK_EVERY {
            state.checked = Instant::now();
            let now = stamp(&self.cert, &self.key);
            // Files refused before are looked at again even unchanged: a certificate not yet
            // valid becomes valid, a key readable only by others becomes readable.
            if now != state.stamp || state.error.is_some() {
                state.stamp = now;
                match load(&self.cert, &self.key) {
                    Ok(loaded) => {
                        state.current = loaded;
                        state.error = None;
                        tracing::info!(cert = %self.cert.display(), "HTTPS certificate reloaded");
                    }
                    Err(e) => {
                        if state.error.as_ref() != Some(&e) {
                            tracing::error!(error = %e,
                                "the changed HTTPS certificate files cannot be used; still \
                                 serving the previous certificate");
                        }
                        state.error = Some(e);
                    }
                }
            }
        }
        state.current.clone()
    }

    /// Why the files as they are were refused, if they were.
    pub fn error(&self) -> Option<String> {
        self.state.lock().ok()?.error.clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The rustls server configuration over a [`ReloadingCert`] (HTTP/1.1, ring).
pub fn server_config(resolver: Arc<ReloadingCert>) -> Result<Arc<rustls::ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
