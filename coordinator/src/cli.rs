//! `crest run` flags, and how they combine with a profile file into a [`RunConfig`]:
//! every flag has a file equivalent, and a flag given on the command line wins.

use crate::config::{
    self, ClassConfig, ConfigError, RateArg, RunConfig, Workers, check_class, parse_duration,
};
use crate::defaults;
use crate::profile::{self, FileToml, KeysToml};
use clap::ValueEnum;
use crest_model::convert::limits;
use crest_model::plan::Pacer;
use crest_model::schedule::{Arrival, Profile, Segment};
use crest_model::shapes::ValueSizes;
use crest_model::target::{
    self, ClusterMode, DEFAULT_USER, Login, Resp, Secret, Session, Tls, Verify,
};
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
    /// Key distribution: uniform, sequential, zipf[:EXPONENT], gaussian[:MEAN:STDDEV].
    #[arg(long)]
    pub key_dist: Option<String>,
    /// Value size: 1024, 1k, a range 100-4096, or weighted 100:3,4k:1.
    #[arg(long)]
    pub value_size: Option<String>,
    /// Connections across the whole cluster (spread over every shard).
    #[arg(long, env = "CREST_CONNECTIONS")]
    pub connections: Option<u32>,
    /// Requests in flight per connection.
    #[arg(long)]
    pub pipeline: Option<u32>,
    /// TTL for SET (sent as EX) and EXPIRE, e.g. 60s.
    #[arg(long, value_parser = config::parse_duration, allow_hyphen_values = true)]
    pub ttl: Option<Duration>,
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
    /// Serve the admin HTTP API here (off by default): GET /metrics (Prometheus), GET
    /// /status, PUT /rate, POST /pause, /resume, /stop. Off loopback it needs --token.
    #[arg(long, env = "CREST_ADMIN")]
    pub admin: Option<SocketAddr>,
    /// Keep the admin API up this long after the run (a scraper's last look at the final
    /// counters) before writing the report.
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
fn parse_resp(s: &str) -> Result<Resp, String> {
    s.trim()
        .parse::<u32>()
        .ok()
        .and_then(Resp::of)
        .ok_or_else(|| RESP_VALUES.to_string())
}

/// What `--resp` and the profile's `resp` take.
const RESP_VALUES: &str = "expected 2 (RESP2, the default) or 3 (RESP3, via HELLO 3)";

fn err(flag: &'static str, value: impl ToString, why: impl ToString) -> ConfigError {
    ConfigError::new(flag, value, why)
}

fn file_duration(v: &Option<String>, key: &'static str) -> Result<Option<Duration>, ConfigError> {
    v.as_deref()
        .map(|s| parse_duration(s).map_err(|e| err(key, s, e)))
        .transpose()
}

/// One class's settings before the defaults: each field is given or not. The flags make
/// one layer, each class table of the profile file another; [`ClassLayer::over`] puts one
/// on top of another and [`ClassLayer::resolve`] fills the rest from [`defaults`].
#[derive(Debug, Clone, Default)]
struct ClassLayer {
    requests: Option<u64>,
    mix: Option<Vec<(String, u32)>>,
    keys: Option<u64>,
    key_prefix: Option<String>,
    key_dist: Option<KeysToml>,
    values: Option<ValueSizes>,
    connections: Option<u32>,
    pipeline: Option<u32>,
    ttl: Option<u64>,
    batch: Option<u32>,
    members: Option<u64>,
    members_sequential: Option<bool>,
    range: Option<u32>,
    prefill: Option<bool>,
}

impl ClassLayer {
    /// The layer the command line gives.
    fn from_flags(a: &RunArgs) -> Result<Self, ConfigError> {
        let mix = if let Some(c) = &a.load.command {
            if c.trim().is_empty() {
                return Err(err(
                    "--command",
                    c,
                    "is empty; give a command template, e.g. \"LPUSH mylist __value__\"",
                ));
            }
            Some(vec![(c.clone(), 1)])
        } else if let Some(m) = &a.load.mix {
            Some(parse_mix(m)?)
        } else {
            a.load.ratio.map(ratio_mix)
        };
        Ok(Self {
            requests: a.load.requests,
            mix,
            keys: a.load.keys,
            key_prefix: a.load.key_prefix.clone(),
            key_dist: a
                .load
                .key_dist
                .as_deref()
                .map(|d| profile::parse_key_dist(d).map_err(|e| err("--key-dist", d, e)))
                .transpose()?,
            values: a
                .load
                .value_size
                .as_deref()
                .map(|v| profile::parse_value_sizes(v).map_err(|e| err("--value-size", v, e)))
                .transpose()?,
            connections: a.load.connections,
            pipeline: a.load.pipeline,
            ttl: a.load.ttl.map(|t| t.as_secs().max(1)),
            batch: a.load.batch,
            members: None,
            members_sequential: None,
            range: None,
            prefill: a.load.prefill.then_some(true),
        })
    }

