//! `crest run` against real memcached 1.6 servers (issue #28): the text and meta protocols
//! at pipeline 1 and 8 with the server's own `stats` equal to the report's counts (a
//! multi-get counted per key, misses as the server's), a ring of three servers with every
//! key on the one libmemcached's ketama names and a server killed mid-run counted as that
//! server's errors alone, and Redis-only settings refused before load.

use crate::support::*;
use crest_memcache::ring::Ring;
use serde_json::Value;
use std::collections::HashMap;
use std::time::Duration;

/// The counters a mix of GET, MGET (3 keys) and SET moves.
fn counters(m: &Memcached) -> HashMap<String, u64> {
    m.stats()
}

fn delta(after: &HashMap<String, u64>, before: &HashMap<String, u64>, k: &str) -> u64 {
    after.get(k).copied().unwrap_or(0) - before.get(k).copied().unwrap_or(0)
}

/// A command's (sent, completed, misses) in the report.
fn books(r: &Value, cmd: &str) -> (u64, u64, u64) {
    let c = &r["commands"][cmd];
    (u(c, "sent"), u(c, "completed"), u(c, "misses"))
}

/// One protocol and pipeline depth against one memcached: every GET and every MGET key is
/// one `cmd_get`, every SET one `cmd_set`, the server's misses are the report's, and the
/// report's own truth check agrees.
fn one_server(meta: bool, pipeline: &str) {
    let m = Memcached::start();
    let before = counters(&m);
    let dir = TempDir::new(&format!("mc-{meta}-{pipeline}"));
    let target = format!("memcache://{}", m.addr());
    let mut args = vec![
        "--target",
        &target,
        "--rate",
        "1500",
        "--duration",
        "2s",
        "--connections",
        "4",
        "--pipeline",
        pipeline,
        "--mix",
        "SET=1,GET=4,MGET=1",
        "--batch",
        "3",
        "--keys",
        "500",
    ];
    if meta {
        args.push("--meta");
    }
    let r = CrestRun::new(&dir).args(&args).run(0);
    let after = counters(&m);
    assert_eq!(
        r["protocol"],
        if meta {
            "memcache-meta"
        } else {
            "memcache-text"
        }
    );
    let (get_sent, get_done, get_miss) = books(&r, "GET");
    let (mget_sent, mget_done, mget_miss) = books(&r, "MGET");
    let (set_sent, set_done, _) = books(&r, "SET");
    assert_eq!(get_sent + mget_sent + set_sent, 3000, "every request sent");
    // Every request answered (nothing in flight at the end): the server's counts are exact.
    let cmd_get = delta(&after, &before, "cmd_get");
    let (lo, hi) = (get_done + 3 * mget_done, get_sent + 3 * mget_sent);
    assert!(
        (lo..=hi).contains(&cmd_get),
        "cmd_get {cmd_get} outside the report's [{lo}, {hi}]"
    );
    let cmd_set = delta(&after, &before, "cmd_set");
    assert!(
        (set_done..=set_sent).contains(&cmd_set),
        "cmd_set {cmd_set}"
    );
    if r["totals"]["in_flight"] == 0 && r["totals"]["errors"] == 0 {
        assert_eq!(cmd_get, lo);
        assert_eq!(cmd_set, set_done);
        // Misses: a GET's miss is one, a multi-get's each missing key.
        assert_eq!(delta(&after, &before, "get_misses"), get_miss + mget_miss);
    }
    assert!(
        get_miss > 0 && get_done > get_miss,
        "some hits, some misses"
    );
    assert_eq!(
        r["server"]["agrees"], true,
        "the truth check: {}",
        r["server"]["agreement"]
    );
}

#[test]
fn text_protocol_pipeline_1_counts_as_memcached_does() {
    one_server(false, "1");
}

#[test]
fn text_protocol_pipeline_8_counts_as_memcached_does() {
    one_server(false, "8");
}

#[test]
fn meta_protocol_pipeline_1_counts_as_memcached_does() {
    one_server(true, "1");
}

#[test]
fn meta_protocol_pipeline_8_counts_as_memcached_does() {
    one_server(true, "8");
}

