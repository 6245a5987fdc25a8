//! `crest relay` between a coordinator and real workers: the coordinator reads a relay as
//! one worker whose results are its workers' (checked against the server's own counts),
//! a worker lost under a relay loses the relay and stops its load, a lost coordinator
//! stops the load behind a relay too, and bad flags get one line and exit 2.

use crate::support::*;
use std::time::Duration;

/// Starts `crest relay` for the coordinator on `coordinator` (host:port), waiting for
/// `workers` workers, and those workers dialling it (named `<name>w<i>`, one core each).
pub(crate) fn start_relay(
    dir: &TempDir,
    coordinator: &str,
    name: &str,
    workers: usize,
) -> (Proc, Vec<Proc>) {
    start_relay_with(
        dir,
        &format!("http://{coordinator}"),
        name,
        workers,
        &[],
        None,
    )
}

/// As [`start_relay`], dialling `url` with `relay_args` added; with `tls` (the CA its
/// workers trust) the relay's workers dial it https:// with `--control-ca`.
fn start_relay_with(
    dir: &TempDir,
    url: &str,
    name: &str,
    workers: usize,
    relay_args: &[&str],
    tls: Option<&str>,
) -> (Proc, Vec<Proc>) {
    let listen = format!("127.0.0.1:{}", free_port());
    let mut args = vec![
        "relay",
        "--coordinator",
        url,
        "--listen",
        &listen,
        "--workers",
    ];
    let n = workers.to_string();
    args.extend([n.as_str(), "--name", name]);
    args.extend_from_slice(relay_args);
    let relay = Proc::spawn(&crest_bin(), &args, dir.path(), name);
    let ws = (0..workers)
        .map(|i| {
            let mut args = worker_args(&listen, i);
            // Named after the relay, so their connections can be told apart.
            let n = args.len() - 1;
            args[n] = format!("{name}w{i}");
            if let Some(ca) = tls {
                args[1] = format!("https://{listen}");
                args.extend(["--control-ca".to_string(), ca.to_string()]);
            }
            Proc::spawn(
                &worker_bin(),
                &strs(&args),
                dir.path(),
                &format!("{name}w{i}"),
            )
        })
        .collect();
    (relay, ws)
}

/// A coordinator on a free port expecting `members` (relays and workers) for `run_args`.
fn start_coordinator(
    dir: &TempDir,
    target: &str,
    members: usize,
    run_args: &[&str],
) -> (Proc, String) {
    let listen = format!("127.0.0.1:{}", free_port());
    let mut args = coordinator_args(&listen, members, "30s", target, &dir.path().join("out"));
    args.extend(run_args.iter().map(|a| a.to_string()));
    (
        Proc::spawn(&crest_bin(), &strs(&args), dir.path(), "crest"),
        listen,
    )
}