    /// The layer one class table of the profile file gives.
    fn from_file(c: &profile::ClassToml) -> Result<Self, String> {
        let mix = match (&c.ratio, &c.mix) {
            (Some(r), _) => Some(ratio_mix(
                config::parse_ratio(r).map_err(|e| format!("ratio {r:?}: {e}"))?,
            )),
            (None, Some(m)) => Some(m.iter().map(|(k, v)| (k.clone(), *v)).collect()),
            (None, None) => None,
        };
        Ok(Self {
            requests: c.requests,
            mix,
            keys: c.keys.as_ref().and_then(|k| k.count),
            key_prefix: c.keys.as_ref().and_then(|k| k.prefix.clone()),
            key_dist: c.keys.clone(),
            values: c
                .values
                .as_ref()
                .map(|v| v.sizes().map_err(|e| format!("values: {e}")))
                .transpose()?,
            connections: c.connections,
            pipeline: c.pipeline,
            ttl: c
                .ttl
                .as_deref()
                .map(|t| {
                    parse_duration(t)
                        .map(|d| d.as_secs().max(1))
                        .map_err(|e| format!("ttl: {e}"))
                })
                .transpose()?,
            batch: c.batch,
            members: c.members,
            members_sequential: match c.member_order.as_deref() {
                None => None,
                Some("uniform") => Some(false),
                Some("sequential") => Some(true),
                Some(o) => {
                    return Err(format!(
                        "member_order {o:?}: expected uniform or sequential"
                    ));
                }
            },
            range: c.range,
            prefill: c.prefill,
        })
    }

    /// `self` where given, `lower` elsewhere. (`--prefill` can only turn prefill on.)
    fn over(self, lower: Self) -> Self {
        Self {
            requests: self.requests.or(lower.requests),
            mix: self.mix.or(lower.mix),
            keys: self.keys.or(lower.keys),
            key_prefix: self.key_prefix.or(lower.key_prefix),
            key_dist: self.key_dist.or(lower.key_dist),
            values: self.values.or(lower.values),
            connections: self.connections.or(lower.connections),
            pipeline: self.pipeline.or(lower.pipeline),
            ttl: self.ttl.or(lower.ttl),
            batch: self.batch.or(lower.batch),
            members: self.members.or(lower.members),
            members_sequential: self.members_sequential.or(lower.members_sequential),
            range: self.range.or(lower.range),
            prefill: self.prefill.or(lower.prefill),
        }
    }

    /// The class, every setting not given taken from [`defaults`]; `dist_err` words a bad
    /// key distribution (it depends on the final keyspace size).
    fn resolve(
        self,
        name: String,
        profile: Option<Profile>,
        dist_err: &dyn Fn(String) -> ConfigError,
    ) -> Result<ClassConfig, ConfigError> {
        let keys = self.keys.unwrap_or(defaults::KEYS);
        let key_dist =
            profile::key_dist(&self.key_dist.unwrap_or_default(), keys).map_err(dist_err)?;
        Ok(ClassConfig {
            name,
            profile,
            requests: self.requests,
            mix: self.mix.unwrap_or_else(|| ratio_mix(defaults::RATIO)),
            keys,
            key_prefix: self
                .key_prefix
                .unwrap_or_else(|| defaults::KEY_PREFIX.into()),
            key_dist,
            values: self
                .values
                .unwrap_or(ValueSizes::Fixed(defaults::VALUE_SIZE)),
            connections: self.connections.unwrap_or(defaults::CONNECTIONS),
            pipeline: self.pipeline.unwrap_or(defaults::PIPELINE),
            ttl: self.ttl,
            batch: self.batch.unwrap_or(defaults::BATCH),
            members: self.members.unwrap_or(defaults::MEMBERS),
            members_sequential: self.members_sequential.unwrap_or(false),
            range: self.range.unwrap_or(defaults::RANGE),
            prefill: self.prefill.unwrap_or(false),
        })
    }
}

/// `d` when it lies in `lo..=hi`, else an error naming `flag` and the bounds.
fn bounded(
    flag: &'static str,
    d: Duration,
    lo: Duration,
    hi: Duration,
) -> Result<Duration, ConfigError> {
    if d < lo || d > hi {
        let show = |d: Duration| humantime::format_duration(d).to_string();
        let why = if lo.is_zero() {
            format!("must be at most {}", show(hi))
        } else {
            format!("must be {} to {}", show(lo), show(hi))
        };
        return Err(err(flag, format!("{d:?}"), why));
    }
    Ok(d)
}

fn ratio_mix((set, get): (u32, u32)) -> Vec<(String, u32)> {
    vec![("SET".into(), set), ("GET".into(), get)]
}

/// `--mix "GET=10,SET=1"`.
fn parse_mix(m: &str) -> Result<Vec<(String, u32)>, ConfigError> {
    let mut out = Vec::new();
    for item in m.split(',').filter(|s| !s.trim().is_empty()) {
        let (c, w) = item.split_once('=').ok_or_else(|| {
            err(
                "--mix",
                m,
                "expected COMMAND=WEIGHT pairs, e.g. GET=10,SET=1",
            )
        })?;
        let w = w.trim();
        let w: u32 = w.parse().map_err(|_| {
            let why = if !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()) {
                format!(
                    "weight {w} is too large; weights are whole numbers 0 to {}",
                    u32::MAX
                )
            } else {
                format!("weight {w:?} is not a whole number; expected e.g. GET=10,SET=1")
            };
            err("--mix", m, why)
        })?;
        out.push((c.trim().to_string(), w));
    }
    Ok(out)
}

