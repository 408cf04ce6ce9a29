//! Deploying lockscope (README "Deploying"): HTTPS with certificates made by the test and
//! rotated while it runs, lockscope behind a real nginx at a sub-path (API, event stream, UI
//! page, the client address nginx forwards in the audit log), and read, metrics and admin
//! credentials stored as bcrypt hashes. The watched source is a real Redis each time.

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use futures::StreamExt;
use lockscope::config::{section, AuthConfig, Config, HashedToken, RedisSourceConfig, TokenConfig};
use lockscope_model::id::lock_id;
use lockscope_model::wire::StreamEvent;
use lockscope_tests::harness::{eventually, with_admin, EventReader, Lockscope};
use lockscope_tests::support::certs::{CertFiles, Pki};
use lockscope_tests::support::nginx::Nginx;
use lockscope_tests::support::redis::RedisServer;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);
const ADMIN_TOKEN: &str = "deploy-admin-token-0123456789";

fn redis_config(redis: &RedisServer) -> Config {
    Config {
        sources: section(
            "redis",
            vec![RedisSourceConfig::new("r", &redis.url(), &["lock:*"])],
        ),
        ..Config::default()
    }
}

async fn hold(redis: &RedisServer, key: &str, token: &str) -> Result<()> {
    let mut conn = redis.connection().await?;
    let () = redis::cmd("SET")
        .arg(key)
        .arg(token)
        .arg("PX")
        .arg(120_000)
        .query_async(&mut conn)
        .await?;
    Ok(())
}

/// An HTTPS client trusting only `ca`, a new connection per request (so each one is a new
/// handshake and sees the certificate served now).
fn https_client(ca: &Path) -> Result<reqwest::Client> {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(ca)?)?;
    Ok(reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca)
        .tls_info(true)
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(10))
        .build()?)
}

fn der(cert: &Path) -> Result<Vec<u8>> {
    Ok(CertificateDer::from_pem_file(cert)
        .with_context(|| format!("read {}", cert.display()))?
        .as_ref()
        .to_vec())
}

/// The certificate a new connection to `url` is served (a new client each time: a client
/// resuming its TLS session is not sent the certificate again).
async fn served(ca: &Path, url: &str) -> Result<Vec<u8>> {
    let answer = https_client(ca)?.get(url).send().await?;
    ensure!(answer.status() == 200, "{url}: {}", answer.status());
    answer
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|info| info.peer_certificate())
        .map(<[u8]>::to_vec)
        .context("no TLS info")
}

/// Writes a new pair the way rotation tools do: each file written aside, then renamed over.
fn install(files: &CertFiles, cert: &Path, key: &Path) -> Result<()> {
    for (from, to) in [(&files.cert, cert), (&files.key, key)] {
        let aside = to.with_extension("new");
        std::fs::copy(from, &aside)?;
        std::fs::rename(&aside, to)?;
    }
    Ok(())
}

