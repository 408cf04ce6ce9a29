//! Redis with TLS that requires client certificates (`--tls-auth-clients yes`) and lockscope as
//! an ACL user holding exactly the permissions README lists: watching and force-releasing a
//! Redisson lock and a token lock works, and with one permission less — a read command, the
//! keyspace channel, a command of the release script, a plain command — lockscope's error names
//! what is missing. Bad TLS material makes only its own source down (a client certificate the
//! server requires but is not given, a wrong CA, an expired server certificate), and file
//! problems are config problems naming the source, the key and the file.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use lockscope::config::{section, Config, RedisSourceConfig};
use lockscope_model::id::lock_id;
use lockscope_tests::harness::{eventually, with_admin, Lockscope};
use lockscope_tests::redis_recipes::{self as rr, RedissonClient};
use lockscope_tests::support::certs::{CertFiles, Pki};
use lockscope_tests::support::ports::free_port;
use lockscope_tests::support::redis::RedisServer;
use serde_json::json;

const TOKEN: &str = "oncall-token-redis-secure-0123456789";
const PASSWORD: &str = "ls-acl-secret";
const WAIT: Duration = Duration::from_secs(20);

/// README's ACL for a source watching `lock:*` on database 0 with `set_notify_config = false`
/// (the server publishes `Kg$lhzxe` itself), word for word after `ACL SETUSER lockscope`.
const ACL: &[&str] = &[
    "on",
    "resetkeys",
    "resetchannels",
    "-@all",
    // The lock keys and the companions lockscope reads with them.
    "~lock:*",
    "~redisson_lock_queue:*",
    "~redisson_lock_timeout:*",
    "~redisson_lock_token:*",
    "~*}:timeout",
    "~lock-signal:*",
    // Keyspace notifications (PSUBSCRIBE patterns must match literally) and the unlock
    // channels a force release publishes on.
    "&__keyspace@0__:lock:*",
    "&__keyspace@0__:redisson_lock_queue:*",
    "&__keyspace@0__:redisson_lock_timeout:*",
    "&__keyspace@0__:redisson_lock_token:*",
    "&__keyspace@0__:*}:timeout",
    "&redisson_lock__channel:*",
    "&redisson_rwlock:*",
    // Watching.
    "+config|get",
    "+scan",
    "+psubscribe",
    "+pubsub|numsub",
    "+client|list",
    "+script|load",
    "+evalsha",
    // What the read script runs.
    "+type",
    "+pttl",
    "+getrange",
    "+strlen",
    "+hlen",
    "+hscan",
    "+hgetall",
    "+lrange",
    "+zrange",
    // What the release script runs.
    "+get",
    "+del",
    "+hkeys",
    "+hget",
    "+publish",
    "+lindex",
    "+lpop",
    "+zscore",
    "+zrem",
    "+lpush",
    "+pexpire",
];

/// A Redis whose TLS port requires client certificates signed by `pki`'s CA, publishing the
/// keyspace events lockscope needs; the plain port is the test's own (default user).
async fn tls_redis(pki: &Pki, server: &CertFiles, tls_port: u16) -> Result<RedisServer> {
    let port = tls_port.to_string();
    let (cert, key, ca) = (
        server.cert.display().to_string(),
        server.key.display().to_string(),
        pki.ca_file().display().to_string(),
    );
    RedisServer::start_with(&[
        "--tls-port",
        &port,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "yes",
        "--notify-keyspace-events",
        "Kg$lhzxe",
    ])
    .await
}

fn tls_source(name: &str, port: u16, ca: &Pki, identity: Option<&CertFiles>) -> RedisSourceConfig {
    let url = format!("rediss://lockscope:{PASSWORD}@127.0.0.1:{port}");
    let mut source = RedisSourceConfig::new(name, &url, &["lock:*"]);
    source.watch.set_notify_config = false;
    source.watch.reconcile_interval = Duration::from_secs(2);
    source.watch.tls_ca_file = Some(ca.ca_file().to_path_buf());
    source.watch.tls_cert_file = identity.map(|c| c.cert.clone());
    source.watch.tls_key_file = identity.map(|c| c.key.clone());
    source
}

async fn set_acl(conn: &mut redis::aio::MultiplexedConnection, rules: &[&str]) -> Result<()> {
    let password = format!(">{PASSWORD}");
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("lockscope")
        .arg(&password)
        .arg(rules)
        .query_async::<()>(conn)
        .await
        .with_context(|| format!("ACL SETUSER lockscope {rules:?}"))
}