/// Builds the run configuration from flags and, when given, a profile file.
///
/// # Errors
/// [`ConfigError`] naming the flag or file key, the value and what would be right.
pub fn to_config(a: RunArgs) -> Result<RunConfig, ConfigError> {
    let (file, text) = read_profile(&a)?;
    let warmup = a
        .load
        .warmup
        .or(file_duration(&file.warmup, "warmup")?)
        .unwrap_or(defaults::WARMUP);
    let (classes, duration) = classes_and_length(&a, &file, &text)?;
    let (target, session, uri_tls) = target_session(&a, &file)?;
    let tls = target_tls(&a, &file, target.as_deref(), uri_tls)?;
    let workers = workers(&a)?;
    let cluster = match (a.target.cluster, a.target.no_cluster, file.cluster) {
        (true, _, _) | (false, false, Some(true)) => ClusterMode::On,
        (_, true, _) | (false, false, Some(false)) => ClusterMode::Off,
        (false, false, None) => ClusterMode::Auto,
    };
    if cluster == ClusterMode::On && target.is_none() {
        return Err(err(
            "--cluster",
            "on",
            "the built-in target is one node; give --target host:port of a cluster node",
        ));
    }
    let (arrival, pacer, timeout) = pacing(&a, &file)?;
    let warmup = bounded("--warmup", warmup, Duration::ZERO, limits::MAX_WARMUP)?;
    let duration = bounded("--duration", duration, Duration::ZERO, limits::MAX_RUN)?;
    let interval = a.pace.interval.unwrap_or(defaults::INTERVAL);
    config::check_span(duration, interval)?;
    let cfg_token_empty = a.fleet.token.secret.is_empty();
    let cfg = RunConfig {
        target,
        session,
        tls,
        cluster,
        classes,
        duration,
        warmup,
        interval,
        arrival,
        pacer,
        timeout,
        drain: bounded(
            "--drain",
            a.pace
                .drain
                .or(file_duration(&file.drain, "drain")?)
                .unwrap_or(defaults::DRAIN),
            Duration::ZERO,
            limits::MAX_DRAIN,
        )?,
        seed: a
            .pace
            .seed
            .or(file.seed)
            .unwrap_or_else(|| crest_model::clock::unix_ns().unsigned_abs()),
        out: a.pace.out,
        listen: a
            .fleet
            .listen
            .unwrap_or_else(|| SocketAddr::from(defaults::LISTEN)),
        workers,
        token: a.fleet.token.secret,
        control_tls: a
            .fleet
            .serve
            .load()
            .map_err(|e| err(e.flag, e.path.display(), e.why))?,
        server_stats: !a.pace.no_server_stats && file.server_stats.unwrap_or(true),
        quiet: false,
        admin: match a.load.admin {
            Some(addr) if !addr.ip().is_loopback() && cfg_token_empty => {
                return Err(err(
                    "--admin",
                    addr,
                    "off loopback the admin API asks every request for the run's token: give --token too, or a 127.0.0.1 address",
                ));
            }
            other => other,
        },
        admin_linger: bounded(
            "--admin-linger",
            a.load.admin_linger.unwrap_or(Duration::ZERO),
            Duration::ZERO,
            Duration::from_secs(3600),
        )?,
        checkpoint_every: a.load.checkpoint_every.or(file.checkpoint_every),
        probe: a
            .load
            .probe
            .clone()
            .or(file.probe.clone())
            .map(|p| p.split_whitespace().map(str::to_string).collect()),
        backlog_limit: match a.load.backlog_limit.unwrap_or(defaults::BACKLOG_LIMIT) {
            n @ 1..=limits::MAX_BACKLOG => n,
            n => {
                return Err(err(
                    "--backlog-limit",
                    n,
                    format!("must be 1 to {}", limits::MAX_BACKLOG),
                ));
            }
        },
    };
    check_checkpoints(&cfg)?;
    Ok(cfg)
}

/// The arrival process, the pacer and the request timeout: flag over file over default,
/// within the bounds a worker checks.
fn pacing(a: &RunArgs, file: &FileToml) -> Result<(Arrival, Pacer, Duration), ConfigError> {
    let arrival = match (a.pace.arrival, file.arrival.as_deref()) {
        (Some(ArrivalArg::Poisson), _) | (None, Some("poisson")) => Arrival::Poisson,
        (Some(ArrivalArg::Uniform), _) | (None, None | Some("uniform")) => Arrival::Uniform,
        (None, Some(o)) => return Err(err("arrival", o, "expected uniform or poisson")),
    };
    let pacer = match (a.pace.pacer, file.pacer.as_deref()) {
        (Some(p), _) => p,
        (None, None) => Pacer::Sleep,
        (None, Some(o)) => parse_pacer(o).map_err(|e| err("pacer", o, e))?,
    };
    let timeout = a
        .pace
        .timeout
        .or(file_duration(&file.timeout, "timeout")?)
        .unwrap_or(defaults::TIMEOUT);
    if timeout.is_zero() {
        return Err(err("--timeout", "0s", "must be > 0, e.g. 5s"));
    }
    // The same bounds a worker checks the plan against (crest_model::convert::limits), so
    // a setting is refused here, by its flag, not by a worker after the run has started.
    let timeout = bounded(
        "--timeout",
        timeout,
        limits::MIN_TIMEOUT,
        limits::MAX_TIMEOUT,
    )?;
    Ok((arrival, pacer, timeout))
}

