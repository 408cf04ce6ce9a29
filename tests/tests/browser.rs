//! End-to-end UI tests: Debian's Chromium, driven by playwright-core (`tests/browser/*.mjs`),
//! against lockscope serving the built web UI while it watches a real 3-node ZooKeeper ensemble
//! and a real Redis that real lock clients use.
//!
//! The Node script drives the browser and asserts; this side owns the servers and the lock
//! clients. They talk over a line protocol: the script prints `NEED <action>` when it needs the
//! world changed, this side does it and answers `GO`. Screenshots land in
//! `target/browser-artifacts/`.
//!
//! Needs `scripts/build-ui` (the UI) and `npm ci` in `tests/browser` (playwright-core);
//! `scripts/test` runs both first.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use lockscope::config::{section, Config, RedisSourceConfig};
use lockscope_tests::harness::{zk_source, Lockscope};
use lockscope_tests::recipes::{SeedClient, SeedRecipe, Ticket};
use lockscope_tests::redis_recipes::{
    random_token, token_lock_acquire, token_lock_release, RedissonClient,
};
use lockscope_tests::support::proxy::TcpProxy;
use lockscope_tests::support::redis::RedisServer;
use lockscope_tests::support::zk::ZkEnsemble;
use lockscope_tests::unique_root;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const ADMIN_TOKEN: &str = "browser-admin-token-0123456789";
/// With `+/=:` in it: the dashboard percent-encodes it into the event stream's URL and lockscope
/// must decode it there (issue 18, item 8).
const READ_TOKEN: &str = "browser+read/token=01:23456789";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Checks what the browser test needs was built, with a message that says how. The page is
/// the UI built into lockscope (as a release serves it), so it must have been built before
/// this test was compiled.
fn prerequisites() -> Result<PathBuf> {
    let root = workspace();
    if !lockscope::http::ui::embedded_build() {
        bail!(
            "lockscope was compiled without its web UI ({} was not built): run scripts/build-ui, \
             then the tests again (scripts/test does)",
            root.join("frontend/dist").display()
        );
    }
    let browser = root.join("tests/browser");
    if !browser.join("node_modules/playwright-core").exists() {
        bail!(
            "playwright-core is not installed: run `npm ci` in {} (scripts/test does)",
            browser.display()
        );
    }
    if !Path::new("/usr/bin/chromium").exists() {
        bail!("/usr/bin/chromium is missing: run scripts/install-deps");
    }
    Ok(browser)
}

fn artifacts() -> PathBuf {
    workspace().join("target/browser-artifacts")
}

/// A browser script run by Node, and its side of the line protocol.
struct Script {
    name: String,
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    deadline: tokio::time::Instant,
}

impl Script {
    /// Starts `node <browser>/<name> <args[0]> <artifacts> <args[1..]>`.
    async fn spawn(browser: &Path, name: &str, args: &[&str]) -> Result<Script> {
        std::fs::create_dir_all(artifacts())?;
        let mut command = tokio::process::Command::new("node");
        command
            .arg(browser.join(name))
            .arg(args[0])
            .arg(artifacts());
        command.args(&args[1..]);
        let mut child = command
            .current_dir(browser)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("cannot start node")?;
        let stdin = child.stdin.take().context("stdin")?;
        let lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
        Ok(Script {
            name: name.to_string(),
            child,
            stdin,
            lines,
            deadline: tokio::time::Instant::now() + Duration::from_secs(300),
        })
    }

    /// Echoes the script's output until it asks for something (`Some(action)`) or ends (`None`).
    async fn next_need(&mut self) -> Result<Option<String>> {
        loop {
            let line = tokio::time::timeout_at(self.deadline, self.lines.next_line())
                .await
                .with_context(|| format!("{} did not finish in 300 s", self.name))??;
            let Some(line) = line else { return Ok(None) };
            eprintln!("[{}] {line}", self.name);
            if let Some(need) = line.strip_prefix("NEED ") {
                return Ok(Some(need.trim().to_string()));
            }
        }
    }

