//! MariaDB and PostgreSQL with TLS required and verified, and lockscope's least privileges on
//! each (issue 21, item 4), against real servers with a server certificate from the test CA:
//! MariaDB with `require_secure_transport=ON`, PostgreSQL with `ssl=on` and `hostssl` lines
//! only. A lockscope user with exactly the grants README lists sees another user's lock over
//! verified TLS (MariaDB also with a client certificate a `REQUIRE X509` user must present); a
//! force release without the kill grant (`CONNECTION ADMIN` /
//! `pg_signal_backend`) is refused naming it, changing nothing, and works once granted. Bad TLS
//! on other sources of the same lockscope — a wrong CA, an expired server certificate, a
//! plain-text attempt — is a clear error on each, naming the CA file, while the good source
//! works; unusable files are config problems, all listed.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use lockscope::backends::database::{DbSourceConfig, TlsMode};
use lockscope::config::{section, Config, DbSource};
use lockscope_model::id::lock_id;
use lockscope_tests::harness::{eventually, with_admin, Lockscope};
use lockscope_tests::support::certs::Pki;
use lockscope_tests::support::mysql::{self, GetLock, MariaDb, Params};
use lockscope_tests::support::postgres::{self, Advisory, AdvisoryKey, Level, Postgres};
use serde_json::json;

const TOKEN: &str = "db-tls-admin-token";
const WAIT: Duration = Duration::from_secs(30);

fn source(name: &str, url: &str, ca: Option<&std::path::Path>) -> DbSourceConfig {
    let mut config = DbSourceConfig::new(name, url);
    config.poll_interval = Duration::from_millis(200);
    config.tls_ca_file = ca.map(|ca| ca.to_path_buf());
    config
}

