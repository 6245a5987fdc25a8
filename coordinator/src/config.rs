//! `crest run` settings: parsed once from the command line, checked into a [`RunConfig`].
//!
//! Every check names the flag, quotes the bad value and says what would be right; the
//! binary prints that one line and exits with code 2.

use crest_worker::schedule::{Arrival, Profile};
use crest_worker::shard::Pacer;
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
    fn new(flag: &'static str, value: impl ToString, why: impl ToString) -> Self {
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
    if let Ok(secs) = t.parse::<f64>()
        && secs.is_finite()
        && secs >= 0.0
    {
        return Ok(Duration::from_secs_f64(secs));
    }
    humantime::parse_duration(t)
        .map_err(|_| format!("not a duration; expected e.g. 10s, 500ms, 2m (got {t:?})"))
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

/// Parses a positive request rate.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let r: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("expected requests per second, e.g. 20000 (got {s:?})"))?;
    if !r.is_finite() || r <= 0.0 {
        return Err(format!("rate must be > 0 requests per second (got {s:?})"));
    }
    Ok(r)
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

/// A checked run configuration.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Server address; None = start the built-in target.
    pub target: Option<String>,
    /// Cluster-wide rate profile.
    pub profile: Profile,
    /// Arrival process.
    pub arrival: Arrival,
    /// Pacer.
    pub pacer: Pacer,
    /// SET weight, GET weight.
    pub ratio: (u32, u32),
    /// Keyspace size.
    pub keys: u64,
    /// Key prefix.
    pub key_prefix: String,
    /// Value size in bytes.
    pub value_size: u64,
    /// Connections across the whole cluster.
    pub connections: u32,
    /// Requests in flight per connection.
    pub pipeline: u32,
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
    /// Backlog bound per shard.
    pub backlog_limit: u64,
}

/// Largest value a Redis server accepts.
pub const MAX_VALUE: u64 = crest_worker::workload::MAX_VALUE;

/// Checks the pieces the parsers cannot check alone.
///
/// # Errors
/// [`ConfigError`] for the first bad setting.
pub fn check_numbers(
    rate: f64,
    duration: Duration,
    keys: u64,
    value_size: u64,
    connections: u32,
    pipeline: u32,
) -> Result<Profile, ConfigError> {
    if duration.is_zero() {
        return Err(ConfigError::new(
            "--duration",
            "0s",
            "must be > 0, e.g. 10s",
        ));
    }
    if keys == 0 {
        return Err(ConfigError::new(
            "--keys",
            0,
            "the keyspace needs at least 1 key",
        ));
    }
    if value_size == 0 || value_size > MAX_VALUE {
        return Err(ConfigError::new(
            "--value-size",
            value_size,
            "must be 1 byte to 512 MB (Redis's largest value)",
        ));
    }
    if connections == 0 {
        return Err(ConfigError::new(
            "--connections",
            0,
            "need at least 1 connection",
        ));
    }
    if pipeline == 0 {
        return Err(ConfigError::new(
            "--pipeline",
            0,
            "need at least 1 request in flight per connection",
        ));
    }
    Profile::constant(rate, duration.as_nanos() as u64)
        .map_err(|e| ConfigError::new("--rate", rate, e))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    #[test]
    fn numbers_are_checked_with_the_flag_named() {
        let e = check_numbers(1.0, Duration::from_secs(1), 1, 0, 1, 1).unwrap_err();
        assert_eq!(e.flag, "--value-size");
        let e = check_numbers(1.0, Duration::ZERO, 1, 1, 1, 1).unwrap_err();
        assert_eq!(e.flag, "--duration");
        let e = check_numbers(1.0, Duration::from_secs(1), 1, 1, 0, 1).unwrap_err();
        assert_eq!(e.flag, "--connections");
        assert!(check_numbers(1.0, Duration::from_secs(1), 1, 1, 1, 1).is_ok());
    }
}
