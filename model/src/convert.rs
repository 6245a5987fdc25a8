//! Every conversion between Crest's domain types and the wire (`crest_proto::pb`), both
//! directions side by side, so a field cannot be written one way and read another.
//!
//! Domain → wire is `From` (it cannot fail). Wire → domain is `TryFrom`, and it is the one
//! place where a field sent by a peer is checked: numbers finite and in range, counts
//! capped ([`limits`]), clocks and indices never overflowing. A message that fails is
//! refused with a [`WireError`] naming the field, its value and what would be right; no
//! peer input can panic this process or make it allocate without bound.

use crate::hist::{self, HistError, Sparse, SparseDecoder};
use crate::plan::{ClassPlan, KeySpec, Load, Pacer, RunPlan, ShardClassPart, ShardPart};
use crate::schedule::{Arrival, Change, Profile, ProfileError, Segment, Steer};
use crate::shapes::{KeyDist, ShapeError, ValueSizes};
use crate::stats::{CmdDelta, CmdStats, CmdStatsOf, ErrorCounts, NodeStats, Redirects, Samples};
use crate::target::{ClusterMode, Login, MAX_DB, Resp, Secret, Session, Tls, Verify};
use crest_proto::pb;
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
    fn new(field: impl Into<String>, value: impl std::fmt::Debug, why: impl Into<String>) -> Self {
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
    fn under(mut self, parent: &str) -> Self {
        self.field = format!("{parent}.{}", self.field);
        self
    }
}