/// Every class of the run (checked, names unique) and the measured length: given, or the
/// longest profile, never shorter than a profile (so no second the workers run falls
/// outside the timeline).
fn classes_and_length(
    a: &RunArgs,
    file: &FileToml,
    text: &str,
) -> Result<(Vec<ClassConfig>, Duration), ConfigError> {
    let file_dur = file_duration(&file.duration, "duration")?;
    let mut duration = a.load.duration.or(file_dur);
    if a.load.stages.is_some() && a.load.duration.is_some() {
        return Err(err(
            "--duration",
            format!("{:?}", a.load.duration.unwrap_or_default()),
            "--stages sets the length; give one or the other",
        ));
    }
    // Flags only is a file with one empty class: one path builds every class, flag layer
    // over file layer over the defaults table. `--rate` or `--stages` replaces the file's
    // classes with one class of the flags (its globals still apply).
    let from_flags = file.classes.is_empty() || a.pace.rate.is_some() || a.load.stages.is_some();
    let mut classes = build_classes(a, file, text, from_flags, &mut duration)?;
    scale(a, &mut classes, &mut duration)?;
    if a.load.requests.is_some() && classes.iter().all(|c| c.profile.is_some()) {
        return Err(err(
            "--requests",
            a.load.requests.unwrap_or_default(),
            "bounds closed-loop runs only; add --rate max (or use --duration)",
        ));
    }
    let segments: usize = classes
        .iter()
        .filter_map(|c| c.profile.as_ref().map(|p| p.segments().len()))
        .sum();
    if segments > limits::MAX_SEGMENTS {
        return Err(err(
            "profile",
            format!("{} classes", classes.len()),
            format!(
                "the classes' rate profiles make {segments} segments together; at most {} (use fewer or longer segments, or repeat less)",
                limits::MAX_SEGMENTS
            ),
        ));
    }
    let mut names = std::collections::HashSet::new();
    for c in &classes {
        check_class(c, from_flags).map_err(|mut e| {
            // The flags' mix came from --command when it was given: name that flag.
            if let (true, "--mix", Some(cmd)) = (from_flags, e.flag, &a.load.command) {
                e.flag = "--command";
                e.value = cmd.clone();
            }
            e
        })?;
        if !names.insert(c.name.clone()) {
            return Err(err(
                "class",
                &c.name,
                "two classes have this name; names must be unique",
            ));
        }
    }
    // The measured length: given, or the longest profile.
    let longest = classes
        .iter()
        .filter_map(|c| {
            c.profile
                .as_ref()
                .map(|p| Duration::from_nanos(p.duration_ns()))
        })
        .max();
    // The measured length: given, or the longest profile — never shorter than a profile, so
    // no second the workers run falls outside the timeline.
    let duration = match (duration, longest) {
        (Some(d), Some(l)) => d.max(l),
        (d, l) => d.or(l).unwrap_or(Duration::ZERO),
    };
    if duration.is_zero()
        && classes
            .iter()
            .any(|c| c.profile.is_none() && c.requests.is_none())
    {
        return Err(err("--duration", "0s", "must be > 0, e.g. 10s"));
    }
    Ok((classes, duration))
}

/// `--checkpoint-every` needs one closed-loop class bounded by `--requests` (the pause is
/// a request count, and an open-loop schedule cannot pause without changing its load);
/// `--probe` needs checkpoints.
fn check_checkpoints(cfg: &RunConfig) -> Result<(), ConfigError> {
    let Some(every) = cfg.checkpoint_every else {
        if let Some(p) = &cfg.probe {
            return Err(err(
                "--probe",
                p.join(" "),
                "is sent at checkpoints: give --checkpoint-every N too",
            ));
        }
        return Ok(());
    };
    let closed: Vec<&ClassConfig> = cfg
        .classes
        .iter()
        .filter(|c| c.profile.is_none() && c.requests.is_some())
        .collect();
    if cfg.classes.len() != 1 || closed.len() != 1 {
        return Err(err(
            "--checkpoint-every",
            every,
            "needs one class, closed loop and bounded by a request count (--rate max --requests N): the load pauses at each checkpoint",
        ));
    }
    let total = closed[0].requests.unwrap_or(0);
    if every == 0 || every > total {
        return Err(err(
            "--checkpoint-every",
            every,
            format!("give 1 to the run's {total} requests (--requests)"),
        ));
    }
    if total / every > limits::MAX_CHECKPOINTS as u64 {
        return Err(err(
            "--checkpoint-every",
            every,
            format!(
                "{} checkpoints; at most {} a run: give at least {}",
                total / every,
                limits::MAX_CHECKPOINTS,
                total.div_ceil(limits::MAX_CHECKPOINTS as u64)
            ),
        ));
    }
    if let Some(p) = &cfg.probe
        && (p.is_empty() || p.len() > 16 || p.iter().any(|w| w.len() > 512))
    {
        return Err(err(
            "--probe",
            p.join(" "),
            "give one command of at most 16 words, e.g. \"ZCARD growth\"",
        ));
    }
    Ok(())
}

