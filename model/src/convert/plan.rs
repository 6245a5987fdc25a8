//! Plans on the wire: rate profiles, key and value shapes, classes, shards, the target's
//! session and TLS, and the whole run plan.

use super::check::{WireError, check_len, check_range, check_str, duration, limits};
use crate::plan::{
    Churn, ClassPlan, KeySpec, Load, Pacer, RunPlan, Shape, ShardClassPart, ShardPart,
};
use crate::schedule::{Arrival, Profile, ProfileError, Segment};
use crate::shapes::{KeyDist, KeyLengths, ShapeError, ValueSizes};
use crate::target::{
    ClusterMode, Login, MAX_DB, MAX_RING, Protocol, ReadFrom, Resp, Secret, Session, Tls, Verify,
};
use crate::trace::{MAX_OPS, TraceOp};
use crest_proto::pb;
use std::time::Duration;

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
            dist: Some(match &k.dist {
                KeyDist::Uniform => Dist::Uniform(pb::UniformKeys {}),
                KeyDist::Zipf(exponent) => Dist::Zipf(pb::ZipfKeys {
                    exponent: *exponent,
                }),
                KeyDist::Sequential => Dist::Sequential(pb::SequentialKeys {}),
                KeyDist::Gaussian { mean, stddev } => Dist::Gaussian(pb::GaussianKeys {
                    mean: *mean,
                    stddev: *stddev,
                }),
                KeyDist::Table(t) => Dist::Table(pb::TableKeys {
                    keys: t.iter().map(|b| b.0).collect(),
                    requests: t.iter().map(|b| b.1).collect(),
                }),
            }),
            key_sizes: match &k.lengths {
                KeyLengths::Sizes(s) => Some(s.into()),
                _ => None,
            },
            key_sizes_etc: k.lengths == KeyLengths::Etc,
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
            Some(Dist::Table(t)) => {
                check_len("table.keys", t.keys.len(), crate::shapes::MAX_BUCKETS)?;
                if t.keys.len() != t.requests.len() {
                    return Err(WireError::new(
                        "table.requests",
                        format!("{} entries", t.requests.len()),
                        format!("must have one per bucket ({})", t.keys.len()),
                    ));
                }
                let table: Vec<(f64, f64)> = t
                    .keys
                    .iter()
                    .copied()
                    .zip(t.requests.iter().copied())
                    .collect();
                crate::shapes::KeySpace::new(k.count.max(1), "", KeyDist::Table(table.clone()))
                    .map_err(|e| WireError::new("table", table.len(), e.to_string()))?;
                KeyDist::Table(table)
            }
        };
        let lengths = match (&k.key_sizes, k.key_sizes_etc) {
            (None, false) => KeyLengths::Natural,
            (None, true) => KeyLengths::Etc,
            (Some(s), false) => {
                KeyLengths::Sizes(ValueSizes::try_from(s).map_err(|e| e.under("key_sizes"))?)
            }
            (Some(_), true) => {
                return Err(WireError::new(
                    "key_sizes_etc",
                    true,
                    "ETC's key sizes or key_sizes, not both",
                ));
            }
        };
        lengths
            .check()
            .map_err(|e| WireError::new("key_sizes", lengths.name(), e.to_string()))?;
        Ok(Self {
            count: k.count,
            prefix: k.prefix.clone(),
            dist,
            lengths,
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
                ValueSizes::Etc(max) => Kind::Etc(pb::EtcSizes { max: *max }),
            }),
        }
    }
}

impl TryFrom<&pb::ValueSizes> for ValueSizes {
    type Error = WireError;

    fn try_from(v: &pb::ValueSizes) -> Result<Self, WireError> {
        use pb::value_sizes::Kind;
        let sizes = match &v.kind {
            None => {
                return Err(WireError::new(
                    "kind",
                    "none",
                    "fixed, range, weighted or etc",
                ));
            }
            Some(Kind::Etc(e)) => ValueSizes::Etc(e.max),
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
            Load::Trace { .. } => (None, false, 0),
        };
        let trace_ops = match &c.load {
            Load::Trace { ops } => ops.iter().map(TraceOp::spelling).collect(),
            _ => Vec::new(),
        };
        let shape = &c.shape;
        Self {
            name: c.name.clone(),
            profile,
            closed_loop,
            duration_ns,
            mix: shape
                .mix
                .iter()
                .map(|(name, weight)| pb::Command {
                    name: name.clone(),
                    weight: *weight,
                })
                .collect(),
            keys: Some((&shape.keys).into()),
            values: Some((&shape.values).into()),
            pipeline: shape.pipeline,
            ttl_s: match shape.ttl {
                Some(crate::shapes::Ttl::Fixed(s)) => s,
                _ => 0,
            },
            ttl_table: match &shape.ttl {
                Some(crate::shapes::Ttl::Table(l)) => l
                    .iter()
                    .map(|&(seconds, weight)| pb::TtlWeight { seconds, weight })
                    .collect(),
                _ => Vec::new(),
            },
            batch: shape.batch,
            members: shape.members,
            members_sequential: shape.members_sequential,
            range: shape.range,
            trace_ops,
            value_content: match shape.content {
                crate::shapes::Content::Fixed => String::new(),
                c => c.to_string(),
            },
        }
    }
}

