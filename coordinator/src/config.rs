//! `crest run` settings: parsed once from the command line, checked into a [`RunConfig`].
//!
//! Every check names the flag, quotes the bad value and says what would be right; the
//! binary prints that one line and exits with code 2.

use crest_model::convert::limits;
use crest_model::plan::{Pacer, Shape};
use crest_model::schedule::{Arrival, Profile, Segment};
use crest_model::shapes::{KeyDist, Ttl};
use crest_model::target::Protocol;
use crest_model::workload::CmdDef;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// A bad setting.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{flag} {value:?}: {why}")]
pub struct ConfigError {
    /// The flag, e.g. `--ratio`.
    pub flag: &'static str,
    /// The value given.
    pub value: String,
    /// What is wrong and what would be right.
    pub why: String,
}

impl ConfigError {
    /// A new error.
    pub fn new(flag: &'static str, value: impl ToString, why: impl ToString) -> Self {
        Self {
            flag,
            value: value.to_string(),
            why: why.to_string(),
        }
    }
}

/// Parses a duration like `10s`, `500ms`, `2m`, `1h30m` (humantime syntax; a bare number is seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err("a duration cannot be negative; expected e.g. 10s, 500ms, 2m".into());
    }
    if let Ok(secs) = t.parse::<f64>()
        && secs.is_finite()
        && secs >= 0.0
    {
        // try_from: a finite number beyond u64 seconds is an error, not a panic.
        return Duration::try_from_secs_f64(secs)
            .map_err(|_| format!("{t:?} seconds is longer than any run can last"));
    }
    humantime::parse_duration(t)
        .map_err(|_| format!("not a duration; expected e.g. 10s, 500ms, 2m (got {t:?})"))
}

/// Parses `--ttl` (and a profile's `ttl` string): one TTL (`60s`, `1h`, at least 1 s; a
/// fraction of a second rounds up), or a table `TTL:WEIGHT,…` drawn per write, where a
/// TTL of 0 is none (`0:30,60s:50,1h:20`: 30% of writes keep their key for good).
///
/// # Errors
/// What is wrong and what would be right.
pub fn parse_ttl(s: &str) -> Result<Ttl, String> {
    let secs = |t: &str| -> Result<u64, String> {
        let d = parse_duration(t)?;
        Ok(if d.is_zero() {
            0
        } else {
            d.as_secs() + u64::from(d.subsec_nanos() > 0)
        })
    };
    let t = s.trim();
    let ttl = if t.contains(',') || t.contains(':') {
        let mut list = Vec::new();
        for item in t.split(',') {
            let (ttl, w) = item.split_once(':').ok_or_else(|| {
                format!("{item:?}: a TTL table is TTL:WEIGHT,…, e.g. 0:30,60s:50,1h:20 (0: no TTL)")
            })?;
            let w: u32 = w
                .trim()
                .parse()
                .map_err(|_| format!("{item:?}: weight {w:?} is not a whole number"))?;
            list.push((secs(ttl)?, w));
        }
        Ttl::Table(list)
    } else {
        match secs(t)? {
            0 => {
                return Err(
                    "a TTL of 0; give at least 1s (leave it out for no TTL, or a table such as 0:1,60s:1 for some writes without)"
                        .into(),
                );
            }
            n => Ttl::Fixed(n),
        }
    };
    ttl.check(limits::MAX_TTL_S).map_err(|e| e.to_string())?;
    Ok(ttl)
}

/// Parses `--conn-lifetime`: `D` or `D±J` (`D+-J` too), e.g. `1s`, `30s±5s`: a lifetime
/// of at least 10 ms and a jitter below it.
///
/// # Errors
/// What is wrong and what would be right.
pub fn parse_lifetime(s: &str) -> Result<(Duration, Duration), String> {
    let t = s.trim();
    let (life, jitter) = match t.split_once('±').or_else(|| t.split_once("+-")) {
        Some((l, j)) => (parse_duration(l)?, parse_duration(j)?),
        None => (parse_duration(t)?, Duration::ZERO),
    };
    if life < limits::MIN_CONN_LIFETIME {
        return Err(format!(
            "a connection lifetime of {} is too short: at least {} (e.g. 1s or 30s±5s)",
            humantime::format_duration(life),
            humantime::format_duration(limits::MIN_CONN_LIFETIME)
        ));
    }
    if life > limits::MAX_RUN {
        return Err("longer than any run can last; leave --conn-lifetime out for connections that live as long as the run".into());
    }
    if jitter >= life {
        return Err(format!(
            "the jitter ±{} must be less than the lifetime {} (e.g. 30s±5s)",
            humantime::format_duration(jitter),
            humantime::format_duration(life)
        ));
    }
    Ok((life, jitter))
}

