//! `lockscope-demo`: starts a local 3-node ZooKeeper ensemble, Redis, etcd, MariaDB, PostgreSQL, the lock workload and lockscope
//! as child processes, prints the URLs, and stops everything it started on Ctrl-C.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;
use lockscope_tests::harness::{eventually, eventually_blocking};
use lockscope_tests::support::etcd::EtcdServer;
use lockscope_tests::support::redis::RedisServer;
use lockscope_tests::support::zk::ZkEnsemble;

/// Runs the lockscope demo on loopback.
#[derive(Debug, Parser)]
struct Args {
    /// The lockscope binary.
    #[arg(long, default_value = "target/release/lockscope")]
    lockscope: PathBuf,
    /// The workload binary.
    #[arg(long, default_value = "target/release/lockscope-workload")]
    workload: PathBuf,
    /// Port for lockscope's HTTP server.
    #[arg(long, default_value_t = 7070)]
    port: u16,
    /// The built web UI (`scripts/build-ui` fills it).
    #[arg(long, default_value = "frontend/dist")]
    ui_dir: PathBuf,
    /// Where the demo keeps its config and logs.
    #[arg(long, default_value = "target/demo")]
    dir: PathBuf,
    /// Workload clients (spread over 4 seed recipes × 2 locks, plus 8 Curator clients).
    #[arg(long, default_value_t = 16)]
    clients: usize,
}

