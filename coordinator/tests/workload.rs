//! End-to-end tests of the workload vocabulary: rate profiles followed second by second on
//! the server, command mixes, several classes, closed loop, prefill, warm-up, bad profiles,
//! and the shipped examples — all checked against the server's own counters.

use crate::support::*;
use serde_json::Value;
use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn run_crest(dir: &TempDir, args: &[&str], want: i32) -> Value {
    CrestRun::exactly(dir, args).run(want)
}

fn calls(stats: &HashMap<String, u64>, cmd: &str) -> u64 {
    stats.get(cmd).copied().unwrap_or(0)
}

fn unix_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A ramp–hold–spike–valley profile: the report's per-second target equals the profile,
/// and the server's own per-second command counts (INFO commandstats sampled every 10 ms,
/// interpolated at the run's second boundaries) follow it within 5% per second.
#[test]
fn the_server_sees_the_profile_second_by_second() {
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("profile");
    let stages = "2s:1000->3000, 2s:3000, 1s:6000, 2s:0, 2s:2000";
    let expected = [
        1500.0, 2500.0, 3000.0, 3000.0, 6000.0, 0.0, 0.0, 2000.0, 2000.0,
    ];
    let addr = server.addr();
    let crest = CrestRun::new(&dir).args(&[
        "--target",
        &addr,
        "--stages",
        stages,
        "--ratio",
        "1:4",
        "--connections",
        "20",
    ]);
    let out = crest.out();
    let mut p = crest.spawn();
    // Sample the server's counter with wall-clock times until crest exits.
    let mut samples: Vec<(f64, u64)> = Vec::new();
    let t0 = Instant::now();
    while p.child.try_wait().unwrap().is_none() {
        assert!(t0.elapsed() < Duration::from_secs(60), "run did not end");
        // The server read its counter somewhere within the call: stamp the middle.
        let before = unix_s();
        let s = commandstats(&addr);
        let mid = (before + unix_s()) / 2.0;
        samples.push((mid, calls(&s, "get") + calls(&s, "set")));
        std::thread::sleep(Duration::from_millis(10));
    }
    let report = read_report(&out);
    let timeline = report["timeline"].as_array().unwrap();
    assert_eq!(timeline.len(), expected.len());
    for (p, want) in timeline.iter().zip(expected) {
        assert!(
            (f(p, "target_rate") - want).abs() < 1e-6,
            "target curve {p} vs {want}"
        );
        assert!(
            (u(p, "scheduled") as f64 - want).abs() <= 1.0,
            "scheduled {p} vs {want}"
        );
    }
    let started = humantime::parse_rfc3339(report["started_at"].as_str().unwrap()).unwrap();
    let start = started.duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    // The count at `t`, interpolated, and how far apart the two samples around it are.
    let at = |t: f64| -> (f64, f64) {
        let i = samples.partition_point(|s| s.0 < t);
        assert!(i > 0 && i < samples.len(), "no samples around {t}");
        let (a, b) = (samples[i - 1], samples[i]);
        let v = a.1 as f64 + (b.1 as f64 - a.1 as f64) * (t - a.0) / (b.0 - a.0);
        (v, b.0 - a.0)
    };
    for (k, want) in expected.iter().enumerate() {
        let ((end, gap_end), (begin, gap_begin)) =
            (at(start + k as f64 + 1.0), at(start + k as f64));
        let got = end - begin;
        // Interpolating across a step of the profile can be off by the step's rate times
        // half the gap between samples: 60 requests at the usual 10-20 ms; more when the
        // sampler itself was held up (2 cores, shared with the run and the server).
        let sampling = 6000.0 * (gap_end + gap_begin) / 2.0;
        assert!(
            (got - want).abs() <= 0.05 * want + sampling.max(60.0),
            "second {k}: server counted {got:.0}, profile says {want} (samples {:.0} and {:.0} ms apart)",
            gap_begin * 1e3,
            gap_end * 1e3
        );
        // Crest's own per-second achieved rate agrees with the server's count too (the SETs
        // and GETs it completed in that second, by its clock).
        let achieved = f(&timeline[k], "achieved_rate");
        assert!(
            (achieved - got).abs() <= 0.05 * got + sampling.max(60.0),
            "second {k}: report achieved {achieved:.0}/s, server counted {got:.0}"
        );
    }
}