/// The error of source `name` once it has one.
async fn source_error(ls: &Lockscope, name: &str) -> Result<String> {
    let source = ls
        .source_where(WAIT, name, &format!("{name}'s error"), |s| {
            s.error.is_some()
        })
        .await?;
    ensure!(!source.up || source.locks == 0, "{source:?}");
    let error = source.error.unwrap_or_default();
    eprintln!("{name}: {error}");
    Ok(error)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_over_verified_tls_with_least_privileges() -> Result<()> {
    let pki = Pki::new("mariadb-ca")?;
    let other = Pki::new("mariadb-other-ca")?;
    let server = MariaDb::start_tls(pki.ca_file(), &pki.server("mariadb")?, &[]).await?;
    // README's grants for watching: PROCESS (other sessions in PROCESSLIST, INNODB_TRX,
    // INNODB_LOCKS, METADATA_LOCK_INFO) and SELECT on the lock tables' schema.
    server
        .create_user(
            "lockscope",
            "ls-pass",
            &["PROCESS ON *.*", "SELECT ON app.*"],
        )
        .await?;
    server.create_user("worker", "w-pass", &[]).await?;
    // A user that must present a client certificate signed by the CA the server trusts.
    server
        .create_user("certified", "c-pass", &["PROCESS ON *.*"])
        .await?;
    server
        .exec("ALTER USER 'certified'@'%' REQUIRE X509")
        .await?;
    let port = server.port();
    let url = format!("mysql://lockscope:ls-pass@127.0.0.1:{port}/app");
    let verified = source("verified", &url, Some(pki.ca_file()));
    let wrong_ca = source("wrong-ca", &url, Some(other.ca_file()));
    let mut plain = source("plain", &url, None);
    plain.tls_mode = Some(TlsMode::Disable);
    let cert_url = format!("mysql://certified:c-pass@127.0.0.1:{port}/");
    let client = pki.client("lockscope-db", "lockscope")?;
    let mut with_cert = source("with-cert", &cert_url, Some(pki.ca_file()));
    with_cert.tls_cert_file = Some(client.cert.clone());
    with_cert.tls_key_file = Some(client.key.clone());
    let without_cert = source("without-cert", &cert_url, Some(pki.ca_file()));
    let dir = tempfile::tempdir()?;
    let ls = Lockscope::start(with_admin(
        Config {
            sources: section(
                "mysql",
                vec![verified, wrong_ca, plain, with_cert, without_cert]
                    .into_iter()
                    .map(DbSource::mysql),
            ),
            ..Config::default()
        },
        dir.path(),
        TOKEN,
    ))
    .await?;

    // Another user's GET_LOCK, over TLS.
    let mut holder = GetLock::start(
        mysql::connect(&server.url_for("worker", "w-pass")).await?,
        "nightly",
        10,
        Params::Literal,
    )
    .await?;
    holder.wait_acquired(WAIT).await?;
    let lock = ls
        .wait_lock("verified", "/get_lock/nightly", WAIT, "the holder", |l| {
            l.holders.len() == 1
        })
        .await?;
    ensure!(
        lock.holders[0].session == holder.connection_id().to_string(),
        "{lock:?}"
    );
    let good = ls
        .source_where(WAIT, "verified", "verified up", |s| s.up)
        .await?;
    ensure!(good.error.is_none(), "{good:?}");

    // The client certificate: sent, the REQUIRE X509 user gets in and sees the lock; not sent,
    // MariaDB refuses the login.
    ls.wait_lock(
        "with-cert",
        "/get_lock/nightly",
        WAIT,
        "seen with a client certificate",
        |l| l.holders.len() == 1,
    )
    .await?;
    let error = source_error(&ls, "without-cert").await?;
    ensure!(
        error.contains("Access denied for user 'certified'"),
        "{error}"
    );

    let error = source_error(&ls, "wrong-ca").await?;
    ensure!(
        error.contains(&other.ca_file().display().to_string()) && error.contains("verify-full"),
        "the error names the CA file and the mode: {error}"
    );
    ensure!(!error.contains("ls-pass"), "{error}");
    let error = source_error(&ls, "plain").await?;
    // MariaDB 10.11 answers a plain-text login to a TLS-only server as a wrong password.
    ensure!(
        error.contains("Access denied") && error.contains("require_secure_transport=ON"),
        "{error}"
    );

    // Force release kills the holder's connection: without CONNECTION ADMIN MariaDB refuses,
    // the grant is named, nothing changes.
    let id = lock_id("verified", "/get_lock/nightly");
    let body = json!({
        "holder": lock.holders[0].node,
        "version": lock.holders[0].version,
        "reason": "least privileges",
    });
    let (status, answer) = ls.release(&id, Some(TOKEN), &body).await?;
    eprintln!("release without CONNECTION ADMIN: {status} {answer}");
    ensure!(status == 502, "{status} {answer}");
    let text = answer.to_string();
    ensure!(
        text.contains("GRANT CONNECTION ADMIN ON *.*") && text.contains("nothing was changed"),
        "{answer}"
    );
    ensure!(holder.is_acquired(), "the holder must still hold");
    server
        .exec("GRANT CONNECTION ADMIN ON *.* TO 'lockscope'@'%'")
        .await?;
    let (status, answer) = ls.release(&id, Some(TOKEN), &body).await?;
    ensure!(status == 200, "{status} {answer}");
    eventually(WAIT, "the lock gone", async || {
        let lock = ls.lock("verified", "/get_lock/nightly").await?;
        Ok(lock.is_none_or(|l| l.holders.is_empty()).then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_over_verified_tls_with_least_privileges() -> Result<()> {
    let pki = Pki::new("postgres-ca")?;
    let server = Postgres::start_tls(pki.ca_file(), &pki.server("postgres")?, &[]).await?;
    let expired = Postgres::start_tls(pki.ca_file(), &pki.expired_server("old")?, &[]).await?;
    // README's grant for watching: pg_read_all_stats (other roles' rows of pg_stat_activity;
    // pg_locks is readable by every role).
    server
        .create_user("lockscope", "ls-pass", &["pg_read_all_stats"])
        .await?;
    server.create_user("worker", "w-pass", &[]).await?;
    let url = |port: u16| format!("postgres://lockscope:ls-pass@127.0.0.1:{port}/postgres");
    let verified = source("verified", &url(server.port()), Some(pki.ca_file()));
    let old = source("expired", &url(expired.port()), Some(pki.ca_file()));
    let mut plain = source("plain", &url(server.port()), None);
    plain.tls_mode = Some(TlsMode::Disable);
    let dir = tempfile::tempdir()?;
    let ls = Lockscope::start(with_admin(
        Config {
            sources: section(
                "postgres",
                vec![verified, old, plain]
                    .into_iter()
                    .map(DbSource::postgres),
            ),
            ..Config::default()
        },
        dir.path(),
        TOKEN,
    ))
    .await?;

    let mut holder =
        Advisory::open(postgres::connect(&server.url_for("worker", "w-pass"), "worker").await?)
            .await?;
    holder.lock(AdvisoryKey::Big(77), Level::Session, false);
    holder.wait_acquired(WAIT).await?;
    let path = "/advisory/postgres/77";
    let lock = ls
        .wait_lock("verified", path, WAIT, "the holder", |l| {
            l.holders.len() == 1
        })
        .await?;
    ensure!(
        lock.holders[0].session == holder.pid().to_string(),
        "{lock:?}"
    );
    let good = ls
        .source_where(WAIT, "verified", "verified up", |s| s.up)
        .await?;
    ensure!(good.error.is_none(), "{good:?}");
    // With pg_read_all_stats the holder's statement is shown, not hidden. Waited for, not read
    // once: read once, the session had no connection facts yet in a run with many tests at once.
    let pid = holder.pid().to_string();
    let worker = eventually(
        WAIT,
        "the worker's session with its connection facts",
        async || {
            let sessions = ls.sessions().await?;
            Ok(sessions
                .into_iter()
                .find(|s| s.source == "verified" && s.session == pid && s.connection.is_some()))
        },
    )
    .await?;
    let connection = worker.connection.as_ref().context("connection facts")?;
    ensure!(
        connection.user == "worker" && connection.statement.is_some(),
        "another role's statement is shown with pg_read_all_stats: {worker:?}"
    );

    let error = source_error(&ls, "expired").await?;
    ensure!(
        error.contains(&pki.ca_file().display().to_string())
            && error.to_lowercase().contains("expired"),
        "the error says expired and names the CA file: {error}"
    );
    let error = source_error(&ls, "plain").await?;
    ensure!(
        error.contains("no encryption") && error.contains("TLS connections only"),
        "{error}"
    );

    // Force release terminates the holder's backend: without pg_signal_backend PostgreSQL
    // refuses, the grant is named, nothing changes.
    let id = lock_id("verified", path);
    let body = json!({
        "holder": lock.holders[0].node,
        "version": lock.holders[0].version,
        "reason": "least privileges",
    });
    let (status, answer) = ls.release(&id, Some(TOKEN), &body).await?;
    eprintln!("release without pg_signal_backend: {status} {answer}");
    ensure!(status == 502, "{status} {answer}");
    let text = answer.to_string();
    ensure!(
        text.contains("GRANT pg_signal_backend") && text.contains("nothing was changed"),
        "{answer}"
    );
    ensure!(
        holder
            .try_lock(AdvisoryKey::Big(77), Level::Session, false)
            .await?,
        "the holder must still hold (re-entry succeeds)"
    );
    holder.unlock(AdvisoryKey::Big(77), false).await?;
    server.exec("GRANT pg_signal_backend TO lockscope").await?;
    let (status, answer) = ls.release(&id, Some(TOKEN), &body).await?;
    ensure!(status == 200, "{status} {answer}");
    eventually(WAIT, "the lock gone", async || {
        let lock = ls.lock("verified", path).await?;
        Ok(lock.is_none_or(|l| l.holders.is_empty()).then_some(()))
    })
    .await?;

    // Unusable TLS files: config problems, every one listed, only the bad source's.
    let garbage = pki.dir().join("garbage.crt");
    std::fs::write(
        &garbage,
        "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n",
    )?;
    let text = format!(
        r#"
[[postgres]]
name = "good"
url = "{good}"
tls_ca_file = "{ca}"

[[mysql]]
name = "bad"
url = "mysql://lockscope@127.0.0.1:3306/"
tls_ca_file = "{garbage}"
tls_cert_file = "{ca}"
tls_key_file = "{missing}"
tls_mode = "verify-ca"
"#,
        good = url(server.port()),
        ca = pki.ca_file().display(),
        garbage = garbage.display(),
        missing = pki.dir().join("missing.key").display(),
    );
    let problems = Config::parse(&text)
        .err()
        .context("bad TLS files must fail validation")?
        .0;
    eprintln!("config problems: {problems:#?}");
    ensure!(problems.len() == 2, "{problems:#?}");
    ensure!(
        problems[0].starts_with("mysql[0].tls_ca_file") && problems[0].contains("garbage.crt"),
        "{problems:#?}"
    );
    ensure!(
        problems[1].starts_with("mysql[0].tls_key_file") && problems[1].contains("missing.key"),
        "{problems:#?}"
    );
    Ok(())
}

/// The history store on a PostgreSQL that takes TLS only: verified against the test's CA, the
/// password from the environment (never in the URL); a store whose certificate the CA did not
/// sign is not used, and says why, while lockscope runs on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_store_over_verified_tls_with_its_password_from_the_environment() -> Result<()>
{
    let pki = Pki::new("store-ca")?;
    let other = Pki::new("other-ca")?;
    let server = Postgres::start_tls(pki.ca_file(), &pki.server("postgres")?, &[]).await?;
    server.create_user("history", "h-secret", &[]).await?;
    server
        .exec("CREATE DATABASE lockscope_history OWNER history")
        .await?;
    // Unique to this test: tests share the process environment.
    std::env::set_var("LOCKSCOPE_TEST_HISTORY_PASSWORD", "h-secret");
    let store = |ca: &std::path::Path| lockscope::store::StoreConfig {
        url: Some(format!(
            "postgres://history@127.0.0.1:{}/lockscope_history",
            server.port()
        )),
        password_env: Some("LOCKSCOPE_TEST_HISTORY_PASSWORD".into()),
        tls_ca_file: Some(ca.to_path_buf()),
        replica: Some("tls".into()),
        ..Default::default()
    };
    let config = Config {
        store: store(pki.ca_file()),
        ..Config::default()
    };
    ensure!(
        config.store.validate().is_empty(),
        "{:?}",
        config.store.validate()
    );
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(WAIT).await?;
    let (code, status) = ls.get_json("/api/v1/store").await?;
    ensure!(
        code == 200
            && status["backend"] == "postgres"
            && status["connected"] == true
            && status["writing"] == true
            && status["replica"] == "tls"
            && status["error"].is_null(),
        "{status}"
    );
    let (code, page) = ls.get_json("/api/v1/locks/r~nothing/events").await?;
    ensure!(code == 200 && page["events"] == json!([]), "{code} {page}");

    let refused = Lockscope::start(Config {
        store: store(other.ca_file()),
        ..Config::default()
    })
    .await?;
    let status = eventually(WAIT, "the refused certificate reported", async || {
        let (_, status) = refused.get_json("/api/v1/store").await?;
        Ok(status["error"]
            .as_str()
            .is_some_and(|e| !e.is_empty())
            .then_some(status))
    })
    .await?;
    let error = status["error"].as_str().unwrap_or_default();
    ensure!(
        status["connected"] == false && !error.contains("h-secret"),
        "{status}"
    );
    ensure!(
        error.contains("certificate") || error.contains("TLS") || error.contains("tls"),
        "{status}"
    );
    let (code, _) = refused.get_json("/api/v1/sources").await?;
    ensure!(code == 200, "the live view works without its store");
    Ok(())
}
