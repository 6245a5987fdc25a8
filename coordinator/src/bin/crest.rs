//! `crest`: the coordinator CLI. `crest run` plans and runs a load test; `crest sink` runs
//! the built-in RESP target alone.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use crest::cli::{RunArgs, to_config};
use crest::orchestrate::{self, RunError};
use crest::{output, report};
use std::io::IsTerminal;
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
    // `--help` shows each default from the one table the code reads.
    let matches = Cli::command()
        .mut_subcommand("run", crest::defaults::annotate)
        .try_get_matches();
    let cli = match matches.and_then(|m| Cli::from_arg_matches(&m)) {
        Ok(c) => c,
        // Help and version go to stdout as clap writes them; every error is one line.
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => return usage(crest::cli::clap_line(&e)),
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
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
            crest_sink::serve(l, signals()).await?;
            Ok(ExitCode::SUCCESS)
        }),
        Cmd::Run(args) => {
            let cfg = match to_config(*args) {
                Ok(c) => c,
                Err(e) => return Ok(usage(e)),
            };
            if let Some(dir) = &cfg.out
                && let Err(e) = output::check_writable(dir)
            {
                return Ok(usage(e));
            }
            // The report is built and written inside the runtime, so a second Ctrl-C while
            // it is written still exits at once.
            let code = rt.block_on(async {
                let res = match orchestrate::bind(&cfg).await {
                    Ok(listener) => orchestrate::run(&cfg, listener, first_signal()).await,
                    Err(e) => Err(e),
                };
                match res {
                    Ok(mut results) => {
                        let live_errors = std::mem::take(&mut results.live_errors);
                        let report = report::build(&cfg, results);
                        // The files first: a stdout that blocks (a pager that stopped
                        // reading) or is closed (`crest run | head`) must not cost the
                        // report; the summary there is best effort.
                        let written = cfg
                            .out
                            .as_ref()
                            .map(|dir| output::write_all(&report, dir, !live_errors.is_empty()));
                        let _ = std::io::Write::write_all(
                            &mut std::io::stdout().lock(),
                            report.table().as_bytes(),
                        );
                        if let Some(written) = written {
                            let path = written.map_err(anyhow::Error::msg)?;
                            eprintln!(
                                "crest: report written to {}{}",
                                path.display(),
                                if report.interrupted {
                                    " (incomplete: interrupted)"
                                } else {
                                    ""
                                }
                            );
                            if let Some(e) = live_errors.first() {
                                anyhow::bail!("{e}");
                            }
                        }
                        Ok(report.exit_code())
                    }
                    Err(RunError::Usage(m)) => Ok(usage(m)),
                    Err(RunError::Interrupted) => {
                        eprintln!(
                            "crest: interrupted before the measured run began; workers told to stop, no report written"
                        );
                        Ok(ExitCode::from(130))
                    }
                    Err(RunError::Failed(m)) => {
                        eprintln!("crest: {m}");
                        Ok(ExitCode::from(1))
                    }
                }
            });
            rt.shutdown_timeout(Duration::from_millis(500));
            code
        }
    }
}

/// The first SIGINT or SIGTERM stops the run gracefully (the report so far is written);
/// after it, another one exits at once with 130.
async fn first_signal() {
    signals().await;
    eprintln!(
        "crest: interrupted: stopping the workers and writing the report so far (interrupt again to exit at once)"
    );
    tokio::spawn(async {
        signals().await;
        eprintln!("crest: interrupted again: exiting at once");
        std::process::exit(130);
    });
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM (`docker stop`, Kubernetes deleting the Job).
async fn signals() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
