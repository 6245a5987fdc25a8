//! `crest`: the coordinator CLI. `crest run` plans and runs a load test; `crest sink` runs
//! the built-in RESP target alone.

use clap::{Parser, Subcommand};
use crest::cli::{RunArgs, to_config};
use crest::orchestrate::{self, RunError};
use std::net::SocketAddr;
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
            crest_sink::serve(l, orchestrate::interrupted()).await?;
            Ok(ExitCode::SUCCESS)
        }),
        Cmd::Run(args) => {
            let cfg = match to_config(*args) {
                Ok(c) => c,
                Err(e) => return Ok(usage(e)),
            };
            let out = cfg.out.clone();
            if let Some(dir) = &out
                && let Err(e) = std::fs::create_dir_all(dir).and_then(|()| {
                    // Fail now, not after the run, when the report cannot be written.
                    let probe = dir.join(".crest-write-check");
                    std::fs::write(&probe, b"")?;
                    std::fs::remove_file(&probe)
                })
            {
                return Ok(usage(format!(
                    "--out {}: cannot write there: {e}",
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
                        let started = humantime::parse_rfc3339(&report.started_at)
                            .unwrap_or_else(|_| std::time::SystemTime::now());
                        let mut hlog = Vec::new();
                        crest::report::write_hlog(&report, started, &mut hlog)
                            .map_err(|e| anyhow::anyhow!("latency.hlog: {e}"))?;
                        write_atomic(&dir.join("latency.hlog"), &hlog)?;
                        write_atomic(
                            &dir.join("report.html"),
                            crest::html::render(&report).as_bytes(),
                        )?;
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
