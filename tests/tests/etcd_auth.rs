//! etcd with TLS, client certificates and authentication, against a real etcd 3.4 started with
//! `--client-cert-auth` and a server certificate from the test CA (issue 21, item 4): a
//! lockscope user holding only a read-only role over the lock prefix watches locks (range,
//! watch, lease TTLs), authenticated by password or by its client certificate's CN; a force
//! release is refused with etcd's "permission denied" and the grant it needs, changing nothing,
//! until the user is granted write on the prefix; a user without read is told which grant it
//! lacks. Bad TLS material: a wrong CA, no client certificate — each a clear error on its own
//! source while a good source of the same lockscope works; missing and garbage files are
//! config problems, all listed.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use lockscope::backends::etcd::EtcdSourceConfig;
use lockscope::config::{section, Config};
use lockscope_model::id::lock_id;
use lockscope_tests::harness::{eventually, with_admin, Lockscope};
use lockscope_tests::support::certs::Pki;
use lockscope_tests::support::etcd::{enable_auth, etcdctl, keys, EtcdServer, EtcdctlLock};
use serde_json::json;

const TOKEN: &str = "etcd-auth-admin-token";
const WAIT: Duration = Duration::from_secs(30);

fn source(name: &str, endpoints: &[String], pki: &Pki) -> EtcdSourceConfig {
    let mut config = EtcdSourceConfig::new(name, endpoints, &["/locks"]);
    config.lease_poll_interval = Duration::from_millis(200);
    config.tls_ca_file = Some(pki.ca_file().to_path_buf());
    config
}

