//! `lockscope-workload`: a lock workload on a real ZooKeeper ensemble, for the demo, tests and
//! benchmarks. Clients take and release locks with the hand-written seed recipes (predecessor
//! watch, children watch = herd, polling, plain ephemeral with exists-watch retry) and, with
//! `--curator N`, real Apache Curator clients (mutex, semaphore, read-write). With
//! `--crash-every N`, about one hold in N ends with the holder process killed (SIGKILL, no
//! unlock): its session expires and the next waiter takes over, as after a real crash.
//!
//! With `--redis URL`, `--redis-clients N` more clients lock keys in that Redis with the real
//! protocols: `SET NX PX` token locks (a crashed holder leaves its token to expire), Redisson
//! RLock with re-entry, FairLock, and a Redisson Semaphore (`lock:pool`, 3 permits).
//!
//! With `--mysql URL` / `--postgres URL`, `--db-clients N` clients per database run the seeds'
//! database recipes there (the schema is created first): the lock table (insert/delete),
//! ShedLock's table, `SELECT … FOR UPDATE` on a lock row, and `GET_LOCK` (MariaDB) or advisory
//! locks at session and transaction level (PostgreSQL).

use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use lockscope_tests::recipes::{self, SeedClient, SeedRecipe};
use lockscope_tests::support::curator::{CuratorClient, CuratorRecipe};

#[derive(Debug, Parser, Clone)]
#[command(about = "Drive a lock workload against a ZooKeeper ensemble")]
struct Args {
    /// ZooKeeper connect string.
    #[arg(long)]
    connect: String,
    /// Root under which the locks live.
    #[arg(long, default_value = "/locks")]
    root: String,
    /// Rust seed-recipe clients (each its own session).
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Distinct locks per recipe (fewer locks = more contention).
    #[arg(long, default_value_t = 2)]
    locks: usize,
    /// Hold time range, ms.
    #[arg(long, default_value_t = 300)]
    hold_min_ms: u64,
    #[arg(long, default_value_t = 3000)]
    hold_max_ms: u64,
    /// Think time between holds, ms.
    #[arg(long, default_value_t = 200)]
    think_min_ms: u64,
    #[arg(long, default_value_t = 2000)]
    think_max_ms: u64,
    /// Seed recipes to use, comma-separated: queue, herd, polling, plain.
    #[arg(long, default_value = "queue,herd,polling,plain")]
    recipes: String,
    /// Apache Curator clients (Java processes): mutex, semaphore (2 leases), read and write.
    #[arg(long, default_value_t = 0)]
    curator: usize,
    /// About one hold in N ends in a crash (a holder process killed without unlocking); 0 = never.
    #[arg(long, default_value_t = 0)]
    crash_every: u64,
    /// Session timeout of the workload's clients, ms.
    #[arg(long, default_value_t = 4000)]
    session_timeout_ms: u64,
    /// Stop after this many seconds (0 = run until killed).
    #[arg(long, default_value_t = 0)]
    duration_secs: u64,
    /// Random seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Redis server for Redis lock clients (`redis://…`).
    #[arg(long)]
    redis: Option<String>,
    /// Redis lock clients (token lock, Redisson lock, fair lock, semaphore, in turn).
    #[arg(long, default_value_t = 8)]
    redis_clients: usize,
    /// Redlock masters, comma-separated (`redis://a,redis://b,redis://c`): adds Redlock clients
    /// taking `rl:<n>` on a majority of them.
    #[arg(long, value_delimiter = ',')]
    redlock: Vec<String>,
    /// Redlock clients.
    #[arg(long, default_value_t = 3)]
    redlock_clients: usize,
    /// etcd endpoints, comma-separated (`127.0.0.1:2379,…`): adds `etcdctl lock` clients (the Go
    /// client's own `concurrency.Mutex`) on `<root>/etcd/job<n>`.
    #[arg(long, value_delimiter = ',')]
    etcd: Vec<String>,
    /// etcd lock clients.
    #[arg(long, default_value_t = 4)]
    etcd_clients: usize,
    /// MariaDB/MySQL URL (`mysql://root@127.0.0.1:3306/app`) for database lock clients.
    #[arg(long)]
    mysql: Option<String>,
    /// PostgreSQL URL (`postgres://postgres@127.0.0.1:5432/postgres`) for database lock clients.
    #[arg(long)]
    postgres: Option<String>,
    /// Lock clients per database.
    #[arg(long, default_value_t = 4)]
    db_clients: usize,
    /// Internal: act as one crash-prone holder (acquire, then wait to be killed).
    #[arg(long, hide = true)]
    crash_holder: Option<String>,
}