    async fn go(&mut self) -> Result<()> {
        self.stdin.write_all(b"GO\n").await?;
        Ok(self.stdin.flush().await?)
    }

    async fn finish(mut self) -> Result<()> {
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await??;
        if !status.success() {
            bail!(
                "{} failed ({status}); see the [{}] lines above and {}",
                self.name,
                self.name,
                artifacts().display()
            );
        }
        Ok(())
    }
}

/// Holds a ZooKeeper lock and keeps `waiters` clients queued (each blocked in its recipe, so its
/// watch is really set).
/// Writes who a participant is into its node, as kazoo's `Lock(identifier=…)` does:
/// `<lock name>-worker-<n>`, n = its place in the order the test queued them.
async fn identify(client: &SeedClient, node: &str, path: &str, n: usize) -> Result<()> {
    let name = path.rsplit('/').next().unwrap_or_default();
    client
        .client()
        .set_data(node, format!("{name}-worker-{n}").as_bytes(), None)
        .await
        .with_context(|| format!("setData {node}"))?;
    Ok(())
}

struct ZkQueue {
    clients: Vec<SeedClient>,
    tickets: Vec<Ticket>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl ZkQueue {
    async fn start(
        connect: &str,
        path: &str,
        recipe: &SeedRecipe,
        waiters: usize,
    ) -> Result<ZkQueue> {
        let mut queue = ZkQueue {
            clients: Vec::new(),
            tickets: Vec::new(),
            tasks: Vec::new(),
        };
        let holder = SeedClient::connect(connect, Duration::from_secs(10)).await?;
        let held = lockscope_tests::recipes::lock(&holder, path, recipe).await?;
        identify(&holder, &held.node, path, 0).await?;
        queue.clients.push(holder);
        queue.tickets.push(held);
        for _ in 0..waiters {
            queue.add_waiter(connect, path, recipe).await?;
        }
        Ok(queue)
    }

    async fn add_waiter(&mut self, connect: &str, path: &str, recipe: &SeedRecipe) -> Result<()> {
        let client = SeedClient::connect(connect, Duration::from_secs(10)).await?;
        let mut ticket = client.enqueue(path, recipe).await?;
        identify(&client, &ticket.node, path, self.clients.len()).await?;
        let waiting = client.clone();
        self.tasks.push(tokio::spawn(async move {
            let _ = ticket.acquired(&waiting).await;
            // Holding from here on: keep the node until the test ends.
            std::future::pending::<()>().await;
        }));
        self.clients.push(client);
        Ok(())
    }
}

impl Drop for ZkQueue {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_in_chromium() -> Result<()> {
    let browser = prerequisites()?;
    let zk = ZkEnsemble::start(3).await?;
    let redis = RedisServer::start().await?;
    let connect = zk.connect_string();
    let root = unique_root("ui");
    // lockscope reaches Redis through a relay that the script has go silent (`silence`) and
    // heal (`heal`): its rows say "source down · last seen at …" meanwhile.
    let relay = TcpProxy::start(std::net::SocketAddr::from(([127, 0, 0, 1], redis.port()))).await?;
    let mut cache = RedisSourceConfig::new(
        "cache",
        &redis.url().replace(
            &format!("127.0.0.1:{}", redis.port()),
            &relay.addr().to_string(),
        ),
        &["lock:*", "orders:*"],
    );
    cache.watch.silence_limit = Duration::from_secs(2);