/// The target's address and the session every connection opens with, from `--target`
/// (a `redis://` URI may carry a user, a password and a database), `--user`,
/// `--password`/`CREST_PASSWORD`, `--password-file`, `--db` and the profile file's
/// `target`, `user`, `password_file`, `db` (a flag, or a URI given as a flag, wins over
/// the file). Within a layer each is given in one place: a password from two sources, or
/// a URI and a flag that disagree, is refused.
/// No error quotes a password.
fn target_session(
    a: &RunArgs,
    file: &FileToml,
) -> Result<(Option<String>, Session, bool), ConfigError> {
    let raw = a.target.target.as_ref().or(file.target.as_ref());
    let spec = raw
        .map(|t| target::parse_target(t).map_err(|e| err("--target", target::redacted(t), e)))
        .transpose()?;
    let (uri_user, uri_password, uri_db) = match &spec {
        Some(s) => (s.user.clone(), s.password.clone(), s.db),
        None => (None, None, None),
    };
    // A URI given as a flag is of the flag layer: its parts win over the file's.
    let from_flag = |part: bool| a.target.target.is_some() && part;
    let user = a
        .target
        .user
        .clone()
        .or_else(|| file.user.clone().filter(|_| !from_flag(uri_user.is_some())));
    if let (Some(u), Some(uu)) = (&user, &uri_user)
        && u != uu
    {
        return Err(err(
            "--user",
            u,
            format!("the --target URI names user {uu:?}; give the user in one place"),
        ));
    }
    let user = user.or(uri_user);
    let uri_pw_from_flag = from_flag(uri_password.is_some());
    let password = password(a, file, uri_password, uri_pw_from_flag)?;
    let db = a
        .target
        .db
        .or(file.db.filter(|_| !from_flag(uri_db.is_some())));
    if let (Some(d), Some(ud)) = (db, uri_db)
        && d != ud
    {
        return Err(err(
            "--db",
            d,
            format!("the --target URI names database /{ud}; give the database in one place"),
        ));
    }
    let db = db.or(uri_db).unwrap_or(0);
    if db > target::MAX_DB {
        return Err(err("--db", db, format!("must be 0 to {}", target::MAX_DB)));
    }
    let login = match (user, password) {
        (Some(u), _) if u.is_empty() || u.len() > limits::MAX_NAME => {
            return Err(err(
                "--user",
                &u,
                format!("must be 1 to {} bytes", limits::MAX_NAME),
            ));
        }
        (Some(u), None) => {
            return Err(err(
                "--user",
                u,
                "needs a password: give --password-file FILE, CREST_PASSWORD or --password (a nopass user takes any)",
            ));
        }
        (Some(user), Some(password)) => Some(Login { user, password }),
        (None, Some(password)) => Some(Login {
            user: DEFAULT_USER.into(),
            password,
        }),
        (None, None) => None,
    };
    let resp = match (a.target.resp, file.resp) {
        (Some(r), _) => r,
        (None, Some(v)) => Resp::of(v).ok_or_else(|| err("resp", v, RESP_VALUES))?,
        (None, None) => Resp::Resp2,
    };
    let tracking = a.load.tracking || file.tracking.unwrap_or(false);
    if tracking && resp != Resp::Resp3 {
        return Err(err(
            "--tracking",
            "on",
            "needs --resp 3: the invalidations it asks for are RESP3 push frames",
        ));
    }
    let session = Session {
        login,
        db,
        resp,
        tracking,
    };
    if spec.is_none() && (session.login.is_some() || session.db != 0) {
        let (flag, value) = match &session.login {
            Some(l) if a.target.user.is_some() || file.user.is_some() => ("--user", l.user.clone()),
            Some(_) => ("--password", "***".to_string()),
            None => ("--db", db.to_string()),
        };
        return Err(err(
            flag,
            value,
            "the built-in target has no users or databases; give --target host:port of a server",
        ));
    }
    let tls = spec.as_ref().is_some_and(|s| s.tls);
    Ok((spec.map(|s| s.addr), session, tls))
}

/// The password, given one way only: `--password` (or CREST_PASSWORD), `--password-file`
/// (a profile's path is relative to the profile's folder), or the `--target` URI;
/// `uri_pw_from_flag`: the URI holding a password is the flag's.
fn password(
    a: &RunArgs,
    file: &FileToml,
    uri_password: Option<Secret>,
    uri_pw_from_flag: bool,
) -> Result<Option<Secret>, ConfigError> {
    let password_file = match (&a.target.password_file, &file.password_file) {
        (Some(p), _) => Some(p.clone()),
        // A path in the profile file is relative to the file's folder.
        (None, Some(p)) if a.target.password.is_none() && !uri_pw_from_flag => Some(
            a.load
                .profile
                .as_ref()
                .and_then(|f| f.parent())
                .map_or_else(|| p.clone(), |dir| dir.join(p)),
        ),
        (None, _) => None,
    };
    let password = match (&a.target.password, &password_file, uri_password) {
        (Some(_), Some(f), _) => {
            return Err(err(
                "--password-file",
                f.display(),
                "and --password (or CREST_PASSWORD) are both given; give the password one way",
            ));
        }
        (Some(_), None, Some(_)) => {
            return Err(err(
                "--password",
                "***",
                "the --target URI holds a password too; give the password one way",
            ));
        }
        (None, Some(f), Some(_)) => {
            return Err(err(
                "--password-file",
                f.display(),
                "the --target URI holds a password too; give the password one way",
            ));
        }
        (Some(p), None, None) => Some(Secret::new(p.clone())),
        (None, Some(f), None) => Some(read_password(f)?),
        (None, None, uri) => uri,
    };
    if let Some(p) = &password {
        if p.expose().is_empty() {
            return Err(err(
                "--password",
                "",
                "is empty; give the server's password",
            ));
        }
        if p.expose().len() > limits::MAX_NAME {
            return Err(err(
                "--password",
                "***",
                format!("is longer than {} bytes", limits::MAX_NAME),
            ));
        }
    }
    Ok(password)
}

