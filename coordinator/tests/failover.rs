//! Failovers as users see them (issue #29, item 3), against a real Valkey cluster with a
//! replica per primary: a planned `CLUSTER FAILOVER` (no outage, only redirects), then
//! `kill -9` of a primary (one outage for its slots, as long as the failover the test
//! watches from outside with `CLUSTER NODES`, the rate back to target after it).

use crate::support::*;
use crest_resp::Frame;
use serde_json::Value;
use std::time::{Duration, Instant};

fn text(f: Frame) -> String {
    match f {
        Frame::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("{other:?}"),
    }
}

/// `CLUSTER NODES` of `s`, one line per node split in words.
fn cluster_nodes(s: &Server) -> Vec<Vec<String>> {
    text(s.command(&[b"CLUSTER", b"NODES"]))
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// The line of the node listening on `port` (`host:port@bus` is the second word).
fn line_of(lines: &[Vec<String>], port: u16) -> Vec<String> {
    lines
        .iter()
        .find(|w| {
            w[1].split('@')
                .next()
                .unwrap()
                .ends_with(&format!(":{port}"))
        })
        .cloned()
        .unwrap_or_else(|| panic!("no node on port {port}: {lines:?}"))
}

fn is_master(line: &[String]) -> bool {
    line[2].split(',').any(|f| f == "master") && !line[2].contains("fail")
}

/// Index of the node whose primary is node `p` (by its id in `CLUSTER NODES`).
fn replica_of(cluster: &RedisCluster, p: usize) -> usize {
    let id = cluster.id(p);
    let lines = cluster_nodes(&cluster.nodes[0]);
    (0..cluster.nodes.len())
        .find(|&i| line_of(&lines, cluster.nodes[i].port)[3] == id)
        .unwrap_or_else(|| panic!("no replica of node {p}: {lines:?}"))
}

/// Polls (every 10 ms, at most 30 s) until `watcher`'s `CLUSTER NODES` lists the node on
/// `port` as a working primary.
fn wait_master(watcher: &Server, port: u16) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if is_master(&line_of(&cluster_nodes(watcher), port)) {
            return Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "no failover to :{port} within 30 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The planned failover moves slots without an outage; the killed primary is one
/// outage, for exactly its slots, within 20% of the failover's length seen from outside,
/// and the rate comes back.
#[test]
fn a_killed_primary_is_one_outage_as_long_as_its_failover() {
    let mut cluster = RedisCluster::start(Kind::Valkey, 3, 1);
    // Only the dead primary's slots go down: the others keep answering.
    for n in &cluster.nodes {
        assert_eq!(
            n.command(&[b"CONFIG", b"SET", b"cluster-require-full-coverage", b"no"]),
            Frame::Simple(b"OK".to_vec())
        );
    }
    let dir = TempDir::new("failover-outage");
    let mut run = CrestRun::new(&dir)
        .args(&[
            "--target",
            &cluster.nodes[0].addr(),
            "--cluster",
            "--rate",
            "2000",
            "--duration",
            "12s",
            "--ratio",
            "1:10",
            "--keys",
            "5000",
            "--timeout",
            "1s",
        ])
        .spawn();
    wait_for_calls(2000, || cluster.commandstats().values().sum());
    // Planned: a replica of a primary other than the seed takes over.
    let planned_primary = (1..cluster.nodes.len())
        .find(|&i| {
            is_master(&line_of(
                &cluster_nodes(&cluster.nodes[0]),
                cluster.nodes[i].port,
            ))
        })
        .expect("a primary besides the seed");
    let planned = replica_of(&cluster, planned_primary);
    assert_eq!(
        cluster.nodes[planned].command(&[b"CLUSTER", b"FAILOVER"]),
        Frame::Simple(b"OK".to_vec())
    );
    wait_master(&cluster.nodes[0], cluster.nodes[planned].port);
    std::thread::sleep(Duration::from_millis(1500));
    // Unplanned: kill -9 a primary that is neither the seed nor the new one.
    let lines = cluster_nodes(&cluster.nodes[0]);
    let victim = (1..cluster.nodes.len())
        .find(|&i| i != planned && is_master(&line_of(&lines, cluster.nodes[i].port)))
        .expect("a third primary");
    let victim_line = line_of(&lines, cluster.nodes[victim].port);
    let victim_slots = victim_line[8..].join(",");
    let victim_addr = cluster.nodes[victim].addr();
    let heir = replica_of(&cluster, victim);
    let killed = Instant::now();
    cluster.nodes[victim].kill();
    let promoted = wait_master(&cluster.nodes[0], cluster.nodes[heir].port);
    let outside_ms = (promoted - killed).as_secs_f64() * 1e3;
    assert_eq!(run.wait(Duration::from_secs(90)), 0);
    let report = read_report(&dir.path().join("out"));
    assert_balanced("failover", &report);
    let outages = report["outages"].as_array().unwrap();
    eprintln!("outside: {outside_ms:.0} ms; outages: {outages:#?}");
    let theirs: Vec<&Value> = outages
        .iter()
        .filter(|o| o["node"] == victim_addr.as_str())
        .collect();
    assert_eq!(theirs.len(), 1, "one outage of {victim_addr}: {outages:?}");
    let o = theirs[0];
    assert_eq!(o["role"], "primary", "{o}");
    assert_eq!(o["slots"], victim_slots.as_str(), "{o}");
    let len = o["length_ms"].as_f64().expect("it ended");
    assert!(
        (len - outside_ms).abs() <= 0.2 * outside_ms,
        "outage {len:.0} ms, the failover seen from outside {outside_ms:.0} ms: {o}"
    );
    assert!(u(o, "failed") > 0, "{o}");
    // The whole target's outage holds this one (its spans are read at 0.1 ms).
    assert!(
        report["outage_ms"].as_f64().unwrap() >= len - 0.2,
        "{}",
        report["outage_ms"]
    );
    let rediscovered = o["rediscovered_ms"].as_f64().expect("the table moved");
    assert!(rediscovered <= len, "{o}");
    let recovered = o["recovered_s"].as_f64().expect("the rate came back");
    assert!(recovered >= o["end_s"].as_f64().unwrap(), "{o}");
    // The planned failover lost nothing: at most a blip on the other nodes.
    for x in outages.iter().filter(|x| x["node"] != victim_addr.as_str()) {
        assert!(x["length_ms"].as_f64().unwrap_or(f64::MAX) < 500.0, "{x}");
    }
    // The timeline counts the node out in the intervals the outage touched, in
    // report.json and in timeline.csv (rewritten with the column at the end).
    let out: Vec<u64> = report["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| u(p, "nodes_out"))
        .collect();
    assert!(out.contains(&1) && out[0] == 0, "{out:?}");
    let csv = std::fs::read_to_string(dir.path().join("out/timeline.csv")).unwrap();
    let column: Vec<u64> = csv
        .lines()
        .skip(1)
        .map(|l| l.rsplit(',').next().unwrap().parse().unwrap())
        .collect();
    assert!(csv.lines().next().unwrap().ends_with(",nodes_out"));
    assert_eq!(column, out, "{csv}");
    let html = std::fs::read_to_string(dir.path().join("out/report.html")).unwrap();
    assert!(html.contains("<h2>Outages</h2>") && html.contains(&victim_addr));
    let moved = report["totals"]["redirects"]["moved"].as_u64().unwrap_or(0);
    assert!(
        moved > 0,
        "the planned failover's MOVED: {}",
        report["totals"]
    );
    let stdout = read_log(dir.path(), "crest", "stdout");
    assert!(
        stdout.contains(&format!("outage: primary {victim_addr} lost at")),
        "{stdout}"
    );
}

/// A standalone primary with a replica named by `--replica`: the primary is killed, the
/// test promotes the replica (`REPLICAOF NO ONE`) 2.5 s later, and the writes follow
/// it. One outage of the primary, as long as kill-to-promotion within 20%, and the SETs
/// the new primary counted are the ones the report says it answered.
#[test]
fn a_standalone_primary_killed_and_its_replica_promoted_is_one_outage() {
    let mut primary = Server::start(Kind::Valkey);
    let replica = Server::with_args(
        Kind::Valkey,
        &["--replicaof", "127.0.0.1", &primary.port.to_string()],
    );
    wait_online(&primary, 1);
    let dir = TempDir::new("standalone-promotion");
    let primary_addr = primary.addr();
    let mut run = CrestRun::new(&dir)
        .args(&[
            "--target",
            &primary_addr,
            "--replica",
            &replica.addr(),
            "--rate",
            "2000",
            "--duration",
            "10s",
            "--ratio",
            "1:1",
            "--keys",
            "5000",
            "--timeout",
            "1s",
        ])
        .spawn();
    wait_for_calls(2000, || primary.commandstats().values().sum());
    replica.command(&[b"CONFIG", b"RESETSTAT"]);
    let killed = Instant::now();
    primary.kill();
    // Long enough that the client's own lag (a table read every 100 ms, a connect) is
    // well inside the 20%, even on a busy core.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        replica.command(&[b"REPLICAOF", b"NO", b"ONE"]),
        Frame::Simple(b"OK".to_vec())
    );
    let outside_ms = killed.elapsed().as_secs_f64() * 1e3;
    assert_eq!(run.wait(Duration::from_secs(60)), 0);
    let report = read_report(&dir.path().join("out"));
    assert_balanced("promotion", &report);
    let outages = report["outages"].as_array().unwrap();
    eprintln!("outside: {outside_ms:.0} ms; outages: {outages:#?}");
    assert_eq!(outages.len(), 1, "{outages:?}");
    let o = &outages[0];
    assert_eq!(
        (o["node"].as_str(), o["role"].as_str()),
        (Some(primary_addr.as_str()), Some("primary"))
    );
    assert_eq!(o["slots"], "", "a standalone primary names no slots");
    let len = o["length_ms"].as_f64().expect("it ended");
    assert!(
        (len - outside_ms).abs() <= 0.2 * outside_ms,
        "outage {len:.0} ms, kill to promotion {outside_ms:.0} ms: {o}"
    );
    assert!(u(o, "failed") > 0, "{o}");
    assert!(o["recovered_s"].is_f64(), "the rate came back: {o}");
    // Every SET after the promotion went to the replica, and the report says so.
    let nodes = report["nodes"].as_array().unwrap();
    let row = nodes
        .iter()
        .find(|n| n["addr"] == replica.addr().as_str())
        .unwrap_or_else(|| panic!("{nodes:?}"));
    let sets = replica.commandstats().get("set").copied().unwrap_or(0);
    let gets = replica.commandstats().get("get").copied().unwrap_or(0);
    assert!(sets > 1000, "writes followed the promotion: {sets}");
    // The server ran what the report says it answered, and perhaps some of what timed
    // out on it (sent, answered too late: requests moved there that waited for its
    // connections).
    let (done, failed) = (u(row, "completed"), u(row, "errors"));
    assert!(
        done <= sets + gets && sets + gets <= done + failed,
        "server {sets} SET + {gets} GET; report {row}"
    );
    assert_eq!(report["cluster"], false);
}
