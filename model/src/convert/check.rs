//! What every wire → domain conversion checks with: the caps ([`limits`]), the error
//! that names a field ([`WireError`]) and the range, length and duration checks.

use std::time::Duration;

/// Caps on what a peer may ask for. Each is far above any real run and far below what
/// would exhaust a machine; a value beyond one is a bug or an attack, never a workload.
pub mod limits {
    use std::time::Duration;

    /// Pinned shards one worker may announce (one per core; the largest machines have 512).
    pub const MAX_SHARDS_PER_WORKER: u32 = 1024;
    /// Shards in one run, over every worker.
    pub const MAX_TOTAL_SHARDS: u32 = 65_536;
    /// Classes in one plan.
    pub const MAX_CLASSES: usize = 1024;
    /// Checkpoints of one run (`--checkpoint-every`): each is a pause, a drain and a sample.
    pub const MAX_CHECKPOINTS: usize = 10_000;
    /// Commands in one class's mix: the engine indexes them with a `u16`.
    pub const MAX_MIX: usize = u16::MAX as usize;
    /// Segments of rate profiles: the coordinator counts every class's together, a worker
    /// each profile of a plan it is sent. A day at 1 s steps fits, and the plan stays well
    /// inside one gRPC message (~25 bytes a segment, 4 MB a message).
    pub const MAX_SEGMENTS: usize = 100_000;
    /// Highest rate of one class, requests per second, cluster-wide.
    pub const MAX_RATE: f64 = 1e9;
    /// Longest profile or closed-loop run: 30 days.
    pub const MAX_RUN: Duration = Duration::from_secs(30 * 24 * 3600);
    /// Requests in flight per connection.
    pub const MAX_PIPELINE: u32 = 65_536;
    /// Keys or members per batched command (MSET, ZADD, ...): the sorted-set study adds
    /// 250,000 members per ZADD; Redis takes up to 2³⁰ arguments per command.
    pub const MAX_BATCH: u32 = 1 << 24;
    /// Connections one shard may open for one class.
    pub const MAX_CONNECTIONS_PER_SHARD: u32 = 65_536;
    /// Requests per second one shard can schedule: 200 ns per request, beyond what any
    /// shard sends (a plan above it would only measure the generator falling behind).
    pub const MAX_RATE_PER_SHARD: f64 = 5e6;
    /// Requests allowed to wait for a free connection, per shard and class.
    pub const MAX_BACKLOG: u64 = 100_000_000;
    /// Shortest and longest per-request timeout.
    pub const MIN_TIMEOUT: Duration = Duration::from_millis(1);
    /// Longest per-request timeout.
    pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
    /// Longest drain and warm-up.
    pub const MAX_DRAIN: Duration = Duration::from_secs(3600);
    /// Longest warm-up.
    pub const MAX_WARMUP: Duration = Duration::from_secs(24 * 3600);
    /// Shortest reported interval.
    pub const MIN_INTERVAL: Duration = Duration::from_millis(10);
    /// Longest reported interval.
    pub const MAX_INTERVAL: Duration = Duration::from_secs(60);
    /// Longest TTL in seconds (Redis accepts up to i64 ms; a century is plenty).
    pub const MAX_TTL_S: u64 = 100 * 365 * 24 * 3600;
    /// Longest name, prefix or address string, in bytes.
    pub const MAX_NAME: usize = 1024;
    /// Longest command template in a mix, in bytes.
    pub const MAX_TEMPLATE: usize = 64 * 1024;
    /// Cores one worker may list.
    pub const MAX_CPUS: usize = 4096;
    /// Shortest connection lifetime (`--conn-lifetime`): a connection must live long
    /// enough to carry requests between its setups.
    pub const MIN_CONN_LIFETIME: Duration = Duration::from_millis(10);
    /// Most connections retired per second across the fleet (`--conn-rate`).
    pub const MAX_CONN_RATE: f64 = 1e6;
}

/// A wire message that is refused: which field, what it held, what would be right.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("field `{field}` = {value}: {why}")]
pub struct WireError {
    /// Path of the field, e.g. `classes[0].pipeline`.
    pub field: String,
    /// The offending value, quoted.
    pub value: String,
    /// What would be right.
    pub why: String,
}

impl WireError {
    pub(crate) fn new(
        field: impl Into<String>,
        value: impl std::fmt::Debug,
        why: impl Into<String>,
    ) -> Self {
        let mut value = format!("{value:?}");
        if value.len() > 80 {
            let cut = (0..=80)
                .rev()
                .find(|&i| value.is_char_boundary(i))
                .unwrap_or(0);
            value.truncate(cut);
            value.push('…');
        }
        Self {
            field: field.into(),
            value,
            why: why.into(),
        }
    }

    /// The same error under a parent path: `keys` → `classes[2].keys`.
    pub(crate) fn under(mut self, parent: &str) -> Self {
        self.field = format!("{parent}.{}", self.field);
        self
    }
}

pub(super) fn check_range<T: PartialOrd + Copy + std::fmt::Debug>(
    field: &str,
    v: T,
    lo: T,
    hi: T,
) -> Result<T, WireError> {
    if v < lo || v > hi {
        return Err(WireError::new(
            field,
            v,
            format!("must be in {lo:?}..={hi:?}"),
        ));
    }
    Ok(v)
}

pub(super) fn check_len(field: &str, len: usize, max: usize) -> Result<(), WireError> {
    if len > max {
        return Err(WireError::new(
            field,
            format!("{len} entries"),
            format!("at most {max}"),
        ));
    }
    Ok(())
}

pub(super) fn check_str(field: &str, s: &str, max: usize) -> Result<(), WireError> {
    if s.len() > max {
        return Err(WireError::new(
            field,
            format!("{} bytes", s.len()),
            format!("at most {max} bytes"),
        ));
    }
    Ok(())
}

pub(super) fn duration(
    field: &str,
    ns: u64,
    lo: Duration,
    hi: Duration,
) -> Result<Duration, WireError> {
    let d = Duration::from_nanos(ns);
    if d < lo || d > hi {
        return Err(WireError::new(
            field,
            d,
            format!("must be in {lo:?}..={hi:?}"),
        ));
    }
    Ok(d)
}