/// The command mix holds on the server: every command's count within 1% of its weight's
/// share (the mix is exact per cycle, so only requests in flight at the end differ).
#[test]
fn the_command_mix_matches_its_weights_on_the_server() {
    let server = Server::start(Kind::Redis);
    let dir = TempDir::new("mix");
    let mix = "GET=6,SET=3,INCR=1,HSET=1,ZADD=1,LPUSH=1,SADD=1,EXISTS=1,DEL=1,MGET=1";
    let report = run_crest(
        &dir,
        &[
            "run",
            "--target",
            &server.addr(),
            "--rate",
            "3000",
            "--duration",
            "3s",
            "--mix",
            mix,
            "--keys",
            "1000",
            "--batch",
            "2",
            "--threads",
            "1",
            "--seed",
            "3",
        ],
        0,
    );
    let stats = server.commandstats();
    let total: f64 = 9000.0;
    let wsum = 17.0;
    for item in mix.split(',') {
        let (cmd, w) = item.split_once('=').unwrap();
        let want = total * w.parse::<f64>().unwrap() / wsum;
        let got = calls(&stats, &cmd.to_ascii_lowercase()) as f64;
        assert!(
            (got - want).abs() <= 0.01 * want,
            "{cmd}: server {got}, expected {want}"
        );
        let c = &report["commands"][cmd];
        assert_eq!(
            u(c, "completed") + u(c, "errors"),
            got as u64,
            "{cmd}: report vs server"
        );
    }
    // The commands share 1,000 keys, so INCR meets keys that SET filled with non-numeric
    // values (ERR) or that HSET, ZADD, LPUSH or SADD made (WRONGTYPE): it fails, and says
    // so by kind, and every failure is one of those two kinds.
    let incr = &report["commands"]["INCR"];
    let kinds = &incr["errors_by_kind"];
    let err = kinds["ERR"].as_u64().unwrap_or(0);
    let wrongtype = kinds["WRONGTYPE"].as_u64().unwrap_or(0);
    assert!(err > 0, "INCR over SET values must fail with ERR: {incr}");
    assert_eq!(err + wrongtype, u(incr, "errors"), "{kinds}");
    // The server's own books of its failures: every failed call per command
    // (commandstats' failed_calls) and every error reply by kind (errorstats) is in the
    // report, by the same kind, with the server's own first message for it.
    let cmdstats = server.info_stats("commandstats", "cmdstat_");
    let errorstats = server.info_stats("errorstats", "errorstat_");
    let mut by_kind: HashMap<String, u64> = HashMap::new();
    for item in mix.split(',') {
        let (cmd, _) = item.split_once('=').unwrap();
        let c = &report["commands"][cmd];
        let failed = cmdstats[&cmd.to_ascii_lowercase()]
            .get("failed_calls")
            .copied()
            .unwrap_or(0);
        assert_eq!(u(c, "errors"), failed, "{cmd}: report vs failed_calls");
        for (k, n) in c["errors_by_kind"].as_object().unwrap() {
            *by_kind.entry(k.clone()).or_default() += n.as_u64().unwrap();
        }
    }
    let server_kinds: HashMap<String, u64> = errorstats
        .iter()
        .map(|(k, f)| (k.clone(), f["count"]))
        .collect();
    assert_eq!(by_kind, server_kinds, "report's kinds vs INFO errorstats");
    assert_eq!(
        report["error_messages"]["ERR"],
        "ERR value is not an integer or out of range"
    );
    if wrongtype > 0 {
        assert_eq!(
            report["error_messages"]["WRONGTYPE"],
            "WRONGTYPE Operation against a key holding the wrong kind of value"
        );
    }
}