fn check_range<T: PartialOrd + Copy + std::fmt::Debug>(
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

fn check_len(field: &str, len: usize, max: usize) -> Result<(), WireError> {
    if len > max {
        return Err(WireError::new(
            field,
            format!("{len} entries"),
            format!("at most {max}"),
        ));
    }
    Ok(())
}

fn check_str(field: &str, s: &str, max: usize) -> Result<(), WireError> {
    if s.len() > max {
        return Err(WireError::new(
            field,
            format!("{} bytes", s.len()),
            format!("at most {max} bytes"),
        ));
    }
    Ok(())
}

fn duration(field: &str, ns: u64, lo: Duration, hi: Duration) -> Result<Duration, WireError> {
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

// ---------------------------------------------------------------------------------------
// Rate profiles.

impl From<&Profile> for pb::RateProfile {
    fn from(p: &Profile) -> Self {
        Self {
            segments: p
                .segments()
                .iter()
                .map(|s| pb::RateSegment {
                    duration_ns: s.duration_ns,
                    from_rps: s.from_rps,
                    to_rps: s.to_rps,
                })
                .collect(),
        }
    }
}

impl TryFrom<&pb::RateProfile> for Profile {
    type Error = WireError;

    fn try_from(p: &pb::RateProfile) -> Result<Self, WireError> {
        check_len("segments", p.segments.len(), limits::MAX_SEGMENTS)?;
        let mut total = 0u64;
        let mut segs = Vec::with_capacity(p.segments.len());
        for (i, s) in p.segments.iter().enumerate() {
            for (name, r) in [("from_rps", s.from_rps), ("to_rps", s.to_rps)] {
                if !(r.is_finite() && (0.0..=limits::MAX_RATE).contains(&r)) {
                    return Err(WireError::new(
                        format!("segments[{i}].{name}"),
                        r,
                        format!("a finite rate in 0..={:e} requests/s", limits::MAX_RATE),
                    ));
                }
            }
            total = total
                .checked_add(s.duration_ns)
                .filter(|t| Duration::from_nanos(*t) <= limits::MAX_RUN)
                .ok_or_else(|| {
                    WireError::new(
                        format!("segments[{i}].duration_ns"),
                        s.duration_ns,
                        format!("the profile may last at most {:?}", limits::MAX_RUN),
                    )
                })?;
            segs.push(Segment {
                duration_ns: s.duration_ns,
                from_rps: s.from_rps,
                to_rps: s.to_rps,
            });
        }
        Profile::new(segs).map_err(|e| match e {
            ProfileError::Empty | ProfileError::TooLong => {
                WireError::new("segments", "[]", e.to_string())
            }
            ProfileError::BadRate { index, rate } => {
                WireError::new(format!("segments[{index}]"), rate, e.to_string())
            }
        })
    }
}

// ---------------------------------------------------------------------------------------
// Key and value shapes.

impl From<&KeySpec> for pb::KeySpace {
    fn from(k: &KeySpec) -> Self {
        use pb::key_space::Dist;
        Self {
            count: k.count,
            prefix: k.prefix.clone(),
            dist: Some(match k.dist {
                KeyDist::Uniform => Dist::Uniform(pb::UniformKeys {}),
                KeyDist::Zipf(exponent) => Dist::Zipf(pb::ZipfKeys { exponent }),
                KeyDist::Sequential => Dist::Sequential(pb::SequentialKeys {}),
                KeyDist::Gaussian { mean, stddev } => {
                    Dist::Gaussian(pb::GaussianKeys { mean, stddev })
                }
            }),
        }
    }
}

impl TryFrom<&pb::KeySpace> for KeySpec {
    type Error = WireError;

    fn try_from(k: &pb::KeySpace) -> Result<Self, WireError> {
        use pb::key_space::Dist;
        check_str("prefix", &k.prefix, limits::MAX_NAME)?;
        if k.count == 0 {
            return Err(WireError::new("count", 0, ShapeError::NoKeys.to_string()));
        }
        let dist = match &k.dist {
            None | Some(Dist::Uniform(_)) => KeyDist::Uniform,
            Some(Dist::Sequential(_)) => KeyDist::Sequential,
            Some(Dist::Zipf(z)) => {
                if !(z.exponent.is_finite() && z.exponent > 0.0) {
                    return Err(WireError::new(
                        "zipf.exponent",
                        z.exponent,
                        "a finite number > 0 (0.99 is YCSB's default)",
                    ));
                }
                KeyDist::Zipf(z.exponent)
            }
            Some(Dist::Gaussian(g)) => {
                if !g.mean.is_finite() {
                    return Err(WireError::new(
                        "gaussian.mean",
                        g.mean,
                        "a finite key index",
                    ));
                }
                if !(g.stddev.is_finite() && g.stddev > 0.0) {
                    return Err(WireError::new(
                        "gaussian.stddev",
                        g.stddev,
                        "a finite number of keys > 0",
                    ));
                }
                KeyDist::Gaussian {
                    mean: g.mean,
                    stddev: g.stddev,
                }
            }
        };
        Ok(Self {
            count: k.count,
            prefix: k.prefix.clone(),
            dist,
        })
    }
}

impl From<&ValueSizes> for pb::ValueSizes {
    fn from(v: &ValueSizes) -> Self {
        use pb::value_sizes::Kind;
        Self {
            kind: Some(match v {
                ValueSizes::Fixed(bytes) => Kind::Fixed(pb::FixedSize { bytes: *bytes }),
                ValueSizes::Range(min, max) => Kind::Range(pb::SizeRange {
                    min: *min,
                    max: *max,
                }),
                ValueSizes::Weighted(list) => Kind::Weighted(pb::WeightedSizes {
                    sizes: list
                        .iter()
                        .map(|&(bytes, weight)| pb::WeightedSize { bytes, weight })
                        .collect(),
                }),
            }),
        }
    }
}

impl TryFrom<&pb::ValueSizes> for ValueSizes {
    type Error = WireError;

    fn try_from(v: &pb::ValueSizes) -> Result<Self, WireError> {
        use pb::value_sizes::Kind;
        let sizes = match &v.kind {
            None => return Err(WireError::new("kind", "none", "fixed, range or weighted")),
            Some(Kind::Fixed(f)) => ValueSizes::Fixed(f.bytes),
            Some(Kind::Range(r)) => ValueSizes::Range(r.min, r.max),
            Some(Kind::Weighted(w)) => {
                check_len("weighted.sizes", w.sizes.len(), limits::MAX_MIX)?;
                ValueSizes::Weighted(w.sizes.iter().map(|s| (s.bytes, s.weight)).collect())
            }
        };
        sizes
            .check()
            .map_err(|e| WireError::new("kind", sizes.to_string(), e.to_string()))?;
        Ok(sizes)
    }
}

// ---------------------------------------------------------------------------------------
// Plans.

impl From<&ClassPlan> for pb::ClassPlan {
    fn from(c: &ClassPlan) -> Self {
        let (profile, closed_loop, duration_ns) = match &c.load {
            Load::Open(p) => (Some(p.into()), false, 0),
            Load::Closed { until } => (
                None,
                true,
                until.map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
            ),
        };
        Self {
            name: c.name.clone(),
            profile,
            closed_loop,
            duration_ns,
            mix: c
                .mix
                .iter()
                .map(|(name, weight)| pb::Command {
                    name: name.clone(),
                    weight: *weight,
                })
                .collect(),
            keys: Some((&c.keys).into()),
            values: Some((&c.values).into()),
            pipeline: c.pipeline,
            ttl_s: c.ttl.unwrap_or(0),
            batch: c.batch,
            members: c.members,
            members_sequential: c.members_sequential,
            range: c.range,
        }
    }
}

impl TryFrom<&pb::ClassPlan> for ClassPlan {
    type Error = WireError;

    fn try_from(c: &pb::ClassPlan) -> Result<Self, WireError> {
        check_str("name", &c.name, limits::MAX_NAME)?;
        let load = if c.closed_loop {
            Load::Closed {
                until: match c.duration_ns {
                    0 => None,
                    ns => Some(duration(
                        "duration_ns",
                        ns,
                        Duration::ZERO,
                        limits::MAX_RUN,
                    )?),
                },
            }
        } else {
            let p = c
                .profile
                .as_ref()
                .ok_or_else(|| WireError::new("profile", "none", "an open-loop class needs one"))?;
            Load::Open(Profile::try_from(p).map_err(|e| e.under("profile"))?)
        };
        if c.mix.is_empty() {
            return Err(WireError::new("mix", "[]", "at least one command"));
        }
        check_len("mix", c.mix.len(), limits::MAX_MIX)?;
        for (i, m) in c.mix.iter().enumerate() {
            check_str(&format!("mix[{i}].name"), &m.name, limits::MAX_TEMPLATE)?;
        }
        let keys = KeySpec::try_from(
            c.keys
                .as_ref()
                .ok_or_else(|| WireError::new("keys", "none", "a keyspace"))?,
        )
        .map_err(|e| e.under("keys"))?;
        let values = ValueSizes::try_from(
            c.values
                .as_ref()
                .ok_or_else(|| WireError::new("values", "none", "value sizes"))?,
        )
        .map_err(|e| e.under("values"))?;
        Ok(Self {
            name: c.name.clone(),
            load,
            mix: c.mix.iter().map(|m| (m.name.clone(), m.weight)).collect(),
            keys,
            values,
            pipeline: check_range("pipeline", c.pipeline, 1, limits::MAX_PIPELINE)?,
            ttl: match c.ttl_s {
                0 => None,
                s => Some(check_range("ttl_s", s, 1, limits::MAX_TTL_S)?),
            },
            batch: check_range("batch", c.batch, 1, limits::MAX_BATCH)?,
            members: c.members,
            members_sequential: c.members_sequential,
            range: c.range,
        })
    }
}

impl From<&ShardPart> for pb::ShardPlan {
    fn from(s: &ShardPart) -> Self {
        Self {
            shard: s.shard,
            global_index: s.global_index,
            share: s.share,
            seed: s.seed,
            classes: s
                .classes
                .iter()
                .map(|c| pb::ShardClass {
                    connections: c.connections,
                    requests: c.budget.unwrap_or(0),
                    bounded: c.budget.is_some(),
                    checkpoints: c.checkpoints.clone(),
                })
                .collect(),
        }
    }
}

impl TryFrom<&pb::ShardPlan> for ShardPart {
    type Error = WireError;

    fn try_from(s: &pb::ShardPlan) -> Result<Self, WireError> {
        if !(s.share.is_finite() && (0.0..=1.0).contains(&s.share)) {
            return Err(WireError::new(
                "share",
                s.share,
                "a fraction of the rate in [0, 1]",
            ));
        }
        check_len("classes", s.classes.len(), limits::MAX_CLASSES)?;
        let classes = s
            .classes
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let budget = c.bounded.then_some(c.requests);
                check_len(
                    &format!("classes[{i}].checkpoints"),
                    c.checkpoints.len(),
                    limits::MAX_CHECKPOINTS,
                )?;
                let mut last = 0;
                for (k, &t) in c.checkpoints.iter().enumerate() {
                    let ok = budget.is_some_and(|b| t <= b) && t >= last;
                    if !ok {
                        return Err(WireError::new(
                            format!("classes[{i}].checkpoints[{k}]"),
                            t,
                            "ascending request counts within a bounded closed loop's budget",
                        ));
                    }
                    last = t;
                }
                Ok(ShardClassPart {
                    connections: check_range(
                        &format!("classes[{i}].connections"),
                        c.connections,
                        0,
                        limits::MAX_CONNECTIONS_PER_SHARD,
                    )?,
                    budget,
                    checkpoints: c.checkpoints.clone(),
                })
            })
            .collect::<Result<_, WireError>>()?;
        Ok(Self {
            shard: check_range("shard", s.shard, 0, limits::MAX_SHARDS_PER_WORKER - 1)?,
            global_index: check_range(
                "global_index",
                s.global_index,
                0,
                limits::MAX_TOTAL_SHARDS - 1,
            )?,
            share: s.share,
            seed: s.seed,
            classes,
        })
    }
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl From<&RunPlan> for pb::RunPlan {
    fn from(p: &RunPlan) -> Self {
        Self {
            run_id: p.run_id.clone(),
            target: p.target.clone(),
            classes: p.classes.iter().map(Into::into).collect(),
            arrival: match p.arrival {
                Arrival::Uniform => pb::Arrival::Uniform,
                Arrival::Poisson => pb::Arrival::Poisson,
            } as i32,
            pacer: match p.pacer {
                Pacer::Sleep | Pacer::SleepWithin(_) => pb::Pacer::Sleep,
                Pacer::Spin => pb::Pacer::Spin,
            } as i32,
            pacing_tolerance_ns: match p.pacer {
                Pacer::SleepWithin(t) => t,
                _ => 0,
            },
            timeout_ns: ns(p.timeout),
            drain_ns: ns(p.drain),
            warmup_ns: ns(p.warmup),
            interval_ns: ns(p.interval),
            total_shards: p.total_shards,
            shards: p.shards.iter().map(Into::into).collect(),
            backlog_limit: p.backlog_limit,
            session: (!p.session.is_plain()).then(|| (&p.session).into()),
            tls: p.tls.as_ref().map(Into::into),
            cluster: match p.cluster {
                ClusterMode::Auto => pb::ClusterMode::ClusterAuto,
                ClusterMode::Off => pb::ClusterMode::ClusterOff,
                ClusterMode::On => pb::ClusterMode::ClusterOn,
            } as i32,
        }
    }
}

impl From<&Tls> for pb::TargetTls {
    fn from(t: &Tls) -> Self {
        Self {
            ca_pem: t.ca_pem.clone().unwrap_or_default(),
            cert_pem: t.client.as_ref().map(|c| c.0.clone()).unwrap_or_default(),
            key_pem: t
                .client
                .as_ref()
                .map(|c| c.1.expose().as_bytes().to_vec())
                .unwrap_or_default(),
            server_name: t.server_name.clone(),
            verify: match t.verify {
                Verify::Full => pb::TlsVerify::Full,
                Verify::SkipHostname => pb::TlsVerify::SkipHostname,
                Verify::None => pb::TlsVerify::None,
            } as i32,
        }
    }
}

/// Largest PEM file a plan carries (a CA bundle, a certificate chain, a key): 1 MiB. The
/// system's whole bundle is about 200 KB.
pub const MAX_PEM: usize = 1024 * 1024;

impl TryFrom<&pb::TargetTls> for Tls {
    type Error = WireError;

    fn try_from(t: &pb::TargetTls) -> Result<Self, WireError> {
        for (field, pem) in [
            ("tls.ca_pem", &t.ca_pem),
            ("tls.cert_pem", &t.cert_pem),
            ("tls.key_pem", &t.key_pem),
        ] {
            if pem.len() > MAX_PEM {
                return Err(WireError::new(
                    field,
                    format!("{} bytes", pem.len()),
                    format!("at most {MAX_PEM} bytes"),
                ));
            }
        }
        check_str("tls.server_name", &t.server_name, limits::MAX_NAME)?;
        if t.server_name.is_empty() {
            return Err(WireError::new(
                "tls.server_name",
                "",
                "the name the certificate must be valid for",
            ));
        }
        let client = match (t.cert_pem.is_empty(), t.key_pem.is_empty()) {
            (true, true) => None,
            (false, false) => {
                let key = String::from_utf8(t.key_pem.clone()).map_err(|_| {
                    WireError::new("tls.key_pem", "(not UTF-8)", "a PEM private key")
                })?;
                Some((t.cert_pem.clone(), Secret::new(key)))
            }
            _ => {
                return Err(WireError::new(
                    "tls.key_pem",
                    format!(
                        "{} certificate bytes, {} key bytes",
                        t.cert_pem.len(),
                        t.key_pem.len()
                    ),
                    "a client certificate and its key together, or neither",
                ));
            }
        };
        Ok(Self {
            ca_pem: (!t.ca_pem.is_empty()).then(|| t.ca_pem.clone()),
            client,
            server_name: t.server_name.clone(),
            verify: match pb::TlsVerify::try_from(t.verify) {
                Ok(pb::TlsVerify::Full) => Verify::Full,
                Ok(pb::TlsVerify::SkipHostname) => Verify::SkipHostname,
                Ok(pb::TlsVerify::None) => Verify::None,
                Err(_) => {
                    return Err(WireError::new(
                        "tls.verify",
                        t.verify,
                        "full, skip-hostname or none",
                    ));
                }
            },
        })
    }
}

impl From<&Session> for pb::TargetSession {
    fn from(s: &Session) -> Self {
        Self {
            login: s.login.as_ref().map(|l| pb::Login {
                user: l.user.clone(),
                password: l.password.expose().to_string(),
            }),
            db: s.db,
            resp: s.resp.version(),
            tracking: s.tracking,
        }
    }
}

impl TryFrom<&pb::TargetSession> for Session {
    type Error = WireError;

    fn try_from(s: &pb::TargetSession) -> Result<Self, WireError> {
        let login = match &s.login {
            None => None,
            Some(l) => {
                check_str("session.login.user", &l.user, limits::MAX_NAME)?;
                if l.user.is_empty() {
                    return Err(WireError::new(
                        "session.login.user",
                        "",
                        "a user name (\"default\" for a password alone)",
                    ));
                }
                // The password's length only: its bytes are never quoted.
                check_str("session.login.password", &l.password, limits::MAX_NAME)?;
                Some(Login {
                    user: l.user.clone(),
                    password: Secret::new(l.password.clone()),
                })
            }
        };
        // 0: a peer that leaves the field out speaks RESP2.
        let resp = match s.resp {
            0 => Resp::Resp2,
            v => Resp::of(v).ok_or_else(|| WireError::new("session.resp", v, "2 or 3"))?,
        };
        if s.tracking && resp != Resp::Resp3 {
            return Err(WireError::new(
                "session.tracking",
                true,
                "tracking only with resp 3 (its invalidations are RESP3 pushes)",
            ));
        }
        Ok(Self {
            login,
            db: check_range("session.db", s.db, 0, MAX_DB)?,
            resp,
            tracking: s.tracking,
        })
    }
}

impl TryFrom<&pb::RunPlan> for RunPlan {
    type Error = WireError;

    fn try_from(p: &pb::RunPlan) -> Result<Self, WireError> {
        check_str("run_id", &p.run_id, limits::MAX_NAME)?;
        check_str("target", &p.target, limits::MAX_NAME)?;
        if p.classes.is_empty() {
            return Err(WireError::new("classes", "[]", "at least one class"));
        }
        check_len("classes", p.classes.len(), limits::MAX_CLASSES)?;
        let classes = p
            .classes
            .iter()
            .enumerate()
            .map(|(i, c)| ClassPlan::try_from(c).map_err(|e| e.under(&format!("classes[{i}]"))))
            .collect::<Result<Vec<_>, _>>()?;
        let total_shards =
            check_range("total_shards", p.total_shards, 1, limits::MAX_TOTAL_SHARDS)?;
        check_len(
            "shards",
            p.shards.len(),
            limits::MAX_SHARDS_PER_WORKER as usize,
        )?;
        let shards = p
            .shards
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let part = ShardPart::try_from(s).map_err(|e| e.under(&format!("shards[{i}]")))?;
                if part.classes.len() != classes.len() {
                    return Err(WireError::new(
                        format!("shards[{i}].classes"),
                        format!("{} entries", part.classes.len()),
                        format!("one per class ({})", classes.len()),
                    ));
                }
                if part.global_index >= total_shards {
                    return Err(WireError::new(
                        format!("shards[{i}].global_index"),
                        part.global_index,
                        format!("below total_shards ({total_shards})"),
                    ));
                }
                Ok(part)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            run_id: p.run_id.clone(),
            target: p.target.clone(),
            classes,
            arrival: match pb::Arrival::try_from(p.arrival) {
                Ok(pb::Arrival::Uniform) => Arrival::Uniform,
                Ok(pb::Arrival::Poisson) => Arrival::Poisson,
                Err(_) => return Err(WireError::new("arrival", p.arrival, "uniform or poisson")),
            },
            pacer: match (pb::Pacer::try_from(p.pacer), p.pacing_tolerance_ns) {
                (Ok(pb::Pacer::Sleep), 0) => Pacer::Sleep,
                (Ok(pb::Pacer::Sleep), t) => Pacer::SleepWithin(check_range(
                    "pacing_tolerance_ns",
                    t,
                    1,
                    crate::plan::MAX_TOLERANCE_NS,
                )?),
                (Ok(pb::Pacer::Spin), 0) => Pacer::Spin,
                (Ok(pb::Pacer::Spin), t) => {
                    return Err(WireError::new(
                        "pacing_tolerance_ns",
                        t,
                        "0 with the spin pacer",
                    ));
                }
                (Err(_), _) => return Err(WireError::new("pacer", p.pacer, "sleep or spin")),
            },
            timeout: duration(
                "timeout_ns",
                p.timeout_ns,
                limits::MIN_TIMEOUT,
                limits::MAX_TIMEOUT,
            )?,
            drain: duration("drain_ns", p.drain_ns, Duration::ZERO, limits::MAX_DRAIN)?,
            warmup: duration("warmup_ns", p.warmup_ns, Duration::ZERO, limits::MAX_WARMUP)?,
            interval: duration(
                "interval_ns",
                p.interval_ns,
                limits::MIN_INTERVAL,
                limits::MAX_INTERVAL,
            )?,
            total_shards,
            shards,
            backlog_limit: check_range("backlog_limit", p.backlog_limit, 1, limits::MAX_BACKLOG)?,
            session: p
                .session
                .as_ref()
                .map(Session::try_from)
                .transpose()?
                .unwrap_or_default(),
            tls: p.tls.as_ref().map(Tls::try_from).transpose()?,
            cluster: match pb::ClusterMode::try_from(p.cluster) {
                Ok(pb::ClusterMode::ClusterAuto) => ClusterMode::Auto,
                Ok(pb::ClusterMode::ClusterOff) => ClusterMode::Off,
                Ok(pb::ClusterMode::ClusterOn) => ClusterMode::On,
                Err(_) => return Err(WireError::new("cluster", p.cluster, "auto, off or on")),
            },
        })
    }
}

