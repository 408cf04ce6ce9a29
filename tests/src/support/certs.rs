//! Certificates made by the tests: a private CA, server certificates for loopback, client
//! certificates, and the broken ones a deployment meets (expired, signed by another CA).
//! Made with `rcgen` (pure Rust, ECDSA P-256 keys in PKCS#8 PEM, which OpenSSL, Go, Java's
//! `PEM` key store type and rustls all read), written as PEM files under one temporary folder
//! that goes away with the [`Pki`].

use std::path::{Path, PathBuf};

use anyhow::Result;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A private certificate authority and the folder its files are written to.
pub struct Pki {
    dir: tempfile::TempDir,
    issuer: Issuer<'static, KeyPair>,
    ca: PathBuf,
}

impl Pki {
    /// A new CA named `name`; its certificate is [`Pki::ca_file`].
    pub fn new(name: &str) -> Result<Pki> {
        let dir = tempfile::tempdir()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        let ca = dir.path().join("ca.crt");
        std::fs::write(&ca, cert.pem())?;
        let issuer = Issuer::new(params, key);
        Ok(Pki { dir, issuer, ca })
    }

    /// The CA certificate (PEM), what clients and servers are told to trust.
    pub fn ca_file(&self) -> &Path {
        &self.ca
    }

    /// The folder the files are in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A server certificate for `127.0.0.1` and `localhost`, valid from yesterday for a day more.
    pub fn server(&self, name: &str) -> Result<CertFiles> {
        self.issue(name, name, true, false)
    }

    /// A client certificate with common name `cn` (what Redis ACLs, etcd users and
    /// PostgreSQL `cert` authentication can map to a user).
    pub fn client(&self, name: &str, cn: &str) -> Result<CertFiles> {
        self.issue(name, cn, false, false)
    }

    /// A server certificate for loopback that expired yesterday.
    pub fn expired_server(&self, name: &str) -> Result<CertFiles> {
        self.issue(name, name, true, true)
    }

    /// A server certificate for loopback valid only from `from` on (installed early, as a
    /// rotation tool may).
    pub fn server_valid_from(&self, name: &str, from: time::OffsetDateTime) -> Result<CertFiles> {
        self.issue_at(name, name, true, Some(from))
    }

    fn issue(&self, name: &str, cn: &str, server: bool, expired: bool) -> Result<CertFiles> {
        let day = time::Duration::days(1);
        let now = time::OffsetDateTime::now_utc();
        self.issue_at(
            name,
            cn,
            server,
            Some(if expired { now - day * 3 } else { now - day }),
        )
    }

    fn issue_at(
        &self,
        name: &str,
        cn: &str,
        server: bool,
        from: Option<time::OffsetDateTime>,
    ) -> Result<CertFiles> {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
        params.distinguished_name.push(DnType::CommonName, cn);
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        // Servers of a cluster (ZooKeeper quorum, etcd peers) also connect to each other.
        params.extended_key_usages = if server {
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ]
        } else {
            vec![ExtendedKeyUsagePurpose::ClientAuth]
        };
        let day = time::Duration::days(1);
        let from = from.unwrap_or_else(|| time::OffsetDateTime::now_utc() - day);
        (params.not_before, params.not_after) = (from, from + day * 2);
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        let files = CertFiles {
            cert: self.dir.path().join(format!("{name}.crt")),
            key: self.dir.path().join(format!("{name}.key")),
        };
        std::fs::write(&files.cert, cert.pem())?;
        write_private(&files.key, &key.serialize_pem())?;
        Ok(files)
    }
}

/// Writes a key readable by its owner only (PostgreSQL and MariaDB refuse wider modes).
fn write_private(path: &Path, pem: &str) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, pem)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openssl_verifies_what_is_made() -> Result<()> {
        let pki = Pki::new("test-ca")?;
        let srv = pki.server("srv")?;
        let old = pki.expired_server("old")?;
        let verify = |cert: &Path| {
            std::process::Command::new("openssl")
                .arg("verify")
                .arg("-CAfile")
                .arg(pki.ca_file())
                .arg(cert)
                .output()
        };
        assert!(verify(&srv.cert)?.status.success());
        assert!(!verify(&old.cert)?.status.success());
        Ok(())
    }
}