/// Watching `redis` over HTTPS with `files` installed as `tls.crt`/`tls.key` in `dir`: the
/// config and the two paths (where a rotation writes).
fn https_config(
    redis: &RedisServer,
    files: &CertFiles,
    dir: &Path,
) -> Result<(Config, std::path::PathBuf, std::path::PathBuf)> {
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    install(files, &cert, &key)?;
    let mut config = redis_config(redis);
    config.tls_cert_file = Some(cert.clone());
    config.tls_key_file = Some(key.clone());
    Ok((config, cert, key))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_rotates_certificates_without_a_restart_and_shuts_down_gracefully() -> Result<()> {
    let redis = RedisServer::start().await?;
    let pki = Pki::new("deploy-ca")?;
    let (first, second, third) = (pki.server("a")?, pki.server("b")?, pki.server("c")?);
    let dir = tempfile::tempdir()?;
    let (config, cert, key) = https_config(&redis, &first, dir.path())?;
    hold(&redis, "lock:tls", "t1").await?;
    let mut ls = Lockscope::start(config).await?;
    let addr = ls.base.trim_start_matches("http://").to_string();
    let base = format!("https://{addr}");
    ls.base = base.clone();
    ls.http = https_client(pki.ca_file())?;
    ls.wait_ready(WAIT).await?;
    ls.wait_lock("r", "/lock:tls", WAIT, "the lock over HTTPS", |l| {
        l.holders.len() == 1
    })
    .await?;
    // The CLI reaches it too, trusting the private CA it is told of.
    std::env::set_var("LOCKSCOPE_CA_FILE", pki.ca_file());
    let listed = lockscope::cli::list_locks(&base, &Default::default(), Default::default()).await?;
    ensure!(
        listed.iter().any(|l| l.path.contains("lock:tls")),
        "{listed:?}"
    );
    let client = https_client(pki.ca_file())?;
    let probe = format!("{base}/healthz");
    ensure!(served(pki.ca_file(), &probe).await? == der(&first.cert)?);
    // Plain HTTP on the HTTPS port gets no answer.
    let plain = reqwest::Client::new()
        .get(format!("http://{addr}/healthz"))
        .send()
        .await;
    ensure!(
        plain.as_ref().map(|r| r.status() != 200).unwrap_or(true),
        "plain HTTP answered: {plain:?}"
    );

    // Rotated: new connections get the new certificate, with no restart.
    install(&second, &cert, &key)?;
    let want = der(&second.cert)?;
    eventually(WAIT, "the rotated certificate served", async || {
        Ok((served(pki.ca_file(), &probe).await? == want).then_some(()))
    })
    .await?;

    // A bad new pair (the certificate of one, the key of another) is refused: the previous
    // certificate is still served, and the error is reported.
    std::fs::copy(&third.cert, &cert)?;
    let https = ls
        .running()
        .and_then(|r| r.https.clone())
        .context("https")?;
    let error = eventually(WAIT, "the mismatched pair refused", async || {
        ensure!(
            served(pki.ca_file(), &probe).await? == want,
            "a bad pair was served"
        );
        Ok(https.error())
    })
    .await?;
    ensure!(
        error.contains("tls_key_file") && error.contains("not the key"),
        "{error}"
    );
    ensure!(served(pki.ca_file(), &probe).await? == want);
    // Once the key follows, the pair is good again.
    std::fs::copy(&third.key, &key)?;
    let want = der(&third.cert)?;
    eventually(WAIT, "the completed pair served", async || {
        Ok((served(pki.ca_file(), &probe).await? == want).then_some(()))
    })
    .await?;

    // Graceful shutdown: an open event stream ends, every step finishes, the port closes.
    let stream = client
        .get(format!("{base}/api/v1/events"))
        .timeout(Duration::from_secs(3600))
        .send()
        .await?;
    ensure!(stream.status() == 200);
    let mut body = stream.bytes_stream();
    let first_chunk = body.next().await.context("the stream's first event")??;
    ensure!(String::from_utf8_lossy(&first_chunk).contains("snapshot"));
    ensure!(ls.shutdown().await?, "every step of the shutdown finished");
    let ended = tokio::time::timeout(WAIT, async {
        while let Some(chunk) = body.next().await {
            if chunk.is_err() {
                break;
            }
        }
    })
    .await;
    ensure!(ended.is_ok(), "the event stream did not end at shutdown");
    ensure!(
        tokio::net::TcpStream::connect(&addr).await.is_err(),
        "the HTTPS port {addr} still accepts connections"
    );
    Ok(())
}

/// A certificate installed before its validity starts (a rotation tool that runs ahead) is
/// refused and the previous one kept; once it is valid it is served, though its files did not
/// change again (before, a refused pair was only looked at again when its files changed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_installed_before_it_is_valid_is_served_once_it_is() -> Result<()> {
    let redis = RedisServer::start().await?;
    let pki = Pki::new("early-ca")?;
    let first = pki.server("first")?;
    let dir = tempfile::tempdir()?;
    let (config, cert, key) = https_config(&redis, &first, dir.path())?;
    let ls = Lockscope::start(config).await?;
    let addr = ls.base.trim_start_matches("http://").to_string();
    let probe = format!("https://{addr}/healthz");
    ensure!(served(pki.ca_file(), &probe).await? == der(&first.cert)?);
    let from = time::OffsetDateTime::now_utc() + time::Duration::seconds(4);
    let early = pki.server_valid_from("early", from)?;
    install(&early, &cert, &key)?;
    let https = ls
        .running()
        .and_then(|r| r.https.clone())
        .context("https")?;
    let error = eventually(WAIT, "the early certificate refused", async || {
        ensure!(
            served(pki.ca_file(), &probe).await? == der(&first.cert)?,
            "a certificate not yet valid was served"
        );
        Ok(https.error())
    })
    .await?;
    ensure!(error.contains("not valid before"), "{error}");
    let want = der(&early.cert)?;
    eventually(WAIT, "the certificate served once valid", async || {
        Ok((served(pki.ca_file(), &probe).await? == want).then_some(()))
    })
    .await?;
    ensure!(https.error().is_none(), "{:?}", https.error());
    Ok(())
}

