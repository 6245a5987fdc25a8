//! The engine in process: one shard against the built-in sink on loopback, its counts
//! checked against each other and against the sink's own `INFO commandstats`; and
//! (`agent`) the agent against a scripted coordinator that sends nonsense plans.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agent;

use crest_engine::shard::{self, Load, ShardClass, ShardConfig, ShardEvent};
use crest_model::plan::Pacer;
use crest_model::schedule::{Arrival, Profile, Schedule};
use crest_model::shapes::{KeyDist, KeySpace, ValueSizes};
use crest_model::stats::{ErrorCounts, Stats};
use crest_model::workload::{CmdDef, Workload};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

const RATE: f64 = 2_000.0;
const RUN: Duration = Duration::from_secs(1);
const INTERVAL: Duration = Duration::from_millis(250);

fn set_get() -> Arc<Workload> {
    let cmds = ["SET", "GET"]
        .map(|c| (CmdDef::parse(c, 1, None, 1).unwrap(), 1))
        .to_vec();
    let keys = KeySpace::new(1_000, "key:", KeyDist::Uniform).unwrap();
    Arc::new(Workload::new(cmds, keys, ValueSizes::Fixed(32), 1, false, None, 7).unwrap())
}

#[test]
fn an_open_loop_shard_against_the_sink_counts_every_request_exactly() {
    let t0 = Instant::now();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_sink, stopped) = tokio::sync::oneshot::channel::<()>();
    let sink = rt.spawn(crest_sink::serve(listener, async {
        let _ = stopped.await;
    }));

    let profile = Profile::constant(RATE, RUN.as_nanos() as u64).unwrap();
    let (out, mut events) = tokio::sync::mpsc::unbounded_channel();
    let cfg = ShardConfig {
        index: 0,
        global_index: 0,
        total_shards: 1,
        target: addr,
        session: Default::default(),
        tls: None,
        topology: None,
        client_name: "crest-test-0".into(),
        classes: vec![ShardClass {
            workload: set_get(),
            load: Load::Open(Schedule::new(profile, Arrival::Uniform, 0.0)),
            connections: 4,
            pipeline: 4,
        }],
        seed: 42,
        pacer: Pacer::Sleep,
        start: Instant::now() + Duration::from_millis(100),
        warmup: Duration::ZERO,
        interval: INTERVAL,
        timeout: Duration::from_secs(2),
        drain: Duration::from_secs(2),
        backlog_limit: 100_000,
        core: None,
        stop: Arc::new(AtomicBool::new(false)),
        released: Arc::new(std::sync::atomic::AtomicU32::new(0)),
        steering: Arc::default(),
        share: 1.0,
        churn: Default::default(),
        read_from: Default::default(),
        check_staleness: false,
        out,
    };
    let shard = std::thread::spawn(move || shard::run(cfg));

    let mut intervals: Vec<(u32, Stats)> = Vec::new();
    let mut finished: Option<(Stats, u64, u64, u32, ErrorCounts)> = None;
    while let Some(ev) = events.blocking_recv() {
        match ev {
            ShardEvent::Connected {
                up, want, error, ..
            } => assert_eq!((up, want, error), (4, 4, None)),
            ShardEvent::Interval {
                index, mut stats, ..
            } => intervals.push((index, stats.remove(0))),
            ShardEvent::Checkpoint { .. } => panic!("no checkpoints in an open-loop run"),
            ShardEvent::Steered { .. } => panic!("no runtime changes in this run"),
            ShardEvent::Finished {
                mut totals,
                in_flight,
                unsent,
                intervals,
                connection_errors,
                ..
            } => {
                finished = Some((
                    totals.remove(0),
                    in_flight,
                    unsent,
                    intervals,
                    connection_errors,
                ));
            }
        }
    }
    shard.join().unwrap();
    let (totals, in_flight, unsent, shipped, conn_errors) = finished.expect("Finished event");

    // Exact: uniform arrivals at 2,000 req/s for 1 s are 2,000 requests, SET:GET 1:1.
    let (set, get) = (&totals.cmds[0], &totals.cmds[1]);
    for (c, name) in [(set, "SET"), (get, "GET")] {
        assert_eq!(c.scheduled, 1_000, "{name} scheduled");
        assert_eq!(c.sent, c.scheduled, "{name} sent");
        assert_eq!(c.completed, c.scheduled, "{name} completed");
        assert_eq!(c.errors, ErrorCounts::new(), "{name} errors");
        assert_eq!(c.latency.len(), c.completed, "{name} latencies");
        assert_eq!(c.service_time.len(), c.completed, "{name} service times");
        assert_eq!(c.schedule_lag.len(), c.sent, "{name} schedule lags");
    }
    assert_eq!((in_flight, unsent), (0, 0));
    assert!(conn_errors.is_empty(), "{conn_errors:?}");

    // One interval per 250 ms, in order, adding up to the totals.
    assert_eq!(shipped as usize, intervals.len());
    let indices: Vec<u32> = intervals.iter().map(|(i, _)| *i).collect();
    assert_eq!(indices, vec![0, 1, 2, 3]);
    let mut sum = Stats::default();
    for (_, s) in &intervals {
        sum += s;
    }
    assert_eq!(sum, totals);
    // Each interval holds about its share of the schedule: the loop ships on time.
    for (i, s) in &intervals {
        let n: u64 = s.cmds.iter().map(|c| c.scheduled).sum();
        assert!((400..=600).contains(&n), "interval {i} scheduled {n}");
    }

    // The server saw exactly what the shard says it sent.
    let info = crest_testkit::commandstats(&addr.to_string());
    let calls = |cmd: &str| info.get(cmd).copied().unwrap_or(0);
    assert_eq!(calls("set"), set.completed, "{info:?}");
    assert_eq!(calls("get"), get.completed, "{info:?}");

    let _ = stop_sink.send(());
    rt.block_on(sink).unwrap().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}
