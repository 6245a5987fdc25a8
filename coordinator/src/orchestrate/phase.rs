//! One phase of a run (the prefill, or the measured run): its classes as typed plans, split
//! over every shard, sent with one common start instant.
//!
//! Plans are built as `crest_model` domain types and turned into wire messages by
//! `crest_model::convert`, the same module the worker reads them back with.

use super::member::{Member, RunError};
use crate::config::{ClassConfig, RunConfig, Workers};
use crate::split;
use crest_model::clock::unix_ns;
use crest_model::convert;
use crest_model::plan::{ClassPlan, KeySpec, Load, RunPlan, Shape, ShardClassPart, ShardPart};
use crest_model::rng::derive_seed;
use crest_model::schedule::{Profile, Segment};
use crest_model::shapes::KeyDist;
use crest_proto::pb::{self, coordinator_message::Msg as Out};
use std::time::{Duration, Instant, SystemTime};

/// The least time between sending the plans and the start for remote workers: every
/// worker must have its plan, have probed the target and have its connections up by then,
/// across networks and relays.
const REMOTE_LEAD: Duration = Duration::from_secs(1);
/// The same for in-process workers: their plans cross loopback in microseconds; what is
/// left is the probe of the target (one connection and its session's commands).
const LOCAL_LEAD: Duration = Duration::from_millis(250);
/// What the lead allows for each connection a shard opens (one after another on its core):
/// a TCP connect and the session's commands...
const CONNECT_COST: Duration = Duration::from_micros(100);
/// ...or those and a TLS handshake.
const TLS_CONNECT_COST: Duration = Duration::from_millis(1);
/// The longest lead: a shard waits at most this long for its first connections
/// (`CONNECT_WAIT_MAX` in the engine), so a longer one would only idle.
const MAX_LEAD: Duration = Duration::from_secs(5);
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
        _ if cfg.replay.is_some() => Load::Trace {
            ops: cfg
                .replay
                .as_ref()
                .map(|r| r.ops.clone())
                .unwrap_or_default(),
        },
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
        shape: c.shape.clone(),
    }
}

/// The prefill of a class: SET every key once, in order, closed loop, one key per
/// request, with the class's values and TTL.
pub(super) fn prefill_class(c: &ClassConfig) -> ClassPlan {
    let shape = &c.shape;
    ClassPlan {
        name: format!("prefill:{}", c.name),
        load: Load::Closed { until: None },
        shape: Shape {
            mix: vec![("SET".into(), 1)],
            keys: KeySpec {
                dist: KeyDist::Sequential,
                ..shape.keys.clone()
            },
            pipeline: shape.pipeline.max(PREFILL_PIPELINE),
            batch: 1,
            members_sequential: false,
            ..shape.clone()
        },
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
            let target = target_for(m);
            RunPlan {
                run_id: run_id.to_string(),

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
                protocol: cfg.protocol,
                ring: ring_for(cfg, &target),
                churn: cfg.churn,
                read_from: cfg.read_from,
                replicas: cfg.replicas.clone(),
                check_staleness: cfg.check_staleness,
                target,
            }
        })
        .collect()
}

/// A memcached plan's ring as `target` reaches it (the built-in target's address may be
/// the worker's own): the configured servers with the first one replaced by `target`.
fn ring_for(cfg: &RunConfig, target: &str) -> Vec<String> {
    if !cfg.protocol.is_memcache() {
        return Vec::new();
    }
    let mut ring = cfg.ring.clone();
    match ring.first_mut() {
        Some(first) => *first = target.to_string(),
        None => ring.push(target.to_string()),
    }
    ring
}

