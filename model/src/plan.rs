//! A run plan as the worker uses it: the checked wire plan ([`RunPlan`]) with each class
//! built into a [`Workload`].

pub use crate::convert::{ClassPlan, KeySpec, Load, RunPlan, ShardClassPart, ShardPart, WireError};
use crate::schedule::Profile;
use crate::shapes::KeySpace;
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
    /// Sleep, and serve in one wake-up every request due within this many ns of the first
    /// (`--pacer sleep:200us`): fewer wake-ups per request; each request is still measured
    /// from its own intended time, so the lag histogram shows what the tolerance costs.
    SleepWithin(u64),
}

impl Pacer {
    /// The schedule lag p99 this pacer holds on a core of its own (the product's promise,
    /// what an interval is checked against): `spin` 20 µs, `sleep` 100 µs, `sleep:T` T +
    /// 100 µs (it sleeps past the first request due by up to T). An interval whose lag p99
    /// passes it is reported off pace, with the reason the workers measured.
    pub fn lag_bound_ns(self) -> u64 {
        match self {
            Pacer::Spin => 20_000,
            Pacer::Sleep => 100_000,
            Pacer::SleepWithin(t) => t.saturating_add(100_000),
        }
    }
}

/// Longest pacing tolerance: a millisecond-scale tolerance is what it is for; beyond this
/// it is a burst generator.
pub const MAX_TOLERANCE_NS: u64 = 10_000_000;

/// A plan the worker cannot run; sent back to the coordinator as `RunFailed` (bad plan).
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A field out of range, or missing.
    #[error("plan refused: {0}")]
    Wire(#[from] WireError),
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
}

/// One class, built.
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

/// A checked run plan with every class built: what a worker runs.
pub type Plan = RunPlan<ClassSpec>;

impl ClassSpec {
    /// Builds one checked class; `seed` seeds its workload.
    ///
    /// # Errors
    /// [`PlanError::Workload`] naming the class when a command or shape does not build.
    pub fn build(c: &ClassPlan, seed: u64) -> Result<Self, PlanError> {
        let wl = |e| PlanError::Workload(c.name.clone(), e);
        let commands = c
            .mix
            .iter()
            .map(|(name, weight)| Ok((CmdDef::parse(name, c.batch, c.ttl, c.range)?, *weight)))
            .collect::<Result<Vec<_>, WorkloadError>>()
            .map_err(wl)?;
        let keys = KeySpace::new(c.keys.count, &c.keys.prefix, c.keys.dist.clone())
            .map_err(|e| wl(e.into()))?;
        let workload = Workload::new(
            commands,
            keys,
            c.values.clone(),
            c.members,
            c.members_sequential,
            c.ttl,
            seed,
        )
        .map_err(wl)?;
        let (profile, closed_for) = match &c.load {
            Load::Open(p) => (Some(p.clone()), None),
            Load::Closed { until } => (None, *until),
        };
        Ok(Self {
            name: c.name.clone(),
            profile,
            closed_for,
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
    pub fn from_pb(p: &pb::RunPlan, have_shards: usize) -> Result<Self, PlanError> {
        Self::new(RunPlan::try_from(p)?, have_shards)
    }

    /// Builds a checked plan's workloads, for a worker with `have_shards` shards.
    ///
    /// # Errors
    /// [`PlanError`] when a class does not build or the plan names shards this worker lacks.
    pub fn new(p: RunPlan, have_shards: usize) -> Result<Self, PlanError> {
        if p.shards.len() > have_shards || p.shards.iter().any(|s| s.shard as usize >= have_shards)
        {
            return Err(PlanError::Shards {
                got: p.shards.len(),
                have: have_shards,
            });
        }
        let seed = p.shards.first().map_or(0, |s| s.seed);
        p.try_map_classes(|c| ClassSpec::build(c, seed))
    }
}
