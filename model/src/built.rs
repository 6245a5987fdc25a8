//! A run plan as the worker runs it: the checked wire plan ([`RunPlan`]) with each class
//! built into a [`Workload`].

use crate::convert::WireError;
use crate::plan::{ClassPlan, Load, RunPlan};
use crate::schedule::Profile;
use crate::shapes::KeySpace;
use crate::target::Protocol;
use crate::workload::{Workload, WorkloadError};
use crest_proto::pb;
use std::time::Duration;

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
    /// A replayed trace's op table (None: a rate or closed-loop class).
    pub trace: Option<std::sync::Arc<[crate::trace::TraceOp]>>,
}

/// A checked run plan with every class built: what a worker runs.
pub type Plan = RunPlan<ClassSpec>;

impl ClassSpec {
    /// Builds one checked class for a target speaking `protocol`; `seed` seeds its
    /// workload.
    ///
    /// # Errors
    /// [`PlanError::Workload`] naming the class when a command or shape does not build.
    pub fn build(c: &ClassPlan, seed: u64, protocol: Protocol) -> Result<Self, PlanError> {
        let wl = |e| PlanError::Workload(c.name.clone(), e);
        let shape = &c.shape;
        let keys = KeySpace::new(
            shape.keys.count,
            &shape.keys.prefix,
            shape.keys.dist.clone(),
        )
        .and_then(|k| k.with_lengths(shape.keys.lengths.clone()))
        .map_err(|e| wl(e.into()))?;
        let workload = Workload::new(
            shape.commands(protocol).map_err(wl)?,
            keys,
            shape.values.clone(),
            shape.members,
            shape.members_sequential,
            shape.ttl_nominal(),
            seed,
        )
        .map_err(wl)?
        .with_content(shape.content, seed);
        let workload = match &shape.ttl {
            Some(t) => workload.with_ttl(t.clone()).map_err(wl)?,
            None => workload,
        };
        let (profile, closed_for, trace) = match &c.load {
            Load::Open(p) => (Some(p.clone()), None, None),
            Load::Closed { until } => (None, *until, None),
            Load::Trace { ops } => (None, None, Some(ops.clone().into())),
        };
        Ok(Self {
            name: c.name.clone(),
            profile,
            closed_for,
            workload,
            pipeline: shape.pipeline,
            trace,
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
        let protocol = p.protocol;
        p.try_map_classes(|c| ClassSpec::build(c, seed, protocol))
    }
}
