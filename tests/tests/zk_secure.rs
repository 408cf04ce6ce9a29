//! ZooKeeper configured as production runs it: the Netty connection factory, a
//! `secureClientPort` whose certificates the test makes (PEM key and trust stores, client
//! certificates required), SASL DIGEST-MD5 users from a JAAS `Server` section, and lock trees
//! protected by ACLs so that only the application and lockscope's SASL user can read them.
//! A real kazoo client takes the locks over TLS with its own certificate and digest identity.
//!
//! Least privilege: lockscope watches with READ alone; force release needs DELETE on the lock's
//! parent node, and without it the release is refused with an error naming that permission.
//! Bad TLS material: a wrong CA, a missing client certificate, an expired server certificate
//! each make only their own source down, with an error naming the source's member and cause,
//! while a good source in the same lockscope shows its locks.

use std::time::Duration;

use anyhow::{ensure, Result};
use lockscope::config::{section, Config, ZkSourceConfig};
use lockscope_model::id::lock_id;
use lockscope_tests::harness::{eventually, with_admin, zk_source, Lockscope};
use lockscope_tests::support::certs::{CertFiles, Pki};
use lockscope_tests::support::python::{KazooSecurity, PyClient};
use lockscope_tests::support::zk::{ZkEnsemble, ZkSecurity};
use lockscope_tests::unique_root;
use serde_json::json;

const TOKEN: &str = "oncall-token-zk-secure-0123456789";
const SASL_USER: &str = "lockscope";
const SASL_PASSWORD: &str = "ls-sasl-secret";
/// ZooKeeper permission bits.
const READ: u32 = 1;
const DELETE: u32 = 8;
const ALL: u32 = 31;

/// A secured standalone server trusting `pki`'s CA, with lockscope's SASL user.
async fn secure_zk(pki: &Pki, server: CertFiles, client_auth: bool) -> Result<ZkEnsemble> {
    ZkEnsemble::start_secure(&ZkSecurity {
        tls: Some((server, pki.ca_file().to_path_buf())),
        client_auth,
        sasl_users: vec![(SASL_USER.into(), SASL_PASSWORD.into())],
        enforce_sasl: false,
    })
    .await
}

/// lockscope's source over TLS with `identity` as client certificate, as the SASL user.
fn tls_source(
    name: &str,
    zk: &ZkEnsemble,
    ca: &Pki,
    identity: Option<&CertFiles>,
    root: &str,
) -> ZkSourceConfig {
    let mut source = zk_source(name, &zk.secure_connect_string(), &[root]);
    source.tls_ca_file = Some(ca.ca_file().to_path_buf());
    source.tls_cert_file = identity.map(|c| c.cert.clone());
    source.tls_key_file = identity.map(|c| c.key.clone());
    source.sasl_user = Some(SASL_USER.into());
    source.sasl_password = Some(SASL_PASSWORD.into());
    source
}

/// A kazoo client over TLS (its own certificate) as digest user `app`, creating every node
/// with ALL for `app` and `lockscope_perms` for lockscope's SASL user.
async fn kazoo_holder(
    zk: &ZkEnsemble,
    pki: &Pki,
    kazoo_cert: &CertFiles,
    path: &str,
    lockscope_perms: u32,
) -> Result<PyClient> {
    let security = KazooSecurity {
        tls: Some((
            pki.ca_file().to_path_buf(),
            kazoo_cert.cert.clone(),
            kazoo_cert.key.clone(),
        )),
        auth: vec![("digest".into(), "app:app-secret".into())],
        acl: vec![
            (ALL, "digest".into(), "app:app-secret".into()),
            (lockscope_perms, "sasl".into(), SASL_USER.into()),
        ],
    };
    let mut client =
        PyClient::kazoo_secure_lock(&zk.secure_connect_string(), path, "app-host", security)
            .await?;
    client.acquire().await?;
    Ok(client)
}

