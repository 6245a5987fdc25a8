//! A coordinator and several worker processes against real servers: counts that agree
//! with the server's own, tokens, and workers that serve run after run.

use crate::support::*;
use std::time::Duration;

fn two_workers_against(kind: Kind) {
    let server = Server::start(kind);
    let dir = TempDir::new("two-workers");
    let (rate, secs) = (4000.0, 4.0);
    let (mut coord, _workers) = start_cluster(
        &dir,
        &server.addr(),
        2,
        &[
            "--rate",
            "4000",
            "--duration",
            "4s",
            "--ratio",
            "1:10",
            "--keys",
            "1000",
            "--value-size",
            "1k",
            "--connections",
            "20",
        ],
    );
    let report = finish(&dir, &mut coord, Duration::from_secs(60));
    let stats = server.commandstats();
    check_against_server(&report, &stats, rate, secs);
    let workers = report["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 2);
    for w in workers {
        assert_eq!(w["lost"], false, "{w}");
        assert!(u(w, "completed") > 0);
        assert!(f(w, "rtt_us") > 0.0);
        // Workers on this host share the coordinator's clock: the estimate must say so,
        // within its own error (half the round trip a busy core can stretch) plus 2 ms.
        let bound = 2_000.0 + f(w, "rtt_us") / 2.0;
        assert!(f(w, "clock_offset_us").abs() < bound, "clock offset {w}");
    }
    // The merged latency histogram is exactly the sum of the per-worker histograms.
    let mut sum = crest_model::hist::new_hist();
    for w in workers {
        sum.add(histogram(&w["histograms"]["latency"])).unwrap();
    }
    let total = histogram(&report["totals"]["histograms"]["latency"]);
    assert_eq!(sum, total);
    assert_eq!(total.len(), u(&report["totals"], "completed"));
    // latency.hlog, read back with HdrHistogram's own log reader, adds up to the same.
    let log = std::fs::read(dir.path().join("out/latency.hlog")).unwrap();
    let mut from_log = crest_model::hist::new_hist();
    let mut entries = 0;
    for e in hdrhistogram::serialization::interval_log::IntervalLogIterator::new(&log) {
        if let Ok(hdrhistogram::serialization::interval_log::LogEntry::Interval(iv)) = e {
            use base64::Engine as _;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(iv.encoded_histogram())
                .unwrap();
            from_log
                .add(crest_model::hist::decode(&bytes).unwrap())
                .unwrap();
            entries += 1;
        }
    }
    assert_eq!(entries, secs as usize, "one interval line per second");
    assert_eq!(from_log, total);
    // Each worker carried its share: two one-shard workers, half each.
    let a = u(&workers[0], "scheduled") as f64;
    let b = u(&workers[1], "scheduled") as f64;
    assert_eq!(a + b, rate * secs);
    assert!((a - b).abs() <= 1.0, "split {a} vs {b}");
}

#[test]
fn two_workers_against_redis_match_server_commandstats() {
    two_workers_against(Kind::Redis);
}

#[test]
fn two_workers_against_valkey_match_server_commandstats() {
    two_workers_against(Kind::Valkey);
}

/// A worker with the wrong token is refused with a message naming the token; it exits 2
/// and the coordinator says why it waited in vain.
#[test]
fn wrong_token_is_refused() {
    let dir = TempDir::new("token");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut coord = Proc::spawn(
        &crest_bin(),
        &[
            "run",
            "--listen",
            &listen,
            "--workers",
            "1",
            "--wait-timeout",
            "3s",
            "--token",
            "right",
            "--duration",
            "1s",
        ],
        dir.path(),
        "crest",
    );
    let mut w = Proc::spawn(
        &worker_bin(),
        &[
            "--coordinator",
            &format!("http://{listen}"),
            "--token",
            "wrong",
        ],
        dir.path(),
        "worker",
    );
    assert_eq!(w.wait(Duration::from_secs(20)), 2);
    assert!(read_log(dir.path(), "worker", "stderr").contains("token"));
    assert_eq!(coord.wait(Duration::from_secs(20)), 2);
    let err = read_log(dir.path(), "crest", "stderr");
    assert!(err.contains("0 arrived") && err.contains("token"), "{err}");
}

/// Workers go back to idle after a run and serve the next `crest run` without a restart.
#[test]
fn workers_serve_a_second_run_without_restart() {
    let server = Server::start(Kind::Redis);
    let dir = TempDir::new("second-run");
    let (mut coord, workers) = start_cluster(
        &dir,
        &server.addr(),
        1,
        &["--rate", "1000", "--duration", "1s", "--connections", "4"],
    );
    finish(&dir, &mut coord, Duration::from_secs(60));
    // Same listen address: the worker redials it with backoff.
    let listen = {
        let err = read_log(dir.path(), "crest", "stderr");
        let at = err.find("listening on ").expect("listen line");
        err[at + 13..].split(';').next().unwrap().to_string()
    };
    let out = dir.path().join("out2");
    let mut args = coordinator_args(&listen, 1, "20s", &server.addr(), &out);
    args.extend(["--rate", "1000", "--duration", "1s", "--connections", "4"].map(String::from));
    let mut coord2 = Proc::spawn(&crest_bin(), &strs(&args), dir.path(), "crest2");
    assert_eq!(
        coord2.wait(Duration::from_secs(60)),
        0,
        "{}",
        read_log(dir.path(), "crest2", "stderr")
    );
    let report = read_report(&out);
    assert_eq!(u(&report["totals"], "completed"), 1000);
    drop(workers);
}