/// TLS to the target, from `--tls` (or a `rediss://` target), `--cacert`, `--cert`,
/// `--key`, `--sni`, `--tls-skip-verify`, `--tls-skip-hostname` and the profile file's
/// `tls`, `cacert`, `cert`, `key` (paths relative to the file), `sni`. Every file is read
/// and checked here, so a bad one is refused by its flag before any worker is asked.
fn target_tls(
    a: &RunArgs,
    file: &FileToml,
    target: Option<&str>,
    uri_tls: bool,
) -> Result<Option<Tls>, ConfigError> {
    let near_profile = |p: &PathBuf| {
        a.load
            .profile
            .as_ref()
            .and_then(|f| f.parent())
            .map_or_else(|| p.clone(), |dir| dir.join(p))
    };
    let files = crest_engine::target_tls::TlsFiles {
        ca: a
            .target
            .cacert
            .clone()
            .or_else(|| file.cacert.as_ref().map(near_profile)),
        cert: a
            .target
            .cert
            .clone()
            .or_else(|| file.cert.as_ref().map(near_profile)),
        key: a
            .target
            .key
            .clone()
            .or_else(|| file.key.as_ref().map(near_profile)),
    };
    let sni = a.target.sni.clone().or_else(|| file.sni.clone());
    let on = a.target.tls || uri_tls || file.tls == Some(true);
    if !on {
        let path = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
        let on = |b: bool| b.then(|| "on".to_string());
        let given = [
            ("--cacert", path(&files.ca)),
            ("--cert", path(&files.cert)),
            ("--key", path(&files.key)),
            ("--sni", sni.clone()),
            ("--tls-skip-verify", on(a.target.tls_skip_verify)),
            ("--tls-skip-hostname", on(a.target.tls_skip_hostname)),
        ];
        if let Some((flag, Some(value))) = given.into_iter().find(|(_, v)| v.is_some()) {
            return Err(err(
                flag,
                value,
                "is a TLS setting, but TLS is off: add --tls, or give the target as rediss://host:port",
            ));
        }
        return Ok(None);
    }
    let Some(target) = target else {
        return Err(err(
            "--tls",
            "on",
            "the built-in target speaks plaintext only; give --target host:port of a TLS server",
        ));
    };
    let verify = if a.target.tls_skip_verify {
        Verify::None
    } else if a.target.tls_skip_hostname {
        Verify::SkipHostname
    } else {
        Verify::Full
    };
    let name = sni.unwrap_or_else(|| target::host_of(target).to_string());
    files
        .load(&name, verify)
        .map(Some)
        .map_err(|e| err(e.flag, e.path.display(), e.why))
}

/// The password in `path`: the file's one line, a final newline dropped.
fn read_password(path: &std::path::Path) -> Result<Secret, ConfigError> {
    let bad = |why: String| err("--password-file", path.display(), why);
    let text = std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read: {e}")))?;
    let one = text
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(&text);
    if one.contains('\n') {
        return Err(bad(
            "holds more than one line; the file must hold only the password".into(),
        ));
    }
    if one.is_empty() {
        return Err(bad("is empty; write the server's password in it".into()));
    }
    Ok(Secret::new(one))
}

/// The profile file named by `--profile` (parsed) and its text (for line numbers).
fn read_profile(a: &RunArgs) -> Result<(FileToml, String), ConfigError> {
    Ok(match &a.load.profile {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| err("--profile", p.display(), format!("cannot read: {e}")))?;
            let f = profile::parse_file(&text).map_err(|e| err("--profile", p.display(), e))?;
            (f, text)
        }
        None => (FileToml::default(), String::new()),
    })
}

/// Every class of the run: flag layer over file layer over the defaults; with
/// `from_flags`, the one class of the flags. `duration` is the run length so far (flag or
/// file); a flags-only closed loop gets the default.
fn build_classes(
    a: &RunArgs,
    file: &FileToml,
    text: &str,
    from_flags: bool,
    duration: &mut Option<Duration>,
) -> Result<Vec<ClassConfig>, ConfigError> {
    let flags = ClassLayer::from_flags(a)?;
    let mut classes = Vec::new();
    if from_flags {
        let segments: Option<Vec<Segment>> = match (a.pace.rate, &a.load.stages) {
            (Some(RateArg::Max), _) => None,
            (_, Some(s)) => Some(profile::parse_stages(s).map_err(|e| err("--stages", s, e))?),
            (rate, None) => {
                let r = match rate {
                    Some(RateArg::Rps(r)) => r,
                    _ => defaults::RATE_RPS,
                };
                let d = duration.unwrap_or(defaults::DURATION);
                if d.is_zero() {
                    return Err(err("--duration", "0s", "must be > 0, e.g. 10s"));
                }
                Some(vec![Segment {
                    duration_ns: u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
                    from_rps: r,
                    to_rps: r,
                }])
            }
        };
        if segments.is_none() && duration.is_none() && a.load.requests.is_none() {
            *duration = Some(defaults::DURATION);
        }
        let profile = segments
            .map(|s| {
                Profile::new(s).map_err(|e| match a.pace.rate {
                    Some(RateArg::Rps(r)) => err("--rate", r, e),
                    _ => err("--rate", defaults::RATE_RPS, e),
                })
            })
            .transpose()?;
        classes.push(flags.resolve("default".into(), profile, &|e| {
            err("--key-dist", a.load.key_dist.clone().unwrap_or_default(), e)
        })?);
    } else {
        for (i, sc) in file.classes.iter().enumerate() {
            let c = sc.get_ref();
            let line = profile::line_of(text, sc.span().start);
            let name = c.name.clone().unwrap_or_else(|| format!("class{}", i + 1));
            let at = |e: String| err("class", format!("{name} (line {line})"), e);
            if name.trim().is_empty() || name.chars().any(char::is_control) {
                return Err(err(
                    "name",
                    &name,
                    format!(
                        "the class at line {line} has an empty name or one with control characters; give it one like \"small\", or leave name out"
                    ),
                ));
            }
            let profile = profile::class_segments(c, text, *duration)
                .map_err(at)?
                .map(|s| Profile::new(s).map_err(|e| at(e.to_string())))
                .transpose()?;
            let layer = flags.clone().over(ClassLayer::from_file(c).map_err(at)?);
            classes.push(layer.resolve(name.clone(), profile, &|e| {
                if a.load.key_dist.is_some() {
                    err("--key-dist", a.load.key_dist.clone().unwrap_or_default(), e)
                } else {
                    at(e)
                }
            })?);
        }
    }
    Ok(classes)
}

