//! The flags of `crest run`, in four groups each declared once (target, fleet, pace,
//! load) and flattened where a command takes them, and clap's errors as Crest's one line.

use crate::config::{self, RateArg};
use clap::ValueEnum;
use crest_model::plan::Pacer;
use crest_model::target::Resp;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Arrival process flag.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ArrivalArg {
    /// Evenly spaced.
    Uniform,
    /// Exponential gaps.
    Poisson,
    /// Facebook ETC's generalized-Pareto gaps: Poisson's mean, burstier (CV 1.20).
    Etc,
}

/// `--pacer`: `sleep`, `spin`, or `sleep:TOLERANCE` (e.g. `sleep:200us`).
///
/// # Errors
/// One line naming what would be right.
pub fn parse_pacer(s: &str) -> Result<Pacer, String> {
    let why = "expected sleep, spin, or sleep:TOLERANCE (e.g. sleep:200us, at most 10ms)";
    match s.trim() {
        "sleep" => Ok(Pacer::Sleep),
        "spin" => Ok(Pacer::Spin),
        other => {
            let t = other.strip_prefix("sleep:").ok_or(why)?;
            let d = config::parse_duration(t).map_err(|_| why)?;
            let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
            match ns {
                0 => Ok(Pacer::Sleep),
                1..=crest_model::plan::MAX_TOLERANCE_NS => Ok(Pacer::SleepWithin(ns)),
                _ => Err(why.to_string()),
            }
        }
    }
}

/// `crest run` flags, in four groups (each a heading of `--help`).
#[derive(Debug, Clone, clap::Args, Default)]
pub struct RunArgs {
    /// Where the load goes.
    #[command(flatten, next_help_heading = "Target")]
    pub target: TargetArgs,
    /// Who sends it.
    #[command(flatten, next_help_heading = "Workers")]
    pub fleet: FleetArgs,
    /// How it is timed and recorded.
    #[command(flatten, next_help_heading = "Pacing and recording")]
    pub pace: PaceArgs,
    /// What it is.
    #[command(flatten, next_help_heading = "Load")]
    pub load: LoadArgs,
}