/// A relay with two workers beside one worker dialling the coordinator directly: the
/// report agrees with the server's counts, lists two members, the relay with its workers'
/// two shards and two thirds of the requests, and its histograms add up with the other's
/// to the run's.
#[test]
fn a_relay_is_one_worker_whose_results_are_its_workers() {
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("relay");
    let (rate, secs) = (3000.0, 4.0);
    let (mut coord, listen) = start_coordinator(
        &dir,
        &server.addr(),
        2,
        &[
            "--rate",
            "3000",
            "--duration",
            "4s",
            "--ratio",
            "1:10",
            "--keys",
            "1000",
            "--value-size",
            "1k",
            "--connections",
            "30",
        ],
    );
    let _relay = start_relay(&dir, &listen, "ra", 2);
    let direct = Proc::spawn(
        &worker_bin(),
        &strs(&worker_args(&listen, 0)),
        dir.path(),
        "w0",
    );
    let report = finish(&dir, &mut coord, Duration::from_secs(60));
    drop(direct);
    check_against_server(&report, &server.commandstats(), rate, secs);
    let workers = report["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 2, "{workers:?}");
    let relay = workers
        .iter()
        .find(|w| w["name"] == "ra")
        .expect("the relay is a member");
    let alone = workers
        .iter()
        .find(|w| w["name"] == "w0")
        .expect("the direct worker");
    assert_eq!(u(relay, "shards"), 2, "{relay}");
    assert_eq!(relay["lost"], false);
    // Three shards in all, the relay's two carrying two thirds.
    let (a, b) = (u(relay, "scheduled"), u(alone, "scheduled"));
    assert_eq!(a + b, (rate * secs) as u64);
    assert!((a as f64 - 2.0 * b as f64).abs() <= 2.0, "split {a} vs {b}");
    let mut sum = crest_model::hist::new_hist();
    for w in workers {
        sum.add(histogram(&w["histograms"]["latency"])).unwrap();
    }
    assert_eq!(sum, histogram(&report["totals"]["histograms"]["latency"]));
}

/// A worker under the relay killed mid-run: the relay aborts its other worker and leaves
/// the coordinator's session, so the coordinator marks the relay lost (exit 3, the
/// intervals it had kept) and no load goes on behind it.
#[test]
fn a_worker_lost_under_a_relay_loses_the_relay_and_stops_its_load() {
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("relay-lost");
    let (mut coord, listen) = start_coordinator(
        &dir,
        &server.addr(),
        1,
        &["--rate", "2000", "--duration", "20s", "--connections", "10"],
    );
    let (_relay, mut ws) = start_relay(&dir, &listen, "rb", 2);
    wait_for_calls(3000, || total_calls(&server));
    ws[1].kill();
    let report = finish_with(&dir, &mut coord, Duration::from_secs(60), 3);
    let members = report["workers"].as_array().unwrap();
    assert_eq!(members.len(), 1);
    assert_eq!(members[0]["lost"], true, "{}", members[0]);
    assert!(
        u(&members[0], "completed") > 0,
        "its intervals before the loss are kept"
    );
    std::thread::sleep(Duration::from_millis(1_500));
    let a = total_calls(&server);
    std::thread::sleep(Duration::from_secs(2));
    let b = total_calls(&server);
    assert_eq!(a, b, "the relay's other worker went on sending");
    let log = read_log(dir.path(), "rb", "stderr");
    assert!(
        log.contains("rbw1") && log.contains("left mid-run"),
        "{log}"
    );
}

/// The coordinator killed mid-run: the relay's dead man's switch aborts its workers' run,
/// so the server's counter stops within 2 s, as for workers that dial it directly.
#[test]
fn a_coordinator_lost_behind_a_relay_stops_the_load_within_two_seconds() {
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("relay-coordinator");
    let (mut coord, listen) = start_coordinator(
        &dir,
        &server.addr(),
        1,
        &["--rate", "3000", "--duration", "30s", "--connections", "10"],
    );
    let (mut relay, _ws) = start_relay(&dir, &listen, "rc", 2);
    wait_for_calls(3000, || total_calls(&server));
    coord.kill();
    std::thread::sleep(Duration::from_secs(2));
    let at_2s = total_calls(&server);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        at_2s,
        total_calls(&server),
        "load went on after the coordinator died"
    );
    assert!(
        relay.child.try_wait().unwrap().is_none(),
        "the relay goes on, dialling again"
    );
}