/// Two classes at once keep separate books: each class's counts and histograms hold only
/// its own requests, and the merged histogram is their exact sum.
#[test]
fn two_classes_keep_separate_results() {
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("classes");
    let profile = dir.path().join("p.toml");
    std::fs::write(
        &profile,
        r#"
duration = "3s"
seed = 5
[[class]]
name = "small"
rate = 2000
mix = { GET = 1 }
keys = { count = 100, prefix = "small:" }
values = { size = 100 }
connections = 8
prefill = true

[[class]]
name = "large"
rate = 10
mix = { GET = 1 }
keys = { count = 2, prefix = "large:" }
values = { size = "2MB" }
connections = 2
prefill = true
"#,
    )
    .unwrap();
    let report = run_crest(
        &dir,
        &[
            "run",
            "--target",
            &server.addr(),
            "--profile",
            profile.to_str().unwrap(),
            "--threads",
            "1",
        ],
        0,
    );
    let small = &report["classes"]["small"];
    let large = &report["classes"]["large"];
    assert_eq!(u(small, "scheduled"), 6000);
    assert_eq!(u(large, "scheduled"), 30);
    assert_eq!(u(small, "errors") + u(large, "errors"), 0);
    let hs = histogram(&small["histograms"]["latency"]);
    let hl = histogram(&large["histograms"]["latency"]);
    assert_eq!(hs.len(), u(small, "completed"));
    assert_eq!(hl.len(), u(large, "completed"));
    let mut sum = hs.clone();
    sum.add(&hl).unwrap();
    assert_eq!(sum, histogram(&report["totals"]["histograms"]["latency"]));
    // latency.hlog: its lines tagged with a class add up to that class's histogram, its
    // untagged lines to the totals'.
    let mut by_tag: HashMap<Option<String>, crest_model::hist::Hist> = HashMap::new();
    for (tag, _, h) in hlog(&dir.path().join("out").join("latency.hlog")) {
        crest_model::hist::add(
            by_tag
                .entry(tag)
                .or_insert_with(crest_model::hist::new_hist),
            &h,
        );
    }
    assert_eq!(by_tag[&Some("small".to_string())], hs);
    assert_eq!(by_tag[&Some("large".to_string())], hl);
    assert_eq!(by_tag[&None], sum);
    // A 2 MB reply takes longer on the wire than a 100-byte one: the classes differ.
    assert!(f(&large["service_time_us"], "p50") > f(&small["service_time_us"], "p50"));
    // Server: prefill wrote 102 keys, the run read 6030 times.
    let stats = server.commandstats();
    assert_eq!(calls(&stats, "set"), 102);
    let gets = calls(&stats, "get");
    let answered = u(&report["totals"], "completed");
    assert!(gets >= answered && gets <= answered + u(&report["totals"], "in_flight"));
}

/// Closed loop (`--rate max`): a fixed number of requests, as fast as the pipeline allows.
#[test]
fn closed_loop_sends_exactly_the_requested_count() {
    let server = Server::start(Kind::Redis);
    let dir = TempDir::new("closed");
    let report = run_crest(
        &dir,
        &[
            "run",
            "--target",
            &server.addr(),
            "--rate",
            "max",
            "--requests",
            "20000",
            "--pipeline",
            "16",
            "--connections",
            "10",
            "--ratio",
            "1:0",
            "--value-size",
            "1k",
            "--threads",
            "1",
        ],
        0,
    );
    assert_eq!(calls(&server.commandstats(), "set"), 20_000);
    assert_eq!(u(&report["totals"], "completed"), 20_000);
    assert_eq!(report["totals"]["target_rate"], "max");
    assert!(f(&report["totals"], "achieved_rate") > 1000.0);
}

/// Prefill writes every key once (GETs then all hit); warm-up load is sent but not counted.
#[test]
fn prefill_fills_the_keyspace_and_warmup_is_not_counted() {
    let server = Server::start(Kind::Redis);
    let dir = TempDir::new("prefill");
    let report = run_crest(
        &dir,
        &[
            "run",
            "--target",
            &server.addr(),
            "--rate",
            "1000",
            "--duration",
            "2s",
            "--warmup",
            "1s",
            "--ratio",
            "0:1",
            "--keys",
            "3000",
            "--prefill",
            "--threads",
            "1",
        ],
        0,
    );
    let crest_resp::Frame::Integer(n) = server.command(&[b"DBSIZE"]) else {
        panic!("DBSIZE")
    };
    assert_eq!(n, 3000);
    let crest_resp::Frame::Bulk(info) = server.command(&[b"INFO", b"stats"]) else {
        panic!("INFO")
    };
    let info = String::from_utf8_lossy(&info).into_owned();
    assert!(
        info.contains("keyspace_misses:0\r"),
        "every GET hit: {info}"
    );
    assert_eq!(
        u(&report["totals"], "scheduled"),
        2000,
        "warm-up requests are not in the books"
    );
    let gets = calls(&server.commandstats(), "get");
    assert!(
        (2900..=3001).contains(&gets),
        "server saw warm-up and measured GETs: {gets}"
    );
    assert_eq!(calls(&server.commandstats(), "set"), 3000);
}