    let mut config = Config {
        sources: [
            section("zookeeper", vec![zk_source("zk", &connect, &[&root])]),
            section("redis", vec![cache]),
        ]
        .concat(),
        ..Config::default()
    };
    let store = tempfile::tempdir()?;
    config.admin.enabled = true;
    config.admin.tokens = vec![lockscope::config::TokenConfig {
        name: "browser".into(),
        token: Some(ADMIN_TOKEN.into()),
        token_env: None,
        token_hash: None,
    }];
    config.store.path = Some(store.path().join("lockscope.db"));
    // Waits past a second are stuck (a warning; critical only past an hour); holds are not.
    config.stuck = lockscope::config::StuckConfig {
        wait_warning: Some(Duration::from_secs(1)),
        wait_critical: Some(Duration::from_secs(3600)),
        hold_warning: Some(Duration::from_secs(3600)),
        hold_critical: Some(Duration::from_secs(7200)),
        ..Default::default()
    };
    let mut ls = Lockscope::start(config.clone()).await?;
    ls.wait_ready(Duration::from_secs(30)).await?;
    let addr = ls.base.trim_start_matches("http://").to_string();

    // ZooKeeper: a fair queue (each waiter watches its predecessor) and a herd (children watch).
    let fair = SeedRecipe::QueuePredecessor {
        prefix: "lock-".into(),
    };
    let herd = SeedRecipe::QueueChildrenWatch {
        prefix: "lock-".into(),
    };
    let orders = format!("{root}/orders");
    let mut orders_q = ZkQueue::start(&connect, &orders, &fair, 2).await?;
    let _herd_q = ZkQueue::start(&connect, &format!("{root}/herd"), &herd, 3).await?;
    // Two sessions that wait on each other's lock: a deadlock the sessions page must show.
    let a = SeedClient::connect(&connect, Duration::from_secs(10)).await?;
    let b = SeedClient::connect(&connect, Duration::from_secs(10)).await?;
    let (d1, d2) = (format!("{root}/ledger"), format!("{root}/inventory"));
    let _a_holds = lockscope_tests::recipes::lock(&a, &d1, &fair).await?;
    let _b_holds = lockscope_tests::recipes::lock(&b, &d2, &fair).await?;
    let _a_waits = a.enqueue(&d2, &fair).await?;
    let _b_waits = b.enqueue(&d1, &fair).await?;
    // Redis: a Redisson lock re-entered twice, and a python-redis-lock token with a TTL.
    let mut conn = redis.connection().await?;
    let redisson = RedissonClient::new();
    for _ in 0..2 {
        redisson
            .rlock_try_lock(&mut conn, "orders:checkout", 1, 120_000)
            .await?;
    }
    let payments = random_token();
    ensure!(
        token_lock_acquire(&mut conn, "lock:payments", &payments, 300_000).await?,
        "payments lock taken"
    );

    ls.wait_lock(
        "zk",
        &orders,
        Duration::from_secs(15),
        "orders queue with watches",
        |l| l.waiters.len() == 2 && l.waiters.iter().all(|w| w.watches.is_some()),
    )
    .await?;