/// Parses `--conn-rate`: connections retired per second across the fleet, `N` or `N/s`,
/// more than 0 and at most [`limits::MAX_CONN_RATE`].
///
/// # Errors
/// What is wrong and what would be right.
pub fn parse_conn_rate(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let t = t.strip_suffix("/s").unwrap_or(t);
    match t.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 && r <= limits::MAX_CONN_RATE => Ok(r),
        Ok(_) => Err(format!(
            "must be more than 0 and at most {} connections per second, e.g. 50 or 50/s",
            limits::MAX_CONN_RATE
        )),
        Err(_) => Err("not a number of connections per second, e.g. 50 or 50/s".into()),
    }
}

/// Parses a byte size like `1024`, `1k`, `4KB`, `10MB`, `1MiB` (k = 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("not a size; expected e.g. 1024, 1k, 10MB (got {t:?})"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        other => return Err(format!("unknown size unit {other:?}; use k, KB, MB or GB")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size {t:?} is too large"))
}

/// Parses `--seed`: a whole number 0 to 2^64 − 1.
pub fn parse_seed(s: &str) -> Result<u64, String> {
    s.trim()
        .parse()
        .map_err(|_| format!("expected a whole number from 0 to {}", u64::MAX))
}

/// Parses a `SET:GET` ratio like `1:10` into the two weights.
pub fn parse_ratio(s: &str) -> Result<(u32, u32), String> {
    let parts: Vec<&str> = s.split(':').collect();
    let bad = || format!("expected SET:GET weights like 1:10 (got {s:?})");
    if parts.len() != 2 {
        return Err(bad());
    }
    let set: u32 = parts[0].trim().parse().map_err(|_| bad())?;
    let get: u32 = parts[1].trim().parse().map_err(|_| bad())?;
    if set == 0 && get == 0 {
        return Err(format!(
            "ratio {s:?} has both weights 0; at least one must be > 0"
        ));
    }
    Ok((set, get))
}

/// `--rate`: requests per second, or `max` for closed loop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RateArg {
    /// Open loop at this rate.
    Rps(f64),
    /// Closed loop.
    Max,
}

/// Parses `--rate`: a positive number, or `max`.
pub fn parse_rate(s: &str) -> Result<RateArg, String> {
    if s.trim().eq_ignore_ascii_case("max") {
        return Ok(RateArg::Max);
    }
    let r: f64 = s
        .trim()
        .parse()
        .map_err(|_| "expected requests per second, e.g. 20000, or max".to_string())?;
    if r.is_nan() || r <= 0.0 {
        return Err("must be > 0 requests per second, e.g. 20000, or max".into());
    }
    if r > limits::MAX_RATE {
        return Err(format!(
            "more than the {:.0} requests per second any run can schedule; give e.g. 20000, or max for closed loop",
            limits::MAX_RATE
        ));
    }
    Ok(RateArg::Rps(r))
}

/// Where the workers come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Workers {
    /// Start this many workers in this process, talking gRPC over loopback.
    Local {
        /// How many.
        count: u32,
        /// Cores for their shards (None = all allowed).
        cpus: Option<String>,
        /// At most this many shards in all.
        threads: Option<usize>,
    },
    /// Wait for this many remote workers to dial in.
    Remote {
        /// How many.
        count: u32,
        /// How long to wait for them.
        wait_timeout: Duration,
    },
}

/// One class of traffic, checked.
#[derive(Debug, Clone)]
pub struct ClassConfig {
    /// Name in results.
    pub name: String,
    /// Open loop: the cluster-wide rate profile (measured part; warm-up is prepended at
    /// plan time). None: closed loop.
    pub profile: Option<Profile>,
    /// Closed loop: requests in all (None: until the duration ends).
    pub requests: Option<u64>,
    /// What it sends: commands, keys, values, pipeline depth and the rest.
    pub shape: Shape,
    /// Connections across the whole cluster.
    pub connections: u32,
    /// Write every key once before the run.
    pub prefill: bool,
}