/// `--rate-scale` and `--time-scale`, applied to every profile and to the run length.
fn scale(
    a: &RunArgs,
    classes: &mut [ClassConfig],
    duration: &mut Option<Duration>,
) -> Result<(), ConfigError> {
    for (flag, v) in [
        ("--rate-scale", a.load.rate_scale),
        ("--time-scale", a.load.time_scale),
    ] {
        if let Some(x) = v
            && !(x.is_finite() && x > 0.0)
        {
            return Err(err(flag, x, "must be a number > 0"));
        }
    }
    if a.load.rate_scale.is_some() || a.load.time_scale.is_some() {
        let (r, t) = (
            a.load.rate_scale.unwrap_or(1.0),
            a.load.time_scale.unwrap_or(1.0),
        );
        for c in classes.iter_mut() {
            if let Some(p) = &c.profile {
                let longest = limits::MAX_RUN.as_nanos() as f64;
                if p.duration_ns() as f64 * t > longest {
                    return Err(err(
                        "--time-scale",
                        t,
                        format!(
                            "makes class {} last longer than {}; give a smaller factor",
                            c.name,
                            humantime::format_duration(limits::MAX_RUN)
                        ),
                    ));
                }
                let segs = p
                    .segments()
                    .iter()
                    .map(|s| Segment {
                        // At most MAX_RUN (checked above), so the cast cannot saturate.
                        duration_ns: ((s.duration_ns as f64) * t).round().max(1.0) as u64,
                        from_rps: s.from_rps * r,
                        to_rps: s.to_rps * r,
                    })
                    .collect();
                c.profile = Some(Profile::new(segs).map_err(|e| err("--rate-scale", r, e))?);
            }
        }
        if let Some(d) = duration.as_mut()
            && a.load.duration.is_none()
        {
            *d = Duration::try_from_secs_f64(d.as_secs_f64() * t).map_err(|_| {
                err(
                    "--time-scale",
                    t,
                    "makes the run longer than any duration can hold; give a smaller factor",
                )
            })?;
        }
    }
    Ok(())
}

/// Where the workers come from: `--workers N` remote ones, or in-process ones.
fn workers(a: &RunArgs) -> Result<Workers, ConfigError> {
    Ok(match a.fleet.workers {
        Some(0) => return Err(err("--workers", 0, "need at least 1 worker")),
        Some(n) => Workers::Remote {
            count: n,
            wait_timeout: a.fleet.wait_timeout.unwrap_or(defaults::WAIT_TIMEOUT),
        },
        None => {
            let count = a.fleet.local_workers.unwrap_or(defaults::LOCAL_WORKERS);
            if count == 0 {
                return Err(err("--local-workers", 0, "need at least 1 worker"));
            }
            Workers::Local {
                count,
                cpus: a.fleet.cpus.clone(),
                threads: a.fleet.threads,
            }
        }
    })
}