/// xorshift64*: enough randomness for think and hold times, no dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.next() % (hi - lo + 1)
        }
    }
}

fn seed_recipe(name: &str) -> Option<SeedRecipe> {
    Some(match name {
        "queue" => SeedRecipe::QueuePredecessor {
            prefix: "lock-".into(),
        },
        "herd" => SeedRecipe::QueueChildrenWatch {
            prefix: "temp".into(),
        },
        "polling" => SeedRecipe::QueuePolling {
            prefix: "lock-".into(),
            interval: Duration::from_millis(250),
        },
        "plain" => SeedRecipe::PlainEphemeral,
        _ => return None,
    })
}

async fn seed_client(args: Args, index: usize, recipe_name: String) -> Result<()> {
    let recipe = seed_recipe(&recipe_name).context("unknown recipe")?;
    let mut rng = Rng::new(args.seed + index as u64 * 7919);
    let timeout = Duration::from_millis(args.session_timeout_ms);
    loop {
        let client = match SeedClient::connect(&args.connect, timeout).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("client {index}: connect: {e:#}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        loop {
            let lock = rng.between(0, args.locks.saturating_sub(1) as u64);
            let path = format!("{}/{recipe_name}/lock{lock}", args.root);
            tokio::time::sleep(Duration::from_millis(
                rng.between(args.think_min_ms, args.think_max_ms),
            ))
            .await;
            if args.crash_every > 0 && rng.between(1, args.crash_every) == 1 {
                crash_once(&args, &path, &recipe_name).await;
                continue;
            }
            let ticket = match recipes::lock(&client, &path, &recipe).await {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("client {index}: lock {path}: {e:#}");
                    break;
                }
            };
            tokio::time::sleep(Duration::from_millis(
                rng.between(args.hold_min_ms, args.hold_max_ms),
            ))
            .await;
            if let Err(e) = ticket.release(&client).await {
                eprintln!("client {index}: release {path}: {e:#}");
                break;
            }
        }
    }
}

/// Starts a holder process for `path`, lets it take the lock, then SIGKILLs it.
async fn crash_once(args: &Args, path: &str, recipe: &str) {
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let child = tokio::process::Command::new(exe)
        .args([
            "--connect",
            &args.connect,
            "--recipes",
            recipe,
            "--crash-holder",
            path,
        ])
        .arg("--session-timeout-ms")
        .arg(args.session_timeout_ms.to_string())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let Ok(mut child) = child else { return };
    let Some(stdout) = child.stdout.take() else {
        return;
    };
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    // Wait (bounded) for "held", hold a little, then crash it.
    let held = tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await;
    if matches!(held, Ok(Ok(Some(_)))) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        eprintln!("crashing the holder of {path} (pid {:?})", child.id());
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
}