    let mut script =
        Script::spawn(&browser, "ui.test.mjs", &[&ls.base, &root, ADMIN_TOKEN]).await?;
    while let Some(need) = script.next_need().await? {
        match need.as_str() {
            "waiter" => orders_q.add_waiter(&connect, &orders, &fair).await?,
            "vanish" => {
                let released = token_lock_release(&mut conn, "lock:payments", &payments).await?;
                ensure!(released, "payments was not held with its token");
            }
            "extra" => {
                let token = random_token();
                ensure!(
                    token_lock_acquire(&mut conn, "lock:extra", &token, 300_000).await?,
                    "lock:extra taken"
                );
            }
            "silence" => {
                relay.blackhole();
                ls.source_where(Duration::from_secs(30), "cache", "cache not up", |s| {
                    !s.up && s.last_seen_ms.is_some()
                })
                .await?;
            }
            "heal" => {
                relay.pass();
                ls.source_where(Duration::from_secs(30), "cache", "cache up again", |s| {
                    s.up && s.last_seen_ms.is_none()
                })
                .await?;
            }
            "stop" => ls.stop(),
            "start" => ls = Lockscope::start_at(config.clone(), &addr).await?,
            other => bail!("the browser script needs {other:?}, which this test cannot do"),
        }
        script.go().await?;
    }
    script.finish().await?;
    let artifacts = artifacts();
    for shot in [
        "overview-light.png",
        "overview-dark.png",
        "lock-herd.png",
        "lock-orders.png",
        "sessions.png",
        "lock-gone.png",
    ] {
        let meta = std::fs::metadata(artifacts.join(shot))
            .with_context(|| format!("screenshot {shot}"))?;
        assert!(meta.len() > 10_000, "{shot} is suspiciously small");
    }
    Ok(())
}

/// 100,000 locks: the overview shows its first page, filters, sorts and pages forward through
/// the server, keeps all of it in the URL, and still shows a change live. The script prints
/// what it measured (`figure:` lines); it asserts behaviour, not speed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overview_with_100k_locks_in_chromium() -> Result<()> {
    let browser = prerequisites()?;
    let redis = RedisServer::start().await?;
    let mut conn = redis.connection().await?;
    const COUNT: usize = 100_000;
    for chunk in (0..COUNT).collect::<Vec<_>>().chunks(5_000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("SET")
                .arg(format!("lock:bulk:{i:06}"))
                .arg(random_token())
                .arg("PX")
                .arg(600_000)
                .ignore();
        }
        let () = pipe.query_async(&mut conn).await?;
    }
    let mut config = Config {
        sources: section(
            "redis",
            vec![RedisSourceConfig::new("cache", &redis.url(), &["lock:*"])],
        ),
        ..Config::default()
    };
    // Reads need a token here: the page must ask for it and then work with it.
    config.admin.read_tokens = vec![lockscope::config::TokenConfig {
        name: "viewer".into(),
        token: Some(READ_TOKEN.into()),
        token_env: None,
        token_hash: None,
    }];
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(Duration::from_secs(60)).await?;

    let count = COUNT.to_string();
    let mut script = Script::spawn(
        &browser,
        "overview-100k.test.mjs",
        &[&ls.base, &count, READ_TOKEN],
    )
    .await?;
    while let Some(need) = script.next_need().await? {
        match need.as_str() {
            "add" => {
                let () = redis::cmd("SET")
                    .arg("lock:bulk:late")
                    .arg(random_token())
                    .arg("PX")
                    .arg(600_000)
                    .query_async(&mut conn)
                    .await?;
            }
            other => bail!("the browser script needs {other:?}, which this test cannot do"),
        }
        script.go().await?;
    }
    script.finish().await
}

/// Behind a real nginx at `/lockscope/` (README's snippet), with reads behind a basic-auth user
/// stored as a bcrypt hash: Chromium, given that user as the browser's credentials, loads the
/// dashboard, follows its links and routes, and gets live events, all under the prefix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_under_a_base_path_behind_nginx() -> Result<()> {
    let browser = prerequisites()?;
    let redis = RedisServer::start().await?;
    let mut conn = redis.connection().await?;
    let hold = async |conn: &mut redis::aio::MultiplexedConnection, key: &str| -> Result<()> {
        let () = redis::cmd("SET")
            .arg(key)
            .arg(random_token())
            .arg("PX")
            .arg(600_000)
            .query_async(conn)
            .await?;
        Ok(())
    };
    hold(&mut conn, "lock:prefix").await?;
    let mut config = Config {
        sources: section(
            "redis",
            vec![RedisSourceConfig::new("cache", &redis.url(), &["lock:*"])],
        ),
        ..Config::default()
    };
    config.http.base_path = "/lockscope".into();
    config.http.trusted_proxies = vec!["127.0.0.1".into()];
    config.http.read_auth = Some(lockscope::config::AuthConfig {
        basic_auth_users: [("viewer".to_string(), bcrypt::hash("viewer-password", 4)?)].into(),
        ..Default::default()
    });
    let ls = Lockscope::start(config).await?;
    let nginx =
        lockscope_tests::support::nginx::Nginx::start(ls.base.trim_start_matches("http://"))
            .await?;
    let base = format!("{}/lockscope", nginx.url());
    let mut script = Script::spawn(
        &browser,
        "base-path.test.mjs",
        &[&base, "viewer", "viewer-password"],
    )
    .await?;
    while let Some(need) = script.next_need().await? {
        match need.as_str() {
            "add" => hold(&mut conn, "lock:late").await?,
            other => bail!("the browser script needs {other:?}, which this test cannot do"),
        }
        script.go().await?;
    }
    script
        .finish()
        .await
        .with_context(|| format!("nginx log:\n{}", nginx.log()))
}