/// Where the load goes and how every connection is set up: the target, its login, TLS,
/// protocol and cluster mode (flattened into `crest run`, `compare`, `search`, `suite`).
// Field docs are clap's help text (terminal syntax, not intra-doc links).
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Clone, clap::Args, Default)]
pub struct TargetArgs {
    /// Server to load: host:port or redis://[user[:password]@]host[:port][/db] (default: a
    /// built-in in-memory target on loopback).
    #[arg(long, env = "CREST_TARGET", hide_env_values = true)]
    pub target: Option<String>,
    /// ACL user every connection authenticates as (needs a password; without --user a
    /// password authenticates as `default`).
    #[arg(long, env = "CREST_USER")]
    pub user: Option<String>,
    /// The server's password. Visible in the process list: prefer --password-file or
    /// CREST_PASSWORD.
    #[arg(long, env = "CREST_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// File holding the password (one line; a final newline is dropped).
    #[arg(long, env = "CREST_PASSWORD_FILE")]
    pub password_file: Option<PathBuf>,
    /// Database every connection selects (SELECT N) before its first request.
    #[arg(long, env = "CREST_DB")]
    pub db: Option<u32>,
    /// TLS to the target (as a rediss:// URI does); the certificate is verified against
    /// --cacert or the system's CAs, and must be valid for --sni or the target's host.
    #[arg(long, env = "CREST_TLS")]
    pub tls: bool,
    /// PEM file of the CAs that sign the server's certificate (default: the system's).
    #[arg(long, env = "CREST_CACERT")]
    pub cacert: Option<PathBuf>,
    /// Client certificate chain (PEM), for servers with tls-auth-clients yes.
    #[arg(long, env = "CREST_CERT")]
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, env = "CREST_KEY")]
    pub key: Option<PathBuf>,
    /// Server name sent in the TLS handshake and checked against the certificate
    /// (default: the target's host).
    #[arg(long, env = "CREST_SNI")]
    pub sni: Option<String>,
    /// Accept any server certificate: encrypted but unauthenticated (flagged in the report).
    #[arg(long, conflicts_with = "tls_skip_hostname")]
    pub tls_skip_verify: bool,
    /// Check the certificate's chain but not its name (what memtier and valkey-benchmark do).
    #[arg(long)]
    pub tls_skip_hostname: bool,
    /// Protocol every connection speaks: 2 (RESP2) or 3 (RESP3, set up with HELLO 3).
    #[arg(long, env = "CREST_RESP", value_parser = parse_resp)]
    pub resp: Option<Resp>,
    /// The target is a Redis Cluster (any node as the seed): every request goes to its
    /// key's slot owner, following MOVED and ASK. Default: a cluster when the seed says it
    /// is one.
    #[arg(long, env = "CREST_CLUSTER", conflicts_with = "no_cluster")]
    pub cluster: bool,
    /// Load the target as one node even if it is a cluster node (redirects count as errors).
    #[arg(long)]
    pub no_cluster: bool,
    /// Where read commands (GET, MGET, HGETALL, ZRANGE…) go: primary (the default),
    /// replicas (only: a slot left without one holds its reads), prefer-replicas (the
    /// primary when a slot has none) or any (the primary and its replicas). A cluster's
    /// replicas come from its slot table (each connection sends READONLY); a standalone
    /// primary's from --replica, else from its INFO replication. Writes, and commands not
    /// known to be reads, go to the primary.
    #[arg(long, env = "CREST_READ_FROM", value_parser = parse_read_from, value_name = "WHERE")]
    pub read_from: Option<crest_model::target::ReadFrom>,
    /// A standalone primary's replica (repeatable): reads go to it with --read-from, and
    /// when the primary is out and it is promoted (REPLICAOF NO ONE), writes follow it
    /// (default with --read-from: the online replicas its INFO replication names).
    #[arg(long = "replica", value_name = "HOST:PORT")]
    pub replicas: Vec<String>,
    /// Measure stale reads from replicas: each SET's value starts with a 24-byte version
    /// stamp (its intended time), each GET's reply is read for it, and a read that missed
    /// a write acknowledged before it was sent counts as stale, by the time since that
    /// acknowledgement (a lower bound). Needs --read-from, and a class that SETs and GETs
    /// (one key each) values of 24 bytes or more.
    #[arg(long)]
    pub check_staleness: bool,
    /// Speak memcached's meta protocol (mg/ms/md/ma/mn) to a memcache:// target instead
    /// of its text protocol (get/set/delete/incr...).
    #[arg(long, env = "CREST_META")]
    pub meta: bool,
}

/// Who sends the load: in-process or remote workers, and the control plane they dial.
// Field docs are clap's help text (terminal syntax, not intra-doc links).
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Clone, clap::Args, Default)]
pub struct FleetArgs {
    /// Wait for this many remote workers (crest-worker --coordinator ...) instead of local ones.
    #[arg(long, env = "CREST_WORKERS")]
    pub workers: Option<u32>,
    /// Address workers dial (remote mode).
    #[arg(long, env = "CREST_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// How long to wait for remote workers.
    #[arg(long, env = "CREST_WAIT_TIMEOUT", value_parser = config::parse_duration, allow_hyphen_values = true)]
    pub wait_timeout: Option<Duration>,
    /// In-process workers when --workers is not given.
    #[arg(long)]
    pub local_workers: Option<u32>,
    /// Cores for local workers' shards, e.g. 0-3 (default: all this process may use).
    #[arg(long)]
    pub cpus: Option<String>,
    /// At most this many local shards.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Shared secret every worker must present.
    #[command(flatten)]
    pub token: crest_engine::control_tls::Token,
    /// TLS for the workers' control plane.
    #[command(flatten)]
    pub serve: crest_engine::control_tls::ServerFiles,
    /// The most memory one process of the run (this one with its local workers, or each
    /// remote worker) may need, e.g. 4GB: a plan estimated over it is refused before load
    /// (default: half this machine's memory).
    #[arg(long, value_parser = config::parse_size, allow_hyphen_values = true)]
    pub memory_budget: Option<u64>,
}

