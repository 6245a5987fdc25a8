//! `crest`: the coordinator CLI. `crest run` plans and runs a load test; `crest compare`
//! runs it against two or more targets (or reads earlier reports) and compares them;
//! `crest sink` runs the built-in RESP target alone (`--memcache`: a memcached one).

use clap::parser::ValueSource;
use clap::{ArgAction, CommandFactory, FromArgMatches, Parser, Subcommand};
use crest::cli::{ReplayArgs, RunArgs, to_config, to_replay_config};
use crest::compare::{self, Between};
use crest::orchestrate::{self, RunError};
use crest::{build, output};
use crest_report::compare as comparison;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Crest: distributed open-loop load generator for Redis-protocol servers and memcached.
#[derive(Debug, Parser)]
#[command(
    name = "crest",
    version,
    after_help = "Example:\n  crest run --target 127.0.0.1:6379 --rate 20000 --duration 30s --out results/\n\nEvery subcommand's --help has its own examples; `crest man` prints the man page."
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run a load test and print (and optionally write) its report.
    #[command(
        after_help = "Examples:\n  crest run --target 127.0.0.1:6379 --rate 20000 --duration 30s --out results/\n  crest run --target memcache://10.0.0.5:11211,10.0.0.6:11211 --meta --mix GET=10,SET=1 --rate 50000\n  crest run --target redis://:pw@cache:6379 --stages '30s:0->50000, 60s:50000' --conn-lifetime 30s±5s"
    )]
    Run(Box<RunArgs>),
    /// Replay a recorded trace (Twitter cache-trace CSV, cachebench KV CSV or redis-cli
    /// MONITOR output; .zst too) on its own clock, or re-timed with --rate/--stages,
    /// split over the workers by key so one key's requests keep their order; the
    /// coordinator streams each worker its part (workers never need the file).
    #[command(
        after_help = "Examples:\n  crest replay cluster52.0.zst --format twitter --target 127.0.0.1:6379 --speed 2 --out results/\n  crest replay kv.csv --format cachebench --rate 50000 --amplify 4\n  crest replay monitor.txt --format monitor --target 10.0.0.6:6379 --workers 2"
    )]
    Replay(Box<ReplayArgs>),
    /// Watch a live server without loading it (INFO commandstats once a second, a
    /// throttled sample of its keys) and write a commented profile `crest run --profile`
    /// runs: each command's rate curve, its keyspace, value sizes and TTLs, the server's
    /// version and settings.
    #[command(
        after_help = "Example:\n  crest capture --target 10.0.0.5:6379 --duration 10m --out prod.toml\n  crest run --profile prod.toml --target 10.0.0.6:6379"
    )]
    Capture(Box<crest::capture::CaptureArgs>),
    /// Compare two or more targets under the same plan and seed, runs interleaved (ABBA),
    /// or earlier reports (`crest compare a/report.json b/report.json`): medians, the
    /// difference with a confidence interval over runs, and a verdict per metric.
    #[command(
        after_help = "Examples:\n  crest compare --target a=10.0.0.5:6379 --target b=10.0.0.6:6379 --rate 20000 --duration 30s --runs 5 --out cmp/\n  crest compare before/report.json after/report.json"
    )]
    Compare(Box<CompareArgs>),
    /// valkey-benchmark's default tests, the same commands, keys and values, printed in
    /// its formats (-q, --csv); closed loop as it measures, or open loop with --rate.
    #[command(after_help = "Example:\n  crest suite --target 127.0.0.1:6379 -n 100000 -c 50 -q")]
    Suite(Box<SuiteArgs>),
    /// Find the knee: the highest open-loop rate the target holds within SLOs (climb,
    /// bisect, confirm), each window judged on its exact merged histogram; writes
    /// search.json and report.html (the hockey stick) to --out.
    #[command(
        after_help = "Example:\n  crest search --target 127.0.0.1:6379 --slo 'p99<=1ms,p99.9<=5ms' --max 500000 --out knee/"
    )]
    Search(Box<SearchArgs>),
    /// Relay between the coordinator and many workers (a fleet past what one coordinator
    /// holds): workers dial it as they dial `crest run`; it registers with the coordinator
    /// as one worker with all their shards, and sums their results before they go up.
    #[command(
        after_help = "Example:\n  crest relay --coordinator http://coordinator:7600 --listen 0.0.0.0:7601"
    )]
    Relay(Box<RelayArgs>),
    /// Render a saved report.json again: the same summary on stdout as the run printed,
    /// and with --out the same report.html and timeline.csv as the run wrote.
    #[command(after_help = "Example:\n  crest report results/report.json --out results/")]
    Report {
        /// A report.json written by `crest run --out` (or by compare, search, suite).
        file: PathBuf,
        /// Folder to write report.html and timeline.csv into (created if missing).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Serve the built-in in-memory target, RESP or (--memcache) memcached (to measure a
    /// generator fleet's ceiling).
    #[command(
        after_help = "Examples:\n  crest sink --listen 0.0.0.0:6379\n  crest sink --memcache --listen 0.0.0.0:11211"
    )]
    Sink {
        /// Address to listen on [default: 127.0.0.1:6379, or 127.0.0.1:11211 with
        /// --memcache].
        #[arg(long, env = "CREST_SINK_LISTEN")]
        listen: Option<SocketAddr>,
        /// Speak memcached instead of RESP: the text and meta protocols, answered and
        /// counted in `stats` as memcached 1.6 does (values up to 1 MiB, its item size
        /// limit).
        #[arg(long)]
        memcache: bool,
    },
    /// Print a shell completion script for crest.
    #[command(
        after_help = "Examples:\n  crest completions bash > /usr/share/bash-completion/completions/crest\n  crest completions zsh > \"${fpath[1]}/_crest\"\n  crest completions fish > ~/.config/fish/completions/crest.fish"
    )]
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print crest's man page (roff), or a subcommand's (`crest man run`).
    #[command(
        after_help = "Examples:\n  crest man > /usr/local/share/man/man1/crest.1\n  crest man run | man -l -"
    )]
    Man {
        /// A subcommand: its page (crest-run(1)) instead of crest(1).
        subcommand: Option<String>,
    },
}