fn bad_profile(body: &str, needle: &str) {
    let dir = TempDir::new("bad-profile");
    let p = dir.path().join("p.toml");
    std::fs::write(&p, body).unwrap();
    let err = crest_fails(&["run", "--profile", p.to_str().unwrap()], needle);
    assert_eq!(err.trim().lines().count(), 1, "{body}: one line: {err}");
}

/// Bad profiles each get one clear line naming the field, and exit code 2.
#[test]
fn bad_profiles_name_the_field_and_exit_2() {
    let class =
        |extra: &str| format!("duration = \"2s\"\n[[class]]\nname = \"c\"\nrate = 100\n{extra}\n");
    bad_profile(&class("connections = 0"), "connections");
    bad_profile(&class("keys = { count = 0 }"), "keys.count");
    bad_profile(&class("values = { size = 0 }"), "values");
    bad_profile(&class("values = { size = \"600MB\" }"), "values");
    bad_profile(&class("ratio = \"1:0:3\""), "ratio");
    bad_profile(&class("mix = { GET = 0, SET = 0 }"), "weights sum to 0");
    bad_profile(&class("mix = { FLY = 1 }"), "FLY");
    bad_profile(
        &class("keys = { count = 10, distribution = \"zipf\", exponent = 0 }"),
        "exponent",
    );
    bad_profile(&class("colour = \"red\""), "colour");
    bad_profile(
        "[[class]]\nname = \"c\"\nprofile = [ { points = [[\"0s\", 10], [\"5s\", 20], [\"3s\", 5]] } ]\n",
        "times must increase",
    );
    bad_profile(
        "[[class]]\nname = \"c\"\nprofile = [ { hold = \"-5s\", rate = 10 } ]\n",
        "hold",
    );
    bad_profile(
        "[[class]]\nname = \"c\"\nprofile = [ { hold = \"5s\", rate = -1 } ]\n",
        "rate",
    );
    bad_profile(
        "[[class]]\nname = \"c\"\nstages = \"5s:10\"\nrate = 5\n",
        "only one",
    );
    // Unbounded expansion from one line of input: refused at once, not after gigabytes.
    bad_profile(
        "[[class]]\nname = \"c\"\nrepeat = 1000000000\nprofile = [ { hold = \"1s\", rate = 10 } ]\n",
        "repeat",
    );
    // A million segments would make a plan no gRPC message carries: refused by name.
    bad_profile(
        "[[class]]\nname = \"c\"\nrepeat = 1000000\nprofile = [ { hold = \"1ms\", rate = 10 } ]\n",
        "repeat",
    );
    bad_profile(
        "[[class]]\nname = \"a\"\nrepeat = 60000\nprofile = [ { hold = \"1ms\", rate = 10 } ]\n[[class]]\nname = \"b\"\nrepeat = 60000\nprofile = [ { hold = \"1ms\", rate = 10 } ]\n",
        "120000 segments together",
    );
    bad_profile(
        "[[class]]\nname = \"c\"\nprofile = [ { sine = \"1000000s\", period = \"1ns\", min = 1, max = 2 } ]\n",
        "segments",
    );
    bad_profile(
        "[[class]]\nname = \"c\"\nprofile = [ { hold = \"1e20\", rate = 10 } ]\n",
        "hold",
    );
}

/// Every shipped example runs, scaled down, against a real server without errors.
#[test]
fn the_examples_run_against_valkey() {
    let server = Server::start(Kind::Valkey);
    let root = examples_dir();
    for (file, extra) in EXAMPLE_RUNS {
        let dir = TempDir::new("example");
        let path = root.join(file);
        let addr = server.addr();
        let mut args = vec![
            "run",
            "--target",
            &addr,
            "--profile",
            path.to_str().unwrap(),
            "--threads",
            "1",
        ];
        args.extend_from_slice(extra);
        let report = run_crest(&dir, &args, 0);
        let t = &report["totals"];
        assert!(u(t, "completed") > 0, "{file}: {t}");
        assert_eq!(u(t, "errors"), 0, "{file}: {}", t["errors_by_kind"]);
    }
    let crest_resp::Frame::Integer(members) = server.command(&[b"ZCARD", b"growth0"]) else {
        panic!("ZCARD")
    };
    assert_eq!(members, 40_000, "40 ZADDs of 1000 new members each");
}