/// The source's error once it is down with something other than "connecting".
async fn source_error(ls: &Lockscope, name: &str) -> Result<String> {
    eventually(WAIT, &format!("{name} down with its reason"), async || {
        let sources = ls.sources().await?;
        Ok(sources
            .into_iter()
            .find(|s| s.name == name && !s.up)
            .and_then(|s| s.error)
            .filter(|e| e != "connecting"))
    })
    .await
}

/// README's ACL is enough to watch and force-release a Redisson lock and a token lock over TLS
/// with a client certificate; one permission less gives an error naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_user_over_tls_with_client_certificate() -> Result<()> {
    let pki = Pki::new("redis-secure-ca")?;
    let tls_port = free_port();
    let redis = tls_redis(&pki, &pki.server("redis")?, tls_port).await?;
    let identity = pki.client("lockscope", "lockscope")?;
    let mut admin = redis.connection().await?;
    set_acl(&mut admin, ACL).await?;

    let token = rr::random_token();
    ensure!(rr::token_lock_acquire(&mut admin, "lock:token-job", &token, 60_000).await?);
    let redisson = RedissonClient::new();
    redisson
        .rlock_try_lock(&mut admin, "lock:redisson-job", 7, 60_000)
        .await?;
    let field = redisson.lock_name(7);

    let dir = tempfile::tempdir()?;
    let config = with_admin(
        Config {
            sources: section(
                "redis",
                vec![tls_source("r", tls_port, &pki, Some(&identity))],
            ),
            ..Config::default()
        },
        dir.path(),
        TOKEN,
    );
    let ls = Lockscope::start(config).await?;
    for path in ["/lock:token-job", "/lock:redisson-job"] {
        ls.wait_lock("r", path, WAIT, "held, seen as the ACL user", |l| {
            l.holders.len() == 1
        })
        .await?;
    }
    let (status, body) = ls
        .release(
            &lock_id("r", "/lock:token-job"),
            Some(TOKEN),
            &json!({"holder": token, "reason": "acl test"}),
        )
        .await?;
    ensure!(status == 200, "token lock: {status} {body}");
    let (status, body) = ls
        .release(
            &lock_id("r", "/lock:redisson-job"),
            Some(TOKEN),
            &json!({"holder": field, "reentrancy": 1, "reason": "acl test"}),
        )
        .await?;
    ensure!(status == 200, "Redisson lock: {status} {body}");

    // A command of the release script taken away: the release is refused naming it.
    ensure!(rr::token_lock_acquire(&mut admin, "lock:token-job", &token, 60_000).await?);
    ls.wait_lock("r", "/lock:token-job", WAIT, "held again", |l| {
        l.holders.len() == 1
    })
    .await?;
    set_acl(&mut admin, &["-del"]).await?;
    let (status, body) = ls
        .release(
            &lock_id("r", "/lock:token-job"),
            Some(TOKEN),
            &json!({"holder": token, "reason": "acl test"}),
        )
        .await?;
    let text = body.to_string();
    ensure!(
        status >= 400 && text.to_lowercase().contains("noperm") && text.contains("DEL"),
        "release without DEL: {status} {body}"
    );
    set_acl(&mut admin, &["+del"]).await?;
    drop(ls);

    // One permission less while watching: each kind named in the source's error.
    let cases: &[(&[&str], &[&str], &str)] = &[
        (&["-pttl"], &["+pttl"], "PTTL"),
        (&["-scan"], &["+scan"], "scan"),
        (&["-evalsha"], &["+evalsha"], "evalsha"),
        (&["-config|get"], &["+config|get"], "config|get"),
        (
            &["resetchannels", "&__keyspace@0__:redisson_lock_queue:*"],
            &["resetchannels"],
            "PSUBSCRIBE __keyspace@0__:lock:*",
        ),
    ];
    for (less, restore, named) in cases {
        set_acl(&mut admin, less).await?;
        let ls = Lockscope::start(Config {
            sources: section(
                "redis",
                vec![tls_source("r", tls_port, &pki, Some(&identity))],
            ),
            ..Config::default()
        })
        .await?;
        let error = source_error(&ls, "r").await?;
        println!("{less:?}: {error}");
        ensure!(
            error.to_lowercase().contains("noperm") && error.contains(named),
            "{less:?}: the error names {named}: {error}"
        );
        drop(ls);
        set_acl(&mut admin, restore).await?;
        if less[0] == "resetchannels" {
            let channels: Vec<&str> = ACL.iter().copied().filter(|r| r.starts_with('&')).collect();
            set_acl(&mut admin, &channels).await?;
        }
    }
    Ok(())
}

