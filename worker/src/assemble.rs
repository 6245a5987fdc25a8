//! A checked [`Plan`] → one [`ShardConfig`] per shard of this worker: the pure step
//! between the session that received the plan and the threads that run it.
//!
//! Each shard gets every class: an open-loop class's profile scaled by the shard's share,
//! with uniform arrivals phased by the shard's place in the cluster (so shards do not fire
//! together); a closed-loop class's budget as the coordinator split it and its end shifted
//! past the warm-up.

use crate::feed::{TraceFeed, TraceSource};
use crate::shard::{Load, ShardClass, ShardConfig, ShardEvent};
use crate::target_tls::Client;
use core_affinity::CoreId;
use crest_model::built::Plan;
use crest_model::schedule::Schedule;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;

/// A plan this worker cannot turn into shards.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AssembleError {
    /// A shard's share of the rate is not a finite number ≥ 0 (scaling a profile by it
    /// would not give a profile).
    #[error("shard {shard}: share {share} is not a finite number ≥ 0")]
    Share {
        /// The shard, by index within the worker.
        shard: u32,
        /// The share the plan gave it.
        share: f64,
    },
}

/// What the shards of one run share besides the plan.
#[derive(Debug, Clone)]
pub struct Wiring {
    /// The server, resolved (the seed, in a cluster).
    pub target: SocketAddr,
    /// A cluster's slot table, kept current by the worker (None: one node).
    pub topology: Option<Arc<crate::route::Shared>>,
    /// Local instant of the run's t = 0.
    pub start: Instant,
    /// One core per shard index (a shard without an entry is not pinned).
    pub cores: Vec<CoreId>,
    /// Set to stop every shard of the run.
    pub stop: Arc<AtomicBool>,
    /// Checkpoints released by the coordinator, shared by every shard.
    pub released: Arc<std::sync::atomic::AtomicU32>,
    /// Runtime changes of rate, shared by every shard.
    pub steering: Arc<crate::steer::Steering>,
    /// Where every shard reports.
    pub out: UnboundedSender<ShardEvent>,
    /// TLS to the target, built once from the plan (its session cache shared by all).
    pub tls: Option<Client>,
    /// The worker's name: connections are named `crest-<worker>-<shard>`.
    pub worker: String,
}