/// A checked run configuration.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Server address, `host:port`; None = start the built-in target.
    pub target: Option<String>,
    /// How every connection to the target begins (login, database).
    pub session: crest_model::target::Session,
    /// TLS to the target; None: plaintext.
    pub tls: Option<crest_model::target::Tls>,
    /// One node or a Redis Cluster (auto: what the seed says).
    pub cluster: crest_model::target::ClusterMode,
    /// What the connections speak: RESP, or memcached's text or meta protocol.
    pub protocol: Protocol,
    /// A memcached target's servers, `target` first (one for a single server); empty for
    /// RESP.
    pub ring: Vec<String>,
    /// How connections come and go (`--conn-lifetime`, `--conn-rate`).
    pub churn: crest_model::plan::Churn,
    /// Where reads go (`--read-from`).
    pub read_from: crest_model::target::ReadFrom,
    /// A standalone primary's replicas (`--replica`); empty: found by the workers.
    pub replicas: Vec<String>,
    /// `--check-staleness`: replica reads checked for the latest acknowledged write.
    pub check_staleness: bool,
    /// The classes.
    pub classes: Vec<ClassConfig>,
    /// `crest replay`: the trace its one class sends (None for `crest run`).
    pub replay: Option<crate::trace_plan::Spec>,
    /// Measured length (every open-loop profile ends by then; closed loop stops then).
    pub duration: Duration,
    /// Unmeasured lead-in at each class's first rate.
    pub warmup: Duration,
    /// Length of one timeline interval (1 s by default).
    pub interval: Duration,
    /// Arrival process.
    pub arrival: Arrival,
    /// Pacer.
    pub pacer: Pacer,
    /// Per-request timeout.
    pub timeout: Duration,
    /// How long to wait for replies after the schedule ends.
    pub drain: Duration,
    /// Run seed.
    pub seed: u64,
    /// Report folder.
    pub out: Option<PathBuf>,
    /// gRPC listen address.
    pub listen: SocketAddr,
    /// Worker source.
    pub workers: Workers,
    /// Shared secret.
    pub token: String,
    /// TLS for the remote workers' control plane (`--control-cert`...), checked; `None`:
    /// plaintext. In-process workers always dial a plaintext loopback listener.
    pub control_tls: Option<crest_engine::control_tls::ServerTls>,
    /// Backlog bound per shard and class.
    pub backlog_limit: u64,
    /// `--memory-budget`: the most one process of the run (this one, or a remote worker)
    /// is estimated to need before the plan is refused (`orchestrate::budget`).
    pub memory_budget: u64,
    /// Sample the target's `INFO` at every interval boundary (on unless
    /// `--no-server-stats`; a target that refuses `INFO` turns it off by itself).
    pub server_stats: bool,
    /// `--checkpoint-every N`: the one closed-loop class pauses after every N requests,
    /// drains, and the coordinator samples `INFO memory` (and the probe) before it goes on.
    pub checkpoint_every: Option<u64>,
    /// `--probe "ZCARD growth"`: a command sent at every checkpoint, its reply recorded.
    pub probe: Option<Vec<String>>,
    /// No progress or status lines on stderr (a run inside `crest suite`, which prints
    /// its own); warnings and errors still go there.
    pub quiet: bool,
    /// `--admin ADDR`: the admin HTTP API ([`crate::admin`]).
    pub admin: Option<SocketAddr>,
    /// `--admin-linger`: how long the admin API stays up after the run.
    pub admin_linger: Duration,
    /// What this run is part of, for the live page (`compare: …`, `search: …`, `suite:
    /// …`); empty for a plain run.
    pub label: String,
}

impl RunConfig {
    /// Requests the open-loop classes are due to send in [t0, t1) of the measured run.
    pub fn expected(&self, t0_ns: u64, t1_ns: u64) -> f64 {
        self.classes
            .iter()
            .filter_map(|c| c.profile.as_ref())
            .map(|p| p.expected(t0_ns, t1_ns))
            .sum()
    }

    /// True when every class is closed loop.
    pub fn closed_loop(&self) -> bool {
        self.classes.iter().all(|c| c.profile.is_none())
    }

