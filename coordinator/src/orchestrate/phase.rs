//! One phase of a run (the prefill, or the measured run): its classes as typed plans, split
//! over every shard, sent with one common start instant.
//!
//! Plans are built as `crest_model` domain types and turned into wire messages by
//! `crest_model::convert`, the same module the worker reads them back with.

use super::member::{Member, RunError};
use crate::config::{ClassConfig, RunConfig};
use crate::split;
use crest_model::clock::unix_ns;
use crest_model::convert;
use crest_model::plan::{ClassPlan, KeySpec, Load, RunPlan, ShardClassPart, ShardPart};
use crest_model::rng::derive_seed;
use crest_model::schedule::{Profile, Segment};
use crest_model::shapes::KeyDist;
use crest_proto::pb::{self, coordinator_message::Msg as Out};
use std::time::{Duration, Instant, SystemTime};

/// The least time between sending the plans and the start: every worker must have its
/// plan and its connections up by then.
const MIN_LEAD: Duration = Duration::from_secs(1);
/// The start lead is at least this many round trips to the slowest worker.
const LEAD_RTTS: u32 = 4;
/// Prefill pipelines at least this deep: it is a bulk load, not a measurement.
const PREFILL_PIPELINE: u32 = 16;

/// A phase: its classes and their cluster-wide splits.
pub(super) struct Phase {
    pub classes: Vec<ClassPlan>,
    /// Closed-loop budgets per class (None: by time).
    pub budgets: Vec<Option<u64>>,
    /// Connections per class, cluster-wide.
    pub conns: Vec<u32>,
    /// Closed loops with a budget: pause every this many requests (`--checkpoint-every`).
    pub checkpoint_every: Vec<Option<u64>>,
    pub warmup: Duration,
}

/// A class of the measured run: the warm-up prepended at the profile's first rate.
pub(super) fn class_plan(cfg: &RunConfig, c: &ClassConfig) -> ClassPlan {
    let load = match &c.profile {
        Some(p) if !cfg.warmup.is_zero() => {
            let r = p.segments().first().map_or(0.0, |s| s.from_rps);
            let mut segs = vec![Segment {
                duration_ns: u64::try_from(cfg.warmup.as_nanos()).unwrap_or(u64::MAX),
                from_rps: r,
                to_rps: r,
            }];
            segs.extend_from_slice(p.segments());
            // The config checked the profile and the warm-up; together they still hold.
            Load::Open(Profile::new(segs).unwrap_or_else(|_| p.clone()))
        }
        Some(p) => Load::Open(p.clone()),
        None => Load::Closed {
            until: (!cfg.duration.is_zero()).then_some(cfg.duration),
        },
    };
    ClassPlan {
        name: c.name.clone(),
        load,
        mix: c.mix.clone(),
        keys: KeySpec {
            count: c.keys,
            prefix: c.key_prefix.clone(),
            dist: c.key_dist.clone(),
        },
        values: c.values.clone(),
        pipeline: c.pipeline,
        ttl: c.ttl,
        batch: c.batch,
        members: c.members,
        members_sequential: c.members_sequential,
        range: c.range,
    }
}

/// The prefill of a class: SET every key once, in order, closed loop.
pub(super) fn prefill_class(c: &ClassConfig) -> ClassPlan {
    ClassPlan {
        name: format!("prefill:{}", c.name),
        load: Load::Closed { until: None },
        mix: vec![("SET".into(), 1)],
        keys: KeySpec {
            count: c.keys,
            prefix: c.key_prefix.clone(),
            dist: KeyDist::Sequential,
        },
        values: c.values.clone(),
        pipeline: c.pipeline.max(PREFILL_PIPELINE),
        ttl: c.ttl,
        batch: 1,
        members: c.members,
        members_sequential: false,
        range: c.range,
    }
}