async fn crash_holder(args: &Args, path: &str) -> Result<()> {
    let name = args.recipes.split(',').next().unwrap_or("queue");
    let recipe = seed_recipe(name).context("unknown recipe")?;
    let client = SeedClient::connect(
        &args.connect,
        Duration::from_millis(args.session_timeout_ms),
    )
    .await?;
    // Never unlock: the parent kills this process. If the parent itself is gone (killed
    // without the chance to), leave too rather than hold the lock forever as an orphan.
    let parent = std::os::unix::process::parent_id();
    let orphaned = async {
        while std::os::unix::process::parent_id() == parent {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::select! {
        held = async {
            let ticket = recipes::lock(&client, path, &recipe).await?;
            println!("held");
            std::future::pending::<()>().await;
            anyhow::Ok(ticket)
        } => held.map(|_| ()),
        () = orphaned => Ok(()),
    }
}

async fn curator_client(args: Args, index: usize) -> Result<()> {
    let mut rng = Rng::new(args.seed + 1_000_003 * (index as u64 + 1));
    let (recipe, path) = match index % 4 {
        0 => (CuratorRecipe::Mutex, format!("{}/curator/mutex", args.root)),
        1 => (
            CuratorRecipe::Semaphore { max_leases: 2 },
            format!("{}/curator/pool", args.root),
        ),
        2 => (CuratorRecipe::Read, format!("{}/curator/rw", args.root)),
        _ => (CuratorRecipe::Write, format!("{}/curator/rw", args.root)),
    };
    loop {
        let mut client = match CuratorClient::spawn(
            &args.connect,
            args.session_timeout_ms,
            recipe_clone(&recipe),
            &path,
        )
        .await
        {
            Ok(c) => c,
            Err(e) => {
                eprintln!("curator {index}: {e:#}");
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
        };
        loop {
            tokio::time::sleep(Duration::from_millis(
                rng.between(args.think_min_ms, args.think_max_ms),
            ))
            .await;
            let round = async {
                client.start_acquire().await?;
                client.wait_acquired(Duration::from_secs(120)).await?;
                tokio::time::sleep(Duration::from_millis(
                    rng.between(args.hold_min_ms, args.hold_max_ms),
                ))
                .await;
                client.release().await
            };
            if let Err(e) = round.await {
                eprintln!("curator {index}: {e:#}");
                break;
            }
        }
    }
}

/// A Redlock client: takes `rl:<n>` on the masters (held when a majority agree), holds, releases.
async fn redlock_client(args: Args, index: usize) -> Result<()> {
    use lockscope_tests::redis_recipes as rr;
    let mut rng = Rng::new(args.seed + 5_555_555 * (index as u64 + 1));
    let redlock = rr::Redlock::connect(&args.redlock).await?;
    loop {
        tokio::time::sleep(Duration::from_millis(
            rng.between(args.think_min_ms, args.think_max_ms),
        ))
        .await;
        let hold = Duration::from_millis(rng.between(args.hold_min_ms, args.hold_max_ms));
        let key = format!("rl:{}", rng.between(0, args.locks.saturating_sub(1) as u64));
        let token = rr::random_uuid();
        if redlock
            .lock(&key, &token, hold.as_millis() as u64 * 2 + 1_000)
            .await?
        {
            tokio::time::sleep(hold).await;
            redlock.unlock(&key, &token).await?;
        }
    }
}

async fn redis_client(args: Args, url: String, index: usize) -> Result<()> {
    use lockscope_tests::redis_recipes as rr;
    let mut rng = Rng::new(args.seed + 7_777_777 * (index as u64 + 1));
    let mut conn = lockscope_tests::support::redis::connect(&url).await?;
    let client = rr::RedissonClient::new();
    let thread = index as u64 + 1;
    if index == 3 {
        // Whoever comes first sets the pool up; later calls change nothing.
        client
            .semaphore_set_permits(&mut conn, "lock:pool", 3)
            .await?;
    }
    loop {
        tokio::time::sleep(Duration::from_millis(
            rng.between(args.think_min_ms, args.think_max_ms),
        ))
        .await;
        let hold = Duration::from_millis(rng.between(args.hold_min_ms, args.hold_max_ms));
        let lock = rng.between(0, args.locks.saturating_sub(1) as u64);
        match index % 4 {
            0 => {
                let key = format!("lock:orders{lock}");
                // UUID tokens, as most clients use.
                let token = rr::random_uuid();
                let ttl = hold.as_millis() as u64 * 2 + 500;
                if rr::token_lock_acquire(&mut conn, &key, &token, ttl).await? {
                    tokio::time::sleep(hold).await;
                    // Now and then the holder "crashes": its token stays until the TTL runs out.
                    if args.crash_every == 0 || rng.between(1, args.crash_every) != 1 {
                        rr::token_lock_release(&mut conn, &key, &token).await?;
                    }
                }
            }
            1 => {
                let key = format!("lock:rl{lock}");
                if client
                    .rlock_try_lock(&mut conn, &key, thread, 30_000)
                    .await?
                    .is_none()
                {
                    // Re-enter once, as nested code paths do.
                    client
                        .rlock_try_lock(&mut conn, &key, thread, 30_000)
                        .await?;
                    tokio::time::sleep(hold).await;
                    client.rlock_unlock(&mut conn, &key, thread, 30_000).await?;
                    client.rlock_unlock(&mut conn, &key, thread, 30_000).await?;
                }
            }
            2 => {
                let key = "lock:fair";
                // Keep the place in the queue by retrying, as Redisson's waiters do on wake-up.
                let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
                let mut held = false;
                while tokio::time::Instant::now() < deadline {
                    let now = lockscope_tests::redis_recipes::now_ms();
                    if client
                        .fair_try_lock(&mut conn, key, thread, 30_000, 10_000, now)
                        .await?
                        .is_none()
                    {
                        held = true;
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                if held {
                    tokio::time::sleep(hold).await;
                    let now = lockscope_tests::redis_recipes::now_ms();
                    client
                        .fair_unlock(&mut conn, key, thread, 30_000, now)
                        .await?;
                }
            }
            _ => {
                if client
                    .semaphore_try_acquire(&mut conn, "lock:pool", 1)
                    .await?
                {
                    tokio::time::sleep(hold).await;
                    client.semaphore_release(&mut conn, "lock:pool", 1).await?;
                }
            }
        }
    }
}

fn recipe_clone(recipe: &CuratorRecipe) -> CuratorRecipe {
    match recipe {
        CuratorRecipe::Mutex => CuratorRecipe::Mutex,
        CuratorRecipe::SemaphoreMutex => CuratorRecipe::SemaphoreMutex,
        CuratorRecipe::Semaphore { max_leases } => CuratorRecipe::Semaphore {
            max_leases: *max_leases,
        },
        CuratorRecipe::Read => CuratorRecipe::Read,
        CuratorRecipe::Write => CuratorRecipe::Write,
        CuratorRecipe::Multi => CuratorRecipe::Multi,
    }
}

/// One etcd contender: `etcdctl lock` holds for a while and unlocks; about one hold in
/// `crash_every` ends with the process killed, so its key stays until its 5 s lease runs out.
async fn etcd_client(args: Args, index: usize) -> Result<()> {
    use lockscope_tests::support::etcd::EtcdctlLock;
    let mut rng = Rng::new(args.seed + 104_729 * (index as u64 + 1));
    loop {
        tokio::time::sleep(Duration::from_millis(
            rng.between(args.think_min_ms, args.think_max_ms),
        ))
        .await;
        let lock = rng.between(0, args.locks.saturating_sub(1) as u64);
        let name = format!("{}/etcd/job{lock}", args.root);
        let mut client = EtcdctlLock::start(&args.etcd, &name, 5).await?;
        if client.wait_acquired(Duration::from_secs(60)).await.is_err() {
            client.crash().await?;
            continue;
        }
        tokio::time::sleep(Duration::from_millis(
            rng.between(args.hold_min_ms, args.hold_max_ms),
        ))
        .await;
        if args.crash_every > 0 && rng.between(1, args.crash_every) == 1 {
            client.crash().await?;
        } else {
            client.release().await?;
        }
    }
}

/// The tables database clients lock through (idempotent).
async fn db_schema(url: &str) -> Result<()> {
    use lockscope_tests::support::dblocks::{create_lock_rows, LockTable, ShedLock};
    let mut conn = db_connect(url, "workload-schema").await?;
    LockTable::create(&mut conn).await?;
    ShedLock::create(&mut conn).await?;
    create_lock_rows(&mut conn, "locks", &["orders", "billing"]).await
}

async fn db_connect(url: &str, name: &str) -> Result<lockscope_tests::support::dblocks::DbConn> {
    use lockscope_tests::support::{mysql, postgres};
    if url.starts_with("postgres") {
        postgres::connect_db(url, name).await
    } else {
        mysql::connect_db(url).await
    }
}

/// One database contender: in turn a lock-table row, a ShedLock run, a `FOR UPDATE` on a lock
/// row, and a named lock (`GET_LOCK` on MariaDB, an advisory lock on PostgreSQL, at session or
/// transaction level).
async fn db_client(args: Args, url: String, index: usize) -> Result<()> {
    use lockscope_tests::support::dblocks::{LockTable, RowLocker, ShedLock};
    use lockscope_tests::support::{mysql, postgres};
    let mut rng = Rng::new(args.seed + 7_919 * (index as u64 + 1));
    let pg = url.starts_with("postgres");
    let name = format!("workload-db-{index}");
    let mut round = index;
    loop {
        tokio::time::sleep(Duration::from_millis(
            rng.between(args.think_min_ms, args.think_max_ms),
        ))
        .await;
        // Hold time: the length of a critical section.
        let hold = Duration::from_millis(rng.between(args.hold_min_ms, args.hold_max_ms));
        let lock = rng.between(0, args.locks.saturating_sub(1) as u64);
        round += 1;
        match round % 4 {
            0 => {
                let mut table = LockTable::new(db_connect(&url, &name).await?).await?;
                let resource = format!("invoice-{lock}");
                if table.try_lock(&resource, &name).await? {
                    tokio::time::sleep(hold).await;
                    table.unlock(&resource, &name).await?;
                }
            }
            1 => {
                let mut shed = ShedLock::new(db_connect(&url, &name).await?, &name);
                let job = format!("report-{lock}");
                if shed.lock(&job, Duration::from_secs(30)).await? {
                    tokio::time::sleep(hold).await;
                    shed.unlock(&job, Duration::ZERO).await?;
                }
            }
            2 => {
                let row = if lock.is_multiple_of(2) {
                    "orders"
                } else {
                    "billing"
                };
                let mut locker =
                    RowLocker::start(db_connect(&url, &name).await?, "locks", row).await?;
                if locker.wait_acquired(Duration::from_secs(60)).await.is_ok() {
                    tokio::time::sleep(hold).await;
                }
                locker.commit().await?;
            }
            _ if pg => {
                use postgres::{Advisory, AdvisoryKey, Level};
                let mut a = Advisory::open(postgres::connect(&url, &name).await?).await?;
                let key = if lock.is_multiple_of(2) {
                    AdvisoryKey::Big(1_000 + lock as i64)
                } else {
                    AdvisoryKey::Pair(7, lock as i32)
                };
                let level = if rng.between(0, 1) == 0 {
                    Level::Session
                } else {
                    Level::Xact
                };
                if level == Level::Xact {
                    a.begin().await?;
                }
                a.lock(key, level, false);
                if a.wait_acquired(Duration::from_secs(60)).await.is_ok() {
                    tokio::time::sleep(hold).await;
                }
                if level == Level::Xact {
                    a.commit().await?;
                } else {
                    a.unlock_all().await?;
                }
            }
            _ => {
                use mysql::{GetLock, Params};
                let mut g = GetLock::start(
                    mysql::connect(&url).await?,
                    &format!("job-{lock}"),
                    60,
                    Params::Literal,
                )
                .await?;
                if g.wait_acquired(Duration::from_secs(60)).await.is_ok() {
                    tokio::time::sleep(hold).await;
                    g.release().await?;
                }
            }
        }
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(path) = &args.crash_holder {
        return crash_holder(&args, path).await;
    }
    let names: Vec<String> = args
        .recipes
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    for name in &names {
        if seed_recipe(name).is_none() {
            anyhow::bail!("unknown recipe {name:?} (use queue, herd, polling, plain)");
        }
    }
    let mut tasks = tokio::task::JoinSet::new();
    for index in 0..args.clients {
        if names.is_empty() {
            break;
        }
        let name = names[index % names.len()].clone();
        tasks.spawn(seed_client(args.clone(), index, name));
    }
    for index in 0..args.curator {
        tasks.spawn(curator_client(args.clone(), index));
    }
    if let Some(url) = &args.redis {
        for index in 0..args.redis_clients {
            let (args, url) = (args.clone(), url.clone());
            tasks.spawn(async move {
                // A Redis restart drops the connection: start over.
                loop {
                    if let Err(e) = redis_client(args.clone(), url.clone(), index).await {
                        eprintln!("redis client {index}: {e:#}");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            });
        }
    }
    if !args.redlock.is_empty() {
        for index in 0..args.redlock_clients {
            let args = args.clone();
            tasks.spawn(async move {
                loop {
                    if let Err(e) = redlock_client(args.clone(), index).await {
                        eprintln!("redlock client {index}: {e:#}");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            });
        }
    }
    if !args.etcd.is_empty() {
        for index in 0..args.etcd_clients {
            let args = args.clone();
            tasks.spawn(async move {
                loop {
                    if let Err(e) = etcd_client(args.clone(), index).await {
                        eprintln!("etcd client {index}: {e:#}");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            });
        }
    }
    for url in args.mysql.iter().chain(&args.postgres) {
        db_schema(url)
            .await
            .with_context(|| format!("database schema at {url}"))?;
        for index in 0..args.db_clients {
            let (args, url) = (args.clone(), url.clone());
            tasks.spawn(async move {
                // A database restart drops the connection: start over.
                loop {
                    if let Err(e) = db_client(args.clone(), url.clone(), index).await {
                        eprintln!("database client {index} ({url}): {e:#}");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            });
        }
    }
    eprintln!(
        "workload: {} seed clients over {:?}, {} Curator clients, root {}, Redis {:?}, etcd {:?}",
        args.clients, names, args.curator, args.root, args.redis, args.etcd
    );
    let run = async {
        while let Some(result) = tasks.join_next().await {
            if let Ok(Err(e)) = result {
                eprintln!("client stopped: {e:#}");
            }
        }
    };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let limit = async {
        if args.duration_secs == 0 {
            std::future::pending::<()>().await
        } else {
            tokio::time::sleep(Duration::from_secs(args.duration_secs)).await
        }
    };
    tokio::select! {
        _ = run => {}
        _ = limit => {}
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    // Dropping the tasks drops their clients: sessions close and Curator processes are killed.
    Ok(())
}
