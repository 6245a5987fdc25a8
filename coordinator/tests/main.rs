//! End-to-end tests: the real `crest` and `crest-worker` binaries against real Redis and
//! Valkey servers started here on free loopback ports. Every number checked against the
//! server's own `INFO commandstats`.

// Tests: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod netns;
mod support;
mod workload;

use serde_json::Value;
use std::time::{Duration, Instant};
use support::*;

/// Starts a coordinator expecting `workers` remote workers plus those workers (one core
/// each, alternating over the machine's cores), and returns them with the coordinator's port.
fn start_cluster(
    dir: &TempDir,
    target: &str,
    workers: usize,
    run_args: &[&str],
) -> (Proc, Vec<Proc>) {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let out = dir.path().join("out");
    let n = workers.to_string();
    let mut args = vec![
        "run",
        "--listen",
        &listen,
        "--workers",
        &n,
        "--wait-timeout",
        "30s",
        "--target",
        target,
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(run_args);
    let coord = Proc::spawn(&crest_bin(), &args, dir.path(), "crest");
    let cores = crest_engine::cpus::allowed();
    let url = format!("http://{listen}");
    let ws = (0..workers)
        .map(|i| {
            let cpu = cores[i % cores.len()].to_string();
            Proc::spawn(
                &worker_bin(),
                &[
                    "--coordinator",
                    &url,
                    "--cpus",
                    &cpu,
                    "--name",
                    &format!("w{i}"),
                ],
                dir.path(),
                &format!("worker{i}"),
            )
        })
        .collect();
    (coord, ws)
}

fn finish(dir: &TempDir, coord: &mut Proc, limit: Duration) -> Value {
    finish_with(dir, coord, limit, 0)
}

fn finish_with(dir: &TempDir, coord: &mut Proc, limit: Duration, want: i32) -> Value {
    let code = coord.wait(limit);
    assert_eq!(
        code,
        want,
        "crest exited {code}: {}",
        read_log(dir.path(), "crest", "stderr")
    );
    read_report(&dir.path().join("out"))
}

/// The report agrees with the server: total within 1% of R·D, SET:GET within 1% of 1:10,
/// and report counts equal server counts within the requests in flight at the end.
fn check_against_server(
    report: &Value,
    stats: &std::collections::HashMap<String, u64>,
    rate: f64,
    secs: f64,
) {
    let set_server = stats.get("set").copied().unwrap_or(0);
    let get_server = stats.get("get").copied().unwrap_or(0);
    let total_server = set_server + get_server;
    let expected = rate * secs;
    assert!(
        (total_server as f64 - expected).abs() <= 0.01 * expected,
        "server saw {total_server} SET+GET, expected {expected} ± 1%"
    );
    let ratio = set_server as f64 / get_server as f64;
    assert!(
        (ratio - 0.1).abs() <= 0.001,
        "server SET:GET = {set_server}:{get_server} = {ratio}, expected 1:10 ± 1%"
    );
    let totals = &report["totals"];
    let in_flight = u(totals, "in_flight") + u(totals, "unsent");
    for (cmd, server) in [("SET", set_server), ("GET", get_server)] {
        let c = &report["commands"][cmd];
        let answered = u(c, "completed") + u(c, "errors");
        assert!(
            answered <= server && server <= answered + in_flight,
            "{cmd}: report answered {answered} (in flight {in_flight}), server counted {server}"
        );
        assert_eq!(u(c, "errors"), 0, "{cmd} errors: {}", c["errors_by_kind"]);
    }
    assert_eq!(u(totals, "scheduled"), expected as u64, "scheduled count");
    assert!(
        report["checks"]["intervals_match_totals"]
            .as_bool()
            .unwrap(),
        "{}",
        report["checks"]
    );
    let timeline = report["timeline"].as_array().unwrap();
    assert_eq!(timeline.len(), secs as usize);
    for p in timeline {
        assert!((f(p, "target_rate") - rate).abs() < 1e-6 * rate, "{p}");
    }
}

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
        // Workers on this host share the coordinator's clock: the estimate must say so.
        assert!(f(w, "clock_offset_us").abs() < 2_000.0, "clock offset {w}");
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

/// A worker killed with SIGKILL mid-run: the run completes and the report marks it lost,
/// keeping the intervals it sent before dying.
#[test]
fn worker_killed_mid_run_is_marked_lost_and_the_run_completes() {
    let server = Server::start(Kind::Redis);
    let dir = TempDir::new("kill-worker");
    let (mut coord, mut workers) = start_cluster(
        &dir,
        &server.addr(),
        2,
        &["--rate", "2000", "--duration", "6s", "--connections", "10"],
    );
    // Wait until the run is under way (the server sees traffic), then kill one worker.
    wait_for_calls(2000, || {
        server.commandstats().get("get").copied().unwrap_or(0)
    });
    workers[1].kill();
    // Exit 3: a report was written, but it is incomplete.
    let report = finish_with(&dir, &mut coord, Duration::from_secs(60), 3);
    let ws = report["workers"].as_array().unwrap();
    let lost: Vec<&Value> = ws.iter().filter(|w| w["lost"] == true).collect();
    assert_eq!(lost.len(), 1, "{ws:?}");
    assert_eq!(lost[0]["name"], "w1");
    assert!(
        u(lost[0], "completed") > 0,
        "intervals received before the kill are kept"
    );
    assert!(lost[0]["lost_reason"].as_str().unwrap().len() > 3);
    assert!(lost[0]["in_flight"].is_null(), "unknown for a lost worker");
    let alive = ws.iter().find(|w| w["lost"] == false).unwrap();
    assert_eq!(
        u(alive, "scheduled"),
        6000,
        "the survivor ran its whole share"
    );
    assert_eq!(report["checks"]["intervals_match_totals"], false);
    let stdout = read_log(dir.path(), "crest", "stdout");
    assert!(stdout.contains("LOST"), "{stdout}");
}

fn total_calls(server: &Server) -> u64 {
    let s = server.commandstats();
    s.get("get").copied().unwrap_or(0) + s.get("set").copied().unwrap_or(0)
}

/// The coordinator killed mid-run: the workers' dead man's switch stops the load, so the
/// server's command counter stops growing within 2 s.
#[test]
fn coordinator_killed_mid_run_stops_the_load_within_two_seconds() {
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("kill-coordinator");
    let (mut coord, mut workers) = start_cluster(
        &dir,
        &server.addr(),
        1,
        &["--rate", "3000", "--duration", "30s", "--connections", "10"],
    );
    wait_for_calls(3000, || total_calls(&server));
    coord.kill();
    std::thread::sleep(Duration::from_secs(2));
    let at_2s = total_calls(&server);
    std::thread::sleep(Duration::from_secs(2));
    let at_4s = total_calls(&server);
    assert_eq!(at_2s, at_4s, "load went on after the coordinator died");
    // The worker survives and goes back to dialling.
    assert!(
        workers[0].child.try_wait().unwrap().is_none(),
        "worker exited"
    );
}

/// Coordinated omission: 5,000 req/s, 50 connections, pipeline 1, and a 0.5 s server
/// freeze (DEBUG SLEEP) mid-run. About 2,500 requests (5%) come due during the freeze and
/// wait: latency p99 ≥ 300 ms. Only the requests already on the wire saw the stall as
/// service time, so service time p99 stays under 10 ms.
#[test]
fn a_server_freeze_shows_in_latency_but_not_in_service_time() {
    let server = Server::start(Kind::Redis);
    let dir = TempDir::new("co");
    let (mut coord, _workers) = start_cluster(
        &dir,
        &server.addr(),
        1,
        &[
            "--rate",
            "5000",
            "--duration",
            "10s",
            "--connections",
            "50",
            "--pipeline",
            "1",
            "--ratio",
            "1:10",
        ],
    );
    wait_for_calls(20_000, || total_calls(&server));
    let reply = server.command(&[b"DEBUG", b"SLEEP", b"0.5"]);
    assert_eq!(reply, crest_resp::Frame::Simple(b"OK".to_vec()));
    let report = finish(&dir, &mut coord, Duration::from_secs(60));
    let t = &report["totals"];
    let latency_p99 = f(&t["latency_us"], "p99");
    let service_p99 = f(&t["service_time_us"], "p99");
    assert!(
        latency_p99 >= 300_000.0,
        "latency p99 {latency_p99} µs: the freeze was hidden"
    );
    assert!(service_p99 < 10_000.0, "service time p99 {service_p99} µs");
    // The requests that came due during the freeze were written only after it: the
    // generator's own lag shows the stall (so it is not mistaken for pacer trouble, they
    // are counted as backlogged).
    assert!(
        f(&t["schedule_lag_us"], "max") >= 300_000.0,
        "{}",
        t["schedule_lag_us"]
    );
    assert_eq!(u(t, "scheduled"), 50_000);
    assert_eq!(u(t, "errors"), 0);
    assert!(
        u(t, "backlogged") > 1_000,
        "requests due during the freeze waited: {t}"
    );
}

/// The built-in target, run on its own with `crest sink`, agrees with the report too.
#[test]
fn sink_counts_match_the_report() {
    let dir = TempDir::new("sink");
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut sink = Proc::spawn(
        &crest_bin(),
        &["sink", "--listen", &listen],
        dir.path(),
        "sink",
    );
    let t0 = Instant::now();
    while command(&listen, &[b"PING"]).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(10), "sink did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = dir.path().join("out");
    let mut run = Proc::spawn(
        &crest_bin(),
        &[
            "run",
            "--target",
            &listen,
            "--rate",
            "3000",
            "--duration",
            "2s",
            "--threads",
            "1",
            "--out",
            out.to_str().unwrap(),
        ],
        dir.path(),
        "crest",
    );
    let report = finish(&dir, &mut run, Duration::from_secs(60));
    check_against_server(&report, &commandstats(&listen), 3000.0, 2.0);
    sink.kill();
}

/// Without --target, `crest run` starts the built-in target and says so.
#[test]
fn run_without_target_uses_the_builtin_target() {
    let dir = TempDir::new("builtin");
    let out = dir.path().join("out");
    let mut run = Proc::spawn(
        &crest_bin(),
        &[
            "run",
            "--rate",
            "2000",
            "--duration",
            "2s",
            "--out",
            out.to_str().unwrap(),
        ],
        dir.path(),
        "crest",
    );
    let report = finish(&dir, &mut run, Duration::from_secs(60));
    assert_eq!(report["target"], "builtin");
    assert_eq!(report["schema_version"], 1);
    assert_eq!(u(&report["totals"], "scheduled"), 4000);
    assert_eq!(u(&report["totals"], "completed"), 4000);
    assert!(read_log(dir.path(), "crest", "stderr").contains("built-in target"));
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<svg") && html.contains(report["run_id"].as_str().unwrap()));
    assert!(
        !html.contains("<script") && !html.contains("src=\"http") && !html.contains("href=\"http"),
        "self-contained"
    );
    let csv = std::fs::read_to_string(out.join("timeline.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
}

/// 10 MB values go through the codec both ways without errors.
#[test]
fn ten_megabyte_values_work() {
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("big");
    let out = dir.path().join("out");
    let mut run = Proc::spawn(
        &crest_bin(),
        &[
            "run",
            "--target",
            &server.addr(),
            "--rate",
            "10",
            "--duration",
            "2s",
            "--ratio",
            "1:1",
            "--keys",
            "2",
            "--value-size",
            "10MB",
            "--connections",
            "2",
            "--threads",
            "1",
            "--out",
            out.to_str().unwrap(),
        ],
        dir.path(),
        "crest",
    );
    let report = finish(&dir, &mut run, Duration::from_secs(60));
    assert_eq!(
        u(&report["totals"], "completed"),
        20,
        "{}",
        report["totals"]
    );
    assert_eq!(u(&report["totals"], "errors"), 0);
    let stats = server.commandstats();
    assert_eq!(
        stats.get("set").copied().unwrap_or(0) + stats.get("get").copied().unwrap_or(0),
        20
    );
}

/// Server error replies are counted by kind and do not stop the run.
#[test]
fn error_replies_are_counted_by_kind() {
    let server = Server::start(Kind::Redis);
    // Every key the run GETs holds a list: GET answers -WRONGTYPE.
    for k in 0..10 {
        let key = format!("crest:{k}");
        server.command(&[b"RPUSH", key.as_bytes(), b"x"]);
    }
    let dir = TempDir::new("errors");
    let out = dir.path().join("out");
    let mut run = Proc::spawn(
        &crest_bin(),
        &[
            "run",
            "--target",
            &server.addr(),
            "--rate",
            "500",
            "--duration",
            "2s",
            "--ratio",
            "0:1",
            "--keys",
            "10",
            "--threads",
            "1",
            "--out",
            out.to_str().unwrap(),
        ],
        dir.path(),
        "crest",
    );
    let report = finish(&dir, &mut run, Duration::from_secs(60));
    let get = &report["commands"]["GET"];
    assert_eq!(u(get, "errors"), 1000, "{get}");
    assert_eq!(u(&get["errors_by_kind"], "WRONGTYPE"), 1000);
    assert_eq!(u(get, "completed"), 0);
    // Shown per interval too, and the intervals add up.
    let per_interval: u64 = report["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["errors_by_kind"]["WRONGTYPE"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(per_interval, 1000);
}

fn crest_fails(args: &[&str], needle: &str) {
    let dir = TempDir::new("usage");
    let mut p = Proc::spawn(&crest_bin(), args, dir.path(), "crest");
    let code = p.wait(Duration::from_secs(30));
    let err = read_log(dir.path(), "crest", "stderr");
    assert_eq!(code, 2, "{args:?} exited {code}: {err}");
    assert!(
        err.contains(needle),
        "{args:?}: stderr lacks {needle:?}: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

/// Bad input: one clear line naming what is wrong, exit code 2, never a panic.
#[test]
fn bad_input_gets_one_clear_line_and_exit_code_2() {
    crest_fails(&["run", "--ratio", "1:0:3"], "--ratio");
    crest_fails(&["run", "--rate", "-5"], "--rate");
    crest_fails(&["run", "--duration", "ten"], "--duration");
    crest_fails(&["run", "--value-size", "0"], "--value-size");
    crest_fails(&["run", "--value-size", "600MB"], "--value-size");
    crest_fails(&["run", "--keys", "0"], "--keys");
    crest_fails(&["run", "--connections", "0"], "--connections");
    crest_fails(&["run", "--target", "nonsense"], "--target");
    crest_fails(&["run", "--requests", "5"], "--requests");
    crest_fails(&["run", "--mix", "GET=1,FLY=2"], "FLY");
    crest_fails(&["run", "--key-dist", "zipf:0"], "--key-dist");
    crest_fails(&["run", "--stages", "5s:10,-1s:4"], "--stages");
    crest_fails(&["run", "--interval", "1ms"], "--interval");
    crest_fails(
        &["run", "--threads", "2", "--connections", "1"],
        "--connections",
    );
    // Nothing listens on this port: the workers cannot connect, the run stops with exit 2.
    let port = free_port().to_string();
    let target = format!("127.0.0.1:{port}");
    crest_fails(
        &["run", "--target", &target, "--duration", "2s"],
        "cannot connect",
    );
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
    let mut coord2 = Proc::spawn(
        &crest_bin(),
        &[
            "run",
            "--listen",
            &listen,
            "--workers",
            "1",
            "--wait-timeout",
            "20s",
            "--target",
            &server.addr(),
            "--rate",
            "1000",
            "--duration",
            "1s",
            "--connections",
            "4",
            "--out",
            out.to_str().unwrap(),
        ],
        dir.path(),
        "crest2",
    );
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

/// A worker frozen mid-run (SIGSTOP): the coordinator marks it lost after its silence
/// limit and finishes with the other worker instead of hanging. Thawed (SIGCONT) after the
/// run, the worker's dead man's switch stops its load at once.
#[test]
fn a_frozen_worker_is_marked_lost_and_stops_when_thawed() {
    let server = Server::start(Kind::Redis);
    let dir = TempDir::new("freeze");
    let (mut coord, mut workers) = start_cluster(
        &dir,
        &server.addr(),
        2,
        &["--rate", "2000", "--duration", "6s", "--connections", "10"],
    );
    wait_for_calls(2000, || total_calls(&server));
    let pid = workers[0].child.id() as i32;
    // SAFETY: signalling a child process we own.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let report = finish_with(&dir, &mut coord, Duration::from_secs(60), 3);
    let w0 = report["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == "w0")
        .unwrap()
        .clone();
    assert_eq!(w0["lost"], true, "{w0}");
    // Either the HTTP/2 keepalive (2 s) or the silence limit (3 s) notices first.
    let reason = w0["lost_reason"].as_str().unwrap();
    assert!(
        reason.contains("no message") || reason.contains("session"),
        "{w0}"
    );
    let w1 = report["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == "w1")
        .unwrap()
        .clone();
    assert_eq!(
        u(&w1, "scheduled"),
        6000,
        "the other worker ran its whole share"
    );
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    std::thread::sleep(Duration::from_secs(2));
    let a = total_calls(&server);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(a, total_calls(&server), "a thawed worker went on sending");
    workers[0].kill();
}

/// A frozen coordinator (SIGSTOP: its connections stay open but it says nothing): the
/// workers' dead man's switch stops the load within about a second anyway.
#[test]
fn a_frozen_coordinator_stops_the_load_too() {
    let server = Server::start(Kind::Redis);
    let dir = TempDir::new("freeze-coordinator");
    let (mut coord, _workers) = start_cluster(
        &dir,
        &server.addr(),
        1,
        &["--rate", "3000", "--duration", "30s", "--connections", "10"],
    );
    wait_for_calls(3000, || total_calls(&server));
    let pid = coord.child.id() as i32;
    // SAFETY: signalling a child process we own.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(1_500));
    let a = total_calls(&server);
    std::thread::sleep(Duration::from_secs(2));
    let b = total_calls(&server);
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    coord.kill();
    assert_eq!(a, b, "load went on while the coordinator was frozen");
}