/// The unit tests' plan: one class at `rate` for `secs` against 127.0.0.1:1 (nothing
/// listens there), seed 42, quiet.
#[cfg(test)]
pub(crate) fn test_run(rate: f64, secs: u64) -> RunConfig {
    let mut c = to_config(RunArgs {
        target: TargetArgs {
            target: Some("127.0.0.1:1".into()),
            ..Default::default()
        },
        pace: PaceArgs {
            rate: Some(RateArg::Rps(rate)),
            seed: Some(42),
            ..Default::default()
        },
        load: LoadArgs {
            duration: Some(Duration::from_secs(secs)),
            ..Default::default()
        },
        ..Default::default()
    })
    .expect("the test plan is valid");
    c.quiet = true;
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(path: &str) -> Result<RunConfig, ConfigError> {
        to_config(RunArgs {
            load: LoadArgs {
                profile: Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    /// Every profile the project ships parses and checks: the examples and the one the
    /// Kubernetes Job mounts.
    #[test]
    fn shipped_profiles_parse() {
        for p in [
            "../examples/valkey-1m-rps.toml",
            "../examples/peaks-and-valleys.toml",
            "../examples/noisy-neighbour.toml",
            "../examples/zset-growth.toml",
            "../deploy/k8s/profile.toml",
        ] {
            let cfg = load(p).unwrap_or_else(|e| panic!("{p}: {e}"));
            assert!(!cfg.classes.is_empty(), "{p}");
        }
        let k8s = load("../deploy/k8s/profile.toml").unwrap();
        assert_eq!(k8s.classes[0].connections, 150);
        assert_eq!(k8s.duration, Duration::from_secs(60));
    }

    fn with_file(body: &str, tag: &str, edit: impl FnOnce(&mut RunArgs)) -> RunConfig {
        let path =
            std::env::temp_dir().join(format!("crest-cli-{tag}-{}.toml", std::process::id()));
        std::fs::write(&path, body).unwrap();
        let mut a = RunArgs {
            load: LoadArgs {
                profile: Some(path.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        edit(&mut a);
        let cfg = to_config(a);
        std::fs::remove_file(&path).unwrap();
        cfg.unwrap()
    }

    /// Regression (issue 7): the file's `ttl` used to win over `--ttl`. Every setting is
    /// flag, then file, then the defaults table.
    #[test]
    fn flag_then_file_then_default_for_every_layered_setting() {
        let body = "duration = \"2s\"\n[[class]]\nname = \"c\"\nrate = 100\nttl = \"30s\"\nconnections = 7\npipeline = 3\n";
        let file = with_file(body, "file", |_| {});
        let c = &file.classes[0];
        assert_eq!((c.ttl, c.connections, c.pipeline), (Some(30), 7, 3));
        assert_eq!(c.batch, defaults::BATCH);
        assert_eq!(c.keys, defaults::KEYS);
        assert_eq!(c.key_prefix, defaults::KEY_PREFIX);
        assert_eq!(c.mix, ratio_mix(defaults::RATIO));
        assert_eq!(file.timeout, defaults::TIMEOUT);
        let flags = with_file(body, "flags", |a| {
            a.load.ttl = Some(Duration::from_secs(5));
            a.load.connections = Some(9);
            a.load.batch = Some(4);
        });
        let c = &flags.classes[0];
        assert_eq!(
            (c.ttl, c.connections, c.pipeline, c.batch),
            (Some(5), 9, 3, 4)
        );
    }

    /// Server stats are on by default; the profile's `server_stats = false` or
    /// `--no-server-stats` turn them off (a file's `true` does not undo the flag).
    #[test]
    fn server_stats_are_on_unless_the_flag_or_the_file_says_off() {
        let on = "duration = \"1s\"\n[[class]]\nrate = 10\n";
        assert!(with_file(on, "stats-on", |_| {}).server_stats);
        let off = "server_stats = false\nduration = \"1s\"\n[[class]]\nrate = 10\n";
        assert!(!with_file(off, "stats-off", |_| {}).server_stats);
        let yes = "server_stats = true\nduration = \"1s\"\n[[class]]\nrate = 10\n";
        assert!(!with_file(yes, "stats-flag", |a| a.pace.no_server_stats = true).server_stats);
    }

    /// The profile file's `resp` and `tracking`, and the flags over them; the built-in
    /// target speaks RESP3 too; a protocol Crest does not speak is one line naming 2 and 3.
    #[test]
    fn the_protocol_comes_from_the_flag_then_the_file() {
        let body = "resp = 3\ntracking = true\nduration = \"1s\"\n[[class]]\nrate = 10\n";
        let cfg = with_file(body, "resp3", |_| {});
        assert_eq!(
            (cfg.session.resp, cfg.session.tracking),
            (Resp::Resp3, true)
        );
        assert!(cfg.target.is_none(), "the built-in target takes RESP3");
        let cfg = with_file(
            "resp = 3\nduration = \"1s\"\n[[class]]\nrate = 10\n",
            "resp-flag",
            |a| {
                a.target.resp = Some(Resp::Resp2);
            },
        );
        assert_eq!(cfg.session.resp, Resp::Resp2);
        let path =
            std::env::temp_dir().join(format!("crest-cli-resp4-{}.toml", std::process::id()));
        std::fs::write(&path, "resp = 4\nduration = \"1s\"\n[[class]]\nrate = 10\n").unwrap();
        let e = to_config(RunArgs {
            load: LoadArgs {
                profile: Some(path.clone()),
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap_err()
        .to_string();
        std::fs::remove_file(&path).unwrap();
        assert!(
            e.contains("resp") && e.contains("expected 2") && e.contains("or 3"),
            "{e}"
        );
        assert_eq!(parse_resp("3"), Ok(Resp::Resp3));
        assert!(parse_resp("1").is_err() && parse_resp("three").is_err());
    }

    /// The profile file's `user`, `password_file` (next to the file) and `db`; a URI target
    /// gives its address to the plan and its login to the session.
    #[test]
    fn the_profile_file_gives_the_login_and_database() {
        let pw = std::env::temp_dir().join(format!("crest-cli-pw-{}.txt", std::process::id()));
        std::fs::write(&pw, "hunter2\r\n").unwrap();
        let name = pw.file_name().unwrap().to_str().unwrap();
        let body = format!(
            "target = \"10.0.0.5:6380\"\nuser = \"bench\"\npassword_file = \"{name}\"\ndb = 2\nduration = \"1s\"\n[[class]]\nrate = 10\n"
        );
        let cfg = with_file(&body, "login", |_| {});
        assert_eq!(cfg.target.as_deref(), Some("10.0.0.5:6380"));
        let login = cfg.session.login.as_ref().unwrap();
        assert_eq!(
            (login.user.as_str(), login.password.expose()),
            ("bench", "hunter2")
        );
        assert_eq!(cfg.session.db, 2);
        // A flag wins over the file; a URI's parts fill in what no flag gives.
        let cfg = with_file(&body, "login-flags", |a| {
            a.target.target = Some("redis://:pw@cache:7000/2".into());
            a.target.user = Some("alice".into());
            a.target.password_file = None;
        });
        std::fs::remove_file(&pw).unwrap();
        assert_eq!(cfg.target.as_deref(), Some("cache:7000"));
        let login = cfg.session.login.as_ref().unwrap();
        assert_eq!(
            (login.user.as_str(), login.password.expose()),
            ("alice", "pw")
        );
        assert!(!format!("{cfg:?}").contains("hunter2") && !format!("{cfg:?}").contains("\"pw\""));
    }

    /// Flags only is the same path as a file with one empty class: the defaults table.
    #[test]
    fn flags_only_takes_the_defaults_table() {
        let cfg = to_config(RunArgs::default()).unwrap();
        let c = &cfg.classes[0];
        assert_eq!(c.connections, defaults::CONNECTIONS);
        assert_eq!(c.pipeline, defaults::PIPELINE);
        assert_eq!(c.values, ValueSizes::Fixed(defaults::VALUE_SIZE));
        assert_eq!(cfg.duration, defaults::DURATION);
        assert_eq!(cfg.interval, defaults::INTERVAL);
        assert_eq!(cfg.backlog_limit, defaults::BACKLOG_LIMIT);
        let p = c.profile.as_ref().unwrap();
        assert_eq!(p.segments()[0].from_rps, defaults::RATE_RPS);
    }

    #[test]
    fn flags_override_the_file() {
        let cfg = to_config(RunArgs {
            load: LoadArgs {
                profile: Some(
                    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/zset-growth.toml"),
                ),
                requests: Some(40),
                batch: Some(1000),
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap();
        assert_eq!(cfg.classes[0].requests, Some(40));
        assert_eq!(cfg.classes[0].batch, 1000);
    }
}
