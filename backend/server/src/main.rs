//! The `lockscope` command line: `lockscope serve --config FILE`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// jemalloc: no per-allocation header (a lock is many small allocations), and a background
/// thread that hands freed pages back to the system a second after they were last used (a first
/// full read of a big keyspace peaks well above what stays). Measured against the system
/// allocator and mimalloc in BENCHMARKS.md. Its options are built in (`.cargo/config.toml`,
/// `JEMALLOC_SYS_WITH_MALLOC_CONF`).
#[cfg(not(feature = "heap-profile"))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// `--features heap-profile`: dhat counts every allocation by the place it was made; SIGUSR2
/// writes `dhat-heap.json` (in the working directory), whose "bytes at the end" per place are
/// what was live at the signal. A measuring build only: it is slow and not what ships.
#[cfg(feature = "heap-profile")]
#[global_allocator]
static GLOBAL: dhat::Alloc = dhat::Alloc;

#[cfg(feature = "heap-profile")]
fn heap_profile() {
    let (ready, started) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let profiler = dhat::Profiler::builder().trim_backtraces(Some(24)).build();
        let _ = ready.send(());
        let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGUSR2])
            .expect("SIGUSR2 handler");
        if signals.forever().next().is_some() {
            drop(profiler);
            eprintln!("lockscope: heap profile written to dhat-heap.json");
        }
    });
    let _ = started.recv();
}

/// Observability and admin dashboard for distributed locks in ZooKeeper, Redis and etcd.
///
/// lockscope watches lock trees with persistent recursive watches, rebuilds every lock's holders
/// and waiter queue, and serves them as JSON (/api/v1/locks), Server-Sent Events
/// (/api/v1/events) and Prometheus metrics (/metrics).
#[derive(Debug, Parser)]
#[command(name = "lockscope", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Commands,
}