/// How requests are timed and recorded: the rate, the pacer, the interval, time-outs,
/// the seed, the report folder, server stats. `crest suite` takes these too.
// Field docs are clap's help text (terminal syntax, not intra-doc links).
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Clone, clap::Args, Default)]
pub struct PaceArgs {
    /// Requests per second across the whole cluster, or `max` for closed loop.
    #[arg(long, env = "CREST_RATE", value_parser = config::parse_rate, allow_negative_numbers = true)]
    pub rate: Option<RateArg>,
    /// Arrival process.
    #[arg(long, value_enum)]
    pub arrival: Option<ArrivalArg>,
    /// Pacer: sleep (precise, cheap), spin (lowest lag, one core per shard), or
    /// sleep:TOLERANCE (one wake-up serves every request due within it, e.g. sleep:200us).
    #[arg(long, value_parser = parse_pacer)]
    pub pacer: Option<Pacer>,
    /// Timeline resolution: length of one reported interval, 10ms to 60s.
    #[arg(long, value_parser = config::parse_duration, allow_hyphen_values = true)]
    pub interval: Option<Duration>,
    /// A request unanswered this long fails as `timeout`.
    #[arg(long, value_parser = config::parse_duration, allow_hyphen_values = true)]
    pub timeout: Option<Duration>,
    /// After the schedule ends, wait at most this long for replies.
    #[arg(long, value_parser = config::parse_duration, allow_hyphen_values = true)]
    pub drain: Option<Duration>,
    /// Seed for keys and Poisson gaps (default: random; the report records it).
    #[arg(long, value_parser = config::parse_seed, allow_negative_numbers = true)]
    pub seed: Option<u64>,
    /// Folder for report.json and timeline.csv.
    #[arg(long, env = "CREST_OUT")]
    pub out: Option<PathBuf>,
    /// Do not sample the target's INFO at every interval (server metrics and the check of
    /// the server's command counts against the report's are then left out).
    #[arg(long, env = "CREST_NO_SERVER_STATS")]
    pub no_server_stats: bool,
}

