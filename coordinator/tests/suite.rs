//! `crest suite` against redis-benchmark itself: the same commands reach the server the
//! same number of times, the same keys and values are left, and the `-q` and `--csv`
//! output reads as redis-benchmark's does.

use crate::support::*;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

/// Commands the benchmark itself, the sampler or connection setup send: not the tests'.
const NOT_TESTS: [&str; 7] = [
    "config|get",
    "info",
    "echo",
    "hello",
    "client|setname",
    "keys",
    "command|docs",
];

fn test_calls(server: &Server) -> BTreeMap<String, u64> {
    server
        .commandstats()
        .into_iter()
        .filter(|(k, _)| {
            !NOT_TESTS.contains(&k.as_str()) && !k.starts_with("client") && !k.starts_with("config")
        })
        .collect()
}

/// `TITLE: 123.45 requests per second, p50=0.123 msec` → TITLE.
fn quiet_title(line: &str) -> Option<String> {
    let (title, rest) = line.rsplit_once(": ")?;
    let (rps, rest) = rest.split_once(" requests per second, p50=")?;
    let p50 = rest.strip_suffix(" msec")?;
    rps.parse::<f64>().ok()?;
    p50.parse::<f64>().ok()?;
    let decimals = |s: &str, n| s.split_once('.').is_some_and(|(_, d)| d.len() == n);
    (decimals(rps, 2) && decimals(p50, 3)).then(|| title.to_string())
}

