//! `crest capture` against Valkey (issue #27): the round trip (a server driven by a known
//! profile, captured, the captured profile run against a fresh server: the same calls
//! per command, the same plateaus, the same value sizes), a server whose ACL denies INFO
//! refused in one line, and bad flags.

use crate::support::*;
use std::time::Duration;

/// `crest capture ARGS --out PROFILE` started, `drive` run once it has its baseline
/// (800 ms later), and, once it ended (exit 0), the profile it wrote and its stderr.
fn capture_while(
    dir: &TempDir,
    profile: &std::path::Path,
    args: &[&str],
    drive: impl FnOnce(),
) -> (String, String) {
    let mut all = vec!["capture", "--out", profile.to_str().unwrap()];
    all.extend_from_slice(args);
    let mut capture = Proc::spawn(&crest_bin(), &all, dir.path(), "capture");
    std::thread::sleep(Duration::from_millis(800));
    drive();
    let code = capture.wait(Duration::from_secs(60));
    let err = read_log(dir.path(), "capture", "stderr");
    assert_eq!(code, 0, "{err}");
    (std::fs::read_to_string(profile).unwrap(), err)
}

/// `profile` run against a fresh Valkey: its GET and SET calls within 10% of `seen` (the
/// captured server's); the report and the server.
fn run_on_fresh_valkey(
    profile: &std::path::Path,
    seen: &std::collections::HashMap<String, u64>,
    text: &str,
) -> (serde_json::Value, Server) {
    let b = Server::start(Kind::Valkey);
    let out = TempDir::new("capture-replayed");
    let r = CrestRun::new(&out)
        .args(&[
            "--profile",
            profile.to_str().unwrap(),
            "--target",
            &b.addr(),
        ])
        .run(0);
    let replayed = b.commandstats();
    for cmd in ["get", "set"] {
        let (want, got) = (
            seen[cmd] as f64,
            replayed.get(cmd).copied().unwrap_or(0) as f64,
        );
        assert!(
            (got - want).abs() <= 0.1 * want,
            "{cmd}: captured server {want}, replayed {got}\n{text}"
        );
    }
    (r, b)
}