// ---------------------------------------------------------------------------------------
// Registration.

/// A worker's registration, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Registration {
    /// Protocol version the worker speaks.
    pub protocol_version: u32,
    /// Worker uuid.
    pub worker_id: String,
    /// Name shown in reports.
    pub name: String,
    /// Host the worker runs on.
    pub host: String,
    /// Pinned shards.
    pub shards: u32,
    /// Shared secret ("" for none).
    pub token: String,
    /// Crest version of the worker.
    pub crest_version: String,
    /// Cores the shards are pinned to.
    pub cpus: Vec<u32>,
}

impl From<&Registration> for pb::Register {
    fn from(r: &Registration) -> Self {
        Self {
            protocol_version: r.protocol_version,
            worker_id: r.worker_id.clone(),
            name: r.name.clone(),
            host: r.host.clone(),
            shards: r.shards,
            token: r.token.clone(),
            crest_version: r.crest_version.clone(),
            cpus: r.cpus.clone(),
        }
    }
}

impl TryFrom<&pb::Register> for Registration {
    type Error = WireError;

    /// Checks the fields the coordinator sizes things by. The protocol version and the
    /// token are the caller's to judge (their refusals say more than a range).
    fn try_from(r: &pb::Register) -> Result<Self, WireError> {
        for (field, s) in [
            ("worker_id", &r.worker_id),
            ("name", &r.name),
            ("host", &r.host),
            ("token", &r.token),
            ("crest_version", &r.crest_version),
        ] {
            check_str(field, s, limits::MAX_NAME)?;
        }
        check_len("cpus", r.cpus.len(), limits::MAX_CPUS)?;
        Ok(Self {
            protocol_version: r.protocol_version,
            worker_id: r.worker_id.clone(),
            name: r.name.clone(),
            host: r.host.clone(),
            shards: check_range("shards", r.shards, 1, limits::MAX_SHARDS_PER_WORKER)?,
            token: r.token.clone(),
            crest_version: r.crest_version.clone(),
            cpus: r.cpus.clone(),
        })
    }
}