/// Over TLS with a client certificate and as a SASL user holding READ only, lockscope shows a
/// kazoo lock in an ACL-protected tree; its force release is refused naming DELETE on the
/// lock's parent, and works where the parent's ACL grants DELETE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_client_certificate_and_sasl_user_with_least_privilege() -> Result<()> {
    let pki = Pki::new("zk-secure-ca")?;
    let zk = secure_zk(&pki, pki.server("zk")?, true).await?;
    let identity = pki.client("lockscope", "lockscope")?;
    let kazoo_cert = pki.client("kazoo", "app")?;
    let root = unique_root("zk-secure");
    let read_only = format!("{root}/read-only");
    let deletable = format!("{root}/deletable");
    // The root and `read-only` come from the first client (READ for lockscope), `deletable`
    // from the second (READ and DELETE for lockscope).
    let mut first = kazoo_holder(&zk, &pki, &kazoo_cert, &read_only, READ).await?;
    let second = kazoo_holder(&zk, &pki, &kazoo_cert, &deletable, READ | DELETE).await?;

    let dir = tempfile::tempdir()?;
    let config = with_admin(
        Config {
            sources: section(
                "zookeeper",
                vec![tls_source("zk", &zk, &pki, Some(&identity), &root)],
            ),
            ..Config::default()
        },
        dir.path(),
        TOKEN,
    );
    let ls = Lockscope::start(config).await?;
    for path in [&read_only, &deletable] {
        ls.wait_lock(
            "zk",
            path,
            Duration::from_secs(20),
            "the kazoo holder over TLS",
            |l| l.holders.len() == 1,
        )
        .await?;
    }
    let sources = ls.sources().await?;
    ensure!(
        sources.iter().any(|s| s.name == "zk" && s.up),
        "{sources:#?}"
    );
    // The four-letter words go over TLS too: `cons` tells the holders' session timeouts.
    eventually(
        Duration::from_secs(20),
        "session timeouts from cons over TLS",
        async || {
            let sessions = ls.sessions().await?;
            let known = sessions
                .iter()
                .filter(|s| !s.holds.is_empty() && s.timeout_ms.is_some() && s.connected)
                .count();
            Ok((known == 2).then_some(()))
        },
    )
    .await?;

    // READ only on the lock node: refused, naming the permission and the node whose ACL lacks it.
    let lock = ls.lock("zk", &read_only).await?.expect("shown");
    let holder = &lock.holders[0];
    let (status, body) = ls
        .release(
            &lock_id("zk", &read_only),
            Some(TOKEN),
            &json!({"holder": holder.node, "session": holder.session, "version": holder.version,
                    "reason": "least privilege"}),
        )
        .await?;
    let text = body.to_string();
    ensure!(status >= 400, "{status} {body}");
    ensure!(
        text.contains("DELETE") && text.contains(&read_only),
        "the refusal names DELETE and the lock's node: {status} {body}"
    );
    ensure!(
        first.info().await.is_ok(),
        "the refused release touched the holder"
    );

    // READ and DELETE: released, the holder's node goes.
    let lock = ls.lock("zk", &deletable).await?.expect("shown");
    let holder = &lock.holders[0];
    let (status, body) = ls
        .release(
            &lock_id("zk", &deletable),
            Some(TOKEN),
            &json!({"holder": holder.node, "session": holder.session, "version": holder.version,
                    "reason": "granted DELETE"}),
        )
        .await?;
    ensure!(status == 200, "{status} {body}");
    ls.wait_lock(
        "zk",
        &deletable,
        Duration::from_secs(10),
        "the released holder gone",
        |l| l.holders.is_empty(),
    )
    .await?;
    first.release().await?;
    drop(second);
    Ok(())
}

/// A wrong CA, a client certificate the server requires but is not given, and an expired
/// server certificate: each source down with an error naming the member and the cause, while
/// the good source in the same lockscope is up and shows its lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tls_makes_only_its_own_source_down() -> Result<()> {
    let pki = Pki::new("zk-good-ca")?;
    let other = Pki::new("zk-other-ca")?;
    let zk = secure_zk(&pki, pki.server("zk")?, true).await?;
    let expired = secure_zk(&pki, pki.expired_server("zk-expired")?, false).await?;
    let identity = pki.client("lockscope", "lockscope")?;
    let kazoo_cert = pki.client("kazoo", "app")?;
    let root = unique_root("zk-bad-tls");
    let path = format!("{root}/job");
    let mut holder = kazoo_holder(&zk, &pki, &kazoo_cert, &path, READ).await?;

    let config = Config {
        sources: section(
            "zookeeper",
            vec![
                tls_source("good", &zk, &pki, Some(&identity), &root),
                tls_source("wrong-ca", &zk, &other, Some(&identity), &root),
                tls_source("no-client-cert", &zk, &pki, None, &root),
                tls_source("expired", &expired, &pki, Some(&identity), &root),
            ],
        ),
        ..Config::default()
    };
    let problems = config.validate();
    ensure!(problems.is_empty(), "{problems:#?}");
    let ls = Lockscope::start(config).await?;
    ls.wait_lock(
        "good",
        &path,
        Duration::from_secs(20),
        "the good source's lock",
        |l| l.holders.len() == 1,
    )
    .await?;
    let expected = [
        ("wrong-ca", zk.secure_connect_string(), "UnknownIssuer"),
        ("no-client-cert", zk.secure_connect_string(), "alert"),
        (
            "expired",
            expired.secure_connect_string(),
            "certificate expired",
        ),
    ];
    let sources = eventually(
        Duration::from_secs(30),
        "every bad source's error",
        async || {
            let sources = ls.sources().await?;
            let all = expected.iter().all(|(name, _, _)| {
                sources.iter().any(|s| {
                    s.name == *name && !s.up && s.error.as_ref().is_some_and(|e| e.contains("TLS"))
                })
            });
            Ok(all.then_some(sources))
        },
    )
    .await?;
    for (name, member, cause) in expected {
        let source = sources.iter().find(|s| s.name == name).expect("listed");
        let error = source.error.clone().unwrap_or_default();
        ensure!(
            error.contains("TLS handshake") && error.contains(&member) && error.contains(cause),
            "{name}: {error}"
        );
    }
    ensure!(
        sources.iter().any(|s| s.name == "good" && s.up),
        "{sources:#?}"
    );
    holder.release().await?;
    Ok(())
}