/// Valkey driven at 1,500/s then 4,000/s (SET:GET 1:4, 700-byte values) while
/// `crest capture` watches it; the profile it writes, run against a fresh server, sends
/// GET and SET within 10% of what the first server counted, holds both plateaus within
/// 10%, and writes 700-byte values. The capture's own commands stay within its budget.
#[test]
fn a_captured_profile_replays_the_servers_calls_plateaus_and_sizes() {
    let a = Server::start(Kind::Valkey);
    let dir = TempDir::new("capture-round-trip");
    let profile = dir.path().join("captured.toml");
    let (text, err) = capture_while(
        &dir,
        &profile,
        &[
            "--target",
            &a.addr(),
            "--duration",
            "11s",
            "--sample-keys",
            "300",
        ],
        || {
            let drive = TempDir::new("capture-drive");
            CrestRun::new(&drive)
                .args(&[
                    "--target",
                    &a.addr(),
                    "--stages",
                    "4s:1500, 4s:4000",
                    "--ratio",
                    "1:4",
                    "--value-size",
                    "700",
                    "--keys",
                    "2000",
                ])
                .run(0);
        },
    );
    let (r, b) = run_on_fresh_valkey(&profile, &a.commandstats(), &text);
    // The plateaus: some seconds at 1,500 and the busiest at 4,000, each within 10%.
    let mut rows: Vec<f64> = r["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| f(p, "scheduled"))
        .collect();
    let near = |x: f64, want: f64| (x - want).abs() <= 0.1 * want;
    assert!(
        rows.iter().filter(|&&x| near(x, 1500.0)).count() >= 2,
        "{rows:?}\n{text}"
    );
    rows.sort_by(|x, y| y.total_cmp(x));
    assert!(near(rows[1], 4000.0), "{rows:?}\n{text}");
    // Values as captured: every sampled string was 700 bytes.
    assert!(text.contains("values = { sizes = [[700, 1]"), "{text}");
    let key = b"cap:1";
    if let crest_resp::Frame::Integer(n) = b.command(&[b"STRLEN", key]) {
        assert!(n == 0 || n == 700, "STRLEN cap:1 = {n}");
    }
    // The capture's cost: one INFO a second and at most 100 sampling commands a second.
    let own = text
        .lines()
        .find(|l| l.starts_with("# the capture's own commands"))
        .unwrap();
    let sent: u64 = own
        .split(": ")
        .nth(1)
        .unwrap()
        .split(", ")
        .map(|kv| kv.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert!(sent <= 11 * 101 + 20, "{own}");
    assert!(err.contains("profile written to"), "{err}");
}

/// A Redis Cluster of three primaries with a replica each, driven at 1,000/s then 2,500/s
/// (SET:GET 1:4, 500-byte values, 3,000 keys) while `crest capture` watches it through one
/// node: the profile counts every node (GET and SET within 10% of the six nodes'
/// commandstats summed), its keyspace is the primaries' keys together (within 10%), the
/// keys sampled on the primaries (no probe refused); run against one fresh Valkey it
/// sends the same calls within 10%.
#[test]
fn a_cluster_is_captured_on_every_node() {
    let cluster = RedisCluster::start(Kind::Redis, 3, 1);
    let seed = cluster.nodes[0].addr();
    let dir = TempDir::new("capture-cluster");
    let profile = dir.path().join("captured.toml");
    let (text, _) = capture_while(
        &dir,
        &profile,
        &[
            "--target",
            &seed,
            "--duration",
            "12s",
            "--sample-keys",
            "300",
        ],
        || {
            let drive = TempDir::new("capture-cluster-drive");
            CrestRun::new(&drive)
                .args(&[
                    "--target",
                    &seed,
                    "--stages",
                    "3s:1000, 3s:2500",
                    "--ratio",
                    "1:4",
                    "--value-size",
                    "500",
                    "--keys",
                    "3000",
                    "--prefill",
                ])
                .run(0);
        },
    );
    assert!(
        text.contains("# cluster: 3 primaries and 3 replicas watched"),
        "{text}"
    );
    let seen = cluster.commandstats();
    let count = |cmd: &str| -> f64 {
        let class = text
            .split("\n[[class]]")
            .find(|c| c.contains(&format!("mix = {{ {cmd} = 1 }}")))
            .unwrap_or_else(|| panic!("no {cmd} class:\n{text}"));
        class
            .lines()
            .find_map(|l| l.strip_prefix(&format!("# {cmd}: ")))
            .or_else(|| {
                text.lines()
                    .find_map(|l| l.strip_prefix(&format!("# {cmd}: ")))
            })
            .and_then(|l| l.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap()
    };
    for (cmd, stat) in [("GET", "get"), ("SET", "set")] {
        let (want, got) = (seen[stat] as f64, count(cmd));
        assert!(
            (got - want).abs() <= 0.1 * want,
            "{cmd}: the nodes counted {want}, the capture {got}\n{text}"
        );
    }
    let keys: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("# keyspace: "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!((2700..=3300).contains(&keys), "{keys} keys\n{text}");
    // Sampling runs at 100 commands a second, four a key: up to the 300 asked in 12 s
    // (a busy machine gets fewer through; at least 50 are asked), every probe answered
    // (a replica would have said MOVED).
    let sampled: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("# keyspace: "))
        .and_then(|l| l.split("sampled ").nth(1))
        .and_then(|l| l.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no sample count:\n{text}"));
    assert!(sampled >= 50, "{sampled} sampled\n{text}");
    assert!(!text.contains("refused"), "{text}");
    // The prefill's SETs are in the nodes' counts and in the capture's.
    run_on_fresh_valkey(&profile, &seen, &text);
}

/// Under an LFU policy the sampled `OBJECT FREQ` counters become the class's popularity
/// table: a Valkey whose 1,000 keys were read with zipf 1.2 (the top tenth of keys takes
/// about 56% of reads) is captured with a table whose hottest tenth carries far more
/// than a tenth of the requests (at least 30%), and the profile runs.
#[test]
fn an_lfu_servers_counters_become_a_popularity_table() {
    let a = Server::with_args(
        Kind::Valkey,
        &["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lfu"],
    );
    let drive = TempDir::new("capture-lfu-drive");
    CrestRun::new(&drive)
        .args(&[
            "--target",
            &a.addr(),
            "--mix",
            "GET=1",
            "--keys",
            "1000",
            "--prefill",
            "--key-dist",
            "zipf:1.2",
            "--rate",
            "4000",
            "--duration",
            "2s",
        ])
        .run(0);
    let dir = TempDir::new("capture-lfu");
    let profile = dir.path().join("captured.toml");
    let (text, _) = capture_while(
        &dir,
        &profile,
        &[
            "--target",
            &a.addr(),
            "--duration",
            "6s",
            "--sample-keys",
            "400",
            "--sample-rate",
            "2000",
        ],
        || {
            let more = TempDir::new("capture-lfu-more");
            CrestRun::new(&more)
                .args(&[
                    "--target",
                    &a.addr(),
                    "--mix",
                    "GET=1",
                    "--keys",
                    "1000",
                    "--key-dist",
                    "zipf:1.2",
                    "--rate",
                    "500",
                    "--duration",
                    "1500ms",
                ])
                .run(0);
        },
    );
    let keys_line = text
        .lines()
        .find(|l| l.starts_with("keys = ") && l.contains("distribution = \"table\""))
        .unwrap_or_else(|| panic!("no popularity table:\n{text}"));
    assert!(text.contains("# popularity: "), "{text}");
    let rows = keys_line.split("table = [").nth(1).unwrap();
    let first: Vec<f64> = rows
        .trim_start_matches('[')
        .split(']')
        .next()
        .unwrap()
        .split(", ")
        .map(|x| x.trim().parse().unwrap())
        .collect();
    assert!((first[0] - 0.1).abs() < 0.01, "{keys_line}");
    assert!(first[1] >= 0.3, "the hottest tenth's share: {keys_line}");
    let b = Server::start(Kind::Valkey);
    let out = TempDir::new("capture-lfu-run");
    let r = CrestRun::new(&out)
        .args(&[
            "--profile",
            profile.to_str().unwrap(),
            "--target",
            &b.addr(),
        ])
        .run(0);
    assert!(u(&r["totals"], "completed") > 0, "{}", r["totals"]);
    assert!(
        r["settings"]["classes"][0]["key_distribution"]
            .as_str()
            .unwrap()
            .starts_with("table"),
        "{}",
        r["settings"]
    );
}

/// A user the server's ACL denies INFO is refused in one line naming INFO, exit 2; so
/// are a zero duration, a zero sampling rate and a ring of memcached servers.
#[test]
fn capture_refuses_a_server_it_cannot_read_and_bad_flags() {
    let s = Server::start(Kind::Valkey);
    let setuser: Vec<&[u8]> = vec![
        b"ACL", b"SETUSER", b"nosy", b"on", b">pw", b"~*", b"+@all", b"-info",
    ];
    s.command(&setuser);
    let dir = TempDir::new("capture-refused");
    let out = dir.path().join("p.toml");
    let out = out.to_str().unwrap();
    let err = crest_fails(
        &[
            "capture",
            "--target",
            &s.addr(),
            "--user",
            "nosy",
            "--password",
            "pw",
            "--duration",
            "2s",
            "--out",
            out,
        ],
        "INFO refused",
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    crest_fails(
        &[
            "capture",
            "--target",
            &s.addr(),
            "--duration",
            "0s",
            "--out",
            out,
        ],
        "--duration",
    );
    crest_fails(
        &[
            "capture",
            "--target",
            &s.addr(),
            "--duration",
            "2s",
            "--sample-rate",
            "0",
            "--out",
            out,
        ],
        "--sample-rate",
    );
    crest_fails(
        &[
            "capture",
            "--target",
            "memcache://127.0.0.1:1,127.0.0.1:2",
            "--duration",
            "2s",
            "--out",
            out,
        ],
        "crest capture watches one server",
    );
}

/// memcached driven at 800/s then 2,000/s for 4 s each (SET:GET 1:4, 300-byte values,
/// half the writes with a 100 s TTL) while `crest capture` watches it (`stats` a second, `lru_crawler
/// metadump`, `mg <key> s t`); the profile it writes, run against a fresh memcached,
/// sends gets and sets within 10% of what the first counted (its own `mg` probes left
/// out), holds the busier plateau within 10%, writes 300-byte values and a TTL table
/// with keys that have none.
#[test]
fn a_captured_memcached_profile_replays_its_calls_plateaus_sizes_and_ttls() {
    let a = Memcached::start();
    let dir = TempDir::new("capture-mc");
    let profile = dir.path().join("captured.toml");
    let target = format!("memcache://{}", a.addr());
    let (text, _) = capture_while(
        &dir,
        &profile,
        &[
            "--target",
            &target,
            "--duration",
            "11s",
            "--sample-keys",
            "300",
        ],
        || {
            let drive = TempDir::new("capture-mc-drive");
            CrestRun::new(&drive)
                .args(&[
                    "--target",
                    &target,
                    "--stages",
                    "4s:800, 4s:2000",
                    "--ratio",
                    "1:4",
                    "--value-size",
                    "300",
                    "--keys",
                    "1000",
                    "--ttl",
                    "0:1,100s:1",
                    // The capture's own `mg` probes are gets too: the drive's books would not
                    // match the server's, which is the capture's doing, not the drive's.
                    "--no-server-stats",
                ])
                .run(0);
        },
    );
    let seen = a.stats();
    assert!(text.contains("# server: memcached 1."), "{text}");
    assert!(text.contains("values = { sizes = [[300, 1]"), "{text}");
    assert!(text.contains("ttl = { table = [[0, "), "{text}");
    let b = Memcached::start();
    let out = TempDir::new("capture-mc-replayed");
    let r = CrestRun::new(&out)
        .args(&[
            "--profile",
            profile.to_str().unwrap(),
            "--target",
            &format!("memcache://{}", b.addr()),
        ])
        .run(0);
    let replayed = b.stats();
    // The first server's gets include the capture's own probes (one per sampled key).
    let probes = text
        .lines()
        .find(|l| l.starts_with("# the capture's own commands"))
        .and_then(|l| l.split("get ").nth(1))
        .and_then(|n| n.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or(0);
    for (stat, own) in [("cmd_get", probes), ("cmd_set", 0)] {
        let want = (seen[stat] - own) as f64;
        let got = replayed[stat] as f64;
        assert!(
            (got - want).abs() <= 0.1 * want,
            "{stat}: captured server {want}, replayed {got}\n{text}"
        );
    }
    let mut rows: Vec<f64> = r["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| f(p, "scheduled"))
        .collect();
    rows.sort_by(|x, y| y.total_cmp(x));
    assert!(
        (rows[1] - 2000.0).abs() <= 200.0,
        "the busier plateau: {rows:?}\n{text}"
    );
}