#[derive(Debug, Subcommand)]
enum Commands {
    /// Watch the configured sources and serve the API, event stream and metrics.
    Serve {
        /// TOML configuration file (see README.md for every key).
        #[arg(long, short, env = "LOCKSCOPE_CONFIG", value_name = "FILE")]
        config: PathBuf,
        /// Listen address, overriding `listen` in the file (also LOCKSCOPE_LISTEN).
        #[arg(long, value_name = "ADDR")]
        listen: Option<std::net::SocketAddr>,
        /// Log filter, e.g. `info` or `lockscope=debug` (also RUST_LOG).
        #[arg(
            long,
            env = "LOCKSCOPE_LOG",
            default_value = "info",
            value_name = "FILTER"
        )]
        log: String,
    },
    /// Check a configuration file and print every problem; exit 2 if there is any.
    Check {
        #[arg(long, short, env = "LOCKSCOPE_CONFIG", value_name = "FILE")]
        config: PathBuf,
    },
    /// Validate a configuration file without starting anything: print "ok" and exit 0, or
    /// list every problem and exit 2. The environment overrides `serve` applies
    /// (LOCKSCOPE_LISTEN, LOCKSCOPE_UI_DIR, token_env variables) are applied and checked too.
    CheckConfig {
        /// TOML configuration file.
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Print the bcrypt hash of a password or token read from standard input (one line), for
    /// `[http] read_auth`, `metrics_auth` and `token_hash`: the secret never goes in the file.
    HashPassword {
        /// bcrypt cost (work factor, 4 to 31).
        #[arg(long, default_value_t = 10)]
        cost: u32,
    },
    /// List the locks a running lockscope sees (longest wait or hold first).
    Locks {
        /// Base URL of the running lockscope.
        #[arg(long, env = "LOCKSCOPE_URL", default_value = "http://127.0.0.1:7070")]
        url: String,
        #[arg(long)]
        source: Option<String>,
        /// Only locks of this backend (`zookeeper`, `redis`, `etcd`).
        #[arg(long, value_parser = parse_backend)]
        backend: Option<lockscope_model::wire::Backend>,
        #[arg(long)]
        recipe: Option<String>,
        /// Substring of the lock path.
        #[arg(long, short)]
        q: Option<String>,
        /// Print the API's JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Read token, when the server requires one.
        #[arg(
            long,
            env = "LOCKSCOPE_TOKEN",
            hide_env_values = true,
            conflicts_with = "user"
        )]
        token: Option<String>,
        /// A basic-auth user of the server's `[http] read_auth`; the password comes from
        /// LOCKSCOPE_PASSWORD (never a flag: flags show in `ps`).
        #[arg(long, env = "LOCKSCOPE_USER")]
        user: Option<String>,
        #[arg(skip = std::env::var("LOCKSCOPE_PASSWORD").ok())]
        password: Option<String>,
    },
    /// The live lock view in a terminal: the locks attention first, a lock's queue, updated as
    /// they change (the dashboard's live views). `q` quits, `?` lists the keys; NO_COLOR is
    /// honoured.
    Top {
        /// Base URL of the running lockscope (`https://` is checked against LOCKSCOPE_CA_FILE
        /// or the system's CAs).
        #[arg(long, env = "LOCKSCOPE_URL", default_value = "http://127.0.0.1:7070")]
        url: String,
        /// Read token, when the server requires one.
        #[arg(
            long,
            env = "LOCKSCOPE_TOKEN",
            hide_env_values = true,
            conflicts_with = "user"
        )]
        token: Option<String>,
        /// A basic-auth user of the server's `[http] read_auth`; the password comes from
        /// LOCKSCOPE_PASSWORD.
        #[arg(long, env = "LOCKSCOPE_USER")]
        user: Option<String>,
        #[arg(skip = std::env::var("LOCKSCOPE_PASSWORD").ok())]
        password: Option<String>,
    },
    /// Force-release a lock's holder through a running lockscope: it deletes only that holder,
    /// only if it still holds, and audits the attempt. Exit 0 released, 1 refused or failed.
    Release {
        /// Lock id (from `lockscope locks` or the dashboard URL).
        id: String,
        /// The holder you saw: ZooKeeper node path, Redis token, hash field or host.
        #[arg(long)]
        holder: String,
        /// ZooKeeper: the session you saw owning the holder node (required there).
        #[arg(long)]
        session: Option<String>,
        /// Redisson: the re-entry count you saw.
        #[arg(long)]
        reentrancy: Option<u64>,
        /// The holder's version you saw (`lockscope locks --json` shows it; required for
        /// ZooKeeper (the node's czxid), etcd (`<create_revision>/<mod_revision>`), a Redisson
        /// RedLock and any holder shown cut with a digest).
        #[arg(long)]
        version: Option<String>,
        /// Why (required; goes to the audit log).
        #[arg(long)]
        reason: String,
        /// Admin token.
        #[arg(long, env = "LOCKSCOPE_TOKEN", hide_env_values = true)]
        token: String,
        #[arg(long, env = "LOCKSCOPE_URL", default_value = "http://127.0.0.1:7070")]
        url: String,
    },
}

fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("cannot start the runtime: {e}");
            ExitCode::FAILURE
        })
}

/// A backend by name, the names listed from the model (no list of backends here).
fn parse_backend(name: &str) -> Result<lockscope_model::wire::Backend, String> {
    lockscope_model::wire::Backend::parse(name).ok_or_else(|| {
        let names: Vec<&str> = lockscope_model::wire::Backend::ALL
            .iter()
            .map(|b| b.as_str())
            .collect();
        format!("expected one of: {}", names.join(", "))
    })
}

