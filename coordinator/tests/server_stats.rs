//! Server metrics and the truth check (issue #10, items 1 and 2): the coordinator's
//! sampler against real Redis and Valkey servers and the built-in target, checked against
//! the report's own counts and the server's `INFO commandstats` read here independently.

use crate::support::*;
use crest_report::fmt::grouped;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The server's `cmdstat_info` calls (read by a connection of the test's own, whose
/// INFO is not in its own reply).
fn info_calls(server: &Server) -> u64 {
    server.commandstats().get("info").copied().unwrap_or(0)
}

/// The per-interval rows of `report`'s server section.
fn rows(report: &Value) -> &Vec<Value> {
    report["server"]["intervals"].as_array().unwrap()
}

/// A 3 s SET:GET run at 5000/s in 200 ms intervals: the sampler's rows add up to the
/// report's counts, its CPU per op is plausible, the truth check agrees, and the server
/// counted exactly the sampler's INFO calls.
fn sampled_run_matches(kind: Kind) {
    let server = Server::start(kind);
    let dir = TempDir::new("server-stats");
    let report = CrestRun::new(&dir)
        .args(&[
            "--target",
            &server.addr(),
            "--rate",
            "5000",
            "--duration",
            "3s",
            "--interval",
            "200ms",
            "--connections",
            "8",
        ])
        .run(0);

    // The server's own latency percentiles (INFO latencystats) for both commands sent,
    // each rising from p50 to p99.9; this server started fresh, so they are this run's.
    let lat = &report["server"]["latency_percentiles_usec"];
    for cmd in ["get", "set"] {
        let p = &lat[cmd];
        let (p50, p99, p999) = (f(p, "p50"), f(p, "p99"), f(p, "p99.9"));
        assert!(p50 > 0.0 && p50 <= p99 && p99 <= p999, "{cmd}: {p}");
    }
    let s = &report["server"];
    assert_eq!(report["server_stats"], "on", "{}", report["server_stats"]);
    let version = s["version"].as_str().unwrap();
    match kind {
        Kind::Redis => assert!(version.starts_with("redis 7."), "{version}"),
        Kind::Valkey => {
            assert!(version.starts_with("valkey 8."), "{version}");
            assert!(s["valkey_version"].as_str().unwrap().starts_with("8."));
        }
    }
    assert!(s["mem_allocator"].as_str().is_some_and(|a| !a.is_empty()));
    assert!(s["io_threads"].as_u64().is_some(), "{}", s["io_threads"]);
    assert_eq!(s["baseline"], "before_load");
    // One row per timeline interval, aligned by index.
    let timeline = report["timeline"].as_array().unwrap();
    assert_eq!(rows(&report).len(), timeline.len());
    assert_eq!(timeline.len(), 15);
    let totals = &report["totals"];
    let slack = u(totals, "in_flight") + u(totals, "unsent");
    let completed = u(totals, "completed");
    let mut sum = 0;
    // Each boundary's sample is taken within a few ms of the clients' boundary; the VM
    // can make it later (the report says by how much at most), and a shard that stalls
    // moves its own requests across the boundary (its shortfall against the 1000 due).
    let late_s = f(s, "sample_late_max_us") / 1e6;
    let late = (5000.0 * late_s).ceil() as u64;
    let (mut client_sum, mut due_sum) = (0u64, 0u64);
    for (i, (row, p)) in rows(&report).iter().zip(timeline).enumerate() {
        assert_eq!(u(row, "index"), i as u64);
        assert_eq!(f(row, "t_s"), f(p, "t_s"));
        assert!(row["sampled"].as_bool().unwrap(), "row {i} missed: {row}");
        assert!(row["counter_reset"].as_array().unwrap().is_empty(), "{row}");
        // The sampler's own INFO is never in a row.
        assert!(row["commands"].get("info").is_none(), "{row}");
        let ops = u(row, "ops");
        // The row is the interval's requests give or take those of a few ms at each
        // end (100), of the samples' lateness, and of the shard's own shortfall.
        let client = (f(p, "achieved_rate") * 0.2).round() as u64;
        assert!(
            ops.abs_diff(client) <= 100 + 2 * late + client.abs_diff(1000),
            "row {i}: server {ops} vs client {client} (samples up to {late_s} s late)"
        );
        // Summed to a boundary, the two differ by that boundary's offset alone: no
        // drift, and no interval's requests in another's row.
        (sum, client_sum, due_sum) = (sum + ops, client_sum + client, due_sum + 1000);
        assert!(
            sum.abs_diff(client_sum) <= 100 + late + client_sum.abs_diff(due_sum),
            "to row {i}: server {sum} vs client {client_sum}"
        );
        let cpu = f(row, "cpu_us_per_op");
        assert!(cpu > 0.0 && cpu < 1000.0, "row {i}: {cpu} µs/op");
        assert!(u(row, "used_memory") > 0, "{row}");
        // The clients' 8 connections and the sampler's (the last row ends as the
        // connections close).
        if i + 1 < timeline.len() {
            assert!(u(row, "connected_clients") >= 9, "{row}");
        }
    }
    let drain = u(&s["drain"], "ops");
    assert_eq!(sum + drain, u(&s["total"], "ops"), "rows + drain = total");
    assert!(
        (sum + drain).abs_diff(completed) <= slack,
        "server {} vs report {completed} (in flight/unsent {slack})",
        sum + drain
    );
    assert_eq!(u(&s["total"], "ops"), 15_000);
    let cpu = f(&s["total"], "cpu_us_per_op");
    assert!(cpu > 0.0 && cpu < 1000.0, "{cpu}");
    // The truth check: exact, both commands.
    assert_eq!(
        report["checks"]["server_agrees"], true,
        "{}",
        report["checks"]
    );
    let agreement = s["agreement"].as_array().unwrap();
    assert_eq!(agreement.len(), 2);
    let stats = server.commandstats();
    for a in agreement {
        let name = a["command"].as_str().unwrap().to_ascii_lowercase();
        assert_eq!(u(a, "server"), stats[&name], "{a}");
        assert_eq!(u(a, "server"), u(a, "sent"), "{a}");
        assert_eq!(a["agrees"], true);
    }
    // Every INFO the server ran is the sampler's: the check at connect, the calls in the
    // sampled span (the baseline's and every boundary's), and the final one; and this
    // test's own `commandstats()` above.
    assert_eq!(info_calls(&server), 1 + u(s, "sampler_calls") + 1 + 1);
    assert!(
        u(s, "sampler_calls") >= 16,
        "baseline and 15 boundaries: {}",
        s["sampler_calls"]
    );
    assert!(report["complete"].as_bool().unwrap());
    // The summary says so, in the numbers the report holds.
    let out = read_log(dir.path(), "crest", "stdout");
    let set = &report["commands"]["SET"];
    let line = format!(
        "SET {} = {}",
        grouped(u(set, "sent")),
        grouped(u(set, "sent"))
    );
    assert!(
        out.contains("server agrees: ") && out.contains(&line),
        "{out}"
    );
    let server_line = out.lines().find(|l| l.starts_with("server: ")).unwrap();
    assert!(
        server_line.contains(version) && server_line.contains("µs CPU per op"),
        "{server_line}"
    );
    // timeline.csv carries the server's columns, the same numbers.
    let csv = std::fs::read_to_string(dir.path().join("out/timeline.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == "server_ops").unwrap();
    for (line, row) in lines.zip(rows(&report)) {
        let cells: Vec<&str> = line.split(',').collect();
        assert_eq!(cells.len(), header.len(), "{line}");
        assert_eq!(cells[col].parse::<u64>().unwrap(), u(row, "ops"));
    }
    let html = std::fs::read_to_string(dir.path().join("out/report.html")).unwrap();
    assert!(html.contains("Server CPU per op") && html.contains("Server memory"));
}

#[test]
fn the_sampler_matches_the_report_on_redis() {
    sampled_run_matches(Kind::Redis);
}

#[test]
fn the_sampler_matches_the_report_on_valkey() {
    sampled_run_matches(Kind::Valkey);
}

/// A second client writing to the same server during the run: the truth check fails,
/// names SET, and the report is not complete (exit code 3).
#[test]
fn a_second_client_writing_to_the_server_is_flagged() {
    let server = Server::start(Kind::Redis);
    let addr = server.addr();
    let stop = Arc::new(AtomicBool::new(false));
    let hammer = {
        let stop = stop.clone();
        let addr = addr.clone();
        std::thread::spawn(move || {
            let mut s = TcpStream::connect(&addr).unwrap();
            let mut sent = 0u64;
            let mut buf = [0u8; 4096];
            while !stop.load(Ordering::Relaxed) {
                s.write_all(b"*3\r\n$3\r\nSET\r\n$5\r\nother\r\n$1\r\nx\r\n")
                    .unwrap();
                // One +OK\r\n per SET.
                let mut got = 0;
                while got < 5 {
                    got += s.read(&mut buf[got..5]).unwrap();
                }
                sent += 1;
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            sent
        })
    };
    let dir = TempDir::new("server-stats-other");
    let report = CrestRun::new(&dir)
        .args(&[
            "--target",
            &addr,
            "--rate",
            "2000",
            "--duration",
            "2s",
            "--connections",
            "4",
        ])
        .run(3);
    stop.store(true, Ordering::Relaxed);
    let other = hammer.join().unwrap();
    assert!(other > 100, "the other client wrote {other} SETs");
    assert_eq!(report["checks"]["server_agrees"], false);
    assert_eq!(report["complete"], false);
    let problems = report["checks"]["problems"].as_array().unwrap();
    let p = problems
        .iter()
        .filter_map(Value::as_str)
        .find(|p| p.starts_with("server disagrees: "))
        .unwrap_or_else(|| panic!("{problems:?}"));
    assert!(p.contains("SET ") && p.contains("by the server vs"), "{p}");
    let set = report["server"]["agreement"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["command"] == "SET")
        .unwrap();
    assert_eq!(set["agrees"], false);
    // The difference is the other client's SETs written during the sampled span.
    let diff = set["difference"].as_i64().unwrap();
    assert!(diff > 100 && diff as u64 <= other, "{diff} of {other}");
    let get = report["server"]["agreement"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["command"] == "GET")
        .unwrap();
    assert_eq!(get["agrees"], true, "GET was crest's alone: {get}");
    let out = read_log(dir.path(), "crest", "stdout");
    assert!(out.contains("check: server disagrees: SET"), "{out}");
}

/// `--no-server-stats` (and `CREST_NO_SERVER_STATS`): no server section, not one INFO
/// (nor CONFIG) on the server.
#[test]
fn no_server_stats_sends_no_info() {
    for (kind, env) in [(Kind::Redis, false), (Kind::Valkey, true)] {
        let server = Server::start(kind);
        let dir = TempDir::new("no-server-stats");
        let mut run = CrestRun::new(&dir).args(&[
            "--target",
            &server.addr(),
            "--rate",
            "1000",
            "--duration",
            "1s",
            "--connections",
            "2",
        ]);
        run = if env {
            run.env("CREST_NO_SERVER_STATS", "true")
        } else {
            run.args(&["--no-server-stats"])
        };
        let report = run.run(0);
        assert_eq!(report["server_stats"], "off");
        assert!(report["server"].is_null(), "{}", report["server"]);
        assert!(report["checks"]["server_agrees"].is_null());
        let stats = server.commandstats();
        assert_eq!(stats.get("info"), None, "{stats:?}");
        assert!(!stats.keys().any(|k| k.starts_with("config")), "{stats:?}");
        assert_eq!(stats["get"] + stats["set"], 1000);
        let out = read_log(dir.path(), "crest", "stdout");
        assert!(!out.contains("server:"), "{out}");
    }
}

/// With a warm-up, the warm-up's requests reach the server but are in no count: the
/// baseline is the sample at the measured start, the check allows the boundary, and
/// the warm-up's own server figures are their own span.
#[test]
fn a_warm_up_is_outside_the_check() {
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("server-stats-warmup");
    let report = CrestRun::new(&dir)
        .args(&[
            "--target",
            &server.addr(),
            "--rate",
            "3000",
            "--duration",
            "2s",
            "--warmup",
            "1s",
            "--connections",
            "4",
        ])
        .run(0);
    let s = &report["server"];
    assert_eq!(s["baseline"], "measured_start");
    assert_eq!(
        report["checks"]["server_agrees"], true,
        "{}",
        s["agreement"]
    );
    let warm = u(&s["warmup"], "ops");
    assert!(warm.abs_diff(3000) <= 100, "warm-up ops {warm}");
    let stats = server.commandstats();
    let all = stats["get"] + stats["set"];
    assert_eq!(
        all,
        warm + u(&s["total"], "ops"),
        "warm-up + measured = all"
    );
    for a in s["agreement"].as_array().unwrap() {
        assert!(u(a, "allowance") > 0, "{a}");
        assert!(a["difference"].as_i64().unwrap().unsigned_abs() <= u(a, "allowance"));
    }
}

/// The built-in target answers INFO too: a run without --target is sampled and checked
/// (no CPU section there: CPU figures are null).
#[test]
fn the_builtin_target_is_sampled_and_agrees() {
    let dir = TempDir::new("server-stats-builtin");
    let report = CrestRun::new(&dir)
        .args(&["--rate", "2000", "--duration", "2s", "--connections", "4"])
        .run(0);
    let s = &report["server"];
    assert_eq!(report["server_stats"], "on");
    assert!(
        s["version"].as_str().unwrap().starts_with("crest-sink"),
        "{s}"
    );
    assert_eq!(
        report["checks"]["server_agrees"], true,
        "{}",
        s["agreement"]
    );
    assert_eq!(u(&s["total"], "ops"), 4000);
    assert!(s["total"]["cpu_us_per_op"].is_null());
    assert_eq!(rows(&report).len(), 2);
}

/// A count-bound closed loop (`--rate max --requests N`) ends inside an interval: its last
/// row ends at the final sample, the rows add up to the total, and the server agrees.
#[test]
fn a_count_bound_closed_loop_is_sampled_to_its_end() {
    let server = Server::start(Kind::Redis);
    let dir = TempDir::new("server-stats-closed");
    let report = CrestRun::new(&dir)
        .args(&[
            "--target",
            &server.addr(),
            "--rate",
            "max",
            "--requests",
            "100000",
            "--connections",
            "4",
            // Long enough that a sample delayed by the closed loop's load on 2 cores
            // (the sampler's task shares them with the shards and the server) still
            // lands before the next boundary: a 100 ms clock once skipped one in CI.
            "--interval",
            "500ms",
        ])
        .run(0);
    let s = &report["server"];
    assert_eq!(
        report["checks"]["server_agrees"], true,
        "{}",
        s["agreement"]
    );
    let rows = rows(&report);
    assert_eq!(rows.len(), report["timeline"].as_array().unwrap().len());
    assert_eq!(u(&s["total"], "ops"), 100_000);
    assert!(rows.len() >= 2, "{rows:?}");
    // The closed loop saturates both cores, so the sampler can be starved past a
    // boundary (seen in CI: the 0.5 s sample came at 0.75 s and the next ones not at
    // all); such a row says `sampled: false`, never a wrong figure. When every boundary
    // was sampled, the rows and the drain add up to the total.
    assert!(rows[0]["sampled"] == true, "{rows:?}");
    if rows.iter().all(|r| r["sampled"] == true) {
        let sum: u64 = rows.iter().map(|r| u(r, "ops")).sum();
        let drain = s["drain"].as_object().map_or(0, |_| u(&s["drain"], "ops"));
        assert_eq!(sum + drain, u(&s["total"], "ops"));
    } else {
        assert!(
            rows.iter()
                .filter(|r| r["sampled"] == false)
                .all(|r| r["ops"].is_null()),
            "an unsampled row has no figures: {rows:?}"
        );
    }
}

/// `used_memory` of `INFO memory` at `addr`.
fn used_memory(addr: &str) -> u64 {
    let Ok(crest_resp::Frame::Bulk(b)) = command(addr, &[b"INFO", b"memory"]) else {
        panic!("INFO memory");
    };
    let text = String::from_utf8_lossy(&b).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A probe that blocks (BLPOP on a list nobody pushes to) costs its own checkpoint's
/// reading and no other: the connection it held is dropped at the probe's deadline and the
/// next checkpoint opens a new one, so every checkpoint has its `INFO memory`.
#[test]
fn a_blocking_probe_costs_one_reading_not_every_later_one() {
    let server = Server::start(Kind::Redis);
    let dir = TempDir::new("checkpoint-blocking");
    let report = CrestRun::new(&dir)
        .args(&[
            "--target",
            &server.addr(),
            "--rate",
            "max",
            "--requests",
            "200",
            "--checkpoint-every",
            "100",
            "--probe",
            "BLPOP crest:never-pushed 0",
        ])
        .run(0);
    let cps = report["checkpoints"].as_array().unwrap();
    assert_eq!(cps.len(), 2, "{cps:?}");
    for c in cps {
        assert!(
            u(c, "used_memory") > 0,
            "INFO memory read at every checkpoint: {c}"
        );
        assert!(
            c["error"]
                .as_str()
                .is_some_and(|e| e.contains("no reply within")),
            "the probe's own failure is named: {c}"
        );
    }
    assert_eq!(u(&report["totals"], "completed"), 200);
}

/// A server that dies at a checkpoint (its probe is `SHUTDOWN NOSAVE`): the closed loop has
/// no connection left to send on. Past `--timeout` with none it gives up the requests it
/// has left as `timeout_unsent` (it used to wait for its 3,600 s bound), and the report
/// adds up to the 2,000 asked for and says the server stopped answering.
#[test]
fn a_server_that_dies_at_a_checkpoint_ends_the_run_with_its_books_whole() {
    let mut server = Server::start(Kind::Redis);
    let dir = TempDir::new("checkpoint-dies");
    let t0 = std::time::Instant::now();
    let report = CrestRun::new(&dir)
        .args(&[
            "--target",
            &server.addr(),
            "--rate",
            "max",
            "--requests",
            "2000",
            "--checkpoint-every",
            "500",
            "--probe",
            "SHUTDOWN NOSAVE",
            "--timeout",
            "1s",
            "--no-server-stats",
        ])
        .run(0);
    assert!(t0.elapsed() < std::time::Duration::from_secs(100));
    let t = &report["totals"];
    assert_eq!(u(t, "scheduled"), 2000, "{t}");
    assert_eq!(u(t, "completed"), 500, "{t}");
    assert_eq!(u(t, "errors"), 1500, "{t}");
    // Requests written after the release on connections that had not yet seen the server
    // close them fail as `disconnected`; the rest were never sent.
    let (unsent, dropped) = (
        u(&t["errors_by_kind"], "timeout_unsent"),
        t["errors_by_kind"]["disconnected"].as_u64().unwrap_or(0),
    );
    assert_eq!(unsent + dropped, 1500, "{t}");
    assert!(unsent > 0, "the closed loop gave up what it had left: {t}");
    assert_balanced("checkpoint-dies", &report);
    let cps = report["checkpoints"].as_array().unwrap();
    assert!(!cps.is_empty(), "{cps:?}");
    server.kill();
}

/// Checkpoints (the sorted-set study): 500 ZADDs of 1,000 sequential members, a
/// checkpoint every 100 calls. At each the load is paused with every reply in, so the
/// probe's ZCARD is exactly the members written so far, and `used_memory` is within 2% of
/// what a second server reads at the same member count, loaded here independently with
/// the same members. The coordinator's INFO and ZCARD calls stay out of the truth check.
#[test]
fn checkpoints_read_memory_at_exact_member_counts() {
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("checkpoints");
    let profile = examples_dir().join("zset-growth.toml");
    let report = CrestRun::new(&dir)
        .args(&[
            "--target",
            &server.addr(),
            "--profile",
            profile.to_str().unwrap(),
            "--batch",
            "1000",
            "--requests",
            "500",
            "--checkpoint-every",
            "100",
            "--probe",
            "ZCARD growth0",
        ])
        .run(0);
    let cps = report["checkpoints"].as_array().unwrap();
    assert_eq!(cps.len(), 5, "{cps:?}");
    assert_eq!(
        report["checks"]["server_agrees"], true,
        "{}",
        report["server"]["agreement"]
    );
    assert_eq!(
        server.commandstats().get("zcard").copied(),
        Some(5),
        "one probe a checkpoint"
    );
    // The server's total ops are the load's alone: its own counters less the
    // coordinator's 5 INFO memory and 5 ZCARD calls.
    assert_eq!(u(&report["server"]["total"], "ops"), 500);
    // Each stretch's throughput fits the checkpoints' own clock: its 100 calls took no
    // longer than the time between the two checkpoints (the pause is outside it).
    let mut prev = 0.0;
    for c in cps {
        let (at, rate) = (f(c, "at_s"), f(c, "rate"));
        assert!(
            100.0 / rate <= at - prev + 0.002,
            "{c}: 100 calls at {rate}/s after {prev}"
        );
        assert!(f(c, "paused_ms") >= 0.0, "{c}");
        prev = at;
    }
    // The same members, loaded independently into a second server.
    let other = Server::start(Kind::Valkey);
    let mut s = TcpStream::connect(other.addr()).unwrap();
    let mut next = 0u64;
    for (k, c) in cps.iter().enumerate() {
        let members = (k as u64 + 1) * 100_000;
        assert_eq!(u(c, "index"), k as u64);
        assert_eq!(u(c, "requests"), (k as u64 + 1) * 100);
        assert_eq!(c["probe"], members.to_string(), "{c}");
        assert!(c["error"].is_null(), "{c}");
        assert!(f(c, "rate") > 0.0 && f(c, "at_s") > 0.0, "{c}");
        while next < members {
            let mut cmd: Vec<Vec<u8>> = vec![b"ZADD".to_vec(), b"growth0".to_vec()];
            for n in next..next + 1000 {
                cmd.push(n.to_string().into_bytes());
                cmd.push(format!("m{n}").into_bytes());
            }
            let args: Vec<&[u8]> = cmd.iter().map(Vec::as_slice).collect();
            let mut out = Vec::new();
            crest_resp::encode_command(&mut out, &args);
            s.write_all(&out).unwrap();
            let mut line = Vec::new();
            let mut b = [0u8; 1];
            while !line.ends_with(b"\r\n") {
                s.read_exact(&mut b).unwrap();
                line.push(b[0]);
            }
            assert_eq!(line, b":1000\r\n");
            next += 1000;
        }
        let theirs = used_memory(&other.addr()) as f64;
        let ours = f(c, "used_memory");
        assert!(
            (ours - theirs).abs() <= 0.02 * theirs,
            "checkpoint {k}: used_memory {ours} vs {theirs} read independently at {members} members"
        );
    }
}

/// Checkpoint flags that cannot work: one line each, exit 2, no load.
#[test]
fn checkpoint_flags_that_cannot_work_are_one_line() {
    crest_fails(
        &[
            "run",
            "--rate",
            "1000",
            "--duration",
            "1s",
            "--checkpoint-every",
            "10",
        ],
        "--checkpoint-every \"10\": needs one class, closed loop and bounded by a request count",
    );
    crest_fails(
        &[
            "run",
            "--rate",
            "max",
            "--requests",
            "100",
            "--checkpoint-every",
            "0",
        ],
        "give 1 to the run's 100 requests",
    );
    crest_fails(
        &[
            "run",
            "--rate",
            "max",
            "--requests",
            "100000000",
            "--checkpoint-every",
            "1",
        ],
        "at most 10000 a run: give at least 10000",
    );
    crest_fails(
        &[
            "run",
            "--rate",
            "1000",
            "--duration",
            "1s",
            "--probe",
            "ZCARD x",
        ],
        "--probe \"ZCARD x\": is sent at checkpoints: give --checkpoint-every N too",
    );
}