    /// Class `c`'s connections across a fleet of `shards` shards: as asked, but a
    /// replay's at least one per shard (its trace falls to every shard by key hash).
    pub fn connections(&self, c: &ClassConfig, shards: u32) -> u32 {
        if self.replay.is_some() {
            c.connections.max(shards)
        } else {
            c.connections
        }
    }
}

/// Most timeline rows one run may have (`--duration` / `--interval`): a row is ~0.3 KB in
/// memory and in report.json, so this keeps both to a few hundred MB (11 days at 1 s,
/// 2.7 hours at 10 ms).
pub const MAX_ROWS: u64 = 1_000_000;

/// A run's measured length and interval within bounds: at most [`limits::MAX_RUN`], an
/// interval of 10 ms to 60 s, and at most [`MAX_ROWS`] timeline rows.
///
/// # Errors
/// The flag at fault (`--duration` or `--interval`) and what would be right.
pub fn check_span(duration: Duration, interval: Duration) -> Result<(), ConfigError> {
    if duration > limits::MAX_RUN {
        return Err(ConfigError::new(
            "--duration",
            format!("{duration:?}"),
            format!(
                "must be at most {}",
                humantime::format_duration(limits::MAX_RUN)
            ),
        ));
    }
    if interval < Duration::from_millis(10) || interval > Duration::from_secs(60) {
        return Err(ConfigError::new(
            "--interval",
            format!("{interval:?}"),
            "must be 10ms to 60s",
        ));
    }
    let rows = duration.as_nanos() / interval.as_nanos().max(1);
    if rows > u128::from(MAX_ROWS) {
        return Err(ConfigError::new(
            "--interval",
            humantime::format_duration(interval),
            format!(
                "a {} run would have {rows} timeline rows, at most {MAX_ROWS} (every row is kept for the report); give a longer --interval",
                humantime::format_duration(duration)
            ),
        ));
    }
    Ok(())
}

impl RunConfig {
    /// This plan with its one class sent at a constant `rate` for `len` (a `crest search`
    /// window): every other setting as the flags made it. The drivers edit a checked
    /// configuration this way instead of the flags.
    ///
    /// # Errors
    /// When the plan has more than one class, or the rate or length is out of bounds.
    pub fn at_fixed_rate(&self, rate: f64, len: Duration) -> Result<Self, ConfigError> {
        let mut cfg = self.one_class("--rate", rate)?;
        let segment = Segment {
            duration_ns: u64::try_from(len.as_nanos()).unwrap_or(u64::MAX),
            from_rps: rate,
            to_rps: rate,
        };
        let profile =
            Profile::new(vec![segment]).map_err(|e| ConfigError::new("--rate", rate, e))?;
        cfg.classes[0].profile = Some(profile);
        cfg.classes[0].requests = None;
        cfg.duration = len;
        check_span(cfg.duration, cfg.interval)?;
        Ok(cfg)
    }

    /// This plan with its one class a closed loop of `requests` in all (a `crest suite`
    /// test as valkey-benchmark measures it).
    ///
    /// # Errors
    /// When the plan has more than one class, or `requests` is 0.
    pub fn closed_loop_of(&self, requests: u64) -> Result<Self, ConfigError> {
        if requests == 0 {
            return Err(ConfigError::new("--requests", 0, "must be at least 1"));
        }
        let mut cfg = self.one_class("--requests", requests)?;
        cfg.classes[0].profile = None;
        cfg.classes[0].requests = Some(requests);
        cfg.duration = Duration::ZERO;
        Ok(cfg)
    }

    /// A copy, refused unless the plan has exactly one class (what `flag` drives).
    fn one_class(&self, flag: &'static str, value: impl ToString) -> Result<Self, ConfigError> {
        if self.classes.len() != 1 {
            return Err(ConfigError::new(
                flag,
                value,
                format!(
                    "drives one class, and this plan has {}; give the class's settings as flags",
                    self.classes.len()
                ),
            ));
        }
        Ok(self.clone())
    }
}

/// Checks a class's settings that the parsers cannot check alone.
///
/// # Errors
/// [`ConfigError`] naming the field (its flag; for a profile's class, the class and its key).
pub fn check_class(
    c: &ClassConfig,
    from_flags: bool,
    protocol: Protocol,
) -> Result<(), ConfigError> {
    check_sizes(c, from_flags)?;
    check_load(c, from_flags, protocol)
}

