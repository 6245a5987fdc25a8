//! Reads from replicas (issue #29, item 2) against real Valkey: `--read-from` in a cluster
//! (READONLY, reads routed to each slot's replica, writes to its primary) and for a
//! standalone primary (replicas found in its `INFO replication` or named with
//! `--replica`), checked against each node's own `INFO commandstats`; and the refusals.

use crate::support::*;
use serde_json::Value;

/// `ROLE`'s first word of `s`: `master` or `slave`.
fn role(s: &Server) -> String {
    match s.command(&[b"ROLE"]) {
        crest_resp::Frame::Array(a) => match &a[0] {
            crest_resp::Frame::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

/// `cmdstat_<name>` calls of `s` (0 when it never ran one).
fn calls(s: &Server, name: &str) -> u64 {
    s.commandstats().get(name).copied().unwrap_or(0)
}

/// The report's rows for command `name`.
fn command<'a>(report: &'a Value, name: &str) -> &'a Value {
    &report["commands"][name]
}

/// Every GET the report counts landed on a replica (the replicas' `cmdstat_get` sum is
/// the report's, the primaries' is 0), every SET on a primary (no redirect, the primaries'
/// `cmdstat_set` sum is the report's), and the node rows say the same with `reads`.
fn assert_reads_on_replicas(report: &Value, primaries: &[&Server], replicas: &[&Server]) {
    let get = command(report, "GET");
    let set = command(report, "SET");
    assert_eq!(u(get, "errors"), 0, "{get}");
    assert_eq!(u(set, "errors"), 0, "{set}");
    assert!(u(get, "completed") > 1000, "{get}");
    let replica_gets: u64 = replicas.iter().map(|s| calls(s, "get")).sum();
    let primary_gets: u64 = primaries.iter().map(|s| calls(s, "get")).sum();
    let primary_sets: u64 = primaries.iter().map(|s| calls(s, "set")).sum();
    assert_eq!(primary_gets, 0, "no GET on a primary");
    assert_eq!(replica_gets, u(get, "completed"), "every GET on a replica");
    assert_eq!(primary_sets, u(set, "completed"), "every SET on a primary");
    // Redirects are left out of the report when there were none.
    let moved = &report["totals"]["redirects"]["moved"];
    assert_eq!(moved.as_u64().unwrap_or(0), 0, "{moved}");
    assert!(
        replicas.iter().all(|s| calls(s, "get") > 0),
        "every replica read from"
    );
    let nodes = report["nodes"].as_array().unwrap();
    let rows = |primary: bool| nodes.iter().filter(move |n| n["primary"] == primary);
    assert_eq!(rows(false).count(), replicas.len(), "{nodes:?}");
    assert_eq!(
        rows(false).map(|n| u(n, "reads")).sum::<u64>(),
        u(get, "completed"),
        "{nodes:?}"
    );
    assert_eq!(
        rows(true).map(|n| u(n, "reads")).sum::<u64>(),
        0,
        "{nodes:?}"
    );
    assert_eq!(
        rows(false).map(|n| u(n, "completed")).sum::<u64>(),
        u(get, "completed"),
        "replicas answered nothing but reads: {nodes:?}"
    );
}

/// Waits (at most 30 s) until `CLUSTER SLOTS` lists a replica for every primary: Valkey
/// leaves out a replica that has replicated nothing yet, so each primary gets a write.
fn wait_replicas_listed(cluster: &RedisCluster) {
    for n in cluster.nodes.iter().filter(|s| role(s) == "master") {
        let written = (0..10_000).any(|i| {
            let key = format!("seed-{i}");
            n.command(&[b"SET", key.as_bytes(), b"1"]) == crest_resp::Frame::Simple(b"OK".to_vec())
        });
        assert!(written, "no key of {} found", n.addr());
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let t = crest_model::topology::Topology::from_cluster_slots(
            &cluster.nodes[0].command(&[b"CLUSTER", b"SLOTS"]),
            "127.0.0.1",
        )
        .unwrap();
        if t.primaries().iter().all(|&p| !t.replicas_of(p).is_empty()) {
            // The seed writes are not the run's.
            for n in &cluster.nodes {
                n.command(&[b"CONFIG", b"RESETSTAT"]);
            }
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "replicas never listed: {t:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A cluster of 3 primaries with a replica each and `--read-from replicas`: every GET on
/// a replica, every SET on a primary, nothing redirected, the books balanced.
#[test]
fn a_cluster_reads_from_its_replicas_and_writes_to_its_primaries() {
    let cluster = RedisCluster::start(Kind::Valkey, 3, 1);
    wait_replicas_listed(&cluster);
    let dir = TempDir::new("replica-reads");
    let report = CrestRun::new(&dir)
        .args(&[
            "--target",
            &cluster.nodes[0].addr(),
            "--rate",
            "2000",
            "--duration",
            "3s",
            "--ratio",
            "1:10",
            "--keys",
            "5000",
            "--read-from",
            "replicas",
        ])
        .run(0);
    assert_balanced("replica reads", &report);
    assert_eq!(report["read_from"], "replicas");
    assert_eq!(report["cluster"], true);
    let (primaries, replicas): (Vec<&Server>, Vec<&Server>) =
        cluster.nodes.iter().partition(|s| role(s) == "master");
    assert_eq!((primaries.len(), replicas.len()), (3, 3));
    assert_reads_on_replicas(&report, &primaries, &replicas);
    // Every connection to a replica said READONLY.
    let readonly: u64 = replicas.iter().map(|s| calls(s, "readonly")).sum();
    assert!(
        readonly >= 3,
        "READONLY on each replica's connections: {readonly}"
    );
}

/// A standalone primary with one replica: found through `INFO replication` (no
/// `--replica`), then named with `--replica`; either way the reads go to it and the truth
/// check says why it cannot judge the primary's counts alone.
#[test]
fn a_standalone_primary_reads_from_the_replica_it_names_or_we_name() {
    let primary = Server::start(Kind::Valkey);
    let replica = Server::with_args(
        Kind::Valkey,
        &["--replicaof", "127.0.0.1", &primary.port.to_string()],
    );
    wait_online(&primary, 1);
    for (i, named) in [false, true].into_iter().enumerate() {
        primary.command(&[b"CONFIG", b"RESETSTAT"]);
        replica.command(&[b"CONFIG", b"RESETSTAT"]);
        let dir = TempDir::new(&format!("standalone-replica-{i}"));
        let mut args = vec![
            "--target".to_string(),
            primary.addr(),
            "--rate".into(),
            "1500".into(),
            "--duration".into(),
            "2s".into(),
            "--ratio".into(),
            "1:10".into(),
            "--read-from".into(),
            "prefer-replicas".into(),
        ];
        if named {
            args.extend(["--replica".into(), replica.addr()]);
        }
        let report = CrestRun::new(&dir).args(&strs(&args)).run(0);
        assert_balanced("standalone replica reads", &report);
        assert_eq!(report["cluster"], false, "a primary and its replica");
        assert_reads_on_replicas(&report, &[&primary], &[&replica]);
        let why = report["server"]["unchecked"].as_str().unwrap_or_default();
        assert!(
            why.contains("reads went to replicas"),
            "{}",
            report["server"]
        );
    }
}

/// Bad values and impossible combinations, each refused before load in one line.
#[test]
fn read_from_refusals_name_the_fix() {
    let lone = Server::start(Kind::Valkey);
    let err = crest_fails(
        &[
            "run",
            "--target",
            &lone.addr(),
            "--rate",
            "100",
            "--duration",
            "1s",
            "--read-from",
            "replicas",
        ],
        "no online replica",
    );
    assert_eq!(
        err.lines().filter(|l| l.contains("--read-from")).count(),
        1,
        "{err}"
    );
    // A named replica that refuses connections is probed like the target, before load.
    crest_fails(
        &[
            "run",
            "--target",
            &lone.addr(),
            "--rate",
            "100",
            "--duration",
            "1s",
            "--read-from",
            "any",
            "--replica",
            "127.0.0.1:1",
        ],
        "replica 127.0.0.1:1: cannot connect",
    );
    assert_eq!(calls(&lone, "get") + calls(&lone, "set"), 0, "no load");
    let cases: &[(&[&str], &str)] = &[
        (
            &["--read-from", "replica"],
            "expected primary, replicas, prefer-replicas or any",
        ),
        (
            &["--read-from", "any", "--replica", "nohost"],
            "expected HOST:PORT",
        ),
        (
            &["--read-from", "any", "--replica", "a:1", "--replica", "a:1"],
            "named twice",
        ),
        (
            &["--read-from", "any", "--cluster", "--replica", "a:1"],
            "names its own replicas",
        ),
        (&["--check-staleness"], "add --read-from replicas"),
        (
            &["--read-from", "any", "--check-staleness", "--ratio", "1:0"],
            "no class both SETs and GETs",
        ),
        (
            &[
                "--read-from",
                "any",
                "--check-staleness",
                "--value-size",
                "8",
            ],
            "--value-size 24 or more",
        ),
    ];
    for (extra, needle) in cases {
        let mut args = vec![
            "run",
            "--target",
            "127.0.0.1:1",
            "--rate",
            "10",
            "--duration",
            "1s",
        ];
        args.extend_from_slice(extra);
        crest_fails(&args, needle);
    }
    // `crest compare` with two primaries: one list of replicas cannot be both's.
    crest_fails(
        &[
            "compare",
            "--target",
            "a=127.0.0.1:1",
            "--target",
            "b=127.0.0.1:2",
            "--rate",
            "10",
            "--duration",
            "1s",
            "--read-from",
            "any",
            "--replica",
            "127.0.0.1:3",
        ],
        "crest compare loads 2 targets",
    );
    crest_fails(
        &[
            "run",
            "--rate",
            "10",
            "--duration",
            "1s",
            "--read-from",
            "any",
        ],
        "the built-in target has no replicas",
    );
    crest_fails(
        &[
            "run",
            "--target",
            "memcache://127.0.0.1:1",
            "--rate",
            "10",
            "--duration",
            "1s",
            "--read-from",
            "any",
        ],
        "memcached has no replicas",
    );
    // `--replica` alone (to follow a promotion) names itself.
    let err = crest_fails(
        &[
            "run",
            "--rate",
            "10",
            "--duration",
            "1s",
            "--replica",
            "127.0.0.1:3",
        ],
        "the built-in target has no replicas",
    );
    assert!(err.contains("--replica"), "{err}");
}

/// A cluster without replicas: `--read-from replicas` names the slots that have none.
#[test]
fn a_cluster_without_replicas_is_refused() {
    let cluster = RedisCluster::start(Kind::Valkey, 3, 0);
    let seed = cluster.nodes[0].addr();
    for (read_from, needle) in [
        ("replicas", "lists no replica for slots"),
        ("any", "lists no replica ("),
    ] {
        crest_fails(
            &[
                "run",
                "--target",
                &seed,
                "--rate",
                "100",
                "--duration",
                "1s",
                "--read-from",
                read_from,
            ],
            needle,
        );
    }
    let stats = cluster.commandstats();
    assert_eq!(stats.get("get"), None, "no load: {stats:?}");
    assert_eq!(stats.get("set"), None, "no load: {stats:?}");
}

/// `--check-staleness` against a replica whose replication stream is held 100 ms (a
/// relay between it and its primary) and against one fed directly: reads from the slowed
/// one are stale, by no more than about the delay; reads from the direct one rarely are,
/// and never by half the delay (a read sent microseconds after a write's acknowledgement can still beat the
/// stream: that is staleness too, and it is rare).
#[test]
fn stale_reads_from_a_slowed_replica_are_counted_and_timed() {
    let primary = Server::start(Kind::Valkey);
    let dir = TempDir::new("staleness");
    let (mut relay, via) = delay_relay(&primary.addr(), "0", "100", dir.path(), "relay");
    let (_, port) = via.rsplit_once(':').unwrap();
    let slowed = Server::with_args(Kind::Valkey, &["--replicaof", "127.0.0.1", port]);
    let direct = Server::with_args(
        Kind::Valkey,
        &["--replicaof", "127.0.0.1", &primary.port.to_string()],
    );
    wait_online(&primary, 2);
    let run = |replica: &Server, tag: &str| {
        let out = TempDir::new(&format!("staleness-{tag}"));
        CrestRun::new(&out)
            .args(&[
                "--target",
                &primary.addr(),
                "--replica",
                &replica.addr(),
                "--read-from",
                "replicas",
                "--check-staleness",
                "--rate",
                "2000",
                "--duration",
                "3s",
                "--ratio",
                "1:1",
                "--keys",
                "200",
            ])
            .run(0)
    };
    let slow = run(&slowed, "slowed");
    assert_balanced("slowed replica", &slow);
    let s = &slow["staleness"];
    eprintln!("slowed: {s}");
    assert!(u(s, "checked") > 1000, "{s}");
    // A key is written every 100 ms on average and the stream is 100 ms late: many reads
    // miss a write.
    assert!(u(s, "stale") * 10 > u(s, "checked"), "{s}");
    let behind = &s["behind_us"];
    assert!(behind["p50"].as_f64().unwrap() > 0.0, "{s}");
    assert!(
        behind["max"].as_f64().unwrap() < 1_000_000.0,
        "about the 100 ms delay, never a second: {s}"
    );
    let fast = run(&direct, "direct");
    assert_balanced("direct replica", &fast);
    let f = &fast["staleness"];
    eprintln!("direct: {f}");
    assert!(u(f, "checked") > 1000, "{f}");
    // Rare, and never near the slowed one's delay (a busy core can still stall the
    // replica for a few ms between a write and a read).
    assert!(u(f, "stale") * 50 < u(f, "checked"), "{f}");
    assert!(
        f["behind_us"]["max"].as_f64().unwrap() < 50_000.0,
        "a direct replica is never 50 ms behind here: {f}"
    );
    let _ = relay.kill();
    let _ = relay.wait();
}