/// TLS on both sides of a relay: the coordinator serves TLS and requires client
/// certificates; the relay dials it https:// with the test CA and a client certificate, and
/// serves its own workers TLS (they dial https:// with the CA). The run's counts agree with
/// the server's, and the relay is one member with its two workers' shards.
#[test]
fn a_relay_speaks_tls_to_the_coordinator_and_to_its_workers() {
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("relay-tls");
    let pki = Pki::new(dir.path());
    let path = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let (ca, cert, key) = (path(&pki.ca), path(&pki.server_cert), path(&pki.server_key));
    let (ccert, ckey) = (path(&pki.client_cert), path(&pki.client_key));
    let (rate, secs) = (2000.0, 3.0);
    let (mut coord, listen) = start_coordinator(
        &dir,
        &server.addr(),
        1,
        &[
            "--rate",
            "2000",
            "--duration",
            "3s",
            "--ratio",
            "1:10",
            "--control-cert",
            &cert,
            "--control-key",
            &key,
            "--control-client-ca",
            &ca,
        ],
    );
    let (_relay, _workers) = start_relay_with(
        &dir,
        &format!("https://{listen}"),
        "rt",
        2,
        &[
            "--control-ca",
            &ca,
            "--control-client-cert",
            &ccert,
            "--control-client-key",
            &ckey,
            "--control-cert",
            &cert,
            "--control-key",
            &key,
        ],
        Some(&ca),
    );
    let report = finish(&dir, &mut coord, Duration::from_secs(60));
    check_against_server(&report, &server.commandstats(), rate, secs);
    let workers = report["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 1, "{workers:?}");
    assert_eq!(workers[0]["name"], "rt");
    assert_eq!(u(&workers[0], "shards"), 2, "{}", workers[0]);
    assert_eq!(u(&workers[0], "scheduled"), (rate * secs) as u64);
    assert!(read_log(dir.path(), "crest", "stderr").contains("(TLS)"));
    assert!(read_log(dir.path(), "rt", "stderr").contains("(TLS)"));
}

/// A relay without a client certificate, to a coordinator that requires one: refused
/// with one line naming what to give, exit 1 (dialling again cannot help).
#[test]
fn a_relay_without_the_client_certificate_mutual_tls_asks_for_is_told() {
    let dir = TempDir::new("relay-mtls");
    let pki = Pki::new(dir.path());
    let path = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let (ca, cert, key) = (path(&pki.ca), path(&pki.server_cert), path(&pki.server_key));
    let (_coord, listen) = start_coordinator(
        &dir,
        "127.0.0.1:1",
        1,
        &[
            "--control-cert",
            &cert,
            "--control-key",
            &key,
            "--control-client-ca",
            &ca,
        ],
    );
    let (mut relay, _workers) = start_relay_with(
        &dir,
        &format!("https://{listen}"),
        "rm",
        1,
        &["--control-ca", &ca],
        None,
    );
    let code = relay.wait(Duration::from_secs(30));
    let err = read_log(dir.path(), "rm", "stderr");
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("the coordinator refused this relay")
            && err.contains("give --control-client-cert and --control-client-key"),
        "{err}"
    );
}

/// Bad flags: one line naming what is wrong and what would be right, exit 2.
#[test]
fn bad_relay_flags_get_one_line_and_exit_2() {
    let listen = format!("127.0.0.1:{}", free_port());
    crest_fails(
        &[
            "relay",
            "--coordinator",
            "ftp://127.0.0.1:1",
            "--workers",
            "1",
            "--listen",
            &listen,
        ],
        "expected a URL like https://host:7600 or http://host:7600",
    );
    crest_fails(
        &[
            "relay",
            "--coordinator",
            "http://127.0.0.1:1",
            "--control-ca",
            "/nonexistent/ca.pem",
            "--workers",
            "1",
            "--listen",
            &listen,
        ],
        "--control-ca /nonexistent/ca.pem: cannot read",
    );
    crest_fails(
        &[
            "relay",
            "--coordinator",
            "http://127.0.0.1:1",
            "--control-cert",
            "/nonexistent/cert.pem",
            "--workers",
            "1",
            "--listen",
            &listen,
        ],
        "--control-cert /nonexistent/cert.pem",
    );
    crest_fails(
        &[
            "relay",
            "--coordinator",
            "http://127.0.0.1:1",
            "--workers",
            "0",
            "--listen",
            &listen,
        ],
        "--workers",
    );
    crest_fails(
        &[
            "relay",
            "--coordinator",
            "http://10.9.8.7:7600",
            "--workers",
            "1",
            "--listen",
            &listen,
            "--token",
            "s3cret",
        ],
        "--insecure",
    );
}