/// One configuration per shard part of `plan`, in the plan's order.
///
/// # Errors
/// [`AssembleError`] when a shard's share cannot scale a profile.
pub fn shard_configs(plan: &Plan, wiring: &Wiring) -> Result<Vec<ShardConfig>, AssembleError> {
    // One workload per class, shared by every shard (it holds the value bytes).
    let workloads: Vec<_> = plan
        .classes
        .iter()
        .map(|c| Arc::new(c.workload.clone()))
        .collect();
    let total_shards = plan.total_shards.max(1);
    let mut configs = Vec::with_capacity(plan.shards.len());
    for part in &plan.shards {
        if !part.share.is_finite() || part.share < 0.0 {
            return Err(AssembleError::Share {
                shard: part.shard,
                share: part.share,
            });
        }
        let phase = f64::from(part.global_index) / f64::from(total_shards);
        let classes = plan
            .classes
            .iter()
            .zip(&part.classes)
            .zip(&workloads)
            .map(|((c, part_class), w)| ShardClass {
                workload: w.clone(),
                load: match (&c.trace, &c.profile) {
                    // Each shard's part of a trace comes through a feed of its own.
                    (Some(ops), _) => Load::Trace(TraceSource {
                        feed: Arc::new(TraceFeed::default()),
                        ops: ops.clone(),
                        timeout_ns: u64::try_from(plan.timeout.as_nanos()).unwrap_or(u64::MAX),
                        protocol: plan.protocol,
                    }),
                    (None, Some(p)) => {
                        Load::Open(Schedule::new(p.scaled(part.share), plan.arrival, phase))
                    }
                    (None, None) => Load::Closed {
                        until: c.closed_for.map(|d| d + plan.warmup),
                        budget: part_class.budget,
                        checkpoints: part_class.checkpoints.clone(),
                    },
                },
                connections: part_class.connections,
                pipeline: c.pipeline,
            })
            .collect();
        configs.push(ShardConfig {
            index: part.shard,
            global_index: part.global_index,
            total_shards: plan.total_shards,
            target: wiring.target,
            topology: wiring.topology.clone(),
            session: plan.session.clone(),
            tls: wiring.tls.clone(),
            client_name: format!("crest-{}-{}", wiring.worker, part.shard),
            classes,
            seed: part.seed,
            pacer: plan.pacer,
            start: wiring.start,
            warmup: plan.warmup,
            interval: plan.interval,
            timeout: plan.timeout,
            drain: plan.drain,
            backlog_limit: usize::try_from(plan.backlog_limit).unwrap_or(usize::MAX),
            core: wiring.cores.get(part.shard as usize).copied(),
            stop: wiring.stop.clone(),
            released: wiring.released.clone(),
            steering: wiring.steering.clone(),
            share: part.share,
            churn: plan.churn,
            read_from: plan.read_from,
            check_staleness: plan.check_staleness,
            out: wiring.out.clone(),
        });
    }
    Ok(configs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crest_model::built::ClassSpec;
    use crest_model::plan::{Pacer, ShardClassPart, ShardPart};
    use crest_model::rng::Rng;
    use crest_model::schedule::{Arrival, Profile};
    use crest_model::shapes::{KeyDist, KeySpace, ValueSizes};
    use crest_model::workload::{CmdDef, Workload};
    use std::time::Duration;

    fn workload() -> Workload {
        let cmd = CmdDef::parse("GET", 1, None, 1).unwrap();
        let keys = KeySpace::new(10, "k:", KeyDist::Uniform).unwrap();
        Workload::new(
            vec![(cmd, 1)],
            keys,
            ValueSizes::Fixed(4),
            1,
            false,
            None,
            0,
        )
        .unwrap()
    }

    /// Two classes (open 1,000 req/s for 2 s; closed for 3 s) over two shards of a
    /// four-shard cluster, this worker holding global shards 2 and 3.
    fn plan() -> Plan {
        let open = ClassSpec {
            name: "open".into(),
            profile: Some(Profile::constant(1_000.0, 2_000_000_000).unwrap()),
            closed_for: None,
            workload: workload(),
            pipeline: 1,
            trace: None,
        };
        let closed = ClassSpec {
            name: "closed".into(),
            profile: None,
            closed_for: Some(Duration::from_secs(3)),
            workload: workload(),
            pipeline: 8,
            trace: None,
        };
        let part = |shard: u32, budget: Option<u64>| ShardPart {
            shard,
            global_index: shard + 2,
            share: 0.25,
            seed: 100 + u64::from(shard),
            classes: vec![
                ShardClassPart {
                    connections: 3,
                    budget: None,
                    checkpoints: Vec::new(),
                },
                ShardClassPart {
                    connections: 2,
                    budget,
                    checkpoints: Vec::new(),
                },
            ],
        };
        Plan {
            run_id: "r".into(),
            target: "127.0.0.1:6379".into(),
            classes: vec![open, closed],
            arrival: Arrival::Uniform,
            pacer: Pacer::Spin,
            timeout: Duration::from_secs(1),
            drain: Duration::from_secs(2),
            warmup: Duration::from_millis(500),
            interval: Duration::from_millis(250),
            total_shards: 4,
            shards: vec![part(0, Some(7)), part(1, None)],
            backlog_limit: 99,
            session: Default::default(),
            tls: None,
            cluster: Default::default(),
            protocol: Default::default(),
            ring: Vec::new(),
            churn: Default::default(),
            read_from: Default::default(),
            replicas: Vec::new(),
            check_staleness: false,
        }
    }

    fn wiring(cores: Vec<CoreId>) -> (Wiring, tokio::sync::mpsc::UnboundedReceiver<ShardEvent>) {
        let (out, rx) = tokio::sync::mpsc::unbounded_channel();
        let w = Wiring {
            target: "127.0.0.1:1".parse().unwrap(),
            topology: None,
            start: Instant::now(),
            cores,
            stop: Arc::new(AtomicBool::new(false)),
            released: Default::default(),
            steering: Default::default(),
            out,
            tls: None,
            worker: "w".into(),
        };
        (w, rx)
    }

    #[test]
    fn every_shard_gets_every_class_with_its_plan_settings() {
        let (w, _rx) = wiring(vec![CoreId { id: 4 }, CoreId { id: 6 }]);
        let cfgs = shard_configs(&plan(), &w).unwrap();
        assert_eq!(cfgs.len(), 2);
        for (i, c) in cfgs.iter().enumerate() {
            assert_eq!(c.index, i as u32);
            assert_eq!(c.global_index, i as u32 + 2);
            assert_eq!(c.total_shards, 4);
            assert_eq!(c.seed, 100 + i as u64);
            assert_eq!(c.classes.len(), 2);
            assert_eq!((c.classes[0].connections, c.classes[0].pipeline), (3, 1));
            assert_eq!((c.classes[1].connections, c.classes[1].pipeline), (2, 8));
            assert_eq!(c.backlog_limit, 99);
            assert_eq!(c.interval, Duration::from_millis(250));
            assert_eq!(c.pacer, Pacer::Spin);
            assert!(Arc::ptr_eq(&c.stop, &w.stop));
            assert!(Arc::ptr_eq(
                &c.classes[0].workload,
                &cfgs[0].classes[0].workload
            ));
        }
        assert_eq!(cfgs[0].core, Some(CoreId { id: 4 }));
        assert_eq!(cfgs[1].core, Some(CoreId { id: 6 }));
    }

    #[test]
    fn shares_scale_schedules_and_phases_offset_them() {
        let (w, _rx) = wiring(vec![]);
        let cfgs = shard_configs(&plan(), &w).unwrap();
        let mut firsts = Vec::new();
        for c in &cfgs {
            assert_eq!(c.core, None, "no cores listed: not pinned");
            let Load::Open(s) = &c.classes[0].load else {
                panic!("class 0 is open loop")
            };
            // A quarter of 1,000 req/s over 2 s.
            assert!((s.profile().total() - 500.0).abs() < 1e-9);
            assert_eq!(s.profile().duration_ns(), 2_000_000_000);
            let mut s = s.clone();
            firsts.push(s.next(&mut Rng::new(0)).unwrap());
        }
        // 250 req/s per shard is 4 ms apart; global shards 2 and 3 of 4 start at 2/4
        // and 3/4 of a gap.
        assert_eq!(firsts, vec![2_000_000, 3_000_000]);
    }

    #[test]
    fn closed_loops_keep_their_split_budget_and_end_after_the_warm_up() {
        let (w, _rx) = wiring(vec![]);
        let cfgs = shard_configs(&plan(), &w).unwrap();
        let budgets: Vec<_> = cfgs
            .iter()
            .map(|c| match &c.classes[1].load {
                Load::Closed { until, budget, .. } => {
                    assert_eq!(*until, Some(Duration::from_millis(3_500)));
                    *budget
                }
                Load::Open(_) | Load::Trace(_) => panic!("class 1 is closed loop"),
            })
            .collect();
        assert_eq!(budgets, vec![Some(7), None]);
    }

    #[test]
    fn a_share_that_cannot_scale_a_profile_is_an_error_not_a_panic() {
        let (w, _rx) = wiring(vec![]);
        for share in [f64::NAN, f64::INFINITY, -0.5] {
            let mut p = plan();
            p.shards[1].share = share;
            let e = shard_configs(&p, &w).unwrap_err();
            assert!(matches!(e, AssembleError::Share { shard: 1, .. }), "{e}");
        }
    }
}
