//! `crest search` (issue #11): the knee of a server whose cost per request is fixed
//! (`DEBUG SLEEP`), against the capacity the server itself reports; a generator-limited
//! search; bad input.

use crate::support::*;
use serde_json::Value;
use std::time::Duration;

/// The server's own `usec_per_call` of `cmd`.
fn usec_per_call(server: &Server, cmd: &str) -> f64 {
    let crest_resp::Frame::Bulk(b) = server.command(&[b"INFO", b"commandstats"]) else {
        panic!("INFO commandstats")
    };
    let text = String::from_utf8(b.to_vec()).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("cmdstat_{cmd}:")))
        .unwrap_or_else(|| panic!("no cmdstat_{cmd} in {text}"));
    line.split(',')
        .find_map(|kv| kv.strip_prefix("usec_per_call="))
        .unwrap()
        .parse()
        .unwrap()
}

fn search(dir: &TempDir, name: &str, args: &[&str]) -> (i32, Value, String) {
    let out = dir.path().join(name);
    let mut all = vec!["search"];
    all.extend_from_slice(args);
    let out_s = out.to_str().unwrap().to_string();
    all.extend_from_slice(&["--out", &out_s]);
    let mut p = Proc::spawn(&crest_bin(), &all, dir.path(), name);
    let code = p.wait(Duration::from_secs(300));
    let stdout = read_log(dir.path(), name, "stdout");
    let json = std::fs::read_to_string(out.join("search.json"))
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or(Value::Null);
    (code, json, stdout)
}

/// A server whose every request costs a fixed time (DEBUG SLEEP 0.001: its capacity C is
/// 1e6 / its own usec_per_call, measured over each search): three searches each find a
/// knee between 0.6·C and C (plus 3%, the tolerance and the capacity's drift in a search), in a bounded number of windows, and agree within
/// 5% (as shares of each search's own C). A 1 ms sleep, not 100 µs: the timer's slack (50 µs) and a VM's wake-up are a few
/// percent of it, not half, so the server's capacity holds still from window to window. Each window is a
/// run of its own with its report; the page shows the hockey stick.
#[test]
fn the_knee_of_a_fixed_cost_server_lands_below_its_capacity() {
    let server = Server::with_args(Kind::Redis, &["--enable-debug-command", "yes"]);
    let dir = TempDir::new("search-knee");
    let addr = server.addr();
    let args = [
        "--target",
        &addr,
        "--command",
        "DEBUG SLEEP 0.001",
        // The default windows (climb 2 s, bisect and confirm 5 s, tolerance 2%), as
        // bench/knee.sh runs them: shorter windows let the sleeps' jitter move the knee
        // by more than the tolerance from one search to the next.
        // The median, not p99: one stall of the VM (tens of ms) decides a 5 s window's p99
        // near capacity, and the knee would follow the stalls, not the server.
        "--slo",
        "p50<=20ms",
        "--min",
        "100",
        "--max",
        "10000",
        // The generator shares 2 cores with the server and the other tests' leftovers:
        // this test is about the server's knee (the generator's own limit has its test).
        "--lag-limit",
        "50ms",
    ];
    // Runs search `name` and checks its structure: its knee, the server's capacity over
    // that search alone (1e6 / its usec_per_call after a `CONFIG RESETSTAT`) and its
    // table; None when the search said the capacity moved while it confirmed (this VM's
    // steal comes in spells of seconds: that is the search right, naming no knee).
    let run = |name: &str| -> Option<(f64, f64, String)> {
        server.command(&[b"CONFIG", b"RESETSTAT"]);
        let (code, s, stdout) = search(&dir, name, &args);
        if code != 0
            && s["outcome"]
                .as_str()
                .is_some_and(|o| o.contains("moves more than the tolerance"))
        {
            eprintln!("search {name} found the capacity moving:\n{stdout}");
            return None;
        }
        assert_eq!(
            code,
            0,
            "{stdout}\n{}",
            read_log(dir.path(), name, "stderr")
        );
        assert!(stdout.contains("knee "), "{stdout}");
        assert_eq!(s["confirmed"], true, "{s}");
        assert_eq!(s["clients_limit"], false);
        let probes = s["probes"].as_array().unwrap();
        assert!(probes.len() <= 20, "{} windows", probes.len());
        let knee = f(&s, "knee_rps");
        let fail = f(&s, "first_fail_rps");
        assert!(
            fail > knee && (fail - knee) / knee <= 0.031,
            "bracket {knee}..{fail}"
        );
        // Phases in order, each window with its own report.
        let phases: Vec<&str> = probes
            .iter()
            .map(|p| p["phase"].as_str().unwrap())
            .collect();
        assert_eq!(phases[0], "climb");
        // A recheck runs the rate of the climb window it checks, in a full window.
        for w in probes.windows(2) {
            if w[1]["phase"] == "recheck" {
                assert_eq!(w[0]["phase"], "climb", "{s}");
                assert_eq!(w[0]["verdict"], "fail", "{s}");
                assert_eq!(w[0]["offered"], w[1]["offered"], "{s}");
                assert!(f(&w[1], "window_s") > f(&w[0], "window_s"), "{s}");
            }
        }
        assert_eq!(*phases.last().unwrap(), "confirm");
        for p in probes {
            let r = read_report(std::path::Path::new(p["report"].as_str().unwrap()));
            assert!((f(&r["totals"], "target_rate") - f(p, "offered")).abs() < 1.0);
        }
        let html = std::fs::read_to_string(dir.path().join(name).join("report.html")).unwrap();
        for series in ["p50", "p99", "p99.9", "SLO p50&lt;=20.00ms"] {
            assert!(
                html.contains(&format!("data-series=\"{series}\"")),
                "no {series} curve"
            );
        }
        let c = 1e6 / usec_per_call(&server, "debug");
        Some((knee, c, stdout))
    };
    // Three searches; two more at most over the test, each replacing a search the machine
    // disturbed: one that found the capacity moving, or (when the shares disagree) the one
    // furthest from the others' median share. In CI one search's capacity fell to 794/s
    // against 906 and 889/s in the others and its knee to 0.87 of it; in another, a
    // search's knee fell to 0.92 of a capacity within 3% of the others'. So three of at
    // most five searches must agree within 5%.
    let mut results: Vec<(f64, f64, String)> = Vec::new();
    let mut again = 0;
    let mut n = 0;
    let spread = |r: &[(f64, f64, String)]| {
        let shares = r.iter().map(|(k, c, _)| k / c);
        let lo = shares.clone().fold(f64::MAX, f64::min);
        let hi = shares.fold(0.0f64, f64::max);
        (hi - lo) / lo
    };
    loop {
        while results.len() < 3 {
            let name = format!("s{n}");
            n += 1;
            match run(&name) {
                Some(r) => results.push(r),
                None if again < 2 => again += 1,
                None => panic!("search {name}: the capacity moved, and both re-runs are spent"),
            }
        }
        if spread(&results) <= 0.05 || again >= 2 {
            break;
        }
        // The search furthest from the others' median share is run again.
        let mut shares: Vec<f64> = results.iter().map(|r| r.0 / r.1).collect();
        shares.sort_by(f64::total_cmp);
        let median = shares[1];
        let (worst, dev) = results
            .iter()
            .enumerate()
            .map(|(i, r)| (i, (r.0 / r.1 - median).abs() / median))
            .fold((0, 0.0), |a, b| if b.1 > a.1 { b } else { a });
        eprintln!(
            "search {worst}'s knee is {:.3} of its capacity {:.0}/s, {:.1}% from the median share {median:.3}; again",
            results[worst].0 / results[worst].1,
            results[worst].1,
            dev * 100.0
        );
        results.remove(worst);
        again += 1;
    }
    let knees: Vec<f64> = results.iter().map(|r| r.0).collect();
    let capacities: Vec<f64> = results.iter().map(|r| r.1).collect();
    let tables: String = results.iter().map(|r| r.2.as_str()).collect();
    eprintln!("knees {knees:?}, capacities {capacities:?}");
    // C is the server's average over its whole search (about 90 s); the knee is decided
    // in the last few windows, when the server may run a little faster than its average
    // (CI: a knee of 875/s against a C of 860/s, with 881 and 897/s in the other two
    // searches). So the ceiling is C plus 3%: the tolerance (2%) and the capacity's own
    // drift within a search. A knee past that would be a search that cannot see a queue.
    for (k, c) in knees.iter().zip(&capacities) {
        assert!(
            *k >= 0.6 * c && *k <= 1.03 * c,
            "knee {k:.0}/s outside [0.6, 1.03] × the capacity {c:.0}/s"
        );
    }
    // Agreement is judged on each knee as a share of its own search's capacity: the
    // server's capacity itself moved by 5% between searches in CI (869, 874, 913/s), and
    // the search is to follow the server, not the VM.
    let shares: Vec<f64> = knees.iter().zip(&capacities).map(|(k, c)| k / c).collect();
    assert!(
        spread(&results) <= 0.05,
        "three searches disagree: {knees:?}, {shares:?} of the server's capacity in each ({capacities:?})\n{tables}"
    );
}