fn main() -> ExitCode {
    #[cfg(feature = "heap-profile")]
    heap_profile();
    let cli = Cli::parse();
    match cli.command {
        Commands::Top {
            url,
            token,
            user,
            password,
        } => {
            let rt = match runtime() {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            let auth = match (token, user, password) {
                (Some(token), _, _) => lockscope_tui::Auth::Bearer(token),
                (None, Some(user), Some(password)) => lockscope_tui::Auth::Basic { user, password },
                (None, Some(_), None) => {
                    eprintln!("lockscope top: --user needs the password in LOCKSCOPE_PASSWORD");
                    return ExitCode::from(2);
                }
                _ => lockscope_tui::Auth::None,
            };
            let options = lockscope_tui::Options {
                url,
                auth,
                client: lockscope::cli::stream_client(),
                // Read from the environment only: a flag would show in `ps`.
                admin_token: std::env::var("LOCKSCOPE_ADMIN_TOKEN")
                    .ok()
                    .filter(|t| !t.is_empty()),
            };
            match rt.block_on(lockscope_tui::run(options)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("lockscope top: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Commands::Locks {
            url,
            source,
            backend,
            recipe,
            q,
            json,
            token,
            user,
            password,
        } => {
            let rt = match runtime() {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            let query = lockscope::cli::LockQuery {
                source,
                backend: backend.map(|b| b.as_str().to_string()),
                recipe,
                q,
            };
            let auth = match (&token, &user, &password) {
                (Some(token), _, _) => lockscope::cli::ReadAuth::Bearer(token),
                (None, Some(user), Some(password)) => {
                    lockscope::cli::ReadAuth::Basic { user, password }
                }
                (None, Some(_), None) => {
                    eprintln!("lockscope locks: --user needs the password in LOCKSCOPE_PASSWORD");
                    return ExitCode::from(2);
                }
                _ => lockscope::cli::ReadAuth::None,
            };
            match rt.block_on(lockscope::cli::list_locks(&url, &query, auth)) {
                Ok(locks) if json => {
                    println!("{}", serde_json::json!({ "locks": locks }));
                    ExitCode::SUCCESS
                }
                Ok(locks) => {
                    print!("{}", lockscope::cli::table(locks));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("lockscope locks: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Commands::Release {
            id,
            holder,
            session,
            reentrancy,
            version,
            reason,
            token,
            url,
        } => {
            let rt = match runtime() {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            let request = lockscope_model::wire::ReleaseRequest {
                holder,
                session,
                reentrancy,
                version,
                reason,
            };
            match rt.block_on(lockscope::cli::release(&url, &id, &request, &token)) {
                Ok((200, body)) => {
                    println!("{body}");
                    ExitCode::SUCCESS
                }
                Ok((status, body)) => {
                    eprintln!("lockscope release: refused ({status}): {body}");
                    ExitCode::FAILURE
                }
                Err(e) => {
                    eprintln!("lockscope release: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Commands::HashPassword { cost } => {
            let mut line = String::new();
            if let Err(e) = std::io::stdin().read_line(&mut line) {
                eprintln!("lockscope hash-password: cannot read standard input: {e}");
                return ExitCode::FAILURE;
            }
            let secret = line.trim_end_matches(['\n', '\r']);
            if secret.is_empty() {
                eprintln!("lockscope hash-password: give the password on standard input");
                return ExitCode::from(2);
            }
            match bcrypt::hash(secret, cost) {
                Ok(hash) => {
                    println!("{hash}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("lockscope hash-password: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Commands::Check { config } | Commands::CheckConfig { file: config } => {
            match lockscope::Config::load(&config) {
                Ok(_) => {
                    println!("{}: ok", config.display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprint!("{}: {e}", config.display());
                    ExitCode::from(2)
                }
            }
        }
        Commands::Serve {
            config,
            listen,
            log,
        } => {
            let filter = tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(log));
            // Colours only on a terminal: a log file or journal gets plain text.
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
            tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_ansi(ansi)
                .init();
            let mut parsed = match lockscope::Config::load(&config) {
                Ok(parsed) => parsed,
                Err(e) => {
                    eprint!("{}: {e}", config.display());
                    return ExitCode::from(2);
                }
            };
            if let Some(listen) = listen {
                parsed.listen = listen;
            }
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(lockscope::serve(parsed)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("lockscope: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
