//! The `lockscope` command line: `lockscope serve --config FILE`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Observability and admin dashboard for distributed locks in ZooKeeper.
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Commands::Check { config } => match lockscope::Config::load(&config) {
            Ok(_) => {
                println!("{}: ok", config.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprint!("{}: {e}", config.display());
                ExitCode::from(2)
            }
        },
        Commands::Serve {
            config,
            listen,
            log,
        } => {
            let filter = tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(log));
            tracing_subscriber::fmt().with_env_filter(filter).init();
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