fn redis_benchmark(args: &[&str]) -> String {
    let out = Command::new(find_on_path("redis-benchmark"))
        .args(args)
        .output()
        .expect("redis-benchmark (redis-tools) runs");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn crest_suite(dir: &TempDir, args: &[&str]) -> String {
    let mut all = vec!["suite"];
    all.extend_from_slice(args);
    let mut p = Proc::spawn(&crest_bin(), &all, dir.path(), "crest");
    let code = p.wait(Duration::from_secs(180));
    let err = read_log(dir.path(), "crest", "stderr");
    assert_eq!(code, 0, "crest {all:?}: {err}");
    read_log(dir.path(), "crest", "stdout")
}

/// The oracle: redis-benchmark -q -n 1000 -c 10 on one fresh Redis 7.0, crest suite -q
/// -n 1000 -c 10 on another. Every test command's calls are equal (lpush 2000, lrange
/// 4000, ping 2000, the rest 1000 each), the same keys are left, `key:__rand_int__` holds
/// `VXK` on both, and the 20 `-q` lines carry the same titles in the same order.
#[test]
fn the_suite_sends_what_redis_benchmark_sends() {
    let theirs = Server::start(Kind::Redis);
    let ours = Server::start(Kind::Redis);
    for s in [&theirs, &ours] {
        s.command(&[b"CONFIG", b"RESETSTAT"]);
    }
    let out = redis_benchmark(&[
        "-p",
        &theirs.port.to_string(),
        "-q",
        "-n",
        "1000",
        "-c",
        "10",
    ]);
    let their_titles: Vec<String> = out.split(['\r', '\n']).filter_map(quiet_title).collect();
    let dir = TempDir::new("suite-oracle");
    let mine = crest_suite(
        &dir,
        &[
            "-q",
            "-n",
            "1000",
            "-c",
            "10",
            "--target",
            &ours.addr(),
            "--suite",
            "redis-7.0",
        ],
    );
    let lines: Vec<&str> = mine.lines().collect();
    assert_eq!(lines.len(), 20, "{mine}");
    let my_titles: Vec<String> = lines
        .iter()
        .map(|l| quiet_title(l).unwrap_or_else(|| panic!("not a -q line: {l:?}")))
        .collect();
    assert_eq!(my_titles, their_titles);
    let calls = test_calls(&ours);
    assert_eq!(calls, test_calls(&theirs));
    assert_eq!(calls["lpush"], 2000);
    assert_eq!(calls["lrange"], 4000);
    assert_eq!(calls["ping"], 2000);
    assert_eq!(calls["mset"], 1000);
    let keys = |s: &Server| {
        let crest_resp::Frame::Array(v) = s.command(&[b"KEYS", b"*"]) else {
            panic!("KEYS");
        };
        let mut k: Vec<Vec<u8>> = v
            .into_iter()
            .map(|f| match f {
                crest_resp::Frame::Bulk(b) => b,
                other => panic!("{other:?}"),
            })
            .collect();
        k.sort();
        k
    };
    assert_eq!(keys(&ours), keys(&theirs));
    for s in [&ours, &theirs] {
        assert_eq!(
            s.command(&[b"GET", b"key:__rand_int__"]),
            crest_resp::Frame::Bulk(b"VXK".to_vec())
        );
    }
    // Popping an empty set is named.
    assert!(
        read_log(dir.path(), "crest", "stderr").contains("SPOP: 999 of 1000 replies were nil"),
        "{}",
        read_log(dir.path(), "crest", "stderr")
    );
}

/// `--csv`: redis-benchmark's header byte for byte; `-t get,lrange_300` runs GET, the
/// LPUSH LRANGE needs, and LRANGE_300, in that order; `-r` fills a keyspace of padded
/// names; `--rate` runs the open loop and the server sees every request.
#[test]
fn csv_selection_keyspace_and_the_open_loop() {
    let server = Server::start(Kind::Redis);
    let header = redis_benchmark(&[
        "-p",
        &server.port.to_string(),
        "--csv",
        "-t",
        "ping",
        "-n",
        "10",
    ]);
    let their_header = header.lines().next().unwrap();
    server.command(&[b"FLUSHALL"]);
    server.command(&[b"CONFIG", b"RESETSTAT"]);
    let dir = TempDir::new("suite-csv");
    let out = crest_suite(
        &dir,
        &[
            "--csv",
            "-t",
            "get,lrange_300",
            "-n",
            "300",
            "-c",
            "4",
            "--target",
            &server.addr(),
            "--out",
            dir.path().join("out").to_str().unwrap(),
        ],
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], their_header);
    // suite.json fits the published schema and holds each test's counts.
    let file = read_checked(&dir.path().join("out/suite.json"), "SuiteFile");
    assert_eq!(file["requests"], 300);
    assert_eq!(file["clients"], 4);
    let tests = file["tests"].as_array().unwrap();
    assert_eq!(tests.len(), 3, "{file}");
    assert!(tests.iter().all(|t| t["completed"] == 300), "{file}");
    let titles: Vec<&str> = lines[1..]
        .iter()
        .map(|l| l.split('"').nth(1).unwrap())
        .collect();
    assert_eq!(
        titles,
        [
            "GET",
            "LPUSH (needed to benchmark LRANGE)",
            "LRANGE_300 (first 300 elements)"
        ]
    );
    for l in &lines[1..] {
        assert_eq!(l.split(',').count(), 8, "{l}");
    }
    let calls = test_calls(&server);
    assert_eq!(calls.get("get"), Some(&300));
    assert_eq!(calls.get("lpush"), Some(&300));
    assert_eq!(calls.get("lrange"), Some(&300));
    assert_eq!(calls.len(), 3, "{calls:?}");

    // -r 1000: SET keys are key:<12 digits below 1000>.
    let d2 = TempDir::new("suite-r");
    crest_suite(
        &d2,
        &[
            "-q",
            "-t",
            "set",
            "-n",
            "2000",
            "-c",
            "4",
            "-r",
            "1000",
            "--target",
            &server.addr(),
        ],
    );
    let crest_resp::Frame::Array(keys) = server.command(&[b"KEYS", b"key:*"]) else {
        panic!("KEYS");
    };
    assert!(
        keys.len() > 500 && keys.len() <= 1000,
        "{} keys",
        keys.len()
    );
    for k in &keys {
        let crest_resp::Frame::Bulk(k) = k else {
            panic!()
        };
        let digits = &k[4..];
        assert_eq!(digits.len(), 12, "{}", String::from_utf8_lossy(k));
        assert!(String::from_utf8_lossy(digits).parse::<u64>().unwrap() < 1000);
    }
    // Open loop: 1,000 SETs at 1,000/s, every one at the server.
    let before = test_calls(&server).get("set").copied().unwrap_or(0);
    let d3 = TempDir::new("suite-open");
    let out = crest_suite(
        &d3,
        &[
            "-q",
            "-t",
            "set",
            "-n",
            "1000",
            "--rate",
            "1000",
            "-c",
            "4",
            "--target",
            &server.addr(),
        ],
    );
    assert!(quiet_title(out.trim()).is_some_and(|t| t == "SET"), "{out}");
    assert_eq!(test_calls(&server)["set"] - before, 1000);
}

/// Bad suite input: one line, exit 2, no load.
#[test]
fn bad_suite_input_is_one_line() {
    crest_fails(
        &["suite", "-t", "nope", "--suite", "redis-7.0"],
        "no test \"nope\"",
    );
    crest_fails(
        &["suite", "-t", "xadd", "--suite", "redis-7.0"],
        "no test \"xadd\"",
    );
    crest_fails(&["suite", "--mix", "GET=1"], "--mix: crest suite sets it");
    crest_fails(
        &["suite", "--connections", "5"],
        "--connections: crest suite sets it",
    );
    crest_fails(&["suite", "--cluster"], "--cluster: the suite's keys");
    crest_fails(&["suite", "-n", "0", "--suite", "redis-7.0"], "-n 0");
    crest_fails(&["suite", "-c", "0", "--suite", "redis-7.0"], "-c 0");
}