/// An error about class `c`'s setting: named by its flag for the flags' class, by the
/// class and its profile key for a profile's (`class "a": connections "0": need at least
/// 1 connection`).
fn class_error(
    c: &ClassConfig,
    from_flags: bool,
) -> impl Fn(&'static str, &'static str, String, &str) -> ConfigError + '_ {
    move |flag, key, v, why| {
        if from_flags {
            ConfigError::new(flag, v, why)
        } else {
            ConfigError::new("class", &c.name, format!("{key} {v:?}: {why}"))
        }
    }
}

/// The keyspace, values, connections, pipeline and batch within bounds.
fn check_sizes(c: &ClassConfig, from_flags: bool) -> Result<(), ConfigError> {
    let f = class_error(c, from_flags);
    if c.shape.keys.count == 0 {
        return Err(f(
            "--keys",
            "keys.count",
            "0".into(),
            "the keyspace needs at least 1 key",
        ));
    }
    c.shape.values.check().map_err(|e| {
        f(
            "--value-size",
            "values",
            format!("{:?}", c.shape.values),
            &e.to_string(),
        )
    })?;
    if c.connections == 0 {
        return Err(f(
            "--connections",
            "connections",
            "0".into(),
            "need at least 1 connection",
        ));
    }
    if c.shape.pipeline == 0 {
        return Err(f(
            "--pipeline",
            "pipeline",
            "0".into(),
            "need at least 1 request in flight per connection",
        ));
    }
    if c.shape.pipeline > limits::MAX_PIPELINE {
        return Err(f(
            "--pipeline",
            "pipeline",
            c.shape.pipeline.to_string(),
            &format!(
                "at most {} requests in flight per connection",
                limits::MAX_PIPELINE
            ),
        ));
    }
    if c.shape.batch > limits::MAX_BATCH {
        return Err(f(
            "--batch",
            "batch",
            c.shape.batch.to_string(),
            &format!(
                "at most {} members or keys per batch command",
                limits::MAX_BATCH
            ),
        ));
    }
    Ok(())
}