// ---------------------------------------------------------------------------------------
// Failures.

/// Why a worker could not take or finish a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The target does not resolve or refuses every connection: the user's to fix.
    TargetUnreachable,
    /// The plan does not pass the worker's checks.
    BadPlan,
    /// The worker is in another run.
    Busy,
    /// The target answers but refuses the generator (a password is required, too many
    /// clients): the user's to fix.
    TargetRefused,
    /// The worker's machine cannot hold the plan (its open-file limit): the user's to fix.
    WorkerLimit,
    /// Anything else.
    Internal,
}

impl FailureKind {
    /// Whether the failure is the user's input (exit 2) rather than a run that broke.
    pub fn is_usage(self) -> bool {
        matches!(
            self,
            Self::TargetUnreachable | Self::TargetRefused | Self::WorkerLimit
        )
    }
}

impl From<FailureKind> for pb::FailureKind {
    fn from(k: FailureKind) -> Self {
        match k {
            FailureKind::TargetUnreachable => Self::FailureTargetUnreachable,
            FailureKind::BadPlan => Self::FailureBadPlan,
            FailureKind::Busy => Self::FailureBusy,
            FailureKind::TargetRefused => Self::FailureTargetRefused,
            FailureKind::WorkerLimit => Self::FailureWorkerLimit,
            FailureKind::Internal => Self::FailureInternal,
        }
    }
}