/// A runtime rate change (`PUT /rate`) goes through the relay to both its workers: the
/// relay reports one switch for both (their earliest and latest instants, at the change's
/// instant), and the server's count follows the new rate.
#[test]
fn a_rate_change_reaches_every_worker_behind_a_relay() {
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("relay-steer");
    let admin = free_port();
    let (mut coord, listen) = start_coordinator(
        &dir,
        &server.addr(),
        1,
        &[
            "--rate",
            "2000",
            "--duration",
            "8s",
            "--connections",
            "10",
            "--admin",
            &format!("127.0.0.1:{admin}"),
        ],
    );
    let _relay = start_relay(&dir, &listen, "rd", 2);
    crate::steer::running_for(admin, 3.0);
    let (code, body) = crate::steer::http(admin, "PUT", "/rate", "4000", None);
    assert_eq!(code, 200, "{body}");
    let report = finish(&dir, &mut coord, Duration::from_secs(60));
    let changes = report["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{changes:?}");
    let at = f(&changes[0], "at_s");
    let members = changes[0]["workers"].as_array().unwrap();
    assert_eq!(
        members.len(),
        1,
        "the relay reports for its workers: {members:?}"
    );
    for k in ["first_s", "last_s"] {
        assert!(
            (f(&members[0], k) - at).abs() < 1e-3,
            "{k} of {} vs the instant {at}",
            members[0]
        );
    }
    let asked = 2000.0 * at + 4000.0 * (8.0 - at);
    let total = total_calls(&server) as f64;
    assert!(
        (total - asked).abs() < 0.01 * asked,
        "the server saw {total} requests, the run asked {asked:.0}"
    );
    assert_eq!(u(&report["totals"], "scheduled") as f64, total);
}

/// Checkpoints through a relay (the sorted-set study): its two workers each stop at their
/// share of every checkpoint, the relay tells the coordinator once both have, and the
/// probe at each reads exactly the members written so far.
#[test]
fn checkpoints_hold_every_worker_behind_a_relay() {
    let server = Server::start(Kind::Valkey);
    let dir = TempDir::new("relay-checkpoints");
    let profile = examples_dir().join("zset-growth.toml");
    let (mut coord, listen) = start_coordinator(
        &dir,
        &server.addr(),
        1,
        &[
            "--profile",
            profile.to_str().unwrap(),
            "--batch",
            "1000",
            "--requests",
            "400",
            "--checkpoint-every",
            "100",
            "--probe",
            "ZCARD growth0",
        ],
    );
    let _relay = start_relay(&dir, &listen, "re", 2);
    let report = finish(&dir, &mut coord, Duration::from_secs(60));
    let cps = report["checkpoints"].as_array().unwrap();
    assert_eq!(cps.len(), 4, "{cps:?}");
    for (k, c) in cps.iter().enumerate() {
        assert_eq!(u(c, "requests"), (k as u64 + 1) * 100, "{c}");
        assert_eq!(c["probe"], ((k as u64 + 1) * 100_000).to_string(), "{c}");
    }
    assert_eq!(u(&report["server"]["total"], "ops"), 400);
    assert_eq!(
        report["checks"]["server_agrees"], true,
        "{}",
        report["server"]["agreement"]
    );
}

/// A relay pointed at its own `--listen` would wait on itself forever: one line, exit 2.
#[test]
fn a_relay_pointed_at_itself_is_refused() {
    let listen = format!("127.0.0.1:{}", free_port());
    crest_fails(
        &[
            "relay",
            "--listen",
            &listen,
            "--coordinator",
            &format!("http://{listen}"),
            "--workers",
            "1",
            "--insecure",
        ],
        &format!("--coordinator http://{listen}: is this relay's own --listen {listen}"),
    );
}
