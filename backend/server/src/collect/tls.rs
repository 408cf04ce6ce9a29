//! TLS material a source names in its config (CA, client certificate, client key), checked when
//! the config is validated: each file readable and holding what its key says, a certificate
//! and key that belong together. Problems name the source's table, the key and the file, so
//! `check-config` (and start-up, exit 2) lists them all. Server-side problems (a wrong CA, an
//! expired server certificate, a client certificate the server requires) show only at connect
//! time, as the source's error. Knows no backend.

use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Every problem with the TLS files of the table `at` (absent keys are fine).
pub fn file_problems(
    at: &str,
    ca: Option<&Path>,
    cert: Option<&Path>,
    key: Option<&Path>,
) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(ca) = ca {
        if let Err(e) = certificates(ca) {
            problems.push(format!("{at}.tls_ca_file {}: {e}", ca.display()));
        }
    }
    let certs = cert.map(|cert| {
        certificates(cert)
            .map_err(|e| problems.push(format!("{at}.tls_cert_file {}: {e}", cert.display())))
    });
    let private = key.map(|key| {
        private_key(key)
            .map_err(|e| problems.push(format!("{at}.tls_key_file {}: {e}", key.display())))
    });
    match (certs, private) {
        (Some(Ok(certs)), Some(Ok(private))) => {
            if let Err(e) = belong_together(certs, private) {
                problems.push(format!(
                    "{at}: tls_cert_file {} and tls_key_file {} {e}",
                    cert.map(Path::display).expect("cert given"),
                    key.map(Path::display).expect("key given"),
                ));
            }
        }
        (Some(_), None) | (None, Some(_)) => {
            problems.push(format!("{at}: tls_cert_file and tls_key_file go together"))
        }
        _ => {}
    }
    problems
}

/// The certificates of a PEM file (at least one).
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let text = std::fs::read(path).map_err(|e| e.to_string())?;
    let certs = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not PEM certificates ({e})"))?;
    if certs.is_empty() {
        return Err("holds no PEM certificate".into());
    }
    for cert in &certs {
        webpki_parse(cert)?;
    }
    Ok(certs)
}

/// A certificate's DER must parse as X.509, else a server would be sent garbage.
fn webpki_parse(cert: &CertificateDer<'_>) -> Result<(), String> {
    rustls::server::ParsedCertificate::try_from(cert)
        .map(|_| ())
        .map_err(|e| format!("not a valid certificate ({e})"))
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let text = std::fs::read(path).map_err(|e| e.to_string())?;
    PrivateKeyDer::from_pem_slice(&text).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => "holds no PEM private key".to_string(),
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
        let dir = tempfile::tempdir().expect("a temporary folder");
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(&garbage, "not a certificate").expect("written");
        let missing = dir.path().join("missing.key");
        let problems = file_problems("redis[1]", Some(&garbage), Some(&garbage), Some(&missing));
        assert_eq!(problems.len(), 3, "{problems:#?}");
        assert!(
            problems[0].starts_with("redis[1].tls_ca_file ") && problems[0].contains("garbage.pem")
        );
        assert!(problems[1].starts_with("redis[1].tls_cert_file "));
        assert!(
            problems[2].starts_with("redis[1].tls_key_file ")
                && problems[2].contains("missing.key")
        );
        let alone = file_problems("zookeeper[0]", None, Some(&garbage), None);
        assert!(
            alone.iter().any(|p| p.contains("go together")),
            "{alone:#?}"
        );
    }
}