/// A ring of three: the prefill writes every key once and each server holds exactly the
/// keys ketama gives it (computed here from the ring); each server's `stats` count exactly
/// the requests the report's per-server row completed; the shares of requests follow the
/// ring's shares.
#[test]
fn a_ring_places_every_key_on_its_ketama_server() {
    let servers: Vec<Memcached> = (0..3).map(|_| Memcached::start()).collect();
    let addrs: Vec<String> = servers.iter().map(Memcached::addr).collect();
    let target = format!("memcache://{}", addrs.join(","));
    let dir = TempDir::new("mc-ring");
    let keys = 3000u64;
    let r = CrestRun::new(&dir)
        .args(&[
            "--target",
            &target,
            "--rate",
            "1500",
            "--duration",
            "2s",
            "--connections",
            "2",
            "--mix",
            "GET=3,SET=1",
            "--keys",
            &keys.to_string(),
            "--prefill",
        ])
        .run(0);
    let ring = Ring::of_addrs(&addrs);
    let mut want = vec![0u64; 3];
    for k in 0..keys {
        want[ring.server_of(format!("crest:{k}").as_bytes())] += 1;
    }
    let stats: Vec<_> = servers.iter().map(Memcached::stats).collect();
    let items: Vec<u64> = stats.iter().map(|s| s["curr_items"]).collect();
    assert_eq!(items, want, "each server holds the keys ketama gives it");
    let nodes = r["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    let shares = ring.shares();
    for (i, a) in addrs.iter().enumerate() {
        let n = nodes.iter().find(|n| n["addr"] == a.as_str()).unwrap();
        // The server's own counts, less the prefill's sets (one per key it holds).
        let served = stats[i]["cmd_get"] + stats[i]["cmd_set"] - want[i];
        assert_eq!(served, u(n, "completed") + u(n, "errors"), "{a}: {n}");
        assert!(
            (f(n, "slot_share") - shares[i]).abs() < 1e-3,
            "{a}: ring share {} vs {}",
            n["slot_share"],
            shares[i]
        );
        assert!(
            (f(n, "request_share") - shares[i]).abs() < 0.06,
            "{a}: request share {} vs the ring's {}",
            n["request_share"],
            shares[i]
        );
    }
    assert_eq!(r["server"]["agrees"], true, "{}", r["server"]["agreement"]);
}

/// A server of the ring killed mid-run: its requests fail as connection errors counted on
/// its row, the other two keep their load with no error, and the books still balance.
#[test]
fn a_server_killed_mid_run_costs_only_its_own_keys() {
    let mut servers: Vec<Memcached> = (0..3).map(|_| Memcached::start()).collect();
    let addrs: Vec<String> = servers.iter().map(Memcached::addr).collect();
    let target = format!("memcache://{}", addrs.join(","));
    let dir = TempDir::new("mc-ring-kill");
    let mut p = CrestRun::new(&dir)
        .args(&[
            "--target",
            &target,
            "--rate",
            "1000",
            "--duration",
            "4s",
            "--connections",
            "2",
            "--timeout",
            "500ms",
            "--mix",
            "GET=1",
            "--keys",
            "1000",
            "--no-server-stats",
        ])
        .spawn();
    // Kill the last server once the run has sent to it (its counter moves).
    let t0 = std::time::Instant::now();
    while servers[2].stats().get("cmd_get").copied().unwrap_or(0) < 200 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "no load reached the server"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    servers[2].kill();
    assert_eq!(
        p.wait(Duration::from_secs(120)),
        0,
        "{}",
        read_log(dir.path(), "crest", "stderr")
    );
    let r = read_report(&dir.path().join("out"));
    assert_balanced("ring kill", &r);
    let nodes = r["nodes"].as_array().unwrap();
    let row = |a: &str| nodes.iter().find(|n| n["addr"] == a).unwrap().clone();
    let dead = row(&addrs[2]);
    assert!(u(&dead, "errors") > 0, "the killed server's errors: {dead}");
    for a in &addrs[..2] {
        let n = row(a);
        assert_eq!(u(&n, "errors"), 0, "{a} lost nothing: {n}");
        assert!(u(&n, "completed") > 500, "{a} kept its load: {n}");
    }
}

/// What only a Redis-protocol server has is refused before load, in one line.
#[test]
fn redis_only_settings_are_refused_for_a_memcached_target() {
    for (args, needle) in [
        (&["--mix", "HSET=1"][..], "HSET is not a memcached command"),
        (&["--db", "2"][..], "--db"),
        (&["--resp", "3"][..], "--resp"),
        (&["--cluster"][..], "--cluster"),
        (&["--key-prefix", "a b:"][..], "space"),
    ] {
        let mut all = vec![
            "run",
            "--target",
            "memcache://127.0.0.1:1",
            "--duration",
            "1s",
        ];
        all.extend_from_slice(args);
        crest_fails(&all, needle);
    }
    crest_fails(
        &[
            "run",
            "--target",
            "127.0.0.1:1",
            "--meta",
            "--duration",
            "1s",
        ],
        "memcache://",
    );
    crest_fails(
        &["suite", "--target", "memcache://127.0.0.1:1", "-n", "10"],
        "suite of Redis commands",
    );
}

/// Checkpoints of a closed-loop SET run read `stats` of the servers at each pause: the
/// items held grow by exactly the keys written between them (sequential keys, each once).
#[test]
fn checkpoints_read_the_servers_stats() {
    let a = Memcached::start();
    let b = Memcached::start();
    let target = format!("memcache://{},{}", a.addr(), b.addr());
    let dir = TempDir::new("mc-checkpoints");
    let r = CrestRun::new(&dir)
        .args(&[
            "--target",
            &target,
            "--rate",
            "max",
            "--requests",
            "3000",
            "--checkpoint-every",
            "1000",
            "--mix",
            "SET=1",
            "--key-dist",
            "sequential",
            "--keys",
            "100000",
            "--connections",
            "2",
        ])
        .run(0);
    let rows = r["checkpoints"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{rows:?}");
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(
            row["probe"],
            format!("curr_items {}", 1000 * (i + 1)),
            "{row}"
        );
        assert!(u(row, "used_memory") > 0, "{row}");
    }
    crest_fails(
        &[
            "run",
            "--target",
            &target,
            "--rate",
            "max",
            "--requests",
            "10",
            "--checkpoint-every",
            "5",
            "--probe",
            "DBSIZE",
        ],
        "a RESP command",
    );
}

/// `crest compare` of two memcached targets, each flushed (`flush_all` on every server of
/// its ring) before each of its runs.
#[test]
fn compare_flushes_every_server_of_each_ring_between_runs() {
    let (a1, a2, b) = (Memcached::start(), Memcached::start(), Memcached::start());
    let dir = TempDir::new("mc-compare");
    let out = dir.path().join("out");
    let ta = format!("a=memcache://{},{}", a1.addr(), a2.addr());
    let tb = format!("b=memcache://{}", b.addr());
    let mut p = Proc::spawn(
        &crest_bin(),
        &[
            "compare",
            "--target",
            &ta,
            "--target",
            &tb,
            "--runs",
            "2",
            "--rate",
            "500",
            "--duration",
            "1s",
            "--mix",
            "SET=1,GET=1",
            "--keys",
            "200",
            "--between",
            "flush",
            "--threads",
            "1",
            "--out",
            out.to_str().unwrap(),
        ],
        dir.path(),
        "crest",
    );
    let code = p.wait(Duration::from_secs(120));
    assert_eq!(code, 0, "{}", read_log(dir.path(), "crest", "stderr"));
    for m in [&a1, &a2, &b] {
        assert_eq!(
            m.stats()["cmd_flush"],
            2,
            "{}: one flush before each run",
            m.addr()
        );
    }
}

/// TLS to memcached (Debian's 1.6 is built with it: `-Z`): the workers' connections, the
/// probe and the sampler handshake with the run's client configuration, and the server's
/// counts (read over TLS) agree with the report's.
#[test]
fn tls_to_memcached() {
    let dir = TempDir::new("mc-tls");
    let pki = Pki::new(dir.path());
    let opts = format!(
        "ssl_chain_cert={},ssl_key={}",
        pki.server_cert.display(),
        pki.server_key.display()
    );
    let m = Memcached::with_args(&["-Z", "-o", &opts]);
    let target = format!("memcache://{}", m.addr());
    let r = CrestRun::new(&dir)
        .args(&[
            "--target",
            &target,
            "--tls",
            "--cacert",
            pki.ca.to_str().unwrap(),
            "--rate",
            "500",
            "--duration",
            "2s",
            "--connections",
            "2",
            "--mix",
            "SET=1,GET=1",
        ])
        .run(0);
    assert_eq!(u(&r["totals"], "completed"), 1000, "{}", r["totals"]);
    assert!(
        r["tls"]["version"].as_str().unwrap().starts_with("TLS"),
        "{}",
        r["tls"]
    );
    // The sampler read the server's stats over TLS too, and they agree.
    assert_eq!(r["server"]["agrees"], true, "{}", r["server"]["agreement"]);
}

/// `memcache://builtin` needs no server: the built-in target speaks memcached (text and
/// meta), and its own `stats` agree with the report family by family.
#[test]
fn the_builtin_target_speaks_memcached() {
    for meta in [false, true] {
        let dir = TempDir::new("mc-builtin");
        let mut args = vec![
            "--target",
            "memcache://builtin",
            "--rate",
            "1000",
            "--duration",
            "2s",
            "--mix",
            "SET=1,GET=4,MGET=1,DEL=1,TOUCH=1",
            "--batch",
            "3",
            "--keys",
            "300",
            "--prefill",
        ];
        if meta {
            args.push("--meta");
        }
        let r = CrestRun::new(&dir).args(&args).run(0);
        assert_eq!(r["target"], "builtin");
        assert_balanced("builtin memcached", &r);
        assert_eq!(u(&r["totals"], "errors"), 0, "{}", r["totals"]);
        assert_eq!(u(&r["totals"], "completed"), 2000);
        assert_eq!(r["server"]["agrees"], true, "{}", r["server"]["agreement"]);
        assert!(
            r["server"]["version"]
                .as_str()
                .is_some_and(|v| v.contains("crest-sink")),
            "{}",
            r["server"]["version"]
        );
    }
    crest_fails(
        &[
            "run",
            "--target",
            "memcache://builtin",
            "--tls",
            "--duration",
            "1s",
        ],
        "plaintext only",
    );
}

/// `--ttl 0:1,100s:1` over the meta protocol (and the text protocol): each store draws
/// its exptime from the table, so of 400 keys (each written twice; the last write
/// decides) memcached's own `mg <key> t` finds about half with no TTL (`t-1`) and half
/// expiring within 100 s (each share within 12 points: more than 4.5 standard deviations).
#[test]
fn a_ttl_table_sets_memcached_exptimes() {
    for meta in [true, false] {
        let m = Memcached::start();
        let dir = TempDir::new("mc-ttl");
        let target = format!("memcache://{}", m.addr());
        let mut args = vec![
            "--target",
            &target,
            "--mix",
            "SET=1",
            "--keys",
            "400",
            "--key-dist",
            "sequential",
            "--key-prefix",
            "t:",
            "--ttl",
            "0:1,100s:1",
            "--rate",
            "800",
            "--duration",
            "1s",
        ];
        if meta {
            args.push("--meta");
        }
        let r = CrestRun::new(&dir).args(&args).run(0);
        assert_eq!(books(&r, "SET").1, 800, "meta {meta}: every SET answered");
        let replies = m.meta_lines(&(0..400).map(|k| format!("mg t:{k} t")).collect::<Vec<_>>());
        let (mut none, mut within) = (0, 0);
        for (k, line) in replies.iter().enumerate() {
            match line.strip_prefix("HD t") {
                Some("-1") => none += 1,
                Some(t) if (1..=100).contains(&t.parse::<i64>().unwrap_or(0)) => within += 1,
                _ => panic!("meta {meta}: mg t:{k} t: {line:?}"),
            }
        }
        assert!(
            (none - 200_i32).abs() < 48,
            "meta {meta}: {none} of 400 without a TTL"
        );
        assert_eq!(none + within, 400);
    }
}