impl From<pb::FailureKind> for FailureKind {
    fn from(k: pb::FailureKind) -> Self {
        match k {
            pb::FailureKind::FailureTargetUnreachable => Self::TargetUnreachable,
            pb::FailureKind::FailureBadPlan => Self::BadPlan,
            pb::FailureKind::FailureBusy => Self::Busy,
            pb::FailureKind::FailureTargetRefused => Self::TargetRefused,
            pb::FailureKind::FailureWorkerLimit => Self::WorkerLimit,
            pb::FailureKind::FailureInternal => Self::Internal,
        }
    }
}

/// A `RunFailed` message.
pub fn run_failed(run_id: &str, kind: FailureKind, reason: String) -> pb::RunFailed {
    pb::RunFailed {
        run_id: run_id.to_string(),
        reason,
        kind: pb::FailureKind::from(kind) as i32,
    }
}

/// The kind of a received `RunFailed`; an unknown number (a newer peer) is `Internal`.
pub fn failure_kind(f: &pb::RunFailed) -> FailureKind {
    pb::FailureKind::try_from(f.kind).map_or(FailureKind::Internal, FailureKind::from)
}

// ---------------------------------------------------------------------------------------
// Runtime changes of rate.

impl From<&Change> for pb::Steer {
    fn from(c: &Change) -> Self {
        pb::Steer {
            run_id: String::new(),
            seq: c.seq,
            at_ns: c.at_ns,
            classes: c
                .classes
                .iter()
                .map(|s| pb::ClassSteer {
                    how: Some(match s {
                        Steer::Hold(r) => pb::class_steer::How::HoldRps(*r),
                        Steer::Follow => pb::class_steer::How::Follow(pb::FollowProfile {}),
                    }),
                })
                .collect(),
            end: c.end,
        }
    }
}

impl TryFrom<&pb::Steer> for Change {
    type Error = WireError;

    fn try_from(s: &pb::Steer) -> Result<Self, WireError> {
        check_len("classes", s.classes.len(), limits::MAX_CLASSES)?;
        let classes = s
            .classes
            .iter()
            .enumerate()
            .map(|(i, c)| match c.how {
                Some(pb::class_steer::How::HoldRps(r)) => {
                    check_range(&format!("classes[{i}].hold_rps"), r, 0.0, limits::MAX_RATE)?;
                    if !r.is_finite() {
                        return Err(WireError::new(
                            format!("classes[{i}].hold_rps"),
                            r,
                            "a finite rate",
                        ));
                    }
                    Ok(Steer::Hold(r))
                }
                Some(pb::class_steer::How::Follow(_)) | None => Ok(Steer::Follow),
            })
            .collect::<Result<_, _>>()?;
        Ok(Change {
            seq: s.seq,
            at_ns: s.at_ns,
            classes,
            end: s.end,
        })
    }
}

// ---------------------------------------------------------------------------------------
// Clocks and indices from a peer.

/// `a + b` for wall clocks in Unix ns; `None` past `i64`'s range (year 2262), never a panic.
pub fn add_ns(a: i64, b: i64) -> Option<i64> {
    a.checked_add(b)
}

/// The clock offset of a peer from one ping: `t2 - (t1 + t3) / 2`, and the round trip
/// `t3 - t1` (0 if the local clock stepped back). `None` when the peer's clock is so far
/// off that the arithmetic would overflow.
pub fn clock_offset(t1: i64, t2: i64, t3: i64) -> Option<(i64, u64)> {
    let rtt = u64::try_from(t3.checked_sub(t1)?.max(0)).ok()?;
    let mid = i64::try_from((i128::from(t1) + i128::from(t3)) / 2).ok()?;
    Some((t2.checked_sub(mid)?, rtt))
}

// ---------------------------------------------------------------------------------------
// Results.

/// Encodes one class's per-command results; `names[i]` names `cmds[i]`.
pub fn stats_to_pb(class: &str, cmds: &[CmdStats], names: &[String]) -> Vec<pb::CommandStats> {
    cmds.iter()
        .zip(names)
        .map(|(s, name)| cmd_to_pb(class, name, s))
        .collect()
}

/// Encodes one command's results, whatever its histograms are kept as.
pub fn cmd_to_pb<H: Samples>(class: &str, name: &str, s: &CmdStatsOf<H>) -> pb::CommandStats {
    let h = |h: &H| {
        Some(pb::Histogram {
            v2: h.encode_wire().into(),
        })
    };
    pb::CommandStats {
        command: name.to_string(),
        class: class.to_string(),
        scheduled: s.scheduled,
        sent: s.sent,
        completed: s.completed,
        misses: s.misses,
        backlogged: s.backlogged,
        moved: s.redirects.moved,
        asked: s.redirects.asked,
        retried: s.redirects.retried,
        errors: errors_to_pb(&s.errors),
        latency: h(&s.latency),
        service_time: h(&s.service_time),
        schedule_lag: h(&s.schedule_lag),
    }
}

/// Per-node results to the wire.
pub fn nodes_to_pb(nodes: &[NodeStats]) -> Vec<pb::NodeStats> {
    nodes
        .iter()
        .map(|n| pb::NodeStats {
            addr: n.addr.clone(),
            primary: n.primary,
            slots: n.slots,
            completed: n.completed,
            errors: n.errors,
            moved: n.redirects.moved,
            asked: n.redirects.asked,
            latency: Some(pb::Histogram {
                v2: hist::encode_wire(&n.latency).into(),
            }),
            connections: n.connections,
        })
        .collect()
}