struct Child(std::process::Child, &'static str);

impl Drop for Child {
    fn drop(&mut self) {
        // Ask politely (lockscope and the workload close their sessions), then make sure.
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let exited = eventually_blocking(
            Duration::from_secs(3),
            &format!("{} exited on SIGTERM", self.1),
            || Ok(self.0.try_wait()?.map(|_| ())),
        );
        if exited.is_ok() {
            return;
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
        eprintln!("stopped {}", self.1);
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    std::fs::create_dir_all(&args.dir)?;
    for bin in [&args.lockscope, &args.workload] {
        if !bin.exists() {
            bail!(
                "{} not found: build first (cargo build --release --bins)",
                bin.display()
            );
        }
    }
    eprintln!("starting a 3-node ZooKeeper ensemble on loopback …");
    let zk = ZkEnsemble::start(3).await.context("start ZooKeeper")?;
    let connect = zk.connect_string();
    eprintln!("ZooKeeper: {connect}");
    let redis = RedisServer::start().await.context("start Redis")?;
    eprintln!("Redis: {}", redis.url());
    let etcd = EtcdServer::start().await.context("start etcd")?;
    eprintln!("etcd: {}", etcd.endpoint());
    let mariadb = lockscope_tests::support::mysql::MariaDb::start()
        .await
        .context("start MariaDB")?;
    eprintln!("MariaDB: {}", mariadb.app_url());
    // deadlock_timeout: a deadlock the workload runs into stays visible for a while.
    let postgres =
        lockscope_tests::support::postgres::Postgres::start_with(&["deadlock_timeout=10s"])
            .await
            .context("start PostgreSQL")?;
    eprintln!("PostgreSQL: {}", postgres.url());

    if !args.ui_dir.join("index.html").exists() {
        eprintln!(
            "note: no web UI in {} (run scripts/build-ui); lockscope will say so at /",
            args.ui_dir.display()
        );
    }
    let ui_dir = std::path::absolute(&args.ui_dir)?;
    // A fresh admin token per demo run, printed below, so force release can be tried.
    let admin_token = format!("demo-{}", lockscope_tests::redis_recipes::random_token());
    let config = args.dir.join("lockscope.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{port}\"\n\n[[zookeeper]]\nname = \"zk-demo\"\nconnect = \"{connect}\"\nroots = [\"/locks\"]\npoll_interval = \"1s\"\nmax_leases = {{ \"/locks/curator/pool\" = 2 }}\n\n[[redis]]\nname = \"redis-demo\"\nurl = \"{redis}\"\npatterns = [\"lock:*\", \"semaphore:*\"]\nreconcile_interval = \"30s\"\nsemaphores = {{ \"lock:pool\" = 3, \"semaphore:jobs\" = 2 }}\n\n[[etcd]]\nname = \"etcd-demo\"\nendpoints = [\"{etcd}\"]\nprefixes = [\"/locks\"]\n\n[[mysql]]\nname = \"mariadb-demo\"\nurl = \"{mysql}\"\nlock_tables = [{{ table = \"app.database_lock\", key = \"resource\", owner = \"description\" }}, {{ table = \"app.shedlock\", key = \"name\", owner = \"locked_by\", until = \"lock_until\" }}]\n\n[[postgres]]\nname = \"postgres-demo\"\nurl = \"{postgres}\"\nlock_tables = [{{ table = \"public.database_lock\", key = \"resource\", owner = \"description\" }}, {{ table = \"public.shedlock\", key = \"name\", owner = \"locked_by\", until = \"lock_until\" }}]\n\n[ui]\nassets_dir = {ui_dir:?}\n\n[stuck]\nwait_warning = \"20s\"\nwait_critical = \"2m\"\n[stuck.recipes.kazoo_lease]\nhold_warning = \"15m\"\nhold_critical = \"1h\"\n\n[admin]\nenabled = true\ntokens = [{{ name = \"demo\", token = \"{token}\" }}]\n\n[store]\nurl = \"sqlite://{db}\"\n",
            port = args.port,
            redis = redis.url(),
            etcd = etcd.endpoint(),
            mysql = mariadb.url(),
            postgres = postgres.url(),
            ui_dir = ui_dir.display().to_string(),
            token = admin_token,
            db = std::path::absolute(args.dir.join("lockscope.db"))?.display(),
        ),
    )?;
    let log = |name: &str| -> Result<Stdio> {
        Ok(Stdio::from(std::fs::File::create(args.dir.join(name))?))
    };
    let _workload = Child(
        std::process::Command::new(&args.workload)
            .args(["--connect", &connect, "--root", "/locks", "--clients"])
            .arg(args.clients.to_string())
            .args([
                "--curator",
                "8",
                "--crash-every",
                "25",
                "--think-max-ms",
                "1000",
            ])
            .args(["--redis", &redis.url(), "--redis-clients", "12"])
            .args(["--etcd", &etcd.endpoint(), "--etcd-clients", "4"])
            .args(["--mysql", &mariadb.app_url(), "--postgres", &postgres.url()])
            .args(["--db-clients", "4"])
            .stdout(log("workload.log")?)
            .stderr(log("workload.err")?)
            .spawn()
            .context("start the workload")?,
        "workload",
    );
    // Real library clients beside the workload: a kazoo Semaphore (2 leases, a third client
    // queued), kazoo leases (NonBlockingLease, MultiNonBlockingLease) and python-redis-lock
    // with a holder and two waiters blocked in BLPOP.
    let _library_clients = match library_clients(&connect, &redis.url()).await {
        Ok(clients) => clients,
        Err(e) => {
            eprintln!("note: real Python library clients not started: {e:#}");
            Vec::new()
        }
    };
    // redis-semaphore's Semaphore (npm, from `npm ci` in tests/browser): one Node process of 4
    // clients sharing `semaphore:jobs` (limit 2), taking turns for a while; it stops by itself,
    // or when the demo goes (its stdin closes; SIGKILL on drop).
    let _semaphore_workload =
        match lockscope_tests::support::node::semaphore_workload(&redis.url(), "jobs", 4, 2000) {
            Ok(child) => Some(child),
            Err(e) => {
                eprintln!("note: redis-semaphore workload not started: {e:#}");
                None
            }
        };
    // Pile-ups, over and over: two services deadlocked across ZooKeeper and PostgreSQL, and a
    // migration queued behind a transaction left idle, on both databases (issue 37).
    let _pileups = tokio::spawn(pileups(connect.clone(), postgres.url(), mariadb.app_url()));
    let _lockscope = Child(
        std::process::Command::new(&args.lockscope)
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .stdout(log("lockscope.log")?)
            .stderr(log("lockscope.err")?)
            .spawn()
            .context("start lockscope")?,
        "lockscope",
    );
    let base = format!("http://127.0.0.1:{}", args.port);
    let http = reqwest::Client::new();
    let ready = format!("{base}/readyz");
    eventually(Duration::from_secs(20), "lockscope ready", async || {
        let resp = http.get(&ready).send().await;
        Ok(resp.is_ok_and(|r| r.status().is_success()).then_some(()))
    })
    .await
    .map_err(|e| anyhow!("{e}; see {}", args.dir.join("lockscope.err").display()))?;
    // Prometheus (Debian's) scraping lockscope with the shipped alert rules loaded.
    let rules = std::path::absolute("dashboards/prometheus/alerts.yml")?;
    let prometheus = lockscope_tests::support::prometheus::Prometheus::start_with(
        &[format!("127.0.0.1:{}", args.port)],
        &[rules],
        Duration::from_secs(5),
    )
    .await
    .context("start Prometheus")?;
    println!();
    println!("lockscope is running: open the dashboard at {base}/");
    println!("  locks:    {base}/api/v1/locks");
    println!("  sessions: {base}/api/v1/sessions   (a page; ?limit=&cursor= for more)");
    println!("  waits:    {base}/api/v1/waitfor    (the wait-for graph, longest wait first)");
    println!("  events:   {base}/api/v1/events   (Server-Sent Events)");
    println!("  metrics:  {base}/metrics");
    println!("  admin token for force release: {admin_token}");
    println!(
        "Prometheus (scraping lockscope, alert rules loaded): {}/alerts",
        prometheus.url()
    );
    println!(
        "ZooKeeper ensemble: {connect}   etcd: {}   logs: {}",
        etcd.endpoint(),
        args.dir.display()
    );
    println!(
        "MariaDB: {}   PostgreSQL: {}",
        mariadb.app_url(),
        postgres.url()
    );
    println!("Press Ctrl-C to stop everything.");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result?,
        _ = term.recv() => {}
    }
    eprintln!("stopping …");
    Ok(())
}

/// Runs the demo's pile-ups in rounds of three minutes: for two minutes two service processes
/// (`svc-orders`, `svc-billing`: kazoo + psycopg in one Python process each) hold a ZooKeeper
/// lock and a PostgreSQL advisory lock and wait on each other's (a deadlock across backends),
/// and on each database a `report-job` transaction sits idle holding `demo_orders` while a
/// `migration` waits to `ALTER` it and a `web` query waits behind the `ALTER`; then everything
/// lets go for a minute. Errors are printed and the round starts again.
async fn pileups(connect: String, postgres: String, mariadb: String) {
    loop {
        if let Err(e) = pileup_round(&connect, &postgres, &mariadb).await {
            eprintln!("note: pile-up round: {e:#}");
        }
        tokio::time::sleep(Duration::from_secs(60)).await;
    }
}

async fn pileup_round(connect: &str, postgres: &str, mariadb: &str) -> Result<()> {
    use lockscope_tests::support::appproc::{deadlock, AppSpec};
    use lockscope_tests::support::dblocks::Session;
    use lockscope_tests::support::{mysql, postgres as pg};
    let spec = |name: &str| AppSpec {
        name: name.into(),
        zk_hosts: Some(connect.to_string()),
        pg_url: Some(postgres.to_string()),
        mysql: None,
    };
    let services = deadlock(
        spec("svc-orders"),
        spec("svc-billing"),
        "zk /locks/services/orders",
        "pg 8080",
    )
    .await?;

    let mut queues = Vec::new();
    for (url, create) in [
        (
            postgres,
            "CREATE TABLE IF NOT EXISTS demo_orders (id int PRIMARY KEY)",
        ),
        (
            mariadb,
            "CREATE TABLE IF NOT EXISTS demo_orders (id int PRIMARY KEY) ENGINE=InnoDB",
        ),
    ] {
        let connect = |name: &'static str| async move {
            if url.starts_with("postgres") {
                pg::connect_db(url, name).await
            } else {
                mysql::connect_db(url).await
            }
        };
        Session::new(connect("schema").await?)
            .await?
            .exec(create)
            .await?;
        let idle = Session::new(connect("report-job").await?).await?;
        idle.exec("BEGIN").await?;
        idle.exec("SELECT * FROM demo_orders").await?;
        let alter = Session::new(connect("migration").await?).await?;
        let web = Session::new(connect("web").await?).await?;
        for (session, sql) in [
            (
                &alter,
                "ALTER TABLE demo_orders ADD COLUMN IF NOT EXISTS note text",
            ),
            (&web, "SELECT * FROM demo_orders"),
        ] {
            drop(session.start(sql));
        }
        queues.push((idle, alter, web));
    }
    tokio::time::sleep(Duration::from_secs(120)).await;
    // Dropping the sessions and processes ends their connections and sessions.
    drop(queues);
    drop(services);
    Ok(())
}

