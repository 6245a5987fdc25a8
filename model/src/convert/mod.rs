//! Every conversion between Crest's domain types and the wire (`crest_proto::pb`), both
//! directions side by side, so a field cannot be written one way and read another.
//!
//! Domain → wire is `From` (it cannot fail). Wire → domain is `TryFrom`, and it is the one
//! place where a field sent by a peer is checked: numbers finite and in range, counts
//! capped ([`limits`]), clocks and indices never overflowing. A message that fails is
//! refused with a [`WireError`] naming the field, its value and what would be right; no
//! peer input can panic this process or make it allocate without bound.

mod check;
mod control;
mod plan;
mod results;
mod trace;

pub use check::{WireError, limits};
pub use control::*;
pub use plan::MAX_PEM;
pub use results::*;
pub use trace::{batch_from_wire, batch_to_wire};

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    use crate::plan::{
        Churn, ClassPlan, KeySpec, Load, Pacer, RunPlan, Shape, ShardClassPart, ShardPart,
    };
    use crate::schedule::{Arrival, Profile, Segment};
    use crate::shapes::{KeyDist, ValueSizes};
    use crate::target::{
        ClusterMode, Login, MAX_DB, Protocol, ReadFrom, Resp, Secret, Session, Tls, Verify,
    };
    use crest_proto::pb;
    use proptest::prelude::*;
    use std::time::Duration;

    fn arb_dist() -> impl Strategy<Value = KeyDist> {
        prop_oneof![
            Just(KeyDist::Uniform),
            Just(KeyDist::Sequential),
            (0.01f64..5.0).prop_map(KeyDist::Zipf),
            (0.0f64..1e6, 0.1f64..1e5)
                .prop_map(|(mean, stddev)| KeyDist::Gaussian { mean, stddev }),
            // One bucket: valid over any keyspace the strategy draws.
            (0.01f64..1.0, 0.01f64..1.0).prop_map(|b| KeyDist::Table(vec![b])),
        ]
    }

    fn arb_sizes() -> impl Strategy<Value = ValueSizes> {
        prop_oneof![
            (1u64..1 << 20).prop_map(ValueSizes::Fixed),
            (1u64..1000, 0u64..1000).prop_map(|(a, d)| ValueSizes::Range(a, a + d)),
            prop::collection::vec((1u64..1 << 20, 1u32..100), 1..5).prop_map(ValueSizes::Weighted),
            (15u64..1 << 20).prop_map(ValueSizes::Etc),
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
            (
                arb_sizes(),
                prop_oneof![
                    Just(crate::shapes::Content::Fixed),
                    Just(crate::shapes::Content::Random),
                    (1u32..100).prop_map(|r| crate::shapes::Content::Compressible(f64::from(r))),
                ],
            ),
            (
                1u32..1000,
                prop::option::of(prop_oneof![
                    (1u64..100_000).prop_map(crate::shapes::Ttl::Fixed),
                    prop::collection::vec((0u64..100_000, 1u32..100), 1..8)
                        .prop_map(crate::shapes::Ttl::Table),
                ]),
                1u32..100,
            ),
            (any::<u64>(), any::<bool>(), any::<u32>()),
        )
            .prop_map(
                |(
                    name,
                    load,
                    mix,
                    (count, prefix, dist),
                    (values, content),
                    (pipeline, ttl, batch),
                    (members, members_sequential, range),
                )| {
                    ClassPlan {
                        name,
                        load,
                        shape: Shape {
                            mix,
                            keys: KeySpec {
                                count,
                                prefix,
                                dist,
                                lengths: Default::default(),
                            },
                            values,
                            content,
                            pipeline,
                            ttl,
                            batch,
                            members,
                            members_sequential,
                            range,
                        },
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
                        arrival: match (poisson, timeout_ms % 2 == 0) {
                            (true, true) => Arrival::Poisson,
                            (true, false) => Arrival::Etc,
                            (false, _) => Arrival::Uniform,
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
                            readonly: false,
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
                        protocol: [Protocol::Resp, Protocol::McText, Protocol::McMeta]
                            [(backlog % 3) as usize],
                        ring: match backlog % 3 {
                            0 => Vec::new(),
                            k => (0..k).map(|i| format!("127.0.0.{}:6379", i + 1)).collect(),
                        },
                        churn: match timeout_ms % 4 {
                            0 => Churn::default(),
                            1 => Churn {
                                lifetime: Some((
                                    Duration::from_millis(timeout_ms + 10),
                                    Duration::from_millis(timeout_ms / 2),
                                )),
                                rate: None,
                            },
                            2 => Churn {
                                lifetime: Some((Duration::from_secs(1), Duration::ZERO)),
                                rate: None,
                            },
                            _ => Churn {
                                lifetime: None,
                                rate: Some(0.5 + f64::from(db % 1000)),
                            },
                        },
                        read_from: ReadFrom::ALL[(timeout_ms % 4) as usize],
                        replicas: if timeout_ms % 4 == 0 || backlog % 3 != 0 {
                            Vec::new()
                        } else {
                            vec![format!("10.0.0.{}:6380", db % 200)]
                        },
                        check_staleness: tracking,
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
    fn a_trace_class_carries_its_op_table_and_a_table_unlike_its_mix_is_refused() {
        use crate::trace::TraceOp;
        use crest_trace::Op;
        let class = ClassPlan {
            name: "trace".into(),
            load: Load::Trace {
                ops: vec![TraceOp::Op(Op::Get), TraceOp::Op(Op::Add)],
            },
            shape: Shape {
                mix: vec![("GET".into(), 1), ("SET __key__ __value__ NX".into(), 1)],
                keys: KeySpec {
                    count: 1,
                    prefix: String::new(),
                    dist: KeyDist::Uniform,
                    lengths: Default::default(),
                },
                values: ValueSizes::Fixed(1 << 20),
                content: Default::default(),
                pipeline: 4,
                ttl: None,
                batch: 1,
                members: 0,
                members_sequential: false,
                range: 10,
            },
        };
        let wire = pb::ClassPlan::from(&class);
        assert_eq!(wire.trace_ops, ["get", "add"]);
        assert!(wire.profile.is_none() && !wire.closed_loop);
        assert_eq!(ClassPlan::try_from(&wire).unwrap(), class);
        let mut short = wire.clone();
        short.trace_ops.pop();
        assert_eq!(ClassPlan::try_from(&short).unwrap_err().field, "trace_ops");
        let mut odd = wire;
        odd.trace_ops[1] = "sett".into();
        assert_eq!(ClassPlan::try_from(&odd).unwrap_err().field, "trace_ops[1]");
    }

    #[test]
    fn huge_fields_name_themselves() {
        let plan = RunPlan {
            run_id: "r".into(),
            target: "t:1".into(),
            classes: vec![ClassPlan {
                name: "c".into(),
                load: Load::Closed { until: None },
                shape: Shape {
                    mix: vec![("GET".into(), 1)],
                    keys: KeySpec {
                        count: 10,
                        prefix: "k:".into(),
                        dist: KeyDist::Uniform,
                        lengths: Default::default(),
                    },
                    values: ValueSizes::Fixed(10),
                    content: Default::default(),
                    pipeline: 1,
                    ttl: None,
                    batch: 1,
                    members: 0,
                    members_sequential: false,
                    range: 10,
                },
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
            protocol: Protocol::Resp,
            ring: Vec::new(),
            churn: Churn::default(),
            read_from: ReadFrom::Any,
            replicas: vec!["10.0.0.2:6380".into()],
            check_staleness: true,
        };
        let good = pb::RunPlan::from(&plan);
        assert_eq!(RunPlan::try_from(&good).unwrap(), plan);
        type Edit = fn(&mut pb::RunPlan);
        let cases: &[(&str, Edit)] = &[
            ("total_shards", |p| p.total_shards = u32::MAX),
            ("cluster", |p| p.cluster = 7),
            ("read_from", |p| p.read_from = 9),
            ("replicas", |p| p.replicas = vec!["no-port".into()]),
            ("replicas", |p| p.replicas = vec!["host:0".into()]),
            ("replicas", |p| p.replicas = vec!["a b:1".into()]),
            ("churn.jitter_ns", |p| {
                p.churn = Some(pb::ConnChurn {
                    lifetime_ns: 1_000_000_000,
                    jitter_ns: 1_000_000_000,
                    rate: 0.0,
                })
            }),
            ("churn.lifetime_ns", |p| {
                p.churn = Some(pb::ConnChurn {
                    lifetime_ns: 1,
                    jitter_ns: 0,
                    rate: 0.0,
                })
            }),
            ("churn.rate", |p| {
                p.churn = Some(pb::ConnChurn {
                    lifetime_ns: 1_000_000_000,
                    jitter_ns: 0,
                    rate: 5.0,
                })
            }),
            ("churn.rate", |p| {
                p.churn = Some(pb::ConnChurn {
                    lifetime_ns: 0,
                    jitter_ns: 0,
                    rate: f64::NAN,
                })
            }),
            ("memcache.ring", |p| {
                p.memcache = Some(pb::Memcache {
                    meta: false,
                    ring: vec!["10.0.0.1:11211".into()],
                })
            }),
            ("memcache.ring", |p| {
                p.memcache = Some(pb::Memcache {
                    meta: false,
                    ring: vec![p.target.clone(), p.target.clone()],
                })
            }),
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

    #[test]
    fn outages_round_trip_and_bad_ones_are_refused() {
        use crate::stats::{NodeStats, Outage};
        let mut n = NodeStats::new("127.0.0.1:7001");
        n.outages = vec![
            Outage {
                start: 5,
                end: Some(9),
                failed: 3,
                redirected: 2,
                rediscovered: Some(8),
                slots: vec![(0, 10), (12, 12)],
                writes: true,
            },
            Outage {
                start: 20,
                end: None,
                failed: 1,
                redirected: 0,
                rediscovered: None,
                slots: Vec::new(),
                writes: false,
            },
        ];
        n.outages_dropped = 4;
        let wire = nodes_to_pb(std::slice::from_ref(&n));
        let back = nodes_from_pb(&wire).unwrap();
        assert_eq!(back[0].outages, n.outages);
        assert_eq!(back[0].outages_dropped, 4);
        let refused = |edit: &dyn Fn(&mut pb::Outage)| {
            let mut w = wire.clone();
            edit(&mut w[0].outages[0]);
            nodes_from_pb(&w).unwrap_err().field
        };
        assert_eq!(refused(&|o| o.end = 1), "nodes.outages.end");
        assert_eq!(refused(&|o| o.slots = vec![1]), "nodes.outages.slots");
        assert_eq!(refused(&|o| o.slots = vec![5, 4]), "nodes.outages.slots");
        assert_eq!(
            refused(&|o| o.slots = vec![0, 5, 5, 6]),
            "nodes.outages.slots"
        );
        assert_eq!(
            refused(&|o| o.slots = vec![0, 16_384]),
            "nodes.outages.slots"
        );
    }
}