/// A client certificate the server requires but is not given, a wrong CA, an expired server
/// certificate: each its own source's error, the good source up with its lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tls_makes_only_its_own_source_down() -> Result<()> {
    let pki = Pki::new("redis-good-ca")?;
    let other = Pki::new("redis-other-ca")?;
    let identity = pki.client("lockscope", "lockscope")?;
    let tls_port = free_port();
    let redis = tls_redis(&pki, &pki.server("redis")?, tls_port).await?;
    let expired_port = free_port();
    let expired = tls_redis(&pki, &pki.expired_server("redis-expired")?, expired_port).await?;
    for server in [&redis, &expired] {
        set_acl(&mut server.connection().await?, ACL).await?;
    }
    let mut admin = redis.connection().await?;
    ensure!(rr::token_lock_acquire(&mut admin, "lock:good", "t-good", 60_000).await?);

    let config = Config {
        sources: section(
            "redis",
            vec![
                tls_source("good", tls_port, &pki, Some(&identity)),
                tls_source("no-client-cert", tls_port, &pki, None),
                tls_source("wrong-ca", tls_port, &other, Some(&identity)),
                tls_source("expired", expired_port, &pki, Some(&identity)),
            ],
        ),
        ..Config::default()
    };
    let problems = config.validate();
    ensure!(problems.is_empty(), "{problems:#?}");
    let ls = Lockscope::start(config).await?;
    ls.wait_lock("good", "/lock:good", WAIT, "the good source's lock", |l| {
        l.holders.len() == 1
    })
    .await?;
    for (name, named) in [
        ("no-client-cert", "connect"),
        ("wrong-ca", "UnknownIssuer"),
        ("expired", "expired"),
    ] {
        let error = source_error(&ls, name).await?;
        ensure!(error.contains(named), "{name}: {error}");
        println!("{name}: {error}");
    }
    let sources = ls.sources().await?;
    ensure!(
        sources.iter().any(|s| s.name == "good" && s.up),
        "{sources:#?}"
    );
    Ok(())
}

/// TLS file problems are config problems, every one listed with the source's table and file.
#[test]
fn bad_tls_files_are_config_problems() -> Result<()> {
    let pki = Pki::new("redis-files")?;
    let identity = pki.client("lockscope", "lockscope")?;
    let other = pki.client("other", "other")?;
    let garbage = pki.dir().join("garbage.crt");
    std::fs::write(&garbage, "not a certificate at all")?;
    let mut missing_key = RedisSourceConfig::new("a", "rediss://127.0.0.1:6380", &["lock:*"]);
    missing_key.watch.tls_cert_file = Some(identity.cert.clone());
    missing_key.watch.tls_key_file = Some(pki.dir().join("missing.key"));
    let mut garbage_cert = RedisSourceConfig::new("b", "rediss://127.0.0.1:6380", &["lock:*"]);
    garbage_cert.watch.tls_ca_file = Some(garbage.clone());
    let mut mismatched = RedisSourceConfig::new("c", "rediss://127.0.0.1:6380", &["lock:*"]);
    mismatched.watch.tls_cert_file = Some(identity.cert.clone());
    mismatched.watch.tls_key_file = Some(other.key.clone());
    let config = Config {
        sources: section("redis", vec![missing_key, garbage_cert, mismatched]),
        ..Config::default()
    };
    let problems = config.validate();
    ensure!(problems.len() == 3, "{problems:#?}");
    ensure!(
        problems[0].contains("redis[0].tls_key_file") && problems[0].contains("missing.key"),
        "{problems:#?}"
    );
    ensure!(
        problems[1].contains("redis[1].tls_ca_file") && problems[1].contains("garbage.crt"),
        "{problems:#?}"
    );
    ensure!(
        problems[2].contains("redis[2]") && problems[2].contains("do not belong together"),
        "{problems:#?}"
    );
    Ok(())
}
