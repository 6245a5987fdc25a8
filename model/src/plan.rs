//! A run plan as the worker uses it, checked once at the wire boundary.

use crate::schedule::{Arrival, Profile, ProfileError, Segment};
use crate::shapes::{KeyDist, KeySpace, ValueSizes};
use crate::workload::{CmdDef, Workload, WorkloadError};
use crest_proto::pb;
use std::time::Duration;

/// How a shard waits for the next intended send time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pacer {
    /// Sleep in epoll with a nanosecond timeout and 1 µs timer slack; cheap at any rate.
    Sleep,
    /// Poll without sleeping: lowest schedule lag, one full core per shard.
    Spin,
}

/// A plan the worker cannot run; sent back to the coordinator as `RunFailed`.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A required field is absent.
    #[error("plan field `{0}` is missing")]
    Missing(&'static str),
    /// The rate profile is invalid.
    #[error("class {0}: rate profile: {1}")]
    Profile(String, ProfileError),
    /// The workload is invalid.
    #[error("class {0}: {1}")]
    Workload(String, WorkloadError),
    /// The plan names shards this worker does not have.
    #[error("plan has {got} shard entries but this worker runs {have} shards")]
    Shards {
        /// Entries in the plan.
        got: usize,
        /// Shards this worker runs.
        have: usize,
    },
    /// Pipeline depth 0.
    #[error("class {0}: pipeline must be ≥ 1")]
    Pipeline(String),
    /// No classes.
    #[error("the plan has no classes")]
    NoClasses,
}

/// One shard's part.
#[derive(Debug, Clone)]
pub struct ShardPart {
    /// Index within the worker.
    pub shard: u32,
    /// Index within the cluster.
    pub global_index: u32,
    /// Fraction of each class's rate.
    pub share: f64,
    /// RNG seed.
    pub seed: u64,
    /// Per class: (connections, closed-loop request budget; None: unbounded).
    pub classes: Vec<(u32, Option<u64>)>,
}

/// One class, checked.
#[derive(Debug, Clone)]
pub struct ClassSpec {
    /// Name.
    pub name: String,
    /// Cluster-wide rate profile (open loop).
    pub profile: Option<Profile>,
    /// Closed loop: stop after this (None: only the budget).
    pub closed_for: Option<Duration>,
    /// What to send.
    pub workload: Workload,
    /// Requests in flight per connection.
    pub pipeline: u32,
}

/// A checked run plan.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Run id.
    pub run_id: String,
    /// host:port.
    pub target: String,
    /// The classes.
    pub classes: Vec<ClassSpec>,
    /// Arrival process.
    pub arrival: Arrival,
    /// Pacer.
    pub pacer: Pacer,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Drain after the schedule ends.
    pub drain: Duration,
    /// Unmeasured lead-in.
    pub warmup: Duration,
    /// Length of one reported interval.
    pub interval: Duration,
    /// Shards in the whole cluster.
    pub total_shards: u32,
    /// This worker's shards.
    pub shards: Vec<ShardPart>,
    /// Per-shard backlog bound.
    pub backlog_limit: usize,
}

/// Converts a wire profile.
///
/// # Errors
/// [`ProfileError`] on a bad rate or an empty profile.
pub fn profile_from_pb(p: &pb::RateProfile) -> Result<Profile, ProfileError> {
    Profile::new(
        p.segments
            .iter()
            .map(|s| Segment {
                duration_ns: s.duration_ns,
                from_rps: s.from_rps,
                to_rps: s.to_rps,
            })
            .collect(),
    )
}

/// Converts a wire keyspace.
///
/// # Errors
/// [`WorkloadError`] on a bad distribution.
pub fn keys_from_pb(k: &pb::KeySpace) -> Result<KeySpace, WorkloadError> {
    let dist = match k.dist.as_str() {
        "" | "uniform" => KeyDist::Uniform,
        "zipf" => KeyDist::Zipf(k.param1),
        "sequential" => KeyDist::Sequential,
        "gaussian" => KeyDist::Gaussian {
            mean: k.param1,
            stddev: k.param2,
        },
        other => {
            return Err(WorkloadError::UnknownCommand(format!(
                "key distribution {other}"
            )));
        }
    };
    Ok(KeySpace::new(k.count, &k.prefix, dist)?)
}

