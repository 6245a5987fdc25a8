//! A run plan as the worker uses it, checked once at the wire boundary.

use crate::schedule::{Arrival, Profile, ProfileError, Segment};
use crate::shard::Pacer;
use crate::workload::{Command, Workload, WorkloadError};
use crest_proto::pb;
use std::time::Duration;

/// A plan the worker cannot run; sent back to the coordinator as `RunFailed`.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A required field is absent.
    #[error("plan field `{0}` is missing")]
    Missing(&'static str),
    /// The rate profile is invalid.
    #[error("rate profile: {0}")]
    Profile(#[from] ProfileError),
    /// The workload is invalid.
    #[error("workload: {0}")]
    Workload(#[from] WorkloadError),
    /// The plan names shards this worker does not have.
    #[error("plan has {got} shard entries but this worker runs {have} shards")]
    Shards {
        /// Entries in the plan.
        got: usize,
        /// Shards this worker runs.
        have: usize,
    },
    /// Pipeline depth 0.
    #[error("pipeline must be ≥ 1")]
    Pipeline,
}

/// One shard's part.
#[derive(Debug, Clone)]
pub struct ShardPart {
    /// Index within the worker.
    pub shard: u32,
    /// Index within the cluster.
    pub global_index: u32,
    /// Fraction of the cluster's rate.
    pub share: f64,
    /// Connections this shard opens.
    pub connections: u32,
    /// RNG seed.
    pub seed: u64,
}

/// A checked run plan.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Run id.
    pub run_id: String,
    /// host:port.
    pub target: String,
    /// Cluster-wide rate profile.
    pub profile: Profile,
    /// Arrival process.
    pub arrival: Arrival,
    /// Pacer.
    pub pacer: Pacer,
    /// What to send.
    pub workload: Workload,
    /// Requests in flight per connection.
    pub pipeline: u32,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Drain after the schedule ends.
    pub drain: Duration,
    /// Shards in the whole cluster.
    pub total_shards: u32,
    /// This worker's shards.
    pub shards: Vec<ShardPart>,
    /// Per-shard backlog bound.
    pub backlog_limit: usize,
}

impl Plan {
    /// Checks a plan received from the coordinator, for a worker with `have_shards` shards.
    ///
    /// # Errors
    /// [`PlanError`] naming what is missing or invalid.
    pub fn from_pb(p: pb::RunPlan, have_shards: usize) -> Result<Self, PlanError> {
        let profile = p.profile.ok_or(PlanError::Missing("profile"))?;
        let profile = Profile::new(
            profile
                .segments
                .iter()
                .map(|s| Segment {
                    duration_ns: s.duration_ns,
                    from_rps: s.from_rps,
                    to_rps: s.to_rps,
                })
                .collect(),
        )?;
        let w = p.workload.ok_or(PlanError::Missing("workload"))?;
        let mut commands = Vec::new();
        for c in &w.mix {
            let cmd = Command::parse(&c.name)
                .ok_or_else(|| WorkloadError::UnknownCommand(c.name.clone()))?;
            commands.push((cmd, c.weight));
        }
        let seed = p.shards.first().map_or(0, |s| s.seed);
        let workload = Workload::new(commands, w.keys, &w.key_prefix, w.value_size, seed)?;
        if p.shards.len() > have_shards || p.shards.iter().any(|s| s.shard as usize >= have_shards)
        {
            return Err(PlanError::Shards {
                got: p.shards.len(),
                have: have_shards,
            });
        }
        if p.pipeline == 0 {
            return Err(PlanError::Pipeline);
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
            profile,
            workload,
            pipeline: p.pipeline,
            timeout: Duration::from_nanos(p.timeout_ns.max(1_000_000)),
            drain: Duration::from_nanos(p.drain_ns),
            total_shards: p.total_shards.max(1),
            shards: p
                .shards
                .into_iter()
                .map(|s| ShardPart {
                    shard: s.shard,
                    global_index: s.global_index,
                    share: s.share,
                    connections: s.connections,
                    seed: s.seed,
                })
                .collect(),
            backlog_limit: usize::try_from(p.backlog_limit)
                .unwrap_or(usize::MAX)
                .max(1),
        })
    }
}
