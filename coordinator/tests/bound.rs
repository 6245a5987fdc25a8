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

/// Pins the calling thread to `cpu`.
fn pin_to(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET and sched_setaffinity touch only it
    // and the calling thread (pid 0).
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0,
            "pin to cpu {cpu}"
        );
    }
}

/// The spin pacer's shard on a core another busy thread also runs on: its schedule lag
/// passes the pacer's 20 µs bound, and the report says why — every interval off pace as
/// `preempted`, with the shard's preemptions and time queued for its core (the other
/// thread gets about half of it) — in the timeline, `timeline.csv`, the summary and the
/// HTML page (issue #12: "or the interval is flagged and the summary says why").
#[test]
fn a_shard_sharing_its_core_is_off_pace_and_the_report_says_why() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpu = cpus - 1;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hog = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            pin_to(cpu);
            // Bounded: at most 60 s even if the run hangs.
            let start = std::time::Instant::now();
            while !stop.load(std::sync::atomic::Ordering::Relaxed)
                && start.elapsed() < std::time::Duration::from_secs(60)
            {
                std::hint::spin_loop();
            }
        })
    };
    let dir = TempDir::new("bound-off-pace");
    let report = CrestRun::new(&dir)
        .args(&[
            "--rate",
            "2000",
            "--duration",
            "2s",
            "--interval",
            "500ms",
            "--pacer",
            "spin",
            "--cpus",
            &cpu.to_string(),
        ])
        .run(0);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    hog.join().unwrap();
    assert_eq!(f(&report["settings"], "lag_bound_us"), 20.0);
    let timeline = report["timeline"].as_array().unwrap();
    assert_eq!(timeline.len(), 4);
    for p in timeline {
        assert!(f(p, "schedule_lag_p99_us") > 20.0, "{p}");
        assert_eq!(p["off_pace"], "preempted", "{p}");
        assert!(p["preemptions"].as_u64().unwrap() >= 10, "{p}");
        // The hog holds the core about half the time: 250 ms of each 500 ms interval.
        assert!(f(p, "core_wait_ms") >= 100.0, "{p}");
        assert!(f(p, "core_wait_ms") <= 500.0, "{p}");
    }
    let off: Vec<f64> = report["checks"]["off_pace_intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(off, [0.0, 0.5, 1.0, 1.5]);
    let summary = read_log(dir.path(), "crest", "stdout");
    let line = summary
        .lines()
        .find(|l| {
            l.starts_with(
                "NOTE: schedule lag p99 passed the spin pacer's bound (20µs) in 4 of 4 interval(s)",
            )
        })
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(
        line.contains("4 preempted (the scheduler gave the shards' core to other threads")
            && line.contains("give each shard a core of its own"),
        "{line}"
    );
    let csv = std::fs::read_to_string(dir.path().join("out").join("timeline.csv")).unwrap();
    let mut rows = csv.lines();
    let header: Vec<&str> = rows.next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == "off_pace").unwrap();
    let rows: Vec<&str> = rows.collect();
    assert_eq!(rows.len(), 4);
    for row in rows {
        assert_eq!(row.split(',').nth(col), Some("preempted"), "{row}");
    }
    let html = std::fs::read_to_string(dir.path().join("out").join("report.html")).unwrap();
    assert!(
        html.contains("Schedule lag p99 passed the spin pacer's bound (20µs) in 4 of 4"),
        "the HTML page says it too"
    );
}
