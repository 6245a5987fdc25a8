//! `crest-worker`: a long-lived load worker. Dials the coordinator, registers, runs what it
//! is given, goes back to idle. It never listens on any port.
//!
//! Control-plane security: `--coordinator https://…` dials TLS, trusting `--control-ca`
//! (or the system's CAs); mutual TLS adds `--control-client-cert/--control-client-key`.
//! A token is never sent in the clear to another host: `http://` to a non-loopback host
//! with a token is refused unless `--insecure`.

use clap::Parser;
use crest_engine::{agent, control_tls, cpus};
use std::process::ExitCode;

/// Crest load worker: dials a coordinator (`crest run --listen ...`) and runs its share of
/// each run on CPU-pinned shards.
#[derive(Debug, Parser)]
#[command(name = "crest-worker", version)]
struct Args {
    /// Coordinator URL: https://10.0.0.1:7600 (TLS; see --control-ca) or http://… (plaintext).
    #[arg(long, env = "CREST_COORDINATOR")]
    coordinator: String,
    /// TLS to the coordinator.
    #[command(flatten)]
    control: control_tls::ClientFiles,
    /// Allow --token over plaintext http:// to a non-loopback host (the token crosses the
    /// network in the clear).
    #[arg(long, env = "CREST_INSECURE", value_parser = clap::builder::BoolishValueParser::new())]
    insecure: bool,
    /// Cores for the shards, e.g. 2-7 (default: every core this process may use).
    #[arg(long, env = "CREST_CPUS")]
    cpus: Option<String>,
    /// At most this many shards (one pinned thread each).
    #[arg(long, env = "CREST_THREADS")]
    threads: Option<usize>,
    /// Name shown in reports (default: `worker-$JOB_COMPLETION_INDEX` in a Kubernetes
    /// Indexed Job, else the host name).
    #[arg(long, env = "CREST_NAME")]
    name: Option<String>,
    /// Take part in one run, then exit: 0 when the run ended, 1 when the coordinator was
    /// lost during it (a per-run Kubernetes Job's workers). Until a coordinator answers it
    /// keeps dialling, as a long-lived worker does.
    #[arg(long, env = "CREST_ONE_RUN", value_parser = clap::builder::BoolishValueParser::new())]
    one_run: bool,
    /// Shared secret the coordinator requires.
    #[command(flatten)]
    token: control_tls::Token,
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("crest-worker: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn run(args: Args) -> anyhow::Result<ExitCode> {
    let cores = match cpus::pick(args.cpus.as_deref(), args.threads) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("crest-worker: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let spare = cpus::spare(&cores);
    let tls = match args.control.load_given() {
        Ok(t) => t,
        Err(e) => {
            eprintln!("crest-worker: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    match control_tls::plaintext_rule(
        &args.coordinator,
        !args.token.secret.is_empty(),
        args.insecure,
    ) {
        Ok(None) => {}
        Ok(Some(warning)) => tracing::warn!("{warning}"),
        Err(line) => {
            eprintln!("crest-worker: {line}");
            return Ok(ExitCode::from(2));
        }
    }
    let host = hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".into());
    let cfg = agent::AgentConfig {
        coordinator: args.coordinator,
        name: args.name.unwrap_or_else(|| {
            default_name(&host, std::env::var("JOB_COMPLETION_INDEX").ok().as_deref())
        }),
        host,
        token: args.token.secret,
        cores,
        once: false,
        one_run: args.one_run,
        in_process: false,
        tls,
    };
    // The control session's threads (this one, which runs the session, and the
    // runtime's) stay off the shards' cores when there are others: decoding a replay's
    // chunks or a plan must not take a shard's core from it.
    if let Err(e) = cpus::confine_current(&spare) {
        tracing::warn!("cannot keep the control threads off the shards' cores: {e}");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .on_thread_start(move || {
            let _ = cpus::confine_current(&spare);
        })
        .build()?;
    let res = rt.block_on(agent::run(cfg, shutdown_signal()));
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    match res {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e @ agent::AgentError::Lost(_)) => {
            eprintln!("crest-worker: {e}");
            Ok(ExitCode::from(1))
        }
        Err(e) => {
            eprintln!("crest-worker: {e}");
            Ok(ExitCode::from(2))
        }
    }
}

/// The name a worker goes by without `--name`: `worker-<index>` in a Kubernetes Indexed
/// Job (its `JOB_COMPLETION_INDEX`: stable across a retried pod, unlike the pod's name),
/// else the host name.
fn default_name(host: &str, index: Option<&str>) -> String {
    match index {
        Some(i) if !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()) => format!("worker-{i}"),
        _ => host.to_string(),
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// clap's own checks of the command line (unique ids, flattened groups).
    #[test]
    fn the_command_line_is_well_formed() {
        Args::command().debug_assert();
    }

    /// In an Indexed Job a worker is named by its index; elsewhere by its host.
    #[test]
    fn a_worker_without_a_name_is_named_by_its_job_index_or_its_host() {
        assert_eq!(default_name("pod-x7", Some("3")), "worker-3");
        assert_eq!(default_name("pod-x7", None), "pod-x7");
        assert_eq!(default_name("pod-x7", Some("")), "pod-x7");
        assert_eq!(default_name("pod-x7", Some("3; rm")), "pod-x7");
    }
}