/// A read-only role over `/locks`, users `lockscope` (password `ls-secret`) and `reader-less`
/// (no role), then auth on.
async fn read_only_setup(endpoints: &[String]) -> Result<()> {
    for args in [
        &["role", "add", "lockscope-ro"][..],
        &[
            "role",
            "grant-permission",
            "--prefix=true",
            "lockscope-ro",
            "read",
            "/locks",
        ],
        &["user", "add", "lockscope", "--new-user-password=ls-secret"],
        &["user", "grant-role", "lockscope", "lockscope-ro"],
        &[
            "user",
            "add",
            "reader-less",
            "--new-user-password=rl-secret",
        ],
    ] {
        etcdctl(endpoints, args).await?;
    }
    enable_auth(endpoints, "root-secret").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_role_watches_and_force_release_needs_write() -> Result<()> {
    let pki = Pki::new("etcd-auth-ca")?;
    let etcd = EtcdServer::start_tls(&pki, &[]).await?;
    let endpoints = etcd.endpoints();
    read_only_setup(&endpoints).await?;

    // "pw": user and password (from the environment), with a client certificate whose CN is no
    // user at all (etcd takes the password's token over the CN). "cn": the certificate's CN,
    // `lockscope`, is the user. "denied": a user without any role.
    std::env::set_var("LOCKSCOPE_TEST_ETCD_AUTH_PW", "ls-secret");
    let stranger = pki.client("stranger", "nobody-by-this-name")?;
    let mut pw = source("pw", &endpoints, &pki);
    pw.user = Some("lockscope".into());
    pw.password_env = Some("LOCKSCOPE_TEST_ETCD_AUTH_PW".into());
    pw.tls_cert_file = Some(stranger.cert.clone());
    pw.tls_key_file = Some(stranger.key.clone());
    let by_cn = pki.client("lockscope-cn", "lockscope")?;
    let mut cn = source("cn", &endpoints, &pki);
    cn.tls_cert_file = Some(by_cn.cert.clone());
    cn.tls_key_file = Some(by_cn.key.clone());
    std::env::set_var("LOCKSCOPE_TEST_ETCD_AUTH_RL", "rl-secret");
    let mut denied = source("denied", &endpoints, &pki);
    denied.user = Some("reader-less".into());
    denied.password_env = Some("LOCKSCOPE_TEST_ETCD_AUTH_RL".into());
    denied.tls_cert_file = Some(stranger.cert.clone());
    denied.tls_key_file = Some(stranger.key.clone());
    for (i, s) in [&pw, &cn, &denied].into_iter().enumerate() {
        let problems = s.validate(&format!("etcd[{i}]"));
        ensure!(problems.is_empty(), "{problems:?}");
    }
    ensure!(
        !format!("{pw:?}").contains("ls-secret"),
        "the password must never be printed"
    );
    let dir = tempfile::tempdir()?;
    let config = with_admin(
        Config {
            sources: section("etcd", vec![pw, cn, denied]),
            ..Config::default()
        },
        dir.path(),
        TOKEN,
    );
    let ls = Lockscope::start(config).await?;

    // The role-less user: the source says which permission it lacks.
    let refused = ls
        .source_where(WAIT, "denied", "the role-less source's error", |s| {
            s.error
                .as_deref()
                .is_some_and(|e| e.contains("permission denied"))
        })
        .await?;
    let error = refused.error.unwrap_or_default();
    ensure!(
        !refused.up
            && error.contains("read /locks")
            && error.contains("grant-permission --prefix=true <role> read /locks"),
        "{error}"
    );
    ensure!(!error.contains("rl-secret"), "{error}");
    eprintln!("source without a role: {error}");

    // A mutex holder (etcdctl as root): both read-only sources see it with its lease's TTL
    // (LeaseTimeToLive needs no more than authentication on etcd 3.4.23).
    let mut holder = EtcdctlLock::start(&endpoints, "/locks/job", 30).await?;
    let key = holder.wait_acquired(WAIT).await?;
    for name in ["pw", "cn"] {
        let lock = ls
            .wait_lock(name, "/locks/job", WAIT, "the holder with its lease", |l| {
                l.holders.len() == 1
                    && l.holders[0].node == key
                    && l.holders[0]
                        .lease
                        .as_ref()
                        .is_some_and(|lease| lease.granted_s == Some(30))
            })
            .await
            .with_context(|| format!("source {name}"))?;
        ensure!(lock.recipe == "etcd_mutex", "{lock:?}");
    }
    let source_cn = ls.source_where(WAIT, "cn", "cn up", |s| s.up).await?;
    ensure!(source_cn.error.is_none(), "{source_cn:?}");

    // Force release with read only: refused by etcd, the grant named, nothing changed.
    let lock = ls
        .wait_lock("cn", "/locks/job", WAIT, "the holder", |l| {
            l.holders.len() == 1
        })
        .await?;
    let version = lock.holders[0].version.clone().context("version")?;
    let id = lock_id("cn", "/locks/job");
    let body = json!({"holder": key, "version": version, "reason": "read-only test"});
    let before = keys(&endpoints, "/locks/job").await?;
    let (status, answer) = ls.release(&id, Some(TOKEN), &body).await?;
    let text = answer.to_string();
    eprintln!("release with read only: {status} {answer}");
    ensure!(status == 502, "{status} {answer}");
    ensure!(
        text.contains("permission denied")
            && text.contains("nothing was changed")
            && text.contains("readwrite /locks")
            && text.contains("user grant-role <user, or the client certificate's CN>"),
        "{answer}"
    );
    ensure!(
        keys(&endpoints, "/locks/job").await? == before,
        "a refused release changed the key"
    );
    ensure!(holder.is_acquired(), "the holder must still hold");

    // The documented extra grant: write on the lock prefix. Then the release goes through.
    for args in [
        &["role", "add", "lockscope-release"][..],
        &[
            "role",
            "grant-permission",
            "--prefix=true",
            "lockscope-release",
            "readwrite",
            "/locks",
        ],
        &["user", "grant-role", "lockscope", "lockscope-release"],
    ] {
        etcdctl(&endpoints, args).await?;
    }
    let (status, answer) = ls.release(&id, Some(TOKEN), &body).await?;
    ensure!(status == 200, "{status} {answer}");
    ensure!(
        keys(&endpoints, "/locks/job").await?.is_empty(),
        "the key was not deleted"
    );
    eventually(WAIT, "the lock gone from cn", async || {
        let lock = ls.lock("cn", "/locks/job").await?;
        Ok(lock.is_none_or(|l| l.holders.is_empty()).then_some(()))
    })
    .await?;
    holder.interrupt().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tls_material_fails_its_own_source_only() -> Result<()> {
    let pki = Pki::new("etcd-good-ca")?;
    let other = Pki::new("etcd-other-ca")?;
    let etcd = EtcdServer::start_tls(&pki, &[]).await?;
    let endpoints = etcd.endpoints();
    let client = pki.client("lockscope", "lockscope")?;

    let mut good = source("good", &endpoints, &pki);
    good.tls_cert_file = Some(client.cert.clone());
    good.tls_key_file = Some(client.key.clone());
    // The server's certificate is checked against another CA.
    let mut wrong_ca = source("wrong-ca", &endpoints, &other);
    wrong_ca.tls_cert_file = Some(client.cert.clone());
    wrong_ca.tls_key_file = Some(client.key.clone());
    // No client certificate: etcd (`--client-cert-auth`) refuses the handshake.
    let no_cert = source("no-cert", &endpoints, &pki);
    let ls = Lockscope::start(Config {
        sources: section("etcd", vec![good, wrong_ca, no_cert]),
        ..Config::default()
    })
    .await?;

    let mut holder = EtcdctlLock::start(&endpoints, "/locks/tls", 30).await?;
    let key = holder.wait_acquired(WAIT).await?;
    ls.wait_lock("good", "/locks/tls", WAIT, "the holder", |l| {
        l.holders.len() == 1 && l.holders[0].node == key
    })
    .await?;
    let wrong = ls
        .source_where(WAIT, "wrong-ca", "the wrong CA's error", |s| {
            s.error.is_some()
        })
        .await?;
    let error = wrong.error.unwrap_or_default();
    eprintln!("wrong CA: {error}");
    ensure!(!wrong.up, "{error}");
    ensure!(
        error.contains(&other.ca_file().display().to_string()),
        "the error names the CA file: {error}"
    );
    let refused = ls
        .source_where(WAIT, "no-cert", "the certificate-less error", |s| {
            s.error.is_some()
        })
        .await?;
    let error = refused.error.unwrap_or_default();
    eprintln!("no client certificate: {error}");
    ensure!(
        !refused.up && error.contains("no tls_cert_file"),
        "the error says no client certificate was given: {error}"
    );
    let good = ls.source_where(WAIT, "good", "good up", |s| s.up).await?;
    ensure!(good.error.is_none() && good.locks >= 1, "{good:?}");
    holder.interrupt().await?;

    // Files that cannot work are config problems, every one listed (exit 2 at start).
    let garbage = pki.dir().join("garbage.crt");
    std::fs::write(&garbage, "not a certificate\n")?;
    let missing_key = pki.dir().join("missing.key");
    let text = format!(
        r#"
[[etcd]]
name = "good"
endpoints = ["{endpoint}"]
prefixes = ["/locks"]
tls_ca_file = "{ca}"
tls_cert_file = "{cert}"
tls_key_file = "{key}"

[[etcd]]
name = "bad"
endpoints = ["{endpoint}"]
prefixes = ["/locks"]
tls_ca_file = "{garbage}"
tls_cert_file = "{garbage}"
tls_key_file = "{missing_key}"
"#,
        endpoint = endpoints[0],
        ca = pki.ca_file().display(),
        cert = client.cert.display(),
        key = client.key.display(),
        garbage = garbage.display(),
        missing_key = missing_key.display(),
    );
    let problems = Config::parse(&text)
        .err()
        .context("bad TLS files must fail validation")?
        .0;
    eprintln!("config problems: {problems:#?}");
    ensure!(problems.len() == 3, "{problems:#?}");
    ensure!(
        problems.iter().all(|p| p.starts_with("etcd[1].tls_")),
        "only the bad source's files: {problems:#?}"
    );
    ensure!(
        problems[2].contains("missing.key") && problems[0].contains("garbage.crt"),
        "{problems:#?}"
    );
    Ok(())
}