/// What the load is: profile, stages, duration, command mix, keys, values, connections,
/// pipeline, warm-up, checkpoints and the admin API. `crest suite` sets these per test and
/// refuses them.
// Field docs are clap's help text (terminal syntax, not intra-doc links).
#[allow(rustdoc::broken_intra_doc_links)]
#[derive(Debug, Clone, clap::Args, Default)]
pub struct LoadArgs {
    /// Profile file (TOML: global settings and [[class]] tables); flags override it.
    #[arg(long, env = "CREST_PROFILE")]
    pub profile: Option<PathBuf>,
    /// Client-side caching: every connection sends CLIENT TRACKING on, so the server
    /// pushes an invalidation when a key it read changes (needs --resp 3).
    #[arg(long, env = "CREST_TRACKING")]
    pub tracking: bool,
    /// Rate stages, k6-style: "30s:0->50000, 60s:50000, 10s:50000->150000".
    #[arg(long, env = "CREST_STAGES", conflicts_with = "rate")]
    pub stages: Option<String>,
    /// How long to send, e.g. 10s, 2m (a profile file's length when it has one).
    #[arg(long, env = "CREST_DURATION", value_parser = config::parse_duration, allow_hyphen_values = true)]
    pub duration: Option<Duration>,
    /// Closed loop (--rate max): stop after this many requests in all.
    #[arg(long)]
    pub requests: Option<u64>,
    /// SET:GET weights, e.g. 1:10.
    #[arg(long, env = "CREST_RATIO", value_parser = config::parse_ratio)]
    pub ratio: Option<(u32, u32)>,
    /// Command weights, e.g. "GET=10,SET=1,ZADD=1" (instead of --ratio).
    #[arg(long, conflicts_with = "ratio")]
    pub mix: Option<String>,
    /// One command template, e.g. "LPUSH mylist __value__" (instead of --ratio).
    #[arg(long, conflicts_with_all = ["ratio", "mix"])]
    pub command: Option<String>,
    /// Keyspace size.
    #[arg(long)]
    pub keys: Option<u64>,
    /// Key prefix.
    #[arg(long)]
    pub key_prefix: Option<String>,
    /// A workload model under the other flags: etc (Facebook's ETC: GEV key sizes, its
    /// value sizes and generalized-Pareto gaps, as mutilate's presets; each part
    /// overridable by its own flag).
    #[arg(long)]
    pub preset: Option<String>,
    /// Key name lengths: natural (prefix + number), etc (Facebook ETC's sizes), or sizes
    /// as --value-size spells them (32, 10-40, 16:3,64:1), 1 to 250 bytes; a key always
    /// has one length (zeros pad it between prefix and number).
    #[arg(long)]
    pub key_size: Option<String>,
    /// Key distribution: uniform, sequential, zipf[:EXPONENT], gaussian[:MEAN:STDDEV].
    #[arg(long)]
    pub key_dist: Option<String>,
    /// Value size: 1024, 1k, a range 100-4096, or weighted 100:3,4k:1.
    #[arg(long, value_parser = value_size_arg)]
    pub value_size: Option<String>,
    /// What values' bytes are: fixed (the same bytes every time), random (random bytes
    /// that differ per write) or compressible:R (a compressor shrinks them R times, e.g.
    /// compressible:2), differing per write too.
    #[arg(long)]
    pub value_content: Option<String>,
    /// Connections across the whole cluster (spread over every shard).
    #[arg(long, env = "CREST_CONNECTIONS")]
    pub connections: Option<u32>,
    /// Requests in flight per connection.
    #[arg(long)]
    pub pipeline: Option<u32>,
    /// Close each connection this long after it came up and open it again with its full
    /// setup (connect, TLS, AUTH/HELLO, SELECT), as an application's pools do; 30s±5s
    /// jitters each life. Replies in flight are awaited first; requests due meanwhile wait
    /// for a connection and keep their intended time.
    #[arg(long, value_parser = config::parse_lifetime)]
    pub conn_lifetime: Option<(Duration, Duration)>,
    /// Instead of --conn-lifetime: retire this many connections per second across the
    /// fleet, longest-lived first (a deploy storm), e.g. 50 or 50/s.
    #[arg(long, value_parser = config::parse_conn_rate, conflicts_with = "conn_lifetime")]
    pub conn_rate: Option<f64>,
    /// TTL for SET (sent as EX) and EXPIRE, e.g. 60s; or a table drawn per write,
    /// TTL:WEIGHT,… where 0 is no TTL (SET without EX), e.g. 0:30,60s:50,1h:20.
    #[arg(long, value_parser = config::parse_ttl, allow_hyphen_values = true)]
    pub ttl: Option<crest_model::shapes::Ttl>,
    /// Members or keys per MSET, MGET, HSET, ZADD, SADD, LPUSH call.
    #[arg(long)]
    pub batch: Option<u32>,
    /// Multiply every class's rates by this (try a profile at 1% with 0.01).
    #[arg(long)]
    pub rate_scale: Option<f64>,
    /// Multiply every profile's durations by this (0.1 runs a 10-minute profile in 1).
    #[arg(long)]
    pub time_scale: Option<f64>,
    /// Write every key of the keyspace once before the run (excluded from results).
    #[arg(long)]
    pub prefill: bool,
    /// Run this long first, excluded from results, e.g. 10s.
    #[arg(long, value_parser = config::parse_duration, allow_hyphen_values = true)]
    pub warmup: Option<Duration>,
    /// Requests per shard and class allowed to wait for a free connection.
    #[arg(long)]
    pub backlog_limit: Option<u64>,
    /// Serve the admin HTTP API here (off by default): GET / (the live page: watch and
    /// steer the run in a browser), GET /metrics (Prometheus), GET /status, PUT /rate,
    /// POST /pause, /resume, /stop. Off loopback it needs --token.
    #[arg(long, env = "CREST_ADMIN")]
    pub admin: Option<SocketAddr>,
    /// Keep the admin API up this long after the run (a scraper's last look at the final
    /// counters; the live page shows the report) before writing the report.
    #[arg(long, value_parser = config::parse_duration, allow_hyphen_values = true)]
    pub admin_linger: Option<Duration>,
    /// Closed loop bounded by --requests: pause every N requests, let the replies come
    /// in, and record the server's INFO memory (and --probe's reply) before going on.
    #[arg(long)]
    pub checkpoint_every: Option<u64>,
    /// A command sent at every checkpoint, its reply recorded, e.g. "ZCARD growth".
    #[arg(long)]
    pub probe: Option<String>,
}