/// Every worker's plan for a phase: shard `g` of the cluster gets share `1/total`, its
/// part of each class's connections and budget (remainders spread, none lost), and a seed
/// derived from the run's.
pub(super) fn plans(
    cfg: &RunConfig,
    members: &[Member],
    phase: &Phase,
    total_shards: u32,
    run_id: &str,
    target_for: &dyn Fn(&Member) -> String,
) -> Vec<RunPlan> {
    let ones = vec![1u64; total_shards as usize];
    let shares = split::shares(&ones);
    let conns: Vec<Vec<u64>> = phase
        .conns
        .iter()
        .map(|c| split::split_integer(u64::from(*c), &ones))
        .collect();
    let budgets: Vec<Option<Vec<u64>>> = phase
        .budgets
        .iter()
        .map(|b| b.map(|n| split::split_integer(n, &ones)))
        .collect();
    // Per class and shard: the cumulative counts at which the shard pauses.
    let checkpoints: Vec<Vec<Vec<u64>>> = budgets
        .iter()
        .zip(&phase.checkpoint_every)
        .map(|(b, every)| match (b, every) {
            (Some(b), Some(every)) => split::checkpoints(b, *every),
            _ => vec![Vec::new(); total_shards as usize],
        })
        .collect();
    let mut g = 0usize;
    members
        .iter()
        .map(|m| {
            let shards = (0..m.link.info.shards)
                .map(|s| {
                    let part = ShardPart {
                        shard: s,
                        global_index: g as u32,
                        share: shares[g],
                        seed: derive_seed(cfg.seed, g as u64),
                        classes: (0..phase.classes.len())
                            .map(|c| ShardClassPart {
                                connections: u32::try_from(conns[c][g]).unwrap_or(u32::MAX),
                                budget: budgets[c].as_ref().map(|b| b[g]),
                                checkpoints: checkpoints[c].get(g).cloned().unwrap_or_default(),
                            })
                            .collect(),
                    };
                    g += 1;
                    part
                })
                .collect();
            RunPlan {
                run_id: run_id.to_string(),
                target: target_for(m),
                classes: phase.classes.clone(),
                arrival: cfg.arrival,
                pacer: cfg.pacer,
                timeout: cfg.timeout,
                drain: cfg.drain,
                warmup: phase.warmup,
                interval: cfg.interval,
                total_shards,
                shards,
                backlog_limit: cfg.backlog_limit,
                session: cfg.session.clone(),
                tls: cfg.tls.clone(),
                cluster: cfg.cluster,
            }
        })
        .collect()
}

/// Splits a phase over every shard, sends each worker its plan and a common start instant.
/// Returns the run id, the local start instant and the wall-clock start.
///
/// # Errors
/// [`RunError::Failed`] when a worker's stream is gone before it has its plan, or its
/// clock offset puts the start beyond the representable range.
pub(super) async fn start(
    cfg: &RunConfig,
    members: &[Member],
    phase: &Phase,
    total_shards: u32,
    target_for: &dyn Fn(&Member) -> String,
) -> Result<(String, Instant, SystemTime), RunError> {
    let run_id = uuid::Uuid::new_v4().to_string();
    // Each plan goes to the wire once, and the worker's own check runs on that message
    // here first: a plan a worker would refuse is a setting the user can fix (e.g. more
    // connections per shard than a shard may open), said before any load starts.
    let mut wire = Vec::with_capacity(members.len());
    for (m, plan) in members.iter().zip(plans(
        cfg,
        members,
        phase,
        total_shards,
        &run_id,
        target_for,
    )) {
        let msg = pb::RunPlan::from(&plan);
        if let Err(e) = RunPlan::try_from(&msg) {
            return Err(RunError::Usage(format!(
                "the plan for worker {} is out of bounds: {e}",
                m.link.info.name
            )));
        }
        wire.push(msg);
    }
    let max_rtt = members.iter().map(|m| m.rtt_ns).max().unwrap_or(0);
    let lead = MIN_LEAD.max(Duration::from_nanos(max_rtt).saturating_mul(LEAD_RTTS));
    let lead_ns = i64::try_from(lead.as_nanos()).unwrap_or(i64::MAX);
    let start_unix = unix_ns().saturating_add(lead_ns);
    let start_local = Instant::now() + lead;
    let started_at = SystemTime::now() + lead;
    for (m, plan) in members.iter().zip(wire) {
        let start_at = convert::add_ns(start_unix, m.offset_ns).ok_or_else(|| {
            RunError::Failed(format!(
                "worker {}: clock offset {} ns puts the start out of range",
                m.link.info.name, m.offset_ns
            ))
        })?;
        let sent = m
            .link
            .send(Out::Start(pb::StartRun {
                plan: Some(plan),
                start_at_unix_ns: start_at,
            }))
            .await;
        if !sent {
            return Err(RunError::Failed(format!(
                "worker {} left before it had its plan",
                m.link.info.name
            )));
        }
    }
    Ok((run_id, start_local, started_at))
}