/// Converts wire value sizes.
pub fn values_from_pb(v: &pb::ValueSizes) -> ValueSizes {
    match v.kind.as_str() {
        "range" if v.sizes.len() == 2 => ValueSizes::Range(v.sizes[0], v.sizes[1]),
        "weighted" => ValueSizes::Weighted(
            v.sizes
                .iter()
                .zip(v.weights.iter().chain(std::iter::repeat(&1)))
                .map(|(s, w)| (*s, *w))
                .collect(),
        ),
        _ => ValueSizes::Fixed(v.sizes.first().copied().unwrap_or(0)),
    }
}

impl ClassSpec {
    /// Checks one class.
    ///
    /// # Errors
    /// [`PlanError`] naming the class and the problem.
    pub fn from_pb(c: &pb::ClassPlan, seed: u64) -> Result<Self, PlanError> {
        let name = c.name.clone();
        let wl = |e| PlanError::Workload(name.clone(), e);
        let ttl = (c.ttl_s > 0).then_some(c.ttl_s);
        let mut commands = Vec::new();
        for m in &c.mix {
            commands.push((
                CmdDef::parse(&m.name, c.batch, ttl, c.range).map_err(wl)?,
                m.weight,
            ));
        }
        if c.batch == 0 {
            return Err(wl(WorkloadError::Batch));
        }
        let keys = keys_from_pb(c.keys.as_ref().ok_or(PlanError::Missing("keys"))?).map_err(wl)?;
        let values = values_from_pb(c.values.as_ref().ok_or(PlanError::Missing("values"))?);
        let workload = Workload::new(
            commands,
            keys,
            values,
            c.members,
            c.members_sequential,
            ttl,
            seed,
        )
        .map_err(wl)?;
        if c.pipeline == 0 {
            return Err(PlanError::Pipeline(name));
        }
        let profile = if c.closed_loop {
            None
        } else {
            let p = c.profile.as_ref().ok_or(PlanError::Missing("profile"))?;
            Some(profile_from_pb(p).map_err(|e| PlanError::Profile(name.clone(), e))?)
        };
        Ok(Self {
            name,
            profile,
            closed_for: (c.closed_loop && c.duration_ns > 0)
                .then(|| Duration::from_nanos(c.duration_ns)),
            workload,
            pipeline: c.pipeline,
        })
    }
}

impl Plan {
    /// Checks a plan received from the coordinator, for a worker with `have_shards` shards.
    ///
    /// # Errors
    /// [`PlanError`] naming what is missing or invalid.
    pub fn from_pb(p: pb::RunPlan, have_shards: usize) -> Result<Self, PlanError> {
        if p.classes.is_empty() {
            return Err(PlanError::NoClasses);
        }
        let seed = p.shards.first().map_or(0, |s| s.seed);
        let classes = p
            .classes
            .iter()
            .map(|c| ClassSpec::from_pb(c, seed))
            .collect::<Result<Vec<_>, _>>()?;
        if p.shards.len() > have_shards
            || p.shards
                .iter()
                .any(|s| s.shard as usize >= have_shards || s.classes.len() != classes.len())
        {
            return Err(PlanError::Shards {
                got: p.shards.len(),
                have: have_shards,
            });
        }
        Ok(Self {
            run_id: p.run_id,
            target: p.target,
            arrival: match pb::Arrival::try_from(p.arrival) {
                Ok(pb::Arrival::Poisson) => Arrival::Poisson,
                _ => Arrival::Uniform,
            },
            pacer: match pb::Pacer::try_from(p.pacer) {
                Ok(pb::Pacer::Spin) => Pacer::Spin,
                _ => Pacer::Sleep,
            },
            classes,
            timeout: Duration::from_nanos(p.timeout_ns.max(1_000_000)),
            drain: Duration::from_nanos(p.drain_ns),
            warmup: Duration::from_nanos(p.warmup_ns),
            interval: Duration::from_nanos(if p.interval_ns == 0 {
                1_000_000_000
            } else {
                p.interval_ns.max(1_000_000)
            }),
            total_shards: p.total_shards.max(1),
            shards: p
                .shards
                .into_iter()
                .map(|s| ShardPart {
                    shard: s.shard,
                    global_index: s.global_index,
                    share: s.share,
                    seed: s.seed,
                    classes: s
                        .classes
                        .iter()
                        .map(|c| (c.connections, c.bounded.then_some(c.requests)))
                        .collect(),
                })
                .collect(),
            backlog_limit: usize::try_from(p.backlog_limit)
                .unwrap_or(usize::MAX)
                .max(1),
        })
    }
}
