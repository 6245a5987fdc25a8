//! `crest`: the coordinator CLI. `crest run` plans and runs a load test; `crest sink` runs
//! the built-in RESP target alone.

use clap::{Parser, Subcommand, ValueEnum};
use crest::config::{self, RunConfig, Workers};
use crest::orchestrate::{self, RunError};
use crest_worker::schedule::Arrival;
use crest_worker::shard::Pacer;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Crest: distributed open-loop load generator for Redis-protocol servers.
#[derive(Debug, Parser)]
#[command(name = "crest", version)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run a load test and print (and optionally write) its report.
    Run(Box<RunArgs>),
    /// Serve the built-in in-memory RESP target (to measure a generator fleet's ceiling).
    Sink {
        /// Address to listen on.
        #[arg(long, env = "CREST_SINK_LISTEN", default_value = "127.0.0.1:6379")]
        listen: SocketAddr,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ArrivalArg {
    Uniform,
    Poisson,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum PacerArg {
    Sleep,
    Spin,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Server to load, host:port (default: a built-in in-memory target on loopback).
    #[arg(long, env = "CREST_TARGET")]
    target: Option<String>,
    /// Requests per second across the whole cluster.
    #[arg(long, env = "CREST_RATE", default_value = "1000", value_parser = config::parse_rate, allow_negative_numbers = true)]
    rate: f64,
    /// How long to send, e.g. 10s, 2m.
    #[arg(long, env = "CREST_DURATION", default_value = "10s", value_parser = config::parse_duration)]
    duration: Duration,
    /// SET:GET weights, e.g. 1:10.
    #[arg(long, env = "CREST_RATIO", default_value = "1:10", value_parser = config::parse_ratio)]
    ratio: (u32, u32),
    /// Keyspace size (keys are PREFIX0 .. PREFIX<keys-1>, chosen uniformly).
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Key prefix.
    #[arg(long, default_value = "crest:")]
    key_prefix: String,
    /// Value size for SET, e.g. 1024, 1k, 10MB.
    #[arg(long, default_value = "32", value_parser = config::parse_size)]
    value_size: u64,
    /// Connections across the whole cluster (spread over every shard, none lost).
    #[arg(long, env = "CREST_CONNECTIONS", default_value_t = 50)]
    connections: u32,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 1)]
    pipeline: u32,
    /// Arrival process.
    #[arg(long, value_enum, default_value = "uniform")]
    arrival: ArrivalArg,
    /// Pacer: sleep (precise, cheap) or spin (lowest lag, one core per shard).
    #[arg(long, value_enum, default_value = "sleep")]
    pacer: PacerArg,
    /// A request unanswered this long fails as `timeout` (its connection is reopened).
    #[arg(long, default_value = "5s", value_parser = config::parse_duration)]
    timeout: Duration,
    /// After the schedule ends, wait at most this long for outstanding replies.
    #[arg(long, default_value = "2s", value_parser = config::parse_duration)]
    drain: Duration,
    /// Seed for keys and Poisson gaps (default: random; the report records it).
    #[arg(long)]
    seed: Option<u64>,
    /// Folder for report.json and timeline.csv.
    #[arg(long, env = "CREST_OUT")]
    out: Option<PathBuf>,
    /// Wait for this many remote workers (crest-worker --coordinator ...) instead of local ones.
    #[arg(long, env = "CREST_WORKERS")]
    workers: Option<u32>,
    /// Address workers dial (remote mode).
    #[arg(long, env = "CREST_LISTEN", default_value = "0.0.0.0:7600")]
    listen: SocketAddr,
    /// How long to wait for remote workers.
    #[arg(long, env = "CREST_WAIT_TIMEOUT", default_value = "60s", value_parser = config::parse_duration)]
    wait_timeout: Duration,
    /// In-process workers when --workers is not given.
    #[arg(long, default_value_t = 1)]
    local_workers: u32,
    /// Cores for local workers' shards, e.g. 0-3 (default: all this process may use).
    #[arg(long)]
    cpus: Option<String>,
    /// At most this many local shards.
    #[arg(long)]
    threads: Option<usize>,
    /// Shared secret every worker must present.
    #[arg(long, env = "CREST_TOKEN", default_value = "", hide_env_values = true)]
    token: String,
    /// Requests per shard allowed to wait for a free connection before failing as backlog_full.
    #[arg(long, default_value_t = 1_000_000)]
    backlog_limit: u64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("crest: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn usage(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("crest: {msg}");
    ExitCode::from(2)
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    match cli.command {
        Cmd::Sink { listen } => rt.block_on(async {
            let l = match tokio::net::TcpListener::bind(listen).await {
                Ok(l) => l,
                Err(e) => return Ok(usage(format!("--listen {listen}: cannot listen: {e}"))),
            };
            eprintln!("crest: built-in target listening on {}", l.local_addr()?);
            crest::sink::serve(l, async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await?;
            Ok(ExitCode::SUCCESS)
        }),
        Cmd::Run(args) => {
            let cfg = match to_config(*args) {
                Ok(c) => c,
                Err(e) => return Ok(usage(e)),
            };
            let out = cfg.out.clone();
            if let Some(dir) = &out
                && let Err(e) = std::fs::create_dir_all(dir)
            {
                return Ok(usage(format!(
                    "--out {}: cannot create the folder: {e}",
                    dir.display()
                )));
            }
            let res = rt.block_on(orchestrate::run(cfg));
            rt.shutdown_timeout(Duration::from_millis(500));
            match res {
                Ok(report) => {
                    print!("{}", report.table());
                    if let Some(dir) = out {
                        let json = serde_json::to_string_pretty(&report)?;
                        write_atomic(&dir.join("report.json"), json.as_bytes())?;
                        write_atomic(&dir.join("timeline.csv"), report.timeline_csv().as_bytes())?;
                        eprintln!(
                            "crest: report written to {}",
                            dir.join("report.json").display()
                        );
                    }
                    // A report is written either way; exit 3 tells scripts it is incomplete
                    // (a worker was lost, or the books did not balance).
                    if report.workers.iter().any(|w| w.lost) || !report.checks.problems.is_empty() {
                        Ok(ExitCode::from(3))
                    } else {
                        Ok(ExitCode::SUCCESS)
                    }
                }
                Err(RunError::Usage(m)) => Ok(usage(m)),
                Err(RunError::Interrupted) => {
                    eprintln!("crest: interrupted; workers told to stop, no report written");
                    Ok(ExitCode::from(130))
                }
                Err(RunError::Failed(m)) => {
                    eprintln!("crest: {m}");
                    Ok(ExitCode::from(1))
                }
            }
        }
    }
}

/// Writes to a temporary name and renames, so a half-written report never passes as whole.
fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

fn to_config(a: RunArgs) -> Result<RunConfig, String> {
    let profile = config::check_numbers(
        a.rate,
        a.duration,
        a.keys,
        a.value_size,
        a.connections,
        a.pipeline,
    )
    .map_err(|e| e.to_string())?;
    if let Some(t) = &a.target
        && t.rsplit_once(':')
            .and_then(|(_, p)| p.parse::<u16>().ok())
            .is_none()
    {
        return Err(format!(
            "--target {t:?}: expected host:port, e.g. 127.0.0.1:6379"
        ));
    }
    let workers = match a.workers {
        Some(0) => return Err("--workers 0: need at least 1 worker".into()),
        Some(n) => Workers::Remote {
            count: n,
            wait_timeout: a.wait_timeout,
        },
        None => {
            if a.local_workers == 0 {
                return Err("--local-workers 0: need at least 1 worker".into());
            }
            Workers::Local {
                count: a.local_workers,
                cpus: a.cpus,
                threads: a.threads,
            }
        }
    };
    if a.timeout.is_zero() {
        return Err("--timeout 0s: must be > 0, e.g. 5s".into());
    }
    Ok(RunConfig {
        target: a.target,
        profile,
        arrival: match a.arrival {
            ArrivalArg::Uniform => Arrival::Uniform,
            ArrivalArg::Poisson => Arrival::Poisson,
        },
        pacer: match a.pacer {
            PacerArg::Sleep => Pacer::Sleep,
            PacerArg::Spin => Pacer::Spin,
        },
        ratio: a.ratio,
        keys: a.keys,
        key_prefix: a.key_prefix,
        value_size: a.value_size,
        connections: a.connections,
        pipeline: a.pipeline,
        timeout: a.timeout,
        drain: a.drain,
        seed: a
            .seed
            .unwrap_or_else(|| crest_worker::agent::unix_ns() as u64),
        out: a.out,
        listen: a.listen,
        workers,
        token: a.token,
        backlog_limit: a.backlog_limit.max(1),
    })
}