/// Per-node results from a peer: at most [`crate::topology::MAX_NODES`], addresses cut
/// and made printable, slots at most 16,384.
///
/// # Errors
/// [`HistError`] when a latency histogram does not decode; a [`WireError`] for a slot
/// count over 16,384.
pub fn nodes_from_pb(nodes: &[pb::NodeStats]) -> Result<Vec<NodeStats>, WireError> {
    nodes
        .iter()
        .take(crate::topology::MAX_NODES)
        .map(|n| {
            let latency = match &n.latency {
                Some(h) => hist::decode(&h.v2)
                    .map_err(|e| WireError::new("nodes.latency", 0, e.to_string()))?,
                None => hist::new_hist(),
            };
            Ok(NodeStats {
                addr: crate::stats::clean_message(n.addr.as_bytes()),
                primary: n.primary,
                slots: check_range("nodes.slots", n.slots, 0, u32::from(crate::slot::SLOTS))?,
                completed: n.completed,
                errors: n.errors,
                redirects: Redirects {
                    moved: n.moved,
                    asked: n.asked,
                    retried: 0,
                },
                connections: n.connections,
                latency,
            })
        })
        .collect()
}

/// Error counts to the wire.
pub fn errors_to_pb(errors: &ErrorCounts) -> Vec<pb::ErrorCount> {
    errors
        .iter()
        .map(|(k, n)| pb::ErrorCount {
            kind: k.clone(),
            count: *n,
        })
        .collect()
}

/// Error counts from the wire.
pub fn errors_from_pb(errors: &[pb::ErrorCount]) -> ErrorCounts {
    let mut out = Vec::new();
    for e in errors {
        crate::stats::add_error(&mut out, &e.kind, e.count);
    }
    out
}

/// Most error messages read from one peer message; more are ignored (a worker sends at
/// most one per kind, and kinds are bounded).
pub const MAX_PEER_MESSAGES: usize = 4 * crate::stats::MAX_KINDS;

/// Error kinds' first messages to the wire.
pub fn messages_to_pb(messages: &[(String, String)]) -> Vec<pb::ErrorMessage> {
    messages
        .iter()
        .map(|(kind, message)| pb::ErrorMessage {
            kind: kind.clone(),
            message: message.clone(),
        })
        .collect()
}

/// Error kinds' first messages from a peer, cleaned and bounded again: at most
/// [`MAX_PEER_MESSAGES`], each kind and message cut and made printable as the engine does.
pub fn messages_from_pb(messages: &[pb::ErrorMessage]) -> Vec<(String, String)> {
    messages
        .iter()
        .take(MAX_PEER_MESSAGES)
        .map(|m| {
            (
                crate::stats::clean_kind(m.kind.as_bytes()),
                crate::stats::clean_message(m.message.as_bytes()),
            )
        })
        .collect()
}