#[test]
fn bad_certificate_files_are_configuration_errors_naming_the_file() -> Result<()> {
    let pki = Pki::new("deploy-ca")?;
    let (good, other, expired) = (
        pki.server("good")?,
        pki.server("other")?,
        pki.expired_server("old")?,
    );
    let garbage = pki.dir().join("garbage.crt");
    std::fs::write(&garbage, "not a certificate")?;
    let missing = pki.dir().join("missing.key");
    let base = "[[redis]]\nname = \"r\"\nurl = \"redis://127.0.0.1:1\"\npatterns = [\"lock:*\"]\n";
    let parse = |cert: &Path, key: &Path, extra: &str| {
        Config::parse(&format!(
            "tls_cert_file = {:?}\ntls_key_file = {:?}\n{base}{extra}",
            cert.display().to_string(),
            key.display().to_string()
        ))
    };
    ensure!(parse(&good.cert, &good.key, "").is_ok());
    let cases: [(&Path, &Path, String); 4] = [
        (
            &good.cert,
            &missing,
            format!("tls_key_file {}: cannot read", missing.display()),
        ),
        (
            &garbage,
            &good.key,
            format!("tls_cert_file {}: holds no certificate", garbage.display()),
        ),
        (
            &good.cert,
            &other.key,
            format!("tls_key_file {} is not the key", other.key.display()),
        ),
        (
            &expired.cert,
            &expired.key,
            format!(
                "tls_cert_file {}: the certificate expired",
                expired.cert.display()
            ),
        ),
    ];
    for (cert, key, want) in cases {
        let err = parse(cert, key, "").err().context("accepted")?.to_string();
        ensure!(err.contains(&want), "wanted {want:?} in:\n{err}");
    }
    // Listed with every other problem of the file.
    let err = parse(
        &expired.cert,
        &expired.key,
        "[http]\nbase_path = \"lockscope\"\ntrusted_proxies = [\"10.0.0.0/33\"]\nbogus = 1\n\
         [http.read_auth]\nbasic_auth_users = { alice = \"clear-password\" }\n\
         [admin]\ntokens = [{ name = \"a\", token_hash = \"nope\" }]\n",
    )
    .err()
    .context("accepted")?;
    let text = err.to_string();
    for want in [
        "the certificate expired",
        "http.base_path \"lockscope\"",
        "http.trusted_proxies: \"10.0.0.0/33\"",
        "unknown key http.\"bogus\"",
        "http.read_auth.basic_auth_users.alice is not a bcrypt hash",
        "admin.tokens[0].token_hash is not a bcrypt hash",
    ] {
        ensure!(text.contains(want), "wanted {want:?} in:\n{text}");
    }
    ensure!(
        !text.contains("clear-password"),
        "a secret was printed:\n{text}"
    );
    Ok(())
}

