//! What limited each interval (issue #12, item 2): the shards' own CPU time and busy share
//! per interval, and the attribution — requests waiting for a free connection are the
//! connections' limit — in the timeline, `timeline.csv` and the summary. (That a saturated
//! shard is the generator's limit is a unit test of `TimelinePoint::of`: on this 2-core
//! machine the server saturates before one shard does.)

use crate::support::*;

fn f(v: &serde_json::Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("{k} in {v}"))
}

/// A light run: every interval has the shards' CPU time and no shard near saturation; the
/// totals' CPU is the intervals' sum and the summary prints it per request. (What limited
/// an interval is not asserted: on a shared 2-core machine the pacer may be descheduled.)
#[test]
fn a_light_run_reports_the_generators_cpu_and_no_limit() {
    let dir = TempDir::new("bound-light");
    let report = CrestRun::new(&dir)
        .args(&["--rate", "2000", "--duration", "3s", "--interval", "500ms"])
        .run(0);
    let timeline = report["timeline"].as_array().unwrap();
    let mut sum = 0.0;
    for p in timeline {
        assert!(f(p, "busiest_shard") < 0.9, "{p}");
        sum += f(p, "generator_cpu_s");
    }
    assert!(sum > 0.0, "the shards used some CPU");
    let total = f(&report["totals"], "generator_cpu_s");
    assert!((total - sum).abs() < 0.01, "totals {total} vs rows {sum}");
    let summary = read_log(dir.path(), "crest", "stdout");
    assert!(
        summary.contains("generator: ") && summary.contains("CPU s per million requests"),
        "{summary}"
    );
    let csv = std::fs::read_to_string(dir.path().join("out").join("timeline.csv")).unwrap();
    assert!(
        csv.lines()
            .next()
            .unwrap()
            .contains(",generator_cpu_s,busiest_shard,bound,"),
        "{csv}"
    );
}

/// One connection, one request at a time, a server that takes 2 ms per request, three
/// times the rate it can answer: the requests wait for the connection while the shard is
/// idle, so the intervals are the connections' limit, and the summary says what to add.
#[test]
fn requests_waiting_for_a_connection_are_the_connections_limit() {
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("bound-connections");
    let report = CrestRun::new(&dir)
        .args(&[
            "--target",
            &server.addr(),
            "--command",
            "DEBUG SLEEP 0.002",
            "--rate",
            "1000",
            "--duration",
            "2s",
            "--connections",
            "1",
            "--timeout",
            "30s",
            "--drain",
            "0s",
        ])
        .run(0);
    let timeline = report["timeline"].as_array().unwrap();
    let bound: Vec<_> = timeline
        .iter()
        .map(|p| p["bound"].as_str().unwrap())
        .collect();
    assert!(bound.contains(&"connections"), "{bound:?}");
    assert!(!bound.contains(&"generator"), "{bound:?}");
    let summary = read_log(dir.path(), "crest", "stdout");
    assert!(
        summary.contains("requests waited for a free connection in")
            && summary.contains("more --connections or --pipeline"),
        "{summary}"
    );
}