/// File problems are found when the config is validated, every one listed with its source's
/// table, key and file: a missing key file, a garbage certificate, a CA that is no PEM.
#[test]
fn bad_tls_files_are_config_problems() -> Result<()> {
    let pki = Pki::new("zk-files")?;
    let identity = pki.client("lockscope", "lockscope")?;
    let garbage = pki.dir().join("garbage.pem");
    std::fs::write(
        &garbage,
        "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
    )?;
    let missing = pki.dir().join("missing.key");
    let mut bad = ZkSourceConfig::new("bad", "127.0.0.1:2281", &["/locks"]);
    bad.tls_ca_file = Some(garbage.clone());
    bad.tls_cert_file = Some(identity.cert.clone());
    bad.tls_key_file = Some(missing.clone());
    let mut good = ZkSourceConfig::new("good", "127.0.0.1:2281", &["/locks"]);
    good.tls_ca_file = Some(pki.ca_file().to_path_buf());
    good.tls_cert_file = Some(identity.cert.clone());
    good.tls_key_file = Some(identity.key.clone());
    let config = Config {
        sources: section("zookeeper", vec![good, bad]),
        ..Config::default()
    };
    let problems = config.validate();
    ensure!(problems.len() == 2, "{problems:#?}");
    ensure!(
        problems
            .iter()
            .any(|p| p.contains("zookeeper[1].tls_ca_file") && p.contains("garbage.pem")),
        "{problems:#?}"
    );
    ensure!(
        problems
            .iter()
            .any(|p| p.contains("zookeeper[1].tls_key_file") && p.contains("missing.key")),
        "{problems:#?}"
    );
    Ok(())
}

/// With `enforce.auth.enabled=true` and `enforce.auth.schemes=sasl` only SASL sessions are
/// served: lockscope's SASL user is up, a wrong password is refused as such, and the source
/// without SASL is down with the server's refusal; each error names its source's ensemble.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enforced_sasl_admits_only_the_sasl_user() -> Result<()> {
    let pki = Pki::new("zk-sasl-ca")?;
    let zk = ZkEnsemble::start_secure(&ZkSecurity {
        tls: Some((pki.server("zk")?, pki.ca_file().to_path_buf())),
        client_auth: false,
        sasl_users: vec![(SASL_USER.into(), SASL_PASSWORD.into())],
        enforce_sasl: true,
    })
    .await?;
    let good = tls_source("sasl", &zk, &pki, None, "/");
    let mut wrong = tls_source("wrong-password", &zk, &pki, None, "/");
    wrong.sasl_password = Some("not-the-password".into());
    let mut none = tls_source("no-sasl", &zk, &pki, None, "/");
    none.sasl_user = None;
    none.sasl_password = None;
    let ls = Lockscope::start(Config {
        sources: section("zookeeper", vec![good, wrong, none]),
        ..Config::default()
    })
    .await?;
    let sources = eventually(
        Duration::from_secs(30),
        "every source settled",
        async || {
            let sources = ls.sources().await?;
            let settled = sources.iter().all(|s| {
                if s.name == "sasl" {
                    s.up && s.synced
                } else {
                    !s.up && s.error.as_ref().is_some_and(|e| e != "connecting")
                }
            });
            Ok(settled.then_some(sources))
        },
    )
    .await?;
    for source in &sources {
        println!("{}: up {} error {:?}", source.name, source.up, source.error);
        if source.name != "sasl" {
            let error = source.error.clone().unwrap_or_default();
            ensure!(error.contains(&zk.secure_connect_string()), "{error}");
            let why = if source.name == "no-sasl" {
                "no credentials configured"
            } else {
                "SASL DIGEST-MD5 user \"lockscope\" refused"
            };
            ensure!(error.contains(why), "{error}");
        }
    }
    Ok(())
}