/// 10 MB values go through the codec both ways without errors.
#[test]
fn ten_megabyte_values_work() {
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("big");
    let crest = CrestRun::new(&dir).args(&[
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
    ]);
    let mut run = crest.spawn();
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

/// `--value-content random` (and `compressible:3`): the values the server holds differ
/// from SET to SET (each starts at its own offset into a shared random buffer; a rare
/// offset shared by two keys is allowed), where fixed content stores one value everywhere.
#[test]
fn random_values_differ_per_set_on_the_server() {
    let server = Server::start(Kind::Valkey);
    let distinct = |content: &str| {
        let dir = TempDir::new("value-content");
        CrestRun::new(&dir)
            .args(&[
                "--target",
                &server.addr(),
                "--command",
                "SET __key__ __value__",
                "--keys",
                "50",
                "--key-dist",
                "sequential",
                "--key-prefix",
                &format!("{}:", content.replace(':', "")),
                "--value-size",
                "300",
                "--value-content",
                content,
                "--rate",
                "200",
                "--duration",
                "1s",
            ])
            .run(0);
        let values: std::collections::HashSet<Vec<u8>> = (0..50)
            .map(|k| {
                let key = format!("{}:{k}", content.replace(':', ""));
                match server.command(&[b"GET", key.as_bytes()]) {
                    crest_resp::Frame::Bulk(b) => {
                        assert_eq!(b.len(), 300, "{key}");
                        b
                    }
                    other => panic!("GET {key}: {other:?}"),
                }
            })
            .collect();
        values.len()
    };
    assert_eq!(distinct("fixed"), 1);
    let random = distinct("random");
    assert!(random >= 45, "{random} distinct values of 50");
    let compressible = distinct("compressible:3");
    assert!(compressible >= 45, "{compressible} distinct values of 50");
}

/// `--preset etc --value-size etc:4k`: the run follows its rate (every scheduled SET
/// reaches the server), the report names the ETC model (arrival, key and value sizes), and
/// what the server holds has ETC's sizes: of 1,000 sampled keys, the share of 0–14-byte
/// values within 8 points of the published 44.2% (5 standard deviations), none past the
/// cap, and the keys' median length the GEV's (33.9 bytes) within 2.
#[test]
fn the_etc_model_reaches_the_server() {
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("etc-model");
    let r = CrestRun::new(&dir)
        .args(&[
            "--target",
            &server.addr(),
            "--command",
            "SET __key__ __value__",
            "--keys",
            "10000000",
            "--preset",
            "etc",
            "--value-size",
            "etc:4k",
            "--rate",
            "3000",
            "--duration",
            "2s",
        ])
        .run(0);
    assert_eq!(r["arrival"], "etc");
    assert_eq!(
        r["settings"]["classes"][0]["value_sizes"], "etc:4096",
        "{}",
        r["settings"]
    );
    let totals = &r["totals"];
    let sets = server.commandstats().get("set").copied().unwrap_or(0);
    assert_eq!(sets, u(totals, "completed"), "{totals}");
    let scheduled = u(totals, "scheduled") as f64;
    assert!(
        (scheduled - 6000.0).abs() < 0.1 * 6000.0,
        "{scheduled} scheduled at 3,000/s for 2 s"
    );
    let mut cursor = b"0".to_vec();
    let mut sizes = Vec::new();
    let mut key_lens = Vec::new();
    while sizes.len() < 1000 {
        let crest_resp::Frame::Array(page) = server.command(&[b"SCAN", &cursor, b"COUNT", b"500"])
        else {
            panic!("SCAN");
        };
        let [
            crest_resp::Frame::Bulk(next),
            crest_resp::Frame::Array(keys),
        ] = page.as_slice()
        else {
            panic!("SCAN reply");
        };
        for k in keys {
            let crest_resp::Frame::Bulk(k) = k else {
                continue;
            };
            key_lens.push(k.len());
            if let crest_resp::Frame::Integer(n) = server.command(&[b"STRLEN", k]) {
                sizes.push(n as u64);
            }
        }
        cursor = next.clone();
        if cursor == b"0" {
            break;
        }
    }
    assert!(sizes.len() >= 1000, "{} keys", sizes.len());
    let small = sizes.iter().filter(|&&s| s <= 14).count() as f64 / sizes.len() as f64;
    assert!(
        (small - 0.44155).abs() < 0.08,
        "{small} of values are 0–14 bytes"
    );
    assert!(sizes.iter().all(|&s| s <= 4096));
    key_lens.sort_unstable();
    let median = key_lens[key_lens.len() / 2] as f64;
    assert!((median - 33.9).abs() <= 2.0, "median key length {median}");
}

/// `--ttl 0:1,100s:2,1h:1`: each SET draws its TTL from the table. Of 2,000 keys (each
/// written twice; the last write decides), about a quarter keep no TTL, half expire
/// within 100 s and a quarter within the hour (each share within 5 points, more than 5
/// standard deviations), and the report echoes the table.
#[test]
fn a_ttl_table_reaches_the_server() {
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("ttl-table");
    let r = CrestRun::new(&dir)
        .args(&[
            "--target",
            &server.addr(),
            "--mix",
            "SET=1",
            "--keys",
            "2000",
            "--key-dist",
            "sequential",
            "--key-prefix",
            "tt:",
            "--ttl",
            "0:1,100s:2,1h:1",
            "--rate",
            "4000",
            "--duration",
            "1s",
        ])
        .run(0);
    assert_eq!(
        r["settings"]["classes"][0]["ttl_table"], "0:1,100:2,3600:1",
        "{}",
        r["settings"]
    );
    assert!(r["settings"]["classes"][0]["ttl_s"].is_null());
    let sets = server.commandstats().get("set").copied().unwrap_or(0);
    assert_eq!(sets, u(&r["totals"], "completed"));
    let (mut none, mut short, mut long, mut missing) = (0, 0, 0, 0);
    for k in 0..2000 {
        let key = format!("tt:{k}");
        match server.command(&[b"PTTL", key.as_bytes()]) {
            crest_resp::Frame::Integer(-1) => none += 1,
            crest_resp::Frame::Integer(-2) => missing += 1,
            crest_resp::Frame::Integer(ms) if (1..=100_000).contains(&ms) => short += 1,
            crest_resp::Frame::Integer(ms) if (100_001..=3_600_000).contains(&ms) => long += 1,
            other => panic!("PTTL {key}: {other:?}"),
        }
    }
    assert_eq!(missing, 0, "every key written");
    let share = |n: i32| f64::from(n) / 2000.0;
    assert!((share(none) - 0.25).abs() < 0.05, "{none} without a TTL");
    assert!((share(short) - 0.5).abs() < 0.05, "{short} within 100 s");
    assert!((share(long) - 0.25).abs() < 0.05, "{long} within the hour");
}

/// A TTL table that may draw 0 is refused before load for EXPIRE (0 would delete the
/// key), in one line naming the flag; so are a TTL of 0 and malformed tables, on the
/// command line and in a profile.
#[test]
fn bad_ttls_are_refused_in_one_line() {
    for (ttl, needle) in [
        ("0", "a TTL of 0"),
        ("60s:x", "is not a whole number"),
        ("0:0,60:0", "the weights sum to 0"),
        ("60s,1h", "TTL:WEIGHT"),
    ] {
        let err = crest_fails(&["run", "--ttl", ttl, "--duration", "1s"], needle);
        assert_eq!(err.trim().lines().count(), 1, "--ttl {ttl}: {err}");
    }
    let err = crest_fails(
        &["run", "--mix", "SET=1,EXPIRE=1", "--ttl", "0:1,60s:1"],
        "EXPIRE takes the TTL",
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let class =
        |extra: &str| format!("duration = \"2s\"\n[[class]]\nname = \"c\"\nrate = 100\n{extra}\n");
    bad_profile(&class("ttl = { table = [] }"), "TTL table is empty");
    bad_profile(
        &class("ttl = { table = [[\"60s\"]] }"),
        "expected [TTL, WEIGHT]",
    );
    bad_profile(
        &class("ttl = { sizes = [[60, 1]] }"),
        "{ table = [[TTL, WEIGHT]",
    );
    bad_profile(
        &class("mix = { EXPIRE = 1 }\nttl = { table = [[0, 1], [60, 1]] }"),
        "EXPIRE takes the TTL",
    );
}