/// `--value-size` checked as it is parsed (so `-1k`, joined to it by [`negative_values`],
/// is refused in its own words).
fn value_size_arg(s: &str) -> Result<String, String> {
    crate::profile::parse_value_sizes(s).map(|_| s.to_string())
}

/// The command line with each `--flag -N…` (a word of a minus and a digit after a flag)
/// joined as `--flag=-N…`: `--value-size -1k` is that flag's (bad) value, refused in its
/// words, not an unknown flag `-1`. Whole negative numbers clap takes as values already.
pub fn negative_values(
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> Vec<std::ffi::OsString> {
    let mut out: Vec<std::ffi::OsString> = Vec::new();
    for a in args {
        let joins = a.to_str().is_some_and(|s| {
            let b = s.as_bytes();
            b.len() > 1 && b[0] == b'-' && b[1].is_ascii_digit()
        });
        if joins
            && let Some(prev) = out.last_mut()
            && prev
                .to_str()
                .is_some_and(|p| p.starts_with("--") && p.len() > 2 && !p.contains('='))
        {
            prev.push("=");
            prev.push(&a);
            continue;
        }
        out.push(a);
    }
    out
}

/// A command-line error from clap as Crest's one line (without the `crest: ` prefix):
/// `--rate "1e400": <why>` for a value its parser refused, clap's own first sentence (plus
/// its suggestion, and where to look) for the rest. Help and version are not errors.
pub fn clap_line(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let get = |k| match e.get(k) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => v.first().cloned(),
        _ => None,
    };
    if matches!(
        e.kind(),
        ErrorKind::ValueValidation | ErrorKind::InvalidValue
    ) && let (Some(arg), Some(value)) =
        (get(ContextKind::InvalidArg), get(ContextKind::InvalidValue))
        && !value.is_empty()
    {
        // "--rate <RATE>" → "--rate".
        let flag = arg.split_whitespace().next().unwrap_or(&arg);
        let why = match (std::error::Error::source(e), get(ContextKind::ValidValue)) {
            // An unsigned number's parser (or its range) on "-5".
            (Some(src), _)
                if value.starts_with('-')
                    && value[1..].bytes().all(|b| b.is_ascii_digit())
                    && (src.to_string() == "invalid digit found in string"
                        || src.to_string().contains(" is not in ")) =>
            {
                "cannot be negative; give a whole number".into()
            }
            (Some(src), _) => src.to_string(),
            (None, Some(_)) => match e.get(ContextKind::ValidValue) {
                Some(ContextValue::Strings(v)) => format!("expected one of {}", v.join(", ")),
                _ => "not a valid value".into(),
            },
            (None, None) => "not a valid value".into(),
        };
        return format!("{flag} {value:?}: {why}");
    }
    let rendered = e.render().to_string();
    let first = rendered
        .lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ")
        .trim_end()
        .to_string();
    match (e.kind(), get(ContextKind::SuggestedArg)) {
        (ErrorKind::ArgumentConflict, _) => format!("{first}; give one or the other"),
        (_, Some(s)) => format!("{first}; did you mean {s}?"),
        (_, None) => format!("{first}; see --help"),
    }
}

/// `--resp`: 2 or 3.
pub(super) fn parse_resp(s: &str) -> Result<Resp, String> {
    s.trim()
        .parse::<u32>()
        .ok()
        .and_then(Resp::of)
        .ok_or_else(|| RESP_VALUES.to_string())
}

/// `--read-from`'s choice.
pub(super) fn parse_read_from(s: &str) -> Result<crest_model::target::ReadFrom, String> {
    crest_model::target::ReadFrom::parse(s.trim())
        .ok_or_else(|| "expected primary, replicas, prefer-replicas or any".to_string())
}

/// What `--resp` and the profile's `resp` take.
pub(super) const RESP_VALUES: &str = "expected 2 (RESP2, the default) or 3 (RESP3, via HELLO 3)";
