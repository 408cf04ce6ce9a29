//! The TLS files a source names (`tls_ca_file`, `tls_cert_file`, `tls_key_file`), checked when
//! the config is validated: each file is read and parsed as what its key says it is, so a
//! missing key file, a garbage certificate or a key that is not the certificate's is a config
//! problem naming the key and the file
//! (exit 2, listed with every other problem) instead of a source that fails at every connect.
//! Whether the server accepts the certificates (wrong CA, expired, refused handshake) only a
//! connection can tell; that is each backend's error.
//!
//! Core module: used by the backends' config sections and the store; imports nothing of the crate.

use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Every problem with a source's TLS files; `at` names the section (e.g. `etcd[0]`). Absent
/// keys are fine; a certificate and a key given together must belong together.
pub fn check(at: &str, ca: Option<&Path>, cert: Option<&Path>, key: Option<&Path>) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(path) = ca {
        if let Err(why) = check_ca(path) {
            problems.push(format!("{at}.tls_ca_file {}: {why}", path.display()));
        }
    }
    let certs = cert.map(|path| {
        check_certificate(path)
            .map_err(|why| problems.push(format!("{at}.tls_cert_file {}: {why}", path.display())))
    });
    let private = key.map(|path| {
        check_key(path)
            .map_err(|why| problems.push(format!("{at}.tls_key_file {}: {why}", path.display())))
    });
    match (certs, private, cert, key) {
        (Some(Ok(certs)), Some(Ok(private)), Some(cert), Some(key)) => {
            if let Err(why) = belong_together(certs, private) {
                problems.push(format!(
                    "{at}: tls_cert_file {} and tls_key_file {} {why}",
                    cert.display(),
                    key.display(),
                ));
            }
        }
        (Some(_), None, ..) | (None, Some(_), ..) => {
            problems.push(format!("{at}: tls_cert_file and tls_key_file go together"))
        }
        _ => {}
    }
    problems
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| e.to_string())
}

/// The PEM certificates in a file, each parsed; at least one.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a PEM certificate file ({e})"))?;
    if certs.is_empty() {
        return Err("no PEM certificate (-----BEGIN CERTIFICATE-----) in it".into());
    }
    Ok(certs)
}

/// A CA file: certificates that each parse as a trust anchor.
fn check_ca(path: &Path) -> Result<(), String> {
    let mut roots = rustls::RootCertStore::empty();
    for (i, cert) in certificates(path)?.into_iter().enumerate() {
        roots
            .add(cert)
            .map_err(|e| format!("certificate {} is not a valid CA certificate ({e})", i + 1))?;
    }
    Ok(())
}

/// A client certificate file: every certificate in it parses as X.509 (else a server would be
/// sent garbage).
fn check_certificate(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = certificates(path)?;
    for cert in &certs {
        rustls::server::ParsedCertificate::try_from(cert)
            .map_err(|e| format!("not a valid X.509 certificate ({e})"))?;
    }
    Ok(certs)
}

/// A private key file: one PEM private key (PKCS#8, PKCS#1 or SEC1).
fn check_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => {
            "no PEM private key (-----BEGIN PRIVATE KEY-----) in it".to_string()
        }
        e => format!("not a PEM private key ({e})"),
    })
}

/// The key must be the one the (first) certificate was issued for.
fn belong_together(
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<(), String> {
    let provider = rustls::crypto::ring::default_provider();
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("do not make a client identity: the key is unusable ({e})"))?;
    rustls::sign::CertifiedKey::new(certs, signing)
        .keys_match()
        .map_err(|e| format!("do not belong together ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_and_garbage_files_are_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "hello\n").expect("write");
        let framed = dir.path().join("framed.pem");
        std::fs::write(
            &framed,
            "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n",
        )
        .expect("write");
        let missing = dir.path().join("missing.key");
        let problems = check(
            "etcd[1]",
            Some(&framed),
            Some(&garbage),
            Some(missing.as_path()),
        );
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(
            problems[0].starts_with("etcd[1].tls_ca_file "),
            "{problems:#?}"
        );
        assert!(problems[0].contains("framed.pem"));
        assert!(problems[1].contains("garbage.pem") && problems[1].contains("no PEM"));
        assert!(problems[2].contains("missing.key") && problems[2].contains("No such file"));
        let alone = check("mysql[0]", None, Some(&garbage), None);
        assert!(
            alone.iter().any(|p| p.contains("go together")),
            "{alone:#?}"
        );
    }
}

/// How a database connection uses TLS (PostgreSQL's `sslmode` names; MariaDB's
/// `VERIFY_IDENTITY` is `verify-full`).
#[derive(Debug, Clone, Copy, serde::Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum TlsMode {
    /// Plain text only.
    Disable,
    /// TLS when the server offers it, the certificate not checked.
    Prefer,
    /// TLS or no connection, the certificate not checked.
    Require,
    /// TLS, the certificate signed by `tls_ca_file` (the host name not checked).
    VerifyCa,
    /// TLS, the certificate signed by `tls_ca_file` and issued for the host connected to.
    VerifyFull,
}

impl TlsMode {
    pub fn name(self) -> &'static str {
        match self {
            TlsMode::Disable => "disable",
            TlsMode::Prefer => "prefer",
            TlsMode::Require => "require",
            TlsMode::VerifyCa => "verify-ca",
            TlsMode::VerifyFull => "verify-full",
        }
    }
}

/// `options` with TLS set as a section says: the mode (the effective one: `verify-full` when
/// a CA is given and no mode is), the CA and the client certificate and key. Used by the
/// PostgreSQL source and the PostgreSQL store alike.
pub fn pg_tls(
    mut options: sqlx::postgres::PgConnectOptions,
    mode: Option<TlsMode>,
    ca: Option<&Path>,
    cert: Option<&Path>,
    key: Option<&Path>,
) -> sqlx::postgres::PgConnectOptions {
    use sqlx::postgres::PgSslMode;
    if let Some(mode) = mode.or(ca.map(|_| TlsMode::VerifyFull)) {
        options = options.ssl_mode(match mode {
            TlsMode::Disable => PgSslMode::Disable,
            TlsMode::Prefer => PgSslMode::Prefer,
            TlsMode::Require => PgSslMode::Require,
            TlsMode::VerifyCa => PgSslMode::VerifyCa,
            TlsMode::VerifyFull => PgSslMode::VerifyFull,
        });
    }
    if let Some(ca) = ca {
        options = options.ssl_root_cert(ca);
    }
    if let (Some(cert), Some(key)) = (cert, key) {
        options = options.ssl_client_cert(cert).ssl_client_key(key);
    }
    options
}