/// The root of a pile-up in Chromium (issue 37): two Python processes (kazoo + psycopg)
/// deadlocked across ZooKeeper and PostgreSQL, drawn as one cycle of two joined boxes named by
/// process, and a migration queued behind an idle transaction, whose transaction leads the
/// overview's Root blockers card.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pileup_in_chromium() -> Result<()> {
    use lockscope_tests::support::appproc::{deadlock, AppSpec};
    use lockscope_tests::support::dblocks::Session;
    use lockscope_tests::support::postgres::{self, Postgres};
    let browser = prerequisites()?;
    let (python, zk, pg) = tokio::join!(
        tokio::task::spawn_blocking(lockscope_tests::support::python::python_and_script),
        ZkEnsemble::start(1),
        Postgres::start()
    );
    python??;
    let (zk, pg) = (zk?, pg?);
    let connect = zk.connect_string();
    let root = unique_root("pileup-ui");
    let mut db = lockscope::backends::database::DbSourceConfig::new("pg", &pg.url());
    db.poll_interval = Duration::from_millis(200);
    let config = Config {
        sources: [
            section("zookeeper", vec![zk_source("zk", &connect, &[&root])]),
            section("postgres", vec![lockscope::config::DbSource::postgres(db)]),
        ]
        .concat(),
        ..Config::default()
    };
    let ls = Lockscope::start(config).await?;
    ls.wait_ready(Duration::from_secs(30)).await?;

    let spec = |name: &str| AppSpec {
        name: name.into(),
        zk_hosts: Some(connect.clone()),
        pg_url: Some(pg.url()),
        mysql: None,
    };
    let lock = format!("zk {root}/orders");
    let _deadlocked = deadlock(spec("svc-a"), spec("svc-b"), &lock, "pg 4242").await?;

    pg.exec("CREATE TABLE queue_t (id int PRIMARY KEY)").await?;
    let idle = Session::new(postgres::connect_db(&pg.url(), "report-job").await?).await?;
    idle.exec("BEGIN").await?;
    idle.exec("SELECT * FROM queue_t").await?;
    let alter = Session::new(postgres::connect_db(&pg.url(), "migration").await?).await?;
    let web = Session::new(postgres::connect_db(&pg.url(), "web").await?).await?;
    let _altered = alter.start("ALTER TABLE queue_t ADD COLUMN w int");
    lockscope_tests::harness::eventually(Duration::from_secs(30), "the ALTER queued", async || {
        let locks = ls.locks().await?;
        Ok(locks
            .iter()
            .any(|l| l.recipe == "table_lock" && l.waiters.len() == 1)
            .then_some(()))
    })
    .await?;
    let _read = web.start("SELECT * FROM queue_t");

    let mut script = Script::spawn(&browser, "pileup.test.mjs", &[&ls.base]).await?;
    if let Some(need) = script.next_need().await? {
        bail!("the browser script needs {need:?}, which this test cannot do");
    }
    script.finish().await?;
    for shot in [
        "sessions-across.png",
        "lock-table-queue.png",
        "overview-root-blockers.png",
    ] {
        let meta = std::fs::metadata(artifacts().join(shot))
            .with_context(|| format!("screenshot {shot}"))?;
        assert!(meta.len() > 10_000, "{shot} is suspiciously small");
    }
    drop((idle, alter, web));
    Ok(())
}