/// Decodes one command's results of one interval with sparse histograms (the
/// coordinator's merging): (class, command, results), the names borrowed from the message
/// (a fleet's merge copied two strings per command per interval).
///
/// # Errors
/// [`HistError`] when a histogram does not decode.
pub fn delta_from_pb<'a>(
    c: &'a pb::CommandStats,
    de: &mut SparseDecoder,
) -> Result<(&'a str, &'a str, CmdDelta), HistError> {
    let mut h = |x: &Option<pb::Histogram>| match x {
        Some(h) => de.decode(&h.v2),
        None => Ok(Sparse::default()),
    };
    Ok((
        &c.class,
        &c.command,
        CmdDelta {
            scheduled: c.scheduled,
            sent: c.sent,
            completed: c.completed,
            misses: c.misses,
            backlogged: c.backlogged,
            redirects: Redirects {
                moved: c.moved,
                asked: c.asked,
                retried: c.retried,
            },
            errors: errors_from_pb(&c.errors),
            latency: h(&c.latency)?,
            service_time: h(&c.service_time)?,
            schedule_lag: h(&c.schedule_lag)?,
        },
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn arb_dist() -> impl Strategy<Value = KeyDist> {
        prop_oneof![
            Just(KeyDist::Uniform),
            Just(KeyDist::Sequential),
            (0.01f64..5.0).prop_map(KeyDist::Zipf),
            (0.0f64..1e6, 0.1f64..1e5)
                .prop_map(|(mean, stddev)| KeyDist::Gaussian { mean, stddev }),
        ]
    }

    fn arb_sizes() -> impl Strategy<Value = ValueSizes> {
        prop_oneof![
            (1u64..1 << 20).prop_map(ValueSizes::Fixed),
            (1u64..1000, 0u64..1000).prop_map(|(a, d)| ValueSizes::Range(a, a + d)),
            prop::collection::vec((1u64..1 << 20, 1u32..100), 1..5).prop_map(ValueSizes::Weighted),
        ]
    }

    fn arb_profile() -> impl Strategy<Value = Profile> {
        prop::collection::vec((1u64..10_000_000_000, 0.0f64..1e6, 0.0f64..1e6), 1..6).prop_map(
            |segs| {
                Profile::new(
                    segs.into_iter()
                        .map(|(duration_ns, from_rps, to_rps)| Segment {
                            duration_ns,
                            from_rps,
                            to_rps,
                        })
                        .collect(),
                )
                .unwrap()
            },
        )
    }

    fn arb_class() -> impl Strategy<Value = ClassPlan> {
        (
            "[a-z]{1,8}",
            prop_oneof![
                arb_profile().prop_map(Load::Open),
                prop::option::of((1u64..1 << 40).prop_map(Duration::from_nanos))
                    .prop_map(|until| Load::Closed { until }),
            ],
            prop::collection::vec(("[A-Z]{2,6}", 0u32..100), 1..4),
            (1u64..1 << 40, "[a-z:]{0,6}", arb_dist()),
            arb_sizes(),
            (1u32..1000, prop::option::of(1u64..100_000), 1u32..100),
            (any::<u64>(), any::<bool>(), any::<u32>()),
        )
            .prop_map(
                |(
                    name,
                    load,
                    mix,
                    (count, prefix, dist),
                    values,
                    (pipeline, ttl, batch),
                    (members, members_sequential, range),
                )| {
                    ClassPlan {
                        name,
                        load,
                        mix,
                        keys: KeySpec {
                            count,
                            prefix,
                            dist,
                        },
                        values,
                        pipeline,
                        ttl,
                        batch,
                        members,
                        members_sequential,
                        range,
                    }
                },
            )
    }

    fn arb_plan() -> impl Strategy<Value = RunPlan> {
        (
            prop::collection::vec(arb_class(), 1..3),
            (
                1u32..64,
                prop::collection::vec(
                    (
                        0.0f64..=1.0,
                        any::<u64>(),
                        0u32..100,
                        prop::option::of(any::<u64>()),
                    ),
                    1..4,
                ),
            ),
            (
                any::<bool>(),
                any::<bool>(),
                1u64..3_600_000,
                0u64..3_600_000,
                10u64..60_000,
                1u64..1_000_000,
                prop_oneof![Just(0u64), 1u64..=crate::plan::MAX_TOLERANCE_NS],
            ),
            (
                prop::option::of(("[a-z]{1,8}", "[ -~]{0,12}")),
                prop_oneof![Just(0u32), 0..=MAX_DB],
                prop_oneof![
                    Just((Resp::Resp2, false)),
                    Just((Resp::Resp3, false)),
                    Just((Resp::Resp3, true))
                ],
            ),
            prop::option::of((
                prop::option::of(prop::collection::vec(any::<u8>(), 1..64)),
                prop::option::of((prop::collection::vec(any::<u8>(), 1..64), "[ -~]{1,64}")),
                "[a-z0-9.]{1,20}",
                0..3u8,
            )),
        )
            .prop_map(
                |(
                    classes,
                    (extra, shards),
                    (poisson, spin, timeout_ms, drain_ms, interval_ms, backlog, tolerance),
                    (login, db, (resp, tracking)),
                    tls,
                )| {
                    let total_shards = shards.len() as u32 + extra;
                    let n = classes.len();
                    RunPlan {
                        run_id: "r".into(),
                        target: "127.0.0.1:6379".into(),
                        classes,
                        arrival: if poisson {
                            Arrival::Poisson
                        } else {
                            Arrival::Uniform
                        },
                        pacer: match (spin, tolerance) {
                            (true, _) => Pacer::Spin,
                            (false, 0) => Pacer::Sleep,
                            (false, t) => Pacer::SleepWithin(t),
                        },
                        timeout: Duration::from_millis(timeout_ms),
                        drain: Duration::from_millis(drain_ms),
                        warmup: Duration::from_millis(drain_ms / 2),
                        interval: Duration::from_millis(interval_ms),
                        total_shards,
                        shards: shards
                            .into_iter()
                            .enumerate()
                            .map(|(i, (share, seed, connections, budget))| ShardPart {
                                shard: i as u32,
                                global_index: i as u32,
                                share,
                                seed,
                                classes: vec![
                                    ShardClassPart {
                                        connections,
                                        budget,
                                        checkpoints: Vec::new(),
                                    };
                                    n
                                ],
                            })
                            .collect(),
                        backlog_limit: backlog,
                        session: Session {
                            login: login.map(|(user, password)| Login {
                                user,
                                password: Secret::new(password),
                            }),
                            db,
                            resp,
                            tracking,
                        },
                        tls: tls.map(|(ca_pem, client, server_name, verify)| Tls {
                            ca_pem,
                            client: client.map(|(cert, key)| (cert, Secret::new(key))),
                            server_name,
                            verify: [Verify::Full, Verify::SkipHostname, Verify::None]
                                [usize::from(verify)],
                        }),
                        cluster: [ClusterMode::Auto, ClusterMode::Off, ClusterMode::On]
                            [(db % 3) as usize],
                    }
                },
            )
    }

    proptest! {
        /// Domain → wire → domain is the identity for every plan the coordinator can build.
        #[test]
        fn plan_round_trips(plan in arb_plan()) {
            let wire = pb::RunPlan::from(&plan);
            prop_assert_eq!(RunPlan::try_from(&wire).unwrap(), plan);
        }

        /// Any finite share in [0, 1] passes; NaN, ±∞, negative or above 1 is refused by name.
        #[test]
        fn bad_shares_are_refused_by_name(plan in arb_plan(), bad in prop_oneof![
            Just(f64::NAN), Just(f64::INFINITY), Just(f64::NEG_INFINITY),
            -1e300f64..-1e-300, 1.000_001f64..1e300,
        ]) {
            let mut wire = pb::RunPlan::from(&plan);
            wire.shards[0].share = bad;
            let e = RunPlan::try_from(&wire).unwrap_err();
            prop_assert_eq!(e.field, "shards[0].share");
        }

        /// Rates that are not finite, negative or beyond the cap are refused by name.
        #[test]
        fn bad_rates_are_refused_by_name(bad in prop_oneof![
            Just(f64::NAN), Just(f64::INFINITY), -1e300f64..-1e-300, 1.1e9f64..1e300,
        ], at_end in any::<bool>()) {
            let wire = pb::RateProfile {
                segments: vec![pb::RateSegment {
                    duration_ns: 1_000_000_000,
                    from_rps: if at_end { 1.0 } else { bad },
                    to_rps: if at_end { bad } else { 1.0 },
                }],
            };
            let e = Profile::try_from(&wire).unwrap_err();
            prop_assert!(e.field.starts_with("segments[0]."), "{}", e);
        }

        /// A registration is refused for a shard count of 0 or beyond the cap, whatever the
        /// rest says, and accepted in between.
        #[test]
        fn registration_shards_are_capped(shards in any::<u32>()) {
            let r = pb::Register { shards, name: "w".into(), ..Default::default() };
            match Registration::try_from(&r) {
                Ok(ok) => prop_assert!((1..=limits::MAX_SHARDS_PER_WORKER).contains(&ok.shards)),
                Err(e) => {
                    prop_assert_eq!(e.field, "shards");
                    prop_assert!(shards == 0 || shards > limits::MAX_SHARDS_PER_WORKER);
                }
            }
        }

        /// Peer clocks anywhere in i64 give the exact offset and round trip (computed here
        /// in i128) or `None` when those do not fit, never a panic or a wrapped value.
        #[test]
        fn clock_offsets_are_exact_or_none(t1 in any::<i64>(), t2 in any::<i64>(), t3 in any::<i64>()) {
            let (t1w, t2w, t3w) = (i128::from(t1), i128::from(t2), i128::from(t3));
            let offset = t2w - (t1w + t3w) / 2;
            let rtt = (t3w - t1w).max(0);
            let fits = i64::try_from(t3w - t1w).is_ok() && i64::try_from(offset).is_ok();
            match clock_offset(t1, t2, t3) {
                Some((o, r)) => {
                    prop_assert_eq!(i128::from(o), offset);
                    prop_assert_eq!(i128::from(r), rtt);
                }
                None => prop_assert!(!fits),
            }
        }
    }

    #[test]
    fn huge_fields_name_themselves() {
        let plan = RunPlan {
            run_id: "r".into(),
            target: "t:1".into(),
            classes: vec![ClassPlan {
                name: "c".into(),
                load: Load::Closed { until: None },
                mix: vec![("GET".into(), 1)],
                keys: KeySpec {
                    count: 10,
                    prefix: "k:".into(),
                    dist: KeyDist::Uniform,
                },
                values: ValueSizes::Fixed(10),
                pipeline: 1,
                ttl: None,
                batch: 1,
                members: 0,
                members_sequential: false,
                range: 10,
            }],
            arrival: Arrival::Uniform,
            pacer: Pacer::Sleep,
            timeout: Duration::from_secs(1),
            drain: Duration::ZERO,
            warmup: Duration::ZERO,
            interval: Duration::from_secs(1),
            total_shards: 1,
            shards: vec![ShardPart {
                shard: 0,
                global_index: 0,
                share: 1.0,
                seed: 1,
                classes: vec![ShardClassPart {
                    connections: 1,
                    budget: None,
                    checkpoints: Vec::new(),
                }],
            }],
            backlog_limit: 10,
            session: Session::default(),
            tls: Some(Tls {
                ca_pem: None,
                client: None,
                server_name: "cache.example".into(),
                verify: Verify::Full,
            }),
            cluster: ClusterMode::On,
        };
        let good = pb::RunPlan::from(&plan);
        assert_eq!(RunPlan::try_from(&good).unwrap(), plan);
        type Edit = fn(&mut pb::RunPlan);
        let cases: &[(&str, Edit)] = &[
            ("total_shards", |p| p.total_shards = u32::MAX),
            ("cluster", |p| p.cluster = 7),
            ("total_shards", |p| p.total_shards = 0),
            ("timeout_ns", |p| p.timeout_ns = u64::MAX),
            ("timeout_ns", |p| p.timeout_ns = 0),
            ("interval_ns", |p| p.interval_ns = 1),
            ("backlog_limit", |p| p.backlog_limit = u64::MAX),
            ("classes[0].pipeline", |p| p.classes[0].pipeline = 0),
            ("classes[0].pipeline", |p| p.classes[0].pipeline = u32::MAX),
            ("classes[0].batch", |p| p.classes[0].batch = u32::MAX),
            ("classes[0].keys.count", |p| {
                p.classes[0].keys.as_mut().unwrap().count = 0
            }),
            ("classes[0].values.kind", |p| {
                p.classes[0].values = Some((&ValueSizes::Fixed(u64::MAX)).into())
            }),
            ("classes[0].values.kind", |p| {
                p.classes[0].values = Some(pb::ValueSizes { kind: None })
            }),
            ("shards[0].classes[0].connections", |p| {
                p.shards[0].classes[0].connections = u32::MAX
            }),
            ("shards[0].global_index", |p| p.shards[0].global_index = 5),
            ("shards[0].classes", |p| p.shards[0].classes.clear()),
            ("arrival", |p| p.arrival = 99),
            ("session.db", |p| {
                p.session = Some(pb::TargetSession {
                    login: None,
                    db: u32::MAX,
                    ..Default::default()
                })
            }),
            ("session.resp", |p| {
                p.session = Some(pb::TargetSession {
                    resp: 4,
                    ..Default::default()
                })
            }),
            ("session.tracking", |p| {
                p.session = Some(pb::TargetSession {
                    resp: 2,
                    tracking: true,
                    ..Default::default()
                })
            }),
            ("session.login.user", |p| {
                p.session = Some(pb::TargetSession {
                    login: Some(pb::Login {
                        user: String::new(),
                        password: "pw".into(),
                    }),
                    ..Default::default()
                })
            }),
            ("session.login.password", |p| {
                p.session = Some(pb::TargetSession {
                    login: Some(pb::Login {
                        user: "u".into(),
                        password: "x".repeat(limits::MAX_NAME + 1),
                    }),
                    ..Default::default()
                })
            }),
            ("classes[0].keys.zipf.exponent", |p| {
                p.classes[0].keys.as_mut().unwrap().dist =
                    Some(pb::key_space::Dist::Zipf(pb::ZipfKeys {
                        exponent: f64::NAN,
                    }))
            }),
            ("tls.server_name", |p| {
                p.tls.as_mut().unwrap().server_name.clear()
            }),
            ("tls.verify", |p| p.tls.as_mut().unwrap().verify = 7),
            ("tls.key_pem", |p| {
                p.tls.as_mut().unwrap().cert_pem = b"x".to_vec()
            }),
            ("tls.key_pem", |p| {
                let t = p.tls.as_mut().unwrap();
                t.cert_pem = b"c".to_vec();
                t.key_pem = vec![0xff];
            }),
            ("tls.ca_pem", |p| {
                p.tls.as_mut().unwrap().ca_pem = vec![b'a'; MAX_PEM + 1]
            }),
            ("classes[0].profile.segments[1].duration_ns", |p| {
                p.classes[0].closed_loop = false;
                let seg = pb::RateSegment {
                    duration_ns: 20 * 24 * 3600 * 1_000_000_000,
                    from_rps: 1.0,
                    to_rps: 1.0,
                };
                p.classes[0].profile = Some(pb::RateProfile {
                    segments: vec![seg, seg],
                });
            }),
        ];
        for (field, edit) in cases {
            let mut p = good.clone();
            edit(&mut p);
            let e = RunPlan::try_from(&p).unwrap_err();
            assert!(e.field.starts_with(field), "{field}: {e}");
            assert!(e.to_string().contains(field), "{e}");
        }
    }

    #[test]
    fn failure_kinds_round_trip_and_unknown_is_internal() {
        for k in [
            FailureKind::TargetUnreachable,
            FailureKind::BadPlan,
            FailureKind::Busy,
            FailureKind::Internal,
        ] {
            assert_eq!(failure_kind(&run_failed("r", k, "x".into())), k);
        }
        let newer = pb::RunFailed {
            kind: 77,
            ..Default::default()
        };
        assert_eq!(failure_kind(&newer), FailureKind::Internal);
    }

    #[test]
    fn clock_offset_is_the_midpoint_difference() {
        assert_eq!(clock_offset(100, 1_000, 300), Some((800, 200)));
        assert_eq!(clock_offset(300, 0, 100), Some((-200, 0)));
        assert_eq!(clock_offset(i64::MIN, i64::MAX, 0), None);
    }
}
