//! The coordinator driven in-process through `orchestrate::run(config, listener, shutdown)`,
//! the mini-redis seam: an in-process worker and the built-in target on loopback port 0, no
//! binaries, no signals. The report's counts are checked against the target's own
//! `INFO commandstats`, and a shutdown future stops a run cleanly.

use crate::support::commandstats;
use crest::build;
use crest::cli::{FleetArgs, LoadArgs, PaceArgs, RunArgs, TargetArgs, to_config};
use crest::config::RateArg;
use crest::orchestrate;
use std::time::{Duration, Instant};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn args(target: String, rate: f64, secs: u64) -> RunArgs {
    RunArgs {
        target: TargetArgs {
            target: Some(target),
            ..Default::default()
        },
        fleet: FleetArgs {
            threads: Some(1),
            ..Default::default()
        },
        pace: PaceArgs {
            rate: Some(RateArg::Rps(rate)),
            seed: Some(7),
            drain: Some(Duration::from_millis(500)),
            ..Default::default()
        },
        load: LoadArgs {
            duration: Some(Duration::from_secs(secs)),
            connections: Some(4),
            ..Default::default()
        },
    }
}

/// 2,200 req/s for 2 s through the seam: exactly 4,400 scheduled, sent and completed (400
/// cycles of the exact 1:10 mix), the books balance, and the sink counted every SET and GET
/// the report claims.
#[test]
fn an_in_process_run_agrees_with_the_targets_counters() {
    runtime().block_on(async {
        let sink = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = sink.local_addr().unwrap().to_string();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(crest_sink::serve(sink, async {
            let _ = stop_rx.await;
        }));
        let cfg = to_config(args(addr.clone(), 2200.0, 2)).unwrap();
        let listener = orchestrate::bind(&cfg).await.unwrap();
        let results = orchestrate::run(&cfg, listener, std::future::pending())
            .await
            .unwrap();
        assert_eq!(results.workers.len(), 1);
        assert!(!results.workers[0].lost());
        let r = build::build(&cfg, results);
        let t = &r.totals.summary;
        assert_eq!(t.scheduled, 4400);
        assert_eq!(t.sent, 4400);
        assert_eq!(t.completed, 4400);
        assert_eq!(t.errors, 0, "{:?}", t.errors_by_kind);
        assert_eq!(r.totals.in_flight + r.totals.unsent, 0);
        assert!(r.checks.intervals_match_totals, "{:?}", r.checks.problems);
        assert!(r.complete);
        assert_eq!(r.timeline.len(), 2);
        // The target's own counters, read over a plain connection.
        let stats = tokio::task::spawn_blocking(move || commandstats(&addr))
            .await
            .unwrap();
        for (cmd, name) in [("SET", "set"), ("GET", "get")] {
            let c = &r.commands[cmd];
            assert_eq!(
                stats.get(name).copied().unwrap_or(0),
                c.completed,
                "{cmd}: the sink counted {stats:?}"
            );
        }
        assert_eq!(
            r.commands["SET"].completed * 10,
            r.commands["GET"].completed
        );
        let _ = stop_tx.send(());
        server.await.unwrap().unwrap();
    });
}

/// A shutdown future that resolves mid-run ends it within a couple of seconds, not at the
/// schedule's end (60 s away), with the results collected until then: a report marked
/// interrupted and incomplete, whose timeline, workers and totals agree.
#[test]
fn shutdown_interrupts_an_in_process_run_and_keeps_what_was_collected() {
    runtime().block_on(async {
        let sink = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = sink.local_addr().unwrap().to_string();
        tokio::spawn(crest_sink::serve(sink, std::future::pending()));
        let cfg = to_config(args(addr, 500.0, 60)).unwrap();
        let listener = orchestrate::bind(&cfg).await.unwrap();
        let t0 = Instant::now();
        let res =
            orchestrate::run(&cfg, listener, tokio::time::sleep(Duration::from_secs(4))).await;
        let took = t0.elapsed();
        assert!(took < Duration::from_secs(10), "took {took:?}");
        let results = res.unwrap();
        assert!(results.interrupted);
        let r = build::build(&cfg, results);
        assert!(r.interrupted && !r.complete);
        assert_eq!(r.exit_code(), 130);
        assert!(r.duration_s < 10.0, "{}", r.duration_s);
        let t = &r.totals.summary;
        assert!(t.completed > 0, "some of the run was collected");
        let rows: u64 = r.timeline.iter().map(|p| p.scheduled).sum();
        assert_eq!(rows, t.scheduled);
        assert_eq!(r.workers[0].scheduled, t.scheduled);
        assert!(
            r.checks.problems.iter().any(|p| p.contains("interrupted")),
            "{:?}",
            r.checks.problems
        );
    });
}

/// A worker that registers with an absurd shard count is refused by the hub, naming the
/// field, instead of making the coordinator allocate for it.
#[test]
fn a_registration_with_absurd_shards_is_refused_by_name() {
    let (tx, _rx) = tokio::sync::mpsc::channel(crest::service::EVENTS);
    let hub = crest::service::Hub::new(tx, String::new());
    let reg = crest_proto::pb::Register {
        protocol_version: crest_proto::PROTOCOL_VERSION,
        name: "w".into(),
        shards: 4_000_000_000,
        ..Default::default()
    };
    let e = hub.check(&reg).unwrap_err();
    assert!(e.contains("shards"), "{e}");
    let ok = crest_proto::pb::Register { shards: 2, ..reg };
    assert_eq!(hub.check(&ok).unwrap().shards, 2);
}