/// One shard against the built-in target with a lag limit it cannot meet: the first
/// window is invalid, and the search says the clients are the limit, not a knee.
#[test]
fn a_generator_limited_search_says_the_clients_are_the_limit() {
    let dir = TempDir::new("search-clients");
    let (code, s, stdout) = search(
        &dir,
        "s",
        &[
            "--slo",
            "p99<=10ms",
            // A rate one shard keeps with free connections: its lag (tens of µs at least)
            // is over the limit whatever the machine is doing.
            "--min",
            "2000",
            "--max",
            "400000",
            "--connections",
            "50",
            "--lag-limit",
            "1us",
            "--threads",
            "1",
            "--probe-window",
            "1s",
        ],
    );
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("the clients are the limit, not the server"),
        "{stdout}"
    );
    assert!(stdout.contains("shards (now 1"), "{stdout}");
    assert_eq!(s["clients_limit"], true);
    assert!(s["knee_rps"].is_null(), "{s}");
    let probes = s["probes"].as_array().unwrap();
    assert_eq!(probes.len(), 1);
    assert_eq!(probes[0]["verdict"], "invalid");
    assert!(
        probes[0]["reason"]
            .as_str()
            .unwrap()
            .contains("over the limit 1µs"),
        "{}",
        probes[0]
    );
}

#[test]
fn bad_search_input_is_one_line_naming_the_flag() {
    crest_fails(
        &["search", "--slo", "p99<1ms"],
        "--slo \"p99<1ms\": give e.g.",
    );
    crest_fails(
        &["search", "--slo", "p99<=1ms", "--rate", "1000"],
        "--rate: crest search sets each window's rate and length",
    );
    crest_fails(
        &["search", "--slo", "p99<=1ms", "--min", "0"],
        "--min 0 --max 1000000: give 0 < min ≤ max",
    );
    crest_fails(
        &["search", "--slo", "p99<=1ms", "--window", "1ms"],
        "--window 1ms: give 500ms to 1h",
    );
}