/// How far ahead the common start is: the workers' floor (in-process or remote) plus the
/// time the busiest shard takes to open its connections one after another, at least
/// [`LEAD_RTTS`] round trips to the slowest worker, at most [`MAX_LEAD`]. A worker that is
/// not ready by then starts late, and its first requests' latency shows it.
pub(super) fn lead(
    cfg: &RunConfig,
    phase: &Phase,
    total_shards: u32,
    max_rtt: Duration,
) -> Duration {
    let floor = match cfg.workers {
        Workers::Local { .. } => LOCAL_LEAD,
        Workers::Remote { .. } => REMOTE_LEAD,
    };
    let per_shard: u32 = phase
        .conns
        .iter()
        .map(|c| c.div_ceil(total_shards.max(1)))
        .fold(0, u32::saturating_add);
    let each = if cfg.tls.is_some() {
        TLS_CONNECT_COST
    } else {
        CONNECT_COST
    };
    floor
        .saturating_add(each.saturating_mul(per_shard))
        .max(max_rtt.saturating_mul(LEAD_RTTS))
        .min(MAX_LEAD)
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
    let lead = lead(cfg, phase, total_shards, Duration::from_nanos(max_rtt));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::WorkerLink;
    use crest_model::shapes::ValueSizes;

    /// The lead: in-process workers start sooner than remote ones; a shard's connections
    /// (ten times dearer with TLS) and a slow round trip push it out; it never passes
    /// [`MAX_LEAD`].
    #[test]
    fn the_lead_covers_the_workers_floor_their_connections_and_round_trips() {
        let mut cfg = cfg();
        let mut phase = two_class_phase(&cfg);
        phase.conns = vec![40, 60];
        let rtt = Duration::from_micros(100);
        // 100 connections over 2 shards: 50 per shard, 5 ms plain.
        assert_eq!(
            lead(&cfg, &phase, 2, rtt),
            LOCAL_LEAD + Duration::from_millis(5)
        );
        cfg.tls = Some(crest_model::target::Tls {
            ca_pem: None,
            client: None,
            server_name: "localhost".into(),
            verify: crest_model::target::Verify::default(),
        });
        assert_eq!(
            lead(&cfg, &phase, 2, rtt),
            LOCAL_LEAD + Duration::from_millis(50)
        );
        cfg.tls = None;
        cfg.workers = Workers::Remote {
            count: 2,
            wait_timeout: Duration::from_secs(10),
        };
        assert_eq!(
            lead(&cfg, &phase, 2, rtt),
            REMOTE_LEAD + Duration::from_millis(5)
        );
        assert_eq!(
            lead(&cfg, &phase, 2, Duration::from_millis(400)),
            Duration::from_millis(1_600)
        );
        phase.conns = vec![u32::MAX, u32::MAX];
        assert_eq!(lead(&cfg, &phase, 1, rtt), MAX_LEAD);
        assert_eq!(lead(&cfg, &phase, 0, Duration::MAX), MAX_LEAD);
    }

    /// An open-loop run at 100/s for 2 s against 127.0.0.1:1, one class.
    fn cfg() -> RunConfig {
        crate::cli::test_run(100.0, 2)
    }

    /// A ramp from 100/s to 300/s over 1 s, then 300/s for 2 s.
    fn ramp() -> Profile {
        Profile::new(vec![
            Segment {
                duration_ns: 1_000_000_000,
                from_rps: 100.0,
                to_rps: 300.0,
            },
            Segment {
                duration_ns: 2_000_000_000,
                from_rps: 300.0,
                to_rps: 300.0,
            },
        ])
        .unwrap()
    }

    /// A class whose every setting differs from the defaults.
    fn distinct(cfg: &RunConfig) -> ClassConfig {
        let mut c = cfg.classes[0].clone();
        c.name = "big".into();
        c.profile = Some(ramp());
        c.shape.mix = vec![("GET".into(), 7), ("HSET".into(), 2)];
        c.shape.keys.count = 1234;
        c.shape.keys.prefix = "k:".into();
        c.shape.keys.dist = KeyDist::Zipf(0.99);
        c.shape.values = ValueSizes::Range(100, 4096);
        c.connections = 9;
        c.shape.pipeline = 3;
        c.shape.ttl = Some(crest_model::shapes::Ttl::Fixed(60));
        c.shape.batch = 5;
        c.shape.members = 77;
        c.shape.members_sequential = true;
        c.shape.range = 12;
        c
    }

    /// `n` fake members, member `i` with `shards[i]` shards.
    fn members(shards: &[u32]) -> Vec<Member> {
        shards
            .iter()
            .enumerate()
            .map(|(i, &s)| {
                let (mut link, _rx) = WorkerLink::fake(i);
                link.info.shards = s;
                Member::new(link)
            })
            .collect()
    }

    /// An open-loop class with a warm-up starts with a flat segment of the warm-up's length
    /// at the profile's first rate, followed by the profile unchanged.
    #[test]
    fn the_warmup_is_prepended_at_the_profiles_first_rate() {
        let mut cfg = cfg();
        cfg.warmup = Duration::from_millis(1500);
        let plan = class_plan(&cfg, &distinct(&cfg));
        let Load::Open(p) = plan.load else {
            panic!("not open loop: {:?}", plan.load);
        };
        let mut want = vec![Segment {
            duration_ns: 1_500_000_000,
            from_rps: 100.0,
            to_rps: 100.0,
        }];
        want.extend_from_slice(ramp().segments());
        assert_eq!(p.segments(), want.as_slice());
    }

    /// Without a warm-up an open-loop class's profile goes into the plan as it is.
    #[test]
    fn without_a_warmup_the_profile_is_sent_as_is() {
        let mut cfg = cfg();
        cfg.warmup = Duration::ZERO;
        let plan = class_plan(&cfg, &distinct(&cfg));
        assert_eq!(plan.load, Load::Open(ramp()));
    }

    /// A closed-loop class runs until the configured duration, warm-up or not; with no
    /// duration (a count-bounded run) it has no time bound.
    #[test]
    fn a_closed_loop_runs_until_the_duration_or_without_a_time_bound() {
        let mut cfg = cfg();
        cfg.warmup = Duration::from_secs(1);
        let mut c = distinct(&cfg);
        c.profile = None;
        assert_eq!(
            class_plan(&cfg, &c).load,
            Load::Closed {
                until: Some(Duration::from_secs(2))
            }
        );
        cfg.duration = Duration::ZERO;
        assert_eq!(class_plan(&cfg, &c).load, Load::Closed { until: None });
    }

    /// The measured class's plan carries every setting of the class unchanged.
    #[test]
    fn a_class_plan_keeps_the_classs_settings() {
        let cfg = cfg();
        let c = distinct(&cfg);
        let plan = class_plan(&cfg, &c);
        assert_eq!(plan.name, "big");
        assert_eq!(plan.shape.mix, c.shape.mix);
        assert_eq!(
            plan.shape.keys,
            KeySpec {
                count: 1234,
                prefix: "k:".into(),
                dist: KeyDist::Zipf(0.99),
                lengths: Default::default(),
            }
        );
        assert_eq!(plan.shape.values, ValueSizes::Range(100, 4096));
        assert_eq!(plan.shape.pipeline, 3);
        assert_eq!(plan.shape.ttl, Some(crest_model::shapes::Ttl::Fixed(60)));
        assert_eq!(plan.shape.batch, 5);
        assert_eq!(plan.shape.members, 77);
        assert!(plan.shape.members_sequential);
        assert_eq!(plan.shape.range, 12);
    }

    /// The prefill SETs every key of the class once, in order, as a closed loop with no
    /// time bound, one key per command, under its own name.
    #[test]
    fn the_prefill_sets_every_key_once_in_order_in_a_closed_loop() {
        let cfg = cfg();
        let c = distinct(&cfg);
        let p = prefill_class(&c);
        assert_eq!(p.name, "prefill:big");
        assert_eq!(p.load, Load::Closed { until: None });
        assert_eq!(p.shape.mix, vec![("SET".to_string(), 1)]);
        assert_eq!(
            p.shape.keys,
            KeySpec {
                count: 1234,
                prefix: "k:".into(),
                dist: KeyDist::Sequential,
                lengths: Default::default(),
            }
        );
        assert_eq!(p.shape.batch, 1);
        assert!(!p.shape.members_sequential);
        assert_eq!(p.shape.values, c.shape.values);
        assert_eq!(p.shape.ttl, Some(crest_model::shapes::Ttl::Fixed(60)));
        assert_eq!(p.shape.members, 77);
        assert_eq!(p.shape.range, 12);
    }

    /// The prefill pipelines at least [`PREFILL_PIPELINE`] deep, deeper when the class does.
    #[test]
    fn the_prefill_pipelines_at_least_prefill_pipeline_deep() {
        let cfg = cfg();
        let mut c = distinct(&cfg);
        c.shape.pipeline = 1;
        assert_eq!(prefill_class(&c).shape.pipeline, PREFILL_PIPELINE);
        c.shape.pipeline = PREFILL_PIPELINE * 4;
        assert_eq!(prefill_class(&c).shape.pipeline, PREFILL_PIPELINE * 4);
    }

    /// A phase of two classes (one with a budget and checkpoints) over members of 2 and
    /// 3 shards.
    fn two_class_phase(cfg: &RunConfig) -> Phase {
        let c = distinct(cfg);
        let mut closed = c.clone();
        closed.profile = None;
        Phase {
            classes: vec![class_plan(cfg, &c), class_plan(cfg, &closed)],
            budgets: vec![None, Some(1003)],
            conns: vec![7, 50],
            checkpoint_every: vec![None, Some(100)],
            warmup: Duration::from_secs(1),
        }
    }

    /// Every member gets one plan with one part per shard, numbered within the worker and
    /// across the cluster in order, its own target, the run id and the phase's classes.
    #[test]
    fn each_member_gets_its_shards_numbered_across_the_cluster() {
        let cfg = cfg();
        let ms = members(&[2, 3]);
        let phase = two_class_phase(&cfg);
        let target_for = |m: &Member| format!("{}:6379", m.link.info.name);
        let plans = plans(&cfg, &ms, &phase, 5, "run-1", &target_for);
        assert_eq!(plans.len(), 2);
        let shard_ids: Vec<Vec<(u32, u32)>> = plans
            .iter()
            .map(|p| p.shards.iter().map(|s| (s.shard, s.global_index)).collect())
            .collect();
        assert_eq!(
            shard_ids,
            vec![vec![(0, 0), (1, 1)], vec![(0, 2), (1, 3), (2, 4)]]
        );
        assert_eq!(plans[0].target, "w0:6379");
        assert_eq!(plans[1].target, "w1:6379");
        for p in &plans {
            assert_eq!(p.run_id, "run-1");
            assert_eq!(p.total_shards, 5);
            assert_eq!(p.classes, phase.classes);
            assert_eq!(p.warmup, Duration::from_secs(1));
            assert_eq!(p.pacer, cfg.pacer);
            assert!(p.shards.iter().all(|s| s.classes.len() == 2));
        }
    }

    /// The shards' shares of the rate add up to the whole rate, and their connections and
    /// budgets to exactly the class's, the remainder spread one each over the first shards.
    #[test]
    fn shards_split_rate_connections_and_budget_with_no_remainder_lost() {
        let cfg = cfg();
        let ms = members(&[2, 3]);
        let phase = two_class_phase(&cfg);
        let plans = plans(&cfg, &ms, &phase, 5, "r", &|_| String::new());
        let shards: Vec<&ShardPart> = plans.iter().flat_map(|p| &p.shards).collect();
        let shares: Vec<f64> = shards.iter().map(|s| s.share).collect();
        assert_eq!(shares, vec![0.2; 5]);
        // The open class's cluster-wide rate, carried by the shares.
        let rate: f64 = shares.iter().map(|s| s * 300.0).sum();
        assert!((rate - 300.0).abs() < 1e-9, "{rate}");
        let conns =
            |c: usize| -> Vec<u32> { shards.iter().map(|s| s.classes[c].connections).collect() };
        assert_eq!(conns(0), vec![2, 2, 1, 1, 1]);
        assert_eq!(conns(1), vec![10; 5]);
        let budgets: Vec<Option<u64>> = shards.iter().map(|s| s.classes[1].budget).collect();
        assert_eq!(
            budgets,
            vec![Some(201), Some(201), Some(201), Some(200), Some(200)]
        );
        assert!(shards.iter().all(|s| s.classes[0].budget.is_none()));
    }

    /// A budgeted class with checkpoints pauses every shard at counts that add up to each
    /// multiple of the step and stay within the shard's budget; a class without has none.
    #[test]
    fn checkpoints_add_up_to_each_step_across_shards() {
        let cfg = cfg();
        let ms = members(&[2, 3]);
        let phase = two_class_phase(&cfg);
        let plans = plans(&cfg, &ms, &phase, 5, "r", &|_| String::new());
        let shards: Vec<&ShardPart> = plans.iter().flat_map(|p| &p.shards).collect();
        assert!(shards.iter().all(|s| s.classes[0].checkpoints.is_empty()));
        for s in &shards {
            let c = &s.classes[1];
            assert_eq!(c.checkpoints.len(), 10, "1003 requests, one pause per 100");
            assert!(c.checkpoints.last().unwrap() <= &c.budget.unwrap());
        }
        for k in 0..10 {
            let at: u64 = shards.iter().map(|s| s.classes[1].checkpoints[k]).sum();
            assert_eq!(at, (k as u64 + 1) * 100);
        }
    }

    /// Each shard's seed is derived from the run's seed and its cluster-wide index, so no
    /// two shards draw the same keys.
    #[test]
    fn each_shard_seed_is_derived_from_the_run_seed_and_its_index() {
        let cfg = cfg();
        let ms = members(&[2, 3]);
        let phase = two_class_phase(&cfg);
        let plans = plans(&cfg, &ms, &phase, 5, "r", &|_| String::new());
        let seeds: Vec<u64> = plans
            .iter()
            .flat_map(|p| &p.shards)
            .map(|s| s.seed)
            .collect();
        let want: Vec<u64> = (0..5).map(|g| derive_seed(42, g)).collect();
        assert_eq!(seeds, want);
        let mut unique = seeds.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), 5);
    }
}