impl TryFrom<&pb::ClassPlan> for ClassPlan {
    type Error = WireError;

    fn try_from(c: &pb::ClassPlan) -> Result<Self, WireError> {
        check_str("name", &c.name, limits::MAX_NAME)?;
        let load = if !c.trace_ops.is_empty() {
            check_len("trace_ops", c.trace_ops.len(), MAX_OPS)?;
            if c.trace_ops.len() != c.mix.len() {
                return Err(WireError::new(
                    "trace_ops",
                    format!("{} entries", c.trace_ops.len()),
                    format!("must name the mix's {} commands, in order", c.mix.len()),
                ));
            }
            let ops = c
                .trace_ops
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    TraceOp::parse(s).ok_or_else(|| {
                        WireError::new(
                            format!("trace_ops[{i}]"),
                            s,
                            "must be a trace op (get, set, add, …) or cmd:NAME",
                        )
                    })
                })
                .collect::<Result<_, _>>()?;
            Load::Trace { ops }
        } else if c.closed_loop {
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
            shape: Shape {
                mix: c.mix.iter().map(|m| (m.name.clone(), m.weight)).collect(),
                keys,
                values,
                pipeline: check_range("pipeline", c.pipeline, 1, limits::MAX_PIPELINE)?,
                ttl: ttl_of(c)?,
                batch: check_range("batch", c.batch, 1, limits::MAX_BATCH)?,
                members: c.members,
                members_sequential: c.members_sequential,
                range: c.range,
                content: match c.value_content.as_str() {
                    "" => crate::shapes::Content::Fixed,
                    s => {
                        check_str("value_content", s, 64)?;
                        crate::shapes::Content::parse(s)
                            .map_err(|why| WireError::new("value_content", s, why))?
                    }
                },
            },
        })
    }
}

/// A class's TTL: `ttl_s`, or the table (never both).
fn ttl_of(c: &pb::ClassPlan) -> Result<Option<crate::shapes::Ttl>, WireError> {
    use crate::shapes::{MAX_TTL_TABLE, Ttl};
    match (c.ttl_s, c.ttl_table.is_empty()) {
        (0, true) => Ok(None),
        (s, true) => Ok(Some(Ttl::Fixed(check_range(
            "ttl_s",
            s,
            1,
            limits::MAX_TTL_S,
        )?))),
        (0, false) => {
            check_len("ttl_table", c.ttl_table.len(), MAX_TTL_TABLE)?;
            let t = Ttl::Table(c.ttl_table.iter().map(|w| (w.seconds, w.weight)).collect());
            t.check(limits::MAX_TTL_S)
                .map_err(|e| WireError::new("ttl_table", t.to_string(), e.to_string()))?;
            Ok(Some(t))
        }
        (s, false) => Err(WireError::new(
            "ttl_s",
            s,
            "0 when a ttl_table is given (one or the other)",
        )),
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
                Arrival::Etc => pb::Arrival::Etc,
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
            memcache: p.protocol.is_memcache().then(|| pb::Memcache {
                meta: p.protocol == Protocol::McMeta,
                ring: p.ring.clone(),
            }),
            churn: p.churn.is_on().then(|| pb::ConnChurn {
                lifetime_ns: p.churn.lifetime.map_or(0, |l| ns(l.0)),
                jitter_ns: p.churn.lifetime.map_or(0, |l| ns(l.1)),
                rate: p.churn.rate.unwrap_or(0.0),
            }),
            read_from: match p.read_from {
                ReadFrom::Primary => pb::ReadFrom::ReadPrimary,
                ReadFrom::Replicas => pb::ReadFrom::ReadReplicas,
                ReadFrom::PreferReplicas => pb::ReadFrom::ReadPreferReplicas,
                ReadFrom::Any => pb::ReadFrom::ReadAny,
            } as i32,
            replicas: p.replicas.clone(),
            check_staleness: p.check_staleness,
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
            readonly: false,
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
                // A replayed trace's part falls to every shard (by key hash), and a shard
                // sends each key on one of its connections (a lane per connection), so
                // every shard needs one.
                for (k, (c, pc)) in classes.iter().zip(&part.classes).enumerate() {
                    if matches!(c.load, Load::Trace { .. }) && pc.connections == 0 {
                        return Err(WireError::new(
                            format!("shards[{i}].classes[{k}].connections"),
                            pc.connections,
                            "at least 1 for a replayed trace (the shard's part of it falls to it by key hash)",
                        ));
                    }
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
                Ok(pb::Arrival::Etc) => Arrival::Etc,
                Err(_) => {
                    return Err(WireError::new(
                        "arrival",
                        p.arrival,
                        "uniform, poisson or etc",
                    ));
                }
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
            protocol: match &p.memcache {
                None => Protocol::Resp,
                Some(m) if m.meta => Protocol::McMeta,
                Some(_) => Protocol::McText,
            },
            ring: match &p.memcache {
                None => Vec::new(),
                Some(m) => ring(m, &p.target)?,
            },
            churn: p.churn.as_ref().map(churn).transpose()?.unwrap_or_default(),
            read_from: match pb::ReadFrom::try_from(p.read_from) {
                Ok(pb::ReadFrom::ReadPrimary) => ReadFrom::Primary,
                Ok(pb::ReadFrom::ReadReplicas) => ReadFrom::Replicas,
                Ok(pb::ReadFrom::ReadPreferReplicas) => ReadFrom::PreferReplicas,
                Ok(pb::ReadFrom::ReadAny) => ReadFrom::Any,
                Err(_) => {
                    return Err(WireError::new(
                        "read_from",
                        p.read_from,
                        "primary, replicas, prefer-replicas or any",
                    ));
                }
            },
            replicas: replicas(p)?,
            check_staleness: p.check_staleness,
        })
    }
}