/// The `crest` command as it parses: every default shown from the one table the code
/// reads, compare's repeated `--target`, negative numbers taken as values. Completions and
/// man pages are made from it, so they list exactly what parses.
fn command() -> clap::Command {
    let mut cli = Cli::command()
        .mut_subcommand("run", crest::defaults::annotate)
        .mut_subcommand("suite", crest::defaults::annotate)
        .mut_subcommand("search", crest::defaults::annotate)
        .mut_subcommand("compare", |c| {
            crest::defaults::annotate(c).mut_arg("target", |a| a.action(ArgAction::Append))
        });
    let names: Vec<String> = cli
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    for name in names {
        // A negative number is a value (`--connections -5` gets "cannot be negative"),
        // not an unknown flag.
        cli = cli.mut_subcommand(name, |c| c.allow_negative_numbers(true));
    }
    cli
}

/// `crest completions SHELL`.
fn completions_cmd(shell: clap_complete::Shell) -> anyhow::Result<ExitCode> {
    let mut cmd = command();
    clap_complete::generate(shell, &mut cmd, "crest", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

/// `crest man [SUBCOMMAND]`.
fn man_cmd(subcommand: Option<&str>) -> anyhow::Result<ExitCode> {
    let mut cmd = command();
    cmd.build();
    let page = match subcommand {
        None => cmd,
        Some(name) => match cmd.find_subcommand(name) {
            Some(sub) => {
                let full = format!("crest-{}", sub.get_name());
                sub.clone().name(full)
            }
            None => {
                let known: Vec<&str> = cmd
                    .get_subcommands()
                    .map(|c| c.get_name())
                    .filter(|n| *n != "help")
                    .collect();
                return Ok(usage(format!(
                    "man {name}: no such subcommand; known: {}",
                    known.join(" ")
                )));
            }
        },
    };
    match clap_mangen::Man::new(page).render(&mut std::io::stdout()) {
        // A reader that stopped early (`| head`) is no failure of ours.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// `crest relay` flags.
#[derive(Debug, clap::Args)]
struct RelayArgs {
    /// The coordinator's URL: https://HOST:PORT (TLS; see --control-ca) or http://…
    /// (plaintext), as `crest run --listen` serves it.
    #[arg(long, env = "CREST_COORDINATOR")]
    coordinator: String,
    /// Address its workers dial (`crest-worker --coordinator http://THIS`, or https:// with
    /// --control-cert).
    #[arg(long, env = "CREST_RELAY_LISTEN", default_value = "0.0.0.0:7601")]
    listen: SocketAddr,
    /// Upstream: TLS to the coordinator, as a worker dials it.
    #[command(flatten)]
    upstream: crest_engine::control_tls::ClientFiles,
    /// Downstream: TLS to its workers, as `crest run` serves it.
    #[command(flatten)]
    downstream: crest_engine::control_tls::ServerFiles,
    /// Workers to wait for before registering with the coordinator (1 to 10000).
    #[arg(long, env = "CREST_RELAY_WORKERS", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    workers: u32,
    /// Name shown in reports (default: relay-HOSTNAME).
    #[arg(long, env = "CREST_NAME")]
    name: Option<String>,
    /// Shared secret: what its workers must give, and what it gives the coordinator.
    #[command(flatten)]
    token: crest_engine::control_tls::Token,
    /// Allow --token over plaintext http:// to a non-loopback coordinator (the token
    /// crosses the network in the clear).
    #[arg(long, env = "CREST_INSECURE", value_parser = clap::builder::BoolishValueParser::new())]
    insecure: bool,
}

/// `crest compare` flags: its own, then every `crest run` flag (the plan every run
/// follows). `--target` is repeated: `--target a=HOST:PORT --target b=HOST:PORT`.
#[derive(Debug, clap::Args)]
struct CompareArgs {
    /// Earlier reports to compare instead of making runs (report.json files); LABEL=FILE
    /// puts several runs of one target under LABEL.
    #[arg(value_name = "REPORT")]
    reports: Vec<String>,
    /// Runs per target, interleaved ABBA (at least 4 each for a 95% interval; 5 gives a
    /// smallest p of 0.008).
    #[arg(long, default_value_t = 5)]
    runs: u32,
    /// Smallest relative difference called a difference, e.g. 2% (0 to 100%).
    #[arg(long, default_value = "2%", value_parser = parse_percent)]
    min_effect: f64,
    /// Before each run: none, flush (FLUSHALL), or prefill (FLUSHALL, then --prefill).
    #[arg(long, value_enum, default_value = "none")]
    between: Between,
    #[command(flatten)]
    run: RunArgs,
}

/// `crest search` flags: its own, then every `crest run` flag (the plan each window
/// follows; its --rate and --duration are the search's).
#[derive(Debug, clap::Args)]
struct SearchArgs {
    /// Objectives on latency from the intended send time, e.g. "p99<=1ms,p99.9<=5ms"
    /// (CLASS:p99<=1ms for one class).
    #[arg(long)]
    slo: String,
    /// Lowest rate tried (the climb starts here), requests per second.
    #[arg(long, default_value_t = 1_000.0)]
    min: f64,
    /// Highest rate tried, requests per second.
    #[arg(long, default_value_t = 1_000_000.0)]
    max: f64,
    /// Bisection stops when the bracket is this narrow (relative), e.g. 2%.
    #[arg(long, default_value = "2%", value_parser = parse_percent)]
    tolerance: f64,
    /// Failed requests a passing window may have, e.g. 0.1%.
    #[arg(long, default_value = "0.1%", value_parser = parse_percent)]
    error_budget: f64,
    /// Length of a climb window.
    #[arg(long, default_value = "2s", value_parser = crest::config::parse_duration)]
    probe_window: Duration,
    /// Length of a bisect or confirm window.
    #[arg(long, default_value = "5s", value_parser = crest::config::parse_duration)]
    window: Duration,
    /// Schedule lag p99 above this, with free connections, makes a window invalid: the
    /// generator, not the server, was the limit.
    #[arg(long, default_value = "1ms", value_parser = crest::config::parse_duration)]
    lag_limit: Duration,
    /// Before each window: none, flush (FLUSHALL), or prefill (FLUSHALL, then --prefill).
    #[arg(long, value_enum, default_value = "none")]
    between: Between,
    #[command(flatten)]
    run: RunArgs,
}

/// `crest suite` flags: valkey-benchmark's own, then `crest run`'s target, workers and
/// pacing groups (`--rate` for the open-loop mode). Its load group (`--duration`,
/// `--command`, `--connections`…) the suite sets per test: clap does not know those flags
/// here, and [`suite_load_flag`] says so in the suite's words.
#[derive(Debug, clap::Args)]
struct SuiteArgs {
    /// Tests, comma-separated, valkey-benchmark's names (ping, set, get, incr, lpush,
    /// rpush, lpop, rpop, sadd, hset, spop, zadd, zpopmin, lrange, lrange_100 … lrange_600,
    /// mset, xadd); default all.
    #[arg(short = 't')]
    t: Option<String>,
    /// Requests per test.
    #[arg(short = 'n', default_value_t = 100_000)]
    n: u64,
    /// Parallel connections.
    #[arg(short = 'c', default_value_t = 50)]
    c: u32,
    /// Requests pipelined per connection.
    #[arg(short = 'P', default_value_t = 1)]
    pipe: u32,
    /// Payload bytes of SET, LPUSH, HSET, MSET, XADD values (valkey-benchmark's
    /// generator); below 1 is 1, as valkey-benchmark makes it.
    #[arg(short = 'd', default_value_t = 3)]
    d: usize,
    /// Keyspace: replace __rand_int__ with 12-digit numbers below this (default: the
    /// literal name, one key).
    #[arg(short = 'r')]
    r: Option<u64>,
    /// One line per test: "SET: 46511.62 requests per second, p50=0.135 msec".
    #[arg(short = 'q')]
    q: bool,
    /// valkey-benchmark's CSV.
    #[arg(long)]
    csv: bool,
    /// Test list: redis-7.0 (20 tests) or valkey-8.1 (+XADD); default: from the server's
    /// version (valkey, or redis 7.2+: valkey-8.1).
    #[arg(long, value_enum)]
    suite: Option<crest::suite::Suite>,
    #[command(flatten, next_help_heading = "Target")]
    target: crest::cli::TargetArgs,
    #[command(flatten, next_help_heading = "Workers")]
    fleet: crest::cli::FleetArgs,
    #[command(flatten, next_help_heading = "Pacing and recording")]
    pace: crest::cli::PaceArgs,
}

impl SuiteArgs {
    /// The `crest run` flags the suite was given, as one set (no load flags: each test
    /// sets its own).
    fn run_args(&self) -> RunArgs {
        RunArgs {
            target: self.target.clone(),
            fleet: self.fleet.clone(),
            pace: self.pace.clone(),
            load: crest::cli::LoadArgs::default(),
        }
    }
}

/// A `crest run` load flag given to `crest suite` (clap refuses it as unknown there): the
/// suite's one line for it, naming the valkey-benchmark flags to use instead.
fn suite_load_flag(e: &clap::Error) -> Option<String> {
    use clap::Args as _;
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(given)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let name = given.trim_start_matches('-').split('=').next()?.to_string();
    let load = crest::cli::LoadArgs::augment_args(clap::Command::new("load"));
    let known = load
        .get_arguments()
        .any(|a| a.get_long() == Some(name.as_str()));
    known.then(|| {
        format!(
            "--{name}: crest suite sets it for each test; give valkey-benchmark's -n -c -P -d -r -t instead"
        )
    })
}

/// `2%`, `2` (percent) or `0.5%` as a fraction.
fn parse_percent(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("{s:?} is not a percentage: give e.g. 2%"))?;
    if !(0.0..100.0).contains(&v) {
        return Err(format!(
            "{s}: give a percentage from 0 to below 100, e.g. 2%"
        ));
    }
    Ok(v / 100.0)
}

fn main() -> ExitCode {
    let matches = command().try_get_matches_from(crest::cli::negative_values(std::env::args_os()));
    // compare's repeated --target, and the run flags given to a compare of reports.
    let mut targets = Vec::new();
    let mut run_flags = Vec::new();
    if let Ok(m) = &matches
        && let Some(c) = m.subcommand_matches("compare")
    {
        targets = c
            .get_many::<String>("target")
            .map(|v| v.cloned().collect())
            .unwrap_or_default();
        run_flags = c
            .ids()
            .map(|id| id.as_str().to_string())
            .filter(|id| {
                // Argument groups (the flattened structs) are named after their type.
                !id.starts_with(|ch: char| ch.is_ascii_uppercase())
                    && !matches!(
                        id.as_str(),
                        "reports" | "runs" | "min_effect" | "between" | "out"
                    )
                    && c.value_source(id) == Some(ValueSource::CommandLine)
            })
            .collect();
    }
    // The subcommand is the first word that is not an option.
    let in_suite = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .as_deref()
        == Some("suite");
    let cli = match matches.and_then(|m| Cli::from_arg_matches(&m)) {
        Ok(c) => c,
        // Help and version go to stdout as clap writes them; every error is one line.
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) if in_suite => {
            return usage(suite_load_flag(&e).unwrap_or_else(|| crest::cli::clap_line(&e)));
        }
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
    match run(cli, targets, run_flags) {
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

fn run(cli: Cli, targets: Vec<String>, run_flags: Vec<String>) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    match cli.command {
        Cmd::Relay(args) => rt.block_on(relay_cmd(*args)),
        Cmd::Report { file, out } => report_cmd(&file, out.as_deref()),
        Cmd::Completions { shell } => completions_cmd(shell),
        Cmd::Man { subcommand } => man_cmd(subcommand.as_deref()),
        Cmd::Sink { listen, memcache } => rt.block_on(async {
            let port = if memcache { 11211 } else { 6379 };
            let listen = listen.unwrap_or(SocketAddr::from(([127, 0, 0, 1], port)));
            let l = match tokio::net::TcpListener::bind(listen).await {
                Ok(l) => l,
                Err(e) => return Ok(usage(format!("--listen {listen}: cannot listen: {e}"))),
            };
            if memcache {
                eprintln!(
                    "crest: built-in memcached target listening on {}",
                    l.local_addr()?
                );
                crest_sink::serve_memcache(l, signals()).await?;
            } else {
                eprintln!("crest: built-in target listening on {}", l.local_addr()?);
                crest_sink::serve(l, signals()).await?;
            }
            Ok(ExitCode::SUCCESS)
        }),
        Cmd::Suite(args) => {
            let code = rt.block_on(suite_cmd(*args));
            rt.shutdown_timeout(Duration::from_millis(500));
            code
        }
        Cmd::Search(args) => {
            let code = rt.block_on(search_cmd(*args));
            rt.shutdown_timeout(Duration::from_millis(500));
            code
        }
        Cmd::Compare(args) => {
            let code = rt.block_on(compare_cmd(*args, targets, run_flags));
            rt.shutdown_timeout(Duration::from_millis(500));
            code
        }
        Cmd::Run(args) => run_cmd(rt, to_config(*args)),
        Cmd::Replay(args) => run_cmd(rt, to_replay_config(*args)),
        Cmd::Capture(args) => {
            let code = rt.block_on(capture_cmd(*args));
            rt.shutdown_timeout(Duration::from_millis(500));
            code
        }
    }
}

/// `crest run` and `crest replay`: the run as configured, its report printed and written.
fn run_cmd(
    rt: tokio::runtime::Runtime,
    cfg: Result<crest::config::RunConfig, crest::config::ConfigError>,
) -> anyhow::Result<ExitCode> {
    {
        {
            let cfg = match cfg {
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
                    Ok(listener) => {
                        orchestrate::run_with(&cfg, listener, first_signal(), None, build::finish)
                            .await
                    }
                    Err(e) => Err(e),
                };
                match res {
                    Ok(build::Ran {
                        report,
                        live_errors,
                    }) => {
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
                        Ok(ExitCode::from(report.exit_code()))
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

/// `crest capture`: the server watched, its profile written.
async fn capture_cmd(a: crest::capture::CaptureArgs) -> anyhow::Result<ExitCode> {
    let opts = match a.options() {
        Ok(o) => o,
        Err(e) => return Ok(usage(e)),
    };
    let cfg = match to_config(RunArgs {
        target: a.target.clone(),
        ..RunArgs::default()
    }) {
        Ok(c) => c,
        Err(e) => return Ok(usage(e)),
    };
    if cfg.ring.len() > 1 {
        return Ok(usage(format!(
            "--target: crest capture watches one server; give one of the ring's {} (e.g. memcache://{})",
            cfg.ring.len(),
            cfg.ring[0]
        )));
    }
    if cfg.target.is_none() {
        return Ok(usage(
            "--target: give the server to watch, e.g. --target 10.0.0.5:6379",
        ));
    }
    if let Err(e) = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .append(true)
        .open(&a.out)
    {
        return Ok(usage(format!(
            "--out {}: cannot write it: {e}",
            a.out.display()
        )));
    }
    let captured = if cfg.protocol.is_memcache() {
        let addr = cfg
            .ring
            .first()
            .cloned()
            .or(cfg.target.clone())
            .unwrap_or_default();
        let started = || {
            eprintln!(
                "crest: capturing memcached {addr} for {:?} (one stats a second, at most {} sampling commands a second)",
                opts.duration, opts.sample_rate
            );
        };
        tokio::select! {
            c = crest::capture::memcache::capture(&cfg, &addr, &opts, started) => c,
            () = signals() => {
                eprintln!("crest: interrupted: no profile written");
                return Ok(ExitCode::from(130));
            }
        }
    } else {
        let (mut conn, shown) = match orchestrate::control_to(&cfg, None, "crest-capture").await {
            Ok(c) => c,
            Err(e) => return Ok(usage(format!("--target: {e}"))),
        };
        // A cluster: every node is watched (its rates summed), keys sampled on each primary.
        let cluster = match cfg.cluster {
            crest_model::target::ClusterMode::Off => None,
            _ => crest::capture::cluster_peers(&mut conn).await,
        };
        if cfg.cluster == crest_model::target::ClusterMode::On && cluster.is_none() {
            return Ok(usage(format!(
                "--cluster on: {shown} is not in a cluster (CLUSTER NODES says nothing); drop --cluster on"
            )));
        }
        let (seed_primary, peers) = cluster.unwrap_or((true, Vec::new()));
        let mut nodes = vec![(conn, seed_primary)];
        for (addr, primary) in peers {
            let mut node = cfg.clone();
            node.target = Some(addr.clone());
            match orchestrate::control_to(&node, None, "crest-capture").await {
                Ok((c, _)) => nodes.push((c, primary)),
                Err(e) => return Ok(usage(format!("--target: cluster node {addr}: {e}"))),
            }
        }
        let started = || {
            eprintln!(
                "crest: capturing {shown} for {:?} (one INFO a second, at most {} sampling commands a second)",
                opts.duration, opts.sample_rate
            );
        };
        tokio::select! {
            c = crest::capture::capture(nodes, &shown, &opts, started) => c,
            () = signals() => {
                eprintln!("crest: interrupted: no profile written");
                return Ok(ExitCode::from(130));
            }
        }
    };
    let captured = match captured {
        Ok(c) => c,
        Err(e) => return Ok(usage(e)),
    };
    let text = crest::capture::profile_toml(&captured, opts.smooth);
    std::fs::write(&a.out, &text).map_err(|e| anyhow::anyhow!("{}: {e}", a.out.display()))?;
    if !text.contains("[[class]]") {
        eprintln!(
            "crest: no command Crest sends was seen: the profile holds the server's facts as comments and no class"
        );
    }
    let calls: u64 = captured.seconds.iter().flat_map(|s| s.values()).sum();
    eprintln!(
        "crest: {} s, {calls} calls, {} keys sampled; profile written to {}",
        captured.seconds.len(),
        captured.sample.len(),
        a.out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `crest report FILE [--out DIR]`: the saved report rendered as the run rendered it.
fn report_cmd(file: &std::path::Path, out: Option<&std::path::Path>) -> anyhow::Result<ExitCode> {
    let report = match output::read_report(file) {
        Ok(r) => r,
        Err(e) => return Ok(usage(e)),
    };
    if let Some(dir) = out {
        if let Err(e) = output::check_writable(dir) {
            return Ok(usage(e));
        }
        output::write_rendered(&report, dir).map_err(anyhow::Error::msg)?;
        eprintln!(
            "crest: report.html and timeline.csv written to {}",
            dir.display()
        );
    }
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), report.table().as_bytes());
    Ok(ExitCode::SUCCESS)
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

/// A relay whose `--coordinator` is its own `--listen` would wait on itself forever: the
/// line saying so, when the URL's host resolves to a local address on that port.
async fn relay_to_itself(coordinator: &str, listen: std::net::SocketAddr) -> Option<String> {
    let authority = coordinator
        .split_once("://")
        .map_or(coordinator, |(_, r)| r);
    let authority = authority.split('/').next().unwrap_or(authority);
    let addrs: Vec<std::net::SocketAddr> = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        tokio::net::lookup_host(authority),
    )
    .await
    .ok()?
    .ok()?
    .collect();
    let local = |ip: std::net::IpAddr| {
        ip.is_loopback() || ip == listen.ip() || std::net::UdpSocket::bind((ip, 0)).is_ok()
    };
    addrs
        .iter()
        .any(|a| {
            a.port() == listen.port() && (listen.ip().is_unspecified() || a.ip() == listen.ip() || (listen.ip().is_loopback() && a.ip().is_loopback())) && local(a.ip())
        })
        .then(|| {
            format!(
                "--coordinator {coordinator}: is this relay's own --listen {listen}; give the address of the coordinator (crest run --listen) or of the relay above this one"
            )
        })
}

/// `crest relay`: until Ctrl-C or SIGTERM.
async fn relay_cmd(args: RelayArgs) -> anyhow::Result<ExitCode> {
    let tls = match args.upstream.load_given() {
        Ok(t) => t,
        Err(e) => return Ok(usage(e)),
    };
    let serve_tls = match args.downstream.load() {
        Ok(t) => t,
        Err(e) => return Ok(usage(e)),
    };
    // The URL and its TLS settings are checked before anything listens: one line, exit 2.
    if let Err(e) = crest_engine::agent::coordinator_endpoint(&args.coordinator, tls.as_ref()) {
        return Ok(usage(e));
    }
    match crest_engine::control_tls::plaintext_rule(
        &args.coordinator,
        !args.token.secret.is_empty(),
        args.insecure,
    ) {
        Ok(None) => {}
        Ok(Some(warning)) => tracing::warn!("{warning}"),
        Err(line) => return Ok(usage(line)),
    }
    if let Some(line) = relay_to_itself(&args.coordinator, args.listen).await {
        return Ok(usage(line));
    }
    let l = match tokio::net::TcpListener::bind(args.listen).await {
        Ok(l) => l,
        Err(e) => {
            return Ok(usage(format!(
                "--listen {}: cannot listen: {e}",
                args.listen
            )));
        }
    };
    let host = hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".into());
    let cfg = crest::relay::session::RelayConfig {
        coordinator: args.coordinator,
        tls,
        serve_tls,
        workers: args.workers as usize,
        token: args.token.secret,
        name: args.name.unwrap_or_else(|| format!("relay-{host}")),
        host,
    };
    eprintln!(
        "crest: relay listening on {}{} for {} worker(s), for the coordinator at {}",
        l.local_addr()?,
        if cfg.serve_tls.is_some() {
            " (TLS)"
        } else {
            ""
        },
        cfg.workers,
        cfg.coordinator
    );
    match crest::relay::session::run(cfg, l, signals()).await {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e @ crest::relay::session::RelayError::BadUrl(_)) => Ok(usage(e)),
        Err(e) => {
            eprintln!("crest: {e}");
            Ok(ExitCode::from(1))
        }
    }
}

/// `crest compare`: of reports (positional files), or live (two or more `--target`).
async fn compare_cmd(
    args: CompareArgs,
    targets: Vec<String>,
    run_flags: Vec<String>,
) -> anyhow::Result<ExitCode> {
    let out = args.run.pace.out.clone();
    let comparison = if args.reports.is_empty() {
        let plan = match compare::parse_targets(&targets) {
            Ok(t) => compare::Plan {
                targets: t,
                runs: args.runs,
                min_effect: args.min_effect,
                between: args.between,
            },
            Err(e) => return Ok(usage(e)),
        };
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            first_signal().await;
            let _ = tx.send(true);
        });
        match compare::run_all(args.run, &plan, rx).await {
            Ok(c) => c,
            Err(compare::CompareError::Usage(m)) => return Ok(usage(m)),
            Err(compare::CompareError::Failed(m)) => {
                eprintln!("crest: compare: {m}");
                return Ok(ExitCode::from(1));
            }
        }
    } else {
        if !targets.is_empty() || !run_flags.is_empty() {
            let given: Vec<String> = if targets.is_empty() {
                run_flags
                    .iter()
                    .map(|f| format!("--{}", f.replace('_', "-")))
                    .collect()
            } else {
                vec!["--target".into()]
            };
            return Ok(usage(format!(
                "{}: a compare of earlier reports makes no runs; give either report files or --target with run flags, not both",
                given.join(" ")
            )));
        }
        if args.reports.len() < 2 {
            return Ok(usage(
                "crest compare needs two or more reports (or two or more --target): give a/report.json b/report.json",
            ));
        }
        match comparison::arms_from_files(&args.reports) {
            Ok((arms, warnings)) if arms.len() >= 2 => {
                let mut c = comparison::compare(arms, args.min_effect, "reports");
                c.warnings.extend(warnings);
                c
            }
            Ok(_) => {
                return Ok(usage(
                    "every report is under one label: give two targets' reports (LABEL=FILE with two labels)",
                ));
            }
            Err(e) => return Ok(usage(e)),
        }
    };
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), comparison.table().as_bytes());
    if let Some(dir) = out {
        let path = compare::write(&comparison, &dir).map_err(anyhow::Error::msg)?;
        eprintln!("crest: comparison written to {}", path.display());
    }
    let all_complete = comparison
        .targets
        .iter()
        .all(|a| a.runs.iter().all(|r| r.complete));
    // A run where nothing completed measured nothing, and targets without a class in
    // common compare no class: the warning names it; so does the exit code.
    Ok(
        if all_complete
            && !comparison::any_empty_run(&comparison)
            && !comparison::any_without_common_class(&comparison)
        {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        },
    )
}

/// `crest search`.
async fn search_cmd(args: SearchArgs) -> anyhow::Result<ExitCode> {
    use crest::search;
    let slos = match search::parse_slos(&args.slo) {
        Ok(s) => s,
        Err(e) => return Ok(usage(e)),
    };
    for (given, flag) in [
        (args.run.pace.rate.is_some(), "--rate"),
        (args.run.load.duration.is_some(), "--duration"),
        (args.run.load.stages.is_some(), "--stages"),
        (args.run.load.requests.is_some(), "--requests"),
    ] {
        if given {
            return Ok(usage(format!(
                "{flag}: crest search sets each window's rate and length; give --min, --max, --probe-window and --window"
            )));
        }
    }
    let windows = [
        (args.probe_window, "--probe-window"),
        (args.window, "--window"),
    ];
    for (d, flag) in windows {
        if d < Duration::from_millis(500) || d > Duration::from_secs(3600) {
            return Ok(usage(format!(
                "{flag} {}: give 500ms to 1h",
                humantime::format_duration(d)
            )));
        }
    }
    if args.tolerance <= 0.0 {
        return Ok(usage(
            "--tolerance 0%: give a bracket width above 0, e.g. 2%",
        ));
    }
    let plan = search::Plan {
        slos,
        min: args.min,
        max: args.max,
        tolerance: args.tolerance,
        error_budget: args.error_budget,
        probe_window: args.probe_window,
        window: args.window,
        warmup: args.run.load.warmup.unwrap_or(Duration::from_secs(1)),
        between: args.between,
        lag_limit_us: args.lag_limit.as_secs_f64() * 1e6,
    };
    let out = args.run.pace.out.clone();
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        first_signal().await;
        let _ = tx.send(true);
    });
    let s = match search::run(args.run, &plan, out.clone(), rx).await {
        Ok(s) => s,
        Err(compare::CompareError::Usage(m)) => return Ok(usage(m)),
        Err(compare::CompareError::Failed(m)) => {
            eprintln!("crest: search: {m}");
            return Ok(ExitCode::from(1));
        }
    };
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), s.table().as_bytes());
    if let Some(dir) = out {
        let path = search::write(&s, &dir).map_err(anyhow::Error::msg)?;
        eprintln!("crest: search written to {}", path.display());
    }
    // An answer (a knee, or a bound of the range) exits 0; the clients' limit, an
    // interruption or an unconfirmed winner exit 1.
    let answered = !s.clients_limit
        && (s.confirmed
            || s.probes
                .first()
                .is_some_and(|p| p.verdict == search::Verdict::Fail && s.probes.len() == 1));
    Ok(if answered {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// How long `crest suite` waits for the target's answer to its version check.
const SUITE_PROBE: std::time::Duration = std::time::Duration::from_secs(5);

/// The test list the target's version calls for: valkey, or redis 7.2 and later, have
/// XADD; redis 7.0 and the built-in target do not.
async fn detect_suite(args: &RunArgs) -> Result<crest::suite::Suite, String> {
    use crest::suite::Suite;
    let mut probe = args.clone();
    probe.pace.rate = Some(crest::config::RateArg::Max);
    probe.load.requests = Some(1);
    probe.pace.out = None;
    let cfg = to_config(probe).map_err(|e| e.to_string())?;
    if cfg.target.is_none() {
        return Ok(Suite::Redis70);
    }
    let (mut c, _) = crest::orchestrate::control_to(&cfg, None, "crest-suite")
        .await
        .map_err(|e| format!("--target {}: {e}", cfg.target.as_deref().unwrap_or("")))?;
    let shown = cfg.target.as_deref().unwrap_or("");
    let asked = tokio::time::timeout(SUITE_PROBE, c.ask(&[b"INFO", b"server"], 1 << 20));
    let info = match asked.await {
        Err(_) => {
            return Err(format!(
                "--target {shown}: the server accepted the connection but did not answer INFO within {SUITE_PROBE:?}; is it a Redis-protocol server, and not overloaded?"
            ));
        }
        Ok(Ok(Some(crest_resp::Frame::Bulk(b) | crest_resp::Frame::Verbatim { data: b, .. }))) => {
            crest_report::server::info::Info::parse(&String::from_utf8_lossy(&b))
        }
        // A server that will not say (an ACL user without INFO): the older list.
        _ => return Ok(Suite::Redis70),
    };
    let new_redis = info.text("redis_version").is_some_and(|v| {
        let mut p = v.split('.').map(|x| x.parse::<u32>().unwrap_or(0));
        (p.next().unwrap_or(0), p.next().unwrap_or(0)) >= (7, 2)
    });
    Ok(if info.text("valkey_version").is_some() || new_redis {
        Suite::Valkey81
    } else {
        Suite::Redis70
    })
}

/// `crest suite`.
async fn suite_cmd(args: SuiteArgs) -> anyhow::Result<ExitCode> {
    use crest::suite;
    if args
        .target
        .target
        .as_deref()
        .is_some_and(|t| t.to_ascii_lowercase().starts_with("memcache"))
    {
        return Ok(usage(
            "crest suite is valkey-benchmark's suite of Redis commands; for a memcache:// target give crest run --mix (e.g. --mix SET=1,GET=10)",
        ));
    }
    if args.target.cluster {
        return Ok(usage(
            "--cluster: the suite's keys are valkey-benchmark's literal names, which live on one node; give one node as --target",
        ));
    }
    if args.d > 512 << 20 {
        return Ok(usage(format!(
            "-d {}: give at most 512 MB (536870912)",
            args.d
        )));
    }
    let which = match args.suite {
        Some(s) => s,
        None => match detect_suite(&args.run_args()).await {
            Ok(s) => s,
            Err(e) => return Ok(usage(e)),
        },
    };
    // valkey-benchmark: `if (config.datasize < 1) config.datasize = 1` (an empty payload
    // would leave SET without its value).
    let payload = suite::data(args.d.max(1));
    let tests = match suite::select(suite::tests(which, &payload, args.r), args.t.as_deref()) {
        Ok(t) => t,
        Err(e) => return Ok(usage(e)),
    };
    let rate = match args.pace.rate {
        Some(crest::config::RateArg::Rps(r)) => Some(r),
        _ => None,
    };
    let plan = suite::Plan {
        tests,
        requests: args.n,
        clients: args.c,
        pipeline: args.pipe,
        random: args.r,
        rate,
    };
    let out = args.pace.out.clone();
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        first_signal().await;
        let _ = tx.send(true);
    });
    if args.csv {
        println!("{}", suite::CSV_HEADER);
    }
    let (quiet, csv) = (args.q, args.csv);
    let shown = plan.clone();
    let mut base = args.run_args();
    base.pace.out = None;
    // Without --target every test would start its own built-in target, empty: one for
    // the whole suite keeps what each test leaves for the next (as a server does).
    if base.target.target.is_none() && base.fleet.workers.is_some() {
        return Ok(usage(
            "--workers: remote workers cannot reach a suite's built-in target on this machine's loopback; give --target",
        ));
    }
    if base.target.target.is_none() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = l.local_addr()?;
        tokio::spawn(crest_sink::serve(l, std::future::pending::<()>()));
        eprintln!("crest: no --target given: the suite runs against the built-in target on {addr}");
        base.target.target = Some(addr.to_string());
    }
    let outcomes = match suite::run(base, &plan, out.clone(), rx, |o| {
        let text = if csv {
            format!("{}\n", o.csv())
        } else if quiet {
            format!("{}\n", o.quiet())
        } else {
            o.block(&shown, payload.len())
        };
        let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
    })
    .await
    {
        Ok(o) => o,
        Err(crest::compare::CompareError::Usage(m)) => return Ok(usage(m)),
        Err(crest::compare::CompareError::Failed(m)) => {
            eprintln!("crest: suite: {m}");
            return Ok(ExitCode::from(1));
        }
    };
    if quiet || csv {
        for o in &outcomes {
            for w in o.failures().into_iter().chain(o.degenerate()) {
                eprintln!("crest: suite: WARNING: {w}");
            }
        }
    }
    if let Some(dir) = out {
        std::fs::create_dir_all(&dir)?;
        let json =
            suite::SuiteFile::of(format!("{which:?}"), &plan, payload.len(), outcomes.clone());
        std::fs::write(dir.join("suite.json"), serde_json::to_string_pretty(&json)?)?;
        eprintln!(
            "crest: suite written to {}",
            dir.join("suite.json").display()
        );
    }
    // A test where no request completed measured nothing: the suite did not do its job.
    let all = outcomes.len() == plan.tests.len()
        && outcomes.iter().all(|o| o.complete && o.completed > 0);
    Ok(if all {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// clap's own checks of every subcommand (unique ids, conflicts naming real flags,
    /// groups flattened once): a mistake here would panic the first user who asks.
    #[test]
    fn every_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    /// A load flag given to the suite gets the suite's line; other unknown flags do not.
    #[test]
    fn the_suite_names_the_load_flags_it_sets_itself() {
        let refuse = |args: &[&str]| {
            let e = Cli::try_parse_from(args).unwrap_err();
            suite_load_flag(&e)
        };
        let line = refuse(&["crest", "suite", "--duration", "5s"]).unwrap();
        assert!(
            line.starts_with("--duration: crest suite sets it for each test"),
            "{line}"
        );
        assert!(
            refuse(&["crest", "suite", "--connections=3"])
                .unwrap()
                .starts_with("--connections:")
        );
        assert_eq!(refuse(&["crest", "suite", "--nonsense"]), None);
    }
}