/// The mix, TTL, rates and key distribution: what the class sends and how fast.
fn check_load(c: &ClassConfig, from_flags: bool, protocol: Protocol) -> Result<(), ConfigError> {
    let f = class_error(c, from_flags);
    if c.shape.mix.len() > limits::MAX_MIX {
        return Err(f(
            "--mix",
            "mix",
            format!("{} commands", c.shape.mix.len()),
            &format!("at most {} commands in one mix", limits::MAX_MIX),
        ));
    }
    if let Some(ttl) = &c.shape.ttl
        && let Err(e) = ttl.check(limits::MAX_TTL_S)
    {
        return Err(f("--ttl", "ttl", ttl.to_string(), &e.to_string()));
    }
    if let Some(p) = &c.profile
        && let Some(r) = p
            .segments()
            .iter()
            .flat_map(|s| [s.from_rps, s.to_rps])
            .find(|r| *r > limits::MAX_RATE)
    {
        return Err(f(
            "--rate",
            "rate",
            format!("{r:e}"),
            &format!(
                "a class may ask for at most {:e} requests/s (from --rate, --stages, the profile and --rate-scale)",
                limits::MAX_RATE
            ),
        ));
    }
    if let Some(p) = &c.profile
        && p.segments().len() > limits::MAX_SEGMENTS
    {
        return Err(f(
            "--stages",
            "profile",
            format!("{} segments", p.segments().len()),
            &format!("at most {} segments", limits::MAX_SEGMENTS),
        ));
    }
    if c.shape.batch == 0 {
        return Err(f(
            "--batch",
            "batch",
            "0".into(),
            "need at least 1 member or key per batch command",
        ));
    }
    if c.shape.mix.iter().map(|m| u64::from(m.1)).sum::<u64>() == 0 {
        return Err(f(
            "--mix",
            "mix",
            format!("{:?}", c.shape.mix),
            "command weights sum to 0; give one a weight > 0",
        ));
    }
    for (cmd, _) in &c.shape.mix {
        let def = CmdDef::parse_in(
            protocol,
            cmd,
            c.shape.batch,
            c.shape.ttl_nominal(),
            c.shape.range,
        )
        .map_err(|e| f("--mix", "mix", cmd.clone(), &e.to_string()))?;
        if def.ttl_word() && c.shape.ttl.as_ref().is_some_and(Ttl::may_be_none) {
            let e = crest_model::workload::WorkloadError::TtlNone(def.name.clone());
            return Err(f("--ttl", "ttl", cmd.clone(), &e.to_string()));
        }
    }
    if protocol.is_memcache() {
        // The longest key the run names: the prefix and the last key's number.
        let mut longest = c.shape.keys.prefix.clone().into_bytes();
        longest.extend_from_slice(c.shape.keys.count.saturating_sub(1).to_string().as_bytes());
        crest_memcache::text::check_key(&longest).map_err(|e| {
            f(
                "--key-prefix",
                "key_prefix",
                c.shape.keys.prefix.clone(),
                &format!(
                    "{e} (the longest key: {:?})",
                    String::from_utf8_lossy(&longest)
                ),
            )
        })?;
    }
    if let KeyDist::Zipf(s) = c.shape.keys.dist
        && s.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater)
    {
        return Err(f(
            "--key-dist",
            "keys.exponent",
            format!("zipf:{s}"),
            "the zipf exponent must be > 0",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{LoadArgs, PaceArgs, RunArgs, TargetArgs, to_config};

    fn flags(rate: RateArg) -> RunConfig {
        to_config(RunArgs {
            target: TargetArgs {
                target: Some("127.0.0.1:1".into()),
                ..Default::default()
            },
            pace: PaceArgs {
                rate: Some(rate),
                seed: Some(9),
                ..Default::default()
            },
            load: LoadArgs {
                duration: Some(Duration::from_secs(3)),
                connections: Some(7),
                ..Default::default()
            },
            ..Default::default()
        })
        .unwrap()
    }

    /// A driver's edit changes the schedule and nothing else the flags set; a plan of
    /// several classes, a nonsense rate or a run past the row cap are refused.
    #[test]
    fn drivers_edit_the_schedule_of_a_checked_plan() {
        let base = flags(RateArg::Rps(100.0));
        let w = base
            .at_fixed_rate(2_500.0, Duration::from_millis(1_500))
            .unwrap();
        assert_eq!(w.duration, Duration::from_millis(1_500));
        let p = w.classes[0].profile.as_ref().unwrap();
        assert_eq!(p.duration_ns(), 1_500_000_000);
        assert!((p.expected(0, 1_500_000_000) - 3_750.0).abs() < 1e-6);
        assert_eq!((w.seed, w.classes[0].connections), (9, 7));
        assert_eq!(w.classes[0].shape.mix, base.classes[0].shape.mix);
        assert!(
            base.at_fixed_rate(f64::NAN, Duration::from_secs(1))
                .is_err()
        );
        let e = base
            .at_fixed_rate(1.0, Duration::from_secs(400 * 24 * 3600))
            .unwrap_err();
        assert_eq!(e.flag, "--duration");

        let closed = base.closed_loop_of(1_000).unwrap();
        assert!(closed.closed_loop());
        assert_eq!(
            (closed.classes[0].requests, closed.duration),
            (Some(1_000), Duration::ZERO)
        );
        assert_eq!(closed.closed_loop_of(0).unwrap_err().flag, "--requests");
        // And back: a closed loop made open again has its rate and no budget.
        let open = closed.at_fixed_rate(10.0, Duration::from_secs(1)).unwrap();
        assert_eq!(open.classes[0].requests, None);

        let mut two = base.clone();
        two.classes.push(two.classes[0].clone());
        let e = two.at_fixed_rate(10.0, Duration::from_secs(1)).unwrap_err();
        assert!(e.why.contains("this plan has 2"), "{e}");
    }

    #[test]
    fn parsers_accept_the_usual_spellings() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert!(parse_duration("ten").is_err());
        assert_eq!(parse_size("1024").unwrap(), 1024);
        assert_eq!(parse_size("1k").unwrap(), 1024);
        assert_eq!(parse_size("10MB").unwrap(), 10 << 20);
        assert!(parse_size("10XB").is_err());
        assert_eq!(parse_ratio("1:10").unwrap(), (1, 10));
        assert_eq!(parse_ratio("0:1").unwrap(), (0, 1));
        assert!(parse_ratio("1:0:3").is_err());
        assert!(parse_ratio("0:0").is_err());
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("-5").is_err());
        assert!(parse_rate("nan").is_err());
        assert_eq!(parse_rate("max").unwrap(), RateArg::Max);
    }
}