/// A standalone primary's replicas off the wire: at most [`MAX_RING`], each a short
/// printable `host:port`, and not for memcached (with reads on the primary, they are the
/// nodes a promotion may move the writes to).
fn replicas(p: &pb::RunPlan) -> Result<Vec<String>, WireError> {
    if p.replicas.is_empty() {
        return Ok(Vec::new());
    }
    if p.memcache.is_some() {
        return Err(WireError::new(
            "replicas",
            p.replicas.len(),
            "none for memcached",
        ));
    }
    if p.replicas.len() > MAX_RING {
        return Err(WireError::new(
            "replicas",
            p.replicas.len(),
            format!("at most {MAX_RING}"),
        ));
    }
    for r in &p.replicas {
        let ok = r.len() <= 300
            && r.bytes().all(|b| b.is_ascii_graphic())
            && r.rsplit_once(':')
                .is_some_and(|(h, port)| !h.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0));
        if !ok {
            return Err(WireError::new("replicas", r, "host:port"));
        }
    }
    Ok(p.replicas.clone())
}

/// Connection churn off the wire: a lifetime of at least [`limits::MIN_CONN_LIFETIME`]
/// with a jitter below it, or a rate in (0, [`limits::MAX_CONN_RATE`]], not both.
fn churn(c: &pb::ConnChurn) -> Result<Churn, WireError> {
    let lifetime = match c.lifetime_ns {
        0 if c.jitter_ns > 0 => {
            return Err(WireError::new(
                "churn.jitter_ns",
                c.jitter_ns,
                "0 without a lifetime",
            ));
        }
        0 => None,
        l => {
            let life = duration(
                "churn.lifetime_ns",
                l,
                limits::MIN_CONN_LIFETIME,
                limits::MAX_RUN,
            )?;
            if c.jitter_ns >= l {
                return Err(WireError::new(
                    "churn.jitter_ns",
                    c.jitter_ns,
                    "less than the lifetime",
                ));
            }
            Some((life, Duration::from_nanos(c.jitter_ns)))
        }
    };
    let rate = match c.rate {
        0.0 => None,
        r if r.is_finite() && r > 0.0 && r <= limits::MAX_CONN_RATE && lifetime.is_none() => {
            Some(r)
        }
        r => {
            return Err(WireError::new(
                "churn.rate",
                r,
                format!(
                    "0 < rate ≤ {}, and no lifetime with it",
                    limits::MAX_CONN_RATE
                ),
            ));
        }
    };
    Ok(Churn { lifetime, rate })
}

/// A memcached plan's servers: 1 to [`MAX_RING`] names, each once, the target first.
fn ring(m: &pb::Memcache, target: &str) -> Result<Vec<String>, WireError> {
    check_len("memcache.ring", m.ring.len(), MAX_RING)?;
    if m.ring.first().map(String::as_str) != Some(target) {
        return Err(WireError::new(
            "memcache.ring",
            m.ring.len(),
            "the target's address first",
        ));
    }
    for (i, s) in m.ring.iter().enumerate() {
        check_str(&format!("memcache.ring[{i}]"), s, limits::MAX_NAME)?;
        if m.ring[..i].contains(s) {
            return Err(WireError::new("memcache.ring", s, "each server once"));
        }
    }
    Ok(m.ring.clone())
}