/// Holders and waiters of the real Python libraries (kazoo locks and leases,
/// python-redis-lock), kept for the
/// demo's life (their processes end with it).
async fn library_clients(
    connect: &str,
    redis: &str,
) -> Result<Vec<lockscope_tests::support::python::PyClient>> {
    use lockscope_tests::support::python::PyClient;
    eprintln!("starting real kazoo and python-redis-lock clients (first run builds a venv) …");
    let mut clients = Vec::new();
    for (i, id) in ["lease-a", "lease-b", "lease-c"].into_iter().enumerate() {
        let mut c = PyClient::kazoo_semaphore(connect, "/locks/kazoo/pool", id, 2).await?;
        if i < 2 {
            c.acquire().await?;
        } else {
            c.start_acquire().await?;
        }
        clients.push(c);
    }
    // kazoo leases: a nightly job's NonBlockingLease (ten minutes), and two workers on the
    // two slots of a MultiNonBlockingLease.
    let mut nightly = PyClient::kazoo_lease(
        connect,
        "/locks/kazoo/nightly-report",
        "report-runner-1",
        std::time::Duration::from_secs(600),
    )
    .await?;
    nightly.acquire().await?;
    clients.push(nightly);
    for id in ["worker-1", "worker-2"] {
        let mut c = PyClient::kazoo_multi_lease(
            connect,
            "/locks/kazoo/workers",
            id,
            std::time::Duration::from_secs(600),
            2,
        )
        .await?;
        c.acquire().await?;
        clients.push(c);
    }
    for i in 0..3 {
        let mut c = PyClient::python_redis_lock(redis, "report", None).await?;
        if i == 0 {
            c.acquire().await?;
        } else {
            c.start_acquire().await?;
        }
        clients.push(c);
    }
    Ok(clients)
}