/// A client that connects from `source` (another loopback address), as a browser elsewhere.
fn client_from(source: &str) -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .local_address(source.parse::<IpAddr>()?)
        .timeout(Duration::from_secs(10))
        .build()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_nginx_at_a_sub_path_with_the_forwarded_client_audited() -> Result<()> {
    let redis = RedisServer::start().await?;
    let dist = tempfile::tempdir()?;
    // A stand-in for the built UI: what is checked is how its page is served.
    std::fs::write(
        dist.path().join("index.html"),
        "<!doctype html><html><head><base href=\"/\"></head><body></body></html>",
    )?;
    std::fs::write(dist.path().join("style.css"), "body{}")?;
    let store = tempfile::tempdir()?;
    let mut config = with_admin(redis_config(&redis), store.path(), ADMIN_TOKEN);
    config.http.base_path = "/lockscope".into();
    config.http.trusted_proxies = vec!["127.0.0.1".into()];
    config.ui.assets_dir = Some(dist.path().to_path_buf());
    hold(&redis, "lock:a", "token-a").await?;
    hold(&redis, "lock:b", "token-b").await?;
    hold(&redis, "lock:c", "token-c").await?;
    let mut ls = Lockscope::start(config).await?;
    let direct = ls.base.clone();
    let nginx = Nginx::start(direct.trim_start_matches("http://")).await?;
    // Everything below goes through nginx, from a browser-side address of its own.
    ls.base = format!("{}/lockscope", nginx.url());
    ls.http = client_from("127.0.0.2")?;
    ls.wait_ready(WAIT).await.with_context(|| nginx.log())?;
    ls.wait_lock("r", "/lock:a", WAIT, "a lock through nginx", |l| {
        l.holders.len() == 1
    })
    .await?;
    for (path, want) in [
        ("/lockscope/metrics", 200),
        ("/lockscope/healthz", 200),
        ("/lockscope/api/v1/sources", 200),
        ("/lockscope/assets/style.css", 200),
        ("/api/v1/sources", 404),
    ] {
        let status = ls
            .http
            .get(format!("{}{path}", nginx.url()))
            .send()
            .await?
            .status();
        ensure!(status == want, "{path}: {status}, wanted {want}");
    }
    // Outside the base path lockscope answers nothing either.
    let status = reqwest::get(format!("{direct}/api/v1/sources"))
        .await?
        .status();
    ensure!(status == 404, "unprefixed path: {status}");
    let page = ls
        .http
        .get(format!("{}/lockscope/", nginx.url()))
        .send()
        .await?;
    ensure!(page.status() == 200);
    let page = page.text().await?;
    ensure!(page.contains("<base href=\"/lockscope/\">"), "{page}");

    // The event stream through nginx: a change arrives at once, not when a buffer fills.
    let mut events = EventReader::connect(&ls.base).await?;
    let (kind, _) = events
        .next(WAIT)
        .await
        .context("the snapshot through nginx")?;
    ensure!(kind == "snapshot", "{kind}");
    hold(&redis, "lock:late", "token-late").await?;
    let seen = eventually(WAIT, "the new lock's event through nginx", async || {
        let (_, event) = events.next(WAIT).await?;
        Ok(match event {
            StreamEvent::Lock { lock } if lock.id == lock_id("r", "/lock:late") => Some(()),
            _ => None,
        })
    })
    .await;
    seen.with_context(|| nginx.log())?;

    // A force release through nginx is audited with the browser's address, even when the
    // browser forges one of its own; a forged header sent straight to lockscope is ignored.
    let release = |client: reqwest::Client, url: String, holder: &'static str, forged: bool| async move {
        let mut request = client
            .post(url)
            .bearer_auth(ADMIN_TOKEN)
            .json(&json!({"holder": holder, "reason": "deploy test"}));
        if forged {
            request = request.header("X-Forwarded-For", "198.51.100.66");
        }
        let answer = request.send().await?;
        let status = answer.status().as_u16();
        anyhow::Ok((status, answer.json::<Value>().await?))
    };
    let via_nginx = |key: &str| format!("{}/api/v1/locks/{}/release", ls.base, lock_id("r", key));
    let (status, answer) = release(ls.http.clone(), via_nginx("/lock:a"), "token-a", false).await?;
    ensure!(status == 200, "{answer}");
    let (status, answer) = release(ls.http.clone(), via_nginx("/lock:b"), "token-b", true).await?;
    ensure!(status == 200, "{answer}");
    let straight = format!(
        "{direct}/lockscope/api/v1/locks/{}/release",
        lock_id("r", "/lock:c")
    );
    let (status, answer) = release(client_from("127.0.0.3")?, straight, "token-c", true).await?;
    ensure!(status == 200, "{answer}");
    let audit = ls.audit_log().await?;
    let client_of = |key: &str| {
        audit
            .iter()
            .find(|r| r.lock_id == lock_id("r", key) && r.outcome == "released")
            .map(|r| r.client.clone())
    };
    ensure!(
        client_of("/lock:a").as_deref() == Some("127.0.0.2"),
        "{audit:?}"
    );
    ensure!(
        client_of("/lock:b").as_deref() == Some("127.0.0.2"),
        "{audit:?}"
    );
    ensure!(
        client_of("/lock:c").as_deref() == Some("127.0.0.3"),
        "{audit:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_metrics_and_admin_credentials_stored_as_bcrypt_hashes() -> Result<()> {
    let redis = RedisServer::start().await?;
    let store = tempfile::tempdir()?;
    let dist = tempfile::tempdir()?;
    std::fs::write(dist.path().join("index.html"), "<html><head></head></html>")?;
    std::fs::write(dist.path().join("style.css"), "body{}")?;
    let hash = |secret: &str| bcrypt::hash(secret, 4).map_err(anyhow::Error::from);
    // One hash made as README says, with htpasswd, to show that command's output is taken.
    let htpasswd = std::process::Command::new("htpasswd")
        .args(["-nbBC", "4", "", "alice-password"])
        .output()
        .context("htpasswd (scripts/install-deps installs apache2-utils)")?;
    let alice_hash = String::from_utf8(htpasswd.stdout)?
        .trim()
        .trim_start_matches(':')
        .to_string();
    let mut config = with_admin(
        redis_config(&redis),
        store.path(),
        "unused-clear-token-0123",
    );
    config.ui.assets_dir = Some(dist.path().to_path_buf());
    config.admin.tokens = vec![TokenConfig {
        name: "oncall".into(),
        token_hash: Some(hash(ADMIN_TOKEN)?),
        ..TokenConfig::default()
    }];
    config.admin.max_failed_auth_per_minute = 4;
    config.http.read_auth = Some(AuthConfig {
        bearer_tokens: vec![HashedToken {
            name: "grafana".into(),
            token_hash: hash("grafana-read+token/0123")?,
        }],
        basic_auth_users: [("alice".to_string(), alice_hash)].into(),
    });
    config.http.metrics_auth = Some(AuthConfig {
        basic_auth_users: [("prometheus".to_string(), hash("scrape-password")?)].into(),
        ..AuthConfig::default()
    });
    hold(&redis, "lock:x", "token-x").await?;
    let ls = Lockscope::start(config).await?;
    let url = |path: &str| format!("{}{path}", ls.base);
    #[derive(Clone, Copy)]
    enum Cred {
        None,
        Bearer(&'static str),
        Basic(&'static str, &'static str),
    }
    let get = |path: String, cred: Cred| {
        let http = ls.http.clone();
        async move {
            let mut request = http.get(path);
            request = match cred {
                Cred::None => request,
                Cred::Bearer(t) => request.bearer_auth(t),
                Cred::Basic(u, p) => request.basic_auth(u, Some(p)),
            };
            let answer = request.send().await?;
            let status = answer.status().as_u16();
            let challenge: Vec<String> = answer
                .headers()
                .get_all("www-authenticate")
                .iter()
                .filter_map(|v| v.to_str().ok().map(str::to_string))
                .collect();
            let body = answer.text().await?;
            anyhow::Ok((status, challenge, body))
        }
    };
    let alice = Cred::Basic("alice", "alice-password");
    eventually(WAIT, "the lock, read as alice", async || {
        let (status, _, body) = get(url("/api/v1/locks"), alice).await?;
        ensure!(status == 200, "{status} {body}");
        Ok(body.contains("lock:x").then_some(()))
    })
    .await?;
    // `lockscope locks --user alice` (password from LOCKSCOPE_PASSWORD) reads as she does.
    let as_alice = lockscope::cli::ReadAuth::Basic {
        user: "alice",
        password: "alice-password",
    };
    let listed = lockscope::cli::list_locks(&ls.base, &Default::default(), as_alice).await?;
    ensure!(
        listed.iter().any(|l| l.path.contains("lock:x")),
        "{listed:?}"
    );
    let admin_in_url = format!("/api/v1/locks?access_token={ADMIN_TOKEN}");
    let checks: Vec<(&str, Cred, u16)> = vec![
        (
            "/api/v1/locks",
            Cred::Bearer("grafana-read+token/0123"),
            200,
        ),
        ("/api/v1/locks", Cred::Bearer(ADMIN_TOKEN), 200),
        (
            "/api/v1/locks?access_token=grafana-read%2Btoken%2F0123",
            Cred::None,
            200,
        ),
        ("/", alice, 200),
        ("/assets/style.css", Cred::None, 200),
        (
            "/metrics",
            Cred::Basic("prometheus", "scrape-password"),
            200,
        ),
        (
            "/healthz",
            Cred::Basic("prometheus", "scrape-password"),
            200,
        ),
        (&admin_in_url, Cred::None, 403),
        ("/api/v1/locks", Cred::None, 401),
        ("/", Cred::None, 401),
        ("/metrics", Cred::None, 401),
        ("/metrics", alice, 401),
    ];
    for (path, cred, want) in checks {
        let (status, challenge, body) = get(url(path), cred).await?;
        ensure!(status == want, "{path}: {status}, wanted {want}: {body}");
        if status == 401 {
            let error: Value = serde_json::from_str(&body).context("a JSON body")?;
            ensure!(error["error"].is_string(), "{body}");
            ensure!(
                challenge.iter().any(|c| c.starts_with("Basic realm=")),
                "{path}: a browser is asked for a user: {challenge:?}"
            );
        }
    }
    // The event stream authenticates as the page does (basic credentials the browser keeps).
    let events = ls
        .http
        .get(url("/api/v1/events"))
        .basic_auth("alice", Some("alice-password"))
        .send()
        .await?;
    ensure!(events.status() == 200);
    drop(events);

    // A failed admin attempt is audited.
    let (status, _) = ls
        .release(
            &lock_id("r", "/lock:x"),
            Some("not-the-admin-token-0123"),
            &json!({"holder": "token-x", "reason": "guess"}),
        )
        .await?;
    ensure!(status == 403, "{status}");
    let audit: Value = ls
        .http
        .get(url("/api/v1/audit"))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await?
        .json()
        .await?;
    ensure!(
        audit["audit"]
            .as_array()
            .is_some_and(|a| a.iter().any(|r| r["outcome"] == "forbidden")),
        "{audit}"
    );
    // Wrong credentials use up the address's budget (4 a minute, one taken by the release
    // above); past it new credentials wait, while one that passed before (alice's, verified
    // and remembered) is still let in: guessing gains nothing from it, and a user who shares
    // an address with a guesser is not locked out.
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let (status, _, _) = get(url("/api/v1/locks"), Cred::Basic("alice", "wrong")).await?;
        statuses.push(status);
    }
    ensure!(
        statuses.contains(&401) && statuses.last() == Some(&429),
        "{statuses:?}"
    );
    let (status, _, body) = get(url("/api/v1/locks"), Cred::Basic("alice", "other")).await?;
    ensure!(status == 429, "{status} {body}");
    let (status, _, body) = get(url("/api/v1/locks"), alice).await?;
    ensure!(status == 200, "{status} {body}");
    Ok(())
}

/// README's "Deploying" shows the nginx location these tests run, word for word.
#[test]
fn readme_shows_the_nginx_snippet_the_tests_use() -> Result<()> {
    let snippet = std::fs::read_to_string(lockscope_tests::support::nginx::snippet_path())?;
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))?;
    ensure!(
        readme.contains(&format!("```nginx\n{snippet}```")),
        "README.md does not show deploy/nginx-lockscope.conf as it is"
    );
    Ok(())
}
